"""Cortex-M4 on the emulated mps2-an386 board (qemu-system-arm, semihosting).

Every int8 model in ../shared/models is packaged for the board (C kernels;
LLVM kernels for one model), run under QEMU on its saved input and compared
with tflite-micro bit for bit; one model on the Cortex-M7 board mps2-an500
and one on the Cortex-M55 board mps3-an547, one float model against LiteRT. One package (mlperf_kws_dscnn_int8) is shared
by the footprint checks (aot inspect, where the link put the weights and the
arena), the runner's error paths and a firmware build from the package's
Makefile with the shipped start-up code and linker script.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile

from aot.api import package, verify
from aot.cli import main as cli_main
from aot.deploy import run_package
from aot.deploy.qemu_system import qemu_command
from aot.errors import AotError
from aot.targets import get_board
from support import MODELS, shared_models

BOARD = "mps2-an386"
INT8 = [p for p in shared_models("*.tflite") if "_int8" in p.stem]
FLASH = (0x0, 4 << 20)          # the board's linker script (runtime_c/cortex_m/)
RAM = (0x20000000, 4 << 20)
KWS = MODELS / "mlperf_kws_dscnn_int8.tflite"


def check_verified(out: dict) -> None:
    assert out["reference"] == "tflite-micro", out
    assert out["ok"], out
    assert all(r["max_abs_err"] == 0 for r in out["outputs"]), out


@pytest.mark.parametrize("model", INT8, ids=[p.stem for p in INT8])
def test_int8_models_are_bit_exact_on_mps2(model, record_property):
    out = verify(model, board=BOARD, codegen="c")
    check_verified(out)
    p = out["package"]
    record_property("summary", f"{BOARD} {model.stem}: arena {p['arena_bytes']} B, "
                               f"params {p['params_bytes']} B, built in {p['compile_seconds']} s")


def test_weights_stay_packed_where_the_widened_do_not_fit(record_property):
    """The M4's kernels widen int8 weights to twice their flash; with
    448 KiB of flash for the weights (a nucleo-f446re leaves them that of
    its 512 KiB) vww's widened params (about 490 KB) do not fit, so its
    weights stay packed (about 290 KB), still bit-exact."""
    small = replace(get_board(BOARD), flash_bytes=448 << 10)
    out = verify(MODELS / "mlperf_vww_mbv1_int8.tflite", board=small, codegen="c")
    check_verified(out)
    params = out["package"]["params_bytes"]
    record_property("summary", f"vww on 448 KiB of flash: params {params} B")
    assert params < 300_000, params


def test_llvm_kernels_link_and_match_on_mps2():
    """emit_object for thumbv7em-unknown-none-eabihf / cortex-m4 / FPv4 links
    with arm-none-eabi-gcc and newlib, and computes the same."""
    check_verified(verify(MODELS / "tflm_micro_speech_int8.tflite", board=BOARD, codegen="llvm"))


@pytest.mark.parametrize("board,model,reference", [
    ("mps2-an500", "mlperf_kws_dscnn_int8.tflite", "tflite-micro"),   # Cortex-M7
    ("mps3-an547", "tflm_micro_speech_int8.tflite", "tflite-micro"),  # Cortex-M55
    (BOARD, "mlperf_ad_fcae_f32.tflite", "litert"),                   # float on FPv4-SP
])
def test_another_core_and_a_float_model(board, model, reference):
    out = verify(MODELS / model, board=board)
    assert out["reference"] == reference and out["ok"], out


def test_cortex_m_schedules_are_scalar():
    from aot.lower.schedule.tile_sizes import tile
    target = get_board(BOARD).target
    assert target.vector_bits == 0 and target.lanes(8) == target.lanes(32) == 1
    assert tile(target, "int8").lanes == tile(target, "float32", pixels=True).lanes == 1


# ------------------------------------------------------------ one shared package

@pytest.fixture(scope="module")
def kws(tmp_path_factory):
    return package(KWS, board=BOARD, out_dir=tmp_path_factory.mktemp("m4") / "kws")


def test_inspect_separates_code_and_weights(kws, capsys):
    assert cli_main(["inspect", str(kws.path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    mem = out["memory"]
    assert mem["weight_bytes"] == out["params_bytes"] == kws.params_bytes > 0
    assert 1000 < mem["code_bytes"] < 100_000       # the kernels, Thumb-2
    assert mem["flash_bytes"] >= mem["code_bytes"] + mem["weight_bytes"]
    assert mem["arena_bytes"] == kws.arena_bytes
    assert mem["ram_bytes"] == mem["arena_bytes"] + mem["state_bytes"] + mem["other_ram_bytes"]
    # Bare-metal code only: no unwind tables, no libc in the library.
    assert out["footprint"]["unwind"] == 0


def section_or_symbol(elf: ELFFile, section: str = "", symbol: str = "") -> tuple[int, int]:
    if section:
        s = elf.get_section_by_name(section)
        return s["sh_addr"], s["sh_size"]
    (sym,) = elf.get_section_by_name(".symtab").get_symbol_by_name(symbol)
    return sym["st_value"], sym["st_size"]


def inside(region: tuple[int, int], addr_size: tuple[int, int]) -> bool:
    return region[0] <= addr_size[0] and sum(addr_size) <= sum(region)


def test_weights_link_into_flash_and_the_arena_into_ram(kws):
    with open(kws.path / "bench" / "bench", "rb") as f:
        elf = ELFFile(f)
        assert elf["e_machine"] == "EM_ARM"
        weights = section_or_symbol(elf, section=".rodata.aot")
        arena = section_or_symbol(elf, symbol=f"{kws.name}_arena")
        assert weights[1] >= kws.params_bytes and inside(FLASH, weights)
        assert arena[1] == kws.arena_bytes and inside(RAM, arena)
        assert elf.get_section_by_name(".text")["sh_addr"] == 0    # the vector table at 0


def test_runs_are_deterministic_and_report_timings(kws):
    board = get_board(BOARD)
    x = np.load(MODELS / "mlperf_kws_dscnn_int8.input.npy")
    a = run_package(kws.path, board, [x], warmup=1, runs=2)
    b = run_package(kws.path, board, [x], warmup=0, runs=1)
    np.testing.assert_array_equal(a.outputs[0], b.outputs[0])
    assert len(a.times_us) == 2 and all(t > 0 for t in a.times_us)   # SysTick ticks
    assert a.report["arena_bytes"] == kws.arena_bytes


def test_the_harness_exit_code_and_a_timeout_are_clear_errors(kws, tmp_path):
    board = get_board(BOARD)
    shutil.copyfile(kws.path / "bench" / "bench", tmp_path / "bench")
    # Too few arguments: main returns 2, QEMU exits with it, usage on stderr.
    r = subprocess.run(qemu_command(board, ["0", "1"]), cwd=tmp_path, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "usage" in r.stderr, (r.returncode, r.stderr)
    slow = replace(board, options={**board.options, "timeout_s": 0.01})
    x = np.load(MODELS / "mlperf_kws_dscnn_int8.input.npy")
    with pytest.raises(AotError, match="did not finish within 0.01 s"):
        run_package(kws.path, slow, [x])


# ------------------------------------------------------------ board limits

def small_board(tmp_path: Path, monkeypatch, flash: int, ram: int) -> str:
    boards = tmp_path / "boards"
    boards.mkdir(exist_ok=True)
    text = (Path(__file__).resolve().parents[2] / "boards" / f"{BOARD}.toml").read_text()
    text = text.replace(f'name = "{BOARD}"', 'name = "tiny-m4"')
    text = text.replace("flash_bytes = 4194304", f"flash_bytes = {flash}")
    text = text.replace("ram_bytes = 4194304", f"ram_bytes = {ram}")
    (boards / "tiny-m4.toml").write_text(text)
    monkeypatch.setenv("AOT_BOARDS_DIR", str(boards))
    assert get_board("tiny-m4").flash_bytes == flash and get_board("tiny-m4").ram_bytes == ram
    return "tiny-m4"


@pytest.mark.parametrize("flash,ram,message", [
    (16_384, 4 << 20, "do not fit the flash of board 'tiny-m4' (16384 bytes)"),
    (4 << 20, 8_192, "do not fit the RAM of board 'tiny-m4' (8192 bytes)"),
])
def test_a_model_too_big_for_the_board_is_refused(tmp_path, monkeypatch, capsys, flash, ram,
                                                  message):
    board = small_board(tmp_path, monkeypatch, flash, ram)
    out = tmp_path / "pkg"
    assert cli_main(["package", str(KWS), "--board", board, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not out.exists()


# ------------------------------------------------------------ firmware build

FIRMWARE = r"""
#include <stdio.h>
#include "NAME.h"

static const int8_t input[NAMEU_INPUT_X_SIZE] = { VALUES };
static int8_t output[NAMEU_OUTPUT_Y_SIZE];

int main(void) {
    struct NAME_inputs in;
    struct NAME_outputs out;
    int i;
    in.X = input;
    out.Y = output;
    if (NAME_run(&in, &out) != AOT_OK) {
        return 3;
    }
    for (i = 0; i < NAMEU_OUTPUT_Y_SIZE; i++) {
        printf("%d\n", output[i]);
    }
    return 0;
}
"""


def test_firmware_from_the_package_makefile_runs_on_the_board(kws, tmp_path):
    """A user's firmware: the library rebuilt with the package's Makefile (its
    defaults: the target's compiler and flags), linked with the shipped
    start-up code and linker script, run under QEMU: the outputs are the
    harness's."""
    pkg = tmp_path / "pkg"
    shutil.copytree(kws.path, pkg)
    subprocess.run(["make", "-s", "-C", str(pkg)], check=True, capture_output=True, timeout=300)
    meta = kws.metadata
    x = np.load(MODELS / "mlperf_kws_dscnn_int8.input.npy")
    src = (FIRMWARE.replace("NAMEU", kws.name.upper()).replace("NAME", kws.name)
           .replace("INPUT_X", f"INPUT_{meta['inputs'][0]['c_name'].upper()}")
           .replace("OUTPUT_Y", f"OUTPUT_{meta['outputs'][0]['c_name'].upper()}")
           .replace("in.X", f"in.{meta['inputs'][0]['c_name']}")
           .replace("out.Y", f"out.{meta['outputs'][0]['c_name']}")
           .replace("VALUES", ", ".join(str(int(v)) for v in x.reshape(-1))))
    (tmp_path / "main.c").write_text(src)
    target = get_board(BOARD).target
    fw = get_board(BOARD).firmware
    subprocess.run([target.cc, *target.cflags, "-std=c99", "-Ipkg/include", "-Ipkg/runtime_c",
                    "-Wall", "-Wextra", "-Werror", "main.c",
                    *[f"pkg/{s}" for s in fw["sources"]], f"pkg/build/lib{kws.name}.a",
                    "-T", f"pkg/{fw['linker_script']}", *fw["ldflags"], *target.ldflags,
                    "-lm", "-o", "bench"], cwd=tmp_path, check=True, timeout=300)
    r = subprocess.run(qemu_command(get_board(BOARD), []), cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = np.array([int(v) for v in r.stdout.split()], np.int8)
    want = run_package(kws.path, get_board(BOARD), [x]).outputs[0]
    np.testing.assert_array_equal(got, want.reshape(-1))


def test_a_fault_ends_the_program_rather_than_hang(kws, tmp_path):
    """An undefined instruction escalates to HardFault: the start-up code's
    handler exits with 135, which the transport names."""
    from aot.deploy.host import failure
    from aot.deploy.qemu_system import EXIT_CODES
    board = get_board(BOARD)
    (tmp_path / "main.c").write_text('int main(void) { __asm__ volatile("udf #0"); return 0; }\n')
    fw = board.firmware
    subprocess.run([board.target.cc, *board.target.cflags, f"-I{kws.path}/runtime_c", "main.c",
                    *[str(kws.path / s) for s in fw["sources"]],
                    "-T", str(kws.path / fw["linker_script"]), *fw["ldflags"], "-o", "bench"],
                   cwd=tmp_path, check=True, timeout=120)
    r = subprocess.run(qemu_command(board, []), cwd=tmp_path, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 135
    assert failure(r.returncode, r.stderr, " under qemu-system", EXIT_CODES).startswith(
        "the harness stopped on a fault (HardFault, BusFault, ...) under qemu-system (exit 135)")

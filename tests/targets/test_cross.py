"""Cross targets and the qemu-user boards: packages built by clang (codegen
c) or LLVM objects (codegen llvm) for aarch64, armv7 hard-float NEON and
riscv64 Linux, run as static harnesses under qemu-user, checked against the
reference runtimes exactly as `aot verify` checks them.

Which (model, board, codegen) cells run here. The full matrix is every
shared model x 3 boards x 2 code generators = 108 packages; compiling them
(clang for codegen c, LLVM's -O3 pipeline for codegen llvm) costs about
160 CPU-seconds, i.e. 6 minutes wall on this 2-core machine when it is
loaded: over this file's budget (3-4 min). scripts/verify_matrix.py runs the
full matrix (the table is in its output); this file runs, for every model:

  * codegen c on qemu-aarch64 (the Raspberry Pi 4 CPU, the board people use),
  * codegen llvm on qemu-armv7 (LLVM objects with the four-part hard-float
    triple: the ABI most easily got wrong),
  * one more cell rotating, by the model's index, over the four other
    (board, codegen) pairs, so each pair still sees 4-5 different models:
    every board runs both code generators on every kind of model (float,
    int8, ONNX, LSTM) somewhere in the file.

That is 54 packages, about half the matrix. Per model the graph is loaded
and optimized once, its input read once and the reference runtime run once
(scripts/verify_matrix.prepare); each cell then does what aot.api.verify
does after that point. Integer outputs must match tflite-micro bit for bit,
float ones the reference within rtol = atol = 1e-4 (aot.check.reference).
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile

from aot.targets import get_board, get_target
from support import MODELS, REPO, shared_models

# The largest models run kernels the others run on smaller tensors
# (ultraface's convolutions are resnet8-f32's, person detection's and the
# mobilenets' are kws's and resnet8's); the host verifies them all with
# both code generators.
LARGE = {"onnx_ultraface_rfb320.onnx", "tflm_person_detect_int8.tflite",
         "mlperf_vww_mbv1_f32.tflite"}
SHARED = [p for p in shared_models() if p.name not in LARGE]
FULL = ("qemu-aarch64", "c"), ("qemu-armv7", "llvm")
ROTATING = (("qemu-aarch64", "llvm"), ("qemu-armv7", "c"), ("qemu-riscv64", "c"),
            ("qemu-riscv64", "llvm"))
# The harness and the library for each board are this ISA (ELF e_machine).
MACHINES = {"qemu-aarch64": "EM_AARCH64", "qemu-armv7": "EM_ARM", "qemu-riscv64": "EM_RISCV"}


def _load_matrix():
    spec = importlib.util.spec_from_file_location("verify_matrix",
                                                  REPO / "scripts" / "verify_matrix.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod        # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


matrix = _load_matrix()


def cells_for(index: int) -> list[tuple[str, str]]:
    return [*FULL, ROTATING[index % len(ROTATING)]]


def test_the_cells_cover_every_board_and_codegen():
    """The selection above really covers each pair (a change to it shows)."""
    covered = {cell for i in range(len(SHARED)) for cell in cells_for(i)}
    assert covered == {(b, g) for b in matrix.BOARDS for g in matrix.CODEGENS}


@lru_cache(maxsize=None)
def elf_machine(path: Path) -> str:
    with open(path, "rb") as f:
        return ELFFile(f)["e_machine"]


def check_elf(board: str):
    """The package's harness is a static executable for the board's ISA, and
    so is every object in its library (archive members after the index)."""
    def inspect(pkg: Path) -> None:
        exe = pkg / "bench" / "bench"
        with open(exe, "rb") as f:
            elf = ELFFile(f)
            assert elf["e_machine"] == MACHINES[board], (board, elf["e_machine"])
            assert elf["e_type"] == "ET_EXEC", "the harness must be statically linked"
            assert not any(s.name == ".interp" for s in elf.iter_sections())
        lib = next((pkg / "lib").glob("lib*.a"))
        objs = subprocess.run(["ar", "t", str(lib)], capture_output=True, text=True,
                              check=True).stdout.split()
        assert objs, lib
        out = pkg / ".check"
        out.mkdir()
        subprocess.run(["ar", "x", str(lib.resolve())], cwd=out, check=True)
        for o in objs:
            assert elf_machine(out / o) == MACHINES[board], (board, o)
    return inspect


@pytest.mark.parametrize("index", range(len(SHARED)), ids=[p.name for p in SHARED])
def test_model_verifies_on_emulated_boards(index: int, record_property):
    path = SHARED[index]
    prepared = matrix.prepare(path)
    rows = []
    for board, codegen in cells_for(index):
        cell = matrix.verify_prepared(prepared, board, codegen, inspect=check_elf(board))
        rows.append(f"{board}/{codegen} {matrix._cell_text(cell)} "
                    f"(package {cell['package_s']:.1f} s, run {cell['run_s']:.1f} s)")
        assert cell["ok"], cell
        if prepared.reference == "tflite-micro":
            assert cell["max_abs_err"] == 0.0, cell
    record_property("summary", f"cross {path.name}: " + "; ".join(rows))


# ------------------------------------------------------------------ targets

def test_target_lanes_and_variants():
    """NEON: 4 float lanes (128 bits) on both Arm targets; rv64gc: scalar.
    A variant file restates only its cpu, which reaches -mcpu."""
    for name in ("aarch64-linux", "armv7-linux"):
        t = get_target(name)
        assert (t.lanes(32), t.lanes(8)) == (4, 16), name
    rv = get_target("riscv64-linux")
    assert rv.vector_bits == 0 and rv.lanes(32) == 1 and rv.lanes(8) == 1
    assert "-mabi=lp64d" in rv.cflags and "-fuse-ld=lld" not in rv.ldflags
    base, a53 = get_target("aarch64-linux"), get_target("aarch64-linux-a53")
    assert (base.cpu, a53.cpu) == ("cortex-a72", "cortex-a53")
    assert "-mcpu=cortex-a53" in a53.cflags and "-mcpu=cortex-a72" not in a53.cflags
    assert a53.triple == base.triple and a53.vector_bits == base.vector_bits
    assert get_target("armv7-linux").triple == "armv7-unknown-linux-gnueabihf"
    assert "-mcpu=cortex-a53" in get_target("armv7-linux-a53").cflags


def test_schedules_follow_the_target():
    """A float conv tile is 4 lanes wide on NEON and 1 wide on rv64gc; the
    register budget is 32 NEON registers on AArch64, 16 (q0-q15) on ARMv7."""
    from aot.lower.schedule.tile_sizes import tile

    assert tile(get_target("aarch64-linux"), "float32").lanes == 4
    assert tile(get_target("armv7-linux"), "float32").lanes == 4
    assert tile(get_target("riscv64-linux"), "float32").lanes == 1
    assert get_target("aarch64-linux").vector_registers == 32
    assert get_target("armv7-linux").vector_registers == 16


# ---------------------------------------------------------------- the CLI

def aot(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aot", *args], capture_output=True,
                          text=True, timeout=300, env=env)


def test_boards_json_lists_every_board():
    r = aot("boards", "--json")
    assert r.returncode == 0, r.stderr
    rows = {b["name"]: b for b in json.loads(r.stdout)["boards"]}
    want = {"qemu-aarch64": ("aarch64-linux", "cortex-a72"),
            "qemu-armv7": ("armv7-linux", "cortex-a7"),
            "qemu-riscv64": ("riscv64-linux", "rv64"),
            "host": ("x86_64-linux", "x86-64-v3")}
    for name, (target, cpu) in want.items():
        assert (rows[name]["target"], rows[name]["cpu"]) == (target, cpu), rows[name]
    for name in MACHINES:
        assert rows[name]["transport"] == "qemu-user" and rows[name]["emulated"] is True
    text = aot("boards")
    assert text.returncode == 0
    for name in rows:
        assert any(line.split()[0] == name for line in text.stdout.splitlines()), name


def _one_line_error(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aot: error: "), r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_unknown_board_lists_the_known_ones(tmp_path):
    model = str(SHARED[0])
    for cmd in (("verify", model), ("package", model, "-o", str(tmp_path / "p")),
                ("run", model, "--out", str(tmp_path / "o"))):
        _one_line_error(aot(*cmd, "--board", "pi-zero"), "unknown board 'pi-zero'",
                        "qemu-aarch64", "qemu-armv7", "qemu-riscv64", "host")
    assert not (tmp_path / "p").exists() and not (tmp_path / "o").exists()


def test_unknown_target_lists_the_known_ones(tmp_path):
    import os

    (tmp_path / "mine.toml").write_text(
        'name = "mine"\ntarget = "sparc-linux"\ntransport = "qemu-user"\n'
        "flash_bytes = 1\nram_bytes = 1\n")
    env = {**os.environ, "AOT_BOARDS_DIR": str(tmp_path)}
    _one_line_error(aot("boards", env=env), "unknown target 'sparc-linux'", "aarch64-linux",
                    "armv7-linux", "riscv64-linux")


def test_bench_on_an_emulated_board_says_so(tmp_path):
    r = aot("bench", str(MODELS / "tflm_hello_world_int8.tflite"),
            "--board", "qemu-riscv64", "--repeat", "3", "--warmup", "0", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["emulated"] is True and "emulator" in out["note"], out


def test_qemu_user_errors_are_clear(tmp_path):
    """A package for another board, a missing emulator: one-line AotErrors."""
    from aot.api import package
    from aot.deploy import run_package
    from aot.errors import AotError

    model = MODELS / "tflm_hello_world_f32.tflite"
    info = package(model, board="qemu-armv7", codegen="c", out_dir=tmp_path / "pkg")
    x = np.zeros(info.metadata["inputs"][0]["shape"], np.float32)
    board = get_board("qemu-armv7")
    assert run_package(info.path, board, [x]).outputs[0].shape == (1, 1)
    gone = dataclasses.replace(board, options={**board.options, "qemu": "qemu-nonesuch"})
    with pytest.raises(AotError, match="'qemu-nonesuch' is not installed"):
        run_package(info.path, gone, [x])
    bare = dataclasses.replace(board, options={})
    with pytest.raises(AotError, match="needs qemu, cpu"):
        run_package(info.path, bare, [x])
    # The armv7 harness under the aarch64 emulator: QEMU refuses the ELF.
    with pytest.raises(AotError, match="qemu-user"):
        run_package(info.path, get_board("qemu-aarch64"), [x])
    # `aot run` refuses a package built for another board before running it.
    np.save(tmp_path / "x.npy", x)
    _one_line_error(aot("run", str(info.path), "--board", "qemu-riscv64", "--input",
                        str(tmp_path / "x.npy"), "--out", str(tmp_path / "o")),
                    "built for board 'qemu-armv7'")

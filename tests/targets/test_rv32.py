"""RISC-V microcontrollers on qemu-system-riscv32, bare metal with picolibc
and semihosting: qemu-rv32 (rv32imc, an ESP32-C3's 400 KiB of SRAM and
4 MiB of flash on the virt machine) and qemu-rv32-imac (rv32imac, the
HiFive1's FE310 as the sifive_e machine: 16 KiB of RAM).

A few models per board against tflite-micro bit for bit (C kernels on one
board, LLVM's on the other), the link's placement of weights and arena in
the board's memories, and a model too big for the 16 KiB board refused
with the numbers before anything is compiled.
"""
from __future__ import annotations

import pytest
from elftools.elf.elffile import ELFFile

from aot.api import package, verify
from aot.errors import BudgetError
from support import MODELS

KWS = MODELS / "mlperf_kws_dscnn_int8.tflite"
# The linker scripts' memories (runtime_c/riscv/): (origin, size)
C3_FLASH, C3_SRAM = (0x80000000, 4 << 20), (0x80400000, 400 << 10)


def check_bit_exact(out) -> None:
    assert out["reference"] == "tflite-micro" and out["ok"], out
    assert all(r["max_abs_err"] == 0 for r in out["outputs"]), out


def inside(region: tuple[int, int], addr: int, size: int) -> bool:
    return region[0] <= addr and addr + size <= sum(region)


def test_kws_int8_is_bit_exact_on_qemu_rv32_and_links_into_its_memories(tmp_path):
    out = verify(KWS, board="qemu-rv32", codegen="c", out_dir=tmp_path / "kws")
    check_bit_exact(out)
    pkg = out["package"]
    with open(tmp_path / "kws" / "bench" / "bench", "rb") as f:
        elf = ELFFile(f)
        assert elf["e_machine"] == "EM_RISCV" and elf.elfclass == 32
        # rv32imc, soft float (ilp32): no F or D in the ELF's flags
        assert elf["e_flags"] & 0x1 and not elf["e_flags"] & 0x6
        weights = elf.get_section_by_name(".rodata.aot")
        assert weights["sh_size"] >= pkg["params_bytes"]
        assert inside(C3_FLASH, weights["sh_addr"], weights["sh_size"])
        (arena,) = elf.get_section_by_name(".symtab").get_symbol_by_name(
            "mlperf_kws_dscnn_int8_arena")
        assert arena["st_size"] == pkg["arena_bytes"]
        assert inside(C3_SRAM, arena["st_value"], arena["st_size"])
        # _start where virt's reset code jumps with -bios none
        assert elf["e_entry"] == C3_FLASH[0]


@pytest.mark.parametrize("model,codegen", [
    ("tflm_micro_speech_int8.tflite", "llvm"),
    ("tflm_hello_world_int8.tflite", "c"),
])
def test_models_that_fit_16_kib_are_bit_exact_on_qemu_rv32_imac(model, codegen):
    check_bit_exact(verify(MODELS / model, board="qemu-rv32-imac", codegen=codegen))


def test_a_float_model_matches_litert_in_soft_float():
    out = verify(MODELS / "tflm_hello_world_f32.tflite", board="qemu-rv32-imac")
    assert out["reference"] == "litert" and out["ok"], out


def test_a_model_too_big_for_the_board_is_refused_with_the_numbers(tmp_path):
    with pytest.raises(BudgetError) as e:
        package(KWS, board="qemu-rv32-imac", out_dir=tmp_path / "kws")
    msg = str(e.value)
    assert "arena 15.6 KiB" in msg and "16502 bytes" in msg, msg
    assert "RAM of board 'qemu-rv32-imac' (16384 bytes)" in msg, msg
    assert "--pools" not in msg          # one bank of RAM: nothing to spread over
    assert not (tmp_path / "kws").exists()

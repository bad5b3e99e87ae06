"""NEON's instruction family (aot/isa/neon.py): its legalization rows are
well formed, and each instruction is chosen on an AArch64 target and spelled
by both code generators (the ACLE intrinsic under #if in C, the
llvm.aarch64.neon intrinsic or the arithmetic AArch64 selects it from in
LLVM); Helium's fixed-point forms, defined here, the same on Cortex-M55."""
from __future__ import annotations

import pytest

from aot.isa import arm_mve, neon
from aot.ir.tir import DType
from aot.lower.tir_passes.legalize import legalize
from aot.targets import get_target
from support.kernels import call_kernel, call_names, spelled

I8, I16, I32 = (DType(s) for s in ("int8", "int16", "int32"))
I32X4, I16X8, I8X16 = I32.with_lanes(4), I16.with_lanes(8), I8.with_lanes(16)
DOT4 = (I32X4, I32, I8X16)
DOT4P = (I32X4, I32, I32, I8X16, I8X16)

# generic call, its operands (the result is int32 x 4), a target, the
# instruction it becomes there, its C and its LLVM spelling (None: the
# generic call's arithmetic, which AArch64's instruction selection makes
# the instruction)
CASES = [
    ("aot_dot4", DOT4, "aarch64-linux-a76", "arm_sdot", "vdotq_s32",
     "llvm.aarch64.neon.sdot.v4i32.v16i8"),
    ("aot_dot4s", DOT4, "aarch64-linux", "arm_smull_dot4", "smull2 %2.8h, %3.16b, %4.16b",
     "llvm.aarch64.neon.addp.v8i16"),
    ("aot_mlal_lo", (I32X4, I16X8, I16X8), "aarch64-linux", "arm_smlal_lo", "vmlal_s16", None),
    ("aot_mlal_hi", (I32X4, I16X8, I16X8), "aarch64-linux", "arm_smlal_hi", "vmlal_high_s16",
     None),
    ("aot_dot4p_lo", DOT4P, "aarch64-linux", "arm_dot4p_lo", "smlal %1.8h, %4.8b, %5.8b",
     "llvm.aarch64.neon.smull.v8i16"),
    ("aot_dot4p_hi", DOT4P, "aarch64-linux", "arm_dot4p_hi", "smlal2 %1.8h, %4.16b, %5.16b",
     "llvm.aarch64.neon.smull.v8i16"),
    ("aot_dot16p", (I32X4, I8X16, I8X16), "aarch64-linux", "arm_dot16p",
     "smlal2 %1.8h, %2.16b, %3.16b", "llvm.aarch64.neon.saddlp.v4i32.v8i16"),
    ("aot_addp", (I32X4, I32X4), "aarch64-linux", "arm_addp", "vpaddq_s32", None),
    ("aot_rdhm", (I32X4, I32X4), "aarch64-linux", "arm_sqrdmulh", "vqrdmulhq_s32",
     "llvm.aarch64.neon.sqrdmulh.v4i32"),
    ("aot_rdbpot", (I32X4, I32X4), "aarch64-linux", "arm_rdbpot", "vrshlq_s32",
     "llvm.aarch64.neon.srshl.v4i32"),
    ("aot_srshl", (I32X4, I32X4), "aarch64-linux", "arm_srshl", "vrshlq_s32",
     "llvm.aarch64.neon.srshl.v4i32"),
    ("aot_rdhm", (I32X4, I32X4), "cortex-m55", "mve_vqrdmulh", "vqrdmulhq_s32",
     "llvm.arm.mve.vqrdmulh.v4i32"),
    ("aot_rdbpot", (I32X4, I32X4), "cortex-m55", "mve_rdbpot", "vrshlq_s32",
     "llvm.arm.mve.vshl.vector.v4i32.v4i32"),
]


def test_rows_are_well_formed():
    assert neon.ROWS == neon.DOT_ROWS + neon.FIXED_POINT_ROWS
    # the instructions (a NeonFixedPoint is one throughout)
    names = {name for name, op in neon.NEON_OPS.items() if getattr(op, "instruction", True)}
    names |= {neon.ARM_SDOT.name, neon.ARM_SMULL_DOT4.name}
    generics = [row.generic for row in neon.ROWS]
    for row in neon.ROWS:
        assert row.archs == ("aarch64",) and row.name in names and row.generic not in names, row
        assert row.little_endian or row.name == "arm_addp", row    # lane-wise needs no order
        # 16 lanes: four registers (the joined int8 epilogue's narrowing and fixed point)
        assert {n for n, _ in row.features} <= {4, 16}, row
        assert get_target("aarch64-linux-a76").has(*row.features[0][1]), row
    # aot_dot4s: SDOT where there is dotprod, SMULL's four instructions else
    first, second = (r for r in neon.ROWS if r.generic == "aot_dot4s")
    assert (first.name, second.name) == ("arm_sdot", "arm_smull_dot4")
    assert generics.index("aot_dot4s") < generics.index("aot_mlal_lo")


def test_every_row_has_a_case():
    mve = {neon.MVE_VQRDMULH.name, neon.MVE_RDBPOT.name}
    assert mve <= {row.name for row in arm_mve.ROWS}
    cases = {case[3] for case in CASES} | {case[3] for case in WIDE_CASES}
    assert cases == {row.name for row in neon.ROWS} | mve


@pytest.mark.parametrize("generic, operands, target, instruction, c, llvm", CASES,
                         ids=[case[3] for case in CASES])
def test_the_instruction_is_chosen_and_spelled(generic, operands, target, instruction, c, llvm):
    func = call_kernel(generic, operands, I32X4)
    names, source, ir = spelled(func, target)
    assert names == {instruction}
    assert c in source and "#else" in source
    _, generic_source, generic_ir = spelled(func, target, legalized=False)
    assert c not in generic_source
    if llvm is not None:
        assert llvm in ir and llvm not in generic_ir
    # a NEON instruction is never x86's
    assert instruction not in spelled(func, "x86_64-linux-avx512")[0]


# 16-lane calls (result type last): the instruction, its C and LLVM spelling
I32X16 = I32.with_lanes(16)
WIDE_CASES = [
    ("aot_qnarrow16", (I32X4,) * 4, "aarch64-linux", "arm_qnarrow16", "vqmovn_high_s16", None,
     I8X16),
    ("aot_rdhm", (I32X16, I32X16), "aarch64-linux", "arm_sqrdmulh", "vqrdmulhq_s32",
     "llvm.aarch64.neon.sqrdmulh.v4i32", I32X16),
    ("aot_rdbpot", (I32X16, I32X16), "aarch64-linux", "arm_rdbpot", "vrshlq_s32",
     "llvm.aarch64.neon.srshl.v4i32", I32X16),
    ("aot_srshl", (I32X16, I32X16), "aarch64-linux", "arm_srshl", "vrshlq_s32",
     "llvm.aarch64.neon.srshl.v4i32", I32X16),
]


@pytest.mark.parametrize("generic, operands, target, instruction, c, llvm, result", WIDE_CASES,
                         ids=[f"{case[3]}-{case[6]}" for case in WIDE_CASES])
def test_sixteen_lanes_are_chosen_and_spelled(generic, operands, target, instruction, c, llvm,
                                              result):
    func = call_kernel(generic, operands, result)
    names, source, ir = spelled(func, target)
    assert names == {instruction}
    assert c in source and "#else" in source
    if llvm is not None:
        assert llvm in ir
    assert instruction not in spelled(func, "x86_64-linux-avx512")[0]
    # Helium keeps 4 lanes: its fixed point on 16 stays generic
    assert not names & spelled(func, "cortex-m55")[0]


def test_without_dotprod_aot_dot4_stays_generic():
    func = call_kernel("aot_dot4", DOT4, I32X4)
    assert call_names(legalize(func, get_target("aarch64-linux"))) == {"aot_dot4"}

"""Intrinsic legalization (a TIR pass per target, as Halide's find_intrinsics):
the generic calls the lowering writes become the target's instructions where
it has them, so the code generators print every call one to one and choose
nothing.

    aot_dot2 / aot_dot2p   -> x86_pmaddwd / x86_pmaddwd_packed   x86: SSE2 (4 lanes),
                                                                  AVX2 (8), AVX512BW (16)
    aot_dot2 / aot_dot2p   -> rvv_dot2 / rvv_dot2p               RISC-V with V (4, 8, 16)
    aot_rdhm on int32 x n  -> x86_pmuldq_rdhm                     x86: SSE4.1 (4), AVX2 (8),
                                                                  AVX512F (16)
    aot_pack2 / aot_pack4  -> aot_pack2_bytes / aot_pack4_bytes   little-endian targets
    aot_dot4               -> arm_sdot                            AArch64 with dotprod (4)
    aot_dot4s              -> arm_sdot, else arm_smull_dot4       AArch64 (4): dotprod, else NEON
    aot_mlal_lo / _hi      -> arm_smlal_lo / _hi                  AArch64 NEON (4)
    aot_dot4p_lo / _hi     -> arm_dot4p_lo / _hi                  AArch64 NEON (4)
    aot_addp               -> arm_addp                            AArch64 NEON (4)
    aot_qnarrow16          -> arm_qnarrow16                       AArch64 NEON (16)
    aot_dot4u              -> x86_vpdpbusd                        x86: AVX512-VNNI (16),
                                                                  with AVX512VL (4, 8)
    fmaf on float32 x n    -> x86_fmadd                           x86: FMA (4, 8),
                                                                  AVX512F (16)
    aot_rdhm on int32 x 4  -> arm_sqrdmulh                        AArch64 NEON (4; 16:
                                                                  per quarter)
    aot_rdbpot on int32 x 4 -> arm_rdbpot                         AArch64 NEON (4; 16:
                                                                  per quarter)
    aot_dot16              -> arm_vmladava                        Arm with MVE (Helium)
    aot_widen4             -> arm_vldrb_s32                       Arm with MVE (4)
    aot_rdhm / aot_rdbpot  -> mve_vqrdmulh / mve_rdbpot           Arm with MVE (4)
    (the function)         -> attribute GCC_X86_SPELLINGS         x86: the C's vector
                                                                  conversions and min/max
                                                                  spelled for GCC beside
                                                                  the portable spelling
    (a function converting -> attribute HALF_CONVERSIONS          x86 with F16C, AArch64:
     halves)                                                      the conversions'
                                                                  instructions (isa/half.py)

A call the target has no instruction for stays generic: its lane formula
(NEON compilers make widening multiply-adds of aot_dot2's). Which of
aot_dot4 and aot_dot4u a kernel calls is the int8 accumulator strategy's
choice (aot/lower/schedule/strategy.py), made from the same facts. The C printed
for an x86 instruction still falls back to the formula under `#if` when the
user's compiler is not given the ISA (docs/package.md, "In a firmware
project"); which instruction is used is decided here, from the target's
facts (aot.targets.Target), not by the backends.
"""
from __future__ import annotations

from dataclasses import replace

from aot.isa import arm_dsp, arm_mve, half, neon, rvv, x86
from aot.isa.calls import PAIR_PACK_ROWS, QUAD_PACK_ROWS
from aot.isa.instruction import Instruction
from aot.ir.tir import (Call, Cast, Expr, PrimFunc, dtype_of, map_stmt_exprs, nodes_of,
                        stmt_exprs, walk_stmt)
from aot.targets import Target

# Every target instruction a generic call may become, first fit wins: the
# instruction families' rows (aot/isa/<family>.py). Only the order of one
# generic call's rows decides anything (NEON's aot_dot4s: SDOT before
# SMULL); the groups interleave as the table always has, which
# bench/same_code.py --tables compares row by row.
INSTRUCTIONS: tuple[Instruction, ...] = (
    *x86.SIMD_ROWS, *PAIR_PACK_ROWS, *arm_dsp.ROWS, *arm_mve.ROWS, *QUAD_PACK_ROWS,
    *neon.DOT_ROWS, *x86.VNNI_ROWS, *neon.FIXED_POINT_ROWS, *rvv.ROWS,
)
_BY_GENERIC: dict[str, tuple[Instruction, ...]] = {}
for _i in INSTRUCTIONS:
    _BY_GENERIC[_i.generic] = (*_BY_GENERIC.get(_i.generic, ()), _i)


def instruction_for(call: Call, target: Target) -> str | None:
    """The target instruction `call` becomes, or None (it stays generic)."""
    return next((i.name for i in _BY_GENERIC.get(call.fn, ()) if i.fits(call, target)), None)


def legalize(func: PrimFunc, target: Target) -> PrimFunc:
    """func with its generic calls made the target's instructions."""
    # one walk finds the calls and casts; the body is rebuilt only when a
    # call becomes an instruction (most kernels: none does)
    nodes: list = []
    for s in walk_stmt(func.body):
        for e in stmt_exprs(s):
            nodes_of(e, (Call, Cast), nodes)
    body = func.body
    if any(instruction_for(x, target) is not None for x in nodes if isinstance(x, Call)):
        def one(e: Expr) -> Expr | None:
            name = instruction_for(e, target) if isinstance(e, Call) else None
            return None if name is None else Call(name, e.args, e.dtype)
        body = map_stmt_exprs(body, one)
    attrs = func.attrs
    if target.arch in x86.ARCHS and x86.GCC_X86_SPELLINGS not in dict(attrs):
        attrs += ((x86.GCC_X86_SPELLINGS, True),)
    if (half.HALF_CONVERSIONS not in dict(attrs) and half.has_half_conversions(target)
            and _converts_halves(nodes)):
        attrs += ((half.HALF_CONVERSIONS, True),)
    # unchanged: the same object back, as the other passes do
    if body is func.body and attrs is func.attrs:
        return func
    return replace(func, body=body, attrs=attrs)


def _converts_halves(nodes: list) -> bool:
    """Whether any of a function's nodes converts a half to or from float32
    (the float16 pass's casts)."""
    return any(isinstance(x, Cast) and not x.bits
               and "float16" in (x.dtype.scalar, dtype_of(x.a).scalar) for x in nodes)

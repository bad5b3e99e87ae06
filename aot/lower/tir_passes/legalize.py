"""Intrinsic legalization (a TIR pass per target, as Halide's find_intrinsics):
the generic calls the lowering writes become the target's instructions where
it has them, so the code generators print every call one to one and choose
nothing.

    aot_dot2 / aot_dot2p   -> x86_pmaddwd / x86_pmaddwd_packed   x86: SSE2 (4 lanes),
                                                                  AVX2 (8), AVX512BW (16)
    aot_rdhm on int32 x n  -> x86_pmuldq_rdhm                     x86: SSE4.1 (4), AVX2 (8),
                                                                  AVX512F (16)
    aot_pack2 / aot_pack4  -> aot_pack2_bytes / aot_pack4_bytes   little-endian targets
    aot_dot4               -> arm_sdot                            AArch64 with dotprod (4)
    aot_dot4s              -> arm_sdot, else arm_smull_dot4       AArch64 (4): dotprod, else NEON
    aot_mlal_lo / _hi      -> arm_smlal_lo / _hi                  AArch64 NEON (4)
    aot_dot4p_lo / _hi     -> arm_dot4p_lo / _hi                  AArch64 NEON (4)
    aot_addp               -> arm_addp                            AArch64 NEON (4)
    aot_dot4u              -> x86_vpdpbusd                        x86: AVX512-VNNI (16),
                                                                  with AVX512VL (4, 8)
    aot_rdhm on int32 x 4  -> arm_sqrdmulh                        AArch64 NEON
    aot_rdbpot on int32 x 4 -> arm_rdbpot                         AArch64 NEON
    aot_dot16              -> arm_vmladava                        Arm with MVE (Helium)
    aot_widen4             -> arm_vldrb_s32                       Arm with MVE (4)
    aot_rdhm / aot_rdbpot  -> mve_vqrdmulh / mve_rdbpot           Arm with MVE (4)
    (the function)         -> attribute GCC_X86_SPELLINGS         x86: the C's vector
                                                                  conversions and min/max
                                                                  spelled for GCC beside
                                                                  the portable spelling

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

from dataclasses import dataclass, replace

from aot.isa.arm_dsp import (ARM_SMLABB, ARM_SMLAD, ARM_SMLATT, ARM_SMMULR, ARM_SXTB16,
                             ARM_SXTB16_ROR8, SMLABB, SMLAD, SMLATT, SMMULR, SXTB16,
                             SXTB16_ROR8)
from aot.isa.arm_mve import ARM_VLDRB_S32, ARM_VMLADAVA, DOT16, WIDEN4
from aot.isa.calls import (GCC_X86_SPELLINGS, PACKED_PAIR_DOT, PAIR_DOT, PAIR_PACK,
                           PAIR_PACK_BYTES, X86_PMADDWD, X86_PMADDWD_PACKED, X86_PMULDQ_RDHM)
from aot.isa.calls import MVE_RDBPOT, MVE_VQRDMULH
from aot.isa.calls import (ARM_RDBPOT, ARM_SDOT, ARM_SMULL_DOT4, ARM_SQRDMULH, QUAD_DOT,
                           QUAD_DOT_S, QUAD_DOT_U, QUAD_PACK, QUAD_PACK_BYTES,
                           X86_VPDPBUSD)
from aot.isa.calls import ARM_SMLAL_HI, ARM_SMLAL_LO, MLAL_HI, MLAL_LO
from aot.isa.calls import ADDP, ARM_ADDP, ARM_DOT4P_HI, ARM_DOT4P_LO, DOT4P_HI, DOT4P_LO
from aot.ir.tir import Call, Expr, PrimFunc, map_stmt_exprs
from aot.targets import Target

_X86 = ("x86_64", "x86")


@dataclass(frozen=True)
class Instruction:
    """`generic` calls become `name` on targets of `archs` (empty: any) with
    the ISA features `features[result lanes]` (no entry: not on that many
    lanes), only on little-endian targets if `little_endian`, and only on
    int32 results if `int32_only` (pmuldq's lanes are int32)."""
    generic: str
    name: str
    archs: tuple[str, ...] = ()
    features: tuple[tuple[int, tuple[str, ...]], ...] | None = None
    little_endian: bool = False
    int32_only: bool = False

    def fits(self, call: Call, target: Target) -> bool:
        if self.archs and target.arch not in self.archs:
            return False
        if self.little_endian and not target.little_endian:
            return False
        if self.int32_only and call.dtype.scalar != "int32":
            return False
        if self.features is None:
            return True
        needed = dict(self.features).get(call.dtype.lanes)
        return needed is not None and target.has(*needed)


_PMADDWD = ((4, ("sse2",)), (8, ("avx2",)), (16, ("avx512bw",)))
_PMULDQ = ((4, ("sse4.1",)), (8, ("avx2",)), (16, ("avx512f",)))
_ARM = ("arm", "thumb")
_DSP = ((1, ("dsp",)),)
_SDOT = ((4, ("dotprod",)),)
_NEON4 = ((4, ("neon",)),)
_VPDPBUSD = ((4, ("avx512vnni", "avx512vl")), (8, ("avx512vnni", "avx512vl")),
             (16, ("avx512vnni",)))

# Every target instruction a generic call may become, first fit wins.
INSTRUCTIONS: tuple[Instruction, ...] = (
    Instruction(PAIR_DOT.name, X86_PMADDWD.name, _X86, _PMADDWD),
    Instruction(PACKED_PAIR_DOT.name, X86_PMADDWD_PACKED.name, _X86, _PMADDWD),
    Instruction(X86_PMULDQ_RDHM.generic, X86_PMULDQ_RDHM.name, _X86, _PMULDQ, int32_only=True),
    Instruction(PAIR_PACK.name, PAIR_PACK_BYTES.name, little_endian=True),
    # The Armv7E-M DSP extension (Cortex-M4/M7/M55): SXTB16 reads a little-endian word.
    Instruction(SMLAD.name, ARM_SMLAD.name, _ARM, _DSP),
    Instruction(SMLABB.name, ARM_SMLABB.name, _ARM, _DSP),
    Instruction(SMLATT.name, ARM_SMLATT.name, _ARM, _DSP),
    Instruction(SMMULR.name, ARM_SMMULR.name, _ARM, _DSP),
    Instruction(SXTB16.name, ARM_SXTB16.name, _ARM, _DSP, little_endian=True),
    Instruction(SXTB16_ROR8.name, ARM_SXTB16_ROR8.name, _ARM, _DSP, little_endian=True),
    # Helium (Cortex-M55): one VMLADAVA.S8 per 16 int8 products into a scalar.
    Instruction(DOT16.name, ARM_VMLADAVA.name, _ARM, ((1, ("mve",)),)),
    Instruction(WIDEN4.name, ARM_VLDRB_S32.name, _ARM, ((4, ("mve",)),)),
    Instruction(MVE_VQRDMULH.generic, MVE_VQRDMULH.name, _ARM, ((4, ("mve",)),),
                little_endian=True, int32_only=True),
    Instruction(MVE_RDBPOT.generic, MVE_RDBPOT.name, _ARM, ((4, ("mve",)),),
                little_endian=True, int32_only=True),
    Instruction(QUAD_PACK.name, QUAD_PACK_BYTES.name, little_endian=True),
    # Both read the quad's bytes as lanes of a broadcast register: little-endian.
    Instruction(QUAD_DOT.name, ARM_SDOT.name, ("aarch64",), _SDOT, little_endian=True),
    Instruction(QUAD_DOT_S.name, ARM_SDOT.name, ("aarch64",), _SDOT, little_endian=True),
    # Without dotprod: SMULL, SMULL2, ADDP, SADALP (the weights have no -128).
    Instruction(MLAL_LO.name, ARM_SMLAL_LO.name, ("aarch64",), _NEON4, little_endian=True),
    Instruction(MLAL_HI.name, ARM_SMLAL_HI.name, ("aarch64",), _NEON4, little_endian=True),
    Instruction(DOT4P_LO.name, ARM_DOT4P_LO.name, ("aarch64",), _NEON4, little_endian=True),
    Instruction(DOT4P_HI.name, ARM_DOT4P_HI.name, ("aarch64",), _NEON4, little_endian=True),
    Instruction(ADDP.name, ARM_ADDP.name, ("aarch64",), _NEON4),
    Instruction(QUAD_DOT_S.name, ARM_SMULL_DOT4.name, ("aarch64",), _NEON4, little_endian=True),
    Instruction(QUAD_DOT_U.name, X86_VPDPBUSD.name, _X86, _VPDPBUSD, little_endian=True),
    # Lane-wise, but only tested little-endian (the C casts vectors to NEON types).
    Instruction(ARM_SQRDMULH.generic, ARM_SQRDMULH.name, ("aarch64",), _NEON4,
                little_endian=True, int32_only=True),
    Instruction(ARM_RDBPOT.generic, ARM_RDBPOT.name, ("aarch64",), _NEON4,
                little_endian=True, int32_only=True),
)
_BY_GENERIC: dict[str, tuple[Instruction, ...]] = {}
for _i in INSTRUCTIONS:
    _BY_GENERIC[_i.generic] = (*_BY_GENERIC.get(_i.generic, ()), _i)


def instruction_for(call: Call, target: Target) -> str | None:
    """The target instruction `call` becomes, or None (it stays generic)."""
    return next((i.name for i in _BY_GENERIC.get(call.fn, ()) if i.fits(call, target)), None)


def legalize(func: PrimFunc, target: Target) -> PrimFunc:
    """func with its generic calls made the target's instructions."""
    changed = []

    def one(e: Expr) -> Expr | None:
        name = instruction_for(e, target) if isinstance(e, Call) else None
        if name is None:
            return None
        changed.append(name)
        return Call(name, e.args, e.dtype)
    body = map_stmt_exprs(func.body, one)
    attrs = func.attrs
    if target.arch in _X86 and GCC_X86_SPELLINGS not in dict(attrs):
        attrs += ((GCC_X86_SPELLINGS, True),)
    # unchanged: the same object back, as the other passes do
    if not changed and attrs is func.attrs:
        return func
    return replace(func, body=body, attrs=attrs)

"""RISC-V's vector extension (RVV 1.0) instructions, as TIR calls, with their
C and LLVM spellings and legalization rows.

    rvv_dot2(x0, x1, w)     aot_dot2 / aot_dot2p (dots.PairDot) on a target
    rvv_dot2p(p, w)         with V (4, 8, 16 result lanes): the weight pairs
                            seen as int32 lanes, the even halves sign-extended
                            by a shift left and right (vsll, vsra), the odd
                            ones by a shift right, each multiplied by its
                            scalar and added (vmacc.vx), the caller's
                            accumulation folded in

The lane formula leaves the halves to shuffles, which clang 14 lowers for
RVV to a slide and a stack store per lane (and LLVM 22 to vnsrl pairs):
the shifts keep each weight vector in registers, split once for all the
pixels that share it. Pure vector-extension C, so any compiler of a
little-endian target builds it; the row asks for V because only there the
int32 view costs nothing. RVV's intrinsics (riscv_vector.h) are not used:
clang 14 has them, but its scalable types do not convert to or from GCC
vector types without a trip through memory (the riscv_rvv_vector_bits
attribute came with clang 16).
"""
from __future__ import annotations

from llvmlite import ir

from aot.isa.dots import PACKED_PAIR_DOT, PAIR_DOT, PairDot
from aot.isa.instruction import Instruction

ARCHS = ("riscv64", "riscv32")

RVV_DOT2 = PairDot("rvv_dot2", shifts=True)
RVV_DOT2_PACKED = PairDot("rvv_dot2p", True, shifts=True)

_V = ((4, ("v",)), (8, ("v",)), (16, ("v",)))

# The int32 view of an int16 pair reads its low half first: little-endian.
ROWS: tuple[Instruction, ...] = (
    Instruction(PAIR_DOT.name, RVV_DOT2.name, ARCHS, _V, little_endian=True),
    Instruction(PACKED_PAIR_DOT.name, RVV_DOT2_PACKED.name, ARCHS, _V, little_endian=True),
)


def c_pair_dot(rt: str, ut: str, packed: bool) -> str:
    """The body of an rvv_dot2(p) helper returning `rt` (int32 x n; ut its
    uint32 twin, shifted left without overflow) from int16 scalars x0, x1
    (or the int32 pair p, its halves as aot_dot2p's formula takes them) and
    the int16 x 2n w."""
    halves = ("    const int32_t x0 = (int16_t)p;\n"
              "    const int32_t x1 = (p - (p & 65535)) / 65536;\n" if packed else "")
    return (f"{halves}    const {rt} pairs = ({rt})w;\n"
            f"    const {rt} even = ({rt})(({ut})pairs << 16) >> 16;\n"
            f"    return x0 * even + x1 * (pairs >> 16);\n")


def llvm_pair_dot(b: ir.IRBuilder, splat, n: int, x0: ir.Value, x1: ir.Value,
                  w: ir.Value) -> ir.Value:
    """rvv_dot2 on n result lanes (x0, x1 int32 scalars; splat: llvm.py's
    broadcast): the C's shifts of w's int32 view."""
    vt = ir.VectorType(ir.IntType(32), n)
    sixteen = ir.Constant(vt, [16] * n)
    pairs = b.bitcast(w, vt)
    even = b.ashr(b.shl(pairs, sixteen), sixteen)
    odd = b.ashr(pairs, sixteen)
    return b.add(b.mul(splat(x0, n), even), b.mul(splat(x1, n), odd))


__all__ = ["ARCHS", "ROWS", "RVV_DOT2", "RVV_DOT2_PACKED", "c_pair_dot", "llvm_pair_dot"]

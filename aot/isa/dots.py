"""The generic integer dot products kernels write, whose instructions more
than one family defines: aot_dot2 / aot_dot2p (x86's pmaddwd, x86.py) and
aot_dot4 / aot_dot4u / aot_dot4s (NEON's SDOT and SMULL, neon.py; x86's
VPDPBUSD, x86.py). Generic, each is its lane formula, which any target
computes."""
from __future__ import annotations

from dataclasses import dataclass

from aot.errors import UnsupportedError
from aot.ir.tir import Call, DType, Expr, dtype_of


@dataclass(frozen=True)
class PairDot:
    """`aot_dot2(x0, x1, w)`: int16 scalars x0, x1 and an int16 vector w of
    2n lanes -> int32 vector of n lanes, r[k] = x0*w[2k] + x1*w[2k+1].

    The widening pairwise multiply-add of integer convolutions (two input
    channels against interleaved weight pairs). Generic, it is the lane
    formula (NEON compilers turn it into widening multiply-adds); on x86 the
    legalization pass (aot/lower/tir_passes/legalize.py) makes it `x86_pmaddwd`,
    pmaddwd with the pair broadcast. Products and the sum are exact in
    int32 unless all four operands are -32768 (pmaddwd wraps there; callers
    keep |x| and |w| smaller).
    """
    name: str = "aot_dot2"
    packed: bool = False     # aot_dot2p(p, w): the pair as one int32, (x0 & 0xFFFF) + 65536 x1
    pmaddwd: bool = False    # the x86 instruction, chosen by the legalization pass
    shifts: bool = False     # RVV: the halves by shifts of w's int32 view (rvv.py)

    def result(self, args: tuple[Expr, ...]) -> DType:
        return DType("int32", dtype_of(args[-1]).lanes // 2)


PAIR_DOT = PairDot()
PACKED_PAIR_DOT = PairDot("aot_dot2p", True)


def pair_dot(x0: Expr, x1: Expr, w: Expr) -> Call:
    """The aot_dot2 call (see PairDot)."""
    return Call(PAIR_DOT.name, (x0, x1, w), DType("int32", dtype_of(w).lanes // 2))


def packed_pair_dot(pair: Expr, w: Expr) -> Call:
    """aot_dot2p: aot_dot2 of the int16 halves of an int32 pair = (x0 &
    0xFFFF) + 65536 * x1 (x0 the low half, sign-extended; x1 = pair >> 16,
    arithmetic): one load and one broadcast
    of a pair staged in memory as int32 (on x86, pmaddwd of the broadcast)."""
    return Call(PACKED_PAIR_DOT.name, (pair, w), DType("int32", dtype_of(w).lanes // 2))


def check_pair_dot(d: PairDot, args: tuple[Expr, ...], dtype: DType) -> PairDot:
    """d if the call's operands are its own, else a clear error naming it."""
    kinds = [dtype_of(a) for a in args]
    scalars = [DType("int32")] if d.packed else [DType("int16")] * 2
    if (len(args) != len(scalars) + 1 or kinds[:-1] != scalars or kinds[-1].scalar != "int16"
            or kinds[-1].lanes < 4 or kinds[-1].lanes % 2 or dtype != d.result(args)):
        want = ", ".join(map(str, scalars))
        raise UnsupportedError(f"{d.name} takes ({want}, int16 x 2n) -> int32 x n, got "
                               f"({', '.join(map(str, kinds))}) -> {dtype}")
    return d


@dataclass(frozen=True)
class QuadDot:
    """`aot_dot4(acc, q, w)`: an int32 vector acc of n lanes, an int32
    scalar q holding four int8 activations (x_j = byte j of q, the low byte
    first: (int8)(q >> 8j)) and an int8 vector w of 4n lanes -> acc[k] +
    sum over j of x_j * w[4k + j].

    The 4-way int8 dot product of integer convolutions (four input channels
    against weights packed in groups of four per output channel, the quad
    broadcast). `aot_dot4u` reads the bytes unsigned (x_j = (q >> 8j) & 255),
    as x86's u8 x s8 instruction does. Generic, each is its lane formula; the
    legalization pass (aot/lower/tir_passes/legalize.py) makes aot_dot4 `arm_sdot`
    (ACLE vdotq_s32) on targets with the dotprod feature, and aot_dot4u
    `x86_vpdpbusd` on AVX-512 VNNI. The sum of four products is exact in
    int32; the accumulation wraps (callers stay far from 2^31).

    `aot_dot4s` is aot_dot4 whose caller promises w has no -128 (TFLite's
    int8 weights are [-127, 127]): every product is then within 128 x 127,
    so two of them add up in int16, which `arm_smull_dot4` (NEON without
    dotprod: SMULL, SMULL2, ADDP of the int16 products, SADALP into acc)
    needs.
    """
    name: str = "aot_dot4"
    unsigned: bool = False   # activation bytes are uint8
    instruction: str = ""    # "sdot" / "vpdpbusd" / "smull": the target instruction
    symmetric: bool = False  # w never holds -128 (aot_dot4s)

    def result(self, args: tuple[Expr, ...]) -> DType:
        return dtype_of(args[0])


QUAD_DOT = QuadDot()
QUAD_DOT_U = QuadDot("aot_dot4u", unsigned=True)
QUAD_DOT_S = QuadDot("aot_dot4s", symmetric=True)


def quad_dot(acc: Expr, quad: Expr, w: Expr, unsigned: bool = False,
             symmetric: bool = False) -> Call:
    """The aot_dot4 (aot_dot4u, aot_dot4s) call (see QuadDot)."""
    fn = QUAD_DOT_U if unsigned else QUAD_DOT_S if symmetric else QUAD_DOT
    return Call(fn.name, (acc, quad, w), dtype_of(acc))


def check_quad_dot(d: QuadDot, args: tuple[Expr, ...], dtype: DType) -> QuadDot:
    """d if the call's operands are its own, else a clear error naming it."""
    kinds = [dtype_of(a) for a in args]
    if (len(args) != 3 or kinds[0].scalar != "int32" or kinds[0].lanes < 2
            or kinds[1] != DType("int32") or kinds[2] != DType("int8", 4 * kinds[0].lanes)
            or dtype != kinds[0]):
        raise UnsupportedError(f"{d.name} takes (int32 x n, int32, int8 x 4n) -> int32 x n, got "
                               f"({', '.join(map(str, kinds))}) -> {dtype}")
    return d


__all__ = ["PACKED_PAIR_DOT", "PAIR_DOT", "PairDot", "QUAD_DOT", "QUAD_DOT_S", "QUAD_DOT_U",
           "QuadDot", "check_pair_dot", "check_quad_dot", "packed_pair_dot", "pair_dot",
           "quad_dot"]

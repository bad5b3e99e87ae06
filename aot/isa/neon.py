"""AArch64 NEON's integer instructions (with the dotprod extension's SDOT),
as TIR calls, with their C and LLVM spellings and legalization rows.

    arm_sdot(acc, q, w)         aot_dot4 / aot_dot4s (dots.QuadDot) as SDOT:
                                AArch64 with dotprod (4 lanes)
    arm_smull_dot4(acc, q, w)   aot_dot4s without dotprod: SMULL, SMULL2,
                                ADDP, SADALP (the weights have no -128)
    arm_smlal_lo / _hi          aot_mlal_lo / _hi (WideningMla): SMLAL / SMLAL2
    arm_dot4p_lo / _hi          aot_dot4p_lo / _hi (PairedQuadDot): SMULL,
                                SMLAL, SADALP
    arm_dot16p                  aot_dot16p (SixteenDot): SMULL, SMLAL2, SADALP
    arm_addp                    aot_addp (PairwiseAdd): ADDP
    arm_sqrdmulh, arm_rdbpot    aot_rdhm / aot_rdbpot on int32 x 4
                                (NeonFixedPoint): SQRDMULH; SQADD and SRSHL
    arm_srshl                   aot_srshl (NeonFixedPoint): SRSHL

aot_mlal, aot_dot4p, aot_dot16p and aot_addp are the NEON kernels' own
calls: generic, each is its lane formula (any target computes it; the host
tests use it).
Helium has the fixed-point instructions too, which ACLE spells alike:
`mve_vqrdmulh` and `mve_rdbpot` are defined here with NEON's and legalized
by arm_mve.py's rows.

In C each instruction is its ACLE intrinsic from <arm_neon.h> under `#if`
on the compiler being given the ISA (`__aarch64__ && __ARM_NEON`,
`__ARM_FEATURE_DOTPROD`), the formula otherwise; in LLVM the
`llvm.aarch64.neon.*` intrinsic, or the formula where AArch64's instruction
selection makes the instruction of it (SMLAL).
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from aot.errors import UnsupportedError
from aot.isa.dots import QUAD_DOT, QUAD_DOT_S, QuadDot
from aot.isa.instruction import Instruction
from aot.ir.tir import Call, DType, Expr, dtype_of

ARM_SDOT = QuadDot("arm_sdot", instruction="sdot")
ARM_SMULL_DOT4 = QuadDot("arm_smull_dot4", instruction="smull", symmetric=True)


@dataclass(frozen=True)
class AccumulatorCall:
    """A NEON kernel's call whose result has its first operand's type (the
    accumulator's, or the first vector's): `name` the generic call (its
    lane formula, which any target computes) or, with `instruction`, the
    AArch64 instruction the legalization pass makes of it. The subclasses
    say the lanes' formula."""
    name: str
    instruction: bool = False

    def result(self, args: tuple[Expr, ...]) -> DType:
        return dtype_of(args[0])

    def call(self, *args: Expr) -> Call:
        return Call(self.name, args, self.result(args))


@dataclass(frozen=True)
class WideningMla(AccumulatorCall):
    """`aot_mlal_lo(acc, x, w)` / `aot_mlal_hi`: an int32 vector acc of n
    lanes, int16 vectors x and w of 2n -> acc[k] + x[k + h] * w[k + h], h = 0
    (lo) or n (hi): the widening multiply-accumulate of one half of two
    int16 vectors (8 int8 channels widened once feed two accumulators).
    Generic, the lane formula; on AArch64 the legalization pass makes them
    `arm_smlal_lo` / `arm_smlal_hi` (SMLAL / SMLAL2, ACLE vmlal_s16 /
    vmlal_high_s16). Exact: the products are within int32 and the sum wraps
    as the accumulation does."""
    high: bool = False


@dataclass(frozen=True)
class PairedQuadDot(AccumulatorCall):
    """`aot_dot4p_lo(acc, q0, q1, w0, w1)` / `aot_dot4p_hi`: two quads' dot
    products (QuadDot's q and w, for consecutive input quads) into an int32
    x 4 accumulator of half sums: lane k takes, over both quads s, the
    products of bytes j = 2 (k % 2) and j + 1 of q_s with output channel
    u = k // 2 (lo) or 2 + k // 2 (hi) of w_s. `aot_addp` of the lo and hi
    accumulators then gives the 4 channels' sums. On AArch64 without
    dotprod, `arm_dot4p_lo` / `_hi`: SMULL, SMLAL (two products a lane in
    int16: w must have no -128), SADALP: 6 instructions per 32 products
    against arm_smull_dot4's 8."""
    high: bool = False


class SixteenDot(AccumulatorCall):
    """`aot_dot16p(acc, x, w)`: int32 x 4 acc, int8 x 16 x and w -> acc[k] +
    the products of bytes 2k, 2k + 1, 2k + 8 and 2k + 9 of x and w: 16
    input channels of one output channel into 4 partial sums, which
    `aot_addp` folds (four output channels' partials in two levels). On
    AArch64 without dotprod, `arm_dot16p`: SMULL of the low halves, SMLAL2
    of the high ones (two products a lane in int16: w must have no -128),
    SADALP: 3 instructions per 16 products, no broadcast (the pixel's 16
    channels are one load), against arm_smull_dot4's 4 and a DUP."""


class PairwiseAdd(AccumulatorCall):
    """`aot_addp(a, b)`: int32 x 4 twice -> (a0 + a1, a2 + a3, b0 + b1,
    b2 + b3), wrapping; `arm_addp` is AArch64's ADDP (vpaddq_s32)."""


def _by_name(*ops) -> dict:
    return {op.name: op for op in ops}


MLAL_LO = WideningMla("aot_mlal_lo")
MLAL_HI = WideningMla("aot_mlal_hi", high=True)
ARM_SMLAL_LO = WideningMla("arm_smlal_lo", instruction=True)
ARM_SMLAL_HI = WideningMla("arm_smlal_hi", instruction=True, high=True)
WIDENING_MLAS = _by_name(MLAL_LO, MLAL_HI, ARM_SMLAL_LO, ARM_SMLAL_HI)
DOT4P_LO = PairedQuadDot("aot_dot4p_lo")
DOT4P_HI = PairedQuadDot("aot_dot4p_hi", high=True)
ARM_DOT4P_LO = PairedQuadDot("arm_dot4p_lo", instruction=True)
ARM_DOT4P_HI = PairedQuadDot("arm_dot4p_hi", instruction=True, high=True)
PAIRED_QUAD_DOTS = _by_name(DOT4P_LO, DOT4P_HI, ARM_DOT4P_LO, ARM_DOT4P_HI)
DOT16P = SixteenDot("aot_dot16p")
ARM_DOT16P = SixteenDot("arm_dot16p", instruction=True)
SIXTEEN_DOTS = _by_name(DOT16P, ARM_DOT16P)
ADDP = PairwiseAdd("aot_addp")
ARM_ADDP = PairwiseAdd("arm_addp", instruction=True)
PAIRWISE_ADDS = _by_name(ADDP, ARM_ADDP)


def widening_mla(acc: Expr, x: Expr, w: Expr, high: bool) -> Call:
    """The aot_mlal_lo / aot_mlal_hi call (see WideningMla)."""
    return (MLAL_HI if high else MLAL_LO).call(acc, x, w)


def paired_quad_dot(acc: Expr, q0: Expr, q1: Expr, w0: Expr, w1: Expr, high: bool) -> Call:
    """The aot_dot4p_lo / _hi call (see PairedQuadDot)."""
    return (DOT4P_HI if high else DOT4P_LO).call(acc, q0, q1, w0, w1)


def sixteen_dot(acc: Expr, x: Expr, w: Expr) -> Call:
    """The aot_dot16p call (see SixteenDot)."""
    return DOT16P.call(acc, x, w)


def pairwise_add(a: Expr, b: Expr) -> Call:
    """The aot_addp call (see PairwiseAdd)."""
    return ADDP.call(a, b)


@dataclass(frozen=True)
class SaturatingNarrow:
    """`aot_qnarrow16(a, b, c, d)`: int32 x 4 four times -> int8 x 16, each
    lane clamped to [-128, 127], a's lanes first: four vectors of an int8
    epilogue joined for one clamp and one 16-byte store. `arm_qnarrow16`
    is AArch64's SQXTN, SQXTN2 (int32 -> int16, twice) and SQXTN, SQXTN2
    (int16 -> int8): exact, as int16 holds every int8 value."""
    name: str
    instruction: bool = False

    def result(self, args: tuple[Expr, ...]) -> DType:
        return DType("int8", 16)


QNARROW16 = SaturatingNarrow("aot_qnarrow16")
ARM_QNARROW16 = SaturatingNarrow("arm_qnarrow16", instruction=True)
SATURATING_NARROWS = _by_name(QNARROW16, ARM_QNARROW16)


def saturating_narrow(a: Expr, b: Expr, c: Expr, d: Expr) -> Call:
    """The aot_qnarrow16 call (see SaturatingNarrow)."""
    return Call(QNARROW16.name, (a, b, c, d), DType("int8", 16))


@dataclass(frozen=True)
class NeonFixedPoint:
    """The whole-vector `generic` helper on int32 x 4 as AArch64 NEON computes
    it, one or three instructions for the generic form's six to nine:
    `arm_sqrdmulh` (aot_rdhm) is SQRDMULH, (2ab + 2^31) >> 32 = floor((ab +
    2^30) / 2^31), saturating only where aot_rdhm's operands never are (both
    INT32_MIN); `arm_rdbpot` (aot_rdbpot) is gemmlowp's NEON form of it: add
    -1 to negative x when e > 0 (saturating), then SRSHL by -e (rounding half
    up, so ties of negative values go away from zero as RDBPOT's do). The
    legalization pass chooses them on AArch64; the C keeps the generic
    formula for a compiler without NEON. `isa` "mve": the same instructions
    of Helium (VQRDMULH, VQADD, VRSHL; ACLE spells them alike in
    <arm_mve.h>), on Arm targets with MVE. `arm_srshl` (aot_srshl, its shift
    operand already negative) is SRSHL alone."""
    name: str
    generic: str
    isa: str = "neon"


ARM_SQRDMULH = NeonFixedPoint("arm_sqrdmulh", "aot_rdhm")
ARM_RDBPOT = NeonFixedPoint("arm_rdbpot", "aot_rdbpot")
MVE_VQRDMULH = NeonFixedPoint("mve_vqrdmulh", "aot_rdhm", isa="mve")
MVE_RDBPOT = NeonFixedPoint("mve_rdbpot", "aot_rdbpot", isa="mve")
ARM_SRSHL = NeonFixedPoint("arm_srshl", "aot_srshl")
FIXED_POINT = _by_name(ARM_SQRDMULH, ARM_RDBPOT, MVE_VQRDMULH, MVE_RDBPOT, ARM_SRSHL)
# the calls check_neon knows (the QuadDot instructions are checked with aot_dot4's)
NEON_OPS = {**WIDENING_MLAS, **PAIRED_QUAD_DOTS, **SIXTEEN_DOTS, **PAIRWISE_ADDS,
            **SATURATING_NARROWS, **FIXED_POINT}


def check_neon(fn: str, args: tuple[Expr, ...], dtype: DType):
    """The op `fn` names (of NEON_OPS) if the call's operands are its own,
    else a clear error naming it."""
    kinds = [dtype_of(a) for a in args]
    i32x4 = DType("int32", 4)
    if fn in WIDENING_MLAS:
        if (len(args) != 3 or kinds[0].scalar != "int32" or kinds[0].lanes < 2
                or kinds[1:] != [DType("int16", 2 * kinds[0].lanes)] * 2 or dtype != kinds[0]):
            want = "(int32 x n, int16 x 2n, int16 x 2n) -> int32 x n"
            raise _mismatch(fn, want, kinds, dtype)
    elif fn in PAIRED_QUAD_DOTS:
        i8x16 = DType("int8", 16)
        if kinds != [i32x4, DType("int32"), DType("int32"), i8x16, i8x16] or dtype != i32x4:
            raise _mismatch(fn, "(int32 x 4, int32, int32, int8 x 16, int8 x 16) -> int32 x 4",
                            kinds, dtype)
    elif fn in SIXTEEN_DOTS:
        i8x16 = DType("int8", 16)
        if kinds != [i32x4, i8x16, i8x16] or dtype != i32x4:
            raise _mismatch(fn, "(int32 x 4, int8 x 16, int8 x 16) -> int32 x 4", kinds, dtype)
    elif fn in PAIRWISE_ADDS:
        if kinds != [i32x4] * 2 or dtype != i32x4:
            raise _mismatch(fn, "int32 x 4 twice", kinds, dtype)
    elif fn in SATURATING_NARROWS:
        if kinds != [i32x4] * 4 or dtype != DType("int8", 16):
            raise _mismatch(fn, "(int32 x 4 four times) -> int8 x 16", kinds, dtype)
    elif (len(args) != 2 or dtype not in (i32x4, DType("int32", 16))
            or any(k.scalar != "int32" or k.lanes not in (1, dtype.lanes) for k in kinds)
            or (dtype.lanes == 16 and FIXED_POINT[fn].isa != "neon")):
        raise _mismatch(fn, "int32 x 4 (NEON: or x 16) twice", kinds, dtype)
    return NEON_OPS[fn]


def _mismatch(fn: str, want: str, kinds: list[DType], dtype: DType) -> UnsupportedError:
    return UnsupportedError(f"{fn} takes {want}, got ({', '.join(map(str, kinds))}) -> {dtype}")


# ------------------------------------------------------------ legalization

_SDOT = ((4, ("dotprod",)),)
_NEON4 = ((4, ("neon",)),)
_AARCH64 = ("aarch64",)
# 16 lanes: four registers (an int8 epilogue's pixel of 16 channels joined)
_NEON4_16 = ((4, ("neon",)), (16, ("neon",)))

# Both read the quad's bytes as lanes of a broadcast register: little-endian.
DOT_ROWS: tuple[Instruction, ...] = (
    Instruction(QUAD_DOT.name, ARM_SDOT.name, _AARCH64, _SDOT, little_endian=True),
    Instruction(QUAD_DOT_S.name, ARM_SDOT.name, _AARCH64, _SDOT, little_endian=True),
    # Without dotprod: SMULL, SMULL2, ADDP, SADALP (the weights have no -128).
    Instruction(MLAL_LO.name, ARM_SMLAL_LO.name, _AARCH64, _NEON4, little_endian=True),
    Instruction(MLAL_HI.name, ARM_SMLAL_HI.name, _AARCH64, _NEON4, little_endian=True),
    Instruction(DOT4P_LO.name, ARM_DOT4P_LO.name, _AARCH64, _NEON4, little_endian=True),
    Instruction(DOT4P_HI.name, ARM_DOT4P_HI.name, _AARCH64, _NEON4, little_endian=True),
    Instruction(DOT16P.name, ARM_DOT16P.name, _AARCH64, _NEON4, little_endian=True),
    Instruction(ADDP.name, ARM_ADDP.name, _AARCH64, _NEON4),
    Instruction(QNARROW16.name, ARM_QNARROW16.name, _AARCH64, ((16, ("neon",)),),
                little_endian=True),
    Instruction(QUAD_DOT_S.name, ARM_SMULL_DOT4.name, _AARCH64, _NEON4, little_endian=True),
)
# Lane-wise, but only tested little-endian (the C casts vectors to NEON types).
FIXED_POINT_ROWS: tuple[Instruction, ...] = (
    Instruction(ARM_SQRDMULH.generic, ARM_SQRDMULH.name, _AARCH64, _NEON4_16,
                little_endian=True, only="int32"),
    Instruction(ARM_RDBPOT.generic, ARM_RDBPOT.name, _AARCH64, _NEON4_16,
                little_endian=True, only="int32"),
    Instruction(ARM_SRSHL.generic, ARM_SRSHL.name, _AARCH64, _NEON4_16,
                little_endian=True, only="int32"),
)
ROWS = DOT_ROWS + FIXED_POINT_ROWS


# ------------------------------------------------------------------------ C

_ISA = "defined(__aarch64__) && defined(__ARM_NEON)"
_INCLUDE = f"#if {_ISA}\n#include <arm_neon.h>\n#endif\n"


def c_quad_dot(op: QuadDot, rt: str) -> tuple[str, str, str]:
    """(what goes above the helper, the `#if` condition, the statements
    returning the result) of arm_sdot (ACLE's vdotq_s32) or arm_smull_dot4
    on an int32 x 4 of C type rt. The quad is broadcast as an int32, so
    lane k's bytes are its bytes in order on these little-endian targets."""
    if op.instruction == "sdot":
        return ("#if defined(__ARM_FEATURE_DOTPROD)\n#include <arm_neon.h>\n#endif\n",
                "defined(__ARM_FEATURE_DOTPROD)",
                f"    return ({rt})vdotq_s32((int32x4_t)acc, (int8x16_t)w, "
                "vreinterpretq_s8_s32(vdupq_n_s32(q)));\n")
    # int16 products of the quad's bytes and w's (SMULL, SMULL2), pairs
    # added in int16 (ADDP: w has no -128, so no overflow), then pairs
    # of those widened into the accumulator (SADALP). Written as the four
    # instructions: from ACLE's vmull_high_s8 of a broadcast, clang makes
    # SMULL of w's high half extracted by an EXT, and the extra registers
    # spill (vww int8's 128-deep convs on the A72: 351 -> 292 instructions
    # per step of 16 input channels x 4 pixels x 16 output channels; per
    # inference vww 3,875,891 -> 3,508,860, ic 5,067,380 -> 4,375,045).
    return (_INCLUDE, _ISA,
            "    const int8x16_t x = vreinterpretq_s8_s32(vdupq_n_s32(q));\n"
            "    int32x4_t r = (int32x4_t)acc;\n"
            "    int16x8_t lo, hi;\n"
            '    __asm__("smull %1.8h, %3.8b, %4.8b\\n\\tsmull2 %2.8h, %3.16b, %4.16b\\n\\t"\n'
            '            "addp %1.8h, %1.8h, %2.8h\\n\\tsadalp %0.4s, %1.8h"\n'
            '            : "+w"(r), "=&w"(lo), "=&w"(hi) : "w"(x), "w"((int8x16_t)w));\n'
            f"    return ({rt})r;\n")


def c_widening_mla(mod, d: DType, op: WideningMla) -> str:
    """Define aot_mlal_lo / _hi (the lane formula) or arm_smlal_lo / _hi
    (SMLAL / SMLAL2, the formula left for a compiler without NEON) on d in
    the module (c.py's _Module) and name it."""
    rt, ht = mod.vector(d), mod.vector(DType("int16", 2 * d.lanes))
    name = f"{op.name}_{rt[4:]}"
    at = f"k + {d.lanes}" if op.high else "k"
    formula = (f"    {rt} r = acc;\n    for (int k = 0; k < {d.lanes}; ++k) {{\n"
               f"        r[k] += (int32_t)x[{at}] * w[{at}];\n    }}\n    return r;\n")
    head = ""
    if op.instruction:
        head = _INCLUDE
        neon = ("vmlal_high_s16((int32x4_t)acc, (int16x8_t)x, (int16x8_t)w)" if op.high else
                "vmlal_s16((int32x4_t)acc, vget_low_s16((int16x8_t)x), "
                "vget_low_s16((int16x8_t)w))")
        formula = f"#if {_ISA}\n    return ({rt}){neon};\n#else\n{formula}#endif\n"
    return mod.helper(name, lambda: (
        f"{head}static inline {rt} {name}({rt} acc, {ht} x, {ht} w)\n{{\n{formula}}}"))


def _c_helper(mod, name: str, params: str, formula: str, neon: str | None,
              statements: bool = False, ret: DType = DType("int32", 4)) -> str:
    """A helper returning `neon` (an AArch64 NEON expression; with
    `statements`, statements returning the result) under #if, else
    computing `formula`'s statements; `formula` alone if neon is None;
    of type `ret`."""
    head = ""
    if neon is not None:
        head = _INCLUDE
        body = neon if statements else f"    return {neon};\n"
        formula = f"#if {_ISA}\n{body}#else\n{formula}#endif\n"
    rt = mod.vector(ret)
    return mod.helper(name, lambda: (
        f"{head}static inline {rt} {name}({params})\n{{\n{formula}}}"))


def c_paired_quad_dot(mod, op: PairedQuadDot) -> str:
    """Define aot_dot4p_lo / _hi (the lane formula) or arm_dot4p_lo / _hi
    (SMULL, SMLAL and SADALP, their 2 forms on the high halves) and name it."""
    rt, wt = mod.vector(DType("int32", 4)), mod.vector(DType("int8", 16))
    byte = "(((int32_t)({u} >> 8 * ({j}) & 255u) ^ 128) - 128)"
    terms = " + ".join(f"{byte.format(u=f'u{s}', j=j)} * w{s}[c + {j}]"
                       for s in (0, 1) for j in ("j", "j + 1"))
    formula = ("    const uint32_t u0 = (uint32_t)q0, u1 = (uint32_t)q1;\n"
               f"    {rt} r = acc;\n    for (int k = 0; k < 4; ++k) {{\n"
               "        const int j = 2 * (k % 2), c = 4 * (k / 2"
               f"{' + 2' if op.high else ''});\n"
               f"        r[k] += {terms};\n    }}\n    return r;\n")
    neon = None
    if op.instruction:
        # Written as the three instructions: from ACLE's vmull_high_s8 of a
        # broadcast quad clang makes SMULL of w's high half extracted by an
        # EXT (ad int8 on the A72: 99,850 -> 82,882 instructions per inference).
        h, b = ("2", "16b") if op.high else ("", "8b")
        neon = ("    const int8x16_t x0 = vreinterpretq_s8_s32(vdupq_n_s32(q0));\n"
                "    const int8x16_t x1 = vreinterpretq_s8_s32(vdupq_n_s32(q1));\n"
                "    int32x4_t r = (int32x4_t)acc;\n"
                "    int16x8_t p;\n"
                f'    __asm__("smull{h} %1.8h, %2.{b}, %3.{b}\\n\\tsmlal{h} %1.8h, %4.{b}, %5.{b}'
                '\\n\\t"\n'
                '            "sadalp %0.4s, %1.8h"\n'
                '            : "+w"(r), "=&w"(p) : "w"(x0), "w"((int8x16_t)w0), "w"(x1), '
                '"w"((int8x16_t)w1));\n'
                f"    return ({rt})r;\n")
    return _c_helper(mod, f"{op.name}_{rt[4:]}", f"{rt} acc, int32_t q0, int32_t q1, "
                     f"{wt} w0, {wt} w1", formula, neon, statements=True)


def c_sixteen_dot(mod, op: SixteenDot) -> str:
    """Define aot_dot16p (the lane formula) or arm_dot16p (SMULL, SMLAL2,
    SADALP) and name it."""
    rt, wt = mod.vector(DType("int32", 4)), mod.vector(DType("int8", 16))
    terms = " + ".join(f"(int32_t)x[{j}] * w[{j}]" for j in ("j", "j + 1", "j + 8", "j + 9"))
    formula = (f"    {rt} r = acc;\n    for (int k = 0; k < 4; ++k) {{\n"
               f"        const int j = 2 * k;\n        r[k] += {terms};\n    }}\n"
               "    return r;\n")
    neon = None
    if op.instruction:
        # Written as the instructions: clang 14 turns vmull_s8 / vmlal_high_s8
        # into SMULL of halves taken out by EXT, as with arm_dot4p.
        neon = ("    int32x4_t r = (int32x4_t)acc;\n"
                "    int16x8_t p;\n"
                '    __asm__("smull %1.8h, %2.8b, %3.8b\\n\\tsmlal2 %1.8h, %2.16b, %3.16b\\n\\t"\n'
                '            "sadalp %0.4s, %1.8h"\n'
                '            : "+w"(r), "=&w"(p) : "w"((int8x16_t)x), "w"((int8x16_t)w));\n'
                f"    return ({rt})r;\n")
    return _c_helper(mod, f"{op.name}_{rt[4:]}", f"{rt} acc, {wt} x, {wt} w", formula, neon,
                     statements=True)


def c_pairwise_add(mod, op: PairwiseAdd) -> str:
    """Define aot_addp (the formula) or arm_addp (ADDP) and name it."""
    rt = mod.vector(DType("int32", 4))
    formula = (f"    {rt} r = {{a[0] + a[1], a[2] + a[3], b[0] + b[1], b[2] + b[3]}};\n"
               "    return r;\n")
    neon = f"({rt})vpaddq_s32((int32x4_t)a, (int32x4_t)b)" if op.instruction else None
    return _c_helper(mod, f"{op.name}_{rt[4:]}", f"{rt} a, {rt} b", formula, neon)


def c_saturating_narrow(mod, op: SaturatingNarrow) -> str:
    """Define aot_qnarrow16 (the formula) or arm_qnarrow16 (SQXTN, SQXTN2
    twice) and name it."""
    it, bt = mod.vector(DType("int32", 4)), mod.vector(DType("int8", 16))
    lanes = ", ".join(f"(signed char)(v[{i // 4}][{i % 4}] < -128 ? -128 : "
                      f"v[{i // 4}][{i % 4}] > 127 ? 127 : v[{i // 4}][{i % 4}])"
                      for i in range(16))
    formula = (f"    const {it} v[4] = {{a, b, c, d}};\n"
               f"    {bt} r = {{{lanes}}};\n"
               "    return r;\n")
    neon = (f"({bt})vqmovn_high_s16(vqmovn_s16(vqmovn_high_s32(vqmovn_s32((int32x4_t)a), "
            "(int32x4_t)b)), vqmovn_high_s32(vqmovn_s32((int32x4_t)c), (int32x4_t)d))"
            if op.instruction else None)
    return _c_helper(mod, f"{op.name}_{bt[4:]}", f"{it} a, {it} b, {it} c, {it} d", formula,
                     neon, ret=DType("int8", 16))


def c_fixed_point(mod, op: NeonFixedPoint, generic: str, lanes: int = 4,
                  generic4: str = "") -> str:
    """Define arm_sqrdmulh / arm_rdbpot or mve_vqrdmulh / mve_rdbpot: the
    NEON or Helium instructions (ACLE names them alike), `generic` (the
    whole-vector helper's C name, already defined) for a compiler without
    them. 16 lanes (NEON): the 4 lanes' instructions on each quarter
    (generic4: the 4-lane helper's C name)."""
    if lanes == 16:
        return _c_fixed_point16(mod, op, generic, c_fixed_point(mod, op, generic4))
    t = mod.vector(DType("int32", 4))
    name = f"{op.name}_{t[4:]}"
    if op.generic == "aot_rdhm":
        neon = f"    return ({t})vqrdmulhq_s32((int32x4_t)a, (int32x4_t)b);\n"
    elif op.generic == "aot_srshl":
        neon = f"    return ({t})vrshlq_s32((int32x4_t)a, (int32x4_t)b);\n"
    else:   # b: the exponent; -1 added to negative a where it is above 0
        neon = ("    const int32x4_t x = (int32x4_t)a;\n"
                "    const int32x4_t shift = vnegq_s32((int32x4_t)b);\n"
                "    const int32x4_t fixup = vshrq_n_s32(vandq_s32(x, shift), 31);\n"
                f"    return ({t})vrshlq_s32(vqaddq_s32(x, fixup), shift);\n")
    isa, header = (("defined(__ARM_FEATURE_MVE)", "arm_mve.h") if op.isa == "mve" else
                   (_ISA, "arm_neon.h"))
    return mod.helper(name, lambda: (
        f"#if {isa}\n#include <{header}>\n#endif\n"
        f"static inline {t} {name}({t} a, {t} b)\n{{\n#if {isa}\n{neon}#else\n"
        f"    return {generic}(a, b);\n#endif\n}}"))


def _c_fixed_point16(mod, op: NeonFixedPoint, generic: str, four: str) -> str:
    """op on int32 x 16: `four` (the 4-lane instruction's helper) on each
    quarter, `generic` without NEON."""
    t, q = mod.vector(DType("int32", 16)), mod.vector(DType("int32", 4))
    name = f"{op.name}_{t[4:]}"

    def quarter(v: str, k: int) -> str:
        return f"({q}){{{', '.join(f'{v}[{4 * k + j}]' for j in range(4))}}}"
    parts = "".join(f"    const {q} r{k} = {four}({quarter('a', k)}, {quarter('b', k)});\n"
                    for k in range(4))
    joined = ", ".join(f"r{k}[{j}]" for k in range(4) for j in range(4))
    return mod.helper(name, lambda: (
        f"static inline {t} {name}({t} a, {t} b)\n{{\n#if {_ISA}\n{parts}"
        f"    return ({t}){{{joined}}};\n#else\n    return {generic}(a, b);\n#endif\n}}"))


# --------------------------------------------------------------------- LLVM

def llvm_sdot(b: ir.IRBuilder, module: ir.Module, acc, x, w) -> ir.Value:
    """arm_sdot of the broadcast quad x (seen as bytes) and the weights w.
    The broadcast goes last: the backend makes SDOT by element only of a
    lane broadcast in that place (ic int8 on the A76: a DUP per four SDOTs
    of 16-deep convs before, 1,643,620 -> 1,454,865 instructions per inference)."""
    n = acc.type.count
    name = f"llvm.aarch64.neon.sdot.v{n}i32.v{4 * n}i8"
    callee = module.globals.get(name) or ir.Function(
        module, ir.FunctionType(acc.type, [acc.type, w.type, w.type]), name)
    return b.call(callee, [acc, w, x])


def llvm_smull_dot4(b: ir.IRBuilder, module: ir.Module, acc, x, w) -> ir.Value:
    """arm_smull_dot4 on the broadcast quad x: SMULL / SMULL2 of the
    halves, ADDP of the int16 products, SADALP into acc."""
    i32 = ir.IntType(32)
    v8i16 = ir.VectorType(ir.IntType(16), 8)

    def half(v, h: int):
        return b.shuffle_vector(v, ir.Constant(v.type, ir.Undefined), ir.Constant(
            ir.VectorType(i32, 8), list(range(8 * h, 8 * h + 8))))
    lo, hi = (_call(b, module, "llvm.aarch64.neon.smull.v8i16", v8i16, half(x, h), half(w, h))
              for h in (0, 1))
    pairs = _call(b, module, "llvm.aarch64.neon.addp.v8i16", v8i16, lo, hi)
    return b.add(acc, _call(b, module, "llvm.aarch64.neon.saddlp.v4i32.v8i16", acc.type, pairs))


def _call(b: ir.IRBuilder, module: ir.Module, name: str, ret, *operands) -> ir.Value:
    callee = module.globals.get(name) or ir.Function(
        module, ir.FunctionType(ret, [o.type for o in operands]), name)
    return b.call(callee, list(operands))


def llvm_emit(fb, op, args: list) -> ir.Value:
    """A call of op (an AccumulatorCall, SaturatingNarrow or NeonFixedPoint,
    its int32 operands already broadcast to 4 lanes) on
    LLVM values (fb: llvm.py's function builder, its IRBuilder `b`,
    `module` and `splat`)."""
    if isinstance(op, WideningMla):
        return _widening_mla(fb.b, op, *args)
    if isinstance(op, PairedQuadDot):
        return _paired_quad_dot(fb, op, *args)
    if isinstance(op, SixteenDot):
        return _sixteen_dot(fb, op, *args)
    if isinstance(op, PairwiseAdd):
        return _pairwise_add(fb.b, *args)
    if isinstance(op, SaturatingNarrow):
        return _saturating_narrow(fb.b, *args)
    return _fixed_point(fb.b, fb.module, op, *args)


def _widening_mla(b: ir.IRBuilder, op: WideningMla, acc, x, w):
    """aot_mlal_lo / _hi and arm_smlal_lo / _hi alike: the half's lanes
    extended, multiplied and added (AArch64's instruction selection
    makes SMLAL / SMLAL2 of it)."""
    n = acc.type.count
    at = ir.Constant(ir.VectorType(ir.IntType(32), n),
                     list(range(n, 2 * n) if op.high else range(n)))

    def half(v):
        return b.sext(b.shuffle_vector(v, ir.Constant(v.type, ir.Undefined), at), acc.type)
    return b.add(acc, b.mul(half(x), half(w)))


def _shuffle(b: ir.IRBuilder, v, lanes: list[int]):
    return b.shuffle_vector(v, ir.Constant(v.type, ir.Undefined), ir.Constant(
        ir.VectorType(ir.IntType(32), len(lanes)), lanes))


def _paired_quad_dot(fb, op: PairedQuadDot, acc, q0, q1, w0, w1):
    """arm_dot4p_lo / _hi: SMULL of the half, SMLAL of the other quad's,
    SADALP; aot_dot4p_lo / _hi: the same sums in int32."""
    b, module = fb.b, fb.module
    i32 = ir.IntType(32)
    half = list(range(8, 16) if op.high else range(8))
    xs = [_shuffle(b, b.bitcast(fb.splat(q, 4), w0.type), half) for q in (q0, q1)]
    ws = [_shuffle(b, w, half) for w in (w0, w1)]
    if op.instruction:
        v8i16 = ir.VectorType(ir.IntType(16), 8)
        smull = module.globals.get("llvm.aarch64.neon.smull.v8i16") or ir.Function(
            module, ir.FunctionType(v8i16, [xs[0].type] * 2), "llvm.aarch64.neon.smull.v8i16")
        saddlp = module.globals.get("llvm.aarch64.neon.saddlp.v4i32.v8i16") or \
            ir.Function(module, ir.FunctionType(acc.type, [v8i16]),
                        "llvm.aarch64.neon.saddlp.v4i32.v8i16")
        pairs = b.add(*(b.call(smull, [x, w]) for x, w in zip(xs, ws)))
        return b.add(acc, b.call(saddlp, [pairs]))
    v8i32 = ir.VectorType(i32, 8)
    prod = b.add(*(b.mul(b.sext(x, v8i32), b.sext(w, v8i32)) for x, w in zip(xs, ws)))
    return b.add(acc, b.add(_shuffle(b, prod, [0, 2, 4, 6]), _shuffle(b, prod, [1, 3, 5, 7])))


def _sixteen_dot(fb, op: SixteenDot, acc, x, w):
    """arm_dot16p: SMULL of the low halves, SMLAL2 of the high ones
    (their int16 sums), SADALP; aot_dot16p: the same sums in int32."""
    b, module = fb.b, fb.module
    halves = [(_shuffle(b, x, list(range(h, h + 8))), _shuffle(b, w, list(range(h, h + 8))))
              for h in (0, 8)]
    if op.instruction:
        v8i16 = ir.VectorType(ir.IntType(16), 8)
        pairs = b.add(*(_call(b, module, "llvm.aarch64.neon.smull.v8i16", v8i16, xh, wh)
                        for xh, wh in halves))
        return b.add(acc, _call(b, module, "llvm.aarch64.neon.saddlp.v4i32.v8i16", acc.type,
                                pairs))
    v8i32 = ir.VectorType(ir.IntType(32), 8)
    prod = b.add(*(b.mul(b.sext(xh, v8i32), b.sext(wh, v8i32)) for xh, wh in halves))
    return b.add(acc, b.add(_shuffle(b, prod, [0, 2, 4, 6]), _shuffle(b, prod, [1, 3, 5, 7])))


def _pairwise_add(b: ir.IRBuilder, x, y):
    """aot_addp / arm_addp: lanes 0, 2 of x and y plus lanes 1, 3 (ADDP)."""
    both = b.shuffle_vector(x, y, ir.Constant(ir.VectorType(ir.IntType(32), 8), list(range(8))))
    return b.add(_shuffle(b, both, [0, 2, 4, 6]), _shuffle(b, both, [1, 3, 5, 7]))


def _saturating_narrow(b: ir.IRBuilder, *vs):
    """aot_qnarrow16 / arm_qnarrow16: the four vectors joined, clamped to
    [-128, 127] and truncated (AArch64's instruction selection makes SQXTN
    and SQXTN2 of the clamp and truncation)."""
    i32 = ir.IntType(32)
    v8 = ir.VectorType(i32, 8)
    lo = b.shuffle_vector(vs[0], vs[1], ir.Constant(v8, list(range(8))))
    hi = b.shuffle_vector(vs[2], vs[3], ir.Constant(v8, list(range(8))))
    v16 = ir.VectorType(i32, 16)
    x = b.shuffle_vector(lo, hi, ir.Constant(v16, list(range(16))))
    x = b.select(b.icmp_signed("<", x, ir.Constant(v16, [-128] * 16)),
                 ir.Constant(v16, [-128] * 16), x)
    x = b.select(b.icmp_signed(">", x, ir.Constant(v16, [127] * 16)),
                 ir.Constant(v16, [127] * 16), x)
    return b.trunc(x, ir.VectorType(ir.IntType(8), 16))


def _fixed_point(b: ir.IRBuilder, module: ir.Module, op: NeonFixedPoint, x, e):
    """op on 4 lanes, or on each quarter of 16 (NEON)."""
    if x.type.count == 4:
        return _fixed_point4(b, module, op, x, e)
    parts = [_fixed_point4(b, module, op, _shuffle(b, x, list(range(k, k + 4))),
                           _shuffle(b, e, list(range(k, k + 4)))) for k in (0, 4, 8, 12)]
    i32 = ir.IntType(32)
    lo = b.shuffle_vector(parts[0], parts[1], ir.Constant(ir.VectorType(i32, 8), list(range(8))))
    hi = b.shuffle_vector(parts[2], parts[3], ir.Constant(ir.VectorType(i32, 8), list(range(8))))
    return b.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(i32, 16), list(range(16))))


def _fixed_point4(b: ir.IRBuilder, module: ir.Module, op: NeonFixedPoint, x, e):
    """arm_sqrdmulh: SQRDMULH; arm_rdbpot: -1 added (saturating) to
    negative x where the exponent e is above 0, then SRSHL by -e; the mve_
    forms Helium's VQRDMULH, VQADD and VRSHL."""
    def call(name: str, *operands):
        callee = module.globals.get(name) or ir.Function(
            module, ir.FunctionType(x.type, [x.type] * len(operands)), name)
        return b.call(callee, list(operands))
    mve = op.isa == "mve"
    if op.generic == "aot_rdhm":
        name = "llvm.arm.mve.vqrdmulh.v4i32" if mve else "llvm.aarch64.neon.sqrdmulh.v4i32"
        return call(name, x, e)
    if op.generic == "aot_srshl":
        return call("llvm.aarch64.neon.srshl.v4i32", x, e)
    shift = b.neg(e)
    fixup = b.ashr(b.and_(x, shift), ir.Constant(x.type, [31] * 4))
    fixed = call("llvm.sadd.sat.v4i32", x, fixup)
    if not mve:
        return call("llvm.aarch64.neon.srshl.v4i32", fixed, shift)
    # VRSHL: llvm.arm.mve.vshl.vector (value, shifts, saturate 0, round 1, unsigned 0)
    i32 = ir.IntType(32)
    name = "llvm.arm.mve.vshl.vector.v4i32.v4i32"
    callee = module.globals.get(name) or ir.Function(
        module, ir.FunctionType(x.type, [x.type, x.type, i32, i32, i32]), name)
    return b.call(callee, [fixed, shift, ir.Constant(i32, 0), ir.Constant(i32, 1),
                           ir.Constant(i32, 0)])


__all__ = ["ADDP", "ARM_ADDP", "ARM_DOT16P", "ARM_DOT4P_HI", "ARM_DOT4P_LO", "ARM_RDBPOT",
           "ARM_SDOT", "ARM_SMLAL_HI", "ARM_SMLAL_LO", "ARM_SMULL_DOT4", "ARM_SQRDMULH",
           "ARM_SRSHL", "AccumulatorCall", "DOT16P", "DOT4P_HI", "DOT4P_LO", "DOT_ROWS",
           "FIXED_POINT", "FIXED_POINT_ROWS", "MLAL_HI", "MLAL_LO", "MVE_RDBPOT", "MVE_VQRDMULH",
           "NEON_OPS", "NeonFixedPoint", "PAIRED_QUAD_DOTS", "PAIRWISE_ADDS", "PairedQuadDot",
           "PairwiseAdd", "ROWS", "SATURATING_NARROWS", "SIXTEEN_DOTS", "SaturatingNarrow",
           "SixteenDot", "WIDENING_MLAS", "WideningMla", "c_fixed_point", "c_paired_quad_dot",
           "c_pairwise_add", "c_quad_dot", "c_saturating_narrow", "c_sixteen_dot", "c_widening_mla",
           "check_neon", "llvm_emit", "llvm_sdot", "llvm_smull_dot4", "paired_quad_dot",
           "pairwise_add", "saturating_narrow", "sixteen_dot", "widening_mla"]

"""The functions a TIR `Call` may name, shared by both code generators.

Two kinds:

- **libm functions** by their C name for the argument type (`expf` on
  float32, `exp` on float64). Where LLVM has an intrinsic with the same
  semantics the LLVM backend uses it (it may still become the libm call).
- **runtime helpers** (`aot_srdhm`, `aot_rdbpot`, ...): the fixed-point
  primitives of TFLite's integer kernels (see TFLITE_INT8.md). Each is
  defined once here, in TIR, as a few named intermediate values and a
  result; the C backend prints that as a `static inline` function, the LLVM
  backend expands it in place. One definition, so the two cannot disagree.
- **lane-crossing operations**: the byte packs and lane reads here
  (`aot_pack2`, `aot_pack4`, `aot_lane`), the dot products of dots.py, and
  each instruction family's calls (arm_dsp.py, arm_mve.py, neon.py, x86.py)
  with the target instructions the legalization pass
  (aot/lower/tir_passes/legalize.py) makes of generic calls (`aot_pack2_bytes`
  and `aot_pack4_bytes` here, on every little-endian target): the backends
  print each as it is named, choosing nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from aot.isa.arm_dsp import DSP_OPS, check_dsp
from aot.isa.arm_mve import MVE_OPS, check_mve
from aot.isa.dots import (PACKED_PAIR_DOT, PAIR_DOT, QUAD_DOT, QUAD_DOT_S, QUAD_DOT_U, PairDot,
                          QuadDot, check_pair_dot, check_quad_dot)
from aot.isa.instruction import Instruction
from aot.isa.neon import (ARM_SDOT, ARM_SMULL_DOT4, NEON_OPS, PAIRED_QUAD_DOTS,
                          SATURATING_NARROWS, SIXTEEN_DOTS, WIDENING_MLAS)
from aot.isa.neon import AccumulatorCall, NeonFixedPoint, SaturatingNarrow, check_neon
from aot.isa.half import HALF_OPS, HalfOp, check_half_op
from aot.isa.rvv import RVV_DOT2, RVV_DOT2_PACKED
from aot.isa.x86 import X86_FMADD, X86_PMADDWD, X86_PMADDWD_PACKED, X86_PMULDQ_RDHM, X86_VPDPBUSD
from aot.isa.x86 import Fmadd, Pmuldq, check_fmadd, check_pmuldq
from aot.errors import UnsupportedError
from aot.ir.tir import (INT32, INT64, Bin, Broadcast, Call, Cast, Const, DType, Expr, Select,
                        Unary, Var, dtype_of)

# ------------------------------------------------------------------------ libm

# name (float32 spelling) -> (number of args, LLVM intrinsic or None)
_LIBM: dict[str, tuple[int, str | None]] = {
    "expf": (1, "llvm.exp"), "exp2f": (1, "llvm.exp2"), "expm1f": (1, None),
    "logf": (1, "llvm.log"), "log2f": (1, "llvm.log2"), "log10f": (1, "llvm.log10"),
    "log1pf": (1, None), "sqrtf": (1, "llvm.sqrt"), "cbrtf": (1, None),
    "sinf": (1, "llvm.sin"), "cosf": (1, "llvm.cos"), "tanf": (1, None),
    "asinf": (1, None), "acosf": (1, None), "atanf": (1, None),
    "sinhf": (1, None), "coshf": (1, None), "tanhf": (1, None),
    "asinhf": (1, None), "acoshf": (1, None), "atanhf": (1, None),
    "erff": (1, None), "erfcf": (1, None), "tgammaf": (1, None), "lgammaf": (1, None),
    "fabsf": (1, "llvm.fabs"), "floorf": (1, "llvm.floor"), "ceilf": (1, "llvm.ceil"),
    "roundf": (1, "llvm.round"),          # half away from zero
    "truncf": (1, "llvm.trunc"),
    "rintf": (1, "llvm.rint"), "nearbyintf": (1, "llvm.nearbyint"),   # half to even
    "powf": (2, "llvm.pow"), "atan2f": (2, None), "fmodf": (2, None), "hypotf": (2, None),
    "fminf": (2, "llvm.minnum"), "fmaxf": (2, "llvm.maxnum"), "copysignf": (2, "llvm.copysign"),
    "fmaf": (3, "llvm.fma"),
}


@dataclass(frozen=True)
class LibmFn:
    c_name: str            # spelling for the argument type
    arity: int
    llvm: str | None       # LLVM intrinsic base name


def libm(fn: str, dtype: DType) -> LibmFn | None:
    """The libm function `fn` names for arguments of `dtype`, or None when
    `fn` is not a libm name. Both `expf` and `exp` are accepted."""
    base = fn if fn in _LIBM else fn + "f" if fn + "f" in _LIBM else None
    if base is None:
        return None
    arity, intrinsic = _LIBM[base]
    if dtype.scalar == "float32":
        return LibmFn(base, arity, intrinsic)
    if dtype.scalar == "float64":
        return LibmFn(base[:-1], arity, intrinsic)
    raise UnsupportedError(f"math function {fn} on {dtype}: only float32/float64")


# ------------------------------------------------------------------ runtime helpers

@dataclass(frozen=True)
class Helper:
    """`name(params) = result` after the `lets` (each a named value)."""
    name: str
    params: tuple[Var, ...]
    lets: tuple[tuple[Var, Expr], ...]
    result: Expr
    doc: str

    @property
    def dtype(self) -> DType:
        return dtype_of(self.result)


def _i32(v: int) -> Const:
    return Const(v, INT32)


def _i64(v: int) -> Const:
    return Const(v, INT64)


def _srdhm() -> Helper:
    a, b = Var("a"), Var("b")
    ab = Var("ab", INT64)
    high = Cast(INT32, Bin(">>", Bin("+", ab, _i64(1 << 30)), _i64(31)))
    overflow = Bin("and", Bin("==", a, b), Bin("==", a, _i32(-2**31)))
    return Helper("aot_srdhm", (a, b),
                  ((ab, Bin("*", Cast(INT64, a), Cast(INT64, b))),),
                  Select(overflow, _i32(2**31 - 1), high),
                  "gemmlowp SaturatingRoundingDoublingHighMul: floor((a*b + 2^30) / 2^31), "
                  "saturated")


def _rdbpot() -> Helper:
    x, e = Var("x"), Var("e")
    mask, rem, threshold = Var("mask"), Var("remainder"), Var("threshold")
    return Helper("aot_rdbpot", (x, e), (
        (mask, Cast(INT32, Bin("-", Bin("<<", _i64(1), Cast(INT64, e)), _i64(1)))),
        (rem, Bin("&", x, mask)),
        (threshold, Bin("+", Bin(">>", mask, _i32(1)), Cast(INT32, Bin("<", x, _i32(0))))),
    ), Bin("+", Bin(">>", x, e), Cast(INT32, Bin(">", rem, threshold))),
        "gemmlowp RoundingDivideByPOT: x / 2^e rounded half away from zero, 0 <= e <= 31")


def _srshl_formula(x: Expr, s: Expr, lanes: int) -> Expr:
    """x rounded-shifted right by e = -s (0 <= e <= 31): floor((x + 2^(e-1)) /
    2^e), x for e = 0, as SRSHL by s computes it (no intermediate overflow).
    That is (x >> e) plus bit e-1 of x (the low e bits reach 2^e with the
    half added exactly when that bit is set), the bit taken in uint32 as
    ((x & 2^(e-1)) << 1) >> e, 0 for e = 0 with no shift by -1."""
    i32, u32 = DType("int32", lanes), DType("uint32", lanes)
    e = Cast(u32, Unary("neg", s))
    half = Bin(">>", Bin("<<", _splat(1, u32), e), _splat(1, u32))
    bit = Bin(">>", Bin("<<", Bin("&", Cast(u32, x), half), _splat(1, u32)), e)
    return Bin("+", Bin(">>", x, Cast(i32, e)), Cast(i32, bit))


def _srshl() -> Helper:
    x, s = Var("x"), Var("s")
    return Helper("aot_srshl", (x, s), (), _srshl_formula(x, s, 1),
                  "Rounding shift right by -s, -31 <= s <= 0: floor((x + 2^(-s-1)) / 2^-s) "
                  "(ties up), AArch64's SRSHL by a non-positive shift")


def _satshl() -> Helper:
    x, k = Var("x"), Var("k")
    limit = Var("limit")
    return Helper("aot_satshl", (x, k), (
        (limit, Cast(INT32, Bin("-", Bin("<<", _i64(1), Bin("-", _i64(31), Cast(INT64, k))),
                                _i64(1)))),
    ), Select(Bin(">", x, limit), _i32(2**31 - 1),
              Select(Bin("<", x, Unary("neg", limit)), _i32(-2**31),
                     # A multiply, not <<: shifting a negative value is undefined in C.
                     Cast(INT32, Bin("*", Cast(INT64, x),
                                     Bin("<<", _i64(1), Cast(INT64, k)))))),
        "gemmlowp SaturatingRoundingMultiplyByPOT: x * 2^k saturated to int32, 0 < k < 31")


def _mbqm() -> Helper:
    x, m, e = Var("x"), Var("multiplier"), Var("shift")
    left, right = Var("left"), Var("right")
    zero = _i32(0)
    return Helper("aot_mbqm", (x, m, e), (
        (left, Select(Bin(">", e, zero), e, zero)),
        (right, Select(Bin(">", e, zero), zero, Unary("neg", e))),
    # x * 2^left wraps in int32 as TFLite's unsaturated int32 shift does; the
    # product is taken in int64 and truncated, since int32 overflow is undefined in C.
    ), Call("aot_rdbpot", (Call("aot_srdhm", (Cast(INT32, Bin("*", Cast(INT64, x),
                                                               Bin("<<", _i64(1), Cast(INT64, left)))),
                                              m), INT32),
                           right), INT32),
        "TFLite MultiplyByQuantizedMultiplier: RDBPOT(SRDHM(x * 2^max(e,0), M), max(-e,0))")


def _rdhm_formula(a: Expr, b: Expr, lanes: int) -> Expr:
    i32, i64 = DType("int32", lanes), DType("int64", lanes)
    prod = Bin("*", Cast(i64, a), Cast(i64, b))
    return Cast(i32, Bin(">>", Bin("+", prod, _splat(1 << 30, i64)), _splat(31, i64)))


def _splat(v: int, d: DType) -> Expr:
    c = Const(v, d.with_lanes(1))
    return c if d.lanes == 1 else Broadcast(c, d.lanes)


def _rdhm() -> Helper:
    a, b = Var("a"), Var("b")
    return Helper("aot_rdhm", (a, b), (), _rdhm_formula(a, b, 1),
                  "SaturatingRoundingDoublingHighMul without the saturation test: "
                  "floor((a*b + 2^30) / 2^31), for operands that are never both INT32_MIN")


# float32 sigmoid(x) - 1/2 = x P(x^2) / Q(x^2) on |x| <= 18 (beyond it
# sigmoid rounds to 0 or 1 within 2e-8): a rational fit of ours (least
# squares with Sanathanan-Koerner reweighting; 1.3e-9 in float64, at most
# 1.9e-7 from the exact value in float32, where 1 / (1 + expf(-x)) is within
# 1.2e-7). Only + * / and a clamp, so it vectorizes: through expf, a libm call
# per lane, a YOLO net's SiLU epilogues took 1.7 ns per element on AVX-512.
# (ONNX Runtime's MLAS computes its logistic as a rational function too.)
SIGMOID_CLAMP = 18.0
SIGMOID_P = (0.25, 8.61842018e-03, 6.27157000e-05, 1.23859790e-07, 5.00028795e-11)
SIGMOID_Q = (1.0, 1.17807010e-01, 1.73478158e-03, 6.58924197e-06, 6.35524474e-09,
             7.29083303e-13)


def _horner(coeffs: tuple[float, ...], t: Expr, d: DType) -> Expr:
    """sum(coeffs[i] t^i) in Horner's order, in `d`."""
    r = _splat(coeffs[-1], d)
    for c in coeffs[-2::-1]:
        r = Bin("+", Bin("*", r, t), _splat(c, d))
    return r


def _sigmoid(lanes: int) -> Helper:
    d = DType("float32", lanes)

    def k(v: float) -> Expr:
        return _splat(v, d)
    x, c, t = Var("x", d), Var("c", d), Var("t", d)
    # max(lo, x), min(hi, .): the C and LLVM min/max pick their second
    # operand when the first is NaN, so a NaN x stays NaN; +-inf give 1 and 0.
    return Helper("aot_sigmoid", (x,), (
        (c, Bin("min", k(SIGMOID_CLAMP), Bin("max", k(-SIGMOID_CLAMP), x))),
        (t, Bin("*", c, c)),
    ), Bin("+", k(0.5), Bin("/", Bin("*", c, _horner(SIGMOID_P, t, d)), _horner(SIGMOID_Q, t, d))),
        "float32 1 / (1 + e^-x) as 1/2 + x P(x^2) / Q(x^2), x clamped to [-18, 18] "
        "(within 1.9e-7)")


def _tanh(lanes: int) -> Helper:
    """float32 tanh(x) = 2 sigmoid(2x) - 1 = 2 c P(c^2) / Q(c^2) with c = 2x
    clamped to [-18, 18], _sigmoid's fit: an odd function whose ratio at 0
    is exactly 1/4, so the error stays relative near 0 as well (measured
    against float64 tanh: at most 2.8e-7 absolute and relative)."""
    d = DType("float32", lanes)

    def k(v: float) -> Expr:
        return _splat(v, d)
    x, c, t = Var("x", d), Var("c", d), Var("t", d)
    return Helper("aot_tanh", (x,), (
        # a NaN x stays NaN, +-inf give +-1 (see _sigmoid)
        (c, Bin("min", k(SIGMOID_CLAMP), Bin("max", k(-SIGMOID_CLAMP), Bin("*", k(2.0), x)))),
        (t, Bin("*", c, c)),
    ), Bin("/", Bin("*", Bin("*", k(2.0), c), _horner(SIGMOID_P, t, d)), _horner(SIGMOID_Q, t, d)),
        "float32 tanh(x) as 2 c P(c^2) / Q(c^2), c = 2x clamped to [-18, 18] (within 2.8e-7)")


def _exp(lanes: int) -> Helper:
    """float32 e^x as 2^n e^r, n = round(x / ln 2), |r| <= ln 2 / 2: r's
    Taylor polynomial to degree 7 (its truncation 2.2e-9 relative) times 2^n
    as two powers of two built in the exponent bits (2^n alone would leave
    float32 below n = -126 and above 127; the product rounds to the
    subnormals, 0 or inf as e^x does). No selects and no float -> int
    conversion: the integer n is read from the rounding sum's bits, so a NaN
    x flows through as NaN (+-inf give inf and 0)."""
    d, u32 = DType("float32", lanes), DType("uint32", lanes)

    def k(v: float) -> Expr:
        return _splat(v, d)
    x, c, n, r, h = (Var(v, d) for v in ("x", "c", "n", "r", "h"))
    poly = k(1 / 5040)
    for f in (720, 120, 24, 6, 2, 1, 1):
        poly = Bin("+", Bin("*", poly, r), k(1 / f))
    # 1.5 * 2^23 added rounds to an integer m (|m| < 2^22), held in the low
    # mantissa bits: bits(m + magic) = bits(magic) + m.
    magic = k(12582912.0)

    def power_of_two(m: Expr) -> Expr:
        """2^m for an integer-valued m in [-126, 127]."""
        biased = Bin("+", Cast(u32, Bin("+", m, magic), bits=True),
                     _splat((127 - 0x4B400000) % 2**32, u32))
        return Cast(d, Bin("<<", biased, _splat(23, u32)), bits=True)
    return Helper("aot_exp", (x,), (
        # max(lo, x), min(hi, .): a NaN x stays NaN (see _sigmoid); from -104
        # down e^x rounds to 0, from 89 up to inf
        (c, Bin("min", k(89.0), Bin("max", k(-104.0), x))),
        (n, Bin("-", Bin("+", Bin("*", c, k(1.4426950408889634)), magic), magic)),
        # ln 2 in two parts: n times the first is exact
        (r, Bin("-", Bin("-", c, Bin("*", n, k(0.693145751953125))),
                Bin("*", n, k(1.4286068203094173e-06)))),
        (h, Bin("-", Bin("+", Bin("*", n, k(0.5)), magic), magic)),     # n = h + (n - h)
    ), Bin("*", Bin("*", poly, power_of_two(h)), power_of_two(Bin("-", n, h))),
        "float32 e^x as 2^round(x / ln 2) times a degree-7 polynomial (within a few ulp of "
        "expf)")


HELPERS: dict[str, Helper] = {h.name: h for h in (_srdhm(), _rdbpot(), _srshl(), _satshl(),
                                                  _mbqm(), _rdhm(), _sigmoid(1), _tanh(1),
                                                  _exp(1))}


def helper(fn: str) -> Helper | None:
    return HELPERS.get(fn)


# ------------------------------------------------------------- whole-vector forms
# A helper called on vectors is otherwise applied lane by lane; these are
# the same arithmetic on whole int32 vectors (no int64 lanes, which AVX2
# lacks shifts and multiplies for), so requantization stays vectorized.

@lru_cache(maxsize=None)
def vector_helper(fn: str, lanes: int) -> Helper | None:
    """The whole-vector form of helper `fn` on `lanes` lanes, or None."""
    if fn == "aot_sigmoid":
        return _sigmoid(lanes)
    if fn == "aot_exp":
        return _exp(lanes)
    if fn == "aot_tanh":
        return _tanh(lanes)
    i32, u32 = DType("int32", lanes), DType("uint32", lanes)
    if fn == "aot_rdhm":
        a, b = Var("a", i32), Var("b", i32)
        return Helper(fn, (a, b), (), _rdhm_formula(a, b, lanes), HELPERS[fn].doc)
    if fn == "aot_srshl":
        x, s = Var("x", i32), Var("s", i32)
        return Helper(fn, (x, s), (), _srshl_formula(x, s, lanes), HELPERS[fn].doc)
    if fn == "aot_rdbpot":
        # gemmlowp's mask/threshold form with the comparison as a sign bit:
        # threshold - remainder is negative exactly when remainder > threshold,
        # and neither side overflows (both lie in [0, 2^31)).
        x, e = Var("x", i32), Var("e", i32)
        mask, rem, threshold = Var("mask", i32), Var("remainder", i32), Var("threshold", i32)
        sign = lambda v: Bin(">>", v, _splat(31, i32))  # noqa: E731  (-1 when negative)
        return Helper(fn, (x, e), (
            (mask, Cast(i32, Bin("-", Bin("<<", _splat(1, u32), Cast(u32, e)), _splat(1, u32)))),
            (rem, Bin("&", x, mask)),
            (threshold, Bin("-", Bin(">>", mask, _splat(1, i32)), sign(x))),
        ), Bin("-", Bin(">>", x, e), sign(Bin("-", threshold, rem))), HELPERS[fn].doc)
    return None


# ------------------------------------------------------------- lane-crossing ops

@dataclass(frozen=True)
class PairPack:
    """`aot_pack2(v)`: an int16 vector of 2n lanes -> the int32 vector of
    its n lane pairs, r[k] = (v[2k] & 0xFFFF) + 65536 v[2k+1]: the staged
    pair format aot_dot2p reads, built a whole vector at a time. Generic, it
    is the lane formula; on a little-endian target the legalization pass
    makes it `aot_pack2_bytes`: those are the vector's own bytes, which the
    codegens reinterpret (a C vector cast, an LLVM bitcast)."""
    name: str = "aot_pack2"
    bytes: bool = False      # the little-endian reinterpretation
    group: int = 2           # lanes per int32: int16 pairs (2) or int8 quads (4)

    @property
    def source(self) -> str:
        return "int16" if self.group == 2 else "int8"

    def result(self, args: tuple[Expr, ...]) -> DType:
        return DType("int32", dtype_of(args[0]).lanes // self.group)


PAIR_PACK = PairPack()
PAIR_PACK_BYTES = PairPack("aot_pack2_bytes", bytes=True)
# The same for int8 quads, the activations aot_dot4 reads: int8 x 4n ->
# int32 x n, r[k] = sum over j of (v[4k + j] & 255) << 8j (v[4k + 3] signed);
# n = 1 too (one quad read from a row of bytes: a scalar int32).
QUAD_PACK = PairPack("aot_pack4", group=4)
QUAD_PACK_BYTES = PairPack("aot_pack4_bytes", bytes=True, group=4)
_PAIR_PACKS = {p.name: p for p in (PAIR_PACK, PAIR_PACK_BYTES, QUAD_PACK, QUAD_PACK_BYTES)}

# The packs are the vector's own bytes on every little-endian target.
PAIR_PACK_ROWS = (Instruction(PAIR_PACK.name, PAIR_PACK_BYTES.name, little_endian=True),)
QUAD_PACK_ROWS = (Instruction(QUAD_PACK.name, QUAD_PACK_BYTES.name, little_endian=True),)
_PAIR_DOTS = {d.name: d for d in (PAIR_DOT, PACKED_PAIR_DOT, X86_PMADDWD, X86_PMADDWD_PACKED,
                                   RVV_DOT2, RVV_DOT2_PACKED)}
_QUAD_DOTS = {d.name: d for d in (QUAD_DOT, QUAD_DOT_U, ARM_SDOT, X86_VPDPBUSD, QUAD_DOT_S,
                                  ARM_SMULL_DOT4)}


def pack_pairs(v: Expr) -> Call:
    """The aot_pack2 call (see PairPack)."""
    return Call(PAIR_PACK.name, (v,), DType("int32", dtype_of(v).lanes // 2))


def pack_quads(v: Expr) -> Call:
    """The aot_pack4 call: int8 x 4n -> the int32 quads aot_dot4 reads."""
    return Call(QUAD_PACK.name, (v,), DType("int32", dtype_of(v).lanes // 4))


@dataclass(frozen=True)
class Lane:
    """`aot_lane(v, i)`: lane i (a constant) of vector v, a scalar. Broadcast
    and multiplied into an accumulator it is Arm's multiply-add by element
    (`fmla v.4s, v.4s, v.s[i]`, which both code generators' compilers form
    from it): one vector load of four inputs feeds four multiply-adds."""
    name: str = "aot_lane"


LANE = Lane()


def lane(v: Expr, i: int) -> Call:
    """The aot_lane call (see Lane)."""
    return Call(LANE.name, (v, Const(i)), dtype_of(v).with_lanes(1))


@dataclass(frozen=True)
class PairSums:
    """`aot_pair_sums(a, b)`: two vectors of n lanes -> (a0 + a1, a2 + a3,
    ..., b0 + b1, ..., b[n-2] + b[n-1]), n lanes: one level of a tree of
    adds over the lanes of two vectors at once. Applied to k vectors in
    pairs, then to its own result, it sums each vector's lanes (a balanced
    tree, the order lane_sum adds in) into one lane of a single vector:
    k - 1 + log2(n / k) calls of two shuffles and an add, where k separate
    sums take k log2(n)."""
    name: str = "aot_pair_sums"


PAIR_SUMS = PairSums()


def pair_sums(a: Expr, b: Expr) -> Call:
    """The aot_pair_sums call (see PairSums)."""
    return Call(PAIR_SUMS.name, (a, b), dtype_of(a))


def _check_pair_sums(args: tuple[Expr, ...], dtype: DType) -> PairSums:
    kinds = [dtype_of(a) for a in args]
    if len(args) != 2 or kinds[0] != kinds[1] or kinds[0] != dtype or dtype.lanes < 2:
        raise UnsupportedError(f"{PAIR_SUMS.name} takes two vectors of one type T x n -> T x n, "
                               f"got ({', '.join(map(str, kinds))}) -> {dtype}")
    return PAIR_SUMS


def lane_crossing(fn: str) -> bool:
    """Calls whose vector operands need not have the result's lanes."""
    return (fn in DSP_OPS or fn in MVE_OPS or fn in _PAIR_DOTS or fn in _PAIR_PACKS
            or fn in _QUAD_DOTS or fn in WIDENING_MLAS or fn in PAIRED_QUAD_DOTS
            or fn in SIXTEEN_DOTS or fn in SATURATING_NARROWS
            or fn == LANE.name)


def _check_lane(args: tuple[Expr, ...], dtype: DType) -> Lane:
    kinds = [dtype_of(a) for a in args]
    if (len(args) != 2 or kinds[0].lanes < 2 or dtype != kinds[0].with_lanes(1)
            or not isinstance(args[1], Const) or not 0 <= args[1].value < kinds[0].lanes):
        raise UnsupportedError(f"{LANE.name} takes (T x n, a constant lane below n) -> T, got "
                               f"({', '.join(map(str, kinds))}) -> {dtype}")
    return LANE


def _check_pair_pack(fn: str, args: tuple[Expr, ...], dtype: DType) -> PairPack:
    p = _PAIR_PACKS[fn]
    kinds = [dtype_of(a) for a in args]
    smallest = p.group if p.group == 4 else 2 * p.group
    if (len(args) != 1 or kinds[0].scalar != p.source or kinds[0].lanes < smallest
            or kinds[0].lanes % p.group or dtype != p.result(args)):
        raise UnsupportedError(f"{fn} takes ({p.source} x {p.group}n) -> int32 x n, got "
                               f"({', '.join(map(str, kinds))}) -> {dtype}")
    return p


def check_call(fn: str, args: tuple[Expr, ...], dtype: DType
               ) -> (LibmFn | Helper | PairDot | PairPack | Pmuldq | Lane | QuadDot
                     | NeonFixedPoint | AccumulatorCall | SaturatingNarrow | PairSums | HalfOp
                     | Fmadd):
    """What a Call means, or a clear error naming it."""
    if fn in DSP_OPS:          # the Armv7E-M DSP extension's (aot/isa/arm_dsp.py)
        return check_dsp(fn, args, dtype)
    if fn in MVE_OPS:          # Helium's (aot/isa/arm_mve.py)
        return check_mve(fn, args, dtype)
    if fn in _PAIR_DOTS:
        return check_pair_dot(_PAIR_DOTS[fn], args, dtype)
    if fn in _QUAD_DOTS:
        return check_quad_dot(_QUAD_DOTS[fn], args, dtype)
    if fn in NEON_OPS:         # NEON's (aot/isa/neon.py)
        return check_neon(fn, args, dtype)
    if fn in _PAIR_PACKS:
        return _check_pair_pack(fn, args, dtype)
    if fn == X86_PMULDQ_RDHM.name:
        return check_pmuldq(args, dtype)
    if fn == X86_FMADD.name:
        return check_fmadd(args, dtype)
    if fn == LANE.name:
        return _check_lane(args, dtype)
    if fn == PAIR_SUMS.name:
        return _check_pair_sums(args, dtype)
    if fn in HALF_OPS:         # half arithmetic (aot/isa/half.py)
        return check_half_op(fn, args, dtype)
    h = HELPERS.get(fn)
    if h is not None:
        if len(args) != len(h.params):
            raise UnsupportedError(f"{fn} takes {len(h.params)} arguments, got {len(args)}")
        for a, p in zip(args, h.params):
            if dtype_of(a).scalar != p.dtype.scalar:
                raise UnsupportedError(f"{fn}: argument of type {dtype_of(a)}, expected "
                                       f"{p.dtype}")
        return h
    scalar = dtype_of(args[0]).with_lanes(1) if args else dtype
    f = libm(fn, scalar)
    if f is None:
        raise UnsupportedError(f"the code generators know no function '{fn}' "
                               f"(libm: {', '.join(sorted(_LIBM))}; helpers: "
                               f"{', '.join(sorted(HELPERS))})")
    if len(args) != f.arity:
        raise UnsupportedError(f"{fn} takes {f.arity} arguments, got {len(args)}")
    return f


__all__ = ["HELPERS", "Helper", "LANE", "Lane", "LibmFn", "PAIR_PACK", "PAIR_PACK_BYTES",
           "PAIR_PACK_ROWS", "PAIR_SUMS", "PairPack", "PairSums", "QUAD_PACK", "QUAD_PACK_BYTES",
           "QUAD_PACK_ROWS", "check_call", "helper", "lane", "lane_crossing", "libm", "pack_pairs",
           "pack_quads", "pair_sums", "vector_helper"]

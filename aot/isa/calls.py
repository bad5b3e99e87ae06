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
- **lane-crossing operations** (`aot_dot2`, `aot_dot2p`, `aot_pack2`,
  `aot_dot4`, `aot_dot4u`, `aot_pack4`) and the **target instructions** the
  legalization pass (aot/lower/tir_passes/legalize.py) makes of generic calls
  (`x86_pmaddwd`, `x86_pmaddwd_packed`, `x86_pmuldq_rdhm`, `aot_pack2_bytes`,
  `aot_pack4_bytes`, `arm_sdot`, `x86_vpdpbusd`): the backends print each as it is
  named, choosing nothing (GCC_X86_SPELLINGS: the same for the C spelling
  of vector conversions and min/max).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from aot.isa.arm_dsp import DSP_OPS, check_dsp
from aot.isa.arm_mve import MVE_OPS, check_mve
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


def _sigmoid(lanes: int) -> Helper:
    d = DType("float32", lanes)

    def k(v: float) -> Expr:
        return _splat(v, d)

    def horner(coeffs: tuple[float, ...], t: Expr) -> Expr:
        r = k(coeffs[-1])
        for c in coeffs[-2::-1]:
            r = Bin("+", Bin("*", r, t), k(c))
        return r
    x, c, t = Var("x", d), Var("c", d), Var("t", d)
    # max(lo, x), min(hi, .): the C and LLVM min/max pick their second
    # operand when the first is NaN, so a NaN x stays NaN; +-inf give 1 and 0.
    return Helper("aot_sigmoid", (x,), (
        (c, Bin("min", k(SIGMOID_CLAMP), Bin("max", k(-SIGMOID_CLAMP), x))),
        (t, Bin("*", c, c)),
    ), Bin("+", k(0.5), Bin("/", Bin("*", c, horner(SIGMOID_P, t)), horner(SIGMOID_Q, t))),
        "float32 1 / (1 + e^-x) as 1/2 + x P(x^2) / Q(x^2), x clamped to [-18, 18] "
        "(within 1.9e-7)")


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


HELPERS: dict[str, Helper] = {h.name: h for h in (_srdhm(), _rdbpot(), _satshl(), _mbqm(),
                                                  _rdhm(), _sigmoid(1), _exp(1))}


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
    i32, u32 = DType("int32", lanes), DType("uint32", lanes)
    if fn == "aot_rdhm":
        a, b = Var("a", i32), Var("b", i32)
        return Helper(fn, (a, b), (), _rdhm_formula(a, b, lanes), HELPERS[fn].doc)
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

    def result(self, args: tuple[Expr, ...]) -> DType:
        return DType("int32", dtype_of(args[-1]).lanes // 2)


PAIR_DOT = PairDot()
PACKED_PAIR_DOT = PairDot("aot_dot2p", True)
X86_PMADDWD = PairDot("x86_pmaddwd", pmaddwd=True)
X86_PMADDWD_PACKED = PairDot("x86_pmaddwd_packed", True, pmaddwd=True)
_PAIR_DOTS = {d.name: d for d in (PAIR_DOT, PACKED_PAIR_DOT, X86_PMADDWD, X86_PMADDWD_PACKED)}


def pair_dot(x0: Expr, x1: Expr, w: Expr) -> Call:
    """The aot_dot2 call (see PairDot)."""
    return Call(PAIR_DOT.name, (x0, x1, w), DType("int32", dtype_of(w).lanes // 2))


def packed_pair_dot(pair: Expr, w: Expr) -> Call:
    """aot_dot2p: aot_dot2 of the int16 halves of an int32 pair = (x0 &
    0xFFFF) + 65536 * x1 (x0 the low half, sign-extended; x1 = pair >> 16,
    arithmetic): one load and one broadcast
    of a pair staged in memory as int32 (on x86, pmaddwd of the broadcast)."""
    return Call(PACKED_PAIR_DOT.name, (pair, w), DType("int32", dtype_of(w).lanes // 2))


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
ARM_SDOT = QuadDot("arm_sdot", instruction="sdot")
X86_VPDPBUSD = QuadDot("x86_vpdpbusd", unsigned=True, instruction="vpdpbusd")
QUAD_DOT_S = QuadDot("aot_dot4s", symmetric=True)
ARM_SMULL_DOT4 = QuadDot("arm_smull_dot4", instruction="smull", symmetric=True)
_QUAD_DOTS = {d.name: d for d in (QUAD_DOT, QUAD_DOT_U, ARM_SDOT, X86_VPDPBUSD, QUAD_DOT_S,
                                  ARM_SMULL_DOT4)}


def quad_dot(acc: Expr, quad: Expr, w: Expr, unsigned: bool = False,
             symmetric: bool = False) -> Call:
    """The aot_dot4 (aot_dot4u, aot_dot4s) call (see QuadDot)."""
    fn = QUAD_DOT_U if unsigned else QUAD_DOT_S if symmetric else QUAD_DOT
    return Call(fn.name, (acc, quad, w), dtype_of(acc))


@dataclass(frozen=True)
class WideningMla:
    """`aot_mlal_lo(acc, x, w)` / `aot_mlal_hi`: an int32 vector acc of n
    lanes, int16 vectors x and w of 2n -> acc[k] + x[k + h] * w[k + h], h = 0
    (lo) or n (hi): the widening multiply-accumulate of one half of two
    int16 vectors (8 int8 channels widened once feed two accumulators).
    Generic, the lane formula; on AArch64 the legalization pass makes them
    `arm_smlal_lo` / `arm_smlal_hi` (SMLAL / SMLAL2, ACLE vmlal_s16 /
    vmlal_high_s16). Exact: the products are within int32 and the sum wraps
    as the accumulation does."""
    name: str
    high: bool = False
    instruction: bool = False

    def result(self, args: tuple[Expr, ...]) -> DType:
        return dtype_of(args[0])


MLAL_LO = WideningMla("aot_mlal_lo")
MLAL_HI = WideningMla("aot_mlal_hi", high=True)
ARM_SMLAL_LO = WideningMla("arm_smlal_lo", instruction=True)
ARM_SMLAL_HI = WideningMla("arm_smlal_hi", high=True, instruction=True)
_WIDENING_MLAS = {m.name: m for m in (MLAL_LO, MLAL_HI, ARM_SMLAL_LO, ARM_SMLAL_HI)}


def widening_mla(acc: Expr, x: Expr, w: Expr, high: bool) -> Call:
    """The aot_mlal_lo / aot_mlal_hi call (see WideningMla)."""
    return Call((MLAL_HI if high else MLAL_LO).name, (acc, x, w), dtype_of(acc))


@dataclass(frozen=True)
class PairedQuadDot:
    """`aot_dot4p_lo(acc, q0, q1, w0, w1)` / `aot_dot4p_hi`: two quads' dot
    products (QuadDot's q and w, for consecutive input quads) into an int32
    x 4 accumulator of half sums: lane k takes, over both quads s, the
    products of bytes j = 2 (k % 2) and j + 1 of q_s with output channel
    u = k // 2 (lo) or 2 + k // 2 (hi) of w_s. `aot_addp` of the lo and hi
    accumulators then gives the 4 channels' sums. On AArch64 without
    dotprod, `arm_dot4p_lo` / `_hi`: SMULL, SMLAL (two products a lane in
    int16: w must have no -128), SADALP: 6 instructions per 32 products
    against arm_smull_dot4's 8."""
    name: str
    high: bool = False
    instruction: bool = False

    def result(self, args: tuple[Expr, ...]) -> DType:
        return dtype_of(args[0])


DOT4P_LO = PairedQuadDot("aot_dot4p_lo")
DOT4P_HI = PairedQuadDot("aot_dot4p_hi", high=True)
ARM_DOT4P_LO = PairedQuadDot("arm_dot4p_lo", instruction=True)
ARM_DOT4P_HI = PairedQuadDot("arm_dot4p_hi", high=True, instruction=True)
_PAIRED_QUAD_DOTS = {d.name: d for d in (DOT4P_LO, DOT4P_HI, ARM_DOT4P_LO, ARM_DOT4P_HI)}


@dataclass(frozen=True)
class PairwiseAdd:
    """`aot_addp(a, b)`: int32 x 4 twice -> (a0 + a1, a2 + a3, b0 + b1,
    b2 + b3), wrapping; `arm_addp` is AArch64's ADDP (vpaddq_s32)."""
    name: str
    instruction: bool = False

    def result(self, args: tuple[Expr, ...]) -> DType:
        return dtype_of(args[0])


ADDP = PairwiseAdd("aot_addp")
ARM_ADDP = PairwiseAdd("arm_addp", instruction=True)
_PAIRWISE_ADDS = {a.name: a for a in (ADDP, ARM_ADDP)}


def paired_quad_dot(acc: Expr, q0: Expr, q1: Expr, w0: Expr, w1: Expr, high: bool) -> Call:
    """The aot_dot4p_lo / _hi call (see PairedQuadDot)."""
    return Call((DOT4P_HI if high else DOT4P_LO).name, (acc, q0, q1, w0, w1), dtype_of(acc))


def pairwise_add(a: Expr, b: Expr) -> Call:
    """The aot_addp call (see PairwiseAdd)."""
    return Call(ADDP.name, (a, b), dtype_of(a))


@dataclass(frozen=True)
class Pmuldq:
    """`x86_pmuldq_rdhm(a, b)`: the whole-vector aot_rdhm on int32 x n
    (n = 4, 8, 16; a scalar operand is broadcast), computed with x86's
    pmuldq on the even and odd lanes (the high halves of their 64-bit
    products put back in place), which C compilers do not form from the
    int64 formula. The legalization pass chooses it on x86."""
    name: str = "x86_pmuldq_rdhm"
    generic: str = "aot_rdhm"


X86_PMULDQ_RDHM = Pmuldq()


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
    <arm_mve.h>), on Arm targets with MVE."""
    name: str
    generic: str
    isa: str = "neon"


ARM_SQRDMULH = NeonFixedPoint("arm_sqrdmulh", "aot_rdhm")
ARM_RDBPOT = NeonFixedPoint("arm_rdbpot", "aot_rdbpot")
MVE_VQRDMULH = NeonFixedPoint("mve_vqrdmulh", "aot_rdhm", isa="mve")
MVE_RDBPOT = NeonFixedPoint("mve_rdbpot", "aot_rdbpot", isa="mve")
_NEON_FIXED_POINT = {f.name: f for f in (ARM_SQRDMULH, ARM_RDBPOT, MVE_VQRDMULH, MVE_RDBPOT)}

# A PrimFunc attribute the legalization pass sets on x86 targets: the C
# printer may then spell vector conversions and min/max as GCC on x86
# vectorizes best, under `#if` beside the portable spelling (which compiler
# builds the C is not known when it is generated; docs/package.md, "gcc and
# clang"). Elsewhere the portable spelling alone.
GCC_X86_SPELLINGS = "c_gcc_x86_spellings"


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


def lane_crossing(fn: str) -> bool:
    """Calls whose vector operands need not have the result's lanes."""
    return (fn in DSP_OPS or fn in MVE_OPS or fn in _PAIR_DOTS or fn in _PAIR_PACKS
            or fn in _QUAD_DOTS or fn in _WIDENING_MLAS or fn in _PAIRED_QUAD_DOTS
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


def _check_quad_dot(fn: str, args: tuple[Expr, ...], dtype: DType) -> QuadDot:
    d = _QUAD_DOTS[fn]
    kinds = [dtype_of(a) for a in args]
    if (len(args) != 3 or kinds[0].scalar != "int32" or kinds[0].lanes < 2
            or kinds[1] != DType("int32") or kinds[2] != DType("int8", 4 * kinds[0].lanes)
            or dtype != kinds[0]):
        raise UnsupportedError(f"{fn} takes (int32 x n, int32, int8 x 4n) -> int32 x n, got "
                               f"({', '.join(map(str, kinds))}) -> {dtype}")
    return d


def _check_widening_mla(fn: str, args: tuple[Expr, ...], dtype: DType) -> WideningMla:
    kinds = [dtype_of(a) for a in args]
    if (len(args) != 3 or kinds[0].scalar != "int32" or kinds[0].lanes < 2
            or kinds[1:] != [DType("int16", 2 * kinds[0].lanes)] * 2 or dtype != kinds[0]):
        raise UnsupportedError(f"{fn} takes (int32 x n, int16 x 2n, int16 x 2n) -> int32 x n, "
                               f"got ({', '.join(map(str, kinds))}) -> {dtype}")
    return _WIDENING_MLAS[fn]


def _check_paired_quad_dot(fn: str, args: tuple[Expr, ...], dtype: DType) -> PairedQuadDot:
    kinds = [dtype_of(a) for a in args]
    i32x4, i8x16 = DType("int32", 4), DType("int8", 16)
    if kinds != [i32x4, DType("int32"), DType("int32"), i8x16, i8x16] or dtype != i32x4:
        raise UnsupportedError(f"{fn} takes (int32 x 4, int32, int32, int8 x 16, int8 x 16) -> "
                               f"int32 x 4, got ({', '.join(map(str, kinds))}) -> {dtype}")
    return _PAIRED_QUAD_DOTS[fn]


def _check_pairwise_add(fn: str, args: tuple[Expr, ...], dtype: DType) -> PairwiseAdd:
    kinds = [dtype_of(a) for a in args]
    if kinds != [DType("int32", 4)] * 2 or dtype != DType("int32", 4):
        raise UnsupportedError(f"{fn} takes int32 x 4 twice, got "
                               f"({', '.join(map(str, kinds))}) -> {dtype}")
    return _PAIRWISE_ADDS[fn]


def _check_pmuldq(args: tuple[Expr, ...], dtype: DType) -> Pmuldq:
    kinds = [dtype_of(a) for a in args]
    if (len(args) != 2 or dtype.scalar != "int32" or dtype.lanes not in (4, 8, 16)
            or any(k.scalar != "int32" or k.lanes not in (1, dtype.lanes) for k in kinds)):
        raise UnsupportedError(f"{X86_PMULDQ_RDHM.name} takes int32 x n (n = 4, 8, 16) twice, "
                               f"got ({', '.join(map(str, kinds))}) -> {dtype}")
    return X86_PMULDQ_RDHM


def _check_neon_fixed_point(fn: str, args: tuple[Expr, ...], dtype: DType) -> NeonFixedPoint:
    kinds = [dtype_of(a) for a in args]
    if (len(args) != 2 or dtype != DType("int32", 4)
            or any(k.scalar != "int32" or k.lanes not in (1, 4) for k in kinds)):
        raise UnsupportedError(f"{fn} takes int32 x 4 twice, got "
                               f"({', '.join(map(str, kinds))}) -> {dtype}")
    return _NEON_FIXED_POINT[fn]


def _check_pair_dot(fn: str, args: tuple[Expr, ...], dtype: DType) -> PairDot:
    d = _PAIR_DOTS[fn]
    kinds = [dtype_of(a) for a in args]
    scalars = [DType("int32")] if d.packed else [DType("int16")] * 2
    if (len(args) != len(scalars) + 1 or kinds[:-1] != scalars or kinds[-1].scalar != "int16"
            or kinds[-1].lanes < 4 or kinds[-1].lanes % 2 or dtype != d.result(args)):
        want = ", ".join(map(str, scalars))
        raise UnsupportedError(f"{fn} takes ({want}, int16 x 2n) -> int32 x n, got "
                               f"({', '.join(map(str, kinds))}) -> {dtype}")
    return d


def check_call(fn: str, args: tuple[Expr, ...], dtype: DType
               ) -> (LibmFn | Helper | PairDot | PairPack | Pmuldq | Lane | QuadDot
                     | NeonFixedPoint | WideningMla | PairedQuadDot | PairwiseAdd):
    """What a Call means, or a clear error naming it."""
    if fn in DSP_OPS:          # the Armv7E-M DSP extension's (aot/isa/arm_dsp.py)
        return check_dsp(fn, args, dtype)
    if fn in MVE_OPS:          # Helium's (aot/isa/arm_mve.py)
        return check_mve(fn, args, dtype)
    if fn in _PAIR_DOTS:
        return _check_pair_dot(fn, args, dtype)
    if fn in _QUAD_DOTS:
        return _check_quad_dot(fn, args, dtype)
    if fn in _WIDENING_MLAS:
        return _check_widening_mla(fn, args, dtype)
    if fn in _PAIRED_QUAD_DOTS:
        return _check_paired_quad_dot(fn, args, dtype)
    if fn in _PAIRWISE_ADDS:
        return _check_pairwise_add(fn, args, dtype)
    if fn in _PAIR_PACKS:
        return _check_pair_pack(fn, args, dtype)
    if fn == X86_PMULDQ_RDHM.name:
        return _check_pmuldq(args, dtype)
    if fn in _NEON_FIXED_POINT:
        return _check_neon_fixed_point(fn, args, dtype)
    if fn == LANE.name:
        return _check_lane(args, dtype)
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


__all__ = ["ADDP", "ARM_ADDP", "ARM_DOT4P_HI", "ARM_DOT4P_LO", "ARM_RDBPOT", "ARM_SDOT",
           "ARM_SMLAL_HI", "ARM_SMLAL_LO", "ARM_SMULL_DOT4", "ARM_SQRDMULH", "DOT4P_HI",
           "DOT4P_LO", "GCC_X86_SPELLINGS", "HELPERS", "Helper", "LANE", "Lane", "LibmFn",
           "MVE_RDBPOT", "MVE_VQRDMULH",
           "MLAL_HI", "MLAL_LO", "NeonFixedPoint", "PACKED_PAIR_DOT", "PAIR_DOT", "PAIR_PACK",
           "PAIR_PACK_BYTES", "PairDot", "PairPack", "PairedQuadDot", "PairwiseAdd", "Pmuldq",
           "QUAD_DOT", "QUAD_DOT_S", "QUAD_DOT_U", "QUAD_PACK", "QUAD_PACK_BYTES", "QuadDot",
           "WideningMla", "X86_PMADDWD", "X86_PMADDWD_PACKED", "X86_PMULDQ_RDHM", "X86_VPDPBUSD",
           "check_call", "helper", "lane", "lane_crossing", "libm", "pack_pairs", "pack_quads",
           "packed_pair_dot", "pair_dot", "paired_quad_dot", "pairwise_add", "quad_dot",
           "vector_helper", "widening_mla"]

"""The requantizers: an integer accumulator scaled to the output's
quantization, one variant per reference semantics
(../shared/TFLITE_INT8.md), each bit-exact with the reference it names.

TFLite int8 (TFLite's and TFLM's kernels), MultiplyByQuantizedMultiplier
(MBQM, TFLITE_INT8.md §2: gemmlowp's SaturatingRoundingDoublingHighMul,
then RoundingDivideByPOT, double rounding):
- mbqm, mbqm_block: the formula, for compile-time or per-channel operands;
- TfliteRequant: per channel from tables, in scalar code;
- TfliteVecRequant: the same on int32 lanes (vector tiles);
- TfliteRequant32: the same in 32-bit arithmetic (SMMULR) where the
  accumulators' bounds prove it exact (the Cortex-M DSP kernels).
TFLite int16 (the 16x8 kernels, TFLM's int64 MultiplyByQuantizedMultiplier
of kernels/internal/common.cc: the multiplier reduced to 16 bits, one
rounding shift): TfliteInt16Requant.
ONNX (ONNX Runtime's QLinear* kernels: float32 scale, round half to even,
saturation): onnx_requantizer with onnx_multipliers.

The primitives are aot/lower/arith/qmath.py's, the compile-time
multipliers aot/ops/quant/qmath.py's (quantize_multiplier), the numpy
references of each variant in aot/ops/quant/.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from aot.ir.tir import Bin, Call, Cast, Const, Expr, Load, Var, add, dt, dtype_of, mul
from aot.isa.arm_dsp import smmulr
from aot.lower.arith import fixed32
from aot.lower.arith import qmath as q
from aot.lower.arith.qmath import Operand
from aot.lower.arith.quant import lazy_table, round_half_even, table, vec_table
from aot.lower.rules import LowerCtx
from aot.lower.rules.elementwise import const_like
from aot.ops.quant import qmath as ref_q
from aot.ops.quant import tflite_int16 as ref16


# ------------------------------------------------------------ TFLite int8

def mbqm(x: Expr, mult: Operand, shift: Operand | None = None, *,
         left: Operand | None = None, right: Operand | None = None) -> Expr:
    """MultiplyByQuantizedMultiplier (double rounding): RDBPOT(SRDHM(x << l, M), r).

    Either `shift` (TFLite's signed exponent, a Python int) or the split
    `left`/`right` shifts (per-channel int32 expressions or ints).
    """
    if shift is not None:
        left, right = max(shift, 0), max(-shift, 0)
    # M comes from quantize_multiplier: never INT32_MIN, so SRDHM cannot saturate
    return q.rdbpot(q.srdhm(q.shift_left_wrapping(x, left), mult, saturate=False), right)


def mbqm_block(b: q.Block, x: Expr, mult: Operand, shift: Operand | None = None, *,
               left: Operand | None = None, right: Operand | None = None,
               name: str = "scaled") -> Expr:
    """mbqm with the SRDHM result in a local (rdbpot reads it twice or more)."""
    if shift is not None:
        left, right = max(shift, 0), max(-shift, 0)
    high = b.let(name, q.srdhm(q.shift_left_wrapping(x, left), mult, saturate=False))
    return q.rdbpot(high, right)


@dataclass
class TfliteRequant:
    """Per-channel (or per-tensor) MultiplyByQuantizedMultiplier: index -> M, shifts."""
    mult: Callable[[Expr], Expr]
    left: Callable[[Expr], Expr]
    right: Callable[[Expr], Expr]

    @staticmethod
    def make(ctx: LowerCtx, mults, shifts) -> "TfliteRequant":
        mults = np.asarray(mults, np.int64).reshape(-1).astype(np.int32)
        shifts = np.asarray(shifts, np.int64).reshape(-1)
        return TfliteRequant(
            lazy_table(ctx, "multiplier", mults),
            lazy_table(ctx, "left_shift", np.maximum(shifts, 0).astype(np.int32)),
            lazy_table(ctx, "right_shift", np.maximum(-shifts, 0).astype(np.int32)))

    def apply(self, b: q.Block, acc: Expr, channel: Expr) -> Expr:
        return mbqm_block(b, acc, self.mult(channel), left=self.left(channel),
                          right=self.right(channel))


@dataclass
class TfliteVecRequant:
    """MultiplyByQuantizedMultiplier on int32 lanes, bit-exact with mbqm.

    x << left (wrapping: an unsigned multiply), SRDHM by M (M comes from
    quantize_multiplier, never INT32_MIN, so no saturation test), then
    RDBPOT by the right shift: the codegens' whole-vector aot_rdhm and
    aot_rdbpot, all in int32 lanes (AVX2 has no 64-bit arithmetic shift or
    multiply). Per-channel values come from tables, constants when all
    channels agree.

    With `bound` (max |accumulator| per channel; x86, fixed32.
    shift_add_rounding) `requantize` rounds by shifts and adds instead:
    (h + 2^(r-1) + zp 2^r + (h >> 31)) >> r, the output zero point folded
    into the nudge, the sign term left out under an activation floor at or
    above the zero point (as fixed32.rounding_shift), wherever every
    channel shifts right and the bound keeps the sums within int32.

    AArch64 (`srshl`, the negated right shifts) rounds by SRSHL instead:
    RDBPOT(h, r) = (h - [h < 0] + 2^(r-1)) >> r for r >= 1, and SRSHL by -r
    computes floor((v + 2^(r-1)) / 2^r) with no intermediate overflow, so
    RDBPOT(h, r) + zp = SRSHL(h + (h >> 31), -r) + zp (h + (h >> 31) stays
    in int32: |h| <= bound < 2^31). Under an activation floor at or above
    zp the sign term goes as above: for h < 0 both SRSHL(h, -r) and
    RDBPOT(h, r) are <= 0, so both outputs are at most zp and clamp to the
    floor. One SRSHL and the zero point's ADD against the nudge's ADD and
    the variable right shift's NEG and SSHL.
    """
    mult: Callable
    left: Callable | None
    right: Callable
    nudge: Callable | None = None
    floor_ok: bool = False
    srshl: Callable | None = None

    @staticmethod
    def make(ctx: LowerCtx, mults, shifts, bound=None, zp: int = 0,
             floor_ok: bool = False) -> "TfliteVecRequant":
        mults = np.asarray(mults, np.int64).reshape(-1)
        shifts = np.asarray(shifts, np.int64).reshape(-1)
        left = np.maximum(shifts, 0)
        right = np.maximum(-shifts, 0)
        if right.max(initial=0) > 31 or left.max(initial=0) > 31:
            raise ValueError("requantization shift above 31")
        nudge = srshl = None
        if bound is not None and right.size and right.min() >= 1:
            n = len(bound)
            highs = [int(bd) << int(lf) for bd, lf in zip(bound, np.broadcast_to(left, (n,)))]
            if fixed32.srshl_rounding(ctx.target):
                if all(h < 1 << 31 for h in highs):
                    srshl = vec_table(ctx, "rounding_shift", -right, "int32")
            else:
                nudges = [(1 << (int(e) - 1)) + (zp << int(e))
                          for e in np.broadcast_to(right, (n,))]
                if all(h + abs(u) + 1 < 1 << 31 for h, u in zip(highs, nudges)):
                    nudge = vec_table(ctx, "rounding_nudge", np.asarray(nudges, np.int64),
                                      "int32")
        return TfliteVecRequant(
            vec_table(ctx, "multiplier", mults, "int32"),
            vec_table(ctx, "left_scale", np.left_shift(1, left), "uint32") if left.any() else None,
            vec_table(ctx, "right_shift", right, "int32"), nudge, floor_ok, srshl)

    @property
    def rounds_inline(self) -> bool:
        """Whether requantize rounds without the aot_rdbpot helper."""
        return self.nudge is not None or self.srshl is not None

    def requantize(self, b: q.Block, acc: Expr, c: Expr, zp: int) -> Expr:
        """apply(acc) + zp."""
        if not self.rounds_inline:
            return q.offset(self.apply(b, acc, c), zp)
        lanes = dtype_of(acc).lanes
        h = self._high(b, acc, c)
        if self.srshl is not None:
            x = h if self.floor_ok else Bin("+", h, Bin(">>", h, const_like(31, h)))
            return q.offset(Call("aot_srshl", (x, self.srshl(c, lanes)), dtype_of(h)), zp)
        total = Bin("+", h, self.nudge(c, lanes))
        if not self.floor_ok:
            total = Bin("+", total, Bin(">>", h, const_like(31, h)))
        return Bin(">>", total, self.right(c, lanes))

    def apply(self, b: q.Block, acc: Expr, c: Expr) -> Expr:
        return q.rdbpot(self._high(b, acc, c), self.right(c, dtype_of(acc).lanes))

    def _high(self, b: q.Block, acc: Expr, c: Expr) -> Var:
        lanes = dtype_of(acc).lanes
        x = acc
        if self.left is not None:
            x = Cast(dt("int32", lanes), Bin("*", Cast(dt("uint32", lanes), x), self.left(c, lanes)))
        return b.let("high", q.srdhm(x, self.mult(c, lanes), saturate=False))


@dataclass(frozen=True)
class TfliteRequant32:
    """TFLite's MultiplyByQuantizedMultiplier, RDBPOT(SRDHM(x * 2^l, M), e),
    in 32-bit arithmetic, for accumulators |x| <= B:

        SRDHM(x * 2^l, M) = SMMULR(x * 2^(l+1), M)   if B * 2^(l+1) < 2^31
        RDBPOT(h, e) = (h + 2^(e-1) - [h < 0]) >> e   if e >= 1 and
                                                         B * 2^l + 2^(e-1) < 2^31

    SMMULR is floor((a M + 2^31) / 2^32); with a = 2 x 2^l that is
    floor((x 2^l M + 2^30) / 2^31), SRDHM's value (M is never INT32_MIN, so
    SRDHM never saturates). RDBPOT rounds half away from zero; adding 2^(e-1)
    and, for negative h, 2^(e-1) - 1 before the arithmetic shift does the
    same. |h| <= B 2^l (M < 2^31), so neither sum overflows. Tables per
    channel: 2^(l+1), M, 2^(e-1), e.

    With `zp` (the output zero point) folded in, apply gives RDBPOT + zp:
    (h + 2^(e-1) + zp 2^e - [h < 0]) >> e, since an arithmetic shift of
    v + zp 2^e is (v >> e) + zp; exact when also
    B 2^l + 2^(e-1) + |zp| 2^e < 2^31 (`zp` the value folded, else 0).

    floor_ok (the output clamped from below at or above the output zero
    point: a ReLU's floor) drops the - [h < 0]: for h < 0 both
    (h + 2^(e-1)) >> e and RDBPOT(h, e) are <= 0, so either output is at
    most the zero point and the clamp makes both its floor."""
    scale: Callable[[Expr], Expr]
    mult: Callable[[Expr], Expr]
    half: Callable[[Expr], Expr]
    right: Callable[[Expr], Expr]
    zp: int = 0
    floor_ok: bool = False

    @staticmethod
    def make(ctx: LowerCtx, mults, shifts, bound: np.ndarray,
             zp: int = 0, merged: bool = False,
             floor_ok: bool = False) -> "TfliteRequant32 | None":
        """The 32-bit form for accumulators within `bound` (per channel), or
        None when the bounds do not prove it exact for every channel; the
        output zero point `zp` folded into its rounding term where the
        bounds prove that exact too. merged: the per-channel values in one
        table, a channel's side by side (one address for all of them: the
        DSP kernels' registers are short)."""
        if not proven(mults, shifts, bound):
            return None
        if zp and not proven(mults, shifts, bound, zp):
            zp = 0
        n = len(bound)
        shifts = np.broadcast_to(np.asarray(shifts, np.int64).reshape(-1), (n,))
        left, right = np.maximum(shifts, 0), np.maximum(-shifts, 0)
        mults = np.broadcast_to(np.asarray(mults, np.int64).reshape(-1), (n,))
        half = (1 << (right - 1)) + zp * (1 << right)
        columns = {"left_scale": 1 << (left + 1), "multiplier": mults, "round_half": half,
                   "right_shift": right}
        if merged:
            return TfliteRequant32(*merged_table(ctx, "requant", columns), zp, floor_ok)
        return TfliteRequant32(*(table(ctx, name, v.astype(np.int32))
                                 for name, v in columns.items()), zp, floor_ok)

    def apply(self, b, acc: Expr, channel: Expr) -> Expr:
        h = b.let("high", smmulr(Bin("*", acc, self.scale(channel)), self.mult(channel)))
        total = Bin("+", h, self.half(channel))
        if not self.floor_ok:
            total = Bin("+", total, Bin(">>", h, Const(31)))
        return Bin(">>", total, self.right(channel))


def merged_table(ctx: LowerCtx, name: str, columns: dict) -> list[Callable[[Expr], Expr]]:
    """index -> each column's value (table()'s, int32), the columns not
    constant in one table [index, column]: one parameter, so one address."""
    values = [np.asarray(v, np.int64).reshape(-1) for v in columns.values()]
    varying = [k for k, v in enumerate(values) if not np.all(v == v[0])]
    if len(varying) < 2:
        return [table(ctx, key, v.astype(np.int32)) for key, v in zip(columns, values)]
    buf = ctx.param(name, np.stack([values[k] for k in varying], axis=1).astype(np.int32))
    width = Const(len(varying))

    def column(k: int) -> Callable[[Expr], Expr]:
        if k not in varying:
            return table(ctx, list(columns)[k], values[k].astype(np.int32))
        at = Const(varying.index(k))
        return lambda index: Load(buf, add(mul(index, width), at))
    return [column(k) for k in range(len(values))]


def proven(mults, shifts, bound: np.ndarray, zp: int = 0) -> bool:
    """Whether TfliteRequant32 equals MultiplyByQuantizedMultiplier (plus
    `zp`, folded into its rounding term) on every accumulator within
    `bound` (per channel; see TfliteRequant32)."""
    n = len(bound)
    shifts = np.broadcast_to(np.asarray(shifts, np.int64).reshape(-1), (n,))
    mults = np.broadcast_to(np.asarray(mults, np.int64).reshape(-1), (n,))
    left, right = np.maximum(shifts, 0), np.maximum(-shifts, 0)
    bound = np.asarray(bound, object)        # Python integers: no overflow in the proof
    limit = 2**31 - 1
    return bool(np.all(mults > 0) and np.all(mults < 2**31) and np.all(right >= 1)
                and np.all(right <= 31)
                and all(int(B) << (int(lft) + 1) <= limit and
                        (int(B) << int(lft)) + (1 << (int(r) - 1))
                        + ((abs(zp) << int(r)) + 1 if zp else 0) <= limit
                        for B, lft, r in zip(bound, left, right)))


def settle_constant_channels(w: np.ndarray, bias: np.ndarray, zp: int, mults, shifts):
    """(w, bias, mults, shifts) with every channel whose requantized output is
    one constant over all its accumulators made that constant's simplest
    form: zero weights, bias 4k, M = 2^30, shift -1 (MBQM(4k) = k exactly:
    SRDHM gives 2k, RDBPOT halves it). A channel of weights near zero and a
    bias near 2^30 (a dead channel, or M = 0) is such a channel; its bound
    keeps the whole layer off the 32-bit requantization, its new form does
    not. The accumulator bias - zp sum w + sum w x over int8 inputs x spans
    [lo, hi]; MBQM is monotone there when x 2^l does not wrap, so it is
    constant when MBQM(lo) = MBQM(hi). k is kept within +-256: the output
    k + zp_out is clamped to int8, the same for any k beyond. w is
    [channels, terms]; the arrays returned are new."""
    w = np.asarray(w, np.int64)
    n = len(w)
    mults = np.broadcast_to(np.asarray(mults, np.int64).reshape(-1), (n,)).copy()
    shifts = np.broadcast_to(np.asarray(shifts, np.int64).reshape(-1), (n,)).copy()
    folded = np.asarray(bias, np.int64) - zp * w.sum(axis=1)
    lo = folded + np.minimum(-128 * w, 127 * w).sum(axis=1)
    hi = folded + np.maximum(-128 * w, 127 * w).sum(axis=1)
    span = np.maximum(np.abs(lo), np.abs(hi)) << np.maximum(shifts, 0)
    k = ref_q.mbqm(lo, mults, shifts)
    constant = (span < 2**31) & (mults >= 0) & (k == ref_q.mbqm(hi, mults, shifts))
    w, bias = w.copy(), np.asarray(bias, np.int64).copy()
    w[constant] = 0
    bias[constant] = 4 * np.clip(k[constant], -256, 256)
    mults[constant] = 1 << 30
    shifts[constant] = -1
    return w, bias, mults, shifts


# ------------------------------------------------------------ TFLite int16

def reduced_multipliers(mult, shift) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(M16, rounding term, total right shift) of the int64 MBQM per channel."""
    mult = np.asarray(mult, np.int64).reshape(-1)
    total = 15 - np.asarray(shift, np.int64).reshape(-1)   # >= 8: check_int64_shift
    m16 = np.where(mult < 0x7FFF0000, (mult + (1 << 15)) >> 16, 0x7FFF)
    return m16.astype(np.int32), (np.int64(1) << (total - 1)), total.astype(np.int32)


class TfliteInt16Requant:
    """The 16x8 epilogue of one kernel, per channel (or per tensor, folded):
    the int64 MBQM, or with an int32 bias the int32 one on the wrapped sum.
    exact32: the int64 sums provably fit int32 (the rules' sums_fit_int32), so the
    accumulator is int32 and only the epilogue widens."""

    def __init__(self, ctx: LowerCtx, mult, shift, exact32: bool = False):
        self.wrapping32 = ref16.accumulates_in_int32(ctx)
        self.acc_dtype = "int32" if self.wrapping32 or exact32 else "int64"
        self.lo, self.hi = ctx.attrs.get("act_min", -32768), ctx.attrs.get("act_max", 32767)
        if self.wrapping32:
            self.rq32 = TfliteRequant.make(ctx, mult, shift)
            return
        ref16.check_int64_shift(ctx.node, shift)
        self.values = reduced_multipliers(mult, shift)
        m16, rounding, total = self.values
        # made when first read: vector tiles read the scalar tables only
        # for remainder channels, if any
        self.m16 = lazy_table(ctx, "multiplier", m16)
        self.rounding = lazy_table(ctx, "rounding", rounding)
        self.total = lazy_table(ctx, "right_shift", total)
        self.ctx, self.vec, self.vec32, self.rdhm = ctx, None, None, None

    def bias(self, values: np.ndarray) -> np.ndarray:
        """The bias as the accumulator starts from it."""
        if self.acc_dtype == "int32":
            return ref_q.wrap_int32(values).astype(np.int32)
        return values.astype(np.int64)

    def apply(self, b: q.Block, acc: Expr, channel: Expr) -> Expr:
        """The int16 output value of this channel's accumulator."""
        if self.wrapping32:
            y = self.rq32.apply(b, acc, channel)
        else:
            i64 = dt("int64")
            scaled = b.let("scaled", Bin("+", Bin("*", q.i64(acc), Cast(i64, self.m16(channel))),
                                         self.rounding(channel)))
            y = q.i32(Bin(">>", scaled, Cast(i64, self.total(channel))))
        return Cast(dt("int16"), q.clamp(y, self.lo, self.hi))

    def apply_vector(self, b: q.Block, acc: Expr, channel: Expr, lanes: int) -> Expr:
        """apply on `lanes` channels from `channel` at once: acc int32 x
        lanes (the exact32 accumulator; not the int32 bias's wrapping
        form). Where rdhm_fits, one rounding doubling high multiply
        (_rdhm: AArch64's SQRDMULH, x86's pmuldq pair); else the int64
        MBQM on int64 lanes (x86's vpmuldq / vpmullq and vpsravq)."""
        if self.wrapping32 or self.acc_dtype != "int32":
            raise ValueError("apply_vector takes the exact int32 accumulator of an int64 MBQM")
        if self.rdhm is None:
            self.rdhm = rdhm_fits(*self.values)
        if self.rdhm:
            return self._rdhm(acc, channel, lanes)
        if self.vec is None:
            self.vec = [vec_table(self.ctx, name, v, kind) for name, v, kind in zip(
                ("multiplier_v", "rounding_v", "right_shift_v"), self.values,
                ("int32", "int64", "int64"))]
        m16, rounding, total = (t(channel, lanes) for t in self.vec)
        i64 = dt("int64", lanes)
        # both factors sign-extended from 32 bits: one widening multiply
        scaled = b.let("scaled", Bin("+", Bin("*", Cast(i64, acc), Cast(i64, m16)), rounding))
        y = Cast(dt("int32", lanes), Bin(">>", scaled, total))
        return Cast(dt("int16", lanes), q.clamp(y, self.lo, self.hi))

    def _rdhm(self, acc: Expr, channel: Expr, lanes: int) -> Expr:
        """The int64 MBQM as one rounding doubling high multiply (rdhm_fits):
        with k = 31 - s, floor((acc M16 2^k + 2^30) / 2^31) is exactly
        floor((acc M16 + 2^(s-1)) / 2^s), the numerator and the divisor both
        2^k times the MBQM's. AArch64 makes it one SQRDMULH where the int64
        form took eight instructions (the A76's int16 conv, per 4 outputs)."""
        if self.vec32 is None:
            self.vec32 = vec_table(self.ctx, "multiplier_v", rdhm_multipliers(*self.values),
                                   "int32")
        y = q.srdhm(acc, self.vec32(channel, lanes), saturate=False)
        return Cast(dt("int16", lanes), q.clamp(y, self.lo, self.hi))


def rdhm_multipliers(m16: np.ndarray, rounding: np.ndarray, total: np.ndarray) -> np.ndarray:
    """M16 2^(31 - s) per channel, int64 (rdhm_fits says whether it fits int32)."""
    m16, total = np.asarray(m16, np.int64), np.asarray(total, np.int64)
    return m16 << np.clip(31 - total, 0, 62)


def rdhm_fits(m16: np.ndarray, rounding: np.ndarray, total: np.ndarray) -> bool:
    """Whether every channel's int64 MBQM is one rounding doubling high
    multiply (TfliteInt16Requant._rdhm): shifts of 1 to 31 and M16 2^(31 -
    s) in [0, 2^31) (M16 <= 32767: every shift from 16 on), so the
    multiplier is a non-negative int32 and no operand pair is INT32_MIN's."""
    total = np.asarray(total, np.int64)
    if not np.all((total >= 1) & (total <= 31)) or np.any(np.asarray(m16) < 0):
        return False
    return bool(np.all(rdhm_multipliers(m16, rounding, total) <= ref_q.INT32_MAX))


# ------------------------------------------------------------ ONNX

def onnx_multipliers(x_s, w_s, y_s) -> np.ndarray:
    """float32(x_s * w_s / y_s), per channel, computed as the reference does."""
    return np.atleast_1d((np.asarray(x_s) * np.asarray(w_s) / np.asarray(y_s))
                         .astype(np.float32)).reshape(-1)


def onnx_requantizer(ctx: LowerCtx, mult, zp: int) -> Callable[..., Expr]:
    """ONNX Runtime's requantization of the QLinear* products: (acc,
    channel, lanes=1) -> saturate(rint(float32(acc) * M[c]) + zp) to the
    output's dtype, M per channel (constant when all agree), rint rounding
    half to even; with lanes > 1, acc holds the channels from `channel` on."""
    mult = np.asarray(mult, np.float32).reshape(-1)
    m_buf = None if np.all(mult == mult[0]) else ctx.param("multiplier", mult)
    dtype = ctx.out_types[0].dtype
    info = np.iinfo(dtype)

    def requantize(acc: Expr, channel: Expr, lanes: int = 1) -> Expr:
        f32 = dt("float32", lanes)
        m = const_like(float(mult[0]), f32) if m_buf is None else Load(m_buf, channel, lanes)
        scaled = round_half_even(Bin("*", Cast(f32, acc), m))
        # clamped in float first: a huge product stays in int32's range
        scaled = Bin("min", Bin("max", scaled, const_like(-2.0 ** 30, f32)),
                     const_like(2.0 ** 30, f32))
        y = q.offset(Cast(dt("int32", lanes), scaled), zp)
        return Cast(dt(dtype, lanes), q.clamp(y, int(info.min), int(info.max)))
    return requantize

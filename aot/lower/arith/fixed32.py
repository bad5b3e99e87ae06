"""TFLite's fixed-point steps on int32 lanes in plain 32-bit arithmetic,
where the target has no vector rounding shift (x86: gemmlowp's
RoundingDivideByPOT is six or seven instructions there, SRDHM two
`vpmuldq` and their merging) and where bounds known at compile time
prove the cheaper form equal to TFLite's for every input.

- `rounding_shift`: RDBPOT(h, e) = (h + 2^(e-1) + (h >> 31)) >> e, the
  sign correction dropped when the caller clamps every negative h to the
  same value anyway (an activation floor at or above the zero point).
- `small_rescale`: the ADD operand's RDBPOT(SRDHM(d * 2^s, M), r) for d
  of a few bits (an int8 value less its zero point) as two 32-bit
  multiplies, checked against TFLite's arithmetic on every d it can take.

Arm keeps qmath's forms for SQRDMULH and the ADD's rescale (single
instructions there, which these would only lengthen); AArch64's
convolutions round by one SRSHL where the same bounds allow it
(nudged_requant; requant.TfliteVecRequant).
"""
from __future__ import annotations

from aot.ir.tir import Bin, Call, DType, Expr, Var
from aot.lower.arith import qmath as q
from aot.lower.rules.elementwise import const_like
from aot.ops.quant import qmath as ref_q
from aot.targets import Target

INT32_MAX = (1 << 31) - 1


def shift_add_rounding(target: Target) -> bool:
    """Whether int32 vectors take the 32-bit forms of this module: x86 with
    vectors (no rounding shift instruction; Arm's packages, ARMv7's too,
    keep the forms their instruction counts were tuned on)."""
    return target.arch in ("x86_64", "x86") and target.lanes(32) >= 4


def nudged_requant(target: Target) -> bool:
    """Whether the int8 convolutions' vector requantization rounds by a
    nudge and an arithmetic shift where the accumulators' bounds prove it
    exact (TfliteVecRequant's `bound`): x86 as above, and AArch64, where
    the bound lets the rounding fix-up's AND, CMLT and SQADD go, leaving
    SRSHL by the negated shift and the zero point's ADD (the sign term's
    two more below an activation floor under the zero point)."""
    return shift_add_rounding(target) or (target.arch == "aarch64" and target.lanes(32) >= 4)


def srshl_rounding(target: Target) -> bool:
    """Whether that requantization rounds by aot_srshl rather than the
    nudge: where the target makes it one instruction (AArch64's SRSHL; the
    legalization table says where)."""
    from aot.lower.tir_passes.legalize import instruction_for
    i32x4 = DType("int32", 4)
    probe = Call("aot_srshl", (Var("x", i32x4), Var("s", i32x4)), i32x4)
    return instruction_for(probe, target) is not None


def rounding_shift(h: Expr, e: int, bound: int, offset: int = 0,
                   floor_ok: bool = False) -> Expr | None:
    """RDBPOT(h, e) + offset for |h| <= bound, as shifts and adds; None when
    the sums could overflow int32.

    h + 2^(e-1) - [h < 0], shifted right arithmetically, rounds half away
    from zero; offset * 2^e added before the shift adds offset after it.
    floor_ok: the caller maps every result <= offset to one value (a clamp
    at or above offset), so the -[h < 0] term, which only moves negative
    h's results between values <= 0, is left out.
    """
    if e == 0:
        return h if offset == 0 else Bin("+", h, const_like(offset, h))
    if not 0 < e <= 31:
        return None
    nudge = (1 << (e - 1)) + (offset << e)
    if bound + abs(nudge) + 1 > INT32_MAX:
        return None
    total = h if nudge == 0 else Bin("+", h, const_like(nudge, h))
    if not floor_ok:
        total = Bin("+", total, Bin(">>", h, const_like(31, h)))
    return Bin(">>", total, const_like(e, h))


def small_rescale_terms(mult: int, shift: int, right: int, low: int, high: int):
    """(Mh, Ml, B, E, s): RDBPOT(SRDHM(d * 2^shift, mult), right) equals
        d * Mh + ((d * Ml + B + (d >> 31) * E) >> s)
    for every integer d in [low, high], every term within int32 (E = 2^k,
    0 when right is 0: no sign to round away from); None when the bounds
    do not allow it.

    SRDHM(d 2^shift, M) = floor((d M + 2^(k-1)) / 2^k) with k = 31 - shift,
    and rounding that by 2^right half away from zero adds 2^(right-1) - [d <
    0] before a floor: both floors compose into one, floor((d M + B - [d <
    0] 2^k) / 2^s), s = k + right. Splitting M = Mh 2^s + Ml takes d Mh out
    of the floor exactly. The form is checked on every d besides.
    """
    k = 31 - shift
    if not (0 < k <= 31 and 0 <= right <= 31 and 0 < mult < (1 << 31)):
        return None
    s = k + right
    mh, ml = mult >> s, mult & ((1 << s) - 1)
    b = (1 << (k - 1)) + ((1 << (right - 1)) << k if right else 0)
    sign = 1 << k if right else 0
    top = max(abs(low), abs(high))
    if top * mh > INT32_MAX or top * ml + b + sign > INT32_MAX:
        return None
    d = list(range(low, high + 1))
    want = ref_q.rdbpot(ref_q.srdhm(ref_q.wrap_int32([v << shift for v in d]), mult), right)
    got = [v * mh + ((v * ml + b - (sign if v < 0 else 0)) >> s) for v in d]
    if [int(w) for w in want] != got:
        return None
    return mh, ml, b, sign, s


def small_rescale(d: Expr, mult: int, shift: int, right: int, low: int,
                  high: int) -> Expr | None:
    """RDBPOT(SRDHM(d * 2^shift, mult), right) for d in [low, high] on
    int32 lanes (small_rescale_terms), or None."""
    terms = small_rescale_terms(mult, shift, right, low, high)
    if terms is None:
        return None
    mh, ml, b, sign, s = terms
    low_part = Bin("+", Bin("*", d, const_like(ml, d)), const_like(b, d))
    if sign:
        low_part = Bin("+", low_part, Bin("*", Bin(">>", d, const_like(31, d)),
                                          const_like(sign, d)))
    out = Bin(">>", low_part, const_like(s, d))
    return out if mh == 0 else Bin("+", Bin("*", d, const_like(mh, d)), out)


def _rescaled(d: Expr, mult: int, exp: int, shift: int, low: int, high: int) -> tuple[Expr, int]:
    """TFLite ADD's rescale of one operand, d = x - zp in [low, high], to the
    common scale, and max |result|: the larger input's (2^30, 0) is d *
    2^(shift-1) exactly; the other, small_rescale or qmath's form."""
    if mult == 1 << 30 and exp == 0:
        return (Bin("*", d, const_like(1 << (shift - 1), d)),
                max(abs(low), abs(high)) << (shift - 1))
    ends = ref_q.rdbpot(ref_q.srdhm(ref_q.wrap_int32([low << shift, high << shift]), mult), -exp)
    top = max(abs(int(v)) for v in ends)       # the rescale is monotone in d
    fast = small_rescale(d, mult, shift, -exp, low, high)
    if fast is not None:
        return fast, top
    return q.rdbpot(q.srdhm(Bin("*", d, const_like(1 << shift, d)), mult), -exp), top


def add_sub(x1: Expr, x2: Expr, ranges, params, out_params, shift: int, sign: int,
            lo: int, hi: int) -> Expr | None:
    """TFLite's int8 ADD / SUB (TFLITE_INT8.md §8) on int32 lanes before
    the narrowing: the operands' rescales by small_rescale, the output's
    rounding by rounding_shift with the zero point folded in; None where
    the bounds do not prove the output's form (qmath's then).

    ranges: (low, high) of each raw operand; params: (zp, M, e) of each;
    out_params: (M, e, zp) of the output; lo, hi: the activation clamp."""
    u, top = [], 0
    for x, (low, high), (zp, mult, exp) in zip((x1, x2), ranges, params):
        v, t = _rescaled(q.offset(x, -zp), mult, exp, shift, low - zp, high - zp)
        u.append(v)
        top += t
    mo, eo, zo = out_params
    if top + 1 > INT32_MAX:
        return None
    h = q.srdhm(Bin("+" if sign > 0 else "-", u[0], u[1]), mo)
    # |h| <= |total| + 1 (M < 2^31, plus the rounding)
    y = rounding_shift(h, -eo, top + 1, zo, floor_ok=lo >= zo)
    return None if y is None else q.clamp(y, lo, hi)

"""gemmlowp's fixed-point functions, as TIR locals (TFLITE_INT8.md §9).

exp on negative values (Q5.26 in, Q0.31 out), 1/(1 + x), count leading
zeros, 1/sqrt and log(x) for x >= 1: each step a named local of a
q.Block, so the C reads as the reference's formula, step by step. The
constants come from aot/ops/quant/tflite_int8.py, whose numpy versions the
tests compare against bit for bit. Softmax, log-softmax and L2
normalization (aot/lower/rules/quant/tflite_rowwise.py), DIV and the int16 kernels
(tflite_int16.py) build on them.
"""
from __future__ import annotations

from aot.ir.tir import Assign, Bin, Const, Expr, Select, Var, dt
from aot.lower.arith import qmath as q
from aot.ops.quant import qmath as ref_q
from aot.ops.quant import tflite_int8 as ref


def exp_on_negative_values(b: q.Block, a: Expr) -> Var:
    """gemmlowp's exp for a <= 0 in Q5.26, result in Q0.31 (§9 EXP), as locals."""
    r = b.let("frac", Bin("-", Bin("&", a, Const((1 << 24) - 1)), Const(1 << 24)))
    # exp on [-1/4, 0): Taylor expansion around -1/8 (operands stay far from INT32_MIN)
    x = b.let("x", Bin("+", q.satshl(r, 5), Const(1 << 28)))
    x2 = b.let("x2", q.srdhm(x, x, saturate=False))
    x3 = b.let("x3", q.srdhm(x2, x, saturate=False))
    x4 = b.let("x4", q.srdhm(x2, x2, saturate=False))
    v = b.let("poly", q.rdbpot(Bin("+", q.srdhm(Bin("+", q.rdbpot(x4, 2), x3), 715827883), x2),
                               1))
    y = b.let("e", Bin("+", Const(1895147668), q.srdhm(Bin("+", x, v), 1895147668)))
    rem = b.let("rem", Bin("-", r, a))
    for bit, c in ref.EXP_BARREL:   # the integer part, one factor per bit
        on = Bin("!=", Bin("&", Bin(">>", rem, Const(bit)), Const(1)), Const(0))
        b.add(Assign(y, Select(on, q.srdhm(y, c), y)))
    b.add(Assign(y, Select(Bin("==", a, Const(0)), Const(ref_q.INT32_MAX), y)))
    return y


def one_over_one_plus_x(b: q.Block, t: Expr) -> Var:
    """1/(1+x) for x in [0, 1) in Q0.31 (§9 RECIP): Newton-Raphson from 48/17 - 32/17 x."""
    h = b.let("half", q.i32(Bin(">>", Bin("+", q.i64(t), Const(1 << 31, dt("int64"))),
                                Const(1, dt("int64")))))
    x = b.let("recip", Bin("+", Const(1515870810), q.srdhm(h, -1010580540)))
    for _ in range(3):
        err = Bin("-", Const(1 << 29), q.srdhm(h, x, saturate=False))
        step = b.let("step", q.srdhm(x, err, saturate=False))
        b.add(Assign(x, Bin("+", x, q.satshl(step, 2))))
    return b.let("inverse", q.satshl(x, 1))


def count_leading_zeros(b: q.Block, total: Expr) -> tuple[Var, Var]:
    """(clz32(total), total << clz as int64 in [2**31, 2**32)) for total > 0."""
    i64 = dt("int64")
    v = b.let("normalized", q.i64(total))
    c = b.let("leading_zeros", Const(0))
    for s in (16, 8, 4, 2, 1):
        small = b.let("small", Bin("<", v, Const(1 << (32 - s), i64)))
        b.add(Assign(c, Bin("+", c, Select(small, Const(s), Const(0)))),
              Assign(v, Select(small, Bin("*", v, Const(1 << s, i64)), v)))
    return c, v


def inv_sqrt_block(b: q.Block, value: Expr) -> tuple[Var, Var]:
    """(multiplier, exponent) of 1/sqrt(value) for 0 <= value < 2^31, the
    TIR of ref.inv_sqrt_multiplier (GetInvSqrtQuantizedMultiplierExp)."""
    big = Bin(">=", value, Const(1 << 29))
    v = b.let("isqrt_in", Select(big, Bin(">>", value, Const(2)), Bin("max", value, Const(2))))
    shift = b.let("isqrt_shift", Select(big, Const(12), Const(11)))
    clz, _ = count_leading_zeros(b, v)
    pairs = b.let("pairs", Bin("-", Bin(">>", Bin("-", clz, Const(1)), Const(1)), Const(1)))
    b.add(Assign(shift, Bin("-", shift, pairs)),
          Assign(v, q.shift_left_wrapping(v, Bin("*", pairs, Const(2)))))
    half_in = b.let("half_input", q.rdbpot(Bin(">>", v, Const(1)), 1))
    x = b.let("x", Const(1 << 28))
    for _ in range(5):
        x3 = b.let("x3", q.satshl(q.srdhm(q.srdhm(x, x), x), 6))
        step = b.let("step", Bin("-", q.srdhm(x, (1 << 28) + (1 << 27)), q.srdhm(half_in, x3)))
        b.add(Assign(x, q.satshl(step, 3)))
    m = b.let("isqrt_mult", q.srdhm(x, 1518500250))
    b.add(Assign(m, q.shift_left_wrapping(m, Bin("max", Bin("-", Const(0), shift), Const(0)))))
    small = Bin("<=", value, Const(1))
    mult = b.let("inv_sqrt", Select(small, Const(ref_q.INT32_MAX), m))
    exp = b.let("inv_sqrt_exp", Select(small, Const(0),
                                       Bin("-", Const(0), Bin("max", shift, Const(0)))))
    return mult, exp


def _sat_shl_runtime(b: q.Block, x: Expr, e: Expr) -> Var:
    """SaturatingRoundingMultiplyByPOTParam for x >= 0 and 0 <= e < 32: the
    exact product clamped to int32."""
    wide = q.i64(x)
    product = Bin("*", wide, Bin("<<", Const(1, dt("int64")), q.i64(e)))
    return b.let("saturated", q.i32(Bin("min", product, Const(ref_q.INT32_MAX, dt("int64")))))


def log_x_ge_1_block(b: q.Block, z: Expr) -> Var:
    """ref.log_x_ge_1 (Q12 in, Q5 out) for z > 0, as locals."""
    quarter = 536870912 >> 6
    ha, _ = count_leading_zeros(b, z)
    r_a_tmp = q.shift_left_wrapping(z, Bin("-", ha, Const(1)))   # exactly its headroom
    r_a = b.let("r_a", q.satshl(b.let("r_a_tmp", q.srdhm(r_a_tmp, ref.SQRT_HALF)), 1))
    za_adj = b.let("za_adj", Bin("+", Bin("*", Bin("-", Const(12), ha), Const(1 << 25)),
                                 Const(quarter)))
    zb = b.let("zb", q.srdhm(z, ref.SQRT_HALF))
    clz_b, _ = count_leading_zeros(b, zb)
    hb = b.let("hb", Bin("-", clz_b, Const(1)))
    r_b = _sat_shl_runtime(b, z, hb)
    zb_adj = b.let("zb_adj", Bin("-", Bin("*", Bin("-", Const(12), hb), Const(1 << 25)),
                                 Const(quarter)))
    r = b.let("r", Bin("min", r_a, r_b))
    adj = b.let("adj", Bin("max", za_adj, zb_adj))
    s = b.let("half_sum", Bin("+", q.i64(r), Const(ref.SQRT_SQRT_HALF, dt("int64"))))
    one64 = Const(1, dt("int64"))
    p = b.let("p", q.i32(Select(Bin(">=", s, Const(0, dt("int64"))),
                                Bin(">>", Bin("+", s, one64), one64),
                                Bin("-", Const(0, dt("int64")),
                                    Bin(">>", Bin("+", Bin("-", Const(0, dt("int64")), s),
                                                  one64), one64)))))
    q0 = b.let("q", Bin("-", r, Const(ref.SQRT_SQRT_HALF)))
    qq = b.let("q2", Bin("+", q0, q0))
    cs = b.let("common_sq", q.srdhm(qq, qq))
    num = b.let("num", Bin("+", q.srdhm(qq, r),
                           q.srdhm(b.let("q_cs", q.srdhm(qq, cs)), ref.LOG_ALPHA_N)))
    inner = b.let("inner", Bin("+", Bin("+", Const(ref.LOG_ALPHA_I), qq),
                               q.srdhm(cs, ref.LOG_ALPHA_D)))
    den = b.let("den", Bin("+", q.srdhm(p, inner), q.srdhm(qq, ref.LOG_ALPHA_F)))
    recip = one_over_one_plus_x(b, den)
    total = b.let("log_total", Bin("+", q.srdhm(adj, ref.LOG_2),
                                   q.srdhm(b.let("num_scaled", q.rdbpot(num, 6)), recip)))
    return b.let("log_sum", q.satshl(total, 1))

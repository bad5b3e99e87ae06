"""Integer (TFLite-semantics) elementwise rules: one output element from
the same element of each input (broadcast).

ADD, SUB and MUL, QUANTIZE and DEQUANTIZE, LEAKY_RELU, PRELU,
SQUARED_DIFFERENCE, RESIZE_BILINEAR (a weighted sum of four taps), the
comparisons and ADD_N are value rules: lane-generic, so they fuse as
epilogues into the convolutions and vectorize with them. DIV is a kernel
(its reciprocal table and headroom are named locals). Bit-exact with
aot/ops/quant/tflite_int8.py, the fixed-point builders of aot/lower/arith/qmath.py with
multipliers computed at compile time by the same functions the reference
uses.
"""
from __future__ import annotations

import numpy as np

from aot.ir.tir import Assign, Bin, Broadcast, Cast, Const, Expr, Load, Select, Var, dt, dtype_of
from aot.lower.arith import fixed32
from aot.lower.arith import qmath as q
from aot.lower.arith.requant import mbqm
from aot.lower.arith.loops import nest
from aot.lower.rules.elementwise import broadcast_load, const_like
from aot.lower.arith.quant import narrow, round_half_away_to_int, scale_zp, table, to_i32
from aot.lower.arith.gemmlowp import count_leading_zeros
from aot.lower.rules import LowerCtx, kernel_rule, value_rule
from aot.ops.quant import qmath as ref_q
from aot.ops.quant import tflite_int8 as ref


def _int8_operands(ctx: LowerCtx, ins, idx, lanes) -> tuple[Expr, Expr]:
    return (to_i32(broadcast_load(ins[0], idx, lanes)),
            to_i32(broadcast_load(ins[1], idx, lanes)))


def _add_sub(ctx: LowerCtx, ins, idx, lanes, sign: int) -> Expr:
    s1, z1 = scale_zp(ctx, ctx.in_types[0], "input 0")
    s2, z2 = scale_zp(ctx, ctx.in_types[1], "input 1")
    so, zo = scale_zp(ctx, ctx.out_types[0], "the output")
    out_dtype = ctx.out_types[0].dtype
    shift = ref.ADD_LEFT_SHIFT[out_dtype]
    (m1, e1), (m2, e2), (mo, eo) = ref.add_params(s1, s2, so, shift)
    a, b = _int8_operands(ctx, ins, idx, lanes)
    lo, hi = ctx.attrs["act_min"], ctx.attrs["act_max"]
    if lanes > 1 and fixed32.shift_add_rounding(ctx.target):
        ranges = [(int(np.iinfo(t.dtype).min), int(np.iinfo(t.dtype).max)) for t in ctx.in_types]
        fast = fixed32.add_sub(a, b, ranges, ((z1, m1, e1), (z2, m2, e2)), (mo, eo, zo), shift,
                               sign, lo, hi)
        if fast is not None:
            return narrow(fast, out_dtype)

    def scaled(v, z, m, e):   # (v - z) * 2**shift, then rescaled to the common scale
        if m == 1 << 30 and e == 0:
            # the larger input's (2^30, 0): SRDHM(d * 2^s, 2^30) = d * 2^(s-1) exactly
            # (the rounding term 2^30 / 2^31 floors away) and RDBPOT by 0 keeps it
            return Bin("*", q.offset(v, -z), const_like(1 << (shift - 1), v))
        return q.rdbpot(q.srdhm(Bin("*", q.offset(v, -z), const_like(1 << shift, v)),
                                m), -e)
    u1, u2 = scaled(a, z1, m1, e1), scaled(b, z2, m2, e2)
    total = Bin("+" if sign > 0 else "-", u1, u2)
    y = q.offset(q.rdbpot(q.srdhm(total, mo), -eo), zo)
    return narrow(q.clamp(y, lo, hi), out_dtype)


@value_rule("tfl.add")
def add_rule(ctx: LowerCtx, ins, idx, lanes):
    return _add_sub(ctx, ins, idx, lanes, 1)


@value_rule("tfl.sub")
def sub_rule(ctx: LowerCtx, ins, idx, lanes):
    return _add_sub(ctx, ins, idx, lanes, -1)


@value_rule("tfl.mul")
def mul_rule(ctx: LowerCtx, ins, idx, lanes):
    s1, z1 = scale_zp(ctx, ctx.in_types[0], "input 0")
    s2, z2 = scale_zp(ctx, ctx.in_types[1], "input 1")
    so, zo = scale_zp(ctx, ctx.out_types[0], "the output")
    m, e = ref_q.quantize_multiplier(s1 * s2 / so)
    a, b = _int8_operands(ctx, ins, idx, lanes)
    prod = Bin("*", q.offset(a, -z1), q.offset(b, -z2))
    y = q.offset(mbqm(prod, m, e), zo)
    return narrow(q.clamp(y, ctx.attrs["act_min"], ctx.attrs["act_max"]),
                  ctx.out_types[0].dtype)


@value_rule("tfl.quantize")
def quantize(ctx: LowerCtx, ins, idx, lanes):
    out_ty = ctx.out_types[0]
    s_out, zp_out = scale_zp(ctx, out_ty, "the output")
    lo, hi = ref.INT_RANGE[out_ty.dtype]
    x = broadcast_load(ins[0], idx, lanes)
    d = dtype_of(x)
    if d.is_float:
        if d.scalar != "float32":
            raise ctx.unsupported(f"quantizing {d.scalar}")
        v = Bin("/", x, const_like(s_out, x))       # float32 division, as TFLM
        # keep the conversion in int32's range; the clamp below saturates anyway
        v = Bin("min", Bin("max", v, const_like(-2.0 ** 30, v)), const_like(2.0 ** 30, v))
        y = q.offset(round_half_away_to_int(v), zp_out)
    else:
        s_in, zp_in = scale_zp(ctx, ins[0].type, "the input")
        m, e = ref_q.quantize_multiplier(s_in / s_out)
        xi = to_i32(x)
        y = q.offset(mbqm(q.offset(xi, -zp_in), m, e), zp_out)
    return narrow(q.clamp(y, lo, hi), out_ty.dtype)


def per_axis(ctx: LowerCtx, name: str, values: np.ndarray, axis: int | None, idx,
             lanes: int, rank: int) -> Expr:
    """A per-tensor constant or a per-axis table entry at the output index idx."""
    values = np.asarray(values).reshape(-1)
    scalar = dt(values.dtype.name)
    if values.size == 1 or np.all(values == values[0]):
        return const_like(values[0].item(), scalar.with_lanes(lanes))
    table = ctx.param(name, values)
    if axis % rank == rank - 1:
        return Load(table, idx[-1], lanes)
    v = Load(table, idx[axis % rank])
    return v if lanes == 1 else Broadcast(v, lanes)


@value_rule("tfl.dequantize")
def dequantize(ctx: LowerCtx, ins, idx, lanes):
    x = broadcast_load(ins[0], idx, lanes)
    f32, f64 = dt("float32", lanes), dt("float64", lanes)
    if dtype_of(x).scalar == "float16":
        return Cast(f32, x)
    qp = ins[0].type.quant
    if qp is None:
        raise ctx.unsupported("dequantizing a tensor without quantization")
    rank = len(ins[0].shape)
    scale = per_axis(ctx, "scale", np.asarray(qp.scale, np.float64), qp.axis, idx, lanes, rank)
    zp = per_axis(ctx, "zero_point", np.asarray(qp.zero_point, np.int32), qp.axis, idx, lanes,
                  rank)
    centred = Bin("-", to_i32(x), zp)
    return Cast(f32, Bin("*", scale, Cast(f64, centred)))


@value_rule("tfl.leaky_relu")
def leaky_relu_rule(ctx: LowerCtx, ins, idx, lanes):
    s_in, zp_in = scale_zp(ctx, ctx.in_types[0], "the input")
    s_out, zp_out = scale_zp(ctx, ctx.out_types[0], "the output")
    (m1, e1), (m2, e2) = ref.leaky_relu_params(s_in, float(ctx.attrs["alpha"]), s_out)
    x = q.offset(to_i32(broadcast_load(ins[0], idx, lanes)), -zp_in)
    y = Select(Bin(">=", x, const_like(0, x)), mbqm(x, m1, e1), mbqm(x, m2, e2))
    out_dtype = ctx.out_types[0].dtype
    return narrow(q.clamp(q.offset(y, zp_out), *ref.INT_RANGE[out_dtype]), out_dtype)


@value_rule("tfl.prelu")
def prelu_rule(ctx: LowerCtx, ins, idx, lanes):
    s_in, zp_in = scale_zp(ctx, ctx.in_types[0], "the input")
    s_a, zp_a = scale_zp(ctx, ctx.in_types[1], "alpha")
    s_out, zp_out = scale_zp(ctx, ctx.out_types[0], "the output")
    (m1, e1), (m2, e2) = ref.prelu_params(s_in, s_a, s_out)
    x, a = _int8_operands(ctx, ins, idx, lanes)
    x, a = q.offset(x, -zp_in), q.offset(a, -zp_a)
    y = Select(Bin(">=", x, const_like(0, x)), mbqm(x, m1, e1),
               mbqm(Bin("*", x, a), m2, e2))
    return narrow(q.clamp(q.offset(y, zp_out), -128, 127), "int8")


@value_rule("tfl.squared_difference")
def squared_difference_rule(ctx: LowerCtx, ins, idx, lanes):
    s1, z1 = scale_zp(ctx, ctx.in_types[0], "input 0")
    s2, z2 = scale_zp(ctx, ctx.in_types[1], "input 1")
    so, zo = scale_zp(ctx, ctx.out_types[0], "the output")
    out_dtype = ctx.out_types[0].dtype
    bits = ref.SQUARED_DIFFERENCE_SHIFTS[out_dtype]
    (m1, e1), (m2, e2), (mo, eo) = ref.squared_difference_params(s1, s2, so, bits)
    a, b = _int8_operands(ctx, ins, idx, lanes)

    def scaled(v, z, m, e):
        shifted = Bin("*", q.offset(v, -z), const_like(1 << bits, v))
        return q.rdbpot(q.srdhm(shifted, m), -e)
    d = Bin("-", scaled(a, z1, m1, e1), scaled(b, z2, m2, e2))
    y = q.offset(mbqm(Bin("*", d, d), mo, eo), zo)
    return narrow(q.clamp(y, *ref.INT_RANGE[out_dtype]), out_dtype)


@value_rule("tfl.resize_bilinear")
def resize_bilinear_rule(ctx: LowerCtx, ins, idx, lanes):
    x = ins[0]
    a = ctx.attrs
    _, h, w, _ = ctx.out_types[0].shape
    taps = {}
    for name, n_in, n_out, pos in (("y", x.shape[1], h, idx[1]), ("x", x.shape[2], w, idx[2])):
        lo, hi, frac = ref.resize_bilinear_taps(n_in, n_out, a["align_corners"],
                                                a["half_pixel_centers"])
        taps[name] = tuple(table(ctx, f"{name}_{part}", v.astype(np.int32))(pos)
                           for part, v in (("lo", lo), ("hi", hi), ("frac", frac)))
    (y0, y1, fy), (x0, x1, fx) = taps["y"], taps["x"]

    def weight(e):   # a scalar int32 weight as int64 lanes
        v = q.i64(e)
        return v if lanes == 1 else Broadcast(v, lanes)

    def at(yy, xx):
        return q.i64(x.load((idx[0], yy, xx, idx[3]), lanes), lanes)
    one = Const(1024, dt("int64"))
    wy0, wy1 = weight(Bin("-", one, q.i64(fy))), weight(fy)
    wx0, wx1 = weight(Bin("-", one, q.i64(fx))), weight(fx)
    total = Bin("+", Bin("+", Bin("*", Bin("*", at(y0, x0), wy0), wx0),
                         Bin("*", Bin("*", at(y1, x0), wy1), wx0)),
                Bin("+", Bin("*", Bin("*", at(y0, x1), wy0), wx1),
                     Bin("*", Bin("*", at(y1, x1), wy1), wx1)))
    half = const_like(1 << 19, total)
    shift = const_like(20, total)
    up = Bin(">>", Bin("+", total, half), shift)
    down = Bin("-", const_like(0, total), Bin(">>", Bin("-", half, total), shift))
    return narrow(Select(Bin(">", total, const_like(0, total)), up, down), "int8")


_COMPARE_OPS = {"EQUAL": "==", "NOT_EQUAL": "!=", "LESS": "<", "LESS_EQUAL": "<=",
                "GREATER": ">", "GREATER_EQUAL": ">="}


@value_rule("tfl.compare")
def compare_rule(ctx: LowerCtx, ins, idx, lanes):
    scaled = []
    for k, v in enumerate(_int8_operands(ctx, ins, idx, lanes)):
        zp, m, e = ref.compare_params(ctx.in_types[k], f"input {k}", ctx.node)
        shifted = Bin("*", q.offset(v, -zp), const_like(1 << ref.COMPARE_SHIFT, v))
        scaled.append(q.rdbpot(q.srdhm(shifted, m), -e))
    return Bin(_COMPARE_OPS[ctx.attrs["comparison"]], scaled[0], scaled[1])


@value_rule("tfl.add_n")
def add_n_rule(ctx: LowerCtx, ins, idx, lanes):
    s_in, zp_in = scale_zp(ctx, ctx.in_types[0], "input 0")
    s_out, zp_out = scale_zp(ctx, ctx.out_types[0], "the output")
    (mi, ei), (mo, eo) = ref.add_n_params(s_in, s_out, ctx.node)
    shift = 1 << ref.ADD_N_SHIFT

    def scaled(v):
        return q.rdbpot(q.srdhm(Bin("*", v, const_like(shift, v)), mi), -ei)
    first = to_i32(broadcast_load(ins[0], idx, lanes))
    total = scaled(const_like(-zp_in, first))
    for x in ins:
        total = Bin("+", total, scaled(q.offset(to_i32(broadcast_load(x, idx, lanes)), -zp_in)))
    y = q.offset(q.rdbpot(q.srdhm(total, mo), -eo), zp_out)
    return narrow(q.clamp(y, -128, 127), "int8")


def _leading_sign_bits(b: q.Block, a: Expr) -> Var:
    """CountLeadingSignBits of an int32 a with |a| < 2^16."""
    mag = b.let("magnitude", Select(Bin(">=", a, Const(0)), a,
                                    Bin("-", Bin("*", Const(-2), a), Const(1))))
    clz, _ = count_leading_zeros(b, Bin("max", mag, Const(1)))
    # zero: 32 leading zeros, minus the sign bit
    return b.let("sign_bits", Select(Bin("==", mag, Const(0)), Const(31),
                                     Select(Bin(">=", a, Const(0)), Bin("-", clz, Const(1)),
                                            clz)))


@kernel_rule("tfl.div")
def div(ctx: LowerCtx, ins, emit):
    s1, z1 = scale_zp(ctx, ctx.in_types[0], "input 0")
    s2, z2 = scale_zp(ctx, ctx.in_types[1], "input 1")
    so, zo = scale_zp(ctx, ctx.out_types[0], "the output")
    m, e = ref.div_multiplier(s1, s2, so, ctx.node)
    inv, over_unit = ref.reciprocal_table()
    inv_t = ctx.param("reciprocal", inv.astype(np.int32))
    over_t = ctx.param("bits_over_unit", over_unit.astype(np.int32))
    shape = ctx.out_types[0].shape

    def at(idx):
        b = q.Block(ctx)
        a = b.let("dividend", q.offset(to_i32(broadcast_load(ins[0], idx)), -z1))
        d = b.let("divisor", q.offset(to_i32(broadcast_load(ins[1], idx)), -z2))
        negative = b.let("negative", Bin("<", d, Const(0)))
        b.add(Assign(a, Select(negative, Bin("-", Const(0), a), a)),
              Assign(d, Select(negative, Bin("-", Const(0), d), d)))
        headroom = _leading_sign_bits(b, a)
        unscaled = b.let("quotient", q.srdhm(q.shift_left_wrapping(a, headroom),
                                             Load(inv_t, d), saturate=False))
        right = b.let("right", Bin("+", Bin("-", Load(over_t, d), Const(e)), headroom))
        scaled = q.srdhm(unscaled, m)
        # exact below 32 bits; at 32 or more the quotient rounds to 0 (C leaves TFLM's undefined)
        within = Bin("min", Bin("max", right, Const(0)), Const(31))
        y = Select(Bin(">=", right, Const(32)), Const(0), q.rdbpot(scaled, within))
        y = q.clamp(q.offset(y, zo), ctx.attrs["act_min"], ctx.attrs["act_max"])
        b.add(emit(0, idx, Cast(dt("int8"), y)))
        return b.stmt()
    return nest(ctx, tuple(f"i{k}" for k in range(len(shape))), shape, at)

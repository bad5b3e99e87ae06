"""Compute rules for the int16-activation kernels (aot/ops/quant/tflite_int16.py).

The 16x8 convolutions and FC run the int8 vector tiles where the sums
provably fit int32 (their 16-bit multiply-adds: x86's pmaddwd pairs,
NEON's SMLAL; dense convs on Arm's SDOT as two byte planes, x = 256 h +
l + 128), else the int8 loop nest (conv_nest) with an int64
accumulator row and the int64 bias, or for FC a dot product per output
in int64; BATCH_MATMUL is a dot product per output in int64. Their epilogue is the int64
MultiplyByQuantizedMultiplier: the 31-bit multiplier reduced to 16 bits at
compile time, then one rounding shift (`(acc * M16 + 2**(s-1)) >> s`,
s = 15 - e), exactly `qmath.mbqm_int64`; with an int32 bias, TFLM's int32
accumulator and the int8 kernels' requantization instead (both
aot/lower/arith/requant.py's TfliteInt16Requant).
SOFTMAX looks its two tables up per element (bases and slopes as PARAM
arrays), LOGISTIC and TANH interpolate the LSTM's sigmoid table: scalar
loops, as table loads do not vectorize. ADD, SUB, MUL, SQUARED_DIFFERENCE,
LEAKY_RELU and the pools are the int8 rules, which read the output dtype.
"""
from __future__ import annotations

import numpy as np

from aot.ir.tir import (Assign, Bin, Cast, Const, Load, Select, Store, Unary, Var, add,
                        dt, mul)
from aot.lower.arith import qmath as q
from aot.lower.kernels import int8_conv as i8
from aot.lower.kernels.cortex_m import dsp
from aot.lower.arith.loops import loop, nest, rows
from aot.lower.rules.elementwise import broadcast_load
from aot.lower.arith.quant import (CallView, bias_values, const_input, narrow, table, to_i32,
                                   weight_dtype)
from aot.lower.arith.requant import TfliteInt16Requant, mbqm, mbqm_block
from aot.lower.rules.quant.tflite_elementwise import (add_rule, leaky_relu_rule, mul_rule,
                                                      squared_difference_rule, sub_rule)
from aot.lower.kernels.dense import product
from aot.lower.rules.quant.tflite_fc import Int8Product, row_loops, row_reader
from aot.lower.arith.gemmlowp import count_leading_zeros, inv_sqrt_block
from aot.lower.rules.quant.tflite_pool import avg_pool2d, max_pool2d, reduce_per_output
from aot.lower.rules.quant.tflite_rowwise import row_max
from aot.lower.rules.lstm import sigmoid16_scaled, tanh16_scaled
from aot.lower.rules import LowerCtx, kernel_rule, value_rule
from aot.lower.kernels.windows import ConvGeom, conv_geom
from aot.lower.schedule.conv import int8_conv_schedule, int8_fc_schedule
from aot.ops.quant import qmath as ref_q
from aot.ops.quant import tflite_int8 as ref8
from aot.ops.quant import tflite_int16 as ref

value_rule("tfl.add_int16")(add_rule)
value_rule("tfl.sub_int16")(sub_rule)
value_rule("tfl.mul_int16")(mul_rule)
value_rule("tfl.leaky_relu_int16")(leaky_relu_rule)
value_rule("tfl.squared_difference_int16")(squared_difference_rule)
kernel_rule("tfl.max_pool2d_int16")(max_pool2d)
kernel_rule("tfl.avg_pool2d_int16")(avg_pool2d)


def sums_fit_int32(weights: np.ndarray, bias: np.ndarray) -> bool:
    """Whether every partial sum bias[c] + Σ w[c] x of int16 inputs stays in
    int32: then an int32 accumulator holds TFLM's int64 sum exactly (the
    int64 MBQM still scales it), and 32-bit MACs do the work."""
    rows = np.abs(weights.reshape(weights.shape[0], -1)).sum(axis=1)
    return bool(np.max(rows * 32768 + np.abs(bias)) <= ref_q.INT32_MAX)


def planes_fit_int32(weights: np.ndarray, bias: np.ndarray) -> bool:
    """Whether byte planes' partial sums stay in int32: the high planes'
    sums times 256 (at most 32768 sum|w|), the bias with 128 sum(w) and
    the low bytes' (at most 128 sum|w|) on top."""
    rows = np.abs(weights.reshape(weights.shape[0], -1)).sum(axis=1)
    return bool(np.max(rows * (32768 + 256) + np.abs(bias)) <= ref_q.INT32_MAX)


def _conv16(ctx: LowerCtx, ins, emit, weights: np.ndarray, g: ConvGeom):
    """The 16x8 conv: vector tiles where the sums provably fit int32 (the
    int8 kernels' tiles in their 16-bit multiply-adds: pmaddwd pairs on x86,
    widening multiply-adds on NEON; the epilogue the int64 MBQM on int64
    lanes), else the scalar nest in the accumulator TFLM's sums need."""
    bias = bias_values(ctx, ins, 2, g.cout)
    exact32 = sums_fit_int32(weights, bias)
    rq = TfliteInt16Requant(ctx, *ref.conv_multipliers(ctx, g.cout), exact32)

    def finish(idx, acc):
        b = q.Block(ctx)
        b.add(emit(0, idx, rq.apply(b, acc, idx[3])))
        return b.stmt()
    sched = int8_conv_schedule(ctx.target, g, weights, ins[0].in_memory, int16_input=True,
                               byte_planes=planes_fit_int32(weights, bias))
    if sched.algorithm == "dsp_depthwise16" and rq.acc_dtype == "int32":
        return dsp.depthwise(ctx, ins[0], g, dsp.int16_word_order(weights, 0), rq.bias(bias), 0,
                             finish, words=dsp.INT16, exact=True)
    if sched.algorithm == "dsp_dense16" and rq.acc_dtype == "int32":
        w = weights.reshape(g.cout, -1)
        return dsp.dense(ctx, ins[0], g, dsp.int16_word_order(w).reshape(weights.shape),
                         rq.bias(bias), 0, finish, words=dsp.INT16, walk=dsp.DSP_DENSE)
    if exact32 and not rq.wrapping32 and sched.algorithm == "vector":
        def epilogue(b, idx, acc, lanes):
            if lanes == 1:
                return finish(idx, acc)
            return emit(0, idx, rq.apply_vector(b, acc, idx[3], lanes))
        return i8.vector_conv_nest(ctx, g, sched, ins[0].load, 0, weights, bias, epilogue)
    return i8.conv_nest(ctx, g, ins[0].load, 0, weights, bias, finish, acc_dtype=rq.acc_dtype)


@kernel_rule("tfl.conv2d_16x8")
def conv2d_16x8(ctx: LowerCtx, ins, emit):
    x, w = ins[0], const_input(ctx, ins[1], "filter")
    depth = w.shape[3]
    g = conv_geom(ctx, x.shape, ctx.out_types[0].shape, w.shape[1:3], x.shape[3] // depth,
                     depth)
    return _conv16(ctx, ins, emit, w.astype(np.int64), g)


@kernel_rule("tfl.depthwise_conv2d_16x8")
def depthwise_conv2d_16x8(ctx: LowerCtx, ins, emit):
    x, w = ins[0], const_input(ctx, ins[1], "filter")
    # [1, KH, KW, C*M] -> [C*M, KH, KW, 1]: a grouped conv, one input channel per group
    weights = np.transpose(w[0], (2, 0, 1))[..., None].astype(np.int64)
    g = conv_geom(ctx, x.shape, ctx.out_types[0].shape, w.shape[1:3], x.shape[3], 1)
    return _conv16(ctx, ins, emit, weights, g)


@kernel_rule("tfl.fully_connected_16x8")
def fully_connected_16x8(ctx: LowerCtx, ins, emit):
    x = ins[0]
    w = ref.fc_weights(ctx, const_input(ctx, ins[1], "weight"))
    units, depth = w.shape
    bias = bias_values(ctx, ins, 2, units)
    exact32 = sums_fit_int32(w, bias)
    rq = TfliteInt16Requant(ctx, *ref.fc_multipliers(ctx), exact32)
    sched = int8_fc_schedule(ctx.target, w, x.in_memory, int16_input=True)
    if sched.algorithm == "dsp_fc16" and rq.acc_dtype == "int32":
        def finish(out_lead, o, acc):
            b = q.Block(ctx)
            b.add(emit(0, out_lead + (o,), rq.apply(b, acc, o)))
            return b.stmt()
        return dsp.fully_connected(ctx, x, dsp.int16_word_order(w), rq.bias(bias),
                                   ctx.out_types[0].shape, finish, words=dsp.INT16,
                                   walk=dsp.DSP_FC)
    if exact32 and not rq.wrapping32 and sched.algorithm == "vector":
        # the int8 layer's vector tiles in pairs (pmaddwd on x86)
        def requant(b, bi, c, acc, lanes):
            y = rq.apply(b, acc, c) if lanes == 1 else rq.apply_vector(b, acc, c, lanes)
            return emit(0, bi + (c,), y)
        out_shape = ctx.out_types[0].shape
        fc = Int8Product.make(ctx, sched, w, rq.bias(bias), row_reader(x, out_shape, depth),
                              None, requant)
        return product(ctx, fc, tuple(out_shape[:-1]), 1, units)
    start = table(ctx, "bias", rq.bias(bias))
    weights = ctx.param("weights", weight_dtype(w))

    def row(out_lead, x_at):
        def unit(o):
            b = q.Block(ctx)
            acc = b.let("acc", start(o))
            def mac(d):
                prod = Bin("*", to_i32(x_at(d)),
                           to_i32(Load(weights, add(mul(o, Const(depth)), d))))
                return Assign(acc, Bin("+", acc, q.i64(prod) if rq.acc_dtype == "int64"
                                       else prod))
            b.add(loop(ctx, "d", depth, mac))
            b.add(emit(0, out_lead + (o,), rq.apply(b, acc, o)))
            return b.stmt()
        return loop(ctx, "o", units, unit)
    return row_loops(ctx, x, ctx.out_types[0].shape, depth, row)


# ------------------------------------------------------------------ softmax

class _Lut:
    """generic_int16_table_lookup on one of the softmax tables (bases and
    int16 slopes as PARAM arrays)."""

    def __init__(self, ctx: LowerCtx, name: str, lut: np.ndarray):
        base, slope = ref.lut_bases_slopes(lut)
        self.base = ctx.param(f"{name}_base", base.astype(np.int16))
        self.slope = ctx.param(f"{name}_slope", slope.astype(np.int16))

    def __call__(self, b: q.Block, v: Var) -> Var:
        """v: an int32 local already within int16's range (read twice)."""
        index = b.let("index", Bin("+", Bin(">>", v, Const(7)), Const(256)))
        delta = Bin(">>", Bin("+", Bin("*", to_i32(Load(self.slope, index)),
                                       Bin("&", v, Const(0x7F))), Const(64)), Const(7))
        # the sum wraps to int16 as TFLM's does (no table here comes near)
        return b.let("looked_up", to_i32(Cast(dt("int16"), Bin(
            "+", to_i32(Load(self.base, index)), delta))))


@kernel_rule("tfl.softmax_int16")
def softmax_int16(ctx: LowerCtx, ins, emit):
    x = ins[0]
    s_in = ref.symmetric_scale(x.type, "the input", ctx.node)
    ref.check_softmax_output(ctx)
    mult, shift = ref.softmax_multiplier(ctx.attrs.get("beta", 1.0), s_in)
    exp_lut, recip_lut = (_Lut(ctx, n, t) for n, t in zip(("exp", "recip"), ref.softmax_luts()))
    depth = x.shape[-1]
    exps = ctx.scratch_buffer("exps", "int32", (depth,))
    i64 = dt("int64")

    def row(lead):
        b = q.Block(ctx)
        mx = row_max(ctx, b, x, lead, depth, lowest=-32768)
        total = b.let("sum", Const(0))

        def exp_of(i):
            eb = q.Block(ctx)
            diff = eb.let("diff", Bin("-", to_i32(x.load(lead + (i,))), mx))
            scaled = eb.let("scaled", q.clamp(q.offset(mbqm(diff, mult, shift), 32767),
                                              -32768, 32767))
            e = exp_lut(eb, scaled)
            eb.add(Store(exps, i, e), Assign(total, Bin("+", total, e)))
            return eb.stmt()
        b.add(loop(ctx, "i", depth, exp_of))
        clz, normalized = count_leading_zeros(b, total)
        # (sum << (clz - 1)) rounded to Q1.15 (over [1, 2)), then x = sum - 1 centred
        shifted = b.let("sum_q15", q.i32(Bin(">>", Bin("+", Bin(">>", normalized, Const(1, i64)),
                                                       Const(1 << 13, i64)), Const(14, i64))))
        centred = b.let("sum_minus_one", q.clamp(q.offset(shifted, -(1 << 15) - (1 << 16)),
                                                 -32768, 32767))
        recip = recip_lut(b, centred)
        right = b.let("right_shift", Bin("-", Const(31), clz))
        rounding = b.let("rounding", Bin("<<", Const(1, i64), q.i64(Bin("-", right, Const(1)))))

        def output(i):
            prod = Bin("+", Bin("*", q.i64(Load(exps, i)), q.i64(recip)), rounding)
            y = q.i32(Bin(">>", prod, q.i64(right)))
            return emit(0, lead + (i,), Cast(dt("int16"), q.clamp(y, 0, 32767)))
        b.add(loop(ctx, "i", depth, output))
        return b.stmt()
    shape = x.shape
    return rows(ctx, shape, row)


# --------------------------------------------------------------------- mean

@kernel_rule("tfl.mean_int16")
def mean_int16(ctx: LowerCtx, ins, emit):
    x = ins[0]
    axes = ref8.mean_axes(CallView(ctx), const_input(ctx, ins[1], "axes"))
    mult, shift = ref.mean_multiplier(ctx, int(np.prod([x.shape[d] for d in axes])))

    def finish(b, out_idx, acc):
        y = q.clamp(mbqm_block(b, acc, mult, shift), -32768, 32767)
        b.add(emit(0, out_idx, Cast(dt("int16"), y)))
    return reduce_per_output(ctx, x, axes, bool(ctx.attrs.get("keep_dims", False)), 0,
                                finish)


# ------------------------------------------------------------ logistic / tanh

@kernel_rule("tfl.logistic_int16", "tfl.tanh_int16")
def logistic_tanh_int16(ctx: LowerCtx, ins, emit):
    """Per element: the input scaled to 1/(3 * 4096) units, then the sigmoid
    table interpolated (a scalar loop: a vector of table loads is a gather)."""
    x = ins[0]
    mult, shift = ref.activation_input_scaling(ctx)
    table = ctx.param("sigmoid_table", ref_q.SIGMOID_TABLE_UINT16.astype(np.int32))
    interpolate = sigmoid16_scaled if ctx.node.op == "tfl.logistic_int16" else tanh16_scaled
    shape = ctx.out_types[0].shape

    def at(idx):
        b = q.Block(ctx)
        v = b.let("v", Bin("*", to_i32(x.load(idx)), Const(mult)))
        if shift:
            b.add(Assign(v, Bin(">>", Bin("+", v, Const(1 << (shift - 1))), Const(shift))))
        b.add(emit(0, idx, Cast(dt("int16"), interpolate(b, table, v))))
        return b.stmt()
    return nest(ctx, tuple(f"i{d}" for d in range(len(shape))), shape, at)


# -------------------------------------------------------------- relu / relu6

@value_rule("tfl.relu_int16")
def relu_int16(ctx: LowerCtx, ins, idx, lanes):
    x = to_i32(broadcast_load(ins[0], idx, lanes))
    return narrow(q.clamp(mbqm(x, *ref.relu_params(ctx)), 0, 32767), "int16")


@value_rule("tfl.relu6_int16")
def relu6_int16(ctx: LowerCtx, ins, idx, lanes):
    x = to_i32(broadcast_load(ins[0], idx, lanes))
    return narrow(q.clamp(x, 0, ref.relu6_top(ctx)), "int16")


@value_rule("tfl.abs_int16")
def abs_int16(ctx: LowerCtx, ins, idx, lanes):
    x = to_i32(broadcast_load(ins[0], idx, lanes))
    value = Bin("max", x, Unary("neg", x))   # int16 inputs: no INT32_MIN to negate
    rescale = ref.abs_rescale(ctx)
    if rescale is not None:
        value = mbqm(value, *rescale)
    return narrow(q.clamp(value, -32768, 32767), "int16")


# -------------------------------------------------------------- batch matmul

@kernel_rule("tfl.batch_matmul_int16")
def batch_matmul_int16(ctx: LowerCtx, ins, emit):
    """Per output element an int64 dot product along the shared dim, the
    batch dims broadcast, then the int64 MBQM (a per-tensor TfliteInt16Requant)."""
    lhs, rhs = ins[0], ins[1]
    out_shape = ctx.out_types[0].shape
    depth = lhs.shape[-1]
    rank = len(out_shape)
    rq = TfliteInt16Requant(ctx, *ref.batch_matmul_multiplier(ctx))
    i64 = dt("int64")

    def batch_index(shape, idx):
        lead = idx[rank - len(shape):rank - 2]
        return tuple(Const(0) if d == 1 else i for d, i in zip(shape[:-2], lead))

    def at(idx):
        b = q.Block(ctx)
        acc = b.let("acc", Const(0, i64))
        row, col = idx[-2], idx[-1]
        b.add(loop(ctx, "k", depth, lambda k: Assign(acc, Bin("+", acc, Cast(i64, Bin(
            "*", to_i32(lhs.load(batch_index(lhs.shape, idx) + (row, k))),
            to_i32(rhs.load(batch_index(rhs.shape, idx) + (k, col)))))))))
        b.add(emit(0, idx, rq.apply(b, acc, Const(0))))
        return b.stmt()
    return nest(ctx, tuple(f"i{d}" for d in range(rank)), out_shape, at)


# -------------------------------------------------------------------- rsqrt

@kernel_rule("tfl.rsqrt_int16")
def rsqrt_int16(ctx: LowerCtx, ins, emit):
    """Per element GetInvSqrtQuantizedMultiplierExp at run time (the
    L2_NORMALIZATION kernel's Newton-Raphson), applied to 1 with 20 extra
    bits, then the output rescale; x <= 0 gives 32767."""
    x = ins[0]
    m_out, e_out = ref.rsqrt_output_multiplier(ctx)
    shape = ctx.out_types[0].shape
    extra = ref.RSQRT_SHIFT

    def at(idx):
        b = q.Block(ctx)
        v = b.let("x", to_i32(x.load(idx)))
        mult, exp = inv_sqrt_block(b, v)
        total = b.let("total_shift", Bin("+", exp, Const(extra)))
        data = mbqm_block(b, Const(1), mult, left=Bin("max", total, Const(0)),
                            right=Bin("max", Bin("-", Const(0), total), Const(0)), name="data")
        y = q.clamp(mbqm_block(b, b.let("inverse_root", data), m_out, e_out - extra),
                    -32768, 32767)
        b.add(emit(0, idx, Cast(dt("int16"), Select(Bin(">", v, Const(0)), y, Const(32767)))))
        return b.stmt()
    return nest(ctx, tuple(f"i{d}" for d in range(len(shape))), shape, at)

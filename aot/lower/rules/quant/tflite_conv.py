"""Compute rules for the TFLite-semantics integer convolutions
(`tfl.conv2d`, `tfl.depthwise_conv2d`, with int8 activations or, LiteRT's
hybrid, float ones); the fully connected layer is tflite_fc.py's.

Bit-exact with aot/ops/quant/tflite_int8.py (TFLITE_INT8.md). The rule
requantizes; the schedule (aot/lower/schedule/conv.py: int8_conv_schedule)
picks the loop nest by its `algorithm`: a Cortex-M kernel
(aot/lower/kernels/cortex_m/, by its name in CONV), vector tiles
(aot/lower/kernels/int8_conv.py: vector_conv_nest) or the scalar loops
(int8_conv.conv_nest).

The other integer rules are in modules named for them: tflite_elementwise.py
(the value rules, DIV), tflite_pool.py (pools and MEAN), tflite_rowwise.py
(softmax, log-softmax, L2 normalization, cumsum), tflite_fc.py; the helpers
every one of them uses are aot/lower/arith/quant.py's.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from aot.isa.neon import saturating_narrow
from aot.ir.tir import (Assign, Bin, Broadcast, Call, Cast, Const, Decl, Expr, Load, Select,
                        Stmt, Store, Unary, Var, add, dt, dtype_of, flat_index, mul, seq)
from aot.lower.arith import fixed32
from aot.lower.arith import qmath as q
from aot.lower.arith.loops import nest
from aot.lower.arith.quant import (bias_values, const_input, round_half_away_to_int, scale_zp,
                                   table, vec_table, vector_lanes)
from aot.lower.arith.requant import (TfliteRequant, TfliteRequant32, TfliteVecRequant, proven,
                                     settle_constant_channels)
from aot.lower.kernels import cortex_m, riscv
from aot.lower.kernels.cortex_m import dsp as int8_dsp
from aot.lower.kernels.int8_conv import conv_nest, one_row, vector_conv_nest
from aot.lower.rules.elementwise import const_like
from aot.lower.kernels.windows import ConvGeom, conv_geom
from aot.lower.rules import LowerCtx, TensorRef, kernel_rule
from aot.lower.schedule.conv import int8_conv_schedule
from aot.lower.schedule.strategy import joined_stores
from aot.ops.quant import tflite_int8 as ref

# The named kernels of every target family (the schedule names one).
CONV = {**cortex_m.CONV, **riscv.CONV}


def int8_conv(ctx: LowerCtx, ins, emit, weights: np.ndarray, g: ConvGeom) -> Stmt:
    """tfl.conv2d / tfl.depthwise_conv2d with int8 activations (§4, §5)."""
    x = ins[0]
    s_in, zp_in = scale_zp(ctx, x.type, "the input")
    s_out, zp_out = scale_zp(ctx, ctx.out_types[0], "the output")
    scales = ref.channel_scales(ins[1].type, g.cout, ctx.node)
    multipliers = ref.conv_multipliers(s_in, scales, s_out)
    rq = TfliteRequant.make(ctx, *multipliers)
    lo, hi = ctx.attrs["act_min"], ctx.attrs["act_max"]
    out_dtype = ctx.out_types[0].dtype

    vrq: list = []      # made for the first vector of accumulators (Helium's kernels)

    def finish(idx, acc):
        b = q.Block(ctx)
        lanes = dtype_of(acc).lanes
        if lanes > 1:
            if not vrq:
                vrq.append(TfliteVecRequant.make(ctx, *multipliers))
            y = q.clamp(q.offset(vrq[0].apply(b, acc, idx[3]), zp_out), lo, hi)
        else:
            y = q.offset(rq.apply(b, acc, idx[3]), zp_out - getattr(rq, "zp", 0))
            y = saturate(y) if saturate is not None else q.clamp(y, lo, hi)
        b.add(emit(0, idx, Cast(dt(out_dtype, lanes), y)))
        return b.stmt()

    bias = bias_values(ctx, ins, 2, g.cout)
    sched = int8_conv_schedule(ctx.target, g, weights, x.in_memory, one_row=True)
    saturate = None
    if sched.algorithm in CONV:
        # finish reads rq: in 32-bit arithmetic where the accumulators' bounds prove it exact;
        # on the DSP cores the output zero point in its rounding term and the clamp an SSAT
        dsp = int8_dsp.saturating(ctx.target, out_dtype)
        if dsp and g.groups == 1:
            weights, bias, multipliers = _settled(weights, bias, zp_in, multipliers)
        rq = TfliteRequant32.make(ctx, *multipliers,
                                  int8_dsp.acc_bound(weights.reshape(g.cout, -1), bias,
                                                     zp_in), zp_out if dsp else 0, merged=dsp,
                                  floor_ok=dsp and lo >= zp_out) or rq
        saturate = partial(int8_dsp.saturate, lo=lo, hi=hi) if dsp else None
        return CONV[sched.algorithm](ctx, x, g, weights, bias, zp_in, finish)
    if sched.algorithm == "vector":
        bound, vec_multipliers = None, ref.conv_multipliers(s_in, scales, s_out)
        if fixed32.nudged_requant(ctx.target):
            # A dead channel's bias near 2^30 kept every channel off the nudged
            # rounding (vww int8's 1x1 convs from 12x12 on): settled, it is a
            # constant (zero weights fit every accumulator strategy).
            weights, bias, vec_multipliers = _constants_settled(weights, bias, zp_in,
                                                                vec_multipliers)
            bound = int8_dsp.acc_bound(weights.reshape(g.cout, -1), bias, zp_in)
        vrq = TfliteVecRequant.make(ctx, *vec_multipliers, bound, zp_out, floor_ok=lo >= zp_out)

        def epilogue(b, idx, acc, lanes):
            if lanes == 1:
                return finish(idx, acc)
            y = Cast(dt(out_dtype, lanes), q.clamp(vrq.requantize(b, acc, idx[3], zp_out), lo, hi))
            if vrq.rounds_inline:   # a fused ADD's 32-bit rescale reads it three times
                y = b.let("out", y)
            return emit(0, idx, y)

        def joined(b, idx, accs):
            """Four vectors' requantized lanes narrowed together (SQXTN,
            SQXTN2 twice), one clamp and one 16-byte store: a 4-lane int8
            vector's own narrowing, clamp and 4-byte store cost ~3.5 more
            instructions each. A fused epilogue (a residual ADD) then
            runs on the 16 lanes too, its fixed-point steps NEON's on each
            quarter (legalize: arm_sqrdmulh / arm_rdbpot on int32 x 16)."""
            ys = [vrq.requantize(b, a, add(idx[3], Const(4 * k)), zp_out)
                  for k, a in enumerate(accs)]
            y = saturating_narrow(*ys)      # saturated to int8: a bound at its end is met
            if lo > -128:
                y = Bin("max", y, const_like(lo, y))
            if hi < 127:
                y = Bin("min", y, const_like(hi, y))
            if vrq.rounds_inline:
                y = b.let("out", y)
            return emit(0, idx, y)
        join = joined if out_dtype == "int8" and joined_stores(ctx.target) else None
        load = x.load
        if sched.flat_pixels:
            g, load, epilogue, join = one_row(g, load, epilogue, join)
        return vector_conv_nest(ctx, g, sched, load, zp_in, weights, bias, epilogue,
                                joined=join)
    return conv_nest(ctx, g, x.load, zp_in, weights, bias, finish)


def _constants_settled(weights: np.ndarray, bias: np.ndarray, zp_in: int, multipliers):
    """(weights, bias, multipliers) with every channel whose output is one
    constant in its simplest form (requant.settle_constant_channels: exact)."""
    w, b, m, s = settle_constant_channels(weights.reshape(len(weights), -1), bias, zp_in,
                                          *multipliers)
    return w.reshape(weights.shape).astype(weights.dtype), b.astype(bias.dtype), (m, s)


def _settled(weights: np.ndarray, bias: np.ndarray, zp_in: int, multipliers):
    """(weights, bias, multipliers) with the constant channels settled
    (requant.settle_constant_channels) when that proves the 32-bit
    requantization for every channel, else as they are (the 64-bit form
    reads the multipliers the rule made first)."""
    w, b, m, s = settle_constant_channels(weights.reshape(len(weights), -1), bias, zp_in,
                                          *multipliers)
    if not proven(m, s, int8_dsp.acc_bound(w, b, zp_in)):
        return weights, bias, multipliers
    return w.reshape(weights.shape).astype(weights.dtype), b.astype(bias.dtype), (m, s)


def hybrid_conv(ctx: LowerCtx, ins, emit, weights: np.ndarray, g: ConvGeom) -> Stmt:
    """Float input, int8 weights (LiteRT's dynamic-range kernel): each image
    is quantized symmetrically on the fly, then an integer convolution is
    scaled back to float (aot/ops/quant/tflite_int8.py: _hybrid_conv2d)."""
    x = ins[0]
    w_scale = float(np.float32(ins[1].type.quant.scale[0]))
    bias = const_input(ctx, ins[2] if len(ins) > 2 else None, "bias")
    qx = ctx.scratch_buffer("quantized_input", "int8", tuple(x.shape))
    pixels = tuple(x.shape[1:])
    f32 = dt("float32")
    scale = ctx.fresh("scale", f32)

    def prologue(n) -> Stmt:
        b = q.Block(ctx)
        peak = _peak(ctx, b, x, n, pixels)
        inv = b.let("inv", Bin("/", Const(127.0, f32),
                               Select(Bin("==", peak, Const(0.0, f32)), Const(1.0, f32), peak)))

        def quantize(i):
            v = ctx.fresh("v", f32)
            return seq(Decl(v, Bin("*", x.load((n,) + i), inv)),
                       Store(qx, flat_index((n,) + i, qx.shape),
                             Cast(dt("int8"), q.clamp(round_half_away_to_int(v), -127, 127))))
        b.add(nest(ctx, ("h", "w", "c"), pixels, quantize))
        per_image = Select(Bin("==", peak, Const(0.0, f32)), Const(1.0, f32),
                           Bin("/", peak, Const(127.0, f32)))
        b.add(Decl(scale, Bin("*", per_image, Const(w_scale, f32))))
        return b.stmt()

    float_bias = None if bias is None else table(ctx, "bias", bias.astype(np.float32))

    def finish(idx, acc):
        y = Bin("*", Cast(f32, acc), scale)
        if float_bias is not None:
            y = Bin("+", y, float_bias(idx[3]))
        return emit(0, idx, y)

    def load_q(i, lanes=1):
        return Load(qx, flat_index(i, qx.shape), lanes)

    # the quantized image is read through load_q: vector tiles or the scalar loops
    sched = int8_conv_schedule(ctx.target, g, weights)
    if sched.algorithm == "vector":
        bias_vec = None if bias is None else vec_table(ctx, "bias", bias, "float32")

        def epilogue(b, idx, acc, lanes):
            if lanes == 1:
                return finish(idx, acc)
            y = Bin("*", Cast(dt("float32", lanes), acc), Broadcast(scale, lanes))
            if bias_vec is not None:
                y = Bin("+", y, bias_vec(idx[3], lanes))
            return emit(0, idx, y)
        return vector_conv_nest(ctx, g, sched, load_q, 0, weights, np.zeros(g.cout, np.int64),
                                epilogue, prologue)
    return conv_nest(ctx, g, load_q, 0, weights, np.zeros(g.cout, np.int64), finish, prologue)


def _peak(ctx: LowerCtx, b: q.Block, x: TensorRef, n: Expr, pixels: tuple) -> Var:
    """max |x| over image n (h, w, c). With vectors: K accumulators along the
    channels, then their lanes through a small scratch row. One scalar chain
    of maxes, each waiting for the last, took half of a kws layer's time;
    max is exact in any order, so the result is the same."""
    f32 = dt("float32")
    lanes = vector_lanes(ctx)
    if lanes == 1 or len(pixels) != 3 or pixels[-1] % lanes:
        peak = b.let("peak", Const(0.0, f32))
        b.add(nest(ctx, ("h", "w", "c"), pixels, lambda i: Assign(
            peak, Bin("max", peak, _fabs(x.load((n,) + i))))))
        return peak
    vecs = pixels[-1] // lanes
    k = next(d for d in (4, 2, 1) if vecs % d == 0)
    accs = [b.let("peaks", Broadcast(Const(0.0, f32), lanes)) for _ in range(k)]

    def body(i):
        h, w, cv = i
        stmts = []
        for j, acc in enumerate(accs):
            v = x.load((n, h, w, add(mul(cv, Const(k * lanes)), Const(j * lanes))), lanes)
            stmts.append(Assign(acc, Bin("max", acc, Bin("max", v, Unary("neg", v)))))
        return seq(*stmts)
    b.add(nest(ctx, ("h", "w", "cv"), (*pixels[:-1], vecs // k), body))
    total = accs[0]
    for acc in accs[1:]:
        total = Bin("max", total, acc)
    row = ctx.scratch_buffer("peak_lanes", "float32", (lanes,))
    b.add(Store(row, Const(0), total))
    peak = b.let("peak", Load(row, Const(0)))
    for lane in range(1, lanes):
        b.add(Assign(peak, Bin("max", peak, Load(row, Const(lane)))))
    return peak


def _fabs(v: Expr) -> Expr:
    return Call("fabsf", (v,), dtype_of(v))


@kernel_rule("tfl.conv2d")
def conv2d(ctx: LowerCtx, ins, emit):
    x, w = ins[0], const_input(ctx, ins[1], "filter")
    depth = w.shape[3]
    g = conv_geom(ctx, x.shape, ctx.out_types[0].shape, w.shape[1:3], x.shape[3] // depth, depth)
    if x.type.dtype == "float32":
        return hybrid_conv(ctx, ins, emit, w.astype(np.int64), g)
    return int8_conv(ctx, ins, emit, w.astype(np.int64), g)


@kernel_rule("tfl.depthwise_conv2d")
def depthwise_conv2d(ctx: LowerCtx, ins, emit):
    x, w = ins[0], const_input(ctx, ins[1], "filter")
    # [1, KH, KW, C*M] -> [C*M, KH, KW, 1]: a grouped conv, one input channel per group
    weights = np.transpose(w[0], (2, 0, 1))[..., None].astype(np.int64)
    g = conv_geom(ctx, x.shape, ctx.out_types[0].shape, w.shape[1:3], x.shape[3], 1)
    return int8_conv(ctx, ins, emit, weights, g)

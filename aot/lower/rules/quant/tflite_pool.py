"""Integer (TFLite-semantics) pooling and MEAN.

AVERAGE_POOL_2D and MAX_POOL_2D run the convolutions' window nest
(aot/lower/kernels/int8_window.py: window_nest, on conv_walk's walk over the
border regions and the interior) with the channels innermost; the average
counts only the in-image taps (a constant in the interior). MEAN sums each output's
reduced axes, then rescales and divides, rounding as TFLM does.
"""
from __future__ import annotations

from typing import Callable

from aot.ir.tir import Assign, Bin, Cast, Const, Expr, Load, Stmt, Store, Var, add, dt
from aot.lower.arith import qmath as q
from aot.lower.arith.requant import mbqm_block
from aot.lower.arith.loops import loop, nest
from aot.lower.arith.quant import CallView, const_input, scale_zp, to_i32
from aot.lower.kernels.int8_window import window_nest
from aot.lower.rules import LowerCtx, TensorRef, kernel_rule
from aot.lower.kernels.windows import conv_geom, window_pos
from aot.ops.quant import qmath as ref_q
from aot.ops.quant import tflite_int8 as ref


def _pool(ctx: LowerCtx, ins, emit, reduce_tap, start: int, final) -> Stmt:
    """The int8 pools: acc = reduce_tap(acc, x) from `start` over the in-image
    taps, channels innermost; emit clamp(final(acc, count)), count being the
    number of in-image taps (padded taps are not counted)."""
    x = ins[0]
    ref.check_pool_quant(CallView(ctx))
    n, oh, ow, c = ctx.out_types[0].shape
    kh, kw = ctx.attrs["kernel"]
    g = conv_geom(ctx, x.shape, ctx.out_types[0].shape, (kh, kw), c, 1)
    acc = ctx.scratch_buffer("acc", "int32", (c,))
    lo, hi = ctx.attrs["act_min"], ctx.attrs["act_max"]

    def taps(i, ky, kx, iy, ix, inside):
        return loop(ctx, "c", c, lambda ch: Store(acc, ch, reduce_tap(
            Load(acc, ch), to_i32(x.load((i, iy, ix, ch))))))

    def count(oy, ox, inside) -> Expr:
        if inside:
            return Const(kh * kw)
        y0 = window_pos(oy, Const(0), g.strides[0], g.pad_top, 1)
        x0 = window_pos(ox, Const(0), g.strides[1], g.pad_left, 1)
        rows = Bin("-", Bin("min", add(y0, Const(kh)), Const(g.h)), Bin("max", y0, Const(0)))
        cols = Bin("-", Bin("min", add(x0, Const(kw)), Const(g.w)), Bin("max", x0, Const(0)))
        return Bin("*", rows, cols)

    def finish(idx, total, inside):
        b = q.Block(ctx)
        value = b.let("acc", total)
        y = q.clamp(final(value, count(idx[1], idx[2], inside)), lo, hi)
        b.add(emit(0, idx, Cast(dt(ctx.out_types[0].dtype), y)))
        return b.stmt()

    return window_nest(ctx, g, acc, lambda ch, inside: Const(start), taps, finish)


@kernel_rule("tfl.avg_pool2d")
def avg_pool2d(ctx: LowerCtx, ins, emit):
    return _pool(ctx, ins, emit, lambda acc, v: Bin("+", acc, v), 0, q.div_round_away)


@kernel_rule("tfl.max_pool2d")
def max_pool2d(ctx: LowerCtx, ins, emit):
    lowest = ref.INT_RANGE[ctx.out_types[0].dtype][0]
    return _pool(ctx, ins, emit, lambda acc, v: Bin("max", acc, v), lowest,
                 lambda acc, count: acc)


def reduce_per_output(ctx: LowerCtx, x: TensorRef, axes, keep: bool, zp: int,
                      finish: Callable[[q.Block, tuple, Var], None]) -> Stmt:
    """For each output index: acc = Σ (x - zp) over the reduced axes, then
    finish(block, out_idx, acc) adds the epilogue (MEAN's kernels)."""
    kept = [d for d in range(len(x.shape)) if d not in axes]
    out_shape = tuple(x.shape[d] if d in kept else 1 for d in range(len(x.shape)) if
                      keep or d in kept)

    def at(out_idx):
        b = q.Block(ctx)
        acc = b.let("acc", Const(0))
        kept_idx = [out_idx[d] for d in kept] if keep else list(out_idx)

        def tap(red_idx):
            full, k, r = [], iter(kept_idx), iter(red_idx)
            for d in range(len(x.shape)):
                full.append(next(r) if d in axes else next(k))
            return Assign(acc, Bin("+", acc, q.offset(to_i32(x.load(tuple(full))), -zp)))
        b.add(nest(ctx, tuple(f"k{d}" for d in axes), [x.shape[d] for d in axes], tap))
        finish(b, out_idx, acc)
        return b.stmt()
    return nest(ctx, tuple(f"i{d}" for d in range(len(out_shape))), out_shape, at)


@kernel_rule("tfl.mean")
def mean(ctx: LowerCtx, ins, emit):
    x = ins[0]
    axes = ref.mean_axes(CallView(ctx), const_input(ctx, ins[1], "axes"))
    s_in, zp_in = scale_zp(ctx, x.type, "the input")
    s_out, zp_out = scale_zp(ctx, ctx.out_types[0], "the output")
    mult, shift = ref_q.quantize_multiplier(s_in / s_out)
    count = ref.mean_count(ctx.attrs, [x.shape[d] for d in axes])

    def finish(b, out_idx, acc):
        scaled = b.let("rescaled", mbqm_block(b, acc, mult, shift))
        y = q.clamp(q.offset(q.div_round_away(scaled, count), zp_out), -128, 127)
        b.add(emit(0, out_idx, Cast(dt("int8"), y)))
    return reduce_per_output(ctx, x, axes, bool(ctx.attrs.get("keep_dims", False)), zp_in,
                             finish)

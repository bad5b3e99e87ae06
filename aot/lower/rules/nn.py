"""Compute rules for the float convolutions and dense products of
aot/ops/nn.py: Conv, ConvTranspose, Gemm, MatMul. They are built from the
register tiles of aot/lower/kernels/tiles.py; a direct or depthwise convolution
walks its output through conv_walk.walk over windows.py's regions (as
pooling, pool.py, and the int8 convolution do; Winograd, winograd.py, runs
on the same dense tiles), and a tile's reduction over its taps is
conv.py's, the int8 convolution's beside it. BatchNormalization and
Resize are in batchnorm.py and resize.py, the small statement builders in
builders.py.

How the kernels are shaped (see /work/shared/PERFORMANCE.md; the numbers
are in aot/lower/schedule/tile_sizes.py, a convolution's choices among them in one
frozen schedule, aot/lower/schedule/conv.py):

- The output channel axis is innermost and unit-stride (NHWC). Outputs are
  computed in register tiles of MR neighbouring pixels x NR channels: NR is
  a few vector accumulators, declared as locals, updated with lane-wise
  multiply-adds (one broadcast input and one weight vector load shared by
  the tile) and stored once through `emit`, which applies the fused
  epilogue in registers. Channel counts that are not a multiple of NR end
  in an exact-size remainder tile (whole vectors, a half vector, scalars);
  rows that are not a multiple of MR in an exact-size pixel block.
- Weights are repacked at compile time into the order the inner loop reads
  them: [group][k...][in-channel][out-channel] for convolutions, and
  per-tile column panels for a constant matrix operand (Gemm, MatMul, 1x1
  convolutions, which are matrix products over all pixels).
- Shapes are constants. Out-of-image taps cost no branch: each spatial axis
  is split into runs of output positions whose in-image taps are the same
  range, and every combination of runs (a region: the interior, the edges,
  the corners) gets its own loop nest with constant tap bounds. Only when
  that would make too many regions does an axis fall back to guarded taps.
  A small map, mostly border, is instead copied into a zero-padded
  workspace and convolved as one region.
"""
from __future__ import annotations

import itertools
from dataclasses import replace
from functools import partial
from typing import Sequence

import numpy as np

from aot.ir.graph import TensorType
from aot.ir.tir import (Bin, Buffer, Comment, Const, Expr, Load, Stmt, Store, add, dt, dtype_of,
                        flat_index, mul)
from aot.lower.arith.loops import (accumulators, float_only, loop, offsets, plus, seq_of,
                                   shared_param, unravel)
from aot.lower.kernels import half_conv, half_dense
from aot.lower.kernels.conv_tile import FloatConv, FloatFma, bias_init, conv_tile
from aot.lower.schedule.conv import float_conv_schedule, half_direct
from aot.lower.kernels.conv_walk import walk
from aot.lower.kernels.dense import Operand, dense
from aot.lower.rules.elementwise import broadcast_index, broadcast_load, const_like
from aot.lower.kernels import channel_dot, winograd
from aot.lower.rules import LowerCtx, TensorRef, kernel_rule
from aot.lower.schedule.tile_sizes import Tile, tile
from aot.lower.kernels.tiles import over_tiles, rank1_update, tile_widths
from aot.lower.kernels.windows import SpatialOp, regions, spatial_op
from aot.ops import nn as ref


# ---------------------------------------------------------------------------- Conv

def _pack_conv_weight(w: np.ndarray, layout: str, group: int) -> np.ndarray:
    """Weight -> [group][k...][in-channel][out-channel] (the inner loop's order)."""
    if layout == "NHWC":                       # [O, k..., I/g] -> [O, I/g, k...]
        w = np.moveaxis(w, -1, 1)
    o, icg = w.shape[:2]
    k = w.shape[2:]
    w = w.reshape((group, o // group, icg) + k)
    nk = len(k)
    return np.ascontiguousarray(w.transpose((0,) + tuple(range(3, 3 + nk)) + (2, 1)))


def _conv_operands(ctx: LowerCtx, ins: Sequence[TensorRef]):
    """x, the constant weight (in the output's type), the bias or None, the
    output dtype, and the input and output seen as spatial operands."""
    x, w = ins[0], ins[1]
    dtype = dt(ctx.out_types[0].dtype)
    float_only(ctx, dtype)
    if w.value is None:
        raise ctx.unsupported(f"{ctx.node.op} with a weight computed at run time")
    return (x, w.value.astype(dtype.scalar), ins[2] if len(ins) > 2 else None, dtype,
            spatial_op(ctx, x.shape), spatial_op(ctx, ctx.out_types[0].shape))


@kernel_rule("Conv")
def conv(ctx: LowerCtx, ins: Sequence[TensorRef], emit) -> Stmt:
    x, weight, bias, dtype, xin, out = _conv_operands(ctx, ins)
    group = int(ctx.attrs.get("group", 1))
    packed = _pack_conv_weight(weight, xin.layout, group)
    kernel = packed.shape[1:-2]
    win = ref.resolve_window(ctx, xin.spatial, kernel)
    if _long_axis_first(x, xin, out, win):
        x, xin, out, win, packed, emit = _swap_axes(x, xin, out, win, packed, emit)
    icg, ocg = packed.shape[-2], packed.shape[-1]
    sched = float_conv_schedule(ctx.target, dtype, xin, out, win, group, icg, ocg,
                                x.buffer is not None,
                                winograd.applies(xin, win, group, dtype, icg, ocg))
    t = sched.tile
    if sched.algorithm.startswith("winograd"):
        return winograd.conv(ctx, emit, x, packed[0], bias, xin, out, win, sched.algorithm)
    if sched.algorithm == "pointwise":
        return _pointwise_conv(ctx, emit, x, bias, packed.reshape(icg, ocg), xin, out,
                               sched.flat)
    if sched.algorithm == "depthwise":
        per_channel = np.ascontiguousarray(np.moveaxis(packed[..., 0, 0], 0, -1))  # [k...][C]
        return _depthwise(ctx, x, per_channel, bias, xin, out, win, sched, emit)
    if sched.algorithm == "channel_dot":
        wp = shared_param(ctx, "w_packed", np.ascontiguousarray(packed.swapaxes(-1, -2)))
        fc = FloatConv(x, xin, win, wp, packed.shape[:-2] + (ocg, icg), icg, ocg, t, dtype)
        return walk(ctx, sched.walk, xin.batch, regions(sched.walk.regions, win, xin.spatial), t,
                    group, tile_widths(ocg, t),
                    channel_dot.tile_body(ctx, fc, bias, out, emit,
                                          ctx.target.lanes(dtype.bits), sched.fold_sums))
    wp = shared_param(ctx, "w_packed", packed)
    copy = None
    if sched.copy_padded:
        copy, x, xin = _padded_input(ctx, x, xin, win, t.lanes)
        win = replace(win, pad_begin=(0,) * len(kernel), pad_end=(0,) * len(kernel))
    fc = FloatConv(x, xin, win, wp, packed.shape, icg, ocg, t, dtype)
    in_half = (t == half_dense.TILE
               and half_direct(ctx.target, dtype, xin.layout, group, icg, ocg))
    strategy = (half_conv.HalfFma if in_half else FloatFma)(fc, bias, out, emit,
                                                            merge_rows=sched.merge_rows)
    return walk(ctx, sched.walk, xin.batch, regions(sched.walk.regions, win, xin.spatial), t,
                group, tile_widths(ocg, t), partial(conv_tile, ctx, strategy), prologue=copy)


def _long_axis_first(x: TensorRef, xin: SpatialOp, out: SpatialOp, win: ref.Window) -> bool:
    """A channel-last 2-D conv whose second axis is 1 everywhere (an Hx1
    map, a Kx1 kernel, no padding across: the 1-D conv jax2tf and tf2onnx
    write as a 2-D one). Its tiles block pixels along the last axis, one
    pixel wide here; the same memory read as 1xH blocks them along H."""
    return (xin.layout == "NHWC" and len(win.kernel) == 2 and x.value is None
            and xin.spatial[1] == 1 and out.spatial[1] == 1 and win.kernel[1] == 1
            and win.pad_begin[1] == 0 and win.pad_end[1] == 0 and out.spatial[0] > 1)


def _swap_axes(x: TensorRef, xin: SpatialOp, out: SpatialOp, win: ref.Window,
               packed: np.ndarray, emit):
    """The conv with its two spatial axes swapped: [N, H, 1, C] read as
    [N, 1, H, C] (the same bytes, so a kernel indexing x's buffer itself
    reads the same addresses), the window and the packed weights
    [g][k0][k1][ic][oc] swapped alike, the output stored through `emit`
    at its own indices."""
    def swap(t):
        return (t[1], t[0])

    def perm(idx):
        return (idx[0], idx[2], idx[1], *idx[3:])
    shape = perm(x.shape)
    x2 = TensorRef(x.name, TensorType(shape, x.type.dtype),
                   lambda idx, lanes=1: x.load(perm(tuple(idx)), lanes), x.buffer)
    win2 = ref.Window(*(swap(f) for f in (win.kernel, win.strides, win.dilations,
                                            win.pad_begin, win.pad_end, win.out)))
    return (x2, replace(xin, spatial=swap(xin.spatial)), replace(out, spatial=swap(out.spatial)),
            win2, np.ascontiguousarray(packed.swapaxes(1, 2)),
            lambda k, idx, value: emit(k, perm(tuple(idx)), value))


def _padded_input(ctx: LowerCtx, x: TensorRef, xin: SpatialOp, win: ref.Window, lanes: int):
    """x (channel-last) copied into a workspace with the window's zero
    padding around it: (the copy of image n, a walk's prologue(n); the
    workspace as the new input; its shape).
    Each padded axis is three segments (begin pad, image, end pad); a
    region of image segments only is copied, any other region zeroed."""
    dtype = dt(x.type.dtype)
    spatial = tuple(s + b + e for s, b, e in zip(xin.spatial, win.pad_begin, win.pad_end))
    shape = (xin.batch, *spatial, xin.channels)
    buf = ctx.scratch_buffer("padded", dtype, shape)
    padded = SpatialOp("NHWC", xin.batch, xin.channels, spatial)
    segments = [[(0, b, False), (b, s, True), (b + s, e, False)]
                for s, b, e in zip(xin.spatial, win.pad_begin, win.pad_end)]
    t = Tile(lanes, 1)

    def region(n, segs) -> Stmt:
        image = all(inside for _, _, inside in segs)

        def level(a: int, pos: list[Expr]) -> Stmt | None:
            if a == len(segs):
                src = [plus(p, -segs[i][0]) for i, p in enumerate(pos)]
                return over_tiles(ctx, xin.channels, t, lambda c0, widths: seq_of(*(Store(
                    buf, flat_index(padded.index(n, pos, plus(c0, off)), shape),
                    x.load(xin.index(n, src, plus(c0, off)), wd) if image
                    else const_like(0, dtype.with_lanes(wd)))
                    for off, wd in zip(offsets(widths), widths))))
            start, count, _ = segs[a]
            return loop(ctx, f"p{a}", count, lambda v: level(a + 1, pos + [v]), start=start)
        return level(0, [])

    def copy(n) -> Stmt:
        return seq_of(Comment("the input inside its zero padding: no tap below tests bounds"),
                      *(region(n, segs) for segs in itertools.product(*segments)
                        if all(count for _, count, _ in segs)))
    ref_ = TensorRef(buf.name, TensorType(shape, dtype.scalar),
                     lambda idx, lanes=1: Load(buf, flat_index(tuple(idx), shape), lanes), buf)
    return copy, ref_, padded


def _pointwise_conv(ctx, emit, x: TensorRef, bias, w: np.ndarray, xin: SpatialOp,
                    out: SpatialOp, flat: bool) -> Stmt:
    """A 1x1, stride-1, unpadded channel-last conv is a matrix product
    [pixels, IC] x [IC, OC]: one row of the image at a time, or with
    `flat` (the schedule's choice: rows too short for the tile's blocks)
    every pixel of the map in one run of blocks across rows (and images),
    at the price of dividing the pixel index back into coordinates when
    storing."""
    dtype = dt(ctx.out_types[0].dtype)
    ic, oc = w.shape

    def finish(acc, bi, i, j):
        lanes = dtype_of(acc).lanes
        return acc if bias is None else Bin("+", acc, bias_init(bias, dtype, j)(0, lanes))
    if not flat:
        batch = (xin.batch, *out.spatial[:-1])
        a = Operand(lambda bi, r, c, lanes: x.load((*bi, r, c), lanes), True)
        return dense(ctx, emit, a, w, batch, out.spatial[-1], ic, oc,
                     lambda bi, i, j: (*bi, i, j), finish)
    dims = (xin.batch, *out.spatial)
    a = Operand(lambda bi, r, c, lanes: Load(x.buffer, add(mul(r, Const(ic)), c), lanes), True)
    return dense(ctx, emit, a, w, (), int(np.prod(dims)), ic, oc,
                 lambda bi, i, j: (*unravel(i, dims), j), finish)


def _depthwise(ctx, x, packed, bias, xin, out, win, sched, emit) -> Stmt:
    """One filter per channel, channel-last: the channel axis is the vector
    axis of the input, the weights and the output alike. A tile of several
    neighbouring pixels loads each tap's weights once for all of them (and
    at stride 1 the pixels' overlapping taps read the same inputs); with
    t.weights_stay the channel tiles are the outer loop (the schedule's
    walk), so that a tile's weights stay in registers over every pixel."""
    dtype, t = dt(ctx.out_types[0].dtype), sched.tile
    wp = shared_param(ctx, "w_packed", packed)         # [k...][C]
    fc = FloatConv(x, xin, win, wp, packed.shape, 1, 1, t, dtype)
    return walk(ctx, sched.walk, xin.batch, regions(sched.walk.regions, win, xin.spatial), t, 1,
                tile_widths(xin.channels, t),
                partial(conv_tile, ctx, FloatFma(fc, bias, out, emit, depthwise=True)))


# -------------------------------------------------------------------- Gemm, MatMul

def _matrix(ref_: TensorRef, trans: bool) -> Operand:
    """A 2-D operand read as [row][col] (transposed if `trans`)."""
    if trans:
        return Operand(lambda bi, r, c, lanes: ref_.load((c, r), lanes), False)
    return Operand(lambda bi, r, c, lanes: ref_.load((r, c), lanes), True)


@kernel_rule("Gemm")
def gemm(ctx: LowerCtx, ins: Sequence[TensorRef], emit) -> Stmt:
    a_ref, b_ref = ins[0], ins[1]
    c_ref = ins[2] if len(ins) > 2 else None
    dtype = dt(ctx.out_types[0].dtype)
    trans_a, trans_b = int(ctx.attrs.get("transA", 0)), int(ctx.attrs.get("transB", 0))
    alpha, beta = float(ctx.attrs.get("alpha", 1.0)), float(ctx.attrs.get("beta", 1.0))
    if not dtype.is_float and (alpha != 1.0 or beta not in (0.0, 1.0)):
        raise ctx.unsupported(f"integer Gemm with alpha {alpha}, beta {beta}")
    m, n = ctx.out_types[0].shape
    k = a_ref.shape[0] if trans_a else a_ref.shape[1]
    a = _matrix(a_ref, bool(trans_a))
    if b_ref.value is not None:
        b = b_ref.value.T if trans_b else b_ref.value
    else:
        b = _matrix(b_ref, bool(trans_b))

    def finish(acc, bi, i, j) -> Expr:
        if alpha != 1.0:
            acc = Bin("*", acc, const_like(alpha, acc))
        if c_ref is not None and beta != 0.0:
            c = broadcast_load(c_ref, (i, j), dtype_of(acc).lanes)
            acc = Bin("+", acc, c if beta == 1.0 else Bin("*", c, const_like(beta, c)))
        return acc

    return dense(ctx, emit, a, b, (), m, k, n,
                 lambda bi, i, j: (i, j), finish)


@kernel_rule("MatMul")
def matmul(ctx: LowerCtx, ins: Sequence[TensorRef], emit) -> Stmt:
    a_ref, b_ref = ins[0], ins[1]
    a_shape = (1,) + a_ref.shape if len(a_ref.shape) == 1 else a_ref.shape
    b_shape = b_ref.shape + (1,) if len(b_ref.shape) == 1 else b_ref.shape
    batch = tuple(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]

    def batch_index(shape, bi):
        return broadcast_index(bi, shape[:-2])

    def a_load(bi, r, c, lanes):
        return a_ref.load((c,) if len(a_ref.shape) == 1 else batch_index(a_shape, bi) + (r, c),
                          lanes)

    def b_load(bi, r, c, lanes):
        if len(b_ref.shape) == 1:
            return b_ref.load((r,), lanes)
        return b_ref.load(batch_index(b_shape, bi) + (r, c), lanes)

    def out_index(bi, i, j):
        return bi + ((i,) if len(a_ref.shape) > 1 else ()) + ((j,) if len(b_ref.shape) > 1 else ())

    b = b_ref.value if b_ref.value is not None and len(b_ref.shape) == 2 else \
        Operand(b_load, len(b_ref.shape) > 1)
    return dense(ctx, emit, Operand(a_load, True), b, batch, m, k, n, out_index,
                 lambda acc, bi, i, j: acc)


# ------------------------------------------------------------------ ConvTranspose

def _fill_zero(ctx: LowerCtx, buf: Buffer, lanes: int) -> Stmt:
    """buf[:] = 0, `lanes` elements a store, then the exact remainder."""
    body = loop(ctx, "z", buf.size // lanes, lambda v: Store(
        buf, mul(v, Const(lanes)), const_like(0, buf.dtype.with_lanes(lanes))))
    tail = [Store(buf, Const(i), const_like(0, buf.dtype))
            for i in range(buf.size - buf.size % lanes, buf.size)]
    return seq_of(body, *tail)


@kernel_rule("ConvTranspose")
def conv_transpose(ctx: LowerCtx, ins: Sequence[TensorRef], emit) -> Stmt:
    """Scatter form: every input pixel adds its weighted taps into a zeroed
    workspace the size of the uncropped output (no bounds to test), then the
    cropped window plus bias is stored through the epilogue."""
    x, wv, bias, dtype, xin, out = _conv_operands(ctx, ins)
    if xin.layout == "NHWC":                    # [I, k..., O/g] -> [I, O/g, k...]
        wv = np.moveaxis(wv, -1, 1)
    group = int(ctx.attrs.get("group", 1))
    kernel, strides, dil, begin, _, osp = ref.convt_geometry(
        ctx, (xin.batch, xin.channels) + xin.spatial, wv.shape)
    icg, ocg, nk = xin.channels // group, wv.shape[1], len(kernel)
    packed = wv.reshape((group, icg, ocg) + tuple(kernel)).transpose(
        (0,) + tuple(range(3, 3 + nk)) + (1, 2))
    wp = shared_param(ctx, "w_packed", np.ascontiguousarray(packed))
    full = [s * (i - 1) + (k - 1) * d + 1 for s, i, k, d in zip(strides, xin.spatial, kernel, dil)]
    lo = [min(0, b) for b in begin]
    size = tuple(max(f, b + o) - l for f, b, o, l in zip(full, begin, osp, lo))
    ws = SpatialOp(xin.layout, xin.batch, out.channels, size)
    acc_shape = ws.index(xin.batch, size, out.channels)
    work = ctx.scratch_buffer("full_out", dtype, acc_shape)
    t = tile(ctx.target, dtype, xin.vectorizable)

    def scatter(n, ipos, g, tap, c0, widths) -> Stmt:
        fpos = [add(add(mul(i, Const(s)), mul(k, Const(d))), Const(-l))
                for i, k, s, d, l in zip(ipos, tap, strides, dil, lo)]
        oc0 = add(mul(g, Const(ocg)), c0)
        at = [flat_index(ws.index(n, fpos, add(oc0, Const(off))), acc_shape)
              for off in offsets(widths)]
        accs, decls = accumulators(ctx, dtype, widths,
                                    lambda off, wd: Load(work, at[offsets(widths).index(off)], wd))

        def per_ic(ic):
            return rank1_update(
                ctx, dtype, [accs], [x.load(xin.index(n, ipos, add(mul(g, Const(icg)), ic)))],
                [Load(wp, flat_index((g, *tap, ic, add(c0, Const(off))), packed.shape), wd)
                 for off, wd in zip(offsets(widths), widths)], widths)
        return seq_of(*decls, loop(ctx, "ic", icg, per_ic),
                    *(Store(work, i, a) for i, a in zip(at, accs)))

    def over(names, extents, body):
        def level(a, vs):
            if a == len(extents):
                return body(vs)
            return loop(ctx, f"{names}{a}", extents[a], lambda v: level(a + 1, vs + [v]))
        return level(0, [])

    def crop(n, opos, c0, widths) -> Stmt:
        src = [add(o, Const(b - l)) for o, b, l in zip(opos, begin, lo)]
        init = bias_init(bias, dtype, c0)
        return seq_of(*(emit(0, out.index(n, opos, add(c0, Const(off))), Bin(
            "+", Load(work, flat_index(ws.index(n, src, add(c0, Const(off))), acc_shape), wd),
            init(off, wd))) for off, wd in zip(offsets(widths), widths)))

    def batch(n) -> Stmt:
        return seq_of(
            over("i", xin.spatial, lambda ipos: loop(ctx, "g", group, lambda g: over(
                "k", kernel, lambda tap: over_tiles(ctx, ocg, t, lambda c0, widths: scatter(
                    n, ipos, g, tap, c0, widths))))),
            over("o", osp, lambda opos: over_tiles(ctx, out.channels, t, lambda c0, widths:
                                                    crop(n, opos, c0, widths))))
    return seq_of(_fill_zero(ctx, work, t.lanes), loop(ctx, "n", xin.batch, batch))

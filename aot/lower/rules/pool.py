"""Compute rule for the float (and integer max) pools of aot/ops/nn.py:
MaxPool, AveragePool, LpPool.

They run the convolutions' walk (aot/lower/kernels/conv_walk.py) over the float
policy's regions (windows.window_regions: in-image taps constant ranges)
and their register tile (conv.conv_tile, a strategy of the pool's own:
channel vectors of one pixel), the channel axis innermost. An average
divides by its window's tap count, a constant per run of output positions
(runs are split where the count changes) or a table entry in a guarded run.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable, Sequence

import numpy as np

from aot.ir.tir import (Assign, Bin, Const, DType, Expr, Load, Select, Stmt, Var, add, dt,
                        dtype_of, mul, seq)
from aot.lower.arith.loops import float_only, offsets, shared_param, splat
from aot.lower.kernels.conv_tile import TileAt, conv_tile
from aot.lower.kernels.conv_walk import Walk, float_axes, walk
from aot.lower.rules.elementwise import const_like, math_call
from aot.lower.rules import LowerCtx, TensorRef, kernel_rule
from aot.lower.schedule.tile_sizes import tile
from aot.lower.kernels.tiles import UNROLL_CHANNEL_TILES, tile_widths
from aot.lower.kernels.windows import Region, SpatialOp, all_inside, regions, spatial_op, tap_nest
from aot.ops import nn as ref


def _pool_window(ctx: LowerCtx, xin: SpatialOp) -> ref.Window:
    kernel = tuple(int(k) for k in ctx.attrs["kernel_shape"])
    return ref.resolve_window(ctx, xin.spatial, kernel, bool(ctx.attrs.get("ceil_mode", 0)))


def _tap_counts(win: ref.Window, spatial: Sequence[int], a: int, include_pad: bool) -> np.ndarray:
    """Per output position along axis a: how many of its window's taps an
    average divides by (inside the input, or inside the explicitly padded
    input with count_include_pad; never the ceil_mode overhang)."""
    lo, hi = (-win.pad_begin[a], spatial[a] + win.pad_end[a]) if include_pad else (0, spatial[a])
    pos = (np.arange(win.out[a])[:, None] * win.strides[a] - win.pad_begin[a]
           + np.arange(win.kernel[a])[None, :] * win.dilations[a])
    return ((pos >= lo) & (pos < hi)).sum(axis=1)


@dataclass(frozen=True)
class _PoolMath:
    init: Callable[[DType], Expr]                 # accumulator start value
    step: Callable[[Expr, Expr], Expr]            # acc, tap -> acc
    vector: bool = True                           # may run lane-wise


def _lp_math(p: float) -> _PoolMath:
    def step(acc, v):
        av = Select(Bin("<", v, const_like(0, v)), Bin("-", const_like(0, v), v), v)
        return Bin("+", acc, Bin("*", av, av) if p == 2 else
                   av if p == 1 else math_call("pow", av, const_like(p, av)))
    return _PoolMath(lambda d: const_like(0, d), step, vector=p in (1, 2))


def _pool_init_max(d: DType) -> Expr:
    low = float("-inf") if d.is_float else int(np.iinfo(d.scalar).min)
    return const_like(low, d)


@kernel_rule("MaxPool", "AveragePool", "LpPool")
def pool(ctx: LowerCtx, ins: Sequence[TensorRef], emit) -> Stmt:
    op = ctx.node.op
    x = ins[0]
    dtype = dt(ctx.out_types[0].dtype)
    if op == "MaxPool" and len(ctx.node.outputs) > 1 and ctx.node.outputs[1]:
        raise ctx.unsupported("the MaxPool Indices output")
    if op != "MaxPool":
        float_only(ctx, dtype)
    xin = spatial_op(ctx, x.shape)
    win = _pool_window(ctx, xin)
    p = float(ctx.attrs.get("p", 2))
    maths = {"MaxPool": _PoolMath(_pool_init_max, lambda a, v: Bin("max", a, v)),
             "AveragePool": _PoolMath(lambda d: const_like(0, d), lambda a, v: Bin("+", a, v)),
             "LpPool": _lp_math(p)}[op]
    include_pad = op == "AveragePool" and bool(ctx.attrs.get("count_include_pad", 0))
    # A window with no taps at all (padding wider than the kernel) averages
    # to 0, as the reference does (0 / max(count, 1)).
    counts = [np.maximum(_tap_counts(win, xin.spatial, a, include_pad), 1)
              for a in range(len(xin.spatial))]
    t = tile(ctx.target, dtype, xin.vectorizable and maths.vector)

    def divisor(runs, opos) -> Expr:
        """The window's tap count, a product over the axes of a constant
        per run (runs are split where the count changes) or, in a guarded
        run, a table entry."""
        total: Expr = Const(1.0, dt(dtype.scalar))
        for a, r in enumerate(runs):
            total = mul(total, Load(shared_param(ctx, "pool_count",
                                                 counts[a].astype(dtype.scalar)), opos[a])
                        if r.guarded else Const(float(r.key), dt(dtype.scalar)))
        return total

    def finish(acc: Expr, runs, opos) -> Expr:
        lanes = dtype_of(acc).lanes
        if op == "AveragePool":
            return Bin("/", acc, splat(divisor(runs, opos), lanes))
        if op == "LpPool" and p == 2:
            return math_call("sqrt", acc)
        if op == "LpPool" and p != 1:
            return math_call("pow", acc, const_like(1.0 / p, acc))
        return acc

    w = Walk(float_axes(len(xin.spatial)), unroll=UNROLL_CHANNEL_TILES if t.registers else 0)
    strategy = _PoolTile(dtype, maths, x, xin, win, emit, finish)
    return walk(ctx, w, xin.batch, regions(w.regions, win, xin.spatial,
                                           [lambda o, c=c: int(c[o]) for c in counts]),
                t, 1, tile_widths(xin.channels, t), partial(conv_tile, ctx, strategy))


@dataclass(frozen=True)
class _PoolTile:
    """A pool's tile strategy (conv.conv_tile), one pixel of channel
    vectors (a pool's Tile blocks no pixels): each accumulator from the
    pool's start value, every in-image tap folded in by its step, stored
    through finish(acc, region, pixel)."""
    dtype: DType
    maths: _PoolMath
    x: TensorRef
    xin: SpatialOp
    win: ref.Window
    emit: Callable
    finish: Callable

    def inside(self, region: Region) -> bool:
        return all_inside(region, self.win.kernel)

    def init(self, at: TileAt, off: int, width: int) -> Expr:
        return self.maths.init(self.dtype.with_lanes(width))

    def reduce(self, ctx: LowerCtx, at: TileAt) -> Stmt | None:
        def taps(ipos, tap):
            return seq(*(Assign(a, self.maths.step(a, self.x.load(
                self.xin.index(at.n, ipos, add(at.c0, Const(off))), wd)))
                for a, off, wd in zip(at.accs[0], offsets(at.widths), at.widths)))
        return tap_nest(ctx, at.region, at.pixels[0], self.win, self.xin.spatial, taps)

    def store(self, ctx: LowerCtx, at: TileAt, pixel: list[Expr], off: int, acc: Var,
              width: int) -> Stmt:
        return self.emit(0, self.xin.index(at.n, pixel, add(at.c0, Const(off))),
                         self.finish(acc, at.region, pixel))

    def store_joined(self, ctx: LowerCtx, at: TileAt, pixel: list[Expr], off: int,
                     accs: tuple[Var, ...]) -> None:
        return None         # each accumulator is finished and stored as it is

"""The one sliding-window geometry of every convolution and pool, float
and integer, and the regions it splits an output into.

Each spatial axis is split into runs of output positions whose in-image
taps are the same range (axis_runs). The float kernels give every
combination of runs (a region: the interior, the edges, the corners) its
own loop nest with constant tap bounds; only when that would make too many
regions does an axis fall back to guarded taps (window_regions,
region_nest, tap_nest, sliding_window). The integer kernels group the same
runs into three spans per axis, the low border, the interior and the high
border, and test a border's taps only on the sides its windows leave the
image (ConvGeom.regions, plane_spans, plane_regions, window_taps).
SpatialOp is an operand seen channel-last or channel-first; ConvGeom an
NHWC 2-D window with its channel groups.

The float convolutions (aot/lower/nn.py), the pools (pool.py,
int8_pool.py), the integer convolutions (tflite_int8.py, and the Cortex-M
kernels of int8_dsp.py and int8_mve.py) all walk their outputs through
these.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np

from aot.ir.tir import Bin, Comment, Const, Expr, If, Stmt, add, mul, seq, sub
from aot.lower.builders import loop, plus, seq_of
from aot.lower.rules import LowerCtx
from aot.lower.schedule import Tile
from aot.lower.tiles import (UNROLL_CHANNEL_TILES, over_tiles, position_blocks, tile_parts,
                             tile_widths)
from aot.ops import nn as ref


# More regions than this (combinations of border runs over the spatial axes)
# and the axes with the most runs switch to guarded taps instead.
MAX_REGIONS = 36


@dataclass(frozen=True)
class Run:
    """Consecutive output positions along one axis whose in-image taps are
    the same range [lo, hi) (and whose `key`, e.g. a pool's divisor, agrees).
    A guarded run visits every tap and tests each one."""
    start: int
    count: int
    lo: int
    hi: int
    key: int = 0
    guarded: bool = False


def axis_runs(n_out: int, n_in: int, k: int, stride: int, dil: int, pad: int,
              key: Callable[[int], int] = lambda o: 0) -> list[Run]:
    """The runs of one spatial axis: output o's window starts at input
    position o * stride - pad; its tap t reads position + t * dil."""
    runs: list[Run] = []
    for o in range(n_out):
        p0 = o * stride - pad                      # position of tap 0
        lo = 0 if p0 >= 0 else min(k, (-p0 + dil - 1) // dil)
        hi = 0 if n_in <= p0 else min(k, (n_in - p0 + dil - 1) // dil)
        hi = max(lo, hi)
        if runs and (runs[-1].lo, runs[-1].hi, runs[-1].key) == (lo, hi, key(o)):
            runs[-1] = replace(runs[-1], count=runs[-1].count + 1)
        else:
            runs.append(Run(o, 1, lo, hi, key(o)))
    return runs


def _guard_borders(runs: list[Run], k: int) -> list[Run]:
    """Merge the runs with partial tap ranges into guarded runs."""
    out: list[Run] = []
    for r in runs:
        full = r.lo == 0 and r.hi == k
        if not full and out and out[-1].guarded:
            out[-1] = replace(out[-1], count=out[-1].count + r.count)
        elif full:
            out.append(r)
        else:
            out.append(Run(r.start, r.count, 0, k, 0, True))
    return out


def window_regions(win: ref.Window, spatial: Sequence[int], keys=None) -> list[tuple[Run, ...]]:
    """Every combination of per-axis runs: the regions of the output."""
    per_axis = [axis_runs(o, n, k, s, d, p, keys[a] if keys else (lambda o: 0))
                for a, (o, n, k, s, d, p) in enumerate(zip(win.out, spatial, win.kernel,
                                                           win.strides, win.dilations,
                                                           win.pad_begin))]
    while int(np.prod([len(r) for r in per_axis])) > MAX_REGIONS:
        a = max(range(len(per_axis)), key=lambda i: len(per_axis[i]))
        merged = _guard_borders(per_axis[a], win.kernel[a])
        if len(merged) == len(per_axis[a]):
            break
        per_axis[a] = merged
    return list(itertools.product(*per_axis))


def _spans(pairs) -> str:
    return " x ".join(f"[{a}, {b})" for a, b in pairs)


def region_nest(ctx: LowerCtx, runs: Sequence[Run], body: Callable[[list[list[Expr]]], Stmt],
                t: Tile) -> Stmt:
    """Loops over the output positions of one region. body(pixels) gets
    blocks of neighbouring positions along the last axis (t.block(row
    length) of them, then an exact-size remainder block), each a list of
    per-axis positions."""
    def level(a: int, pos: list[Expr]) -> Stmt | None:
        r = runs[a]
        if a < len(runs) - 1:
            return loop(ctx, f"o{a}", r.count, lambda v: level(a + 1, pos + [v]), start=r.start)
        block = 1 if r.guarded else t.block(r.count)     # a guard tests one position
        return position_blocks(ctx, f"o{a}", r.count, r.start, block,
                               lambda os: body([pos + [o] for o in os]))
    note = Comment(f"outputs {_spans((r.start, r.start + r.count) for r in runs)}: "
                   f"taps {_spans((r.lo, r.hi) for r in runs)}"
                   + (" (guarded)" if any(r.guarded for r in runs) else ""))
    return seq_of(note, level(0, []))


def tap_nest(ctx: LowerCtx, runs: Sequence[Run], opos: Sequence[Expr], win: ref.Window,
             spatial: Sequence[int], body: Callable[[list[Expr], list[Expr]], Stmt]) -> Stmt | None:
    """Loops over the in-image taps of a window; body(input positions, taps)."""
    def level(a: int, ipos: list[Expr], taps: list[Expr]) -> Stmt | None:
        if a == len(runs):
            return body(ipos, taps)
        r, s, d, p = runs[a], win.strides[a], win.dilations[a], win.pad_begin[a]

        def at(tap: Expr) -> Stmt | None:
            pos = plus(add(mul(opos[a], Const(s)), mul(tap, Const(d))), -p)
            inner = level(a + 1, ipos + [pos], taps + [tap])
            if inner is None or not r.guarded:
                return inner
            inside = Bin("and", Bin(">=", pos, Const(0)), Bin("<", pos, Const(spatial[a])))
            return If(inside, inner)
        return loop(ctx, f"k{a}", r.hi - r.lo, at, start=r.lo)
    return level(0, [], [])


def sliding_window(ctx: LowerCtx, batch: int, win: ref.Window, spatial: Sequence[int], t: Tile,
                   groups: int, channels: int, tile_body, keys=None, parts: bool = False) -> Stmt:
    """The loop nest shared by convolution and pooling: for every image,
    region, block of t.mr output pixels, group and channel tile,
    tile_body(n, pixels, runs, group, first channel, widths); with `parts`,
    for every part of the block whose accumulators fit the registers
    (tiles.tile_parts)."""
    unroll = UNROLL_CHANNEL_TILES if t.registers else 0

    def channel_tiles(n, pixels, runs, g) -> Stmt:
        if parts:
            return tile_parts(ctx, tile_widths(channels, t), t, pixels, lambda c0, widths, part:
                              tile_body(n, part, runs, g, c0, widths), unroll)
        return over_tiles(ctx, channels, t,
                          lambda c0, widths: tile_body(n, pixels, runs, g, c0, widths), unroll)

    def region(n, runs) -> Stmt:
        return region_nest(ctx, runs, lambda pixels: loop(
            ctx, "g", groups, lambda g: channel_tiles(n, pixels, runs, g)), t)
    regions = window_regions(win, spatial, keys)
    return seq_of(loop(ctx, "n", batch, lambda n: seq_of(*(region(n, runs) for runs in regions))))


@dataclass(frozen=True)
class SpatialOp:
    """A conv/pool operand seen channel-last or channel-first."""
    layout: str
    batch: int
    channels: int
    spatial: tuple[int, ...]

    def index(self, n: Expr, pos: Sequence[Expr], c: Expr) -> tuple[Expr, ...]:
        return (n, *pos, c) if self.layout == "NHWC" else (n, c, *pos)

    @property
    def vectorizable(self) -> bool:
        return self.layout == "NHWC"


def spatial_op(ctx: LowerCtx, shape: Sequence[int]) -> SpatialOp:
    layout = ref.layout_of(ctx)
    ns = ref.nchw_shape(tuple(shape), layout)
    return SpatialOp(layout, ns[0], ns[1], tuple(ns[2:]))


# ------------------------------------------------- the integer kernels' spans

Span = tuple[tuple[int, int], tuple[bool, bool]]


def border_spans(runs: Sequence[Run], k: int) -> list[Span]:
    """An axis's runs grouped into its low border (windows starting before
    the image), interior (every tap inside) and high border (the rest), as
    [((start, end), (test_low, test_high))] without empty spans: the tests
    say on which sides a span's windows can leave the image."""
    def side(r: Run) -> int:
        return 0 if r.lo > 0 else 1 if r.hi == k else 2
    spans = []
    for _, group in itertools.groupby(runs, side):
        group = list(group)
        first, last = group[0], group[-1]
        spans.append(((first.start, last.start + last.count), (first.lo > 0, last.hi < k)))
    return spans


@dataclass(frozen=True)
class ConvGeom:
    """An NHWC 2-D window: input n x h x w, output oh x ow, a kh x kw kernel
    over `groups` groups of `depth` input and `per_group` output channels."""
    n: int
    h: int
    w: int
    oh: int
    ow: int
    kh: int
    kw: int
    groups: int
    depth: int          # input channels per group
    per_group: int      # output channels per group
    strides: tuple[int, int]
    dilations: tuple[int, int]
    pad_top: int
    pad_left: int

    @property
    def cout(self) -> int:
        return self.groups * self.per_group

    def runs(self, axis: int) -> list[Run]:
        """axis_runs along H (0) or W (1)."""
        size, out, k = (self.h, self.oh, self.kh) if axis == 0 else (self.w, self.ow, self.kw)
        pad = self.pad_top if axis == 0 else self.pad_left
        return axis_runs(out, size, k, self.strides[axis], self.dilations[axis], pad)

    def needs_test(self, axis: int) -> tuple[bool, bool]:
        """Whether the window can fall off the (low, high) side along H (0) or W (1)."""
        runs, k = self.runs(axis), (self.kh, self.kw)[axis]
        return runs[0].lo > 0, runs[-1].hi < k

    def regions(self, axis: int) -> list[Span]:
        """border_spans along H (0) or W (1)."""
        return border_spans(self.runs(axis), (self.kh, self.kw)[axis])


def conv_geom(ctx: LowerCtx, x_shape, out_shape, kernel, groups: int, depth: int) -> ConvGeom:
    """The geometry of a TFLite-style NHWC conv or pool (pads [top, left, ...])."""
    a = ctx.attrs
    pads = a.get("pads", (0, 0, 0, 0))
    return ConvGeom(n=x_shape[0], h=x_shape[1], w=x_shape[2], oh=out_shape[1], ow=out_shape[2],
                    kh=kernel[0], kw=kernel[1], groups=groups, depth=depth,
                    per_group=out_shape[3] // groups, strides=tuple(a.get("strides", (1, 1))),
                    dilations=tuple(a.get("dilations", (1, 1))), pad_top=pads[0],
                    pad_left=pads[1])


def plane_spans(g: ConvGeom) -> list[tuple[Span, Span]]:
    """The regions of an output plane as (row span, column span): border
    rows test every column; interior rows split their columns too."""
    parts = []
    for rows in g.regions(0):
        cols_split = [((0, g.ow), g.needs_test(1))] if any(rows[1]) else g.regions(1)
        parts += [(rows, cols) for cols in cols_split]
    return parts


def plane_regions(ctx: LowerCtx, g: ConvGeom, pixel: Callable[[Expr, Expr, tuple, tuple], Stmt],
                  pair: Callable[[Expr, Expr, tuple, tuple], Stmt] | None = None) -> Stmt:
    """pixel(oy, ox, row_test, col_test) over an output plane, region by
    region (plane_spans): the tests say on which sides (low, high) a
    window may leave the image along H and W. With `pair`, pair(oy, ox, ...)
    computes pixels ox and ox + 1 of a row, pixel the last of an odd span."""
    def columns(oy, span, rt, ct) -> Stmt:
        if pair is None or span[1] - span[0] < 2:
            return span_loop(ctx, "ox", span, lambda ox: pixel(oy, ox, rt, ct))
        count = (span[1] - span[0]) // 2
        parts = [loop(ctx, "ox", count, lambda ox: pair(oy, ox, rt, ct), start=span[0], step=2)]
        if (span[1] - span[0]) % 2:
            parts.append(pixel(oy, Const(span[1] - 1), rt, ct))
        return seq(*parts)

    return seq(*(span_loop(ctx, "oy", rows, lambda oy, rt=row_test, cols=cols, ct=col_test:
                           columns(oy, cols, rt, ct))
                 for (rows, row_test), (cols, col_test) in plane_spans(g)))


def span_loop(ctx: LowerCtx, name: str, span: tuple[int, int],
              body: Callable[[Expr], Stmt]) -> Stmt | None:
    """for name in [start, end): body(name)."""
    return loop(ctx, name, span[1] - span[0], body, start=span[0])


def window_pos(o: Expr, k: Expr, stride: int, pad: int, dilation: int) -> Expr:
    """o * stride - pad + k * dilation, folded."""
    return add(sub(mul(o, Const(stride)), Const(pad)), mul(k, Const(dilation)))


def in_range(pos: Expr, size: int, low: bool, high: bool) -> Expr | None:
    """The test that pos is inside [0, size) on the sides asked (None: no test)."""
    conds = []
    if low:
        conds.append(Bin(">=", pos, Const(0)))
    if high:
        conds.append(Bin("<", pos, Const(size)))
    if not conds:
        return None
    return conds[0] if len(conds) == 1 else Bin("and", conds[0], conds[1])


def guarded(cond: Expr | None, body: Stmt) -> Stmt:
    return body if cond is None else If(cond, body)


def window_taps(ctx: LowerCtx, g: ConvGeom, oy: Expr, oxs: Sequence[Expr], row_test: tuple,
                col_test: tuple, body: Callable[[Expr, Expr, Expr, list[Expr]], Stmt],
                pad_left: int | None = None) -> Stmt:
    """body(ky, kx, iy, ixs) for every tap of the windows of output pixels
    oxs of row oy: iy is the tap's input row, ixs each pixel's input column
    counted from `pad_left` (the geometry's, unless the rows were staged
    from their left padding on). Kernel rows are tested on the sides
    row_test says, kernel columns on col_test's for a single pixel (a block
    of several never lies in a tested region)."""
    pad = g.pad_left if pad_left is None else pad_left

    def row(ky) -> Stmt:
        iy = window_pos(oy, ky, g.strides[0], g.pad_top, g.dilations[0])
        return guarded(in_range(iy, g.h, *row_test),
                       loop(ctx, "kx", g.kw, lambda kx: col(ky, kx, iy)))

    def col(ky, kx, iy) -> Stmt:
        ixs = [window_pos(ox, kx, g.strides[1], pad, g.dilations[1]) for ox in oxs]
        cond = in_range(ixs[0], g.w, *col_test) if len(oxs) == 1 else None
        return guarded(cond, body(ky, kx, iy, ixs))
    return loop(ctx, "ky", g.kh, row)

"""The one sliding-window geometry of every convolution and pool, float
and integer, and the regions it splits an output into.

Each spatial axis is split into runs of output positions whose in-image
taps are the same range (axis_runs). A region is a tuple of one Run per
axis, and a Run's `tests` say on which sides its taps are tested against
the image. Two policies make regions: the float kernels' (window_regions)
give every combination of exact runs (the interior, the edges, the
corners) its own loop nest with constant tap bounds, and only when that
would make too many regions merge an axis's borders into runs tested on
both sides; the integer kernels' (border_regions) group the runs into
three spans per axis, the low border, the interior and the high border,
each over every tap, tested only on the sides its windows leave the image
("whole": the plane untested, for rows staged with their padding;
regions() picks by a kernel's policy).
tap_nest walks a region's taps, float and integer (ConvGeom.window);
conv_walk.py walks every kernel's output positions (the scalar and
Cortex-M integer kernels through conv_walk.plane_walk). SpatialOp is an
operand seen channel-last or channel-first; ConvGeom an NHWC 2-D window
with its channel groups.

The float convolutions (aot/lower/rules/nn.py), the pools (pool.py,
int8_pool.py), the integer convolutions (int8_conv.py, and the Cortex-M
kernels of cortex_m/dsp.py and cortex_m/mve.py) all walk their outputs through
these.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np

from aot.ir.tir import Bin, Const, Expr, ForKind, If, Stmt, add, mul, seq, sub
from aot.lower.arith.loops import loop, plus
from aot.lower.rules import LowerCtx
from aot.ops import nn as ref


# More regions than this (combinations of border runs over the spatial axes)
# and the axes with the most runs switch to guarded taps instead.
MAX_REGIONS = 36


@dataclass(frozen=True)
class Run:
    """Consecutive output positions along one axis whose taps [lo, hi) are
    visited (and whose `key`, e.g. a pool's divisor, agrees). `tests` say on
    which sides (low, high) a tap's input position is tested against the
    image: an exact run (every tap in [lo, hi) inside) tests neither."""
    start: int
    count: int
    lo: int
    hi: int
    key: int = 0
    tests: tuple[bool, bool] = (False, False)

    @property
    def end(self) -> int:
        return self.start + self.count

    @property
    def guarded(self) -> bool:
        """Whether some tap is tested: its positions are then visited one at
        a time (a test is per position)."""
        return any(self.tests)


# A region of the output: one Run per spatial axis.
Region = tuple[Run, ...]


def all_inside(region: Region, kernel: Sequence[int]) -> bool:
    """Whether every window of a region lies in the image: each run over
    every tap of its axis, untested."""
    return all(not r.guarded and (r.lo, r.hi) == (0, k) for r, k in zip(region, kernel))


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
            out.append(Run(r.start, r.count, 0, k, 0, (True, True)))
    return out


def window_regions(win: ref.Window, spatial: Sequence[int], keys=None) -> list[Region]:
    """The float kernels' regions: every combination of per-axis runs, each
    exact (constant tap bounds, no test) unless that would make more than
    MAX_REGIONS, when the axes with the most runs merge their borders into
    runs of every tap tested on both sides."""
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


def tap_nest(ctx: LowerCtx, runs: Sequence[Run], opos: Sequence[Expr], win: ref.Window,
             spatial: Sequence[int], body: Callable[[list[Expr], list[Expr]], Stmt],
             names: Sequence[str] | None = None, from_origin: bool = False,
             kinds: Sequence[ForKind] = ()) -> Stmt | None:
    """Loops (named `names`, else k0, k1, ...) over the taps [lo, hi) of
    each run of a region for the window of output position opos, each tap's
    input position tested on the sides the run says; body(input positions,
    taps). A position is o * stride + tap * dilation - pad, or with
    `from_origin` the window's origin plus the tap's offset (window_pos):
    the same value, in the form each kernel's object code was measured
    with (clang schedules the two differently). `kinds`: per axis,
    ForKind.UNROLLED writes its taps out one after another (no loop, each
    tap a constant); other axes loop."""
    def level(a: int, ipos: list[Expr], taps: list[Expr]) -> Stmt | None:
        if a == len(runs):
            return body(ipos, taps)
        r, s, d, p = runs[a], win.strides[a], win.dilations[a], win.pad_begin[a]

        def at(tap: Expr) -> Stmt | None:
            pos = (window_pos(opos[a], tap, s, p, d) if from_origin
                   else plus(add(mul(opos[a], Const(s)), mul(tap, Const(d))), -p))
            inner = level(a + 1, ipos + [pos], taps + [tap])
            return inner if inner is None else guarded(in_range(pos, spatial[a], *r.tests), inner)
        if a < len(kinds) and kinds[a] is ForKind.UNROLLED:
            return seq(*[st for st in (at(Const(t)) for t in range(r.lo, r.hi)) if st is not None])
        return loop(ctx, names[a] if names else f"k{a}", r.hi - r.lo, at, start=r.lo)
    return level(0, [], [])


def neighbours(pos: Expr, count: int, stride: int) -> list[Expr]:
    """A tap's input positions for `count` neighbouring outputs along an
    axis, the first's at pos: a stride apart."""
    return [plus(pos, r * stride) for r in range(count)]


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


# ------------------------------------------------- the integer kernels' regions

def border_spans(runs: Sequence[Run], k: int) -> list[Run]:
    """An axis's runs grouped into its low border (windows starting before
    the image), interior (every tap inside) and high border (the rest),
    without empty spans: each a Run over every tap [0, k) whose tests say
    on which sides its windows can leave the image."""
    def side(r: Run) -> int:
        return 0 if r.lo > 0 else 1 if r.hi == k else 2
    spans = []
    for _, group in itertools.groupby(runs, side):
        group = list(group)
        first, last = group[0], group[-1]
        spans.append(Run(first.start, last.end - first.start, 0, k,
                         tests=(first.lo > 0, last.hi < k)))
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

    def window(self, pad_left: int | None = None) -> ref.Window:
        """The window over (H, W), for tap_nest: columns counted from
        `pad_left` (rows staged from their left padding on: 0)."""
        pads = (self.pad_top, self.pad_left if pad_left is None else pad_left)
        kernel, out, size = (self.kh, self.kw), (self.oh, self.ow), (self.h, self.w)
        ends = tuple(max(0, (o - 1) * s + (k - 1) * d + 1 - n - p) for o, s, k, d, n, p in
                     zip(out, self.strides, kernel, self.dilations, size, pads))
        return ref.Window(kernel, self.strides, self.dilations, pads, ends, out)

    def runs(self, axis: int) -> list[Run]:
        """axis_runs along H (0) or W (1)."""
        size, out, k = (self.h, self.oh, self.kh) if axis == 0 else (self.w, self.ow, self.kw)
        pad = self.pad_top if axis == 0 else self.pad_left
        return axis_runs(out, size, k, self.strides[axis], self.dilations[axis], pad)

    def spans(self, axis: int) -> list[Run]:
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


def regions(policy: str, win: ref.Window, spatial: Sequence[int], keys=None) -> list[Region]:
    """The regions of a window's output by a kernel's policy: "exact" (the
    float kernels', window_regions), "border" (the integer kernels':
    every axis in border_spans, the last one unsplit, spanning every
    position and tested on the sides any window leaves, where an outer axis
    is tested) or "whole" (one region of every tap, untested: rows staged
    with their padding)."""
    if policy == "exact":
        return window_regions(win, spatial, keys)
    if policy == "whole":
        return [tuple(Run(0, o, 0, k) for o, k in zip(win.out, win.kernel))]
    if policy != "border":
        raise ValueError(f"no region policy {policy!r}")
    runs = [axis_runs(o, n, k, s, d, p) for o, n, k, s, d, p in zip(
        win.out, spatial, win.kernel, win.strides, win.dilations, win.pad_begin)]
    spans = [border_spans(r, k) for r, k in zip(runs, win.kernel)]
    last, k = runs[-1], win.kernel[-1]
    whole = Run(0, win.out[-1], 0, k, tests=(last[0].lo > 0, last[-1].hi < k))
    out = []
    for outer in itertools.product(*spans[:-1]):
        tested = any(r.guarded for r in outer)
        out += [(*outer, cols) for cols in ([whole] if tested else spans[-1])]
    return out


def border_regions(g: ConvGeom) -> list[Region]:
    """The integer kernels' regions of an output plane, (rows, columns)."""
    return regions("border", g.window(), (g.h, g.w))


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

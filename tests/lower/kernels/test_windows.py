"""The one window geometry (aot/lower/kernels/windows.py): the integer kernels'
border and interior spans are the float kernels' runs grouped, and they say
exactly which windows leave the image, on which side; both policies' regions
are Runs, and one tap nest tests the sides they say."""
from __future__ import annotations

import itertools

import pytest

from aot.ir.graph import Node, TensorType
from aot.ir.tir import Comment, Const, For, If, Var, walk_stmt
from aot.lower.rules import LowerCtx
from aot.lower.kernels.windows import (ConvGeom, Run, axis_runs, border_regions, border_spans,
                                       regions, tap_nest, window_regions)
from aot.ops.nn import Window
from aot.targets import get_board

# (input size, kernel, stride, dilation, pad): every case's output size is
# (size + pad + extra - extent) // stride + 1 for some end padding `extra`.
AXES = [(size, k, s, d, pad)
        for size, k, s, d, pad in itertools.product((1, 2, 5, 8), (1, 2, 3, 5), (1, 2, 3),
                                                    (1, 2), (0, 1, 2, 4))
        if pad < (k - 1) * d + 1]


def outputs(size, k, s, d, pad) -> list[int]:
    extent = (k - 1) * d + 1
    return sorted({(size + pad + extra - extent) // s + 1 for extra in range(0, extent)
                   if size + pad + extra >= extent})


def leaves(o, size, k, s, d, pad) -> tuple[bool, bool]:
    """Whether output o's window reads before / after the image."""
    first = o * s - pad
    return first < 0, first + (k - 1) * d > size - 1


@pytest.mark.parametrize("size,k,s,d,pad", AXES)
def test_border_spans_test_exactly_the_sides_their_windows_leave(size, k, s, d, pad):
    for out in outputs(size, k, s, d, pad):
        spans = border_spans(axis_runs(out, size, k, s, d, pad), k)
        # the spans cover the outputs in order, at most one of each kind
        assert [p for r in spans for p in range(r.start, r.end)] == list(range(out))
        assert len(spans) <= 3
        for r in spans:
            assert (r.lo, r.hi) == (0, k)       # a span visits every tap
            low, high = r.tests
            sides = [leaves(o, size, k, s, d, pad) for o in range(r.start, r.end)]
            assert low == any(lo for lo, _ in sides) and high == any(hi for _, hi in sides)
            # a span is all low border, all interior or all high border
            assert len({(lo, hi) == (False, False) for lo, hi in sides}) == 1
            assert len({lo for lo, _ in sides}) == 1


def test_conv_geom_spans_and_border_regions():
    """A 3x3 stride-1 pad-1 conv on 6x5: one border row / column each side,
    the border rows spanning every column, the interior rows split; every
    region a pair of Runs over all taps, tested on the sides they leave."""
    g = ConvGeom(n=1, h=6, w=5, oh=6, ow=5, kh=3, kw=3, groups=1, depth=4, per_group=8,
                 strides=(1, 1), dilations=(1, 1), pad_top=1, pad_left=1)
    low, none, high, both = (True, False), (False, False), (False, True), (True, True)
    assert g.spans(0) == [Run(0, 1, 0, 3, tests=low), Run(1, 4, 0, 3), Run(5, 1, 0, 3, tests=high)]
    assert g.spans(1) == [Run(0, 1, 0, 3, tests=low), Run(1, 3, 0, 3), Run(4, 1, 0, 3, tests=high)]
    spans = [((r.start, r.end), r.tests, (c.start, c.end), c.tests) for r, c in border_regions(g)]
    assert spans == [((0, 1), low, (0, 5), both), ((1, 5), none, (0, 1), low),
                     ((1, 5), none, (1, 4), none), ((1, 5), none, (4, 5), high),
                     ((5, 6), high, (0, 5), both)]
    valid = ConvGeom(n=1, h=6, w=5, oh=4, ow=3, kh=3, kw=3, groups=1, depth=4, per_group=8,
                     strides=(1, 1), dilations=(1, 1), pad_top=0, pad_left=0)
    assert all(r.tests == c.tests == none for r, c in border_regions(valid))
    whole = regions("whole", valid.window(), (valid.h, valid.w))
    assert border_regions(valid) == whole == [(Run(0, 4, 0, 3), Run(0, 3, 0, 3))]
    # the policies by name: the float one's exact runs where the int8 one's test
    assert regions("exact", g.window(), (g.h, g.w)) == window_regions(g.window(), (g.h, g.w))
    assert len(regions("exact", g.window(), (g.h, g.w))) == 9


def test_float_regions_are_exact_runs_or_tested_on_both_sides():
    """The float policy's regions: exact runs (in-image taps [lo, hi), no
    test) while they are few, else the borders merged into runs of every
    tap tested on both sides; either way every output once."""
    few = window_regions(Window((3, 3), (1, 1), (1, 1), (1, 1), (1, 1), (6, 5)), (6, 5))
    assert len(few) == 9 and not any(r.guarded for region in few for r in region)
    assert few[0] == (Run(0, 1, 1, 3), Run(0, 1, 1, 3))
    many = window_regions(Window((9, 9), (1, 1), (1, 1), (4, 4), (4, 4), (12, 12)), (12, 12))
    tested = [r for region in many for r in region if r.guarded]
    assert tested and all(r.tests == (True, True) and (r.lo, r.hi) == (0, 9) for r in tested)
    covered = sorted((y, x) for rows, cols in many for y in range(rows.start, rows.end)
                     for x in range(cols.start, cols.end))
    assert covered == [(y, x) for y in range(12) for x in range(12)]


def test_tap_nest_tests_only_the_sides_its_runs_say():
    """One tap nest for float and int8: a run over every tap tested low
    along H and high along W tests exactly those (ky's row, kx's column);
    an exact run's taps are its [lo, hi), untested."""
    ctx = LowerCtx(Node("Conv", "conv", ("x",), ("y",)), (TensorType((1, 6, 5, 4), "int8"),),
                   (TensorType((1, 6, 5, 8), "int8"),), get_board("host").target)
    g = ConvGeom(n=1, h=6, w=5, oh=6, ow=5, kh=3, kw=3, groups=1, depth=4, per_group=8,
                 strides=(1, 1), dilations=(1, 1), pad_top=1, pad_left=1)
    oy, ox = Var("oy"), Var("ox")

    def nest(region, **kw):
        return tap_nest(ctx, region, (oy, ox), g.window(), (g.h, g.w),
                        lambda ipos, taps: Comment("tap"), **kw)
    tested = nest((Run(0, 1, 0, 3, tests=(True, False)), Run(4, 1, 0, 3, tests=(False, True))),
                  names=("ky", "kx"), from_origin=True)
    conds = [s.cond for s in walk_stmt(tested) if isinstance(s, If)]
    assert [c.op for c in conds] == [">=", "<"] and conds[1].b == Const(g.w)
    loops = [(s.var.name, s.start, s.extent) for s in walk_stmt(tested) if isinstance(s, For)]
    assert loops == [("ky", 0, 3), ("kx", 0, 3)]
    exact = nest((Run(0, 1, 1, 3), Run(1, 3, 0, 3)))
    assert not any(isinstance(s, If) for s in walk_stmt(exact))
    assert [(s.var.name[:2], s.start, s.extent) for s in walk_stmt(exact)
            if isinstance(s, For)] == [("k0", 1, 2), ("k1", 0, 3)]

"""The one window geometry (aot/lower/windows.py): the integer kernels'
border and interior spans are the float kernels' runs grouped, and they say
exactly which windows leave the image, on which side."""
from __future__ import annotations

import itertools

import pytest

from aot.lower.windows import ConvGeom, axis_runs, border_spans, plane_spans

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
        assert [p for (a, b), _ in spans for p in range(a, b)] == list(range(out))
        assert len(spans) <= 3
        for (a, b), (low, high) in spans:
            sides = [leaves(o, size, k, s, d, pad) for o in range(a, b)]
            assert low == any(lo for lo, _ in sides) and high == any(hi for _, hi in sides)
            # a span is all low border, all interior or all high border
            assert len({(lo, hi) == (False, False) for lo, hi in sides}) == 1
            assert len({lo for lo, _ in sides}) == 1


def test_conv_geom_regions_and_plane_spans():
    """A 3x3 stride-1 pad-1 conv on 6x5: one border row / column each side,
    the border rows spanning every column, the interior rows split."""
    g = ConvGeom(n=1, h=6, w=5, oh=6, ow=5, kh=3, kw=3, groups=1, depth=4, per_group=8,
                 strides=(1, 1), dilations=(1, 1), pad_top=1, pad_left=1)
    assert g.regions(0) == [((0, 1), (True, False)), ((1, 5), (False, False)),
                            ((5, 6), (False, True))]
    assert g.regions(1) == [((0, 1), (True, False)), ((1, 4), (False, False)),
                            ((4, 5), (False, True))]
    assert g.needs_test(0) == (True, True)
    assert plane_spans(g) == [
        (((0, 1), (True, False)), ((0, 5), (True, True))),
        (((1, 5), (False, False)), ((0, 1), (True, False))),
        (((1, 5), (False, False)), ((1, 4), (False, False))),
        (((1, 5), (False, False)), ((4, 5), (False, True))),
        (((5, 6), (False, True)), ((0, 5), (True, True)))]
    valid = ConvGeom(n=1, h=6, w=5, oh=4, ow=3, kh=3, kw=3, groups=1, depth=4, per_group=8,
                     strides=(1, 1), dilations=(1, 1), pad_top=0, pad_left=0)
    assert valid.needs_test(1) == (False, False)
    assert plane_spans(valid) == [(((0, 4), (False, False)), ((0, 3), (False, False)))]

"""The sliding-window geometry of the integer kernels (convolutions, pools).

ConvGeom is one conv or pool's shape, strides, dilations and padding;
`regions` splits each output axis into border spans, whose windows may
leave the image (with the tests they need), and the interior, which needs
none. window_nest and plane_regions walk an output plane region by region;
the scalar and vector convolutions (aot/lower/tflite_int8.py), the pools
(int8_pool.py) and the Cortex-M kernels (int8_dsp.py, int8_mve.py) all
build on them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from aot.ir.tir import Bin, Const, Expr, For, If, Load, Stmt, Store, add, mul, seq, sub
from aot.lower.int8_common import loop, loop_step
from aot.lower.rules import LowerCtx


@dataclass
class ConvGeom:
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

    def needs_test(self, axis: int) -> tuple[bool, bool]:
        """Whether the window can fall off the (low, high) side along H (0) or W (1)."""
        size, out, k = (self.h, self.oh, self.kh) if axis == 0 else (self.w, self.ow, self.kw)
        pad = self.pad_top if axis == 0 else self.pad_left
        s, d = self.strides[axis], self.dilations[axis]
        return pad > 0, (out - 1) * s - pad + (k - 1) * d > size - 1

    def regions(self, axis: int) -> list[tuple[tuple[int, int], tuple[bool, bool]]]:
        """[((start, end), (test_low, test_high))] covering the outputs along an
        axis: border spans with the tests their windows need, and the interior."""
        size, out, k = (self.h, self.oh, self.kh) if axis == 0 else (self.w, self.ow, self.kw)
        pad = self.pad_top if axis == 0 else self.pad_left
        s, d = self.strides[axis], self.dilations[axis]
        first = min(out, -(-pad // s))                       # window starts inside
        last = max(first - 1, min(out - 1, (size - 1 + pad - (k - 1) * d) // s))
        spans = [(0, first), (first, last + 1), (last + 1, out)]
        return [((a, b), (a * s - pad < 0, (b - 1) * s - pad + (k - 1) * d > size - 1))
                for a, b in spans if b > a]


def in_range(pos: Expr, size: int, low: bool, high: bool) -> Expr | None:
    conds = []
    if low:
        conds.append(Bin(">=", pos, Const(0)))
    if high:
        conds.append(Bin("<", pos, Const(size)))
    if not conds:
        return None
    return conds[0] if len(conds) == 1 else Bin("and", conds[0], conds[1])


def window_nest(ctx: LowerCtx, g: ConvGeom, acc, init: Callable[[Expr, bool], Expr],
                taps: Callable[[Expr, Expr, Expr, Expr, Expr, bool], Stmt],
                finish: Callable[[tuple, Expr, bool], Stmt],
                prologue: Callable[[Expr], Stmt] | None = None) -> Stmt:
    """The sliding-window loop nest shared by the int8 convolutions and pools.

    Per output pixel: acc[oc] = init(oc, inside); for each in-image tap
    (ky, kx) at (iy, ix), taps(n, ky, kx, iy, ix, inside) updates the
    accumulator row; then finish((n, oy, ox, oc), acc[oc], inside) per
    channel. prologue(n) runs once per image before its pixels.

    The output plane is split into regions: the interior, where every
    window is inside the image and the taps need no test (`inside`), and
    the border rows and columns, which test each kernel row and column
    only on the sides where their windows can leave the image.
    """
    def pixel(n, oy, ox, row_test, col_test) -> Stmt:
        inside = not any(row_test) and not any(col_test)

        def row(ky):
            iy = window_pos(oy, ky, g.strides[0], g.pad_top, g.dilations[0])
            return guarded(in_range(iy, g.h, *row_test),
                          loop(ctx, "kx", g.kw, lambda kx: col(ky, kx, iy)))

        def col(ky, kx, iy):
            ix = window_pos(ox, kx, g.strides[1], g.pad_left, g.dilations[1])
            return guarded(in_range(ix, g.w, *col_test), taps(n, ky, kx, iy, ix, inside))

        return seq(loop(ctx, "oc", g.cout, lambda oc: Store(acc, oc, init(oc, inside))),
                   loop(ctx, "ky", g.kh, row),
                   loop(ctx, "oc", g.cout,
                        lambda oc: finish((n, oy, ox, oc), Load(acc, oc), inside)))

    def image(n):
        body = plane_regions(ctx, g, lambda oy, ox, rt, ct: pixel(n, oy, ox, rt, ct))
        return seq(prologue(n), body) if prologue else body
    return loop(ctx, "n", g.n, image)


def plane_regions(ctx: LowerCtx, g: ConvGeom, pixel: Callable[[Expr, Expr, tuple, tuple], Stmt],
                  pair: Callable[[Expr, Expr, tuple, tuple], Stmt] | None = None) -> Stmt:
    """pixel(oy, ox, row_test, col_test) over an output plane, region by
    region (window_nest): the tests say on which sides (low, high) a
    window may leave the image along H and W. With `pair`, pair(oy, ox, ...)
    computes pixels ox and ox + 1 of a row, pixel the last of an odd span."""
    def columns(oy, span, rt, ct) -> Stmt:
        if pair is None or span[1] - span[0] < 2:
            return span_loop(ctx, "ox", span, lambda ox: pixel(oy, ox, rt, ct))
        count = (span[1] - span[0]) // 2
        parts = [loop_step(ctx, "ox", count, span[0], 2, lambda ox: pair(oy, ox, rt, ct))]
        if (span[1] - span[0]) % 2:
            parts.append(pixel(oy, Const(span[1] - 1), rt, ct))
        return seq(*parts)

    parts = []
    for rows, row_test in g.regions(0):
        # border rows test every column; interior rows split their columns too
        cols_split = [((0, g.ow), g.needs_test(1))] if any(row_test) else g.regions(1)
        for cols, col_test in cols_split:
            parts.append(span_loop(ctx, "oy", rows, lambda oy, rt=row_test, cols=cols,
                                   ct=col_test: columns(oy, cols, rt, ct)))
    return seq(*parts)


def span_loop(ctx: LowerCtx, name: str, span: tuple[int, int],
              body: Callable[[Expr], Stmt]) -> Stmt:
    """for name in [start, end): body(name)."""
    start, end = span
    if end - start == 1:
        return body(Const(start))
    var = ctx.fresh(name)
    return For(var, end - start, body(var), start=start)


def window_pos(o: Expr, k: Expr, stride: int, pad: int, dilation: int) -> Expr:
    """o * stride - pad + k * dilation, folded."""
    return add(sub(mul(o, Const(stride)), Const(pad)), mul(k, Const(dilation)))


def guarded(cond: Expr | None, body: Stmt) -> Stmt:
    return body if cond is None else If(cond, body)


def conv_geom(ctx: LowerCtx, x_shape, out_shape, kernel, groups: int, depth: int) -> ConvGeom:
    a = ctx.attrs
    pads = a.get("pads", (0, 0, 0, 0))
    return ConvGeom(n=x_shape[0], h=x_shape[1], w=x_shape[2], oh=out_shape[1], ow=out_shape[2],
                    kh=kernel[0], kw=kernel[1], groups=groups, depth=depth,
                    per_group=out_shape[3] // groups, strides=tuple(a.get("strides", (1, 1))),
                    dilations=tuple(a.get("dilations", (1, 1))), pad_top=pads[0],
                    pad_left=pads[1])

"""A float convolution with few output channels and many input channels
(a detector's class and box heads: 256 -> 6 channels over a 4x5 map): its
output channels cannot fill a vector, so the usual tile (output channels
in the vector lanes) ran on scalars, at a tenth of the dense kernels'
rate. Here the input channels fill the lanes instead: each accumulator is
one output (pixel, channel) held as a vector of partial sums over the
input channels, updated by one input vector of the pixel and one weight
vector of the channel per tap and lane-group, and summed across its lanes
once, at the store (aot_lane, a tree of adds).

Weights are packed [group][k...][out-channel][in-channel] so a channel's
weights for a tap are one vector load. The walk is conv_walk.walk's (the
float kernels' exact regions, no tap tested): a tile is MR neighbouring
pixels x up to NR channels, the Tile's `vectors` (scalar widths of 1 per
channel, each becoming one accumulator vector here). Which convolutions
take it: aot/lower/schedule/conv.py, channel_dot_fits.
"""
from __future__ import annotations

from typing import Callable

from aot.ir.tir import (Assign, Bin, Broadcast, Const, Decl, DType, Expr, Load, Stmt, add,
                        flat_index, mul)
from aot.isa.calls import lane
from aot.lower.arith.loops import fma, loop, plus, seq_of
from aot.lower.kernels.conv_tile import FloatConv
from aot.lower.kernels.tiles import register_tile
from aot.lower.kernels.windows import Region, SpatialOp, neighbours, tap_nest
from aot.lower.rules import LowerCtx, TensorRef


def lane_sum(v: Expr, lanes: int) -> Expr:
    """The sum of v's lanes, as a balanced tree of adds."""
    terms = [lane(v, i) for i in range(lanes)]
    while len(terms) > 1:
        terms = [Bin("+", a, b) for a, b in zip(terms[::2], terms[1::2])] + (
            [terms[-1]] if len(terms) % 2 else [])
    return terms[0]


def tile_body(ctx: LowerCtx, fc: FloatConv, bias: TensorRef | None, out: SpatialOp,
              emit: Callable, lanes: int) -> Callable:
    """conv_walk.walk's tile body: (image, pixels, region, group, first
    channel, widths) -> the tile. fc.wp holds [G, k..., OCg, ICg]."""
    vec = DType(fc.dtype.scalar, lanes)
    last = len(fc.xin.spatial) - 1
    step = fc.win.strides[last]

    def body(n: Expr, pixels, region: Region, g: Expr, c0: Expr, widths) -> Stmt:
        rt = register_tile(ctx, fc.dtype, pixels, (lanes,) * len(widths),
                           lambda off, w: Broadcast(Const(0.0, fc.dtype), w))

        def per_tap(ipos, tap) -> Stmt | None:
            rows = [ipos[:last] + [pos] for pos in neighbours(ipos[last], len(pixels), step)]

            def lanes_step(ic: Expr) -> Stmt:
                ch = add(mul(g, Const(fc.icg)), ic)
                xs = [ctx.fresh("xv", vec) for _ in rows]
                ws = [ctx.fresh("wv", vec) for _ in widths]
                return seq_of(
                    *(Decl(v, fc.x.load(fc.xin.index(n, row, ch), lanes))
                      for v, row in zip(xs, rows)),
                    *(Decl(v, Load(fc.wp, flat_index((g, *tap, plus(c0, j), ic), fc.shape),
                                   lanes)) for j, v in enumerate(ws)),
                    *(Assign(a, fma(a, x, w)) for x, row in zip(xs, rt.accs)
                      for a, w in zip(row, ws)))
            return loop(ctx, "ic", fc.icg // lanes, lanes_step, step=lanes)

        reduction = tap_nest(ctx, region, pixels[0], fc.win, fc.xin.spatial, per_tap)

        def store(pixel, off: int, acc, width: int) -> Stmt:
            c = add(add(mul(g, Const(fc.ocg)), c0), Const(off // lanes))
            total = lane_sum(acc, lanes)
            if bias is not None:
                total = Bin("+", total, bias.load((c,), 1))
            return emit(0, out.index(n, pixel, c), total)
        return rt.code(reduction, store)
    return body

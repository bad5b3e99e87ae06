"""A float convolution with few output channels and many input channels
(a detector's class and box heads: 256 -> 6 channels over a 4x5 map): its
output channels cannot fill a vector, so the usual tile (output channels
in the vector lanes) ran on scalars, at a tenth of the dense kernels'
rate. Here the input channels fill the lanes instead: each accumulator is
one output (pixel, channel) held as a vector of partial sums over the
input channels, updated by one input vector of the pixel and one weight
vector of the channel per tap and lane-group, and summed across its lanes
once, at the store (aot_lane, a tree of adds).

Where the schedule says so (`fold`), the tile's accumulators are summed
together instead: aot_pair_sums adds neighbouring lanes of two vectors into
one, so a tree of them leaves each accumulator's sum in one lane of a
single vector, the same balanced tree of adds per sum for a fraction of
the shuffles (UltraFace's 1x1 64 -> 6 head on AVX-512: 16 sums of 16 lanes
per 4 x 4 tile, in 15 calls of two shuffles and an add).

Weights are packed [group][k...][out-channel][in-channel] so a channel's
weights for a tap are one vector load. The walk is conv_walk.walk's (the
float kernels' exact regions, no tap tested): a tile is MR neighbouring
pixels x up to NR channels, the Tile's `vectors` (scalar widths of 1 per
channel, each becoming one accumulator vector here). Which convolutions
take it: aot/lower/schedule/conv.py, channel_dot_fits.
"""
from __future__ import annotations

from typing import Callable

from aot.ir.tir import (Assign, Bin, Broadcast, Const, Decl, DType, Expr, Load, Stmt, Var,
                        add, flat_index, mul)
from aot.isa.calls import lane, pair_sums
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


def folded_sums(ctx: LowerCtx, accs: list[Var], lanes: int) -> tuple[list[Stmt], dict]:
    """Each accumulator's lane sum as a lane of a folded vector: the
    declarations of those vectors and {accumulator name: its sum}. The
    accumulators go in runs of a power of two up to `lanes` (largest
    first); a run is paired level by level, then its one vector folded onto
    itself until each sum fills one lane."""
    decls: list[Stmt] = []
    sums: dict = {}
    start = 0
    while start < len(accs):
        k = min(lanes, 1 << (len(accs) - start).bit_length() - 1)
        run = accs[start:start + k]

        def named(e: Expr) -> Var:
            v = ctx.fresh("sums", run[0].dtype)
            decls.append(Decl(v, e))
            return v
        level: list[Expr] = list(run)
        while len(level) > 1:
            level = [named(pair_sums(a, b)) for a, b in zip(level[::2], level[1::2])]
        folded = level[0]
        for _ in range((lanes // k).bit_length() - 1):
            folded = named(pair_sums(folded, folded))
        sums.update({a.name: lane(folded, j) for j, a in enumerate(run)})
        start += k
    return decls, sums


def tile_body(ctx: LowerCtx, fc: FloatConv, bias: TensorRef | None, out: SpatialOp,
              emit: Callable, lanes: int, fold: bool = False) -> Callable:
    """conv_walk.walk's tile body: (image, pixels, region, group, first
    channel, widths) -> the tile. fc.wp holds [G, k..., OCg, ICg]; `fold`:
    the sums taken together (folded_sums), else one by one (lane_sum)."""
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
        sums: dict = {}
        if fold:
            decls, sums = folded_sums(ctx, [a for row in rt.accs for a in row], lanes)
            reduction = seq_of(reduction, *decls)

        def store(pixel, off: int, acc, width: int) -> Stmt:
            c = add(add(mul(g, Const(fc.ocg)), c0), Const(off // lanes))
            total = sums[acc.name] if fold else lane_sum(acc, lanes)
            if bias is not None:
                total = Bin("+", total, bias.load((c,), 1))
            return emit(0, out.index(n, pixel, c), total)
        return rt.code(reduction, store)
    return body

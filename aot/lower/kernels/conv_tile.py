"""A convolution's register tile, written once (conv_tile: the
accumulators declared and initialised, the reduction over the windows'
taps, each accumulator stored from its register through the epilogue)
over a strategy with one small protocol (TileStrategy: inside, init,
reduce, store, store_joined) and one TileAt, float or int8; the
strategies' steps, as the kernel's schedule (aot/lower/schedule/conv.py)
chose them.

Float (FloatConv, FloatFma): FMA rank-1 updates, or by lane of the
input vectors (tiles.rank1_update / lane_update), per tap and input
channel or, with merged rows, across a window row's taps and channels
(float_taps); depthwise, channel vectors of input and weights alike
(depthwise_taps). The callers are nn.conv and nn._depthwise.

int8 (Int8Conv, Int8Dot; aot/lower/schedule/strategy.py's strategies), per tap
(int8_tap) or window-row group (int8_flat_step):

- lanes: int32 products, a broadcast input against channel vectors of
  weights (dense) or input and weight channel vectors alike (depthwise);
- mlal: depthwise, 8 channels per int16 vector widened once into two
  accumulators (aot_mlal_lo / _hi); on staged int16 rows a window row at
  a time, each input column loaded once (_mlal_row); dense on int16
  activations, 8 input channels per vector load, each a lane against 8
  output channels' weights (SMLAL by element: _mlal_block, on staged rows
  _mlal_dense_row);
- pairs: two input channels per 16-bit multiply-add (aot_dot2, or
  aot_dot2p on rows staged as pairs);
- quads: four input channels per aot_dot4 from rows staged as quads, by
  lane of each pixel's four quads where the schedule says `by_lane`;
- flat rows: a first layer's window row as one run of pairs or quads.

The caller is int8_conv.vector_conv_nest. Both kernels walk their
output through conv_walk.walk (images, regions, pixel blocks, groups,
channel tiles and pixel parts) with conv_tile as the tile body, the float
over window_regions' exact runs, the int8 over border_regions or, with
staged rows, one whole region; both walk a tile's taps through
windows.tap_nest.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Protocol, Sequence

from aot.isa.calls import lane as lane_of
from aot.isa.calls import pack_quads
from aot.isa.dots import packed_pair_dot, pair_dot
from aot.isa.neon import pairwise_add, sixteen_dot, widening_mla
from aot.ir.tir import (Assign, Bin, Broadcast, Buffer, Cast, Const, Decl, DType, Expr, ForKind,
                        Load, Stmt, Var, add, dt, dtype_of, flat_index, mul, seq)
from aot.lower.arith import qmath as q
from aot.lower.arith.loops import fma, loop, offsets, plus, splat
from aot.lower.schedule.conv import Int8ConvSchedule
from aot.lower.schedule.strategy import Accumulator
from aot.lower.rules.elementwise import const_like
from aot.lower.arith.quant import in_block, to_i32
from aot.lower.rules import LowerCtx, TensorRef
from aot.lower.schedule.tile_sizes import Tile
from aot.lower.kernels.tiles import lane_update, rank1_update, reduce_steps, register_tile
from aot.lower.kernels.windows import ConvGeom, Region, SpatialOp, all_inside, neighbours, tap_nest
from aot.ops import nn as ref


@dataclass(frozen=True)
class StagedRows:
    """Input rows staged in a scratch buffer before an output row reads
    them: stage(n, oy) fills them, the tap row ky of output row oy is
    `rows`' slot(oy, ky); flat rows hold a group every `step` elements."""
    stage: Callable[[Expr, Expr], Stmt]
    rows: Buffer
    slot: Callable[[Expr, Expr], Expr]
    step: int = 1


@dataclass(frozen=True)
class Int8Conv:
    """What the reduction of an int8 vector convolution reads: its
    geometry, input (load_x(index, lanes)) and zero point, schedule, the
    weights as each step packs them (filter [G, KH, KW, D, P], depthwise
    [KH, KW, C]; pairs [G, KH, KW, D/2, P, 2]; quads [KH, KW, D/4, C, 4];
    flat [KH, groups, P, group]) and the staged rows, if any."""
    g: ConvGeom
    load_x: Callable
    zp: int
    sched: Int8ConvSchedule
    packed: Buffer | None = None
    pairs: Buffer | None = None
    quads: Buffer | None = None
    flat: Buffer | None = None
    rows: StagedRows | None = None


@dataclass(frozen=True)
class TileAt:
    """A register tile, float or int8: accs[p][j] for output position
    pixels[p] (a block of neighbours along the last axis, each a list of
    per-axis positions) and widths[j] channels from c0 of group g, in
    `region`; `inside`: every tap of its windows in the image (int8: the
    input zero point then in the bias)."""
    n: Expr
    pixels: Sequence[list[Expr]]
    region: Region
    g: Expr
    c0: Expr
    widths: tuple[int, ...]
    accs: tuple[tuple[Var, ...], ...] = ()
    inside: bool = False

    @property
    def oy(self) -> Expr:
        """The output row of a 2-D tile."""
        return self.pixels[0][0]

    @property
    def oxs(self) -> tuple[Expr, ...]:
        """The pixels' positions along the last axis (a 2-D tile's columns)."""
        return tuple(p[-1] for p in self.pixels)


class TileStrategy(Protocol):
    """What a register tile does with its accumulators (conv_tile): their
    type, whether a region's windows lie in the image, each one's initial
    value, the reduction over the windows' taps, and each one's store
    through the kernel's epilogue (or four 4-lane ones' together, where the
    strategy has such a store: store_joined, else None)."""
    dtype: DType

    def inside(self, region: Region) -> bool: ...

    def init(self, at: TileAt, off: int, width: int) -> Expr: ...

    def reduce(self, ctx: LowerCtx, at: TileAt) -> Stmt | None: ...

    def store(self, ctx: LowerCtx, at: TileAt, pixel: list[Expr], off: int, acc: Var,
              width: int) -> Stmt: ...

    def store_joined(self, ctx: LowerCtx, at: TileAt, pixel: list[Expr], off: int,
                     accs: tuple[Var, ...]) -> Stmt | None: ...


def conv_tile(ctx: LowerCtx, s: TileStrategy, n: Expr, pixels: Sequence[list[Expr]],
              region: Region, g: Expr, c0: Expr, widths: Sequence[int]) -> Stmt:
    """The one register tile of the convolutions (conv_walk.walk's tile
    body): the accumulators declared and initialised, the strategy's
    reduction, then every accumulator stored from its register."""
    at = TileAt(n, tuple(pixels), region, g, c0, tuple(widths), inside=s.inside(region))
    rt = register_tile(ctx, s.dtype, pixels, widths, lambda off, wd: s.init(at, off, wd))
    at = replace(at, accs=rt.accs)
    return rt.code(s.reduce(ctx, at), lambda pix, off, a, wd: s.store(ctx, at, pix, off, a, wd),
                   lambda pix, off, accs: s.store_joined(ctx, at, pix, off, accs))


def int8_tap(ctx: LowerCtx, cv: Int8Conv, at: TileAt, ky, kx, iy, ixs, plane: int = 0) -> Stmt:
    """The reduction over the input channels at tap (ky, kx), input row iy
    and columns ixs, in the schedule's strategy (byte planes: `plane` 0
    the high bytes, 1 the low)."""
    g, s = cv.g, cv.sched
    ws = [ctx.fresh("wv", dt("int32", wd)) for wd in at.widths]
    if s.mlal and not s.depthwise and g.depth % 8 == 0:
        return loop(ctx, "icb", g.depth // 8, lambda icb: _mlal_block(ctx, cv, at, ky, kx, iy,
                                                                     ixs, icb))
    if not (s.quads or s.pairs and min(at.widths) >= 4):
        return loop(ctx, "ic", 1 if s.depthwise else g.depth,
                    lambda ic: _lane_step(ctx, cv, at, ky, kx, iy, ixs, ws, ic))
    wp = [ctx.fresh("wv", dt("int16", 2 * wd)) for wd in at.widths]
    if s.quads and s.by_lane:
        return loop(ctx, "icb", g.depth // 16,
                    lambda icb: _quad_block(ctx, cv, at, ky, kx, ixs, icb, plane))
    if s.quads:
        return loop(ctx, "icq", g.depth // 4, lambda icq: _quad_step(ctx, cv, at, ky, kx, ixs,
                                                                     icq))
    stmts = [loop(ctx, "icp", g.depth // 2,
                  lambda icp: _pair_step(ctx, cv, at, ky, kx, iy, ixs, wp, icp))]
    if g.depth % 2:
        stmts.append(_lane_step(ctx, cv, at, ky, kx, iy, ixs, ws, Const(g.depth - 1)))
    return seq(*stmts)


def _lane_step(ctx, cv: Int8Conv, at: TileAt, ky, kx, iy, ixs, ws, ic) -> Stmt:
    """Input channel ic (depthwise: the tile's channels) in int32 lanes."""
    g, offs = cv.g, offsets(at.widths)
    if cv.sched.mlal:
        return _mlal_step(ctx, cv, at, ky, kx, iy, ixs, ic)
    body = [Decl(v, _weight(cv, at.g, ky, kx, ic, add(at.c0, Const(off)), wd))
            for v, off, wd in zip(ws, offs, at.widths)]
    for row, ix in zip(at.accs, ixs):
        if cv.sched.depthwise:
            for a, off, wd in zip(row, offs, at.widths):
                xv = Cast(dt("int32", wd), cv.load_x((at.n, iy, ix, add(at.c0, Const(off))), wd))
                xv = xv if at.inside else q.offset(xv, -cv.zp)
                body.append(Assign(a, Bin("+", a, Bin("*", xv, ws[offs.index(off)]))))
        else:
            xs = ctx.fresh("xv")
            ch = add(mul(at.g, Const(g.depth)), ic)
            body.append(Decl(xs, q.offset(to_i32(cv.load_x((at.n, iy, ix, ch))),
                                          0 if at.inside else -cv.zp)))
            for a, v, wd in zip(row, ws, at.widths):
                body.append(Assign(a, Bin("+", a, Bin("*", splat(xs, wd), v))))
    return seq(*body)


def _weight(cv: Int8Conv, gi, ky, kx, ic, c, lanes) -> Expr:
    idx = (ky, kx, c) if cv.sched.depthwise else (gi, ky, kx, ic, c)
    return Cast(dt("int32", lanes), Load(cv.packed, flat_index(idx, cv.packed.shape), lanes))


def _mlal_step(ctx, cv: Int8Conv, at: TileAt, ky, kx, iy, ixs, ic) -> Stmt:
    """8 channels per int16 vector into two accumulators (aot_mlal_lo /
    _hi): depthwise, each pixel's channels widened once; dense (int16
    activations), input channel ic of each pixel broadcast against the
    weights of 8 output channels."""
    offs, widths = offsets(at.widths), at.widths
    depthwise = cv.sched.depthwise
    wh = [ctx.fresh("wh", dt("int16", 2 * wd)) for wd in widths[::2]]

    def weights(off, wd):
        c = add(at.c0, Const(off))
        if depthwise:
            return Load(cv.packed, flat_index((ky, kx, c), cv.packed.shape), 2 * wd)
        return _mlal_weights(cv, at.g, ky, kx, ic, c)
    body = [Decl(v, weights(off, wd)) for v, off, wd in zip(wh, offs[::2], widths[::2])]
    for row, ix in zip(at.accs, ixs):
        if not depthwise:
            xb = ctx.fresh("xb", dt("int16", 2 * widths[0]))
            ch = add(mul(at.g, Const(cv.g.depth)), ic)
            xe = Cast(dt("int16"), cv.load_x((at.n, iy, ix, ch)))
            body.append(Decl(xb, Broadcast(xe if at.inside else q.offset(xe, -cv.zp),
                                           2 * widths[0])))
        for k, (v, off, wd) in enumerate(zip(wh, offs[::2], widths[::2])):
            if depthwise:
                xh = ctx.fresh("xh", dt("int16", 2 * wd))
                xe = Cast(dtype_of(xh), cv.load_x((at.n, iy, ix, add(at.c0, Const(off))), 2 * wd))
                body.append(Decl(xh, xe if at.inside else q.offset(xe, -cv.zp)))
            else:
                xh = xb
            body += [Assign(row[2 * k + h], widening_mla(row[2 * k + h], xh, v, h == 1))
                     for h in (0, 1)]
    return seq(*body)


def _mlal_block(ctx, cv: Int8Conv, at: TileAt, ky, kx, iy, ixs, icb) -> Stmt:
    """Dense, int16 activations: input channels 8 icb .. 8 icb + 7, one
    vector load of each pixel's eight, each a lane of it against the
    weights of 8 output channels (NEON's SMLAL by element)."""
    g = cv.g
    body, xvs = [], []
    for ix in ixs:
        xv = ctx.fresh("xo", dt("int16", 8))
        ch = add(mul(at.g, Const(g.depth)), mul(icb, Const(8)))
        body.append(Decl(xv, cv.load_x((at.n, iy, ix, ch), 8)))
        xvs.append(xv)
    return seq(*body, _mlal_lanes(ctx, cv, at, ky, kx, icb, xvs))


def _mlal_lanes(ctx, cv: Int8Conv, at: TileAt, ky, kx, icb, xvs: list[Var]) -> Stmt:
    """Tap (ky, kx), input channels 8 icb .. 8 icb + 7 held as lanes of
    each pixel's int16 vector in xvs: each channel's weights for the tile's
    output channels loaded once, then SMLAL / SMLAL2 by element per pixel."""
    offs, widths = offsets(at.widths), at.widths
    body: list[Stmt] = []
    for j in range(8):
        ic = add(mul(icb, Const(8)), Const(j))
        wh = [ctx.fresh("wh", dt("int16", 2 * wd)) for wd in widths[::2]]
        body += [Decl(v, _mlal_weights(cv, at.g, ky, kx, ic, add(at.c0, Const(off))))
                 for v, off in zip(wh, offs[::2])]
        for row, xv in zip(at.accs, xvs):
            for k, (v, wd) in enumerate(zip(wh, widths[::2])):
                # the broadcast second: the multiply by element's operand
                xb = Broadcast(lane_of(xv, j), 2 * wd)
                body += [Assign(row[2 * k + h], widening_mla(row[2 * k + h], v, xb, h == 1))
                         for h in (0, 1)]
    return seq(*body)


def _mlal_weights(cv: Int8Conv, gi, ky, kx, ic, c) -> Load:
    """The int16 weights of output channels c .. c + 7 (c a multiple of 8)
    for input channel ic at tap (ky, kx) of a dense SMLAL conv: packed
    [G, P/8, KH, KW, D, 8], so that consecutive input channels' are
    neighbours (one LDP loads two)."""
    shape = cv.packed.shape
    at = add(flat_index((gi, Const(0), ky, kx, ic, Const(0)), shape),
             mul(c, Const(shape[2] * shape[3] * shape[4])))
    return Load(cv.packed, at, 8)


def _mlal_dense_row(ctx, cv: Int8Conv, at: TileAt, ky) -> Stmt:
    """Dense, int16 activations on staged rows: window row ky of every
    pixel of the block, 8 input channels at a time, the row's taps
    unrolled inside (so only one block's input columns live beside the
    accumulators: with the channel blocks inside the taps clang kept
    every block's columns and spilled), each input column the block
    reads loaded once, where a tap first needs it."""
    g, r = cv.g, cv.rows
    sw, dw = g.strides[1], g.dilations[1]
    first = mul(at.oxs[0], Const(sw))

    def block(icb) -> Stmt:
        xs: dict[int, Var] = {}
        body: list[Stmt] = []
        for kx in range(g.kw):
            cols = [p * sw + kx * dw for p in range(len(at.accs))]
            for col in cols:
                if col not in xs:
                    xs[col] = ctx.fresh("xo", dt("int16", 8))
                    body.append(Decl(xs[col], Load(r.rows, flat_index(
                        (r.slot(at.oy, ky), plus(first, col), mul(icb, Const(8))),
                        r.rows.shape), 8)))
            body.append(_mlal_lanes(ctx, cv, at, ky, Const(kx), icb, [xs[c] for c in cols]))
        return seq(*body)
    return loop(ctx, "icb", g.depth // 8, block,
                kind=ForKind.UNROLLED if cv.sched.unroll_taps else ForKind.SERIAL)


def _mlal_row(ctx, cv: Int8Conv, at: TileAt, ky) -> Stmt:
    """Depthwise on staged int16 rows (x - zp, zero outside the image),
    window row ky of every pixel of the block, its taps unrolled: the taps'
    weights loaded first, then pixel by pixel each input column the block
    reads loaded once, where it is first used (at stride 1 neighbours
    share all but one; a few columns live at a time beside the
    accumulators), into SMLAL / SMLAL2."""
    g, r = cv.g, cv.rows
    sw, dw = g.strides[1], g.dilations[1]
    offs, widths = offsets(at.widths)[::2], at.widths[::2]
    row = mul(r.slot(at.oy, ky), Const(r.rows.shape[1]))
    first = mul(at.oxs[0], Const(sw))
    whs = [[ctx.fresh("wh", dt("int16", 2 * wd)) for wd in widths] for _ in range(g.kw)]
    body: list[Stmt] = [Decl(v, Load(cv.packed, flat_index(
        (ky, Const(kx), add(at.c0, Const(off))), cv.packed.shape), 2 * wd))
        for kx, wh in enumerate(whs) for v, off, wd in zip(wh, offs, widths)]
    xs: dict[int, list[Var]] = {}
    for p, accs in enumerate(at.accs):
        for kx, wh in enumerate(whs):
            col = p * sw + kx * dw
            if col not in xs:
                xs[col] = [ctx.fresh("xh", dt("int16", 2 * wd)) for wd in widths]
                body += [Decl(v, Load(r.rows, add(mul(add(row, plus(first, col)),
                                                      Const(g.cout)),
                                                  add(at.c0, Const(off))), 2 * wd))
                         for v, off, wd in zip(xs[col], offs, widths)]
            for k, (v, xv) in enumerate(zip(wh, xs[col])):
                body += [Assign(accs[2 * k + h], widening_mla(accs[2 * k + h], xv, v, h == 1))
                         for h in (0, 1)]
    return seq(*body)


def _quad_weights(ctx, cv: Int8Conv, at: TileAt, ky, kx, icq) -> tuple[list, list]:
    w4 = [ctx.fresh("wq", dt("int8", 4 * wd)) for wd in at.widths]
    return w4, [Decl(v, Load(cv.quads, flat_index(
        (ky, kx, icq, add(at.c0, Const(off)), Const(0)), cv.quads.shape), 4 * wd))
        for v, off, wd in zip(w4, offsets(at.widths), at.widths)]


def _quad_step(ctx, cv: Int8Conv, at: TileAt, ky, kx, ixs, icq) -> Stmt:
    """Input channels 4 icq .. 4 icq + 3 at once (aot_dot4): one int32 of
    the staged rows per pixel, broadcast."""
    r = cv.rows
    w4, body = _quad_weights(ctx, cv, at, ky, kx, icq)
    for row, ix in zip(at.accs, ixs):
        xq = ctx.fresh("xq")
        body.append(Decl(xq, Load(r.rows, flat_index((r.slot(at.oy, ky), ix, icq),
                                                      r.rows.shape))))
        body += [Assign(a, cv.sched.accumulator.dot(a, xq, v)) for a, v in zip(row, w4)]
    return seq(*body)


def _quad_block(ctx, cv: Int8Conv, at: TileAt, ky, kx, ixs, icb, plane: int = 0) -> Stmt:
    """Quads 4 icb .. 4 icb + 3: one vector load of each pixel's four,
    each quad a lane of it (Arm's sdot by element); byte planes: of the
    pixel's `plane`."""
    r = cv.rows
    body, xvs = [], []
    first = plane * cv.g.depth // 4
    for ix in ixs:
        xv = ctx.fresh("xq", dt("int32", 4))
        body.append(Decl(xv, Load(r.rows, flat_index(
            (r.slot(at.oy, ky), ix, plus(mul(icb, Const(4)), first)), r.rows.shape), 4)))
        xvs.append(xv)
    for j in range(4):
        w4, decls = _quad_weights(ctx, cv, at, ky, kx, add(mul(icb, Const(4)), Const(j)))
        body += decls
        for row, xv in zip(at.accs, xvs):
            body += [Assign(a, cv.sched.accumulator.dot(a, lane_of(xv, j), v))
                     for a, v in zip(row, w4)]
    return seq(*body)


def _tap_kinds(cv: Int8Conv) -> tuple[ForKind, ...]:
    """The window axes' loops of a quad tile: the columns unrolled where
    the schedule says so (`unroll_taps`)."""
    return (ForKind.SERIAL, ForKind.UNROLLED) if cv.sched.unroll_taps else ()


def _sixteens(ctx, cv: Int8Conv, at: TileAt) -> Stmt:
    """The tile's reduction in aot_dot16p: 4 partial sums per output channel
    and pixel (zero first), every tap's 16-channel blocks (_sixteen_block),
    then each vector of 4 channels' partials folded by two levels of
    aot_addp into its accumulator."""
    g, i32x4 = cv.g, dt("int32", 4)
    parts = [[[ctx.fresh("part", i32x4) for _ in range(wd)] for wd in at.widths]
             for _ in at.accs]
    zero = const_like(0, Var("z", i32x4))
    body: list[Stmt] = [Decl(p, zero) for row in parts for vec in row for p in vec]
    taps = tap_nest(ctx, at.region, at.pixels[0], g.window(0), (g.h, g.w), lambda ipos, tap: loop(
        ctx, "icb", g.depth // 16, lambda icb: _sixteen_block(
            ctx, cv, at, parts, *tap, neighbours(ipos[1], len(at.pixels), g.strides[1]), icb)),
        ("ky", "kx"), from_origin=True, kinds=_tap_kinds(cv))
    if taps is not None:
        body.append(taps)
    for row, prow in zip(at.accs, parts):
        for a, vec in zip(row, prow):
            p0, p1, p2, p3 = vec
            body.append(Assign(a, Bin("+", a, pairwise_add(pairwise_add(p0, p1),
                                                           pairwise_add(p2, p3)))))
    return seq(*body)


def _sixteen_block(ctx, cv: Int8Conv, at: TileAt, parts, ky, kx, ixs, icb) -> Stmt:
    """Input channels 16 icb .. 16 icb + 15 at tap (ky, kx): each pixel's
    16 staged bytes one load, each output channel's 16 weights one load."""
    r = cv.rows
    body, xvs = [], []
    for ix in ixs:
        xv = ctx.fresh("xb", dt("int8", 16))
        body.append(Decl(xv, Load(r.rows, flat_index((r.slot(at.oy, ky), ix, mul(icb, Const(16))),
                                                     r.rows.shape), 16)))
        xvs.append(xv)
    for k, (off, wd) in enumerate(zip(offsets(at.widths), at.widths)):
        for lane in range(wd):
            wv = ctx.fresh("w16", dt("int8", 16))
            body.append(Decl(wv, Load(cv.quads, flat_index(
                (ky, kx, icb, add(at.c0, Const(off + lane)), Const(0)), cv.quads.shape), 16)))
            for prow, xv in zip(parts, xvs):
                p = prow[k][lane]
                body.append(Assign(p, sixteen_dot(p, xv, wv)))
    return seq(*body)


def _pair_step(ctx, cv: Int8Conv, at: TileAt, ky, kx, iy, ixs, wp, icp) -> Stmt:
    """Input channels 2 icp and 2 icp + 1 at once (aot_dot2)."""
    g, r = cv.g, cv.rows
    body = [Decl(v, Cast(dt("int16", 2 * wd), Load(cv.pairs, flat_index(
        (at.g, ky, kx, icp, add(at.c0, Const(off)), Const(0)), cv.pairs.shape), 2 * wd)))
            for v, off, wd in zip(wp, offsets(at.widths), at.widths)]
    for row, ix in zip(at.accs, ixs):
        if r is not None:       # the pair is one int32 of the staged rows
            pv = ctx.fresh("xp")
            body.append(Decl(pv, Load(r.rows, flat_index((r.slot(at.oy, ky), ix, icp),
                                                         r.rows.shape))))
            body += [Assign(a, Bin("+", a, packed_pair_dot(pv, v))) for a, v in zip(row, wp)]
            continue
        xs = []
        for j in range(2):
            ch = add(mul(at.g, Const(g.depth)), add(mul(icp, Const(2)), Const(j)))
            v = ctx.fresh("xv", dt("int16"))
            body.append(Decl(v, q.offset(Cast(dt("int16"), cv.load_x((at.n, iy, ix, ch))),
                                         0 if at.inside else -cv.zp)))
            xs.append(v)
        body += [Assign(a, Bin("+", a, pair_dot(xs[0], xs[1], v))) for a, v in zip(row, wp)]
    return seq(*body)


def int8_flat_step(ctx: LowerCtx, cv: Int8Conv, at: TileAt, ky, j) -> Stmt:
    """Group j of window row ky (flat rows): one pair or quad of the staged
    row per pixel against the weights of that group."""
    g, r = cv.g, cv.rows
    kind = cv.sched.flat_accumulator
    fg = kind.group
    offs, widths = offsets(at.widths), at.widths
    wp = [ctx.fresh("wv", dt("int16" if fg == 2 else "int8", fg * wd)) for wd in widths]
    loads = [Load(cv.flat, flat_index((ky, j, add(at.c0, Const(off)), Const(0)), cv.flat.shape),
                  fg * wd) for off, wd in zip(offs, widths)]
    body = [Decl(v, w if fg == 4 else Cast(dtype_of(v), w)) for v, w in zip(wp, loads)]
    for row_, ox in zip(at.accs, at.oxs):
        pv = ctx.fresh("xp" if fg == 2 else "xq")
        pos = add(mul(ox, Const(g.strides[1] * g.depth // r.step)), mul(j, Const(fg // r.step)))
        group = add(mul(r.slot(at.oy, ky), Const(r.rows.shape[1])), pos)
        body.append(Decl(pv, pack_quads(Load(r.rows, group, 4))
                         if r.rows.dtype.scalar == "int8" else Load(r.rows, group)))
        body += [Assign(a, kind.dot(a, pv, v) if fg == 4 else
                        Bin("+", a, packed_pair_dot(pv, v))) for a, v in zip(row_, wp)]
    return seq(*body)


def flat_by_lane(kind: Accumulator, column_stride: int, groups: int) -> bool:
    """Whether a window row of `groups` quads (flat rows in the `kind`
    strategy) is one vector load per pixel, each quad a lane (byte rows in
    the by-lane quads, 2 to 4 groups a row, unit column stride); the
    staging pads the rows for that load (int8_conv._flat_rows). Where the
    dot product takes a lane (SDOT by element: ic int8's first conv on the
    A76 143,694 -> 106,314 instructions), not
    quads_mull's (symmetric) SMULL, which would DUP each lane where a
    broadcast load now reads it (A72 251,313 -> 257,450). Not at stride 2
    nor for one group a row, where the broadcast loads measured fewer (A76
    C, vww int8 1,691,402 -> 1,698,651, kws int8 530,641 -> 538,912)."""
    return (kind.group == 4 and kind.by_lane and not kind.symmetric and column_stride == 1
            and 2 <= groups <= 4)


def int8_flat_lanes(ctx: LowerCtx, cv: Int8Conv, at: TileAt, ky) -> Stmt:
    """Window row ky of every pixel (flat byte rows, by lane): each pixel's
    16 bytes from its window's start one load, its group j the lane j
    (Arm's SDOT by element; the DUP of a lane without dotprod) against
    group j's weights: one load where a broadcast took one per group."""
    g, r, kind = cv.g, cv.rows, cv.sched.flat_accumulator
    offs, widths = offsets(at.widths), at.widths
    body: list[Stmt] = []
    xvs = []
    for ox in at.oxs:
        xv = ctx.fresh("xq", dt("int32", 4))
        start = add(mul(r.slot(at.oy, ky), Const(r.rows.shape[1])),
                    mul(ox, Const(g.strides[1] * g.depth)))
        body.append(Decl(xv, pack_quads(Load(r.rows, start, 16))))
        xvs.append(xv)
    for j in range(cv.flat.shape[1]):
        wq = [ctx.fresh("wv", dt("int8", 4 * wd)) for wd in widths]
        body += [Decl(v, Load(cv.flat, flat_index((ky, Const(j), add(at.c0, Const(off)), Const(0)),
                                                  cv.flat.shape), 4 * wd))
                 for v, off, wd in zip(wq, offs, widths)]
        for row, xv in zip(at.accs, xvs):
            body += [Assign(a, kind.dot(a, lane_of(xv, j), v)) for a, v in zip(row, wq)]
    return seq(*body)


@dataclass(frozen=True)
class Int8Dot:
    """The int8 tile strategy: the schedule's accumulator strategy per tap
    (int8_tap) or window-row group (int8_flat_step); each accumulator starts
    at bias(folded, channel, lanes), the bias less the input zero point
    times the weights' sum where the tile is inside and its rows are not
    staged, and is requantized through epilogue(block, (n, oy, ox, c),
    acc, lanes); four 4-lane accumulators of a pixel's 16 channels from c
    through joined(block, (n, oy, ox, c), accs) where it gives a store
    (one narrowing, clamp and store of the 16 bytes)."""
    cv: Int8Conv
    bias: Callable[[bool, Expr, int], Expr]
    epilogue: Callable
    dtype: DType = dt("int32")
    joined: Callable | None = None

    def channel(self, at: TileAt, off: int) -> Expr:
        return add(add(mul(at.g, Const(self.cv.g.per_group)), at.c0), Const(off))

    def inside(self, region: Region) -> bool:
        return all_inside(region, (self.cv.g.kh, self.cv.g.kw))

    def init(self, at: TileAt, off: int, width: int) -> Expr:
        if self.cv.sched.byte_planes:     # the bias joins after the high planes
            return const_like(0, self.dtype.with_lanes(width))
        # staged rows hold x - zp already (or the quads' offset bytes): no fold
        return self.bias(at.inside and self.cv.rows is None, self.channel(at, off), width)

    def reduce(self, ctx: LowerCtx, at: TileAt) -> Stmt | None:
        g, cv = self.cv.g, self.cv
        if cv.sched.byte_planes:
            return self._planes(ctx, at)
        if cv.sched.rows == "flat":
            if flat_by_lane(cv.sched.flat_accumulator, g.strides[1], cv.flat.shape[1]):
                return loop(ctx, "ky", g.kh, lambda ky: int8_flat_lanes(ctx, cv, at, ky))
            return loop(ctx, "ky", g.kh, lambda ky: loop(
                ctx, "kp", cv.flat.shape[1], lambda j: int8_flat_step(ctx, cv, at, ky, j)))
        # staged rows start at the left padding; the block's pixels are
        # neighbours: their input columns a stride apart from the tap's
        win = g.window(None if cv.rows is None else 0)
        if cv.sched.sixteens:
            return _sixteens(ctx, cv, at)
        if cv.sched.mlal and cv.rows is not None:     # a window row
            row = _mlal_row if cv.sched.depthwise else _mlal_dense_row
            return tap_nest(ctx, at.region[:1], at.pixels[0], win, (g.h,),
                            lambda ipos, tap: row(ctx, cv, at, tap[0]), ("ky",),
                            from_origin=True)
        return tap_nest(ctx, at.region, at.pixels[0], win, (g.h, g.w), lambda ipos, tap: int8_tap(
            ctx, cv, at, *tap, ipos[0], neighbours(ipos[1], len(at.pixels), g.strides[1])),
            ("ky", "kx"), from_origin=True, kinds=_tap_kinds(cv))

    def _planes(self, ctx: LowerCtx, at: TileAt) -> Stmt:
        """Byte planes: every tap's high bytes, the sums times 256 plus
        the bias, then every tap's low bytes. The schedule's caller proved
        every partial sum fits int32."""
        g, cv = self.cv.g, self.cv
        win = g.window(0)

        # A window row's taps unrolled: neighbouring taps read the same input
        # quads (loaded once) and no tap loop runs (rpi5, the 32x32x16 -> 16
        # 3x3 conv, C: 465,699 -> 429,730 instructions). Not the rows too:
        # clang then hoists every tap's weights out of the pixel loop and
        # spills them (495,880).
        def taps(plane: int) -> Stmt | None:
            return tap_nest(ctx, at.region, at.pixels[0], win, (g.h, g.w), lambda ipos, tap:
                            int8_tap(ctx, cv, at, *tap, ipos[0],
                                     neighbours(ipos[1], len(at.pixels), g.strides[1]), plane),
                            ("ky", "kx"), from_origin=True,
                            kinds=(ForKind.SERIAL, ForKind.UNROLLED))
        scale = [Assign(a, Bin("+", Bin("*", a, const_like(256, a)),
                               self.bias(False, self.channel(at, off), wd)))
                 for row in at.accs for a, off, wd in zip(row, offsets(at.widths), at.widths)]
        return seq(*[st for st in (taps(0), *scale, taps(1)) if st is not None])

    def store(self, ctx: LowerCtx, at: TileAt, pixel: list[Expr], off: int, acc: Var,
              width: int) -> Stmt:
        return in_block(ctx, lambda b: self.epilogue(
            b, (at.n, at.oy, pixel[-1], self.channel(at, off)), acc, width))

    def store_joined(self, ctx: LowerCtx, at: TileAt, pixel: list[Expr], off: int,
                     accs: tuple[Var, ...]) -> Stmt | None:
        if self.joined is None:
            return None
        b = q.Block(ctx)
        st = self.joined(b, (at.n, at.oy, pixel[-1], self.channel(at, off)), accs)
        if st is None:
            return None
        b.add(st)
        return b.stmt()


# ---------------------------------------------------------------- float steps

@dataclass(frozen=True)
class FloatConv:
    """What the reduction of a float direct or depthwise convolution reads:
    the input x seen as xin, the window, the packed weights wp (`shape`:
    [G, k..., ICg, OCg], depthwise [k..., C]), the tile and its dtype."""
    x: TensorRef
    xin: SpatialOp
    win: ref.Window
    wp: Buffer
    shape: tuple[int, ...]
    icg: int
    ocg: int
    tile: Tile
    dtype: DType


def bias_init(bias: TensorRef | None, dtype: DType, c0: Expr) -> Callable[[int, int], Expr]:
    """init(offset, width): the bias of channels c0 + offset.. as a vector
    of `width` (zero without a bias)."""
    def init(off: int, w: int) -> Expr:
        if bias is None:
            return const_like(0, dtype.with_lanes(w))
        return splat(bias.load((add(c0, Const(off)),), w), w)
    return init


@dataclass(frozen=True)
class FloatFma:
    """The float tile strategy: FMA rank-1 or by-lane updates per tap
    (float_taps; with `merge_rows` across a window row), or depthwise
    channel vectors (depthwise_taps); each accumulator starts at the bias
    and is stored through emit(0, out index, acc)."""
    fc: FloatConv
    bias: TensorRef | None
    out: SpatialOp
    emit: Callable
    depthwise: bool = False
    merge_rows: bool = False

    @property
    def dtype(self) -> DType:
        return self.fc.dtype

    def channel(self, at: TileAt, off: int) -> Expr:
        return add(add(mul(at.g, Const(self.fc.ocg)), at.c0), Const(off))

    def inside(self, region: Region) -> bool:
        return all_inside(region, self.fc.win.kernel)

    def init(self, at: TileAt, off: int, width: int) -> Expr:
        return bias_init(self.bias, self.dtype, self.channel(at, 0))(off, width)

    def reduce(self, ctx: LowerCtx, at: TileAt) -> Stmt | None:
        if self.depthwise:
            return depthwise_taps(ctx, self.fc, at)
        return float_taps(ctx, self.fc, at, self.merge_rows)

    def store(self, ctx: LowerCtx, at: TileAt, pixel: list[Expr], off: int, acc: Var,
              width: int) -> Stmt:
        return self.emit(0, self.out.index(at.n, pixel, self.channel(at, off)), acc)

    def store_joined(self, ctx: LowerCtx, at: TileAt, pixel: list[Expr], off: int,
                     accs: tuple[Var, ...]) -> None:
        return None         # each float accumulator is stored as it is


def float_taps(ctx: LowerCtx, fc: FloatConv, at: TileAt, merge_rows: bool) -> Stmt | None:
    """The tile's reduction over its windows' in-image taps and input
    channels: rank-1 (or by-lane) updates per tap, or with `merge_rows`
    (an unguarded last axis) a window row's taps and channels as one."""
    last = len(fc.xin.spatial) - 1
    if merge_rows and not at.region[last].guarded:
        return tap_nest(ctx, at.region[:last], at.pixels[0], fc.win, fc.xin.spatial,
                        lambda ipos, tap: _row_steps(ctx, fc, at, ipos, tap))
    return tap_nest(ctx, at.region, at.pixels[0], fc.win, fc.xin.spatial,
                    lambda ipos, tap: _tap_steps(ctx, fc, at, ipos, tap))


def _tap_steps(ctx, fc: FloatConv, at: TileAt, ipos, tap) -> Stmt | None:
    t, offs = fc.tile, offsets(at.widths)
    last = len(fc.xin.spatial) - 1
    step = fc.win.strides[last]
    # the block's pixels are neighbours along the last axis
    rows = [ipos[:last] + [pos] for pos in neighbours(ipos[last], len(at.pixels), step)]

    def weights(ic):
        return [Load(fc.wp, flat_index((at.g, *tap, ic, add(at.c0, Const(off))), fc.shape), wd)
                for off, wd in zip(offs, at.widths)]

    def inputs(ic, lanes=1):
        ch = add(mul(at.g, Const(fc.icg)), ic)
        return [fc.x.load(fc.xin.index(at.n, row, ch), lanes) for row in rows]

    def per_ic(ic):
        return rank1_update(ctx, fc.dtype, at.accs, inputs(ic), weights(ic), at.widths)

    def lanes_ic(ic):
        return lane_update(ctx, fc.dtype, at.accs, inputs(ic, t.k_lanes),
                           lambda step: weights(plus(ic, step)), at.widths)
    return reduce_steps(ctx, "ic", fc.icg, t, per_ic, lanes_ic)


def _row_steps(ctx, fc: FloatConv, at: TileAt, ipos, tap) -> Stmt | None:
    """The last axis's taps and the input channels as one reduction of
    (hi - lo) x icg steps: with one group at dilation 1 they are
    consecutive in an input row and in the packed weights, so the by-lane
    steps run across taps (fewer, longer loops)."""
    t, offs, x, xin = fc.tile, offsets(at.widths), fc.x, fc.xin
    last = len(xin.spatial) - 1
    step = fc.win.strides[last]
    r = at.region[last]
    starts = [flat_index(xin.index(at.n, ipos + [plus(mul(pix[last], Const(step)),
                                                      r.lo - fc.win.pad_begin[last])],
                                   Const(0)), tuple(x.shape)) for pix in at.pixels]
    row0 = flat_index((at.g, *tap, Const(r.lo), Const(0), at.c0), fc.shape)

    def weights(j):
        return [Load(fc.wp, add(row0, plus(mul(j, Const(fc.ocg)), off)), wd)
                for off, wd in zip(offs, at.widths)]

    def inputs(j, lanes=1):
        return [Load(x.buffer, add(start, j), lanes) for start in starts]

    return reduce_steps(
        ctx, "j", (r.hi - r.lo) * fc.icg, t,
        lambda j: rank1_update(ctx, fc.dtype, at.accs, inputs(j), weights(j), at.widths),
        lambda j: lane_update(ctx, fc.dtype, at.accs, inputs(j, t.k_lanes),
                              lambda l: weights(plus(j, l)), at.widths))


def depthwise_taps(ctx: LowerCtx, fc: FloatConv, at: TileAt) -> Stmt | None:
    """A depthwise tile's reduction: input and weights as channel vectors
    alike; a block of pixels takes its last axis's taps unrolled."""
    last = len(fc.xin.spatial) - 1
    if len(at.pixels) == 1:
        return tap_nest(ctx, at.region, at.pixels[0], fc.win, fc.xin.spatial,
                        lambda ipos, tap: _depthwise_tap(ctx, fc, at, ipos, tap))
    # a block of pixels is never tested along the last axis (conv_walk)
    return tap_nest(ctx, at.region[:last], at.pixels[0], fc.win, fc.xin.spatial,
                    lambda ipos, tap: _depthwise_row(ctx, fc, at, ipos, tap))


def _depthwise_weights(fc: FloatConv, at: TileAt, tap) -> list[Expr]:
    return [Load(fc.wp, flat_index((*tap, add(at.c0, Const(off))), fc.shape), wd)
            for off, wd in zip(offsets(at.widths), at.widths)]


def _depthwise_tap(ctx, fc: FloatConv, at: TileAt, ipos, tap) -> Stmt:
    return seq(*(Assign(a, fma(a, fc.x.load(fc.xin.index(at.n, ipos, add(at.c0, Const(off))), wd),
                               w))
                 for a, off, wd, w in zip(at.accs[0], offsets(at.widths), at.widths,
                                          _depthwise_weights(fc, at, tap))))


def _depthwise_row(ctx, fc: FloatConv, at: TileAt, ipos, tap) -> Stmt:
    """The last axis's taps of every pixel of the block, unrolled: each
    input position the block reads is loaded once (at stride 1 neighbours
    share all but one), each tap's weights once."""
    win, widths, offs = fc.win, at.widths, offsets(at.widths)
    last = len(fc.xin.spatial) - 1
    r = at.region[last]
    s, d, p = win.strides[last], win.dilations[last], win.pad_begin[last]
    cols = sorted({px * s + k * d for px in range(len(at.pixels)) for k in range(r.lo, r.hi)})
    xs = {col: [ctx.fresh("xv", fc.dtype.with_lanes(wd)) for wd in widths] for col in cols}
    first = plus(mul(at.pixels[0][last], Const(s)), -p)
    stmts: list[Stmt] = [
        Decl(v, fc.x.load(fc.xin.index(at.n, ipos + [plus(first, col)], add(at.c0, Const(off))),
                          wd))
        for col in cols for v, off, wd in zip(xs[col], offs, widths)]
    for k in range(r.lo, r.hi):
        wvars = [ctx.fresh("wv", fc.dtype.with_lanes(wd)) for wd in widths]
        stmts += [Decl(v, e) for v, e in zip(wvars, _depthwise_weights(fc, at, tap + [Const(k)]))]
        stmts += [Assign(a, fma(a, xv, w))
                  for px, row_accs in enumerate(at.accs)
                  for a, xv, w in zip(row_accs, xs[px * s + k * d], wvars)]
    return seq(*stmts)

"""Register tiles of the convolutions and dense products, float and
integer: the channels cut into tiles of whole vectors (then a half vector,
then scalars) and the pixels into blocks; a tile (RegisterTile) declares
its accumulators as named locals, runs the reduction its accumulator
strategy writes (float: rank-1 or, with a by-lane tile, lane-by-lane
multiply-adds; int8: the pair / quad dot products of aot/lower/schedule/strategy.py)
and stores each accumulator straight from its register through the
kernel's epilogue.

The float convolutions and dense products (aot/lower/rules/nn.py), Winograd's
per-frequency products, pooling and the int8 vector convolutions and fully
connected layers (int8_conv.py, tflite_fc.py) build their loops from these; the
numbers that size a tile are in aot/lower/schedule/tile_sizes.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from aot.isa.calls import lane
from aot.ir.tir import Assign, Const, Decl, DType, Expr, ForKind, Stmt, Var, dtype_of, seq
from aot.lower.arith.loops import accumulators, fma, loop, offsets, plus, seq_of, splat
from aot.lower.rules import LowerCtx
from aot.lower.schedule.tile_sizes import Tile


# A by-lane reduction of at most this many steps is unrolled: clang 14 kept
# vww f32's 8-channel 1x1 conv's 2 steps a loop whose every load computed
# its address (`orr` of the disjoint index bits, then a shift), 350 -> 292
# instructions per 8 x 8 tile.
UNROLL_LANE_STEPS = 4


# A longer by-lane reduction takes this many steps a trip of its loop: its
# counter and address updates and branch, 5 instructions beside a 9 x 8
# tile's 85, are paid half as often. qemu-aarch64 -cpu cortex-a72, C,
# instructions per inference: vww f32 2,787,210 -> 2,720,264 (its 1x1
# 128 -> 128 convs on 6x6 192,358 -> 185,192), ResNet-8 f32 4,184,262 ->
# 3,919,374, ad f32 122,863 -> 114,616, kws f32 1,069,608 -> 1,069,569.
# Four a trip lost on the 32-deep convs (clang's schedule of the 2-trip
# loop: vww's 24x24 1x1 211,778 -> 338,579).
LANE_STEPS_A_TRIP = 2
# Only on a register file this large (AArch64's): on ARMv7's 16 q registers
# the second step's inputs spilled (qemu-armv7, C: vww f32 7,505,336 ->
# 8,439,356 instructions, ResNet-8 f32 10,893,992 -> 12,798,689).
PAIRED_STEPS_REGISTERS = 32


# So is a loop of at most this many channel tiles of a tile sized by the
# register file (Arm's), its channel offset then a constant in every
# address. On the A72, C: vww f32's 8-channel depthwise conv 107,230 ->
# 84,893 instructions (4 tiles gained nothing more); ResNet-8 f32, whose
# 16-channel convolutions are 2 tiles, 4,404,231 -> 4,184,262 (LLVM
# 4,180,631 -> 4,155,690). Not the dense kernels' tiles: vww's 1x1 convs
# lost as much with LLVM as they gained with C.
UNROLL_CHANNEL_TILES = 2


def tile_widths(total: int, t: Tile) -> list[tuple[int, tuple[int, ...]]]:
    """(repeat count, accumulator widths) blocks covering `total` channels:
    full tiles, then one exact-size remainder tile of whole vectors, a
    narrower vector and scalars."""
    main, rest = divmod(total, t.nr)
    widths: list[int] = []
    if t.lanes > 1:
        widths += [t.lanes] * (rest // t.lanes)
        rest %= t.lanes
    if t.narrow > 1 and rest >= t.narrow:
        widths.append(t.narrow)
        rest -= t.narrow
    widths += [1] * rest
    out = [(main, (t.lanes,) * t.vectors)] if main else []
    return out + ([(1, tuple(widths))] if widths else [])


def over_tiles(ctx: LowerCtx, total: int, t: Tile,
                body: Callable[[Expr, tuple[int, ...]], Stmt], unroll: int = 0) -> Stmt:
    """body(first channel, accumulator widths) for every channel tile (a
    loop of at most `unroll` tiles unrolled)."""
    return tile_parts(ctx, tile_widths(total, t), t, [None],
                      lambda c0, widths, _: body(c0, widths), unroll)


def tile_parts(ctx: LowerCtx, tiles: Sequence[tuple[int, tuple[int, ...]]], t: Tile,
               pixels: Sequence, body: Callable[[Expr, tuple[int, ...], list], Stmt],
               unroll: int = 0, parts_outside: bool = False) -> Stmt:
    """body(first channel, accumulator widths, part) for every channel tile
    of `tiles` (tile_widths' blocks; a loop of at most `unroll` tiles
    unrolled) and every part of `pixels` whose accumulators fit t
    (fitting_parts): the parts inside each loop over the tiles (the float
    kernels), or with `parts_outside` each part a loop of its own (the int8
    convolution)."""
    stmts, base = [], 0
    for count, widths in tiles:
        width = sum(widths)
        kind = ForKind.UNROLLED if count <= unroll else ForKind.SERIAL
        parts = fitting_parts(list(pixels), widths, t)
        if parts_outside:
            stmts += [loop(ctx, "c", count, lambda c0, w=widths, s=part: body(c0, w, s),
                           start=base, step=width, kind=kind) for part in parts]
        else:
            stmts.append(loop(ctx, "c", count, lambda c0, w=widths, ps=parts: body(c0, w, ps[0])
                              if len(ps) == 1 else seq_of(*(body(c0, w, s) for s in ps)),
                              start=base, step=width, kind=kind))
        base += count * width
    return seq_of(*stmts)


@dataclass(frozen=True)
class RegisterTile:
    """One register tile: accs[p][j], the accumulator of pixel p (or row)
    and channel width widths[j], declared and initialised by `decls`."""
    pixels: tuple
    widths: tuple[int, ...]
    accs: tuple[tuple[Var, ...], ...]
    decls: tuple[Stmt, ...]

    def code(self, reduction: Stmt | None,
             store: Callable[[Expr, int, Var, int], Stmt],
             joined: Callable[[Expr, int, tuple[Var, ...]], Stmt | None] | None = None) -> Stmt:
        """The tile: the declarations, the reduction (the accumulator
        strategy's steps), then store(pixel, channel offset, acc, width)
        for every accumulator, from its register (the epilogue). With
        `joined`, each run of four 4-lane accumulators of a pixel goes to
        joined(pixel, channel offset, accs) first (None: stored one by one)."""
        return seq_of(*self.decls, reduction, *(
            st for pixel, row in zip(self.pixels, self.accs)
            for st in self._row_stores(pixel, row, store, joined)))

    def _row_stores(self, pixel, row: tuple[Var, ...], store, joined) -> list[Stmt]:
        offs = offsets(self.widths)
        out, j = [], 0
        while j < len(row):
            if joined is not None and self.widths[j:j + 4] == (4, 4, 4, 4):
                st = joined(pixel, offs[j], row[j:j + 4])
                if st is not None:
                    out.append(st)
                    j += 4
                    continue
            out.append(store(pixel, offs[j], row[j], self.widths[j]))
            j += 1
        return out


def register_tile(ctx: LowerCtx, dtype: DType, pixels: Sequence, widths: Sequence[int],
                  init: Callable[[int, int], Expr]) -> RegisterTile:
    """A tile of len(pixels) pixels x `widths` channels, each accumulator
    initialised by init(channel offset, width)."""
    accs, decls = [], []
    for _ in pixels:
        row, d = accumulators(ctx, dtype, widths, init)
        accs.append(tuple(row))
        decls += d
    return RegisterTile(tuple(pixels), tuple(widths), tuple(accs), tuple(decls))


def rank1_update(ctx: LowerCtx, dtype: DType, accs: list[list[Var]], xvals: list[Expr],
                  wvals: list[Expr], widths: Sequence[int]) -> Stmt:
    """accs[r][j] += xvals[r] * wvals[j]: one step of an MR x NR tile, each
    input value and (for MR > 1) each weight vector loaded once."""
    xs = [ctx.fresh("xv", dtype) for _ in xvals]
    stmts: list[Stmt] = [Decl(v, e) for v, e in zip(xs, xvals)]
    if len(xvals) > 1:
        wvars = [ctx.fresh("wv", dtype.with_lanes(wd)) for wd in widths]
        stmts += [Decl(v, e) for v, e in zip(wvars, wvals)]
        wvals = wvars
    stmts += [Assign(a, fma(a, splat(xv, wd), wv))
              for xv, row in zip(xs, accs) for a, wv, wd in zip(row, wvals, widths)]
    return seq(*stmts)


def lane_update(ctx: LowerCtx, dtype: DType, accs: list[list[Var]], xvecs: list[Expr],
                 wvals: Callable[[int], list[Expr]], widths: Sequence[int]) -> Stmt:
    """One rank-1 update per lane of the input vectors: xvecs[r] holds
    pixel r's inputs of consecutive reduction steps, step l multiplies lane
    l of each by the weights wvals(l) (Arm's multiply-add by element: one
    load of four inputs feeds four steps)."""
    xs = [ctx.fresh("xq", dtype_of(e)) for e in xvecs]
    return seq(*(Decl(v, e) for v, e in zip(xs, xvecs)), *(
        rank1_update(ctx, dtype, accs, [lane(x, step) for x in xs], wvals(step), widths)
        for step in range(dtype_of(xvecs[0]).lanes)))


def reduce_steps(ctx: LowerCtx, name: str, count: int, t: Tile, step: Callable[[Expr], Stmt],
            lane_step: Callable[[Expr], Stmt] | None = None) -> Stmt | None:
    """step(k) for k < count, or with a by-lane tile lane_step(k) for every
    t.k_lanes steps from k (unrolled up to UNROLL_LANE_STEPS of them, else
    LANE_STEPS_A_TRIP a trip) and step(k) for the last count % t.k_lanes."""
    if lane_step is None or t.k_lanes == 1 or count < t.k_lanes:
        return loop(ctx, name, count, step)
    full = count - count % t.k_lanes
    trips = full // t.k_lanes
    if trips <= UNROLL_LANE_STEPS:
        lanes = [loop(ctx, name, trips, lane_step, step=t.k_lanes, kind=ForKind.UNROLLED)]
    elif t.registers >= PAIRED_STEPS_REGISTERS:
        lanes = lane_pairs(ctx, name, trips, t.k_lanes, lane_step)
    else:
        lanes = [loop(ctx, name, trips, lane_step, step=t.k_lanes)]
    return seq_of(*lanes, *(step(Const(k)) for k in range(full, count)))


def lane_pairs(ctx: LowerCtx, name: str, trips: int, lanes: int,
               lane_step: Callable[[Expr], Stmt]) -> list[Stmt | None]:
    """`trips` by-lane steps of `lanes` as a loop taking LANE_STEPS_A_TRIP
    a trip, then the last odd one."""
    per = LANE_STEPS_A_TRIP
    body = loop(ctx, name, trips // per, lambda k: seq_of(
        *(lane_step(plus(k, j * lanes)) for j in range(per))), step=per * lanes)
    done = trips // per * per
    return [body, *(lane_step(Const((done + j) * lanes)) for j in range(trips - done))]


def position_blocks(ctx: LowerCtx, name: str, count: int, start: int, mr: int,
                    body: Callable[[list[Expr]], Stmt]) -> Stmt:
    """body(positions) over [start, start + count) in blocks of `mr`
    neighbouring positions, then one exact-size remainder block."""
    mr = max(1, mr)
    full, rest = divmod(count, mr)
    tail = start + full * mr
    return seq_of(loop(ctx, name, full, lambda v: body([plus(v, j) for j in range(mr)]),
                      start=start, step=mr),
                body([Const(tail + j) for j in range(rest)]) if rest else None)


def fitting_parts(pixels: list, widths: Sequence[int], t: Tile) -> list[list]:
    """pixels cut into parts whose accumulators (len(widths) each) fit t."""
    size = t.fit(len(widths))
    return [pixels[i:i + size] for i in range(0, len(pixels), size)]

"""The one walk of a convolution's or pool's output, float and int8: for every
image, region (windows.py: a Run per spatial axis), pixel block along the
last axis, channel group and channel tile, a tile body. What the kernels
differ in is a frozen Walk their schedule (conv_schedule.py) or rule sets:
the loops' names, the region policy, whether each region's loop nest opens
with a comment, where blocks of several pixels may run, the pixel parts
inside or outside the channel tiles' loops, how many channel tiles unroll,
and the channel tiles outermost (weights staying in registers over every
pixel). Code, not choices, comes in as hooks: a prologue per image (the
float conv's padded copy, the hybrid conv's quantized image, the Cortex-M
convs' padded image), a statement per output row before its pixels (the int8
rows staged), the tile body, an epilogue per image. The convolutions and
pools walk their outputs here: the float and int8 vector kernels through
walk, the scalar int8 window nest (int8_window.py) and the Cortex-M kernels
(int8_dsp.py, int8_mve.py) through plane_walk (int8_dsp.window_rows its
interior; its border pixels, the walk's epilogue, one nest of region_loops
over the whole plane, each pixel tested); the products (pointwise convs,
Winograd) keep loops of their own.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from aot.ir.tir import Comment, Const, Expr, Stmt
from aot.lower.arith.loops import loop, seq_of
from aot.lower.rules import LowerCtx
from aot.lower.schedule.tile_sizes import Tile
from aot.lower.kernels.tiles import position_blocks, tile_parts
from aot.lower.kernels.windows import ConvGeom, Region, regions

# tile_body(image, pixels, region, group, first channel, accumulator widths):
# pixels are the block's (or its part's) output positions, one list of
# per-axis positions each.
TileBody = Callable[[Expr, list, Region, Expr, Expr, tuple[int, ...]], Stmt]


@dataclass(frozen=True)
class Walk:
    """How one kernel walks its output (see the module docstring).

    `axes`: the output axes' loop names, outermost first. `regions`: the
    policy cutting the output into regions (windows.regions: "exact",
    "border" or "whole"). `notes`: a comment naming each region's
    outputs and taps. `blocks_in_tested_rows`: a region tested only
    along outer axes still takes blocks of pixels (only a tested last
    axis takes them one at a time: a test is per position); without it
    any test does. `parts`: a block is cut into parts whose accumulators
    fit the registers (tiles.tile_parts), each part inside the channel
    tiles' loop or, with `parts_outside`, a loop of tiles of its own.
    `unroll`: a loop of at most this many channel tiles is unrolled.
    `tiles_outside`: the channel tiles are the outermost loop of an
    image (one group). `blocks_tested`: blocks of pixels even along a
    tested last axis (the kernel's block body tests each of its pixels:
    int8_dsp's pairs)."""
    axes: tuple[str, ...]
    regions: str = "exact"
    notes: bool = True
    blocks_in_tested_rows: bool = True
    parts: bool = False
    parts_outside: bool = False
    unroll: int = 0
    tiles_outside: bool = False
    blocks_tested: bool = False


def float_axes(rank: int) -> tuple[str, ...]:
    """The float kernels' output loop names, o0, o1, ..."""
    return tuple(f"o{a}" for a in range(rank))


def walk(ctx: LowerCtx, w: Walk, batch: int, regions: Sequence[Region], t: Tile, groups: int,
         tiles: Sequence[tuple[int, tuple[int, ...]]], body: TileBody,
         prologue: Callable[[Expr], Stmt] | None = None,
         row: Callable[[Expr, list[Expr]], Stmt | None] | None = None,
         epilogue: Callable[[Expr], Stmt] | None = None) -> Stmt:
    """The kernel's loops: image n [prologue(n)] -> region -> outer axes
    [row(n, outer positions)] -> pixel blocks of t.block(run length) along
    the last axis -> group -> channel tiles (`tiles`: tiles.tile_widths'
    blocks) x pixel parts -> body; then [epilogue(n)] after the image's
    regions. With w.tiles_outside the channel tiles come first in each
    image, then the regions and their whole pixel blocks: one group, no row
    hook (the float depthwise conv)."""
    if w.tiles_outside and (groups != 1 or row is not None):
        raise ValueError("a walk with the channel tiles outermost takes one group, no row hook")

    def channel_tiles(n, pixels, region, g) -> Stmt:
        if w.parts:
            return tile_parts(ctx, tiles, t, pixels, lambda c0, widths, part: body(
                n, part, region, g, c0, widths), w.unroll, w.parts_outside)
        return tile_parts(ctx, tiles, t, [None], lambda c0, widths, _: body(
            n, pixels, region, g, c0, widths), w.unroll)

    def image(n) -> Stmt:
        # built first, so that its names number before the pixels' (as read)
        first = prologue(n) if prologue else None
        if w.tiles_outside:
            main = tile_parts(ctx, tiles, t, [None], lambda c0, widths, _: seq_of(*(
                region_loops(ctx, w, region, t, lambda pixels, region=region: body(
                    n, pixels, region, Const(0), c0, widths)) for region in regions)),
                w.unroll)
        else:
            main = seq_of(*(region_loops(ctx, w, region, t, lambda pixels, region=region: loop(
                ctx, "g", groups, lambda g: channel_tiles(n, pixels, region, g)),
                lambda pos: row(n, pos) if row else None) for region in regions))
        return seq_of(first, main, epilogue(n) if epilogue else None)
    return seq_of(loop(ctx, "n", batch, image))


# The integer scalar and Cortex-M kernels' walk of an NHWC output plane:
# border regions, no notes; PAIRS takes blocks of two columns, tested ones too.
PLANE = Walk(("oy", "ox"), regions="border", notes=False)
PAIRS = Walk(("oy", "ox"), regions="border", notes=False, blocks_tested=True)

# pixels(image, oy, columns, region): one output pixel, or with pairs two
# neighbouring ones (ox, ox + 1) of row oy.
PlaneBody = Callable[[Expr, Expr, list[Expr], Region], Stmt]


def plane_walk(ctx: LowerCtx, g: ConvGeom, pixels: PlaneBody, pairs: bool = False,
               prologue: Callable[[Expr], Stmt] | None = None,
               only: Sequence[Region] | None = None,
               epilogue: Callable[[Expr], Stmt] | None = None) -> Stmt:
    """walk over the output plane of g for the kernels whose accumulator row
    lives in a scratch buffer or is tiled by the kernel itself: one group,
    one channel tile (the whole row), pixels one at a time, or with `pairs`
    in blocks of two columns and the odd last column alone. `only`: the
    regions walked instead of g's border regions (int8_dsp.window_rows: its
    interior), then epilogue(n) per image (there: its border pixels)."""
    w = PAIRS if pairs else PLANE
    t = Tile(1, 1, mr=2 if pairs else 1, max_accs=2)
    cut = regions(w.regions, g.window(), (g.h, g.w)) if only is None else only
    return walk(ctx, w, g.n, cut, t, 1, [(1, (1,))],
                lambda n, block, region, _g, _c0, _w: pixels(
                    n, block[0][0], [p[1] for p in block], region), prologue,
                epilogue=epilogue)


def _spans(pairs) -> str:
    return " x ".join(f"[{a}, {b})" for a, b in pairs)


def region_loops(ctx: LowerCtx, w: Walk, region: Region, t: Tile,
                 body: Callable[[list[list[Expr]]], Stmt],
                 row: Callable[[list[Expr]], Stmt | None] = lambda pos: None) -> Stmt:
    """Loops over the output positions of one region: the outer axes, then
    row(outer positions) and body(pixels) for blocks of neighbouring
    positions along the last axis (t.block(run length) of them, then an
    exact-size remainder block), each pixel a list of per-axis positions."""
    last = len(region) - 1
    tested = not w.blocks_tested and (region[last].guarded or (
        not w.blocks_in_tested_rows and any(r.guarded for r in region)))

    def level(a: int, pos: list[Expr]) -> Stmt | None:
        r = region[a]
        if a < last:
            return loop(ctx, w.axes[a], r.count, lambda v: level(a + 1, pos + [v]),
                        start=r.start)
        block = 1 if tested else t.block(r.count)
        return seq_of(row(pos), position_blocks(ctx, w.axes[a], r.count, r.start, block,
                                                lambda os: body([pos + [o] for o in os])))
    if not w.notes:
        return level(0, [])
    note = Comment(f"outputs {_spans((r.start, r.end) for r in region)}: "
                   f"taps {_spans((r.lo, r.hi) for r in region)}"
                   + (" (guarded)" if any(r.guarded for r in region) else ""))
    return seq_of(note, level(0, []))

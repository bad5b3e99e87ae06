"""The convolutions' reduction steps (aot/lower/kernels/conv_tile.py): at one window tap
each accumulator strategy the schedule picks writes its own multiply-adds,
one per accumulator and input-channel group; the float tile's merged rows
run one reduction across a window row's taps and channels; the channel
tiles and pixel parts (tiles.tile_parts) in either order; the one walk
(conv_walk.walk) of the float and int8 kernels' regions; the one tile
(conv.conv_tile) over either strategy."""
from __future__ import annotations

import ast

from dataclasses import dataclass

import numpy as np

from aot.ir.graph import Node, TensorType
from aot.ir.tir import (Assign, Call, Comment, Const, DType, For, Load, Var, dt, flat_index,
                        stmt_exprs, walk_expr, walk_stmt)
from aot.lower.kernels.conv_tile import (FloatConv, FloatFma, Int8Conv, Int8Dot, StagedRows, TileAt,
                                         TileStrategy, conv_tile, float_taps, int8_tap)
from aot.lower.schedule.conv import int8_conv_schedule
from aot.lower.kernels.conv_walk import Walk, walk
from aot.lower.rules import LowerCtx, TensorRef
from aot.lower.schedule.tile_sizes import Tile
from aot.lower.kernels.tiles import register_tile, tile_parts, tile_widths
from aot.lower.kernels.windows import ConvGeom, Run, SpatialOp, border_regions, window_regions
from aot.ops.nn import Window
from aot.targets import get_board


def make_ctx(board: str) -> LowerCtx:
    return LowerCtx(Node("Conv", "conv", ("x",), ("y",)), (TensorType((1, 8, 8, 16), "int8"),),
                    (TensorType((1, 8, 8, 16), "int8"),), get_board(board).target)


def geom(depth: int, groups: int = 1, per_group: int = 16) -> ConvGeom:
    return ConvGeom(n=1, h=8, w=8, oh=8, ow=8, kh=3, kw=3, groups=groups, depth=depth,
                    per_group=per_group, strides=(1, 1), dilations=(1, 1), pad_top=1, pad_left=1)


def call_names(stmt) -> list[str]:
    return [e.fn for s in walk_stmt(stmt) for top in stmt_exprs(s) for e in walk_expr(top)
            if isinstance(e, Call)]


def tap(board: str, g: ConvGeom, staged: bool, pixels: int = 2):
    """One tap's steps for a tile of `pixels` pixels x the first channel
    tile: (statement, schedule, tile widths)."""
    ctx = make_ctx(board)
    w = np.ones((g.cout, g.kh, g.kw, g.depth), np.int64)
    s = int8_conv_schedule(ctx.target, g, w)
    widths = s.tiles[0][1]
    i8 = np.zeros(1, np.int8)
    rows = None
    if staged:
        buf = ctx.scratch_buffer("rows", "int32", (g.kh, g.w + 2, g.depth // s.accumulator.group))
        rows = StagedRows(lambda n, oy: None, buf, lambda oy, ky: ky)
    cv = Int8Conv(g, lambda idx, lanes=1: Var("x", dt("int8", lanes)), 0, s,
                  ctx.param("filter", np.resize(i8, (g.groups, 3, 3, g.depth, g.per_group))),
                  ctx.param("filter_pairs", np.resize(i8, (1, 3, 3, max(1, g.depth // 2),
                                                           g.per_group, 2))),
                  ctx.param("filter_quads", np.resize(i8, (3, 3, max(1, g.depth // 4),
                                                           g.per_group, 4))), None, rows)
    oxs = [Const(p) for p in range(pixels)]
    rt = register_tile(ctx, dt("int32"), oxs, widths, lambda off, wd: Const(0, dt("int32", wd)))
    region = (Run(1, 1, 0, 3), Run(0, pixels, 0, 3))
    at = TileAt(Const(0), tuple([Const(1), ox] for ox in oxs), region, Const(0), Const(0),
                tuple(widths), rt.accs, True)
    return int8_tap(ctx, cv, at, Const(1), Const(1), Const(1), oxs), s, widths


def test_quads_by_lane_one_dot_per_quad_and_accumulator():
    g = geom(16)
    stmt, s, widths = tap("rpi5", g, staged=True)
    assert (s.accumulator.name, s.by_lane) == ("quads", True)
    probe = s.accumulator.dot(Var("a", dt("int32", 4)), Var("q"), Var("w", dt("int8", 16))).fn
    assert call_names(stmt).count(probe) == g.depth // 4 * len(widths) * 2


def test_pairs_from_the_input_one_pair_dot_per_pair_and_accumulator():
    g = geom(16)
    stmt, s, widths = tap("host", g, staged=False)
    assert s.accumulator.name == "pairs" and s.pairs
    loops = [x for x in walk_stmt(stmt) if isinstance(x, For)]
    assert [x.extent for x in loops] == [g.depth // 2]
    names = call_names(loops[0].body)
    assert len(names) == len(widths) * 2 and len(set(names)) == 1


def test_depthwise_by_mlal_two_accumulators_per_int16_vector():
    g = geom(1, groups=16, per_group=1)
    stmt, s, widths = tap("rpi5", g, staged=False, pixels=1)
    assert s.depthwise and s.mlal
    names = call_names(stmt)
    assert len(names) == len(widths) and len(set(names)) == 2       # lo and hi halves


def float_tile(merge_rows: bool):
    ctx = make_ctx("rpi5")
    f32 = dt("float32")
    xin = SpatialOp("NHWC", 1, 16, (8, 8))
    x_buf = ctx.scratch_buffer("x", "float32", (1, 8, 8, 16))
    x = TensorRef("x", TensorType((1, 8, 8, 16), "float32"),
                  lambda idx, lanes=1: Load(x_buf, flat_index(tuple(idx), (1, 8, 8, 16)), lanes),
                  x_buf)
    win = Window((3, 3), (1, 1), (1, 1), (1, 1), (1, 1), (8, 8))
    shape = (1, 3, 3, 16, 8)
    t = Tile(lanes=4, vectors=2, mr=2, k_lanes=4)
    fc = FloatConv(x, xin, win, ctx.param("w", np.zeros(shape, np.float32)), shape, 16, 8, t, f32)
    pixels = [[Const(3), Const(3)], [Const(3), Const(4)]]
    rt = register_tile(ctx, f32, pixels, (4, 4), lambda off, wd: Const(0.0, f32.with_lanes(wd)))
    runs = (Run(1, 6, 0, 3), Run(1, 6, 0, 3))
    at = TileAt(Const(0), pixels, runs, Const(0), Const(0), (4, 4), rt.accs)
    return float_taps(ctx, fc, at, merge_rows)


def test_float_merged_rows_one_reduction_across_taps_and_channels():
    per_tap = [(x.var.name.rstrip("0123456789"), x.extent)
               for x in walk_stmt(float_tile(False)) if isinstance(x, For)]
    merged = [(x.var.name.rstrip("0123456789"), x.extent)
              for x in walk_stmt(float_tile(True)) if isinstance(x, For)]
    assert ("ic", 16) in per_tap and ("k", 3) in per_tap
    assert ("j", 3 * 16) in merged and all(name != "ic" for name, _ in merged)
    fmas = [s for s in walk_stmt(float_tile(True)) if isinstance(s, Assign)]
    assert len(fmas) == 4 * 2 * 2       # 4 lanes x 2 pixels x 2 vectors per by-lane step


def test_tile_parts_inside_or_outside_the_channel_loop():
    """The same tiles and parts either way: the float kernels' parts inside
    each loop over the channel tiles, the int8 convolution's a loop each."""
    ctx = make_ctx("host")
    t = Tile(lanes=4, vectors=2, max_accs=4)        # 2 pixels of 2 vectors, 4 of 1
    tiles = tile_widths(20, t)
    assert tiles == [(2, (4, 4)), (1, (4,))]

    def body(c0, widths, part):
        return Comment(f"{widths} {len(part)}")
    seen = {}
    for outside in (False, True):
        stmt = tile_parts(ctx, tiles, t, list(range(5)), body, parts_outside=outside)
        loops = [s for s in stmt.stmts if isinstance(s, For)]
        assert [s.extent for s in loops] == [16] * (3 if outside else 1)
        seen[outside] = sorted(s.text for s in walk_stmt(stmt) if isinstance(s, Comment))
    assert seen[False] == seen[True] == sorted(
        ["(4, 4) 2", "(4, 4) 2", "(4, 4) 1", "(4,) 4", "(4,) 1"])


# ------------------------------------------------------------------ the one walk

def walked(w: Walk, regions, row=None, channels: int = 12):
    """The walk over one image of 8 x 8 pixels in tiles of two vectors,
    each tile body a comment naming its pixels (a constant position by its
    value) and channels."""
    ctx = make_ctx("host")
    t = Tile(lanes=4, vectors=2, mr=4, max_accs=8)

    def show(e) -> str:
        return str(e.value) if isinstance(e, Const) else "v"

    def body(n, pixels, region, g, c0, widths):
        return Comment(f"tile {[[show(p) for p in px] for px in pixels]} {widths}")
    return walk(ctx, w, 1, regions, t, 1, tile_widths(channels, t), body, row=row)


def loops(stmt) -> list[tuple[str, int, int]]:
    return [(x.var.name.rstrip("0123456789"), x.start, x.extent)
            for x in walk_stmt(stmt) if isinstance(x, For)]


def test_walk_int8_regions_rows_then_blocks_a_tested_region_pixel_by_pixel():
    """The int8 walk over the border regions: per region a row loop, the
    row hook, then pixel blocks (one pixel where any side is tested), the
    parts of a block a loop of channel tiles each; no region comments."""
    g = geom(16)
    w = int8_conv_schedule(get_board("host").target, g, np.ones((16, 3, 3, 16), np.int64)).walk
    stmt = walked(w, border_regions(g), row=lambda n, pos: Comment("row"))
    texts = [s.text for s in walk_stmt(stmt) if isinstance(s, Comment)]
    assert texts.count("row") == len(border_regions(g)) == 5
    assert not any(text.startswith("outputs") for text in texts)
    tiles = [ast.literal_eval(t[5:t.index("]]") + 2]) for t in texts if t.startswith("tile")]
    # a tested region a pixel at a time, even where only its rows are
    # tested (rows 0 and 7 are constants); the interior's one block of 6
    # pixels cut into parts of 4 and 2 (t.fit) for each channel tile
    edges = [px for px in tiles if px[0][0] in ("0", "7")]
    assert len(edges) == 2 * 2 and all(len(px) == 1 for px in edges)
    assert sorted(len(px) for px in tiles if len(px) > 1) == [2, 2, 4, 4]
    assert loops(stmt)[0] == ("ox", 0, 8)           # row 0: one row, no loop


def test_walk_float_notes_and_blocks_along_tested_outer_axes():
    """The float walk names its loops o0, o1, notes each region, and takes
    blocks of pixels wherever the last axis is untested; with the channel
    tiles outermost the tile loop encloses every region."""
    win = Window((3, 3), (1, 1), (1, 1), (1, 1), (1, 1), (8, 8))
    regions = [(Run(0, 8, 0, 3, tests=(True, True)), Run(0, 8, 0, 3))]
    stmt = walked(Walk(("o0", "o1"), parts=True), regions)
    assert [s.text for s in walk_stmt(stmt) if isinstance(s, Comment)][0] == \
        "outputs [0, 8) x [0, 8): taps [0, 3) x [0, 3) (guarded)"
    # rows tested on both sides, columns exact: o1 still in blocks of 4
    assert [(x.var.name[:2], x.extent, x.step) for x in walk_stmt(stmt)
            if isinstance(x, For)] == [("o0", 8, 1), ("o1", 8, 4)]
    outside = walked(Walk(("o0", "o1"), tiles_outside=True), window_regions(win, (8, 8)),
                     channels=24)
    assert isinstance(outside, For) and outside.var.name.startswith("c")
    assert sum(isinstance(s, Comment) and s.text.startswith("outputs")
               for s in walk_stmt(outside.body)) == 9


# ------------------------------------------------------------------ the one tile

@dataclass(frozen=True)
class Probe:
    """A tile strategy writing what conv_tile asks of it as comments."""
    dtype: DType = dt("int32", 1)

    def inside(self, region):
        return not any(r.guarded for r in region)

    def init(self, at, off, width):
        assert at.accs == ()                     # not declared yet
        return Const(100 * at.inside + off, dt("int32", width))

    def reduce(self, ctx, at):
        return Comment(f"reduce {len(at.accs)}x{len(at.accs[0])}")

    def store(self, ctx, at, pixel, off, acc, width):
        return Comment(f"store {pixel[-1].value} {off} {acc.name} {width}")

    def store_joined(self, ctx, at, pixel, off, accs):
        return None


def test_conv_tile_declares_reduces_then_stores_every_accumulator():
    ctx = make_ctx("host")
    region = (Run(1, 1, 0, 3), Run(0, 2, 0, 3))
    stmt = conv_tile(ctx, Probe(), Const(0), [[Const(1), Const(0)], [Const(1), Const(1)]],
                     region, Const(0), Const(0), (4, 1))
    kinds = [type(s).__name__ if not isinstance(s, Comment) else s.text.split()[0]
             for s in stmt.stmts]
    assert kinds == ["Decl"] * 4 + ["reduce"] + ["store"] * 4
    assert stmt.stmts[4].text == "reduce 2x2"
    assert [d.init for d in stmt.stmts[:4]] == [Const(100, dt("int32", 4)), Const(104),
                                                 Const(100, dt("int32", 4)), Const(104)]
    assert [s.text.split()[1:3] for s in stmt.stmts[5:]] == [["0", "0"], ["0", "4"],
                                                             ["1", "0"], ["1", "4"]]
    # the float and int8 strategies speak the same protocol
    protocol = [m for m in vars(TileStrategy) if not m.startswith("_")]
    assert sorted(protocol) == ["init", "inside", "reduce", "store", "store_joined"]
    for strategy in (FloatFma, Int8Dot):
        assert hasattr(strategy, "dtype") and all(callable(getattr(strategy, m)) for m in protocol)

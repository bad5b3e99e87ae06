"""The schedule of an int8 vector convolution as one frozen object.

Every choice the kernel's schedule sites make (aot/lower/schedule.py's
register tile, aot/lower/strategy.py's accumulator strategy and input
rows) is answered once, by int8_conv_schedule's default policy (or the
config `aot tune` puts in force, aot/lower/space.py), and the kernel
(tflite_int8.vector_conv_nest) only reads the answers: the algorithm
apart from its schedule.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from aot.lower.schedule import Tile, tile
from aot.lower.strategy import (PAIRS, Accumulator, int8_accumulator, int8_rows, mlal_depthwise,
                                window_row_accumulator)
from aot.lower.tiles import tile_widths
from aot.lower.windows import ConvGeom
from aot.targets import Target


@dataclass(frozen=True)
class Int8ConvSchedule:
    """How one int8 convolution runs in vector tiles.

    `tiles` are the channel tiles of `tile` over the channels a group
    writes. The dense product takes `accumulator`'s groups of input
    channels: quads (four per aot_dot4, by lane of each pixel's four
    quads with `by_lane`) or pairs (two per aot_dot2); depthwise takes
    channel vectors, widened to int16 pairs of vectors with `mlal`.
    `rows` is how the input is read: "staged" (the KH rows an output row
    reads, as pairs or quads), "flat" (a first layer's window rows as one
    run, in groups of `flat_accumulator`) or "direct" (from the input,
    border taps tested)."""
    tile: Tile
    tiles: tuple[tuple[int, tuple[int, ...]], ...]
    depthwise: bool
    accumulator: Accumulator
    by_lane: bool
    mlal: bool
    quads: bool
    pairs: bool
    rows: str
    flat_accumulator: Accumulator

    @property
    def raw(self) -> Accumulator | None:
        """The quad strategy whose staged bytes are x + its offset (zp +
        offset outside the image), if the rows hold quads."""
        if self.quads:
            return self.accumulator
        return self.flat_accumulator if self.flat_accumulator.group == 4 else None


def int8_conv_schedule(target: Target, g: ConvGeom, weights: np.ndarray) -> Int8ConvSchedule:
    """The default policy (each site consulted in the order the kernel
    always asked, only where its answer matters)."""
    t = tile(target, "int32", pixels=True)
    depthwise = g.depth == 1 and g.per_group == 1
    dense = not depthwise and g.groups == 1
    width = g.cout if depthwise else g.per_group
    kind = int8_accumulator(target)
    regs = target.vector_registers
    # Sixteen-channel-deep convs read each pixel's four quads as one vector
    # and take them by lane, where the strategy says so.
    by_lane = kind.by_lane and dense and g.depth % 16 == 0
    if kind.vectors and dense and g.depth % 4 == 0 and regs >= 32:
        # A quad feeds `vectors` dot products (a weight vector each): their
        # accumulators for MR pixels, the weights and the broadcast (or each
        # pixel's quads) within the registers.
        v = kind.vectors
        t = replace(t, vectors=v, max_accs=(regs - v - 1) // (v + 1) * v if by_lane
                    else regs - 2 * v)
    if width <= t.lanes:
        t = replace(t, vectors=1)
    tiles = tuple(tile_widths(width, t))
    wide = all(min(w) >= 4 for _, w in tiles)       # every tile of whole 4+-lane vectors
    # Depthwise where the target has the widening multiply-add: 8 channels
    # per int16 vector, two accumulators each (whole tiles of 4-lane vectors
    # in pairs).
    mlal = (depthwise and mlal_depthwise(target) and t.lanes == 4
            and all(len(ws) % 2 == 0 and set(ws) == {4} for _, ws in tiles))
    # Dense convs whose depth is a multiple of 4 take four input channels
    # per aot_dot4 where the strategy says so.
    quads = kind.group == 4 and dense and g.depth % 4 == 0 and wide and kind.fits(weights)
    pairs = not quads and not depthwise and g.depth >= 2
    # Dense convs with an even depth stage the KH input rows an output row
    # reads (quads always do).
    staged = quads or (pairs and g.groups == 1 and g.depth % 2 == 0 and wide
                       and int8_rows("staged") == "staged")
    # Odd depths (the first layer's 1 or 3 channels) group along a window
    # row instead: with unit column dilation its KW x D taps are one
    # contiguous run of the staged row.
    flat = (not quads and dense and g.depth % 2 == 1 and g.dilations[1] == 1 and wide
            and int8_rows("flat") == "flat")
    row_kind = window_row_accumulator(target)
    flat_kind = row_kind if flat and row_kind.group == 4 and row_kind.fits(weights) else PAIRS
    rows = "flat" if flat else "staged" if staged else "direct"
    return Int8ConvSchedule(t, tiles, depthwise, kind, by_lane, mlal, quads, pairs, rows,
                            flat_kind)

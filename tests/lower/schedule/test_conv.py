"""The convolutions' schedule objects (aot/lower/schedule/conv.py): the
default policy's answers per target, pinned; and the accumulator
strategies' weight layout (aot/lower/schedule/strategy.py)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from aot.ir.tir import dt
from aot.lower.schedule.conv import FloatConvSchedule, float_conv_schedule, int8_conv_schedule
from aot.lower.schedule.strategy import PAIRS, QUADS
from aot.lower.kernels.windows import ConvGeom, SpatialOp
from aot.ops.nn import Window
from aot.targets import get_board


def geom(depth: int, groups: int = 1, per_group: int = 32) -> ConvGeom:
    return ConvGeom(n=1, h=10, w=10, oh=10, ow=10, kh=3, kw=3, groups=groups, depth=depth,
                    per_group=per_group, strides=(1, 1), dilations=(1, 1), pad_top=1, pad_left=1)


def weights(g: ConvGeom, value: int = 1) -> np.ndarray:
    return np.full((g.cout, g.kh, g.kw, g.depth), value, np.int64)


def answers(board: str, g: ConvGeom, w=None):
    s = int8_conv_schedule(get_board(board).target, g, weights(g) if w is None else w)
    return s.accumulator.name, s.quads, s.pairs, s.by_lane, s.mlal, s.rows, (
        s.raw.name if s.raw else None)


@pytest.mark.parametrize("board,dense16,first3,depthwise", [
    # AVX2: pmaddwd pairs; rows staged, a first layer's window rows flat
    ("host", ("pairs", False, True, False, False, "staged", None),
     ("pairs", False, True, False, False, "flat", None),
     ("pairs", False, False, False, False, "direct", None)),
    # VNNI: u8 quads from staged rows; a first layer's rows as bytes
    ("host-avx512", ("quads_u8", True, False, False, False, "staged", "quads_u8"),
     ("quads_u8", False, True, False, False, "flat", "quads_u8"),
     ("quads_u8", False, False, False, False, "direct", None)),
    # Cortex-A76: sdot by lane, depthwise by SMLAL
    ("rpi5", ("quads", True, False, True, False, "staged", "quads"),
     ("quads", False, True, False, False, "flat", "quads"),
     ("quads", False, False, False, True, "direct", None)),
])
def test_default_policy_per_target(board, dense16, first3, depthwise):
    assert answers(board, geom(16)) == dense16
    assert answers(board, geom(3)) == first3
    assert answers(board, geom(1, groups=32, per_group=1)) == depthwise
    # staged (or flat) rows hold their padding: one untested region, else
    # the border regions; oy / ox loops, each pixel part a loop of its own
    walks = [int8_conv_schedule(get_board(board).target, g, weights(g)).walk
             for g in (geom(16), geom(1, groups=32, per_group=1))]
    assert [w.regions for w in walks] == ["whole", "border"]
    assert all(w.axes == ("oy", "ox") and w.parts_outside and not w.notes for w in walks)


def test_quads_need_weights_their_products_take():
    """Cortex-A72's quads (SMULL pairs) cannot take a -128 weight: pairs."""
    g = geom(16)
    assert answers("rpi4", g)[:2] == ("quads_mull", True)
    assert answers("rpi4", g, weights(g, -128))[1:3] == (False, True)


def test_schedule_is_frozen_and_sizes_the_tile_for_quads():
    s = int8_conv_schedule(get_board("rpi5").target, geom(16), weights(geom(16)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.rows = "direct"
    assert s.accumulator == QUADS and s.tile.vectors == QUADS.vectors
    assert s.tiles == ((2, (4, 4, 4, 4)),)          # 32 channels: two 16-channel tiles
    narrow = int8_conv_schedule(get_board("rpi5").target, geom(16, per_group=4),
                                weights(geom(16, per_group=4)))
    assert narrow.tile.vectors == 1 and narrow.flat_accumulator == PAIRS


def float_schedule(board, x, out, k, group, icg, ocg, pad=1, in_memory=True, winograd=False):
    win = Window((k, k), (1, 1), (1, 1), (pad, pad), (pad, pad), out.spatial)
    return float_conv_schedule(get_board(board).target, dt("float32"), x, out, win, group,
                               icg, ocg, in_memory, winograd)


def test_float_policy_picks_the_algorithm_then_its_tile():
    big = SpatialOp("NHWC", 1, 16, (32, 32))
    small = SpatialOp("NHWC", 1, 16, (5, 5))
    # x86 with FMA: Winograd in 4x4 blocks on a 32-wide map; no tile asked
    assert float_schedule("host-avx512", big, big, 3, 1, 16, 16, winograd=True) == \
        FloatConvSchedule("winograd_4x4")
    # AArch64: the direct window, its taps and channels merged by lane
    s = float_schedule("rpi5", big, big, 3, 1, 16, 16, winograd=True)
    assert (s.algorithm, s.tile.k_lanes, s.merge_rows, s.copy_padded) == ("direct", 4, True, False)
    # a 5x5 map is mostly border: copied into a padded workspace first
    assert float_schedule("host", small, small, 3, 1, 16, 16).copy_padded
    # an input not in memory merges its window rows once copied into one
    s = float_schedule("rpi5", small, small, 3, 1, 16, 16, in_memory=False)
    assert s.copy_padded and s.merge_rows
    assert not float_schedule("rpi5", big, big, 3, 1, 16, 16, in_memory=False).merge_rows
    assert float_schedule("rpi5", big, big, 1, 1, 16, 16, pad=0).algorithm == "pointwise"
    dw = SpatialOp("NHWC", 1, 32, (8, 8))
    s = float_schedule("rpi5", dw, dw, 3, 32, 1, 1)
    assert s.algorithm == "depthwise" and s.tile.weights_stay
    # its walk keeps a channel tile's weights in registers over every pixel
    assert s.walk.tiles_outside and s.walk.regions == "exact" and not s.walk.parts
    direct = float_schedule("rpi5", big, big, 3, 1, 16, 16).walk
    assert (direct.axes, direct.parts, direct.parts_outside, direct.notes) == (
        ("o0", "o1"), True, False, True)
    # no vectors (Cortex-M4): a depthwise conv is the direct window's
    assert float_schedule("mps2-an386", dw, dw, 3, 32, 1, 1).algorithm == "direct"


def test_interleave_puts_each_steps_inputs_side_by_side():
    """[..., C, D] -> [..., D / group, C, group]: step s of output channel c
    holds input channels group * s .. group * s + group - 1."""
    w = np.arange(2 * 3 * 8).reshape(2, 3, 8)
    q = QUADS.interleave(w)
    assert q.shape == (2, 2, 3, 4) and q.flags.c_contiguous
    assert q[1, 1, 2].tolist() == w[1, 2, 4:8].tolist()
    assert PAIRS.interleave(w)[0, 3, 1].tolist() == w[0, 1, 6:8].tolist()

"""The int8 vector convolution's schedule object (aot/lower/conv_schedule.py):
the default policy's answers per target, pinned."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from aot.lower.conv_schedule import int8_conv_schedule
from aot.lower.strategy import PAIRS, QUADS
from aot.lower.windows import ConvGeom
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

"""The convolutions' schedule objects (aot/lower/schedule/conv.py): the
default policy's answers per target, pinned, the int8 kernel each int8
convolution and fully connected layer gets among them; and the accumulator
strategies' weight layout (aot/lower/schedule/strategy.py)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from aot.ir.tir import dt
from aot.lower.kernels import cortex_m
from aot.lower.schedule.conv import (FloatConvSchedule, float_conv_schedule, int8_conv_schedule,
                                     int8_fc_schedule)
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
    # Cortex-A76: sdot by lane, depthwise by SMLAL over int16 rows staged at row stride 1
    ("rpi5", ("quads", True, False, True, False, "staged", "quads"),
     ("quads", False, True, False, False, "flat", "quads"),
     ("quads", False, False, False, True, "staged", None)),
])
def test_default_policy_per_target(board, dense16, first3, depthwise):
    assert answers(board, geom(16)) == dense16
    assert answers(board, geom(3)) == first3
    assert answers(board, geom(1, groups=32, per_group=1)) == depthwise
    # staged (or flat) rows hold their padding: one untested region, else
    # the border regions; oy / ox loops, each pixel part a loop of its own
    walks = [int8_conv_schedule(get_board(board).target, g, weights(g)).walk
             for g in (geom(16), geom(1, groups=32, per_group=1))]
    held = [rows in ("staged", "flat") for rows in (dense16[5], depthwise[5])]
    assert [w.regions for w in walks] == ["whole" if h else "border" for h in held]
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


def pointwise_geom(depth: int) -> ConvGeom:
    return dataclasses.replace(geom(depth), kh=1, kw=1, pad_top=0, pad_left=0)


@pytest.mark.parametrize("board,algorithms", [
    # Helium: 16-deep convs by VMLADAVA, a first layer's 3 channels by outer
    # products, depthwise 16 channels at a time (fewer: the DSP's quads)
    ("mps3-an547", ("mve_pointwise", "mve_dense", "mve_outer", "mve_depthwise",
                    "dsp_depthwise")),
    # the DSP extension: SMLAD tiles, a first layer's window rows as words
    ("mps2-an386", ("dsp_pointwise", "dsp_dense", "dsp_rows", "dsp_depthwise",
                    "dsp_depthwise")),
    # rv32imc: register tiles of plain loads; the first layer's 3 channels
    # by window rows, depthwise 4 channels at a time
    ("qemu-rv32", ("rv32_pointwise", "rv32_dense", "rv32_rows", "rv32_depthwise",
                   "rv32_depthwise")),
    # no SIMD (M3, M0): the same nests byte by byte
    ("mps2-an385", ("scalar_pointwise", "scalar_dense", "scalar_rows", "scalar_depthwise",
                    "scalar_depthwise")),
    ("microbit", ("v6m_pointwise", "v6m_dense", "scalar_rows", "scalar_depthwise",
                  "scalar_depthwise")),
    ("host", ("vector",) * 5),
])
def test_int8_conv_algorithm_per_target(board, algorithms):
    target = get_board(board).target
    gs = (pointwise_geom(16), geom(16), geom(3), geom(1, groups=32, per_group=1),
          geom(1, groups=8, per_group=1))
    got = tuple(int8_conv_schedule(target, g, weights(g), in_memory=True).algorithm for g in gs)
    assert got == algorithms
    # a Cortex-M kernel is the schedule's answer only: no vector field is set
    assert all(int8_conv_schedule(target, g, weights(g), in_memory=True).tile is None
               for g in gs if board != "host")


def test_every_rv32_name_the_policy_gives_is_a_kernel_and_arm_keeps_its_own():
    from aot.lower.kernels import riscv
    rv = get_board("qemu-rv32").target
    gs = (pointwise_geom(16), geom(16), geom(3), geom(1, groups=32, per_group=1))
    assert {int8_conv_schedule(rv, g, weights(g), in_memory=True).algorithm
            for g in gs} == set(riscv.CONV)
    # a first layer whose window rows are shorter than a word: taps one by one
    narrow = dataclasses.replace(geom(1), kw=3)
    assert int8_conv_schedule(rv, narrow, weights(narrow), in_memory=True).algorithm \
        == "rv32_dense"
    assert int8_fc_schedule(rv, np.ones((8, 16), np.int64), True).algorithm in riscv.FC
    # weights outside int8, or an input read through its loads: the plain loops
    g = geom(16)
    assert int8_conv_schedule(rv, g, weights(g, 200), in_memory=True).algorithm == "scalar"
    assert int8_conv_schedule(rv, g, weights(g)).algorithm == "scalar"
    # a depth of 1, 2 or 4k: words of 1, 2 or 4 values (none spans two taps)
    from aot.lower.kernels.riscv.scalar import conv_lanes
    assert [conv_lanes(d) for d in (1, 3, 2, 6, 4, 64)] == [1, 1, 2, 2, 4, 4]


def test_int8_conv_falls_back_to_the_scalar_loops():
    m4, host = get_board("mps2-an386").target, get_board("host").target
    g = geom(16)
    # an input read through its loads (an inlined producer, the hybrid's
    # quantized image), or weights outside int8: no Cortex-M kernel
    assert int8_conv_schedule(m4, g, weights(g)).algorithm == "scalar"
    assert int8_conv_schedule(m4, g, weights(g, 200), in_memory=True).algorithm == "scalar"
    # two output channels per group do not fill a vector
    narrow = geom(16, groups=2, per_group=2)
    assert int8_conv_schedule(host, narrow, weights(narrow)).algorithm == "scalar"


def test_every_cortex_m_name_the_policy_gives_is_a_kernel():
    conv = {int8_conv_schedule(get_board(b).target, g, weights(g), in_memory=True).algorithm
            for b in ("mps2-an386", "mps3-an547", "mps2-an385", "microbit")
            for g in (pointwise_geom(16), geom(16), geom(3), geom(1, groups=32, per_group=1))}
    assert conv == set(cortex_m.CONV)
    fc = {int8_fc_schedule(get_board(b).target, np.ones((8, d), np.int64), True).algorithm
          for b in ("mps2-an386", "mps3-an547", "mps2-an385") for d in (16, 8)}
    assert fc == set(cortex_m.FC)


@pytest.mark.parametrize("board,depth,in_memory,algorithm", [
    ("mps3-an547", 32, True, "mve_fc"),     # 16k deep: Helium's vectors
    ("mps3-an547", 8, True, "dsp_fc"),
    ("mps2-an386", 32, True, "dsp_fc"),
    ("mps2-an386", 32, False, "scalar"),    # an input not in memory
    ("mps2-an386", 3, True, "scalar"),      # less than a word deep
    ("qemu-rv32-imac", 32, True, "rv32_fc"),
    ("qemu-rv32-imac", 32, False, "scalar"),
    ("host", 32, False, "vector"),
])
def test_int8_fc_algorithm_per_target(board, depth, in_memory, algorithm):
    s = int8_fc_schedule(get_board(board).target, np.ones((8, depth), np.int64), in_memory)
    assert s.algorithm == algorithm
    assert (s.accumulator is not None) == (algorithm == "vector")


def test_int8_fc_quads_need_a_four_lane_tile_and_weights_that_fit():
    """rpi5's sdot quads, else pairs: two units fill no 4-lane tile (then
    the scalar loop), a -128 weight is fine for sdot, not for Cortex-A72's
    SMULL quads."""
    rpi5, rpi4 = get_board("rpi5").target, get_board("rpi4").target
    w = np.ones((16, 32), np.int64)
    assert int8_fc_schedule(rpi5, w, True).accumulator == QUADS
    assert int8_fc_schedule(rpi5, w[:2], True).algorithm == "scalar"
    assert int8_fc_schedule(rpi4, w, True).accumulator.name == "quads_mull"
    assert int8_fc_schedule(rpi4, w - 129, True).accumulator == PAIRS


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


@pytest.mark.fast
@pytest.mark.parametrize("board,side,flat", [
    ("rpi4", 6, True),     # rows of 6 pixels, blocks of 9 over the map
    ("rpi4", 12, True),    # blocks of 6 along a row, of 9 over the map
    ("rpi4", 24, False),   # 8 along a row against 9: not worth the division
    ("rpi4", 3, True),     # a row narrower than the smallest block
    ("qemu-armv7", 6, False),  # 16 registers: flat measured worse
    ("host", 6, False),    # x86's broadcast tiles: rows, as measured there
    ("host", 3, True),
])
def test_pointwise_pixels_go_flat_where_a_row_starves_the_tile(board, side, flat):
    """A pointwise conv blocks every pixel of its map as one run where a
    row is narrower than the tile's smallest block, or where Arm's by-lane
    tiles take blocks a quarter larger on average over the map."""
    m = SpatialOp("NHWC", 1, 64, (side, side))
    s = float_schedule(board, m, m, 1, 1, 64, 64, pad=0)
    assert (s.algorithm, s.flat) == ("pointwise", flat)


def pointwise_map(side: int, depth: int = 64, images: int = 1) -> ConvGeom:
    return ConvGeom(n=images, h=side, w=side, oh=side, ow=side, kh=1, kw=1, groups=1,
                    depth=depth, per_group=64, strides=(1, 1), dilations=(1, 1), pad_top=0,
                    pad_left=0)


@pytest.mark.fast
@pytest.mark.parametrize("board,g,flat", [
    ("rpi5", pointwise_map(6), True),      # 4 + 2 pixels a row, blocks of 4 over the map
    ("rpi5", pointwise_map(3), True),      # 3 a row, 5 + 4 over the map
    ("rpi4", pointwise_map(6), True),      # the A72's SMULL quads, the same tiles
    ("rpi5", pointwise_map(12), False),    # rows of 3 blocks of 4 already
    ("rpi5", geom(64), False),             # a 3x3 window
    ("rpi5", pointwise_map(6, depth=8), False),   # not 16 deep: no quads by lane
    ("host", pointwise_map(6), False),     # x86's pairs
])
def test_int8_pointwise_quads_go_flat_where_a_row_starves_the_tile(board, g, flat):
    target = get_board(board).target
    assert int8_conv_schedule(target, g, weights(g), one_row=True).flat_pixels == flat
    assert not int8_conv_schedule(target, g, weights(g)).flat_pixels     # a caller without it

"""The schedule of a convolution as one frozen object, float or int8.

Every choice a convolution's schedule sites make (aot/lower/schedule/tile_sizes.py's
register tiles, aot/lower/schedule/strategy.py's algorithm, accumulator strategy
and input rows) is answered once, by the default policy here
(float_conv_schedule, int8_conv_schedule; int8_fc_schedule for the int8
fully connected layer) or by the config `aot tune` puts in force
(aot/lower/schedule/space.py), and the kernels (nn.conv,
int8_conv.vector_conv_nest) only read the answers: the algorithm apart
from its schedule. Each schedule's `algorithm` names the kernel, the int8
ones among Cortex-M's (aot/lower/kernels/cortex_m/), vector tiles and the
scalar loops, so no rule tests the target. Among them is how the kernel walks its output, a
conv_walk.Walk (loop names, region comments, blocks in tested regions,
pixel parts inside or outside the channel tiles, unrolling, channel tiles
outermost), set to each kernel's measured choice.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from aot.ir.tir import DType, dt
from aot.lower.schedule.tile_sizes import (PAD_COPY_MAX_BYTES, PAD_COPY_MIN_BORDER, Tile,
                                           depthwise_tile, tile)
from aot.lower.schedule.strategy import (PAIRS, Accumulator, KernelChoice, conv_algorithm,
                                         int8_accumulator, int8_kernel, int8_rows,
                                         mlal_depthwise, pixel_rows, quad_kernel, sixteen_dots,
                                         unroll_taps, unroll_tiles, window_row_accumulator)
from aot.lower.kernels import half_dense
from aot.lower.kernels.conv_walk import Walk, float_axes
from aot.lower.kernels.cortex_m import dsp, mve, scalar
from aot.lower.kernels.riscv import scalar as rv32
from aot.lower.kernels.tiles import UNROLL_CHANNEL_TILES, tile_widths
from aot.lower.kernels.windows import ConvGeom, SpatialOp, axis_runs
from aot.ops import nn as ref
from aot.targets import Target


@dataclass(frozen=True)
class FloatConvSchedule:
    """How one float convolution runs. `algorithm`: "winograd_2x2" or
    "winograd_4x4" (aot/lower/kernels/winograd.py, no tile here), "pointwise" (a
    matrix product over the pixels, dense.dense), "depthwise" (channel
    vectors, `tile` from the depthwise_tile site) or "direct" (the
    register-tiled sliding window) or "channel_dot" (few output channels,
    many input channels: the input channels in the lanes,
    aot/lower/kernels/channel_dot.py). Direct only: `copy_padded`, the input
    first copied into a zero-padded workspace; `merge_rows`, a window row's
    taps and input channels as one by-lane reduction. Direct and depthwise:
    `walk`, how conv_walk.walk visits the output (the float policy's
    regions, window_regions). channel_dot only: `fold_sums`, the tile's
    lane sums taken together (channel_dot.folded_sums). Pointwise only:
    `flat`, the pixels blocked as one run over the map rather than row by
    row (the pixel_rows site; flat_pixels)."""
    algorithm: str
    tile: Tile | None = None
    copy_padded: bool = False
    merge_rows: bool = False
    walk: Walk | None = None
    fold_sums: bool = False
    flat: bool = False


# A float16 convolution Winograd accepts, where the target computes in half
# (aot/lower/kernels/half_dense.py): its products in half lanes.
HALF_WINOGRAD = "winograd_2x2"


def half_winograd(target: Target, dtype: DType, icg: int, ocg: int) -> bool:
    """Whether a float16 convolution Winograd accepts takes HALF_WINOGRAD."""
    return half_dense.applies(target, dtype, icg, ocg)


def half_direct(target: Target, dtype: DType, layout: str, group: int, icg: int,
                ocg: int) -> bool:
    """Whether a float16 direct convolution computes in half
    (aot/lower/kernels/half_conv.py, its tile half_dense.TILE)."""
    return half_dense.direct_fits(target, dtype, layout, group, icg, ocg)


def float_conv_schedule(target: Target, dtype: DType, xin: SpatialOp, out: SpatialOp,
                        win: ref.Window, group: int, icg: int, ocg: int, in_memory: bool,
                        winograd_fits: bool) -> FloatConvSchedule:
    """The default policy for a convolution of `group` groups of icg -> ocg
    channels (`in_memory`: its input is a buffer; `winograd_fits`:
    winograd.applies), each site asked only where its answer matters."""
    if winograd_fits and half_winograd(target, dt(dtype), icg, ocg):
        return FloatConvSchedule(HALF_WINOGRAD)
    if winograd_fits:
        algorithm = conv_algorithm(target, out.spatial[-1])
        if algorithm != "direct":
            return FloatConvSchedule(algorithm)
    if out.vectorizable and half_direct(target, dt(dtype), xin.layout, group, icg, ocg):
        return FloatConvSchedule("direct", half_dense.TILE,
                                 walk=Walk(float_axes(len(win.kernel)), parts=True))
    t = tile(target, dtype, out.vectorizable, pixels=True)
    if ocg <= t.lanes:          # one vector of channels: room for more pixels per tile
        t = replace(t, vectors=1)
    if icg < t.k_lanes:         # a first layer's 3 channels: scalar inputs, a pixel more
        t = replace(t, k_lanes=1)
    channel_last = xin.layout == "NHWC"
    # A 1x1 conv takes it only where the pointwise product's tiles would be
    # all scalars (fewer channels than a half vector): UltraFace's 1x1
    # 64 -> 6 head 30 -> 17 us on AVX-512, while its 64 -> 8 ones lost to it.
    if channel_last and channel_dot_fits(dt(dtype), ocg, icg, t.lanes) and (
            not pointwise(win) or ocg < t.narrow):
        # MR pixels x 4 channels of vector accumulators, their inputs and
        # the 4 weight vectors within the register file
        # On x86 the sums are folded together: a lane sum there is a chain
        # of extracts and shuffles (UltraFace's 1x1 64 -> 6 head on AVX-512
        # 15.6 -> 6.3 us; other targets keep their measured code).
        regs = target.vector_registers
        return FloatConvSchedule("channel_dot", Tile(1, 4, mr=2, max_accs=regs // 2),
                                 walk=Walk(float_axes(len(win.kernel))),
                                 fold_sums=target.arch in ("x86_64", "x86"))
    if pointwise(win) and channel_last and group == 1 and in_memory:
        # (ARMv7's 16 registers: vww f32 on qemu-armv7 7,505,336 -> 7,707,626 flat)
        rows = "flat" if flat_pixels(t, out.spatial[-1], out.batch * int(np.prod(out.spatial)),
                                     t.k_lanes > 1 and target.vector_registers >= 32) else "rows"
        return FloatConvSchedule("pointwise", t, flat=pixel_rows(rows) == "flat")
    axes = float_axes(len(win.kernel))
    if icg == 1 and ocg == 1 and t.lanes > 1:
        dw = depthwise_tile(target, dtype, int(np.prod(win.kernel)))
        # weights_stay: the channel tiles outermost, a tile's weights held
        # in registers over every pixel
        return FloatConvSchedule("depthwise", dw, walk=Walk(
            axes, unroll=unroll_tiles(UNROLL_CHANNEL_TILES if dw.registers or dw.weights_stay
                                      else 0),
            tiles_outside=dw.weights_stay))
    copy = channel_last and copy_padded(xin, win, dtype)
    # (not for a first layer's 3 channels: its steps straddling taps cost
    # more than they save, vww f32's first conv 220,643 -> 281,540)
    merge_rows = (t.k_lanes > 1 and icg % t.k_lanes == 0 and group == 1 and channel_last
                  and (in_memory or copy) and win.dilations[-1] == 1)
    return FloatConvSchedule("direct", t, copy, merge_rows, Walk(
        axes, parts=True, unroll=unroll_tiles(UNROLL_CHANNEL_TILES if t.registers else 0)))


def channel_dot_fits(dtype: DType, ocg: int, icg: int, lanes: int) -> bool:
    """Whether a float32 convolution of icg -> ocg channels per group takes
    the channel_dot kernel: its output channels fill no vector of `lanes`
    (the direct tile would run them on scalars), its input channels fill
    whole ones."""
    return dtype.scalar == "float32" and lanes > 1 and ocg < lanes and icg % lanes == 0


def mean_block(t: Tile, count: int) -> float:
    """The mean pixels per block of a run of `count` pixels in t.block's
    blocks (a remainder block counts as one)."""
    return count / -(-count // t.block(count))


# A pointwise conv's pixels go flat where that makes the mean block at
# least this much larger than a row's: the by-lane tiles' loads and loop
# steps are shared by a block's pixels, and the flat run pays a division
# per stored pixel. qemu-aarch64 -cpu cortex-a72, vww f32's 1x1 convs,
# instructions rows -> flat: 6x6 maps (rows of 6, blocks of 9) 199,668 ->
# 192,358; 12x12 (6 -> 9) 210,470 -> 200,961 and 102,900 -> 100,197;
# 24x24 (8 -> 9) 111,612 -> 117,392, 219,549 -> 220,017, 113,702 -> 108,801.
FLAT_BLOCK_GAIN = 1.25


def flat_pixels(t: Tile, width: int, total: int, by_lane: bool) -> bool:
    """Whether a pointwise conv whose rows are `width` pixels, `total` in
    all, blocks them as one flat run (the pixel_rows site's default): where
    a row is narrower than the tile's smallest block, or where a by-lane
    tile (Arm's) takes blocks a quarter larger on average over the whole
    run than along a row."""
    if width < t.mr:
        return True
    return by_lane and mean_block(t, total) >= FLAT_BLOCK_GAIN * mean_block(t, width)


def pointwise(win: ref.Window) -> bool:
    """A 1x1 window at stride 1 without padding."""
    return (all(k == 1 for k in win.kernel) and all(v == 1 for v in win.strides)
            and not any(win.pad_begin) and not any(win.pad_end))


def copy_padded(xin: SpatialOp, win: ref.Window, dtype: DType) -> bool:
    """Whether a direct convolution copies its input into a padded
    workspace: a map that is mostly border, small enough to copy."""
    padded = [s + b + e for s, b, e in zip(xin.spatial, win.pad_begin, win.pad_end)]
    nbytes = xin.batch * xin.channels * dtype.bits // 8 * int(np.prod(padded))
    interior = 1
    for o, n, k, s, d, p in zip(win.out, xin.spatial, win.kernel, win.strides, win.dilations,
                                win.pad_begin):
        interior *= sum(r.count for r in axis_runs(o, n, k, s, d, p) if r.hi - r.lo == k)
    border = 1 - interior / int(np.prod(win.out))
    return border >= PAD_COPY_MIN_BORDER and nbytes <= PAD_COPY_MAX_BYTES


@dataclass(frozen=True)
class Int8ConvSchedule:
    """How one int8 convolution or fully connected layer runs.

    `algorithm` names its kernel: "vector" (vector tiles:
    aot/lower/kernels/int8_conv.py's vector_conv_nest, tflite_fc.py's
    Int8Product), "scalar" (the plain loops: int8_conv.conv_nest, one FC unit
    at a time), or a Cortex-M kernel of aot/lower/kernels/cortex_m/ by its
    name in that package's CONV or FC table ("dsp_dense", "mve_fc", ...).
    The other fields are the vector kernels' (None, False or empty for the
    rest); a fully connected layer's vector schedule sets only `tile` and
    `accumulator`.

    `tiles` are the channel tiles of `tile` over the channels a group
    writes. The dense product takes `accumulator`'s groups of input
    channels: quads (four per aot_dot4, by lane of each pixel's four
    quads with `by_lane`) or pairs (two per aot_dot2); depthwise takes
    channel vectors, widened to int16 pairs of vectors with `mlal`.
    `rows` is how the input is read: "staged" (the KH rows an output row
    reads, as pairs or quads, or int16 for the widening depthwise and the
    16x8 dense convs in SMLAL), "flat" (a first layer's window rows as one
    run, in groups of `flat_accumulator`) or "direct" (from the input,
    border taps tested). `walk`: how conv_walk.walk visits the output (the
    integer policy's "border" regions, or with staged rows one "whole"):
    oy / ox loops, no region comments, tested regions a pixel at a time,
    each pixel part a loop of channel tiles of its own. `byte_planes`: int16
    activations in the int8 quads, each x staged as its high byte h = x >> 8
    and its low byte less 128, l = (x & 255) - 128 (x = 256 h + l + 128):
    the high planes' dot products first, their sums times 256 plus the bias
    (which takes the 128 sum(w)), then the low planes'. `sixteens`: quads
    whose strategy has no dot product instruction (quads_mull) taken 16
    input channels at a time per output channel (aot_dot16p: the pixel's 16
    staged bytes against the channel's 16 weights into 4 partial sums,
    folded by aot_addp at the end of the tile), rows staged as bytes.
    `unroll_taps`: 1 unrolls the window's columns in the quads' tile (in
    the 16x8 SMLAL rows, whose columns are always unrolled, their blocks of
    8 input channels).
    `flat_pixels`: a pointwise conv's pixels walked as one row of all of an
    image's (the pixel_rows site; flat_pixels)."""
    algorithm: str
    tile: Tile | None = None
    tiles: tuple[tuple[int, tuple[int, ...]], ...] = ()
    depthwise: bool = False
    accumulator: Accumulator | None = None
    by_lane: bool = False
    mlal: bool = False
    quads: bool = False
    pairs: bool = False
    rows: str = "direct"
    flat_accumulator: Accumulator | None = None
    walk: Walk | None = None
    byte_planes: bool = False
    sixteens: bool = False
    unroll_taps: int = 0
    flat_pixels: bool = False

    @property
    def raw(self) -> Accumulator | None:
        """The quad strategy whose staged bytes are x + its offset (zp +
        offset outside the image), if the rows hold quads."""
        if self.quads:
            return self.accumulator
        flat = self.flat_accumulator
        return flat if flat is not None and flat.group == 4 else None


def int8_conv_schedule(target: Target, g: ConvGeom, weights: np.ndarray,
                       in_memory: bool = False, int16_input: bool = False,
                       byte_planes: bool = False, one_row: bool = False) -> Int8ConvSchedule:
    """The default policy. `in_memory`: the input is a buffer the Cortex-M
    kernels read where it lies (tfl.conv2d's int8 input; the hybrid conv's
    quantized image and the ONNX convolutions go through their loads, so
    they take the vector or scalar loops only). A Cortex-M kernel where one
    fits, else vector tiles where the vectors fill (depthwise with
    multiplier 1, or four or more output channels per group), else the
    scalar loops; the vector sites are consulted only for vector tiles, in
    the order the kernel always asked them. `int16_input`: the 16x8
    convolutions' int16 activations (zero point 0), which only the 16-bit
    multiply-adds take (pairs, SMLAL depthwise; on a DSP core without
    vectors "dsp_dense16" and "dsp_depthwise16", the dense nest in SMLADs
    and the depthwise in SMLABB / SMLATT of int16 words), never
    the int8 Cortex-M kernels or the quads of bytes, except as byte planes (`byte_planes`:
    the caller has proven their sums fit int32) where the target's quads
    are signed dot products by lane (Arm's SDOT: 16 products an instruction
    where SMLAL makes 4; the planes take two). `one_row`: the caller can walk
    a 1x1 conv's pixels as one row (int8_conv.one_row; `flat_pixels`)."""
    if int16_input and in_memory and target.lanes(32) == 1:
        if dsp.fits_depthwise(target, g, weights):
            return Int8ConvSchedule("dsp_depthwise16")
        if dsp.fits_dense(target, g, weights):
            return Int8ConvSchedule("dsp_dense16")
    own = cortex_m_convs(target, g, weights) + rv32_convs(target, g, weights) \
        if in_memory and not int16_input else []
    plain = target.lanes(32) == 1 or not ((g.depth == 1 and g.per_group == 1) or g.per_group >= 4)
    if own or plain:
        portable = portable_convs(target, g, weights) if in_memory and not int16_input else []
        return Int8ConvSchedule(kernel_choice(own, portable))
    t = tile(target, "int32", pixels=True)
    depthwise = g.depth == 1 and g.per_group == 1
    dense = not depthwise and g.groups == 1
    width = g.cout if depthwise else g.per_group
    kind = PAIRS if int16_input else int8_accumulator(target)
    planes = False
    if int16_input and byte_planes and dense and g.depth % 16 == 0:
        quad = int8_accumulator(target)
        if quad.group == 4 and quad.by_lane and not quad.unsigned and not quad.symmetric \
                and quad.fits(weights):
            kind, planes = quad, True
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
    sixteens = (kind.symmetric and by_lane and not planes and kind.fits(weights)
                and width % t.lanes == 0 and sixteen_dots(target)
                and quad_kernel("sixteens") == "sixteens")
    if sixteens:
        # 4 partial-sum vectors per output channel a pixel: up to 4 pixels
        # (the tile site's mr, 4 by default) x 4 channels (16 partials, 4
        # inputs, 4 weights of 32 registers)
        t = replace(t, vectors=1, max_accs=4)
    if width <= t.lanes:
        t = replace(t, vectors=1)
    if planes:
        # Byte planes run every tap twice over the same weights: the most
        # pixels whose accumulators, inputs (a window row's unrolled taps
        # share all but the row's first two) and a tap's weight vectors fit
        # the registers, in the fewest blocks a row (each reloads the
        # weights). rpi5, C: the 32x32x16 -> 16 3x3 conv in 4-pixel tiles
        # 403,637 instructions, in 5-pixel ones 387,499; a 7x7x64 -> 16
        # conv's rows as 4 + 3 pixels 79,636, as 5 + 2 79,757.
        fit = (regs - 2 - t.vectors) // (t.vectors + 1)
        t = replace(t, max_accs=min(t.max_accs, fit * t.vectors), fewest_blocks=True)
    if int16_input and dense and not planes and g.depth % 8 == 0 and mlal_depthwise(target):
        # SMLAL by element on staged rows (conv_tile._mlal_dense_row): a
        # window row's input columns for one block of 8 channels live beside
        # the accumulators (2 per pixel) and a weight vector or two. rpi4,
        # C: a 12x12x24 -> 16 3x3 conv in one 12-pixel block spilled
        # (236,046 instructions), in 6-pixel blocks 142,806.
        cols = (g.kw - 1) * g.dilations[1] + 2
        t = replace(t, max_accs=min(t.max_accs, (regs - cols) // 3 * 2))
    tiles = tuple(tile_widths(width, t))
    wide = all(min(w) >= 4 for _, w in tiles)       # every tile of whole 4+-lane vectors
    # Depthwise where the target has the widening multiply-add: 8 channels
    # per int16 vector, two accumulators each (whole tiles of 4-lane vectors
    # in pairs).
    # int16 activations take the same in dense convs: one input value
    # broadcast against 8 output channels' int16 weights (SMLAL / SMLAL2).
    mlal = ((depthwise or int16_input and dense and not planes) and mlal_depthwise(target)
            and t.lanes == 4
            and all(len(ws) % 2 == 0 and set(ws) == {4} for _, ws in tiles))
    # Dense convs whose depth is a multiple of 4 take four input channels
    # per aot_dot4 where the strategy says so.
    quads = kind.group == 4 and dense and g.depth % 4 == 0 and wide and kind.fits(weights)
    if planes and not quads:
        return int8_conv_schedule(target, g, weights, in_memory, int16_input)
    pairs = not quads and not depthwise and not mlal and g.depth >= 2
    # Dense convs with an even depth stage the KH input rows an output row
    # reads (quads always do).
    # Widening int8 depthwise convs at unit row stride stage their KH input rows
    # as int16 x - zp in a ring: each input widened once, not once per tap,
    # and no tap tested.
    # int16 activations in dense convs (SMLAL by element) stage their rows
    # as int16 with zeros outside the image: one untested region whose
    # pixel blocks span whole rows (the A72's 32x32x16 -> 16 3x3 conv, C:
    # its border pixels a tile each had cost a fifth of the kernel).
    staged = quads or (pairs and g.groups == 1 and g.depth % 2 == 0 and wide
                       and int8_rows("staged") == "staged") or \
        (mlal and depthwise and not int16_input and g.strides[0] == 1 and g.dilations[0] == 1
         and int8_rows("staged") == "staged") or \
        (mlal and dense and g.depth % 8 == 0 and int8_rows("staged") == "staged")
    # Odd depths (the first layer's 1 or 3 channels) group along a window
    # row instead: with unit column dilation its KW x D taps are one
    # contiguous run of the staged row.
    flat = (not quads and not mlal and dense and g.depth % 2 == 1 and g.dilations[1] == 1 and wide
            and int8_rows("flat") == "flat")
    row_kind = PAIRS if int16_input else window_row_accumulator(target)
    flat_kind = row_kind if flat and row_kind.group == 4 and row_kind.fits(weights) else PAIRS
    rows = "flat" if flat else "staged" if staged else "direct"
    # staged rows hold their padding: one untested region. AArch64's quad
    # kernels unroll two channel tiles: each weight load then takes a
    # constant offset (with the tile's channel in a register, clang 14
    # computed every address with an ORR); qemu-aarch64, ic int8 C / LLVM,
    # A72 4,272,934 -> 4,225,018 / 4,155,292 -> 4,112,150, A76 1,599,841
    # -> 1,490,886 / 1,656,094 -> 1,643,620
    walk = Walk(("oy", "ox"), "border" if rows == "direct" else "whole", notes=False,
                blocks_in_tested_rows=False, parts=True, parts_outside=True,
                unroll=unroll_tiles(UNROLL_CHANNEL_TILES if (quads or mlal and dense and staged)
                                    and target.arch == "aarch64" else 0))
    # The window's columns unrolled where that measured fewer instructions
    # (qemu-aarch64, ic int8's 3x3 convs, C): SDOT by lane 16 deep (A76,
    # 16 -> 16 at 32x32: 240,774 -> 226,085; 32 deep 207,469 -> 217,053),
    # the sixteens deeper than 16 (A72, 32 -> 32 at 16x16: 564,339 ->
    # 553,584; 16 deep 589,833 -> 590,825). The int16 SMLAL rows always
    # unroll their taps; `unroll_taps` unrolls their blocks of 8 input
    # channels too, up to 3 (A72, C / LLVM, 3x3 convs: 32x32x16 -> 16
    # 674,574 / 674,840 unrolled, 783,513 / 703,058 not; 12x12x24 -> 16
    # 138,379 / 141,717 and 141,507 / 141,132; 16x16x32 -> 32 672,489 /
    # 676,979 and 659,940 / 655,063; 16x16x64 -> 32 1,366,270 / 1,364,288
    # and 1,310,608 / 1,305,141: the longer bodies spill).
    taps = unroll_taps(int((g.depth == 16) != sixteens)) if quads and by_lane and not planes \
        else unroll_taps(int(g.depth <= 24)) if mlal and dense and rows == "staged" else 0
    # A 1x1 conv's quads by lane on rows too short for their blocks (6 pixels:
    # 4 + 2) take every pixel of the image as one row, where the caller can.
    flat_map = one_row and quads and by_lane and unit_window(g) and pixel_rows(
        "flat" if flat_pixels(t, g.ow, g.oh * g.ow, True) else "rows") == "flat"
    return Int8ConvSchedule("vector", t, tiles, depthwise, kind, by_lane, mlal, quads, pairs,
                            rows, flat_kind, walk, planes, sixteens and quads, taps, flat_map)


def unit_window(g: ConvGeom) -> bool:
    """A 1x1 window at stride 1 without padding: each output pixel reads
    the input pixel at its own place."""
    return (g.kh == g.kw == 1 and g.strides == (1, 1) and not g.pad_top and not g.pad_left
            and (g.oh, g.ow) == (g.h, g.w))


def kernel_choice(own: list[str], portable: list[str]) -> str:
    """The int8 kernel of a layer, asked of the int8_kernel site: the
    target's own first fitting kernel (`own`, in preference order), else the
    scalar loops; the legal alternatives are the rest of `own`, the
    `portable` nests and the scalar loops."""
    default = own[0] if own else "scalar"
    legal = tuple(dict.fromkeys([*own, *portable, "scalar"]))
    return int8_kernel(KernelChoice(default, legal)).name


def cortex_m_convs(target: Target, g: ConvGeom, weights: np.ndarray) -> list[str]:
    """The Cortex-M kernels (their names in aot/lower/kernels/cortex_m/'s CONV)
    that fit a convolution whose input is in memory, the default first:
    Helium's 16-lane dot products and outer products first, then the DSP
    extension's (depthwise with Helium: 16 channels at a time first); on a
    core without either, the same nests byte by byte (scalar.py)."""
    if scalar.scalar_target(target):
        # ARMv6-M's few registers take narrower tiles (scalar.V6M_TILE)
        tiles = "v6m" if target.has("v6m") else "scalar"
        return [name for name, fits in (
            (f"{tiles}_pointwise", scalar.fits_pointwise),
            ("scalar_depthwise", scalar.fits_depthwise),
            (f"{tiles}_dense", scalar.fits_dense), ("scalar_rows", scalar.fits_rows))
            if fits(target, g, weights)]
    mve_on = mve.mve_target(target)
    dw = dsp.fits_depthwise(target, g, weights)
    fits = (
        ("mve_pointwise", mve_on and g.depth % mve.LANES == 0
         and dsp.fits_pointwise(target, g, weights)),
        ("mve_dense", mve_on and g.depth % mve.LANES == 0 and dsp.fits_dense(target, g, weights)),
        ("mve_outer", mve.fits_outer(target, g, weights)),
        ("dsp_pointwise", dsp.fits_pointwise(target, g, weights)),
        ("mve_depthwise", dw and mve_on and g.groups >= mve.LANES),
        ("dsp_depthwise", dw),
        ("dsp_dense", dsp.fits_dense(target, g, weights)),
        ("dsp_rows", dsp.fits_rows(target, g, weights)))
    return [name for name, ok in fits if ok]


def rv32_convs(target: Target, g: ConvGeom, weights: np.ndarray) -> list[str]:
    """The scalar RISC-V kernels (their names in aot/lower/kernels/riscv/'s
    CONV) that fit a convolution whose input is in memory, the default first."""
    return [name for name, fits in RV32_CONV if fits(target, g, weights)]


RV32_CONV = (("rv32_pointwise", rv32.fits_pointwise), ("rv32_depthwise", rv32.fits_depthwise),
             ("rv32_rows", rv32.fits_rows), ("rv32_dense", rv32.fits_dense))
# The nests of plain C (no DSP or vector instruction), by their fits:
# legal on any core without vectors or the DSP extension, where the layer's
# shape fits them.
PORTABLE_CONV = (*RV32_CONV, ("scalar_pointwise", scalar.fits_pointwise),
                 ("v6m_pointwise", scalar.fits_pointwise),
                 ("scalar_depthwise", scalar.fits_depthwise), ("scalar_dense", scalar.fits_dense),
                 ("v6m_dense", scalar.fits_dense), ("scalar_rows", scalar.fits_rows))


def _anywhere(target: Target) -> bool:
    return True


def _portable_core(target: Target) -> bool:
    return target.lanes(32) == 1 and not target.has("dsp")


def portable_convs(target: Target, g: ConvGeom, weights: np.ndarray) -> list[str]:
    """The plain-C kernels a tuning config may give a convolution whose input
    is in memory on a core without vectors or DSP (none elsewhere)."""
    if not _portable_core(target):
        return []
    return [name for name, fits in PORTABLE_CONV if fits(target, g, weights, on=_anywhere)]


def int8_fc_schedule(target: Target, w: np.ndarray, in_memory: bool,
                     int16_input: bool = False) -> Int8ConvSchedule:
    """The default policy of an int8 fully connected layer (weights w
    [units, depth], the weight zero point subtracted; `in_memory`: its
    input is a buffer): vector tiles of `tile` in `accumulator`'s groups
    (pairs where no 4+-lane tile or no weight suits the quads) where the
    target has vectors and there are 4 units or more, else the Cortex-M
    matrix product in Helium's vectors (depths of 16k), the DSP
    extension's words or, without either, words read byte by byte, or the
    scalar RISC-V cores' register tiles, else the scalar loop.
    `int16_input`: the 16x8 layer's int16 activations, in the vector
    tiles' pairs, on a DSP core "dsp_fc16" (SMLADs of int16 words), or the
    scalar loop."""
    if target.lanes(32) > 1 and len(w) >= 4:
        t = tile(target, "int32")
        kind = PAIRS if int16_input else int8_accumulator(target)
        if kind.group == 4 and not (kind.fits(w) and any(min(ws) >= 4
                                                         for _, ws in tile_widths(len(w), t))):
            kind = PAIRS
        return Int8ConvSchedule("vector", t, accumulator=kind)
    if int16_input:
        return Int8ConvSchedule("dsp_fc16" if in_memory and dsp.fits_fc(target, w)
                                else "scalar")
    if not in_memory:
        return Int8ConvSchedule(kernel_choice([], []))
    own = [name for name, fits in (("mve_fc", mve.fits_fc), ("dsp_fc", dsp.fits_fc),
                                   ("rv32_fc", rv32.fits_fc), ("scalar_fc", scalar.fits_fc))
           if fits(target, w)]
    portable = [name for name, fits in (("rv32_fc", rv32.fits_fc), ("scalar_fc", scalar.fits_fc))
                if fits(target, w, on=_anywhere)] if _portable_core(target) else []
    return Int8ConvSchedule(kernel_choice(own, portable))

"""The target-neutral loop nests of the integer convolutions: the scalar
window nest (conv_nest) and the vector tiles (vector_conv_nest) with the
input rows they stage. Their rules are aot/lower/rules/quant/tflite_conv.py
(`tfl.conv2d`, `tfl.depthwise_conv2d`), tflite_int16.py (conv_nest with
int64 accumulators) and onnx_quant.py (QLinearConv, ConvInteger); the
Cortex-M kernels are aot/lower/kernels/cortex_m/'s.

Bit-exact with aot/ops/quant/tflite_int8.py (itself bit-exact with tflite-micro,
TFLITE_INT8.md). Accumulators are int32; requantization uses the
fixed-point builders of aot/lower/arith/qmath.py with multipliers computed at
compile time by aot/ops (the same functions the reference uses).

Loop structure:
- conv / depthwise: per output pixel, an int32 accumulator row over the
  output channels (scratch), filled tap by tap with the output channel
  innermost (weights repacked [KH, KW, D, C_out], unit stride), then
  requantized channel by channel. Depthwise is the grouped case with one
  input channel per group. The output plane is split into border regions,
  where out-of-image taps are skipped by one test per kernel row/column,
  and the interior, with no tests and the input zero point folded into the
  bias (bias - zp * sum(w), exact in integers).

On targets with vectors, conv and depthwise run in vector tiles
instead (the "vector kernels" section below; the conv's reduction at each
tap, per accumulator strategy, is aot/lower/kernels/conv_tile.py's); the value rules
fused into them as epilogues are lane-generic, so they vectorize with them.

The window geometry (ConvGeom, its border and interior spans as Runs) is
aot/lower/kernels/windows.py, the one the float kernels use, the walk of
the vector convolution's output conv_walk.py, the float's, and the scalar
window nest the convolutions and pools share int8_window.py.
"""
from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Callable

import numpy as np

from aot.errors import AotError
from aot.isa.calls import pack_pairs, pack_quads
from aot.ir.tir import (Bin, Broadcast, Buffer, Cast, Const, Decl, Expr, If, Load, Select, Stmt,
                        Store, add, dt, flat_index, mul, seq)
from aot.lower.arith import qmath as q
from aot.lower.arith.loops import loop
from aot.lower.kernels.conv_tile import Int8Conv, Int8Dot, StagedRows, conv_tile, flat_by_lane
from aot.lower.schedule.conv import Int8ConvSchedule
from aot.lower.kernels.conv_walk import walk
from aot.lower.rules.elementwise import const_like
from aot.lower.arith.quant import (pair_widths, quad_value, table, to_i32, vector_lanes,
                                   weight_dtype)
from aot.lower.kernels.int8_window import window_nest
from aot.lower.rules import LowerCtx
from aot.lower.schedule.strategy import PAIRS, Accumulator
from aot.lower.kernels.windows import ConvGeom, regions, window_pos
from aot.ops.quant import qmath as ref_q


# ------------------------------------------------------------- conv loop nest


def conv_nest(ctx: LowerCtx, g: ConvGeom, load_x: Callable[[tuple], Expr], zp: int,
              weights: np.ndarray, bias: np.ndarray,
              finish: Callable[[tuple, Expr], Stmt],
              prologue: Callable[[Expr], Stmt] | None = None, acc_dtype: str = "int32") -> Stmt:
    """The integer convolution bias[oc] + Σ w * (x - zp) over the in-image taps.

    weights: [C_out, KH, KW, D] integers, already zero-point centred; bias:
    [C_out] integers. finish((n, oy, ox, oc), acc) returns the store of the
    requantized result. In the interior (see window_nest) the input zero
    point is folded into the bias (bias - zp * Σw, exact); the border taps
    subtract it. acc_dtype "int64": the 16x8 kernels' int64 accumulator and bias.
    """
    packed = ctx.param("filter", weight_dtype(np.transpose(weights, (1, 2, 3, 0))))
    acc = ctx.scratch_buffer("acc", acc_dtype, (g.cout,))
    wide = acc_dtype == "int64"
    inits = {}

    def init(oc, folded: bool) -> Expr:
        if folded not in inits:
            values = bias - zp * weights.reshape(g.cout, -1).sum(axis=1) if folded else bias
            values = values.astype(np.int64) if wide else ref_q.wrap_int32(values).astype(np.int32)
            inits[folded] = table(ctx, "bias", values)
        return inits[folded](oc)

    def taps(n, ky, kx, iy, ix, inside: bool) -> Stmt:
        def group(gi):
            def chan(ic):
                xv = ctx.fresh("xv")
                value = q.offset(to_i32(load_x((n, iy, ix, add(mul(gi, Const(g.depth)), ic)))),
                                 0 if inside else -zp)

                def mac(ol):
                    oc = add(mul(gi, Const(g.per_group)), ol)
                    wv = to_i32(Load(packed, flat_index((ky, kx, ic, oc), packed.shape)))
                    prod = Bin("*", xv, wv)   # int16 x int8 fits int32
                    return Store(acc, oc, Bin("+", Load(acc, oc),
                                              Cast(dt("int64"), prod) if wide else prod))
                return seq(Decl(xv, value), loop(ctx, "ol", g.per_group, mac))
            return loop(ctx, "ic", g.depth, chan)
        return loop(ctx, "g", g.groups, group)

    return window_nest(ctx, g, acc, init, taps, lambda idx, a, inside: finish(idx, a),
                       prologue)


# ------------------------------------------------------------ vector kernels
# On targets with a vector unit the convolutions and FC accumulate in
# explicit int32 vector tiles (PERFORMANCE.md lessons 3-5, 8): output
# channels across the lanes (weights repacked so a tile's channels are
# unit-stride), several neighbouring output pixels sharing each weight
# load in the interior, accumulators Decl'd as locals. Pairs of input
# channels go through the 16-bit multiply-add (aot_dot2 / aot_dot2p:
# pmaddwd on x86) against weights packed in pairs; dense convolutions
# first stage the input rows they read as int32 pairs (aot_pack2, a vector
# at a time). Targets with a 4-way int8 dot product (Arm sdot, x86 VNNI;
# aot/lower/schedule/strategy.py) take four input channels per call instead
# (aot_dot4), from input rows staged as int32 quads of the raw bytes.
# Each accumulator is requantized straight from its register,
# on int32 vectors (TfliteVecRequant) with per-channel constants precomputed so
# that it is branch-free. Scalar targets keep the loops above.


def one_row(g: ConvGeom, load_x: Callable, epilogue: Callable,
            joined: Callable | None = None) -> tuple:
    """A convolution whose window reads each output pixel's own input pixel
    (schedule.conv.unit_window) as one of a single row of all an image's
    pixels: its geometry, input loads, epilogue and joined epilogue (None
    stays None), the pixel p of that row being row p // W, column p % W of
    the image."""
    def at(idx: tuple) -> tuple:
        n, _, p, c = idx
        return (n, Bin("/", p, Const(g.w)), Bin("%", p, Const(g.w)), c)
    row = replace(g, h=1, w=g.h * g.w, oh=1, ow=g.oh * g.ow)
    return (row, lambda idx, lanes=1: load_x(at(idx), lanes),
            lambda b, idx, acc, lanes: epilogue(b, at(idx), acc, lanes),
            None if joined is None else lambda b, idx, accs: joined(b, at(idx), accs))


def vector_conv_nest(ctx: LowerCtx, g: ConvGeom, sched: Int8ConvSchedule, load_x: Callable,
                     zp: int, weights: np.ndarray, bias: np.ndarray,
                     epilogue: Callable[[q.Block, tuple, Expr, int], Stmt],
                     prologue: Callable[[Expr], Stmt] | None = None,
                     joined: Callable[[q.Block, tuple, tuple], Stmt | None] | None = None
                     ) -> Stmt:
    """conv_nest in vector tiles (see the section comment).

    Dense and grouped convolutions broadcast one input value against
    vectors of output channels of its group (weights [G, KH, KW, D,
    C_out/G]); depthwise with multiplier 1 (one input channel per group)
    loads input and weights as channel vectors alike (weights [KH, KW, C]).
    epilogue(block, (n, oy, ox, c), acc, lanes) stores the requantized
    result of `lanes` channels from c (one accumulator: a vector, a
    narrower one or a scalar); joined(block, (n, oy, ox, c), accs), where
    given, the store of four 4-lane accumulators' 16 channels from c (None:
    one by one). The tile, the accumulator strategy and how
    the input rows are read are `sched`'s (int8_conv_schedule's answer
    "vector", aot/lower/schedule/conv.py),
    each tap's steps the strategy's (aot/lower/kernels/conv_tile.py), the regions,
    pixel blocks and channel tiles the one walk's (conv_walk.walk, as the
    schedule's Walk says): this nest packs the weights, stages the rows and
    writes the tile.
    """
    t, tiles, depthwise, quads = sched.tile, sched.tiles, sched.depthwise, sched.quads
    flat_kind, raw = sched.flat_accumulator, sched.raw
    groups = 1 if depthwise else g.groups
    w5 = weights.reshape(g.groups, g.per_group, g.kh, g.kw, g.depth)
    packed = packed2 = packed4 = packed_flat = None
    if sched.sixteens:  # weights [KH, KW, D/16, C, 16], input rows staged as bytes
        packed4 = ctx.param("filter_sixteens", SIXTEENS.interleave(
            np.moveaxis(w5[0], 0, -2)).astype(np.int8))
    elif quads:   # weights [KH, KW, D/4, C, 4], input rows staged as quads (see _quad_rows)
        packed4 = ctx.param("filter_quads", sched.accumulator.interleave(
            np.moveaxis(w5[0], 0, -2)).astype(np.int8))
    elif depthwise:
        dw = weight_dtype(np.ascontiguousarray(weights[:, :, :, 0].transpose(1, 2, 0)))
        # [KH, KW, C], widened at compile time where aot_mlal takes int16 vectors
        packed = ctx.param("filter", dw.astype(np.int16) if sched.mlal else dw)
    else:
        dense = weight_dtype(np.ascontiguousarray(w5.transpose(0, 2, 3, 4, 1)))  # [G, KH, KW, D, P]
        if sched.mlal:
            # widened at compile time, as aot_mlal takes int16 vectors (int16
            # activations), and [G, P/8, KH, KW, D, 8]: a tile's 8 output
            # channels for consecutive input channels side by side (LDP)
            six = dense.reshape(*dense.shape[:4], g.per_group // 8, 8).transpose(0, 4, 1, 2, 3, 5)
            dense = np.ascontiguousarray(six).astype(np.int16)
        packed = ctx.param("filter", dense)
    if sched.pairs:   # [G, KH, KW, D/2, P, 2]: two input channels' weights side by side
        packed2 = ctx.param("filter_pairs", weight_dtype(
            PAIRS.interleave(np.moveaxis(w5[..., :g.depth // 2 * 2], 1, -2))))
    flat_w = weights.reshape(g.cout, -1)
    bias_tabs = {}
    staged = sched.rows != "direct"
    flat = sched.rows == "flat"
    if flat:    # [KH, groups, P, fg]: a window row's KW x D taps in groups
        fg = flat_kind.group
        k_run = g.kw * g.depth
        wf = np.zeros((g.per_group, g.kh, fg * _row_groups(g, fg)), np.int64)
        wf[:, :, :k_run] = w5[0].reshape(g.per_group, g.kh, k_run)
        packed_flat = ctx.param("filter_pairs" if fg == 2 else "filter_quads", weight_dtype(
            flat_kind.interleave(np.moveaxis(wf, 0, -2))))
    cv = Int8Conv(g, load_x, zp, sched, packed, packed2, packed4, packed_flat,
                  stage_rows(ctx, g, load_x, zp, sched))

    def bias_at(folded: bool, oc: Expr, lanes: int) -> Expr:
        """The bias less `fold` * sum(w) per channel: fold is the input zero
        point in the unstaged interior, zp + the quads' byte offset in staged
        quads (padding holds zp + offset there), -128 in byte planes (their
        low bytes are (x & 255) - 128), else 0."""
        fold = (-PLANE_OFFSET if sched.byte_planes else zp + raw.offset if raw
                else zp if folded else 0)
        if fold not in bias_tabs:
            values = bias - fold * flat_w.sum(axis=1)
            bias_tabs[fold] = ctx.param("bias", ref_q.wrap_int32(values).astype(np.int32))
        return Load(bias_tabs[fold], oc, lanes)

    return walk(ctx, sched.walk, g.n, regions(sched.walk.regions, g.window(), (g.h, g.w)), t,
                groups, tiles,
                partial(conv_tile, ctx, Int8Dot(cv, bias_at, epilogue, joined=joined)), prologue,
                lambda n, pos: cv.rows.stage(n, pos[0]) if staged else None)


def stage_rows(ctx: LowerCtx, g: ConvGeom, load_x: Callable, zp: int,
               sched: Int8ConvSchedule) -> StagedRows | None:
    """The input rows the schedule stages (None: the taps read the input):
    staged pairs, the int32s (x[2i] - zp) + 65536 (x[2i+1] - zp), zero
    outside the image (exactly the skipped taps), so each pair is one load
    and broadcast (aot_dot2p), no tap tests bounds and every row is
    blocked; staged quads, the raw bytes (_quad_rows); the widening
    convs' (depthwise, and dense on int16 activations), int16 x - zp
    (_wide_rows); flat rows, a window
    row's KW x D taps as one contiguous run read as consecutive pairs or
    quads (_flat_rows)."""
    if sched.rows == "flat":
        return _flat_rows(ctx, g, load_x, zp, sched.flat_accumulator)
    if sched.byte_planes:
        return _plane_rows(ctx, g, load_x)
    if sched.sixteens:
        return _byte_rows(ctx, g, load_x, zp)
    if sched.quads:
        return _quad_rows(ctx, g, load_x, zp, sched.accumulator)
    if sched.mlal:
        return _wide_rows(ctx, g, load_x, zp) if sched.rows == "staged" else None
    return _pair_rows(ctx, g, load_x, zp) if sched.rows == "staged" else None


def _flat_rows(ctx: LowerCtx, g: ConvGeom, load_x: Callable, zp: int,
               kind: Accumulator = PAIRS):
    """The StagedRows (rows [KH, Q] int32, a group every `step` elements)
    of a dense conv grouped along its window rows: row ky's elements e (input row oy *
    stride - pad + ky * dilation, flattened over columns and channels from
    the left padding on) in groups of kind.group (e[p], e[p + 1], ..) for
    every p a window can start a group at (every `step`-th p: the column
    stride times the depth decides). Pairs hold x - zp (zero outside the
    image), as aot_dot2p reads them; quads the bytes x + offset (zp +
    offset outside), as aot_dot4 does (_quad_rows). With row stride and
    dilation 1 the rows form a ring as in _staged_rows (tap row ky of output
    row oy in slot (oy + ky) % KH): each input row is staged once, not KH
    times (the byte-wise staging was a quarter of ic's first conv on the
    Cortex-A72).

    Quads skip the int32 groups: the rows are the bytes themselves,
    [KH, count] int8, and a group is the 4 bytes at p, which vpdpbusd
    broadcasts from memory at any address (x86 VNNI's unsigned quads) and
    AArch64 loads as one unaligned int32 (step 1; the kernel reads them
    through aot_pack4). Host-avx512, ic's first conv: 2.97 us in pairs,
    4.86 in int32 quads staged lane by lane, 1.88 in byte rows;
    qemu-aarch64, C packages, instructions per inference: vww int8 (3
    channels at stride 2) 3,385,731 -> 3,193,445 on the A72, 1,950,461 ->
    1,730,629 on the A76, ic int8 4,334,161 -> 4,272,934 and 1,637,954 ->
    1,599,841."""
    sh, sw = g.strides
    n = kind.group
    width = max(g.w + g.pad_left, (g.ow - 1) * sw + g.kw)
    count = width * g.depth + n - 1        # padding after the last pixel: the last group's end
    if flat_by_lane(kind, sw, _row_groups(g, n)):
        # the last window's 16-byte load (conv_tile.int8_flat_lanes)
        count = max(count, (g.ow - 1) * sw * g.depth + 16)
    byte_rows = n == 4
    step = 1 if byte_rows else next(s for s in (n, 2, 1) if (sw * g.depth) % s == 0)
    q_count = count if byte_rows else (count - n) // step + 1
    rows = ctx.scratch_buffer("row_bytes" if byte_rows else "pair_rows" if n == 2 else "quad_rows",
                              "int8" if byte_rows else "int32", (g.kh, q_count))
    elems = None if byte_rows else ctx.scratch_buffer("row_elems", "int32", (count,))
    lead, image_end = g.pad_left * g.depth, (g.pad_left + g.w) * g.depth
    outside, shift = (0, -zp) if n == 2 else (zp, 0)

    def fill_run(start: int, end: int) -> Stmt | None:
        if end <= start:
            return None
        return loop(ctx, "z", end - start, lambda j: Store(elems, add(j, Const(start)),
                                                             Const(outside)))

    def group(p) -> Expr:
        if n == 4:
            return quad_value([Load(elems, add(p, Const(j))) for j in range(4)], kind.offset)
        return Bin("+", Bin("&", Load(elems, p), Const(0xFFFF)),
                   Bin("*", Load(elems, add(p, Const(1))), Const(65536)))

    ring = _ring(ctx, sh, g.dilations[0], g.kh)

    def stage(n_, oy) -> Stmt:
        def row(ky, at) -> Stmt:
            iy = window_pos(oy, ky, sh, g.pad_top, g.dilations[0])
            if byte_rows:
                return _byte_row(ctx, rows, mul(at, Const(count)), load_x, (n_, iy), g, lead,
                                 zp + kind.offset, kind.offset)
            copy = loop(ctx, "ix", g.w, lambda ix: loop(ctx, "c", g.depth, lambda c: Store(
                elems, add(add(mul(ix, Const(g.depth)), c), Const(lead)),
                q.offset(to_i32(load_x((n_, iy, ix, c))), shift))))
            inside = seq(*[st for st in (fill_run(0, lead), copy, fill_run(image_end, count))
                           if st is not None])
            cond = Bin("and", Bin(">=", iy, Const(0)), Bin("<", iy, Const(g.h)))
            return seq(If(cond, inside, fill_run(0, count)), loop(
                ctx, "q", q_count, lambda qi: Store(rows, add(mul(at, Const(q_count)), qi),
                                                    group(mul(qi, Const(step))))))
        if ring:    # one new input row per output row after the first
            return If(Bin("==", oy, Const(0)), loop(ctx, "ky", g.kh, lambda ky: row(ky, ky)),
                      row(Const(g.kh - 1), slot(add(oy, Const(g.kh - 1)), Const(0))))
        return loop(ctx, "ky", g.kh, lambda ky: row(ky, ky))

    def slot(oy, ky) -> Expr:
        return Bin("%", add(oy, ky), Const(g.kh)) if ring else ky
    return StagedRows(stage, rows, slot, step)


def _row_groups(g: ConvGeom, group: int) -> int:
    """The groups of `group` elements a window row's KW x D taps take in
    flat rows (zero weights padding the last)."""
    return -(-g.kw * g.depth // group)


def _ring(ctx: LowerCtx, stride: int, dilation: int, kh: int) -> bool:
    """Whether the staged rows form a ring (one new row per output row).
    Not in a package built for a pool: a ring's output rows depend on the
    previous one's staging, while rows staged whole each output row let the
    thread split run the rows on a scratch copy per task
    (aot/lower/tir_passes/private_scratch.py). Staging KH rows instead of
    one is a small part of a conv but its first (3 input channels)."""
    return stride == 1 and dilation == 1 and kh > 1 and ctx.threads == 1


def _byte_row(ctx: LowerCtx, rows: Buffer, base: Expr, load_x: Callable, at: tuple,
              g: ConvGeom, lead: int, fill: int, offset: int) -> Stmt:
    """Input row `at` (n, iy) into rows[base:] as bytes x + offset (the
    image row is one contiguous run in NHWC: whole vectors, the widest the
    target has), `fill` (wrapped to a byte) in the padding and outside the
    image."""
    i8 = dt("int8")
    count = rows.shape[1]
    byte = ((fill + 128) & 255) - 128

    def fill_run(start: int, end: int) -> Stmt | None:
        if end <= start:
            return None
        return loop(ctx, "z", end - start, lambda j: Store(rows, add(base, add(j, Const(start))),
                                                             Const(byte, i8)))
    runs, k = [], 0
    for wd in pair_widths(g.w * g.depth, 4 * vector_lanes(ctx)):
        v = load_x(at + (Const(k // g.depth), Const(k % g.depth)), wd)
        if offset:
            v = Bin("^", v, const_like(-128, v))   # + 128, wrapped: x ^ 0x80
        runs.append(Store(rows, add(base, Const(lead + k)), v))
        k += wd
    end = lead + g.w * g.depth
    inside = seq(*[st for st in (fill_run(0, lead), *runs, fill_run(end, count)) if st is not None])
    iy = at[1]
    cond = Bin("and", Bin(">=", iy, Const(0)), Bin("<", iy, Const(g.h)))
    return If(cond, inside, fill_run(0, count))


def _staged_rows(ctx: LowerCtx, g: ConvGeom, name: str, words: int, fill: int | tuple,
                 one: Callable, many: Callable, smallest: int, dtype: str = "int32",
                 run: int = 0):
    """The StagedRows (the rows buffer [KH, W', words] of `dtype`) of the
    staged conv: the slot of tap row ky holds input row oy *
    stride - pad + ky * dilation from the left padding on, `words`
    per pixel (one(n, iy, ix, k): word k; many(n, iy, ix, k, count): words
    k.. as a vector), `fill` where that is outside the image (a tuple: word
    k of every pixel fill[k], in runs of equal words; `run`: many() takes
    no vector across a multiple of `run` words). With stride
    and dilation 1 the rows form a ring (slot (oy + ky) % KH), so each input
    row is staged once, not KH times; output rows must then run in order."""
    sh, sw = g.strides
    dh, dw = g.dilations
    width = max(g.w + g.pad_left, (g.ow - 1) * sw + (g.kw - 1) * dw + 1)
    rows = ctx.scratch_buffer(name, dtype, (g.kh, width, words))
    lanes = ctx.target.lanes(dt(dtype).bits)

    def fill_run(start: Expr, count: int) -> Stmt | None:
        if count <= 0:
            return None
        if isinstance(fill, tuple):     # word k of each pixel its own (runs start at a pixel)
            return loop(ctx, "z", count, lambda j: Store(rows, add(start, j), _word_fill(
                fill, Bin("%", j, Const(words)), dt(dtype))))
        return loop(ctx, "z", count, lambda j: Store(rows, add(start, j), Const(fill, dt(dtype))))

    ring = _ring(ctx, sh, dh, g.kh)

    def stage(n, oy) -> Stmt:
        row = row_of(n, oy)
        if ring:    # rows oy + ky live in slot (oy + ky) % KH: one new row per output row
            return If(Bin("==", oy, Const(0)), loop(ctx, "ky", g.kh, lambda ky: row(ky, ky)),
                      row(Const(g.kh - 1), Bin("%", add(oy, Const(g.kh - 1)), Const(g.kh))))
        return loop(ctx, "ky", g.kh, lambda ky: row(ky, ky))

    def slot(oy, ky) -> Expr:
        return Bin("%", add(oy, ky), Const(g.kh)) if ring else ky

    def row_of(n, oy):
        def row(ky, at) -> Stmt:
            iy = window_pos(oy, ky, sh, g.pad_top, dh)
            base = mul(at, Const(width * words))

            def place(ix, k):
                return add(base, add(mul(add(ix, Const(g.pad_left)), Const(words)), k))

            def pixel(ix) -> Stmt:
                if lanes == 1:
                    return loop(ctx, "k", words, lambda k: Store(rows, place(ix, k),
                                                                 one(n, iy, ix, k)))
                runs, k = [], 0
                for part in range(0, words, run or words):
                    for count in pair_widths(min(words - part, run or words), lanes, smallest):
                        value = (many(n, iy, ix, k, count) if count > 1
                                 else one(n, iy, ix, Const(k)))
                        runs.append(Store(rows, place(ix, Const(k)), value))
                        k += count
                return seq(*runs)
            inside = seq(*[st for st in (
                fill_run(base, g.pad_left * words),
                loop(ctx, "ix", g.w, pixel),
                fill_run(add(base, Const((g.pad_left + g.w) * words)),
                         (width - g.pad_left - g.w) * words)) if st is not None])
            cond = Bin("and", Bin(">=", iy, Const(0)), Bin("<", iy, Const(g.h)))
            return If(cond, inside, fill_run(base, width * words))
        return row
    return StagedRows(stage, rows, slot)


def _word_fill(fill: tuple[int, ...], k: Expr, dtype) -> Expr:
    """fill[k] for a run-length tuple of per-word fills: a Select per change."""
    value: Expr = Const(fill[-1], dtype)
    for i in range(len(fill) - 1, 0, -1):
        if fill[i - 1] != fill[i]:
            value = Select(Bin("<", k, Const(i)), Const(fill[i - 1], dtype), value)
    return value


def _pair_rows(ctx: LowerCtx, g: ConvGeom, load_x: Callable, zp: int):
    """_staged_rows of int32 pairs (x[2i] - zp) + 65536 (x[2i+1] - zp),
    zeros outside the image (exactly the skipped taps): [KH, W', D/2]."""
    def one(n, iy, ix, cp):
        a, b = (q.offset(to_i32(load_x((n, iy, ix, add(mul(cp, Const(2)), Const(j))))), -zp)
                for j in (0, 1))
        return Bin("+", Bin("&", a, Const(0xFFFF)), Bin("*", b, Const(65536)))

    def many(n, iy, ix, cp, count):
        """`count` pairs at once: 2 count lanes int8 widened to int16 (x - zp
        lies in [-255, 255]), their bytes read as int32 pairs."""
        i16 = dt("int16", 2 * count)
        x16 = Bin("+", Cast(i16, load_x((n, iy, ix, Const(2 * cp)), 2 * count)),
                  Broadcast(Const(-zp, dt("int16")), 2 * count))
        return pack_pairs(x16)
    return _staged_rows(ctx, g, "pair_rows", g.depth // 2, 0, one, many, 4)


def _wide_rows(ctx: LowerCtx, g: ConvGeom, load_x: Callable, zp: int):
    """_staged_rows of the widening depthwise conv at row stride 1, [KH, W',
    C] int16: each channel's x - zp, zeros outside the image (exactly the
    skipped taps). In a ring, each input is widened once instead of once
    per tap (9 times for a 3x3 window), and the taps read int16 vectors
    with no bounds test: one whole region, the bias unfolded. (At stride 2
    each input serves about 2.25 taps, and staging them cost more than it
    saved: vww's 48x48x16 layer, 85,119 -> 90,092 instructions on the A72.)
    The 16x8 dense convs stage theirs the same way, D words a pixel, at any
    stride: each input then serves every output channel's taps."""
    def one(n, iy, ix, c):
        return Bin("-", Cast(dt("int16"), load_x((n, iy, ix, c))), Const(zp, dt("int16")))

    def many(n, iy, ix, c, count):
        i16 = dt("int16", count)
        return Bin("+", Cast(i16, load_x((n, iy, ix, Const(c)), count)),
                   Broadcast(Const(-zp, dt("int16")), count))
    words = g.cout if g.depth == 1 and g.per_group == 1 else g.depth
    return _staged_rows(ctx, g, "wide_rows", words, 0, one, many, 4, dtype="int16")


def _quad_rows(ctx: LowerCtx, g: ConvGeom, load_x: Callable, zp: int, kind: Accumulator):
    """_staged_rows for aot_dot4, [KH, W', D/4]: each int32 four channels'
    bytes x + kind.offset (low channel first), and outside the image the
    bytes of zp + offset: those taps then add (zp + offset) * w, which the
    bias takes back with the in-image ones' (bias - (zp + offset) * sum(w)),
    so the sum is exactly that of x - zp over the in-image taps."""
    def one(n, iy, ix, cq):
        return quad_value([load_x((n, iy, ix, add(mul(cq, Const(4)), Const(j))))
                            for j in range(4)], kind.offset)

    def many(n, iy, ix, cq, count):
        """`count` quads at once: 4 count bytes, their bits as int32s."""
        v = load_x((n, iy, ix, Const(4 * cq)), 4 * count)
        if kind.offset:
            v = Bin("^", v, Broadcast(Const(-128, dt("int8")), 4 * count))
        return pack_quads(v)
    pad_byte = (zp + kind.offset) & 255
    fill = int(ref_q.wrap_int32(np.int64(pad_byte * 0x01010101)))
    return _staged_rows(ctx, g, "quad_rows", g.depth // 4, fill, one, many, 2)



def _byte_rows(ctx: LowerCtx, g: ConvGeom, load_x: Callable, zp: int):
    """_staged_rows for aot_dot16, [KH, W', D] int8: the raw bytes, the zero
    point outside the image (whose products the bias takes back, as with
    _quad_rows), so a pixel's 16 channels are one vector load."""
    def one(n, iy, ix, c):
        return load_x((n, iy, ix, c))

    def many(n, iy, ix, c, count):
        return load_x((n, iy, ix, Const(c)), count)
    return _staged_rows(ctx, g, "byte_rows", g.depth, zp, one, many, 8, dtype="int8")


# The weights of aot_dot16: 16 input channels of an output channel side by side.
SIXTEENS = Accumulator("sixteens", 16)


# What byte planes' low bytes are less: (x & 255) - 128 fits int8.
PLANE_OFFSET = 128


def _plane_rows(ctx: LowerCtx, g: ConvGeom, load_x: Callable):
    """_staged_rows of int16 activations (zero point 0) as byte planes for
    aot_dot4, [KH, W', D/2]: a pixel's D/4 quads of high bytes x >> 8, then
    its D/4 quads of low bytes (x & 255) - 128 (low channel first in each
    quad), no vector across the planes. Outside the image x = 0: high
    bytes 0, low bytes -128, whose products the bias's 128 sum(w) takes
    back, as it does the in-image taps'."""
    quads = g.depth // 4

    def plane(v: Expr, high: bool) -> Expr:
        if high:
            return Bin(">>", v, const_like(8, v))
        return Bin("-", Bin("&", v, const_like(255, v)), const_like(PLANE_OFFSET, v))

    def one(n, iy, ix, k):
        if not isinstance(k, Const):
            raise AotError(f"byte planes stage whole quads, not word {k}")
        high, cq = k.value < quads, k.value % quads
        return quad_value([plane(to_i32(load_x((n, iy, ix, Const(4 * cq + j)))), high)
                           for j in range(4)], 0)

    def many(n, iy, ix, k, count):
        high, cq = k < quads, k % quads
        if (k + count - 1 < quads) != high:
            raise AotError(f"byte planes: quads {k}..{k + count - 1} straddle the planes")
        v = load_x((n, iy, ix, Const(4 * cq)), 4 * count)
        return pack_quads(Cast(dt("int8", 4 * count), plane(v, high)))
    low = int(ref_q.wrap_int32(np.int64(0x80808080)))
    return _staged_rows(ctx, g, "plane_rows", 2 * quads, (0,) * quads + (low,) * quads,
                        one, many, 2, run=quads)

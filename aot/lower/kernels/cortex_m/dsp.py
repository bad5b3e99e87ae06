"""int8 kernels for scalar cores with the Armv7E-M DSP extension
(Cortex-M4, M7, M55 without Helium): the accumulator strategy of
the scalar convolution and fully connected rules
(aot/lower/rules/quant/tflite_conv.py, tflite_fc.py). The schedule picks one
by its name in this package's CONV and FC tables (int8_conv_schedule,
int8_fc_schedule in aot/lower/schedule/conv.py), each where its fits_*
holds; Helium's kernels (mve.py) are these nests given its 16-lane Words.

An input word and a weight word of four int8 each are split into their
even and odd bytes as int16 pairs (SXTB16, SXTB16 ROR #8); SMLAD multiplies
two pairs and adds both products to an int32 accumulator
(aot/isa/arm_dsp.py). Register tiles, none with an im2col buffer:

- 1x1 convolutions (stride 1, no padding, one group): a product of pixel
  rows (a pixel's channels are contiguous in NHWC), 2 pixels x 2 output
  channels: four loads, eight SXTB16 and eight SMLAD per 16 MACs, or with
  the weights widened when compiling (widened_pairs: SXTB16's int16 pairs
  stored, twice the flash) two loads, four SXTB16, two LDRD and eight
  SMLAD. The depthwise, first-layer and other convolutions' kernels widen
  theirs too where their words are whole (WordLoop says which, and how a
  tile's word loop is unrolled).
- other convolutions of one group over a multiple of 4 input channels:
  2 neighbouring pixels x 2 output channels over each tap's words, read
  where they lie.
- first layers (few input channels, mostly inside the image): each window
  row (kernel width x channels, contiguous) a dot product in words.
- depthwise (multiplier 1): 4 channels per word, kept apart by the
  single-product SMLABB / SMLATT, into 4 accumulators over the taps; with
  `exact`, a border pixel visits only its taps inside the image.
- fully connected: 1 row x 4 output channels.

All fold the input zero point into the bias (bias - zp * sum(w), exact),
so the inputs are read as they are; a tap outside the image reads a word
of four zero points instead (its products then cancel in the bias), behind
tests on the border only. Depths not a multiple of four finish with plain
multiply-adds; channels and pixels left over by a tile run in narrower
tiles. Weights are interleaved per tile so its channels' words lie side by
side. Each accumulator is requantized from its register, in 32-bit
arithmetic (aot/lower/arith/requant.py's TfliteRequant32) where its bound,
known from the weights and the bias (acc_bound), proves that equal to
TFLite's, else by the scalar rules' TfliteRequant. Weights are widened
only while limits.wide_weights() allows it (a board without the flash for
them compiles under limits.packed_weights).
The convolutions walk their output planes through the one walk
(conv_walk.plane_walk: border regions; the 2-pixel tile's pairs are its
blocks of two columns, the odd last column alone).

The operations are generic calls the legalization pass makes Arm
instructions; on a target without the DSP extension these kernels are not
chosen (the formulas would be slower than the plain loops). The schedule
offers them only inputs in memory (rules.TensorRef.in_memory).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from aot.isa.arm_dsp import INT8X4, smla_half, smlad, ssat8, sxtb16
from aot.isa.calls import lane, pack_pairs
from aot.ir.tir import (Assign, Bin, Broadcast, Buffer, Const, Decl, DType, Expr, For, ForKind, If,
                        Load, Stmt, Store, Var, add, flat_index, mul, seq)
from aot.limits import wide_weights
from aot.lower.arith.loops import loop
from aot.lower.kernels.conv_walk import PLANE, plane_walk, region_loops
from aot.lower.arith.quant import lazy_table, table, to_i32, unravel
from aot.lower.kernels.windows import Run, in_range, window_pos, window_regions
from aot.lower.rules import LowerCtx, TensorRef
from aot.lower.schedule.tile_sizes import Tile, nest_tile
from aot.targets import Target

# rows x output channels per register tile
CONV_TILE = (2, 2)
FC_TILE = (1, 4)
# depthwise windows of at most this many taps are unrolled in the interior
UNROLL_TAPS = 9
# a matrix product's word loop of at most this many words is unrolled whole
UNROLL_WORDS = 4


def dsp_target(t: Target) -> bool:
    """Whether the target is a scalar core with the DSP extension (SXTB16
    reads little-endian words)."""
    return t.has("dsp") and t.little_endian and t.lanes(32) == 1


def saturating(target: Target, dtype: str) -> bool:
    """Whether an int8 output's clamp is SSAT's (saturate): the DSP cores."""
    return dsp_target(target) and dtype == "int8"


def saturate(y: Expr, lo: int, hi: int) -> Expr:
    """y clamped to [lo, hi] within int8's range: SSAT #8, then the
    activation's bounds where they are narrower (one compare each)."""
    y = ssat8(y)
    if lo > -128:
        y = Bin("max", y, Const(lo))
    if hi < 127:
        y = Bin("min", y, Const(hi))
    return y


def fits_int8(w: np.ndarray) -> bool:
    return w.size > 0 and w.min() >= -128 and w.max() <= 127


def fits_pointwise(target: Target, g, weights: np.ndarray, on=dsp_target) -> bool:
    """A 1x1 convolution the pixel-row product computes: one group, stride 1,
    no padding, weights that are int8; on a core `on` accepts (here the DSP
    extension's; scalar.py's cores take the same nests in other words)."""
    return on(target) and pointwise_shape(g) and fits_int8(weights)


def pointwise_shape(g) -> bool:
    """A 1x1 convolution of one group, stride 1, no padding, a word deep or more."""
    return (g.groups == 1 and g.kh == g.kw == 1 and tuple(g.strides) == (1, 1)
            and (g.oh, g.ow) == (g.h, g.w) and g.pad_top == g.pad_left == 0 and g.depth >= 4)


def fits_fc(target: Target, w: np.ndarray, on=dsp_target) -> bool:
    return on(target) and w.shape[1] >= 4 and fits_int8(w)


@dataclass(frozen=True)
class WordLoop:
    """How a matrix product walks its depth's words: unrolled whole up to
    `whole` words, else `chunk` words per trip (the rest unrolled after);
    `offsets`: a tile's first input row and weight offsets computed once,
    before the loop, so the compiler walks one pointer each with constant
    offsets for the tile's other rows (GCC otherwise keeps an index per row,
    spilled)."""
    whole: int = 4
    chunk: int = 1
    offsets: bool = False
    rows: bool = False      # window_rows: the window's rows unrolled with their words
    # PAIRS' weights widened when compiling (widened_pairs): each word two int32
    # of int16 halves, loaded as they are (no SXTB16), two words one LDRD
    widened: bool = False


# the default; the DSP kernels': with 13 registers a 2x2 tile's steps
# unrolled 8 at a time (kws's 1x1 convolutions 954 k -> 827 k
# instructions each, with 16 words unrolled whole)
WORD_LOOP = WordLoop()
DSP_WORD_LOOP = WordLoop(16, 8, True)
# the 1x1 convolutions' weights widened where the depth is whole words (twice
# their flash): 20 -> about 16 instructions per 16 MACs
DSP_POINTWISE = WordLoop(16, 8, True, widened=True)
# other convolutions: each tap's words the same way (the offsets are the taps')
DSP_DENSE = WordLoop(16, 8, widened=True)
# fully connected layers (1 row x 4 units, long rows): 16 words a trip, the
# weights as they are (ad's 270 KB would double): ad 459 k -> 435 k instructions
DSP_FC = WordLoop(32, 16, True)
# a first layer's window rows unrolled whole when all their words are at
# most 16, their words widened (vww's 3x3x3 first conv: 1,699 k -> 1,347 k
# instructions unrolled, 1,150 k widened in tiles of 1 pixel x 8 channels)
DSP_ROWS = WordLoop(16, 8, rows=True, widened=True)


def matmul(ctx: LowerCtx, x: Buffer, rows: int, w: np.ndarray, bias: np.ndarray,
           finish: Callable[[Expr, Expr, Var], Stmt], tile: tuple[int, int],
           words: "Words | None" = None, gather: bool = False,
           walk: WordLoop = WORD_LOOP) -> Stmt:
    """finish(row, channel, acc) for acc = bias[channel] + sum_d x[row, d] *
    w[channel, d], every row and channel, in tiles of `tile` (rows, channels),
    the depth read in `words` (default PAIRS: SMLAD's) as `walk` says. gather:
    a tile's 4 channels go to finish(row, first channel, accs) as one int32 x
    4 (conv_nest's finish requantizes it as a vector)."""
    if not gather:      # (Helium's gathered tiles keep theirs: 4 channels a vector)
        tile = nest_tile(tile)
    return _matmul(ctx, x, rows, w, bias, finish, tile, words or PAIRS, gather, walk)


def _gathered(finish, at: tuple, cs: list, accs: list) -> list[Stmt]:
    """finish(at + (channel,), acc) for a row's accumulators, or one
    finish(at + (first channel,), int32 x 4) when they are 4."""
    from aot.isa.arm_mve import lanes4
    if len(accs) == 4:
        return [finish(at + (cs[0],), lanes4(*accs))]
    return [finish(at + (c,), acc) for c, acc in zip(cs, accs)]


def _matmul(ctx: LowerCtx, x: Buffer, rows: int, w: np.ndarray, bias: np.ndarray,
            finish: Callable[[Expr, Expr, Var], Stmt], tile: tuple[int, int], words: "Words",
            gather: bool, walk: WordLoop = WORD_LOOP) -> Stmt:
    """matmul's nest.

    x: int8 rows of depth w.shape[1] at flat offset row * depth; w: integer
    weights [channels, depth] within int8; bias: int32 [channels]."""
    n = words.lanes
    channels, depth = w.shape
    nr, nk = tile
    whole = depth - depth % n
    widened = walk.widened and words in (PAIRS, INT16) and depth % n == 0 and wide_weights()
    packed = interleave(w, nk, n).astype(np.int8)
    wbuf = ctx.param("weights", widened_pairs(packed) if widened else packed)
    start = table(ctx, "bias", bias.astype(np.int32))

    # where a tile's weights start, and where its word d's lie from there: in
    # bytes, or widened in int32 (two per word of four)
    per = 2 if widened else 1

    def w_at(w0: Expr, d: Expr, nk: int, k: int) -> Expr:
        if not widened:
            return add(add(w0, mul(d, Const(nk))), Const(n * k))
        return add(add(w0, _halved(d, nk)), Const(2 * k))

    def read_w(body: list, at: Expr):
        """The operand of the weight word at `at` (w_at's units)."""
        if not widened:
            return words.read(ctx, body, "w", Load(wbuf, at, n))
        return _widened_word(ctx, body, wbuf, at)

    def block(r0: Expr, nr: int, c0: Expr, nk: int) -> Stmt:
        rs = [add(r0, Const(i)) for i in range(nr)]
        cs = [add(c0, Const(k)) for k in range(nk)]
        accs = [[ctx.fresh("acc") for _ in cs] for _ in rs]
        parts: list[Stmt] = [Decl(a, start(c)) for row in accs for a, c in zip(row, cs)]
        x_at = [mul(r, Const(depth)) for r in rs]
        w0 = mul(c0, Const(depth // per))
        if walk.offsets:
            xo, wo = ctx.fresh("x_row"), ctx.fresh("w_row")
            parts += [Decl(xo, x_at[0]), Decl(wo, w0)]
            x_at = [add(xo, Const(i * depth)) for i in range(nr)]
            w0 = wo

        def step(d: Expr) -> Stmt:
            body: list[Stmt] = []
            xs = [words.read(ctx, body, "x", Load(x, add(at, d), n)) for at in x_at]
            ws = [read_w(body, w_at(w0, d, nk, k)) for k in range(nk)]
            words.dot(body, xs, ws, accs)
            return seq(*body)
        parts.append(_word_loop(ctx, depth // n, step, n, walk))
        parts += _tail(range(whole, depth), accs,
                       lambda i, d: Load(x, add(mul(rs[i], Const(depth)), Const(d))),
                       lambda k, d: Load(wbuf, _at(c0, nk, k, d, depth, n)))
        if gather:
            parts += [s for r, row in zip(rs, accs)
                      for s in _gathered(lambda at, acc: finish(*at, acc), (r,), cs, row)]
        else:
            parts += [finish(r, c, acc) for r, row in zip(rs, accs) for c, acc in zip(cs, row)]
        return seq(*parts)

    return tiled(ctx, "r", rows, nr, lambda r0, wr: tiled(
        ctx, "c", channels, nk, lambda c0, wk: block(r0, wr, c0, wk)))


def _word_loop(ctx: LowerCtx, words: int, step: Callable[[Expr], Stmt], lanes: int = 4,
               walk: WordLoop = WORD_LOOP) -> Stmt:
    """step(d) for d = 0, lanes, ... (words times): unrolled whole up to
    walk.whole words, else walk.chunk steps per trip and the rest after."""
    if words > walk.whole and walk.chunk > 1:
        span = walk.chunk * lanes
        trips = words // walk.chunk
        chunks = loop(ctx, "d", trips, lambda d: seq(*(step(add(d, Const(j * lanes)))
                                                       for j in range(walk.chunk))), step=span)
        return seq(chunks, *(step(Const(trips * span + j * lanes))
                             for j in range(words % walk.chunk)))
    s = loop(ctx, "d", words, step, step=lanes)
    return replace(s, kind=ForKind.UNROLLED) if isinstance(s, For) and words <= walk.whole else s


def _tail(terms, accs, x_at: Callable[[int, int], Expr], w_at: Callable[[int, int], Expr]
          ) -> list[Stmt]:
    """accs[i][k] += x_at(i, d) * w_at(k, d) for the depth's last 1-3 terms d."""
    return [Assign(acc, Bin("+", acc, Bin("*", _i32(x_at(i, d)), _i32(w_at(k, d)))))
            for d in terms for i, row in enumerate(accs) for k, acc in enumerate(row)]


def tiled(ctx: LowerCtx, name: str, count: int, step: int,
           body: Callable[[Expr, int], Stmt]) -> Stmt:
    """body(first, width) over [0, count): full tiles of `step`, then singles."""
    full = count // step
    parts = [loop(ctx, name, full, lambda i: body(i, step), step=step)] if full else []
    if count % step:
        parts.append(loop(ctx, name, count % step, lambda i: body(add(i, Const(full * step)), 1)))
    return seq(*parts)


def _at(c0: Expr, width: int, k: int, d: int | Expr, depth: int, word: int = 4) -> Expr:
    """Where weight (c0 + k, d) lies in interleave's layout, c0 the first
    channel of a tile of `width`; d a multiple of `word`, or any constant."""
    if not isinstance(d, int):
        return add(add(mul(c0, Const(depth)), mul(d, Const(width))), Const(word * k))
    whole = depth - depth % word
    if d >= whole:
        return add(mul(c0, Const(depth)), Const(whole * width + k * (depth - whole) + d - whole))
    return add(mul(c0, Const(depth)), Const((d - d % word) * width + word * k + d % word))


def pointwise(ctx: LowerCtx, x: TensorRef, g, weights: np.ndarray, bias: np.ndarray, zp: int,
              finish: Callable[[tuple, Expr], Stmt], words: "Words | None" = None,
              tile: tuple[int, int] = CONV_TILE, gather: bool = False,
              walk: WordLoop = WORD_LOOP) -> Stmt:
    """A 1x1 convolution (fits_pointwise) as the product of its pixel rows;
    finish((n, oy, ox, oc), acc) as conv_nest's (gather, walk: as matmul's)."""
    w = weights.reshape(g.cout, g.depth)
    pixels = (g.n, g.oh, g.ow)
    return matmul(ctx, x.buffer, g.n * g.oh * g.ow, w, folded_bias(bias, zp, w),
                  lambda r, c, acc: finish(unravel(r, pixels) + (c,), acc), tile, words,
                  gather, walk)


def fully_connected(ctx: LowerCtx, x: TensorRef, w: np.ndarray, bias: np.ndarray,
                    out_shape: tuple, finish: Callable[[tuple, Expr, Var], Stmt],
                    words: "Words | None" = None, tile: tuple[int, int] = FC_TILE,
                    walk: WordLoop = WORD_LOOP) -> Stmt:
    """tfl.fully_connected (fits_fc) with the zero point already folded into
    `bias`: finish(out_lead, unit, acc) per output; x read as rows of the
    weights' depth, as TFLite flattens it, in `words` (matmul's) and tiles
    of `tile`."""
    lead = tuple(out_shape[:-1])
    rows = int(np.prod(lead, dtype=np.int64))
    return matmul(ctx, x.buffer, rows, w, bias,
                  lambda r, c, acc: finish(unravel(r, lead), c, acc), tile, words, walk=walk)


def fits_dense(target: Target, g, weights: np.ndarray, on=dsp_target) -> bool:
    """A convolution of one group over a multiple of 4 input channels (so no
    word spans two taps), int8 weights."""
    return (on(target) and g.groups == 1 and g.depth % 4 == 0
            and fits_int8(weights))


def dense(ctx: LowerCtx, x: TensorRef, g, weights: np.ndarray, bias: np.ndarray, zp: int,
          finish: Callable[[tuple, Expr], Stmt], words: "Words | None" = None,
          tile: tuple[int, int] = CONV_TILE, gather: bool = False,
          walk: WordLoop = WORD_LOOP) -> Stmt:
    """A convolution (fits_dense; the depth a multiple of the words' lanes)
    without an im2col buffer: 2 neighbouring output pixels of a row x
    tile[1] output channels per tile, over the taps and each tap's words of
    input channels, read where they lie, as `walk` says (matmul's: each
    tap's words unrolled or in chunks, PAIRS' weights widened). weights
    [C_out, KH, KW, D]; finish as conv_nest's (gather: a tile's 4 channels
    as one int32 x 4, as matmul's)."""
    words = words or PAIRS
    lanes = words.lanes
    w = weights.reshape(g.cout, -1)         # (ky, kx, c) per channel
    terms = w.shape[1]
    nk = tile[1]
    widened = walk.widened and words in (PAIRS, INT16) and wide_weights()
    packed = interleave(w, nk, lanes).astype(np.int8)
    wbuf = ctx.param("weights", widened_pairs(packed) if widened else packed)
    start = table(ctx, "bias", folded_bias(bias, zp, w))

    def read_w(body: list, c0: Expr, width: int, k: int, d: Expr):
        if not widened:
            return words.read(ctx, body, "w", Load(wbuf, _at(c0, width, k, d, terms, lanes),
                                                   lanes))
        at = add(add(mul(c0, Const(terms // 2)), _halved(d, width)), Const(2 * k))
        return _widened_word(ctx, body, wbuf, at)

    def tile(n, oy, oxs: list, tests, c0: Expr, width: int) -> Stmt:
        cs = [add(c0, Const(k)) for k in range(width)]
        accs = [[ctx.fresh("acc") for _ in cs] for _ in oxs]
        parts: list[Stmt] = [Decl(a, start(c)) for row in accs for a, c in zip(row, cs)]

        def tap(ky, kx) -> Stmt:
            iy = window_pos(oy, ky, g.strides[0], g.pad_top, g.dilations[0])
            ixs = [window_pos(ox, kx, g.strides[1], g.pad_left, g.dilations[1]) for ox in oxs]
            conds = [both(in_range(iy, g.h, *tests[0]), in_range(ix, g.w, *tests[1]))
                     for ix in ixs]

            def word(c) -> Stmt:
                body: list[Stmt] = []
                xs = [words.read(ctx, body, "x", Load(x.buffer, flat_index((n, iy, ix, c),
                                                                          x.shape), lanes),
                                 cond, zp) for ix, cond in zip(ixs, conds)]
                d = add(mul(add(mul(ky, Const(g.kw)), kx), Const(g.depth)), c)
                ws = [read_w(body, c0, width, k, d) for k in range(width)]
                words.dot(body, xs, ws, accs)
                return seq(*body)
            if walk is WORD_LOOP:
                return loop(ctx, "c", g.depth // lanes, word, step=lanes)
            return _word_loop(ctx, g.depth // lanes, word, lanes, walk)
        parts.append(loop(ctx, "ky", g.kh, lambda ky: loop(ctx, "kx", g.kw,
                                                            lambda kx: tap(ky, kx))))
        if gather:
            parts += [s for ox, row in zip(oxs, accs)
                      for s in _gathered(finish, (n, oy, ox), cs, row)]
        else:
            parts += [finish((n, oy, ox, c), acc) for ox, row in zip(oxs, accs)
                      for c, acc in zip(cs, row)]
        return seq(*parts)

    def pixels(n, oy, oxs, region) -> Stmt:
        tests = tuple(r.tests for r in region)
        return tiled(ctx, "oc", g.cout, nk, lambda c0, wd: tile(n, oy, oxs, tests, c0, wd))

    return plane_walk(ctx, g, pixels, pairs=True)


def fits_rows(target: Target, g, weights: np.ndarray, on=dsp_target) -> bool:
    """A convolution of one group whose window rows (kernel width x input
    channels, contiguous when the width is not dilated) hold a word or more."""
    return (on(target) and g.groups == 1 and g.dilations[1] == 1
            and g.kw * g.depth >= 4 and fits_int8(weights))


def mostly_inside(g) -> bool:
    """Whether 3/4 of the outputs or more have their windows in the image."""
    (y0, y1), (x0, x1) = _interior(g, 0), _interior(g, 1)
    return 4 * max(0, y1 - y0) * max(0, x1 - x0) >= 3 * g.oh * g.ow


def window_rows(ctx: LowerCtx, x: TensorRef, g, weights: np.ndarray, bias: np.ndarray, zp: int,
                finish: Callable[[tuple, Expr], Stmt], words: "Words | None" = None,
                tile: tuple[int, int] = CONV_TILE, walk: WordLoop = WORD_LOOP,
                pairs: bool = True) -> Stmt:
    """A convolution (fits_rows) over few input channels (a network's first
    layer): each window row is kw * D contiguous bytes of input against as
    many of weights, a dot product in words. Pixels whose windows lie in
    the image go 2 neighbours x 2 output channels at a time. When 3/4 of
    the pixels or more do, the border pixels follow, one nest for all of
    them, term by term with a zero point for each term outside the image;
    otherwise (kws's first layer: 41% inside) each image is first copied
    into a scratch buffer padded with zero points, inside which every
    window lies (the arena plans it: 754 bytes on kws). The rows are read
    in `words` (default PAIRS: SMLAD's), tile[1] output channels at a time."""
    words = words or PAIRS
    lanes = words.lanes
    span = g.kw * g.depth                    # a window row's terms
    w = weights.reshape(g.cout, g.kh, span)
    nk = tile[1]
    whole = span - span % lanes
    # widened (walk.widened, PAIRS' words): each row's words as widened_pairs'
    # int32, its last span % 4 terms apart as int8 [KH, C_out, terms]
    widened = walk.widened and words is PAIRS and whole > 0 and wide_weights()
    if widened:
        wbuf = ctx.param("weights", np.concatenate([
            widened_pairs(interleave(w[:, ky, :whole], nk, lanes).astype(np.int8))
            for ky in range(g.kh)]))
        rest = span - whole
        tails = ctx.param("weights_tail", w[:, :, whole:].transpose(1, 0, 2).astype(np.int8)
                          .reshape(-1)) if rest else None
    else:
        wbuf = ctx.param("weights", np.concatenate([interleave(w[:, ky], nk, lanes)
                                                    for ky in range(g.kh)]).astype(np.int8))
    start = table(ctx, "bias", folded_bias(bias, zp, weights.reshape(g.cout, -1)))

    def w_at(ky: Expr, c0: Expr, width: int, k: int, d) -> Expr:
        if not widened:
            return add(mul(ky, Const(g.cout * span)), _at(c0, width, k, d, span, lanes))
        return add(add(add(mul(ky, Const(g.cout * whole // 2)), mul(c0, Const(whole // 2))),
                       _halved(d, width)), Const(2 * k))

    def read_w(body: list, ky, c0, width: int, k: int, d):
        if not widened:
            return words.read(ctx, body, "w", Load(wbuf, w_at(ky, c0, width, k, d), lanes))
        return _widened_word(ctx, body, wbuf, w_at(ky, c0, width, k, d))

    def tail_w(ky, c0, width: int, k: int, d: int) -> Expr:
        if not widened:
            return Load(wbuf, w_at(ky, c0, width, k, d))
        return Load(tails, add(add(mul(ky, Const(g.cout * rest)), mul(add(c0, Const(k)),
                                                                      Const(rest))),
                               Const(d - whole)))

    def image(src: Buffer, shape: tuple, padded: bool, gi, prologue=None) -> Stmt:
        """The output, each image n from src (shape): image n, or with
        `padded` its one copy there (geometry gi)."""
        def tile(n, oy, oxs: list, c0: Expr, width: int) -> Stmt:
            n_src = Const(0) if padded else n
            cs = [add(c0, Const(k)) for k in range(width)]
            accs = [[ctx.fresh("acc") for _ in cs] for _ in oxs]
            parts: list[Stmt] = [Decl(a, start(c)) for row in accs for a, c in zip(row, cs)]

            def row(ky) -> Stmt:
                iy = window_pos(oy, ky, gi.strides[0], gi.pad_top, gi.dilations[0])
                firsts = [flat_index((n_src, iy, window_pos(ox, Const(0), gi.strides[1],
                                                             gi.pad_left, 1), Const(0)), shape)
                          for ox in oxs]

                def word(d) -> Stmt:
                    body: list[Stmt] = []
                    xs = [words.read(ctx, body, "x", Load(src, add(f, d), lanes)) for f in firsts]
                    ws = [read_w(body, ky, c0, width, k, d) for k in range(width)]
                    words.dot(body, xs, ws, accs)
                    return seq(*body)
                words_ = (_word_loop(ctx, whole // lanes, word, lanes, walk) if walk.rows
                          else loop(ctx, "d", whole // lanes, word, step=lanes))
                return seq(words_,
                           *_tail(range(whole, span), accs,
                                  lambda i, d: Load(src, add(firsts[i], Const(d))),
                                  lambda k, d: tail_w(ky, c0, width, k, d)))
            unroll = walk.rows and gi.kh * (whole // lanes) <= walk.whole
            parts.append((unrolled_loop(ctx) if unroll else loop)(ctx, "ky", gi.kh, row))
            parts += [finish((n, oy, ox, c), acc) for ox, row_ in zip(oxs, accs)
                      for c, acc in zip(cs, row_)]
            return seq(*parts)

        def pixels(n, oy, oxs, region):
            return tiled(ctx, "oc", gi.cout, nk, lambda c0, wd: tile(n, oy, oxs, c0, wd))

        (y0, y1), (x0, x1) = _interior(gi, 0), _interior(gi, 1)
        # the interior in pairs of pixels, untested
        inner = [(Run(y0, y1 - y0, 0, gi.kh), Run(x0, x1 - x0, 0, gi.kw))] \
            if y1 > y0 and x1 > x0 else []
        if (y0, y1, x0, x1) == (0, gi.oh, 0, gi.ow):
            return plane_walk(ctx, gi, pixels, pairs=pairs, prologue=prologue, only=inner)

        def border_pixel(n, oy, ox, plain: Buffer) -> Stmt:
            n_src = Const(0) if padded else n

            def channel(c) -> Stmt:
                acc = ctx.fresh("acc")

                def term(ky, kx, ci) -> Stmt:
                    iy = window_pos(oy, ky, gi.strides[0], gi.pad_top, gi.dilations[0])
                    ix = window_pos(ox, kx, gi.strides[1], gi.pad_left, 1)
                    v = ctx.fresh("xv")
                    inside = both(in_range(iy, gi.h, True, True), in_range(ix, gi.w, True, True))
                    value = _i32(Load(src, flat_index((n_src, iy, ix, ci), shape)))
                    wv = _i32(Load(plain, flat_index((c, ky, kx, ci), plain.shape)))
                    return seq(Decl(v, Const(zp)), If(inside, Assign(v, value)),
                               Assign(acc, Bin("+", acc, Bin("*", v, wv))))
                taps = loop(ctx, "ky", gi.kh, lambda ky: loop(ctx, "kx", gi.kw, lambda kx: loop(
                    ctx, "ci", gi.depth, lambda ci: term(ky, kx, ci))))
                return seq(Decl(acc, start(c)), taps, finish((n, oy, ox, c), acc))
            return loop(ctx, "oc", gi.cout, channel)

        def border(n) -> Stmt:
            """Every pixel outside the interior, each term tested: one nest
            over the whole plane, a test per pixel."""
            plain = ctx.param("filter", weights.astype(np.int8))     # [C, KH, KW, D]
            plane = (Run(0, gi.oh, 0, gi.kh, tests=(True, True)),
                     Run(0, gi.ow, 0, gi.kw, tests=(True, True)))
            return region_loops(ctx, PLANE, plane, Tile(1, 1), lambda pixels: If(
                _outside(*pixels[0], (y0, y1), (x0, x1)), border_pixel(n, *pixels[0], plain)))
        return plane_walk(ctx, gi, pixels, pairs=pairs, prologue=prologue, only=inner,
                          epilogue=border)

    if mostly_inside(g):
        return image(x.buffer, tuple(x.shape), False, g)
    pad, gp = padded_geometry(ctx, g)
    # every image copied in turn into the one padded scratch image
    return image(pad, (1, *pad.shape), True, replace(gp, n=g.n),
                 lambda n: pad_copy(ctx, x, g, n, pad, zp))


def padded_geometry(ctx: LowerCtx, g):
    """A scratch image holding every window of g, and g's geometry on it
    (one image, no padding)."""
    hp = (g.oh - 1) * g.strides[0] + (g.kh - 1) * g.dilations[0] + 1
    wp = (g.ow - 1) * g.strides[1] + (g.kw - 1) * g.dilations[1] + 1
    buf = ctx.scratch_buffer("padded", "int8", (hp, wp, g.depth))
    return buf, replace(g, n=1, h=hp, w=wp, pad_top=0, pad_left=0)


def pad_copy(ctx: LowerCtx, x: TensorRef, g, n: Expr, pad: Buffer, zp: int) -> Stmt:
    """pad = image n of x where it lies, the zero point around it."""

    def one(py, px, c) -> Stmt:
        iy, ix = add(py, Const(-g.pad_top)), add(px, Const(-g.pad_left))
        at = flat_index((py, px, c), pad.shape)
        return seq(Store(pad, at, Const(zp, DType("int8"))),
                   If(both(in_range(iy, g.h, True, True), in_range(ix, g.w, True, True)),
                      Store(pad, at, Load(x.buffer, flat_index((n, iy, ix, c), x.shape)))))
    return loop(ctx, "py", pad.shape[0], lambda py: loop(ctx, "px", pad.shape[1], lambda px: loop(
        ctx, "c", g.depth, lambda c: one(py, px, c))))


def _interior(g, axis: int) -> tuple[int, int]:
    """The outputs along an axis whose windows lie in the image: [first, end)."""
    spans = [(r.start, r.end) for r in g.spans(axis) if not r.guarded]
    return spans[0] if spans else (0, 0)


def _outside(oy: Expr, ox: Expr, ys: tuple[int, int], xs: tuple[int, int]) -> Expr:
    """Whether pixel (oy, ox) lies outside the interior rectangle."""
    tests = [Bin("<", oy, Const(ys[0])), Bin(">=", oy, Const(ys[1])),
             Bin("<", ox, Const(xs[0])), Bin(">=", ox, Const(xs[1]))]
    out = tests[0]
    for t in tests[1:]:
        out = Bin("or", out, t)
    return out


def both(a: Expr | None, b: Expr | None) -> Expr | None:
    return a if b is None else b if a is None else Bin("and", a, b)


def fits_depthwise(target: Target, g, weights: np.ndarray, on=dsp_target) -> bool:
    """A depthwise convolution with multiplier 1 over at least a word of
    channels, int8 weights."""
    return (on(target) and g.depth == 1 and g.per_group == 1
            and g.groups >= 4 and fits_int8(weights))


def depthwise(ctx: LowerCtx, x: TensorRef, g, weights: np.ndarray, bias: np.ndarray, zp: int,
              finish: Callable[[tuple, Expr], Stmt], words: "Words | None" = None,
              unroll_border: bool = False, exact: bool = False, widened: bool = False) -> Stmt:
    """A depthwise convolution (fits_depthwise): per output pixel, 4
    channels at a time in registers over the taps (given wider `words`
    with a depthwise group, Helium's, first words.lanes at a time: its
    mve.depthwise_group); the channels past the last word one at a time.
    weights [C, KH, KW, 1]; finish as conv_nest's. `exact`: the output
    cut into regions of constant tap bounds (windows.window_regions), so
    a border pixel visits only its taps inside the image, untested and
    unrolled like the interior's (the zero point is in the bias: a tap
    outside adds nothing), instead of every tap tested. `widened`: with
    PAIRS and whole words of channels, the filter's words widened when
    compiling (widened_pairs: no SXTB16 of a weight word, two int32 loads
    the compiler pairs into one LDRD)."""
    channels = g.groups
    hwc = np.transpose(weights[..., 0], (1, 2, 0)).astype(np.int8)
    folded = folded_bias(bias, zp, weights.reshape(channels, -1))
    # made only if a remainder reads it
    start = lazy_table(ctx, "bias", folded)
    lanes = words.lanes if words is not None and words.depthwise is not None else 0
    # 4 channels a word: SMLABB / SMLATT's, or the words' own lane by lane
    quads = words if words is not None and words.lanewise is not None else PAIRS
    widened = (widened and quads is PAIRS and not lanes and channels % 4 == 0
                and wide_weights())
    wbuf = ctx.param("filter", widened_pairs(hwc) if widened else hwc)
    group = words.depthwise(ctx, x, wbuf, folded, zp, g.kw, finish) if lanes else None

    # In the interior a small window's taps are unrolled (immediate load
    # offsets, no loop counters: a kws 3x3 depthwise layer 511 k -> 484 k
    # instructions); the border's copies keep their loops, for code size,
    # unless `unroll_border` (rv32's plain loads: 541 k -> 460 k).
    unroll = g.kh * g.kw <= UNROLL_TAPS
    # exact regions (not with a depthwise group, whose bias is its own)
    cut = window_regions(g.window(), (g.h, g.w)) if exact and not lanes else None
    start_of = _region_bias(ctx, g, weights, bias, zp, cut, start)

    def taps(n, oy, ox, region, tap: Callable[[Expr, Expr, Expr, Expr | None], Stmt]) -> Stmt:
        """tap(ky, kx, input offset, in-image test or None) over the
        region's taps (each axis' run: its [lo, hi), its tests)."""
        ry, rx = region
        tests = (ry.tests, rx.tests)
        inside = not any(tests[0]) and not any(tests[1])
        each = unrolled_loop(ctx) if unroll and (inside or unroll_border) else loop

        def row(ky):
            iy = window_pos(oy, ky, g.strides[0], g.pad_top, g.dilations[0])
            return each(ctx, "kx", rx.hi - rx.lo, lambda kx: col(ky, kx, iy), start=rx.lo)

        def col(ky, kx, iy):
            ix = window_pos(ox, kx, g.strides[1], g.pad_left, g.dilations[1])
            cond = both(in_range(iy, g.h, *tests[0]), in_range(ix, g.w, *tests[1]))
            return tap(ky, kx, flat_index((n, iy, ix, Const(0)), x.shape), cond)
        return each(ctx, "ky", ry.hi - ry.lo, row, start=ry.lo)

    def quad(n, oy, ox, region, c: Expr) -> Stmt:
        accs = [ctx.fresh("acc") for _ in range(4)]
        parts: list[Stmt] = [Decl(a, start_of(region)(add(c, Const(k))))
                             for k, a in enumerate(accs)]
        if widened:     # two int32 per word of four channels
            half = ctx.fresh("c_half")
            parts.append(Decl(half, Bin(">>", c, Const(1))))
        # the window's first input word, once: each tap a constant offset from
        # it (GCC otherwise keeps a spilled index per tap)
        first = ctx.fresh("x_at")
        iy0 = window_pos(oy, Const(0), g.strides[0], g.pad_top, 1)
        ix0 = window_pos(ox, Const(0), g.strides[1], g.pad_left, 1)
        parts.append(Decl(first, add(flat_index((n, iy0, ix0, Const(0)), x.shape), c)))
        row_step = g.dilations[0] * x.shape[2] * x.shape[3]
        col_step = g.dilations[1] * x.shape[3]

        def tap(ky, kx, at, cond) -> Stmt:
            body: list[Stmt] = []
            x_at = add(first, add(mul(ky, Const(row_step)), mul(kx, Const(col_step))))
            xs = quads.read(ctx, body, "x", Load(x.buffer, x_at, 4), cond, zp)
            t = add(mul(ky, Const(g.kw)), kx)
            if widened:
                ws = _widened_word(ctx, body, wbuf, add(mul(t, Const(channels // 2)), half))
            else:
                ws = quads.read(ctx, body, "w", Load(wbuf, add(mul(t, Const(channels)), c), 4))
            quads.lanewise(body, xs, ws, accs)
            return seq(*body)
        parts.append(taps(n, oy, ox, region, tap))
        parts += [finish((n, oy, ox, add(c, Const(k))), a) for k, a in enumerate(accs)]
        return seq(*parts)

    def single(n, oy, ox, region, c: Expr) -> Stmt:
        acc = ctx.fresh("acc")

        def tap(ky, kx, at, cond) -> Stmt:
            v = ctx.fresh("xv")
            value = _i32(Load(x.buffer, add(at, c)))
            read = ([Decl(v, value)] if cond is None else
                    [Decl(v, Const(zp)), If(cond, Assign(v, value))])
            w = _i32(Load(wbuf, add(mul(add(mul(ky, Const(g.kw)), kx), Const(channels)), c)))
            return seq(*read, Assign(acc, Bin("+", acc, Bin("*", v, w))))
        return seq(Decl(acc, start_of(region)(c)), taps(n, oy, ox, region, tap),
                   finish((n, oy, ox, c), acc))

    def pixel(n, oy, ox, region) -> Stmt:
        wide = channels - channels % lanes if lanes else 0
        whole = channels - channels % 4
        parts = [loop(ctx, "c", wide // lanes, lambda c: group(n, oy, ox, region, c, taps),
                      step=lanes)] if wide else []
        if whole > wide:
            parts.append(loop(ctx, "c", (whole - wide) // 4, lambda c: quad(n, oy, ox, region, c),
                              start=wide, step=4))
        if channels % 4:
            parts.append(loop(ctx, "c", channels % 4,
                              lambda c: single(n, oy, ox, region, add(c, Const(whole)))))
        return seq(*parts)

    return plane_walk(ctx, g, lambda n, oy, oxs, region: pixel(n, oy, oxs[0], region),
                      only=cut)


def _region_bias(ctx: LowerCtx, g, weights: np.ndarray, bias: np.ndarray, zp: int, cut,
                 start: Callable[[Expr], Expr]) -> Callable:
    """region -> (channel -> the accumulator's start): the bias with the
    zero point folded over the taps the region visits (bias - zp sum w over
    its window), where exact regions skip taps outside the image; else
    `start` (folded over every tap: a tap outside reads zero points). One
    table [window, channel] for all the border windows. Its accumulators
    stay within acc_bound: |bias - zp sum_in w| + 128 sum_in |w| is at most
    |bias - zp sum w| + |zp| sum_out |w| + 128 sum_in |w|, |zp| <= 128."""
    full = (0, g.kh, 0, g.kw)
    windows = sorted({(ry.lo, ry.hi, rx.lo, rx.hi) for ry, rx in cut or ()
                      if not ry.guarded and not rx.guarded} - {full})
    if not windows:
        return lambda region: start
    w = weights[..., 0].astype(np.int64)                     # [C, KH, KW]
    channels = len(w)
    rows = [folded_bias(bias, zp, w[:, a:b, c:d].reshape(channels, -1))
            for a, b, c, d in windows]
    at = lazy_table(ctx, "region_bias", np.concatenate(rows).astype(np.int32))

    def start_of(region) -> Callable[[Expr], Expr]:
        key = tuple(v for r in region for v in (r.lo, r.hi))
        if key not in windows:
            return start
        k = windows.index(key)
        return lambda c: at(add(Const(k * channels), c))
    return start_of


def acc_bound(w: np.ndarray, bias: np.ndarray, zp: int) -> np.ndarray:
    """max |accumulator| per channel of a kernel reading raw int8 inputs
    against weights w [channels, terms] from the folded bias (bias - zp sum w)."""
    w = np.asarray(w, np.int64)
    return np.abs(np.asarray(bias, np.int64) - zp * w.sum(axis=1)) + 128 * np.abs(w).sum(axis=1)


def unrolled_loop(ctx: LowerCtx):
    """loop(), its For marked to be unrolled."""

    def each(ctx_: LowerCtx, name: str, extent: int, body: Callable[[Expr], Stmt],
             start: int = 0) -> Stmt:
        s = loop(ctx_, name, extent, body, start=start)
        return replace(s, kind=ForKind.UNROLLED) if isinstance(s, For) else s
    return each


def _halves(ctx: LowerCtx, body: list, name: str, word: Expr, cond: Expr | None = None,
            fill: int = 0) -> tuple[Var, Var]:
    """Append to body the word (`fill` in all four bytes where cond is
    false: a tap outside the image) and its even and odd halves."""
    v = ctx.fresh(name, INT8X4)
    if cond is None:
        body.append(Decl(v, word))
    else:
        body += [Decl(v, Broadcast(Const(fill, DType("int8")), 4)), If(cond, Assign(v, word))]
    even, odd = ctx.fresh(name + "_even"), ctx.fresh(name + "_odd")
    body += [Decl(even, sxtb16(v)), Decl(odd, sxtb16(v, odd=True))]
    return even, odd


def _dot_words(body: list, xs, ws, accs) -> None:
    """accs[i][k] += the four products of input word i and weight word k."""
    for xh, row in zip(xs, accs):
        for wh, acc in zip(ws, row):
            body += [Assign(acc, smlad(xh[0], wh[0], acc)), Assign(acc, smlad(xh[1], wh[1], acc))]


def _smla_lanes(body: list, x, w, accs) -> None:
    """accs[k] += byte k of word x times byte k of word w (x, w as halves):
    channels c, c+2 from the even bytes, c+1, c+3 from the odd."""
    (xe, xo), (we, wo) = x, w
    for acc, (xh, wh, high) in zip(accs, ((xe, we, False), (xo, wo, False),
                                          (xe, we, True), (xo, wo, True))):
        body.append(Assign(acc, smla_half(xh, wh, acc, high)))


@dataclass(frozen=True)
class Words:
    """How a kernel reads its depth and multiplies it: `lanes` int8 at a
    time, read(ctx, body, name, load, cond=None, fill=0) appends the
    reading of `load` (`fill` in every lane where cond is false) to body and
    gives the operand; dot(body, xs, ws, accs) adds to accs[i][k] the
    products of input operand i and weight operand k. depthwise(ctx, x,
    wbuf, bias, zp, kw, finish), where the words have one: the group of
    `lanes` channels depthwise runs first (mve.depthwise_group's form).
    lanewise(body, x, w, accs), where the words have one: accs[k] += lane k
    of x times lane k of w, for a depthwise convolution's 4 channels a word
    (words of 4 only)."""
    lanes: int
    read: Callable
    dot: Callable
    depthwise: Callable | None = None
    lanewise: Callable | None = None


# SMLAD's: a word of 4 split into its even and odd int16 pairs
PAIRS = Words(4, _halves, _dot_words, lanewise=_smla_lanes)


def _int16_halves(ctx: LowerCtx, body: list, name: str, load: Load, cond: Expr | None = None,
                  fill: int = 0) -> tuple[Expr, Expr]:
    """INT16's operands of a step of 4 depths: int16 activations as the two
    words they are in memory, (x0, x1) and (x2, x3) (zero where cond is
    false: TFLite's int16 zero point); the weights' int8 word, stored as
    (w0, w2, w1, w3) (int16_word_order), split by SXTB16 into (w0, w1) and
    (w2, w3) as PAIRS splits it."""
    if load.buffer.dtype.scalar != "int16":
        return _halves(ctx, body, name, load, cond, fill)
    pair = pack_pairs(Load(load.buffer, load.index, 4))
    words = [lane(pair, j) for j in (0, 1)]
    vs = (ctx.fresh(name + "_01"), ctx.fresh(name + "_23"))
    if cond is None:
        body += [Decl(v, word) for v, word in zip(vs, words)]
    else:
        body += [Decl(v, Const(fill * 0x10001)) for v in vs]
        body.append(If(cond, seq(*(Assign(v, word) for v, word in zip(vs, words)))))
    return vs


def _int16_lanes(body: list, x, w, accs) -> None:
    """accs[k] += channel k of x times channel k of w (INT16's operands:
    (x0, x1), (x2, x3) and (w0, w1), (w2, w3)): SMLABB / SMLATT."""
    for k, acc in enumerate(accs):
        body.append(Assign(acc, smla_half(x[k // 2], w[k // 2], acc, k % 2 == 1)))


# int16 activations (the 16x8 kernels): two SMLADs per 4 depths, the
# activation words loaded as they are; depthwise, SMLABB / SMLATT
INT16 = Words(4, _int16_halves, _dot_words, lanewise=_int16_lanes)


def int16_word_order(w: np.ndarray, axis: int = 1) -> np.ndarray:
    """Weights with each whole word's depths along `axis` (the depth of
    [channels, depth]; a depthwise filter's channels) (0, 1, 2, 3) stored as
    (0, 2, 1, 3): SXTB16's even and odd halves of it are then the pairs
    (w0, w1) and (w2, w3) that INT16's activation words meet."""
    w = np.moveaxis(np.array(w, copy=True), axis, -1)
    whole = w.shape[-1] - w.shape[-1] % 4
    words = w[..., :whole].reshape(*w.shape[:-1], -1, 4)
    w[..., :whole] = words[..., [0, 2, 1, 3]].reshape(*w.shape[:-1], whole)
    return np.moveaxis(w, -1, axis)


def _widened_word(ctx: LowerCtx, body: list, wbuf: Buffer, at: Expr) -> tuple[Var, Var]:
    """Append to body the loads of a widened word (widened_pairs: its even
    and odd halves, int32 at `at` and at + 1) and give them."""
    halves = (ctx.fresh("w_even"), ctx.fresh("w_odd"))
    body += [Decl(halves[0], Load(wbuf, at)), Decl(halves[1], Load(wbuf, add(at, Const(1))))]
    return halves


def _halved(d: Expr, width: int) -> Expr:
    """d * width / 2 for a byte offset d of whole words (a multiple of 4):
    where word d of a tile `width` channels wide lies among widened int32."""
    if width % 2 == 0:
        return mul(d, Const(width // 2))
    return Bin(">>", mul(d, Const(width)), Const(1))


def widened_pairs(words: np.ndarray) -> np.ndarray:
    """int8 words (4 bytes each) as the int32 pairs SXTB16 makes of them:
    bytes 0 and 2 as the int16 halves of the first, bytes 1 and 3 of the
    second (low half first)."""
    b = words.reshape(-1, 4).astype(np.int64)
    even = (b[:, 0] & 0xFFFF) | ((b[:, 2] & 0xFFFF) << 16)
    odd = (b[:, 1] & 0xFFFF) | ((b[:, 3] & 0xFFFF) << 16)
    return np.stack([even, odd], axis=1).reshape(-1).astype(np.uint32).view(np.int32)


def folded_bias(bias: np.ndarray, zp: int, w: np.ndarray) -> np.ndarray:
    from aot.ops.quant.qmath import wrap_int32
    return wrap_int32(bias - zp * w.sum(axis=1)).astype(np.int32)


def interleave(w: np.ndarray, k: int, word: int = 4) -> np.ndarray:
    """The weights [channels, depth] as the tiles read them: per tile of k
    channels, its words (`word` depths) channel after channel for each word
    position, then the depth's last depth % word values channel by channel;
    the channels past the last whole tile as they are (tiles of one)."""
    channels, depth = w.shape
    whole = depth - depth % word
    full = channels - channels % k
    if full == 0:
        return w.reshape(-1)
    tiles = w[:full].reshape(full // k, k, depth)
    words = tiles[:, :, :whole].reshape(full // k, k, whole // word, word).transpose(0, 2, 1, 3)
    body = np.concatenate([words.reshape(full // k, -1),
                           tiles[:, :, whole:].reshape(full // k, -1)], axis=1)
    return np.concatenate([body.reshape(-1), w[full:].reshape(-1)])


def _i32(e: Expr) -> Expr:
    return to_i32(e)

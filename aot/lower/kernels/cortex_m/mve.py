"""int8 kernels for Cortex-M cores with Helium (MVE, the "mve" ISA feature:
Cortex-M55): the accumulator strategy of the int8 convolutions and fully
connected layers whose input channels come 16 at a time.

The input channels lie along a 16-lane int8 vector; one VMLADAVA.S8
(aot_dot16, aot/isa/arm_mve.py) multiplies 16 inputs by 16 weights and
adds the products into a scalar int32 accumulator, so each accumulator is
one output (pixel, channel) and requantizes from its register as the DSP
kernels' do. Register tiles, no im2col buffer:

- 1x1 convolutions (stride 1, no padding) and fully connected layers: a
  product of pixel rows, 1 row x 4 output channels: five vector loads and
  four VMLADAVA per 64 MACs (2 rows x 4 took 3% more instructions on kws:
  GCC spills the six vectors).
- other convolutions of one group: 2 neighbouring pixels x 4 output
  channels over each tap's 16-channel vectors, read where they lie; a tap
  outside the image reads a vector of zero points (its products cancel in
  the folded bias, as in aot/lower/kernels/cortex_m/dsp.py).
- other convolutions of one group whose depth is not 16k (first layers,
  vww's 1x1 over 8 channels) over 4k output channels: the output channels
  along the vectors, 16 per pixel in four int32 x 4 accumulators; per
  term one input byte times four weight vectors (VLDRB.S32, VMUL, VADD).
- depthwise (multiplier 1): 16 channels per pixel in four int32 x 4
  accumulators; per tap each 4 channels of input and weights read widened
  to int32 lanes (VLDRB.S32, aot_widen4), multiplied and added (VMUL,
  VADD): 3 instructions per 4 MACs where SMLABB/SMLATT take about 10. The
  channels left over take int8_dsp's quads and singles.

Only depths that are a multiple of 16 take the dot products (no tail
predication). The weights are interleaved per tile (int8_dsp.interleave),
the zero point folded into the bias. Scalar accumulators are requantized
as the DSP kernels' (TfliteRequant32 where the bounds prove it exact);
the int32 x 4 accumulators of the other two kernels go to conv_nest's
finish whole, 4 channels at once, which requantizes them as vectors
(TfliteVecRequant: VQRDMULH, then VQADD and VRSHL,
tests/targets/test_int8_mve.py proves them on the M55 against TFLite's
rules) and stores them narrowed. The outer-product
convolution walks its output plane through the one walk
(conv_walk.plane_walk), the padded image copy its per-image prologue.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

import numpy as np

from aot.isa.arm_mve import INT32X4, INT8X16, dot16, widen4
from aot.ir.tir import (Assign, Bin, Broadcast, Buffer, Const, Decl, DType, Expr, If, Load, Stmt,
                        Var, add, flat_index, mul, seq)
from aot.lower.kernels.cortex_m import dsp as int8_dsp
from aot.lower.arith.loops import loop
from aot.lower.kernels.conv_walk import plane_walk
from aot.lower.arith.quant import to_i32
from aot.lower.kernels.windows import in_range, window_pos
from aot.lower.rules import LowerCtx, TensorRef
from aot.targets import Target

LANES = 16
# rows (pixels) x output channels per register tile of a matrix product
TILE = (1, 4)


def mve_target(target: Target) -> bool:
    """Whether the target is a scalar core with Helium beside the DSP extension."""
    return int8_dsp.dsp_target(target) and target.has("mve")


def _vector(ctx: LowerCtx, body: list, name: str, load: Expr, cond: Expr | None = None,
            fill: int = 0) -> Var:
    """Append to body a 16-lane vector read by `load`, `fill` in every lane
    where cond is false (a tap outside the image)."""
    v = ctx.fresh(name, INT8X16)
    if cond is None:
        body.append(Decl(v, load))
    else:
        body += [Decl(v, Broadcast(Const(fill, DType("int8")), LANES)), If(cond, Assign(v, load))]
    return v


def _dot_vectors(body: list, xs: list, ws: list, accs) -> None:
    """accs[i][k] += the 16 products of input vector i and weight vector k."""
    body += [Assign(acc, dot16(acc, xv, wv)) for xv, row in zip(xs, accs)
             for wv, acc in zip(ws, row)]


def fits_outer(target: Target, g, weights: np.ndarray) -> bool:
    """A convolution of one group over 4k output channels whose depth the
    dot products do not take (not 16k), int8 weights."""
    return (mve_target(target) and g.groups == 1 and g.depth % LANES != 0
            and g.cout % 4 == 0 and int8_dsp.fits_int8(weights))


def outer(ctx: LowerCtx, x: TensorRef, g, weights: np.ndarray, bias: np.ndarray, zp: int,
          finish: Callable[[tuple, Expr], Stmt]) -> Stmt:
    """A convolution (fits_outer) with the output channels along the
    vectors: per output pixel 16 channels (4 where fewer are left) in int32
    x 4 accumulators, each term (ky, kx, ci) one input value times the
    term's weights of those channels, widened (the weights interleaved per
    tile, term after term: the unrolled terms' loads take immediate offsets). A
    term outside the image reads the zero point (cancelled by the folded
    bias); when fewer than 3/4 of the windows lie inside (kws's first
    layer), each image is first copied into int8_dsp's scratch padded with
    zero points, so no term is tested. weights [C_out, KH, KW, D]; finish
    as conv_nest's, called with int32 x 4 accumulators (idx[3]: the first
    of their 4 channels)."""
    terms = g.kh * g.kw * g.depth
    w = weights.reshape(g.cout, terms)
    full = g.cout - g.cout % LANES
    wt = ctx.param("filter", np.concatenate([int8_dsp.interleave(w[:full], LANES, 1),
                                             int8_dsp.interleave(w[full:], 4, 1)]).astype(np.int8))
    vbias = ctx.param("bias", int8_dsp.folded_bias(bias, zp, weights.reshape(g.cout, -1)))
    unroll = g.kw * g.depth <= LANES       # a window row's terms, unrolled in the interior

    def pixels(src: Buffer, shape: tuple, padded: bool, gi):
        """A pixel of the output from src (image n, or its one padded copy)."""
        def tile(n, oy, ox, tests, c0: Expr, vectors: int) -> Stmt:
            n_src = Const(0) if padded else n
            accs = [ctx.fresh("acc", INT32X4) for _ in range(vectors)]
            parts: list[Stmt] = [Decl(a, Load(vbias, add(c0, Const(4 * j)), 4))
                                 for j, a in enumerate(accs)]
            inside = not any(tests[0]) and not any(tests[1])
            each = int8_dsp.unrolled_loop(ctx) if unroll and inside else loop

            def term(ky, kx, ci) -> Stmt:
                iy = window_pos(oy, ky, gi.strides[0], gi.pad_top, gi.dilations[0])
                ix = window_pos(ox, kx, gi.strides[1], gi.pad_left, gi.dilations[1])
                cond = int8_dsp.both(in_range(iy, gi.h, *tests[0]),
                                      in_range(ix, gi.w, *tests[1]))
                v = ctx.fresh("xv")
                value = to_i32(Load(src, flat_index((n_src, iy, ix, ci), shape)))
                body: list[Stmt] = ([Decl(v, value)] if cond is None else
                                    [Decl(v, Const(zp)), If(cond, Assign(v, value))])
                t = add(mul(add(mul(ky, Const(gi.kw)), kx), Const(gi.depth)), ci)
                w_at = add(mul(c0, Const(terms)), mul(t, Const(4 * vectors)))
                body += [Assign(a, Bin("+", a, Bin("*", widen4(Load(wt, add(w_at, Const(4 * j)),
                                                                    4)), Broadcast(v, 4))))
                         for j, a in enumerate(accs)]
                return seq(*body)
            parts.append(loop(ctx, "ky", gi.kh, lambda ky: each(ctx, "kx", gi.kw, lambda kx: each(
                ctx, "ci", gi.depth, lambda ci: term(ky, kx, ci)))))
            parts += [finish((n, oy, ox, add(c0, Const(4 * j))), a) for j, a in enumerate(accs)]
            return seq(*parts)

        def pixel(n, oy, oxs, region) -> Stmt:
            tests = tuple(r.tests for r in region)
            return int8_dsp.tiled(ctx, "oc", gi.cout // 4, LANES // 4, lambda q, width: tile(
                n, oy, oxs[0], tests, mul(q, Const(4)), width))
        return pixel

    if int8_dsp.mostly_inside(g):
        return plane_walk(ctx, g, pixels(x.buffer, tuple(x.shape), False, g))
    pad, gp = int8_dsp.padded_geometry(ctx, g)
    # every image copied in turn into the one padded scratch image
    return plane_walk(ctx, replace(gp, n=g.n), pixels(pad, (1, *pad.shape), True, gp),
                      prologue=lambda n: int8_dsp.pad_copy(ctx, x, g, n, pad, zp))


def fits_fc(target: Target, w: np.ndarray) -> bool:
    return mve_target(target) and int8_dsp.fits_fc(target, w) and w.shape[1] % LANES == 0


def depthwise_group(ctx: LowerCtx, x: TensorRef, wbuf: Buffer, bias: np.ndarray, zp: int,
                    kw: int, finish: Callable[[tuple, Expr], Stmt]) -> Callable[..., Stmt]:
    """group(n, oy, ox, region, c, taps): channels c..c+15 of an output pixel
    of int8_dsp.depthwise (whose filter `wbuf` is [KH, KW, C] and whose
    taps(n, oy, ox, region, tap) calls tap(ky, kx, input offset, in-image
    test or None) over the region's taps); bias: the folded int32 bias; finish
    called with int32 x 4 accumulators (idx[3]: the first of their 4
    channels)."""
    channels = len(bias)
    vbias = ctx.param("bias", bias.astype(np.int32))

    def group(n, oy, ox, region, c: Expr, taps) -> Stmt:
        accs = [ctx.fresh("acc", INT32X4) for _ in range(LANES // 4)]
        parts: list[Stmt] = [Decl(a, Load(vbias, add(c, Const(4 * j)), 4))
                             for j, a in enumerate(accs)]

        def tap(ky, kx, at, cond) -> Stmt:
            xs = [ctx.fresh("x", INT32X4) for _ in accs]
            reads = [widen4(Load(x.buffer, add(at, add(c, Const(4 * j))), 4))
                     for j in range(len(accs))]
            if cond is None:
                body: list[Stmt] = [Decl(v, r) for v, r in zip(xs, reads)]
            else:           # outside the image: zero points, cancelled by the folded bias
                body = [Decl(v, Broadcast(Const(zp), 4)) for v in xs]
                body.append(If(cond, seq(*(Assign(v, r) for v, r in zip(xs, reads)))))
            w_at = add(mul(add(mul(ky, Const(kw)), kx), Const(channels)), c)
            for j, (acc, v) in enumerate(zip(accs, xs)):
                w = widen4(Load(wbuf, add(w_at, Const(4 * j)), 4))
                body.append(Assign(acc, Bin("+", acc, Bin("*", v, w))))
            return seq(*body)
        parts.append(taps(n, oy, ox, region, tap))
        parts += [finish((n, oy, ox, add(c, Const(4 * j))), acc) for j, acc in enumerate(accs)]
        return seq(*parts)
    return group


# Helium's words: the DSP kernels' nests (int8_dsp.matmul, dense, depthwise)
# run in these where the schedule names an mve_ kernel
VECTORS = int8_dsp.Words(LANES, _vector, _dot_vectors, depthwise_group)

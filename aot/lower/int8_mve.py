"""int8 kernels for Cortex-M cores with Helium (MVE, the "mve" ISA feature:
Cortex-M55): the accumulator strategy of the int8 convolutions and fully
connected layers whose input channels come 16 at a time.

The input channels lie along a 16-lane int8 vector; one VMLADAVA.S8
(aot_dot16, aot/codegen/arm_mve.py) multiplies 16 inputs by 16 weights and
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
  the folded bias, as in aot/lower/int8_dsp.py).
- depthwise (multiplier 1): 16 channels per pixel in four int32 x 4
  accumulators; per tap each 4 channels of input and weights read widened
  to int32 lanes (VLDRB.S32, aot_widen4), multiplied and added (VMUL,
  VADD): 3 instructions per 4 MACs where SMLABB/SMLATT take about 10. The
  channels left over take int8_dsp's quads and singles.

Only depths that are a multiple of 16 take these kernels (no tail
predication: the layers of the shared models have 16k channels or fewer
than 16); the others keep the DSP kernels, which the M55 also has. The
weights are interleaved per tile in 16-byte words (int8_dsp._interleave),
the zero point folded into the bias, and requantization is int8_dsp's
(Requant32 where the bounds prove it exact).
"""
from __future__ import annotations

from functools import partial
from typing import Callable

import numpy as np

from aot.codegen.arm_mve import INT32X4, INT8X16, dot16, widen4
from aot.codegen.intrinsics import lane
from aot.ir.tir import (Assign, Bin, Broadcast, Buffer, Const, Decl, DType, Expr, If, Load, Stmt,
                        Var, add, mul, seq)
from aot.lower import int8_dsp
from aot.lower.rules import LowerCtx, TensorRef

LANES = 16
# rows (pixels) x output channels per register tile of a matrix product
TILE = (1, 4)


def mve_target(ctx: LowerCtx) -> bool:
    """Whether the target is a scalar core with Helium beside the DSP extension."""
    return int8_dsp.dsp_target(ctx) and ctx.target.has("mve")


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


VECTORS = int8_dsp.Words(LANES, _vector, _dot_vectors)


def conv_kernel(ctx: LowerCtx, x: TensorRef, g, weights: np.ndarray) -> Callable | None:
    """The MVE kernel for this convolution (called as int8_dsp's kernels are),
    or None: the DSP kernels then."""
    if not mve_target(ctx) or g.depth % LANES:
        return None
    if int8_dsp.fits_pointwise(ctx, x, g, weights):
        return partial(int8_dsp.pointwise, words=VECTORS, tile=TILE)
    if int8_dsp.fits_dense(ctx, x, g, weights):
        return partial(int8_dsp.dense, words=VECTORS, tile=(2, TILE[1]))
    return None


def fits_fc(ctx: LowerCtx, x: TensorRef, w: np.ndarray) -> bool:
    return mve_target(ctx) and int8_dsp.fits_fc(ctx, x, w) and w.shape[1] % LANES == 0


def depthwise_group(ctx: LowerCtx, x: TensorRef, wbuf: Buffer, bias: np.ndarray, zp: int,
                    kw: int, finish: Callable[[tuple, Expr], Stmt]) -> Callable[..., Stmt]:
    """group(n, oy, ox, tests, c, taps): channels c..c+15 of an output pixel
    of int8_dsp.depthwise (whose filter `wbuf` is [KH, KW, C] and whose
    taps(n, oy, ox, tests, tap) calls tap(ky, kx, input offset, in-image
    test or None) over the window); bias: the folded int32 bias."""
    channels = len(bias)
    vbias = ctx.param("bias", bias.astype(np.int32))

    def group(n, oy, ox, tests, c: Expr, taps) -> Stmt:
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
        parts.append(taps(n, oy, ox, tests, tap))
        parts += [finish((n, oy, ox, add(c, Const(4 * j + k))), lane(acc, k))
                  for j, acc in enumerate(accs) for k in range(4)]
        return seq(*parts)
    return group

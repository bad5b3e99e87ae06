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

from aot.codegen.arm_mve import INT8X16, dot16
from aot.ir.tir import Assign, Broadcast, Const, Decl, DType, Expr, If, Var
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

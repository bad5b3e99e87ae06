"""Cortex-M int8 kernels: dsp.py (the DSP extension's SMLAD family, CMSIS-NN's
layout), mve.py (Helium) and scalar.py (cores without SIMD: the DSP nests
byte by byte), and the tables that name them. The schedule
(aot/lower/schedule/conv.py: int8_conv_schedule, int8_fc_schedule) answers
with a name, the rule calls what it names here. Helium's variants of the
DSP nests are those nests given mve.VECTORS, wired here, so dsp.py never
imports mve.py."""
from __future__ import annotations

from functools import partial

from aot.lower.kernels.cortex_m import dsp, mve, scalar

# The convolution kernels, each called as kernel(ctx, x, g, weights, bias,
# zp, finish) with int8_conv.conv_nest's finish.
CONV = {
    "mve_pointwise": partial(dsp.pointwise, words=mve.VECTORS, tile=mve.TILE, gather=True),
    "mve_dense": partial(dsp.dense, words=mve.VECTORS, tile=(2, mve.TILE[1]), gather=True),
    "mve_outer": mve.outer,
    "mve_depthwise": partial(dsp.depthwise, words=mve.VECTORS),
    "dsp_pointwise": partial(dsp.pointwise, walk=dsp.DSP_POINTWISE),
    "dsp_depthwise": partial(dsp.depthwise, exact=True, widened=True),
    "dsp_dense": partial(dsp.dense, walk=dsp.DSP_DENSE),
    "dsp_rows": partial(dsp.window_rows, walk=dsp.DSP_ROWS, tile=(1, 8), pairs=False),
    "scalar_pointwise": partial(dsp.pointwise, words=scalar.BYTES),
    "scalar_depthwise": partial(dsp.depthwise, words=scalar.BYTES),
    "scalar_dense": partial(dsp.dense, words=scalar.BYTES),
    "v6m_pointwise": partial(dsp.pointwise, words=scalar.BYTES, tile=scalar.V6M_TILE),
    "v6m_dense": partial(dsp.dense, words=scalar.BYTES, tile=scalar.V6M_TILE),
    "scalar_rows": partial(dsp.window_rows, words=scalar.BYTES),
}
# The fully connected kernels, called as dsp.fully_connected is.
FC = {
    "mve_fc": partial(dsp.fully_connected, words=mve.VECTORS, tile=mve.TILE),
    "dsp_fc": partial(dsp.fully_connected, walk=dsp.DSP_FC),
    "scalar_fc": partial(dsp.fully_connected, words=scalar.BYTES),
}

"""Value rule for BatchNormalization (inference): (x - mean) * factor + B
per channel, the factor scale / sqrt(var + eps) folded at compile time
when scale and var are constants, in either layout (the channel axis is
the vector axis in NHWC, one splatted value per element in NCHW).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from aot.ir.tir import Bin, Buffer, Expr, Load, dt
from aot.lower.arith.loops import float_only, shared_param, splat
from aot.lower.rules.elementwise import const_like, math_call
from aot.lower.rules import LowerCtx, TensorRef, value_rule
from aot.ops import nn as ref


def _channel_axis(ctx: LowerCtx, rank: int) -> int:
    return rank - 1 if ref.layout_of(ctx) == "NHWC" else 1


def _per_channel(ref_: Expr | TensorRef, c: Expr, lanes: int, along: bool) -> Expr:
    """A per-channel vector's value at channel c: `lanes` consecutive channels
    when the vector axis is the channel axis (`along`), else one splatted."""
    if isinstance(ref_, Buffer):
        return Load(ref_, c, lanes) if along else splat(Load(ref_, c), lanes)
    return ref_.load((c,), lanes) if along else splat(ref_.load((c,)), lanes)


@value_rule("BatchNormalization")
def batchnorm(ctx: LowerCtx, ins: Sequence[TensorRef], idx: tuple, lanes: int) -> Expr:
    """(x - mean) * scale / sqrt(var + eps) + B, the factor folded at compile
    time when scale and var are constants (as the reference computes it)."""
    if int(ctx.attrs.get("training_mode", 0)):
        raise ctx.unsupported("BatchNormalization in training mode")
    x, scale, bias, mean, var = ins[:5]
    d = dt(x.type.dtype)
    float_only(ctx, d)
    axis = _channel_axis(ctx, len(x.shape))
    along = axis == len(x.shape) - 1
    c = idx[axis]
    eps = float(ctx.attrs.get("epsilon", 1e-5))
    if scale.value is not None and var.value is not None:
        f = (scale.value / np.sqrt(var.value.astype(np.float32) + np.float32(eps)))
        factor = _per_channel(shared_param(ctx, "bn_factor", f.astype(d.scalar)), c, lanes, along)
    else:
        v = _per_channel(var, c, lanes, along)
        factor = Bin("/", _per_channel(scale, c, lanes, along),
                     math_call("sqrt", Bin("+", v, const_like(eps, v))))
    centered = Bin("-", x.load(idx, lanes), _per_channel(mean, c, lanes, along))
    return Bin("+", Bin("*", centered, factor), _per_channel(bias, c, lanes, along))

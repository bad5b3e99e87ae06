"""Value rule for ONNX Resize: per output element, a gather of the nearest
source element or a weighted sum of the interpolation taps (separable: one
weight per axis and tap), from compile-time tables of tap indices and
weights per output position that aot/ops/nn.py's own coordinate and tap
functions compute, so that the kernel agrees with the reference.
"""
from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np

from aot.ir.tir import Bin, Const, DType, Expr, Load, Select, add, dt, mul
from aot.lower.arith.loops import float_only, shared_param, splat
from aot.lower.rules.elementwise import const_like
from aot.lower.rules import LowerCtx, TensorRef, value_rule
from aot.ops import nn as ref


def _resize_axes(ctx: LowerCtx, x: TensorRef, ins) -> list[tuple[int, np.ndarray, np.ndarray,
                                                                   np.ndarray | None]]:
    """Per resized axis: (axis, tap indices [out, n], tap weights [out, n],
    outside-the-crop mask [out] or None), computed by the reference's own
    coordinate and tap functions so that the kernel agrees with it."""
    def const(i):
        if i >= len(ins) or ins[i] is None:
            return None
        if ins[i].value is None:
            raise ctx.unsupported(f"Resize input {i} computed at run time")
        return ins[i].value
    call = ctx                  # what the reference helpers read: attrs and node
    values = [None, const(1), const(2), const(3)]
    plan = ref.resize_plan(call, x.shape, ref.resize_optional(call, 2, values),
                            ref.resize_optional(call, 3, values))
    roi = ref.resize_optional(call, 1, values)
    rank = len(x.shape)
    ctm = ctx.attrs.get("coordinate_transformation_mode", "half_pixel")
    if roi is not None:
        full = np.array([0.0] * rank + [1.0] * rank)
        for i, a in enumerate(plan.axes):
            full[a], full[rank + a] = roi[i], roi[len(plan.axes) + i]
        roi = full
    axes = []
    for a in plan.axes:
        axis_roi = None if roi is None else (roi[a], roi[rank + a])
        if plan.out[a] == x.shape[a] and plan.scales[a] == 1.0 and (
                ctm != "tf_crop_and_resize" or axis_roi == (0.0, 1.0)):
            continue
        coords, outside = ref.source_coords(ctm, plan.out[a], x.shape[a], plan.scales[a],
                                            axis_roi)
        idx, w = ref.resize_taps(call, coords, x.shape[a], plan.scales[a])
        axes.append((a, idx, w, outside if outside is not None and outside.any() else None))
    return axes


@value_rule("Resize")
def resize(ctx: LowerCtx, ins: Sequence[TensorRef], idx: tuple, lanes: int) -> Expr:
    """A gather of the nearest source element, or a weighted sum of the
    interpolation taps (separable: one weight per axis and tap), from
    compile-time tables of tap indices and weights per output position."""
    x = ins[0]
    mode = ctx.attrs.get("mode", "nearest")
    d = dt(x.type.dtype)
    if mode != "nearest":
        float_only(ctx, d)
    axes = _resize_axes(ctx, x, ins)
    if lanes > 1 and any(a == len(x.shape) - 1 for a, *_ in axes):
        raise ctx.unsupported("vectorized Resize along its resized last axis")
    if mode == "nearest":
        at = list(idx)
        for a, taps, w, _ in axes:
            pick = taps[np.arange(len(taps)), np.argmax(w, axis=1)].astype(np.int32)
            at[a] = Load(shared_param(ctx, "resize_index", pick), idx[a])
        value = x.load(tuple(at), lanes)
    else:
        value = _interpolate(ctx, x, axes, idx, lanes, d)
    for a, _, _, outside in axes:
        if outside is not None:
            mask = shared_param(ctx, "resize_outside", outside.astype(np.uint8))
            fill = const_like(float(ctx.attrs.get("extrapolation_value", 0.0)), value)
            value = Select(splat(Bin("!=", Load(mask, idx[a]), Const(0, dt("uint8"))), lanes),
                           fill, value)
    return value


# Interpolation terms per output element, at most: one per combination of
# the axes' taps (cubic over 3 axes: 64), summed in one expression; linear
# over a rank-10 tensor made 1,024 and a RecursionError, rank 20 a million.
MAX_RESIZE_TERMS = 64


def _interpolate(ctx, x: TensorRef, axes, idx, lanes: int, d: DType) -> Expr:
    keeps = [np.flatnonzero(np.any(w != 0, axis=0)) for _, _, w, _ in axes]
    terms = int(np.prod([len(k) for k in keeps], dtype=np.float64))
    if terms > MAX_RESIZE_TERMS:
        raise ctx.unsupported(f"interpolating over {len(axes)} axes at once ({terms} taps per "
                              f"output element, more than {MAX_RESIZE_TERMS})")
    tables = []
    for (a, taps, w, _), keep in zip(axes, keeps):    # taps that always weigh 0 go
        n = taps.shape[1]
        tables.append((a, n, keep, shared_param(ctx, "resize_index", taps.astype(np.int32)),
                       shared_param(ctx, "resize_weight", w.astype(d.scalar))))
    total = None
    for combo in itertools.product(*(keep for _, _, keep, _, _ in tables)):
        at = list(idx)
        weight = None
        for (a, n, _, itab, wtab), t in zip(tables, combo):
            pos = add(mul(idx[a], Const(n)), Const(int(t)))
            at[a] = Load(itab, pos)
            weight = Load(wtab, pos) if weight is None else Bin("*", weight, Load(wtab, pos))
        term = Bin("*", x.load(tuple(at), lanes), splat(weight, lanes))
        total = term if total is None else Bin("+", total, term)
    return total if total is not None else x.load(idx, lanes)

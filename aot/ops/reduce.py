"""Reductions with ONNX semantics (opset 18 form: axes is an optional input),
and ArgMax/ArgMin.
"""
from __future__ import annotations

import warnings

import numpy as np

from aot.ir.graph import TensorType
from aot.ops.elementwise import arity, cast_array
from aot.ops.registry import Call, Layout, Pattern, Sig, Sink, register


def reduce_axes(sig: Sig) -> tuple[int, ...] | None:
    """The reduced axes; () means none (noop), None means all."""
    rank = len(sig.in_types[0].shape)
    axes = [int(a) for a in sig.const(1).reshape(-1)] if sig.has(1) else []
    if not axes:
        return () if sig.attrs.get("noop_with_empty_axes", 0) else None
    for a in axes:
        if not -rank <= a < rank:
            raise sig.fail(f"axis {a} is out of range for rank {rank}")
    norm = tuple(sorted({a % rank for a in axes}))
    if len(norm) != len(axes):
        raise sig.fail(f"repeated axes {axes}")
    return norm


def _out_shape(shape, axes, keepdims: bool) -> tuple[int, ...]:
    axes = range(len(shape)) if axes is None else axes
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _infer_reduce(sig: Sig):
    x = sig.in_types[0]
    axes = reduce_axes(sig)
    if axes == ():
        return [TensorType(x.shape, x.dtype)]
    return [TensorType(_out_shape(x.shape, axes, bool(sig.attrs.get("keepdims", 1))), x.dtype)]


def _log_sum_exp(x, axis, keepdims):
    m = np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0)
    s = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return s if keepdims else np.squeeze(s, axis=axis)


def _lowest(dtype):
    if dtype == np.bool_:
        return False
    return -np.inf if np.issubdtype(dtype, np.floating) else np.iinfo(dtype).min


def _highest(dtype):
    if dtype == np.bool_:
        return True
    return np.inf if np.issubdtype(dtype, np.floating) else np.iinfo(dtype).max


# Each: (x as float64 or the input dtype, axis tuple, keepdims) -> array.
REDUCERS = {
    # an empty reduction gives the identity: -inf / the dtype's minimum for Max
    "ReduceMax": lambda x, ax, k: np.max(x, axis=ax, keepdims=k, initial=_lowest(x.dtype)),
    "ReduceMin": lambda x, ax, k: np.min(x, axis=ax, keepdims=k, initial=_highest(x.dtype)),
    "ReduceSum": lambda x, ax, k: np.sum(x, axis=ax, keepdims=k),
    "ReduceMean": lambda x, ax, k: np.mean(x, axis=ax, keepdims=k),
    "ReduceProd": lambda x, ax, k: np.prod(x, axis=ax, keepdims=k),
    "ReduceL1": lambda x, ax, k: np.sum(np.abs(x), axis=ax, keepdims=k),
    "ReduceL2": lambda x, ax, k: np.sqrt(np.sum(np.square(x), axis=ax, keepdims=k)),
    "ReduceSumSquare": lambda x, ax, k: np.sum(np.square(x), axis=ax, keepdims=k),
    "ReduceLogSum": lambda x, ax, k: np.log(np.sum(x, axis=ax, keepdims=k)),
    "ReduceLogSumExp": _log_sum_exp,
}


# Reductions whose math is real-valued even on integers (results truncate back).
REAL_VALUED = ("ReduceMean", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp")


def _finish(out: np.ndarray, dtype: str) -> np.ndarray:
    """A real-valued result truncated back to an integer type as Cast does."""
    if out.dtype.kind == "f" and np.dtype(dtype).kind in "iu":
        return cast_array(out, dtype)
    return out.astype(dtype)


def _make_reduce(fn, real: bool):
    def ref(call: Call, args):
        x = args[0]
        sig = Sig(call.node, call.in_types, tuple(args))
        axes = reduce_axes(sig)
        if axes == ():
            return [x]
        if axes is None:
            axes = tuple(range(x.ndim))
        # Accumulate floats in float64 so float32 sums match a careful runtime.
        acc = x.astype(np.float64) if real or np.issubdtype(x.dtype, np.floating) else x
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # mean of an empty set: nan
            out = fn(acc, axes, bool(call.attrs.get("keepdims", 1)))
            return [_finish(np.asarray(out), call.out_types[0].dtype)]
    return ref


for _name, _fn in REDUCERS.items():
    register(_name, infer=arity(1, 2)(_infer_reduce),
             pattern=Pattern.REDUCE, layout=Layout(sink=Sink.REDUCE))(
        _make_reduce(_fn, _name in REAL_VALUED))


def _infer_arg(sig: Sig):
    x = sig.in_types[0]
    rank = len(x.shape)
    axis = sig.attrs.get("axis", 0)
    if not -rank <= axis < rank:
        raise sig.fail(f"axis {axis} is out of range for rank {rank}")
    return [TensorType(_out_shape(x.shape, (axis % rank,), bool(sig.attrs.get("keepdims", 1))),
                       "int64")]


def _make_arg(fn):
    def ref(call: Call, args):
        x = args[0]
        axis = call.attrs.get("axis", 0) % x.ndim
        if x.shape[axis] == 0:
            raise Sig(call.node, call.in_types, ()).fail("arg-reduction over an empty axis")
        if call.attrs.get("select_last_index", 0):
            # the last occurrence: search the reversed axis, map back
            idx = x.shape[axis] - 1 - fn(np.flip(x, axis), axis=axis)
        else:
            idx = fn(x, axis=axis)
        if call.attrs.get("keepdims", 1):
            idx = np.expand_dims(idx, axis)
        return [idx.astype(np.int64)]
    return ref


register("ArgMax", infer=arity(1, 1)(_infer_arg), pattern=Pattern.REDUCE)(_make_arg(np.argmax))
register("ArgMin", infer=arity(1, 1)(_infer_arg), pattern=Pattern.REDUCE)(_make_arg(np.argmin))

"""Ops whose addresses come from a tensor's values: GatherElements, GatherND,
ScatterElements, ScatterND, and OneHot (which compares instead).

Indices keep their ONNX meaning: -s <= i < s along an axis of size s, a
negative one counting from the end. Out of range, the reference refuses
(as ONNX Runtime does), type inference refuses constant indices, and the
generated code returns AOT_ERR_INDEX (aot/lower/arith/bounds.py). OneHot is the
exception the spec makes: an index outside [-depth, depth) gives a row of
off values, so no index is ever refused there.

Scatters apply their updates in order, so of two updates to one element
the later wins (reduction "none"), as ONNX Runtime does.
"""
from __future__ import annotations

import numpy as np

from aot.errors import UnsupportedError, node_label
from aot.ir.graph import TensorType
from aot.ops.elementwise import arity
from aot.ops.registry import Call, Pattern, Sig, register

INDEX_DTYPES = ("int32", "int64")
REDUCTIONS = ("none", "add", "mul", "max", "min")


def _indices_type(sig: Sig, i: int) -> TensorType:
    t = sig.in_types[i]
    if t.dtype not in INDEX_DTYPES:
        raise sig.fail(f"indices must be int32 or int64, got {t.dtype}")
    return t


def _axis(sig: Sig, rank: int, default: int = 0, extra: int = 0) -> int:
    axis = int(sig.attrs.get("axis", default))
    if not -(rank + extra) <= axis < rank + extra:
        raise sig.fail(f"axis {axis} is out of range for rank {rank}")
    return axis % (rank + extra)


def check_indices(sig: Sig, i: int, dims, components: bool = False) -> None:
    """Constant indices: refused at compile time when out of range."""
    v = sig.values[i] if i < len(sig.values) else None
    if v is None or not v.size:
        return
    v = np.asarray(v, np.int64)
    if components:
        for j, d in enumerate(dims):
            _in_range(sig, v[..., j], d)
    else:
        _in_range(sig, v, dims[0])


def _in_range(sig: Sig, v: np.ndarray, dim: int) -> None:
    if v.size and (v.min() < -dim or v.max() >= dim):
        raise sig.fail(f"index out of range for dimension {dim}")


def _fail(call: Call, msg: str):
    return Sig(call.node, call.in_types, ()).fail(msg)


def wrapped_indices(call: Call, v: np.ndarray, dim: int) -> np.ndarray:
    """Indices checked and made non-negative, as int64."""
    v = np.asarray(v, np.int64)
    if v.size and (v.min() < -dim or v.max() >= dim):
        raise _fail(call, f"index out of range for dimension {dim}")
    return np.where(v < 0, v + dim, v)


def reduction(sig_or_call) -> str:
    r = sig_or_call.attrs.get("reduction", "none")
    if r not in REDUCTIONS:
        raise UnsupportedError(f"{node_label(sig_or_call.node)}: reduction '{r}' is not "
                               f"supported (known: {', '.join(REDUCTIONS)})")
    return r


def _same_data_type(sig: Sig, a: int, b: int, what: str) -> None:
    ta, tb = sig.in_types[a], sig.in_types[b]
    if ta.dtype != tb.dtype:
        raise sig.fail(f"{what} must have the data's type {ta.dtype}, got {tb.dtype}")
    if ta.quant != tb.quant:
        raise UnsupportedError(f"{node_label(sig.node)}: {what} quantized unlike the data "
                               "are not supported")


def _per_tensor_quant(sig: Sig, data: TensorType):
    """Gathered elements keep their quantization; per-channel scales would
    have to follow each element's channel."""
    if data.quant is not None and data.quant.axis is not None:
        raise UnsupportedError(f"{node_label(sig.node)}: per-channel quantized data "
                               f"(axis {data.quant.axis}) is not supported")
    return data.quant


def _elementwise_fits(sig: Sig, data: TensorType, idx: TensorType, axis: int) -> None:
    """GatherElements/ScatterElements: same rank, and off the axis the
    indices' positions are the data's positions, so they must fit."""
    if len(idx.shape) != len(data.shape):
        raise sig.fail(f"indices of rank {len(idx.shape)} for data of rank {len(data.shape)}")
    for a, (i, d) in enumerate(zip(idx.shape, data.shape)):
        if a != axis and i > d:
            raise sig.fail(f"indices {list(idx.shape)} exceed the data {list(data.shape)} "
                           f"on axis {a}")


# ---- GatherElements ----------------------------------------------------------------

@arity(2, 2)
def _infer_gather_elements(sig: Sig):
    data, idx = sig.in_types[0], _indices_type(sig, 1)
    if not data.shape:
        raise sig.fail("data must have rank >= 1")
    axis = _axis(sig, len(data.shape))
    _elementwise_fits(sig, data, idx, axis)
    check_indices(sig, 1, (data.shape[axis],))
    return [TensorType(idx.shape, data.dtype, _per_tensor_quant(sig, data))]


@register("GatherElements", infer=_infer_gather_elements, pattern=Pattern.INJECTIVE)
def _gather_elements(call: Call, args):
    data, idx = args
    axis = int(call.attrs.get("axis", 0)) % data.ndim
    idx = wrapped_indices(call, idx, data.shape[axis])
    rest = [np.arange(n).reshape([-1 if k == a else 1 for k in range(data.ndim)])
            for a, n in enumerate(idx.shape)]
    rest[axis] = idx
    return [np.require(data[tuple(rest)], requirements="C")]


# ---- GatherND ------------------------------------------------------------------------

def _nd_parts(sig: Sig):
    data, idx = sig.in_types[0], _indices_type(sig, 1)
    b = int(sig.attrs.get("batch_dims", 0))
    if not idx.shape:
        raise sig.fail("indices must have rank >= 1")
    k = idx.shape[-1]
    r = len(data.shape)
    if not 0 <= b < min(r, len(idx.shape)):
        raise sig.fail(f"batch_dims {b} must be below the ranks of data ({r}) and "
                       f"indices ({len(idx.shape)})")
    if tuple(idx.shape[:b]) != tuple(data.shape[:b]):
        raise sig.fail(f"the batch dimensions of indices {list(idx.shape)} and data "
                       f"{list(data.shape)} differ")
    if not 1 <= k <= r - b:
        raise sig.fail(f"index tuples of {k} for data of rank {r} with batch_dims {b}")
    return data, idx, b, k


@arity(2, 2)
def _infer_gather_nd(sig: Sig):
    data, idx, b, k = _nd_parts(sig)
    check_indices(sig, 1, data.shape[b:b + k], components=True)
    shape = tuple(idx.shape[:-1]) + tuple(data.shape[b + k:])
    return [TensorType(shape, data.dtype, _per_tensor_quant(sig, data))]


@register("GatherND", infer=_infer_gather_nd, pattern=Pattern.INJECTIVE)
def _gather_nd(call: Call, args):
    data, idx = args
    b, k = int(call.attrs.get("batch_dims", 0)), idx.shape[-1]
    pos = [wrapped_indices(call, idx[..., j], d) for j, d in enumerate(data.shape[b:b + k])]
    batch = [np.arange(n).reshape([-1 if a == m else 1 for a in range(idx.ndim - 1)])
             for m, n in enumerate(idx.shape[:b])]
    return [np.require(data[tuple(batch + pos)], requirements="C")]


# ---- ScatterElements / ScatterND -------------------------------------------------------

_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


@arity(3, 3)
def _infer_scatter_elements(sig: Sig):
    data, idx, upd = sig.in_types[0], _indices_type(sig, 1), sig.in_types[2]
    reduction(sig)
    if not data.shape:
        raise sig.fail("data must have rank >= 1")
    axis = _axis(sig, len(data.shape))
    _elementwise_fits(sig, data, idx, axis)
    if tuple(upd.shape) != tuple(idx.shape):
        raise sig.fail(f"updates {list(upd.shape)} must have the shape of the indices "
                       f"{list(idx.shape)}")
    _same_data_type(sig, 0, 2, "updates")
    check_indices(sig, 1, (data.shape[axis],))
    return [TensorType(data.shape, data.dtype, data.quant)]


def _scatter(call: Call, out: np.ndarray, targets, updates: np.ndarray) -> np.ndarray:
    """out with each update applied in order at its target index tuple."""
    fn = _UFUNCS.get(reduction(call))
    for at, u in zip(targets, updates):
        out[at] = u if fn is None else fn(out[at], u)
    return out


@register("ScatterElements", infer=_infer_scatter_elements, pattern=Pattern.OPAQUE)
def _scatter_elements(call: Call, args):
    data, idx, upd = args
    axis = int(call.attrs.get("axis", 0)) % data.ndim
    pos = wrapped_indices(call, idx, data.shape[axis])
    targets = []
    for p in np.ndindex(*idx.shape):
        at = list(p)
        at[axis] = int(pos[p])
        targets.append(tuple(at))
    with np.errstate(all="ignore"):
        return [_scatter(call, data.copy(), targets, [upd[p] for p in np.ndindex(*idx.shape)])]


@arity(3, 3)
def _infer_scatter_nd(sig: Sig):
    data, idx, upd = sig.in_types[0], _indices_type(sig, 1), sig.in_types[2]
    reduction(sig)
    if not idx.shape or not 1 <= idx.shape[-1] <= len(data.shape):
        raise sig.fail(f"index tuples {list(idx.shape)} for data of rank {len(data.shape)}")
    k = idx.shape[-1]
    want = tuple(idx.shape[:-1]) + tuple(data.shape[k:])
    if tuple(upd.shape) != want:
        raise sig.fail(f"updates {list(upd.shape)} must be {list(want)}")
    _same_data_type(sig, 0, 2, "updates")
    check_indices(sig, 1, data.shape[:k], components=True)
    return [TensorType(data.shape, data.dtype, data.quant)]


@register("ScatterND", infer=_infer_scatter_nd, pattern=Pattern.OPAQUE)
def _scatter_nd(call: Call, args):
    data, idx, upd = args
    k = idx.shape[-1]
    pos = np.stack([wrapped_indices(call, idx[..., j], d)
                    for j, d in enumerate(data.shape[:k])], -1)
    rows = pos.reshape(-1, k)
    with np.errstate(all="ignore"):
        return [_scatter(call, data.copy(), [tuple(int(v) for v in r) for r in rows],
                         upd.reshape((rows.shape[0],) + data.shape[k:]))]


# ---- OneHot ------------------------------------------------------------------------

@arity(3, 3)
def _infer_one_hot(sig: Sig):
    idx, values = sig.in_types[0], sig.in_types[2]
    if idx.dtype in ("bool", "uint64"):
        raise UnsupportedError(f"{node_label(sig.node)}: indices of type {idx.dtype} are not "
                               "supported")
    depth = np.asarray(sig.const(1))
    if depth.size != 1:
        raise sig.fail(f"depth must be a scalar, got shape {list(depth.shape)}")
    d = float(depth.reshape(()))
    if not np.isfinite(d) or not 1 <= d <= 2**31 - 1:
        raise sig.fail(f"depth {d:g} must be a positive integer")
    if values.size != 2:
        raise sig.fail(f"values must hold [off, on], got shape {list(values.shape)}")
    axis = _axis(sig, len(idx.shape), default=-1, extra=1)
    shape = list(idx.shape)
    shape.insert(axis, int(d))
    return [TensorType(tuple(shape), values.dtype)]


def one_hot_indices(idx: np.ndarray, depth: int) -> np.ndarray:
    """Indices as int64; float ones truncated toward zero, as ONNX Runtime
    casts them, and those that cannot be in range (NaN, inf, huge) set to
    `depth`, which matches no position."""
    if idx.dtype.kind != "f":
        return idx.astype(np.int64)
    with np.errstate(invalid="ignore"):
        valid = (idx > -depth - 1) & (idx < depth)
    return np.where(valid, np.trunc(np.where(valid, idx, 0)), depth).astype(np.int64)


@register("OneHot", infer=_infer_one_hot, pattern=Pattern.INJECTIVE)
def _one_hot(call: Call, args):
    idx, depth, values = args
    d = int(float(np.asarray(depth).reshape(())))
    axis = int(call.attrs.get("axis", -1)) % (idx.ndim + 1)
    v = one_hot_indices(np.asarray(idx), d)
    v = np.where(v < 0, v + d, v)           # outside [-d, d): matches no position
    shape = [1] * (idx.ndim + 1)
    shape[axis] = d
    hot = np.expand_dims(v, axis) == np.arange(d).reshape(shape)
    off, on = np.asarray(values).reshape(-1)
    return [np.where(hot, on, off).astype(values.dtype)]

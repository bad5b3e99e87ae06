"""Data-movement and shape ops with ONNX semantics (latest opset).

Shape arguments (Reshape's shape, Slice's starts, ...) are inputs that must be
known at compile time: `sig.const(i)` reads them. Ops that only move data copy
the input's `quant` onto the output (docs/ops.md), so quantized models use
them directly.
"""
from __future__ import annotations

import numpy as np

from aot.errors import UnsupportedError, node_label
from aot.ops.attrs import ints, normalize_axes, normalize_axis
from aot.ops.elementwise import arity
from aot.ir.graph import Quant, TensorType
from aot.ops.registry import Call, Layout, Pattern, Sig, Sink, register


def _moved(sig: Sig, shape, axis_map=None, pick=None) -> TensorType:
    """Output type of a data-movement op: the input's dtype and quant.

    Per-channel quantization follows its channel axis: axis_map(axis) gives
    the axis in the output (None: gone), pick(values) the channels kept.
    """
    t = sig.in_types[0]
    shape = tuple(int(d) for d in shape)
    q = t.quant
    if q is None or q.axis is None:
        return TensorType(shape, t.dtype, q)
    axis = axis_map(q.axis) if axis_map else q.axis
    scale, zp = np.asarray(q.scale), np.asarray(q.zero_point)
    if pick is not None:
        scale, zp = pick(scale), pick(zp)
    if axis is not None and axis < len(shape) and shape[axis] == scale.size:
        return TensorType(shape, t.dtype, Quant(tuple(float(v) for v in scale.reshape(-1)),
                                               tuple(int(v) for v in zp.reshape(-1)), axis))
    if np.unique(scale).size == 1 and np.unique(zp).size == 1:  # one channel left
        return TensorType(shape, t.dtype, Quant((float(scale.flat[0]),), (int(zp.flat[0]),)))
    raise UnsupportedError(f"{node_label(sig.node)}: cannot carry per-channel quantization "
                           f"(axis {q.axis}) of {t} to shape {list(shape)}")


def _reshape_axis(in_shape, out_shape):
    """Where a channel axis lands after a reshape that keeps it whole, else None."""
    def fn(axis: int):
        prefix = int(np.prod(in_shape[:axis], dtype=np.int64))
        for k, d in enumerate(out_shape):
            if int(np.prod(out_shape[:k], dtype=np.int64)) == prefix and d == in_shape[axis]:
                return k
        return None
    return fn


# ---- Reshape / Flatten / Squeeze / Unsqueeze / Transpose -----------------------------

def _infer_reshape(sig: Sig):
    x = sig.in_types[0]
    spec = ints(sig.const(1))
    allowzero = sig.attrs.get("allowzero", 0)
    out = []
    for i, d in enumerate(spec):
        if d == 0 and not allowzero:
            if i >= len(x.shape):
                raise sig.fail(f"shape {spec}: 0 at {i} copies a dimension the input lacks")
            d = x.shape[i]
        out.append(d)
    if out.count(-1) > 1:
        raise sig.fail(f"shape {spec} has more than one -1")
    if any(d < -1 for d in out):
        raise sig.fail(f"shape {spec} has a negative dimension")
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        if known == 0 or x.size % known:
            raise sig.fail(f"cannot reshape {list(x.shape)} to {spec}")
        out[out.index(-1)] = x.size // known
    if int(np.prod(out, dtype=np.int64)) != x.size:
        raise sig.fail(f"cannot reshape {list(x.shape)} ({x.size} elements) to {spec}")
    return [_moved(sig, out, _reshape_axis(x.shape, out))]


@register("Reshape", infer=arity(2, 2)(_infer_reshape), pattern=Pattern.INJECTIVE)
def _reshape(call: Call, args):
    return [args[0].reshape(call.out_types[0].shape)]


def _infer_flatten(sig: Sig):
    x = sig.in_types[0]
    rank = len(x.shape)
    axis = sig.attrs.get("axis", 1)
    if not -rank <= axis <= rank:
        raise sig.fail(f"axis {axis} is out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    out = (int(np.prod(x.shape[:axis], dtype=np.int64)),
           int(np.prod(x.shape[axis:], dtype=np.int64)))
    return [_moved(sig, out, _reshape_axis(x.shape, out))]


@register("Flatten", infer=arity(1, 1)(_infer_flatten), pattern=Pattern.INJECTIVE)
def _flatten(call: Call, args):
    return [args[0].reshape(call.out_types[0].shape)]


def _infer_squeeze(sig: Sig):
    x = sig.in_types[0]
    if sig.has(1):
        axes = normalize_axes(sig, ints(sig.const(1)), len(x.shape))
        bad = [a for a in axes if x.shape[a] != 1]
        if bad:
            raise sig.fail(f"cannot squeeze axis {bad[0]} of shape {list(x.shape)} (not 1)")
    else:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    return [_moved(sig, [d for i, d in enumerate(x.shape) if i not in axes],
                   lambda a: None if a in axes else a - sum(r < a for r in axes))]


def _infer_unsqueeze(sig: Sig):
    x = sig.in_types[0]
    raw = ints(sig.const(1))
    rank = len(x.shape) + len(raw)
    axes = normalize_axes(sig, raw, rank)
    dims = iter(x.shape)
    kept = [i for i in range(rank) if i not in axes]
    return [_moved(sig, [1 if i in axes else next(dims) for i in range(rank)],
                   lambda a: kept[a])]


for _name, _infer in (("Squeeze", arity(1, 2)(_infer_squeeze)),
                     ("Unsqueeze", arity(2, 2)(_infer_unsqueeze))):
    register(_name, infer=_infer, pattern=Pattern.INJECTIVE)(_flatten)


def _perm(sig_or_call, rank: int) -> list[int]:
    perm = sig_or_call.attrs.get("perm")
    return list(range(rank))[::-1] if perm is None else [int(p) for p in perm]


def _infer_transpose(sig: Sig):
    x = sig.in_types[0]
    perm = _perm(sig, len(x.shape))
    if sorted(perm) != list(range(len(x.shape))):
        raise sig.fail(f"perm {perm} is not a permutation of {len(x.shape)} axes")
    return [_moved(sig, [x.shape[p] for p in perm], perm.index)]


@register("Transpose", infer=arity(1, 1)(_infer_transpose), pattern=Pattern.INJECTIVE)
def _transpose(call: Call, args):
    return [np.require(np.transpose(args[0], _perm(call, args[0].ndim)), requirements="C")]


# ---- Concat / Split ---------------------------------------------------------------

def infer_concat(sig: Sig):
    types = [t for t in sig.in_types if t is not None]
    first = types[0]
    rank = len(first.shape)
    if rank == 0:
        raise sig.fail("cannot concatenate scalars")
    axis = normalize_axis(sig, sig.attrs.get("axis", 0), rank)
    for t in types:
        if t.dtype != first.dtype or len(t.shape) != rank:
            raise sig.fail(f"inputs {first} and {t} cannot be concatenated")
        if any(a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != axis):
            raise sig.fail(f"shapes {list(first.shape)} and {list(t.shape)} differ "
                           f"outside axis {axis}")
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in types)
    quant = first.quant if all(t.quant == first.quant for t in types) else None
    if first.quant is not None and first.quant.axis == axis and all(
            t.quant is not None and t.quant.axis == axis for t in types):
        # per-channel along the concatenated axis: the channels' params concatenate
        quant = Quant(sum((t.quant.scale for t in types), ()),
                      sum((t.quant.zero_point for t in types), ()), axis)
    elif quant is not None and quant.axis is not None:
        quant = _moved(sig, shape).quant  # the channel axis is another one: unchanged
    return [TensorType(tuple(shape), first.dtype, quant)]


@register("Concat", infer=arity(1)(infer_concat), pattern=Pattern.INJECTIVE,
          layout=Layout(sink=Sink.CONCAT))
def _concat(call: Call, args):
    parts = [a for a in args if a is not None]
    return [np.concatenate(parts, axis=call.attrs.get("axis", 0))]


def _split_sizes(sig: Sig) -> tuple[int, list[int]]:
    x = sig.in_types[0]
    axis = normalize_axis(sig, sig.attrs.get("axis", 0), len(x.shape))
    dim = x.shape[axis]
    if sig.has(1):
        sizes = ints(sig.const(1))
        if sum(sizes) != dim or len(sizes) != len(sig.node.outputs) or min(sizes) < 0:
            raise sig.fail(f"split {sizes} does not divide dimension {dim} "
                           f"into {len(sig.node.outputs)} outputs")
        return axis, sizes
    n = sig.attrs.get("num_outputs", len(sig.node.outputs))
    if n != len(sig.node.outputs):
        raise sig.fail(f"num_outputs={n} but the node has {len(sig.node.outputs)} outputs")
    chunk = -(-dim // n)  # ceil: the last chunk may be smaller (opset 18)
    sizes = [min(chunk, dim - i * chunk) for i in range(n)]
    if min(sizes) <= 0:
        raise sig.fail(f"cannot split dimension {dim} into {n} outputs")
    return axis, sizes


def _infer_split(sig: Sig):
    x = sig.in_types[0]
    axis, sizes = _split_sizes(sig)
    outs, start = [], 0
    for size in sizes:
        shape = list(x.shape)
        shape[axis] = size
        part = slice(start, start + size)
        on_axis = x.quant is not None and x.quant.axis == axis
        outs.append(_moved(sig, shape, pick=(lambda v, p=part: v[p]) if on_axis else None))
        start += size
    return outs


@register("Split", infer=arity(1, 2)(_infer_split), pattern=Pattern.INJECTIVE,
          layout=Layout(sink=Sink.AXIS))
def _split(call: Call, args):
    x = args[0]
    axis = call.attrs.get("axis", 0) % x.ndim
    bounds = np.cumsum([t.shape[axis] for t in call.out_types])[:-1]
    return [np.require(p, requirements="C") for p in np.split(x, bounds, axis=axis)]


# ---- Slice / Gather ------------------------------------------------------------------

def slice_params(sig: Sig) -> tuple[slice, ...]:
    """ONNX Slice's starts/ends/axes/steps as numpy slices, clamped per the spec."""
    x = sig.in_types[0]
    rank = len(x.shape)
    starts, ends = ints(sig.const(1)), ints(sig.const(2))
    axes = ints(sig.const(3)) if sig.has(3) else list(range(len(starts)))
    steps = ints(sig.const(4)) if sig.has(4) else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise sig.fail("starts, ends, axes and steps differ in length")
    index = [slice(None)] * rank
    for start, end, axis, step in zip(starts, ends, normalize_axes(sig, axes, rank), steps):
        dim = x.shape[axis]
        if step == 0:
            raise sig.fail("slice step 0")
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        index[axis] = slice(start, None if end < 0 else end, step)
    return tuple(index)


def _infer_slice(sig: Sig):
    x = sig.in_types[0]
    index = slice_params(sig)
    shape = [len(range(*s.indices(d))) for s, d in zip(index, x.shape)]
    on_axis = x.quant is not None and x.quant.axis is not None
    return [_moved(sig, shape, pick=(lambda v: v[index[x.quant.axis]]) if on_axis else None)]


@register("Slice", infer=arity(3, 5)(_infer_slice), pattern=Pattern.INJECTIVE,
          layout=Layout(sink=Sink.SLICE))
def _slice(call: Call, args):
    sig = Sig(call.node, call.in_types, tuple(args))
    return [np.require(args[0][slice_params(sig)], requirements="C")]


def _infer_gather(sig: Sig):
    x, idx = sig.in_types[0], sig.in_types[1]
    if idx.dtype not in ("int32", "int64"):
        raise sig.fail(f"indices must be int32 or int64, got {idx.dtype}")
    axis = normalize_axis(sig, sig.attrs.get("axis", 0), len(x.shape))
    if sig.values[1] is not None:
        v = sig.values[1]
        if v.size and (v.min() < -x.shape[axis] or v.max() >= x.shape[axis]):
            raise sig.fail(f"index out of range for dimension {x.shape[axis]}")
    shape = x.shape[:axis] + idx.shape + x.shape[axis + 1:]
    if x.quant is None or x.quant.axis is None:
        return [_moved(sig, shape)]
    qa = x.quant.axis
    if qa != axis:
        return [_moved(sig, shape, lambda a: a if a < axis else a - 1 + len(idx.shape))]
    picked = ints(sig.const(1))  # channels gathered: their scales go along
    return [_moved(sig, shape, lambda a: a if len(idx.shape) == 1 else None,
                   lambda v: v[picked])]


@register("Gather", infer=arity(2, 2)(_infer_gather), pattern=Pattern.INJECTIVE)
def _gather(call: Call, args):
    x, idx = args
    axis = call.attrs.get("axis", 0) % x.ndim
    dim = x.shape[axis]
    idx = np.where(idx < 0, idx + dim, idx)
    if idx.size and (idx.min() < 0 or idx.max() >= dim):
        raise call_fail(call, f"index out of range for dimension {dim}")
    return [np.take(x, idx, axis=axis)]


def call_fail(call: Call, msg: str):
    return Sig(call.node, call.in_types, ()).fail(msg)


# ---- Expand / Tile / Pad ----------------------------------------------------------

def _broadcast(sig: Sig, a, b):
    try:
        return tuple(int(d) for d in np.broadcast_shapes(tuple(a), tuple(b)))
    except ValueError:
        raise sig.fail(f"cannot broadcast {list(a)} with {list(b)}") from None


@arity(2, 2)
def _infer_expand(sig: Sig):
    return [_moved(sig, _broadcast(sig, sig.in_types[0].shape, ints(sig.const(1))))]


# Its shape input is no broadcast operand: a Transpose stays before it.
@register("Expand", infer=_infer_expand, pattern=Pattern.BROADCAST, layout=Layout(sink=Sink.STAY))
def _expand(call: Call, args):
    return [np.require(np.broadcast_to(args[0], call.out_types[0].shape), requirements="C")]


def _infer_tile(sig: Sig):
    x = sig.in_types[0]
    reps = ints(sig.const(1))
    if len(reps) != len(x.shape) or min(reps, default=1) < 0:
        raise sig.fail(f"repeats {reps} do not match rank {len(x.shape)}")
    return [_moved(sig, [d * r for d, r in zip(x.shape, reps)])]


@register("Tile", infer=arity(2, 2)(_infer_tile), pattern=Pattern.INJECTIVE)
def _tile(call: Call, args):
    return [np.tile(args[0], ints(args[1]))]


PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


def pad_widths(sig: Sig) -> list[tuple[int, int]]:
    x = sig.in_types[0]
    rank = len(x.shape)
    pads = ints(sig.const(1))
    axes = normalize_axes(sig, ints(sig.const(3)), rank) if sig.has(3) else list(range(rank))
    if len(pads) != 2 * len(axes):
        raise sig.fail(f"pads {pads} should have 2 x {len(axes)} entries")
    widths = [(0, 0)] * rank
    for i, a in enumerate(axes):
        widths[a] = (pads[i], pads[i + len(axes)])
    mode = sig.attrs.get("mode", "constant")
    if mode not in PAD_MODES:
        raise sig.fail(f"unknown pad mode {mode!r}")
    for (b, e), d in zip(widths, x.shape):
        if d + b + e <= 0 or (mode == "reflect" and max(b, e) >= d):
            raise sig.fail(f"pads {pads} ({mode}) do not fit shape {list(x.shape)}")
    return widths


@arity(2, 4)
def _infer_pad(sig: Sig):
    widths = pad_widths(sig)
    return [_moved(sig, [d + b + e for d, (b, e) in zip(sig.in_types[0].shape, widths)],
                   pick=_no_channel_pads(sig, widths))]


def _no_channel_pads(sig: Sig, widths):
    q = sig.in_types[0].quant
    if q is not None and q.axis is not None and widths[q.axis] != (0, 0):
        raise UnsupportedError(f"{node_label(sig.node)}: padding the channel axis of a "
                               "per-channel quantized tensor")
    return None


@register("Pad", infer=_infer_pad, pattern=Pattern.INJECTIVE, layout=Layout(sink=Sink.PAD))
def _pad(call: Call, args):
    x = args[0]
    if x.ndim == 0:
        return [x.copy()]
    widths = pad_widths(Sig(call.node, call.in_types, tuple(args)))
    # Negative pads crop first; np.pad then adds the positive part.
    x = x[tuple(slice(max(-b, 0), d - max(-e, 0)) for (b, e), d in zip(widths, x.shape))]
    pos = [(max(b, 0), max(e, 0)) for b, e in widths]
    mode = PAD_MODES[call.attrs.get("mode", "constant")]
    if mode == "constant":
        value = args[2] if len(args) > 2 and args[2] is not None and args[2].size else 0
        return [np.pad(x, pos, mode="constant", constant_values=np.asarray(value).reshape(()))]
    return [np.pad(x, pos, mode=mode)]


# ---- Shape / Size / ConstantOfShape / Range ----------------------------------------------

def _shape_range(attrs, rank: int) -> slice:
    start, end = attrs.get("start", 0), attrs.get("end", rank)
    return slice(max(min(start + rank if start < 0 else start, rank), 0),
                 max(min(end + rank if end < 0 else end, rank), 0))


def _infer_shape(sig: Sig):
    dims = sig.in_types[0].shape[_shape_range(sig.attrs, len(sig.in_types[0].shape))]
    return [TensorType((len(dims),), "int64")]


@register("Shape", infer=arity(1, 1)(_infer_shape), pattern=Pattern.OPAQUE, needs_values=False)
def _shape(call: Call, args):
    shape = call.in_types[0].shape
    return [np.array(shape[_shape_range(call.attrs, len(shape))], dtype=np.int64)]


@register("Size", infer=arity(1, 1)(lambda s: [TensorType((), "int64")]), pattern=Pattern.OPAQUE,
          needs_values=False)
def _size(call: Call, args):
    return [np.array(call.in_types[0].size, dtype=np.int64)]


def fill_value(attrs) -> np.ndarray:
    value = attrs.get("value")
    return np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)[:1]


def _infer_constant_of_shape(sig: Sig):
    shape = ints(sig.const(0))
    return [TensorType(tuple(shape), fill_value(sig.attrs).dtype.name)]


@register("ConstantOfShape", infer=arity(1, 1)(_infer_constant_of_shape), pattern=Pattern.OPAQUE)
def _constant_of_shape(call: Call, args):
    t = call.out_types[0]
    return [np.full(t.shape, fill_value(call.attrs)[0], dtype=t.dtype)]


def _range_len(start, limit, delta) -> int:
    return max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)


def _infer_range(sig: Sig):
    if any(sig.in_types[i].size != 1 for i in range(3)):
        raise sig.fail("start, limit and delta must be scalars")
    start, limit, delta = (sig.const(i).reshape(()) for i in range(3))
    if delta == 0:
        raise sig.fail("delta is 0")
    if not all(np.isfinite(float(v)) for v in (start, limit, delta)):
        raise sig.fail(f"start {start}, limit {limit} and delta {delta} must be finite")
    return [TensorType((_range_len(start, limit, delta),), sig.in_types[0].dtype)]


@register("Range", infer=arity(3, 3)(_infer_range), pattern=Pattern.OPAQUE)
def _range(call: Call, args):
    start, _, delta = (a.reshape(()) for a in args)
    n = call.out_types[0].shape[0]
    return [(start + np.arange(n) * delta).astype(call.out_types[0].dtype)]

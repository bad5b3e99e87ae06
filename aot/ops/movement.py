"""Data movement with ONNX semantics where each output element is one input
element or a constant: Trilu, EyeLike, ReverseSequence, CenterCropPad and
BitCast. (Their value rules: aot/lower/rules/movement.py.)
"""
from __future__ import annotations

import numpy as np

from aot.errors import UnsupportedError, node_label
from aot.ir.graph import TensorType
from aot.ops.attrs import ints, normalize_axes
from aot.ops.elementwise import ONNX_DTYPES, arity
from aot.ops.registry import Call, Pattern, Sig, register


# ---- Trilu ------------------------------------------------------------------------------

def trilu_k(values) -> int:
    """Trilu's diagonal offset: input 1 when present, else 0."""
    return int(np.asarray(values[1]).reshape(())) if len(values) > 1 and values[1] is not None \
        else 0


def _infer_trilu(sig: Sig):
    x = sig.in_types[0]
    if len(x.shape) < 2:
        raise sig.fail(f"needs a tensor of rank 2 or more, got {list(x.shape)}")
    if sig.has(1):
        if sig.in_types[1].size != 1:
            raise sig.fail("k must be a scalar")
        sig.const(1)
    return [TensorType(x.shape, x.dtype, x.quant)]


@register("Trilu", infer=arity(1, 2)(_infer_trilu), pattern=Pattern.INJECTIVE)
def _trilu(call: Call, args):
    x, k = args[0], trilu_k(args)
    keep = np.triu if call.attrs.get("upper", 1) else np.tril
    return [keep(x, k) if x.size else x.copy()]


# ---- EyeLike ------------------------------------------------------------------------------

def eye_dtype(sig_or_call) -> str:
    to = sig_or_call.attrs.get("dtype")
    if to is None:
        return sig_or_call.in_types[0].dtype
    if to not in ONNX_DTYPES:
        raise UnsupportedError(f"{node_label(sig_or_call.node)}: EyeLike to ONNX data type "
                               f"{to} is not supported")
    return ONNX_DTYPES[to]


def _infer_eye_like(sig: Sig):
    x = sig.in_types[0]
    if len(x.shape) != 2:
        raise sig.fail(f"needs a 2-D input, got {list(x.shape)}")
    return [TensorType(x.shape, eye_dtype(sig))]


# only the input's shape matters: its values are never read
@register("EyeLike", infer=arity(1, 1)(_infer_eye_like), pattern=Pattern.INJECTIVE,
          needs_values=False)
def _eye_like(call: Call, args):
    t = call.out_types[0]
    return [np.eye(*t.shape, k=int(call.attrs.get("k", 0)), dtype=t.dtype)]


# ---- ReverseSequence ----------------------------------------------------------------------

def sequence_axes(sig_or_call) -> tuple[int, int]:
    """(batch_axis, time_axis)."""
    return int(sig_or_call.attrs.get("batch_axis", 1)), int(sig_or_call.attrs.get("time_axis", 0))


def _infer_reverse_sequence(sig: Sig):
    x, lens = sig.in_types
    batch, time = sequence_axes(sig)
    if len(x.shape) < 2 or {batch, time} != {0, 1}:
        raise sig.fail(f"batch_axis {batch} and time_axis {time} must be 0 and 1 of a tensor "
                       f"of rank 2 or more, got {list(x.shape)}")
    if lens.shape != (x.shape[batch],) or lens.dtype != "int64":
        raise sig.fail(f"sequence_lens must be int64 [{x.shape[batch]}], got {lens}")
    values = sig.values[1] if len(sig.values) > 1 else None
    if values is not None and not np.all((values >= 0) & (values <= x.shape[time])):
        raise sig.fail(f"sequence_lens {ints(values)} must lie in [0, {x.shape[time]}]")
    return [TensorType(x.shape, x.dtype, x.quant)]


@register("ReverseSequence", infer=arity(2, 2)(_infer_reverse_sequence),
          pattern=Pattern.INJECTIVE)
def _reverse_sequence(call: Call, args):
    x, lens = args
    batch, time = sequence_axes(call)
    out = x.copy()
    for b, n in enumerate(np.clip(lens, 0, x.shape[time])):
        at = [slice(None)] * x.ndim
        at[batch], at[time] = b, slice(0, int(n))
        src = list(at)
        src[time] = slice(int(n) - 1, None, -1) if n else slice(0, 0)
        out[tuple(at)] = x[tuple(src)]
    return [out]


# ---- CenterCropPad -------------------------------------------------------------------------

def crop_offsets(sig: Sig) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(output shape, per axis the input position of output position 0):
    positive where the axis is cropped, negative where it is padded; the
    odd element of either goes to the end."""
    x = sig.in_types[0]
    rank = len(x.shape)
    target = ints(sig.const(1))
    axes = normalize_axes(sig, sig.attrs.get("axes", range(rank)), rank)
    if len(target) != len(axes) or any(d <= 0 for d in target):
        raise sig.fail(f"shape {target} must give a positive size for each of the axes {axes}")
    shape, offset = list(x.shape), [0] * rank
    for a, d in zip(axes, target):
        offset[a] = (x.shape[a] - d) // 2 if d < x.shape[a] else -((d - x.shape[a]) // 2)
        shape[a] = d
    return tuple(shape), tuple(offset)


def _infer_center_crop_pad(sig: Sig):
    shape, _ = crop_offsets(sig)
    return [TensorType(shape, sig.in_types[0].dtype)]


@register("CenterCropPad", infer=arity(2, 2)(_infer_center_crop_pad), pattern=Pattern.INJECTIVE)
def _center_crop_pad(call: Call, args):
    x = args[0]
    shape, offset = crop_offsets(Sig(call.node, call.in_types, tuple(args)))
    out = np.zeros(shape, x.dtype)
    dst = tuple(slice(max(-o, 0), max(-o, 0) + min(d, n - max(o, 0)))
                for o, d, n in zip(offset, shape, x.shape))
    src = tuple(slice(max(o, 0), max(o, 0) + (s.stop - s.start)) for o, s in zip(offset, dst))
    out[dst] = x[src]
    return [out]


# ---- BitCast --------------------------------------------------------------------------------

def _infer_bitcast(sig: Sig):
    x = sig.in_types[0]
    to = sig.attrs.get("to")
    if to not in ONNX_DTYPES:
        raise UnsupportedError(f"{node_label(sig.node)}: BitCast to ONNX data type {to} is "
                               "not supported")
    out = ONNX_DTYPES[to]
    if np.dtype(out).itemsize != np.dtype(x.dtype).itemsize:
        raise sig.fail(f"{x.dtype} and {out} differ in width")
    return [TensorType(x.shape, out)]


@register("BitCast", infer=arity(1, 1)(_infer_bitcast), pattern=Pattern.ELEMWISE)
def _bitcast(call: Call, args):
    return [np.require(args[0], requirements="C").view(call.out_types[0].dtype)]

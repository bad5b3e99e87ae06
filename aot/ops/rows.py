"""Ops computed along one axis (or one matrix) at a time, with ONNX
semantics: the running CumSum and CumProd, LpNormalization, Det. (Their
kernel rules: aot/lower/rules/rows.py.)
"""
from __future__ import annotations

import numpy as np

from aot.ir.graph import TensorType
from aot.ops.attrs import normalize_axis
from aot.ops.elementwise import FLOATS, arity
from aot.ops.registry import Call, Pattern, Sig, register


# ---- CumSum / CumProd ---------------------------------------------------------------------

def scan_axis(sig: Sig) -> int:
    """The axis of a CumSum/CumProd: input 1, a compile-time scalar."""
    rank = len(sig.in_types[0].shape)
    axis = np.asarray(sig.const(1))
    if axis.size != 1:
        raise sig.fail(f"axis must be a scalar, got {axis.shape}")
    return normalize_axis(sig, int(axis.reshape(())), rank)


def _infer_scan(sig: Sig):
    x = sig.in_types[0]
    if not x.shape:
        raise sig.fail("needs a tensor of rank 1 or more")
    if x.dtype == "bool":
        raise sig.fail("does not take bool inputs")
    scan_axis(sig)
    return [TensorType(x.shape, x.dtype)]


def _scan(combine, identity):
    def ref(call: Call, args):
        x = args[0]
        axis = scan_axis(Sig(call.node, call.in_types, tuple(args)))
        if call.attrs.get("reverse", 0):
            x = np.flip(x, axis)
        with np.errstate(all="ignore"):      # integers wrap, as in C's unsigned arithmetic
            out = combine(x, axis=axis, dtype=x.dtype)
        if call.attrs.get("exclusive", 0):
            # shifted one step along the axis, the identity first
            head = np.full_like(np.take(out, [0], axis=axis), identity)
            out = np.concatenate([head, np.take(out, np.arange(x.shape[axis] - 1), axis=axis)],
                                 axis=axis)
        if call.attrs.get("reverse", 0):
            out = np.flip(out, axis)
        return [np.ascontiguousarray(out)]
    return ref


register("CumSum", infer=arity(2, 2)(_infer_scan))(_scan(np.cumsum, 0))
register("CumProd", infer=arity(2, 2)(_infer_scan))(_scan(np.cumprod, 1))


# ---- LpNormalization -------------------------------------------------------------------------

def lp_params(sig_or_call, rank: int) -> tuple[int, int]:
    """(axis, p) with the axis made non-negative."""
    return int(sig_or_call.attrs.get("axis", -1)) % rank, int(sig_or_call.attrs.get("p", 2))


def _infer_lp_normalization(sig: Sig):
    x = sig.in_types[0]
    if x.dtype not in FLOATS or not x.shape:
        raise sig.fail(f"needs a float tensor of rank 1 or more, got {x}")
    axis = int(sig.attrs.get("axis", -1))
    normalize_axis(sig, axis, len(x.shape))
    if lp_params(sig, len(x.shape))[1] not in (1, 2):
        raise sig.fail(f"p must be 1 or 2, got {sig.attrs.get('p')}")
    return [TensorType(x.shape, x.dtype)]


@register("LpNormalization", infer=arity(1, 1)(_infer_lp_normalization), pattern=Pattern.REDUCE)
def _lp_normalization(call: Call, args):
    x = args[0].astype(np.float64)
    axis, p = lp_params(call, x.ndim)
    norm = (np.abs(x) if p == 1 else x * x).sum(axis=axis, keepdims=True)
    if p == 2:
        norm = np.sqrt(norm)
    with np.errstate(all="ignore"):
        out = np.where(norm == 0, 0, x / norm)     # a zero row stays zero
    return [out.astype(call.out_types[0].dtype)]


# ---- Det -------------------------------------------------------------------------------

def _infer_det(sig: Sig):
    x = sig.in_types[0]
    if x.dtype not in FLOATS or len(x.shape) < 2 or x.shape[-1] != x.shape[-2]:
        raise sig.fail(f"needs float square matrices [..., M, M], got {x}")
    return [TensorType(x.shape[:-2], x.dtype)]


@register("Det", infer=arity(1, 1)(_infer_det), pattern=Pattern.OPAQUE)
def _det(call: Call, args):
    return [np.asarray(np.linalg.det(args[0].astype(np.float64)), call.out_types[0].dtype)]

"""ONNX's quantized ops with ONNX semantics (opset 21): QuantizeLinear,
DequantizeLinear, DynamicQuantizeLinear, QLinearConv, QLinearMatMul,
ConvInteger and MatMulInteger.

Scales and zero points are inputs, as in ONNX. The arithmetic follows
onnx.reference: quantization divides in the input's float type and rounds
half to even; QLinear* accumulate in integers, then requantize as ONNX
Runtime does: a float32 multiplier (x_scale * w_scale / y_scale) applied
in float32, round half to even, the zero point, saturation.
"""
from __future__ import annotations

import numpy as np

from aot.errors import UnsupportedError, node_label
from aot.ir.graph import TensorType
from aot.ops.nn import (FLOATS, conv_nchw, conv_output_shape, from_nchw, global_infer,
                        kernel_axes, layout_of, matmul_shape, pool_infer_common, pool_setup,
                        resolve_window, to_nchw, window_counts, window_view)
from aot.ops.registry import (Call, Layout, Pattern, Sig, Sink, inner_dim_macs,
                              per_weight_row_macs, register)
from aot.ops.tensor import infer_concat

# Scale and zero point along `axis` (default 1), which moves with a Transpose.
PER_AXIS = Layout(sink=Sink.PER_AXIS, axis=1)

# Integer types QuantizeLinear may produce (int4 and float8 are not supported).
QTYPES = ("int8", "uint8", "int16", "uint16")
# TensorProto data type numbers, for the output_dtype attribute.
_TENSORPROTO = {2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32"}
# ... and for DequantizeLinear's output_dtype and QuantizeLinear's precision (opset 23)
_FLOAT_TENSORPROTO = {1: "float32", 10: "float16", 11: "float64"}


def _unsupported(s, msg: str):
    return UnsupportedError(f"{node_label(s.node)}: {msg}")


def _dtype_attr(s, name: str) -> str | None:
    v = s.attrs.get(name)
    if v in (None, 0, ""):
        return None
    if isinstance(v, str):
        return v
    if int(v) not in _TENSORPROTO:
        raise _unsupported(s, f"{name}={v} (supported: int8, uint8, int16, uint16)")
    return _TENSORPROTO[int(v)]


def _float_attr(s, name: str) -> str | None:
    """A float element type named by attribute `name` (a TensorProto number)."""
    v = s.attrs.get(name)
    if v in (None, 0, ""):
        return None
    if int(v) not in _FLOAT_TENSORPROTO:
        raise _unsupported(s, f"{name}={v} (supported: float32, float16, float64)")
    return _FLOAT_TENSORPROTO[int(v)]


# --------------------------------------------------------------------------
# Quantization parameters: per tensor, per axis or blocked.


def _check_qparam(sig: Sig, i: int, x_shape, what: str) -> None:
    """Scale/zero-point shape rules of opset 21."""
    t = sig.in_types[i]
    rank = len(x_shape)
    axis = int(sig.attrs.get("axis", 1))
    block = int(sig.attrs.get("block_size", 0))
    if t.size == 1 and len(t.shape) <= 1 and not block:
        return
    if not -rank <= axis < rank:
        raise sig.fail(f"axis {axis} is out of range for rank {rank}")
    axis %= rank
    if block:
        if block < 0:
            raise sig.fail(f"block_size {block} must be positive")
        want = list(x_shape)
        want[axis] = -(-x_shape[axis] // block)
        if list(t.shape) != want:
            raise sig.fail(f"blocked {what} shape {list(t.shape)} must be {want} "
                           f"(block_size {block} on axis {axis})")
    elif t.shape != (x_shape[axis],):
        raise sig.fail(f"{what} shape {list(t.shape)} must be a scalar or "
                       f"[{x_shape[axis]}] (per-axis on axis {axis})")


def _expand_qparam(call: Call, v: np.ndarray, shape) -> np.ndarray:
    """A scale/zero point broadcastable against x."""
    if v.size == 1 and v.ndim <= 1 and not int(call.attrs.get("block_size", 0)):
        return v.reshape(())
    axis = int(call.attrs.get("axis", 1)) % len(shape)
    block = int(call.attrs.get("block_size", 0))
    if block:
        return np.repeat(v, block, axis=axis).take(np.arange(shape[axis]), axis=axis)
    dims = [1] * len(shape)
    dims[axis] = v.size
    return v.reshape(dims)


def saturate_round(v: np.ndarray, dtype: str) -> np.ndarray:
    """Round half to even, then clamp into dtype's range."""
    info = np.iinfo(dtype)
    return np.clip(np.rint(v), info.min, info.max).astype(dtype)


# --------------------------------------------------------------------------
# QuantizeLinear / DequantizeLinear


def _quantize_infer(sig: Sig):
    x = sig.in_types[0]
    if x.dtype not in FLOATS + ("int32",):
        raise _unsupported(sig, f"input dtype {x.dtype}")
    # opset 23: the division runs in `precision`, by default y_scale's type;
    # aot divides a float x in the wider of x's and y_scale's types
    scale_dtype = sig.in_types[1].dtype
    divides_in = (np.result_type(x.dtype, scale_dtype).name if x.dtype in FLOATS
                  else scale_dtype)
    precision = _float_attr(sig, "precision") or scale_dtype
    if precision != divides_in:
        raise _unsupported(sig, f"dividing {x.dtype} by a {scale_dtype} y_scale in "
                           f"{precision} (aot divides in {divides_in})")
    want = _dtype_attr(sig, "output_dtype")
    if sig.has(2):
        zdt = sig.in_types[2].dtype
        if want and want != zdt:
            raise sig.fail(f"output_dtype {want} differs from the zero point's {zdt}")
        want = zdt
    out = want or "uint8"
    if out not in QTYPES:
        raise _unsupported(sig, f"quantizing to {out} (supported: {', '.join(QTYPES)})")
    _check_qparam(sig, 1, x.shape, "y_scale")
    if sig.has(2):
        _check_qparam(sig, 2, x.shape, "y_zero_point")
        if sig.in_types[2].shape != sig.in_types[1].shape:
            raise sig.fail("y_scale and y_zero_point shapes differ")
    return [TensorType(x.shape, out)]


@register("QuantizeLinear", infer=_quantize_infer, pattern=Pattern.BROADCAST, layout=PER_AXIS)
def _quantize(call: Call, args):
    x, scale = args[0], args[1]
    zp = args[2] if len(args) > 2 else None
    out = call.out_types[0].dtype
    # saturated in floating point: x / scale past int32 (1e30, inf) must
    # clamp to the top, not wrap through an int32 conversion
    with np.errstate(all="ignore"):
        q = np.rint(x / _expand_qparam(call, scale, x.shape)).astype(np.float64)
        if zp is not None:
            q = q + _expand_qparam(call, zp, x.shape).astype(np.float64)
        info = np.iinfo(out)
        return [np.clip(q, info.min, info.max).astype(out)]


def _dequantize_infer(sig: Sig):
    x = sig.in_types[0]
    if x.dtype not in QTYPES + ("int32",):
        raise _unsupported(sig, f"input dtype {x.dtype}")
    scale = sig.in_types[1]
    if scale.dtype not in FLOATS:
        raise sig.fail(f"x_scale dtype {scale.dtype} must be float")
    _check_qparam(sig, 1, x.shape, "x_scale")
    if sig.has(2):
        if sig.in_types[2].dtype != x.dtype:
            raise sig.fail(f"x_zero_point dtype {sig.in_types[2].dtype} differs from "
                           f"the input's {x.dtype}")
        _check_qparam(sig, 2, x.shape, "x_zero_point")
    out = _float_attr(sig, "output_dtype") or scale.dtype     # opset 23: any float type
    return [TensorType(x.shape, out)]


@register("DequantizeLinear", infer=_dequantize_infer, pattern=Pattern.BROADCAST,
          layout=PER_AXIS)
def _dequantize(call: Call, args):
    x, scale = args[0], args[1]
    zp = args[2] if len(args) > 2 else None
    d = x.astype(np.float32)
    if zp is not None:
        d = d - _expand_qparam(call, zp, x.shape).astype(np.float32)
    y = d * _expand_qparam(call, scale, x.shape)
    return [y.astype(call.out_types[0].dtype)]


def _dynq_infer(sig: Sig):
    x = sig.in_types[0]
    if x.dtype != "float32":
        raise _unsupported(sig, f"input dtype {x.dtype}")
    return [TensorType(x.shape, "uint8"), TensorType((), "float32"), TensorType((), "uint8")]


@register("DynamicQuantizeLinear", infer=_dynq_infer, pattern=Pattern.OPAQUE)
def _dynamic_quantize(call: Call, args):
    x = args[0]
    # The range always includes 0 so that 0 is exactly representable.
    lo = np.minimum(np.float32(0), x.min())
    hi = np.maximum(np.float32(0), x.max())
    # An all-zero input gets scale 1 (any scale works; ONNX Runtime's choice,
    # where the spec's formula would divide by zero).
    scale = np.float32(1.0) if hi == lo else np.float32(hi - lo) / np.float32(255)
    zp = saturate_round(np.float32(0) - lo / scale, "uint8")
    y = np.clip(np.rint(x / scale) + zp, 0, 255).astype(np.uint8)
    return [y, np.asarray(scale, np.float32), np.asarray(zp, np.uint8)]


# --------------------------------------------------------------------------
# QLinearMatMul / MatMulInteger


def _int_input(sig: Sig, i: int, what: str) -> TensorType:
    t = sig.in_types[i]
    if t is None:
        raise sig.fail(f"{what} (input {i}) is required")
    if t.dtype not in ("int8", "uint8"):
        raise _unsupported(sig, f"{what} dtype {t.dtype} (int8/uint8 only)")
    return t


def _check_zp(sig: Sig, i: int, of: TensorType, what: str) -> None:
    if sig.has(i) and sig.in_types[i].dtype != of.dtype:
        raise sig.fail(f"{what} dtype {sig.in_types[i].dtype} differs from its tensor's "
                       f"{of.dtype}")


def _qmatmul_infer(sig: Sig):
    a = _int_input(sig, 0, "a")
    b = _int_input(sig, 3, "b")
    _check_zp(sig, 2, a, "a_zero_point")
    _check_zp(sig, 5, b, "b_zero_point")
    out = sig.in_types[7].dtype if sig.has(7) else a.dtype
    if out not in ("int8", "uint8"):
        raise _unsupported(sig, f"output dtype {out}")
    return [TensorType(matmul_shape(sig, a.shape, b.shape), out)]


def _centered(v: np.ndarray, zp) -> np.ndarray:
    v = v.astype(np.int32)
    return v if zp is None else v - np.asarray(zp).astype(np.int32)


def _int_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # float64 holds every int8 dot product exactly and uses BLAS.
    return np.rint(np.matmul(a.astype(np.float64), b.astype(np.float64))).astype(np.int32)


def _requantize(acc: np.ndarray, multiplier: np.ndarray, zp, dtype: str) -> np.ndarray:
    """ONNX Runtime's MlasRequantizeOutput: float32(acc) * M in float32,
    rounded half to even, plus the zero point, saturated. (onnx.reference
    multiplies in float64; the two differ where the float32 product rounds
    across a half, about 1 output in 10^4.)"""
    r = np.rint(f32(acc.astype(np.float32) * multiplier.astype(np.float32))).astype(np.float64)
    if zp is not None:
        r = r + np.asarray(zp).astype(np.float64)
    return saturate_round(r, dtype)


@register("QLinearMatMul", infer=_qmatmul_infer, pattern=Pattern.OUT_ELEMWISE_FUSABLE,
          macs=inner_dim_macs(0))
def _qlinear_matmul(call: Call, args):
    a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp = (list(args) + [None] * 8)[:8]
    acc = _int_matmul(_centered(a, a_zp), _centered(b, b_zp))
    mult = (a_s * b_s / y_s).astype(np.float32)
    return [_requantize(acc, mult, y_zp, call.out_types[0].dtype)]


def _matmul_integer_infer(sig: Sig):
    a = _int_input(sig, 0, "A")
    b = _int_input(sig, 1, "B")
    return [TensorType(matmul_shape(sig, a.shape, b.shape), "int32")]


@register("MatMulInteger", infer=_matmul_integer_infer, pattern=Pattern.OUT_ELEMWISE_FUSABLE,
          macs=inner_dim_macs(0))
def _matmul_integer(call: Call, args):
    a, b, a_zp, b_zp = (list(args) + [None] * 4)[:4]
    if a_zp is not None and a_zp.ndim == 1 and a_zp.size > 1 and a.ndim >= 2:
        a_zp = a_zp.reshape(-1, 1)     # per-row zero point of A
    return [_int_matmul(_centered(a, a_zp), _centered(b, b_zp))]


# --------------------------------------------------------------------------
# QLinearConv / ConvInteger


def _qconv_infer(sig: Sig):
    x = _int_input(sig, 0, "x")
    w = _int_input(sig, 3, "w")
    _check_zp(sig, 2, x, "x_zero_point")
    _check_zp(sig, 5, w, "w_zero_point")
    shape = conv_output_shape(sig, x, w)
    o = w.shape[0]
    for i, what in ((4, "w_scale"), (5, "w_zero_point")):
        if sig.has(i) and sig.in_types[i].size not in (1, o):
            raise sig.fail(f"{what} has {sig.in_types[i].size} entries, expected 1 or {o}")
    if sig.has(8) and (sig.in_types[8].shape != (o,) or sig.in_types[8].dtype != "int32"):
        raise sig.fail(f"bias must be int32[{o}], got {sig.in_types[8]}")
    out = sig.in_types[7].dtype if sig.has(7) else x.dtype
    return [TensorType(shape, out)]


def _int_conv(call: Call, x: np.ndarray, w: np.ndarray, bias=None) -> np.ndarray:
    """Exact integer convolution of zero-point-centred operands, NCHW int32."""
    layout = layout_of(call)
    if layout == "NHWC":
        w = np.moveaxis(w, -1, 1)
    xn = to_nchw(x, layout).astype(np.float64)
    win = resolve_window(call, tuple(xn.shape[2:]), tuple(w.shape[2:]))
    y = conv_nchw(xn, w.astype(np.float64), None, win, int(call.attrs.get("group", 1)))
    y = np.rint(y).astype(np.int64)
    if bias is not None:
        y = y + bias.astype(np.int64).reshape((1, -1) + (1,) * (y.ndim - 2))
    return y.astype(np.int32)


def _per_channel(v: np.ndarray, ndim: int) -> np.ndarray:
    """A scalar, or a per-output-channel vector shaped for NCHW."""
    v = np.asarray(v)
    return v.reshape(()) if v.size == 1 else v.reshape((1, -1) + (1,) * (ndim - 2))


@register("QLinearConv", infer=_qconv_infer, pattern=Pattern.OUT_ELEMWISE_FUSABLE,
          macs=per_weight_row_macs(3))
def _qlinear_conv(call: Call, args):
    x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp, bias = (list(args) + [None] * 9)[:9]
    wc = w.astype(np.int32)
    if w_zp is not None:
        wz = np.asarray(w_zp).astype(np.int32)
        wc = wc - (wz.reshape((-1,) + (1,) * (w.ndim - 1)) if wz.size > 1 else wz.reshape(()))
    acc = _int_conv(call, _centered(x, x_zp), wc, bias)
    mult = (x_s * _per_channel(w_s, acc.ndim) / y_s).astype(np.float32)
    layout = layout_of(call)
    y = _requantize(acc, mult, y_zp, call.out_types[0].dtype)
    return [from_nchw(y, layout)]


def _conv_integer_infer(sig: Sig):
    x = _int_input(sig, 0, "x")
    w = _int_input(sig, 1, "w")
    return [TensorType(conv_output_shape(sig, x, w), "int32")]


@register("ConvInteger", infer=_conv_integer_infer, pattern=Pattern.OUT_ELEMWISE_FUSABLE,
          macs=per_weight_row_macs(1))
def _conv_integer(call: Call, args):
    x, w, x_zp, w_zp = (list(args) + [None] * 4)[:4]
    wc = w.astype(np.int32)
    if w_zp is not None:
        wz = np.asarray(w_zp).astype(np.int32)
        wc = wc - (wz.reshape((-1,) + (1,) * (w.ndim - 1)) if wz.size > 1 else wz.reshape(()))
    return [from_nchw(_int_conv(call, _centered(x, x_zp), wc), layout_of(call))]


# --------------------------------------------------------------------------
# com.microsoft QOperator ops, with ONNX Runtime's CPU arithmetic
#
# What ONNX Runtime's quantizer writes (QuantFormat.QOperator) and what its
# graph transformer fuses DequantizeLinear -> op -> QuantizeLinear groups
# into; the QDQ pass (aot/passes/qdq.py) builds the same ops. Scales are
# float32 and zero points one per tensor; the arithmetic is MLAS's x86
# kernels' (docs/ops.md, "Quantized ONNX"): float32 steps, rounding half
# to even, saturation.

def scalar_qparams(call: Call, args, scale_at: int, zp_at: int) -> tuple[np.float32, int]:
    """(scale, zero point) of one tensor: one float32 and one integer."""
    scale = np.asarray(args[scale_at], np.float32).reshape(-1)
    zp = args[zp_at] if zp_at < len(args) and args[zp_at] is not None else np.zeros(1, np.int32)
    zp = np.asarray(zp).reshape(-1)
    if scale.size != 1 or zp.size != 1:
        raise UnsupportedError(f"{node_label(call.node)}: a per-channel scale or zero point "
                               "(ONNX Runtime's QLinear ops take one per tensor)")
    return scale[0], int(zp[0])


def _check_scalar(sig: Sig, i: int, what: str) -> None:
    if sig.has(i) and sig.in_types[i].size != 1:
        raise _unsupported(sig, f"{what} of {sig.in_types[i].size} entries (one per tensor only)")


def _qtype(sig: Sig, i: int, what: str) -> TensorType:
    t = _int_input(sig, i, what)
    for k, name in ((i + 1, "scale"), (i + 2, "zero point")):
        _check_scalar(sig, k, f"{what}'s {name}")
    _check_zp(sig, i + 2, t, f"{what}'s zero point")
    return t


def _qbinary_infer(sig: Sig):
    a, b = _qtype(sig, 0, "A"), _qtype(sig, 3, "B")
    if a.dtype != b.dtype:
        raise sig.fail(f"A ({a.dtype}) and B ({b.dtype}) differ in type")
    _check_scalar(sig, 6, "C's scale")
    _check_scalar(sig, 7, "C's zero point")
    from aot.ops.elementwise import broadcast
    return [TensorType(broadcast(sig, [a.shape, b.shape]), a.dtype)]


def f32(v) -> np.ndarray:
    return np.asarray(v, np.float32)


def saturate_rne(v: np.ndarray, dtype: str) -> np.ndarray:
    """float32 -> dtype: clamp, then round half to even (the bounds are
    integers, so the order does not matter; clamping first keeps huge
    values from wrapping, where MLAS's vector paths would wrap)."""
    info = np.iinfo(dtype)
    return np.rint(np.clip(f32(v), info.min, info.max)).astype(dtype)


def fma_f32(a, b, c) -> np.ndarray:
    """float32(a * b + c) rounded once, as fmaf does: the product of two
    float32s is exact in float64; the sum is rounded to float64 'to odd'
    (TwoSum's error decides the sticky bit), which leaves the one rounding
    to float32 correct (53 >= 24 + 2 bits)."""
    a, b, c = (np.asarray(v, np.float64) for v in (f32(a), f32(b), f32(c)))
    p = a * b
    s = p + c
    t = s - p
    err = (p - (s - t)) + (c - t)
    with np.errstate(invalid="ignore"):
        even = (s.view(np.int64) & 1) == 0
        nudge = np.isfinite(s) & (err != 0) & even
        s = np.where(nudge, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return f32(s)


def add_params(sa, za, sb, zb, sc, zc) -> tuple[np.float32, np.float32, np.float32]:
    """MLAS's QLinearAdd constants: the ratios s_a/s_c, s_b/s_c and the part
    that does not depend on the inputs, zc - (ra*za + rb*zb), all float32."""
    ra, rb = f32(sa / sc), f32(sb / sc)
    fixed = f32(f32(zc) - f32(f32(ra * f32(za)) + f32(rb * f32(zb))))
    return ra, rb, fixed


@register("QLinearAdd", infer=_qbinary_infer, pattern=Pattern.BROADCAST)
def _qlinear_add(call: Call, args):
    (sa, za), (sb, zb) = scalar_qparams(call, args, 1, 2), scalar_qparams(call, args, 4, 5)
    sc, zc = scalar_qparams(call, args, 6, 7)
    ra, rb, fixed = add_params(sa, za, sb, zb, sc, zc)
    # MLAS's AVX2 kernel (the one ONNX Runtime runs on an x86 with AVX2):
    # two fused multiply-adds, each rounded once
    y = fma_f32(args[3], rb, fma_f32(args[0], ra, fixed))
    return [saturate_rne(y, call.out_types[0].dtype)]


def mul_ratio(sa, sb, sc) -> np.float32:
    """MLAS's QLinearMul multiplier: (s_a * s_b) / s_c in float32."""
    return f32(f32(sa * sb) / sc)


@register("QLinearMul", infer=_qbinary_infer, pattern=Pattern.BROADCAST)
def _qlinear_mul(call: Call, args):
    (sa, za), (sb, zb) = scalar_qparams(call, args, 1, 2), scalar_qparams(call, args, 4, 5)
    sc, zc = scalar_qparams(call, args, 6, 7)
    prod = (args[0].astype(np.int32) - za) * (args[3].astype(np.int32) - zb)
    y = f32(f32(f32(prod) * mul_ratio(sa, sb, sc)) + f32(zc))
    return [saturate_rne(y, call.out_types[0].dtype)]


# ---- lookup-table activations: QLinearSigmoid, QLinearLeakyRelu

def _qunary_infer(sig: Sig):
    x = _qtype(sig, 0, "X")
    _check_scalar(sig, 3, "Y's scale")
    _check_scalar(sig, 4, "Y's zero point")
    return [TensorType(x.shape, x.dtype)]


def _sigmoid_f32(v: np.ndarray) -> np.ndarray:
    return f32(1.0 / (1.0 + np.exp(-v.astype(np.float64))))


def _leaky_f32(alpha: float):
    return lambda v: np.where(v >= 0, v, f32(f32(alpha) * v))


def _lut_function(node):
    if node.op == "QLinearSigmoid":
        return _sigmoid_f32
    return _leaky_f32(float(node.attrs.get("alpha", 0.01)))


def lookup_table(node, dtype: str, sx, zx, sy, zy) -> np.ndarray:
    """ONNX Runtime's QlinearBuildLookupTable: each of the 256 codes
    dequantized in float32, the function applied, quantized back; indexed
    by code - the type's minimum."""
    info = np.iinfo(dtype)
    codes = np.arange(info.min, info.max + 1, dtype=np.int32)
    x = f32(f32(sx) * f32(codes - zx))
    y = f32(_lut_function(node)(x))
    return saturate_rne(f32(f32(y / f32(sy)) + f32(zy)), dtype)


def _qlut(call: Call, args):
    x = args[0]
    sx, zx = scalar_qparams(call, args, 1, 2)
    sy, zy = scalar_qparams(call, args, 3, 4)
    table = lookup_table(call.node, x.dtype.name, sx, zx, sy, zy)
    return [table[x.astype(np.int32) - np.iinfo(x.dtype).min]]


register("QLinearSigmoid", infer=_qunary_infer, pattern=Pattern.OPAQUE)(_qlut)
register("QLinearLeakyRelu", infer=_qunary_infer, pattern=Pattern.OPAQUE)(_qlut)


# ---- QLinearConcat: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input

def _qconcat_infer(sig: Sig):
    if (len(sig.in_types) - 2) % 3 or len(sig.in_types) < 5:
        raise sig.fail("inputs must be Y_scale, Y_zero_point and triples (X, scale, zero point)")
    xs = [_qtype(sig, i, f"input {i}") for i in range(2, len(sig.in_types), 3)]
    _check_scalar(sig, 0, "Y's scale")
    _check_scalar(sig, 1, "Y's zero point")
    view = Sig(sig.node, tuple(xs), ())
    return [TensorType(infer_concat(view)[0].shape, xs[0].dtype)]


def requantize_table(dtype: str, sx, zx, sy, zy) -> np.ndarray | None:
    """ONNX Runtime's QLinearConcat per input: None when the input's
    parameters are the output's (a copy), else the identity lookup table."""
    if f32(sx) == f32(sy) and zx == zy:
        return None
    info = np.iinfo(dtype)
    codes = np.arange(info.min, info.max + 1, dtype=np.int32)
    x = f32(f32(sx) * f32(codes - zx))
    return saturate_rne(f32(f32(x / f32(sy)) + f32(zy)), dtype)


@register("QLinearConcat", infer=_qconcat_infer, pattern=Pattern.INJECTIVE)
def _qlinear_concat(call: Call, args):
    sy, zy = scalar_qparams(call, args, 0, 1)
    parts = []
    for i in range(2, len(args), 3):
        x = args[i]
        table = requantize_table(x.dtype.name, *scalar_qparams(call, args, i + 1, i + 2), sy, zy)
        parts.append(x if table is None else table[x.astype(np.int32) - np.iinfo(x.dtype).min])
    return [np.concatenate(parts, axis=int(call.attrs.get("axis", 0)))]


# ---- average pooling

def _qpool_infer(sig: Sig):
    x = _qtype(sig, 0, "X")
    _check_scalar(sig, 3, "Y's scale")
    _check_scalar(sig, 4, "Y's zero point")
    view = Sig(sig.node.with_(attrs=dict(sig.attrs, layout=pool_layout(sig))),
               (TensorType(x.shape, "float32"),), ())
    if sig.node.op == "QLinearGlobalAveragePool":
        out = global_infer(view)[0].shape
    else:
        out = pool_infer_common(view)[3]
    return [TensorType(out, x.dtype)]


def pool_layout(sig_or_call) -> str:
    """com.microsoft's channels_last=1, or aot's layout attribute."""
    if int(sig_or_call.attrs.get("channels_last", 0)):
        return "NHWC"
    return sig_or_call.attrs.get("layout", "NCHW")


def pool_output(s: np.ndarray, count: np.ndarray, sx, sy, zy, dtype: str) -> np.ndarray:
    """From the exact sums of (x - zx) over each window: ORT's average in
    float32 (x_scale * sum / count) quantized as its quantize_value does,
    nearbyint(y / y_scale + y_zero_point), saturated."""
    return quantize_average(f32(f32(f32(s) * f32(sx)) / f32(count)), sy, zy, dtype)


def quantize_average(avg: np.ndarray, sy, zy, dtype: str) -> np.ndarray:
    """ORT's quantize_value: nearbyint(y / y_scale + y_zero_point), saturated."""
    return saturate_rne(f32(f32(avg / f32(sy)) + f32(zy)), dtype)


def pool_is_global(call_or_ctx, spatial) -> bool:
    """ONNX Runtime runs a QLinearAveragePool whose window is the whole
    unpadded image as QLinearGlobalAveragePool (exact integer sums)."""
    kernel = tuple(int(k) for k in call_or_ctx.attrs["kernel_shape"])
    return kernel == tuple(spatial) and not any(call_or_ctx.attrs.get("pads", ()))


@register("QLinearAveragePool", infer=_qpool_infer, pattern=Pattern.REDUCE)
def _qlinear_avgpool(call: Call, args):
    """ONNX Runtime's QLinearPool tasks: each code dequantized in float32,
    x_scale * (x - zx), the window's in-image taps summed in float32 in
    row-major order, divided by the count, quantized (pool_output's last
    step). A whole-image window: its global pool's exact integer sum."""
    x = args[0]
    sx, zx = scalar_qparams(call, args, 1, 2)
    sy, zy = scalar_qparams(call, args, 3, 4)
    view = Call(call.node.with_(attrs=dict(call.attrs, layout=pool_layout(call))),
                call.in_types, call.out_types)
    layout, xn, win = pool_setup(view, x.astype(np.int64) - zx)
    cnt = np.maximum(window_counts(win, xn.shape[2:],
                                   bool(call.attrs.get("count_include_pad", 0))), 1)
    if pool_is_global(call, xn.shape[2:]):
        s = window_view(xn, win, 0).sum(axis=kernel_axes(len(win.kernel)))
        return [from_nchw(pool_output(s, cnt, sx, sy, zy, x.dtype.name), layout)]
    # a padded tap adds 0.0, which leaves a float32 sum as it is
    taps = window_view(f32(f32(sx) * f32(xn)), win, 0)
    taps = taps.reshape(taps.shape[:2 + len(win.kernel)] + (-1,))
    total = np.zeros(taps.shape[:-1], np.float32)
    for k in range(taps.shape[-1]):
        total = f32(total + taps[..., k])
    y = quantize_average(f32(total / f32(cnt)), sy, zy, x.dtype.name)
    return [from_nchw(y, layout)]


@register("QLinearGlobalAveragePool", infer=_qpool_infer, pattern=Pattern.REDUCE)
def _qlinear_gap(call: Call, args):
    x = args[0]
    sx, zx = scalar_qparams(call, args, 1, 2)
    sy, zy = scalar_qparams(call, args, 3, 4)
    layout = pool_layout(call)
    axes = tuple(range(1, x.ndim - 1)) if layout == "NHWC" else tuple(range(2, x.ndim))
    s = (x.astype(np.int64) - zx).sum(axis=axes, keepdims=True)
    count = int(np.prod([x.shape[a] for a in axes]))
    return [pool_output(s, np.float32(count), sx, sy, zy, x.dtype.name)]


# ---- QLinearSoftmax (opset-13 form: along the last axis)

def _qsoftmax_infer(sig: Sig):
    x = _qunary_infer(sig)[0]
    rank = len(x.shape)
    if int(sig.attrs.get("opset", 13)) < 13 or int(sig.attrs.get("axis", -1)) % rank != rank - 1:
        raise _unsupported(sig, "QLinearSoftmax other than opset 13's along the last axis "
                                "is not supported yet")
    if x.dtype not in ("int8", "uint8"):
        raise _unsupported(sig, f"QLinearSoftmax of {x.dtype}")
    return [x]


def softmax_exp_table(x_scale, depth: int) -> np.ndarray:
    """ONNX Runtime's float32 exp table for 8-bit codes: entry k (0..255) is
    exp((k - 255 + shift) * x_scale), k - 255 being x - max(row); `shift`
    lifts the values as far as a sum of `depth` of them stays finite."""
    shift = max(0.0, float(np.log(np.finfo(np.float32).max / depth)) - 5) / float(x_scale)
    k = np.arange(256, dtype=np.float64)
    return f32(np.exp((k - 255 + shift) * float(x_scale)))


def softmax_y_scale(y_scale) -> np.float32:
    """ONNX Runtime's output multiplier: floor(1 / y_scale) in float32."""
    return f32(np.floor(f32(1) / f32(y_scale)))


@register("QLinearSoftmax", infer=_qsoftmax_infer, pattern=Pattern.OPAQUE)
def _qlinear_softmax(call: Call, args):
    """Per row: e = table[x - max + 255], the float32 sum of e in order,
    y = nearbyint(e * floor(1 / y_scale) / sum) + y_zero_point; ONNX
    Runtime caps it at 255 only, and its int8 store wraps above 127 (both
    signs read the table the same way: x - max + 255)."""
    x = args[0]
    sx, _ = scalar_qparams(call, args, 1, 2)
    sy, zy = scalar_qparams(call, args, 3, 4)
    table = softmax_exp_table(sx, x.shape[-1])
    xi = x.astype(np.int32)
    e = table[xi - xi.max(axis=-1, keepdims=True) + 255]
    total = np.zeros(x.shape[:-1] + (1,), np.float32)
    for k in range(x.shape[-1]):        # float32, summed in order as ONNX Runtime does
        total = f32(total + e[..., k:k + 1])
    q = np.rint(f32(f32(e * softmax_y_scale(sy)) / total)).astype(np.int32) + zy
    return [_wrap8(np.minimum(q, 255), x.dtype.name)]


def _wrap8(q: np.ndarray, dtype: str) -> np.ndarray:
    """An int32 stored into an 8-bit type as C does on two's complement:
    modulo 256."""
    low = int(np.iinfo(dtype).min)
    return ((q.astype(np.int64) - low) % 256 + low).astype(dtype)


# ---- QGemm: A, a_scale, a_zp, B, b_scale, b_zp, [C int32], [y_scale], [y_zp]

def _qgemm_infer(sig: Sig):
    a, b = _int_input(sig, 0, "A"), _int_input(sig, 3, "B")
    _check_zp(sig, 2, a, "a_zero_point")
    _check_zp(sig, 5, b, "b_zero_point")
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise sig.fail(f"A {list(a.shape)} and B {list(b.shape)} must be matrices")
    m, k = a.shape[::-1] if sig.attrs.get("transA", 0) else a.shape
    kb, n = b.shape[::-1] if sig.attrs.get("transB", 0) else b.shape
    if k != kb:
        raise sig.fail(f"inner dimensions differ: {k} and {kb}")
    if sig.has(6):
        c = sig.in_types[6]
        if c.dtype != "int32" or c.size not in (1, n) or len(c.shape) > 2 or \
                (len(c.shape) == 2 and c.shape[0] != 1):
            raise _unsupported(sig, f"C {c} (an int32 scalar or row of {n} only)")
    for i, what in ((1, "a_scale"), (7, "y_scale"), (8, "y_zero_point")):
        _check_scalar(sig, i, what)
    return [TensorType((m, n), sig.in_types[8].dtype if sig.has(8) else "float32")]


def qgemm_multipliers(alpha, a_scale, b_scale, y_scale) -> np.ndarray:
    """ONNX Runtime's per-column output scales: alpha * s_a * s_b[n] in
    float32, divided by s_y when there is one."""
    m = f32(f32(f32(alpha) * f32(a_scale)) * f32(b_scale).reshape(-1))
    return m if y_scale is None else f32(m / f32(y_scale))


@register("QGemm", infer=_qgemm_infer, pattern=Pattern.OUT_ELEMWISE_FUSABLE,
          macs=lambda call: call.out_types[0].size * (call.in_types[0].shape[
              0 if call.attrs.get("transA", 0) else 1]))
def _qgemm(call: Call, args):
    """acc = C + Σ (a - za)(b - zb) exactly; with y_zero_point, requantized
    as QLinearMatMul (float32, half to even); without, float32 acc * scale."""
    a, a_s, a_zp, b, b_s, b_zp, c, y_s, y_zp = (list(args) + [None] * 9)[:9]
    if call.attrs.get("transA", 0):
        a = a.T
    if call.attrs.get("transB", 0):
        b = b.T
    acc = _int_matmul(_centered(a, a_zp), _centered(b, b_zp))
    if c is not None:
        acc = acc + c.astype(np.int32).reshape(1, -1)
    mult = qgemm_multipliers(call.attrs.get("alpha", 1.0), a_s, b_s, y_s)
    if y_zp is None:
        return [f32(acc.astype(np.float32) * mult)]
    return [_requantize(acc, mult, y_zp, call.out_types[0].dtype)]

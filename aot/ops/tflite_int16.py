"""TFLite's int16-activation kernels, bit-exact with tflite-micro.

The "16x8" convolutions and fully connected take int16 activations, int8
weights and an int64 bias; they accumulate in int64 and requantize with the
int64 MultiplyByQuantizedMultiplier (TFLITE_INT8.md §2, `qmath.mbqm_int64`:
one rounding, a 16-bit multiplier), with no input or output offset. ADD,
SUB and MUL on int16 are the int8 kernels' arithmetic (ADD's left shift is
15 instead of 20: `ADD_LEFT_SHIFT`), registered under their own names so a
graph says which kernel runs.

TFLite quantizes int16 activations symmetrically: every int16 tensor these
ops read or write has zero point 0 (tflite-micro refuses others).

The importer maps an int8 op to its int16 form with `INT16_OPS`.
"""
from __future__ import annotations

import numpy as np

from aot.errors import ModelError, UnsupportedError, node_label
from aot.ir.graph import TensorType
from aot.ops import qmath
from aot.ops import tflite_int8 as i8
from aot.ops.registry import Call, Pattern, Sig, per_weight_row_macs, register

INT16_OPS = {
    "tfl.conv2d": "tfl.conv2d_16x8",
    "tfl.depthwise_conv2d": "tfl.depthwise_conv2d_16x8",
    "tfl.fully_connected": "tfl.fully_connected_16x8",
    "tfl.add": "tfl.add_int16",
    "tfl.sub": "tfl.sub_int16",
    "tfl.mul": "tfl.mul_int16",
}
i8.ACTIVATION_DTYPE.update({op: "int16" for op in INT16_OPS.values()})


def symmetric_scale(ty: TensorType, what: str, node) -> float:
    """The scale of an int16 activation, whose zero point TFLite fixes at 0."""
    scale, zp = i8._scale_zp(ty, what, node)
    if zp != 0:
        raise ModelError(f"{node_label(node)}: {what} is int16 with zero point {zp} "
                         "(TFLite's int16 activations have zero point 0)")
    return scale


def _bias_dtype(sig: Sig) -> None:
    # tflite-micro's 16x8 kernels read the bias as int64 whatever its type.
    if sig.has(2) and sig.in_types[2].dtype != "int64":
        raise UnsupportedError(f"{node_label(sig.node)}: {sig.in_types[2].dtype} bias on int16 "
                               "activations (tflite-micro's 16x8 kernels take int64)")


def _weights_int8(sig: Sig) -> None:
    if sig.in_types[1].dtype != "int8":
        raise UnsupportedError(f"{node_label(sig.node)}: {sig.in_types[1].dtype} weights on "
                               "int16 activations (the 16x8 kernels take int8)")


def _with_checks(infer):
    def checked(sig: Sig):
        _weights_int8(sig)
        _bias_dtype(sig)
        return infer(sig)
    return checked


def io_scales(call_or_ctx) -> tuple[float, float]:
    """(input scale, output scale) of a 16x8 kernel, both zero points checked."""
    node = call_or_ctx.node
    return (symmetric_scale(call_or_ctx.in_types[0], "the input", node),
            symmetric_scale(call_or_ctx.out_types[0], "the output", node))


def conv_multipliers(call_or_ctx, channels: int):
    """Per output channel (M, e) of the 16x8 convolutions (§4's formula)."""
    s_in, s_out = io_scales(call_or_ctx)
    scales = i8._channel_scales(call_or_ctx.in_types[1], channels, call_or_ctx.node)
    return i8.conv_multipliers(s_in, scales, s_out)


def fc_multipliers(call_or_ctx):
    """(M, e) of the 16x8 FC: per channel, or per tensor from the float32 product (§6)."""
    s_in, s_out = io_scales(call_or_ctx)
    return i8.fc_multipliers(s_in, call_or_ctx.in_types[1].quant, s_out)


def requantize64(call: Call, acc: np.ndarray, mult, shift) -> np.ndarray:
    """The 16x8 epilogue: clamp(MBQM64(acc, M, e)) into the activation range."""
    y = qmath.mbqm_int64(acc, mult, shift)
    return qmath.clamp(y, call.attrs["act_min"], call.attrs["act_max"]).astype(np.int16)


def _plus_bias(acc: np.ndarray, bias) -> np.ndarray:
    return acc if bias is None else acc + bias.astype(np.int64)


@register("tfl.conv2d_16x8", infer=_with_checks(i8._conv_infer),
          pattern=Pattern.OUT_ELEMWISE_FUSABLE, macs=per_weight_row_macs(1))
def conv2d_16x8(call: Call, args):
    x, w, bias = args[0], args[1], args[2] if len(args) > 2 else None
    cout = call.out_types[0].shape[3]
    acc = _plus_bias(i8._conv_acc(call, x, w, 0), bias)
    return [requantize64(call, acc, *conv_multipliers(call, cout))]


@register("tfl.depthwise_conv2d_16x8", infer=_with_checks(i8._dw_infer),
          pattern=Pattern.OUT_ELEMWISE_FUSABLE, macs=i8._dw_macs)
def depthwise_conv2d_16x8(call: Call, args):
    x, w, bias = args[0], args[1], args[2] if len(args) > 2 else None
    cout = call.out_types[0].shape[3]
    acc = _plus_bias(i8.depthwise_acc(call, x, w, 0), bias)
    return [requantize64(call, acc, *conv_multipliers(call, cout))]


def fc_weights(call_or_ctx, w: np.ndarray) -> np.ndarray:
    """The FC weights as the kernel multiplies them: a per-tensor kernel adds
    the filter offset (-zero point), the per-channel one ignores it."""
    wq = call_or_ctx.in_types[1].quant
    w = w.astype(np.int64)
    return w - int(wq.zero_point[0]) if len(wq.scale) == 1 else w


@register("tfl.fully_connected_16x8", infer=_with_checks(i8._fc_infer),
          pattern=Pattern.OUT_ELEMWISE_FUSABLE, macs=i8._fc_macs)
def fully_connected_16x8(call: Call, args):
    x, w, bias = args[0], args[1], args[2] if len(args) > 2 else None
    out_ty = call.out_types[0]
    wf = fc_weights(call, w).astype(np.float64)
    # int16 x int8 products summed in float64: exact below 2**53
    acc = (x.reshape(-1, w.shape[1]).astype(np.float64) @ wf.T).astype(np.int64)
    y = requantize64(call, _plus_bias(acc, bias), *fc_multipliers(call))
    return [y.reshape(out_ty.shape)]


def _symmetric_binary(ref):
    """An int8 binary kernel on int16, its operands' zero points checked."""
    def run(call: Call, args):
        for i, what in ((0, "input 0"), (1, "input 1")):
            symmetric_scale(call.in_types[i], what, call.node)
        symmetric_scale(call.out_types[0], "the output", call.node)
        return ref(call, args)
    return run


register("tfl.add_int16", infer=i8._binary_infer, pattern=Pattern.BROADCAST)(
    _symmetric_binary(i8.add))
register("tfl.sub_int16", infer=i8._binary_infer, pattern=Pattern.BROADCAST)(
    _symmetric_binary(i8.sub))
register("tfl.mul_int16", infer=i8._binary_infer, pattern=Pattern.BROADCAST)(
    _symmetric_binary(i8.mul))

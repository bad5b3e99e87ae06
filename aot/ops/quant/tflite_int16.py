"""TFLite's int16-activation kernels, bit-exact with tflite-micro.

The "16x8" convolutions and fully connected take int16 activations, int8
weights and an int64 bias; they accumulate in int64 and requantize with the
int64 MultiplyByQuantizedMultiplier (TFLITE_INT8.md §2, `qmath.mbqm_int64`:
one rounding, a 16-bit multiplier), with no input or output offset. With an
int32 bias tflite-micro runs the same template on int32: the sum wraps in
int32 and the int32 MBQM (double rounding) requantizes it; without a bias,
int64 (both checked against it: they differ in 5-14% of outputs).
BATCH_MATMUL sums in int64 too. MEAN and SUM scale by one multiplier
s_in / (count s_out); SOFTMAX interpolates TFLM's exp and 1/(1+x) tables;
LOGISTIC and TANH interpolate the sigmoid table of §11 after their own
input scaling. ADD, SUB, MUL, SQUARED_DIFFERENCE, LEAKY_RELU and the pools
are the int8 kernels' arithmetic on int16's range (ADD's left shift is 15
instead of 20, SQUARED_DIFFERENCE's 0 instead of 7), registered under their
own names so a graph says which kernel runs.

TFLite quantizes int16 activations symmetrically: every int16 tensor these
ops read or write has zero point 0 (tflite-micro refuses others).

The importer maps an int8 op to its int16 form with `INT16_OPS`.
"""
from __future__ import annotations

import functools

import numpy as np

from aot.errors import ModelError, UnsupportedError, node_label
from aot.ir.graph import TensorType
from aot.ops.quant import qmath
from aot.ops.quant import tflite_int8 as i8
from aot.ops.registry import Call, Pattern, Sig, inner_dim_macs, per_weight_row_macs, register

INT16_OPS = {
    "tfl.conv2d": "tfl.conv2d_16x8",
    "tfl.depthwise_conv2d": "tfl.depthwise_conv2d_16x8",
    "tfl.fully_connected": "tfl.fully_connected_16x8",
    "tfl.add": "tfl.add_int16",
    "tfl.sub": "tfl.sub_int16",
    "tfl.mul": "tfl.mul_int16",
    "tfl.softmax": "tfl.softmax_int16",
    "tfl.max_pool2d": "tfl.max_pool2d_int16",
    "tfl.avg_pool2d": "tfl.avg_pool2d_int16",
    "tfl.mean": "tfl.mean_int16",
    "tfl.logistic": "tfl.logistic_int16",
    "tfl.tanh": "tfl.tanh_int16",
    "tfl.leaky_relu": "tfl.leaky_relu_int16",
    "tfl.relu": "tfl.relu_int16",
    "tfl.relu6": "tfl.relu6_int16",
    "tfl.abs": "tfl.abs_int16",
    "tfl.squared_difference": "tfl.squared_difference_int16",
    "tfl.rsqrt": "tfl.rsqrt_int16",
}
i8.ACTIVATION_DTYPE.update({op: "int16" for op in INT16_OPS.values()})


def symmetric_scale(ty: TensorType, what: str, node) -> float:
    """The scale of an int16 activation, whose zero point TFLite fixes at 0."""
    scale, zp = i8.scale_zp(ty, what, node)
    if zp != 0:
        raise ModelError(f"{node_label(node)}: {what} is int16 with zero point {zp} "
                         "(TFLite's int16 activations have zero point 0)")
    return scale


def _weights_int8(sig: Sig) -> None:
    if sig.in_types[1].dtype != "int8":
        raise UnsupportedError(f"{node_label(sig.node)}: {sig.in_types[1].dtype} weights on "
                               "int16 activations (the 16x8 kernels take int8)")


def _int64_bias(sig: Sig) -> None:
    # tflite-micro's int16 depthwise kernel reads its bias as int64 whatever its
    # type: an int32 bias gives garbage there, not a result to match.
    if sig.has(2) and sig.in_types[2].dtype != "int64":
        raise UnsupportedError(f"{node_label(sig.node)}: {sig.in_types[2].dtype} bias on int16 "
                               "activations (tflite-micro's int16 depthwise reads int64)")


def _infer16(infer, *checks):
    """Type inference of an int16 op: its int16 inputs at zero point 0 (the
    output's is checked where the kernel reads it), the op's own checks,
    then `infer`."""
    def checked(sig: Sig):
        for k, ty in enumerate(sig.in_types):
            if ty is not None and ty.dtype == "int16" and ty.quant is not None:
                symmetric_scale(ty, f"input {k}", sig.node)
        for check in checks:
            check(sig)
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
    scales = i8.channel_scales(call_or_ctx.in_types[1], channels, call_or_ctx.node)
    return i8.conv_multipliers(s_in, scales, s_out)


def fc_multipliers(call_or_ctx):
    """(M, e) of the 16x8 FC: per channel, or per tensor from the float32 product (§6)."""
    s_in, s_out = io_scales(call_or_ctx)
    return i8.fc_multipliers(s_in, call_or_ctx.in_types[1].quant, s_out)


def accumulates_in_int32(call_or_ctx) -> bool:
    """Whether the 16x8 kernel sums in int32 (an int32 bias), else in int64."""
    bias = call_or_ctx.in_types[2] if len(call_or_ctx.in_types) > 2 else None
    return bias is not None and bias.dtype == "int32"


def check_int64_shift(node, shift) -> None:
    """The int64 MBQM shifts right by 15 - e: TFLM allows e up to 7 (a
    multiplier below 2**7); a larger one is refused, not computed."""
    if np.max(shift) > 7:
        raise UnsupportedError(f"{node_label(node)}: requantization multiplier of "
                               f"2**{int(np.max(shift)) - 1} or more (tflite-micro's int64 "
                               "MultiplyByQuantizedMultiplier takes below 2**7)")


def requantize16(call: Call, acc: np.ndarray, mult, shift) -> np.ndarray:
    """The 16x8 epilogue: clamp(MBQM(acc, M, e)) into the activation range, by
    the int64 MBQM, or the int32 one on the wrapped sum (int32 bias)."""
    if accumulates_in_int32(call):
        y = qmath.mbqm(qmath.wrap_int32(acc), mult, shift)
    else:
        check_int64_shift(call.node, shift)
        y = qmath.mbqm_int64(acc, mult, shift)
    return qmath.clamp(y, call.attrs["act_min"], call.attrs["act_max"]).astype(np.int16)


def _plus_bias(acc: np.ndarray, bias) -> np.ndarray:
    return acc if bias is None else acc + bias.astype(np.int64)


@register("tfl.conv2d_16x8", infer=_infer16(i8._conv_infer, _weights_int8),
          pattern=Pattern.OUT_ELEMWISE_FUSABLE, macs=per_weight_row_macs(1))
def conv2d_16x8(call: Call, args):
    x, w, bias = args[0], args[1], args[2] if len(args) > 2 else None
    cout = call.out_types[0].shape[3]
    acc = _plus_bias(i8._conv_acc(call, x, w, 0), bias)
    return [requantize16(call, acc, *conv_multipliers(call, cout))]


@register("tfl.depthwise_conv2d_16x8", infer=_infer16(i8._dw_infer, _weights_int8, _int64_bias),
          pattern=Pattern.OUT_ELEMWISE_FUSABLE, macs=i8._dw_macs)
def depthwise_conv2d_16x8(call: Call, args):
    x, w, bias = args[0], args[1], args[2] if len(args) > 2 else None
    cout = call.out_types[0].shape[3]
    acc = _plus_bias(i8.depthwise_acc(call, x, w, 0), bias)
    return [requantize16(call, acc, *conv_multipliers(call, cout))]


def fc_weights(call_or_ctx, w: np.ndarray) -> np.ndarray:
    """The FC weights as the kernel multiplies them: a per-tensor kernel adds
    the filter offset (-zero point), the per-channel one ignores it."""
    wq = call_or_ctx.in_types[1].quant
    w = w.astype(np.int64)
    return w - int(wq.zero_point[0]) if len(wq.scale) == 1 else w


@register("tfl.fully_connected_16x8", infer=_infer16(i8._fc_infer, _weights_int8),
          pattern=Pattern.OUT_ELEMWISE_FUSABLE, macs=i8._fc_macs)
def fully_connected_16x8(call: Call, args):
    x, w, bias = args[0], args[1], args[2] if len(args) > 2 else None
    out_ty = call.out_types[0]
    wf = fc_weights(call, w).astype(np.float64)
    # int16 x int8 products summed in float64: exact below 2**53
    acc = (x.reshape(-1, w.shape[1]).astype(np.float64) @ wf.T).astype(np.int64)
    y = requantize16(call, _plus_bias(acc, bias), *fc_multipliers(call))
    return [y.reshape(out_ty.shape)]


def _symmetric_unary(ref):
    """An int8 one-input kernel on int16, its zero points checked."""
    def run(call: Call, args):
        symmetric_scale(call.in_types[0], "the input", call.node)
        symmetric_scale(call.out_types[0], "the output", call.node)
        return ref(call, args)
    return run


def _symmetric_binary(ref):
    """An int8 binary kernel on int16, its operands' zero points checked."""
    def run(call: Call, args):
        for i, what in ((0, "input 0"), (1, "input 1")):
            symmetric_scale(call.in_types[i], what, call.node)
        symmetric_scale(call.out_types[0], "the output", call.node)
        return ref(call, args)
    return run


register("tfl.add_int16", infer=_infer16(i8._binary_infer), pattern=Pattern.BROADCAST)(
    _symmetric_binary(i8.add))
register("tfl.sub_int16", infer=_infer16(i8._binary_infer), pattern=Pattern.BROADCAST)(
    _symmetric_binary(i8.sub))
register("tfl.mul_int16", infer=_infer16(i8._binary_infer), pattern=Pattern.BROADCAST)(
    _symmetric_binary(i8.mul))
register("tfl.squared_difference_int16", infer=_infer16(i8._binary_infer),
         pattern=Pattern.BROADCAST)(
    _symmetric_binary(i8.squared_difference))
# The int8 pools read their dtype's range: TFLM's int16 pools are the same
# templates (they do not requantize, so no zero point matters).
register("tfl.max_pool2d_int16", infer=i8._pool_infer, pattern=Pattern.REDUCE)(i8.max_pool2d)
register("tfl.avg_pool2d_int16", infer=i8._pool_infer, pattern=Pattern.REDUCE)(i8.avg_pool2d)


# --------------------------------------------------------------------- mean

def mean_multiplier(call_or_ctx, count: int) -> tuple[int, int]:
    """(M, e) of s_in / (count * s_out): the int16 MEAN divides inside its one
    multiplier (the int8 kernel rescales, then divides with rounding); SUM
    (attribute sum) is the same kernel with count 1."""
    count = i8.mean_count(call_or_ctx.attrs, [count])
    node = call_or_ctx.node
    s_in = symmetric_scale(call_or_ctx.in_types[0], "the input", node)
    s_out = symmetric_scale(call_or_ctx.out_types[0], "the output", node)
    return qmath.quantize_multiplier(s_in / (count * s_out))


@register("tfl.mean_int16", infer=_infer16(i8._mean_infer), pattern=Pattern.REDUCE)
def mean_int16(call: Call, args):
    """clamp(MBQM(sum, s_in / (count s_out))) (checked against tflite-micro on
    one and two axes, with and without requantization)."""
    axes = i8.mean_axes(call, args[1])
    mult, shift = mean_multiplier(call, int(np.prod([args[0].shape[i] for i in axes])))
    y = qmath.mbqm(args[0].astype(np.int64).sum(axis=axes), mult, shift)
    return [qmath.clamp(y, -32768, 32767).astype(np.int16).reshape(call.out_types[0].shape)]


# ------------------------------------------------------------------ softmax

def _expf():
    """C's expf (std::exp on a float, as tflite-micro calls it); numpy's float32
    exp where libm cannot be loaded."""
    import ctypes
    import ctypes.util
    path = ctypes.util.find_library("m")
    if path is None:
        return lambda v: np.exp(np.float32(v))
    fn = ctypes.CDLL(path).expf
    fn.restype, fn.argtypes = ctypes.c_float, (ctypes.c_float,)
    return lambda v: np.float32(fn(float(v)))


def gen_lut(func, lo: float, hi: float) -> np.ndarray:
    """tflite-micro's gen_lut<float, int16_t, int16_t> for the output range
    [-1, 1]: 512 samples of func on [lo, hi] in float32, each nudged by half
    the error of interpolating to its midpoint, and the value at hi."""
    f32 = np.float32
    step = f32((f32(hi) - f32(lo)) / f32(512))
    half = f32(step / f32(2))
    scale = f32(65536) / f32(2)

    def rnd(v):
        return qmath.round_half_away_array(np.asarray(f32(v)))

    lut = np.empty(513, np.int64)
    for i in range(512):
        x = f32(f32(lo) + f32(f32(i) * step))
        val, nxt = func(x), func(f32(f32(lo) + f32(f32(i + 1) * step)))
        mid = func(f32(x + half))
        sample = rnd(f32(val * scale))
        interp = rnd(f32(f32(f32(nxt * scale) + sample) / f32(2)))
        bias = rnd(f32(f32(interp - rnd(f32(mid * scale))) / f32(2)))
        lut[i] = np.clip(f32(sample - bias), -32768, 32767)
    lut[512] = np.clip(rnd(f32(func(f32(hi)) * scale)), -32768, 32767)
    return lut


@functools.cache
def softmax_luts() -> tuple[np.ndarray, np.ndarray]:
    """(exp on [-10, 0], 1/(1+x) on [0, 1]): SoftmaxPrepare's two int16 tables."""
    expf = _expf()
    return (gen_lut(expf, -10.0, 0.0),
            gen_lut(lambda v: np.float32(np.float32(1) / np.float32(np.float32(1) + v)),
                    0.0, 1.0))


def _wrap16(v):
    return ((np.asarray(v, np.int64) + (1 << 15)) & 0xFFFF) - (1 << 15)


def lut_bases_slopes(lut: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 512 bases and int16 slopes lut_lookup interpolates between."""
    return lut[:512], _wrap16(lut[1:] - lut[:512])


def lut_lookup(v: np.ndarray, lut: np.ndarray) -> np.ndarray:
    """generic_int16_table_lookup: linear interpolation of the 513-entry table,
    its 512 segments indexed by the top 9 bits of the int16 value."""
    v = np.asarray(v, np.int64)
    base, slope = lut_bases_slopes(lut)
    index = 256 + (v >> 7)
    return _wrap16(base[index] + ((slope[index] * (v & 0x7F) + 64) >> 7))


def softmax_multiplier(beta: float, s_in: float) -> tuple[int, int]:
    """(M, e) mapping an input difference in [-65535, 0] to [-10, 0] (one unit 10/65535)."""
    return qmath.quantize_multiplier(float(np.float32(s_in)) * float(np.float32(beta))
                                     / (10.0 / 65535.0))


def _softmax_infer(sig: Sig):
    i8._require_int8(sig)
    return [i8._out_type(sig, sig.in_types[0].shape)]


def check_softmax_output(call_or_ctx) -> None:
    s_out = symmetric_scale(call_or_ctx.out_types[0], "the output", call_or_ctx.node)
    if abs(s_out - 1 / 32768) > 0.001 / 32768:
        raise ModelError(f"{node_label(call_or_ctx.node)}: int16 softmax output scale {s_out} "
                         "(tflite-micro requires 1/32768)")


@register("tfl.softmax_int16", infer=_infer16(_softmax_infer), pattern=Pattern.REDUCE)
def softmax_int16(call: Call, args):
    """SoftmaxInt16: exps from the table, their sum's reciprocal from the
    other, each exp scaled by it in Q0.15."""
    s_in = symmetric_scale(call.in_types[0], "the input", call.node)
    check_softmax_output(call)
    exp_lut, recip_lut = softmax_luts()
    mult, shift = softmax_multiplier(call.attrs.get("beta", 1.0), s_in)
    x = args[0].astype(np.int64)
    diff = x - x.max(axis=-1, keepdims=True)
    scaled = qmath.clamp(qmath.mbqm(diff, mult, shift) + 32767, -32768, 32767)
    exps = lut_lookup(scaled, exp_lut)
    total = exps.sum(axis=-1, keepdims=True)
    headroom = i8._clz32(total)
    shifted = ((total << (headroom - 1)) + (1 << 13)) >> 14
    recip = lut_lookup(qmath.clamp(shifted - (1 << 15) - (1 << 16), -32768, 32767), recip_lut)
    right = 31 - headroom
    y = (exps * recip + (np.int64(1) << (right - 1))) >> right
    return [qmath.clamp(y, 0, 32767).astype(np.int16)]


# ------------------------------------------------------------ logistic / tanh

def checked_log2(x: float) -> tuple[bool, int]:
    """CheckedLog2: (whether x is within 1e-3 of a power of two in log2, that power)."""
    f32 = np.float32
    log2 = f32(f32(np.log(f32(x))) * f32(f32(1) / f32(np.log(f32(2)))))
    rounded = f32(qmath.round_half_away(float(log2)))
    return bool(abs(f32(log2 - rounded)) < f32(1e-3)), int(rounded)


# TFLM's int16 LOGISTIC keeps a power-of-two input scale unrescaled only when
# it is 2**-12; TANH also at 2**-11.
_POT_SHIFTS = {"tfl.logistic_int16": (0,), "tfl.tanh_int16": (0, 1)}


def activation_input_scaling(call_or_ctx) -> tuple[int, int]:
    """(M, L): the input becomes (x M + 2**(L-1)) >> L, in units of 1/(3 * 4096)
    (so +-2**17 is +-10.7), the scale the sigmoid table interpolation reads."""
    node = call_or_ctx.node
    s_in = symmetric_scale(call_or_ctx.in_types[0], "the input", node)
    s_out = symmetric_scale(call_or_ctx.out_types[0], "the output", node)
    pot, log2 = checked_log2(s_out)
    if not pot or log2 != -15:
        raise ModelError(f"{node_label(node)}: int16 output scale {s_out} "
                         "(tflite-micro requires 1/32768)")
    pot, log2 = checked_log2(s_in)
    if pot and 12 + log2 in _POT_SHIFTS[node.op]:
        return 3 << (12 + log2), 0
    mult, shift = float(np.float32(s_in)) * 4096.0 * 3.0, 0
    while mult <= 32767.0 / 2.0 and shift <= 30:
        shift += 1
        mult *= 2.0
    return int(mult), shift


def scale_activation_input(x: np.ndarray, mult: int, shift: int) -> np.ndarray:
    rounding = (1 << (shift - 1)) if shift > 0 else 0
    return (x.astype(np.int64) * mult + rounding) >> shift


def _unary_infer(sig: Sig):
    i8._require_int8(sig)
    return [i8._out_type(sig, sig.in_types[0].shape)]


@register("tfl.logistic_int16", infer=_infer16(_unary_infer), pattern=Pattern.OPAQUE)
def logistic_int16(call: Call, args):
    """reference_integer_ops::Logistic on int16: the sigmoid table interpolated."""
    v = scale_activation_input(args[0], *activation_input_scaling(call))
    return [qmath.sigmoid16_scaled(v).astype(np.int16)]


@register("tfl.tanh_int16", infer=_infer16(_unary_infer), pattern=Pattern.OPAQUE)
def tanh_int16(call: Call, args):
    """reference_integer_ops::Tanh on int16: tanh(x) = 2 sigmoid(2x) - 1 from the table."""
    v = scale_activation_input(args[0], *activation_input_scaling(call))
    return [qmath.tanh16_scaled(v).astype(np.int16)]


# -------------------------------------------------------------- relu / relu6

def relu_params(call_or_ctx) -> tuple[int, int]:
    """CalculateReluOpData: (M, e) of s_in / s_out; the clamp is [0, 32767] at
    zero point 0."""
    node = call_or_ctx.node
    s_in = symmetric_scale(call_or_ctx.in_types[0], "the input", node)
    s_out = symmetric_scale(call_or_ctx.out_types[0], "the output", node)
    return qmath.quantize_multiplier(s_in / s_out)


def relu6_top(call_or_ctx) -> int:
    """Relu6Prepare's six: 6 in the input's quantization (float32 division,
    std::round), within int16; TFLM's RELU6 does not requantize."""
    s_in = symmetric_scale(call_or_ctx.in_types[0], "the input", call_or_ctx.node)
    symmetric_scale(call_or_ctx.out_types[0], "the output", call_or_ctx.node)
    six = qmath.round_half_away(float(np.float32(6.0) / np.float32(s_in)))
    return int(min(max(six, -32768), 32767))


# LEAKY_RELU: the int8 kernel, which clamps to its output dtype's range
register("tfl.leaky_relu_int16", infer=_infer16(_unary_infer), pattern=Pattern.ELEMWISE)(
    _symmetric_unary(i8.leaky_relu))


@register("tfl.relu_int16", infer=_infer16(_unary_infer), pattern=Pattern.ELEMWISE)
def relu_int16(call: Call, args):
    """ReluQuantized<int16_t>: clamp(MBQM(x, s_in/s_out), 0, 32767)."""
    return [qmath.clamp(qmath.mbqm(args[0], *relu_params(call)), 0, 32767).astype(np.int16)]


@register("tfl.relu6_int16", infer=_infer16(_unary_infer), pattern=Pattern.ELEMWISE)
def relu6_int16(call: Call, args):
    """Relu6Quantized<int16_t>: the raw value clamped to [0, six]."""
    return [qmath.clamp(args[0], 0, relu6_top(call)).astype(np.int16)]


# ---------------------------------------------------------------------- abs

def abs_rescale(call_or_ctx) -> tuple[int, int] | None:
    """AbsEvalQuantized's (M, e) of s_in / s_out, or None where the float32
    scales are equal and it copies |x| unscaled."""
    node = call_or_ctx.node
    s_in = symmetric_scale(call_or_ctx.in_types[0], "the input", node)
    s_out = symmetric_scale(call_or_ctx.out_types[0], "the output", node)
    if np.float32(s_in) == np.float32(s_out):
        return None
    return qmath.quantize_multiplier(s_in / s_out)


@register("tfl.abs_int16", infer=_infer16(_unary_infer), pattern=Pattern.ELEMWISE)
def abs_int16(call: Call, args):
    value = np.abs(args[0].astype(np.int64))
    rescale = abs_rescale(call)
    if rescale is not None:
        value = qmath.mbqm(value, *rescale)
    return [qmath.clamp(value, -32768, 32767).astype(np.int16)]


# -------------------------------------------------------------- batch matmul

def _batch_matmul_infer(sig: Sig):
    a, b = sig.in_types[0], sig.in_types[1]
    if a.dtype != "int16" or b.dtype != "int16":
        raise UnsupportedError(f"{node_label(sig.node)}: {a.dtype} x {b.dtype} inputs "
                               "(this kernel takes int16)")
    if len(a.shape) < 2 or len(b.shape) < 2 or a.shape[-1] != b.shape[-2]:
        raise sig.fail(f"shapes {list(a.shape)} and {list(b.shape)} do not multiply")
    try:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise sig.fail(f"batch dims {list(a.shape[:-2])} and {list(b.shape[:-2])} do not "
                       "broadcast") from None
    return [TensorType(tuple(batch) + (a.shape[-2], b.shape[-1]), "int16")]


def batch_matmul_multiplier(call_or_ctx) -> tuple[int, int]:
    """(M, e) of s_a s_b / s_out (double), every zero point 0."""
    node = call_or_ctx.node
    s_a = symmetric_scale(call_or_ctx.in_types[0], "input 0", node)
    s_b = symmetric_scale(call_or_ctx.in_types[1], "input 1", node)
    s_out = symmetric_scale(call_or_ctx.out_types[0], "the output", node)
    return qmath.quantize_multiplier(s_a * s_b / s_out)


@register("tfl.batch_matmul_int16", infer=_infer16(_batch_matmul_infer), pattern=Pattern.OPAQUE,
          macs=inner_dim_macs(0))
def batch_matmul_int16(call: Call, args):
    """BatchMatMul<int16_t, int64_t>: exact int64 sums, the int64 MBQM, int16 clamp."""
    acc = np.matmul(args[0].astype(np.int64), args[1].astype(np.int64))
    mult, shift = batch_matmul_multiplier(call)
    check_int64_shift(call.node, shift)
    y = qmath.mbqm_int64(acc, mult, shift)
    return [qmath.clamp(y, -32768, 32767).astype(np.int16)]


# -------------------------------------------------------------------- rsqrt

RSQRT_SHIFT = 20   # RsqrtEvalQuantized's extra bits on 1/sqrt(x) ("kShift")


def rsqrt_output_multiplier(call_or_ctx) -> tuple[int, int]:
    """(M, e) of 1 / (sqrt(s_in) s_out), the scales as float32 (the int8 kernel's)."""
    node = call_or_ctx.node
    s_in = symmetric_scale(call_or_ctx.in_types[0], "the input", node)
    s_out = symmetric_scale(call_or_ctx.out_types[0], "the output", node)
    return qmath.quantize_multiplier(1.0 / (np.sqrt(float(np.float32(s_in)))
                                            * float(np.float32(s_out))))


@register("tfl.rsqrt_int16", infer=_infer16(_unary_infer), pattern=Pattern.OPAQUE)
def rsqrt_int16(call: Call, args):
    """RsqrtEvalQuantized<int16_t>: 1/sqrt(x) as GetInvSqrtQuantizedMultiplierExp's
    multiplier applied to 1 with 20 extra bits, rescaled by 1/(sqrt(s_in) s_out).
    TFLM fails the invoke on x < 0; aot gives 32767 there, as for x = 0."""
    m_out, e_out = rsqrt_output_multiplier(call)
    x = args[0].astype(np.int64)
    out = np.full(x.shape, 32767, np.int64)
    for v in np.unique(x[x > 0]):
        m, e = i8.inv_sqrt_multiplier(int(v))
        data = qmath.mbqm(1, m, e + RSQRT_SHIFT)
        out[x == v] = qmath.clamp(qmath.mbqm(data, m_out, e_out - RSQRT_SHIFT), -32768, 32767)
    return [out.astype(np.int16)]

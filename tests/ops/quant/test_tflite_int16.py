"""int16 activations (TFLite's 16x8 quantization: int16 activations at zero
point 0, int8 weights, int64 bias) on single-op models built by
aot.testing.tflite_builder: bit-exact with tflite-micro through the interpreter, the
generated code bit-exact with the interpreter on the same inputs; the ops
tflite-micro has no int16 kernel for, and those aot does not support yet,
refused in one line."""
from __future__ import annotations

import functools

import numpy as np
import pytest

import aot
from aot.errors import ModelError, UnsupportedError
from aot.frontend.tflite.importer import import_tflite
from aot.testing.tflite_builder import TFLiteBuilder
from support.tflite_op_cases import CASES as OPS_CASES
from support.tflite_op_cases import _model, _ours, _tflm_outputs as _tflm
from support.tflite_op_cases import _ours_graph as _graph

I16 = "int16"


def _q(dtype, scale):
    """Quantization keywords: int16 symmetric (zero point 0), int8 at zero point 3."""
    if dtype == I16:
        return dict(scale=[scale], zp=[0])
    return dict(scale=[scale], zp=[3]) if dtype == "int8" else {}


def X(shape, dtype=I16, scale=0.0011, name="x"):
    return (name, tuple(shape), dtype, None, _q(dtype, scale))


def Y(shape, dtype=I16, scale=0.0023, name="y"):
    return (name, tuple(shape), dtype, None, _q(dtype, scale))


def C(value, dtype, name="c", **quant):
    return (name, np.shape(value), dtype, np.asarray(value, dtype), quant)


RNG = np.random.default_rng(16)   # reseeded per model: see model()


def _weights(shape, per_channel_axis=None, zp=0):
    """int8 weights, per-channel scales along an axis (or one scale)."""
    w = RNG.integers(-127, 128, shape)
    if per_channel_axis is None:
        return C(w, "int8", "w", scale=[0.004], zp=[zp])
    n = shape[per_channel_axis]
    return C(w, "int8", "w", scale=list(RNG.uniform(0.002, 0.02, n)), zp=[0] * n,
             qdim=per_channel_axis)


def _bias(n, dtype="int64", spread=400000):
    return C(RNG.integers(-spread, spread, n), dtype, "bias", scale=[1e-6] * n, zp=[0] * n)


CASES = {}


@functools.cache
def model(name: str) -> bytes:
    """The case's .tflite, the same whichever tests run first."""
    global RNG
    RNG = np.random.default_rng(16)
    return CASES[name]()


def case(name):
    def wrap(fn):
        CASES[name] = fn
        return fn
    return wrap


def _conv(padding, stride, dilation=1, act=0, bias="int64", per_channel=True):
    w = _weights((4, 3, 3, 3), 0 if per_channel else None)
    out_hw = {(0, 1): 7, (1, 1): 7 - 2 * dilation, (0, 2): 4, (1, 2): 3}[(padding, stride)]
    return _model("CONV_2D", [X((2, 7, 7, 3)), w, _bias(4, bias or "int64")][:3 if bias else 2],
                  [Y((2, out_hw, out_hw, 4), scale=0.005)], "Conv2DOptions", Padding=padding,
                  StrideH=stride, StrideW=stride, DilationHFactor=dilation,
                  DilationWFactor=dilation, FusedActivationFunction=act)


case("CONV_2D_same")(lambda: _conv(0, 1))
case("CONV_2D_valid_stride2_relu")(lambda: _conv(1, 2, act=1))
case("CONV_2D_dilated_no_bias")(lambda: _conv(1, 1, dilation=2, bias=None))
case("CONV_2D_per_tensor_relu6")(lambda: _conv(0, 2, act=3, per_channel=False))
# an int32 bias: tflite-micro sums in int32 and requantizes with the int32 MBQM
case("CONV_2D_int32_bias")(lambda: _conv(0, 1, bias="int32"))
# sums beyond int32 (bias ~2**37): the int64 accumulator (the others fit int32)
case("CONV_2D_int64_sums")(lambda: _model(
    "CONV_2D", [X((1, 5, 5, 3)), _weights((4, 3, 3, 3), 0), _bias(4, spread=1 << 37)],
    [Y((1, 5, 5, 4), scale=40.0)], "Conv2DOptions", Padding=0, StrideH=1, StrideW=1))
case("DEPTHWISE_CONV_2D_int64_sums")(lambda: _model(
    "DEPTHWISE_CONV_2D", [X((1, 5, 5, 3)), _weights((1, 3, 3, 3), 3), _bias(3, spread=1 << 37)],
    [Y((1, 5, 5, 3), scale=40.0)], "DepthwiseConv2DOptions", Padding=0, StrideH=1, StrideW=1,
    DepthMultiplier=1))


# shapes the vector tiles take (sums within int32): 16 and 6 channels deep
# (NEON's SMLAL by element, per channel; x86's pmaddwd pairs), an odd depth
# (window rows in pairs), a 1x1 conv, a depthwise conv of 16 channels
def _vconv(x, w_shape, y, padding=0, stride=1, act=0, per_channel=True):
    return _model("CONV_2D", [X(x), _weights(w_shape, 0 if per_channel else None),
                              _bias(w_shape[0])], [Y(y, scale=0.1)], "Conv2DOptions",
                  Padding=padding, StrideH=stride, StrideW=stride, FusedActivationFunction=act)


case("CONV_2D_vector_depth16_relu")(lambda: _vconv((1, 6, 7, 16), (16, 3, 3, 16), (1, 6, 7, 16),
                                                   act=1))
case("CONV_2D_vector_depth6_valid_stride2")(lambda: _vconv((1, 7, 6, 6), (8, 3, 3, 6),
                                                           (1, 3, 2, 8), 1, 2))
case("CONV_2D_vector_depth3_per_tensor")(lambda: _vconv((1, 5, 6, 3), (8, 3, 3, 3), (1, 5, 6, 8),
                                                        per_channel=False))
case("CONV_2D_vector_1x1")(lambda: _vconv((1, 4, 4, 16), (16, 1, 1, 16), (1, 4, 4, 16)))
case("DEPTHWISE_CONV_2D_vector_depth16")(lambda: _model(
    "DEPTHWISE_CONV_2D", [X((1, 6, 6, 16)), _weights((1, 3, 3, 16), 3), _bias(16)],
    [Y((1, 6, 6, 16), scale=0.01)], "DepthwiseConv2DOptions", Padding=0, StrideH=1, StrideW=1,
    DepthMultiplier=1))


def _dwconv(multiplier, padding, stride, act=0, bias="int64"):
    channels = 3 * multiplier
    out_hw = {(0, 1): 6, (1, 1): 4, (0, 2): 3, (1, 2): 2}[(padding, stride)]
    ins = [X((1, 6, 6, 3)), _weights((1, 3, 3, channels), 3), _bias(channels, bias or "int64")]
    return _model("DEPTHWISE_CONV_2D", ins[:3 if bias else 2],
                  [Y((1, out_hw, out_hw, channels))], "DepthwiseConv2DOptions",
                  Padding=padding, StrideH=stride, StrideW=stride, DepthMultiplier=multiplier,
                  FusedActivationFunction=act)


case("DEPTHWISE_CONV_2D_same")(lambda: _dwconv(1, 0, 1))
case("DEPTHWISE_CONV_2D_multiplier2_stride2_relu")(lambda: _dwconv(2, 0, 2, act=1))
case("DEPTHWISE_CONV_2D_valid_no_bias")(lambda: _dwconv(1, 1, 1, bias=None))


def _fc(per_channel, bias="int64", keep=False, act=0, weight_zp=0):
    w = _weights((5, 12), 0 if per_channel else None, weight_zp)
    out = (2, 3, 5) if keep else (6, 5)
    ins = [X((2, 3, 12)), w, _bias(5, bias or "int64")]
    return _model("FULLY_CONNECTED", ins[:3 if bias else 2],
                  [Y(out)], "FullyConnectedOptions", KeepNumDims=keep,
                  FusedActivationFunction=act)


case("FULLY_CONNECTED")(lambda: _fc(False))
case("FULLY_CONNECTED_weight_zero_point")(lambda: _fc(False, weight_zp=2))
case("FULLY_CONNECTED_per_channel_keep_dims")(lambda: _fc(True, keep=True))
case("FULLY_CONNECTED_no_bias_relu")(lambda: _fc(False, bias=None, act=1))
case("FULLY_CONNECTED_int32_bias")(lambda: _fc(False, bias="int32"))
case("FULLY_CONNECTED_per_channel_int32_bias")(lambda: _fc(True, bias="int32"))
# vector tiles: 20 units (whole vectors and a remainder), an odd depth (a last single step)
case("FULLY_CONNECTED_vector_per_channel_relu")(lambda: _model(
    "FULLY_CONNECTED", [X((3, 41)), _weights((20, 41), 0), _bias(20)], [Y((3, 20), scale=0.05)],
    "FullyConnectedOptions", FusedActivationFunction=1))
# sums far beyond int32 (bias ~2**37): the int64 accumulator and MBQM matter
case("FULLY_CONNECTED_int64_sums")(lambda: _model(
    "FULLY_CONNECTED", [X((3, 12)), _weights((5, 12)), _bias(5, spread=1 << 37)],
    [Y((3, 5), scale=12.0)], "FullyConnectedOptions"))

S = (2, 5, 4, 3)
for _op, _s in (("ADD", 0.0023), ("SUB", 0.0023), ("MUL", 0.02)):
    case(_op)(lambda op=_op, s=_s: _model(op, [X(S), X(S, scale=0.0004, name="x2")],
                                          [Y(S, scale=s)]))
    case(f"{_op}_broadcast_relu")(lambda op=_op: _model(
        op, [X(S, scale=0.002), X((4, 3), scale=0.0031, name="x2")], [Y(S, scale=0.003)],
        f"{op.title()}Options", FusedActivationFunction=1))
# power-of-two scales: LiteRT's int16 ADD would take its "pot" path; TFLM does not
case("ADD_power_of_two_scales")(lambda: _model(
    "ADD", [X(S, scale=2.0 ** -10), X(S, scale=2.0 ** -11, name="x2")], [Y(S, scale=2.0 ** -9)]))
case("ADD_same_scales")(lambda: _model("ADD", [X(S), X(S, name="x2")], [Y(S, scale=0.0011)]))

for _scale, _beta, _depth in ((0.0011, 1.0, 7), (0.0002, 1.0, 33), (0.02, 0.5, 5)):
    case(f"SOFTMAX_scale{_scale}_beta{_beta}")(lambda s=_scale, b=_beta, d=_depth: _model(
        "SOFTMAX", [X((4, d), scale=s)], [Y((4, d), scale=1 / 32768)], "SoftmaxOptions", Beta=b))

for _pool in ("MAX_POOL_2D", "AVERAGE_POOL_2D"):
    case(f"{_pool}_same_stride2")(lambda op=_pool: _model(
        op, [X((2, 5, 5, 3))], [Y((2, 3, 3, 3), scale=0.0011)], "Pool2DOptions", Padding=0,
        StrideH=2, StrideW=2, FilterHeight=3, FilterWidth=3))
    case(f"{_pool}_valid_relu6")(lambda op=_pool: _model(
        op, [X((1, 6, 6, 2), scale=0.0003)], [Y((1, 3, 3, 2), scale=0.0003)], "Pool2DOptions",
        Padding=1, StrideH=2, StrideW=2, FilterHeight=2, FilterWidth=2,
        FusedActivationFunction=3))
case("MEAN")(lambda: _model("MEAN", [X(S), C([1, 2], "int32")], [Y((2, 1, 1, 3), scale=0.0004)],
                            "ReducerOptions", KeepDims=True))
case("MEAN_same_quantization")(lambda: _model(
    "MEAN", [X(S), C([1, 2], "int32")], [Y((2, 1, 1, 3), scale=0.0011)], "ReducerOptions",
    KeepDims=True))
case("SUM")(lambda: _model("SUM", [X(S), C([1, 2], "int32")], [Y((2, 1, 1, 3), scale=0.02)],
                           "ReducerOptions", KeepDims=True))
case("SUM_one_axis_saturating")(lambda: _model("SUM", [X(S), C([3], "int32")], [Y((2, 5, 4))],
                                               "ReducerOptions", KeepDims=False))
case("MEAN_one_axis")(lambda: _model("MEAN", [X(S), C([3], "int32")], [Y((2, 5, 4))],
                                     "ReducerOptions", KeepDims=False))

# scales TFLM keeps as powers of two (2**-12, and 2**-11 for TANH) and rescaled ones
for _op in ("LOGISTIC", "TANH"):
    for _scale in (2.0 ** -12, 2.0 ** -11, 0.0011, 0.00004):
        case(f"{_op}_scale{_scale:.3g}")(lambda op=_op, s=_scale: _model(
            op, [X(S, scale=s)], [Y(S, scale=1 / 32768)]))

for _stride, _pad, _out in ((1, 0, 4), (2, 0, 8), (2, 1, 9)):   # SAME: in*s; VALID: (in-1)*s+k
    case(f"TRANSPOSE_CONV_stride{_stride}_{'valid' if _pad else 'same'}")(
        lambda st=_stride, pad=_pad, o=_out: _model(
            "TRANSPOSE_CONV", [C([1, o, o, 2], "int32", "shape"), _weights((2, 3, 3, 3), 0),
                               X((1, 4, 4, 3)), _bias(2)],
            [Y((1, o, o, 2), scale=0.004)], "TransposeConvOptions", Padding=pad, StrideH=st,
            StrideW=st))

case("LEAKY_RELU")(lambda: _model("LEAKY_RELU", [X(S)], [Y(S)], "LeakyReluOptions", Alpha=0.2))
case("LEAKY_RELU_negative_alpha")(lambda: _model("LEAKY_RELU", [X(S)], [Y(S, scale=0.004)],
                                                 "LeakyReluOptions", Alpha=-1.7))
case("RELU")(lambda: _model("RELU", [X(S)], [Y(S)]))
case("RELU_upscaled")(lambda: _model("RELU", [X(S)], [Y(S, scale=0.0005)]))
case("RELU6")(lambda: _model("RELU6", [X(S, scale=0.0003)], [Y(S, scale=0.0003)]))
case("MAXIMUM")(lambda: _model("MAXIMUM", [X(S), X((4, 3), name="x2")], [Z(S)]))
case("MINIMUM")(lambda: _model("MINIMUM", [X(S), X(S, name="x2")], [Z(S)]))

case("ABS")(lambda: _model("ABS", [X(S)], [Y(S)]))
case("ABS_same_scale")(lambda: _model("ABS", [X(S)], [Z(S)]))

case("SQUARED_DIFFERENCE")(lambda: _model("SQUARED_DIFFERENCE", [X(S), X((4, 3), name="x2")],
                                          [Y(S, scale=0.5)]))
case("SQUARED_DIFFERENCE_scales")(lambda: _model(
    "SQUARED_DIFFERENCE", [X(S, scale=0.0003), X(S, scale=0.0002, name="x2")], [Y(S, scale=0.01)]))

case("BATCH_MATMUL")(lambda: _model("BATCH_MATMUL", [X((2, 3, 40)), X((2, 40, 5), name="x2")],
                                    [Y((2, 3, 5), scale=0.5)]))
case("BATCH_MATMUL_broadcast_adj")(lambda: _model(
    "BATCH_MATMUL", [X((2, 1, 4, 3)), X((3, 5, 4), scale=0.0007, name="x2")],
    [Y((2, 3, 3, 5), scale=0.05)], "BatchMatMulOptions", AdjX=True, AdjY=True))

# tflite-micro fails its invoke on a negative input: positive ones only
case("RSQRT")(lambda: _model("RSQRT", [X(S, scale=0.0003)], [Y(S, scale=0.002)]))
case("RSQRT_fine")(lambda: _model("RSQRT", [X(S, scale=1e-6)], [Y(S, scale=0.05)]))

case("QUANTIZE_from_float32")(lambda: _model("QUANTIZE", [X(S, "float32")], [Y(S, scale=0.0002)]))
case("QUANTIZE_requantize")(lambda: _model("QUANTIZE", [X(S)], [Y(S, scale=0.0007)]))
case("QUANTIZE_to_int8")(lambda: _model("QUANTIZE", [X(S)], [Y(S, "int8", 0.3)]))
case("QUANTIZE_from_int8")(lambda: _model("QUANTIZE", [X(S, "int8", 0.05)], [Y(S)]))
case("DEQUANTIZE")(lambda: _model("DEQUANTIZE", [X(S)], [Y(S, "float32")]))

case("RESHAPE")(lambda: _model("RESHAPE", [X(S), C([10, 12], "int32")],
                               [Y((10, 12), scale=0.0011)]))
case("TRANSPOSE")(lambda: _model("TRANSPOSE", [X(S), C([0, 3, 1, 2], "int32")],
                                 [Y((2, 3, 5, 4), scale=0.0011)]))
case("PAD")(lambda: _model("PAD", [X(S), C([[0, 0], [1, 2], [0, 1], [0, 0]], "int32")],
                           [Y((2, 8, 5, 3), scale=0.0011)]))
case("STRIDED_SLICE")(lambda: _model(
    "STRIDED_SLICE", [X(S), C([0, 1, 0, 0], "int32", "begin"), C([2, 5, 4, 2], "int32", "end"),
                      C([1, 2, 1, 1], "int32", "strides")],
    [Y((2, 2, 4, 2), scale=0.0011)], "StridedSliceOptions"))
case("CONCATENATION")(lambda: _model(
    "CONCATENATION", [X((2, 3)), X((2, 4), name="x2")], [Y((2, 7), scale=0.0011)],
    "ConcatenationOptions", Axis=1))


# Data movement: int16 values moved unchanged (one quantization throughout).


def Z(shape, name="y"):
    return Y(shape, scale=0.0011, name=name)


case("EXPAND_DIMS")(lambda: _model("EXPAND_DIMS", [X(S), C([2], "int32")], [Z((2, 5, 1, 4, 3))]))
case("SQUEEZE")(lambda: _model("SQUEEZE", [X((2, 1, 4, 1))], [Z((2, 4))]))
case("BROADCAST_TO")(lambda: _model("BROADCAST_TO", [X((5, 1, 3)), C([2, 5, 4, 3], "int32")],
                                    [Z(S)]))
case("PACK")(lambda: _model("PACK", [X((4, 3)), X((4, 3), name="x2")], [Z((4, 2, 3))],
                            "PackOptions", ValuesCount=2, Axis=1))
case("UNPACK")(lambda: _model("UNPACK", [X(S)], [Z((2, 5, 3), f"y{k}") for k in range(4)],
                              "UnpackOptions", Num=4, Axis=2))
case("SPLIT")(lambda: _model("SPLIT", [C([1], "int32", "axis"), X((2, 6, 3))],
                             [Z((2, 2, 3), f"y{k}") for k in range(3)], "SplitOptions",
                             NumSplits=3))
case("SPLIT_V")(lambda: _model("SPLIT_V", [X((2, 7, 3)), C([2, -1, 1], "int32", "sizes"),
                                           C([1], "int32", "axis")],
                               [Z((2, n, 3), f"y{k}") for k, n in enumerate((2, 4, 1))],
                               "SplitVOptions", NumSplits=3))
case("SLICE")(lambda: _model("SLICE", [X(S), C([1, 1, 0, 1], "int32", "b"),
                                       C([1, 3, -1, 2], "int32", "s")], [Z((1, 3, 4, 2))]))
case("REVERSE_V2")(lambda: _model("REVERSE_V2", [X(S), C([1, 2], "int32")], [Z(S)]))
case("SELECT_V2")(lambda: _model("SELECT_V2", [("cond", (4, 3), "bool", None, {}), X(S),
                                               X((3,), name="x2")], [Z(S)]))
case("DYNAMIC_UPDATE_SLICE")(lambda: _model(
    "DYNAMIC_UPDATE_SLICE", [X(S), X((1, 2, 4, 2), name="u"), C([1, 2, 0, 5], "int32", "start")],
    [Z(S)]))
case("PADV2")(lambda: _model("PADV2", [X(S), C([[0, 0], [1, 2], [0, 1], [0, 0]], "int32"),
                                       C(900, I16, "v", scale=[0.0011], zp=[0])],
                             [Z((2, 8, 5, 3))]))
case("RESIZE_NEAREST_NEIGHBOR")(lambda: _model(
    "RESIZE_NEAREST_NEIGHBOR", [X((1, 4, 5, 2)), C([7, 9], "int32")], [Z((1, 7, 9, 2))],
    "ResizeNearestNeighborOptions", HalfPixelCenters=True))


@case("SHAPE_into_reshape")
def _shape():
    m = TFLiteBuilder()
    x = m.tensor("x", S, I16, scale=[0.0011], zp=[0])
    shape = m.tensor("shape", (4,), "int32")
    y = m.tensor("y", S, I16, scale=[0.0011], zp=[0])
    m.op("SHAPE", [x], [shape], "ShapeOptions", OutType=2)
    m.op("RESHAPE", [x, shape], [y])
    return m.build([x], [y])


case("CAST_to_int32")(lambda: _model("CAST", [X(S)], [("y", S, "int32", None, {})]))
case("CAST_to_float32")(lambda: _model("CAST", [X(S)], [("y", S, "float32", None, {})]))


def _random(rng, shape, dtype):
    if dtype in ("int8", "int16"):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max + 1, shape).astype(dtype)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    return (rng.standard_normal(shape) * 3).astype(dtype)


# cases whose input must be >= 0 (tflite-micro fails the invoke otherwise)
NON_NEGATIVE = {"RSQRT", "RSQRT_fine"}


def _inputs(data: bytes, seed: int, non_negative: bool = False):
    g = import_tflite(data, "op")
    rng = np.random.default_rng(seed)
    xs = [_random(rng, g.types[i].shape, g.types[i].dtype) for i in g.inputs]
    if non_negative:   # |x| over the whole range, and one 0
        xs = [np.minimum(np.abs(x.astype(np.int32)), 32767).astype(x.dtype) for x in xs]
        xs[0].reshape(-1)[0] = 0
    return xs


@pytest.mark.parametrize("name", sorted(CASES))
def test_int16_op_bit_exact_with_tflm(name):
    data = model(name)
    for seed in (0, 1):
        xs = _inputs(data, seed, name in NON_NEGATIVE)
        for got, want in zip(_ours(data, xs), _tflm(data, xs), strict=True):
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)   # floats too (DEQUANTIZE)


def test_int16_generated_code_matches_the_interpreter():
    """Every case compiled once; bit-exact with aot.interpret on the inputs the
    test above checks against tflite-micro."""
    from aot.testing.kernels import compare_with_interpreter
    cases = {}
    for name in sorted(CASES):
        g = _graph(model(name))
        cases[name] = (g, dict(zip(g.inputs, _inputs(model(name), 0, name in NON_NEGATIVE))))
    result = compare_with_interpreter(cases, rtol=0, atol=0)
    assert {k: v for k, v in result.items() if v} == {}


# ------------------------------------------------------- packaged on a board

def _int16_chain() -> bytes:
    """CONV_2D -> DEPTHWISE_CONV_2D -> FULLY_CONNECTED -> SOFTMAX, all int16."""
    global RNG
    RNG = np.random.default_rng(3)
    m = TFLiteBuilder()

    def act(name, shape, scale):
        return m.tensor(name, shape, I16, scale=[scale], zp=[0])

    def const(spec):
        name, _, dtype, value, quant = spec
        return m.const(name, value, dtype, **quant)
    x = act("x", (1, 8, 8, 2), 0.001)
    conv = act("conv", (1, 8, 8, 4), 0.004)
    m.op("CONV_2D", [x, const(_weights((4, 3, 3, 2), 0)), const(_bias(4))], [conv],
         "Conv2DOptions", Padding=0, StrideH=1, StrideW=1, FusedActivationFunction=1)
    dw = act("dw", (1, 4, 4, 4), 0.006)
    m.op("DEPTHWISE_CONV_2D", [conv, const(_weights((1, 3, 3, 4), 3)), const(_bias(4))], [dw],
         "DepthwiseConv2DOptions", Padding=0, StrideH=2, StrideW=2, DepthMultiplier=1)
    fc = act("fc", (1, 10), 0.02)
    m.op("FULLY_CONNECTED", [dw, const(_weights((10, 64))), const(_bias(10))], [fc],
         "FullyConnectedOptions")
    y = act("y", (1, 10), 1 / 32768)
    m.op("SOFTMAX", [fc], [y], "SoftmaxOptions", Beta=0.01)
    return m.build([x], [y])


@pytest.mark.parametrize("board, count", [("host", 20), ("qemu-aarch64", 3), ("mps2-an386", 2)])
def test_int16_chain_packaged_bit_exact_with_tflm(tmp_path, board, count):
    path = tmp_path / "chain16.tflite"
    path.write_bytes(_int16_chain())
    report = aot.verify(path, board=board, count=count)
    assert report["ok"] and report["reference"] == "tflite-micro"
    assert report["outputs"][0]["max_abs_err"] == 0


VECTOR_CASES = sorted(n for n in CASES if "vector" in n)


@pytest.mark.fast
@pytest.mark.parametrize("target, instruction", [("x86_64-linux", "x86_pmaddwd"),
                                                 ("aarch64-linux", "arm_smlal_lo")])
def test_int16_convs_take_the_16_bit_multiply_adds(target, instruction):
    """The int16 layers of VECTOR_CASES run in vector tiles: dense convs
    and FC in x86's pmaddwd pairs, convs (dense and depthwise) in NEON's
    SMLAL."""
    from aot.ir.tir import Call, stmt_exprs, walk_expr, walk_stmt
    from aot.lower import lower_graph
    from aot.targets import get_target

    for name in VECTOR_CASES:
        if ("DEPTHWISE" if instruction.startswith("x86") else "FULLY") in name:
            continue
        (k,) = lower_graph(_graph(model(name)), get_target(target))
        calls = {x.fn for st in walk_stmt(k.func.body) for e in stmt_exprs(st)
                 for x in walk_expr(e) if isinstance(x, Call)}
        assert any(c.startswith(instruction) for c in calls), (name, sorted(calls))


def _int16_vector_chain() -> bytes:
    """CONV_2D (16 deep) -> DEPTHWISE_CONV_2D -> CONV_2D (stride 2) -> CONV_2D 1x1, int16, in
    the shapes the vector tiles take."""
    global RNG
    RNG = np.random.default_rng(5)
    m = TFLiteBuilder()

    def act(name, shape, scale):
        return m.tensor(name, shape, I16, scale=[scale], zp=[0])

    def const(spec):
        name, _, dtype, value, quant = spec
        return m.const(name, value, dtype, **quant)
    x = act("x", (1, 7, 8, 16), 0.001)
    a = act("a", (1, 7, 8, 16), 0.02)
    m.op("CONV_2D", [x, const(_weights((16, 3, 3, 16), 0)), const(_bias(16))], [a],
         "Conv2DOptions", Padding=0, StrideH=1, StrideW=1, FusedActivationFunction=1)
    b = act("b", (1, 7, 8, 16), 0.05)
    m.op("DEPTHWISE_CONV_2D", [a, const(_weights((1, 3, 3, 16), 3)), const(_bias(16))], [b],
         "DepthwiseConv2DOptions", Padding=0, StrideH=1, StrideW=1, DepthMultiplier=1)
    c = act("c", (1, 3, 3, 8), 0.5)
    m.op("CONV_2D", [b, const(_weights((8, 3, 3, 16), 0)), const(_bias(8))], [c],
         "Conv2DOptions", Padding=1, StrideH=2, StrideW=2)
    y = act("y", (1, 3, 3, 12), 0.5)
    m.op("CONV_2D", [c, const(_weights((12, 1, 1, 8), 0)), const(_bias(12))], [y],
         "Conv2DOptions", Padding=0, StrideH=1, StrideW=1)
    return m.build([x], [y])


@pytest.mark.parametrize("board, codegen", [("host", "llvm"), ("qemu-aarch64", "c"),
                                            ("qemu-aarch64", "llvm"), ("mps2-an386", "c")])
def test_int16_vector_chain_packaged_bit_exact_with_tflm(tmp_path, board, codegen):
    path = tmp_path / "vector16.tflite"
    path.write_bytes(_int16_vector_chain())
    report = aot.verify(path, board=board, codegen=codegen, count=3)
    assert report["ok"] and report["reference"] == "tflite-micro"
    assert report["outputs"][0]["max_abs_err"] == 0


# ------------------------------------- ops tflite-micro or aot refuse on int16

def _tflm_raw(data: bytes, positive: bool = False):
    """Runs the model in tflite-micro alone, on random inputs of its own tensor types."""
    import tflite
    from tflite_micro.python.tflite_micro import runtime
    sg = tflite.Model.GetRootAsModel(data, 0).Subgraphs(0)
    interp = runtime.Interpreter.from_bytes(data)
    rng = np.random.default_rng(0)
    types = {0: "float32", 2: "int32", 6: "bool", 7: I16, 9: "int8"}
    for i in range(sg.InputsLength()):
        t = sg.Tensors(sg.Inputs(i))
        x = _random(rng, tuple(t.ShapeAsNumpy()), types[t.Type()])
        interp.set_input(np.maximum(np.abs(x), 1).astype(x.dtype) if positive else x, i)
    interp.invoke()


def _unary(op):
    return lambda: _model(op, [X(S)], [Y(S)])


def _binary(op, out=None):
    return lambda: _model(op, [X(S), X(S, name="x2")], [out or Y(S)])


def _compare(op):
    return _binary(op, ("y", S, "bool", None, {}))


def _reduce(op):
    return lambda: _model(op, [X(S), C([1, 2], "int32")], [Y((2, 1, 1, 3), scale=0.0011)],
                          "ReducerOptions", KeepDims=True)


def _int16_of(name: str):
    """A data-movement case of test_tflite_ops built on int16 tensors."""
    return lambda: OPS_CASES[f"{name}-int8"][0](I16)


def _svdf16(memory=4, batch=2, inputs=5, units=3):
    """SVDF with an int16 input (int8 feature weights, int16 time weights and state)."""
    rng = np.random.default_rng(0)
    m = TFLiteBuilder()
    x = m.tensor("x", (batch, inputs), I16, scale=[0.0005], zp=[0])
    wf = m.const("weights_feature", rng.integers(-127, 128, (units, inputs)), "int8",
                 scale=[0.01], zp=[0])
    wt = m.const("weights_time", rng.integers(-3000, 3000, (units, memory)), I16,
                 scale=[0.0005], zp=[0])
    b = m.const("bias", rng.integers(-5000, 5000, units), "int32", scale=[3e-6], zp=[0])
    state = m.tensor("state", (batch, units * memory), I16, scale=[0.004], zp=[0],
                     variable=True)
    y = m.tensor("y", (batch, units), I16, scale=[0.03], zp=[0])
    m.op("SVDF", [x, wf, wt, b, state], [y], "SVDFOptions", Rank=1)
    return m.build([x], [y])


# tflite-micro has no int16 kernel: it refuses the model (Prepare or Invoke)
NO_TFLM_INT16 = {
    "SVDF": _svdf16,
    **{op: _unary(op) for op in ("HARD_SWISH", "ELU", "NEG", "EXP", "LOG", "SQRT", "SQUARE",
                                 "SIN", "COS", "FLOOR", "CEIL", "ROUND")},
    **{op: _binary(op) for op in ("ADD_N", "DIV", "FLOOR_DIV", "FLOOR_MOD")},
    **{op: _compare(op) for op in ("EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER_EQUAL")},
    **{op: _reduce(op) for op in ("REDUCE_MAX", "REDUCE_MIN")},
    "PRELU": lambda: _model("PRELU", [X(S), C([3, -5, 7], I16, "alpha", scale=[0.01], zp=[0])],
                            [Y(S)]),
    "LOG_SOFTMAX": lambda: _model("LOG_SOFTMAX", [X((3, 7))], [Y((3, 7))]),
    "L2_NORMALIZATION": lambda: _model("L2_NORMALIZATION", [X((3, 7))],
                                       [Y((3, 7), scale=1 / 32768)]),
    "CUMSUM": lambda: _model("CUMSUM", [X(S), C(1, "int32")], [Y(S)]),
    "RESIZE_BILINEAR": lambda: _model("RESIZE_BILINEAR", [X((1, 4, 4, 3)), C([8, 8], "int32")],
                                      [Y((1, 8, 8, 3), scale=0.0011)]),
    "L2_POOL_2D": lambda: _model("L2_POOL_2D", [X((1, 4, 4, 2))], [Y((1, 2, 2, 2))],
                                 "Pool2DOptions", Padding=1, StrideH=2, StrideW=2,
                                 FilterHeight=2, FilterWidth=2),
    **{op: _int16_of(name) for op, name in (
        ("GATHER", "GATHER"), ("GATHER_ND", "GATHER_ND"), ("DEPTH_TO_SPACE", "DEPTH_TO_SPACE"),
        ("SPACE_TO_DEPTH", "SPACE_TO_DEPTH"), ("BATCH_TO_SPACE_ND", "BATCH_TO_SPACE_ND"),
        ("SPACE_TO_BATCH_ND", "SPACE_TO_BATCH_ND"), ("EMBEDDING_LOOKUP", "EMBEDDING_LOOKUP"),
        ("MIRROR_PAD", "MIRROR_PAD_REFLECT"), ("FILL", "FILL_plus_x"),
        ("ZEROS_LIKE", "ZEROS_LIKE_plus_x"), ("ARG_MAX", "ARG_MAX_axis3_int32"),
        ("ARG_MIN", "ARG_MIN_axis3_int32"))},
}

def _lstm16(batch=2, steps=3, features=4, units=3):
    """A 16x8 UNIDIRECTIONAL_SEQUENCE_LSTM: int16 input, hidden state and cell,
    int8 weights, int64 biases."""
    rng = np.random.default_rng(0)
    m = TFLiteBuilder()
    x = m.tensor("x", (batch, steps, features), I16, scale=[0.0005], zp=[0])
    ins = [x]
    for k in range(8):
        shape = (units, features) if k < 4 else (units, units)
        ins.append(m.const(f"w{k}", rng.integers(-127, 128, shape), "int8", scale=[0.01], zp=[0]))
    ins += [-1, -1, -1]
    ins += [m.const(f"b{k}", rng.integers(-500, 500, units), "int64", scale=[5e-6], zp=[0])
            for k in range(4)]
    ins += [-1, -1]
    ins.append(m.tensor("h", (batch, units), I16, scale=[1 / 32768], zp=[0], variable=True))
    ins.append(m.tensor("c", (batch, units), I16, scale=[2 ** -11], zp=[0], variable=True))
    ins += [-1, -1, -1, -1]
    y = m.tensor("y", (batch, steps, units), I16, scale=[1 / 32768], zp=[0])
    m.op("UNIDIRECTIONAL_SEQUENCE_LSTM", ins, [y], "UnidirectionalSequenceLSTMOptions",
         FusedActivationFunction=4)
    return m.build([x], [y])


# tflite-micro runs these on int16; aot does not yet, and says so in one line
NOT_YET_INT16 = {
    "UNIDIRECTIONAL_SEQUENCE_LSTM": _lstm16,
    "GREATER": _compare("GREATER"),
}


@pytest.mark.parametrize("op", sorted(NO_TFLM_INT16))
def test_tflm_has_no_int16_kernel(op):
    """The docs table's "no int16 kernel in tflite-micro": it refuses the model."""
    with pytest.raises(RuntimeError):
        _tflm_raw(NO_TFLM_INT16[op]())


@pytest.mark.parametrize("op", sorted(NOT_YET_INT16))
def test_int16_not_supported_yet_is_refused_in_one_line(op):
    data = NOT_YET_INT16[op]()
    _tflm_raw(data, positive=op == "RSQRT")   # tflite-micro has the kernel (RSQRT: for x > 0)
    with pytest.raises(UnsupportedError) as e:
        _graph(data)
    msg = str(e.value)
    assert "\n" not in msg and op in msg and "'y'" in msg and "int16" in msg, msg


def test_int16_activation_with_a_zero_point_is_refused():
    data = _model("ADD", [X(S), ("x2", S, I16, None, dict(scale=[0.001], zp=[5]))], [Y(S)])
    with pytest.raises(ModelError, match="zero point 5") as e:
        _graph(data)   # type inference: before interpreting or packaging
    assert "\n" not in str(e.value) and "'y'" in str(e.value)


@pytest.mark.parametrize("op", ["DEPTHWISE_CONV_2D", "TRANSPOSE_CONV"])
def test_int16_int32_bias_tflm_misreads_is_refused(op):
    """tflite-micro reads these ops' bias as int64 (an int32 one gives garbage
    outputs, saturated in 124 of 128 here): refused in one line."""
    if op == "DEPTHWISE_CONV_2D":
        data = _model(op, [X((1, 6, 6, 3)), _weights((1, 3, 3, 3), 3), _bias(3, "int32")],
                      [Y((1, 6, 6, 3))], "DepthwiseConv2DOptions", StrideH=1, StrideW=1,
                      DepthMultiplier=1)
    else:
        data = _model(op, [C([1, 8, 8, 2], "int32", "shape"), _weights((2, 3, 3, 3), 0),
                           X((1, 4, 4, 3)), _bias(2, "int32")], [Y((1, 8, 8, 2))],
                      "TransposeConvOptions", Padding=0, StrideH=2, StrideW=2)
    with pytest.raises(UnsupportedError, match="int32 bias") as e:
        _graph(data)
    assert "\n" not in str(e.value) and "'y'" in str(e.value)


# ------------------------------------------------------------ the docs table

def test_docs_int16_column_matches_the_tests():
    """docs/ops.md's int16 column: every "yes" names cases of this file (and
    every case is named), every "no int16 kernel" and "not supported yet" is
    one of the refusals above, and those refusals are all in the table."""
    import re
    from pathlib import Path
    text = (Path(__file__).resolve().parents[3] / "docs" / "ops.md").read_text()
    section = text.split("## The TFLite Micro op set", 1)[1].split("\n## ", 1)[0]
    named, no_kernel, not_yet = set(), set(), set()
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not cells[0].startswith("`"):
            continue
        op, col = cells[0].strip("`"), cells[3]
        tested = cells[4].split("`test_tflite_int16.py`:", 1)
        names = set(re.findall(r"`([^`]+)`", tested[1])) if len(tested) == 2 else set()
        for fn in (n for n in names if n.startswith("test_")):
            assert f"def {fn}(" in Path(__file__).read_text(), (op, fn)
        if col.startswith("yes"):
            assert names & set(CASES) or any(n.startswith("test_") for n in names), (op, col)
            assert all(n.startswith("test_") or n == op or n.startswith(op + "_") for n in names)
            named |= names
        elif col == "— (no int16 kernel in tflite-micro)":
            assert "test_tflm_has_no_int16_kernel" in names, op
            no_kernel.add(op)
        elif col == "not supported yet":
            assert "test_int16_not_supported_yet_is_refused_in_one_line" in names, op
            not_yet.add(op)
        else:
            assert col == "—" and not names & set(CASES), (op, col)
    assert set(CASES) <= named
    assert no_kernel == set(NO_TFLM_INT16) and not_yet == set(NOT_YET_INT16)


def test_int16_requantization_beyond_tflms_int64_range_is_refused():
    """A multiplier of 2**7 or more (here s_in s_w / s_out ~ 2**9): tflite-micro's
    int64 MBQM DCHECKs it; aot refuses it in one line."""
    data = _model("FULLY_CONNECTED", [X((3, 12), scale=0.5), _weights((5, 12)), _bias(5)],
                  [Y((3, 5), scale=4e-6)], "FullyConnectedOptions")
    with pytest.raises(UnsupportedError, match="2\\*\\*7") as e:
        _ours(data, _inputs(data, 0))
    assert "\n" not in str(e.value) and "'y'" in str(e.value)


def test_int16_rsqrt_across_the_input_range_against_tflm():
    """RSQRT over 0..599 and every 7th input beyond (its Newton-Raphson's
    normalisation steps change with the input's magnitude)."""
    values = np.concatenate([np.arange(600), np.arange(600, 32768, 7)])
    values = np.pad(values, (0, -values.size % 512)).reshape(-1, 512)   # TFLM's arena: 512 a run
    data = _model("RSQRT", [X((512,), scale=0.0007)], [Y((512,), scale=0.003)])
    for row in values.astype(np.int16):
        np.testing.assert_array_equal(_ours(data, [row])[0], _tflm(data, [row])[0])


@pytest.mark.parametrize("op, scale", [("LOGISTIC", 2.0 ** -12), ("LOGISTIC", 0.0011),
                                       ("TANH", 2.0 ** -11), ("TANH", 0.00004)])
def test_int16_logistic_tanh_every_input_against_tflm(op, scale):
    """All 65,536 int16 inputs, in runs of 512 (tflite-micro's Python arena)."""
    from tflite_micro.python.tflite_micro import runtime
    data = _model(op, [X((512,), scale=scale)], [Y((512,), scale=1 / 32768)])
    g = _graph(data)
    interp = runtime.Interpreter.from_bytes(data)
    for row in np.arange(-32768, 32768).astype(np.int16).reshape(-1, 512):
        interp.set_input(row, 0)
        interp.invoke()
        ours = aot.interpret(g, {g.inputs[0]: row})[g.outputs[0]]
        np.testing.assert_array_equal(ours, np.array(interp.get_output(0)))


# -------------------------------------------------------------- control flow

def _if16(cond_value=None) -> bytes:
    """IF(cond, x): then x * c (MUL), else LEAKY_RELU(x), all int16."""
    q_x, q_y = dict(scale=[0.0011], zp=[0]), dict(scale=[0.004], zp=[0])
    then = TFLiteBuilder()
    tx, ty = then.tensor("x", S, I16, **q_x), then.tensor("y", S, I16, **q_y)
    then.op("MUL", [tx, then.const("c", 1400, I16, **q_x)], [ty], "MulOptions")
    other = TFLiteBuilder()
    ex, ey = other.tensor("x", S, I16, **q_x), other.tensor("y", S, I16, **q_y)
    other.op("LEAKY_RELU", [ex], [ey], "LeakyReluOptions", Alpha=0.3)
    m = TFLiteBuilder()
    cond = (m.tensor("cond", (1,), "bool") if cond_value is None
            else m.const("cond", [cond_value], "bool"))
    x, y = m.tensor("x", S, I16, **q_x), m.tensor("y", S, I16, **q_y)
    then_k, else_k = m.subgraph(then, [tx], [ty]), m.subgraph(other, [ex], [ey])
    m.op("IF", [cond, x], [y], "IfOptions", ThenSubgraphIndex=then_k, ElseSubgraphIndex=else_k)
    return m.build([cond, x] if cond_value is None else [x], [y])


def _while16(limit: int = 3) -> bytes:
    """WHILE(i < limit): i += 1, x = x * c (MUL), x int16."""
    q_x = dict(scale=[0.0011], zp=[0])
    cond = TFLiteBuilder()
    ci, cx = cond.tensor("i", (), "int32"), cond.tensor("x", S, I16, **q_x)
    flag = cond.tensor("flag", (), "bool")
    cond.op("LESS", [ci, cond.const("limit", limit, "int32")], [flag])
    body = TFLiteBuilder()
    bi, bx = body.tensor("i", (), "int32"), body.tensor("x", S, I16, **q_x)
    bi2, bx2 = body.tensor("i_next", (), "int32"), body.tensor("x_next", S, I16, **q_x)
    body.op("ADD", [bi, body.const("one", 1, "int32")], [bi2], "AddOptions")
    body.op("MUL", [bx, body.const("c", 800, I16, **q_x)], [bx2], "MulOptions")
    m = TFLiteBuilder()
    x, y = m.tensor("x", S, I16, **q_x), m.tensor("y", S, I16, **q_x)
    i_out = m.tensor("i_out", (), "int32")
    cond_k, body_k = m.subgraph(cond, [ci, cx], [flag]), m.subgraph(body, [bi, bx], [bi2, bx2])
    m.op("WHILE", [m.const("i0", 0, "int32"), x], [i_out, y], "WhileOptions",
         CondSubgraphIndex=cond_k, BodySubgraphIndex=body_k)
    return m.build([x], [y])


def test_int16_if_and_while_against_tflm():
    """IF with a run-time condition, both branches taken, and a counted WHILE
    (unrolled), int16 bit-exact with tflite-micro; their generated code too."""
    from aot.testing.kernels import compare_with_interpreter
    rng = np.random.default_rng(5)
    cases = {}
    for taken in (True, False):
        data = _if16()
        xs = [np.array([taken]), _random(rng, S, I16)]
        np.testing.assert_array_equal(_ours(data, xs)[0], _tflm(data, xs)[0])
        g = _graph(data)
        cases[f"if_{taken}"] = (g, dict(zip(g.inputs, xs)))
    data = _while16()
    x = _random(rng, S, I16)
    np.testing.assert_array_equal(_ours(data, [x])[0], _tflm(data, [x])[0])
    g = _graph(data)
    cases["while"] = (g, {g.inputs[0]: x})
    assert {k: v for k, v in compare_with_interpreter(cases, rtol=0, atol=0).items() if v} == {}


# ------------------------------------------------------- state: variables

def _accumulator16() -> bytes:
    """state' = x + state, y = state' + x, an int16 resource variable set by a
    CALL_ONCE initializer (VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE)."""
    q = dict(scale=[0.0011], zp=[0])
    init = TFLiteBuilder()
    h0 = init.tensor("h0", (), "resource")
    init.op("VAR_HANDLE", [], [h0], "VarHandleOptions", SharedName="acc")
    init.op("ASSIGN_VARIABLE", [h0, init.const("c", [[1000, -7000, 400, 30000]], I16, **q)], [])
    m = TFLiteBuilder()
    x, h = m.tensor("x", (1, 4), I16, **q), m.tensor("h", (), "resource")
    r1, total, r2, y = (m.tensor(n, (1, 4), I16, **q) for n in ("r1", "s", "r2", "y"))
    m.op("CALL_ONCE", [], [], "CallOnceOptions", InitSubgraphIndex=m.subgraph(init, [], []))
    m.op("VAR_HANDLE", [], [h], "VarHandleOptions", SharedName="acc")
    m.op("READ_VARIABLE", [h], [r1])
    m.op("ADD", [x, r1], [total], "AddOptions")
    m.op("ASSIGN_VARIABLE", [h, total], [])
    m.op("READ_VARIABLE", [h], [r2])
    m.op("ADD", [r2, x], [y], "AddOptions")
    return m.build([x], [y])


def test_int16_state_over_a_stream_against_tflm(tmp_path):
    """An int16 variable carried over 12 runs, saturating: packaged on host,
    bit-exact with tflite-micro."""
    from aot.check import streaming
    from aot.targets import get_board
    path = tmp_path / "acc16.tflite"
    path.write_bytes(_accumulator16())
    graph = aot.load(path)
    rng = np.random.default_rng(1)
    steps = [[rng.integers(-3000, 3000, size=(1, 4)).astype(np.int16)] for _ in range(12)]
    want = streaming.tflm_stream(path, graph, steps)
    assert any(np.any(np.abs(w[0]) == 32767) for w in want)
    info = aot.package(streaming.step_graph(graph), board="host", out_dir=tmp_path / "pkg")
    got = streaming.board_stream(info.path, get_board("host"), graph, steps)
    report = streaming.compare_streams(graph, got, want)
    assert report["ok"], report

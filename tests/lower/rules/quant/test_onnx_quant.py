"""ONNX's integer convolutions over 1-D and 3-D inputs, compiled and run
against the interpreter bit for bit: QLinearConv with uint8 activations and
int8 per-channel weights (ONNX Runtime's U8S8) and the reverse, ConvInteger
and MatMulInteger reading DynamicQuantizeLinear's run-time zero point, and
QLinearAveragePool over 1-D and 3-D windows (its float32 sums of
dequantized taps, and a whole-image window's exact integer sum). (The interpreter's arithmetic
against ONNX Runtime: tests/ops/quant/test_onnx_quant.py.)"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import aot
from aot.frontend.onnx import import_onnx
from aot.passes.infer import infer_types
from support.zoo import check_graphs

ONNX_TYPE = {"int8": T.INT8, "uint8": T.UINT8}


def _graph(nodes, inputs, outputs, inits, opset=21):
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs,
                                            [numpy_helper.from_array(np.asarray(v), k)
                                             for k, v in inits.items()]),
                          opset_imports=[helper.make_opsetid("", opset),
                                         helper.make_opsetid("com.microsoft", 1)])
    return aot.optimize(infer_types(import_onnx(m.SerializeToString(), "m")))


def _codes(rng, dtype: str, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


def qlinear_conv(x_shape, w_shape, attrs, xdt="uint8", wdt="int8", seed=0):
    """Full-range codes, per-channel weight scales (and zero points for
    uint8 weights), an int32 bias."""
    rng = np.random.default_rng(seed)
    cout = w_shape[0]
    w_zp = np.full(cout, 0 if wdt == "int8" else 128, wdt)
    if wdt == "uint8":
        w_zp = (w_zp + rng.integers(-9, 9, cout)).astype(wdt)
    inits = {"xs": np.float32(0.05), "xz": _codes(rng, xdt, ()), "w": _codes(rng, wdt, w_shape),
             "ws": rng.uniform(0.001, 0.01, cout).astype(np.float32), "wz": w_zp,
             "ys": np.float32(rng.uniform(0.2, 1)), "yz": _codes(rng, xdt, ()),
             "b": rng.integers(-3000, 3000, cout).astype(np.int32)}
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
                            ["y"], **attrs)
    return _graph([node], [helper.make_tensor_value_info("x", ONNX_TYPE[xdt], x_shape)],
                  [helper.make_tensor_value_info("y", ONNX_TYPE[xdt], None)], inits)


def dynamic_conv_matmul(x_shape, w_shape, attrs, seed=0):
    """quantize_dynamic's pattern: DynamicQuantizeLinear's uint8 codes and
    zero point into ConvInteger and MatMulInteger with int8 weights."""
    rng = np.random.default_rng(seed)
    k = x_shape[-1]
    inits = {"w": _codes(rng, "int8", w_shape), "wz": np.array(0, np.int8),
             "b": _codes(rng, "int8", (k, 5)), "bz": np.array(3, np.int8)}
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "qs", "qz"]),
             helper.make_node("ConvInteger", ["q", "w", "qz", "wz"], ["c"], **attrs),
             helper.make_node("MatMulInteger", ["q", "b", "qz", "bz"], ["m"])]
    return _graph(nodes, [helper.make_tensor_value_info("x", T.FLOAT, x_shape)],
                  [helper.make_tensor_value_info(n, T.INT32, None) for n in ("c", "m")], inits)


def qlinear_avg_pool(x_shape, attrs, dtype="uint8", seed=0):
    rng = np.random.default_rng(seed)
    inits = {"xs": np.float32(0.05), "xz": _codes(rng, dtype, ()), "ys": np.float32(0.04),
             "yz": _codes(rng, dtype, ())}
    node = helper.make_node("QLinearAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"],
                            domain="com.microsoft", **attrs)
    return _graph([node], [helper.make_tensor_value_info("x", ONNX_TYPE[dtype], x_shape)],
                  [helper.make_tensor_value_info("y", ONNX_TYPE[dtype], None)], inits)


GRAPHS = [
    lambda: qlinear_conv([2, 16, 20], [8, 16, 3], {"pads": [1, 1], "strides": [2]}),
    lambda: qlinear_conv([1, 6, 17], [6, 2, 5], {"pads": [2, 1], "group": 3, "dilations": [2]},
                         xdt="int8", wdt="uint8", seed=1),
    lambda: qlinear_conv([2, 4, 5, 6, 7], [6, 4, 3, 2, 3],
                         {"pads": [1, 0, 1, 1, 1, 0], "strides": [2, 1, 2]}, seed=2),
    lambda: qlinear_conv([1, 4, 6, 5, 5], [4, 2, 2, 3, 3],
                         {"pads": [0, 1, 1, 1, 1, 1], "group": 2, "dilations": [2, 1, 1]},
                         xdt="int8", wdt="uint8", seed=3),
    # 2-D uint8 activations: the int8 vector kernels reading x ^ 0x80
    lambda: qlinear_conv([1, 16, 7, 8], [24, 16, 3, 3], {"pads": [1, 1, 1, 1]}, seed=4),
    lambda: qlinear_conv([2, 32, 6, 6], [16, 32, 1, 1], {"strides": [2, 2]}, seed=5),
    lambda: qlinear_conv([1, 16, 9, 9], [16, 1, 3, 3], {"pads": [1, 1, 1, 1], "group": 16},
                         seed=6),
    lambda: qlinear_conv([1, 3, 11, 10], [8, 3, 3, 3], {"pads": [1, 1, 1, 1], "strides": [2, 2]},
                         seed=7),
    lambda: dynamic_conv_matmul([1, 3, 12], [4, 3, 3], {"pads": [1, 1]}),
    lambda: dynamic_conv_matmul([1, 2, 4, 5, 6], [3, 2, 2, 3, 3], {"pads": [1, 1, 1, 0, 0, 1]},
                                seed=1),
    lambda: qlinear_avg_pool([1, 3, 11], {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    lambda: qlinear_avg_pool([1, 2, 5, 6, 7], {"kernel_shape": [2, 3, 2], "pads": [1, 1, 0, 0, 1, 1],
                                               "count_include_pad": 1}, dtype="int8"),
    lambda: qlinear_avg_pool([2, 3, 5, 6, 7], {"kernel_shape": [2, 3, 2]}, seed=1),
    lambda: qlinear_avg_pool([1, 3, 4, 5], {"kernel_shape": [4, 5]}, seed=2),   # whole image
]


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_integer_convolutions_bit_exact(codegen, tmp_path):
    check_graphs([make() for make in GRAPHS], runs=2, codegen=codegen, tmp_path=tmp_path)


"""ONNX's integer convolutions and pools over 1-D and 3-D inputs, the
interpreter's numpy reference (aot/ops/quant/onnx_quant.py) against ONNX
Runtime, integer outputs equal: QLinearConv with uint8 activations and int8
per-channel weights (ONNX Runtime's U8S8, what quantize_static writes by
default) and int8 activations with uint8 weights, ConvInteger and
MatMulInteger on DynamicQuantizeLinear's codes (quantize_dynamic's
pattern), QLinearAveragePool, QLinearGlobalAveragePool and MaxPool on codes.

The codes span the types' full ranges: ONNX Runtime's x86 kernels compute
exact int32 sums on a CPU with AVX-VNNI or AVX512-VNNI; without VNNI its
U8S8 kernels use vpmaddubsw, which saturates pairs of products at int16,
and the full-range cases here would differ there (ONNX Runtime's own
documentation advises reduce_range for such CPUs): those cases skip there.
"""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from aot.frontend.onnx import import_onnx
from aot.interp import interpret
from aot.passes.infer import infer_types
from support.speech_models import u8s8_inexact

# ONNX Runtime's uint8 x int8 sums are exact only with VNNI on x86
EXACT_U8S8 = pytest.mark.skipif(bool(u8s8_inexact()), reason=u8s8_inexact() or "exact")

ONNX_TYPE = {"int8": T.INT8, "uint8": T.UINT8, "float32": T.FLOAT, "int32": T.INT32}


def _model(nodes, inputs: dict, consts: dict, outputs):
    ins = [helper.make_tensor_value_info(k, ONNX_TYPE[v.dtype.name], v.shape)
           for k, v in inputs.items()]
    g = helper.make_graph(nodes, "g", ins, [helper.make_empty_tensor_value_info(o)
                                            for o in outputs],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21),
                                               helper.make_opsetid("com.microsoft", 1)],
                             ir_version=10)


def run_aot(nodes, inputs: dict, consts: dict, outputs) -> list[np.ndarray]:
    m = _model(nodes, inputs, consts, outputs)
    out = interpret(infer_types(import_onnx(m.SerializeToString(), "m")), inputs)
    return [out[o] for o in outputs]


def run_ort(nodes, inputs: dict, consts: dict, outputs) -> list[np.ndarray]:
    """ONNX Runtime's CPU kernels on the model as written (no fusion)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    m = _model(nodes, inputs, consts, outputs)
    return ort.InferenceSession(m.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(None, inputs)


def both(nodes, inputs: dict, consts: dict, outputs) -> tuple[list, list]:
    return (run_aot(nodes, inputs, consts, outputs), run_ort(nodes, inputs, consts, outputs))


def assert_equal(ours, theirs):
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
        np.testing.assert_array_equal(a, b)


def codes(rng, dtype: str, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


def qconv_case(xs, ws, xdt: str, wdt: str, seed: int):
    """Inputs and constants of a QLinearConv: per-channel weight scales,
    weight zero points 0 (int8) or about 128 (uint8), an int32 bias."""
    rng = np.random.default_rng(seed)
    o = ws[0]
    wz = np.zeros(o, wdt) if wdt == "int8" else (128 + rng.integers(-5, 5, o)).astype(wdt)
    consts = {"xs": np.float32(rng.uniform(0.01, 0.1)), "xz": codes(rng, xdt, ()),
              "w": codes(rng, wdt, ws), "ws": rng.uniform(0.001, 0.01, o).astype(np.float32),
              "wz": wz, "ys": np.float32(rng.uniform(0.1, 2)), "yz": codes(rng, xdt, ()),
              "b": rng.integers(-5000, 5000, o).astype(np.int32)}
    return {"x": codes(rng, xdt, xs)}, consts


QCONV = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"]
CONVS = [  # (x shape, w shape, attributes)
    ((1, 16, 32), (8, 16, 3), {"pads": [1, 1], "strides": [2]}),
    ((2, 6, 17), (6, 2, 5), {"pads": [2, 1], "group": 3, "dilations": [2]}),
    ((1, 4, 5, 6, 7), (6, 4, 3, 2, 3), {"pads": [1, 0, 1, 1, 1, 0], "strides": [2, 1, 2]}),
    ((1, 4, 6, 5, 5), (4, 2, 2, 3, 3), {"auto_pad": "SAME_UPPER", "group": 2}),
]


@EXACT_U8S8
@pytest.mark.parametrize("xs,ws,attrs", CONVS, ids=lambda v: str(v))
def test_qlinear_conv_u8s8(xs, ws, attrs):
    inputs, consts = qconv_case(xs, ws, "uint8", "int8", seed=len(xs) + ws[0])
    assert_equal(*both([helper.make_node("QLinearConv", QCONV, ["y"], **attrs)], inputs,
                       consts, ["y"]))


@pytest.mark.parametrize("xs,ws,attrs", CONVS[::2], ids=lambda v: str(v))
def test_qlinear_conv_s8u8(xs, ws, attrs):
    """int8 activations, uint8 weights: ONNX Runtime has no such kernel, but
    x - zx is the same number with both codes moved by 128, and so is the
    output: the U8U8 problem on x + 128 gives y + 128, exactly."""
    inputs, consts = qconv_case(xs, ws, "int8", "uint8", seed=len(xs))
    node = helper.make_node("QLinearConv", QCONV, ["y"], **attrs)
    ours = run_aot([node], inputs, consts, ["y"])

    def lift(v):
        return (v.astype(np.int16) + 128).astype(np.uint8)
    shifted = {**consts, "xz": lift(consts["xz"]), "yz": lift(consts["yz"])}
    theirs = run_ort([node], {"x": lift(inputs["x"])}, shifted, ["y"])
    assert ours[0].dtype == np.int8
    np.testing.assert_array_equal(lift(ours[0]), theirs[0])


@EXACT_U8S8
@pytest.mark.parametrize("xs,ws,attrs", CONVS[::3], ids=lambda v: str(v))
def test_dynamic_conv_and_matmul_integer(xs, ws, attrs):
    """quantize_dynamic's pattern: DynamicQuantizeLinear's uint8 codes and
    run-time zero point into ConvInteger and MatMulInteger, int8 weights."""
    rng = np.random.default_rng(len(xs))
    consts = {"w": codes(rng, "int8", ws), "wz": np.array(0, np.int8),
              "b": codes(rng, "int8", (xs[-1], 6)), "bz": np.array(0, np.int8)}
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "qs", "qz"]),
             helper.make_node("ConvInteger", ["q", "w", "qz", "wz"], ["c"], **attrs),
             helper.make_node("MatMulInteger", ["q", "b", "qz", "bz"], ["m"])]
    x = (3 * rng.standard_normal(xs) + 1).astype(np.float32)
    assert_equal(*both(nodes, {"x": x}, consts, ["q", "qs", "qz", "c", "m"]))


POOLS = [  # (x shape, attributes)
    ((1, 3, 17), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ((2, 2, 5, 6, 7), {"kernel_shape": [2, 3, 2], "pads": [1, 1, 0, 0, 1, 1]}),
]


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("include_pad", [0, 1])
@pytest.mark.parametrize("xs,attrs", POOLS, ids=lambda v: str(v))
def test_quantized_pools(xs, attrs, include_pad, dtype):
    """QLinearAveragePool and QLinearGlobalAveragePool (com.microsoft, what
    ONNX Runtime's QDQ fusion makes of DQ -> AveragePool -> Q) and MaxPool
    on the codes (what a DQ -> MaxPool -> Q with one set of parameters is)."""
    rng = np.random.default_rng(len(xs) + include_pad)
    consts = {"xs": np.float32(0.05), "xz": codes(rng, dtype, ()), "ys": np.float32(0.03),
              "yz": codes(rng, dtype, ())}
    q = ["x", "xs", "xz", "ys", "yz"]
    nodes = [helper.make_node("QLinearAveragePool", q, ["a"], domain="com.microsoft",
                              count_include_pad=include_pad, **attrs),
             helper.make_node("QLinearGlobalAveragePool", q, ["g"], domain="com.microsoft"),
             helper.make_node("MaxPool", ["x"], ["m"], **attrs)]
    assert_equal(*both(nodes, {"x": codes(rng, dtype, xs)}, consts, ["a", "g", "m"]))

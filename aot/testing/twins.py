"""Models built in two precisions from one set of weights, for tests and
bench/twins.py: an image classifier in float32 and in float16 (as
onnxconverter-common's float16 conversion writes it: float16 initializers,
activations, inputs and outputs), and a 3x3 convolution with int8 and with
int16 activations (TFLite's 16x8 quantization)."""
from __future__ import annotations

import numpy as np


def onnx_classifier(dtype: str = "float32", size: int = 32, widths=(16, 32, 64),
                    seed: int = 8) -> bytes:
    """A ResNet-8-like classifier (the MLPerf Tiny ic model's shape: a 3x3
    stem, one residual stage of two 3x3 convs per width, stride 2 between
    widths, global average pool, a dense layer, softmax), NCHW input
    [1, 3, size, size], every tensor in `dtype` ("float32" or "float16"):
    the same weights, rounded to half for float16."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper

    elem = {"float32": T.FLOAT, "float16": T.FLOAT16}[dtype]
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def weight(name, shape, fan_in):
        w = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
        inits.append(onnx.numpy_helper.from_array(w.astype(np.float32).astype(dtype), name))
        return name

    def conv(x, cin, cout, stride, relu, name):
        w = weight(f"{name}_w", (cout, cin, 3, 3), 9 * cin)
        b = weight(f"{name}_b", (cout,), 100.0)
        nodes.append(helper.make_node("Conv", [x, w, b], [name], pads=[1, 1, 1, 1],
                                      strides=[stride, stride]))
        if not relu:
            return name
        nodes.append(helper.make_node("Relu", [name], [f"{name}_relu"]))
        return f"{name}_relu"

    x = conv("x", 3, widths[0], 1, True, "stem")
    cin = widths[0]
    for i, width in enumerate(widths):
        stride = 1 if i == 0 else 2
        y = conv(conv(x, cin, width, stride, True, f"s{i}a"), width, width, 1, False, f"s{i}b")
        skip = x if stride == 1 and cin == width else conv(x, cin, width, stride, False, f"s{i}p")
        nodes.append(helper.make_node("Add", [y, skip], [f"s{i}_sum"]))
        nodes.append(helper.make_node("Relu", [f"s{i}_sum"], [f"s{i}_out"]))
        x, cin = f"s{i}_out", width
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pooled"]))
    inits.append(onnx.numpy_helper.from_array(np.array([1, -1], np.int64), "flat"))
    nodes.append(helper.make_node("Reshape", ["pooled", "flat"], ["features"]))
    nodes.append(helper.make_node("MatMul", ["features", weight("fc_w", (cin, 10), cin)],
                                  ["mm"]))
    nodes.append(helper.make_node("Add", ["mm", weight("fc_b", (10,), 100.0)], ["logits"]))
    nodes.append(helper.make_node("Softmax", ["logits"], ["y"], axis=-1))
    g = helper.make_graph(nodes, f"classifier_{dtype}",
                          [helper.make_tensor_value_info("x", elem, [1, 3, size, size])],
                          [helper.make_tensor_value_info("y", elem, [1, 10])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def tflite_conv3x3(activations: str = "int8", size: int = 32, cin: int = 16, cout: int = 16,
                   seed: int = 16) -> bytes:
    """One CONV_2D, 3x3, SAME, stride 1, [1, size, size, cin] -> cout
    channels, int8 weights per channel; activations "int8" (zero points 3 and
    -2, int32 bias) or "int16" (zero point 0, int64 bias): the same weights."""
    from aot.testing.tflite_builder import TFLiteBuilder

    rng = np.random.default_rng(seed)
    w = rng.integers(-127, 128, (cout, 3, 3, cin))
    w_scales = list(rng.uniform(0.002, 0.02, cout))
    bias = rng.integers(-4000, 4000, cout)
    wide = activations == "int16"
    m = TFLiteBuilder()
    zp_in, zp_out = (0, 0) if wide else (3, -2)
    x = m.tensor("x", (1, size, size, cin), activations, scale=[0.02], zp=[zp_in])
    y = m.tensor("y", (1, size, size, cout), activations, scale=[0.05], zp=[zp_out])
    wt = m.const("w", w, "int8", scale=w_scales, zp=[0] * cout, qdim=0)
    bt = m.const("bias", bias, "int64" if wide else "int32",
                 scale=[0.02 * s for s in w_scales], zp=[0] * cout)
    m.op("CONV_2D", [x, wt, bt], [y], "Conv2DOptions", Padding=0, StrideH=1, StrideW=1,
         FusedActivationFunction=0)
    return m.build([x], [y])

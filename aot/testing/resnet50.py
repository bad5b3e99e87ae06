"""A ResNet-50-shaped float ONNX graph built with onnx.helper, and its
ONNX QOperator int8 form (onnxruntime.quantization.quantize_static,
QuantFormat.QOperator: QLinearConv, QLinearAdd, ...), never shipped.

The structure is torchvision's resnet50 as torch.onnx exports it in eval
mode (batch norm folded into the convolutions): a 7x7 stride-2 stem,
max pool, four stages of bottlenecks (1x1, 3x3, 1x1 with a projection
shortcut at each stage's first block, stride on the 3x3), global average
pool, Flatten, Gemm to 1000 classes. `width` divides every channel count
and `size` sets the input resolution, so that tests can run the same
graph small. Weights come from a fixed seed, scaled by fan-in.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))   # width, blocks, stride


class _Builder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.n = 0

    def name(self, stem: str) -> str:
        self.n += 1
        return f"{stem}_{self.n}"

    def op(self, op: str, inputs: list[str], **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def const(self, value: np.ndarray) -> str:
        name = self.name("w")
        self.inits.append(numpy_helper.from_array(value.astype(np.float32), name))
        return name

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, relu: bool = True,
             gain: float = 1.0) -> str:
        w = self.rng.standard_normal((cout, cin, k, k)) * gain * np.sqrt(2.0 / (cin * k * k))
        b = self.rng.standard_normal(cout) * 0.05
        y = self.op("Conv", [x, self.const(w), self.const(b)], kernel_shape=[k, k],
                    strides=[stride, stride], pads=[k // 2] * 4)
        return self.op("Relu", [y]) if relu else y


def resnet50(width: int = 1, size: int = 224, classes: int = 1000, seed: int = 0) -> bytes:
    """The float model (NCHW input [1, 3, size, size]), serialized."""
    b = _Builder(seed)
    x = b.conv("input", 3, 64 // width, 7, 2)
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64 // width
    for planes, blocks, stride in STAGES:
        mid, cout = planes // width, 4 * planes // width
        for i in range(blocks):
            s = stride if i == 0 else 1
            y = b.conv(x, cin, mid, 1)
            y = b.conv(y, mid, mid, 3, s)
            y = b.conv(y, mid, cout, 1, relu=False, gain=0.3)
            short = b.conv(x, cin, cout, 1, s, relu=False) if i == 0 else x
            x = b.op("Relu", [b.op("Add", [y, short])])
            cin = cout
    x = b.op("GlobalAveragePool", [x])
    x = b.op("Flatten", [x], axis=1)
    w = b.rng.standard_normal((classes, cin)) * np.sqrt(1.0 / cin)
    x = b.op("Gemm", [x, b.const(w), b.const(b.rng.standard_normal(classes) * 0.01)], transB=1)
    graph = helper.make_graph(
        b.nodes, "resnet50",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, classes])], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model.SerializeToString()


def quantized(float_path: Path, out: Path, activations: str = "int8", samples: int = 4,
              seed: int = 1) -> Path:
    """The QOperator model of a float model file: int8 weights, `activations`
    int8 or uint8 (ONNX Runtime's default on x86 before QDQ), per-tensor,
    calibrated on `samples` random inputs."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    model = onnx.load(str(float_path))
    spec = model.graph.input[0]
    shape = [d.dim_value for d in spec.type.tensor_type.shape.dim]
    rng = np.random.default_rng(seed)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.left = [{spec.name: rng.standard_normal(shape).astype(np.float32)}
                         for _ in range(samples)]

        def get_next(self):
            return self.left.pop() if self.left else None

    quantize_static(str(float_path), str(out), Reader(), quant_format=QuantFormat.QOperator,
                    activation_type=QuantType.QInt8 if activations == "int8" else QuantType.QUInt8,
                    weight_type=QuantType.QInt8)
    return out

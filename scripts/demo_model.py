"""Build the demo model: a small keyword-spotting-style CNN, written by aot's
own code with onnx.helper and deterministic weights (no downloaded model).

NCHW with BatchNormalization and a Gemm head, so the demo shows batch-norm
folding, the channels-last rewrite and fusion at work.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)

    def const(name: str, shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [
        const("w1", (8, 1, 3, 3)), const("b1", (8,), 0.1),
        const("bn_scale", (8,), 0.2), const("bn_bias", (8,), 0.1),
        const("bn_mean", (8,), 0.1),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "bn_var"),
        const("w2", (16, 8, 3, 3), 0.15), const("b2", (16,), 0.1),
        const("fc_w", (4, 16)), const("fc_b", (4,), 0.1),
    ]
    nodes = [
        helper.make_node("Conv", ["spectrogram", "w1", "b1"], ["c1"], name="conv1",
                         pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn_scale", "bn_bias", "bn_mean", "bn_var"],
                         ["n1"], name="bn1"),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2",
                         strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["gap"], name="pool"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "tiny_kws",
        [helper.make_tensor_value_info("spectrogram", TensorProto.FLOAT, [1, 1, 49, 10])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 4])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="aot-demo")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main(path: str) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(build().SerializeToString())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "out/demo/tiny_kws.onnx")

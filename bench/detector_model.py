#!/usr/bin/env python3
"""A 6-8 MB float32 ONNX face-detector-shaped model for packaging-time runs
(bench/compile_time.py --detector): an UltraFace-like backbone at 240x320,
3x3 convolutions with ReLU down to 1/32, and at two scales a box and a score
head (3x3 convolutions), reshaped to rows, the scores through Softmax, the
rows of both scales concatenated. Weights are seeded: the same file every run.

    .venv/bin/python bench/detector_model.py OUT.onnx
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

# (out channels, stride) of each backbone conv; the heads read the outputs
# of the convs marked True
BACKBONE = ((32, 2, False), (64, 2, False), (128, 2, False), (128, 1, False),
            (256, 2, False), (256, 1, True), (256, 2, True))
ANCHORS = 6


def build(path: Path) -> int:
    """Write the model; its weights' size in bytes."""
    from onnx import TensorProto, helper, numpy_helper, save

    rng = np.random.default_rng(0)
    nodes, inits = [], []

    def conv(x: str, cin: int, cout: int, stride: int, name: str, relu: bool = True) -> str:
        w = (rng.standard_normal((cout, cin, 3, 3)) * np.sqrt(2.0 / (9 * cin))).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.01).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, f"{name}.w"),
                      numpy_helper.from_array(b, f"{name}.b")])
        nodes.append(helper.make_node("Conv", [x, f"{name}.w", f"{name}.b"], [f"{name}.y"],
                                      kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                                      strides=[stride, stride]))
        if not relu:
            return f"{name}.y"
        nodes.append(helper.make_node("Relu", [f"{name}.y"], [f"{name}.r"]))
        return f"{name}.r"

    def rows(x: str, width: int, name: str) -> str:
        """NCHW head output -> [1, H*W*ANCHORS, width]."""
        shape = numpy_helper.from_array(np.array([1, -1, width], np.int64), f"{name}.shape")
        inits.append(shape)
        nodes.append(helper.make_node("Transpose", [x], [f"{name}.t"], perm=[0, 2, 3, 1]))
        nodes.append(helper.make_node("Reshape", [f"{name}.t", f"{name}.shape"], [f"{name}.rows"]))
        return f"{name}.rows"

    x, cin, boxes, scores = "input", 3, [], []
    for i, (cout, stride, head) in enumerate(BACKBONE):
        x, cin = conv(x, cin, cout, stride, f"conv{i}"), cout
        if head:
            boxes.append(rows(conv(x, cin, ANCHORS * 4, 1, f"box{i}", relu=False), 4, f"box{i}"))
            s = rows(conv(x, cin, ANCHORS * 2, 1, f"score{i}", relu=False), 2, f"score{i}")
            nodes.append(helper.make_node("Softmax", [s], [f"{s}.p"], axis=-1))
            scores.append(f"{s}.p")
    nodes.append(helper.make_node("Concat", scores, ["scores"], axis=1))
    nodes.append(helper.make_node("Concat", boxes, ["boxes"], axis=1))
    graph = helper.make_graph(
        nodes, "detector", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                          [1, 3, 240, 320])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("boxes", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="aot-bench")
    model.ir_version = 8
    save(model, str(path))
    return sum(int(np.prod(t.dims)) * 4 for t in inits if t.data_type == TensorProto.FLOAT)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    size = build(Path(sys.argv[1]))
    print(f"{sys.argv[1]}: {size / 1e6:.2f} MB of weights")

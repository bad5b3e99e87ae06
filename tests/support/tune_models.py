"""Small models to tune in seconds: float MLPs whose Gemm tiles are
tunable on the Arm boards (tests/tune, bench/tune_farm.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def mlp(path: Path, sizes: list[int], seed: int) -> Path:
    """Gemm (+ Relu) layers of these widths, as an ONNX file at `path`."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, weights, x = [], [], "x"
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        w = rng.standard_normal((b, a)).astype(np.float32) / np.float32(np.sqrt(a))
        weights += [numpy_helper.from_array(w, f"w{i}"),
                    numpy_helper.from_array(rng.standard_normal(b).astype(np.float32), f"b{i}")]
        nodes.append(helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [f"g{i}"], transB=1))
        x = f"g{i}"
        if i < len(sizes) - 2:
            nodes.append(helper.make_node("Relu", [x], [f"r{i}"]))
            x = f"r{i}"
    graph = helper.make_graph(
        nodes, path.stem, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, sizes[0]])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, sizes[-1]])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path

"""Transposes that move the last axis on x86 walk 16 x 16 tiles (a true
1-D Conv's NCL <-> NLC layout changes): exact against ONNX Runtime, the
tiles in the kernel, and shapes that are not whole tiles row by row."""
from __future__ import annotations

from onnx import TensorProto as T, helper

from aot.api import verify


def _model(path, shape, perm):
    x = helper.make_tensor_value_info("x", T.FLOAT, shape)
    y = helper.make_tensor_value_info("y", T.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Transpose", ["x"], ["y"], perm=perm)],
                              "transpose", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


def _kernels(pkg) -> str:
    return "".join(p.read_text() for p in (pkg / "src").glob("*kernels*.c"))


def test_x86_transposes_walk_tiles_and_match_onnxruntime(tmp_path):
    cases = {"ncl": ([2, 32, 48], [0, 2, 1], True),
             "nhwc": ([1, 16, 3, 32], [0, 2, 3, 1], True),
             "ragged": ([1, 20, 48], [0, 2, 1], False)}
    for name, (shape, perm, tiled) in cases.items():
        pkg = tmp_path / name
        out = verify(_model(tmp_path / f"{name}.onnx", shape, perm), board="host", count=1,
                     out_dir=pkg).check()
        assert out.reference == "onnxruntime" and out.outputs[0].max_abs == 0.0, name
        assert (" * 16 + " in _kernels(pkg)) == tiled, name

"""The YOLOv8-style detector (aot/testing/yolo.py) and what makes it fast:
SiLU (Sigmoid * Mul as torch.onnx writes it) rewritten to one Swish that
fuses into the convolution's epilogue, and the vectorized float32 sigmoid
(aot_sigmoid, aot/isa/calls.py)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.frontend.onnx import import_onnx
from aot.testing.kernels import build_and_run, single_op_graph
from aot.passes.pipeline import optimize
from aot.testing.yolo import yolov8


def _conv_silu_model(c: int = 16) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((c, 3, 3, 3)) * 0.3).astype(np.float32), "w")
    b = numpy_helper.from_array((rng.standard_normal(c) * 0.1).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1] * 4),
             helper.make_node("Sigmoid", ["y"], ["s"]),
             helper.make_node("Mul", ["y", "s"], ["z"])]
    g = helper.make_graph(nodes, "conv_silu",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, c, 8, 8])],
                          [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_silu_fuses_into_the_conv():
    graph = optimize(import_onnx(_conv_silu_model().SerializeToString(), "conv_silu"))
    groups = [[n.op for n in k.attrs["body"].nodes] for k in graph.nodes]
    assert ["Conv", "Swish"] in groups and not any("Sigmoid" in g for g in groups)
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32) * 3
    import onnxruntime as ort
    sess = ort.InferenceSession(_conv_silu_model().SerializeToString(),
                                providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    got = build_and_run(graph, {"x": x})["z"]
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-5, atol=1e-5)


def test_silu_rule_leaves_a_shared_sigmoid():
    """Sigmoid(x) read by another node too stays: the rewrite would compute it twice."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]),
             helper.make_node("Mul", ["x", "s"], ["y"]),
             helper.make_node("Add", ["s", "y"], ["z"])]
    g = helper.make_graph(nodes, "shared",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 16])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    graph = optimize(import_onnx(model.SerializeToString(), "shared"))
    ops = [n.op for k in graph.nodes for n in k.attrs["body"].nodes]
    assert "Swish" not in ops and "Sigmoid" in ops


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_sigmoid_float32_everywhere(codegen):
    """aot_sigmoid within 2.5e-7 of the exact value over the whole float
    range, vector and scalar lanes alike; NaN stays NaN, +-inf give 1 and 0."""
    x = np.concatenate([np.linspace(-30, 30, 4093), [np.inf, -np.inf, np.nan, 0.0, -0.0,
                                                     1e-30, 3e38, -3e38]]).astype(np.float32)
    graph = single_op_graph("Sigmoid", [((x.size,), np.float32)])
    got = build_and_run(graph, {"x0": x}, codegen=codegen)["y0"]
    with np.errstate(over="ignore"):
        want = 1 / (1 + np.exp(-x.astype(np.float64)))
    assert np.array_equal(np.isnan(got), np.isnan(x))
    ok = ~np.isnan(x)
    assert np.abs(got[ok] - want[ok]).max() <= 2.5e-7
    assert got[x == np.inf][0] == 1.0 and got[x == -np.inf][0] < 1e-7


def test_yolov8_structure():
    model = yolov8(320)
    ops = [n.op_type for n in model.graph.node]
    counts = {op: ops.count(op) for op in set(ops)}
    assert counts["Sigmoid"] == 57 + 1        # 57 SiLU blocks, the class scores
    assert counts["Mul"] == 57 + 1            # 57 SiLU blocks, the strides
    assert counts["MaxPool"] == 3 and counts["Resize"] == 2 and counts["Softmax"] == 1
    assert counts["Split"] == 8 + 2          # one per C2f, box/class, the DFL distances
    assert model.graph.output[0].type.tensor_type.shape.dim[2].dim_value == 2100
    conv = sum(1 for n in model.graph.node if n.op_type == "Conv")
    assert conv == 64                         # yolov8n's 63 plus the DFL's fixed 1x1


def test_yolov8_package_matches_onnxruntime(tmp_path):
    """The whole detector packaged for the host and run by its harness,
    against ONNX Runtime (one input, float tolerance); with --checks, the
    harness guards every arena buffer (the concats stored part by part, the
    kernels written over their inputs)."""
    import onnxruntime as ort

    from aot.api import package
    from aot.deploy import run_package
    from aot.targets import get_board

    model = yolov8(64)
    path = tmp_path / "yolo.onnx"
    path.write_bytes(model.SerializeToString())
    x = np.random.default_rng(0).uniform(0, 1, (1, 3, 64, 64)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"images": x})[0]
    info = package(path, board="host", out_dir=tmp_path / "pkg", checks=True)
    (got,) = run_package(info.path, get_board("host"), [x]).outputs
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_softmax_across_rows_vectorized(codegen):
    """Softmax along an axis that is not the last (the DFL's 16 bins): a
    vector of rows at a time through aot_exp, within 2e-6 relative of
    float64 over e^-87..e^0 (tiny results included); -inf gives 0, NaN NaN."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-87, 0, (5, 16, 35)).astype(np.float32)
    x[:, 0, :] = 0.0                          # the row maximum: the others span e^-87..1
    x[1, 3, 5] = -np.inf
    x[2, 4, 7] = np.nan
    graph = single_op_graph("Softmax", [(x.shape, np.float32)], {"axis": 1}, layout=False)
    ops = [n.op for k in graph.nodes for n in k.attrs["body"].nodes]
    assert ops == ["Softmax"]
    got = build_and_run(graph, {"x0": x}, codegen=codegen)["y0"]
    x64 = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        e = np.exp(x64 - np.max(x64, axis=1, keepdims=True))
        want = e / e.sum(axis=1, keepdims=True)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    np.testing.assert_allclose(got[~nan], want[~nan], rtol=2e-6, atol=0)
    assert got[1, 3, 5] == 0.0


def test_concat_stored_part_by_part():
    """A group ending in Concat stores each input through its own loop nest
    (no per-element choice of the input), here with a nearest Resize inlined
    into one part as the YOLO neck has it; the result is the interpreter's."""
    from aot.interp import interpret
    from aot.ir.tir import Select, walk_expr, walk_stmt, stmt_exprs
    from aot.lower import lower_graph
    from aot.testing.kernels import host_target

    nodes = [helper.make_node("Resize", ["a", "", "scales"], ["up"], mode="nearest",
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
             helper.make_node("Concat", ["up", "b", "c"], ["y"], axis=1)]
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    g = helper.make_graph(nodes, "neck", [
        helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 24, 5, 5]),
        helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 16, 10, 10]),
        helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 5, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 45, 10, 10])], [scales])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    graph = optimize(import_onnx(model.SerializeToString(), "neck"))
    (concat,) = [k for k in lower_graph(graph, host_target())
                 if "Concat" in [n.op for n in k.node.attrs["body"].nodes]]
    selects = [e for s in walk_stmt(concat.func.body) for x in stmt_exprs(s)
               for e in walk_expr(x) if isinstance(e, Select)]
    assert not selects
    rng = np.random.default_rng(0)
    inputs = {n: rng.standard_normal(graph.types[n].shape).astype(np.float32)
              for n in graph.inputs}
    np.testing.assert_array_equal(build_and_run(graph, inputs)["y"],
                                  interpret(graph, inputs)["y"])

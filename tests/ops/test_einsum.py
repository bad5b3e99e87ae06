"""ONNX Einsum: decomposed into ReduceSum, Transpose, Reshape and MatMul
(aot/passes/decompose.py), against ONNX Runtime, in the interpreter and
compiled on the host."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import aot
from aot.errors import UnsupportedError

CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 5, 8), (1, 2, 6, 8)]),     # attention scores
    ("bhqk,bhkd->bhqd", [(1, 2, 5, 6), (1, 2, 6, 8)]),     # attention-weighted values
    ("i,i", [(7,), (7,)]),                                 # implicit output: a dot product
    ("ij->", [(3, 4)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
    ("bi,ij,bj->b", [(2, 3), (3, 4), (2, 4)]),             # a bilinear form, three operands
    ("ij,kl->ijkl", [(2, 3), (4, 5)]),                     # outer product
    ("nchw,kc->nkhw", [(1, 3, 4, 4), (5, 3)]),             # a 1x1 convolution
    ("ba,ca", [(3, 4), (5, 4)]),                           # implicit, sorted: "bc"
    ("ijk,ikl->jl", [(2, 3, 4), (2, 4, 5)]),               # batch axis summed out
]


def _model(tmp_path, eq, shapes, name="e"):
    names = [f"x{i}" for i in range(len(shapes))]
    g = h.make_graph([h.make_node("Einsum", names, ["y"], equation=eq, name="ein")], name,
                     [h.make_tensor_value_info(n, T.FLOAT, s) for n, s in zip(names, shapes)],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])
    path = tmp_path / f"{name}.onnx"
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), str(path))
    return path, names


@pytest.mark.parametrize("eq,shapes", CASES, ids=[c[0] for c in CASES])
def test_einsum_matches_onnxruntime(tmp_path, eq, shapes):
    path, names = _model(tmp_path, eq, shapes)
    rng = np.random.default_rng(len(eq))
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes)}
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    graph = aot.optimize(aot.load(path))
    ops = {n.op for f in graph.nodes for n in f.attrs["body"].nodes}
    assert "Einsum" not in ops and ops <= {"MatMul", "Reshape", "Transpose", "ReduceSum"}
    np.testing.assert_allclose(aot.interpret(graph, feeds)["y"], want, rtol=1e-5, atol=1e-5)
    pkg = aot.package(path, board="host", out_dir=tmp_path / "pkg")
    np.testing.assert_allclose(aot.run(pkg, feeds, board="host")["y"], want, rtol=1e-5, atol=1e-5)


def test_an_exported_attention_with_einsum_and_weights(tmp_path):
    """PyTorch's shape of it: projections by einsum with constant weights
    (folded into transposed weights), scores, softmax, weighted values."""
    rng = np.random.default_rng(5)
    w = {k: rng.standard_normal((16, 2, 8)).astype(np.float32) for k in "qkv"}
    nodes = [h.make_node("Einsum", ["x", f"w{k}"], [k], equation="btc,chd->bhtd") for k in "qkv"]
    nodes += [h.make_node("Einsum", ["q", "k"], ["s"], equation="bhqd,bhkd->bhqk"),
              h.make_node("Softmax", ["s"], ["p"], axis=-1),
              h.make_node("Einsum", ["p", "v"], ["o"], equation="bhqk,bhkd->bqhd")]
    g = h.make_graph(nodes, "attn", [h.make_tensor_value_info("x", T.FLOAT, [1, 6, 16])],
                     [h.make_tensor_value_info("o", T.FLOAT, None)],
                     [onnx.numpy_helper.from_array(w[k], f"w{k}") for k in "qkv"])
    path = tmp_path / "attn.onnx"
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), str(path))
    x = rng.standard_normal((1, 6, 16)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    pkg = aot.package(path, board="host", out_dir=tmp_path / "pkg")
    np.testing.assert_allclose(aot.run(pkg, {"x": x}, board="host")["o"], want, rtol=1e-4,
                               atol=1e-5)


@pytest.mark.parametrize("eq,shapes,message", [
    ("ii->i", [(3, 3)], "repeats a label in one operand (a diagonal): not supported yet"),
    ("ij,jk->ik", [(3, 4), (1, 5)], "label 'j' is 4 in one operand and 1 in another"),
])
def test_unsupported_einsum_is_refused_naming_the_node(tmp_path, eq, shapes, message):
    path, _ = _model(tmp_path, eq, shapes)
    with pytest.raises(UnsupportedError, match="node 'ein'") as e:
        aot.load(path)
    assert message in str(e.value)

"""Reduction kernel rules (aot/lower/rules/reduce.py): Reduce*, ArgMax/ArgMin,
Softmax/LogSoftmax/Hardmax, global pools, LayerNormalization,
InstanceNormalization, LRN; one-node graphs compiled (C and LLVM) and run, against
the reference interpreter, plus fused (vector) epilogues."""
from __future__ import annotations

import functools

import numpy as np
import pytest

from aot.testing.kernels import compare_with_interpreter, single_op_graph
from aot.check.inputs import random_inputs

F, I8, I32 = "float32", "int8", "int32"


def i64(*v):
    return np.array(v, np.int64)


CASES: dict[str, tuple] = {}


def case(name: str, op: str, inputs, outputs: int = 1, layout: bool = True, **attrs):
    assert name not in CASES
    CASES[name] = (op, inputs, attrs, outputs, layout)


REDUCE = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
          "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp")
for _op in REDUCE:
    case(f"{_op}-last", _op, [((3, 4, 5), F), i64(-1)])
    case(f"{_op}-mid-nokeep", _op, [((3, 4, 5), F), i64(1)], keepdims=0)
    case(f"{_op}-two", _op, [((3, 4, 5), F), i64(0, 2)])
    case(f"{_op}-all", _op, [((3, 4, 5), F)], keepdims=0)
    # the last axis kept: vectors of 8 channels, then a scalar remainder of 4
    case(f"{_op}-vector", _op, [((3, 4, 20), F), i64(0, 1)])
case("ReduceSum-noop", "ReduceSum", [((3, 4), F), np.zeros(0, np.int64)], noop_with_empty_axes=1)
case("ReduceSum-long-row", "ReduceSum", [((2, 3000), F), i64(1)])
case("ReduceMean-long-row", "ReduceMean", [((2, 3000), F), i64(1)])
for _op in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean", "ReduceProd"):
    case(f"{_op}-int8", _op, [((3, 6), I8), i64(1)])
    case(f"{_op}-int32", _op, [((3, 6), I32), i64(0)])
for _op in ("ArgMax", "ArgMin"):
    case(f"{_op}-0", _op, [((4, 5), F)], axis=0)
    case(f"{_op}-last-nokeep", _op, [((3, 4, 5), F)], axis=-1, keepdims=0)
    case(f"{_op}-ties-first", _op, [np.array([[1, 3, 3, 0], [2, 2, 0, 0]], np.float32)], axis=1)
    case(f"{_op}-ties-last", _op, [np.array([[1, 3, 3, 0], [2, 2, 0, 0]], np.float32)], axis=1,
         select_last_index=1)
    case(f"{_op}-int8", _op, [((3, 7), I8)], axis=1)
for _op in ("Softmax", "LogSoftmax", "Hardmax"):
    case(f"{_op}-last", _op, [((3, 10), F)])
    case(f"{_op}-mid", _op, [((2, 5, 3), F)], axis=1)
    case(f"{_op}-first", _op, [((4, 3), F)], axis=0)
case("Hardmax-ties", "Hardmax", [np.array([[1, 3, 3, 0], [2, 2, 0, 0]], np.float32)])
case("Softmax-large", "Softmax", [np.array([[1000, 999, -1000, 0]], np.float32)])
for _op in ("GlobalAveragePool", "GlobalMaxPool"):
    case(f"{_op}-NHWC", _op, [((2, 3, 5, 4), F)])
    case(f"{_op}-NCHW", _op, [((2, 4, 3, 5), F)], layout=False)
    case(f"{_op}-1d", _op, [((2, 4, 7), F)], layout=False)
case("GlobalAveragePool-NHWC-vector", "GlobalAveragePool", [((2, 20, 3, 5), F)])
case("GlobalMaxPool-NHWC-vector", "GlobalMaxPool", [((1, 16, 2, 3), F)])
case("GlobalMaxPool-int8", "GlobalMaxPool", [((1, 4, 3, 5), I8)], layout=False)
case("LayerNorm-last", "LayerNormalization",
     [((3, 8), F), np.linspace(0.5, 2, 8, dtype=np.float32), np.linspace(-1, 1, 8, dtype=np.float32)])
case("LayerNorm-two-axes", "LayerNormalization",
     [((2, 3, 4), F), np.linspace(0.5, 2, 12, dtype=np.float32).reshape(3, 4)], axis=1)
case("LayerNorm-broadcast-scale", "LayerNormalization",
     [((2, 3, 4), F), np.full((1, 4), 1.5, np.float32), None], axis=1, epsilon=1e-3)
case("LayerNorm-stats", "LayerNormalization",
     [((3, 8), F), np.linspace(0.5, 2, 8, dtype=np.float32)], outputs=3)
case("LayerNorm-runtime-scale", "LayerNormalization", [((3, 8), F), ((8,), F), ((8,), F)])
for _layout, _shape in ((True, (2, 4, 3, 5)), (False, (2, 4, 3, 5))):
    _name = "NHWC" if _layout else "NCHW"    # the layout pass makes NHWC of an NCHW model
    case(f"InstanceNorm-{_name}", "InstanceNormalization",
         [(_shape, F), np.linspace(0.5, 2, 4, dtype=np.float32),
          np.linspace(-1, 1, 4, dtype=np.float32)], layout=_layout, epsilon=1e-4)
    case(f"InstanceNorm-{_name}-vector", "InstanceNormalization",
         [((1, 19, 3, 2), F), np.linspace(0.5, 2, 19, dtype=np.float32),
          np.linspace(-1, 1, 19, dtype=np.float32)], layout=_layout)
    case(f"LRN-{_name}", "LRN", [(_shape, F)], layout=_layout, size=3)
    case(f"LRN-{_name}-even", "LRN", [(_shape, F)], layout=_layout, size=4, alpha=0.5,
         beta=0.6, bias=2.0)


@functools.lru_cache(maxsize=None)
def _graphs():
    out = {}
    for name, (op, inputs, attrs, outputs, layout) in CASES.items():
        g = single_op_graph(op, inputs, attrs, outputs, layout=layout)
        ins = random_inputs(g, seed=len(name))
        if op in ("ReduceLogSum", "ReduceProd") and "int" not in name:
            # a positive sum for the log; factors near 1 for the product
            ins = {k: (np.abs(v) + 0.5).astype(v.dtype) for k, v in ins.items()}
        out[name] = (g, ins)
    return out


@functools.lru_cache(maxsize=None)
def _results(codegen: str):
    return compare_with_interpreter(_graphs(), codegen=codegen)


@pytest.mark.parametrize("codegen", ["c", "llvm"])
@pytest.mark.parametrize("name", list(CASES))
def test_reduce_rules(name, codegen):
    assert _results(codegen)[name] is None, _results(codegen)[name]


def _model_graph(nodes, inputs, outputs, inits=()):
    """An optimized graph of a small ONNX model (several ops in one group)."""
    import onnx
    from onnx import helper

    from aot.frontend.onnx import import_onnx
    from aot.passes.infer import infer_types
    from aot.passes.pipeline import optimize
    vis = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, s) for n, s in inputs]
    outs = [helper.make_tensor_value_info(n, 0, None) for n in outputs]
    g = helper.make_graph(nodes, "m", vis, outs,
                          [onnx.numpy_helper.from_array(v, k) for k, v in inits])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    return optimize(infer_types(import_onnx(model.SerializeToString(), "m")))


def test_fused_epilogue():
    """Elementwise ops after a reduction are applied in registers before its
    stores: Softmax + Sqrt is one kernel, with the same results."""
    from onnx import helper
    g = _model_graph(
        [helper.make_node("Mul", ["x", "s"], ["a"]),
         helper.make_node("Softmax", ["a"], ["b"], axis=-1),
         helper.make_node("Sqrt", ["b"], ["y"])],
        [("x", [3, 6])], ["y"], [("s", np.float32(3.0).reshape(()))])
    assert [n.attrs["body"].nodes[0].op for n in g.nodes] == ["Mul", "Softmax"]
    assert [n.op for n in g.nodes[1].attrs["body"].nodes] == ["Softmax", "Sqrt"]
    result = compare_with_interpreter({"m": (g, random_inputs(g))})["m"]
    assert result is None, result


def test_reduce_chain_in_a_model():
    """ReduceMean -> Sub -> Pow -> ReduceMean -> ... : LayerNorm spelled out, as
    exporters write it; every group lowers and the whole graph matches."""
    from onnx import helper
    nodes = [helper.make_node("ReduceMean", ["x", "ax"], ["m"]),
             helper.make_node("Sub", ["x", "m"], ["d"]),
             helper.make_node("Mul", ["d", "d"], ["d2"]),
             helper.make_node("ReduceMean", ["d2", "ax"], ["v"]),
             helper.make_node("Add", ["v", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["sd"]),
             helper.make_node("Div", ["d", "sd"], ["y"])]
    g = _model_graph(nodes, [("x", [2, 5, 16])], ["y"],
                     [("ax", i64(-1)), ("eps", np.float32(1e-5).reshape(()))])
    result = compare_with_interpreter({"m": (g, random_inputs(g))})["m"]
    assert result is None, result


def test_vector_reduction_with_epilogue():
    """GlobalAveragePool over NHWC keeps a vector of channel sums; the fused
    Sigmoid is applied to the whole vector before its store."""
    from onnx import helper

    from aot.ir.tir import ForKind, walk_stmt
    from aot.lower import lower_graph
    from aot.testing.kernels import host_target
    g = _model_graph([helper.make_node("GlobalAveragePool", ["x"], ["p"]),
                      helper.make_node("Sigmoid", ["p"], ["y"])], [("x", [1, 24, 3, 3])], ["y"])
    kernels = lower_graph(g, host_target())
    gap = next(k for k in kernels
               if [n.op for n in k.node.attrs["body"].nodes] == ["GlobalAveragePool", "Sigmoid"])
    assert any(s.kind is ForKind.VECTORIZED for s in walk_stmt(gap.func.body)
               if hasattr(s, "kind"))
    result = compare_with_interpreter({"m": (g, random_inputs(g))})["m"]
    assert result is None, result

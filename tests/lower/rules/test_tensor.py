"""Data-movement value rules (aot/lower/rules/tensor.py) and Split: one-node
graphs compiled (C and LLVM) and run, against the reference interpreter; vector
forms where the op keeps the last axis contiguous, and a clear refusal
where it does not."""
from __future__ import annotations

import functools

import numpy as np
import pytest

from aot.errors import UnsupportedError
from aot.testing.kernels import compare_with_interpreter, single_op_graph, vectorized_kernel
from aot.check.inputs import random_inputs

F, I8, I64 = "float32", "int8", "int64"


def i64(*v):
    return np.array(v, np.int64)


CASES: dict[str, tuple] = {}


def case(name: str, op: str, inputs, outputs: int = 1, **attrs):
    assert name not in CASES
    CASES[name] = (op, inputs, attrs, outputs)


case("Reshape-merge", "Reshape", [((2, 3, 4, 8), F), i64(6, 32)])
case("Reshape-split", "Reshape", [((6, 32), F), i64(2, 3, 4, 8)])
case("Reshape-regroup", "Reshape", [((4, 6, 8), F), i64(3, 8, 8)])
case("Reshape-ones", "Reshape", [((1, 3, 1, 8), F), i64(3, 1, 8, 1)])
case("Flatten", "Flatten", [((2, 3, 4, 8), F)], axis=2)
case("Flatten-0", "Flatten", [((2, 3, 8), I8)], axis=0)
case("Squeeze", "Squeeze", [((1, 3, 1, 8), F), i64(0, 2)])
case("Unsqueeze", "Unsqueeze", [((3, 8), F), i64(0, 2)])
case("Transpose-nchw-nhwc", "Transpose", [((2, 3, 4, 8), F)], perm=(0, 2, 3, 1))
case("Transpose-keep-last", "Transpose", [((2, 3, 4, 8), F)], perm=(2, 0, 1, 3))
case("Transpose-default", "Transpose", [((3, 4, 8), I8)])
case("Slice-basic", "Slice", [((6, 8, 8), F), i64(1, 0), i64(5, 8), i64(0, 2)])
case("Slice-steps", "Slice", [((6, 8, 9), F), i64(0, 1), i64(6, 9), i64(0, 2), i64(2, 2)])
case("Slice-negative-steps", "Slice", [((6, 8, 8), F), i64(-1, 7), i64(-100, 0),
                                       i64(0, 1), i64(-2, -3)])
case("Slice-reverse-last", "Slice", [((3, 8), F), i64(-1), i64(-100), i64(1), i64(-1)])
case("Slice-clamped", "Slice", [((4, 16), F), i64(-3, 4), i64(100, 12)])
for _mode in ("constant", "reflect", "edge", "wrap"):
    case(f"Pad-{_mode}", "Pad", [((3, 4, 8), F), i64(1, 2, 0, 2, 1, 0)], mode=_mode)
    case(f"Pad-{_mode}-last", "Pad", [((3, 5), F), i64(0, 2, 1, 3)], mode=_mode)
    case(f"Pad-{_mode}-crop", "Pad", [((5, 6, 8), F), i64(-1, 2, 0, 2, -1, 0)], mode=_mode)
case("Pad-value", "Pad", [((3, 4, 8), F), i64(1, 1, 0, 1, 1, 0), np.float32(2.5)])
case("Pad-runtime-value", "Pad", [((3, 4, 8), F), i64(1, 1, 0, 1, 1, 0), ((), F)])
case("Pad-axes", "Pad", [((3, 4, 8), I8), i64(2, 1), np.int8(-7), i64(1)])
case("Concat-0", "Concat", [((2, 8), F), ((3, 8), F), ((1, 8), F)], axis=0)
case("Concat-mid", "Concat", [((2, 3, 8), F), ((2, 1, 8), F)], axis=1)
case("Concat-last", "Concat", [((2, 3), F), ((2, 5), F)], axis=-1)
case("Concat-const", "Concat", [((2, 8), F), np.ones((1, 8), np.float32)], axis=0)
case("Gather-const", "Gather", [((5, 4, 8), F), i64(4, -1, 0, 2)], axis=0)
case("Gather-scalar", "Gather", [((5, 4, 8), F), np.array(-2, np.int64)], axis=1)
case("Gather-2d", "Gather", [((5, 4, 8), F), np.array([[0, -1], [3, 1]], np.int32)], axis=1)
case("Gather-runtime", "Gather", [((5, 8), F), ((3, 2), I64)], axis=0)
case("Gather-last", "Gather", [((5, 9), F), i64(8, 0, -3)], axis=1)
case("Expand", "Expand", [((3, 1), F), i64(2, 3, 8)])
case("Expand-row", "Expand", [((8,), F), i64(4, 1, 8)])
case("Tile", "Tile", [((2, 3, 8), F), i64(2, 3, 1)])
case("Tile-last", "Tile", [((2, 3), I8), i64(2, 3)])
for _layout, _in in (("NCHW", (2, 8, 3, 4)), ("NHWC", (2, 3, 4, 8))):
    for _mode in ("DCR", "CRD"):
        case(f"DepthToSpace-{_layout}-{_mode}", "DepthToSpace", [(_in, F)],
             blocksize=2, mode=_mode, layout=_layout)
case("SpaceToDepth-NCHW", "SpaceToDepth", [((2, 3, 4, 8), F)], blocksize=2)
case("SpaceToDepth-NHWC", "SpaceToDepth", [((2, 4, 6, 4), F)], blocksize=2, layout="NHWC")
case("Split-equal", "Split", [((4, 6), F)], outputs=3, axis=1)
case("Split-sizes", "Split", [((5, 2, 8), F), i64(1, 4)], outputs=2, axis=0)
case("Split-uneven", "Split", [((7, 3), I8)], outputs=3, axis=0, num_outputs=3)

# ops whose vector form must be refused (the last axis is not contiguous)
NOT_VECTOR = {"Transpose-nchw-nhwc", "Transpose-default", "Slice-steps", "Slice-reverse-last",
              "Concat-last", "Gather-last", "Tile-last", "DepthToSpace-NCHW-DCR",
              "DepthToSpace-NCHW-CRD", "DepthToSpace-NHWC-CRD", "SpaceToDepth-NCHW", "SpaceToDepth-NHWC",
              "Pad-constant-last", "Pad-reflect-last", "Pad-edge-last", "Pad-wrap-last"}


def _graph(name: str):
    op, inputs, attrs, outputs = CASES[name]
    # NCHW ops are kept NCHW, so their rules see that layout
    return single_op_graph(op, inputs, attrs, outputs, layout="NCHW" not in name)


@functools.lru_cache(maxsize=None)
def _graphs():
    out = {}
    for name in CASES:
        g = _graph(name)
        out[name] = (g, random_inputs(g, seed=len(name)))
    return out


def _vector_candidates(lanes: int) -> list[str]:
    out = []
    for name, (g, _) in _graphs().items():
        shape = g.types[g.outputs[0]].shape
        if len(g.outputs) == 1 and shape and shape[-1] % lanes == 0 and name not in NOT_VECTOR:
            out.append(name)
    return out


@functools.lru_cache(maxsize=None)
def _results(lanes: int, codegen: str = "c"):
    cases = _graphs()
    if lanes > 1:
        cases = {k: cases[k] for k in _vector_candidates(lanes)}
    return compare_with_interpreter(cases, lanes=lanes, codegen=codegen)


@pytest.mark.parametrize("codegen", ["c", "llvm"])
@pytest.mark.parametrize("name", list(CASES))
def test_scalar(name, codegen):
    assert _results(1, codegen)[name] is None, _results(1, codegen)[name]


@pytest.mark.parametrize("codegen", ["c", "llvm"])
@pytest.mark.parametrize("name", _vector_candidates(4))
def test_vector(name, codegen):
    assert _results(4, codegen)[name] is None, _results(4, codegen)[name]


@pytest.mark.parametrize("name", sorted(NOT_VECTOR))
def test_vector_refused_where_lanes_are_not_contiguous(name):
    g = _graphs()[name][0]
    shape = g.types[g.outputs[0]].shape
    lanes = next(n for n in (4, 3, 2) if shape[-1] % n == 0)
    with pytest.raises(UnsupportedError, match="lane vector"):
        vectorized_kernel(g, lanes)


def test_reshape_of_a_buffer_is_one_load():
    """A reshape of a tensor in memory reads it at the same flat offset:
    no division or modulo in the index."""
    from aot.ir.tir import Bin, walk_expr
    from aot.lower import lower_graph
    from aot.testing.kernels import host_target
    (k,) = lower_graph(_graphs()["Reshape-regroup"][0], host_target())
    store = k.func.body.body.body.body
    assert not any(isinstance(e, Bin) and e.op in "/%" for e in walk_expr(store.index))
    assert not any(isinstance(e, Bin) and e.op in "/%" for e in walk_expr(store.value))


def test_reshape_index_blocks():
    """Inlined reshapes split or merge only the axes that change."""
    from aot.ir.tir import Bin, Var, walk_expr
    from aot.lower.rules.tensor import reshape_index
    idx = tuple(Var(f"i{d}") for d in range(4))
    at = reshape_index(idx, (2, 3, 4, 8), (6, 4, 8))
    assert at[1:] == (idx[2], idx[3])
    assert not any(isinstance(e, Bin) and e.op in "/%" for a in at for e in walk_expr(a))


def test_compile_time_values_as_model_outputs(tmp_path):
    """Shape and ConstantOfShape that make model outputs are not folded (a
    kernel must write every output); their kernels store the known values."""
    import onnx
    from onnx import TensorProto, helper

    import aot
    from aot.testing.kernels import build_and_run

    fill = helper.make_tensor("v", TensorProto.FLOAT, [1], [2.5])
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape", start=1),
             helper.make_node("ConstantOfShape", ["shp"], ["f"], name="fill", value=fill),
             helper.make_node("Size", ["x"], ["n"], name="size")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("s", TensorProto.INT64, [2]),
         helper.make_tensor_value_info("f", TensorProto.FLOAT, [2, 2]),
         helper.make_tensor_value_info("n", TensorProto.INT64, [])],
        [helper.make_tensor("shp", TensorProto.INT64, [2], [2, 2])])
    path = tmp_path / "m.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
                     .SerializeToString())
    g = aot.optimize(aot.load(path))
    x = np.zeros((2, 3, 4), np.float32)
    got = build_and_run(g, {"x": x})
    np.testing.assert_array_equal(got["s"], [3, 4])
    np.testing.assert_array_equal(got["f"], np.full((2, 2), 2.5, np.float32))
    assert int(got["n"]) == 24

"""GridSample beyond the ONNX node cases (3 x 2 images, grids inside
[-1, 1] but for a few points): grid points up to 2.5 outside, so reflection
folds more than once, every mode x padding x align_corners, 2-D and 3-D;
the interpreter against onnx's reference implementation, and the generated
code (C and LLVM) against the interpreter."""
from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from aot.interp import interpret
from aot.lower.testing import compare_with_interpreter, single_op_graph

COMBOS = list(itertools.product(("nearest", "linear", "cubic"), ("zeros", "border", "reflection"),
                                (0, 1)))


def _inputs(volumetric: bool):
    rng = np.random.default_rng(3)
    x_shape, g_shape = ((1, 2, 3, 4, 5), (1, 2, 3, 2, 3)) if volumetric else \
        ((2, 2, 5, 4), (2, 3, 4, 2))
    x = rng.normal(size=x_shape).astype(np.float32)
    grid = rng.uniform(-2.5, 2.5, g_shape).astype(np.float32)
    return x, grid


def _graph(x, grid, mode, padding, align):
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
    return single_op_graph("GridSample", [(x.shape, "float32"), (grid.shape, "float32")], attrs,
                           opset=20, layout=False)


def _onnx_reference(x, grid, mode, padding, align):
    node = helper.make_node("GridSample", ["X", "G"], ["Y"], mode=mode, padding_mode=padding,
                            align_corners=align)
    graph = helper.make_graph([node], "g", [
        helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, x.shape),
        helper.make_tensor_value_info("G", onnx.TensorProto.FLOAT, grid.shape)],
        [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    return ReferenceEvaluator(model).run(None, {"X": x, "G": grid})[0]


@pytest.mark.parametrize("volumetric", [False, True])
def test_grid_sample_interpreter_against_onnx_reference(volumetric):
    x, grid = _inputs(volumetric)
    for mode, padding, align in COMBOS:
        g = _graph(x, grid, mode, padding, align)
        got = interpret(g, {"x0": x, "x1": grid})["y0"]
        want = _onnx_reference(x, grid, mode, padding, align)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5,
                                   err_msg=f"{mode} {padding} align_corners={align}")


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_grid_sample_generated_code(codegen):
    cases = {}
    for volumetric in (False, True):
        x, grid = _inputs(volumetric)
        for mode, padding, align in COMBOS:
            cases[f"{volumetric}-{mode}-{padding}-{align}"] = (
                _graph(x, grid, mode, padding, align), {"x0": x, "x1": grid})
    result = compare_with_interpreter(cases, codegen=codegen, rtol=1e-4, atol=1e-5)
    bad = {k: v for k, v in result.items() if v}
    assert not bad, bad

"""GridSample beyond the ONNX node cases (3 x 2 images, grids inside
[-1, 1] but for a few points): grid points up to 2.5 outside, so reflection
folds more than once, every mode x padding x align_corners, 2-D and 3-D;
the interpreter against onnx's reference implementation, and the generated
code (C and LLVM) against the interpreter."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from aot.interp import interpret
from aot.testing.kernels import compare_with_interpreter, single_op_graph

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


def _reference(op: str, arrays: list, attrs: dict, opset: int = 20):
    names = [f"i{k}" for k in range(len(arrays))]
    node = helper.make_node(op, names, ["Y"], **attrs)
    graph = helper.make_graph([node], "r", [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in zip(names, arrays)], [helper.make_tensor_value_info("Y", 1, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, dict(zip(names, arrays)))[0]


@pytest.mark.parametrize("volumetric", [False, True])
def test_grid_sample_interpreter_against_onnx_reference(volumetric):
    x, grid = _inputs(volumetric)
    for mode, padding, align in COMBOS:
        g = _graph(x, grid, mode, padding, align)
        got = interpret(g, {"x0": x, "x1": grid})["y0"]
        want = _reference("GridSample", [x, grid],
                          {"mode": mode, "padding_mode": padding, "align_corners": align})
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


def _deform_case():
    """DeformConv with everything the node cases leave at 1 or 0: groups,
    offset groups, strides, dilations, pads, a mask and a bias; offsets up
    to 3 pixels, so samples leave the image."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 4, 6, 5)).astype(np.float32)
    w = rng.normal(size=(6, 2, 2, 3)).astype(np.float32)
    attrs = {"group": 2, "offset_group": 2, "strides": [2, 1], "dilations": [1, 2],
             "pads": [1, 2, 0, 1], "kernel_shape": [2, 3]}
    oh, ow = (6 + 1 - 1 - 1) // 2 + 1, (5 + 3 - 4 - 1) + 1
    off = rng.uniform(-3, 3, (2, 2 * 2 * 6, oh, ow)).astype(np.float32)
    b = rng.normal(size=(6,)).astype(np.float32)
    mask = rng.uniform(0, 1, (2, 2 * 6, oh, ow)).astype(np.float32)
    return [x, w, off, b, mask], attrs


def test_deform_conv_against_onnx_reference_and_generated_code():
    arrays, attrs = _deform_case()
    want = _reference("DeformConv", arrays, attrs, 22)
    g = single_op_graph("DeformConv", [(a.shape, "float32") for a in arrays], attrs, opset=22,
                        layout=False)
    inputs = {f"x{k}": a for k, a in enumerate(arrays)}
    np.testing.assert_allclose(interpret(g, inputs)["y0"], want, rtol=1e-4, atol=1e-4)
    for codegen in ("c", "llvm"):
        assert compare_with_interpreter({"deform": (g, inputs)}, codegen=codegen)["deform"] is None


def test_col2im_and_affine_grid_against_onnx_reference_and_generated_code():
    """Col2Im with strides, dilations and pads at once, 2-D and 3-D; AffineGrid
    on random maps, both align_corners (the node cases: one attribute each,
    identity-like maps)."""
    rng = np.random.default_rng(11)
    cases = {}
    for name, image, block, attrs in (
            ("col2im-2d", [7, 6], [2, 3], {"strides": [2, 1], "dilations": [1, 2],
                                          "pads": [1, 0, 2, 1]}),
            ("col2im-3d", [4, 5, 3], [2, 2, 1], {"strides": [1, 2, 1], "pads": [0, 1, 0, 1, 0, 0]})):
        r = len(image)
        strides, dil = attrs.get("strides", [1] * r), attrs.get("dilations", [1] * r)
        pads = attrs["pads"]
        counts = [(image[i] + pads[i] + pads[i + r] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1
                  for i in range(r)]
        x = rng.normal(size=(2, 3 * int(np.prod(block)), int(np.prod(counts)))).astype(np.float32)
        consts = [np.array(image, np.int64), np.array(block, np.int64)]
        want = _reference("Col2Im", [x, *consts], attrs, 18)
        g = single_op_graph("Col2Im", [(x.shape, "float32"), *consts], attrs, opset=18,
                            layout=False)
        np.testing.assert_allclose(interpret(g, {"x0": x})["y0"], want, rtol=1e-5, atol=1e-5)
        cases[name] = (g, {"x0": x})
    for size, align in (([2, 3, 5, 4], 0), ([2, 3, 5, 4], 1), ([1, 2, 3, 4, 2], 0),
                        ([1, 2, 3, 4, 2], 1)):
        r = len(size) - 2
        theta = rng.normal(size=(size[0], r, r + 1)).astype(np.float32)
        sizes = np.array(size, np.int64)
        want = _reference("AffineGrid", [theta, sizes], {"align_corners": align})
        g = single_op_graph("AffineGrid", [(theta.shape, "float32"), sizes],
                            {"align_corners": align}, opset=20, layout=False)
        np.testing.assert_allclose(interpret(g, {"x0": theta})["y0"], want, rtol=1e-5, atol=1e-5)
        cases[f"affine-{r}d-{align}"] = (g, {"x0": theta})
    for codegen in ("c", "llvm"):
        result = compare_with_interpreter(cases, codegen=codegen, rtol=1e-5, atol=1e-5)
        assert not any(result.values()), result

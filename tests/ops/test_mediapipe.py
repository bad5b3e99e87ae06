"""MediaPipe's custom ops (aot/ops/mediapipe.py): the references on cases
worked out by hand from MediaPipe's kernels, and the kernel rules compiled
against them."""
from __future__ import annotations

import math

import numpy as np
import pytest

from aot.errors import ShapeError
from aot.interp import interpret
from aot.ir.graph import Graph, Node, TensorType
from aot.passes.infer import infer_types
from aot.passes.pipeline import optimize
from aot.testing.kernels import compare_with_interpreter

F = "float32"


def _graph(op: str, inputs: dict, outputs: list[str], attrs: dict | None = None,
           constants: dict | None = None) -> Graph:
    """One op on float32 inputs {name: shape} and constants {name: array}."""
    constants = constants or {}
    types = {n: TensorType(tuple(s), F) for n, s in inputs.items()}
    types |= {n: TensorType(v.shape, v.dtype.name) for n, v in constants.items()}
    node = Node(op, "n", tuple([*inputs, *constants]), tuple(outputs), attrs or {})
    return infer_types(Graph("g", tuple(inputs), tuple(outputs), (node,), types, constants))


def _run(g: Graph, **feeds) -> dict:
    return interpret(g, {k: np.asarray(v, np.float32) for k, v in feeds.items()})


def _bilinear(output_size=(2, 3)) -> Graph:
    return _graph("mediapipe.TransformTensorBilinear", {"x": (1, 3, 4, 2), "m": (1, 4, 4)},
                  ["y"], {"output_size": output_size})


def _image() -> np.ndarray:
    # channel 0: 10 * row + column; channel 1: its negative
    v = (10 * np.arange(3)[:, None] + np.arange(4)[None, :]).astype(np.float32)
    return np.stack([v, -v], -1)[None]


def test_bilinear_identity_copies_the_top_left_corner():
    """With the identity, version 2's aligned-corners correction cancels
    (0.5 + 0.5 * 0 ... - 0.5 = 0): output (x, y) reads input (x, y)."""
    got = _run(_bilinear(), x=_image(), m=np.eye(4)[None])["y"]
    assert np.array_equal(got[0, :, :, 0], [[0, 1, 2], [10, 11, 12]])
    assert np.array_equal(got[0, :, :, 1], -got[0, :, :, 0])


def test_bilinear_interpolates_and_zeroes_points_outside():
    """x scaled by 0.5: the correction makes t_x = 0.5 x - 0.25, so x = 0
    falls outside (0), x = 1 reads 0.75 of column 0 and 0.25 of column 1,
    x = 2 reads between columns 0 and 1 at 0.75. y shifted by 1.5 rows:
    t_y = y + 1.5, so row 1 reads 2.5, below the last row (outside)."""
    m = np.eye(4)
    m[0, 0] = 0.5
    m[1, 3] = 1.5
    got = _run(_bilinear(), x=_image(), m=m[None])["y"][0, :, :, 0]
    # row 0: t_y = 1.5, halfway between rows 1 and 2 (values 10 + c and 20 + c)
    assert got[0, 0] == 0
    assert got[0, 1] == pytest.approx(15 + 0.25)
    assert got[0, 2] == pytest.approx(15 + 0.75)
    assert np.array_equal(got[1], [0, 0, 0])


def test_bilinear_reads_zero_past_the_last_column():
    """t_x = W - 1 exactly is inside, and its right neighbour (column W)
    reads 0 with weight 0: the value is the last column's."""
    m = np.eye(4)
    m[0, 3] = 3       # t_x = x + 3: x = 0 reads column 3 (the last)
    got = _run(_bilinear((1, 2)), x=_image(), m=m[None])["y"][0, 0, :, 0]
    assert got[0] == 3 and got[1] == 0


def test_landmarks_map_x_and_y_and_keep_z():
    """x' = m00 x + m01 y + m03, y' = m10 x + m11 y + m13 (m02, m12 meet
    the z of 0 MediaPipe's kernel uses), z unchanged."""
    g = _graph("mediapipe.TransformLandmarks", {"p": (1, 2, 3), "m": (1, 4, 4)}, ["q"])
    m = np.array([[2, 1, 9, 5], [0, -1, 9, 7], [1, 1, 1, 1], [0, 0, 0, 1]], np.float32)
    got = _run(g, p=[[[1, 2, 3], [-1, 0, 0.5]]], m=m[None])["q"]
    assert np.array_equal(got, [[[2 + 2 + 5, -2 + 7, 3], [-2 + 5, 7, 0.5]]])


def test_landmarks_in_two_dimensions():
    g = _graph("mediapipe.TransformLandmarks", {"p": (1, 1, 2), "m": (1, 4, 4)}, ["q"])
    m = np.eye(4, dtype=np.float32)
    m[:2, 3] = (10, 20)
    assert np.array_equal(_run(g, p=[[[1, 2]]], m=m[None])["q"], [[[11, 22]]])


def _matrix(**attrs) -> Graph:
    base = {"subset_idxs": ((2, 3), (4, 5)), "left_rotation_idx": 0, "right_rotation_idx": 1,
            "target_rotation_radians": 0.0, "output_height": 2, "output_width": 2,
            "scale_x": 1.0, "scale_y": 1.0}
    return _graph("mediapipe.Landmarks2TransformMatrix", {"p": (1, 6, 3)}, ["t"],
                  {**base, **attrs})


BOX = [[0, 0, 0], [1, 0, 0], [0, 0, 0], [4, 0, 0], [0, 2, 0], [4, 2, 0]]


def test_matrix_of_an_upright_box():
    """left -> right along +x: no rotation. The subset spans 4 x 2 around
    (2, 1); over a 2 x 2 output the scales are 4 / 2 and 2 / 2, and the
    translation is the centre minus half the output scaled: 2 - 2 * 1,
    1 - 1 * 1."""
    got = _run(_matrix(), p=[BOX])["t"][0]
    want = [[2, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
    assert np.allclose(got, want, atol=1e-6)


def test_matrix_scales_and_rotates():
    """left -> right along +y: a rotation of -pi/2 to undo (target 0). The
    box rotated by -pi/2 spans 2 x 4, so the scales are 1.5 * 2 / 2 (scale_x
    1.5) and 4 / 2, and the matrix's 2x2 block is R(pi/2) diag(1.5, 2) =
    [[0, -2], [1.5, 0]]. The centre (2, 1) rotated there and back stays
    (2, 1): the translation is (2, 1) + block (-1, -1) = (4, -0.5)."""
    pts = [list(p) for p in BOX]
    pts[1] = [0, 1, 0]
    got = _run(_matrix(scale_x=1.5), p=[pts])["t"][0]
    want = [[0, -2, 0, 4], [1.5, 0, 0, -0.5], [0, 0, 1, 0], [0, 0, 0, 1]]
    assert np.allclose(got, want, atol=1e-5)


def test_matrix_target_rotation():
    """A target of pi/2 on an upright pair rotates by pi/2: the same as
    the case above, the other way round."""
    got = _run(_matrix(target_rotation_radians=math.pi / 2), p=[BOX])["t"][0]
    # the box rotated by pi/2 spans 2 x 4: scales 1 and 2, block R(-pi/2) diag(1, 2);
    # translation (2, 1) + block (-1, -1)
    assert np.allclose(got[:2, :2], [[0, 2], [-1, 0]], atol=1e-5)
    assert np.allclose(got[:2, 3], [0, 2], atol=1e-5)


def test_matrix_refuses_a_landmark_past_the_input():
    with pytest.raises(ShapeError, match="holding landmark 9"):
        _matrix(subset_idxs=((2, 9),))


def test_pool_argmax_indices_and_unpool_put_values_back():
    """2x2 windows, stride 2: the index is ky * 2 + kx of the first
    maximum, plus 0.1; unpooling stores each max where it came from."""
    x = np.array([[1, 5, 2, 2], [3, 4, 2, 0], [9, 0, 0, 1], [0, 9, 1, 0]], np.float32)
    attrs = {"padding": "VALID", "strides": (2, 2), "kernel": (2, 2), "activation": "NONE"}
    pool = _graph("mediapipe.MaxPoolingWithArgmax2D", {"x": (1, 4, 4, 1)}, ["v", "i"], attrs)
    out = _run(pool, x=x[None, :, :, None])
    assert np.array_equal(out["v"][0, :, :, 0], [[5, 2], [9, 1]])
    assert np.allclose(out["i"][0, :, :, 0], [[1.1, 0.1], [0.1, 1.1]])
    unpool = _graph("mediapipe.MaxUnpooling2D", {"v": (1, 2, 2, 1), "i": (1, 2, 2, 1)}, ["y"],
                    {"strides": (2, 2), "kernel": (2, 2)})
    back = _run(unpool, v=out["v"], i=out["i"])["y"][0, :, :, 0]
    assert np.array_equal(back, np.where(np.isin(np.arange(16).reshape(4, 4),
                                                 [1, 2, 8, 11]), x, 0))


def test_transpose_conv_same_crops_as_mediapipe():
    """One input pixel, a 3x3 kernel of 1..9, stride 2, SAME: MediaPipe
    crops P = 3 - (1 - 1) % 2 - 1 = 2 of the 3 full rows and columns, 1 at
    the top and left: the output is 1x1, the input times the kernel's
    centre, plus the bias."""
    w = np.arange(1, 10, dtype=np.float32).reshape(1, 3, 3, 1)
    g = _graph("mediapipe.Convolution2DTransposeBias", {"x": (1, 1, 1, 1)}, ["y"],
               {"padding": "SAME", "strides": (2, 2)},
               {"w": w, "b": np.array([0.5], np.float32)})
    assert g.types["y"].shape == (1, 1, 1, 1)
    assert _run(g, x=[[[[2]]]])["y"].item() == 2 * 5 + 0.5


def _compiled_cases() -> dict:
    rng = np.random.default_rng(3)
    pool = {"padding": "SAME", "strides": (2, 2), "kernel": (3, 3), "activation": "RELU6"}
    cases = {
        "transpose-conv": _graph(
            "mediapipe.Convolution2DTransposeBias", {"x": (1, 3, 4, 3)}, ["y"],
            {"padding": "SAME", "strides": (2, 2)},
            {"w": rng.standard_normal((5, 3, 3, 3)).astype(np.float32),
             "b": rng.standard_normal(5).astype(np.float32)}),
        "pool-argmax": _graph("mediapipe.MaxPoolingWithArgmax2D", {"x": (1, 5, 6, 3)},
                              ["v", "i"], pool),
        "unpool": _graph("mediapipe.MaxUnpooling2D", {"v": (1, 2, 3, 2)}, ["y"],
                         {"strides": (2, 2), "kernel": (2, 2)},
                         {"i": np.array([0.1, 3.1, 1.1, 2.1, 0.1, 0.1, 3.1, 3.1, 2.1, 1.1, 9.1,
                                         -1.0], np.float32).reshape(1, 2, 3, 2)}),
        "bilinear": _bilinear((3, 5)),
        "landmarks": _graph("mediapipe.TransformLandmarks", {"p": (1, 4, 3), "m": (1, 4, 4)},
                            ["q"]),
        "matrix": _matrix(),
    }
    feeds = {}
    for name, g in cases.items():
        feeds[name] = {n: rng.uniform(-2, 4, g.types[n].shape).astype(np.float32)
                       for n in g.inputs}
    feeds["bilinear"]["m"] = np.array([[[0.7, 0.2, 0, 0.3], [-0.3, 0.8, 0, 0.6], [0, 0, 1, 0],
                                        [0, 0, 0, 1]]], np.float32)
    return {name: (optimize(g), feeds[name]) for name, g in cases.items()}


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_rules_match_the_references(codegen):
    cases = _compiled_cases()
    # the bilinear case samples inside and outside the image
    y = interpret(*cases["bilinear"])["y"]
    assert (y == 0).any() and (y != 0).any()
    got = compare_with_interpreter(cases, codegen=codegen)
    assert not {k: v for k, v in got.items() if v}, got

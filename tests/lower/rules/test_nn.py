"""The float neural-network kernels (aot/lower/rules/nn.py) compiled and run
against the reference interpreter, through the C and the LLVM backends:
single-op graphs over a spread of geometries (each group compiled as one
library), the NCHW forms, narrower and scalar targets, the region
splitter's invariants, and the float models end to end."""
from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

import aot
from aot.errors import UnsupportedError
from aot.ir.graph import Graph, Node, type_of
from aot.lower import lower_graph
from aot.lower.kernels.windows import axis_runs, window_regions
from aot.testing.kernels import build_and_run_many, host_target
from aot.ops.nn import Window
from aot.passes.fold import fold_constants
from aot.passes.fuse import fuse
from aot.passes.infer import infer_types
from aot.testing import assert_close

from support import MODELS
from support.float_kernels import (ATOL, CONVS, DENSE, RTOL, _conv_consts, _rnd, onnx_graph,
                                   run_many)

CODEGENS = ["c", "llvm"]


def nchw_graph(op, x_shape, consts, attrs):
    """One node kept channel-first (no layout pass): the NCHW kernels."""
    types = {"x": type_of(np.zeros(x_shape, np.float32))}
    types.update({k: type_of(v) for k, v in consts.items()})
    attrs = {k: tuple(v) if isinstance(v, list) else v for k, v in attrs.items()}
    node = Node(op, "n0", ("x",) + tuple(consts), ("y",), attrs)
    g = Graph(op, ("x",), ("y",), (node,), types, dict(consts))
    return fuse(fold_constants(infer_types(g)))


def check_many(graphs, codegen):
    """Compile every graph's kernels in one library; compare to interpret."""
    cases = [(g, {"x": _rnd(*g.types["x"].shape, seed=i)}) for i, g in enumerate(graphs)]
    got = run_many(cases, codegen)
    for (g, ins), out in zip(cases, got):
        want = aot.interpret(g, ins)
        for name in g.outputs:
            assert_close(f"{g.name}:{name}", out[name], want[name], RTOL, ATOL)


@pytest.mark.parametrize("codegen", CODEGENS)
def test_conv_geometries(codegen):
    graphs = [onnx_graph("Conv", x, _conv_consts(w, i, bias=i % 3 != 1), a)
              for i, (x, w, a) in enumerate(CONVS)]
    check_many(graphs, codegen)


@pytest.mark.parametrize("codegen", CODEGENS)
def test_conv_nchw(codegen):
    graphs = [nchw_graph("Conv", x, _conv_consts(w, i), a)
              for i, (x, w, a) in enumerate(CONVS[:10])]
    check_many(graphs, codegen)


@pytest.mark.parametrize("vector_bits", [128, 0])
def test_narrower_and_scalar_targets(vector_bits):
    """The same kernels for a 4-lane vector unit and for none (a
    microcontroller): other tile widths, remainders and pixel blocks."""
    target = dataclasses.replace(host_target(), vector_bits=vector_bits)
    graphs = [onnx_graph("Conv", x, _conv_consts(w, i), a) for i, (x, w, a) in enumerate(CONVS)]
    graphs += [onnx_graph(op, x, {}, a) for op, x, a in POOLS[:6]]
    graphs += [onnx_graph(op, x, {k: _rnd(*v, seed=i) for k, v in c.items()}, a)
               for i, (op, x, c, a) in enumerate(DENSE)]
    cases = [(g, {"x": _rnd(*g.types["x"].shape, seed=i)}) for i, g in enumerate(graphs)]
    for (g, ins), got in zip(cases, build_and_run_many(cases, target=target)):
        want = aot.interpret(g, ins)
        for name in g.outputs:
            assert_close(f"{g.name}:{name}", got[name], want[name], RTOL, ATOL)


def test_conv_is_vectorized_over_output_channels():
    """An NHWC conv with 16 output channels on AVX2 is 8-lane vector code:
    its stores are vectors, its weights a repacked parameter."""
    from aot.ir.tir import Store, dtype_of, walk_stmt
    g = onnx_graph("Conv", (1, 8, 5, 5), _conv_consts((16, 8, 3, 3), 0), dict(pads=[1, 1, 1, 1]))
    (k,) = [k for k in lower_graph(g, host_target()) if k.node.attrs["body"].nodes[0].op == "Conv"]
    lanes = {dtype_of(s.value).lanes for s in walk_stmt(k.func.body) if isinstance(s, Store)}
    assert lanes == {host_target().lanes(32)}
    assert any(a.kind == "param" and a.array.shape == (1, 3, 3, 8, 16) for a in k.args)


@pytest.mark.parametrize("x,w,copied", [((1, 8, 5, 5), (16, 8, 3, 3), True),
                                         ((1, 4, 20, 20), (12, 4, 3, 3), False)])
def test_small_padded_maps_are_copied_into_a_padded_workspace(x, w, copied):
    """A 5x5 map is mostly border (a zero-padded copy pays); 20x20 is not."""
    g = onnx_graph("Conv", x, _conv_consts(w, 0), dict(pads=[1, 1, 1, 1]))
    (k,) = [k for k in lower_graph(g, host_target()) if k.node.attrs["body"].nodes[0].op == "Conv"]
    assert any(a.kind == "scratch" for a in k.args) == copied


def test_conv_runtime_weight_is_unsupported():
    types = {"x": type_of(np.zeros((1, 5, 5, 4), np.float32)),
             "w": type_of(np.zeros((8, 3, 3, 4), np.float32))}
    node = Node("Conv", "c", ("x", "w"), ("y",), {"layout": "NHWC"})
    g = fuse(infer_types(Graph("g", ("x", "w"), ("y",), (node,), types, {})))
    with pytest.raises(UnsupportedError, match="weight computed at run time"):
        lower_graph(g, host_target())


# --------------------------------------------------------------------- pooling

POOLS = [
    ("MaxPool", (1, 5, 7, 7), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("MaxPool", (1, 9, 7, 7), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("MaxPool", (1, 16, 8, 8), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("MaxPool", (1, 3, 9, 9), dict(kernel_shape=[3, 3], dilations=[2, 2], pads=[2, 1, 2, 1])),
    ("AveragePool", (1, 9, 7, 7), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                       ceil_mode=1)),
    ("AveragePool", (1, 9, 7, 7), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                       ceil_mode=1, count_include_pad=1)),
    ("AveragePool", (1, 12, 10, 10), dict(kernel_shape=[7, 7], pads=[3, 3, 3, 3],
                                          count_include_pad=1)),          # guarded + table
    ("AveragePool", (2, 8, 10), dict(kernel_shape=[4], strides=[3], pads=[1, 2])),
    ("AveragePool", (1, 8, 4, 4), dict(kernel_shape=[2, 2], pads=[3, 3, 3, 3])),  # empty windows
    ("MaxPool", (1, 8, 4, 4), dict(kernel_shape=[2, 2], pads=[3, 2, 3, 2])),
    ("LpPool", (1, 9, 6, 6), dict(kernel_shape=[2, 2], p=2)),
    ("LpPool", (1, 9, 6, 6), dict(kernel_shape=[3, 3], p=3, pads=[1, 1, 1, 1])),
    ("LpPool", (1, 4, 6, 6), dict(kernel_shape=[2, 2], p=1, strides=[2, 2])),
]


@pytest.mark.parametrize("codegen", CODEGENS)
def test_pool_geometries(codegen):
    check_many([onnx_graph(op, x, {}, a) for op, x, a in POOLS], codegen)


@pytest.mark.parametrize("codegen", CODEGENS)
def test_pool_nchw(codegen):
    check_many([nchw_graph(op, x, {}, a) for op, x, a in POOLS], codegen)


@pytest.mark.parametrize("codegen", CODEGENS)
def test_integer_maxpool(codegen):
    """ONNX MaxPool on int8/uint8 (vectorized along channels, exact)."""
    rng = np.random.default_rng(5)
    cases = []
    for dtype in (np.int8, np.uint8):
        types = {"x": type_of(np.zeros((1, 7, 7, 19), dtype))}
        node = Node("MaxPool", "p", ("x",), ("y",), {"kernel_shape": (3, 3), "strides": (2, 2),
                                                     "pads": (1, 1, 1, 1), "layout": "NHWC"})
        g = fuse(infer_types(Graph("maxpool", ("x",), ("y",), (node,), types, {})))
        info = np.iinfo(dtype)
        cases.append((g, {"x": rng.integers(info.min, info.max, (1, 7, 7, 19), endpoint=True,
                                            dtype=dtype)}))
    for (g, ins), got in zip(cases, run_many(cases, codegen)):
        assert_close("y", got["y"], aot.interpret(g, ins)["y"], 0, 0)


def test_maxpool_indices_are_unsupported():
    types = {"x": type_of(np.zeros((1, 2, 4, 4), np.float32))}
    node = Node("MaxPool", "p", ("x",), ("y", "i"), {"kernel_shape": (2, 2)})
    g = fuse(infer_types(Graph("g", ("x",), ("y", "i"), (node,), types, {})))
    with pytest.raises(UnsupportedError, match="Indices"):
        lower_graph(g, host_target())


@pytest.mark.parametrize("codegen", CODEGENS)
def test_dense(codegen):
    graphs = [onnx_graph(op, x, {k: _rnd(*s, seed=i) for k, s in c.items()}, a)
              for i, (op, x, c, a) in enumerate(DENSE)]
    check_many(graphs, codegen)


@pytest.mark.parametrize("codegen", CODEGENS)
def test_integer_dense(codegen):
    """MatMul/Gemm on the wide integer types ONNX allows (exact)."""
    rng = np.random.default_rng(3)
    cases = []
    for op, dtype, attrs in (("MatMul", np.int32, {}), ("Gemm", np.int64, {"transB": 1})):
        types = {"x": type_of(np.zeros((3, 9), dtype)), "z": type_of(np.zeros((9, 9), dtype))}
        node = Node(op, "m", ("x", "z"), ("y",), attrs)
        g = aot.optimize(Graph(op, ("x", "z"), ("y",), (node,), types, {}))
        cases.append((g, {"x": rng.integers(-50, 50, (3, 9), dtype=dtype),
                          "z": rng.integers(-50, 50, (9, 9), dtype=dtype)}))
    for (g, ins), got in zip(cases, run_many(cases, codegen)):
        assert_close("y", got["y"], aot.interpret(g, ins)["y"], 0, 0)


@pytest.mark.parametrize("codegen", CODEGENS)
def test_matmul_of_two_activations(codegen):
    types = {"x": type_of(np.zeros((2, 3, 7), np.float32)),
             "z": type_of(np.zeros((2, 7, 12), np.float32))}
    node = Node("MatMul", "m", ("x", "z"), ("y",), {})
    g = aot.optimize(Graph("g", ("x", "z"), ("y",), (node,), types, {}))
    ins = {"x": _rnd(2, 3, 7), "z": _rnd(2, 7, 12, seed=1)}
    assert_close("y", run_many([(g, ins)], codegen)[0]["y"], aot.interpret(g, ins)["y"],
                 RTOL, ATOL)


# ------------------------------------------------- ConvTranspose, BN, Resize

CONV_T = [
    ((1, 8, 4, 5), (8, 12, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])),
    ((2, 6, 4, 5), (6, 5, 3, 2), dict(strides=[2, 1], group=2, dilations=[2, 1], pads=[0, 1, 2, 0])),
    ((1, 4, 3, 3), (4, 3, 3, 3), dict(strides=[3, 3], output_shape=[10, 11])),
    ((1, 4, 5), (4, 9, 4), dict(strides=[2], auto_pad="SAME_UPPER")),
]


def _convt_consts(w_shape, group, i, bias=True):
    consts = {"w": _rnd(*w_shape, seed=i)}
    if bias:
        consts["b"] = _rnd(w_shape[1] * group, seed=i + 100)
    return consts


@pytest.mark.parametrize("codegen", CODEGENS)
def test_conv_transpose(codegen):
    graphs = [maker("ConvTranspose", x, _convt_consts(w, a.get("group", 1), i, bias=i != 2), a)
              for maker in (onnx_graph, nchw_graph) for i, (x, w, a) in enumerate(CONV_T)]
    check_many(graphs, codegen)


def _bn_consts(c):
    return {"s": _rnd(c), "b": _rnd(c, seed=1), "m": _rnd(c, seed=2),
            "v": np.abs(_rnd(c, seed=3)) + 0.1}


SCALES = np.array([1, 1, 2, 1.5], np.float32)
RESIZES = [
    # (input names after x, "" for absent; constants; attributes)
    (["", "sc"], {"sc": SCALES}, dict(mode=m, coordinate_transformation_mode=ctm, **extra))
    for m, extra in (("nearest", dict(nearest_mode="round_prefer_ceil")), ("nearest", {}),
                     ("linear", {}), ("cubic", {}))
    for ctm in ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel",
                "half_pixel_symmetric", "tf_half_pixel_for_nn")
] + [
    (["", "", "sz"], {"sz": np.array([7, 3], np.int64)},
     dict(mode="cubic", axes=[3, 2], keep_aspect_ratio_policy="not_larger", exclude_outside=1)),
    (["", "", "sz"], {"sz": np.array([1, 3, 3, 5], np.int64)}, dict(mode="linear", antialias=1)),
    (["roi", "sc"], {"roi": np.array([0, 0, 0.2, 0.1, 1, 1, 0.9, 1.2], np.float32),
                     "sc": SCALES},
     dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize",
          extrapolation_value=3.0)),
]


def conv_bn_graph(channels: int) -> Graph:
    """NHWC Conv then BatchNormalization, fused without simplification: the
    BN value rule runs as the conv's epilogue on vector accumulators."""
    consts = {"w": _rnd(channels, 3, 3, 4), **_bn_consts(channels)}
    types = {"x": type_of(np.zeros((1, 5, 5, 4), np.float32)),
             **{k: type_of(v) for k, v in consts.items()}}
    nodes = (Node("Conv", "c", ("x", "w"), ("h",), {"layout": "NHWC", "pads": (1, 1, 1, 1)}),
             Node("BatchNormalization", "bn", ("h", "s", "b", "m", "v"), ("y",),
                  {"layout": "NHWC", "epsilon": 1e-3}))
    g = fuse(infer_types(Graph(f"conv_bn{channels}", ("x",), ("y",), nodes, types, consts)))
    assert [m.op for m in g.nodes[0].attrs["body"].nodes] == ["Conv", "BatchNormalization"]
    return g


@pytest.mark.parametrize("codegen", CODEGENS)
def test_batchnorm_and_resize(codegen):
    nhwc_resize = {"roi": np.zeros(0, np.float32), "sc": np.array([1, 2, 1.5, 1], np.float32)}
    graphs = [nchw_graph("BatchNormalization", (2, 6, 4, 5), _bn_consts(6), {}),
              nchw_graph("BatchNormalization", (1, 4, 4, 19), _bn_consts(19), dict(layout="NHWC")),
              conv_bn_graph(20), conv_bn_graph(8),
              nchw_graph("Resize", (1, 4, 5, 16), nhwc_resize, dict(mode="linear", layout="NHWC")),
              nchw_graph("Resize", (1, 4, 5, 3), nhwc_resize, dict(mode="nearest", layout="NHWC"))]
    graphs += [onnx_graph("Resize", (1, 3, 4, 5), c, a, inputs=names) for names, c, a in RESIZES]
    graphs.append(onnx_graph("Resize", (1, 16, 3, 3), {"sc": np.array([1, 1, 2, 2], np.float32)},
                             dict(mode="nearest"), inputs=["", "sc"]))
    check_many(graphs, codegen)


# -------------------------------------------------------------- region splitter

@pytest.mark.parametrize("n_in,k,s,d,p", [(7, 3, 2, 1, 1), (9, 7, 1, 1, 3), (5, 3, 1, 2, 2),
                                          (3, 3, 1, 1, 4), (10, 4, 3, 1, 1), (6, 2, 2, 3, 0)])
def test_axis_runs_cover_exactly_the_in_image_taps(n_in, k, s, d, p):
    extent = (k - 1) * d + 1
    n_out = (n_in + 2 * p - extent) // s + 1
    runs = axis_runs(n_out, n_in, k, s, d, p)
    assert [o for r in runs for o in range(r.start, r.start + r.count)] == list(range(n_out))
    for r in runs:
        for o in range(r.start, r.start + r.count):
            inside = [t for t in range(k) if 0 <= o * s - p + t * d < n_in]
            assert inside == list(range(r.lo, r.hi))


def test_many_regions_fall_back_to_guarded_taps():
    win = Window((9, 9), (1, 1), (1, 1), (4, 4), (4, 4), (12, 12))
    regions = window_regions(win, (12, 12))
    assert len(regions) <= 36
    assert any(r.guarded for runs in regions for r in runs)


# ----------------------------------------------------------------- real models

FLOAT_MODELS = ["onnx_mnist8.onnx", "onnx_mlir_mnist.onnx", "mlperf_ad_fcae_f32.tflite",
                "mlperf_ic_resnet8_f32.tflite", "mlperf_kws_dscnn_f32.tflite",
                "mlperf_vww_mbv1_f32.tflite", "tflm_hello_world_f32.tflite",
                "tflm_mnist_lstm_f32.tflite", "onnx_ultraface_rfb320.onnx"]


@functools.lru_cache(maxsize=None)
def _model_case(name: str):
    """The optimized model, its input and the interpreter's outputs (shared
    by both backends' tests)."""
    g = aot.optimize(aot.load(MODELS / name))
    ins = {g.inputs[0]: np.load(MODELS / (name.rsplit(".", 1)[0] + ".input.npy"))}
    return g, ins, aot.interpret(g, ins)


# The larger models' LLVM kernels are checked against their reference
# runtime by tests/models/test_verify_models.py.
LLVM_TOO = {"onnx_mnist8.onnx", "onnx_mlir_mnist.onnx", "mlperf_ad_fcae_f32.tflite",
            "mlperf_kws_dscnn_f32.tflite", "tflm_hello_world_f32.tflite",
            "tflm_mnist_lstm_f32.tflite"}


@pytest.mark.parametrize("name,codegen", [*((n, "c") for n in FLOAT_MODELS),
                                          *((n, "llvm") for n in FLOAT_MODELS if n in LLVM_TOO)])
def test_float_model(name, codegen, record_property):
    g, ins, want = _model_case(name)
    (got,) = run_many([(g, ins)], codegen)
    worst = 0.0
    for k in g.outputs:
        assert_close(k, got[k], want[k], RTOL, ATOL)
        worst = max(worst, float(np.max(np.abs(got[k] - want[k]))))
    record_property("summary", f"lower/nn {codegen} {name}: max |diff| vs interpreter {worst:.1e}")

"""Winograd convolution (aot/lower/kernels/winograd.py): the transforms against a
direct convolution in numpy, the compiled kernel (odd sizes, padding,
bias, ReLU and a residual add fused) against ONNX Runtime through the C
and LLVM backends, and the schedule choice (default policy per target, a
tuning config's override)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import aot
from aot.api import package
from aot.deploy import run_package
from aot.frontend.onnx import import_onnx
from aot.lower import lower_graph
from aot.lower.kernels import winograd
from aot.lower.schedule.space import Config, Schedules, applied, space_of
from aot.testing.kernels import build_and_run_many, host_target
from aot.packaging.metadata import read_metadata
from aot.passes.infer import infer_types
from aot.targets import get_board, get_target
from support import MODELS as SHARED

RTOL = ATOL = 1e-4


def _rnd(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _correlate(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Valid 2-D correlation: x [H][W][IC], w [3][3][IC][OC]."""
    h, wd = x.shape[0] - 2, x.shape[1] - 2
    return sum(np.einsum("hwc,co->hwo", x[a:a + h, b:b + wd].astype(np.float64), w[a, b])
               for a in range(3) for b in range(3))


@pytest.mark.parametrize("m", sorted(winograd.MATRICES))
@pytest.mark.parametrize("size", [(4, 4), (7, 9), (3, 8)])
def test_transforms_are_the_convolution(m, size):
    """Y = A^T [(G g G^T) (.) (B^T d B)] A block by block is the direct
    correlation (up to float64 rounding), blocks overhanging odd sizes too."""
    rng = np.random.default_rng(m * 100 + size[0])
    x = rng.standard_normal((size[0] + 2, size[1] + 2, 5))
    w = rng.standard_normal((3, 3, 5, 6))
    np.testing.assert_allclose(winograd.reference(x, w, m), _correlate(x, w),
                               rtol=1e-10, atol=1e-10)


def test_block_runs():
    """Blocks of an axis are grouped by the patch rows inside the image and
    the outputs they store: 7 outputs padded (1, 1) -> a top block (row 0
    of its patch is padding), two interior ones, a bottom block with one
    output whose patch reads rows [0, 2) of the image only."""
    def runs(*args):
        return [(r.start, r.count, r.lo, r.hi, r.outputs) for r in winograd.block_runs(*args)]
    assert runs(7, 7, 1, 2) == [(0, 1, 1, 4, 2), (1, 2, 0, 4, 2), (3, 1, 0, 2, 1)]
    # 4x4 blocks: patches of 6 rows, the second block's last 2 beyond the image
    assert runs(7, 7, 1, 4) == [(0, 1, 1, 6, 4), (1, 1, 0, 4, 3)]
    assert sum(r.count for r in winograd.block_runs(32, 32, 1, 2)) == 16


# ------------------------------------------------------------ compiled models

def _conv(name, x, w, b, pads, out):
    return helper.make_node("Conv", [x, w, b], [out], name=name, kernel_shape=[3, 3],
                            pads=pads)


def _model(x_shape, mid, pads1, pads2, seed):
    """x -> Conv 3x3 (mid channels, bias) -> Relu -> Conv 3x3 back to x's
    channels -> Add x -> Relu: both convs Winograd-shaped, the second with
    the residual add and the ReLU in its epilogue."""
    rng = np.random.default_rng(seed)
    c = x_shape[1]
    inits = {"w1": _rnd(rng, mid, c, 3, 3) * 0.2, "b1": _rnd(rng, mid),
             "w2": _rnd(rng, c, mid, 3, 3) * 0.2, "b2": _rnd(rng, c)}
    nodes = [_conv("c1", "x", "w1", "b1", pads1, "h"),
             helper.make_node("Relu", ["h"], ["hr"]),
             _conv("c2", "hr", "w2", "b2", pads2, "y2"),
             helper.make_node("Add", ["y2", "x"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    g = helper.make_graph(nodes, "wg", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                       x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


# (x shape NCHW, middle channels, pads of the first conv, of the second):
# each pair keeps H and W so that the residual add lines up.
MODELS = [
    ((1, 16, 7, 9), 24, [1, 1, 1, 1], [1, 1, 1, 1]),     # odd sizes, 24 = 16 + 8 channels
    ((1, 16, 6, 5), 20, [2, 0, 1, 1], [0, 2, 1, 1]),     # uneven padding, 20 channels
    ((2, 32, 4, 4), 16, [0, 0, 2, 2], [2, 2, 0, 0]),     # batch 2, padding at one end only
]


def _graph(model):
    return aot.optimize(infer_types(import_onnx(model.SerializeToString(), name="wg")))


def _blocks(graph, target) -> list[int]:
    """The block size of each Winograd kernel the graph lowers to."""
    return [round(np.sqrt(b.shape[0])) - 2 for k in lower_graph(graph, target)
            for b in k.func.params if b.name.startswith("w_winograd")]


def _forcing(graph, target, algorithm: str) -> Schedules:
    """Schedules that make every workload of the graph take `algorithm`."""
    recorder = Schedules(record=True)
    with applied(recorder):
        lower_graph(graph, target)
    return Schedules({k: Config.of({"conv_algorithm": algorithm}) for k in recorder.seen})


@pytest.mark.parametrize("algorithm", sorted(winograd.ALGORITHMS))
@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_against_onnxruntime(codegen, algorithm):
    models = [_model(x, mid, p1, p2, seed) for seed, (x, mid, p1, p2) in enumerate(MODELS)]
    graphs = [_graph(m) for m in models]
    inputs = [{"x": np.random.default_rng(i).standard_normal(x).astype(np.float32)}
              for i, (x, *_) in enumerate(MODELS)]
    m = winograd.ALGORITHMS[algorithm]
    got = []
    for g, ins in zip(graphs, inputs):
        with applied(_forcing(g, host_target(), algorithm)):
            assert _blocks(g, host_target()) == [m, m], g.name
            got += build_and_run_many([(g, ins)], codegen)
    for model, ins, out in zip(models, inputs, got):
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        want = sess.run(None, ins)[0]
        np.testing.assert_allclose(out["y"], want, rtol=RTOL, atol=ATOL)


def test_schedule_choice():
    """Winograd by default on x86 (measured faster there: 4x4 blocks on
    maps 16+ wide, else 2x2), the direct conv on Arm and Cortex-M; a tuning
    config picks any, and the space of a Winograd-shaped workload offers
    the other algorithms."""
    narrow = _graph(_model(*MODELS[0][:2], MODELS[0][2], MODELS[0][3], 0))
    wide = _graph(_model((1, 16, 4, 16), 16, [1, 1, 1, 1], [1, 1, 1, 1], 0))
    avx512 = get_target("x86_64-linux-avx512")
    assert _blocks(narrow, avx512) == [2, 2] and _blocks(wide, avx512) == [4, 4]
    assert _blocks(narrow, host_target()) == [2, 2]
    arm = get_target("aarch64-linux")
    assert _blocks(wide, arm) == [] and _blocks(wide, get_target("cortex-m4")) == []

    for target, default in ((arm, "direct"), (host_target(), "winograd_2x2")):
        recorder = Schedules(record=True)
        with applied(recorder):
            lower_graph(narrow, target)
        for _, defaults, _ in recorder.seen.values():
            assert defaults["conv_algorithm"] == default
            space = space_of(defaults, target)
            assert all(Config.of({"conv_algorithm": a}) in space
                       for a in winograd.ALGORITHMS.keys() | {"direct"} if a != default)
    for algorithm, blocks in (("direct", []), ("winograd_4x4", [4, 4])):
        with applied(_forcing(narrow, arm, algorithm)):
            assert _blocks(narrow, arm) == blocks


def test_narrow_and_strided_convs_stay_direct():
    """Fewer than MIN_CHANNELS channels, or stride 2: the direct conv."""
    rng = np.random.default_rng(3)
    for cin, stride in ((4, 1), (16, 2)):
        node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3],
                                pads=[1, 1, 1, 1], strides=[stride, stride])
        g = helper.make_graph([node], "c", [helper.make_tensor_value_info(
            "x", TensorProto.FLOAT, (1, cin, 8, 8))],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(_rnd(rng, 16, cin, 3, 3), "w")])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        assert _blocks(_graph(m), host_target()) == []


def test_split_over_threads_is_bit_identical(tmp_path):
    """The shares of block rows have their own workspaces, one share per
    thread: the split pass proves them disjoint, ResNet-8's Winograd kernels
    split over two threads compute the one-thread package's outputs bit for
    bit, and the one-thread package keeps one share (a smaller arena)."""
    model = SHARED / "mlperf_ic_resnet8_f32.tflite"
    x = [np.load(model.with_suffix(".input.npy"))]
    outs, arenas = [], []
    for threads in (1, 2):
        info = package(model, board="host", threads=threads, out_dir=tmp_path / f"t{threads}")
        meta = read_metadata(info.path)
        kernels = meta["kernels"]
        arenas.append(meta["arena_bytes"])
        outs.append([o.tobytes() for o in run_package(info.path, get_board("host"), x).outputs])
    split = {k["name"] for k in kernels if k["split"]}
    assert {"conv_relu_1", "conv_add_relu_2", "conv_4", "conv_7"} <= split, split
    assert outs[0] == outs[1]
    assert arenas[0] < arenas[1], arenas

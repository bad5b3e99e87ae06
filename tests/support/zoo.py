"""The zoo of int8 convolutions, pools and fully connected layers: single-op
TFLite graphs over every padding, stride, dilation, grouping and odd depth
the kernels branch on, and the check that compiles many graphs at once and
compares each output with the reference interpreter. The int8 kernel tests
use them, and bench/same_code.py replays them to prove a refactor changes
no generated code."""
from __future__ import annotations

import ctypes
import subprocess

import numpy as np

import aot
from aot.frontend.tflite.importer import import_tflite
from aot.ir.graph import Graph
from aot.testing.kernels import build_and_run_many, host_target, run_kernels
from aot.passes.infer import infer_types
from support.tflite_models import TinyModel


# ------------------------------------------------------------ single-op graphs

def _tflite_graph(data: bytes) -> Graph:
    return aot.optimize(infer_types(import_tflite(data, "tiny")))


def _random_inputs(g: Graph, rng):
    feeds = {}
    for name in g.inputs:
        ty = g.types[name]
        if ty.dtype == "float32":
            feeds[name] = rng.uniform(-3, 3, ty.shape).astype(np.float32)
        else:
            info = np.iinfo(ty.dtype)
            feeds[name] = rng.integers(info.min, info.max, ty.shape,
                                       endpoint=True).astype(ty.dtype)
    return feeds


def run_llvm(cases, tmp_path) -> list[dict[str, np.ndarray]]:
    """build_and_run_many through the LLVM backend (the harness is C only so far):
    one object per graph, linked into a shared library, run like the C kernels."""
    from aot.codegen.c import emit_c
    from aot.codegen.llvm import emit_object
    from aot.lower import lower_graph
    target = host_target()
    results, built = [], {}
    for g, feeds in cases:
        if id(g) not in built:
            kernels = lower_graph(g, target)
            funcs = [k.func for k in kernels]
            obj, so = tmp_path / f"g{len(built)}.o", tmp_path / f"g{len(built)}.so"
            obj.write_bytes(emit_object(funcs, "t", target))
            subprocess.run(["cc", "-shared", "-o", str(so), str(obj), "-lm"], check=True)
            built[id(g)] = (ctypes.CDLL(str(so)), emit_c(funcs, "t").symbols, kernels)
        lib, symbols, kernels = built[id(g)]
        results.append(run_kernels(lib, symbols, g, kernels, feeds))
    return results


def run_cases(cases, codegen: str, tmp_path=None):
    return run_llvm(cases, tmp_path) if codegen == "llvm" else build_and_run_many(cases)


def check_graphs(graphs, runs: int = 2, seed: int = 0, exact: bool = True, codegen: str = "c",
                 tmp_path=None):
    """Compile all graphs at once; compare every output with aot.interpret."""
    rng = np.random.default_rng(seed)
    cases = [(g, _random_inputs(g, rng)) for g in graphs for _ in range(runs)]
    results = run_cases(cases, codegen, tmp_path)
    for k, ((g, feeds), got) in enumerate(zip(cases, results)):
        want = aot.interpret(g, feeds)
        for name in g.outputs:
            if exact:
                np.testing.assert_array_equal(got[name], want[name], err_msg=f"case {k} {name}")
            else:
                np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4,
                                           err_msg=f"case {k} {name}")


def conv_model(op, x_shape, w_shape, out_shape, options, per_channel=True, bias=True,
               zp_in=3, seed=0, hybrid=False, dead: int | None = None):
    """`dead`: a CONV_2D output channel of zero weights, a scale near zero
    and a bias near 2^30 (as a trained model's dead channel)."""
    rng = np.random.default_rng(seed)
    m = TinyModel()
    cout = w_shape[0] if op == "CONV_2D" else w_shape[3]
    wscale = rng.uniform(0.002, 0.02, cout) if per_channel else [0.01]
    qdim = 0 if op == "CONV_2D" else 3
    if hybrid:
        x = m.tensor("x", x_shape, "float32")
    else:
        x = m.tensor("x", x_shape, scale=[0.05], zp=[zp_in])
    data = rng.integers(-127, 128, w_shape)
    biases = rng.integers(-3000, 3000, cout)
    if dead is not None:
        data[dead], wscale[dead], biases[dead] = 0, 1e-9, 2**30
    w = m.tensor("w", w_shape, scale=wscale, zp=[0] * len(wscale), qdim=qdim, data=data)
    ins = [x, w]
    if bias and hybrid:
        ins.append(m.tensor("b", [cout], "float32", data=rng.uniform(-1, 1, cout)))
    elif bias:
        bscale = 0.05 * np.asarray(wscale) * np.ones(cout)
        ins.append(m.tensor("b", [cout], "int32", scale=bscale, zp=[0] * cout, data=biases))
    if hybrid:
        y = m.tensor("y", out_shape, "float32")
    else:
        y = m.tensor("y", out_shape, scale=[0.07], zp=[-10])
    cls = "Conv2DOptions" if op == "CONV_2D" else "DepthwiseConv2DOptions"
    m.op(op, ins, [y], (cls, options))
    return _tflite_graph(m.build([x], [y]))


CONVS = [
    ([1, 9, 11, 3], [4, 3, 3, 3], [1, 5, 6, 4],
     dict(Padding=0, StrideH=2, StrideW=2, FusedActivationFunction=3), True),
    ([2, 10, 8, 2], [3, 3, 2, 2], [2, 6, 4, 3],
     dict(Padding=1, StrideH=1, StrideW=2, DilationHFactor=2, DilationWFactor=1), False),
    ([1, 7, 7, 4], [5, 1, 1, 4], [1, 7, 7, 5],
     dict(Padding=0, StrideH=1, StrideW=1, FusedActivationFunction=1), True),
    ([1, 8, 8, 2], [3, 4, 4, 2], [1, 8, 8, 3],
     dict(Padding=0, StrideH=1, StrideW=1, DilationHFactor=2, DilationWFactor=2), True),
    ([1, 6, 5, 4], [6, 3, 3, 2], [1, 6, 5, 6],          # grouped: 2 groups
     dict(Padding=0, StrideH=1, StrideW=1, FusedActivationFunction=2), True),
    ([1, 5, 5, 3], [2, 2, 2, 3], [1, 4, 4, 2],          # VALID: zero point folded
     dict(Padding=1, StrideH=1, StrideW=1), True),
]

DEPTHWISE = [
    ([1, 9, 9, 3], [1, 3, 3, 6], [1, 5, 5, 6],
     dict(Padding=0, StrideH=2, StrideW=2, DepthMultiplier=2, FusedActivationFunction=3), True),
    ([1, 10, 7, 4], [1, 3, 2, 4], [1, 6, 6, 4],
     dict(Padding=1, StrideH=1, StrideW=1, DepthMultiplier=1, DilationHFactor=2), False),
    ([1, 6, 6, 2], [1, 5, 5, 2], [1, 6, 6, 2],
     dict(Padding=0, StrideH=1, StrideW=1, DepthMultiplier=1, FusedActivationFunction=1), True),
    ([2, 7, 5, 3], [1, 3, 3, 3], [2, 5, 3, 3],
     dict(Padding=1, StrideH=1, StrideW=1, DepthMultiplier=1), True),
]


def fc_model(per_channel, keep, x_shape=(2, 3, 20), zp_in=-7, act=1, units=6, depth=None):
    rng = np.random.default_rng(3)
    m = TinyModel()
    depth = depth or x_shape[-1]
    x = m.tensor("x", list(x_shape), scale=[0.1], zp=[zp_in])
    wscale = rng.uniform(0.001, 0.01, units) if per_channel else [0.004]
    w = m.tensor("w", [units, depth], scale=wscale, zp=[0] * len(wscale),
                 data=rng.integers(-127, 128, (units, depth)))
    bscale = (0.1 * np.asarray(wscale) * np.ones(units)).astype(np.float32)
    b = m.tensor("b", [units], "int32", scale=bscale, zp=[0] * units,
                 data=rng.integers(-900, 900, units))
    rows = int(np.prod(x_shape)) // depth
    y = m.tensor("y", list(x_shape[:-1]) + [units] if keep else [rows, units], scale=[0.09],
                 zp=[4])
    m.op("FULLY_CONNECTED", [x, w, b], [y],
         ("FullyConnectedOptions", dict(FusedActivationFunction=act, KeepNumDims=keep)))
    return _tflite_graph(m.build([x], [y]))


def pool_model(op, padding, k, s, out_hw, act=1, x_shape=(1, 7, 9, 3)):
    m = TinyModel()
    x = m.tensor("x", list(x_shape), scale=[0.02], zp=[-3])
    kh, kw = (k, k) if isinstance(k, int) else k
    sh, sw = (s, s) if isinstance(s, int) else s
    y = m.tensor("y", [x_shape[0], *out_hw, x_shape[3]], scale=[0.02], zp=[-3])
    m.op(op, [x], [y], ("Pool2DOptions", dict(Padding=padding, StrideH=sh, StrideW=sw,
                                              FilterHeight=kh, FilterWidth=kw,
                                              FusedActivationFunction=act)))
    return _tflite_graph(m.build([x], [y]))


# ------------------------------------------------------------------ dot4 kernels

QUAD_CONVS = [   # depths a multiple of 4: the quads path (zero point in the padding)
    ([1, 7, 6, 8], [12, 3, 3, 8], [1, 7, 6, 12],
     dict(Padding=0, StrideH=1, StrideW=1, FusedActivationFunction=1), -128),
    ([2, 9, 8, 4], [16, 3, 2, 4], [2, 5, 4, 16],
     dict(Padding=0, StrideH=2, StrideW=2, DilationHFactor=1, DilationWFactor=2), 127),
    ([1, 6, 6, 12], [8, 1, 1, 12], [1, 6, 6, 8], dict(Padding=1, StrideH=1, StrideW=1), 5),
    ([1, 5, 7, 20], [24, 3, 3, 20], [1, 5, 7, 24],
     dict(Padding=0, StrideH=1, StrideW=1, DilationHFactor=2, DilationWFactor=1), -3),
    # first layers: odd depths go four elements of a window row at a time
    ([1, 11, 9, 3], [16, 3, 3, 3], [1, 6, 5, 16],
     dict(Padding=0, StrideH=2, StrideW=2, FusedActivationFunction=3), 9),
    ([1, 12, 7, 1], [8, 4, 3, 1], [1, 6, 7, 8],
     dict(Padding=0, StrideH=2, StrideW=1), -100),
]


RING_FIRST_LAYERS = [   # odd depths, row stride 1: window rows staged in a ring
    ([1, 9, 8, 3], [16, 3, 3, 3], [1, 9, 8, 16],
     dict(Padding=0, StrideH=1, StrideW=1, FusedActivationFunction=1), -128),
    ([2, 8, 9, 1], [8, 5, 3, 1], [2, 4, 7, 8], dict(Padding=1, StrideH=1, StrideW=1), 7),
]


def cortex_m_graphs():
    """int8 convolutions and FC layers that take every branch of the Cortex-M
    kernels (aot/lower/kernels/cortex_m/): tiles with pixels and channels left
    over, depth tails, borders, padded copies, strides and dilations."""
    pointwise = dict(Padding=0, StrideH=1, StrideW=1)
    return [
        # 2x2 tiles with a pixel and a channel left over, depth 4k
        conv_model("CONV_2D", [1, 3, 5, 8], [5, 1, 1, 8], [1, 3, 5, 5],
                   dict(pointwise, FusedActivationFunction=1), zp_in=-128, seed=1),
        # depth 4k + 3: the tail terms; two images
        conv_model("CONV_2D", [2, 2, 3, 7], [4, 1, 1, 7], [2, 2, 3, 4], pointwise,
                   per_channel=False, zp_in=77, seed=2),
        conv_model("CONV_2D", [1, 4, 4, 16], [6, 1, 1, 16], [1, 4, 4, 6],
                   dict(pointwise, FusedActivationFunction=3), bias=False, zp_in=0, seed=3),
        # dense: SAME borders, odd spans, a channel left over; stride 2 and dilation; VALID
        conv_model("CONV_2D", [1, 6, 7, 8], [5, 3, 3, 8], [1, 6, 7, 5],
                   dict(Padding=0, StrideH=1, StrideW=1, FusedActivationFunction=1), zp_in=-3,
                   seed=7),
        conv_model("CONV_2D", [2, 9, 10, 4], [4, 3, 2, 4], [2, 5, 5, 4],
                   dict(Padding=0, StrideH=2, StrideW=2, DilationHFactor=2), zp_in=100, seed=8),
        conv_model("CONV_2D", [1, 5, 6, 12], [3, 2, 3, 12], [1, 4, 4, 3],
                   dict(Padding=1, StrideH=1, StrideW=1), per_channel=False, zp_in=-128, seed=9),
        # window rows (few input channels): SAME with stride 2 (3/4 inside), a 5x4
        # kernel on one channel, VALID without a border
        conv_model("CONV_2D", [1, 16, 16, 3], [5, 3, 3, 3], [1, 8, 8, 5],
                   dict(Padding=0, StrideH=2, StrideW=2, FusedActivationFunction=3), zp_in=-128,
                   seed=10),
        conv_model("CONV_2D", [1, 48, 31, 1], [4, 5, 4, 1], [1, 24, 16, 4],
                   dict(Padding=0, StrideH=2, StrideW=2), zp_in=21, seed=11),
        # mostly border (a padded copy): kws's first layer's shape, two images
        conv_model("CONV_2D", [2, 13, 6, 1], [4, 10, 4, 1], [2, 7, 3, 4],
                   dict(Padding=0, StrideH=2, StrideW=2, FusedActivationFunction=1), zp_in=-7,
                   seed=13),
        conv_model("CONV_2D", [2, 6, 7, 2], [3, 2, 3, 2], [2, 5, 5, 3],
                   dict(Padding=1, StrideH=1, StrideW=1), per_channel=False, zp_in=9, seed=12),
        fc_model(True, False, x_shape=(3, 2, 10), depth=30),        # rows across dims
        fc_model(False, False, x_shape=(1, 40), zp_in=-128, act=0, units=7),
        fc_model(True, True, x_shape=(2, 3, 20), units=9),
        # depthwise: SAME borders, a word and 2 channels left over, stride 2, dilation, batch
        conv_model("DEPTHWISE_CONV_2D", [1, 7, 5, 8], [1, 3, 3, 8], [1, 7, 5, 8],
                   dict(Padding=0, StrideH=1, StrideW=1, DepthMultiplier=1,
                        FusedActivationFunction=1), zp_in=-128, seed=4),
        conv_model("DEPTHWISE_CONV_2D", [2, 9, 8, 6], [1, 3, 3, 6], [2, 5, 4, 6],
                   dict(Padding=0, StrideH=2, StrideW=2, DepthMultiplier=1), zp_in=5, seed=5),
        conv_model("DEPTHWISE_CONV_2D", [1, 10, 7, 4], [1, 3, 2, 4], [1, 6, 6, 4],
                   dict(Padding=1, StrideH=1, StrideW=1, DepthMultiplier=1, DilationHFactor=2),
                   bias=False, zp_in=127, seed=6),
        # depthwise, a 5x5 window over a 4x6 image: every pixel a border one, each
        # border window's taps looped from its first inside the image
        conv_model("DEPTHWISE_CONV_2D", [1, 4, 6, 8], [1, 5, 5, 8], [1, 4, 6, 8],
                   dict(Padding=0, StrideH=1, StrideW=1, DepthMultiplier=1), zp_in=-60, seed=14),
        fc_model(True, False, x_shape=(1, 8), units=2),             # fewer units than a tile
        # word loops in chunks with words left over: a 1x1 convolution 19 words
        # deep (two chunks of 8, then 3), a fully connected row of 37 words and
        # 2 terms (two chunks of 16, then 5 words and the tail)
        conv_model("CONV_2D", [1, 2, 3, 76], [3, 1, 1, 76], [1, 2, 3, 3],
                   dict(pointwise, FusedActivationFunction=1), zp_in=11, seed=15),
        fc_model(True, False, x_shape=(1, 150), units=5),
    ]

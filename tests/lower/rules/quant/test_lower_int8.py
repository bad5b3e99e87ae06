"""Generated code for the integer ops vs the reference interpreter, bit for bit.

- The fixed-point TIR builders (aot/lower/arith/qmath.py) against aot/ops/quant/qmath.py
  on random int32 values and edge cases (INT32_MIN/MAX, rounding ties).
- Single-op TFLite models (built with test_tflite's TinyModel) over a spread
  of geometries, zero points, per-channel scales, activation clamps and
  broadcast shapes; single-op ONNX models for the QLinear ops.
- Every int8 model in ../shared/models end to end on its saved input
  (aot.interpret is bit-exact with tflite-micro there, tests/frontend/tflite/test_tflite.py).

Cases are batched so each test compiles once (build_and_run_many).
"""
from __future__ import annotations

import ctypes
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import aot
from aot.frontend.onnx import import_onnx
from aot.ir.graph import Graph
from aot.ir.tir import (INT32, Bin, Buffer, BufferKind, Const, Decl, DType, For, Load, PrimFunc,
                        Store, Var, seq)
from aot.lower import Arg, Kernel
from aot.lower.arith import qmath as q
from aot.lower.arith.requant import mbqm
from aot.testing.kernels import (aligned, build_and_run_many, compile_kernels, host_target,
                               run_kernels)
from aot.ops.quant import qmath as ref
from aot.passes.infer import infer_types
from support import MODELS, TESTS, shared_models
from support.tflite_models import TinyModel
from support.zoo import (CONVS, DEPTHWISE, _random_inputs, _tflite_graph, check_graphs,
                         conv_model, fc_model, pool_model, run_cases)

INT32_MIN, INT32_MAX = ref.INT32_MIN, ref.INT32_MAX


# ------------------------------------------------------------ qmath builders

def _edge_values(rng, n):
    edges = np.array([INT32_MIN, INT32_MIN + 1, -1, 0, 1, INT32_MAX, INT32_MAX - 1,
                      1 << 30, -(1 << 30), (1 << 16) + (1 << 15), -(1 << 15), 3 << 20])
    return np.concatenate([edges, rng.integers(INT32_MIN, INT32_MAX, n, endpoint=True),
                           rng.integers(-1 << 12, 1 << 12, n)]).astype(np.int32)


def _elementwise_kernels(cases):
    """One kernel per (name, fn(x, y) -> Expr, size, inline): out[i] = fn(a[i], b[i]).

    inline: the operands are locals, so the builders inline their formulas;
    otherwise they are loads, which the builders pass to the runtime helpers.
    """
    kernels = []
    for name, fn, size, inline in cases:
        a = Buffer("a", INT32, (size,))
        b = Buffer("b", INT32, (size,))
        out = Buffer("out", INT32, (size,), BufferKind.OUTPUT)
        i, xa, xb = Var("i"), Var("xa"), Var("xb")
        if inline:
            body = seq(Decl(xa, Load(a, i)), Decl(xb, Load(b, i)), Store(out, i, fn(xa, xb)))
        else:
            body = Store(out, i, fn(Load(a, i), Load(b, i)))
        func = PrimFunc(f"q_{name}", (a, b, out), For(i, size, body))
        kernels.append(Kernel(func, (Arg("tensor", "a"), Arg("tensor", "b"),
                                     Arg("tensor", "out")), None))
    return kernels


def _run_elementwise(cases, inputs):
    kernels = _elementwise_kernels(cases)
    lib, symbols = compile_kernels(kernels)
    results = {}
    for k, (name, _, size, _) in zip(kernels, cases):
        a, b = (aligned(np.asarray(v, np.int32)) for v in inputs[name])
        out = aligned(np.zeros(size, np.int32))
        fn = getattr(lib, symbols[k.func.name])
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p] * 3
        fn(*(ctypes.c_void_p(v.ctypes.data) for v in (a, b, out)))
        results[name] = out.copy()
    return results


def test_qmath_builders_match_reference():
    rng = np.random.default_rng(0)
    x = _edge_values(rng, 3000)
    n = x.size
    mults = rng.integers(1 << 30, INT32_MAX, n, endpoint=True).astype(np.int32)
    mults[:12] = [INT32_MIN, INT32_MAX, 1 << 30, -(1 << 30), 0, 1, -1, 715827883,
                  1895147668, -1010580540, INT32_MIN, 1 << 29]
    exps = rng.integers(0, 32, n).astype(np.int32)
    exps[:5] = [0, 1, 31, 30, 0]
    shifts = rng.integers(-31, 8, n).astype(np.int32)
    # ties for rdbpot: multiples of 2**(e-1) that are odd multiples
    ties = (rng.integers(-1000, 1000, n) * 2 + 1) << np.minimum(exps, 20).astype(np.int64)
    ties = np.clip(ties >> 1, INT32_MIN, INT32_MAX).astype(np.int32)
    cases, inputs, expect = [], {}, {}

    def case(name, fn, a, b, want):
        for inline in (True, False):
            key = f"{name}_{'inline' if inline else 'helper'}"
            cases.append((key, fn, a.size, inline))
            inputs[key] = (a, b)
            expect[key] = np.asarray(want, np.int64)

    case("srdhm", lambda a, b: q.srdhm(a, b), x, mults, ref.srdhm(x, mults))
    case("srdhm_sq", lambda a, b: q.srdhm(a, a), x, x, ref.srdhm(x, x))
    case("rdbpot_var", lambda a, b: q.rdbpot(a, b), x, exps, ref.rdbpot(x, exps))
    case("rdbpot_ties", lambda a, b: q.rdbpot(a, b), ties, exps, ref.rdbpot(ties, exps))
    for e in (1, 5, 12, 31):
        case(f"rdbpot_{e}", lambda a, b, e=e: q.rdbpot(a, e), x, x, ref.rdbpot(x, e))
        t = np.clip(((np.arange(n) - n // 2) * 2 + 1).astype(np.int64) << (e - 1),
                    INT32_MIN, INT32_MAX).astype(np.int32)
        case(f"rdbpot_tie_{e}", lambda a, b, e=e: q.rdbpot(a, e), t, t, ref.rdbpot(t, e))
    for k in (1, 2, 5, 30):
        case(f"satshl_{k}", lambda a, b, k=k: q.satshl(a, k), x, x, ref.satshl(x, k))
    for m, e in ((1 << 30, 1), (1395864371, -7), (2147483647, 0), (1073741825, -31),
                 (1518500250, 3), (1 << 30, -14)):
        case(f"mbqm_{m}_{e}".replace("-", "m"), lambda a, b, m=m, e=e: mbqm(a, m, e),
             x, x, ref.mbqm(x, m, e))
    # per-channel form: multiplier and split shifts as expressions
    left = np.maximum(shifts, 0)
    right = np.maximum(-shifts, 0)
    packed = (left << 8 | right).astype(np.int32)

    def per_channel(a, b):
        return mbqm(a, Const(1395864371), left=_bits(b, 8), right=_bits(b, 0))

    def _bits(v, at):
        return Bin("&", Bin(">>", v, Const(at)), Const(255))
    case("mbqm_per_channel", per_channel, x, packed, ref.mbqm(x, 1395864371, shifts))
    case("clamp", lambda a, b: q.clamp(a, -128, 127), x, x, np.clip(x, -128, 127))
    got = _run_elementwise(cases, inputs)
    for name in expect:
        np.testing.assert_array_equal(got[name], expect[name], err_msg=name)


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_conv_and_depthwise_bit_exact(codegen, tmp_path):
    graphs = []
    for k, (xs, ws, os_, opts, pc) in enumerate(CONVS):
        graphs.append(conv_model("CONV_2D", xs, ws, os_, opts, pc, zp_in=(3, -128, 0, 77)[k % 4],
                                 seed=k))
    for k, (xs, ws, os_, opts, bias) in enumerate(DEPTHWISE):
        graphs.append(conv_model("DEPTHWISE_CONV_2D", xs, ws, os_, opts, bias=bias,
                                 zp_in=(-5, 127)[k % 2], seed=k))
    graphs.append(conv_model("CONV_2D", [1, 6, 6, 8], [8, 3, 3, 8], [1, 6, 6, 8],
                             dict(Padding=0, StrideH=1, StrideW=1), seed=9))
    check_graphs(graphs, codegen=codegen, tmp_path=tmp_path)


def _random_conv_cases(n: int, seed: int):
    """Random conv/depthwise geometries: strides, dilations, SAME/VALID, kernels
    larger than the image, 1-pixel outputs, groups, depth multipliers."""
    rng = np.random.default_rng(seed)
    graphs = []
    while len(graphs) < n:
        depthwise = bool(rng.integers(2))
        h, w = (int(v) for v in rng.integers(1, 9, 2))
        kh, kw = (int(v) for v in rng.integers(1, 5, 2))
        sh, sw, dh, dw = (int(v) for v in rng.integers(1, 4, 4))
        same = bool(rng.integers(2))
        oh, ow = (ref.conv_output_size(size, k, s, d, "SAME" if same else "VALID")
                  for size, k, s, d in ((h, kh, sh, dh), (w, kw, sw, dw)))
        if oh < 1 or ow < 1:
            continue
        cin = int(rng.integers(1, 5))
        opts = dict(Padding=0 if same else 1, StrideH=sh, StrideW=sw, DilationHFactor=dh,
                    DilationWFactor=dw, FusedActivationFunction=int(rng.choice([0, 1, 3])))
        if depthwise:
            dm = int(rng.integers(1, 3))
            opts["DepthMultiplier"] = dm
            graphs.append(conv_model("DEPTHWISE_CONV_2D", [1, h, w, cin], [1, kh, kw, cin * dm],
                                     [1, oh, ow, cin * dm], opts,
                                     zp_in=int(rng.integers(-128, 128)), seed=len(graphs)))
        else:
            groups = int(rng.choice([g for g in (1, 2) if cin % g == 0]))
            cout = groups * int(rng.integers(1, 4))
            graphs.append(conv_model("CONV_2D", [2, h, w, cin], [cout, kh, kw, cin // groups],
                                     [2, oh, ow, cout], opts, per_channel=bool(rng.integers(2)),
                                     zp_in=int(rng.integers(-128, 128)), seed=len(graphs)))
    return graphs


def _random_pool_cases(n: int, seed: int):
    rng = np.random.default_rng(seed)
    graphs = []
    while len(graphs) < n:
        h, w = (int(v) for v in rng.integers(1, 10, 2))
        k = tuple(int(v) for v in rng.integers(1, 5, 2))
        st = tuple(int(v) for v in rng.integers(1, 4, 2))
        same = bool(rng.integers(2))
        out = tuple(ref.conv_output_size(size, kk, ss, 1, "SAME" if same else "VALID")
                    for size, kk, ss in zip((h, w), k, st))
        if min(out) < 1:
            continue
        op = ("AVERAGE_POOL_2D", "MAX_POOL_2D")[int(rng.integers(2))]
        graphs.append(pool_model(op, 0 if same else 1, k, st, out, int(rng.choice([0, 1, 3])),
                                 (int(rng.integers(1, 3)), h, w, int(rng.integers(1, 5)))))
    return graphs


def test_random_conv_and_pool_geometries_bit_exact():
    check_graphs(_random_conv_cases(16, seed=7) + _random_pool_cases(12, seed=8))


def test_hybrid_conv_matches_interpreter():
    graphs = [conv_model("CONV_2D", [2, 7, 6, 3], [4, 3, 3, 3], [2, 7, 6, 4],
                         dict(Padding=0, StrideH=1, StrideW=1), per_channel=False, hybrid=True),
              conv_model("CONV_2D", [1, 8, 5, 2], [3, 3, 2, 2], [1, 3, 4, 3],
                         dict(Padding=1, StrideH=2, StrideW=1), per_channel=False, bias=False,
                         hybrid=True)]
    # the integer part is exact; the float scaling may round differently
    check_graphs(graphs, exact=False)


def binary_model(op, act, a_shape, b_shape, out_shape):
    m = TinyModel()
    a = m.tensor("a", a_shape, scale=[0.031], zp=[-5])
    b = m.tensor("b", b_shape, scale=[0.077], zp=[12])
    y = m.tensor("y", out_shape, scale=[0.05 if op != "MUL" else 0.11], zp=[2])
    cls = {"ADD": "AddOptions", "SUB": "SubOptions", "MUL": "MulOptions"}[op]
    m.op(op, [a, b], [y], (cls, dict(FusedActivationFunction=act)))
    return _tflite_graph(m.build([a, b], [y]))


def softmax_model(beta, scale, shape=(3, 17)):
    m = TinyModel()
    x = m.tensor("x", list(shape), scale=[scale], zp=[5])
    y = m.tensor("y", list(shape), scale=[1 / 256], zp=[-128])
    m.op("SOFTMAX", [x], [y], ("SoftmaxOptions", dict(Beta=beta)))
    return _tflite_graph(m.build([x], [y]))


def mean_model(same_quant, axes=(1, 2), keep=True):
    m = TinyModel()
    x = m.tensor("x", [1, 6, 5, 4], scale=[0.05], zp=[3])
    ax = m.tensor("axes", [len(axes)], "int32", data=list(axes))
    shape = [1 if (i in axes) else d for i, d in enumerate([1, 6, 5, 4]) if keep or i not in axes]
    y = m.tensor("y", shape, scale=[0.05 if same_quant else 0.02], zp=[3 if same_quant else -9])
    m.op("MEAN", [x, ax], [y], ("ReducerOptions", dict(KeepDims=keep)))
    return _tflite_graph(m.build([x], [y]))


def quantize_model():
    m = TinyModel()
    x = m.tensor("x", [2, 50], "float32")
    qq = m.tensor("q", [2, 50], scale=[0.0173], zp=[-3])
    r = m.tensor("r", [2, 50], scale=[0.041], zp=[10])
    y = m.tensor("y", [2, 50], "float32")
    m.op("QUANTIZE", [x], [qq])
    m.op("QUANTIZE", [qq], [r])
    m.op("DEQUANTIZE", [r], [y])
    return _tflite_graph(m.build([x], [y, qq, r]))


def test_tfl_quantize_as_a_float_conv_epilogue():
    """Float CONV_2D -> QUANTIZE -> DEQUANTIZE: the quantize runs on the float
    kernel's vector registers (lanes > 1). The float sums may be ordered
    differently from the reference, so a value on a tie may move one step."""
    rng = np.random.default_rng(0)
    m = TinyModel()
    x = m.tensor("x", [1, 6, 6, 3], "float32")
    w = m.tensor("w", [16, 3, 3, 3], "float32", data=rng.standard_normal((16, 3, 3, 3)))
    b = m.tensor("b", [16], "float32", data=rng.standard_normal(16))
    c = m.tensor("c", [1, 6, 6, 16], "float32")
    qq = m.tensor("q", [1, 6, 6, 16], scale=[0.05], zp=[-3])
    d = m.tensor("d", [1, 6, 6, 16], "float32")
    m.op("CONV_2D", [x, w, b], [c], ("Conv2DOptions", dict(Padding=0, StrideH=1, StrideW=1)))
    m.op("QUANTIZE", [c], [qq])
    m.op("DEQUANTIZE", [qq], [d])
    g = _tflite_graph(m.build([x], [qq, d]))
    assert any(len(n.attrs["body"].nodes) == 2 for n in g.nodes)   # conv + quantize fused
    feeds = [{g.inputs[0]: rng.uniform(-1, 1, (1, 6, 6, 3)).astype(np.float32)}
             for _ in range(2)]
    for f, got in zip(feeds, build_and_run_many([(g, f) for f in feeds])):
        want = aot.interpret(g, f)
        diff = np.abs(got["q"].astype(np.int32) - want["q"].astype(np.int32))
        assert diff.max() <= 1 and (diff > 0).mean() < 0.01
        np.testing.assert_allclose(got["d"], want["d"], atol=0.05 + 1e-6)


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_fully_connected_bit_exact(codegen, tmp_path):
    check_graphs([fc_model(False, False), fc_model(True, False), fc_model(False, True),
                  fc_model(True, True, x_shape=(1, 40), zp_in=-128, act=0, units=3),
                  fc_model(False, False, x_shape=(2, 2, 10), zp_in=0, act=3),
                  fc_model(True, False, x_shape=(3, 2, 10), depth=30)],   # rows across dims
                 codegen=codegen, tmp_path=tmp_path)


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_binary_ops_bit_exact(codegen, tmp_path):
    shapes = [([1, 4, 5, 3], [1, 1, 5, 3], [1, 4, 5, 3]),
              ([2, 3, 4], [4], [2, 3, 4]),
              ([3, 1], [1, 5], [3, 5]),
              ([1], [2, 6], [2, 6])]
    graphs = [binary_model(op, act, *shapes[k % len(shapes)])
              for k, (op, act) in enumerate([("ADD", 0), ("ADD", 1), ("SUB", 3), ("MUL", 0),
                                              ("MUL", 2), ("SUB", 0), ("ADD", 3), ("MUL", 1)])]
    check_graphs(graphs, runs=3, codegen=codegen, tmp_path=tmp_path)


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_pools_mean_softmax_bit_exact(codegen, tmp_path):
    graphs = [pool_model("AVERAGE_POOL_2D", 0, 3, 2, (4, 5)),
              pool_model("AVERAGE_POOL_2D", 1, 2, 2, (3, 4)),
              pool_model("AVERAGE_POOL_2D", 0, 3, 1, (7, 9), act=0),
              pool_model("MAX_POOL_2D", 0, 3, 2, (4, 5)),
              pool_model("MAX_POOL_2D", 1, 3, 1, (5, 7), act=3),
              mean_model(True), mean_model(False), mean_model(False, axes=(1,), keep=False),
              softmax_model(1.0, 0.1), softmax_model(0.5, 0.04), softmax_model(1.0, 0.9),
              softmax_model(1.0, 0.0039, (2, 3, 40))]
    check_graphs(graphs, runs=3, codegen=codegen, tmp_path=tmp_path)


def test_quantize_and_dequantize_bit_exact():
    g = quantize_model()
    rng = np.random.default_rng(5)
    # halves of the scale exercise round-half-away in the float32 division
    feeds = [{g.inputs[0]: (rng.integers(-300, 300, (2, 50)) * 0.5 * 0.0173).astype(np.float32)},
             {g.inputs[0]: rng.uniform(-3, 3, (2, 50)).astype(np.float32)},
             {g.inputs[0]: rng.uniform(-1e12, 1e12, (2, 50)).astype(np.float32)}]
    for f, got in zip(feeds, build_and_run_many([(g, f) for f in feeds])):
        want = aot.interpret(g, f)
        for name in g.outputs:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)


# ------------------------------------------------------------------ LSTM

def lstm_model(time_major: bool, int8: bool, seed=0) -> bytes:
    from support.tflite_models import _lstm_model
    return _lstm_model(time_major, int8, seed=seed)[0]


def _with_state_outputs(g: Graph) -> Graph:
    """The graph with the new LSTM state as extra outputs (to compare it too)."""
    return dataclasses.replace(g, outputs=tuple(g.outputs) + tuple(g.updates.values()))


@pytest.mark.parametrize("codegen", ["c", "llvm"])
@pytest.mark.parametrize("int8", [True, False], ids=["int8", "float"])
def test_lstm_matches_interpreter(int8, codegen, tmp_path):
    graphs = [_with_state_outputs(_tflite_graph(lstm_model(tm, int8, seed=k)))
              for k, tm in enumerate((False, True))]
    rng = np.random.default_rng(1)
    cases = []
    for g in graphs:
        for _ in range(2):
            feeds = _random_inputs(g, rng)
            if not int8:
                feeds = {k: v / 3 for k, v in feeds.items()}
            cases.append((g, feeds))
    for (g, feeds), got in zip(cases, run_cases(cases, codegen, tmp_path)):
        want = aot.interpret(g, feeds)
        for name in g.outputs:
            if int8:
                np.testing.assert_array_equal(got[name], want[name], err_msg=name)
            else:
                np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4,
                                           err_msg=name)


def test_int8_lstm_state_starts_from_variables():
    """A non-reset state (as after earlier invocations) flows through the rule."""
    g = _with_state_outputs(_tflite_graph(lstm_model(False, True, seed=4)))
    rng = np.random.default_rng(2)
    for var in g.variables:
        ty = g.types[var]
        info = np.iinfo(ty.dtype)
        g.variables[var] = rng.integers(info.min // 4, info.max // 4, ty.shape).astype(ty.dtype)
    feeds = _random_inputs(g, rng)
    got = build_and_run_many([(g, feeds)])[0]
    want = aot.interpret(g, feeds, dict(g.variables))
    for name in g.outputs:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


# ------------------------------------------------------------------ ONNX quantized ops

def _onnx_graph(nodes, inputs, outputs, inits, opset=21) -> Graph:
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, inits),
                          opset_imports=[helper.make_opsetid("", opset)])
    return aot.optimize(infer_types(import_onnx(m.SerializeToString(), "m")))


def _init(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def qlinear_conv_graph(x_shape, w_shape, per_channel, pads, strides, group=1, udtype=False,
                       seed=0):
    rng = np.random.default_rng(seed)
    cout = w_shape[0]
    xt = T.UINT8 if udtype else T.INT8
    wdt = np.uint8 if udtype else np.int8
    w = rng.integers(0 if udtype else -127, 255 if udtype else 128, w_shape).astype(wdt)
    w_s = rng.uniform(0.002, 0.02, cout).astype(np.float32) if per_channel else np.float32(0.01)
    w_zp = (rng.integers(100, 150, cout) if per_channel else np.array(128)).astype(wdt) \
        if udtype else (np.zeros(cout, wdt) if per_channel else np.array(0, wdt))
    inits = [_init("xs", np.float32(0.05)), _init("xz", np.array(7 if udtype else -3, wdt)),
             _init("w", w), _init("ws", w_s), _init("wz", w_zp),
             _init("ys", np.float32(0.08)), _init("yz", np.array(120 if udtype else 5, wdt)),
             _init("b", rng.integers(-2000, 2000, cout).astype(np.int32))]
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
                            ["y"], pads=pads, strides=strides, group=group)
    return _onnx_graph([node], [helper.make_tensor_value_info("x", xt, x_shape)],
                       [helper.make_tensor_value_info("y", xt, None)], inits)


def qlinear_matmul_graph(a_shape, b_shape, per_column, const_b=True, seed=0):
    rng = np.random.default_rng(seed)
    n = b_shape[-1]
    b = rng.integers(-128, 128, b_shape).astype(np.int8)
    b_s = rng.uniform(0.002, 0.02, n).astype(np.float32) if per_column else np.float32(0.01)
    b_zp = rng.integers(-3, 3, n).astype(np.int8) if per_column else np.array(2, np.int8)
    inits = [_init("as", np.float32(0.05)), _init("az", np.array(-9, np.int8)),
             _init("bs", b_s), _init("bz", b_zp), _init("ys", np.float32(0.3)),
             _init("yz", np.array(-4, np.int8))]
    inputs = [helper.make_tensor_value_info("a", T.INT8, a_shape)]
    if const_b:
        inits.append(_init("b", b))
    else:
        inputs.append(helper.make_tensor_value_info("b", T.INT8, b_shape))
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    return _onnx_graph([node], inputs, [helper.make_tensor_value_info("y", T.INT8, None)], inits)


def quantize_linear_graph(shape, axis, per_axis, dtype=T.INT8, seed=0):
    rng = np.random.default_rng(seed)
    n = shape[axis]
    npdt = {T.INT8: np.int8, T.UINT8: np.uint8, T.INT16: np.int16}[dtype]
    scale = rng.uniform(0.01, 0.05, n).astype(np.float32) if per_axis else np.float32(0.02)
    zp = rng.integers(-5, 5 if dtype != T.UINT8 else 0, n) if per_axis else np.array(3)
    zp = (zp + (128 if dtype == T.UINT8 else 0)).astype(npdt)
    inits = [_init("s", scale), _init("z", zp)]
    q_ = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=axis)
    d = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=axis)
    return _onnx_graph([q_, d], [helper.make_tensor_value_info("x", T.FLOAT, shape)],
                       [helper.make_tensor_value_info("q", dtype, None),
                        helper.make_tensor_value_info("y", T.FLOAT, None)], inits)


def integer_ops_graph(seed=0):
    """ConvInteger (per-channel weight zero point) and MatMulInteger (per-row A
    zero point, per-column B zero point, B an input), DynamicQuantizeLinear."""
    rng = np.random.default_rng(seed)
    w = rng.integers(0, 256, (4, 2, 3, 3)).astype(np.uint8)
    inits = [_init("w", w), _init("xz", np.array(9, np.uint8)),
             _init("wz", rng.integers(100, 150, 4).astype(np.uint8)),
             _init("az", rng.integers(-5, 5, 3).astype(np.int8)),
             _init("bz", rng.integers(-5, 5, 4).astype(np.int8))]
    nodes = [helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["c"], pads=[1, 0, 1, 2]),
             helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["m"]),
             helper.make_node("DynamicQuantizeLinear", ["f"], ["q", "qs", "qz"])]
    ins = [helper.make_tensor_value_info("x", T.UINT8, [1, 2, 6, 5]),
           helper.make_tensor_value_info("a", T.INT8, [2, 3, 7]),
           helper.make_tensor_value_info("b", T.INT8, [7, 4]),
           helper.make_tensor_value_info("f", T.FLOAT, [3, 11])]
    outs = [helper.make_tensor_value_info(n, t, None) for n, t in
            (("c", T.INT32), ("m", T.INT32), ("q", T.UINT8), ("qs", T.FLOAT), ("qz", T.UINT8))]
    return _onnx_graph(nodes, ins, outs, inits)


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_onnx_quantized_ops_bit_exact(codegen, tmp_path):
    graphs = [qlinear_conv_graph([1, 3, 7, 6], [4, 3, 3, 3], True, [1, 1, 1, 1], [1, 1]),
              qlinear_conv_graph([1, 4, 8, 8], [6, 2, 3, 3], False, [0, 1, 2, 0], [2, 2],
                                 group=2, seed=1),
              qlinear_conv_graph([2, 2, 5, 5], [3, 2, 2, 2], False, [0, 0, 0, 0], [1, 1],
                                 udtype=True, seed=2),
              qlinear_conv_graph([1, 3, 6, 6], [5, 3, 1, 1], True, [0, 0, 0, 0], [1, 1],
                                 udtype=True, seed=3),
              qlinear_matmul_graph([3, 16], [16, 5], False),
              qlinear_matmul_graph([2, 3, 16], [16, 5], True, seed=1),
              qlinear_matmul_graph([2, 3, 8], [2, 8, 4], False, const_b=False, seed=2),
              quantize_linear_graph([2, 3, 4], 1, True),
              quantize_linear_graph([2, 3, 4], 2, True, T.UINT8),
              quantize_linear_graph([5, 7], 0, False, T.INT16),
              integer_ops_graph()]
    check_graphs(graphs, runs=2, codegen=codegen, tmp_path=tmp_path)


def test_onnx_quantize_rounds_half_to_even():
    g = quantize_linear_graph([2, 3, 4], 1, False)
    x = (np.arange(24).reshape(2, 3, 4) - 12).astype(np.float32) * np.float32(0.01)  # k.5 ties
    got = build_and_run_many([(g, {"x": x})])[0]
    want = aot.interpret(g, {"x": x})
    np.testing.assert_array_equal(got["q"], want["q"])


# ------------------------------------------------------------------ real models

INT8_MODELS = [p for p in shared_models("*.tflite") if p.stem.endswith("int8")]


def _all_tensors_out(g: Graph) -> Graph:
    """The graph with every kernel's output as a graph output: the final int8
    softmax saturates, so compare each layer, not just the answer."""
    outs = list(g.outputs) + [o for n in g.nodes for o in n.outputs if o not in g.outputs]
    return dataclasses.replace(g, outputs=tuple(outs))


@pytest.mark.parametrize("codegen", ["c", "llvm"])
@pytest.mark.parametrize("path", INT8_MODELS, ids=lambda p: p.stem)
def test_int8_model_bit_exact(path, codegen, tmp_path):
    g = _all_tensors_out(aot.optimize(aot.load(path)))
    x = np.load(MODELS / f"{path.stem}.input.npy")
    feeds = {g.inputs[0]: x}
    got = run_cases([(g, feeds)], codegen, tmp_path)[0]
    want = aot.interpret(g, feeds)
    for name in g.outputs:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_hybrid_kws_model_matches_interpreter():
    path = MODELS / "mlperf_kws_dscnn_f32.tflite"
    g = aot.optimize(aot.load(path))
    x = np.load(MODELS / "mlperf_kws_dscnn_f32.input.npy")
    got = build_and_run_many([(g, {g.inputs[0]: x})])[0]
    want = aot.interpret(g, {g.inputs[0]: x})
    np.testing.assert_allclose(got[g.outputs[0]], want[g.outputs[0]], rtol=1e-4, atol=1e-4)


def test_onnx_qdq_pattern_around_a_float_conv():
    """DequantizeLinear -> Conv -> Relu -> QuantizeLinear: the quantize is the
    float kernel's epilogue (vector lanes), the dequantize an inlined producer.
    The float conv may sum in another order than the reference, so a value
    on a rounding tie may move by one step; nearly all must be exact."""
    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, (16, 8, 3, 3)).astype(np.int8)
    inits = [_init("xs", np.float32(0.02)), _init("xz", np.array(3, np.int8)), _init("w", w),
             _init("ws", rng.uniform(0.001, 0.01, 16).astype(np.float32)),
             _init("wz", np.zeros(16, np.int8)), _init("ys", np.float32(0.05)),
             _init("yz", np.array(-7, np.int8)),
             _init("b", rng.standard_normal(16).astype(np.float32))]
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
             helper.make_node("Conv", ["xf", "wf", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "ys", "yz"], ["y"])]
    g = _onnx_graph(nodes, [helper.make_tensor_value_info("x", T.INT8, [1, 8, 10, 10])],
                    [helper.make_tensor_value_info("y", T.INT8, None)], inits)
    feeds = [{"x": rng.integers(-128, 128, (1, 8, 10, 10)).astype(np.int8)} for _ in range(2)]
    for f, got in zip(feeds, build_and_run_many([(g, f) for f in feeds])):
        want = aot.interpret(g, f)["y"].astype(np.int32)
        diff = np.abs(got["y"].astype(np.int32) - want)
        assert diff.max() <= 1 and (diff > 0).mean() < 0.01


# ------------------------------------------------------------------ undefined behaviour

def _ubsan_runtime() -> str:
    out = subprocess.run(["clang", "-print-file-name=libclang_rt.ubsan_standalone-x86_64.so"],
                         capture_output=True, text=True).stdout.strip()
    if not out.startswith("/"):     # older clangs print the bare name: look in the resource dir
        res = subprocess.run(["clang", "-print-resource-dir"], capture_output=True,
                             text=True).stdout.strip()
        out = f"{res}/lib/linux/libclang_rt.ubsan_standalone-x86_64.so"
    return out


def ubsan_main(out_dir: str) -> None:
    """Run in a child process with the UBSan runtime preloaded: the int8
    kernels (all rule kinds, random and real inputs) built with
    -fsanitize=undefined; any signed overflow or bad shift aborts."""
    from aot.codegen.c import emit_c
    from aot.lower import lower_graph
    target = host_target()
    rng = np.random.default_rng(0)
    graphs = [conv_model("CONV_2D", *c[:4], c[4], seed=k) for k, c in enumerate(CONVS)]
    graphs += [conv_model("DEPTHWISE_CONV_2D", *c[:4], bias=c[4]) for c in DEPTHWISE]
    graphs += [fc_model(True, True), fc_model(False, False), softmax_model(1.0, 0.9),
               softmax_model(0.5, 0.04), mean_model(False), quantize_model(),
               pool_model("AVERAGE_POOL_2D", 1, 2, 2, (3, 4)),
               binary_model("ADD", 1, [3, 1], [1, 5], [3, 5]),
               binary_model("MUL", 0, [2, 3, 4], [4], [2, 3, 4]),
               _tflite_graph(lstm_model(False, True)),
               aot.optimize(aot.load(MODELS / "tflm_micro_speech_int8.tflite"))]
    def renamed(k, n):
        return dataclasses.replace(k, func=dataclasses.replace(k.func, name=f"g{n}_{k.func.name}"))
    lowered = [[renamed(k, n) for k in lower_graph(g, target)] for n, g in enumerate(graphs)]
    src = emit_c([k.func for ks in lowered for k in ks], "t")
    c_file, so = f"{out_dir}/ubsan.c", f"{out_dir}/ubsan.so"
    with open(c_file, "w") as f:
        f.write(src.source)
    # -O0: the sanitizer checks every operation, and builds in a second, not a minute
    subprocess.run(["clang", "-std=c99", "-O0", "-shared", "-fPIC", "-fsanitize=undefined",
                    "-fno-sanitize-recover=all", c_file, "-o", so, "-lm"], check=True)
    lib = ctypes.CDLL(so)
    for g, kernels in zip(graphs, lowered):
        for _ in range(3):
            feeds = _random_inputs(g, rng)
            got = run_kernels(lib, src.symbols, g, kernels, feeds)
            want = aot.interpret(g, feeds)
            for name in g.outputs:
                assert np.array_equal(got[name], want[name]) or (
                    got[name].dtype.kind == "f" and np.allclose(got[name], want[name])), name
    print("ubsan ok")


def test_int8_kernels_have_no_undefined_behaviour(tmp_path):
    runtime = _ubsan_runtime()
    assert os.path.exists(runtime), f"clang's UBSan runtime is missing ({runtime})"
    # the child imports this module from its folder, and support from tests/
    path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, LD_PRELOAD=runtime, PYTHONPATH=path)
    code = f"import test_lower_int8 as t; t.ubsan_main({str(tmp_path)!r})"
    proc = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "ubsan ok" in proc.stdout, proc.stderr[-3000:]


# ------------------------------------------------------------------ vector tiles

@pytest.mark.parametrize("codegen", ["c", "c-fallback", "llvm", "c-generic", "llvm-generic"])
def test_pair_dot_matches_numpy(codegen):
    """aot_dot2 (pmaddwd on x86, the lane formula elsewhere) on random int16."""
    from aot.isa.dots import pair_dot
    T16 = DType("int16")
    rng = np.random.default_rng(3)
    m = 64
    kernels, cases = [], []
    for n in (4, 8):
        xs = Buffer("xs", T16, (2 * m,))
        w = Buffer("w", T16, (m * 2 * n,))
        out = Buffer("out", INT32, (m * n,), BufferKind.OUTPUT)
        i = Var("i")
        body = Store(out, Bin("*", i, Const(n)), pair_dot(
            Load(xs, Bin("*", i, Const(2))), Load(xs, Bin("+", Bin("*", i, Const(2)), Const(1))),
            Load(w, Bin("*", i, Const(2 * n)), 2 * n)))
        func = PrimFunc(f"dot2_{n}", (xs, w, out), For(i, m, body))
        kernels.append(Kernel(func, (Arg("tensor", "xs"), Arg("tensor", "w"),
                                     Arg("tensor", "out")), None))
        x = rng.integers(-32767, 32768, 2 * m).astype(np.int16)
        x[:4] = [32767, -32767, 0, -1]
        wv = rng.integers(-32767, 32768, m * 2 * n).astype(np.int16)
        wv[:4] = [32767, 32767, -32767, 1]
        cases.append((x, wv, n))
    lib, symbols = _compiled(kernels, codegen)
    for k, (x, wv, n) in zip(kernels, cases):
        a, b = aligned(x), aligned(wv)
        out = aligned(np.zeros(m * n, np.int32))
        fn = getattr(lib, symbols[k.func.name])
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p] * 3
        fn(*(ctypes.c_void_p(v.ctypes.data) for v in (a, b, out)))
        pairs = wv.astype(np.int64).reshape(m, n, 2)
        want = (x.astype(np.int64).reshape(m, 1, 2) * pairs).sum(axis=2).reshape(-1)
        np.testing.assert_array_equal(out, want, err_msg=f"{codegen} n={n}")


def _compiled(kernels, codegen: str):
    """The kernels built by `codegen`: c / llvm legalized for the host (its
    x86 instructions), c-fallback the same C with the x86 macros undefined,
    c-generic / llvm-generic not legalized (the generic lane formulas)."""
    from aot.lower.tir_passes.legalize import legalize
    backend, variant = (codegen.split("-") + [""])[:2]
    target = _fallback_target() if variant == "fallback" else host_target()
    if variant != "generic":
        legal = [dataclasses.replace(k, func=legalize(k.func, target)) for k in kernels]
        assert all(a.func is not k.func for a, k in zip(legal, kernels)), "nothing legalized"
        kernels = legal
    return compile_kernels(kernels, backend, target=target)


def _fallback_target():
    """The host target with the x86 builtins' macros undefined: the C
    helpers' portable lane formula (what Arm builds compile)."""
    t = host_target()
    return dataclasses.replace(t, cflags=type(t.cflags)([*t.cflags, "-U__AVX2__", "-U__SSE2__",
                                                         "-U__SSE4_1__", "-U__BYTE_ORDER__"]))


@pytest.mark.parametrize("codegen", ["c", "c-fallback", "llvm", "c-generic", "llvm-generic"])
def test_packed_pair_dot_matches_numpy(codegen):
    """aot_dot2p: the pair staged as one int32, (x0 & 0xFFFF) + 65536 * x1."""
    from aot.isa.dots import packed_pair_dot
    rng = np.random.default_rng(4)
    m, n = 64, 8
    T16 = DType("int16")
    ps = Buffer("ps", INT32, (m,))
    w = Buffer("w", T16, (m * 2 * n,))
    out = Buffer("out", INT32, (m * n,), BufferKind.OUTPUT)
    i = Var("i")
    func = PrimFunc("dot2p", (ps, w, out), For(i, m, Store(out, Bin("*", i, Const(n)), (
        packed_pair_dot(Load(ps, i), Load(w, Bin("*", i, Const(2 * n)), 2 * n))))))
    kernel = Kernel(func, (Arg("tensor", "ps"), Arg("tensor", "w"), Arg("tensor", "out")), None)
    x = rng.integers(-32767, 32768, (m, 2)).astype(np.int64)
    x[:3] = [[-1, -1], [-255, 255], [32767, -32767]]
    packed = ((x[:, 0] & 0xFFFF) + x[:, 1] * 65536).astype(np.int32)
    wv = rng.integers(-32767, 32768, m * 2 * n).astype(np.int16)
    lib, symbols = _compiled([kernel], codegen)
    a, b, o = aligned(packed), aligned(wv), aligned(np.zeros(m * n, np.int32))
    fn = getattr(lib, symbols["dot2p"])
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p] * 3
    fn(*(ctypes.c_void_p(v.ctypes.data) for v in (a, b, o)))
    want = (x.reshape(m, 1, 2) * wv.astype(np.int64).reshape(m, n, 2)).sum(axis=2).reshape(-1)
    np.testing.assert_array_equal(o, want, err_msg=codegen)


@pytest.mark.parametrize("codegen", ["c", "c-fallback", "llvm", "c-generic", "llvm-generic"])
def test_pack_pairs_matches_numpy(codegen):
    """aot_pack2: int16 lanes 2k, 2k+1 -> (v[2k] & 0xFFFF) + 65536 v[2k+1],
    by the vector's bytes (little-endian) and by the lane formula (what a
    big-endian target compiles: C without __BYTE_ORDER__, and the call left
    generic)."""
    from aot.isa.calls import pack_pairs
    rng = np.random.default_rng(6)
    m = 16
    T16 = DType("int16")
    kernels, cases = [], []
    for n in (4, 8, 16):
        v = Buffer("v", T16, (m * 2 * n,))
        out = Buffer("out", INT32, (m * n,), BufferKind.OUTPUT)
        i = Var("i")
        func = PrimFunc(f"pack2_{n}", (v, out), For(i, m, Store(
            out, Bin("*", i, Const(n)), pack_pairs(Load(v, Bin("*", i, Const(2 * n)), 2 * n)))))
        kernels.append(Kernel(func, (Arg("tensor", "v"), Arg("tensor", "out")), None))
        x = rng.integers(-32768, 32768, m * 2 * n).astype(np.int16)
        x[:6] = [-1, -1, -255, 255, -32768, 32767]
        cases.append((x, n))
    lib, symbols = _compiled(kernels, codegen)
    for k, (x, n) in zip(kernels, cases):
        a, o = aligned(x), aligned(np.zeros(m * n, np.int32))
        fn = getattr(lib, symbols[k.func.name])
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p] * 2
        fn(*(ctypes.c_void_p(t.ctypes.data) for t in (a, o)))
        pairs = x.astype(np.int64).reshape(-1, 2)
        want = ((pairs[:, 0] & 0xFFFF) + pairs[:, 1] * 65536).astype(np.int32)
        np.testing.assert_array_equal(o, want, err_msg=f"{codegen} n={n}")


@pytest.mark.parametrize("codegen", ["c", "c-fallback", "llvm", "c-generic", "llvm-generic"])
def test_vector_fixed_point_helpers_match_numpy(codegen):
    """The whole-vector aot_rdhm (pmuldq on x86) and aot_rdbpot (int32
    lanes) on the int32 range's edges and random values, 4 and 8 lanes."""
    from aot.ir.tir import Call
    rng = np.random.default_rng(5)
    m = 64
    lo, hi = -2**31, 2**31 - 1
    kernels, cases = [], []
    for n in (4, 8):
        vec = DType("int32", n)
        a, b, e = (Buffer(k, INT32, (m * n,)) for k in "abe")
        o1, o2 = (Buffer(k, INT32, (m * n,), BufferKind.OUTPUT) for k in ("o1", "o2"))
        i = Var("i")
        at = Bin("*", i, Const(n))
        body = seq(Store(o1, at, Call("aot_rdhm", (Load(a, at, n), Load(b, at, n)), vec)),
                   Store(o2, at, Call("aot_rdbpot", (Load(a, at, n), Load(e, at, n)), vec)))
        func = PrimFunc(f"fixed_{n}", (a, b, e, o1, o2), For(i, m, body))
        kernels.append(Kernel(func, tuple(Arg("tensor", k) for k in ("a", "b", "e", "o1", "o2")),
                              None))
        av = rng.integers(lo, hi + 1, m * n, dtype=np.int64)
        bv = rng.integers(lo + 1, hi + 1, m * n, dtype=np.int64)
        av[:8] = [hi, lo, lo + 1, 0, -1, 1, 2**30, -2**30]
        bv[:8] = [hi, hi, lo + 1, hi, hi, 1, 2**30, 2**30]
        ev = rng.integers(0, 32, m * n, dtype=np.int64)
        ev[:8] = [31, 31, 0, 1, 1, 0, 30, 31]
        cases.append((av, bv, ev, n))
    lib, symbols = _compiled(kernels, codegen)
    for k, (av, bv, ev, n) in zip(kernels, cases):
        bufs = [aligned(v.astype(np.int32)) for v in (av, bv, ev)]
        outs = [aligned(np.zeros(m * n, np.int32)) for _ in range(2)]
        fn = getattr(lib, symbols[k.func.name])
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p] * 5
        fn(*(ctypes.c_void_p(v.ctypes.data) for v in (*bufs, *outs)))
        want_mul = ((av * bv + 2**30) >> 31).astype(np.int32)      # wraps only at lo * lo
        mask = (1 << ev) - 1
        want_div = (av >> ev) + ((av & mask) > (mask >> 1) + (av < 0))
        np.testing.assert_array_equal(outs[0], want_mul, err_msg=f"{codegen} rdhm n={n}")
        np.testing.assert_array_equal(outs[1], want_div.astype(np.int32),
                                      err_msg=f"{codegen} rdbpot n={n}")


def test_scalar_target_gets_scalar_int8_kernels():
    """A target without a vector unit (vector_bits 0) gets no vector types in
    the int8 kernels, and the same bits."""
    from aot.ir.tir import dtype_of, stmt_exprs, walk_expr, walk_stmt
    from aot.lower import lower_graph
    scalar = dataclasses.replace(host_target(), vector_bits=0)
    graphs = [conv_model("CONV_2D", [1, 6, 6, 8], [8, 3, 3, 8], [1, 6, 6, 8],
                         dict(Padding=0, StrideH=1, StrideW=1), seed=9),
              conv_model("DEPTHWISE_CONV_2D", [1, 6, 6, 8], [1, 3, 3, 8], [1, 6, 6, 8],
                         dict(Padding=0, StrideH=1, StrideW=1, DepthMultiplier=1), seed=2),
              fc_model(True, False, units=16, depth=24)]
    for g in graphs:
        for k in lower_graph(g, scalar):
            for s in walk_stmt(k.func.body):
                for e in stmt_exprs(s):
                    assert all(dtype_of(x).lanes == 1 for x in walk_expr(e)), k.func.name
    rng = np.random.default_rng(1)
    cases = [(g, _random_inputs(g, rng)) for g in graphs]
    for (g, feeds), got in zip(cases, build_and_run_many(cases, target=scalar)):
        want = aot.interpret(g, feeds)
        for name in g.outputs:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_conv_window_row_pairs_bit_exact():
    """Odd input depths pair taps along the window row (staged rows of
    x - zp, zero outside the image): strides, padding, kernels of odd width,
    row dilation, per-tensor scales."""
    cases = [([1, 49, 10, 1], [16, 10, 4, 1], [1, 25, 5, 16],
              dict(Padding=0, StrideH=2, StrideW=2, FusedActivationFunction=1)),
             ([1, 9, 9, 3], [8, 3, 3, 3], [1, 9, 9, 8], dict(Padding=0, StrideH=1, StrideW=1)),
             ([2, 8, 7, 3], [12, 3, 3, 3], [2, 4, 4, 12],
              dict(Padding=0, StrideH=2, StrideW=2, FusedActivationFunction=3)),
             ([1, 9, 8, 1], [8, 3, 5, 1], [1, 5, 4, 8],
              dict(Padding=1, StrideH=1, StrideW=1, DilationHFactor=2)),
             ([1, 6, 7, 5], [4, 2, 3, 5], [1, 6, 7, 4], dict(Padding=0, StrideH=1, StrideW=1))]
    graphs = [conv_model("CONV_2D", xs, ws, os_, opts, per_channel=k % 2 == 0,
                         zp_in=(-128, 5, 127, -3, 0)[k], seed=20 + k)
              for k, (xs, ws, os_, opts) in enumerate(cases)]
    check_graphs(graphs)

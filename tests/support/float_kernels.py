"""Float convolutions and dense layers as ONNX graphs over a spread of
geometries, and the check that compiles many at once (C or LLVM) and
compares each with the reference interpreter within RTOL / ATOL: the float
kernel tests (lower/rules/test_nn.py) and the per-target tile tests use
them."""
from __future__ import annotations

import ctypes
import dataclasses
import subprocess
import tempfile
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import aot
from aot.codegen import symbol_names
from aot.codegen.llvm import emit_object
from aot.frontend.onnx import import_onnx
from aot.lower import lower_graph
from aot.testing.kernels import build_and_run_many, host_target, run_kernels
from aot.passes.infer import infer_types


RTOL = ATOL = 1e-4


def _rnd(*shape, seed=0):
    return np.random.default_rng(seed + 7 * len(shape) + sum(shape)).standard_normal(
        shape).astype(np.float32)


def onnx_graph(op, x_shape, consts, attrs, inputs=None):
    """One ONNX node on input x (+ constants, "" for an absent input),
    imported and optimized (NHWC, fused) as a model would be."""
    names = list(inputs or consts)
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
    inits = [numpy_helper.from_array(v, k) for k, v in consts.items()]
    node = helper.make_node(op, ["x"] + names, ["y"], **attrs)
    g = helper.make_graph([node], op, ins, [helper.make_empty_tensor_value_info("y")], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    return aot.optimize(infer_types(import_onnx(model.SerializeToString(), name=op)))


def run_many(cases, codegen: str):
    """build_and_run_many, also through the LLVM backend (which the harness
    does not drive yet): one object for all cases, linked into a library."""
    if codegen == "c":
        return build_and_run_many(cases)
    target = host_target()
    lowered = [[dataclasses.replace(k, func=dataclasses.replace(k.func, name=f"c{i}_{k.func.name}"))
                for k in lower_graph(g, target)] for i, (g, _) in enumerate(cases)]
    funcs = [k.func for ks in lowered for k in ks]
    with tempfile.TemporaryDirectory() as tmp:
        obj, so = Path(tmp) / "k.o", Path(tmp) / "k.so"
        obj.write_bytes(emit_object(funcs, "t", target))
        subprocess.run(["cc", "-shared", "-o", str(so), str(obj), "-lm"], check=True)
        lib = ctypes.CDLL(str(so))
    symbols = symbol_names([f.name for f in funcs], "t")
    return [run_kernels(lib, symbols, g, ks, ins) for (g, ins), ks in zip(cases, lowered)]


# ------------------------------------------------------------------------ Conv

CONVS = [
    # (x NCHW shape, weight shape [O, I/g, k...], attrs)
    ((1, 8, 5, 5), (16, 8, 3, 3), dict(pads=[1, 1, 1, 1])),                 # whole vectors
    ((1, 8, 5, 5), (20, 8, 3, 3), dict(pads=[1, 1, 1, 1])),                 # 8+8+4 remainder
    ((1, 3, 9, 8), (13, 3, 3, 3), dict(pads=[1, 0, 2, 1], strides=[2, 2])),  # first layer, odd OC
    ((1, 16, 4, 4), (40, 16, 1, 1), {}),                                    # 1x1, tile + remainder
    ((2, 16, 5, 3), (24, 16, 1, 1), {}),                      # 1x1 on short rows: pixels flattened
    ((2, 7, 6, 5), (3, 7, 1, 1), dict(strides=[2, 1])),                    # scalar channels
    ((1, 12, 6, 6), (12, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=12)),      # depthwise
    ((1, 19, 7, 7), (19, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=19, strides=[2, 2])),
    ((1, 6, 6, 6), (12, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=6)),        # multiplier 2
    ((2, 8, 9, 9), (8, 4, 3, 3), dict(pads=[2, 2, 2, 2], group=2, dilations=[2, 2])),
    ((1, 4, 9, 9), (5, 4, 7, 7), dict(pads=[3, 3, 3, 3])),                  # guarded borders
    ((1, 4, 6, 6), (9, 4, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    ((1, 4, 6, 6), (9, 4, 2, 2), dict(auto_pad="SAME_LOWER")),
    ((1, 4, 3, 3), (8, 4, 3, 3), dict(pads=[4, 4, 4, 4])),                  # taps all outside
    ((1, 4, 20, 20), (12, 4, 3, 3), dict(pads=[1, 1, 1, 1])),               # border regions
    ((1, 5, 17, 18), (10, 5, 5, 3), dict(pads=[2, 1, 2, 1], strides=[1, 2])),
    ((1, 4, 10), (5, 4, 3), dict(pads=[1, 1], dilations=[2])),             # 1-D
    ((1, 6, 11, 1), (10, 6, 5, 1), dict(pads=[2, 0, 2, 0])),               # Kx1 on Hx1: read 1xH
    ((2, 8, 12, 1), (8, 1, 3, 1), dict(pads=[1, 0, 1, 0], group=8, strides=[2, 1])),
    ((1, 8, 9, 1), (12, 4, 3, 1), dict(pads=[2, 0, 2, 0], group=2, dilations=[2, 3])),
    ((1, 16, 5, 6), (6, 16, 3, 3), dict(pads=[1, 1, 1, 1])),      # few out, many in channels
    ((2, 32, 7, 7), (4, 16, 3, 3), dict(pads=[1, 1, 1, 1], group=2, strides=[2, 2])),
    ((1, 16, 4, 5), (3, 16, 1, 1), {}),                      # 1x1, fewer than a half vector out
    ((1, 3, 4, 5, 5), (8, 3, 3, 3, 3), dict(pads=[1, 1, 1, 1, 1, 1])),     # 3-D
]


def _conv_consts(w_shape, i, bias=True):
    consts = {"w": _rnd(*w_shape, seed=i)}
    if bias:
        consts["b"] = _rnd(w_shape[0], seed=i + 100)
    return consts


# ---------------------------------------------------------------- Gemm, MatMul

DENSE = [
    ("Gemm", (3, 10), {"b": (10, 13), "c": (13,)}, dict(alpha=0.5, beta=2.0)),
    ("Gemm", (3, 10), {"b": (13, 10), "c": (3, 1)}, dict(transB=1)),
    ("Gemm", (10, 3), {"b": (13, 10)}, dict(transB=1, transA=1)),
    ("Gemm", (1, 64), {"b": (40, 64), "c": (1, 40)}, dict(transB=1)),
    # one row: even and odd k in separate accumulators, an odd k's last alone
    ("Gemm", (1, 37), {"b": (37, 24), "c": (24,)}, {}),
    ("Gemm", (2, 5), {"b": (5, 1), "c": (2, 1)}, dict(beta=0.0)),
    ("MatMul", (2, 3, 10), {"b": (10, 20)}, {}),
    ("MatMul", (10,), {"b": (4, 10, 20)}, {}),
    ("MatMul", (4, 3, 10), {"b": (10,)}, {}),
    ("MatMul", (2, 1, 3, 6), {"b": (5, 6, 9)}, {}),
]

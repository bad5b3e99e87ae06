"""In-place execution: a kernel's output written over an input that dies there.

aot/lower/tir_passes/inplace.py decides from a kernel's TIR whether its code allows it
(every read of the input is the element about to be stored); the planner
(aot/executor/liveness.py) whether the input dies at that kernel. Checked
here: the analysis on small hand-written kernels, the plan on small ONNX
models (a residual add fused into a convolution, with the skip tensor dying
there or living on), the generated code (no restrict on the shared pair),
and the outputs of the packages against ONNX Runtime and the interpreter.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import aot
from aot.api import package
from aot.deploy import run_package
from aot.ir.tir import (Bin, Buffer, BufferKind, Const, For, Load, PrimFunc, Store, Var, dt,
                        seq)
from aot.lower.tir_passes.inplace import in_place_pairs
from aot.targets import get_board
from support import MODELS

F32 = dt("float32")
OUT = BufferKind.OUTPUT


def func(body, *params) -> PrimFunc:
    return PrimFunc("k", params, body)


X, Y = Buffer("x", F32, (16,)), Buffer("y", F32, (16,))
Z = Buffer("z", F32, (16,), OUT)
i = Var("i")


def loop(*stmts):
    return For(i, 16, seq(*stmts))


def plus(a, b):
    return Bin("+", a, b)


@pytest.mark.parametrize("body, want", [
    (loop(Store(Z, i, plus(Load(X, i), Load(Y, i)))), (("x", "z"),)),
    # the same element, twice in the value
    (loop(Store(Z, i, Bin("*", Load(X, i), Load(X, i)))), (("x", "z"),)),
    # a neighbour: overwritten before it is read
    (loop(Store(Z, i, Load(X, Bin("%", plus(i, Const(1)), Const(16))))), ()),
    # x also read outside the store
    (seq(loop(Store(Z, i, Load(X, i))), Store(Z, Const(0), Load(X, Const(3)))), ()),
    # a store to z that does not read x first (a zero fill, then the values)
    (seq(loop(Store(Z, i, Const(0.0, F32))), loop(Store(Z, i, Load(X, i)))), ()),
    # z read back
    (loop(Store(Z, i, plus(Load(X, i), Load(Z, i)))), ()),
], ids=["elementwise", "twice", "neighbour", "read-elsewhere", "zero-fill", "reads-output"])
def test_the_analysis_allows_only_reads_of_the_element_stored(body, want):
    got = in_place_pairs(func(body, X, Y, Z))
    # y is read at the stored element too: one input per output is enough
    assert got == want or (want and got == (("x", "z"),))


def test_sizes_and_widths_must_match():
    small = Buffer("x", F32, (8,))
    body = For(i, 8, Store(Z, i, Load(small, i)))
    assert in_place_pairs(func(body, small, Z)) == ()
    narrow = Buffer("x", dt("int8"), (16,))
    body = loop(Store(Z, i, plus(Load(narrow, i), Const(0.0, F32))))
    assert in_place_pairs(func(body, narrow, Z)) == ()


# ------------------------------------------------------------------ models

def residual_model(skip_lives_on: bool) -> onnx.ModelProto:
    """x -> conv a -> t1 -> conv b -> conv c (+ t1, relu) -> t3 -> conv d -> y:
    the skip tensor t1 dies at the fused conv c. With skip_lives_on, conv
    d's result gets t1 added too, so t1 lives on to that last kernel."""
    rng = np.random.default_rng(0)

    def w(name, cin):
        return numpy_helper.from_array(rng.standard_normal((8, cin, 3, 3)).astype("f4") * 0.2,
                                       name)
    inits = [w("wa", 3), w("wb", 8), w("wc", 8), w("wd", 8)]
    conv = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    nodes = [helper.make_node("Conv", ["x", "wa"], ["t1"], **conv),
             helper.make_node("Conv", ["t1", "wb"], ["t2"], **conv),
             helper.make_node("Conv", ["t2", "wc"], ["t3c"], **conv),
             helper.make_node("Add", ["t3c", "t1"], ["t3s"]),
             helper.make_node("Relu", ["t3s"], ["t3"]),
             helper.make_node("Conv", ["t3", "wd"], ["t4" if skip_lives_on else "y"], **conv)]
    if skip_lives_on:
        nodes.append(helper.make_node("Add", ["t4", "t1"], ["y"]))
    graph = helper.make_graph(nodes, "residual",
                              [helper.make_tensor_value_info("x", T.FLOAT, [1, 3, 12, 12])],
                              [helper.make_tensor_value_info("y", T.FLOAT, [1, 8, 12, 12])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def package_of(model: onnx.ModelProto, tmp_path, codegen: str):
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    return path, package(path, board="host", codegen=codegen, out_dir=tmp_path / codegen)


def written_over(meta: dict) -> list[list[str]]:
    return [b["then"] for b in meta["plan"]["buffers"] if "then" in b]


def check_outputs(path, info, seed: int) -> None:
    import onnxruntime as ort

    x = np.random.default_rng(seed).standard_normal((1, 3, 12, 12)).astype("f4")
    got = run_package(info.path, get_board("host"), [x]).outputs[0]
    want = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_a_fused_residual_add_takes_the_skip_tensors_bytes(tmp_path, codegen):
    path, info = package_of(residual_model(False), tmp_path, codegen)
    over = [b for b in info.metadata["plan"]["buffers"] if "then" in b]
    assert [(b["name"], b["then"]) for b in over] == [("t1_nhwc", ["t3_t"])], over
    assert over[0]["size"] == 8 * 12 * 12 * 4
    check_outputs(path, info, 1)
    if codegen == "c":
        src = "".join(p.read_text() for p in (info.path / "src").glob("*kernels*.c"))
        fused = src[src.index("_conv_add_relu_"):]
        signature = fused[:fused.index(")")]
        # t2 (the conv's input), the packed weights and the padded copy
        # stay restrict; t1 and the output, which may share bytes, do not
        assert "const float *restrict in0" in signature, signature
        assert "const float *in2" in signature and "float *out0" in signature, signature
        assert signature.count("*restrict") == signature.count("*") - 2, signature


def test_a_skip_tensor_read_later_keeps_its_bytes_until_then(tmp_path):
    """t1 is read again by the last kernel: the first residual add gets new
    bytes, the last one (where t1 dies) is written over t1."""
    path, info = package_of(residual_model(True), tmp_path, "c")
    over = [(b["name"], b["then"]) for b in info.metadata["plan"]["buffers"] if "then" in b]
    assert over == [("t1_nhwc", ["y_t"])], over
    check_outputs(path, info, 2)


def test_resnet8_writes_each_residual_add_over_its_skip_tensor(tmp_path):
    """The three residual adds of MLPerf Tiny's ResNet-8 run in place: the
    int8 arena drops below two 32x32x16 tensors plus a third."""
    info = package(MODELS / "mlperf_ic_resnet8_int8.tflite", board="host",
                       out_dir=tmp_path / "ic")
    meta = info.metadata
    assert len(written_over(meta)) == 3, meta["plan"]
    assert meta["arena_bytes"] == meta["arena_lower_bound_bytes"] < 3 * 32 * 32 * 16

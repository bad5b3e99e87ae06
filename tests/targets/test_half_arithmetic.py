"""float16 convolutions computed in half on a target with FP16 arithmetic
(the Cortex-A76: aot/lower/kernels/half_dense.py's products, FMLA on 8 half
lanes, summed in chunks into float32): a small random model packaged for
rpi5 and run under qemu-aarch64 with the A76's CPU model, within a half's
tolerance of the interpreter and of float64 numpy; the A72 (no FP16
arithmetic) computes the same model in float32."""
from __future__ import annotations

import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

import aot
from aot.deploy import run_package
from aot.interp import interpret
from aot.targets import get_board

pytestmark = pytest.mark.skipif(shutil.which("qemu-aarch64") is None,
                                reason="qemu-aarch64 is not installed")


def _weights(rng, cout, cin):
    return (rng.standard_normal((cout, cin, 3, 3)) * np.sqrt(2.0 / (9 * cin))).astype(np.float16)


STRIDES = (1, 1, 2, 1)
OUT = [1, 12, 5, 6]


def _model(rng) -> tuple[bytes, list[np.ndarray]]:
    """3x3 convs (pads 1) on an odd-sized map: 16 -> 16 (ReLU) and 16 -> 24
    (the last channel tile a single vector) at stride 1 (Winograd), 24 ->
    16 at stride 2 (direct), all in half; 16 -> 12 (12 output channels:
    not whole half vectors) computed in float32."""
    ws = [_weights(rng, 16, 16), _weights(rng, 24, 16), _weights(rng, 16, 24),
          _weights(rng, 12, 16)]
    bs = [(rng.standard_normal(w.shape[0]) * 0.1).astype(np.float16) for w in ws]
    inits = [onnx.numpy_helper.from_array(a, f"{n}{k}")
             for k, (w, b) in enumerate(zip(ws, bs)) for n, a in (("w", w), ("b", b))]
    names = ["x", "r0", "c1", "c2", "y"]
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"])]
    nodes += [helper.make_node("Conv", [names[k], f"w{k}", f"b{k}"], [names[k + 1]],
                               pads=[1, 1, 1, 1], strides=[STRIDES[k]] * 2) for k in (1, 2, 3)]
    g = helper.make_graph(nodes, "half_convs",
                          [helper.make_tensor_value_info("x", T.FLOAT16, [1, 16, 9, 11])],
                          [helper.make_tensor_value_info("y", T.FLOAT16, OUT)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString(), [*ws, *bs]


def _numpy(x: np.ndarray, params: list[np.ndarray]) -> np.ndarray:
    """The model in float64."""
    ws, bs = params[:4], params[4:]
    y = x.astype(np.float64)[0]
    for k, (w, b) in enumerate(zip(ws, bs)):
        p = np.pad(y, ((0, 0), (1, 1), (1, 1)))
        s = STRIDES[k]
        h, wd = (y.shape[1] - 1) // s + 1, (y.shape[2] - 1) // s + 1
        y = np.einsum("oiyx,iyxhw->ohw", w.astype(np.float64), np.stack([np.stack(
            [p[:, dy:dy + s * h:s, dx:dx + s * wd:s] for dx in range(3)], 1)
            for dy in range(3)], 1)) + b.astype(np.float64)[:, None, None]
        if k == 0:
            y = np.maximum(y, 0)
    return y[None]


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_half_convs_computed_in_half_on_the_a76(codegen, tmp_path):
    rng = np.random.default_rng(32)
    data, params = _model(rng)
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    x = rng.standard_normal((1, 16, 9, 11)).astype(np.float16)
    pkg = aot.package(path, board="rpi5", codegen=codegen, out_dir=tmp_path / "pkg").path
    if codegen == "c":
        kernels = "\n".join(p.read_text() for p in (pkg / "src").glob("*kernels*.c"))
        # the three convs of whole half vectors, not the 12-channel one
        functions = kernels.split("\nvoid ")[1:]
        assert sum("= aot_hfma_8(" in f for f in functions) == 3, kernels
    (got,) = run_package(pkg, get_board("qemu-aarch64"), [x]).outputs
    assert got.shape == tuple(OUT)
    graph = aot.optimize(aot.load(path))
    want = interpret(graph, {"x": x})["y"].astype(np.float32)
    got = got.astype(np.float32)
    # computed in half: within 2^-8 of the largest output (measured 1.3e-3)
    # against the interpreter (float32 arithmetic, rounded per op) and float64
    exact = _numpy(x, params)
    for ref in (want, exact):
        assert np.abs(got - ref).max() <= 2.0 ** -8 * np.abs(ref).max()
    # the float32 compute path, for scale: within 2^-11 (a half's rounding)
    assert np.abs(want - exact).max() <= 2.0 ** -11 * np.abs(exact).max()


@pytest.mark.fast
def test_only_cores_with_fp16_compute_in_half(tmp_path):
    """The A76 (fp16) lowers the whole-vector convs with half arithmetic,
    the A72 and A53 with none (their code is the float32 compute path's)."""
    from aot.ir.tir import Call, stmt_exprs, walk_expr, walk_stmt
    from aot.isa.half import HALF_OPS
    from aot.lower import lower_graph
    from aot.targets import targets
    path = tmp_path / "m.onnx"
    path.write_bytes(_model(np.random.default_rng(32))[0])
    graph = aot.optimize(aot.load(path))

    def half_kernels(name: str) -> int:
        target = targets()[name]
        funcs = [k.func for k in lower_graph(graph, target)]
        return sum(any(isinstance(x, Call) and x.fn in HALF_OPS for s in walk_stmt(f.body)
                       for e in stmt_exprs(s) for x in walk_expr(e)) for f in funcs)
    assert half_kernels("aarch64-linux-a76") == 3
    assert half_kernels("aarch64-linux") == half_kernels("aarch64-linux-a53") == 0


def test_portable_form_where_the_compiler_has_no_fp16():
    """The A76's kernels compiled for this host (no FP16 vector arithmetic:
    the helpers' portable `#else`, lane by lane in float32) stay within the
    same tolerance."""
    from aot.lower import lower_graph
    from aot.targets import targets
    from aot.testing.kernels import compile_kernels, host_target, run_kernels
    rng = np.random.default_rng(32)
    data, params = _model(rng)
    graph = aot.optimize(aot.load(data))
    x = rng.standard_normal((1, 16, 9, 11)).astype(np.float16)
    kernels = lower_graph(graph, targets()["aarch64-linux-a76"])
    lib, symbols = compile_kernels(kernels, "c", None, host_target())
    got = run_kernels(lib, symbols, graph, kernels, {"x": x})["y"].astype(np.float32)
    exact = _numpy(x, params)
    assert np.abs(got - exact).max() <= 2.0 ** -8 * np.abs(exact).max()

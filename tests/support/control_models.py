"""ONNX test models with the structure real exporters give them: PyTorch's
symbolic batch and spatial dims, a Silero-VAD-like If on a sample-rate
input, a TorchScript-style Loop, Scan, nested subgraphs with initializers."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

R = np.random.default_rng(0)


def vi(name: str, dims, dtype=T.FLOAT):
    return h.make_tensor_value_info(name, dtype, dims)


def init(name: str, value) -> onnx.TensorProto:
    return nh.from_array(np.asarray(value), name)


def save(graph, path: Path, opset: int = 17) -> Path:
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, str(path))
    return path


def symbolic_conv(path: Path) -> Path:
    """A PyTorch export with dynamic_axes: batch_size, height, width symbolic;
    Shape -> Gather -> Concat -> Reshape computes a shape from them."""
    w = R.standard_normal((8, 3, 3, 3)).astype(np.float32)
    nodes = [
        h.make_node("Conv", ["input", "w"], ["c"], pads=[1, 1, 1, 1], name="/conv/Conv"),
        h.make_node("Relu", ["c"], ["r"], name="/relu/Relu"),
        h.make_node("Shape", ["r"], ["s"], name="/Shape"),
        h.make_node("Gather", ["s", "zero"], ["n"], axis=0, name="/Gather"),
        h.make_node("Unsqueeze", ["n", "axes0"], ["n1"], name="/Unsqueeze"),
        h.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0, name="/Concat"),
        h.make_node("Reshape", ["r", "shape"], ["output"], name="/Reshape"),
    ]
    g = h.make_graph(nodes, "main_graph", [vi("input", ["batch_size", 3, "height", "width"])],
                     [vi("output", ["batch_size", "flat"])],
                     [init("w", w), init("zero", np.int64(0)), init("axes0", np.array([0])),
                      init("minus1", np.array([-1]))])
    return save(g, path)


def vad_if(path: Path) -> Path:
    """Silero-VAD-like: Equal(sr, 16000) -> If; both branches read outer-scope
    tensors (the input, weights of the main graph) and have initializers of
    their own; the 8 kHz branch holds a nested If on a shape."""
    w16 = R.standard_normal((4, 6)).astype(np.float32)
    w8 = R.standard_normal((4, 6)).astype(np.float32)
    then = h.make_graph(
        [h.make_node("MatMul", ["x", "w16"], ["m16"]),
         h.make_node("Add", ["m16", "bias"], ["y16"])], "then_16k", [],
        [vi("y16", ["batch", 6])], [init("w16", w16)])
    inner_then = h.make_graph([h.make_node("Relu", ["m8"], ["i8"])], "inner_then", [],
                              [vi("i8", ["batch", 6])])
    inner_else = h.make_graph([h.make_node("Neg", ["m8"], ["i8n"])], "inner_else", [],
                              [vi("i8n", ["batch", 6])])
    other = h.make_graph(
        [h.make_node("MatMul", ["x", "w8"], ["m8"]),
         h.make_node("Shape", ["x"], ["xs"]),
         h.make_node("Gather", ["xs", "one"], ["cols"], axis=0),
         h.make_node("Equal", ["cols", "four"], ["is4"]),
         h.make_node("If", ["is4"], ["y8"], then_branch=inner_then, else_branch=inner_else)],
        "else_8k", [], [vi("y8", ["batch", 6])],
        [init("w8", w8), init("one", np.int64(1)), init("four", np.int64(4))])
    nodes = [h.make_node("Equal", ["sr", "k16000"], ["is16k"], name="/Equal"),
             h.make_node("If", ["is16k"], ["output"], then_branch=then, else_branch=other,
                         name="/If")]
    g = h.make_graph(nodes, "vad", [vi("x", ["batch", 4]), vi("sr", [], T.INT64)],
                     [vi("output", ["batch", 6])],
                     [init("k16000", np.int64(16000)),
                      init("bias", R.standard_normal(6).astype(np.float32))])
    return save(g, path, opset=16)


def torchscript_loop(path: Path, trips: int = 5) -> Path:
    """A TorchScript-style Loop: constant trip count, cond input true, the
    body's cond output an Identity of its cond input, one loop-carried state
    and one scan output; the body reads an outer weight and the iteration
    number."""
    body = h.make_graph(
        [h.make_node("Identity", ["cond_in"], ["cond_out"]),
         h.make_node("MatMul", ["h_in", "w"], ["hw"]),
         h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
         h.make_node("Mul", ["fi", "step"], ["di"]),
         h.make_node("Add", ["hw", "di"], ["pre"]),
         h.make_node("Tanh", ["pre"], ["h_out"]),
         h.make_node("ReduceSum", ["h_out"], ["s"], keepdims=0)],
        "loop_body", [vi("i", [], T.INT64), vi("cond_in", [], T.BOOL), vi("h_in", [1, 4])],
        [vi("cond_out", [], T.BOOL), vi("h_out", [1, 4]), vi("s", [])],
        [init("step", np.float32(0.25))])
    nodes = [h.make_node("Loop", ["trips", "true", "h0"], ["h_final", "sums"], body=body,
                         name="/Loop")]
    g = h.make_graph(nodes, "loop", [vi("h0", [1, 4])],
                     [vi("h_final", [1, 4]), vi("sums", [trips])],
                     [init("trips", np.int64(trips)), init("true", np.bool_(True)),
                      init("w", (R.standard_normal((4, 4)) * 0.5).astype(np.float32))])
    return save(g, path, opset=13)


def scan_cumsum(path: Path, reverse: bool = False) -> Path:
    """Scan over the rows of x (axis 1, optionally reversed): a running sum state
    and a per-step output stacked on axis 1."""
    body = h.make_graph(
        [h.make_node("Add", ["acc_in", "row"], ["acc_out"]),
         h.make_node("Mul", ["acc_out", "row"], ["o"])],
        "scan_body", [vi("acc_in", [2]), vi("row", [2])], [vi("acc_out", [2]), vi("o", [2])])
    nodes = [h.make_node("Scan", ["acc0", "x"], ["acc", "ys"], body=body, num_scan_inputs=1,
                         scan_input_axes=[1], scan_input_directions=[int(reverse)],
                         scan_output_axes=[-1], name="/Scan")]
    g = h.make_graph(nodes, "scan", [vi("acc0", [2]), vi("x", [2, 5])],
                     [vi("acc", [2]), vi("ys", [2, 5])])
    return save(g, path, opset=16)

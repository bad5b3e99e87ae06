"""A small speech encoder as PyTorch's ONNX export writes it, and the two
quantized models ONNX Runtime's quantizer makes of it.

The float model (`speech_encoder`): log-mel frames [batch_size, mels,
frames] (the batch symbolic, as torch.onnx.export with dynamic_axes gives
it), a Conv1d front end (two convolutions, the second with stride 2, each
followed by GELU), the frames transposed to [batch, seq, hidden], then
encoder blocks: MatMul + Add projections with weights stored [in, out],
multi-head attention through Shape -> Gather -> Unsqueeze -> Concat ->
Reshape and Transpose, MatMul(q, k^T) / sqrt(d), Softmax, residual Adds,
LayerNormalization and a GELU feed-forward (the Erf decomposition torch
writes below opset 20, or the Gelu op). Pre-norm blocks end with a final
LayerNormalization (Whisper's encoder); post-norm blocks are
nn.TransformerEncoderLayer's default.

`quantize_dynamic_model` and `quantize_static_model` run
onnxruntime.quantization on it: DynamicQuantizeLinear + MatMulInteger /
ConvInteger, and QDQ pairs (calibrated on random frames from a fixed seed).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

INPUT = "input_features"


class _Graph:
    """Nodes and initializers as an exporter names them (/blocks.0/attn/...)."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, name: str, value) -> str:
        self.inits.append(nh.from_array(np.asarray(value), name))
        return name

    def weight(self, name: str, shape, fan_in: int) -> str:
        w = self.rng.standard_normal(shape) / np.sqrt(fan_in)
        return self.const(name, w.astype(np.float32))

    def node(self, op: str, inputs, name: str, **attrs) -> str:
        out = f"{name}_output_0"
        self.nodes.append(h.make_node(op, list(inputs), [out], name=name, **attrs))
        return out

    def linear(self, x: str, scope: str, n_in: int, n_out: int, bias: bool = True) -> str:
        """nn.Linear on a 3-D input: MatMul by the transposed weight, Add bias."""
        y = self.node("MatMul", [x, self.weight(f"onnx::MatMul_{scope}", (n_in, n_out), n_in)],
                      f"{scope}/MatMul")
        if not bias:
            return y
        b = self.const(f"{scope}.bias", (0.1 * self.rng.standard_normal(n_out)).astype(np.float32))
        return self.node("Add", [b, y], f"{scope}/Add")

    def gelu(self, x: str, scope: str, form: str) -> str:
        if form == "op":
            return self.node("Gelu", [x], f"{scope}/Gelu")
        d = self.node("Div", [x, self.const(f"{scope}/Constant", np.float32(np.sqrt(2)))],
                      f"{scope}/Div")
        e = self.node("Erf", [d], f"{scope}/Erf")
        a = self.node("Add", [e, self.const(f"{scope}/Constant_1", np.float32(1))],
                      f"{scope}/Add")
        m = self.node("Mul", [x, a], f"{scope}/Mul")
        return self.node("Mul", [m, self.const(f"{scope}/Constant_2", np.float32(0.5))],
                         f"{scope}/Mul_1")

    def layer_norm(self, x: str, scope: str, hidden: int) -> str:
        g = self.const(f"{scope}.weight", (1 + 0.1 * self.rng.standard_normal(hidden))
                       .astype(np.float32))
        b = self.const(f"{scope}.bias", (0.1 * self.rng.standard_normal(hidden))
                       .astype(np.float32))
        return self.node("LayerNormalization", [x, g, b], f"{scope}/LayerNormalization",
                         axis=-1, epsilon=1e-5)

    def heads_shape(self, x: str, scope: str, tail) -> str:
        """[batch, *tail] with the batch read from x at run time."""
        s = self.node("Shape", [x], f"{scope}/Shape")
        n = self.node("Gather", [s, self.const(f"{scope}/Constant", np.int64(0))],
                      f"{scope}/Gather", axis=0)
        n1 = self.node("Unsqueeze", [n, self.const(f"{scope}/Constant_1", np.array([0]))],
                       f"{scope}/Unsqueeze")
        return self.node("Concat", [n1, self.const(f"{scope}/Constant_2", np.array(tail))],
                         f"{scope}/Concat", axis=0)


def _attention(g: _Graph, x: str, scope: str, hidden: int, heads: int) -> str:
    d = hidden // heads
    split = g.heads_shape(x, f"{scope}/split", [-1, heads, d])
    q = g.linear(x, f"{scope}/query", hidden, hidden)
    k = g.linear(x, f"{scope}/key", hidden, hidden, bias=False)   # Whisper's key has none
    v = g.linear(x, f"{scope}/value", hidden, hidden)
    qh = g.node("Transpose", [g.node("Reshape", [q, split], f"{scope}/Reshape")],
                f"{scope}/Transpose", perm=[0, 2, 1, 3])
    kt = g.node("Transpose", [g.node("Reshape", [k, split], f"{scope}/Reshape_1")],
                f"{scope}/Transpose_1", perm=[0, 2, 3, 1])
    vh = g.node("Transpose", [g.node("Reshape", [v, split], f"{scope}/Reshape_2")],
                f"{scope}/Transpose_2", perm=[0, 2, 1, 3])
    scores = g.node("Div", [g.node("MatMul", [qh, kt], f"{scope}/MatMul"),
                            g.const(f"{scope}/Constant", np.float32(np.sqrt(d)))],
                    f"{scope}/Div")
    probs = g.node("Softmax", [scores], f"{scope}/Softmax", axis=-1)
    ctx = g.node("Transpose", [g.node("MatMul", [probs, vh], f"{scope}/MatMul_1")],
                 f"{scope}/Transpose_3", perm=[0, 2, 1, 3])
    merge = g.heads_shape(x, f"{scope}/merge", [-1, hidden])
    ctx = g.node("Reshape", [ctx, merge], f"{scope}/Reshape_3")
    return g.linear(ctx, f"{scope}/out", hidden, hidden)


def _block(g: _Graph, x: str, scope: str, hidden: int, heads: int, gelu: str,
           pre_norm: bool) -> str:
    def ffn(v):
        v = g.gelu(g.linear(v, f"{scope}/fc1", hidden, 2 * hidden), f"{scope}/act", gelu)
        return g.linear(v, f"{scope}/fc2", 2 * hidden, hidden)
    if pre_norm:
        x = g.node("Add", [x, _attention(g, g.layer_norm(x, f"{scope}/attn_ln", hidden),
                                         f"{scope}/attn", hidden, heads)], f"{scope}/Add")
        return g.node("Add", [x, ffn(g.layer_norm(x, f"{scope}/mlp_ln", hidden))],
                      f"{scope}/Add_1")
    x = g.layer_norm(g.node("Add", [x, _attention(g, x, f"{scope}/attn", hidden, heads)],
                            f"{scope}/Add"), f"{scope}/norm1", hidden)
    return g.layer_norm(g.node("Add", [x, ffn(x)], f"{scope}/Add_1"), f"{scope}/norm2", hidden)


def speech_encoder(mels: int = 16, frames: int = 32, hidden: int = 64, heads: int = 4,
                   layers: int = 2, gelu: str = "erf", pre_norm: bool = True,
                   seed: int = 0) -> onnx.ModelProto:
    """The float encoder: [batch_size, mels, frames] -> [batch_size,
    frames / 2, hidden]; gelu "erf" (opset 17) or "op" (opset 20)."""
    g = _Graph(seed)
    x = g.node("Conv", [INPUT, g.weight("conv1.weight", (hidden, mels, 3), 3 * mels),
                        g.const("conv1.bias", np.zeros(hidden, np.float32))],
               "/conv1/Conv", kernel_shape=[3], pads=[1, 1], strides=[1], dilations=[1],
               group=1)
    x = g.gelu(x, "/gelu1", gelu)
    x = g.node("Conv", [x, g.weight("conv2.weight", (hidden, hidden, 3), 3 * hidden),
                        g.const("conv2.bias", (0.1 * g.rng.standard_normal(hidden))
                                .astype(np.float32))],
               "/conv2/Conv", kernel_shape=[3], pads=[1, 1], strides=[2], dilations=[1],
               group=1)
    x = g.node("Transpose", [g.gelu(x, "/gelu2", gelu)], "/Transpose", perm=[0, 2, 1])
    for i in range(layers):
        x = _block(g, x, f"/blocks.{i}", hidden, heads, gelu, pre_norm)
    if pre_norm:
        x = g.layer_norm(x, "/ln_post", hidden)
    g.nodes[-1].output[0] = "last_hidden_state"
    graph = h.make_graph(
        g.nodes, "main_graph",
        [h.make_tensor_value_info(INPUT, T.FLOAT, ["batch_size", mels, frames])],
        [h.make_tensor_value_info("last_hidden_state", T.FLOAT,
                                  ["batch_size", frames // 2, hidden])], g.inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 20 if gelu == "op" else 17)],
                         producer_name="pytorch", producer_version="2.1.0")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def frames(shape, seed: int) -> np.ndarray:
    """Log-mel-like input: standard normal frames from a fixed seed."""
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def quantize_dynamic_model(model: onnx.ModelProto, dst: Path) -> Path:
    """onnxruntime.quantization.quantize_dynamic with its defaults (int8
    weights, uint8 activations quantized at run time)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    src = dst.with_name(dst.stem + ".float.onnx")
    onnx.save(model, str(src))
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
    return dst


def quantize_static_model(model: onnx.ModelProto, dst: Path, samples: int = 4,
                          activations: str = "QUInt8", weights: str = "QInt8") -> Path:
    """onnxruntime.quantization.quantize_static in QDQ form, per-channel
    weights (U8S8 by default), calibrated (MinMax) on `samples` random
    inputs of batch 1 from a fixed seed."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    src = dst.with_name(dst.stem + ".float.onnx")
    onnx.save(model, str(src))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    shape = [1] + [d.dim_value for d in dims[1:]]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.data = iter([{INPUT: frames(shape, seed)} for seed in range(samples)])

        def get_next(self):
            return next(self.data, None)
    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=getattr(QuantType, activations),
                    weight_type=getattr(QuantType, weights))
    return dst


def u8s8_inexact() -> str:
    """Why ONNX Runtime's U8S8 sums are not exact on this CPU, "" when they
    are: on x86 without AVX-VNNI or AVX512-VNNI its kernels use vpmaddubsw,
    which saturates each pair of uint8 x int8 products at int16."""
    import platform
    from aot.deploy.host import cpu_flags
    if platform.machine() not in ("x86_64", "AMD64"):
        return ""
    if {"avx512_vnni", "avx_vnni"} & cpu_flags():
        return ""
    return "this x86 CPU lacks VNNI: ONNX Runtime's U8S8 kernels saturate at int16 here"

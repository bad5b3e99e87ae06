"""Convolutions in the shapes real exporters write, as ONNX built with
onnx.helper (never shipped): the 1-D conv jax2tf / tf2onnx write as a 2-D
one (NHWC transposes around an NCHW Conv whose kernel is Kx1 or 1xK), a
plain 1-D Conv, dilated and grouped convs, many channels over a small map.

Each builder returns the serialized model; `scale` divides every spatial
and channel size so that tests run the same shapes small. Weights come
from a fixed seed, scaled by fan-in.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


@dataclass(frozen=True)
class ConvShape:
    """One Conv: NCHW (or NCL) input `shape`, `out` channels, `kernel`,
    `dilations`, `group`; `nhwc`: the model's input and output are
    channels-last, with Transposes around the Conv as tf2onnx writes."""
    name: str
    shape: tuple[int, ...]
    out: int
    kernel: tuple[int, ...]
    dilations: tuple[int, ...] | None = None
    group: int = 1
    nhwc: bool = False

    def macs(self) -> int:
        return int(np.prod(self.shape[2:])) * self.out * self.shape[1] // self.group * int(
            np.prod(self.kernel))


# The host's cliffs: each must run on its family's fast path.
SHAPES = (
    ConvShape("conv1d_kx1_nhwc", (1, 256, 2048, 1), 512, (5, 1), nhwc=True),
    ConvShape("conv1d_1xk_nhwc", (1, 256, 1, 2048), 512, (1, 5), nhwc=True),
    ConvShape("conv1d", (1, 256, 2048), 512, (5,)),
    ConvShape("dilated_3x3", (1, 64, 56, 56), 64, (3, 3), dilations=(2, 2)),
    ConvShape("grouped_3x3", (1, 128, 28, 28), 128, (3, 3), group=4),
    ConvShape("wide_3x3_4x4", (1, 512, 4, 4), 512, (3, 3)),
)


def scaled(s: ConvShape, scale: int) -> ConvShape:
    """The same shape with spatial sizes and channels divided by `scale`
    (a size of 1 stays 1; channels stay a multiple of the groups)."""
    def div(v: int, floor: int = 1) -> int:
        return v if v == 1 else max(floor, v // scale)
    chans = div(s.shape[1], s.group)
    out = div(s.out, s.group)
    return ConvShape(s.name, (s.shape[0], chans - chans % s.group,
                              *[div(v, 2 * max(s.kernel)) for v in s.shape[2:]]),
                     out - out % s.group, s.kernel, s.dilations, s.group, s.nhwc)


def conv_model(s: ConvShape, seed: int = 0) -> bytes:
    """The ONNX model of one ConvShape, padded to keep the spatial size."""
    rng = np.random.default_rng(seed)
    cin = s.shape[1]
    w = rng.standard_normal((s.out, cin // s.group, *s.kernel)).astype(np.float32)
    w /= np.sqrt(cin // s.group * np.prod(s.kernel))
    b = rng.standard_normal(s.out).astype(np.float32) * 0.1
    dil = s.dilations or (1,) * len(s.kernel)
    pads = [(k - 1) * d // 2 for k, d in zip(s.kernel, dil)]
    rest = [(k - 1) * d - p for k, d, p in zip(s.kernel, dil, pads)]
    attrs = dict(kernel_shape=list(s.kernel), pads=pads + rest, group=s.group)
    if s.dilations:
        attrs["dilations"] = list(s.dilations)
    rank = len(s.shape)
    to_last = [0, *range(2, rank), 1]
    to_first = [0, rank - 1, *range(1, rank - 1)]
    out_shape = [s.shape[0], s.out, *s.shape[2:]]
    nodes, x_shape, y_shape = [], list(s.shape), out_shape
    x, y = "x", "y"
    if s.nhwc:
        x_shape = [s.shape[i] for i in to_last]
        y_shape = [out_shape[i] for i in to_last]
        nodes.append(helper.make_node("Transpose", ["x"], ["x_nchw"], perm=to_first))
        x, y = "x_nchw", "y_nchw"
    nodes.append(helper.make_node("Conv", [x, "w", "b"], [y], **attrs))
    if s.nhwc:
        nodes.append(helper.make_node("Transpose", ["y_nchw"], ["y"], perm=to_last))
    graph = helper.make_graph(
        nodes, s.name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model.SerializeToString()


def input_of(s: ConvShape, seed: int = 1) -> np.ndarray:
    """A random input of the model's shape (channels-last with `nhwc`)."""
    shape = list(s.shape)
    if s.nhwc:
        shape = [shape[0], *shape[2:], shape[1]]
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

"""TFLite models with MediaPipe's custom ops, as MediaPipe's exporters write
them (aot.testing.tflite_builder): builtin convolutions around the CUSTOM
operators, whose options are the raw bytes of the C structs MediaPipe's
kernels cast them to (TfLitePoolParams, TfLiteTransposeConvParams, padding
SAME = 1, VALID = 2) or flexbuffer maps (the transforms, version 2)."""
from __future__ import annotations

import struct

import numpy as np
from flatbuffers import flexbuffers

from aot.testing.tflite_builder import TFLiteBuilder

SAME, VALID = 1, 2        # TfLitePadding


def pool_params(padding: int, stride: int, kernel: int, activation: int = 0) -> bytes:
    """A TfLitePoolParams: padding, strides, filter, activation and the
    computed padding values (zeros, as the converter leaves them)."""
    return struct.pack("<6i4i", padding, stride, stride, kernel, kernel, activation, 0, 0, 0, 0)


def transpose_conv_params(padding: int, stride: int) -> bytes:
    """A TfLiteTransposeConvParams: padding, strides, activation (none)."""
    return struct.pack("<4i", padding, stride, stride, 0)


def _conv(m: TFLiteBuilder, x: int, shape_in, out_c: int, k: int, name: str, rng,
          act: int = 1) -> int:
    """A builtin CONV_2D, SAME, stride 1, with a fused activation (1: RELU)."""
    w = m.const(f"{name}/w", (rng.standard_normal((out_c, k, k, shape_in[3])) * 0.3)
                .astype(np.float32))
    b = m.const(f"{name}/b", (rng.standard_normal(out_c) * 0.1).astype(np.float32))
    y = m.tensor(name, [*shape_in[:3], out_c], "float32")
    m.op("CONV_2D", [x, w, b], [y], "Conv2DOptions", Padding=0, StrideW=1, StrideH=1,
         FusedActivationFunction=act)
    return y


def upsampling_model(seed: int = 0) -> bytes:
    """The decoder tail of a selfie-segmentation net: conv, a stride-2
    Convolution2DTransposeBias (SAME, 2x2 kernel), a sigmoid mask."""
    rng = np.random.default_rng(seed)
    m = TFLiteBuilder()
    x = m.tensor("input", [1, 8, 8, 4], "float32")
    h = _conv(m, x, (1, 8, 8, 4), 8, 3, "conv", rng)
    w = m.const("up/w", (rng.standard_normal((6, 3, 3, 8)) * 0.3).astype(np.float32))
    b = m.const("up/b", (rng.standard_normal(6) * 0.1).astype(np.float32))
    up = m.tensor("up", [1, 16, 16, 6], "float32")
    m.custom("Convolution2DTransposeBias", [h, w, b], [up], transpose_conv_params(SAME, 2))
    mask = m.tensor("mask", [1, 16, 16, 6], "float32")
    m.op("LOGISTIC", [up], [mask])
    return m.build([x], [mask])


def unpooling_model(seed: int = 0) -> bytes:
    """An encoder-decoder of a hair-segmentation net: conv, 2x2
    MaxPoolingWithArgmax2D (VALID), conv, MaxUnpooling2D by the pool's
    indices, conv."""
    rng = np.random.default_rng(seed)
    m = TFLiteBuilder()
    x = m.tensor("input", [1, 12, 12, 3], "float32")
    h = _conv(m, x, (1, 12, 12, 3), 8, 3, "enc", rng)
    pooled = m.tensor("pool", [1, 6, 6, 8], "float32")
    where = m.tensor("pool/indices", [1, 6, 6, 8], "float32")
    m.custom("MaxPoolingWithArgmax2D", [h], [pooled, where], pool_params(VALID, 2, 2))
    mid = _conv(m, pooled, (1, 6, 6, 8), 8, 3, "mid", rng)
    up = m.tensor("unpool", [1, 12, 12, 8], "float32")
    m.custom("MaxUnpooling2D", [mid, where], [up], pool_params(VALID, 2, 2))
    out = _conv(m, up, (1, 12, 12, 8), 2, 1, "head", rng, act=0)
    return m.build([x], [out])


def landmarks_model() -> bytes:
    """Face-landmark refinement's geometry: Landmarks2TransformMatrix on
    the landmarks, TransformTensorBilinear of the image by that matrix, and
    the landmarks mapped by it (TransformLandmarks)."""
    m = TFLiteBuilder()
    image = m.tensor("image", [1, 16, 16, 3], "float32")
    pts = m.tensor("landmarks", [1, 6, 3], "float32")
    matrix = m.tensor("matrix", [1, 4, 4], "float32")
    m.custom("Landmarks2TransformMatrix", [pts], [matrix], bytes(flexbuffers.Dumps({
        "subset_idxs": [0, 1, 2, 3, 4], "left_rotation_idx": 0, "right_rotation_idx": 1,
        "target_rotation_radians": 0.0, "output_height": 8, "output_width": 8,
        "scale_x": 1.5, "scale_y": 1.5})), version=2)
    crop = m.tensor("crop", [1, 8, 8, 3], "float32")
    m.custom("TransformTensorBilinear", [image, matrix], [crop],
             bytes(flexbuffers.Dumps({"output_height": 8, "output_width": 8})), version=2)
    moved = m.tensor("moved", [1, 6, 3], "float32")
    m.custom("TransformLandmarks", [pts, matrix], [moved], version=2)
    return m.build([image, pts], [crop, moved, matrix])

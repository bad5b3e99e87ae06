"""MediaPipe's custom TFLite ops (mediapipe/util/tflite/operations/*.cc), with
the semantics of MediaPipe's CPU kernels, all on float32 NHWC tensors:

- `mediapipe.Convolution2DTransposeBias`: a transposed convolution, weight
  [O, KH, KW, I], bias [O]; SAME crops the full output by
  P = max(0, K - (in - 1) % stride - 1), P // 2 of it at the top/left.
- `mediapipe.MaxPoolingWithArgmax2D`: max pooling and, per output, the
  position of the first maximum inside its window, ky * KW + kx, written as
  a float plus 0.1 (the kernel's own encoding); then the fused activation.
- `mediapipe.MaxUnpooling2D`: zeros of [N, H * KH, W * KW, C], then each
  input value stored at the position its index names (later ones win). The
  kernel pads as TFLite's ComputePadding from that output back to the input,
  whatever the padding mode says; an index landing outside the output
  writes nothing (MediaPipe's kernel would write out of bounds).
- `mediapipe.TransformTensorBilinear` (version 2): output pixel (x, y) reads
  the input bilinearly at the first two rows of the 4x4 matrix (input 1)
  applied to (x, y, 0, 1), corrected for aligned corners; a point outside
  [0, W - 1] x [0, H - 1] gives 0, a missing neighbour reads 0. Batch 1.
- `mediapipe.TransformLandmarks` (version 2): each landmark [N, D] (D 2 or 3)
  has its x, y mapped by the matrix's first two rows; z is kept.
- `mediapipe.Landmarks2TransformMatrix` (version 2): the 4x4 matrix of the
  crop around the subset's landmarks rotated so the left -> right pair
  points at target_rotation_radians, scaled to output_width x output_height.

The attributes are what the TFLite importer decodes from the custom options
(aot/frontend/tflite/mediapipe.py). Lowering: aot/lower/rules/mediapipe.py.
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from aot.ir.graph import TensorType
from aot.ops.elementwise import arity
from aot.ops.registry import Call, Pattern, Sig, register

F32 = "float32"
# What runs these ops besides aot. LiteRT has no kernels of its own for them:
# its default delegate, XNNPACK, runs the first three (a model with them
# cannot load with the delegates off); the transforms have CPU kernels only
# in MediaPipe's own resolver, which no runtime here carries.
XNNPACK_OPS = ("mediapipe.Convolution2DTransposeBias", "mediapipe.MaxPoolingWithArgmax2D",
               "mediapipe.MaxUnpooling2D")
NO_RUNTIME_OPS = ("mediapipe.TransformTensorBilinear", "mediapipe.TransformLandmarks",
                  "mediapipe.Landmarks2TransformMatrix")
# MediaPipe's activation range of MaxPoolingWithArgmax2D (CalculateActivationRange)
ACTIVATION_RANGES = {"NONE": (-math.inf, math.inf), "RELU": (0.0, math.inf),
                     "RELU_N1_TO_1": (-1.0, 1.0), "RELU6": (0.0, 6.0)}
# The index output's encoding: MediaPipe adds 0.1 so that truncation reads it back
INDEX_BIAS = np.float32(0.1)


def _floats(sig: Sig, ranks: Mapping[int, int]) -> None:
    for i, rank in ranks.items():
        t = sig.in_types[i]
        if t.dtype != F32 or len(t.shape) != rank:
            raise sig.fail(f"input {i} must be a {rank}-D float32 tensor, got {t}")


# ---- Convolution2DTransposeBias --------------------------------------------------------------

def transpose_conv_crop(size: int, kernel: int, stride: int, padding: str) -> tuple[int, int]:
    """(output size, rows cropped before it) along one axis."""
    total = max(0, kernel - (size - 1) % stride - 1) if padding == "SAME" else 0
    return stride * (size - 1) + kernel - total, total // 2


def transpose_conv_geometry(sig_or_call) -> tuple[tuple[int, int], tuple[int, int],
                                                  tuple[int, int]]:
    """(output H, W), the crops (top, left) and the strides, from the types."""
    x, w = sig_or_call.in_types[0], sig_or_call.in_types[1]
    strides = tuple(sig_or_call.attrs["strides"])
    padding = sig_or_call.attrs["padding"]
    out, crop = zip(*(transpose_conv_crop(x.shape[1 + k], w.shape[1 + k], strides[k], padding)
                      for k in range(2)))
    return tuple(out), tuple(crop), strides


def _infer_transpose_conv(sig: Sig):
    _floats(sig, {0: 4, 1: 4, 2: 1})
    x, w, b = sig.in_types
    if w.shape[3] != x.shape[3] or b.shape != (w.shape[0],):
        raise sig.fail(f"weight {list(w.shape)} must be [O, KH, KW, {x.shape[3]}] and bias "
                       f"{list(b.shape)} [O]")
    (oh, ow), _, _ = transpose_conv_geometry(sig)
    return [TensorType((x.shape[0], oh, ow, w.shape[0]), F32)]


def _transpose_conv_macs(call: Call) -> int:
    w = call.in_types[1]
    return call.in_types[0].size * (w.size // w.shape[3])


@register("mediapipe.Convolution2DTransposeBias", infer=arity(3, 3)(_infer_transpose_conv),
          pattern=Pattern.OUT_ELEMWISE_FUSABLE, macs=_transpose_conv_macs)
def _transpose_conv(call: Call, args):
    x, w, b = (np.asarray(a, np.float64) for a in args)
    (oh, ow), (top, left), (sh, sw) = transpose_conv_geometry(call)
    n, h, wd, _ = x.shape
    kh, kw = w.shape[1:3]
    full = np.zeros((n, sh * (h - 1) + kh, sw * (wd - 1) + kw, w.shape[0]))
    for ky in range(kh):      # each input pixel adds its taps where they land
        for kx in range(kw):
            full[:, ky:ky + sh * (h - 1) + 1:sh, kx:kx + sw * (wd - 1) + 1:sw] += np.einsum(
                "nhwi,oi->nhwo", x, w[:, ky, kx, :])
    return [(full[:, top:top + oh, left:left + ow] + b).astype(np.float32)]


# ---- MaxPoolingWithArgmax2D ------------------------------------------------------------------

def pool_geometry(sig_or_call) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int],
                                        tuple[int, int]]:
    """(output H, W), the pads (top, left), the kernel and the strides:
    TFLite's windowed output size and ComputePadding."""
    x = sig_or_call.in_types[0]
    a = sig_or_call.attrs
    kernel, strides = tuple(a["kernel"]), tuple(a["strides"])
    out, pads = [], []
    for k in range(2):
        size = x.shape[1 + k]
        o = (-(-size // strides[k]) if a["padding"] == "SAME"
             else (size - kernel[k] + strides[k]) // strides[k])
        out.append(o)
        pads.append(max(0, (o - 1) * strides[k] + kernel[k] - size) // 2)
    return tuple(out), tuple(pads), kernel, strides


def _infer_pool_argmax(sig: Sig):
    _floats(sig, {0: 4})
    (oh, ow), _, _, _ = pool_geometry(sig)
    if oh < 1 or ow < 1:
        raise sig.fail(f"a {sig.attrs['kernel']} window leaves no output of input "
                       f"{list(sig.in_types[0].shape)}")
    ty = TensorType((sig.in_types[0].shape[0], oh, ow, sig.in_types[0].shape[3]), F32)
    return [ty, ty]


@register("mediapipe.MaxPoolingWithArgmax2D", infer=arity(1, 1)(_infer_pool_argmax),
          pattern=Pattern.OPAQUE)
def _pool_argmax(call: Call, args):
    x = np.asarray(args[0], np.float32)
    (oh, ow), (pt, pl), (kh, kw), (sh, sw) = pool_geometry(call)
    n, h, w, c = x.shape
    best = np.full((n, oh, ow, c), np.finfo(np.float32).min, np.float32)
    where = np.zeros((n, oh, ow, c), np.int64)
    iy0 = np.arange(oh) * sh - pt
    ix0 = np.arange(ow) * sw - pl
    for ky in range(kh):            # window order: the first maximum stays
        for kx in range(kw):
            iy, ix = iy0 + ky, ix0 + kx
            ok = ((iy >= 0) & (iy < h))[:, None] & ((ix >= 0) & (ix < w))[None, :]
            cur = x[:, np.clip(iy, 0, h - 1)][:, :, np.clip(ix, 0, w - 1)]
            better = ok[None, :, :, None] & (cur > best)
            best = np.where(better, cur, best)
            where = np.where(better, ky * kw + kx, where)
    lo, hi = ACTIVATION_RANGES[call.attrs["activation"]]
    return [np.clip(best, lo, hi).astype(np.float32),
            where.astype(np.float32) + INDEX_BIAS]


# ---- MaxUnpooling2D --------------------------------------------------------------------------

def unpool_geometry(sig_or_call) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int],
                                          tuple[int, int]]:
    """(output H, W) = input x kernel, the pads (top, left) of the pooling
    it undoes, the kernel and the strides."""
    x = sig_or_call.in_types[0]
    kernel, strides = tuple(sig_or_call.attrs["kernel"]), tuple(sig_or_call.attrs["strides"])
    out = tuple(x.shape[1 + k] * kernel[k] for k in range(2))
    pads = tuple(max(0, (x.shape[1 + k] - 1) * strides[k] + kernel[k] - out[k]) // 2
                 for k in range(2))
    return out, pads, kernel, strides


def _infer_unpool(sig: Sig):
    _floats(sig, {0: 4, 1: 4})
    x, idx = sig.in_types
    if idx.shape != x.shape:
        raise sig.fail(f"indices {list(idx.shape)} must have the input's shape {list(x.shape)}")
    (oh, ow), _, _, _ = unpool_geometry(sig)
    return [TensorType((x.shape[0], oh, ow, x.shape[3]), F32)]


@register("mediapipe.MaxUnpooling2D", infer=arity(2, 2)(_infer_unpool), pattern=Pattern.OPAQUE)
def _unpool(call: Call, args):
    x, idx = (np.asarray(a, np.float32) for a in args)
    (oh, ow), (pt, pl), (kh, kw), (sh, sw) = unpool_geometry(call)
    n, h, w, c = x.shape
    out = np.zeros((n, oh, ow, c), np.float32)
    k = np.trunc(idx).astype(np.int64)          # C's float -> int
    ny, nx, nc = np.meshgrid(np.arange(h), np.arange(w), np.arange(c), indexing="ij")
    for b in range(n):
        oy = ny * sh - pt + k[b] // kw
        ox = nx * sw - pl + k[b] % kw
        ok = (oy >= 0) & (oy < oh) & (ox >= 0) & (ox < ow) & (k[b] >= 0)
        for y, xx, ch, v in zip(oy[ok], ox[ok], nc[ok], x[b][ok]):   # in order: later wins
            out[b, y, xx, ch] = v
    return [out]


# ---- TransformTensorBilinear -----------------------------------------------------------------

def bilinear_rows(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The matrix's first two rows with version 2's aligned-corners
    correction of their translations."""
    rx, ry = m[0].astype(np.float32), m[1].astype(np.float32)
    rx[3] += rx[0] * np.float32(0.5) + rx[1] * np.float32(0.5) - np.float32(0.5)
    ry[3] += ry[0] * np.float32(0.5) + ry[1] * np.float32(0.5) - np.float32(0.5)
    return rx, ry


def _infer_bilinear(sig: Sig):
    _floats(sig, {0: 4})
    x, m = sig.in_types
    if x.shape[0] != 1 or m.dtype != F32 or m.size != 16:
        raise sig.fail(f"takes one image [1, H, W, C] and a 4x4 float32 matrix, got {x} and {m}")
    oh, ow = sig.attrs["output_size"]
    return [TensorType((1, oh, ow, x.shape[3]), F32)]


@register("mediapipe.TransformTensorBilinear", infer=arity(2, 2)(_infer_bilinear),
          pattern=Pattern.OPAQUE)
def _bilinear(call: Call, args):
    x = np.asarray(args[0], np.float32)[0]
    rx, ry = bilinear_rows(np.asarray(args[1], np.float32).reshape(4, 4))
    h, w, c = x.shape
    oh, ow = call.attrs["output_size"]
    oy, ox = np.meshgrid(np.arange(oh, dtype=np.float32), np.arange(ow, dtype=np.float32),
                         indexing="ij")
    tx = rx[0] * ox + rx[1] * oy + rx[3]
    ty = ry[0] * ox + ry[1] * oy + ry[3]
    inside = (tx >= 0) & (tx <= w - 1) & (ty >= 0) & (ty <= h - 1)
    fx, fy = np.floor(tx), np.floor(ty)

    def read(yy, xx):
        ok = inside & (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
        v = x[np.clip(yy, 0, h - 1).astype(np.int64), np.clip(xx, 0, w - 1).astype(np.int64)]
        return np.where(ok[..., None], v, np.float32(0))
    right, lower = (tx - fx)[..., None], (ty - fy)[..., None]
    upper_row = (1 - right) * read(fy, fx) + right * read(fy, fx + 1)
    lower_row = (1 - right) * read(fy + 1, fx) + right * read(fy + 1, fx + 1)
    out = lower * lower_row + (1 - lower) * upper_row
    return [np.where(inside[..., None], out, np.float32(0)).astype(np.float32)[None]]


# ---- TransformLandmarks ----------------------------------------------------------------------

def _infer_landmarks(sig: Sig):
    _floats(sig, {0: 3})
    x, m = sig.in_types
    if x.shape[0] != 1 or x.shape[2] not in (2, 3) or m.dtype != F32 or m.size != 16:
        raise sig.fail(f"takes landmarks [1, N, 2 or 3] and a 4x4 float32 matrix, got {x} "
                       f"and {m}")
    return [x]


@register("mediapipe.TransformLandmarks", infer=arity(2, 2)(_infer_landmarks),
          pattern=Pattern.OPAQUE)
def _landmarks(call: Call, args):
    pts = np.asarray(args[0], np.float32)
    m = np.asarray(args[1], np.float32).reshape(4, 4)
    out = pts.copy()
    x, y = pts[..., 0], pts[..., 1]
    out[..., 0] = m[0, 0] * x + m[0, 1] * y + m[0, 3]
    out[..., 1] = m[1, 0] * x + m[1, 1] * y + m[1, 3]
    return [out]


# ---- Landmarks2TransformMatrix ---------------------------------------------------------------

MATRIX_ATTRS = ("subset_idxs", "left_rotation_idx", "right_rotation_idx",
                "target_rotation_radians", "output_height", "output_width", "scale_x", "scale_y")


def _infer_matrix(sig: Sig):
    _floats(sig, {0: 3})
    x = sig.in_types[0]
    a = sig.attrs
    used = [i for pair in a["subset_idxs"] for i in pair] + [a["left_rotation_idx"],
                                                             a["right_rotation_idx"]]
    if x.shape[0] != 1 or x.shape[2] != 3 or max(used) >= x.shape[1]:
        raise sig.fail(f"takes landmarks [1, N, 3] holding landmark {max(used)}, got {x}")
    return [TensorType((1, 4, 4), F32)]


def crop_matrix(a: Mapping, landmarks, m) -> list:
    """The 16 entries (row-major) of Landmarks2TransformMatrix version 2
    over `landmarks` (landmarks(i) -> (x, y) of landmark i), in the
    arithmetic namespace `m` (atan2, cos, sin, max, min), so that the
    reference and the generated code take the same steps."""
    lx, ly = landmarks(a["left_rotation_idx"])
    rx, ry = landmarks(a["right_rotation_idx"])
    rotation = a["target_rotation_radians"] - m.atan2(ry - ly, rx - lx)
    c, s = m.cos(rotation), m.sin(rotation)
    # the subset rotated by `rotation`: its bounding box and its centre
    points = [landmarks(i) for pair in a["subset_idxs"] for i in pair]
    xs = [p[0] * c - p[1] * s for p in points]
    ys = [p[0] * s + p[1] * c for p in points]
    x_max, x_min, y_max, y_min = xs[0], xs[0], ys[0], ys[0]
    for px, py in zip(xs[1:], ys[1:]):
        x_max, x_min = m.max(x_max, px), m.min(x_min, px)
        y_max, y_min = m.max(y_max, py), m.min(y_min, py)
    mx, my = (x_min + x_max) / 2, (y_min + y_max) / 2
    # back by -rotation: cos is even, sin odd
    crop_x, crop_y = mx * c + my * s, my * c - mx * s
    ow, oh = a["output_width"], a["output_height"]
    sx = a["scale_x"] * (x_max - x_min) / ow
    sy = a["scale_y"] * (y_max - y_min) / oh
    # shift(crop) . rotate(-rotation) . scale(sx, sy) . shift(-out / 2)
    dx, dy = -(ow / 2.0), -(oh / 2.0)
    return [c * sx, s * sy, 0.0, crop_x + c * sx * dx + s * sy * dy,
            0.0 - s * sx, c * sy, 0.0, crop_y - s * sx * dx + c * sy * dy,
            0.0, 0.0, 1.0, 0.0,
            0.0, 0.0, 0.0, 1.0]


class Numpy32:
    """crop_matrix's arithmetic on float32 scalars."""
    atan2 = staticmethod(np.arctan2)
    cos = staticmethod(np.cos)
    sin = staticmethod(np.sin)
    max = staticmethod(np.maximum)
    min = staticmethod(np.minimum)


@register("mediapipe.Landmarks2TransformMatrix", infer=arity(1, 1)(_infer_matrix),
          pattern=Pattern.OPAQUE)
def _matrix(call: Call, args):
    pts = np.asarray(args[0], np.float32)[0]
    a = {k: (np.float32(v) if isinstance(v, float) else v) for k, v in call.attrs.items()}
    entries = crop_matrix(a, lambda i: (pts[i, 0], pts[i, 1]), Numpy32)
    return [np.array(entries, np.float32).reshape(1, 4, 4)]

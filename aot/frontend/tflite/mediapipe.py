"""Converters for MediaPipe's custom ops (CUSTOM operators named by their
custom code) for the importer's `_Builder`, and the decoding of their
custom options as MediaPipe's kernels read them:

- Convolution2DTransposeBias: the bytes of a C TfLiteTransposeConvParams
  (padding, stride_width, stride_height, ...), int32 little-endian;
- MaxPoolingWithArgmax2D, MaxUnpooling2D: a TfLitePoolParams (padding,
  stride_width, stride_height, filter_width, filter_height, activation, ...);
  bytes missing from the end read as 0, as the kernels' copy does;
- TransformTensorBilinear, TransformLandmarks, Landmarks2TransformMatrix
  (version 2, the one MediaPipe's CPU resolver registers): a flexbuffer map.

TfLitePadding counts from 1 (SAME) and 2 (VALID), unlike the flatbuffer's
Padding enum. The ops: aot/ops/mediapipe.py.
"""
from __future__ import annotations

import struct
from typing import Any, Callable

from aot.errors import ModelError, UnsupportedError

_PADDING = {1: "SAME", 2: "VALID"}
_ACTIVATION = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6"}
_POOL_FIELDS = ("padding", "stride_width", "stride_height", "filter_width", "filter_height",
                "activation")
_TRANSPOSE_CONV_FIELDS = ("padding", "stride_width", "stride_height")
# custom code -> (converter method, the opcode version MediaPipe registers)
CUSTOM_OPS: dict[str, tuple[str, int]] = {
    "Convolution2DTransposeBias": ("_mp_transpose_conv", 1),
    "MaxPoolingWithArgmax2D": ("_mp_pool_argmax", 1),
    "MaxUnpooling2D": ("_mp_unpool", 1),
    "TransformTensorBilinear": ("_mp_bilinear", 2),
    "TransformLandmarks": ("_mp_landmarks", 2),
    "Landmarks2TransformMatrix": ("_mp_matrix", 2),
}


class MediaPipeOps:
    """`_mp_*` converters; `self` is the importer's _Builder."""

    def custom_converter(self, code: str, version: int) -> Callable | None:
        """The converter of CUSTOM operator `code`, None for one aot does not know."""
        method, registered = CUSTOM_OPS.get(code, (None, 0))
        if method is None:
            return None
        if version != registered:
            raise UnsupportedError(f"{self.op_label}: version {version} of MediaPipe's {code} "
                                   f"(MediaPipe's CPU kernels are version {registered})")
        return getattr(self, method)

    # -- options

    def _c_struct(self, raw: bytes, fields: tuple[str, ...]) -> dict[str, int]:
        size = 4 * len(fields)
        values = struct.unpack(f"<{len(fields)}i", raw[:size].ljust(size, b"\0"))
        return dict(zip(fields, values))

    def _padding(self, value: int) -> str:
        if value not in _PADDING:
            raise ModelError(f"{self.op_label}: padding {value} in its custom options "
                             "(TfLitePadding: 1 SAME, 2 VALID)")
        return _PADDING[value]

    def _positive(self, opts: dict, *names: str) -> tuple[int, ...]:
        bad = [f"{n} {opts[n]}" for n in names if opts[n] < 1]
        if bad:
            raise ModelError(f"{self.op_label}: {', '.join(bad)} in its custom options")
        return tuple(opts[n] for n in names)

    def _flexbuffer(self, raw: bytes) -> dict[str, Any]:
        from flatbuffers import flexbuffers
        try:
            value = flexbuffers.Loads(bytearray(raw)) if raw else {}
        except Exception as e:  # noqa: BLE001 - any failure means unreadable options
            raise ModelError(f"{self.op_label}: custom options are not a flexbuffer "
                             f"({type(e).__name__})") from None
        if not isinstance(value, dict):
            raise ModelError(f"{self.op_label}: custom options are a flexbuffer "
                             f"{type(value).__name__}, not a map")
        return value

    def _number(self, opts: dict, key: str, kind: type, positive: bool = False):
        value = opts.get(key, 0)      # an absent key reads 0, as flexbuffers' null does
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ModelError(f"{self.op_label}: custom option {key} is {value!r}, not a number")
        if positive and value <= 0:
            raise ModelError(f"{self.op_label}: custom option {key} must be positive, "
                             f"got {value}")
        return kind(value)

    # -- converters

    def _mp_transpose_conv(self, op, ins, outs):
        self._need(ins, 3)
        o = self._c_struct(op.custom, _TRANSPOSE_CONV_FIELDS)
        sw, sh = self._positive(o, "stride_width", "stride_height")
        self.emit("mediapipe.Convolution2DTransposeBias", ins[:3], outs,
                  padding=self._padding(o["padding"]), strides=(sh, sw))

    def _pool_attrs(self, raw: bytes) -> dict[str, Any]:
        o = self._c_struct(raw, _POOL_FIELDS)
        sw, sh, fw, fh = self._positive(o, "stride_width", "stride_height", "filter_width",
                                        "filter_height")
        if o["activation"] not in _ACTIVATION:
            raise UnsupportedError(f"{self.op_label}: fused activation {o['activation']} "
                                   "(TfLiteFusedActivation)")
        return {"padding": self._padding(o["padding"]), "strides": (sh, sw),
                "kernel": (fh, fw), "activation": _ACTIVATION[o["activation"]]}

    def _mp_pool_argmax(self, op, ins, outs):
        self._need(ins, 1)
        if len(outs) != 2:
            raise ModelError(f"{self.op_label}: has {len(outs)} outputs, expects 2 "
                             "(values, indices)")
        self.emit("mediapipe.MaxPoolingWithArgmax2D", ins[:1], outs, **self._pool_attrs(op.custom))

    def _mp_unpool(self, op, ins, outs):
        self._need(ins, 2)
        attrs = self._pool_attrs(op.custom)
        # MediaPipe's kernel reads only the window and the strides
        self.emit("mediapipe.MaxUnpooling2D", ins[:2], outs, strides=attrs["strides"],
                  kernel=attrs["kernel"])

    def _mp_bilinear(self, op, ins, outs):
        self._need(ins, 2)
        o = self._flexbuffer(op.custom)
        size = (self._number(o, "output_height", int, True),
                self._number(o, "output_width", int, True))
        self.emit("mediapipe.TransformTensorBilinear", ins[:2], outs, output_size=size)

    def _mp_landmarks(self, op, ins, outs):
        self._need(ins, 2)
        self.emit("mediapipe.TransformLandmarks", ins[:2], outs)

    def _mp_matrix(self, op, ins, outs):
        self._need(ins, 1)
        o = self._flexbuffer(op.custom)
        subset = o.get("subset_idxs") or []
        if not isinstance(subset, list) or not subset or not all(
                isinstance(i, int) and i >= 0 for i in subset):
            raise ModelError(f"{self.op_label}: custom option subset_idxs must be a non-empty "
                             f"list of landmark indices, got {subset!r}")
        if len(subset) % 2:      # MediaPipe pairs an odd last index with itself
            subset = subset + subset[-1:]
        attrs = {"subset_idxs": tuple(zip(subset[::2], subset[1::2])),
                 "left_rotation_idx": self._number(o, "left_rotation_idx", int),
                 "right_rotation_idx": self._number(o, "right_rotation_idx", int),
                 "target_rotation_radians": self._number(o, "target_rotation_radians", float),
                 "output_height": self._number(o, "output_height", int, True),
                 "output_width": self._number(o, "output_width", int, True),
                 "scale_x": self._number(o, "scale_x", float, True),
                 "scale_y": self._number(o, "scale_y", float, True)}
        for key in ("left_rotation_idx", "right_rotation_idx"):
            if attrs[key] < 0:
                raise ModelError(f"{self.op_label}: custom option {key} is {attrs[key]}")
        self.emit("mediapipe.Landmarks2TransformMatrix", ins[:1], outs, **attrs)

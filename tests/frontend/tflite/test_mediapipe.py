"""The importer's reading of MediaPipe's custom ops (aot/frontend/tflite/
mediapipe.py): the options decoded as MediaPipe's kernels read them, and
bad ones refused by op, node and field."""
from __future__ import annotations

import struct

import pytest
from flatbuffers import flexbuffers

from aot.errors import ModelError, UnsupportedError
from aot.frontend.tflite.importer import import_tflite
from aot.testing.tflite_builder import TFLiteBuilder
from support.mediapipe_models import VALID, pool_params, unpooling_model, upsampling_model


def _node(data: bytes, op: str):
    return next(n for n in import_tflite(data, "m").nodes if n.op == op)


def test_struct_options_become_attributes():
    up = _node(upsampling_model(), "mediapipe.Convolution2DTransposeBias")
    assert dict(up.attrs) == {"padding": "SAME", "strides": (2, 2)}
    g = import_tflite(unpooling_model(), "m")
    pool = next(n for n in g.nodes if n.op == "mediapipe.MaxPoolingWithArgmax2D")
    assert dict(pool.attrs) == {"padding": "VALID", "strides": (2, 2), "kernel": (2, 2),
                                "activation": "NONE"}
    assert g.types[pool.outputs[1]].shape == (1, 6, 6, 8)


def _pool_model(options: bytes, version: int = 1) -> bytes:
    m = TFLiteBuilder()
    x = m.tensor("x", [1, 4, 4, 2], "float32")
    v, i = m.tensor("v", [1, 2, 2, 2], "float32"), m.tensor("i", [1, 2, 2, 2], "float32")
    m.custom("MaxPoolingWithArgmax2D", [x], [v, i], options, version)
    return m.build([x], [v, i])


@pytest.mark.parametrize("options, error, match", [
    (struct.pack("<6i", 0, 2, 2, 2, 2, 0), ModelError, "padding 0"),
    (struct.pack("<3i", VALID, 2, 2), ModelError, "filter_width 0, filter_height 0"),
    (struct.pack("<6i", VALID, 2, 2, 2, 2, 4), UnsupportedError, "fused activation 4"),
])
def test_bad_pool_options_are_named(options, error, match):
    with pytest.raises(error, match=f"CUSTOM:MaxPoolingWithArgmax2D node 'v'.*{match}"):
        import_tflite(_pool_model(options), "m")


def test_other_versions_and_unknown_custom_ops_are_refused():
    with pytest.raises(UnsupportedError, match="version 2 of MediaPipe's MaxPoolingWithArgmax2D"):
        import_tflite(_pool_model(pool_params(VALID, 2, 2), version=2), "m")
    m = TFLiteBuilder()
    x, y = m.tensor("x", [1, 4], "float32"), m.tensor("y", [1, 4], "float32")
    m.custom("Resampler", [x], [y])
    with pytest.raises(UnsupportedError, match="unsupported op 'CUSTOM:Resampler' at node 'y'"):
        import_tflite(m.build([x], [y]), "m")


def _bilinear_model(options: bytes) -> bytes:
    m = TFLiteBuilder()
    x, mat = m.tensor("x", [1, 4, 4, 1], "float32"), m.tensor("m", [1, 4, 4], "float32")
    y = m.tensor("y", [1, 2, 2, 1], "float32")
    m.custom("TransformTensorBilinear", [x, mat], [y], options, version=2)
    return m.build([x, mat], [y])


def test_flexbuffer_options_are_read_and_checked():
    ok = _bilinear_model(bytes(flexbuffers.Dumps({"output_height": 2, "output_width": 2})))
    assert _node(ok, "mediapipe.TransformTensorBilinear").attrs["output_size"] == (2, 2)
    with pytest.raises(ModelError, match="output_width must be positive, got 0"):
        import_tflite(_bilinear_model(bytes(flexbuffers.Dumps({"output_height": 2}))), "m")
    with pytest.raises(ModelError, match="node 'y': custom options are"):
        import_tflite(_bilinear_model(bytes(flexbuffers.Dumps([1, 2]))), "m")

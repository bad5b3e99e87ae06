"""`aot verify` on models with MediaPipe's custom ops (tests/support/
mediapipe_models.py). LiteRT runs Convolution2DTransposeBias,
MaxPoolingWithArgmax2D and MaxUnpooling2D only through XNNPACK, its default
delegate, so verify's reference keeps the delegates for them
("litert+xnnpack"); no runtime here runs the transforms, which are compared
with aot's numpy reference of MediaPipe's kernels. On the host and on a
Cortex-A72 under qemu-user."""
from __future__ import annotations

import pytest

from aot.api import verify
from support.mediapipe_models import landmarks_model, unpooling_model, upsampling_model

LITERT = {"upsampling": upsampling_model, "unpooling": unpooling_model}


def _verified(tmp_path, name: str, data: bytes, board: str) -> dict:
    path = tmp_path / f"{name}.tflite"
    path.write_bytes(data)
    out = verify(path, board=board, count=2).to_json()
    assert out["ok"] is True, out
    assert all(r["max_abs_err"] is not None and r["max_abs_err"] < 1e-4
               for r in out["outputs"]), out
    return out


@pytest.mark.parametrize("board", ["host", "qemu-aarch64"])
@pytest.mark.parametrize("name", sorted(LITERT))
def test_against_litert_with_xnnpack(tmp_path, name, board):
    out = _verified(tmp_path, name, LITERT[name](), board)
    assert out["reference"] == "litert+xnnpack", out


def test_transforms_against_the_numpy_reference(tmp_path):
    out = _verified(tmp_path, "landmarks", landmarks_model(), "host")
    assert out["reference"].startswith("numpy-reference"), out
    assert "TransformTensorBilinear" in out["reference"], out

"""A quantized speech encoder (tests/support/speech_models.py: a Conv1d
front end, 2 attention blocks of hidden 64 with 4 heads over 16 frames,
batch dim "batch_size") as ONNX Runtime's quantizer writes it, through
`aot verify` against ONNX Runtime on host and qemu-aarch64, 3 random inputs
each:

- quantize_static, QDQ, U8S8 (uint8 activations, int8 per-channel
  weights): 1-D QLinearConv, QLinearMatMul (the attention's with both
  inputs activations), QLinearSoftmax, QLinearAdd/Mul, LayerNormalization
  in float between its Q/DQ pairs. Its output is a DequantizeLinear's:
  equal to ONNX Runtime's, 0 steps apart.
- quantize_dynamic: DynamicQuantizeLinear, ConvInteger and MatMulInteger
  with run-time zero points, float in between. The integer sums are
  exact; the float steps around them (scales, LayerNormalization, GELU,
  Softmax) round differently from ONNX Runtime's fused kernels
  (MatMulIntegerToFloat, SkipLayerNormalization, Gelu): measured max
  |err| 1.2e-6 over 30 inputs, where ONNX Runtime's own unoptimized and
  optimized runs of the model differ by 9.5e-7.

ONNX Runtime computes U8S8 sums exactly on an x86 with AVX-VNNI (or
AVX512-VNNI); without, its vpmaddubsw kernels saturate pairs of products
and the static model would differ there: skipped with that reason.
"""
from __future__ import annotations

import pytest

import aot
from aot.api import verify
from support.speech_models import (quantize_dynamic_model, quantize_static_model,
                                   speech_encoder, u8s8_inexact)

SHAPES = {"input_features": (1, 16, 32)}
BOARDS = ["host", "qemu-aarch64"]


@pytest.fixture(scope="module")
def static_model(tmp_path_factory):
    return quantize_static_model(speech_encoder(gelu="erf", pre_norm=True),
                                 tmp_path_factory.mktemp("speech") / "encoder_u8s8.onnx")


@pytest.fixture(scope="module")
def dynamic_model(tmp_path_factory):
    return quantize_dynamic_model(speech_encoder(gelu="erf", pre_norm=False),
                                  tmp_path_factory.mktemp("speech") / "encoder_dynamic.onnx")


def _ops(path) -> set[str]:
    g = aot.optimize(aot.load(path, input_shapes=SHAPES))
    return {n.op for f in g.nodes for n in (f.attrs["body"].nodes if f.op == "fused" else [f])}


def test_static_model_runs_integer_kernels(static_model):
    ops = _ops(static_model)
    assert {"QLinearConv", "QLinearMatMul", "QLinearSoftmax", "QLinearAdd",
            "LayerNormalization"} <= ops
    assert not ops & {"Conv", "MatMul", "Softmax"}


def test_dynamic_model_runs_integer_kernels(dynamic_model):
    ops = _ops(dynamic_model)
    assert {"DynamicQuantizeLinear", "ConvInteger", "MatMulInteger"} <= ops
    assert "Conv" not in ops


@pytest.mark.parametrize("board", BOARDS)
def test_static_u8s8_encoder_verifies_exactly(static_model, board, tmp_path):
    if u8s8_inexact():
        pytest.skip(u8s8_inexact())
    out = verify(static_model, board=board, input_shapes=SHAPES, count=3,
                 out_dir=tmp_path / "pkg").check()
    assert out.reference == "onnxruntime" and out.samples == 3
    (row,) = out.outputs
    assert row.max_lsb == 0 and row.max_abs == 0.0, row


@pytest.mark.parametrize("board", BOARDS)
def test_dynamic_encoder_verifies(dynamic_model, board, tmp_path):
    out = verify(dynamic_model, board=board, input_shapes=SHAPES, count=3,
                 out_dir=tmp_path / "pkg").check()
    assert out.reference == "onnxruntime" and out.samples == 3
    (row,) = out.outputs
    assert row.max_abs < 1e-5, row

"""A QOperator ResNet (aot/testing/resnet50.py at a 16th of the channels
on a 32x32 input, quantize_static with uint8 activations) on the x86
boards: QLinearConv on the int8 vector kernels, each bottleneck's
QLinearAdd fused into its last convolution, bit-exact with ONNX Runtime.
The fused add's requantization multiplies by fmaf on float vectors, which
the C spells as the vfmadd intrinsic on x86 (clang left the lane loop
scalar there: those kernels ran at a sixth of the plain convolutions'
rate)."""
from __future__ import annotations

import pytest

from aot.api import verify
from aot.deploy.host import cpu_flags
from aot.targets import get_board
from aot.testing.resnet50 import quantized, resnet50
from support.speech_models import u8s8_inexact


@pytest.mark.parametrize("board, fmadd", [("host", "_mm256_fmadd_ps"),
                                          ("host-avx512", "_mm512_fmadd_ps")])
def test_small_qoperator_resnet_is_exact_and_its_adds_use_vfmadd(board, fmadd, tmp_path):
    if u8s8_inexact():
        pytest.skip(u8s8_inexact())
    if not set(get_board(board).options["cpu_flags"]) <= cpu_flags():
        pytest.skip(f"this CPU lacks {board}'s features")
    fp = tmp_path / "resnet.onnx"
    fp.write_bytes(resnet50(width=16, size=32, classes=10))
    model = quantized(fp, tmp_path / "resnet_u8.onnx", "uint8", samples=2)
    out = verify(model, board=board, count=2, out_dir=tmp_path / "pkg").check()
    (row,) = out.outputs
    assert out.reference == "onnxruntime" and row.max_lsb == 0 and row.max_abs == 0.0, row
    source = "".join(p.read_text() for p in (tmp_path / "pkg" / "src").glob("*kernels*.c"))
    assert "qlinear_add" in source and fmadd in source

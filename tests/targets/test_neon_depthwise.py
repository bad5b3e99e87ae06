"""The AArch64 int8 convolutions' staged rows (aot/lower/kernels/int8_conv.py):
depthwise (SMLAL / SMLAL2 over int16 vectors) at row stride 1 stages the KH
input rows an output row reads as int16 x - zp in a ring (`wide_rows`), so
no tap is tested and each input is widened once, other strides read the
input; first layers (odd depths) stage their window rows as bytes
(`row_bytes`), each quad an unaligned int32 at any byte. Small random
models, packaged for the Pis' cores, bit-exact with tflite-micro under
qemu-aarch64.
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import aot
from aot.api import verify
from support.tflite_models import TinyModel

pytestmark = pytest.mark.skipif(shutil.which("qemu-aarch64") is None,
                                reason="qemu-aarch64 is not installed")

C = 16


def _check(data: bytes, board: str, codegen: str, tmp_path, scratch: str, count: int):
    path = tmp_path / "m.tflite"
    path.write_bytes(data)
    pkg = tmp_path / "pkg"
    aot.package(path, board=board, codegen=codegen, out_dir=pkg)
    if codegen == "c":
        kernels = "\n".join(p.read_text() for p in (pkg / "src").glob("*kernels*.c"))
        assert kernels.count(f"*restrict {scratch}") == count, kernels
    out = verify(pkg, board="qemu-aarch64", source=path)
    assert out["reference"] == "tflite-micro", out
    assert out["ok"] and all(r["max_abs_err"] == 0.0 for r in out["outputs"]), out


def _chain() -> bytes:
    """Depthwise 3x3 SAME (stride 1, ReLU6, zero point not -128), 5x3 SAME
    (stride 1, odd window, no activation), 3x3 VALID at stride 1 and
    3x3 SAME at stride 2, 16 channels over an odd-sized map."""
    rng = np.random.default_rng(11)
    m = TinyModel()
    x = m.tensor("x", [1, 7, 9, C], scale=[0.05], zp=[5])
    layers = [((3, 3), 0, 1, 3, [1, 7, 9, C]), ((5, 3), 0, 1, 0, [1, 7, 9, C]),
              ((3, 3), 1, 1, 1, [1, 5, 7, C]), ((3, 3), 0, 2, 0, [1, 3, 4, C])]
    cur = x
    for k, ((kh, kw), padding, stride, act, shape) in enumerate(layers):
        wscale = rng.uniform(0.002, 0.02, C)
        w = m.tensor(f"w{k}", [1, kh, kw, C], scale=wscale, zp=[0] * C, qdim=3,
                     data=rng.integers(-127, 128, (1, kh, kw, C)))
        b = m.tensor(f"b{k}", [C], "int32", scale=0.05 * wscale, zp=[0] * C,
                     data=rng.integers(-3000, 3000, C))
        y = m.tensor(f"y{k}", shape, scale=[0.05], zp=[-7 + 3 * k])
        m.op("DEPTHWISE_CONV_2D", [cur, w, b], [y], ("DepthwiseConv2DOptions", dict(
            Padding=padding, StrideH=stride, StrideW=stride, DepthMultiplier=1,
            FusedActivationFunction=act)))
        cur = y
    return m.build([x], [cur])


@pytest.mark.parametrize("board, codegen", [("rpi4", "c"), ("rpi5", "llvm")])
def test_depthwise_rows_staged_bit_exact(board, codegen, tmp_path):
    _check(_chain(), board, codegen, tmp_path, "wide_rows", 3)


def _first_layers() -> bytes:
    """Two first layers side by side on one 3-channel image: 3x3 SAME at
    stride 1 (rows in a ring) and 3x3 SAME at stride 2, 8 output channels
    each, the input zero point not -128 (the padding bytes hold it)."""
    rng = np.random.default_rng(12)
    m = TinyModel()
    x = m.tensor("x", [1, 9, 11, 3], scale=[0.05], zp=[9])
    outs = []
    for k, (stride, shape) in enumerate(((1, [1, 9, 11, 8]), (2, [1, 5, 6, 8]))):
        wscale = rng.uniform(0.002, 0.02, 8)
        w = m.tensor(f"w{k}", [8, 3, 3, 3], scale=wscale, zp=[0] * 8,
                     data=rng.integers(-127, 128, (8, 3, 3, 3)))
        b = m.tensor(f"b{k}", [8], "int32", scale=0.05 * wscale, zp=[0] * 8,
                     data=rng.integers(-3000, 3000, 8))
        y = m.tensor(f"y{k}", shape, scale=[0.06], zp=[-3])
        m.op("CONV_2D", [x, w, b], [y], ("Conv2DOptions", dict(
            Padding=0, StrideH=stride, StrideW=stride, FusedActivationFunction=1 - k)))
        outs.append(y)
    return m.build([x], outs)


@pytest.mark.parametrize("board, codegen", [("rpi5", "c"), ("rpi4", "llvm")])
def test_first_layer_byte_rows_bit_exact(board, codegen, tmp_path):
    _check(_first_layers(), board, codegen, tmp_path, "row_bytes", 2)

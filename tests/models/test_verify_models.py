"""`aot verify` on every real model: package for the host, run the package's
harness on the model's saved input, compare with the reference runtime.
The shared models also go through board host-avx512 (512-bit vectors, 32
registers: other tile shapes and the 16-lane helpers), skipped only on a
CPU without its cpu_flags.

Shared models (../shared/models) go through both code generators: integer
models must match tflite-micro bit for bit; float ones LiteRT or ONNX
Runtime within verify's float rule (docs/deploy.md); the hybrid mlperf_kws_dscnn_f32 (float
I/O, int8 weights) LiteRT. The derived ONNX models (other converters of the
same networks: what they test is the frontend and the passes on another
converter's graph) run through the C code generator, on a deterministic
random input against ONNX Runtime; LLVM emits from the same TIR and goes
through every shared model, ONNX ones with their NCHW kernels included
(through LLVM too, the derived models took 90 s here instead of 38 s).

aot.api.verify is the code `aot verify` runs, called in-process: one
package per model and code generator.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from aot.api import verify
from aot.packaging.metadata import read_metadata
from support import MODELS, cpu_lacks, shared_models

SHARED = shared_models()
DERIVED = sorted((MODELS / "derived").glob("*.onnx"))
# Float I/O around int8 weights: TFLM has no hybrid kernels, LiteRT is the
# reference (DESIGN.md "Semantics to match exactly").
HYBRID = {"mlperf_kws_dscnn_f32.tflite"}


def expected_reference(path: Path) -> str:
    if path.suffix == ".onnx":
        return "onnxruntime"
    if path.name in HYBRID or "_int8" not in path.stem:
        return "litert"
    return "tflite-micro"


def check(out: dict, path: Path, inputs: str) -> None:
    """The verify report says OK against the right reference, and integer
    outputs are exact (verify's own bar; restated so a change there shows)."""
    assert out["reference"] == expected_reference(path), out
    assert out["inputs"] == inputs, out
    assert out["outputs"], out
    for row in out["outputs"]:
        assert "error" not in row, row
        assert row["max_abs_err"] is not None, row
        if out["reference"] == "tflite-micro":
            assert row["max_abs_err"] == 0.0, row
    assert out["ok"] is True, out


def test_every_model_kind_is_here():
    """The expected references all occur (a renamed model would drop a kind)."""
    kinds = {expected_reference(p) for p in SHARED}
    assert kinds == {"onnxruntime", "litert", "tflite-micro"}
    assert HYBRID <= {p.name for p in SHARED}
    assert len(DERIVED) >= 5
    on_avx512 = {(avx512_codegen(p), expected_reference(p) == "onnxruntime") for p in SHARED}
    assert on_avx512 >= {("c", False), ("llvm", False), ("c", True), ("llvm", True)}, on_avx512


@pytest.mark.parametrize("codegen", ["c", "llvm"])
@pytest.mark.parametrize("path", SHARED, ids=lambda p: p.name)
def test_shared_model_verifies(path: Path, codegen: str):
    check(verify(path, board="host", codegen=codegen), path, "saved")


@pytest.mark.parametrize("path", DERIVED, ids=lambda p: p.name)
def test_derived_model_verifies(path: Path):
    check(verify(path, board="host", codegen="c"), path, "random")


def avx512_codegen(path: Path) -> str:
    """One code generator per model on host-avx512, alternating by name:
    both generators meet int8 and float models there, and the host runs
    every model through both (test_shared_model_verifies)."""
    return ("c", "llvm")[SHARED.index(path) % 2]


@pytest.mark.parametrize("path", SHARED, ids=lambda p: p.name)
def test_shared_model_verifies_on_avx512(path: Path, tmp_path):
    codegen = avx512_codegen(path)
    if cpu_lacks("host-avx512"):
        pytest.skip(cpu_lacks("host-avx512"))
    out = verify(path, board="host-avx512", codegen=codegen, out_dir=tmp_path / "pkg")
    check(out, path, "saved")
    # The package really is 512-bit code (not the host target's, by a fallback).
    assert read_metadata(tmp_path / "pkg")["target"]["name"] == "x86_64-linux-avx512"

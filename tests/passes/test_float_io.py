"""Float I/O for quantized models: `aot package --float-io` (float32 in and
out, TFLite's QUANTIZE and DEQUANTIZE at the entry point's edges) against
the float-wrapped reference, on the host and on a Cortex-M4 under QEMU; and
float data fed to a package without it, quantized and reported."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import aot
from aot.api import package, run
from aot.cli import main
from aot.check.reference import litert, tflite_micro
from aot.passes.float_io import with_float_io

from support import MODELS

KWS = MODELS / "mlperf_kws_dscnn_int8.tflite"
HELLO = MODELS / "tflm_hello_world_f32.tflite"
# The model's own parameters (../shared/models/PROVENANCE.md)
IN_SCALE, IN_ZP = np.float32(0.584702909), 83
OUT_SCALE, OUT_ZP = 0.00390625, -128


def quantize(x: np.ndarray) -> np.ndarray:
    """TFLite's QUANTIZE written out: the division in float32, then round
    half away from zero (exact in float64 for a float32 quotient)."""
    v = (x.astype(np.float32) / IN_SCALE).astype(np.float64)
    r = np.sign(v) * np.floor(np.abs(v) + 0.5)
    return np.clip(r + IN_ZP, -128, 127).astype(np.int8)


def dequantize(q: np.ndarray) -> np.ndarray:
    """TFLite's DEQUANTIZE: (float)((double)scale * (q - zp))."""
    return (OUT_SCALE * (q.astype(np.float64) - OUT_ZP)).astype(np.float32)


def float_inputs() -> list[np.ndarray]:
    """The saved input's real values; uniform floats over the input's range
    and past both ends (the clamp); values a hair off and on the half steps
    (the rounding, both signs)."""
    saved = np.load(MODELS / "mlperf_kws_dscnn_int8.input.npy")
    rng = np.random.default_rng(7)
    lo, hi = float(IN_SCALE) * (-128 - IN_ZP), float(IN_SCALE) * (127 - IN_ZP)
    halves = (rng.integers(-150, 60, saved.shape) + 0.5) * float(IN_SCALE)
    return [((saved.astype(np.float64) - IN_ZP) * float(IN_SCALE)).astype(np.float32),
            rng.uniform(lo - 20, hi + 20, saved.shape).astype(np.float32),
            halves.astype(np.float32),
            np.nextafter(halves.astype(np.float32), np.float32(0))]


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype == np.float32 and np.array_equal(a.view(np.uint32),
                                                               b.reshape(a.shape).view(np.uint32))


def tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file()}


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    where = tmp_path_factory.mktemp("float_io")
    return (package(KWS, board="host", out_dir=where / "float_io", float_io=True),
            package(KWS, board="host", out_dir=where / "plain"))


def test_the_pass_wraps_the_model_in_tflites_quantize_and_dequantize():
    graph = aot.load(KWS)
    wrapped = with_float_io(graph)
    assert wrapped.inputs == graph.inputs and wrapped.outputs == graph.outputs
    assert [wrapped.types[n].dtype for n in (*wrapped.inputs, *wrapped.outputs)] == \
        ["float32", "float32"]
    for x in float_inputs():
        want = aot.interpret(graph, {"input_1": quantize(x)})["Identity"]
        got = aot.interpret(wrapped, {"input_1": x})["Identity"]
        assert same_bits(got, dequantize(want))


def test_a_float_io_package_is_bit_exact_with_the_float_wrapped_reference(packages):
    fio, _ = packages
    graph = aot.load(KWS)
    meta = fio.metadata
    assert meta["float_io"] is True
    (inp,), (out,) = meta["inputs"], meta["outputs"]
    assert inp["dtype"] == out["dtype"] == "float32" and "quant" not in inp
    assert inp["float_io"] == {"dtype": "int8", "quant": {
        "scale": [float(IN_SCALE)], "zero_point": [IN_ZP], "axis": None}}
    assert out["float_io"]["quant"]["zero_point"] == [OUT_ZP]
    header = (fio.path / "include" / f"{fio.name}.h").read_text()
    assert "const float* input_1;" in header and "float* Identity;" in header
    assert '#define MLPERF_KWS_DSCNN_INT8_INPUT_INPUT_1_QUANT_DTYPE "int8"' in header
    inputs = float_inputs()
    ties = inputs[2] / IN_SCALE
    assert (ties - np.floor(ties) == 0.5).sum() > 400 and (ties < 0).sum() > 300
    assert (quantize(inputs[2]) != quantize(inputs[3])).any()     # a hair decides
    for x in inputs:
        got = run(fio, {"input_1": x}, board="host")["Identity"]
        q = quantize(x)
        for reference in (tflite_micro, litert):
            assert same_bits(got, dequantize(reference(KWS, graph, [q])[0])), reference


def test_float_io_on_cortex_m_verifies_from_the_command_line(tmp_path, capsys):
    pkg = tmp_path / "kws"
    assert main(["package", str(KWS), "--board", "mps2-an386", "--float-io", "-o",
                 str(pkg)]) == 0
    capsys.readouterr()
    code = main(["verify", str(pkg), "--model", str(KWS), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["ok"] and out["float_io"] is True, out
    assert out["board"] == "mps2-an386" and out["reference"] == "tflite-micro"
    assert out["inputs"] == "saved" and out["outputs"][0]["max_abs_err"] == 0.0, out


def test_float_data_for_a_quantized_input_is_quantized_and_said_so(packages, tmp_path,
                                                                    capsys):
    _, plain = packages
    x = float_inputs()[1]
    note = "input_1: float32 quantized to int8 with scale=0.584702909, zero_point=83"
    with pytest.warns(aot.QuantizedInput, match=note):
        got = run(plain, {"input_1": x}, board="host")["Identity"]
    want = run(plain, {"input_1": quantize(x)}, board="host")["Identity"]
    assert got.dtype == np.int8 and np.array_equal(got, want)
    with aot.connect("host") as dev:
        result = dev.request(plain, [x])
        assert result.notes == (note,) and np.array_equal(result.outputs[0], want)
        with pytest.warns(aot.QuantizedInput, match=note):
            assert np.array_equal(dev.run(plain, {"input_1": x})["Identity"], want)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # int8 data: nothing to say
        run(plain, {"input_1": quantize(x)}, board="host")

    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(plain.path), "--input", str(tmp_path / "x.npy"), "--out",
                 str(tmp_path / "out")]) == 0
    assert f"note: {note}" in capsys.readouterr().err
    assert np.array_equal(np.load(tmp_path / "out" / "Identity.npy"), want)
    assert main(["run", str(plain.path), "--input", str(tmp_path / "x.npy"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["notes"] == [note]

    np.savez(tmp_path / "ds.npz", input_1=np.stack(float_inputs()[:2]))
    code = main(["verify", str(plain.path), "--model", str(KWS), "--dataset",
                 str(tmp_path / "ds.npz"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["ok"] and out["notes"] == [note] and out["samples"] == 2, out


def test_packages_are_deterministic_and_unchanged_without_the_option(packages, tmp_path):
    fio, plain = packages
    again = package(KWS, board="host", out_dir=tmp_path / "again", float_io=True)
    assert tree(again.path) == tree(fio.path)
    assert "float_io" not in plain.metadata
    assert all("float_io" not in io for io in plain.metadata["inputs"])
    assert [io["dtype"] for io in plain.metadata["inputs"]] == ["int8"]
    off = package(KWS, board="host", out_dir=tmp_path / "off", float_io=False)
    assert tree(off.path) == tree(plain.path)


def test_a_float_model_is_packaged_as_it_is_with_a_note(tmp_path, capsys):
    assert main(["package", str(HELLO), "--board", "host", "-o", str(tmp_path / "a")]) == 0
    assert main(["package", str(HELLO), "--board", "host", "--float-io", "-o",
                 str(tmp_path / "b")]) == 0
    err = capsys.readouterr().err
    assert "note: --float-io: the model has no quantized input or output" in err
    assert tree(tmp_path / "a") == tree(tmp_path / "b")


def test_an_optimized_graph_is_refused_with_float_io(tmp_path):
    graph = aot.optimize(aot.load(KWS))
    with pytest.raises(aot.AotError, match="--float-io adds nodes at the model's edges"):
        package(graph, board="host", out_dir=tmp_path / "p", float_io=True)
    assert not (tmp_path / "p").exists()

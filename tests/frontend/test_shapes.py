"""--input-shape and --bind (aot.frontend.shapes): symbolic models verified on
host against ONNX Runtime, every error case, metadata recorded and honoured
by `aot run PKG` / `aot verify PKG`, the Python keywords."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest

import aot
from aot.cli import main
from aot.errors import AotError
from support import MODELS
from support.control_models import symbolic_conv, vad_if


def aot_cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aot", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def in_process(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    return {"conv": symbolic_conv(d / "conv.onnx"), "vad": vad_if(d / "vad.onnx")}


# ---- symbolic models verified against ONNX Runtime on host -----------------------------

def test_verify_symbolic_batch_and_spatial_dims(models):
    r = aot_cli("verify", str(models["conv"]), "--board", "host", "--input-shape",
                "input=2x3x12x20", "--count", "2", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["ok"] and out["reference"] == "onnxruntime" and out["samples"] == 2


@pytest.mark.parametrize("sr", ["16000", "8000"])
def test_verify_if_on_a_bound_input(models, sr):
    r = aot_cli("verify", str(models["vad"]), "--board", "host", "--input-shape", "x=3x4",
                "--bind", f"sr={sr}", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["ok"] and out["reference"] == "onnxruntime"
    assert out["outputs"][0]["max_abs"] < 1e-5


def test_bound_input_folds_away(models):
    g = aot.load(models["vad"], input_shapes={"x": (3, 4)}, bind={"sr": 16000})
    assert g.inputs == ("x",) and g.constants["sr"].dtype == np.int64
    ops = [m.op for n in aot.optimize(g).nodes for m in n.attrs["body"].nodes]
    assert "Equal" not in ops and "Where" not in ops and "If" not in ops
    assert sorted(ops) == ["Add", "MatMul"]       # only the 16 kHz branch is left
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    want = ort.InferenceSession(str(models["vad"])).run(None, {"x": x, "sr": np.array(16000)})
    np.testing.assert_allclose(aot.interpret(aot.optimize(g), {"x": x})["output"], want[0],
                               rtol=1e-5, atol=1e-6)


# ---- metadata: recorded, honoured by run and verify of the package ------------------------

def test_package_records_shapes_and_bind_and_run_and_verify_use_them(models, tmp_path, capsys):
    pkg = tmp_path / "pkg"
    code, _, err = in_process(capsys, "package", str(models["vad"]), "--board", "host",
                              "--input-shape", "x=2x4", "--bind", "sr=8000", "-o", str(pkg))
    assert code == 0, err
    source = json.loads((pkg / "metadata.json").read_text())["source"]
    assert source["input_shapes"] == {"x": [2, 4]} and source["bind"] == {"sr": "8000"}
    # verify PKG loads its model with the recorded options (the model is not beside it)
    code, out, err = in_process(capsys, "verify", str(pkg), "--model", str(models["vad"]),
                                "--json")
    assert code == 0, err
    assert json.loads(out)["ok"]
    x = np.random.default_rng(2).standard_normal((2, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    code, out, err = in_process(capsys, "run", str(pkg), "--input", f"x={tmp_path / 'x.npy'}",
                                "--out", str(tmp_path / "out"), "--json")
    assert code == 0, err
    got = np.load(json.loads(out)["outputs"][0]["file"])
    want = ort.InferenceSession(str(models["vad"])).run(None, {"x": x, "sr": np.array(8000)})
    np.testing.assert_allclose(got, want[0], rtol=1e-5, atol=1e-6)
    code, _, err = in_process(capsys, "verify", str(pkg), "--model", str(models["vad"]),
                              "--bind", "sr=16000")
    assert code == 2 and "built with the input shapes and bound inputs" in err


def test_bind_from_npy_is_recorded_by_value(models, tmp_path):
    np.save(tmp_path / "sr.npy", np.array(16000, np.int64))
    info = aot.package(models["vad"], board="host", out_dir=tmp_path / "pkg",
                       input_shapes={"x": "1x4"}, bind={"sr": str(tmp_path / "sr.npy")})
    bind = info.metadata["source"]["bind"]
    assert bind == {"sr": {"dtype": "int64", "shape": [], "values": [16000]}}
    out = aot.verify(info.path, source=models["vad"])
    assert out["ok"], out


# ---- errors: one line, exit 2, naming the input ---------------------------------------------

ERRORS = [
    (["--input-shape", "nope=1x4"], "the model has no input 'nope' (inputs: x, sr)"),
    (["--bind", "nope=1"], "--bind nope: the model has no input 'nope' (inputs: x, sr)"),
    (["--input-shape", "x=1x4x1"], "input 'x' has rank 2 ([batch, 4]), got 3 dimensions"),
    (["--input-shape", "x=0x4"], "--input-shape x=0x4: dimension 0 is not positive"),
    (["--input-shape", "x=-1x4"], "--input-shape x=-1x4: dimension -1 is not positive"),
    (["--input-shape", "x=1xfour"], "--input-shape x=1xfour: dimensions are positive"),
    (["--input-shape", "x"], "--input-shape x: expected NAME=VALUE"),
    (["--input-shape", "x=1x4", "--input-shape", "x=2x4"],
     "--input-shape x: given twice (x=1x4, x=2x4)"),
    (["--bind", "sr=1", "--bind", "sr=2"], "--bind sr: given twice (sr=1, sr=2)"),
    (["--input-shape", "x=2x5"], "dimension 1 of input 'x' is 4 in the model, not 5"),
    ([], "input 'x': dimension 0 is symbolic ('batch'); aot needs static shapes: give them "
         "with --input-shape x=Nx4"),
    (["--input-shape", "x=1x4", "--bind", "sr=16000.5"], "--bind sr: the input is int64, and "
                                                          "the value 16000.5 does not fit int64"),
    (["--input-shape", "x=1x4", "--bind", "sr=1,2"], "--bind sr: the input has shape [] "
                                                      "(1 values), got 2"),
    (["--input-shape", "x=1x4", "--bind", "sr=fast"], "--bind sr=fast: 'fast' is not a number"),
    (["--input-shape", "x=1x4", "--bind", "sr=99999999999999999999"], "does not fit int64"),
]


@pytest.mark.parametrize("extra,message", ERRORS)
def test_errors_name_the_input(models, capsys, extra, message):
    for command in ("graph", "package"):
        args = [command, str(models["vad"]), *extra]
        if command == "package":
            args += ["--board", "host", "-o", "/nonexistent-dir/never"]
        code, out, err = in_process(capsys, *args)
        assert code == 2, (command, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (command, lines)


def test_bound_npy_of_the_wrong_dtype_or_shape(models, tmp_path, capsys):
    np.save(tmp_path / "f.npy", np.array(16000, np.int32))
    np.save(tmp_path / "s.npy", np.array([16000], np.int64))
    for f, message in (("f.npy", "--bind sr: the input is int64, the value int32"),
                       ("s.npy", "--bind sr: the input has shape [], the value [1]")):
        code, _, err = in_process(capsys, "graph", str(models["vad"]), "--input-shape", "x=1x4",
                                  "--bind", f"sr={tmp_path / f}")
        assert code == 2 and message in err, err


def test_bind_value_of_a_float_input_rounds_and_a_bool_takes_true_false(tmp_path):
    from aot.frontend.shapes import LoadOptions, bound_array
    from aot.ir.graph import TensorType

    v = bound_array("t", "0.1,2,3", TensorType((1, 3), "float32"))
    assert v.dtype == np.float32 and v.shape == (1, 3) and v[0, 0] == np.float32(0.1)
    assert bound_array("b", "true", TensorType((), "bool")) == np.True_
    with pytest.raises(AotError, match="the value 2 does not fit bool"):
        bound_array("b", 2, TensorType((), "bool"))
    with pytest.raises(AotError, match="the value 300 does not fit int8"):
        bound_array("q", "300", TensorType((1,), "int8"))
    assert LoadOptions.from_json({"bind": {"a": {"dtype": "int32", "shape": [2],
                                                 "values": [1, 2]}}}).bind["a"].dtype == np.int32


def test_python_keywords(models):
    g = aot.load(models["conv"], input_shapes={"input": [1, 3, 6, 7]})
    assert g.types["output"].shape == (1, 8 * 6 * 7)
    out = aot.analyze(models["conv"], board="host", code_size=False,
                      input_shapes={"input": "1x3x6x7"})
    assert out["io_bytes"]["inputs"] == 3 * 6 * 7 * 4
    x = np.ones((1, 3, 6, 7), np.float32)
    got = aot.run(models["conv"], {"input": x}, board="host",
                  input_shapes={"input": "1x3x6x7"})["output"]
    want = ort.InferenceSession(str(models["conv"])).run(None, {"input": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    with pytest.raises(AotError, match="input_shapes and bind are for a model file"):
        aot.package(g, board="host", bind={"x": 1})
    with pytest.raises(AotError, match="input_shapes and bind are for a model file"):
        aot.analyze(g, board="host", input_shapes={"input": "1x3x6x7"})


def test_tflite_shapes_are_static(tmp_path, capsys):
    model = MODELS / "mlperf_kws_dscnn_f32.tflite"
    name = aot.load(model).inputs[0]
    shape = aot.load(model).types[name].shape
    same = "x".join(map(str, shape))
    code, _, err = in_process(capsys, "graph", str(model), "--input-shape", f"{name}={same}")
    assert code == 0, err
    # the converter left the batch open (shape_signature -1): written at 1, kept at 1
    other = "x".join(map(str, (2, *shape[1:])))
    code, _, err = in_process(capsys, "graph", str(model), "--input-shape", f"{name}={other}")
    assert code == 2 and (f"--input-shape {name}: dimension 0 is open (-1) in the model's "
                          "signature and its tensors are written at 1") in err
    other = "x".join(map(str, (1, shape[1] + 1, *shape[2:])))
    code, _, err = in_process(capsys, "graph", str(model), "--input-shape", f"{name}={other}")
    assert code == 2 and (f"dimension 1 of input '{name}' is {shape[1]} in the model, "
                          f"not {shape[1] + 1}") in err


def test_real_model_with_its_batch_made_symbolic(tmp_path):
    """A tf2onnx export as it comes (batch 'unk__612'; the shared copy has it
    fixed to 1): batch 2 given with --input-shape verifies against ORT."""
    import onnx

    m = onnx.load(str(MODELS / "derived" / "mlperf_vww_mbv1_f32.tf2onnx.b1.onnx"))
    for vi in (m.graph.input[0], *m.graph.output):
        d = vi.type.tensor_type.shape.dim[0]
        d.ClearField("dim_value")
        d.dim_param = "unk__612"
    path = tmp_path / "vww.onnx"
    onnx.save(m, str(path))
    r = aot_cli("verify", str(path), "--board", "host", "--input-shape", "input_1=2x96x96x3",
                "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["ok"] and out["reference"] == "onnxruntime"


def test_bench_takes_the_options(models, capsys):
    code, out, err = in_process(capsys, "bench", str(models["vad"]), "--board", "host",
                                "--input-shape", "x=1x4", "--bind", "sr=16000", "--repeat", "3",
                                "--warmup", "0", "--json")
    assert code == 0, err
    assert json.loads(out)["repeat"] == 3


@pytest.mark.parametrize("kind,value", [("f32", "0.5"), ("int8", "-100")])
def test_tflite_bound_input_verifies_against_its_reference(kind, value):
    """The reference runtimes take a .tflite model's inputs by index: the bound
    value goes in its place; an int8 input keeps its quantization when bound."""
    model = MODELS / f"tflm_hello_world_{kind}.tflite"
    name = aot.load(model).inputs[0]
    out = aot.verify(model, board="host", bind={name: value})
    assert out["ok"], out
    assert out["reference"] == ("tflite-micro" if kind == "int8" else "litert")


@pytest.mark.parametrize("source", [{"bind": {"sr": {"dtype": "nope", "shape": [],
                                                     "values": [1]}}},
                                    {"bind": {"sr": {"values": [1]}}},
                                    {"input_shapes": {"x": 4}},
                                    {"input_shapes": {"x": [0, 4]}}])
def test_a_malformed_record_is_one_line(source):
    from aot.frontend.shapes import LoadOptions

    with pytest.raises(AotError) as e:
        LoadOptions.from_json(source)
    assert len(str(e.value).splitlines()) == 1

"""Validation on the user's data (`aot verify --dataset`, `aot verify PACKAGE`):
the metrics against hand-computed numbers, the dataset formats and their
refusals, and the command end to end on the host board with real models."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import shutil

import numpy as np
import pytest
from onnx import TensorProto, helper

import aot
from aot.cli import main
from aot.errors import AotError
from aot.ir.graph import Quant, TensorType
from aot.check.dataset import load_dataset
from aot.check.validate import (Tolerance, cosine, dequantize, l2r, max_abs, max_lsb,
                                output_metrics, rmse, top1_agreement)

from support import MODELS

KWS = MODELS / "mlperf_kws_dscnn_int8.tflite"       # int8 in and out: tflite-micro
AD = MODELS / "mlperf_ad_fcae_f32.tflite"            # float, 640 wide: LiteRT
MNIST = MODELS / "onnx_mnist8.onnx"                  # float class scores: ONNX Runtime
HELLO = MODELS / "tflm_hello_world_f32.tflite"       # the smallest model, to package


def run(capsys, *argv) -> tuple[int, dict, str]:
    """`aot ... --json` in this process: (exit code, the JSON, stderr)."""
    code = main([*map(str, argv), "--json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


# ------------------------------------------------------------------- metrics

def test_metrics_against_hand_computed_numbers():
    got, ref = np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 5.0])
    assert max_abs(got, ref) == 2.0
    assert rmse(got, ref) == pytest.approx(math.sqrt(4 / 3))
    assert l2r(got, ref) == pytest.approx(2 / math.sqrt(30))
    assert cosine(got, ref) == pytest.approx(20 / math.sqrt(14 * 30))
    assert cosine(got, -got) == pytest.approx(-1.0)


def test_metrics_at_zero_and_nan():
    zeros, ones = np.zeros(3), np.ones(3)
    assert l2r(zeros, zeros) == 0.0 and l2r(ones, zeros) is None
    assert cosine(zeros, zeros) == 1.0 and cosine(ones, zeros) == 0.0
    both = np.array([np.nan, 1.0])
    assert max_abs(both, both) == 0.0 and rmse(both, both) == 0.0    # NaN where NaN is due
    assert max_abs(np.array([np.nan, 1.0]), np.array([0.0, 1.0])) is None


def test_top1_agreement_counts_rows_over_the_last_axis():
    ref = np.array([[[0.1, 0.9, 0.0, 0.0]], [[0.5, 0.2, 0.2, 0.1]], [[0.0, 0.0, 0.3, 0.7]]])
    got = ref.copy()
    got[1, 0] = [0.1, 0.6, 0.2, 0.1]             # sample 1 now picks class 1, not 0
    assert top1_agreement(got, ref) == pytest.approx(2 / 3)
    assert top1_agreement(np.ones((3, 1, 1)), np.ones((3, 1, 1))) is None   # one "class"


def test_dequantize_per_tensor_and_per_axis():
    q = np.array([[-1, 3]], np.int8)
    assert dequantize(q, Quant((0.5,), (-1,))).tolist() == [[0.0, 2.0]]
    per_axis = Quant((0.5, 2.0), (0, 1), axis=1)
    assert dequantize(q, per_axis).tolist() == [[-0.5, 4.0]]
    # under a leading sample axis the channel axis moves by one
    assert dequantize(q[None], per_axis, axis_offset=1).tolist() == [[[-0.5, 4.0]]]
    assert max_lsb(np.array([5, -128], np.int8), np.array([2, 127], np.int8)) == 255


def test_output_metrics_of_a_quantized_output():
    ty = TensorType((1, 2), "int8", Quant((0.5,), (-1,)))
    got = [np.array([[0, 3]], np.int8), np.array([[1, 1]], np.int8)]
    ref = [np.array([[2, 1]], np.int8), np.array([[1, 1]], np.int8)]
    row = output_metrics("y", got, ref, ty)
    # real values: got [0.5, 2.0], [1.0, 1.0]; ref [1.5, 1.0], [1.0, 1.0]
    assert row["max_abs"] == 1.0 and row["max_lsb"] == 2 and row["max_abs_err"] == 2.0
    assert row["rmse"] == pytest.approx(math.sqrt(2 / 4))
    assert row["l2r"] == pytest.approx(math.sqrt(2) / math.sqrt(2.25 + 1 + 1 + 1))
    assert row["cosine"] == pytest.approx((0.75 + 2 + 2) / math.sqrt(6.25 * 5.25))
    assert row["top1_agreement"] == 0.5      # sample 0: class 1 on the board, 0 in the reference
    assert row["ok"] is False                    # integers: bit-exact by default
    assert output_metrics("y", got, ref, ty, Tolerance(atol=2))["ok"] is True
    assert output_metrics("y", got, ref, ty, Tolerance(atol=1))["ok"] is False


def test_a_dequantized_float_output_counts_its_steps():
    """A QDQ model's float output (DequantizeLinear at scale 1/256): its
    error in steps, read from the model as loaded; judged as a float."""
    from onnx import numpy_helper
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    inits = [numpy_helper.from_array(np.float32(1 / 256), "s"),
             numpy_helper.from_array(np.int8(0), "z")]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], inits)
    from aot.frontend.onnx import import_onnx
    from aot.passes.infer import infer_types
    from aot.check.validate import dequantized_steps
    graph = infer_types(import_onnx(helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString(), "qdq"))
    assert dequantized_steps(graph) == {"y": 1 / 256}
    ty = TensorType((4,), "float32")
    got = [np.array([0, 3, 1, 2], np.float32) / 256]
    ref = [np.array([0, 1, 1, 2], np.float32) / 256]
    row = output_metrics("y", got, ref, ty, step=1 / 256)
    # the steps are reported, and by default one step passes: two do not
    assert row["max_lsb"] == 2 and row["max_abs"] == 2 / 256 and row["ok"] is False
    assert row["step"] == 1 / 256
    one = [np.array([0, 2, 1, 2], np.float32) / 256]
    assert output_metrics("y", one, ref, ty, step=1 / 256)["ok"] is True
    assert output_metrics("y", one, ref, ty)["ok"] is False      # a plain float output
    assert output_metrics("y", one, ref, ty, Tolerance(atol=0), step=1 / 256)["ok"] is False
    assert output_metrics("y", got, ref, ty, Tolerance(atol=2 / 256), step=1 / 256)["ok"]
    assert output_metrics("y", got, ref, ty)["max_lsb"] is None


def test_output_metrics_of_a_float_output_and_its_tolerance():
    ty = TensorType((2,), "float32")
    got, ref = [np.array([1.0, 2.0], np.float32)], [np.array([1.00005, 2.0], np.float32)]
    row = output_metrics("y", got, ref, ty)
    assert row["ok"] is True and row["max_lsb"] is None and row["top1_agreement"] == 1.0
    assert output_metrics("y", got, ref, ty, Tolerance(atol=0, rtol=0))["ok"] is False
    bad = output_metrics("y", got, [np.zeros(3, np.float32)], ty)
    assert bad["ok"] is False and "shape" in bad["error"] and bad["max_abs"] is None
    with pytest.raises(AotError, match="--rtol must be a finite number >= 0"):
        Tolerance(rtol=-1.0)


# ------------------------------------------------------------------ datasets

@pytest.fixture(scope="module")
def two_inputs(tmp_path_factory):
    """y = a + b with inputs a float32[1, 3] and b float32[1, 3]."""
    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "add",
                          [vi("a", TensorProto.FLOAT, [1, 3]), vi("b", TensorProto.FLOAT, [1, 3])],
                          [vi("y", TensorProto.FLOAT, [1, 3])])
    path = tmp_path_factory.mktemp("add") / "add.onnx"
    path.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
                     .SerializeToString())
    return aot.load(path)


def test_npz_dataset_by_input_name(tmp_path, two_inputs):
    a = np.arange(12, dtype=np.float32).reshape(4, 1, 3)
    b = np.ones((4, 3))                          # float64, no batch axis: both accepted
    np.savez(tmp_path / "ds.npz", b=b, a=a, labels=np.arange(4))
    samples = load_dataset(tmp_path / "ds.npz", two_inputs)
    assert len(samples) == 4
    assert [x.dtype.name for x in samples[2]] == ["float32", "float32"]
    assert samples[2][0].tolist() == [[6.0, 7.0, 8.0]] and samples[2][1].shape == (1, 3)


def test_directory_dataset_in_file_name_order(tmp_path):
    graph = aot.load(HELLO)
    name = graph.inputs[0]
    folder = tmp_path / "ds"
    folder.mkdir()
    for stem, v in (("b", 2.0), ("a", 1.0), ("c", 3.0)):
        np.save(folder / f"{stem}.npy", np.full((1, 1), v, np.float32))
    np.savez(folder / "d.npz", **{name: np.full((1,), 4.0)})   # no batch axis, float64
    (folder / "notes.txt").write_text("not a sample")
    samples = load_dataset(folder, graph)
    assert [float(s[0][0, 0]) for s in samples] == [1.0, 2.0, 3.0, 4.0]


BAD_NPZ = [
    ("missing", {"a": np.zeros((2, 1, 3), np.float32)}, "no array for input 'b'"),
    ("counts", {"a": np.zeros((2, 1, 3), np.float32), "b": np.zeros((3, 1, 3), np.float32)},
     "input 'a' has 2 samples, input 'b' has 3"),
    ("shape", {"a": np.zeros((2, 1, 4), np.float32), "b": np.zeros((2, 1, 3), np.float32)},
     r"input 'a' needs an array of shape \[N, 1, 3\] or \[N, 3\], got \[2, 1, 4\]"),
    ("dtype", {"a": np.zeros((2, 1, 3), np.int32), "b": np.zeros((2, 1, 3), np.float32)},
     "input 'a' is float32, got int32"),
    ("empty", {"a": np.zeros((0, 1, 3), np.float32), "b": np.zeros((0, 1, 3), np.float32)},
     "no samples"),
    ("unnamed", {"arr_0": np.zeros((2, 1, 3), np.float32)}, "no array for input 'a'"),
]


@pytest.mark.parametrize("case", BAD_NPZ, ids=[c[0] for c in BAD_NPZ])
def test_bad_npz_datasets_are_refused(tmp_path, two_inputs, case):
    name, arrays, message = case
    np.savez(tmp_path / f"{name}.npz", **arrays)
    with pytest.raises(AotError, match=message) as e:
        load_dataset(tmp_path / f"{name}.npz", two_inputs)
    assert f"{name}.npz" in str(e.value) and "\n" not in str(e.value)


def test_bad_dataset_files_and_directories_are_refused(tmp_path, two_inputs):
    (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04 not really a zip")
    (tmp_path / "x.csv").write_text("1,2,3\n")
    folder, empty = tmp_path / "dir", tmp_path / "empty"
    folder.mkdir(), empty.mkdir()
    np.save(folder / "0.npy", np.zeros((1, 3), np.float32))
    cases = [(tmp_path / "junk.npz", "junk.npz: cannot read it"),
             (tmp_path / "x.csv", "x.csv: not an .npz file"),
             (tmp_path / "none.npz", "none.npz: no such file"),
             (empty, "no .npz or .npy files"),
             (folder, r"0.npy: an .npy holds one array, the model takes 2 inputs")]
    for path, message in cases:
        with pytest.raises(AotError, match=message):
            load_dataset(path, two_inputs)


# --------------------------------------------------- aot verify on the host board

def test_int8_model_on_a_dataset_through_one_session(tmp_path, capsys, monkeypatch):
    """The saved input plus perturbations of it, every metric reported; all
    samples go through one serve session and one reference session (an
    interpreter per sample took a GB per 25,000 samples); a corrupted output
    shows in each metric and fails the check (exit 1)."""
    import aot.check.reference as reference
    from aot.deploy import device

    sessions = []
    real_session = reference.ReferenceSession.__init__

    def counting_sessions(self, *args):
        sessions.append(args)
        real_session(self, *args)
    monkeypatch.setattr(reference.ReferenceSession, "__init__", counting_sessions)

    x = np.load(KWS.with_suffix(".input.npy"))
    rng = np.random.default_rng(0)
    noisy = [np.clip(x + rng.integers(-8, 9, x.shape), -128, 127).astype(np.int8)
             for _ in range(3)]
    np.savez(tmp_path / "ds.npz", input_1=np.stack([x, *noisy]))
    started = []
    real = device._LocalProcess.__init__

    def counting(self, argv):
        started.append(argv)
        real(self, argv)
    monkeypatch.setattr(device._LocalProcess, "__init__", counting)
    code, out, _ = run(capsys, "verify", KWS, "--board", "host", "--dataset", tmp_path / "ds.npz")
    assert code == 0 and out["ok"] and out["samples"] == 4 and out["inputs"] == "dataset", out
    assert out["reference"] == "tflite-micro" and len(started) == 1 and len(sessions) == 1
    (row,) = out["outputs"]
    assert row == {"name": "Identity", "max_abs": 0.0, "rmse": 0.0, "l2r": 0.0, "cosine": 1.0,
                   "top1_agreement": 1.0, "max_lsb": 0, "max_abs_err": 0.0, "ok": True,
                   "tolerance": {"atol": 1e-4, "rtol": 1e-4, "bit_exact": True,
                                 "scaled": False}}

    import aot.deploy.serve as serve
    request = serve.ServeClient.request

    def one_step_up(self, inputs, warmup, runs):
        res = request(self, inputs, warmup, runs)
        return dataclasses.replace(res, outputs=[np.where(o < 127, o + 1, o).astype(o.dtype)
                                                 for o in res.outputs])
    monkeypatch.setattr(serve.ServeClient, "request", one_step_up)
    code, out, _ = run(capsys, "verify", KWS, "--board", "host", "--dataset", tmp_path / "ds.npz")
    (row,) = out["outputs"]
    assert code == 1 and out["ok"] is False and row["max_lsb"] == 1, row
    assert row["max_abs"] == pytest.approx(0.00390625)     # one step of the output's scale
    assert 0 < row["l2r"] < 1 and row["cosine"] < 1.0
    code, out, _ = run(capsys, "verify", KWS, "--board", "host", "--dataset", tmp_path / "ds.npz",
                       "--atol", "1")
    assert code == 0 and out["outputs"][0]["ok"] is True


def test_float_models_on_npz_and_directory_datasets(tmp_path, capsys):
    x = np.load(AD.with_suffix(".input.npy")).astype(np.float64)     # cast to float32 on load
    np.savez(tmp_path / "ad.npz", input_1=np.stack([x, x * 0.5, x + 1.0]))
    code, out, _ = run(capsys, "verify", AD, "--board", "host", "--dataset", tmp_path / "ad.npz")
    assert code == 0 and out["samples"] == 3 and out["reference"] == "litert", out
    (row,) = out["outputs"]
    assert row["max_lsb"] is None and row["ok"] is True
    assert 0 <= row["max_abs"] <= 1e-2 and 0 <= row["rmse"] <= row["max_abs"]
    assert row["l2r"] < 1e-5 and row["cosine"] > 0.99999 and row["top1_agreement"] is not None

    folder = tmp_path / "digits"
    folder.mkdir()
    rng = np.random.default_rng(1)
    for i in range(3):
        np.save(folder / f"{i:03d}.npy", rng.uniform(0, 1, (1, 1, 28, 28)).astype(np.float32))
    code, out, _ = run(capsys, "verify", MNIST, "--board", "host", "--dataset", folder)
    assert code == 0 and out["samples"] == 3 and out["reference"] == "onnxruntime", out
    (row,) = out["outputs"]
    assert row["top1_agreement"] == 1.0 and row["cosine"] > 0.99999 and row["l2r"] < 1e-5


def test_bad_dataset_on_the_command_line(tmp_path, capsys, monkeypatch):
    import aot.api

    def no_build(*args, **kwargs):
        raise AssertionError("packaged before the dataset was checked")
    monkeypatch.setattr(aot.api, "package_graph", no_build)
    np.savez(tmp_path / "ds.npz", input_1=np.zeros((2, 1, 49, 10, 1), np.int16))
    code, out, err = run(capsys, "verify", KWS, "--board", "host", "--dataset",
                         tmp_path / "ds.npz")
    assert code == 2 and out["ok"] is False
    assert err.count("\n") == 1 and "ds.npz: input 'input_1' is int8, got int16" in err


# ------------------------------------------------------------ a package directory

def test_verify_a_package_directory_and_refuse_a_changed_model(tmp_path, capsys, monkeypatch):
    model = tmp_path / "hello.tflite"
    shutil.copyfile(HELLO, model)
    pkg = tmp_path / "pkgs" / "hello"
    code, _, _ = run(capsys, "package", model, "--board", "host", "-o", pkg)
    assert code == 0
    source = json.loads((pkg / "metadata.json").read_text())["source"]
    assert source == {"file": "hello.tflite",
                      "sha256": hashlib.sha256(model.read_bytes()).hexdigest()}

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)                  # the model is found in neither place...
    code, out, err = run(capsys, "verify", pkg)
    assert code == 2 and "hello.tflite" in err and "--model FILE" in err
    code, out, _ = run(capsys, "verify", pkg, "--model", HELLO)     # ...but the same bytes are
    assert code == 0 and out["ok"] and out["board"] == "host" and out["model"] == str(HELLO)
    monkeypatch.chdir(tmp_path)                   # now in the working directory
    np.savez(tmp_path / "ds.npz", np.linspace(0, 6, 5, dtype=np.float32).reshape(5, 1, 1))
    code, out, _ = run(capsys, "verify", pkg, "--dataset", "ds.npz", "--rtol", "1e-3")
    assert code == 0 and out["samples"] == 5 and out["model"] == "hello.tflite", out

    data = bytearray(model.read_bytes())
    data[-1] ^= 1
    model.write_bytes(bytes(data))
    code, out, err = run(capsys, "verify", pkg)
    assert code == 2 and err.count("\n") == 1
    assert f"was built from a model with sha256 {source['sha256']}; hello.tflite has" in err
    code, _, err = run(capsys, "verify", pkg, "--board", "qemu-aarch64")
    assert code == 2 and "was built for board 'host', not 'qemu-aarch64'" in err


def test_api_verify_of_a_package_without_a_recorded_model(tmp_path):
    """A package built from a Graph records no model: --model (source=) is
    then required, and checked against the package's inputs and outputs."""
    from aot.api import package, verify

    info = package(aot.load(HELLO), board="host", out_dir=tmp_path / "pkg")
    with pytest.raises(AotError, match="does not record the model"):
        verify(info.path)
    with pytest.raises(AotError, match="is not the model of"):
        verify(info.path, source=KWS)
    out = verify(info.path, source=HELLO, count=3, atol=0.0, rtol=1e-3)
    assert out["ok"] and out["samples"] == 3 and out["inputs"] == "random"
    assert set(out["outputs"][0]) >= {"max_abs", "rmse", "l2r", "cosine", "top1_agreement",
                                      "max_lsb", "ok"}


def test_a_bare_metal_board_runs_each_sample(tmp_path, monkeypatch):
    """mps2-an386 has no stdin to serve on: one run_package per sample."""
    import aot.deploy as deploy
    from aot.api import verify

    seen = []
    real = deploy.run_package

    def counting(pkg, board, inputs, **kwargs):
        seen.append(float(inputs[0][0, 0]))
        return real(pkg, board, inputs, **kwargs)
    monkeypatch.setattr(deploy, "run_package", counting)
    np.savez(tmp_path / "ds.npz", np.array([0.5, 1.5, 3.0], np.float32).reshape(3, 1, 1))
    out = verify(HELLO, board="mps2-an386", dataset=tmp_path / "ds.npz")
    assert out["ok"] and out["samples"] == 3 and seen == [0.5, 1.5, 3.0], out
    assert out["outputs"][0]["max_abs"] < 1e-5


# ------------------------------------------------------------------- reports

def test_verify_report_per_output(tmp_path, capsys, monkeypatch):
    import aot.api
    from aot.support.report import render_html, verify_document

    report = tmp_path / "hello.md"
    code, out, _ = run(capsys, "verify", HELLO, "--board", "host", "--count", "3",
                       "--report", report)
    assert code == 0 and out["ok"], out
    text = report.read_text()
    assert text.startswith("# Verification of tflm_hello_world_f32.tflite on host\n")
    assert f"OK: tflm_hello_world_f32.tflite on host against {out['reference']}, 3 sample(s)" \
        in text
    (row,) = out["outputs"]
    atol, rtol = row["tolerance"]["atol"], row["tolerance"]["rtol"]
    assert not row["tolerance"]["bit_exact"]
    assert (f"| {row['name']} | {row['max_abs']:.3g} | {row['rmse']:.3g} | "
            f"{row['cosine']:.6f} |") in text
    assert row["tolerance"]["scaled"]
    assert f"| |err| <= {atol:.3g} max(1, max|ref|) + {rtol:.3g} |ref| | yes |" \
        .replace("|err|", "\\|err\\|").replace("|ref|", "\\|ref\\|") in text
    page = render_html(verify_document({**out, "ok": False,
                                        "outputs": [{**row, "ok": False}]}))
    assert "MISMATCH" in page and "<td>NO</td>" in page

    # the report's directory is checked before anything is packaged
    monkeypatch.setattr(aot.api, "package_graph", lambda *a, **k: pytest.fail("packaged"))
    code, out, err = run(capsys, "verify", HELLO, "--board", "host", "--report",
                         tmp_path / "no" / "r.md")
    assert code == 2 and "does not exist" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hello.md"]


# ------------------------------------------------------ datasets that stream

def test_a_huge_dataset_under_a_memory_limit_is_one_line_or_runs_its_limit(tmp_path):
    """Under a 2 GiB RLIMIT_AS a few KB of .npz holding over a million samples
    is refused up front with its size (exit 2, one line; 100,000 of them
    peaked at 4.2 GB and ended in exit 3), and --limit runs its first
    samples (exit 0)."""
    import resource
    import subprocess
    import sys

    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "twice",
                          [vi("x", TensorProto.FLOAT, [1, 1])],
                          [vi("y", TensorProto.FLOAT, [1, 1])])
    model = tmp_path / "twice.onnx"
    model.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
                      .SerializeToString())
    np.savez_compressed(tmp_path / "ds.npz", x=np.ones((1_000_001, 1, 1), np.float32))

    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    def verify(*extra):
        return subprocess.run([sys.executable, "-m", "aot.cli", "verify", str(model), "--board",
                               "host", "--dataset", str(tmp_path / "ds.npz"), "--json", *extra],
                              capture_output=True, text=True, preexec_fn=limited, timeout=300)
    r = verify()
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "1000001 samples (4000004 bytes), more than the limit of 1000000" in r.stderr
    r = verify("--limit", "40")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["samples"] == 40 and out["outputs"][0]["max_abs"] == 0.0, out


def test_a_saved_input_that_is_no_npy_verifies_on_random_inputs(tmp_path, capsys):
    """A pickle saved as <stem>.input.npy was exit 3: now random inputs and
    a note saying why."""
    model = tmp_path / "hello.tflite"
    shutil.copyfile(HELLO, model)
    np.save(tmp_path / "hello.input.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    code, out, _ = run(capsys, "verify", model, "--board", "host")
    assert code == 0 and out["inputs"] == "random", out
    assert "hello.input.npy: holds Python objects" in out["notes"][0]

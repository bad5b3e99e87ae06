"""The command line: exit codes, one-line errors, --json, atomic --dump-ir."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
from onnx import helper
import pytest

from support import MODELS
from support.control_models import save, vi

REPO = Path(__file__).resolve().parents[2]


def aot(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aot", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


def assert_one_line_error(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("aot: error: ")
    assert "Traceback" not in r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_graph_prints_optimized_graph():
    r = aot("graph", str(MODELS / "tflm_hello_world_int8.tflite"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("graph ")


def test_graph_json():
    r = aot("graph", str(MODELS / "onnx_mnist8.onnx"), "--json")
    assert r.returncode == 0, r.stderr
    g = json.loads(r.stdout)
    assert g["inputs"][0]["shape"] == [1, 1, 28, 28]
    assert g["outputs"][0]["shape"] == [1, 10]
    assert g["nodes"]


def test_dump_ir_writes_each_pass(tmp_path):
    from aot.passes.pipeline import PIPELINE

    out = tmp_path / "ir"
    r = aot("graph", str(MODELS / "onnx_mnist8.onnx"), "--dump-ir", str(out))
    assert r.returncode == 0, r.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names[0] == "00_import.txt"
    assert len(names) == len(PIPELINE) + 1
    # An existing directory is not replaced without --force.
    assert_one_line_error(aot("graph", str(MODELS / "onnx_mnist8.onnx"), "--dump-ir", str(out)),
                          "already exists")
    assert aot("graph", str(MODELS / "onnx_mnist8.onnx"), "--dump-ir", str(out),
               "--force").returncode == 0


@pytest.mark.parametrize("model", ["onnx_mnist8.onnx", "tflm_hello_world_int8.tflite"])
def test_truncated_model_is_one_line_error(tmp_path, model):
    data = (MODELS / model).read_bytes()
    bad = tmp_path / model
    bad.write_bytes(data[: len(data) // 3])
    out = tmp_path / "ir"
    assert_one_line_error(aot("graph", str(bad), "--dump-ir", str(out)))
    assert not out.exists(), "nothing may be written on error"


def test_garbage_model_is_one_line_error(tmp_path):
    for suffix in (".onnx", ".tflite"):
        bad = tmp_path / ("garbage" + suffix)
        bad.write_bytes(b"\x00\x01not a model at all\xff" * 7)
        assert_one_line_error(aot("graph", str(bad)))


def test_unknown_format_and_missing_file(tmp_path):
    (tmp_path / "m.pb").write_bytes(b"x")
    assert_one_line_error(aot("graph", str(tmp_path / "m.pb")), "unknown model format")
    assert_one_line_error(aot("graph", str(tmp_path / "none.onnx")), "no such model file")


def _onnx_model(tmp_path, op: str, dims) -> Path:
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node(op, ["x"], ["y"], name="the_node")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)])
    path = tmp_path / f"{op}.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
                     .SerializeToString())
    return path


def test_unsupported_op_names_op_and_node(tmp_path):
    # random ops have no deterministic compiled meaning (Det is supported now)
    assert_one_line_error(aot("graph", str(_onnx_model(tmp_path, "RandomNormalLike", [2, 2]))),
                          "RandomNormalLike", "the_node")


@pytest.mark.parametrize("dims", [[1, 0, 4], [1, -3, 4]])
def test_bad_dimension_is_refused(tmp_path, dims):
    assert_one_line_error(aot("graph", str(_onnx_model(tmp_path, "Relu", dims))), "dimension")


def test_malformed_node_is_one_line_error(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("Conv", ["x"], ["y"], name="weightless_conv")  # no weight input
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 4])])
    path = tmp_path / "bad.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
                     .SerializeToString())
    assert_one_line_error(aot("graph", str(path)), "weightless_conv")


def test_docs_list_every_board_aot_boards_lists():
    from aot.targets import boards

    docs = (Path(__file__).resolve().parents[2] / "docs" / "targets.md").read_text()
    listing = docs.split("$ aot boards\n", 1)[1].split("```", 1)[0].splitlines()
    assert sorted(line.split()[0] for line in listing[1:]) == sorted(boards())


def test_a_closed_pipe_ends_quietly():
    # `aot graph model | head -1`: the reader goes away after one line.
    proc = subprocess.Popen([sys.executable, "-m", "aot", "graph",
                             str(MODELS / "mlperf_vww_mbv1_int8.tflite")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().startswith(b"graph ")
    proc.stdout.close()
    assert proc.wait(timeout=120) == 141          # as a shell reports SIGPIPE
    assert proc.stderr.read() == b""


def test_an_unknown_board_suggests_the_closest_name():
    assert_one_line_error(aot("package", str(MODELS / "tflm_hello_world_int8.tflite"),
                              "--board", "rpi44"), "unknown board 'rpi44' (did you mean 'rpi4'?")


def two_output_model(path: Path) -> Path:
    """x -> Relu -> "scores", x -> Neg -> "boxes": a detector's two outputs."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["scores"]),
                               helper.make_node("Neg", ["x"], ["boxes"])], "detector",
                              [vi("x", [1, 8])], [vi("scores", [1, 8]), vi("boxes", [1, 8])])
    return save(graph, path)


def test_run_names_output_files_after_the_outputs(tmp_path):
    model = two_output_model(tmp_path / "detector.onnx")
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)
    np.save(tmp_path / "x.npy", x)
    r = aot("run", str(model), "--board", "host", "--input", str(tmp_path / "x.npy"),
            "--out", str(tmp_path / "out"), "--json")
    assert r.returncode == 0, r.stderr
    outs = json.loads(r.stdout)["outputs"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        Path(o["file"]).name for o in outs) == ["boxes.npy", "scores.npy"]
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "scores.npy"), np.maximum(x, 0))
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "boxes.npy"), -x)


KWS = MODELS / "mlperf_kws_dscnn_int8.tflite"        # one output: 12 int8 class scores


@pytest.fixture(scope="module")
def kws_run(tmp_path_factory):
    """The kws package, and its output as `aot run --out` writes it."""
    tmp = tmp_path_factory.mktemp("kws")
    r = aot("package", str(KWS), "--board", "host", "-o", str(tmp / "pkg"))
    assert r.returncode == 0, r.stderr
    r = aot("run", str(tmp / "pkg"), "--board", "host", "--input",
            str(KWS.with_suffix(".input.npy")), "--out", str(tmp / "out"))
    assert r.returncode == 0, r.stderr
    (written,) = (tmp / "out").iterdir()
    return tmp / "pkg", np.load(written)


def test_run_without_out_prints_each_output(kws_run, tmp_path):
    pkg, want = kws_run
    r = aot("run", str(pkg), "--board", "host", "--input", str(KWS.with_suffix(".input.npy")),
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert not any(tmp_path.iterdir()), "without --out nothing is written"
    head, top = r.stdout.splitlines()
    assert head == (f"Identity: int8[1, 12]  min {want.min()}  max {want.max()}  "
                    f"mean {want.astype(np.float64).mean():.6g}")
    best = sorted(range(12), key=lambda i: (-int(want[0, i]), i))[:5]
    assert top == "  top-5: " + ", ".join(f"{i} ({want[0, i]})" for i in best)


def test_run_without_out_json(kws_run, tmp_path):
    pkg, want = kws_run
    r = aot("run", str(pkg), "--board", "host", "--input", str(KWS.with_suffix(".input.npy")),
            "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (out,) = json.loads(r.stdout)["outputs"]
    assert (out["name"], out["shape"], out["dtype"]) == ("Identity", [1, 12], "int8")
    assert (out["min"], out["max"]) == (int(want.min()), int(want.max()))
    assert out["mean"] == pytest.approx(want.astype(np.float64).mean())
    scores = [t["score"] for t in out["top5"]]
    assert scores == sorted(want.reshape(-1).tolist(), reverse=True)[:5]
    assert [want[0, t["index"]] for t in out["top5"]] == scores


def test_run_force_without_out_is_refused(kws_run):
    assert_one_line_error(aot("run", str(kws_run[0]), "--board", "host", "--force"),
                          "--force replaces an existing --out DIR")


@pytest.mark.parametrize("out", [".", ".."])
def test_run_out_the_working_directory_is_refused(kws_run, out, tmp_path, monkeypatch, capsys):
    """--out DIR is replaced whole: with --force, the working directory (or
    one holding it) would lose the user's files; refused before the run."""
    from aot.cli import main

    work = tmp_path / "work"
    work.mkdir()
    (work / "mine.txt").write_text("keep")
    monkeypatch.chdir(work)
    assert main(["run", str(kws_run[0]), "--board", "host", "--input",
                 str(KWS.with_suffix(".input.npy")), "--out", out, "--force"]) == 2
    which = "the current directory" if out == "." else "a parent of the current directory"
    assert capsys.readouterr().err.splitlines() == [
        f"aot: error: {out} is {which}: aot writes an output directory whole and replaces it, "
        f"so name a new directory (e.g. {Path(out) / 'out'})"]
    assert os.listdir(tmp_path) == ["work"] and os.listdir(work) == ["mine.txt"]


def test_run_refuses_an_edited_c_name_that_is_not_an_identifier(kws_run, tmp_path, capsys):
    """An output's C name names its file under --out: one from an edited
    metadata.json that is not a C identifier is refused with the field
    named, before anything is written."""
    from aot.cli import main

    pkg = tmp_path / "deep" / "er" / "pkg"
    shutil.copytree(kws_run[0], pkg)
    meta = json.loads((pkg / "metadata.json").read_text())
    meta["outputs"][0]["c_name"] = "../../escaped"
    (pkg / "metadata.json").write_text(json.dumps(meta))
    out = tmp_path / "deep" / "er" / "out"
    assert main(["run", str(pkg), "--board", "host", "--input",
                 str(KWS.with_suffix(".input.npy")), "--out", str(out), "--json"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"aot: error: {pkg / 'metadata.json'}: outputs[0].c_name must be a C identifier of "
        "at most 63 characters, got '../../escaped'"]
    assert sorted(os.listdir(tmp_path / "deep" / "er")) == ["pkg"]
    assert os.listdir(tmp_path) == ["deep"] and os.listdir(tmp_path / "deep") == ["er"]


def test_output_summary_of_scores_and_other_shapes():
    from aot.check.output_summary import summarize, summary_lines

    s = summarize("p", np.array([0.1, 0.5, 0.5, -1.0, 0.25, 0.0, 0.3], np.float32))
    assert [t["index"] for t in s["top5"]] == [1, 2, 6, 4, 0]      # ties by index
    assert (s["min"], s["max"], s["dtype"]) == (-1.0, 0.5, "float32")
    assert summary_lines(s)[1] == "  top-5: 1 (0.5), 2 (0.5), 6 (0.3), 4 (0.25), 0 (0.1)"
    assert [t["index"] for t in summarize("p", np.array([[3, 9]], np.int8))["top5"]] == [1, 0]
    for not_scores in (np.zeros((2, 10)), np.zeros((1, 1)), np.zeros((1, 4, 2)), np.zeros(())):
        assert "top5" not in summarize("x", not_scores)
    empty = summarize("e", np.zeros((0, 3), np.uint8))
    assert "min" not in empty and summary_lines(empty) == ["e: uint8[0, 3]  (no values)"]


def test_the_default_c_name_is_the_model_files(tmp_path):
    # Exporters give many models one graph name (this one's is CNTKGraph).
    model = MODELS / "onnx_mnist8.onnx"
    r = aot("package", str(model), "--board", "host", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["package"] == "onnx_mnist8"
    assert json.loads((tmp_path / "onnx_mnist8" / "metadata.json").read_text())["name"] == \
        "onnx_mnist8"


@pytest.mark.parametrize("family", ["InputError", "BoardUnreachableError", "MissingToolError",
                                    "MismatchError", "ModelError", "UnsupportedError",
                                    "BudgetError", "NotImplementedYet"])
def test_every_error_family_exits_2_with_one_line(family, monkeypatch, capsys):
    import aot.api
    from aot import errors
    from aot.cli import main

    def fail(*args, **kwargs):
        raise getattr(errors, family)(f"a {family}\nand a second line")

    monkeypatch.setattr(aot.api, "package", fail)
    assert main(["package", "model.onnx", "--board", "host"]) == 2
    assert capsys.readouterr().err == f"aot: error: a {family}\n"

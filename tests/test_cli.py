"""The command line: exit codes, one-line errors, --json, atomic --dump-ir."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import MODELS

REPO = Path(__file__).resolve().parent.parent


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

    docs = (Path(__file__).resolve().parent.parent / "docs" / "targets.md").read_text()
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


def test_run_names_output_files_after_the_outputs(tmp_path):
    model = MODELS / "onnx_ultraface_rfb320.onnx"        # two outputs: scores, boxes
    r = aot("run", str(model), "--board", "host", "--input", str(model.with_suffix(".input.npy")),
            "--out", str(tmp_path / "out"), "--json")
    assert r.returncode == 0, r.stderr
    outs = json.loads(r.stdout)["outputs"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        Path(o["file"]).name for o in outs) == ["boxes.npy", "scores.npy"]
    want = np.load(model.with_suffix(".output.npy"))
    got = np.load(tmp_path / "out" / Path(outs[0]["file"]).name)
    assert got.shape == want.shape


def test_the_default_c_name_is_the_model_files(tmp_path):
    # Exporters give many models one graph name (this one's is CNTKGraph).
    model = MODELS / "onnx_mnist8.onnx"
    r = aot("package", str(model), "--board", "host", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["package"] == "onnx_mnist8"
    assert json.loads((tmp_path / "onnx_mnist8" / "metadata.json").read_text())["name"] == \
        "onnx_mnist8"

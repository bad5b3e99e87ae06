"""The Python API a user reaches for first: aot.package / run / verify /
bench / analyze at the top level with the CLI's defaults, and
`dev.run(pkg, {name: array})` returning {name: array} as ONNX Runtime does."""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import aot
from aot.check.reference import tflite_micro
from aot.errors import AotError
from aot.targets import DEFAULT_BOARD, DEFAULT_BOARD_ENV, get_board

from support import MODELS

KWS = MODELS / "mlperf_kws_dscnn_int8.tflite"
TOP_LEVEL = ("package", "run", "verify", "bench", "analyze")


IMPORT_ALL_THEN_CHECK = f"""
import importlib, pkgutil, types
import aot
for m in pkgutil.walk_packages(aot.__path__, "aot."):
    if not m.name.startswith("aot._data"):
        importlib.import_module(m.name)
for name in {TOP_LEVEL!r}:
    value = getattr(aot, name)
    assert callable(value) and not isinstance(value, types.ModuleType), name
"""


def test_top_level_functions_survive_their_modules_being_imported():
    # Importing a submodule sets the package's attribute of that name: no
    # module of aot may be named like a top-level function.
    r = subprocess.run([sys.executable, "-c", IMPORT_ALL_THEN_CHECK], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr


def test_top_level_defaults_are_the_clis(monkeypatch):
    for name in TOP_LEVEL:
        assert name in aot.__all__ and name in dir(aot)
        board = inspect.signature(getattr(aot, name)).parameters["board"]
        assert board.default is None, name      # None: the CLI's default board
    monkeypatch.delenv(DEFAULT_BOARD_ENV)
    assert get_board().name == DEFAULT_BOARD == "qemu-rpi4"
    monkeypatch.setenv(DEFAULT_BOARD_ENV, "qemu-aarch64")
    assert get_board().name == "qemu-aarch64"
    with pytest.raises(AttributeError, match="no attribute 'pakage'"):
        aot.pakage


@pytest.fixture(scope="module")
def kws_pkg(tmp_path_factory):
    return aot.package(KWS, board="host", out_dir=tmp_path_factory.mktemp("api") / "pkg")


def test_connect_run_takes_and_gives_dicts(kws_pkg):
    graph = aot.load(KWS)
    x = np.load(KWS.with_suffix(".input.npy"))
    [want] = tflite_micro(KWS, graph, [x])
    assert kws_pkg.name == "mlperf_kws_dscnn_int8"          # the file's stem
    with aot.connect("host") as dev:
        got = dev.run(kws_pkg, {"input_1": x})            # the PackageInfo stands for its dir
        assert list(got) == ["Identity"]
        np.testing.assert_array_equal(got["Identity"], want.reshape(got["Identity"].shape))
        by_order = dev.run(kws_pkg.path, [x])                # a list in input order still works
        np.testing.assert_array_equal(by_order["Identity"], got["Identity"])
        with pytest.raises(AotError, match=r"^no input named 'input': the package takes "
                           r"input_1 int8\[1, 49, 10, 1\]$"):
            dev.run(kws_pkg.path, {"input": x})
        with pytest.raises(AotError, match=r"input 'input_1' must be int8\[1, 49, 10, 1\], "
                           r"got int8\[49, 10\]"):
            dev.run(kws_pkg.path, {"input_1": x[0, :, :, 0]})
    ran = aot.run(kws_pkg.path, {"input_1": x}, board="host")
    np.testing.assert_array_equal(ran["Identity"], got["Identity"])


def test_bench_and_verify_at_the_top_level(kws_pkg):
    out = aot.bench(kws_pkg.path, board="host", warmup=1, repeat=3)
    assert out["board"] == "host" and out["repeat"] == 3 and out["median_ms"] > 0
    assert aot.verify(KWS, board="host")["ok"]


def test_run_of_a_model_packages_it_for_the_default_board(monkeypatch):
    monkeypatch.setenv(DEFAULT_BOARD_ENV, "host")
    model = MODELS / "mlperf_ad_fcae_int8.tflite"
    x = np.load(model.with_suffix(".input.npy"))
    got = aot.run(model, {aot.load(model).inputs[0]: x})
    assert list(got) == ["Identity"] and got["Identity"].dtype == np.int8


# --- models in memory ---------------------------------------------------------------

HELLO = MODELS / "tflm_hello_world_int8.tflite"
MNIST = MODELS / "onnx_mnist8.onnx"


def files(pkg) -> dict[str, bytes]:
    return {str(p.relative_to(pkg.path)): p.read_bytes()
            for p in sorted(pkg.path.rglob("*")) if p.is_file()}


def test_a_tflite_model_in_memory_packages_like_its_file(tmp_path):
    data = HELLO.read_bytes()
    kinds = {"bytes": data, "bytearray": bytearray(data), "memoryview": memoryview(data)}
    pkgs = {k: aot.package(m, board="host", out_dir=tmp_path / k) for k, m in kinds.items()}
    (tmp_path / "model.tflite").write_bytes(data)     # the stem a model in memory is named by
    from_file = aot.package(tmp_path / "model.tflite", board="host", out_dir=tmp_path / "file")
    first = files(pkgs["bytes"])
    assert all(files(p) == first for p in pkgs.values())          # deterministic, any buffer
    source = pkgs["bytes"].metadata["source"]
    assert source == {"file": "<memory>", "sha256": hashlib.sha256(data).hexdigest()}
    # the file's package differs in the recorded source only
    theirs = files(from_file)
    assert theirs.keys() == first.keys()
    assert [k for k in first if first[k] != theirs[k]] == ["metadata.json"]
    ours, file_meta = (json.loads(f["metadata.json"]) for f in (first, theirs))
    assert file_meta["source"]["sha256"] == source["sha256"]
    assert {**ours, "source": None} == {**file_meta, "source": None}


def test_an_onnx_model_proto_and_its_bytes_load_and_verify():
    import onnx

    proto = onnx.load(str(MNIST))
    want = aot.load(MNIST)
    for model in (proto, MNIST.read_bytes()):
        graph = aot.load(model)
        assert graph.inputs == want.inputs and graph.outputs == want.outputs
        assert set(graph.constants) == set(want.constants)
    result = aot.verify(proto, board="host")
    assert result.ok and result.model == "<memory>" and result.reference == "onnxruntime"
    assert result.inputs == "random"        # no saved input beside a model in memory


def test_a_model_of_another_type_names_the_type(tmp_path):
    for bad, shown in ((3, "int"), ([HELLO], "list"), (None, "NoneType")):
        with pytest.raises(aot.InputError, match=rf"; got {shown}$"):
            aot.load(bad)
    with pytest.raises(aot.InputError, match=r"or a Graph; got numpy.ndarray$"):
        aot.package(np.zeros(3), board="host", out_dir=tmp_path / "p")
    with pytest.raises(aot.InputError, match=r"got aot.ir.graph.Graph$"):
        aot.verify(aot.load(HELLO), board="host")      # the reference needs the model
    with pytest.raises(aot.ModelError, match=r"TFL3 at offset 4.*not a readable ONNX model"):
        aot.load(b"neither tflite nor onnx")
    assert not (tmp_path / "p").exists()


# --- PackageInfo ----------------------------------------------------------------------

def test_package_info_is_short_and_lists_inputs_and_outputs(kws_pkg):
    text = repr(kws_pkg)
    lines = text.splitlines()
    assert len(lines) == 3 and len(text) < 400, text
    name = "mlperf_kws_dscnn_int8"
    assert lines[0].startswith(f"<PackageInfo {name} at {kws_pkg.path}: board host, codegen c, "
                               f"entry {name}_run, {name}_run_with_arena; arena "
                               f"{kws_pkg.arena_bytes} bytes, weights {kws_pkg.params_bytes}")
    assert lines[1].split() == ["inputs", "input_1:[1,49,10,1]:int8"]
    assert lines[2].split() == ["outputs", "Identity:[1,12]:int8>"]
    [x], [y] = kws_pkg.inputs, kws_pkg.outputs
    quant = kws_pkg.metadata["inputs"][0]["quant"]
    assert x == aot.TensorInfo("input_1", (1, 49, 10, 1), "int8",
                               (quant["scale"][0], quant["zero_point"][0]))
    assert (y.name, y.shape, y.dtype) == ("Identity", (1, 12), "int8")
    assert y.quantization[1] == kws_pkg.metadata["outputs"][0]["quant"]["zero_point"][0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        x.name = "other"


def test_package_info_of_a_float_model_and_of_many_inputs():
    from aot.packaging.info import PackageInfo

    rows = [{"name": f"in{i}", "shape": [2, i + 1], "dtype": "float32"} for i in range(6)]
    info = PackageInfo(Path("p"), "m", "host", "llvm", 64, 64, 0, 0.0,
                       {"inputs": rows, "outputs": rows[:1], "memory_pools": {}})
    assert info.inputs[5] == aot.TensorInfo("in5", (2, 6), "float32", None)
    assert "in3:[2,4]:float32 ... (6 in all)" in repr(info) and "in4" not in repr(info)
    assert "m_run_with_pools" in repr(info)


# --- typed errors -----------------------------------------------------------------------

def test_error_families_are_aot_errors_exported_from_aot():
    for name in ("InputError", "BoardUnreachableError", "MissingToolError", "MismatchError",
                 "ModelError", "UnsupportedError", "BudgetError"):
        cls = getattr(aot, name)
        assert issubclass(cls, AotError) and cls is not AotError and name in aot.__all__


def test_wrong_inputs_and_options_are_input_errors(kws_pkg):
    x = np.load(KWS.with_suffix(".input.npy"))
    with aot.connect("host") as dev:
        with pytest.raises(aot.InputError, match="no input named 'input'"):
            dev.run(kws_pkg, {"input": x})
        with pytest.raises(aot.InputError, match=r"must be int8\[1, 49, 10, 1\]"):
            dev.run(kws_pkg, {"input_1": x.astype(np.int16)})
    with pytest.raises(aot.InputError, match="--count must be >= 1"):
        aot.verify(KWS, board="host", count=0)
    with pytest.raises(aot.InputError, match="--threads 0"):
        aot.package(KWS, board="host", threads=0, out_dir=kws_pkg.path.parent / "t0")


def test_a_missing_compiler_is_a_missing_tool_error(tmp_path, monkeypatch):
    monkeypatch.setenv("AOT_TOOL_PATH", str(tmp_path / "empty"))
    with pytest.raises(aot.MissingToolError, match="is not installed"):
        aot.package(HELLO, board="host", out_dir=tmp_path / "pkg")
    assert not (tmp_path / "pkg").exists()


def test_a_closed_port_is_a_board_unreachable_error():
    from aot.deploy.ssh import connect
    from aot.deploy.ssh_config import ssh_params
    from aot.targets import with_options

    with socket.socket() as s:       # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    board = with_options(get_board("rpi4"), host="127.0.0.1", port=port, connect_timeout_s=0.5)
    with pytest.raises(aot.BoardUnreachableError, match="connection refused"):
        connect(ssh_params(board))


# --- typed results ----------------------------------------------------------------------

# The keys `--json` printed when the results were dicts: the typed results
# keep them, no more and no fewer.
VERIFY_KEYS = {"ok", "reference", "inputs", "samples", "count", "model", "board", "outputs"}
OUTPUT_KEYS = {"name", "max_abs", "rmse", "l2r", "cosine", "top1_agreement", "max_lsb",
               "max_abs_err", "ok", "tolerance"}
BENCH_KEYS = {"median_ms", "mean_ms", "min_ms", "max_ms", "std_ms", "repeat", "warmup", "board",
              "codegen", "model", "emulated", "threads"}
KERNEL_KEYS = {"step", "name", "median_ms", "share", "macs", "macs_per_us", "dtype", "depth",
               "depthwise", "family", "cliff"}
ANALYZE_KEYS = {"model", "board", "target", "codegen", "total_macs", "weights_bytes",
                "weights_data_bytes", "arena_bytes", "arena_lower_bound_bytes", "state_bytes",
                "io_bytes", "layers"}
LAYER_KEYS = {"step", "name", "symbol", "ops", "macs", "weights_bytes", "activations_read_bytes",
              "activations_written_bytes", "tensors", "code_bytes"}


def cli_and_result(monkeypatch, capsys, module, name: str, argv: list[str]):
    """(exit code, --json stdout, the result the API gave that command)."""
    from aot.cli import main

    real, seen = getattr(module, name), []
    monkeypatch.setattr(module, name, lambda *a, **k: seen.append(real(*a, **k)) or seen[-1])
    code = main([*argv, "--json"])
    [result] = seen
    return code, capsys.readouterr().out, result


def check_json(printed: str, result, cls) -> dict:
    """The CLI printed result.to_json() byte for byte, and it reads back."""
    assert isinstance(result, cls)
    assert printed == json.dumps(result.to_json(), sort_keys=True) + "\n"
    report = json.loads(printed)
    assert cls.from_json(report).to_json() == report
    return report


def test_verify_result_is_the_cli_json(monkeypatch, capsys):
    import aot.api

    code, out, result = cli_and_result(monkeypatch, capsys, aot.api, "verify",
                                       ["verify", str(KWS), "--board", "host", "--count", "2"])
    report = check_json(out, result, aot.VerifyResult)
    assert code == 0 and set(report) == VERIFY_KEYS
    assert [set(r) for r in report["outputs"]] == [OUTPUT_KEYS]
    assert result.ok and result.samples == 2 and result.outputs[0].max_lsb == 0
    # the package summary is the API's, not the CLI's
    assert "package" in result and result["package"]["arena_bytes"] == result.package[
        "arena_bytes"] and "package" not in report
    assert result["outputs"][0]["name"] == "Identity" and result.get("stream") is None
    assert dict(result) == {**result} == result.as_dict()
    assert result.check() is result


def test_a_mismatch_exits_1_and_check_raises(monkeypatch, capsys):
    import aot.api

    code, out, result = cli_and_result(
        monkeypatch, capsys, aot.api, "verify",
        ["verify", str(MODELS / "mlperf_ad_fcae_f32.tflite"), "--board", "host", "--atol", "0",
         "--rtol", "0"])
    report = check_json(out, result, aot.VerifyResult)
    assert code == 1 and not report["ok"], report
    with pytest.raises(aot.MismatchError, match=r"differs from litert: Identity \(max \|err\|"):
        result.check()


def test_bench_result_is_the_cli_json(monkeypatch, capsys, kws_pkg):
    import aot.api

    kws = aot.package(KWS, board="host", out_dir=kws_pkg.path.parent / "profiled", profile=True)
    code, out, result = cli_and_result(
        monkeypatch, capsys, aot.api, "bench",
        ["bench", str(kws.path), "--board", "host", "--repeat", "3", "--warmup", "1", "--profile"])
    report = check_json(out, result, aot.BenchResult)
    assert code == 0 and set(report) == BENCH_KEYS | {"profile"}
    assert {frozenset(k) for k in report["profile"]} == {frozenset(KERNEL_KEYS)}
    assert result.repeat == 3 and result["median_ms"] == result.median_ms > 0
    assert result.profile[0].name == report["profile"][0]["name"] and result.note is None


def test_analyze_result_is_the_cli_json(monkeypatch, capsys):
    import aot.analysis

    code, out, result = cli_and_result(monkeypatch, capsys, aot.analysis, "analyze",
                                       ["analyze", str(KWS), "--board", "host"])
    report = check_json(out, result, aot.AnalyzeResult)
    assert code == 0 and set(report) == ANALYZE_KEYS | {"kernels_code_bytes", "memory"}
    assert {frozenset(la) for la in report["layers"]} == {frozenset(LAYER_KEYS)}
    assert result.total_macs == sum(la.macs for la in result.layers) == report["total_macs"]


def test_a_report_with_an_unknown_key_is_refused():
    with pytest.raises(ValueError, match=r"BenchResult: unknown report keys \['latency'\]"):
        aot.BenchResult.from_json({"latency": 1})

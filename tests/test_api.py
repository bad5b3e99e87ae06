"""The Python API a user reaches for first: aot.package / run / verify /
bench / analyze at the top level with the CLI's defaults, and
`dev.run(pkg, {name: array})` returning {name: array} as ONNX Runtime does."""
from __future__ import annotations

import inspect
import subprocess
import sys

import numpy as np
import pytest

import aot
from aot.deploy.reference import tflite_micro
from aot.errors import AotError
from aot.targets import DEFAULT_BOARD, DEFAULT_BOARD_ENV, get_board

from conftest import MODELS

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

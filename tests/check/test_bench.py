"""`aot bench` on the host: the command-line contract (keys, ordering, quiet
--json, one-line errors) and the statistics helpers. No timing thresholds:
the machine is shared and noisy."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from support import MODELS, REPO

# ~10 us a run: the harness's ns clock resolves it.
MODEL = MODELS / "mlperf_ad_fcae_int8.tflite"
KEYS = {"median_ms", "mean_ms", "min_ms", "max_ms", "std_ms", "repeat", "board"}


def aot(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aot", *args], capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    from aot.api import package

    return package(MODEL, board="host", codegen="llvm",
                   out_dir=tmp_path_factory.mktemp("bench") / "pkg").path


def check_report(out: dict, repeat: int) -> None:
    assert KEYS <= out.keys(), out
    assert out["repeat"] == repeat and out["board"] == "host"
    for key in ("median_ms", "mean_ms", "min_ms", "max_ms"):
        assert out[key] > 0, (key, out)
    assert out["std_ms"] >= 0
    assert out["min_ms"] <= out["median_ms"] <= out["max_ms"]
    assert out["min_ms"] <= out["mean_ms"] <= out["max_ms"]


def test_bench_package_json_is_one_quiet_line(pkg):
    r = aot("bench", str(pkg), "--repeat", "7", "--warmup", "2", "--json")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    lines = r.stdout.splitlines()
    assert len(lines) == 1, r.stdout
    out = json.loads(lines[0])
    check_report(out, 7)
    assert out["warmup"] == 2 and out["codegen"] == "llvm"


def test_bench_model_packages_it_first():
    r = aot("bench", str(MODEL), "--codegen", "c", "--repeat", "3", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    check_report(out, 3)
    assert out["codegen"] == "c" and out["model"] == "mlperf_ad_fcae_int8"


def test_bench_prints_a_table(pkg):
    r = aot("bench", str(pkg), "--repeat", "3")
    assert r.returncode == 0, r.stderr
    assert "median ms" in r.stdout and "mlperf_ad_fcae_int8" in r.stdout
    assert not r.stdout.lstrip().startswith("{")


@pytest.mark.parametrize("args, needle", [
    (["--repeat", "0"], "--repeat"),
    (["--repeat", "100001"], "--repeat"),
    (["--warmup", "-1"], "--warmup"),
    (["--board", "no-such-board"], "unknown board"),
])
def test_bench_bad_options_are_one_line_errors(pkg, args, needle):
    r = aot("bench", str(pkg), *args, "--json")
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aot: error: ") and needle in lines[0]
    assert json.loads(r.stdout)["ok"] is False


def test_bench_missing_model_is_one_line_error(tmp_path):
    r = aot("bench", str(tmp_path / "missing.tflite"))
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


# ------------------------------------------------------------------ helpers

def test_stats_of_known_values():
    from aot.check.timing import stats_of

    s = stats_of([4.0, 1.0, 3.0, 2.0, 10.0])
    assert (s.n, s.median_ms, s.min_ms, s.max_ms, s.mean_ms) == (5, 3.0, 1.0, 10.0, 4.0)
    assert s.std_ms == pytest.approx(np.std([4, 1, 3, 2, 10]))
    assert s.p10_ms == pytest.approx(1.4)
    with pytest.raises(ValueError):
        stats_of([])


def test_interleave_rotates_and_collects():
    from aot.check.timing import interleave

    order = []

    def contender(name, value):
        def run():
            order.append(name)
            return [value, value]
        return run

    times = interleave({"a": contender("a", 1.0), "b": contender("b", 2.0),
                        "c": contender("c", 3.0)}, rounds=3)
    assert order == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert times == {"a": [1.0] * 6, "b": [2.0] * 6, "c": [3.0] * 6}


def test_time_calls_counts_and_is_positive():
    from aot.check.timing import time_calls

    calls = []
    times = time_calls(lambda: calls.append(1), repeat=5, warmup=2)
    assert len(calls) == 7 and len(times) == 5
    assert all(t >= 0 for t in times)


def test_package_inputs_match_the_metadata(pkg):
    from aot.check.timing import package_inputs
    from aot.packaging.metadata import read_metadata

    meta = read_metadata(pkg)
    ins = package_inputs(meta)
    assert [(list(a.shape), a.dtype.name) for a in ins] == \
        [(i["shape"], i["dtype"]) for i in meta["inputs"]]


def test_harness_times_in_nanoseconds(pkg):
    """A ~10 us model must not be timed in whole microseconds (ad_fcae's
    ratios jumped 10% per tick); the serve reply and the JSON line agree."""
    import aot
    from aot.check.timing import package_inputs
    from aot.deploy import run_package
    from aot.packaging.metadata import read_metadata
    from aot.targets import get_board

    board = get_board("host")
    x = package_inputs(read_metadata(pkg))
    once = run_package(pkg, board, x, warmup=1, runs=20)
    with aot.connect(board) as dev:
        served = dev.request(pkg, x, warmup=1, runs=20)
    for result in (once, served):
        assert len(result.times_ns) == 20 and all(t > 0 for t in result.times_ns)
        assert any(t % 1000 for t in result.times_ns), result.times_ns
        assert result.times_us == [t / 1000 for t in result.times_ns]


def test_report_of_a_microsecond_harness_still_reads():
    from aot.deploy.host import report_times_ns

    assert report_times_ns({"times_us": [3, 12]}) == [3000, 12000]
    assert report_times_ns({"times_ns": [3001, 12]}) == [3001, 12]


# ------------------------------------------------------- bench/compare.py

def compare(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "bench" / "compare.py"), *args],
                          capture_output=True, text=True, timeout=300)


def test_compare_smoke(tmp_path):
    """One small model, one codegen, one short round: every contender timed,
    the package's outputs right, the JSON complete."""
    out = tmp_path / "compare.json"
    r = compare("--models", "ad", "--codegen", "llvm", "--rounds", "1", "--batch", "2",
                "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "summary" in r.stdout
    rows = json.loads(out.read_text())["models"]
    assert [row["model"] for row in rows] == ["mlperf_ad_fcae_int8", "mlperf_ad_fcae_f32"]
    for row in rows:
        assert row["outputs_ok"], row["check"]
        assert row["arena_lower_bound_bytes"] <= row["arena_bytes"]
        assert row["tflm_arena_bytes"] > 0
        for s in row["contenders"].values():
            assert s["n"] == 2 and 0 < s["min_ms"] <= s["median_ms"] <= s["max_ms"]
    assert set(rows[1]["contenders"]) == {"aot llvm", "onnxruntime", "litert xnnpack",
                                          "litert builtin"}

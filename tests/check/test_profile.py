"""Per-kernel profiling: --profile packages time every kernel call (ns
clock), the harness reports the times one-shot and in serve mode, `aot
bench --profile` summarizes them (--json, --plot); without AOT_PROFILE
the entry point has no timer call at all."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import aot
from aot.api import package
from aot.check.timing import package_inputs, plot_profile, profile_stats
from aot.cli import main
from aot.deploy import run_package
from aot.errors import AotError
from aot.targets import get_board
from support import MODELS

HOST = get_board("host")
MODEL = MODELS / "mlperf_kws_dscnn_int8.tflite"
PROFILE_SYMBOLS = ("aot_platform_timer_ns", "aot_platform_profile")


@pytest.fixture(scope="module")
def pkgs(tmp_path_factory) -> dict[str, Path]:
    graph = aot.optimize(aot.load(MODEL))
    root = tmp_path_factory.mktemp("profile")
    return {"profile": package(graph, board="host", out_dir=root / "profile", profile=True).path,
            "plain": package(graph, board="host", out_dir=root / "plain").path}


def meta_of(pkg: Path) -> dict:
    return json.loads((pkg / "metadata.json").read_text())


def entry_point_undefined(pkg: Path) -> set[str]:
    """The symbols the entry point's object (in lib/lib<name>.a) calls out to."""
    name = meta_of(pkg)["name"]
    out = subprocess.run(["nm", "-u", str(pkg / "lib" / f"lib{name}.a")], capture_output=True,
                         text=True, check=True).stdout
    member, undefined = None, set()
    for line in out.splitlines():
        if line.endswith(".o:"):
            member = line[:-1]
        elif member == f"{name}.o" and line.strip():
            undefined.add(line.split()[-1])
    return undefined


def test_profile_times_every_kernel_one_shot_and_served(pkgs):
    pkg = pkgs["profile"]
    meta = meta_of(pkg)
    assert meta["profile"] is True and meta["checks"] is False
    kernels = meta["kernels"]
    assert kernels and [k["step"] for k in kernels] == list(range(len(kernels)))
    x = package_inputs(meta)
    once = run_package(pkg, HOST, x, warmup=2, runs=7)
    assert len(once.profile_ns) == 7
    assert all(len(row) == len(kernels) for row in once.profile_ns)
    # ns resolution: the kernels (a few us each) are not multiples of 1000 ns
    assert any(t % 1000 for row in once.profile_ns for t in row)
    # the kernels run inside the timed run: their sum is at most the run's time
    for row, total_ns in zip(once.profile_ns, once.times_ns):
        assert 0 < sum(row) <= total_ns
    with aot.connect(HOST) as dev:
        served = dev.request(pkg, x, warmup=1, runs=5)
    assert len(served.profile_ns) == 5 and all(len(r) == len(kernels)
                                               for r in served.profile_ns)
    np.testing.assert_array_equal(served.outputs[0], once.outputs[0])
    stats = profile_stats(meta, once.profile_ns)
    assert [s.name for s in stats] == [k["name"] for k in kernels]
    assert sum(s.share for s in stats) == pytest.approx(1.0)
    assert all(s.median_ms > 0 for s in stats)


def test_profile_hooks_compile_out_without_the_macro(pkgs):
    assert not set(PROFILE_SYMBOLS) & entry_point_undefined(pkgs["plain"])
    assert set(PROFILE_SYMBOLS) <= entry_point_undefined(pkgs["profile"])   # the control
    x = package_inputs(meta_of(pkgs["plain"]))
    assert run_package(pkgs["plain"], HOST, x).profile_ns is None


def test_bench_profile_json_and_plot(pkgs, tmp_path, capsys):
    plot = tmp_path / "kernels.png"
    assert main(["bench", str(pkgs["profile"]), "--repeat", "20", "--warmup", "2", "--profile",
                 "--plot", str(plot), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    kernels = meta_of(pkgs["profile"])["kernels"]
    assert [p["name"] for p in out["profile"]] == [k["name"] for k in kernels]
    assert sum(p["share"] for p in out["profile"]) == pytest.approx(1.0)
    assert all(p["median_ms"] > 0 for p in out["profile"])
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["kernels.png"]     # no temp file left


def test_bench_profile_table(pkgs, capsys):
    assert main(["bench", str(pkgs["profile"]), "--repeat", "5", "--profile"]) == 0
    text = capsys.readouterr().out
    assert "median us" in text and "share %" in text
    assert meta_of(pkgs["profile"])["kernels"][-1]["name"] in text


def test_bench_profile_of_a_model_packages_with_profile(tmp_path, capsys):
    model = MODELS / "tflm_hello_world_f32.tflite"
    assert main(["bench", str(model), "--repeat", "5", "--profile", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["profile"]) == 3


def test_bench_profile_errors(pkgs, tmp_path, capsys, monkeypatch):
    assert main(["bench", str(pkgs["plain"]), "--profile", "--repeat", "2"]) == 2
    assert "packaged without --profile" in capsys.readouterr().err
    assert main(["bench", str(pkgs["profile"]), "--plot", str(tmp_path / "a.png")]) == 2
    assert "--plot draws the per-kernel profile: add --profile" in capsys.readouterr().err
    with pytest.raises(AotError, match=r"the harness reported no per-kernel times"):
        profile_stats(meta_of(pkgs["plain"]), None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)      # as if not installed
    with pytest.raises(AotError, match=r"--plot needs matplotlib.*pip install 'aot\[plot\]'"):
        plot_profile([], "t", tmp_path / "b.png")
    assert not (tmp_path / "b.png").exists()


def test_bench_plot_path_is_checked_before_running(pkgs, tmp_path, capsys):
    assert main(["bench", str(pkgs["profile"]), "--profile", "--plot",
                 str(tmp_path / "no" / "k.png")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["bench", str(pkgs["profile"]), "--profile", "--plot",
                 str(tmp_path / "k.svg")]) == 2
    assert "the chart is a PNG file" in capsys.readouterr().err


def test_bench_trace_is_a_perfetto_trace_of_every_kernel_call(pkgs, tmp_path, capsys):
    trace = tmp_path / "kws.json"
    assert main(["bench", str(pkgs["profile"]), "--repeat", "6", "--warmup", "1", "--profile",
                 "--trace", str(trace), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    doc = json.loads(trace.read_text())
    events = doc["traceEvents"]
    for e in events:
        assert {"name", "ph", "ts", "dur", "pid", "tid", "args"} <= set(e)
        assert e["ph"] == "X" and e["dur"] >= 0 and e["ts"] >= 0
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)
    names = [k["name"] for k in meta_of(pkgs["profile"])["kernels"]]
    runs = [e for e in events if e["cat"] == "run"]
    calls = [e for e in events if e["cat"] == "kernel"]
    assert len(runs) == 6 and [e["name"] for e in calls] == names * 6
    assert [e["args"]["step"] for e in calls] == list(range(len(names))) * 6
    for run in runs:         # each run's kernels inside it, at most its time together
        inside = [e for e in calls if e["args"]["run"] == run["args"]["run"]]
        assert sum(e["dur"] for e in inside) <= run["dur"] + 1e-9
        assert all(run["ts"] <= e["ts"] and e["ts"] + e["dur"] <= run["ts"] + run["dur"] + 1e-6
                   for e in inside)
    assert sum(e["dur"] for e in calls) <= sum(e["dur"] for e in runs)
    # the medians the table prints are the trace's
    for k, row in enumerate(out["profile"]):
        durs = [e["dur"] for e in calls if e["args"]["step"] == k]
        assert row["median_ms"] * 1000 == pytest.approx(float(np.median(durs)))
    assert doc["otherData"]["board"] == "host"
    assert [p.name for p in tmp_path.iterdir()] == ["kws.json"]     # no temp file left


def test_bench_trace_errors_before_running(pkgs, tmp_path, capsys):
    for argv, needle in ((["--trace", str(tmp_path / "t.json")],
                          "--trace exports the per-kernel profile: add --profile"),
                         (["--profile", "--trace", str(tmp_path / "t.txt")],
                          "the trace is a JSON file"),
                         (["--profile", "--trace", str(tmp_path / "no" / "t.json")],
                          "does not exist")):
        assert main(["bench", str(pkgs["profile"]), "--repeat", "2", *argv]) == 2, argv
        assert needle in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_bench_plot_without_matplotlib_fails_before_running(pkgs, tmp_path, capsys,
                                                            monkeypatch):
    import aot.check.timing

    monkeypatch.setitem(sys.modules, "matplotlib", None)      # as if not installed
    monkeypatch.setattr(aot.check.timing, "bench_package", lambda *a, **k: pytest.fail("ran"))
    assert main(["bench", str(pkgs["profile"]), "--profile", "--plot",
                 str(tmp_path / "k.png")]) == 2
    assert capsys.readouterr().err.strip() == \
        "aot: error: --plot needs matplotlib: pip install 'aot[plot]'"

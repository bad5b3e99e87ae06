"""The XNNPACK anchor counted on the emulated Arm core (aot/deploy/arm64_python.py,
bench/compare.py --count-instructions).

The end-to-end test builds the arm64 Python sysroot into the cache when it is
missing (Debian arm64 packages and aarch64 wheels, about 35 MB of downloads),
then counts the smallest model, ad, both ways: about 25 s with the sysroot
built, 35 s without on this machine.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO
from aot.deploy.arm64_python import AnchorCount, per_inference
from aot.errors import AotError

COMPARE = REPO / "bench" / "compare.py"


def compare(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(COMPARE), *args], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ))


def test_per_inference_from_the_three_run_lengths():
    totals = {0: [1000, 1000], 10: [1000 + 10 * 500 + 7], 20: [1000 + 20 * 500 + 10]}
    per, halves = per_inference(totals, 10)
    assert halves == (501, 500)
    assert per == 500              # the second half: the loop warmed up
    count = AnchorCount(per, halves, 10, totals, [])
    assert count.spread == pytest.approx(1 / 500)


def test_per_inference_refuses_a_process_that_is_not_deterministic():
    with pytest.raises(AotError, match="not deterministic"):
        per_inference({0: [1000, 1003], 10: [6000], 20: [11000]}, 10)


@pytest.mark.parametrize("args, message", [
    (["--count-instructions", "--board", "qemu-aarch64", "--cpu", "cortex-a53"],
     "the emulated core is one of cortex-a72, cortex-a76"),
    (["--count-instructions", "--board", "qemu-aarch64", "--cpu", "1"],
     "--cpu names the emulated core"),
    (["--count-instructions", "--board", "qemu-armv7"], "needs --board qemu-aarch64"),
    (["--board", "qemu-aarch64", "--cpu", "cortex-a72"], "an emulated core with "
     "--count-instructions"),
])
def test_count_instructions_options_are_checked(args, message):
    r = compare("--models", "ad", *args)
    assert r.returncode == 2
    assert message in r.stderr, r.stderr


def test_ad_counted_both_ways_on_the_emulated_a72(tmp_path):
    out_file = tmp_path / "out.json"
    r = compare("--board", "qemu-aarch64", "--count-instructions", "--cpu", "cortex-a72",
                "--models", "ad", "--codegen", "c", "--invocations", "4",
                "--json", str(out_file))
    assert r.returncode == 0, r.stderr
    out = json.loads(out_file.read_text())
    assert (out["emulated_cpu"], out["board"], out["invocations"]) == ("cortex-a72", "rpi4", 4)
    assert [m["model"] for m in out["models"]] == ["mlperf_ad_fcae_int8", "mlperf_ad_fcae_f32"]
    for m in out["models"]:
        assert m["outputs_ok"] is True, m["check"]
        counts = m["aot"]["c"]["instructions"]
        assert len(set(counts)) == 1, counts          # the harness's runs count the same
        x = m["xnnpack"]
        assert len(set(x["totals"]["0"])) == 1        # checked by per_inference too
        # A whole Python process is about 1.5e9 instructions; an inference of
        # ad is 5e4..5e5: the difference of totals must land there.
        assert 10_000 < x["per_inference"] < 1_000_000, x
        assert x["spread"] < 0.02, x
        assert x["totals"]["8"][0] - x["totals"]["4"][0] == pytest.approx(
            4 * x["per_inference"], abs=2)
        assert m["aot_over_xnnpack"]["c"] == pytest.approx(
            m["aot"]["c"]["median_instructions"] / x["per_inference"])
        # XNNPACK ran the real model: its outputs near the reference's.
        assert m["xnnpack_max_abs_err_vs_reference"] <= (2 if m["model"].endswith("_int8")
                                                         else 1e-3), m
    ratios = sorted(m["aot_over_xnnpack"]["c"] for m in out["models"])
    assert out["median_aot_over_xnnpack"]["c"]["all"] == pytest.approx(sum(ratios) / 2)
    assert "instructions per inference on the emulated cortex-a72" in r.stdout
    assert "onnxruntime: left out" in r.stdout
    assert "ai_edge_litert-1.4.0-cp311" in r.stdout
    assert "ai_edge_litert-1.4.0-cp311" in out["xnnpack_sysroot"]["wheels"][0]

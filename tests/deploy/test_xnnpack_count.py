"""The XNNPACK anchor counted on the emulated Arm core (aot/deploy/arm64_python.py,
bench/compare.py --count-instructions).

The end-to-end test builds the arm64 Python sysroot into the cache when it is
missing (Debian arm64 packages and aarch64 wheels, about 35 MB of downloads),
then counts the smallest model, ad, both ways: about 25 s with the sysroot
built, 35 s without on this machine.

The two identical 1-invocation runs must count the same within a stated
tolerance, not exactly: on an Intel Xeon two of them differed by 166
instructions in 1.5e9 (none here, an AMD EPYC). Such a difference d moves
the count per inference by at most 2d/N, a tenth of a percent at most is
accepted (REPEAT_TOLERANCE); real nondeterminism (address randomization:
about 28,000; a spinning thread pool: millions) is still refused.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support import REPO
from aot.deploy.arm64_python import AnchorCount, check_no_bytecode, per_inference
from aot.errors import AotError

COMPARE = REPO / "bench" / "compare.py"


def compare(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(COMPARE), *args], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ))


def test_per_inference_from_the_three_run_lengths():
    totals = {0: [1000, 1000], 10: [1000 + 10 * 500 + 7], 20: [1000 + 20 * 500 + 10]}
    per, halves, noise = per_inference(totals, 10)
    assert halves == (501, 500)
    assert per == 500              # the second half: the loop warmed up
    assert noise == 0
    count = AnchorCount(per, halves, 10, totals, [], noise)
    assert count.spread == pytest.approx(1 / 500)
    assert count.as_json()["noise"] == 0


def test_per_inference_accepts_noise_within_the_tolerance():
    # The Xeon's two runs of ad int8: 166 apart, N = 20, about 90,000 per
    # inference: the count moves by 17 at most, under 0.1% (90).
    t0 = 1_518_990_190
    totals = {0: [t0, t0 + 166], 20: [t0 + 20 * 90_000], 40: [t0 + 40 * 90_000]}
    assert per_inference(totals, 20) == (90_000, (90_000, 90_000), 166)


@pytest.mark.parametrize("noise", [901, 28_000])   # 2d/N just over 0.1% of 90,000; no setarch -R
def test_per_inference_refuses_a_process_that_is_not_deterministic(noise):
    t0 = 1_518_990_190
    totals = {0: [t0 + noise, t0], 20: [t0 + 20 * 90_000], 40: [t0 + 40 * 90_000]}
    with pytest.raises(AotError, match=f"counted {t0:,} and {t0 + noise:,} instructions: "
                       "the process is not deterministic"):
        per_inference(totals, 20)


def test_counting_refuses_a_sysroot_with_bytecode_written_into_it(tmp_path):
    cache = tmp_path / "usr/lib/python3.11/encodings/__pycache__"
    cache.mkdir(parents=True)
    with pytest.raises(AotError, match="holds bytecode written after it was built "
                       r"\(usr/lib/python3.11/encodings/__pycache__, 1 in all"):
        check_no_bytecode(tmp_path)
    cache.rmdir()
    check_no_bytecode(tmp_path)


@pytest.mark.parametrize("args, message", [
    (["--count-instructions", "--board", "qemu-aarch64", "--cpu", "cortex-a53"],
     "the emulated core is one of cortex-a72, cortex-a76"),
    (["--count-instructions", "--board", "qemu-aarch64", "--cpu", "1"],
     "--cpu names the emulated core"),
    (["--count-instructions", "--board", "qemu-armv7"], "needs --board qemu-aarch64"),
    (["--board", "qemu-aarch64", "--cpu", "cortex-a72"], "an emulated core with "
     "--count-instructions"),
    (["--count-instructions", "--board", "qemu-aarch64", "--trials", "4"],
     "--trials and --tuning-dir go with --tuned"),
    (["--count-instructions", "--board", "qemu-aarch64", "--tuned", "--trials", "0"],
     "--trials must be >= 1"),
    (["--count-instructions", "--board", "qemu-aarch64", "--tuned", "--threads", "2"],
     "aot tune measures one thread"),
    (["--board", "qemu-aarch64", "--tuned"], "boards of this machine only"),
])
def test_count_instructions_options_are_checked(args, message):
    r = compare("--models", "ad", *args)
    assert r.returncode == 2
    assert message in r.stderr, r.stderr


@pytest.mark.fast
def test_tuning_logs_are_named_by_the_core_that_counted_them(tmp_path, monkeypatch):
    import importlib.util

    from aot.targets import get_board

    spec = importlib.util.spec_from_file_location("compare", COMPARE)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "compare", bench)    # its dataclasses look it up
    spec.loader.exec_module(bench)
    case = bench.find_cases(["mlperf_ad_fcae"])[0]
    qemu = get_board("qemu-aarch64")
    names = {cpu: bench.tuning_log(case, get_board(board), "c", 8, tmp_path, qemu).name
             for cpu, board in bench.EMULATED_CPUS.items()}
    assert ".rpi4@qemu-aarch64-cortex-a72.c." in names["cortex-a72"]
    assert ".rpi5@qemu-aarch64-cortex-a76.c." in names["cortex-a76"]
    assert names["cortex-a72"].endswith(".t8.jsonl")
    here = bench.tuning_log(case, get_board("host"), "c", 8, tmp_path).name
    assert ".host.c." in here


def test_ad_counted_both_ways_on_the_emulated_a72(tmp_path):
    out_file = tmp_path / "out.json"
    r = compare("--board", "qemu-aarch64", "--count-instructions", "--cpu", "cortex-a72",
                "--models", "ad", "--codegen", "c", "--invocations", "20",
                "--json", str(out_file))
    assert r.returncode == 0, r.stderr
    out = json.loads(out_file.read_text())
    assert (out["emulated_cpu"], out["board"], out["invocations"]) == ("cortex-a72", "rpi4", 20)
    assert [m["model"] for m in out["models"]] == ["mlperf_ad_fcae_int8", "mlperf_ad_fcae_f32"]
    for m in out["models"]:
        assert m["outputs_ok"] is True, m["check"]
        counts = m["aot"]["c"]["instructions"]
        assert len(set(counts)) == 1, counts          # the harness's runs count the same
        x = m["xnnpack"]
        # Repeated runs agree within the tolerance (checked by per_inference).
        assert max(x["totals"]["0"]) - min(x["totals"]["0"]) == x["noise"]
        assert 2 * x["noise"] / 20 <= 0.001 * x["per_inference"], x
        # A whole Python process is about 1.5e9 instructions; an inference of
        # ad is 5e4..5e5: the difference of totals must land there.
        assert 10_000 < x["per_inference"] < 1_000_000, x
        assert x["spread"] < 0.02, x
        assert x["totals"]["40"][0] - x["totals"]["20"][0] == pytest.approx(
            20 * x["per_inference"], abs=10)
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

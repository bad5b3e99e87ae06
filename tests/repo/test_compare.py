"""bench/compare.py on a board that is not this machine: aot alone, its
outputs checked, its timings from the harness on the board.

qemu-aarch64 (qemu-user) needs no VM; the SSH path runs against a real sshd
on 127.0.0.1 (tests/support/sshd.py) as board rpi4, the harness under qemu-aarch64
there (--exec-prefix), as tests/deploy/test_ssh.py does.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support import REPO
from support.sshd import sshd  # noqa: F401 (the fixture)

COMPARE = REPO / "bench" / "compare.py"


def compare(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(COMPARE), *args], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **(env or {})})


def check_alone(out: dict, board: str, codegens: list[str]) -> None:
    """Both ad models, each codegen timed on the board, outputs ok, memory
    numbers, and no anchor anywhere."""
    assert out["board"]["name"] == board
    assert out["anchors"] == []
    assert [m["model"] for m in out["models"]] == ["mlperf_ad_fcae_int8", "mlperf_ad_fcae_f32"]
    for m in out["models"]:
        assert sorted(m["contenders"]) == [f"aot {cg}" for cg in codegens], m["contenders"]
        assert "best_anchor" not in m and "aot_over_best_anchor" not in m
        for s in m["contenders"].values():
            assert s["n"] == out["rounds"] * out["batch"]
            assert 0 < s["p10_ms"] <= s["median_ms"]
        assert m["outputs_ok"] is True, m["check"]
        assert all(f"{cg}: ok vs " in m["check"] for cg in codegens), m["check"]
        assert 0 < m["arena_lower_bound_bytes"] <= m["arena_bytes"]
        assert m["tflm_arena_bytes"] > 0


def test_qemu_user_board_reports_aot_alone(tmp_path):
    out_file = tmp_path / "out.json"
    r = compare("--models", "ad", "--board", "qemu-aarch64", "--rounds", "2", "--batch", "3",
                "--json", str(out_file))
    assert r.returncode == 0, r.stderr
    out = json.loads(out_file.read_text())
    check_alone(out, "qemu-aarch64", ["c", "llvm"])
    assert (out["rounds"], out["batch"]) == (2, 3)
    assert out["board"]["emulated"] is True and out["board"]["transport"] == "qemu-user"
    assert "emulator's on this machine" in out["note"]
    assert "is emulated (qemu-user)" in r.stdout
    assert "summary on qemu-aarch64" in r.stdout
    for anchor in ("onnxruntime", "xnnpack", "builtin"):
        assert anchor not in r.stdout


def test_ssh_board_takes_the_cli_ssh_options(sshd, tmp_path):  # noqa: F811
    """rpi4 with --host/--port/--user/--key/--known-hosts as aot takes them;
    nothing is left in the board's work dir."""
    remote_tmp = tmp_path / "remote"
    remote_tmp.mkdir()
    config = tmp_path / "boards.toml"
    config.write_text(f'[rpi4]\nremote_tmp = "{remote_tmp}"\nconnect_timeout_s = 3\n')
    out_file = tmp_path / "out.json"
    r = compare("--models", "ad", "--board", "rpi4", *sshd.cli_args(), "--exec-prefix",
                "qemu-aarch64", "--codegen", "c", "--rounds", "2", "--batch", "2",
                "--json", str(out_file), env={"AOT_CONFIG": str(config)})
    assert r.returncode == 0, r.stderr
    out = json.loads(out_file.read_text())
    check_alone(out, "rpi4", ["c"])
    assert out["board"]["emulated"] is False and out["note"] is None
    assert out["host"]["pinned_cpu"] is None      # the harness runs on the board
    assert "emulated" not in r.stdout
    assert list(remote_tmp.iterdir()) == [], "a remote work dir was left behind"


def one_line_error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("compare.py: error: "), r.stderr
    assert r.stdout == ""
    return lines[0]


def test_bad_boards_are_one_line_errors(tmp_path):
    no_config = tmp_path / "boards.toml"
    no_config.write_text("")
    assert "unknown board 'no-such-board'" in one_line_error(
        compare("--models", "ad", "--board", "no-such-board"))
    assert "--host: only for a board reached over SSH" in one_line_error(
        compare("--models", "ad", "--board", "qemu-aarch64", "--host", "10.0.0.1"))
    assert "board 'rpi4' has no host" in one_line_error(
        compare("--models", "ad", "--board", "rpi4", env={"AOT_CONFIG": str(no_config)}))


def test_tuned_times_tuned_packages_beside_untuned_and_reuses_the_log(tmp_path):
    """--tuned: the model tuned first (2 trials), its tuned package timed in
    the same rounds as the untuned one and the anchors, checked, its ratio and
    the medians reported; a second run reuses the log instead of tuning."""
    tuning = tmp_path / "tuning"
    args = ["--models", "ad", "--board", "host", "--codegen", "c", "--rounds", "2",
            "--batch", "3", "--tuned", "--trials", "2", "--tuning-dir", str(tuning)]
    out_file = tmp_path / "out.json"
    r = compare(*args, "--json", str(out_file))
    assert r.returncode == 0, r.stderr
    out = json.loads(out_file.read_text())
    assert out["tuned"] == {"trials": 2, "dir": str(tuning)}
    assert out["host"]["board"] == "host" and "-march=x86-64-v3" in out["host"]["cflags"]
    logs = sorted(tuning.glob("*.jsonl"))
    assert [p.name.split(".")[0] for p in logs] == ["mlperf_ad_fcae_f32", "mlperf_ad_fcae_int8"]
    assert all(".host.c.aot-" in p.name and p.name.endswith(".t2.jsonl") for p in logs)
    assert not list(tuning.glob("*.partial"))
    for m in out["models"]:
        anchors = ["litert builtin", "litert xnnpack"] + (
            ["onnxruntime"] if m["model"].endswith("_f32") else [])
        assert sorted(m["contenders"]) == ["aot c", "aot c tuned", *anchors]
        assert m["outputs_ok"] is True and "c tuned: ok vs " in m["check"], m["check"]
        assert set(m["aot_over_best_anchor"]) == {"aot c", "aot c tuned"}
        assert list(m["tuning"]) == ["c"]            # tuned with the codegen it is timed in
        assert m["tuning"]["c"]["reused"] is False and m["tuning"]["c"]["trials"] == 2
        assert m["tuning"]["c"]["records"] >= m["tuning"]["c"]["workloads"] > 0
    ratios = {v: sorted(m["aot_over_best_anchor"][f"aot {v}"]["median"] for m in out["models"])
              for v in ("c", "c tuned")}
    for v, got in out["median_aot_over_best_anchor"].items():
        assert got["all"] == sum(ratios[v]) / 2       # the median of two
    assert "median aot c tuned / best anchor: all " in r.stdout
    assert "aot tune --trials 2 --codegen <the same> on host" in r.stdout

    again = compare(*args, "--rounds", "1", "--json", str(out_file))
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("reusing ") == 2 and "tuned mlperf" not in again.stderr
    assert all(m["tuning"]["c"]["reused"] for m in json.loads(out_file.read_text())["models"])


def test_tuned_options_are_checked():
    r = compare("--trials", "4", "--models", "ad")
    assert r.returncode == 2 and "--trials and --tuning-dir go with --tuned" in r.stderr
    r = compare("--tuned", "--board", "qemu-aarch64", "--models", "ad")
    assert r.returncode == 2 and "--tuned compares with ONNX Runtime" in r.stderr

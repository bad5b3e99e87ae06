"""What aot reads from outside a model, fuzzed and pinned: the serve
protocol (2,000 seeded cases of a fake harness), the harness's JSON report
and output files, .npy inputs and board/config TOML (aot/testing/fuzz/io.py). Each
case ends in a result consistent with the request or an AotError; never
another exception, a hang or an answer with more runs than were asked for.
scripts/fuzz.py --io runs the same fuzzers longer.
"""
from __future__ import annotations

import collections
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import aot
from aot.errors import AotError
from aot.testing.fuzz.io import fake_meta, run_io_case, serve_case, transcript
from support import MODELS

CASES = {"serve": 2000, "report": 2000, "npy": 2000, "toml": 600}
CHUNKS = {"serve": 4, "report": 1, "npy": 1, "toml": 2}


def _chunks():
    return [(kind, k) for kind in CASES for k in range(CHUNKS[kind])]


@pytest.mark.parametrize("kind, chunk", _chunks())
def test_fuzz_cases_end_in_a_result_or_one_error(kind, chunk, tmp_path, record_property):
    counts: collections.Counter = collections.Counter()
    failures = []
    for seed in range(chunk, CASES[kind], CHUNKS[kind]):
        outcome, detail = run_io_case(kind, seed, tmp_path)
        counts[outcome.status] += 1
        if outcome.failed:
            failures.append(f"{kind} seed {seed} ({detail}): {outcome.error_class}: "
                            f"{outcome.message}")
    record_property("summary", f"{kind} fuzz chunk {chunk + 1}/{CHUNKS[kind]}: "
                    f"{sum(counts.values())} cases, {counts['accepted']} accepted, "
                    f"{counts['refused']} refused, {counts['failed']} failures")
    assert not failures, "\n".join(failures[:20])
    assert counts["accepted"] and counts["refused"]     # both sides of the judge were reached


def test_io_cases_are_deterministic():
    for seed in (0, 5, 17):
        assert serve_case(seed)[1] == serve_case(seed)[1]


# ---- the serve client: lengths and counts -------------------------------------------------

def _client_on(data: bytes, meta: dict):
    import io

    from aot.deploy.serve import ServeClient
    return ServeClient(io.BytesIO(), io.BytesIO(data), meta)


def _meta(seed: int = 3) -> dict:
    import random
    return fake_meta(random.Random(seed))


def _with(segments, **values) -> bytes:
    out = b""
    for name, width, data in segments:
        if name in values:
            data = struct.pack("<I" if width == "u32" else "<Q", values[name])
        out += data
    return out


def test_a_hello_claiming_2_32_inputs_is_refused_by_field():
    import random
    meta = _meta()
    seg = transcript(meta, 1, random.Random(0))
    with pytest.raises(AotError, match="the hello's input count is 4294967295, "
                                       "metadata.json says"):
        _client_on(_with(seg, **{"hello.inputs": (1 << 32) - 1}), meta)


def test_an_index_error_frame_without_a_message_says_what_stopped():
    """A case scripts/fuzz.py found: an error frame (index check) with an
    empty message became an AotError with no text."""
    outcome, detail = serve_case(10942)
    assert "error frame" in detail
    assert outcome.status == "refused" and "index check" in outcome.message, outcome


def test_a_reply_with_more_runs_than_requested_is_refused():
    import random
    meta = _meta()
    seg = transcript(meta, 2, random.Random(0))
    client = _client_on(_with(seg, **{"reply.runs": 3}), meta)
    inputs = [np.zeros(s["shape"], s["dtype"]) for s in meta["inputs"]]
    with pytest.raises(AotError, match="the reply's run count is 3, the request says 2"):
        client.request(inputs, 0, 2)
    assert not client.alive


def test_a_reply_claiming_2_64_profile_entries_is_refused():
    import random
    meta = dict(_meta(), profile=True, kernels=[{"name": "k"}])
    seg = transcript(meta, 1, random.Random(0))
    client = _client_on(_with(seg, **{"reply.profiled": (1 << 32) - 1,
                                      "reply.kernels": (1 << 32) - 1}), meta)
    inputs = [np.zeros(s["shape"], s["dtype"]) for s in meta["inputs"]]
    with pytest.raises(AotError, match="the reply's profiled run count is 4294967295"):
        client.request(inputs, 0, 1)


# ---- real harness processes ---------------------------------------------------------------

@pytest.fixture(scope="module")
def pkg(tmp_path_factory) -> Path:
    model = MODELS / "tflm_hello_world_f32.tflite"
    from aot.api import package
    return package(model, board="host",
                           out_dir=tmp_path_factory.mktemp("io") / "pkg").path


def _fake_harness(pkg: Path, tmp_path: Path, script: str) -> Path:
    """A copy of the package whose bench/bench is `script` (sh)."""
    import shutil
    fake = tmp_path / "fake"
    shutil.copytree(pkg, fake)
    exe = fake / "bench" / "bench"
    exe.unlink()
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(0o755)
    return fake


def test_a_harness_that_never_says_hello_times_out(pkg, tmp_path, monkeypatch):
    from aot.deploy import device
    fake = _fake_harness(pkg, tmp_path, "exec sleep 60\n")
    monkeypatch.setattr(device, "HELLO_TIMEOUT_S", 1.0)
    start = time.monotonic()
    with aot.connect("host") as dev:
        with pytest.raises(AotError, match="the harness sent no hello within 1 s"):
            dev.run(fake, [np.zeros((1, 1), np.float32)])
    assert time.monotonic() - start < 10


def _cli(*args) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "AOT_DEBUG"}
    return subprocess.run([sys.executable, "-m", "aot", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=120)


def _one_line(r: subprocess.CompletedProcess, pattern: str) -> None:
    import re
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1 and lines[0].startswith("aot: error: "), lines
    assert re.search(pattern, lines[0]), lines[0]


# The one-shot harness's arguments: WARMUP RUNS IN_0 OUT_0.
WRITE_OUT = 'head -c 4 /dev/zero > "$4"\n'
REPORTS = {
    "[1]": (WRITE_OUT + "echo '[1]'\n", "no JSON report"),
    "{}": (WRITE_OUT + "echo '{}'\n", "has no times_ns"),
    "a string as a time": (WRITE_OUT + """echo '{"times_ns": ["5"]}'\n""",
                           "times_ns holds a string"),
    "invalid UTF-8": (WRITE_OUT + r"""printf '{"times_ns": [5]\377}\n'""" + "\n",
                      "the harness's report: not JSON at column 17"),
    "a report of 50 MB": (WRITE_OUT + "yes 1234567890 | head -c 50000000\n",
                          r"printed more than the \d+ bytes the report of 1 runs takes"),
    "no output file": ("""echo '{"times_ns": [5]}'\n""", "wrote no out0.bin"),
    "a short output file": ('head -c 3 /dev/zero > "$4"\n' + """echo '{"times_ns": [5]}'\n""",
                            "wrote 3 bytes, expected 4"),
}


@pytest.mark.parametrize("case", sorted(REPORTS))
def test_a_corrupt_harness_report_is_one_line(case, pkg, tmp_path):
    script, message = REPORTS[case]
    fake = _fake_harness(pkg, tmp_path, script)
    np.save(tmp_path / "x.npy", np.zeros((1, 1), np.float32))
    r = _cli("run", fake, "--board", "host", "--input", tmp_path / "x.npy",
             "--out", tmp_path / "out")
    _one_line(r, message)
    assert not (tmp_path / "out").exists()


def test_an_npy_header_claiming_2_40_elements_is_one_line(pkg, tmp_path):
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }"
    header += " " * (-(len(header) + 11) % 64) + "\n"
    bomb = tmp_path / "bomb.npy"
    bomb.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode()
                     + bytes(16))
    r = _cli("run", pkg, "--board", "host", "--input", bomb, "--out", tmp_path / "out")
    _one_line(r, r"--input .*bomb.npy: the header claims 1099511627776 elements")


def test_npy_files_read_as_numpy_saves_them(tmp_path):
    from aot.support.npyfile import read_npy
    for array in (np.arange(12, dtype=np.int16).reshape(3, 4),
                  np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)),
                  np.float64(2.5), np.zeros((0, 3), np.int8)):
        np.save(tmp_path / "a.npy", array)
        got = read_npy(tmp_path / "a.npy")
        assert got.dtype == array.dtype and got.shape == np.shape(array)
        np.testing.assert_array_equal(got, array)


def test_the_report_fuzzer_reaches_the_files(tmp_path):
    kinds = collections.Counter(run_io_case("report", s, tmp_path)[1] for s in range(200))
    assert kinds["files"] > 10
    assert json.dumps(sorted(kinds))      # details are printable

"""The harness's serve mode and aot.connect: many requests through one
process, checked against the interpreter and the one-shot harness; the
protocol's errors; a crash mid-session; qemu-user; bare-metal boards refused.
"""
from __future__ import annotations

import json
import os
import signal
import struct
import time
from pathlib import Path

import numpy as np
import pytest

import aot
from aot.api import package
from aot.deploy import run_package
from aot.deploy.serve import REQUEST, ServeClient
from aot.errors import AotError
from aot.packaging.metadata import read_metadata
from aot.targets import get_board
from aot.testing import random_inputs
from support import MODELS
from support.sshd import sshd  # noqa: F401 (the fixture)

HOST = get_board("host")
MODEL = MODELS / "tflm_hello_world_f32.tflite"       # tiny: requests cost the protocol only
INT8 = MODELS / "mlperf_kws_dscnn_int8.tflite"


@pytest.fixture(scope="module")
def hello(tmp_path_factory) -> tuple[Path, aot.Graph]:
    graph = aot.optimize(aot.load(MODEL))
    info = package(graph, board="host", out_dir=tmp_path_factory.mktemp("serve") / "pkg")
    return info.path, graph


@pytest.fixture(scope="module")
def kws(tmp_path_factory) -> Path:
    return package(INT8, board="host", out_dir=tmp_path_factory.mktemp("serve") / "kws").path


def inputs_for(graph, seed: int) -> list[np.ndarray]:
    ins = random_inputs(graph, seed)
    return [ins[n] for n in graph.inputs]


def test_100_requests_through_one_session_match_the_interpreter(hello, record_property):
    pkg, graph = hello
    with aot.connect("host") as dev:
        first = dev.request(pkg, inputs_for(graph, 0))
        (session,) = dev._sessions.values()
        pid = session.process._proc.pid
        for seed in range(100):
            x = inputs_for(graph, seed)
            got = dev.request(pkg, x, warmup=seed % 3, runs=1 + seed % 4)
            want = aot.interpret(graph, dict(zip(graph.inputs, x)))
            for name, array in zip(graph.outputs, got.outputs):
                np.testing.assert_allclose(array, want[name], rtol=1e-5, atol=1e-6)
            assert len(got.times_us) == 1 + seed % 4 and got.profile_ns is None
        # one process served them all
        assert list(dev._sessions.values())[0].process._proc.pid == pid
    assert first.report["arena_bytes"] == read_metadata(pkg)["arena_bytes"]
    assert session.process._proc.returncode == 0      # the session ended cleanly


def test_serve_matches_the_one_shot_run_bit_for_bit(kws):
    graph_inputs = [np.random.default_rng(s).integers(-128, 128, (1, 49, 10, 1), dtype=np.int8)
                    for s in range(5)]
    with aot.connect(HOST) as dev:
        for x in graph_inputs:
            served = dev.request(kws, [x])
            once = run_package(kws, HOST, [x])
            assert served.outputs[0].dtype == once.outputs[0].dtype
            np.testing.assert_array_equal(served.outputs[0], once.outputs[0])


def test_serve_overhead_against_one_shot_runs(hello, record_property):
    """What a request costs beyond the model: serve mode vs a process per run,
    reported (not asserted: timings belong to benchmarks), every answer the
    one-shot run's."""
    pkg, graph = hello
    x = inputs_for(graph, 1)
    n_serve, n_once = 200, 20
    with aot.connect("host") as dev:
        first = dev.request(pkg, x).outputs
        t0 = time.perf_counter()
        served = [dev.request(pkg, x).outputs for _ in range(n_serve)]
        serve_ms = (time.perf_counter() - t0) / n_serve * 1e3
    t0 = time.perf_counter()
    once = [run_package(pkg, HOST, x).outputs for _ in range(n_once)]
    once_ms = (time.perf_counter() - t0) / n_once * 1e3
    record_property("summary", f"serve: {serve_ms:.3f} ms per request, one-shot: "
                    f"{once_ms:.3f} ms per run (host, tflm_hello_world_f32)")
    for outs in (*served, *once):
        for got, want in zip(outs, first):
            np.testing.assert_array_equal(got, want)


def test_two_packages_on_one_device(hello, kws):
    pkg, graph = hello
    x = np.zeros((1, 49, 10, 1), np.int8)
    with aot.connect("host") as dev:
        a = dev.request(kws, [x])
        dev.request(pkg, inputs_for(graph, 0))
        b = dev.request(kws, [x])
        assert len(dev._sessions) == 2
    np.testing.assert_array_equal(a.outputs[0], b.outputs[0])


def test_wrong_inputs_are_refused_before_sending(hello):
    pkg, graph = hello
    with aot.connect("host") as dev:
        with pytest.raises(AotError, match=r"input '.*' must be float32\[1, 1\], got "
                                           r"float32\[1, 2\]"):
            dev.request(pkg, [np.zeros((1, 2), np.float32)])
        with pytest.raises(AotError, match="takes 1 inputs, got 2"):
            dev.request(pkg, [np.zeros((1, 1), np.float32)] * 2)
        with pytest.raises(AotError, match=r"need warmup >= 0 and 1 <= runs"):
            dev.request(pkg, inputs_for(graph, 0), runs=0)
        dev.request(pkg, inputs_for(graph, 0))        # the session survived


def _client(pkg: Path, meta_path: Path | None = None):
    import subprocess

    proc = subprocess.Popen([str(pkg / "bench" / "bench"), "--serve"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    meta = read_metadata(meta_path or pkg)
    return proc, meta


def test_the_harness_refuses_a_wrong_input_size(hello):
    pkg, _ = hello
    proc, meta = _client(pkg)
    client = ServeClient(proc.stdin, proc.stdout, meta)
    bad = REQUEST + struct.pack("<3I", 1, 0, 1) + struct.pack("<Q", 8) + bytes(8)
    with pytest.raises(AotError, match=r"the harness stopped \(exit 2\): input 0 \(.*\) must "
                                       r"be 4 bytes, the request has 8"):
        client.send_raw(bad)
    assert proc.wait(timeout=10) == 2
    assert b"must be 4 bytes" in proc.stderr.read()


def test_the_harness_refuses_garbage_and_a_truncated_request(hello):
    pkg, _ = hello
    proc, meta = _client(pkg)
    client = ServeClient(proc.stdin, proc.stdout, meta)
    with pytest.raises(AotError, match=r"exit 2\): bad request: no AOTQ header"):
        client.send_raw(b"GET / HTTP/1.1\r\n\r\n")
    proc.wait(timeout=10)

    proc, meta = _client(pkg)
    client = ServeClient(proc.stdin, proc.stdout, meta)
    proc.stdin.write(REQUEST + struct.pack("<3I", 1, 0, 1) + struct.pack("<Q", 4) + bytes(2))
    proc.stdin.close()
    with pytest.raises(AotError, match=r"request truncated inside input 0"):
        client._read_reply(0)
    assert proc.wait(timeout=10) == 2


def test_a_harness_that_does_not_match_metadata_is_refused(hello, tmp_path):
    import json

    pkg, _ = hello
    meta = json.loads((pkg / "metadata.json").read_text())
    meta["arena_bytes"] += 16
    (tmp_path / "metadata.json").write_text(json.dumps(meta))
    proc, meta = _client(pkg, tmp_path)
    with pytest.raises(AotError, match=r"does not match the package's metadata.json "
                                       r"\(arena_bytes \d+ vs \d+\)"):
        ServeClient(proc.stdin, proc.stdout, meta)
    proc.stdin.close()
    assert proc.wait(timeout=10) == 0


def test_a_crash_mid_session_is_a_clear_error(hello):
    pkg, graph = hello
    x = inputs_for(graph, 0)
    with aot.connect("host") as dev:
        dev.request(pkg, x)
        (session,) = dev._sessions.values()
        os.kill(session.process._proc.pid, signal.SIGSEGV)
        with pytest.raises(AotError, match="the serve session ended: the harness was killed "
                                           "by SIGSEGV"):
            dev.request(pkg, x)
        assert not dev._sessions
        dev.request(pkg, x)          # the next run starts a fresh harness


def test_packages_for_another_board_and_bare_metal_boards_are_refused(hello):
    pkg, graph = hello
    with aot.connect("qemu-aarch64") as dev:
        with pytest.raises(AotError, match="was built for board 'host', not 'qemu-aarch64'"):
            dev.request(pkg, inputs_for(graph, 0))
    with pytest.raises(AotError, match="board 'mps2-an386' is bare metal \\(qemu-system\\): "
                                       "serve mode needs a hosted board"):
        aot.connect("mps2-an386")


def test_serve_under_qemu_user(tmp_path):
    graph = aot.optimize(aot.load(MODEL))
    info = package(graph, board="qemu-aarch64", out_dir=tmp_path / "pkg", profile=True)
    with aot.connect("qemu-aarch64") as dev:
        for seed in range(5):
            x = inputs_for(graph, seed)
            got = dev.request(info.path, x, runs=2)
            want = aot.interpret(graph, dict(zip(graph.inputs, x)))
            np.testing.assert_allclose(got.outputs[0], want[graph.outputs[0]], rtol=1e-5,
                                       atol=1e-6)
            assert len(got.profile_ns) == 2
            assert all(len(row) == len(info.metadata["kernels"]) for row in got.profile_ns)


def test_serve_over_ssh(sshd, tmp_path, record_property):
    """An SSH board (the test's own sshd, the harness under qemu-aarch64 by
    exec prefix): one upload, one channel, many requests; a harness killed
    mid-session is an error naming it; the work dir is removed."""
    from aot.targets import with_options

    remote_tmp = tmp_path / "remote"
    remote_tmp.mkdir()
    board = with_options(get_board("rpi4"), host=sshd.host, port=sshd.port, user=sshd.user,
                         key=sshd.key, known_hosts=sshd.known_hosts, exec_prefix="qemu-aarch64",
                         remote_tmp=str(remote_tmp))
    graph = aot.optimize(aot.load(MODEL))
    pkg = package(graph, board="rpi4", out_dir=tmp_path / "pkg", profile=True).path
    with aot.connect(board) as dev:
        dev.request(pkg, inputs_for(graph, 0))           # connect, upload, start
        spent = 0.0
        for seed in range(20):
            x = inputs_for(graph, seed)
            t0 = time.perf_counter()
            got = dev.request(pkg, x)
            spent += time.perf_counter() - t0
            want = aot.interpret(graph, dict(zip(graph.inputs, x)))
            np.testing.assert_allclose(got.outputs[0], want[graph.outputs[0]], rtol=1e-5,
                                       atol=1e-6)
            assert len(got.profile_ns) == 1
        ms = spent / 20 * 1e3
        (workdir,) = remote_tmp.iterdir()
        assert sorted(p.name for p in workdir.iterdir()) == ["bench1"]     # uploaded once
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and _runs(p, "bench1")]
        assert pids, "the served harness is not running"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        with pytest.raises(AotError, match="the serve session ended: the harness"):
            dev.request(pkg, inputs_for(graph, 0))
        dev.request(pkg, inputs_for(graph, 0))          # a fresh harness, uploaded again
    assert list(remote_tmp.iterdir()) == []
    record_property("summary", f"serve over ssh (127.0.0.1, qemu-aarch64 exec prefix): "
                    f"{ms:.2f} ms per request, tflm_hello_world_f32")


def _runs(pid: str, name: str) -> bool:
    try:
        return name.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def test_verify_count_runs_many_inputs_through_one_session(capsys, monkeypatch):
    from aot.cli import main
    from aot.deploy import device

    started = []
    real = device._LocalProcess.__init__

    def counting(self, argv):
        started.append(argv)
        real(self, argv)
    monkeypatch.setattr(device._LocalProcess, "__init__", counting)
    assert main(["verify", str(MODEL), "--count", "12", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["count"] == 12 and out["inputs"] == "random", out
    assert len(started) == 1 and started[0][-1] == "--serve"
    assert main(["verify", str(MODEL), "--count", "0"]) == 2
    assert "--count must be >= 1" in capsys.readouterr().err


def test_an_interrupted_request_abandons_its_session(hello, monkeypatch):
    from aot.deploy.serve import ServeClient as Client

    pkg, graph = hello
    x = inputs_for(graph, 0)
    with aot.connect("host") as dev:
        dev.request(pkg, x)
        (session,) = dev._sessions.values()
        proc = session.process._proc

        def interrupted(self, *args):
            raise KeyboardInterrupt
        monkeypatch.setattr(Client, "_read_reply", interrupted)
        with pytest.raises(KeyboardInterrupt):
            dev.request(pkg, x)
        assert not dev._sessions and proc.poll() is not None     # the harness is gone
        monkeypatch.undo()
        np.testing.assert_allclose(dev.request(pkg, x).outputs[0], dev.request(pkg, x).outputs[0])

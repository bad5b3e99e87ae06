"""Boards reached over SSH, against a real OpenSSH sshd on 127.0.0.1 (tests/support/sshd.py).

The "board" is this machine: the aarch64 harness runs under
`--exec-prefix qemu-aarch64`, and its work dirs go into a directory the
tests own (the board option remote_tmp, from an $AOT_CONFIG file), so every
test can check that nothing is left behind, after failures too.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from support.sshd import Sshd, free_port, keygen, sshd  # noqa: F401 (sshd: the fixture)
from support.ssh_board import (BOARD, CONNECT_TIMEOUT_S, MODEL, _children, aot,  # noqa: F401
                               config, nothing_left_behind, one_line_error, pkg, remote_tmp)


def ssh_args(server: Sshd, known_hosts: str | None = None) -> list[str]:
    return [*BOARD, *server.cli_args(known_hosts), "--exec-prefix", "qemu-aarch64"]


# --- through the command line ---------------------------------------------------------

def test_run_verify_and_bench_over_ssh(sshd, pkg, tmp_path):
    out = tmp_path / "out"
    r = aot(sshd, "run", str(pkg), *ssh_args(sshd), "--input",
            str(MODEL.with_suffix(".input.npy")), "--out", str(out))
    assert r.returncode == 0, r.stderr
    got = np.load(out / "Identity.npy")        # named after the output
    want = np.load(MODEL.with_suffix(".output.npy"))
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1

    r = aot(sshd, "verify", str(MODEL), *ssh_args(sshd))
    assert r.returncode == 0, r.stderr
    assert "OK against" in r.stdout

    r = aot(sshd, "bench", str(pkg), *ssh_args(sshd), "--repeat", "5", "--warmup", "1", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["board"] == "rpi4" and report["repeat"] == 5
    assert 0 < report["min_ms"] <= report["median_ms"] <= report["max_ms"]
    assert {"mean_ms", "std_ms"} <= report.keys()


def test_a_changed_host_key_is_refused_even_when_trusting_new_keys(sshd, pkg, tmp_path):
    other = keygen(tmp_path / "other_host_key")
    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts_line(other))
    for extra in ([], ["--trust-new-host-key"]):
        r = aot(sshd, "bench", str(pkg), *ssh_args(sshd, str(known)), "--repeat", "1", *extra)
        line = one_line_error(r)
        assert "host key mismatch" in line and "man-in-the-middle" in line, line
    r = aot(sshd, "board", "trust", "rpi4", "--host", sshd.host, "--port", str(sshd.port),
            "--known-hosts", str(known))
    assert "host key mismatch" in one_line_error(r)
    assert known.read_text() == sshd.known_hosts_line(other)


def test_an_unknown_host_key_needs_trust(sshd, pkg, tmp_path):
    known = tmp_path / "ssh" / "known_hosts"      # neither the file nor its dir exists
    r = aot(sshd, "bench", str(pkg), *ssh_args(sshd, str(known)), "--repeat", "1")
    line = one_line_error(r)
    assert "unknown host key ssh-ed25519 SHA256:" in line
    assert f"aot board trust rpi4 --host 127.0.0.1 --port {sshd.port}" in line
    assert "--trust-new-host-key" in line and not known.exists()

    r = aot(sshd, "bench", str(pkg), *ssh_args(sshd, str(known)), "--repeat", "1",
            "--trust-new-host-key", "--json")
    assert r.returncode == 0, r.stderr
    assert known.read_text() == sshd.known_hosts_line()
    assert known.stat().st_mode & 0o777 == 0o600


def test_board_trust_adds_the_key_once(sshd, pkg, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text("# the user's own entries stay\nexample.org ssh-ed25519 AAAA")
    trust = ["board", "trust", "rpi4", "--host", sshd.host, "--port", str(sshd.port),
             "--known-hosts", str(known)]
    r = aot(sshd, *trust, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["added"] is True and out["fingerprint"].startswith("SHA256:")
    r = aot(sshd, *trust)
    assert r.returncode == 0 and "already in" in r.stdout, r.stderr
    assert known.read_text() == ("# the user's own entries stay\nexample.org ssh-ed25519 AAAA\n"
                                 + sshd.known_hosts_line())
    r = aot(sshd, "bench", str(pkg), *ssh_args(sshd, str(known)), "--repeat", "1", "--json")
    assert r.returncode == 0, r.stderr


def test_a_closed_port_fails_within_the_connect_timeout(sshd, pkg):
    port = free_port()
    t0 = time.monotonic()
    r = aot(sshd, "bench", str(pkg), *BOARD, "--host", "127.0.0.1", "--port", str(port),
            "--repeat", "1")
    elapsed = time.monotonic() - t0
    line = one_line_error(r)
    assert f"cannot reach board 'rpi4' at 127.0.0.1:{port}: connection refused" in line
    assert CONNECT_TIMEOUT_S - 0.5 < elapsed < CONNECT_TIMEOUT_S + 2, elapsed


def test_wrong_key_and_missing_host_are_clear_errors(sshd, pkg, tmp_path, monkeypatch):
    keygen(tmp_path / "stranger")
    args = [*ssh_args(sshd), "--key", str(tmp_path / "stranger")]
    monkeypatch.setenv("AOT_DEBUG", "1")
    r = aot(sshd, "bench", str(pkg), *args, "--repeat", "1")
    assert f"authentication failed for {sshd.user}@127.0.0.1:{sshd.port}" in one_line_error(r)
    r = aot(sshd, "bench", str(pkg), *BOARD, "--repeat", "1")
    line = one_line_error(r)
    assert "board 'rpi4' has no host: pass --host" in line and "[rpi4]" in line


def test_a_failing_harness_leaves_no_work_dir(sshd, pkg, remote_tmp):
    args = [*ssh_args(sshd)[:-1], "no-such-emulator"]
    r = aot(sshd, "bench", str(pkg), *args, "--repeat", "1")
    line = one_line_error(r)
    assert "the harness failed (exit 127)" in line and "no-such-emulator" in line
    # nothing_left_behind checks remote_tmp after the test


def _bench_process(remote_tmp: Path) -> int | None:
    """The pid of a process whose working dir is a work dir in remote_tmp."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if cwd.startswith(f"{remote_tmp}/aot-"):
            return int(proc.name)
    return None


def _gone(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def test_ctrl_c_stops_the_remote_run_and_removes_its_work_dir(sshd, pkg, remote_tmp):
    proc = subprocess.Popen([sys.executable, "-m", "aot", "bench", str(pkg), *ssh_args(sshd),
                             "--repeat", "100000", "--warmup", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        pid = None
        while pid is None and time.monotonic() < deadline and proc.poll() is None:
            pid = _bench_process(remote_tmp)
            time.sleep(0.05)
        assert pid is not None, proc.communicate(timeout=5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "interrupted" in err, (proc.returncode, err)
    deadline = time.monotonic() + 3
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(pid), f"the remote harness (pid {pid}) still runs"


# --- the session API ----------------------------------------------------------------

def params_of(server: Sshd, remote_tmp: Path, **kw):
    from aot.deploy.ssh import SshParams

    return SshParams(server.host, server.port, server.user, server.key, server.known_hosts,
                     remote_tmp=str(remote_tmp), board="rpi4", **kw)


def test_sessions_do_not_collide_and_processes_talk(sshd, remote_tmp, tmp_path):
    from aot.deploy.ssh import SshSession

    local = tmp_path / "data"
    local.write_bytes(bytes(range(256)) * 1000)
    with SshSession(params_of(sshd, remote_tmp)) as a, SshSession(params_of(sshd, remote_tmp)) as b:
        assert a.workdir != b.workdir and len(list(remote_tmp.iterdir())) == 2
        a.put(local, "data")
        b.put(local, "data", 0o600)
        assert a.get("data") == b.get("data") == local.read_bytes()
        assert a.run(["stat", "-c", "%a", "data"])[1] == b"644\n"
        assert b.run(["stat", "-c", "%a", "data"])[1] == b"600\n"
        proc = a.start(["cat"], harness=False)
        for i in range(3):
            proc.stdin.write(b"ping %d\n" % i)
            proc.stdin.flush()
            assert proc.stdout.read(7) == b"ping %d\n" % i
        assert proc.close() == 0
        status, out, err = b.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
        assert (status, out, err) == (3, b"out\n", b"err\n")
        left_running = b.start(["sleep", "60"], harness=False)
        killed = b.start(["sleep", "60"], harness=False)
        killed.kill()
    for pid in (left_running.pid, killed.pid):      # the session's exit stops the first
        deadline = time.monotonic() + 3
        while not _gone(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(pid)


def test_a_command_timeout_kills_the_remote_command(sshd, remote_tmp):
    from aot.deploy.ssh import SshSession
    from aot.errors import AotError

    with SshSession(params_of(sshd, remote_tmp)) as s:
        pid_file = f"{s.workdir}/pid"
        t0 = time.monotonic()
        with pytest.raises(AotError, match="timed out after 1 s"):
            s.run(["sh", "-c", f"echo $$ > {pid_file}; exec sleep 60"], timeout=1)
        assert time.monotonic() - t0 < 5
        pid = int(Path(pid_file).read_text())
        deadline = time.monotonic() + 3
        while not _gone(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(pid)


def test_a_lost_connection_is_an_error_and_cleanup_reconnects(sshd, remote_tmp, tmp_path):
    """The command kills its sshd session (the connection drops) and goes on
    running: aot says so, reconnects, kills it and removes the work dir."""
    from aot.deploy.ssh import SshSession
    from aot.errors import AotError

    pid_file = tmp_path / "pid"
    with pytest.raises(AotError, match="lost the connection"):
        with SshSession(params_of(sshd, remote_tmp)) as s:
            s.run(["sh", "-c", f"echo $$ > {pid_file}; sleep 0.5; kill -9 $PPID; "
                   "exec sleep 60"])
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 3
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(pid), "the command still runs on the board"


def test_the_connect_retries_while_the_board_drops_connections(sshd, remote_tmp, tmp_path,
                                                             capfd):
    """A booting VM's port forward accepts and drops connections: the
    connect tries again, quietly, until the SSH server answers."""
    from aot.deploy.ssh import SshSession

    port, known_hosts = free_port(), tmp_path / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {sshd.host_key_pub}\n")
    forward = _Forward(port, sshd.port, drop_for_s=1.5)
    try:
        params = replace(params_of(sshd, remote_tmp, connect_timeout_s=10), port=port,
                         known_hosts=str(known_hosts))
        with SshSession(params) as s:
            assert s.run(["echo", "up"])[1] == b"up\n"
    finally:
        forward.close()
    assert forward.dropped > 0
    assert "paramiko" not in capfd.readouterr().err


class _Forward:
    """127.0.0.1:port -> 127.0.0.1:to like QEMU's hostfwd while the guest
    boots: connections accepted and closed for drop_for_s, then forwarded."""

    def __init__(self, port: int, to: int, drop_for_s: float) -> None:
        self.to, self.until, self.dropped = to, time.monotonic() + drop_for_s, 0
        self.server = socket.create_server(("127.0.0.1", port))
        threading.Thread(target=self._serve, daemon=True).start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.server.accept()
                if time.monotonic() < self.until:
                    self.dropped += 1
                    conn.close()
                    continue
                up = socket.create_connection(("127.0.0.1", self.to))
                threading.Thread(target=_pipe, args=(conn, up), daemon=True).start()
                threading.Thread(target=_pipe, args=(up, conn), daemon=True).start()


def _pipe(a: socket.socket, b: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := a.recv(65536):
            b.sendall(data)
    with contextlib.suppress(OSError):
        b.shutdown(socket.SHUT_WR)


def test_uploads_are_checked_by_size_and_hash(sshd, remote_tmp, tmp_path, monkeypatch):
    from aot.deploy import ssh
    from aot.errors import AotError

    good = "ab" * 32
    ssh.check_upload("f", 3, good, 3, f"{good}  /tmp/aot-x/f\n".encode())
    with pytest.raises(AotError, match="corrupt: 2 bytes on the board, 3 sent"):
        ssh.check_upload("f", 3, good, 2, f"{good}  f\n".encode())
    with pytest.raises(AotError, match="corrupt: sha256 cd"):
        ssh.check_upload("f", 3, good, 3, f"{'cd' * 32}  f\n".encode())
    with pytest.raises(AotError, match=r"sha256 \(nothing\)"):
        ssh.check_upload("f", 3, good, 3, b"")
    # The real path: the board's sha256sum against a local hash that differs.
    local = tmp_path / "f"
    local.write_bytes(b"abc")
    monkeypatch.setattr(ssh, "sha256_file", lambda path: good)
    with ssh.SshSession(params_of(sshd, remote_tmp)) as s:
        with pytest.raises(AotError, match="upload of f is corrupt: sha256 ba7816bf"):
            s.put(local, "f")
        with pytest.raises(AotError, match="plain file name"):
            s.put(local, "../f")


# --- options and the config file ----------------------------------------------------------

def test_config_file_and_overrides(tmp_path, monkeypatch):
    from aot.deploy.ssh import ssh_params
    from aot.errors import AotError
    from aot.targets import get_board, with_options

    cfg = tmp_path / "boards.toml"
    cfg.write_text('[rpi5]\nhost = "pi5.lan"\nport = 2222\nkey = "~/.ssh/pi"\n'
                   'exec_prefix = "taskset -c 3"\n')
    monkeypatch.setenv("AOT_CONFIG", str(cfg))
    board = get_board("rpi5")
    p = ssh_params(board)
    assert (p.host, p.port, p.user, p.exec_prefix) == ("pi5.lan", 2222, "pi", "taskset -c 3")
    assert p.key == str(Path("~/.ssh/pi").expanduser()) and p.board == "rpi5"
    p = ssh_params(with_options(board, host="10.0.0.5", port=None, user="me"))
    assert (p.host, p.port, p.user) == ("10.0.0.5", 2222, "me")
    assert p.known_hosts == str(Path("~/.ssh/known_hosts").expanduser())
    assert p.connect_timeout_s == 10.0 and not p.trust_new_host_key
    with pytest.raises(AotError, match="port must be within 1..65535"):
        ssh_params(with_options(board, port=70000))
    cfg.write_text('[rpi5]\nhots = "x"\n')
    with pytest.raises(AotError, match="unknown key.*hots"):
        get_board("rpi5")
    monkeypatch.setenv("AOT_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(AotError, match="AOT_CONFIG names"):
        get_board("rpi5")


def test_the_pi_boards():
    from aot.targets import boards

    for name, cpu in (("rpi3", "cortex-a53"), ("rpi4", "cortex-a72"), ("rpi5", "cortex-a76")):
        b = boards()[name]
        assert b.transport == "ssh" and not b.emulated and b.target.cpu == cpu
        assert b.options["user"] == "pi" and b.options["port"] == 22 and "host" not in b.options


def test_a_key_file_that_is_no_key_is_refused_at_once(tmp_path):
    """paramiko reads the key only after the board answers: its error must
    not be retried as a board still booting until connect_timeout_s."""
    from aot.deploy.ssh import SshParams, connect
    from aot.errors import AotError

    bad = tmp_path / "id_ed25519"
    bad.write_text("not a key\n")
    params = SshParams("127.0.0.1", free_port(), "pi", str(bad), str(tmp_path / "known_hosts"),
                       connect_timeout_s=30)
    start = time.monotonic()
    with pytest.raises(AotError, match=f"key file {bad} is not a private key"):
        connect(params)
    assert time.monotonic() - start < 5


def test_an_unreadable_known_hosts_file_is_a_one_line_error(tmp_path):
    import paramiko

    from aot.deploy import known_hosts
    from aot.errors import AotError

    binary, bad = tmp_path / "binary", tmp_path / "bad"
    binary.write_bytes(b"\xff\xfe\x00\xaa" * 16)
    bad.write_text("[h]:22 ssh-ed25519 !!!notbase64\n")
    with pytest.raises(AotError, match="is not text"):
        known_hosts.load(paramiko.SSHClient(), str(binary))
    with pytest.raises(AotError, match="has an invalid entry: '\\[h\\]:22 ssh-ed25519"):
        known_hosts.load(paramiko.SSHClient(), str(bad))


# --- deadlines and size limits ------------------------------------------------------

# The board option command_timeout_s of the stall tests: small, so they are fast.
STALL_TIMEOUT_S = 3


def _stop_sessions_on_open(monkeypatch, server: Sshd, mode: str) -> list[int]:
    """Once aot opens a remote file in `mode` ("w": an upload, "r": a
    download), SIGSTOP every sshd session process: the board stops answering
    in the middle of the transfer. The stopped pids, to SIGCONT later."""
    import paramiko

    stopped: list[int] = []
    real_open = paramiko.SFTPClient.open

    def open_(self, filename, mode_="r", bufsize=-1):
        f = real_open(self, filename, mode_, bufsize)
        if mode_.startswith(mode) and not stopped:
            stopped.extend(_children(server.pid))
            for pid in stopped:
                os.kill(pid, signal.SIGSTOP)
        return f

    monkeypatch.setattr(paramiko.SFTPClient, "open", open_)
    monkeypatch.setattr(paramiko.SFTPClient, "file", open_)      # put() calls file()
    return stopped


@pytest.mark.parametrize("mode, what", [("w", "upload bench, in0.bin"),
                                        ("r", "fetch out0.bin")])
def test_a_board_that_stops_answering_fails_within_its_timeout(sshd, pkg, remote_tmp, tmp_path,
                                                               monkeypatch, mode, what):
    """The sshd session stops (SIGSTOP) mid-upload or mid-download: `aot run`
    fails within command_timeout_s + 5 s, and the work dir is removed (over
    a fresh connection) and stays removed once the session runs again."""
    config = tmp_path / "boards.toml"
    config.write_text(f'[rpi4]\nremote_tmp = "{remote_tmp}"\nconnect_timeout_s = 3\n'
                      f"command_timeout_s = {STALL_TIMEOUT_S}\n")
    monkeypatch.setenv("AOT_CONFIG", str(config))
    stopped = _stop_sessions_on_open(monkeypatch, sshd, mode)
    t0 = time.monotonic()
    try:
        r = aot(sshd, "run", str(pkg), *ssh_args(sshd), "--input",
                str(MODEL.with_suffix(".input.npy")), "--out", str(tmp_path / "out"))
        elapsed = time.monotonic() - t0
        assert stopped, "the transfer never opened a file"
        assert list(remote_tmp.iterdir()) == []
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    line = one_line_error(r)
    assert f"{what} timed out after {STALL_TIMEOUT_S} s (command_timeout_s): the board " \
           "stopped answering" in line, line
    assert elapsed < STALL_TIMEOUT_S + 5, elapsed
    deadline = time.monotonic() + 5
    while not all(_gone(p) for p in stopped) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(p) for p in stopped), "the stopped session did not end after SIGCONT"
    assert list(remote_tmp.iterdir()) == []


def test_what_is_read_back_is_bounded(sshd, remote_tmp, tmp_path):
    from aot.deploy import ssh
    from aot.errors import AotError

    local = tmp_path / "f"
    local.write_bytes(b"x" * 100)
    with ssh.SshSession(params_of(sshd, remote_tmp)) as s:
        s.put(local, "f")
        assert s.get("f", 100) == local.read_bytes()
        with pytest.raises(AotError, match="f is 100 bytes on the board, more than the 99 "
                                           "expected"):
            s.get("f", 99)
        # stdout past its cap stops the command; of stderr only the end is kept.
        with pytest.raises(AotError, match="printed more than 1000 bytes on stdout"):
            s.run(["head", "-c", "100000", "/dev/zero"], max_output=1000)
        status, out, err = s.run(["sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x >&2; "
                                  "echo last >&2"])
        assert status == 0 and err.endswith(b"xlast\n") and len(err) == ssh.STDERR_TAIL


def test_the_harness_report_limit_grows_with_runs_and_kernels():
    from aot.deploy.ssh import report_limit

    # 100000 runs of 20-digit times with commas, 1000 profile rows of 7
    # ten-digit kernel times: what bench_main.c.j2 can print, and a margin.
    most = 100000 * 21 + 1000 * (7 * 11 + 3)
    assert most < report_limit({"kernels": [{}] * 7}, 100000) < most + 100_000
    assert report_limit({}, 1) < report_limit({}, 2)


def test_a_backslash_in_remote_tmp(sshd, pkg, tmp_path, monkeypatch):
    """GNU sha256sum escapes a path holding a backslash (and starts its line
    with one): the check reads plain names in the work dir."""
    from aot.deploy.ssh import check_upload

    odd = tmp_path / "back\\slash dir"
    odd.mkdir()
    config = tmp_path / "boards.toml"
    config.write_text(f"[rpi4]\nremote_tmp = '{odd}'\nconnect_timeout_s = 3\n")
    monkeypatch.setenv("AOT_CONFIG", str(config))
    r = aot(sshd, "run", str(pkg), *ssh_args(sshd), "--input",
            str(MODEL.with_suffix(".input.npy")), "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert list(odd.iterdir()) == []
    good = "ab" * 32
    check_upload("f", 3, good, 3, f"\\{good}  /a\\\\b/f\n".encode())


# --- known_hosts markers and pinned fingerprints --------------------------------------

def _fingerprint(public_line: str) -> str:
    import base64
    import hashlib

    digest = hashlib.sha256(base64.b64decode(public_line.split()[1])).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def test_known_hosts_markers(sshd, pkg, tmp_path):
    other = keygen(tmp_path / "other")
    known = tmp_path / "known_hosts"
    # A CA line is skipped (aot checks plain host keys): the file stays valid.
    known.write_text(f"@cert-authority *.example.org {other}\n" + sshd.known_hosts_line())
    r = aot(sshd, "bench", str(pkg), *ssh_args(sshd, str(known)), "--repeat", "1")
    assert r.returncode == 0, r.stderr
    # A revoked key is refused, though another line lists it for the host,
    # and though new keys are trusted.
    for lines in ([f"@revoked * {sshd.host_key_pub}\n", sshd.known_hosts_line()],
                  [f"@revoked [other]:1 {sshd.host_key_pub}\n"]):
        known.write_text("".join(lines))
        for extra in ([], ["--trust-new-host-key"]):
            r = aot(sshd, "bench", str(pkg), *ssh_args(sshd, str(known)), "--repeat", "1",
                    *extra)
            line = one_line_error(r)
            assert f"presents host key ssh-ed25519 {_fingerprint(sshd.host_key_pub)}, which " \
                   f"{known} marks @revoked: refused" in line, line
        r = aot(sshd, "board", "trust", "rpi4", "--host", sshd.host, "--port",
                str(sshd.port), "--known-hosts", str(known))
        assert "marks @revoked" in one_line_error(r)
        assert known.read_text() == "".join(lines)
    known.write_text(f"@trusted * {other}\n")
    r = aot(sshd, "bench", str(pkg), *ssh_args(sshd, str(known)), "--repeat", "1")
    assert "'@trusted' is no marker OpenSSH knows (line 1)" in one_line_error(r)


def test_board_trust_shows_the_key_first_and_takes_a_pinned_fingerprint(sshd, tmp_path):
    from aot.deploy.ssh import trust_host_key

    known = tmp_path / "known_hosts"
    trust = ["board", "trust", "rpi4", "--host", sshd.host, "--port", str(sshd.port),
             "--known-hosts", str(known)]
    right = _fingerprint(sshd.host_key_pub)
    wrong = _fingerprint(keygen(tmp_path / "other"))
    r = aot(sshd, *trust, "--fingerprint", wrong)
    line = one_line_error(r)
    assert f"presents host key ssh-ed25519 {right}, not the expected {wrong}: refused, " \
           f"nothing written to {known}" in line, line
    assert r.stdout.endswith(f"presents host key ssh-ed25519 {right}\n")      # shown first
    assert not known.exists()
    r = aot(sshd, *trust, "--fingerprint", "SHA256:short")
    assert "is not a SHA256 fingerprint" in one_line_error(r) and r.stdout == ""
    r = aot(sshd, *trust, "--fingerprint", right + "=")      # ssh-keygen's padding is fine
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"board 'rpi4' at 127.0.0.1:{sshd.port} presents host key "
                                     f"ssh-ed25519 {right}", f"added to {known}"]
    assert known.read_text() == sshd.known_hosts_line()
    r = aot(sshd, *trust, "--fingerprint", right, "--json")
    out = json.loads(r.stdout)
    assert out["fingerprint"] == right and out["pinned"] and not out["added"]
    # What `show` sees comes before anything is written.
    seen = []
    fresh = tmp_path / "fresh_known_hosts"
    params = replace(params_of(sshd, tmp_path), known_hosts=str(fresh))
    trust_host_key(params, show=lambda key, known: seen.append((key.fingerprint, known,
                                                                fresh.exists())))
    assert seen == [(right, False, False)] and fresh.read_text() == sshd.known_hosts_line()


def test_ssh_and_vm_do_not_import_each_other():
    """What both need lives in aot/deploy/ssh_config.py; vm.py imports
    nothing of ssh.py, not even inside a function."""
    import ast

    import aot.deploy.vm as vm

    tree = ast.parse(Path(vm.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
        elif isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
    assert not {"aot.deploy.ssh", "aot.deploy.ssh.ssh"} & imported, imported
    assert "aot.deploy.ssh_config" in imported


def test_a_board_that_stops_answering_mid_command(sshd, remote_tmp, tmp_path):
    """The session stops while a command runs: the command times out, the
    kill over the stalled connection gives up, and a fresh connection kills
    the command and removes the work dir."""
    from aot.deploy import ssh
    from aot.errors import AotError

    pid_file = tmp_path / "pid"
    stopped: list[int] = []

    def stop_when_running() -> None:
        deadline = time.monotonic() + 10
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        stopped.extend(_children(sshd.pid))
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)

    stopper = threading.Thread(target=stop_when_running)
    t0 = time.monotonic()
    try:
        with pytest.raises(AotError, match="timed out after 2 s"):
            with ssh.SshSession(params_of(sshd, remote_tmp, command_timeout_s=2)) as s:
                stopper.start()
                s.run(["sh", "-c", f"echo $$ > {pid_file}; exec sleep 60"])
        elapsed = time.monotonic() - t0
        assert list(remote_tmp.iterdir()) == []
        assert _gone(int(pid_file.read_text())), "the command still runs on the board"
    finally:
        stopper.join()
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    assert elapsed < 2 + ssh.PING_TIMEOUT_S + ssh.CLEANUP_CONNECT_S + 1, elapsed

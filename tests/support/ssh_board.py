"""Board rpi4 reached over a real OpenSSH sshd on 127.0.0.1 (support/sshd.py):
the module fixtures that point its work dirs at a temporary directory and
check nothing is left there, the package it runs, the aot command run
against the server and the processes below an sshd session. A test module
imports the fixtures it uses (deploy/test_ssh.py, deploy/test_ssh_config.py)."""
from __future__ import annotations

import contextlib
import io
import subprocess
from pathlib import Path

import pytest

from support import MODELS
from support.sshd import Sshd


MODEL = MODELS / "mlperf_ad_fcae_int8.tflite"
BOARD = ["--board", "rpi4"]
CONNECT_TIMEOUT_S = 3


@pytest.fixture(scope="module")
def remote_tmp(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("remote_tmp")


@pytest.fixture(scope="module", autouse=True)
def config(tmp_path_factory, remote_tmp):
    """$AOT_CONFIG: rpi4's work dirs in remote_tmp, a short connect timeout;
    no OpenSSH config (the user's ~/.ssh/config may say anything)."""
    path = tmp_path_factory.mktemp("config") / "boards.toml"
    path.write_text(f'[rpi4]\nremote_tmp = "{remote_tmp}"\n'
                    f"connect_timeout_s = {CONNECT_TIMEOUT_S}\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AOT_CONFIG", str(path))
        mp.setenv("AOT_SSH_CONFIG", "none")
        yield path


@pytest.fixture(autouse=True)
def nothing_left_behind(remote_tmp):
    yield
    assert list(remote_tmp.iterdir()) == [], "a remote work dir was left behind"


@pytest.fixture(scope="module")
def pkg(tmp_path_factory) -> Path:
    from aot.api import package

    return package(MODEL, board="rpi4", out_dir=tmp_path_factory.mktemp("ssh") / "pkg").path


def secrets(server: Sshd) -> list[str]:
    """The private key's base64 lines: they must never reach the terminal."""
    lines = Path(server.key).read_text().splitlines()
    return [line for line in lines if line and not line.startswith("-----")]


def aot(server: Sshd, *args: str) -> subprocess.CompletedProcess:
    """`aot ARGS` in this process (aot.cli.main), its output captured."""
    from aot.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    r = subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())
    for secret in secrets(server):
        assert secret not in r.stdout and secret not in r.stderr
    return r


def one_line_error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aot: error: "), r.stderr
    return lines[0]


def _children(pid: int) -> list[int]:
    """All processes below `pid` (the sshd serving a connection, its
    privilege-separated child, the SFTP server)."""
    parents = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
                parents[int(proc.name)] = int(stat[1])
    below, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        below += kids
        todo += kids
    return below

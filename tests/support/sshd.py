"""A real OpenSSH sshd on 127.0.0.1 for tests of boards reached over SSH.

    from support.sshd import sshd, Sshd      # a module-scoped pytest fixture (jump_sshd: a second), or:
    with running_sshd(tmp_dir) as server:
        server.host, server.port, server.user, server.key, server.known_hosts

Its own host key, client key and authorized_keys in `tmp_dir`, password
logins off, no PAM, SFTP served in-process. `known_hosts` trusts the host
key; the server stops when the block ends. sshd needs root (the tests run
as root here); /run/sshd, its privilege-separation dir, is created if
missing.
"""
from __future__ import annotations

import contextlib
import getpass
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

SSHD = "/usr/sbin/sshd"
START_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Sshd:
    host: str
    port: int
    user: str
    key: str              # the client's private key
    known_hosts: str      # trusts this server's host key
    host_key_pub: str     # "ssh-ed25519 AAAA..." (for tests writing their own known_hosts)
    dir: Path
    pid: int

    def cli_args(self, known_hosts: str | None = None) -> list[str]:
        """The aot options that reach this server."""
        return ["--host", self.host, "--port", str(self.port), "--user", self.user,
                "--key", self.key, "--known-hosts", known_hosts or self.known_hosts]

    def known_hosts_line(self, public_key: str | None = None) -> str:
        return f"[{self.host}]:{self.port} {public_key or self.host_key_pub}\n"

    def ssh_config(self, alias: str, *extra: str) -> str:
        """A ~/.ssh/config block that names this server `alias`."""
        return "\n".join([f"Host {alias}", f"  HostName {self.host}", f"  Port {self.port}",
                          f"  User {self.user}", f"  IdentityFile {self.key}",
                          *(f"  {line}" for line in extra), ""])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path) -> str:
    """A new ed25519 key pair at path (no passphrase): the public key line."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "aot-test",
                    "-f", str(path)], check=True, capture_output=True)
    return " ".join(path.with_suffix(".pub").read_text().split()[:2])


def _config(d: Path, port: int, extra: tuple[str, ...]) -> str:
    return "\n".join([*extra,
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {d / 'host_key'}",
        f"PidFile {d / 'sshd.pid'}", f"AuthorizedKeysFile {d / 'authorized_keys'}",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
        "PermitRootLogin prohibit-password", "StrictModes no",
        "Subsystem sftp internal-sftp", "LogLevel ERROR", ""])


def _wait_listening(port: int, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited {proc.returncode}: {log.read_text()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"sshd did not listen on port {port} within {START_TIMEOUT_S} s")


@contextlib.contextmanager
def running_sshd(d: Path, extra: tuple[str, ...] = ()) -> Iterator[Sshd]:
    """`extra`: sshd_config lines, before aot's."""
    d.mkdir(parents=True, exist_ok=True)
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    host_pub = keygen(d / "host_key")
    client_pub = keygen(d / "client_key")
    (d / "authorized_keys").write_text(client_pub + "\n")
    port = free_port()
    (d / "sshd_config").write_text(_config(d, port, extra))
    log = d / "sshd.log"
    with open(log, "wb") as log_file:
        proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")],
                                stdout=log_file, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        _wait_listening(port, proc, log)
        server = Sshd("127.0.0.1", port, getpass.getuser(), str(d / "client_key"),
                      str(d / "known_hosts"), host_pub, d, proc.pid)
        (d / "known_hosts").write_text(server.known_hosts_line())
        yield server
    finally:
        # sshd -D forks one child per connection in its own session group:
        # stop the listener and whatever sessions remain.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def sshd(tmp_path_factory) -> Iterator[Sshd]:
    with running_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server


@pytest.fixture(scope="module")
def jump_sshd(tmp_path_factory) -> Iterator[Sshd]:
    """Another server, with keys of its own: a jump host on the way to sshd."""
    with running_sshd(tmp_path_factory.mktemp("jump_sshd")) as server:
        yield server

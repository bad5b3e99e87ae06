"""What an SSH connection goes over when it has no socket of its own: a
channel through a jump host (ProxyJump), or a ProxyCommand's stdin and
stdout (aot/deploy/ssh_config.py reads both from ~/.ssh/config)."""
from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import tempfile

import paramiko

from aot.deploy.ssh_config import SshParams, where
from aot.errors import BoardUnreachableError

# How long a ProxyCommand has to end after SIGTERM before it is killed.
PROXY_STOP_S = 1.0
# Of a ProxyCommand's stderr, the end (its error comes last).
STDERR_TAIL = 4096


def open_route(params: SshParams, via: paramiko.SSHClient | None,
               timeout: float) -> paramiko.Channel | paramiko.ProxyCommand | None:
    """The channel through the jump host `via` to the board, or the board's
    ProxyCommand, started; None: connect directly."""
    if via is not None:
        transport = via.get_transport()
        if transport is None or not transport.is_active():
            raise BoardUnreachableError(f"{where(params.via)}: lost the connection")
        return transport.open_channel("direct-tcpip", (params.host, params.port),
                                      ("127.0.0.1", 0), timeout=timeout)
    if params.proxy_command:
        try:
            return ProxyCommand(params.proxy_command)
        except OSError as e:
            raise BoardUnreachableError(f"{where(params)}: cannot start ProxyCommand "
                                        f"{params.proxy_command!r}: {e.strerror or e}") from None
    return None


def close_route(transport: paramiko.Transport) -> None:
    """Close a connection and those it goes through, the jump host's first:
    closing a real socket never blocks, while the channel through a
    stalled jump host would wait to send its close."""
    if isinstance(transport.sock, paramiko.Channel):
        close_route(transport.sock.get_transport())
    transport.close()


class ProxyCommand(paramiko.ProxyCommand):
    """paramiko's ProxyCommand run as OpenSSH runs it: by the shell (a pipe
    or a redirection works). Unlike paramiko's, its end reads as a socket's
    end (paramiko's would wait on it until a timeout), close() stops all of
    it, a pipeline too (its own process group), and reaps it, and its
    stderr is kept for failure(): the connect retries, and would print it
    once per attempt."""

    def __init__(self, command: str) -> None:
        # Not paramiko's __init__: it splits the command and runs no shell.
        self.cmd = ["/bin/sh", "-c", "exec " + command]
        self.stderr = tempfile.TemporaryFile()
        self.process = subprocess.Popen(self.cmd, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self.stderr, bufsize=0,
                                        start_new_session=True)
        self.timeout = None
        self.ended = False      # its stdout ended

    def failure(self) -> str | None:
        """Once closed: why the command ended by itself (None: it was stopped)."""
        if self.process.returncode in (None, -signal.SIGTERM, -signal.SIGKILL):
            return None
        self.stderr.seek(max(self.stderr.seek(0, os.SEEK_END) - STDERR_TAIL, 0))
        lines = self.stderr.read().decode("utf-8", "replace").strip().splitlines()
        return (f"the ProxyCommand exited with status {self.process.returncode}"
                + (f": {lines[-1]}" if lines else ""))

    def recv(self, size: int) -> bytes:
        ready, _, _ = select.select([self.process.stdout], [], [], self.timeout)
        if not ready:
            raise socket.timeout()
        try:
            data = os.read(self.process.stdout.fileno(), size)
        except OSError as e:
            raise paramiko.ProxyCommandFailure(" ".join(self.cmd), e.strerror) from None
        self.ended = self.ended or not data
        return data

    def close(self) -> None:
        for pipe in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                pipe.close()
        if self.process.returncode is not None:
            return
        # A command whose output ended is exiting (coreutils close stdout
        # before they exit): its own status says why, a SIGTERM would not.
        if self.ended and self._exits_within(PROXY_STOP_S):
            return
        self._signal(signal.SIGTERM)
        if not self._exits_within(PROXY_STOP_S):
            self._signal(signal.SIGKILL)
            self.process.wait()

    def _exits_within(self, seconds: float) -> bool:
        try:
            self.process.wait(seconds)
            return True
        except subprocess.TimeoutExpired:
            return False

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)

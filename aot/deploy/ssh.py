"""The ssh transport: run a package's harness on a board reached over SSH
(a Raspberry Pi, or the emulated one aot boots itself).

The board's [options] table (merged with ~/.config/aot/boards.toml and the
command line's --host, --port, ... : aot.targets.get_board, with_options),
read and checked by aot.deploy.ssh_config.ssh_params, with what the user's
~/.ssh/config says of the host (aliases, ProxyJump, ProxyCommand: below
these options, above the board's defaults):

    host = "192.168.1.42"          # required (no default: it is your Pi's)
    port = 22
    user = "pi"
    key = "~/.ssh/id_ed25519"      # absent: the ssh agent and default keys
    known_hosts = "~/.ssh/known_hosts"
    exec_prefix = "taskset -c 3"   # prepended to the harness (split like a shell)
    connect_timeout_s = 10
    command_timeout_s = 600        # each command, upload and download
    trust_new_host_key = false
    remote_tmp = "/tmp"            # where the per-run work dirs go
    ssh_config = "~/.ssh/config"   # or $AOT_SSH_CONFIG; "none": read none
    vm = "<name>"                  # a VM aot boots itself (aot.deploy.vm)

One run: connect (retrying only the connect: nothing has run yet), make a
fresh work dir on the board (mktemp -d, so two aot processes never share
one), upload the static harness and the raw inputs and check their sha256
there, run `cd WORKDIR && EXEC_PREFIX ./bench WARMUP RUNS in0.bin ...
out0.bin ...`, fetch the outputs, remove the work dir. The work dir goes on
failure and on Ctrl-C too; a command interrupted or timed out is killed on
the board first (every command reports its pid as its first line).

Bounded in time: every operation on the board (a command, an upload, a
download) has a deadline, command_timeout_s, kept by a watchdog that closes
the connection when it passes: paramiko can block in a socket write with
no timeout at all when the board stops reading. The cleanup then runs over
a fresh connection with short deadlines (CLEANUP_CONNECT_S, KILL_TIMEOUT_S).
A keepalive goes out every KEEPALIVE_S on an idle connection. Bounded in
size: an output file is read up to the bytes the package's metadata gives
it, a command's stdout up to OUTPUT_CAP (the harness's report: what its
runs can print, report_limit), and of stderr the last STDERR_TAIL bytes.

Keys are never printed: messages name key files, never their contents.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import posixpath
import re
import shlex
import socket
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import IO, Callable, Iterator, Sequence

import numpy as np
import paramiko

from aot.support import progress
from aot.deploy import known_hosts, vm
from aot.deploy.host import (RunResult, failure, harness_args, parse_report, prepare_run,
                             report_limit)
from aot.deploy.ssh_config import DEFAULT_KNOWN_HOSTS, SshParams, ssh_params, where
from aot.deploy.ssh_proxy import ProxyCommand, close_route, open_route
from aot.errors import AotError, BoardUnreachableError, InputError
from aot.targets import Board

__all__ = ["DEFAULT_KNOWN_HOSTS", "SshParams", "SshSession", "RemoteProcess", "connect",
           "reach", "run_ssh", "ssh_params", "trust_host_key", "where"]

# Authentication happens once the board answers: not part of "reachable".
AUTH_TIMEOUT_S = 30.0
# A kill on the board (TERM, up to 1 s, KILL) and the work dir's removal.
KILL_TIMEOUT_S = 5.0
# The fresh connection a cleanup makes when the first one was lost or
# closed by a deadline: short, so a stalled board ends the command within
# command_timeout_s + about 5 s (the work dir then stays: docs/deploy.md).
CLEANUP_CONNECT_S = 4.0
# A command's watchdog fires this long after its own deadline, which kills
# the command over the connection if the board still answers.
GRACE_S = 1.0
# Before that kill: does the board answer at all? (A stalled one would hold
# the kill for KILL_TIMEOUT_S; the cleanup's fresh connection kills it.)
PING_TIMEOUT_S = 2.0
KEEPALIVE_S = 10.0
POLL_S = 0.2
CHUNK = 1 << 16
# stdout of aot's own commands (mktemp, sha256sum, rm, kill): a few lines.
OUTPUT_CAP = 1 << 20
# Of stderr only the end is kept: error messages come last.
STDERR_TAIL = 64 << 10

# paramiko logs each failed handshake (a booting VM: many) with a traceback;
# without a handler of ours Python would print them on stderr. Errors reach
# the user as one AotError line instead.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


# --- connecting -------------------------------------------------------------------

class _NoAuth:
    """paramiko auth strategy that stops after the host key check (trust)."""

    def authenticate(self, transport):
        return []


class _Client(paramiko.SSHClient):
    """An SSHClient that closes, with its own, the connection it goes
    through (a jump host's)."""
    via: paramiko.SSHClient | None = None

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.via is not None:
                self.via.close()


def connect(params: SshParams, authenticate: bool = True, capture_unknown: bool = False,
            auth_timeout_s: float | None = None
            ) -> tuple[paramiko.SSHClient, known_hosts.HostKeyPolicy]:
    """A client connected to the board, its host key checked (and
    authenticated unless told not to; an unknown key only recorded in the
    policy when capture_unknown). A board that does not answer, or drops
    the connection before the SSH handshake ends (a VM booting), is tried
    again with backoff until connect_timeout_s; anything decided after the
    board answered (host key, authentication) is final. A jump host is
    connected first (its host key checked, and logged in), with a
    connect_timeout_s of its own."""
    if params.key:
        _check_key(params)
    via = connect(params.via, auth_timeout_s=auth_timeout_s)[0] if params.via else None
    try:
        client, policy = _connect(params, via, authenticate, capture_unknown, auth_timeout_s)
    except BaseException:
        if via is not None:
            via.close()
        raise
    client.via = via
    return client, policy


def _connect(params: SshParams, via: paramiko.SSHClient | None, authenticate: bool,
             capture_unknown: bool, auth_timeout_s: float | None
             ) -> tuple[_Client, known_hosts.HostKeyPolicy]:
    deadline = time.monotonic() + params.connect_timeout_s
    delay = 0.1
    while True:
        client = _Client()
        revoked = known_hosts.load(client, params.known_hosts)
        policy = known_hosts.HostKeyPolicy(params.known_hosts, params.trust_new_host_key,
                                           revoked, capture_unknown)
        client.set_missing_host_key_policy(policy)
        remaining = max(deadline - time.monotonic(), 0.05)
        sock = None
        try:
            sock = open_route(params, via, remaining)
            # With a sock, paramiko still checks the host key under this name.
            client.connect(params.host, params.port, username=params.user,
                           key_filename=params.key or list(params.identity_files) or None,
                           look_for_keys=params.key is None and not params.identity_files,
                           allow_agent=params.key is None, timeout=remaining,
                           banner_timeout=remaining, sock=sock,
                           auth_timeout=auth_timeout_s or max(AUTH_TIMEOUT_S,
                                                              params.connect_timeout_s),
                           auth_strategy=None if authenticate else _NoAuth())
            # paramiko's keepalive expects no answer: it keeps NATs and
            # firewalls from dropping an idle connection (a long run).
            client.get_transport().set_keepalive(int(KEEPALIVE_S))
            return client, policy
        except BaseException as e:
            client.close()
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.close()
            reason = _not_reachable_yet(e, params)
            if reason is None:
                raise
            if isinstance(sock, ProxyCommand):
                reason = sock.failure() or reason
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            through = (f" (through ProxyCommand {params.proxy_command!r})"
                       if params.proxy_command else "")
            raise BoardUnreachableError(f"cannot reach {where(params)}{through}: {reason} "
                                        f"(tried for {params.connect_timeout_s:g} s)")
        time.sleep(min(delay, remaining))
        delay = min(delay * 2, 1.0)


# The key types paramiko's SSHClient tries for a key file, in its order.
KEY_TYPES = (paramiko.RSAKey, paramiko.ECDSAKey, paramiko.Ed25519Key)


def _check_key(params: SshParams) -> None:
    """The key file loads as paramiko will load it. paramiko reads it only
    once the board answers, and its error then looks like a failed
    handshake: connect would retry it until connect_timeout_s."""
    path = params.key.removesuffix("-cert.pub")    # a certificate: its key beside it
    if not Path(path).is_file():
        raise InputError(f"{where(params)}: key file {params.key} does not exist")
    for kind in KEY_TYPES:
        try:
            kind.from_private_key_file(path)
            return
        except paramiko.PasswordRequiredException:
            raise InputError(_encrypted(params)) from None
        except OSError as e:
            raise InputError(f"{where(params)}: cannot read key file {path}: "
                             f"{e.strerror or e}") from None
        except (paramiko.SSHException, ValueError):
            continue
    raise InputError(f"{where(params)}: key file {params.key} is not a private key "
                     "(RSA, ECDSA or Ed25519, PEM or OpenSSH format)")


def _encrypted(params: SshParams) -> str:
    return (f"{where(params)}: key file {params.key} is encrypted: load it into the ssh "
            "agent (ssh-add) and leave out --key")


def _not_reachable_yet(e: BaseException, params: SshParams) -> str | None:
    """Why the attempt failed, if trying again may help; raises AotError for
    final answers; None for anything else (re-raised as is)."""
    w = where(params)
    if isinstance(e, known_hosts.RevokedHostKey):
        raise BoardUnreachableError(f"{w}: the board presents host key "
                                    f"{known_hosts.describe(e.key)}, which {params.known_hosts} "
                                    "marks @revoked: refused") from None
    if isinstance(e, known_hosts.UnknownHostKey):
        # The name the user gave: `aot board trust` looks it up in ~/.ssh/config too.
        raise BoardUnreachableError(known_hosts.unknown_message(
            w, params.board, params.alias or params.host, params.port, params.known_hosts,
            e.key)) from None
    if isinstance(e, paramiko.BadHostKeyException):
        raise BoardUnreachableError(known_hosts.mismatch_message(w, params.host, params.port,
                                                                 params.known_hosts, e.key,
                                                                 e.expected_key)) from None
    if isinstance(e, paramiko.PasswordRequiredException):
        raise InputError(_encrypted(params)) from None
    if isinstance(e, paramiko.AuthenticationException) or \
            "No authentication methods available" in str(e):
        raise BoardUnreachableError(f"{w}: authentication failed for {params.user}@"
                                    f"{params.host}:{params.port} with {_keys(params)} (check "
                                    "--user and --key)") from None
    if isinstance(e, paramiko.ChannelException):
        if e.code == paramiko.common.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED:
            raise BoardUnreachableError(f"cannot reach {w}: {where(params.via)} refuses to "
                                        f"forward a connection to it ({e.text}: its sshd's "
                                        "AllowTcpForwarding or PermitOpen)") from None
        return f"{where(params.via)} cannot connect to it ({e.text})"
    if isinstance(e, socket.gaierror):
        raise BoardUnreachableError(f"cannot reach {w}: unknown host name "
                                    f"{params.host!r}") from None
    if isinstance(e, EOFError) or str(e) == "No existing session":
        return "the connection closed during the SSH handshake"
    if isinstance(e, paramiko.SSHException):
        return f"the SSH handshake failed ({e})"
    if isinstance(e, OSError):
        return _socket_reason(e)
    return None


def _keys(params: SshParams) -> str:
    """The keys a login tries, as a message names them."""
    if params.key:
        return f"key file {params.key}"
    if params.identity_files:
        return f"IdentityFile {', '.join(params.identity_files)} and the ssh agent"
    return "the ssh agent and default keys"


def _socket_reason(e: OSError) -> str:
    if isinstance(e, paramiko.ssh_exception.NoValidConnectionsError):
        codes = {err.errno for err in e.errors.values()}
        return "connection refused" if codes == {errno.ECONNREFUSED} else "host unreachable"
    if isinstance(e, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(e, ConnectionRefusedError):
        return "connection refused"
    return e.strerror or str(e) or type(e).__name__


def host_key(params: SshParams) -> tuple[paramiko.PKey, bool]:
    """The host key the board presents, and whether known_hosts has it
    already. Nothing is written; a key that differs from the file's, or one
    it marks @revoked, is refused."""
    client, policy = connect(params, authenticate=False, capture_unknown=True)
    try:
        return client.get_transport().get_remote_server_key(), policy.unknown is None
    finally:
        client.close()


# OpenSSH's and paramiko's spelling: SHA256, then the digest in base64
# without its padding (ssh-keygen -lf prints it so).
FINGERPRINT = re.compile(r"SHA256:[A-Za-z0-9+/]{43}")


def check_fingerprint(text: str) -> str:
    """A fingerprint as the user may give it, in paramiko's spelling."""
    fp = text.strip().rstrip("=")
    if not FINGERPRINT.fullmatch(fp):
        raise InputError(f"--fingerprint {text!r} is not a SHA256 fingerprint "
                         "(SHA256: and 43 base64 characters, as ssh-keygen -lf prints it)")
    return fp


def trust_host_key(params: SshParams, fingerprint: str | None = None,
                   show: Callable[[paramiko.PKey, bool], None] | None = None
                   ) -> tuple[paramiko.PKey, bool]:
    """The board's host key, added to known_hosts if new (True) or already
    there (False). `show(key, known)` sees it before anything is written;
    with `fingerprint` (SHA256:...) any other key is refused, and nothing is
    written. A key that differs from the file's is refused."""
    pinned = check_fingerprint(fingerprint) if fingerprint is not None else None
    key, known = host_key(params)
    if show is not None:
        show(key, known)
    if pinned is not None and key.fingerprint != pinned:
        raise BoardUnreachableError(f"{where(params)}: the board presents host key "
                                    f"{known_hosts.describe(key)}, "
                                    f"not the expected {pinned}: refused, nothing written to "
                                    f"{params.known_hosts}")
    if not known:
        try:
            known_hosts.add_known_host(params.known_hosts,
                                       known_hosts.entry_name(params.host, params.port), key)
        except OSError as e:
            raise AotError(f"cannot add the host key of {where(params)} to "
                           f"{params.known_hosts}: {e.strerror}") from None
    return key, not known


# --- uploads ----------------------------------------------------------------------

def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def check_upload(name: str, size: int, sha256: str, remote_size: int,
                 remote_sha256sum: bytes) -> None:
    """Refuse an upload whose size or sha256 on the board (`sha256sum`'s
    output) is not the local file's."""
    if remote_size != size:
        raise AotError(f"upload of {name} is corrupt: {remote_size} bytes on the board, "
                       f"{size} sent")
    fields = remote_sha256sum.split()
    # GNU sha256sum starts the line with a backslash when it escapes the name.
    got = fields[0].decode("ascii", "replace").lower().lstrip("\\") if fields else "(nothing)"
    if got != sha256:
        raise AotError(f"upload of {name} is corrupt: sha256 {got} on the board, "
                       f"{sha256} sent")


def _check_name(name: str) -> None:
    """Files live directly in the work dir: a bare, plain name."""
    if not re.fullmatch(r"[A-Za-z0-9._-]+", name) or name in (".", ".."):
        raise AotError(f"remote file name {name!r} must be a plain file name")


# --- the session ------------------------------------------------------------------

class SshSession:
    """One connection to a board and a fresh work dir there, removed on exit
    (also on failure or Ctrl-C, after killing what still runs)."""

    def __init__(self, params: SshParams) -> None:
        self.params = params
        self.workdir = ""
        self._client: paramiko.SSHClient | None = None
        self._processes: list[RemoteProcess] = []
        self._orphans: list[int] = []     # pids left running by a lost connection

    def __enter__(self) -> SshSession:
        try:
            with progress.step(f"connect to {where(self.params)}"):
                self._client, _ = connect(self.params)
            self.workdir = self._make_workdir()
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(self, kind, value, tb) -> None:
        try:
            self._cleanup()
        except (AotError, paramiko.SSHException, OSError, EOFError):
            if kind is None:        # else the error in flight says more
                raise
        finally:
            self._close()

    # -- files

    def put(self, local: Path, name: str, mode: int = 0o644) -> str:
        """Upload `local` as workdir/name, checked by size and sha256 there."""
        return self.put_many([(Path(local), name, mode)])[0]

    def put_many(self, files: Sequence[tuple[Path, str, int]]) -> list[str]:
        """Upload (local, name, mode) files over one SFTP channel, then check
        them all with one sha256sum: the remote paths. All of it within
        command_timeout_s."""
        for _, name, _ in files:
            _check_name(name)
        remote = [posixpath.join(self.workdir, name) for _, name, _ in files]
        # What is sent, read before sending: the check compares with these.
        sent = [(Path(local).stat().st_size, sha256_file(Path(local))) for local, _, _ in files]
        sizes = []
        with self._transfer(f"upload {', '.join(n for _, n, _ in files)}") as sftp:
            for (local, _, mode), path in zip(files, remote):
                sftp.put(str(local), path, confirm=False)
                sftp.chmod(path, mode)
                sizes.append(int(sftp.stat(path).st_size or 0))
        # Plain names in the work dir: sha256sum escapes a name holding a
        # backslash or a newline (as a work dir under remote_tmp may).
        names = " ".join(shlex.quote(name) for _, name, _ in files)
        status, out, err = self._command(f"cd {shlex.quote(self.workdir)} && sha256sum -- "
                                         f"{names}", self.params.command_timeout_s)
        sums = out.splitlines()
        if status != 0 or len(sums) != len(files):
            raise AotError(f"{where(self.params)}: cannot check the uploads with sha256sum: "
                           f"{_last_line(err) or 'no output'}")
        for (_, name, _), (size, sha256), remote_size, line in zip(files, sent, sizes, sums):
            check_upload(name, size, sha256, remote_size, line)
        return remote

    def get(self, name: str, max_bytes: int = OUTPUT_CAP) -> bytes:
        """A file of the work dir, refused if larger than max_bytes."""
        _check_name(name)
        path = posixpath.join(self.workdir, name)
        with self._transfer(f"fetch {name}") as sftp:
            size = int(sftp.stat(path).st_size or 0)
            if size <= max_bytes:
                with sftp.open(path, "rb") as f:
                    if size:
                        f.prefetch(size)
                    data = f.read(max_bytes + 1)     # one more: a file that grew shows
                size = max(size, len(data))
        if size > max_bytes:
            raise AotError(f"{where(self.params)}: {name} is {size} bytes on the board, "
                           f"more than the {max_bytes} expected")
        return data

    # -- commands

    def run(self, argv: Sequence[str], *, harness: bool = False, timeout: float | None = None,
            max_output: int = OUTPUT_CAP) -> tuple[int, bytes, bytes]:
        """Run argv in the work dir (exec_prefix first when harness=True):
        (exit status, stdout, stderr). Killed on the board on timeout, on
        Ctrl-C, or when its stdout passes max_output bytes; of stderr the
        last STDERR_TAIL bytes are kept."""
        return self._command(self._script(argv, harness),
                             self.params.command_timeout_s if timeout is None else timeout,
                             max_output=max_output)

    def start(self, argv: Sequence[str], *, harness: bool = True) -> RemoteProcess:
        """A long-lived process in the work dir, talked to over stdin/stdout
        (each read on it waits at most command_timeout_s)."""
        timeout = self.params.command_timeout_s
        with self._bounded("start a process", timeout):
            chan = self._open(self._script(argv, harness))
            chan.settimeout(timeout)
            stdout = chan.makefile("rb")
            pid = _parse_pid(stdout.readline())
        proc = RemoteProcess(self, chan, pid, stdout)
        self._processes.append(proc)
        return proc

    def kill(self, pid: int | None) -> None:
        """Stop a process on the board: TERM (sudo-like prefixes pass it on),
        KILL if it is still there a second later."""
        if pid is None:
            return
        p = str(int(pid))
        script = (f"kill -TERM {p} 2>/dev/null || exit 0; for i in 1 2 3 4 5 6 7 8 9 10; do "
                  f"kill -0 {p} 2>/dev/null || exit 0; sleep 0.1; done; "
                  f"kill -KILL {p} 2>/dev/null; exit 0")
        self._command(script, KILL_TIMEOUT_S, killable=False)

    # -- internals

    def _script(self, argv: Sequence[str], harness: bool) -> str:
        prefix = shlex.split(self.params.exec_prefix) if harness else []
        words = " ".join(shlex.quote(str(a)) for a in [*prefix, *argv])
        return f"cd {shlex.quote(self.workdir)} && exec {words}"

    def _open(self, script: str) -> paramiko.Channel:
        """A channel running `script` under sh, which first prints its pid:
        `exec` keeps that pid for the command, so it can be killed later."""
        chan = self._client.get_transport().open_session(timeout=self.params.connect_timeout_s)
        chan.exec_command("sh -c " + shlex.quote(f"echo $$; {script}"))
        return chan

    def _command(self, script: str, timeout: float, killable: bool = True,
                 max_output: int = OUTPUT_CAP) -> tuple[int, bytes, bytes]:
        out, err = bytearray(), bytearray()
        if not self._alive():
            raise BoardUnreachableError(f"{where(self.params)}: lost the connection")
        watchdog = _Watchdog(self._client.get_transport(), timeout + GRACE_S)
        chan = None
        try:
            with watchdog:
                chan = self._open(script)
                chan.shutdown_write()
                status = _collect(chan, time.monotonic() + timeout, out, err,
                                  max_output + PID_LINE_BYTES)
        except _Timeout:
            self._stop(chan, out, killable)
            raise AotError(f"{where(self.params)}: the command timed out after {timeout:g} s "
                           "(command_timeout_s)") from None
        except _TooMuch:
            self._stop(chan, out, killable)
            raise AotError(f"{where(self.params)}: the command printed more than {max_output} "
                           "bytes on stdout: stopped") from None
        except KeyboardInterrupt:
            if chan is not None:
                self._stop(chan, out, killable)
            raise
        except (paramiko.SSHException, OSError, EOFError) as e:
            if chan is not None:
                chan.close()
            self._lost(out, killable)
            raise BoardUnreachableError(
                self._stalled(timeout) if watchdog.fired else
                f"{where(self.params)}: lost the connection ({_reason(e)})") from None
        chan.close()
        if status == -1 and (watchdog.fired or not self._alive()):
            self._lost(out, killable)
            raise BoardUnreachableError(
                self._stalled(timeout) if watchdog.fired else
                f"{where(self.params)}: lost the connection while a command ran")
        _, _, rest = bytes(out).partition(b"\n")   # the first line: the pid
        return status, rest, bytes(err)

    def _stalled(self, timeout: float, what: str = "the command") -> str:
        return (f"{where(self.params)}: {what} timed out after {timeout:g} s "
                "(command_timeout_s): the board stopped answering")

    def _alive(self) -> bool:
        transport = self._client.get_transport() if self._client else None
        return transport is not None and transport.is_active()

    def _lost(self, out: bytearray, killable: bool) -> None:
        """The connection dropped under a command: it may still run there."""
        pid = _parse_pid(bytes(out).partition(b"\n")[0] + b"\n")
        if killable and pid is not None:
            self._orphans.append(pid)

    def _stop(self, chan: paramiko.Channel, out: bytearray, killable: bool) -> None:
        """Kill the command behind `chan` (its pid is the first line of out);
        if the board does not answer, the cleanup kills it later."""
        pid = None
        try:
            if killable:
                if b"\n" not in out:      # interrupted before sh said its pid
                    _collect_pid(chan, out)
                pid = _parse_pid(bytes(out).partition(b"\n")[0] + b"\n")
                if pid is not None and not self._answers(PING_TIMEOUT_S):
                    self._orphans.append(pid)
                    return
                self.kill(pid)
        except (AotError, paramiko.SSHException, OSError, EOFError):
            if pid is not None:
                self._orphans.append(pid)   # the original error matters more
        finally:
            chan.close()

    def _answers(self, seconds: float) -> bool:
        """Whether the board answers a request within `seconds` (a global
        request, which sshd and dropbear refuse at once); if it does not,
        the connection is closed."""
        transport = self._client.get_transport() if self._client else None
        if transport is None or not transport.is_active():
            return False
        watchdog = _Watchdog(transport, seconds)
        try:
            with watchdog:
                transport.global_request("keepalive@openssh.com", wait=True)
        except (paramiko.SSHException, OSError, EOFError):
            return False
        return not watchdog.fired and transport.is_active()

    def _make_workdir(self) -> str:
        tmp = self.params.remote_tmp
        status, out, err = self._command(
            f"mktemp -d {shlex.quote(posixpath.join(tmp, 'aot-XXXXXX'))}",
            self.params.command_timeout_s, killable=False)
        path = out.decode("utf-8", "replace").strip()
        if status != 0 or not re.fullmatch(re.escape(posixpath.join(tmp, "aot-")) +
                                           r"[A-Za-z0-9._-]+", path):
            raise AotError(f"{where(self.params)}: cannot make a work dir in {tmp}: "
                           f"{_last_line(err) or path or 'no output'}")
        return path

    def _cleanup(self) -> None:
        """Kill what still runs, remove the work dir; over a new connection
        (with short deadlines) if the old one dropped or was closed by a
        deadline, else both would stay on the board."""
        running = [p for p in self._processes if not p._chan.exit_status_ready()]
        pids = [p.pid for p in running if p.pid is not None] + self._orphans
        for proc in list(self._processes):
            proc._forget()
        if not self.workdir or self._client is None:
            return
        if not self._alive():
            self._close()
            self._client, _ = connect(_connect_within(self.params, CLEANUP_CONNECT_S),
                                      auth_timeout_s=CLEANUP_CONNECT_S)
        failed = None
        for pid in pids:
            try:
                self.kill(pid)
            except AotError as e:
                failed = e
        status, _, err = self._command(f"rm -rf -- {shlex.quote(self.workdir)}",
                                       KILL_TIMEOUT_S, killable=False)
        if status != 0:
            raise AotError(f"{where(self.params)}: cannot remove the work dir "
                           f"{self.workdir}: {_last_line(err)}")
        self.workdir = ""
        if failed is not None:
            raise failed

    def _close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    @contextlib.contextmanager
    def _bounded(self, what: str, timeout: float) -> Iterator[None]:
        """The block within `timeout` (the connection is closed past it),
        paramiko's errors as one line naming `what`."""
        watchdog = _Watchdog(self._client.get_transport(), timeout)
        try:
            with watchdog:
                yield
        except (paramiko.SSHException, OSError, EOFError) as e:
            if isinstance(e, socket.timeout) or watchdog.fired:
                self._close_transport()     # stalled: the cleanup starts afresh
                raise BoardUnreachableError(self._stalled(timeout, what)) from None
            raise BoardUnreachableError(f"{where(self.params)}: cannot {what}: "
                                        f"{_reason(e)}") from None
        if watchdog.fired:
            raise BoardUnreachableError(self._stalled(timeout, what))

    @contextlib.contextmanager
    def _transfer(self, what: str) -> Iterator[paramiko.SFTPClient]:
        """An SFTP channel for one upload or download, all within
        command_timeout_s; each read on it waits that long at most too."""
        timeout = self.params.command_timeout_s
        with self._bounded(what, timeout):
            # One SFTP channel per operation, closed before the next channel
            # opens: dropbear sometimes fails a channel opened beside another.
            sftp = self._client.open_sftp()
            try:
                sftp.get_channel().settimeout(timeout)
                yield sftp
            finally:
                sftp.close()

    def _close_transport(self) -> None:
        transport = self._client.get_transport() if self._client else None
        if transport is not None:
            close_route(transport)


# The pid line every command starts with.
PID_LINE_BYTES = 24


class _Watchdog:
    """Closes a connection whose block outlives `seconds`: the one way to
    end a paramiko call blocked in a socket write to a board that stopped
    reading (paramiko retries such a write until the connection closes)."""

    def __init__(self, transport: paramiko.Transport | None, seconds: float) -> None:
        self._transport = transport
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._fired = threading.Event()

    @property
    def fired(self) -> bool:
        return self._fired.is_set()

    def _fire(self) -> None:
        self._fired.set()
        if self._transport is not None:
            close_route(self._transport)

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()


def _connect_within(params: SshParams, seconds: float) -> SshParams:
    """params whose connect, and each jump host's, takes at most `seconds`."""
    return replace(params, connect_timeout_s=min(params.connect_timeout_s, seconds),
                   via=params.via and _connect_within(params.via, seconds))


def _reason(e: BaseException) -> str:
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


class _Timeout(Exception):
    pass


class _TooMuch(Exception):
    pass


def _collect(chan: paramiko.Channel, deadline: float, out: bytearray, err: bytearray,
             max_out: int) -> int:
    """Read stdout (up to max_out bytes) and the end of stderr until the
    command ends: its exit status."""
    chan.settimeout(POLL_S)
    while True:
        _stderr_tail(chan, err)
        try:
            data = chan.recv(CHUNK)
        except socket.timeout:
            data = None
        if data:
            out += data
            if len(out) > max_out:
                raise _TooMuch
        elif data == b"":       # end of stdout: the command is done or nearly
            break
        if time.monotonic() > deadline:
            raise _Timeout
    while not chan.exit_status_ready():
        if time.monotonic() > deadline:
            raise _Timeout
        time.sleep(0.01)
    _stderr_tail(chan, err)
    return chan.recv_exit_status()


def _stderr_tail(chan: paramiko.Channel, err: bytearray) -> None:
    while chan.recv_stderr_ready():
        err += chan.recv_stderr(CHUNK)
        del err[:-STDERR_TAIL]


def _collect_pid(chan: paramiko.Channel, out: bytearray) -> None:
    """Wait a little for the pid line of a command interrupted at its start."""
    deadline = time.monotonic() + 2.0
    chan.settimeout(POLL_S)
    while b"\n" not in out and time.monotonic() < deadline:
        try:
            data = chan.recv(CHUNK)
        except socket.timeout:
            continue
        if not data:
            return
        out += data


def _parse_pid(line: bytes) -> int | None:
    text = line.decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


def _last_line(err: bytes) -> str:
    lines = err.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else ""


class _StderrTail:
    """A process's stderr read as its last STDERR_TAIL bytes: read() of a
    chatty process must not fill the memory."""

    def __init__(self, f: IO[bytes]) -> None:
        self._f = f

    def read(self, size: int = -1) -> bytes:
        if size is not None and size >= 0:
            return self._f.read(size)
        tail = bytearray()
        while chunk := self._f.read(CHUNK):
            tail += chunk
            del tail[:-STDERR_TAIL]
        return bytes(tail)

    def close(self) -> None:
        self._f.close()


class RemoteProcess:
    """A process on the board with binary stdin/stdout (serve mode)."""

    def __init__(self, session: SshSession, chan: paramiko.Channel, pid: int | None,
                 stdout: IO[bytes]) -> None:
        self._session, self._chan, self.pid = session, chan, pid
        self.stdin: IO[bytes] = chan.makefile_stdin("wb")
        self.stdout = stdout
        self.stderr = _StderrTail(chan.makefile_stderr("rb"))

    def close(self) -> int:
        """Close stdin and wait: the exit status (-1: killed by a signal)."""
        try:
            with contextlib.suppress(paramiko.SSHException, OSError, EOFError):
                self.stdin.close()      # the process may have closed the channel first
            deadline = time.monotonic() + self._session.params.command_timeout_s
            while not self._chan.exit_status_ready():
                if self._chan.closed:
                    return -1
                if time.monotonic() > deadline:
                    self.kill()
                    raise AotError(f"{where(self._session.params)}: the process did not "
                                   "exit after its input closed")
                time.sleep(0.01)
            return self._chan.recv_exit_status()
        finally:
            self._forget()

    def kill(self) -> None:
        if self._chan.closed:
            return
        try:
            self._session.kill(self.pid)
        finally:
            self._forget()

    def _forget(self) -> None:
        self._chan.close()
        if self in self._session._processes:
            self._session._processes.remove(self)


# --- the transport ----------------------------------------------------------------

@contextlib.contextmanager
def reach(board: Board) -> Iterator[SshParams]:
    """How to reach the board: its options, or a VM aot boots (and stops)."""
    if not board.options.get("vm"):
        yield ssh_params(board)
        return
    with vm.running(board) as params:
        yield params if params.board else replace(params, board=board.name)


def run_ssh(pkg: Path, board: Board, inputs: Sequence[np.ndarray], warmup: int,
            runs: int) -> RunResult:
    meta, inputs, exe = prepare_run(pkg, inputs)
    with tempfile.TemporaryDirectory(prefix="aot-ssh-") as tmp, reach(board) as params, \
            SshSession(params) as session:
        args, out_paths = harness_args(meta, Path(tmp), inputs, warmup, runs)
        in_paths = [Path(a) for a in args[2:2 + len(inputs)]]
        with progress.step(f"upload the harness and {len(in_paths)} input(s) to {board.name}"):
            session.put_many([(exe, "bench", 0o755), *((p, p.name, 0o644) for p in in_paths)])
        with progress.step(f"run on {board.name}"):
            status, out, err = session.run(["./bench", *args[:2], *(p.name for p in in_paths),
                                            *(p.name for p in out_paths)], harness=True,
                                           max_output=report_limit(meta, runs))
        if status == -1:
            raise AotError(f"the harness was killed by a signal on {where(params)}: "
                           f"{_last_line(err) or 'no message'}")
        if status != 0:
            raise AotError(f"{where(params)}: "
                           f"{failure(status, err.decode('utf-8', 'replace'))}")
        # Each output as large as the package's metadata says, never more.
        outputs = [session.get(p.name, int(spec["bytes"]))
                   for p, spec in zip(out_paths, meta["outputs"])]
    return parse_report(out.decode("utf-8", "replace"), meta, outputs, runs)

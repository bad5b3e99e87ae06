"""The ssh transport: run a package's harness on a board reached over SSH
(a Raspberry Pi, or the emulated one aot boots itself).

The board's [options] table (merged with ~/.config/aot/boards.toml and the
command line's --host, --port, ... : aot.targets.get_board, with_options):

    host = "192.168.1.42"          # required (no default: it is your Pi's)
    port = 22
    user = "pi"
    key = "~/.ssh/id_ed25519"      # absent: the ssh agent and default keys
    known_hosts = "~/.ssh/known_hosts"
    exec_prefix = "taskset -c 3"   # prepended to the harness (split like a shell)
    connect_timeout_s = 10
    command_timeout_s = 600
    remote_tmp = "/tmp"            # where the per-run work dirs go
    vm = "<name>"                  # a VM aot boots itself (aot.deploy.vm)

One run: connect (retrying only the connect: nothing has run yet), make a
fresh work dir on the board (mktemp -d, so two aot processes never share
one), upload the static harness and the raw inputs and check their sha256
there, run `cd WORKDIR && EXEC_PREFIX ./bench WARMUP RUNS in0.bin ...
out0.bin ...`, fetch the outputs, remove the work dir. The work dir goes on
failure and on Ctrl-C too; a command interrupted or timed out is killed on
the board first (every command reports its pid as its first line).

Keys are never printed: messages name key files, never their contents.
"""
from __future__ import annotations

import contextlib
import errno
import getpass
import hashlib
import logging
import posixpath
import re
import shlex
import socket
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Iterator, Sequence

import numpy as np
import paramiko

from aot import progress
from aot.deploy import known_hosts
from aot.deploy.host import RunResult, failure, harness_args, parse_report, prepare_run
from aot.errors import AotError
from aot.targets import Board, config_path, option_number

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
# Authentication happens once the board answers: not part of "reachable".
AUTH_TIMEOUT_S = 30.0
KILL_TIMEOUT_S = 10.0
POLL_S = 0.2
CHUNK = 1 << 16

# paramiko logs each failed handshake (a booting VM: many) with a traceback;
# without a handler of ours Python would print them on stderr. Errors reach
# the user as one AotError line instead.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


@dataclass(frozen=True)
class SshParams:
    host: str
    port: int
    user: str
    key: str | None              # private key file; None: the ssh agent / default keys
    known_hosts: str             # file checked with paramiko RejectPolicy
    exec_prefix: str = ""        # e.g. "taskset -c 3" or "qemu-aarch64": prepended to the harness
    connect_timeout_s: float = 10.0
    command_timeout_s: float = 600.0
    trust_new_host_key: bool = False
    remote_tmp: str = "/tmp"     # the per-run work dirs are made here
    board: str = ""              # the board's name, for messages


# --- parameters from a board ------------------------------------------------------

def ssh_params(board: Board) -> SshParams:
    """The board's options (overrides already merged) as SshParams, checked."""
    o = board.options
    host = str(o.get("host") or "")
    if not host:
        raise AotError(f"board '{board.name}' has no host: pass --host HOST, or set "
                       f"host = \"...\" in the [{board.name}] table of {config_path()}")
    key = o.get("key")
    prefix = str(o.get("exec_prefix") or "")
    try:
        shlex.split(prefix)
    except ValueError as e:
        raise AotError(f"board '{board.name}': exec_prefix {prefix!r} is not valid ({e})") from None
    remote_tmp = str(o.get("remote_tmp") or "/tmp")
    if not remote_tmp.startswith("/"):
        raise AotError(f"board '{board.name}': remote_tmp must be an absolute path, "
                       f"got {remote_tmp!r}")
    return SshParams(
        host=host, port=option_number(board, "port", 22, int, 1, 65535),
        user=str(o.get("user") or getpass.getuser()),
        key=str(Path(str(key)).expanduser()) if key else None,
        known_hosts=str(Path(str(o.get("known_hosts") or DEFAULT_KNOWN_HOSTS)).expanduser()),
        exec_prefix=prefix,
        connect_timeout_s=option_number(board, "connect_timeout_s", 10.0, float, 0.1, 3600),
        command_timeout_s=option_number(board, "command_timeout_s", 600.0, float, 0.1, 86400 * 7),
        trust_new_host_key=bool(o.get("trust_new_host_key", False)),
        remote_tmp=remote_tmp.rstrip("/") or "/", board=board.name)


def where(params: SshParams) -> str:
    at = f"{params.host}:{params.port}"
    return f"board '{params.board}' at {at}" if params.board else at


# --- connecting -------------------------------------------------------------------

class _NoAuth:
    """paramiko auth strategy that stops after the host key check (trust)."""

    def authenticate(self, transport):
        return []


def connect(params: SshParams, authenticate: bool = True
            ) -> tuple[paramiko.SSHClient, known_hosts.HostKeyPolicy]:
    """A client connected to the board, its host key checked (and
    authenticated unless told not to). A board that does not answer, or
    drops the connection before the SSH handshake ends (a VM booting), is
    tried again with backoff until connect_timeout_s; anything decided after
    the board answered (host key, authentication) is final."""
    if params.key:
        _check_key(params)
    deadline = time.monotonic() + params.connect_timeout_s
    delay = 0.1
    while True:
        client = paramiko.SSHClient()
        known_hosts.load(client, params.known_hosts)
        policy = known_hosts.HostKeyPolicy(params.known_hosts, params.trust_new_host_key)
        client.set_missing_host_key_policy(policy)
        remaining = max(deadline - time.monotonic(), 0.05)
        try:
            client.connect(params.host, params.port, username=params.user,
                           key_filename=params.key, look_for_keys=params.key is None,
                           allow_agent=params.key is None, timeout=remaining,
                           banner_timeout=remaining,
                           auth_timeout=max(AUTH_TIMEOUT_S, params.connect_timeout_s),
                           auth_strategy=None if authenticate else _NoAuth())
            return client, policy
        except BaseException as e:
            client.close()
            reason = _not_reachable_yet(e, params)
            if reason is None:
                raise
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AotError(f"cannot reach {where(params)}: {reason} "
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
        raise AotError(f"{where(params)}: key file {params.key} does not exist")
    for kind in KEY_TYPES:
        try:
            kind.from_private_key_file(path)
            return
        except paramiko.PasswordRequiredException:
            raise AotError(_encrypted(params)) from None
        except OSError as e:
            raise AotError(f"{where(params)}: cannot read key file {path}: "
                           f"{e.strerror or e}") from None
        except (paramiko.SSHException, ValueError):
            continue
    raise AotError(f"{where(params)}: key file {params.key} is not a private key "
                   "(RSA, ECDSA or Ed25519, PEM or OpenSSH format)")


def _encrypted(params: SshParams) -> str:
    return (f"{where(params)}: key file {params.key} is encrypted: load it into the ssh "
            "agent (ssh-add) and leave out --key")


def _not_reachable_yet(e: BaseException, params: SshParams) -> str | None:
    """Why the attempt failed, if trying again may help; raises AotError for
    final answers; None for anything else (re-raised as is)."""
    w = where(params)
    if isinstance(e, known_hosts.UnknownHostKey):
        raise AotError(known_hosts.unknown_message(w, params.board, params.host, params.port,
                                                   params.known_hosts, e.key)) from None
    if isinstance(e, paramiko.BadHostKeyException):
        raise AotError(known_hosts.mismatch_message(w, params.host, params.port,
                                                    params.known_hosts, e.key,
                                                    e.expected_key)) from None
    if isinstance(e, paramiko.PasswordRequiredException):
        raise AotError(_encrypted(params)) from None
    if isinstance(e, paramiko.AuthenticationException) or \
            "No authentication methods available" in str(e):
        how = f"key file {params.key}" if params.key else "the ssh agent and default keys"
        raise AotError(f"{w}: authentication failed for {params.user}@{params.host}:"
                       f"{params.port} with {how} (check --user and --key)") from None
    if isinstance(e, socket.gaierror):
        raise AotError(f"cannot reach {w}: unknown host name {params.host!r}") from None
    if isinstance(e, EOFError) or str(e) == "No existing session":
        return "the connection closed during the SSH handshake"
    if isinstance(e, paramiko.SSHException):
        return f"the SSH handshake failed ({e})"
    if isinstance(e, OSError):
        return _socket_reason(e)
    return None


def _socket_reason(e: OSError) -> str:
    if isinstance(e, paramiko.ssh_exception.NoValidConnectionsError):
        codes = {err.errno for err in e.errors.values()}
        return "connection refused" if codes == {errno.ECONNREFUSED} else "host unreachable"
    if isinstance(e, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(e, ConnectionRefusedError):
        return "connection refused"
    return e.strerror or str(e) or type(e).__name__


def trust_host_key(params: SshParams) -> tuple[paramiko.PKey, bool]:
    """The board's host key, added to known_hosts if new (True) or already
    there (False). A key that differs from the file's is refused."""
    client, policy = connect(replace(params, trust_new_host_key=True), authenticate=False)
    try:
        return client.get_transport().get_remote_server_key(), policy.added is not None
    finally:
        client.close()


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
    got = fields[0].decode("ascii", "replace").lower() if fields else "(nothing)"
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
        them all with one sha256sum: the remote paths."""
        for _, name, _ in files:
            _check_name(name)
        remote = [posixpath.join(self.workdir, name) for _, name, _ in files]
        # What is sent, read before sending: the check compares with these.
        sent = [(Path(local).stat().st_size, sha256_file(Path(local))) for local, _, _ in files]
        sizes = []
        with self._errors(f"upload {', '.join(n for _, n, _ in files)}"), self._sftp() as sftp:
            for (local, _, mode), path in zip(files, remote):
                sftp.put(str(local), path, confirm=False)
                sftp.chmod(path, mode)
                sizes.append(int(sftp.stat(path).st_size or 0))
        status, out, err = self._command("sha256sum " + " ".join(map(shlex.quote, remote)),
                                         self.params.command_timeout_s)
        sums = out.splitlines()
        if status != 0 or len(sums) != len(files):
            raise AotError(f"{where(self.params)}: cannot check the uploads with sha256sum: "
                           f"{_last_line(err) or 'no output'}")
        for (_, name, _), (size, sha256), remote_size, line in zip(files, sent, sizes, sums):
            check_upload(name, size, sha256, remote_size, line)
        return remote

    def get(self, name: str) -> bytes:
        """A file of the work dir."""
        _check_name(name)
        with self._errors(f"fetch {name}"), self._sftp() as sftp:
            with sftp.open(posixpath.join(self.workdir, name), "rb") as f:
                f.prefetch()
                return f.read()

    # -- commands

    def run(self, argv: Sequence[str], *, harness: bool = False,
            timeout: float | None = None) -> tuple[int, bytes, bytes]:
        """Run argv in the work dir (exec_prefix first when harness=True):
        (exit status, stdout, stderr). Killed on the board on timeout/Ctrl-C."""
        return self._command(self._script(argv, harness),
                             self.params.command_timeout_s if timeout is None else timeout)

    def start(self, argv: Sequence[str], *, harness: bool = True) -> RemoteProcess:
        """A long-lived process in the work dir, talked to over stdin/stdout."""
        with self._errors("start a process"):
            chan = self._open(self._script(argv, harness))
            chan.settimeout(self.params.command_timeout_s)
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

    def _command(self, script: str, timeout: float, killable: bool = True
                 ) -> tuple[int, bytes, bytes]:
        out, err = bytearray(), bytearray()
        with self._errors("run a command"):
            chan = self._open(script)
        try:
            chan.shutdown_write()
            status = _collect(chan, time.monotonic() + timeout, out, err)
        except _Timeout:
            self._stop(chan, out, killable)
            raise AotError(f"{where(self.params)}: the command timed out after {timeout:g} s "
                           "(command_timeout_s)") from None
        except KeyboardInterrupt:
            self._stop(chan, out, killable)
            raise
        except (paramiko.SSHException, OSError, EOFError) as e:
            chan.close()
            self._lost(out, killable)
            raise AotError(f"{where(self.params)}: lost the connection ({e})") from None
        chan.close()
        if status == -1 and not self._alive():
            self._lost(out, killable)
            raise AotError(f"{where(self.params)}: lost the connection while a command ran")
        _, _, rest = bytes(out).partition(b"\n")   # the first line: the pid
        return status, rest, bytes(err)

    def _alive(self) -> bool:
        transport = self._client.get_transport() if self._client else None
        return transport is not None and transport.is_active()

    def _lost(self, out: bytearray, killable: bool) -> None:
        """The connection dropped under a command: it may still run there."""
        pid = _parse_pid(bytes(out).partition(b"\n")[0] + b"\n")
        if killable and pid is not None:
            self._orphans.append(pid)

    def _stop(self, chan: paramiko.Channel, out: bytearray, killable: bool) -> None:
        """Kill the command behind `chan` (its pid is the first line of out)."""
        try:
            if killable:
                if b"\n" not in out:      # interrupted before sh said its pid
                    _collect_pid(chan, out)
                self.kill(_parse_pid(bytes(out).partition(b"\n")[0] + b"\n"))
        except (AotError, paramiko.SSHException, OSError, EOFError):
            pass    # the original error matters more; cleanup still runs
        finally:
            chan.close()

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
        if the old one dropped (else both would stay on the board)."""
        running = [p for p in self._processes if not p._chan.exit_status_ready()]
        pids = [p.pid for p in running if p.pid is not None] + self._orphans
        for proc in list(self._processes):
            proc._forget()
        if not self.workdir or self._client is None:
            return
        if not self._alive():
            self._close()
            self._client, _ = connect(replace(self.params, connect_timeout_s=min(
                self.params.connect_timeout_s, KILL_TIMEOUT_S)))
        for pid in pids:
            self.kill(pid)
        status, _, err = self._command(f"rm -rf -- {shlex.quote(self.workdir)}",
                                       KILL_TIMEOUT_S, killable=False)
        if status != 0:
            raise AotError(f"{where(self.params)}: cannot remove the work dir "
                           f"{self.workdir}: {_last_line(err)}")
        self.workdir = ""

    def _close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    @contextlib.contextmanager
    def _sftp(self) -> Iterator[paramiko.SFTPClient]:
        # One SFTP channel per operation, closed before the next channel
        # opens: dropbear sometimes fails a channel opened beside another.
        sftp = self._client.open_sftp()
        try:
            yield sftp
        finally:
            sftp.close()

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except (paramiko.SSHException, OSError, EOFError) as e:
            reason = getattr(e, "strerror", None) or str(e) or type(e).__name__
            raise AotError(f"{where(self.params)}: cannot {what}: {reason}") from None


class _Timeout(Exception):
    pass


def _collect(chan: paramiko.Channel, deadline: float, out: bytearray, err: bytearray) -> int:
    """Read stdout and stderr until the command ends: its exit status."""
    chan.settimeout(POLL_S)
    while True:
        while chan.recv_stderr_ready():
            err += chan.recv_stderr(CHUNK)
        try:
            data = chan.recv(CHUNK)
        except socket.timeout:
            data = None
        if data:
            out += data
        elif data == b"":       # end of stdout: the command is done or nearly
            break
        if time.monotonic() > deadline:
            raise _Timeout
    while not chan.exit_status_ready():
        if time.monotonic() > deadline:
            raise _Timeout
        time.sleep(0.01)
    while chan.recv_stderr_ready():
        err += chan.recv_stderr(CHUNK)
    return chan.recv_exit_status()


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


class RemoteProcess:
    """A process on the board with binary stdin/stdout (serve mode)."""

    def __init__(self, session: SshSession, chan: paramiko.Channel, pid: int | None,
                 stdout: IO[bytes]) -> None:
        self._session, self._chan, self.pid = session, chan, pid
        self.stdin: IO[bytes] = chan.makefile_stdin("wb")
        self.stdout = stdout
        self.stderr: IO[bytes] = chan.makefile_stderr("rb")

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
    from aot.deploy.vm import running       # the VM boards' module, only when needed

    with running(board) as params:
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
                                            *(p.name for p in out_paths)], harness=True)
        if status == -1:
            raise AotError(f"the harness was killed by a signal on {where(params)}: "
                           f"{_last_line(err) or 'no message'}")
        if status != 0:
            raise AotError(f"{where(params)}: "
                           f"{failure(status, err.decode('utf-8', 'replace'))}")
        outputs = [session.get(p.name) for p in out_paths]
    return parse_report(out.decode("utf-8", "replace"), meta, outputs)

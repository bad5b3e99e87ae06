"""A board kept open for many runs: `aot.connect`.

    with aot.connect("qemu-aarch64") as dev:
        for x in batches:
            y = dev.run("build/kws", {"input_1": x})["Identity"]

The first run of a package starts its harness in serve mode (bench/bench
--serve, aot/deploy/serve.py) and keeps it: later runs of that package are
one request each, with no process start or upload. The harness runs where
the board's transport puts it: a local process (host), the qemu-user
emulator, or a process on an SSH board (one connection, each harness
uploaded once), or a microcontroller's serial port (serial_link.py: the
harness aot flash wrote). Bare-metal boards under semihosting
(qemu-system) have no stdin/stdout to serve on: they stay with
`aot.deploy.run_package`, one run per call.
"""
from __future__ import annotations

import contextlib
import signal
import subprocess
import tempfile
import threading
from dataclasses import replace
from pathlib import Path
from typing import IO, Mapping, Sequence

import numpy as np

from aot.deploy.host import RunResult, quantize_floats, warn_notes
from aot.deploy.serve import ServeClient
from aot.errors import AotError
from aot.targets import Board, get_board

REQUEST_TIMEOUT_S = 600      # a local harness that answers no sooner is killed
# A harness says hello as it starts (well under a second natively, about
# 0.2 s under qemu-user): one that has not within this is killed.
HELLO_TIMEOUT_S = 60
EXIT_WAIT_S = 10


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "did not exit"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    if code >= 128:                 # qemu-user relays the guest's fatal signal so
        return f"exited with code {code} (a crash)"
    return f"exited with code {code}"


def _last_lines(text: str, n: int = 3) -> str:
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return " | ".join(lines[-n:]) if lines else "no message on stderr"


class _LocalProcess:
    """The harness as a process of this machine (host or under qemu-user)."""

    def __init__(self, argv: list[str]):
        self._stderr = tempfile.TemporaryFile()     # a pipe nobody reads could fill up
        self.expired = ""       # what the harness failed to send in time
        try:
            self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=self._stderr)
        except OSError as e:
            self._stderr.close()
            raise AotError(f"cannot run {argv[0]}: {e.strerror}") from None
        self.stdin: IO[bytes] = self._proc.stdin
        self.stdout: IO[bytes] = self._proc.stdout

    def _wait(self) -> int | None:
        try:
            return self._proc.wait(timeout=EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            return self._proc.wait()

    def lost(self) -> str:
        code = self._wait()
        self._stderr.seek(0)
        err = self._stderr.read().decode("utf-8", "replace")
        if self.expired:
            return f"the harness sent no {self.expired} and was killed"
        return f"the harness {_exit_reason(code)}: {_last_lines(err)}"

    def expire(self, what: str) -> None:
        self.expired = what
        self._proc.kill()

    def kill(self) -> None:
        self._proc.kill()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.stdin.close()
        self._wait()
        self.stdout.close()
        self._stderr.close()


class _RemoteProcess:
    """The harness on an SSH board (aot.deploy.ssh.RemoteProcess)."""

    def __init__(self, proc):
        self._proc = proc
        self.stdin, self.stdout = proc.stdin, proc.stdout

    def lost(self) -> str:
        try:
            err = self._proc.stderr.read().decode("utf-8", "replace")
        except (OSError, EOFError):
            err = ""
        try:
            code = self._proc.close()
        except (AotError, OSError, EOFError):
            code = None
        what = "was killed by a signal" if code == -1 else _exit_reason(code)
        return f"the harness {what} on the board: {_last_lines(err)}"

    def expire(self, what: str) -> None:    # the channel's own timeout bounds every read
        pass

    def kill(self) -> None:
        with contextlib.suppress(AotError, OSError, EOFError):
            self._proc.kill()

    def close(self) -> None:
        with contextlib.suppress(AotError, OSError, EOFError):
            self._proc.close()


@contextlib.contextmanager
def _deadline(process, seconds: float, what: str):
    """Kill the harness unless the block ends within `seconds`: a blocked
    read then sees the end of the stream, and lost() says what was late."""
    timer = threading.Timer(seconds, process.expire, [f"{what} within {seconds:g} s"])
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


class Session:
    """One package's harness in serve mode: requests and answers over its
    pipes, each within a deadline (the I/O fuzzer drives one directly)."""

    def __init__(self, process, meta: dict, package_id: str | None = None):
        self.process = process
        self.meta = meta
        try:
            with _deadline(process, HELLO_TIMEOUT_S, "hello"):
                self.client = ServeClient(process.stdin, process.stdout, meta, process.lost,
                                          package_id)
        except BaseException:
            process.close()
            raise

    def request(self, inputs, warmup: int, runs: int) -> RunResult:
        with _deadline(self.process, REQUEST_TIMEOUT_S, "answer"):
            return self.client.request(inputs, warmup, runs)

    def close(self) -> None:
        if self.client.alive:
            self.client.quit()
        self.process.close()

    def abandon(self) -> None:
        """Stop a harness caught mid-request (Ctrl-C): its stream is out of step."""
        self.client.alive = False
        self.process.kill()
        self.process.close()


class Device:
    """A board with a serve session per package used (see the module doc)."""

    def __init__(self, board: Board):
        if board.transport == "qemu-system":
            raise AotError(f"board '{board.name}' is bare metal (qemu-system): serve mode "
                           "needs a hosted board (host, qemu-user or ssh); run packages there "
                           "one at a time with aot run / aot bench")
        if board.transport not in ("local", "qemu-user", "ssh", "serial"):
            raise AotError(f"board '{board.name}': serve mode does not support transport "
                           f"'{board.transport}'")
        self.board = board
        self._sessions: dict[Path, Session] = {}
        self._stack = contextlib.ExitStack()
        self._ssh = None
        self._uploads = 0

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def run(self, pkg: str | Path, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]
            ) -> dict[str, np.ndarray]:
        """Run the package once on the board: {output name: array}. `inputs`
        is {input name: array} (ONNX Runtime's habit) or a list in the
        package's input order; a wrong name or shape is an AotError that
        lists the package's inputs. Float data for a quantized input is
        quantized (a QuantizedInput warning says so)."""
        result = self.request(pkg, inputs)
        warn_notes(result.notes)
        session = self._sessions[Path(pkg).resolve()]
        return dict(zip((o["name"] for o in session.meta["outputs"]), result.outputs))

    def request(self, pkg: str | Path, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray],
                warmup: int = 0, runs: int = 1) -> RunResult:
        """`warmup` untimed runs, then `runs` timed ones: the outputs of the
        last, each run's time (and a --profile package's kernel times); float
        data for a quantized input is quantized, the result's notes say so."""
        key = Path(pkg).resolve()
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = self._start(key)
        inputs, notes = quantize_floats(session.meta, inputs)
        try:
            result = session.request(inputs, warmup, runs)
            return replace(result, notes=tuple(notes)) if notes else result
        except AotError:
            if not session.client.alive:    # a crash or protocol error ends the session
                del self._sessions[key]
                session.close()
            raise
        except BaseException:
            del self._sessions[key]
            session.abandon()
            raise

    def release(self, pkg: str | Path) -> None:
        """End the package's session, if it has one (its harness exits; the
        connection stays): `aot tune` runs a package per batch."""
        session = self._sessions.pop(Path(pkg).resolve(), None)
        if session is not None:
            session.close()

    def close(self) -> None:
        """End every session (the harnesses exit), then the connection."""
        try:
            for session in self._sessions.values():
                session.close()
        finally:
            self._sessions.clear()
            self._stack.close()

    # ------------------------------------------------------------- starting

    def _start(self, pkg: Path) -> Session:
        from aot.packaging.metadata import read_metadata

        meta = read_metadata(pkg)
        if meta.get("board") != self.board.name:
            raise AotError(f"{pkg} was built for board '{meta.get('board')}', not "
                           f"'{self.board.name}'")
        exe = pkg / "bench" / "bench"
        if not exe.is_file():
            raise AotError(f"{pkg}: the harness bench/bench is missing (package for this board)")
        if self.board.transport == "serial":
            from aot.deploy.serial_link import SerialProcess, identity_checked, open_link

            link, want = open_link(pkg, self.board, meta)
            with identity_checked(link, self.board, want):
                return Session(SerialProcess(link), meta, want)
        if self.board.transport == "ssh":
            return Session(self._start_remote(exe), meta)
        prefix: list[str] = []
        if self.board.transport == "local":
            from aot.deploy.host import check_cpu
            check_cpu(self.board)
        if self.board.transport == "qemu-user":
            from aot.deploy.qemu_user import qemu_command
            prefix = qemu_command(self.board)
        return Session(_LocalProcess([*prefix, str(exe), "--serve"]), meta)

    def _start_remote(self, exe: Path) -> _RemoteProcess:
        from aot.support import progress
        from aot.deploy.ssh import SshSession, reach

        if self._ssh is None:
            params = self._stack.enter_context(reach(self.board))
            self._ssh = self._stack.enter_context(SshSession(params))
        self._uploads += 1
        name = f"bench{self._uploads}"
        with progress.step(f"upload the harness to {self.board.name}"):
            self._ssh.put(exe, name, 0o755)
        return _RemoteProcess(self._ssh.start([f"./{name}", "--serve"], harness=True))


def connect(board: str | Board) -> Device:
    """A Device for `board` (a name or a Board); use it as a context manager."""
    return Device(get_board(board) if isinstance(board, str) else board)

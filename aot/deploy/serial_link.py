"""The serial transport: the harness's serve protocol (serve.py) over a
microcontroller's UART, reached through a serial port on this machine.

The device already runs the package's harness: `aot flash` wrote it (a
real board), or started QEMU with the board's UART on a new pty (an
emulated one, qemu_serial.py). A session opens the port, sends b"AOTS" and
reads the harness's hello, which names the package it was built from
(identity.py): a device running another package is refused before any
request. Then requests and replies as over a process's pipes.

Nothing waits for ever: the first byte of a reply may take the board's
options.timeout_s (the runs themselves), every later byte of a frame at
most GAP_S after the one before, and the hello SYNC_S after each sync. A
silent line, a closed pty or a device unplugged mid-frame is one AotError
naming the port.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np

from aot.deploy.host import RunResult
from aot.deploy.serve import HELLO, SYNC, ServeClient, WrongPackage
from aot.errors import AotError
from aot.targets import Board, option_number

BAUD = 115200             # runtime_c/uart/*: 8N1 at 115200 baud
DEFAULT_TIMEOUT_S = 300   # the runs of one request, at most (options.timeout_s)
GAP_S = 2.0               # silence inside a frame that means the line is cut
SYNC_S = 1.5              # a hello answers a sync within this, or the sync is sent again
SYNCS = 3                 # syncs sent before the device is given up


class SerialLink:
    """A serial port as the binary streams ServeClient reads and writes.

    read returns b"" when the line stays silent past its time-out (the
    client then asks lost() why); a port that fails (a pty whose other end
    closed, a USB adapter unplugged) is an AotError naming the port."""

    def __init__(self, port: str, reply_timeout_s: float):
        import serial      # pyserial: loaded only for serial boards

        self.port = port
        self._reply_timeout = reply_timeout_s
        self._awaiting = False      # a request was sent: its reply may take the runs' time
        self._pending = b""         # bytes read ahead by sync()
        self._silent = 0.0          # the time-out that ended the last read, if one did
        self._error = serial.SerialException
        try:
            self._port = serial.Serial(port, BAUD, timeout=GAP_S, write_timeout=GAP_S)
        except (serial.SerialException, OSError, ValueError) as e:
            raise AotError(f"serial port {port}: cannot open it ({_reason(e)})") from None

    # the streams' side --------------------------------------------------------

    def read(self, n: int) -> bytes:
        if self._pending:
            data, self._pending = self._pending[:n], self._pending[n:]
            return data
        timeout = self._reply_timeout if self._awaiting else GAP_S
        data = self._read_within(n, timeout)
        if data:
            self._awaiting = False
        else:
            self._silent = timeout
        return data

    def write(self, data: bytes) -> int:
        try:
            written = self._port.write(data)
        except (self._error, OSError) as e:
            raise AotError(f"serial port {self.port}: the line broke while sending "
                           f"({_reason(e)})") from None
        self._awaiting = True
        return written

    def flush(self) -> None:
        try:
            self._port.flush()
        except (self._error, OSError) as e:
            raise AotError(f"serial port {self.port}: the line broke while sending "
                           f"({_reason(e)})") from None

    def _read_within(self, n: int, timeout: float) -> bytes:
        """Up to n bytes: the first within `timeout`, then what has arrived
        (pyserial's read(n) would wait the whole time-out for all n)."""
        try:
            self._port.timeout = timeout
            first = self._port.read(1)
            if not first or n == 1:
                return first
            return first + self._port.read(min(n - 1, self._port.in_waiting))
        except (self._error, OSError) as e:
            raise AotError(f"serial port {self.port}: the line broke ({_reason(e)}): the "
                           "device is gone or its port closed") from None

    # the session's side -------------------------------------------------------

    def sync(self) -> None:
        """Ask for the hello until its magic comes (bytes a cut session left
        on the line before it are skipped); the magic is kept for the client."""
        self._port.reset_input_buffer()
        for _ in range(SYNCS):
            self.write(SYNC)
            self.flush()
            window = b""
            deadline = time.monotonic() + SYNC_S
            while time.monotonic() < deadline:
                window = (window + self._read_within(1, max(deadline - time.monotonic(), 0.01))
                          )[-len(HELLO):]
                if window == HELLO:
                    self._pending, self._awaiting = HELLO, False
                    return
        raise AotError(f"serial port {self.port}: no aot harness answered within "
                       f"{SYNCS * SYNC_S:g} s (is the package flashed and the board running? "
                       "is this its port?)")

    def lost(self) -> str:
        if self._silent:
            return (f"serial port {self.port} went silent for {self._silent:g} s in the middle "
                    "of a frame (the device stopped or the line was cut)")
        return f"serial port {self.port}: the line ended"

    def close(self) -> None:
        try:
            self._port.close()
        except (self._error, OSError):
            pass


def _reason(e: BaseException) -> str:
    """An exception's message on one line; pyserial's guess for a read of
    nothing from a ready port (a pty whose other end closed, an unplugged
    adapter) said plainly."""
    text = " ".join(str(e).split()) or type(e).__name__
    if "returned no data" in text:
        return "its other end closed"
    return text[:200]


class SerialProcess:
    """The harness on the device as device.Session drives a process: its
    streams are the link; the link's time-outs bound every read."""

    def __init__(self, link: SerialLink):
        self.link = link
        self.stdin = self.stdout = link

    def lost(self) -> str:
        return self.link.lost()

    def expire(self, what: str) -> None:
        pass

    def kill(self) -> None:
        pass

    def close(self) -> None:
        self.link.close()


def serial_port(board: Board) -> str:
    """The port a serial board is reached through (--port, else its file's
    serial_port), refused when aot has no UART driver for the board."""
    if not board.options.get("uart"):
        raise AotError(f"board '{board.name}': aot has no driver for its UART yet, so it cannot "
                       "run, verify or bench over a serial port (aot flash writes its image)")
    port = board.options.get("serial_port")
    if not port:
        raise AotError(f"board '{board.name}': no serial port: give --port (e.g. /dev/ttyACM0, "
                       "or the pty aot flash prints for an emulated board)")
    return str(port)


def as_serial(board: Board, port: str | None) -> Board:
    """The board reached through serial port `port` (None: its own
    serial_port): a real microcontroller, or an emulated board whose UART
    aot flash put on a pty."""
    if board.transport not in ("serial", "qemu-system"):
        raise AotError(f"board '{board.name}' is reached by {board.transport}: --port "
                       f"{port} names a serial port, for microcontroller boards")
    options = dict(board.options)
    if port is not None:
        options["serial_port"] = port
    out = replace(board, transport="serial", options=options)
    serial_port(out)
    return out


def open_link(pkg: Path, board: Board, meta: dict) -> tuple[SerialLink, str]:
    """`board`'s serial port, opened and synced (the hello's magic read), and
    the identity of package `pkg` its hello must carry."""
    from aot.packaging.identity import package_id

    timeout = option_number(board, "timeout_s", DEFAULT_TIMEOUT_S, float, 0.001, 86400)
    want = package_id(pkg, meta["name"])
    link = SerialLink(serial_port(board), timeout)
    try:
        link.sync()
    except BaseException:
        link.close()
        raise
    return link, want


@contextlib.contextmanager
def identity_checked(link: SerialLink, board: Board, want: str):
    """A hello from another package's harness (WrongPackage) as the error
    a user reads."""
    try:
        yield
    except WrongPackage as e:
        link.close()
        runs = f"package {e.got}" if e.got else "a harness that names no package"
        raise AotError(f"serial port {link.port}: the device runs {runs}, not this one "
                       f"({want}): flash this package onto it first (aot package MODEL "
                       f"--board {board.name}, then aot flash PACKAGE)") from None


def run_serial(pkg: Path, board: Board, inputs: Sequence[np.ndarray], warmup: int,
               runs: int) -> RunResult:
    """One request on the device (the serial transport of run_package)."""
    from aot.deploy.host import prepare_run

    meta, inputs, _ = prepare_run(pkg, inputs)
    link, want = open_link(pkg, board, meta)
    try:
        with identity_checked(link, board, want):
            client = ServeClient(link, link, meta, link.lost, want)
        try:
            return client.request(inputs, warmup, runs)
        finally:
            client.quit()
    finally:
        link.close()

"""`aot flash` on an emulated microcontroller board: QEMU as the board.

A real board keeps the harness `aot flash` wrote and serves on its UART
until it is reset; here QEMU plays that board. It runs the package's
harness (with no command line, so the harness serves on its UART, as on a
board reset on its own) with the board's first UART on a new pty, which
it names on its output; `aot flash` prints that pty and QEMU runs until it is
stopped. `aot run|verify|bench --board B --port PTY` then talk to it as to
a board on a USB serial adapter (serial_link.py).

-icount shift=0 keeps the emulated clock counting instructions (1 ns
each), so the device's SysTick or mcycle counts are reproducible, and no
real timings. Semihosting stays on: what the harness prints on stderr and
its exit code (after a fault) reach this machine's terminal.
"""
from __future__ import annotations

import re
import selectors
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from aot.deploy.qemu_system import qemu_command
from aot.errors import AotError
from aot.targets import Board

PTY_LINE = re.compile(rb"char device redirected to (\S+) \(label serial0\)")
START_S = 10        # QEMU names its pty within this, or is stopped


@dataclass(frozen=True)
class QemuBoard:
    """QEMU running a package's harness, its UART on `port`."""
    process: subprocess.Popen
    port: str


def serial_command(board: Board) -> list[str]:
    """The emulator's command line: the harness with its UART on a new pty."""
    if not board.options.get("uart"):
        raise AotError(f"board '{board.name}': aot has no driver for its UART, so it cannot "
                       "serve on a serial port")
    cmd = qemu_command(board, ())
    at = cmd.index("-serial")
    cmd[at + 1] = "pty"
    return cmd


def start_qemu_board(pkg: Path, board: Board) -> QemuBoard:
    """Start QEMU on the package's harness; returns once QEMU named its pty."""
    exe = pkg / "bench" / "bench"
    if not exe.is_file():
        raise AotError(f"{pkg}: the harness bench/bench is missing (package the model with "
                       f"--board {board.name})")
    cmd = serial_command(board)
    try:
        proc = subprocess.Popen(cmd, cwd=exe.parent, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as e:
        raise AotError(f"cannot run {cmd[0]}: {e.strerror}") from None
    said = b""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + START_S
        while (found := PTY_LINE.search(said)) is None:
            left = deadline - time.monotonic()
            chunk = proc.stdout.read1(4096) if left > 0 and sel.select(left) else b""
            if not chunk:
                proc.kill()
                proc.wait()
                last = said.decode("utf-8", "replace").strip().splitlines()
                raise AotError(f"{cmd[0]} named no pty within {START_S} s"
                               + (f": {last[-1]}" if last else ""))
            said += chunk
    threading.Thread(target=_relay, args=(proc.stdout, said[found.end():]), daemon=True).start()
    return QemuBoard(proc, found.group(1).decode())


def _relay(stream, first: bytes) -> None:
    """QEMU's output (the harness's messages) on our stderr, so its pipe never fills."""
    out = sys.stderr
    out.write(first.decode("utf-8", "replace"))
    for line in iter(stream.readline, b""):
        out.write(line.decode("utf-8", "replace"))
        out.flush()

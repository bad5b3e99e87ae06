"""The qemu-user transport: run a package's static harness for another ISA
on this machine under QEMU's user-mode emulator.

The board's [options] table names the emulator and the CPU it models:

    [options]
    qemu = "qemu-aarch64"     # the qemu-user binary for the target's ISA
    cpu = "cortex-a72"        # passed as -cpu: the core whose ISA the code may use

The harness is the same static binary a real board runs (no dynamic loader
needed), so inputs and outputs go through raw files in a temporary directory
exactly as on the host. The outputs are the board's; the timings are the
emulator's (JIT-translated code on an x86 host) and say nothing about the
board's speed: `aot bench` says so for boards marked `emulated`.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from aot.deploy.host import RunResult, harness_args, parse_report, prepare_run
from aot.errors import AotError
from aot.targets import Board

TIMEOUT_S = 600
REQUIRED_OPTIONS = ("qemu", "cpu")


def qemu_command(board: Board) -> list[str]:
    """`qemu-<arch> -cpu <cpu>` from the board's options, checked installed."""
    missing = [k for k in REQUIRED_OPTIONS if not board.options.get(k)]
    if missing:
        raise AotError(f"board '{board.name}': transport qemu-user needs "
                       f"{', '.join(missing)} in its [options] table")
    qemu = str(board.options["qemu"])
    if shutil.which(qemu) is None:
        raise AotError(f"board '{board.name}': '{qemu}' is not installed "
                       "(Debian package qemu-user)")
    return [qemu, "-cpu", str(board.options["cpu"])]


def _failure(returncode: int, stderr: str) -> str:
    lines = stderr.strip().splitlines()
    last = lines[-1] if lines else "no message"
    if returncode < 0 or returncode >= 128:   # qemu relays the guest's fatal signal
        return f"the harness crashed under qemu-user (exit {returncode}): {last}"
    return f"the harness failed under qemu-user (exit {returncode}): {last}"


def run_qemu_user(pkg: Path, board: Board, inputs: Sequence[np.ndarray], warmup: int,
                  runs: int) -> RunResult:
    meta, inputs, exe = prepare_run(pkg, inputs)
    cmd = qemu_command(board)
    with tempfile.TemporaryDirectory(prefix="aot-qemu-") as tmp:
        args, out_paths = harness_args(meta, Path(tmp), inputs, warmup, runs)
        try:
            r = subprocess.run([*cmd, str(exe.resolve()), *args], capture_output=True,
                               text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise AotError(f"the harness timed out under qemu-user after {TIMEOUT_S} s") from None
        except OSError as e:
            raise AotError(f"cannot run {cmd[0]}: {e.strerror}") from None
        if r.returncode != 0:
            raise AotError(_failure(r.returncode, r.stderr))
        return parse_report(r.stdout, meta, [p.read_bytes() for p in out_paths])

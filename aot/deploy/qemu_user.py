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

from pathlib import Path
from typing import Sequence

import numpy as np

from aot import tools
from aot.deploy.host import RunResult, run_local
from aot.errors import AotError
from aot.targets import Board

REQUIRED_OPTIONS = ("qemu", "cpu")


def qemu_command(board: Board) -> list[str]:
    """`qemu-<arch> -cpu <cpu>` from the board's options, checked installed."""
    missing = [k for k in REQUIRED_OPTIONS if not board.options.get(k)]
    if missing:
        raise AotError(f"board '{board.name}': transport qemu-user needs "
                       f"{', '.join(missing)} in its [options] table")
    qemu = tools.require(str(board.options["qemu"]), f"board '{board.name}'")
    return [qemu, "-cpu", str(board.options["cpu"])]


def run_qemu_user(pkg: Path, board: Board, inputs: Sequence[np.ndarray], warmup: int,
                  runs: int) -> RunResult:
    return run_local(pkg, inputs, warmup, runs, emulator=qemu_command(board),
                     where=" under qemu-user")

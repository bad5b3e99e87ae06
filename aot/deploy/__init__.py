"""Running a package on a board: one transport per board kind.

`run_package(pkg, board, inputs, warmup, runs)` feeds the package's harness
(bench/bench) raw input files, and reads back the outputs and the one JSON
line of timings it prints. The board's `transport` field picks the function
in TRANSPORTS; each is called as transport(pkg, board, inputs, warmup, runs)
and reads what it needs (emulator, CPU, machine, host) from board.options.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from aot.deploy.host import RunResult, check_cpu, quantize_floats, run_local
from aot.deploy.qemu_user import run_qemu_user
from aot.deploy.qemu_system import run_qemu_system
from aot.errors import AotError
from aot.targets import Board

Transport = Callable[[Path, Board, Sequence[np.ndarray], int, int], RunResult]


def _local(pkg: Path, board: Board, inputs: Sequence[np.ndarray], warmup: int,
           runs: int) -> RunResult:
    check_cpu(board)
    return run_local(pkg, inputs, warmup, runs)


def _ssh(pkg: Path, board: Board, inputs: Sequence[np.ndarray], warmup: int,
         runs: int) -> RunResult:
    from aot.deploy.ssh import run_ssh    # paramiko loads only for SSH boards

    return run_ssh(pkg, board, inputs, warmup, runs)


def check_runnable(board: Board) -> None:
    """Refuse a real microcontroller (transport `serial`) aot has no UART
    driver for, or that has no port, before any work."""
    if board.transport == "serial":
        from aot.deploy.serial_link import serial_port

        serial_port(board)


def _serial(pkg: Path, board: Board, inputs: Sequence[np.ndarray], warmup: int,
            runs: int) -> RunResult:
    from aot.deploy.serial_link import run_serial     # pyserial loads only for serial boards

    return run_serial(pkg, board, inputs, warmup, runs)


TRANSPORTS: dict[str, Transport] = {"local": _local, "qemu-user": run_qemu_user,
                                    "qemu-system": run_qemu_system, "ssh": _ssh,
                                    "serial": _serial}


def check_runs_on(pkg: Path, meta: dict, board: Board) -> None:
    """Refuse a package built for another board. One exception: a qemu-user
    board runs a package built for a real board of its own target triple
    (an rpi5 package under qemu-aarch64, with the package's CPU as -cpu), to
    count that board's instructions on this machine."""
    built_for = meta.get("board")
    if built_for == board.name:
        return
    target = meta.get("target")
    if (board.transport == "qemu-user" and isinstance(target, dict)
            and target.get("triple") == board.target.triple):
        return
    raise AotError(f"{pkg} was built for board '{built_for}', not '{board.name}'")


def run_package(pkg: Path, board: Board, inputs: Sequence[np.ndarray], warmup: int = 0,
                runs: int = 1) -> RunResult:
    """Run the package's harness on the board; float data for a quantized
    input is quantized first, the result's notes say so (quantize_floats)."""
    try:
        transport = TRANSPORTS[board.transport]
    except KeyError:
        raise AotError(f"board '{board.name}': transport '{board.transport}' is not supported "
                       "yet") from None
    from aot.packaging.metadata import read_metadata

    inputs, notes = quantize_floats(read_metadata(pkg), inputs)
    result = transport(Path(pkg), board, inputs, warmup, runs)
    return replace(result, notes=tuple(notes)) if notes else result


__all__ = ["RunResult", "run_package", "TRANSPORTS", "check_runs_on", "check_runnable"]

"""Running a package on a board: one transport per board kind.

`run_package(pkg, board, inputs, warmup, runs)` feeds the package's harness
(bench/bench) raw input files, and reads back the outputs and the one JSON
line of timings it prints. Boards reached another way (qemu, ssh) add a
transport to TRANSPORTS.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from aot.deploy.host import RunResult, run_local
from aot.errors import AotError
from aot.targets import Board

Transport = Callable[[Path, Sequence[np.ndarray], int, int], RunResult]

TRANSPORTS: dict[str, Transport] = {"local": run_local}


def run_package(pkg: Path, board: Board, inputs: Sequence[np.ndarray], warmup: int = 0,
                runs: int = 1) -> RunResult:
    try:
        transport = TRANSPORTS[board.transport]
    except KeyError:
        raise AotError(f"board '{board.name}': transport '{board.transport}' is not supported "
                       "yet") from None
    return transport(Path(pkg), inputs, warmup, runs)


__all__ = ["RunResult", "run_package", "TRANSPORTS"]

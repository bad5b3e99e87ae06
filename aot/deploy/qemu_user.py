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
board's speed: `aot bench` says so for boards marked `emulated`. What does
say something is counted exactly: the instructions of every run and, for a
--profile package, of every kernel (aot/deploy/insn_count.py).

A package built for another board of the same target triple (a Pi 5's
Cortex-A76 code, with its dot-product instructions) runs with its own
target's CPU as -cpu, so the emulator accepts what the code uses; where
that CPU is the board's own (RISC-V's generic-rv64), the board's -cpu
stands, which also says the vector length: a RISC-V package whose vectors
need a longer VLEN (Zvl256b) than the board's target promises is refused,
as its vectors would be cut short.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from aot.support import tools
from aot.deploy.host import RunResult, run_local
from aot.errors import AotError
from aot.targets import Board, isa_features_of

REQUIRED_OPTIONS = ("qemu", "cpu")


def qemu_command(board: Board, cpu: str | None = None) -> list[str]:
    """`qemu-<arch> -cpu <cpu>` from the board's options (or `cpu`), checked
    installed."""
    missing = [k for k in REQUIRED_OPTIONS if not board.options.get(k)]
    if missing:
        raise AotError(f"board '{board.name}': transport qemu-user needs "
                       f"{', '.join(missing)} in its [options] table")
    qemu = tools.require(str(board.options["qemu"]), f"board '{board.name}'")
    return [qemu, "-cpu", cpu or str(board.options["cpu"])]


def package_cpu(meta: dict, board: Board) -> str | None:
    """The CPU of the package's own target when it was built for another
    board of this board's triple (an rpi5 package: cortex-a76), else None."""
    target = meta.get("target")
    if not isinstance(target, dict) or target.get("name") == board.target.name:
        return None
    cpu = target.get("cpu")
    if target.get("triple") != board.target.triple or not isinstance(cpu, str):
        return None
    needs, has = vlen(str(target.get("features", ""))), vlen(board.target.features)
    if needs > has:
        raise AotError(f"the package was built for target '{target.get('name')}', whose vectors "
                       f"need VLEN >= {needs}; board '{board.name}' ({board.target.name}) "
                       f"promises {has}")
    return None if cpu == board.target.cpu else cpu


def vlen(features: str) -> int:
    """The RISC-V vector length (bits) an LLVM feature string promises: its
    largest Zvl<N>b, 128 with V (which implies Zvl128b), else 0."""
    isa = isa_features_of("riscv64", "", features)
    zvl = [int(f[3:-1]) for f in isa if f.startswith("zvl") and f[3:-1].isdigit()]
    return max([*zvl, 128 if "v" in isa else 0])


def run_qemu_user(pkg: Path, board: Board, inputs: Sequence[np.ndarray], warmup: int,
                  runs: int) -> RunResult:
    from aot.deploy import insn_count      # not at import: `python -m` runs it
    from aot.packaging.metadata import read_metadata

    meta = read_metadata(pkg)
    qemu = qemu_command(board, package_cpu(meta, board))
    exe = pkg / "bench" / "bench"
    with tempfile.TemporaryDirectory(prefix="aot-insn-count-") as tmp:
        log = Path(tmp) / "plugin.log"
        result = run_local(pkg, inputs, warmup, runs, where=" under qemu-user",
                           emulator=[*qemu, *insn_count.qemu_args(exe, log)])
        return insn_count.with_counts(result, log, meta, warmup, runs)

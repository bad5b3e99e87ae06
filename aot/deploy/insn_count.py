"""Instructions counted on emulated Linux boards (qemu-user).

An emulator's clock says nothing about a board's speed; the number of
instructions the board's own code executes says much more (a proxy for time
on an out-of-order core, but an exact and deterministic one). QEMU's TCG
plugin `runtime_c/qemu/insn_count.c` counts them and logs the running count
at every system call. The harness reads the clock before and after every
run, and around every kernel in a --profile build; under qemu-user 7.2
(no vDSO) each read is a clock_gettime system call, so the differences
between those marks are the instructions of each run and of each kernel
(the clock call's own few dozen included).

The plugin is built for this machine into aot's cache by `make setup`
(`python -m aot.deploy.insn_count`), or on first use.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from aot import tools
from aot.errors import AotError
from aot.resources import data_dir

# clock_gettime's system call numbers, by the qemu-user binary's ISA:
# aarch64 and riscv64 share the generic table; 32-bit Arm's glibc calls
# clock_gettime64 (403) and falls back to clock_gettime (263).
CLOCK_SYSCALLS = {"qemu-aarch64": (113,), "qemu-riscv64": (113,), "qemu-arm": (403, 263)}
COMPILER = "gcc"


def source() -> Path:
    return data_dir("runtime_c") / "qemu" / "insn_count.c"


def plugin_path() -> Path:
    """Where the built plugin lives: in the cache, named for its source."""
    from aot.deploy.vm_image import cache_root

    digest = hashlib.sha256(source().read_bytes()).hexdigest()[:16]
    return cache_root() / "qemu-plugins" / f"insn_count-{digest}.so"


def build_plugin() -> Path:
    """The plugin, built first if it is not in the cache yet."""
    out = plugin_path()
    if out.is_file():
        return out
    cc = tools.require(COMPILER, "the qemu-user instruction counter")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".insn_count-", suffix=".so", dir=out.parent)
    os.close(fd)
    try:
        r = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-fvisibility=hidden", "-o", tmp,
                            str(source())], capture_output=True, text=True)
        if r.returncode != 0:
            raise AotError(f"cannot build the qemu-user instruction counter {source()}: "
                           f"{(r.stderr.strip().splitlines() or ['no message'])[-1]}")
        os.replace(tmp, out)     # whole or not at all: two builds may race
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def clock_syscalls(qemu: str) -> tuple[int, ...]:
    """clock_gettime's numbers for the ISA `qemu` (a qemu-user binary) emulates."""
    name = Path(qemu).name
    if name not in CLOCK_SYSCALLS:
        raise AotError(f"no instruction count for {name}: aot knows the clock system calls of "
                       f"{', '.join(sorted(CLOCK_SYSCALLS))}")
    return CLOCK_SYSCALLS[name]


def qemu_args(log: Path) -> list[str]:
    """qemu-user options loading the plugin, its log written to `log`."""
    return ["-plugin", str(build_plugin()), "-d", "plugin", "-D", str(log)]


@dataclass(frozen=True)
class Counts:
    """Instructions per timed run, and per kernel of each profiled run."""
    runs: list[int]
    kernels: list[list[int]] | None = None


def clock_marks(log: str, syscalls: Sequence[int]) -> list[int]:
    """The running count at every clock read in the plugin's log."""
    marks = []
    for line in log.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "sys" and int(parts[1]) in syscalls:
            marks.append(int(parts[2]))
    return marks


def split_marks(marks: Sequence[int], warmup: int, runs: int, kernels: int | None) -> Counts:
    """Per-run (and with `kernels`, a --profile harness's kernel count,
    per-kernel) instructions from the marks of warmup + runs runs: each run
    reads the clock before and after itself and, profiled, before and after
    each of its kernels."""
    per_run = 2 + 2 * (kernels or 0)
    if len(marks) != per_run * (warmup + runs):
        raise AotError(f"the instruction counter saw {len(marks)} clock reads, expected "
                       f"{per_run * (warmup + runs)} ({warmup + runs} runs of {per_run})")
    timed = [marks[r * per_run:(r + 1) * per_run] for r in range(warmup, warmup + runs)]
    run_counts = [m[-1] - m[0] for m in timed]
    if kernels is None:
        return Counts(run_counts)
    return Counts(run_counts, [[m[1 + 2 * k + 1] - m[1 + 2 * k] for k in range(kernels)]
                               for m in timed])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m aot.deploy.insn_count",
        description="build the qemu-user instruction counter plugin into the cache")
    parser.parse_args(argv)
    try:
        print(f"qemu-user instruction counter: {build_plugin()}")
    except AotError as e:
        print(f"aot: {e}")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

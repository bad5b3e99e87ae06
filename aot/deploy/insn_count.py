"""Instructions counted on emulated boards (qemu-user and qemu-system).

An emulator's clock says nothing about a board's speed; the number of
instructions the board's own code executes says much more (a proxy for time
on an out-of-order core, but an exact and deterministic one; on a Cortex-M4,
a lower bound on its cycles). QEMU's TCG plugin `runtime_c/qemu/insn_count.c`
counts them and logs the running count whenever one address runs: aot marks
the harness's clock function, `aot_platform_timer_ns`, found in the harness
ELF. The harness reads the clock before and after every run, and around
every kernel in a --profile build, so the differences between those marks
are the instructions of each run and of each kernel (the clock function's
own first block included, the same few instructions every time).

The plugin is built for this machine into aot's cache by `make setup`
(`python -m aot.deploy.insn_count`), or on first use.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from aot.support import tools
from aot.deploy.host import RunResult, profiled_kernels
from aot.errors import AotError
from aot.support.resources import data_dir

# The harness's clock: every run and every profiled kernel reads it twice.
MARK_SYMBOL = "aot_platform_timer_ns"
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
    cc = tools.require(COMPILER, "the QEMU instruction counter")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".insn_count-", suffix=".so", dir=out.parent)
    os.close(fd)
    try:
        r = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-fvisibility=hidden", "-o", tmp,
                            str(source())], capture_output=True, text=True)
        if r.returncode != 0:
            raise AotError(f"cannot build the QEMU instruction counter {source()}: "
                           f"{(r.stderr.strip().splitlines() or ['no message'])[-1]}")
        os.replace(tmp, out)     # whole or not at all: two builds may race
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def mark_address(exe: Path) -> int:
    """Where the harness's clock function starts (a Thumb function's symbol
    has bit 0 set; the code is at the even address)."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    try:
        with open(exe, "rb") as f:
            elf = ELFFile(f)
            for section in elf.iter_sections():
                if isinstance(section, SymbolTableSection):
                    for sym in section.get_symbol_by_name(MARK_SYMBOL) or ():
                        if sym["st_info"]["type"] == "STT_FUNC" and sym["st_value"]:
                            return int(sym["st_value"]) & ~1
    except (OSError, ELFError) as e:
        raise AotError(f"cannot read the harness {exe}: {e}") from None
    raise AotError(f"the harness {exe} has no {MARK_SYMBOL} symbol to count instructions at "
                   "(a stripped harness?)")


def qemu_args(exe: Path, log: Path) -> list[str]:
    """QEMU options loading the plugin, marking `exe`'s clock, its log
    written to `log` (a comma in an option value is written twice)."""
    plugin = str(build_plugin()).replace(",", ",,")
    return ["-plugin", f"{plugin},mark={mark_address(exe):#x}", "-d", "plugin",
            "-D", str(log)]


@dataclass(frozen=True)
class Counts:
    """Instructions per timed run, and per kernel of each profiled run."""
    runs: list[int]
    kernels: list[list[int]] | None = None


def clock_marks(log: str) -> list[int]:
    """The running count at every clock read in the plugin's log."""
    marks = []
    for line in log.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "mark" and parts[1].isdigit():
            marks.append(int(parts[1]))
    return marks


def read_counts(log: Path, warmup: int, runs: int, kernels: int | None) -> Counts:
    """The counts of a harness run from the plugin's log file."""
    try:
        text = log.read_text(errors="replace")
    except OSError as e:
        raise AotError(f"the instruction counter wrote no log ({e.strerror or e})") from None
    return split_marks(clock_marks(text), warmup, runs, kernels)


def with_counts(result: RunResult, log: Path, meta: dict, warmup: int, runs: int) -> RunResult:
    """A transport's result with the counts of the run that wrote `log`."""
    counts = read_counts(log, warmup, runs, profiled_kernels(meta))
    return dataclasses.replace(result, instructions=counts.runs,
                               profile_instructions=counts.kernels)


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
        description="build the QEMU instruction counter plugin into the cache")
    parser.parse_args(argv)
    try:
        print(f"QEMU instruction counter: {build_plugin()}")
    except AotError as e:
        print(f"aot: {e}")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

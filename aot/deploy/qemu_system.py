"""The qemu-system transport: run a package's bare-metal harness on an
emulated microcontroller board (qemu-system-arm -M mps2-an386, ...).

The board's [options] table names the emulator and the machine:

    [options]
    qemu = "qemu-system-arm"   # the system emulator
    machine = "mps2-an386"     # passed as -M
    bios = "none"              # passed as -bios, when given (RISC-V virt: no OpenSBI)
    timeout_s = 300            # the whole run, boot to exit (default 300)

The harness (bench/bench, an ELF linked with the board's start-up code and
linker script) takes the same arguments as on a host. It gets them through
semihosting (SYS_GET_CMDLINE) and reads and writes its raw files on this
machine through newlib's semihosting file calls; under semihosting QEMU
exits with main's return code. Files are named relative to a temporary
directory QEMU runs in, so no host path reaches the guest.

`-icount shift=0` makes the emulated clock count instructions (1 ns each),
so the SysTick timings are reproducible, and meaningless as real timings.
The instructions themselves are counted exactly by aot's QEMU plugin
(aot/deploy/insn_count.py): per run and, for a --profile package, per
kernel. A Cortex-M4 or M7 needs at least one cycle per instruction.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from aot.support import tools
from aot.deploy.host import (RunResult, failure, harness_args, parse_report, prepare_run,
                             read_outputs)
from aot.errors import AotError
from aot.targets import Board, option_number

DEFAULT_TIMEOUT_S = 300
# Exit codes of the start-up code (runtime_c/cortex_m/startup.c, runtime_c/riscv/startup.c).
# A RISC-V trap (runtime_c/riscv/startup.c's handler) exits with 135 too.
EXIT_CODES = {134: "aborted (aot_platform_abort)", 135: "a fault (HardFault, BusFault, ...)"}


def qemu_command(board: Board, args: Sequence[str], counting: Sequence[str] = ()) -> list[str]:
    """The emulator's command line running bench/bench with `args` (and the
    instruction counter's options `counting`)."""
    qemu = str(board.options.get("qemu", ""))
    machine = str(board.options.get("machine", ""))
    if not qemu or not machine:
        raise AotError(f"board '{board.name}': transport qemu-system needs qemu and machine "
                       "in its [options] table")
    qemu = tools.require(qemu, f"board '{board.name}'")
    # -semihosting-config separates its fields with commas: a comma in an
    # argument is written twice.
    semihosting = ",".join(["enable=on", "target=native",
                            *(f"arg={a.replace(',', ',,')}" for a in ("bench", *args))])
    bios = ["-bios", str(board.options["bios"])] if board.options.get("bios") else []
    return [qemu, "-M", machine, *bios, "-nographic", "-monitor", "none", "-serial", "null",
            "-icount", "shift=0", "-semihosting-config", semihosting, *counting,
            "-kernel", "bench"]


def _relative(args: list[str], work: Path) -> list[str]:
    """Paths under work as bare names (QEMU runs in work)."""
    prefix = str(work) + os.sep
    return [a[len(prefix):] if a.startswith(prefix) else a for a in args]


def run_qemu_system(pkg: Path, board: Board, inputs: Sequence[np.ndarray], warmup: int,
                    runs: int) -> RunResult:
    from aot.deploy import insn_count      # not at import: `python -m` runs it

    meta, inputs, exe = prepare_run(pkg, inputs)
    timeout = option_number(board, "timeout_s", DEFAULT_TIMEOUT_S, float, 0.001, 86400)
    with tempfile.TemporaryDirectory(prefix="aot-qemu-system-") as tmp:
        work = Path(tmp)
        args, out_paths = harness_args(meta, work, inputs, warmup, runs)
        shutil.copyfile(exe, work / "bench")
        log = Path(tmp) / "insn_count.log"
        cmd = qemu_command(board, _relative(args, work), insn_count.qemu_args(exe, log))
        try:
            r = subprocess.run(cmd, cwd=work, capture_output=True, text=True, errors="replace",
                               stdin=subprocess.DEVNULL, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AotError(f"board '{board.name}': the harness did not finish within "
                           f"{timeout:g} s under {cmd[0]} (options.timeout_s)") from None
        except OSError as e:
            raise AotError(f"cannot run {cmd[0]}: {e.strerror}") from None
        if r.returncode != 0:
            raise AotError(failure(r.returncode, r.stderr, " under qemu-system", EXIT_CODES))
        result = parse_report(r.stdout, meta,
                              read_outputs(meta, out_paths, " under qemu-system"), runs)
        return insn_count.with_counts(result, log, meta, warmup, runs)

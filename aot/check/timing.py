"""Timing and statistics shared by `aot bench` and bench/compare.py.

A package is timed by its own harness (bench/bench): warm-up runs, then N
timed runs, each timed on the device with `aot_platform_timer_ns` (a
bare-metal board's clock may tick in us). A --profile package also times
every kernel of each run with it; `profile_stats` turns those into medians and shares.
In-process runtimes (the Python anchors of bench/compare.py) are timed with
`time.perf_counter_ns` around the call alone.

The machine is noisy (/work/shared/PERFORMANCE.md): compare contenders in
interleaved rounds (`interleave`) and report a low percentile beside the
median.
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from aot.errors import AotError, InputError, MissingToolError

MAX_RUNS = 100000           # what the harness accepts (templates/bench_main.c.j2)


@dataclass(frozen=True)
class Stats:
    """Summary of per-invocation times, in milliseconds."""
    n: int
    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    std_ms: float
    p10_ms: float

    def as_json(self) -> dict[str, float | int]:
        return asdict(self)


def stats_of(times_ms: Sequence[float]) -> Stats:
    """Median, mean, extremes, population std and 10th percentile."""
    t = np.asarray(times_ms, dtype=np.float64)
    if t.size == 0:
        raise ValueError("no timings to summarize")
    return Stats(n=int(t.size), median_ms=float(np.median(t)), mean_ms=float(t.mean()),
                 min_ms=float(t.min()), max_ms=float(t.max()), std_ms=float(t.std()),
                 p10_ms=float(np.percentile(t, 10)))


def check_counts(warmup: int, repeat: int) -> None:
    """The harness's limits, as a user error rather than a harness failure."""
    if warmup < 0:
        raise InputError(f"--warmup must be >= 0, got {warmup}")
    if not 1 <= repeat <= MAX_RUNS:
        raise InputError(f"--repeat must be between 1 and {MAX_RUNS}, got {repeat}")


# ----------------------------------------------------------------- packages

def package_inputs(meta: dict, seed: int = 0) -> list[np.ndarray]:
    """Deterministic random inputs of the package's shapes and dtypes
    (the kernels' speed does not depend on the values)."""
    from aot.deploy.host import spec_type
    from aot.check.inputs import random_array

    rng = np.random.default_rng(seed)
    return [random_array(spec_type(spec), rng) for spec in meta["inputs"]]


def bench_package(pkg: Path, board, inputs: Sequence[np.ndarray], warmup: int,
                  repeat: int):
    """The harness's RunResult for `repeat` timed runs after `warmup` on the
    board (times_ns per run; profile_ns for a --profile package)."""
    from aot.deploy import check_runs_on, run_package
    from aot.packaging.metadata import read_metadata

    check_counts(warmup, repeat)
    check_runs_on(pkg, read_metadata(pkg), board)
    result = run_package(pkg, board, inputs, warmup=warmup, runs=repeat)
    if len(result.times_ns) != repeat:
        raise AotError(f"the harness reported {len(result.times_ns)} timings, "
                       f"expected {repeat}")
    return result


def time_package(pkg: Path, board, inputs: Sequence[np.ndarray], warmup: int,
                 repeat: int) -> list[float]:
    """Per-invocation times (ms) of `repeat` runs after `warmup`, measured on
    the board by the package's harness."""
    result = bench_package(pkg, board, inputs, warmup, repeat)
    return [t / 1e6 for t in result.times_ns]


# ---------------------------------------------------------------- profiles

@dataclass(frozen=True)
class KernelStat:
    """One fused kernel of a --profile package: its median time over the
    profiled runs, its share of the kernels' total (the shares sum to 1) and
    its multiply-accumulates (metadata.json; None from a package made before
    aot counted them)."""
    step: int
    name: str
    median_ms: float
    share: float
    macs: int | None = None
    # the median of its guest instructions, where the board counts them (qemu-user)
    median_instructions: int | None = None
    # its first input's element type and MACs per output element
    # (metadata.json), and whether its MACs/us fall below CLIFF of the best
    # kernel of its family (flag_cliffs) in the same profile
    dtype: str | None = None
    depth: int | None = None
    depthwise: bool = False
    cliff: bool = False

    @property
    def macs_per_us(self) -> float | None:
        """Throughput in MACs per microsecond (= million MACs per second), on
        the board's clock: under an emulator that is the emulator's speed."""
        if self.macs is None or self.median_ms <= 0:
            return None
        return self.macs / (self.median_ms * 1000)

    def as_json(self) -> dict[str, float | int | str | None]:
        out = {"step": self.step, "name": self.name, "median_ms": self.median_ms,
               "share": self.share, "macs": self.macs, "macs_per_us": self.macs_per_us,
               "dtype": self.dtype, "depth": self.depth, "depthwise": self.depthwise,
               "family": kernel_family(self),
               "cliff": self.cliff}
        if self.median_instructions is not None:
            out["median_instructions"] = self.median_instructions
        return out


def profile_stats(meta: dict, profile_ns: Sequence[Sequence[int]] | None,
                  profile_instructions: Sequence[Sequence[int]] | None = None
                  ) -> list[KernelStat]:
    """Per-kernel medians of a RunResult's profile_ns (and instruction
    counts, where the board counts them), named from metadata.json
    "kernels" (each row: one run, a time per kernel in ns)."""
    kernels = meta.get("kernels", [])
    if not profile_ns:
        raise AotError("the harness reported no per-kernel times: package the model with "
                       "--profile")
    t = np.asarray(profile_ns, dtype=np.float64)
    if t.ndim != 2 or t.shape[1] != len(kernels):
        raise AotError(f"the profile has {t.shape[-1]} kernels, metadata.json "
                       f"{len(kernels)}")
    medians = np.median(t, axis=0) / 1e6
    total = float(medians.sum())
    # A board whose clock reads 0 (bare metal without a timer) shares nothing.
    shares = medians / total if total > 0 else np.zeros_like(medians)
    counts = ([int(c) for c in np.median(np.asarray(profile_instructions), axis=0)]
              if profile_instructions else [None] * len(kernels))
    return flag_cliffs([KernelStat(int(k["step"]), str(k["name"]), float(m), float(s),
                                   int(k["macs"]) if "macs" in k else None, c, k.get("dtype"),
                                   k.get("depth"), bool(k.get("depthwise")))
                        for k, m, s, c in zip(kernels, medians, shares, counts)])


# A kernel below this share of the best MACs/us of its family runs on a
# slow path (a cliff). A family: the element type (int8 and uint8 are one:
# the same integer kernels; each float type its own) and the kind of
# kernel: depthwise convolutions (an input load per product, no reuse
# across channels), other kernels reducing fewer than DEEP products per
# output element (a first layer, a few channels: the stores and the
# epilogue weigh) and the dense rest; neither of the first two reaches the
# dense kernels' rate, so each is measured against its own kind.
CLIFF = 0.25
DEEP = 64
# Kernels this small are left unflagged: their time is the call, the
# epilogue and the edges, not the inner loop a cliff is about.
CLIFF_MIN_MACS = 100_000


def kernel_family(k: KernelStat) -> str | None:
    """The family a kernel's throughput is compared within (see CLIFF), or
    None for a kernel without one (no MACs, or too few)."""
    if k.dtype is None or k.depth is None or k.macs_per_us is None or k.macs < CLIFF_MIN_MACS:
        return None
    dtype = "int8" if k.dtype in ("int8", "uint8") else k.dtype
    if k.depthwise:
        return f"{dtype} depthwise"
    return dtype if k.depth >= DEEP else f"{dtype}, depth < {DEEP}"


def flag_cliffs(stats: Sequence[KernelStat]) -> list[KernelStat]:
    """`stats` with `cliff` set on each kernel whose MACs/us is below CLIFF
    times the best of its kernel_family."""
    best: dict[str, float] = {}
    for k in stats:
        if (fam := kernel_family(k)) is not None:
            best[fam] = max(best.get(fam, 0.0), k.macs_per_us)
    return [replace(k, cliff=(fam := kernel_family(k)) is not None
                    and k.macs_per_us < CLIFF * best[fam]) for k in stats]


def check_plot_path(out: Path) -> Path:
    """--plot's file: a .png in an existing directory, and matplotlib to draw
    it (checked before any run: a missing extra is not found after the work)."""
    from aot.support.fsutil import check_output_file

    out = check_output_file(out, "--plot", ".png", "the chart is a PNG file")
    pyplot()
    return out


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display), imported on first
    use: only --plot needs it."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingToolError("--plot needs matplotlib: pip install 'aot[plot]'") from None
    return plt


def png_bytes(fig) -> bytes:
    """`fig` as PNG bytes. No Software tag: the bytes do not name the version."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return buf.getvalue()


def save_png(fig, out: Path) -> None:
    """`fig` as a PNG at `out`, never half a file."""
    from aot.support.fsutil import write_file_atomically

    write_file_atomically(out, png_bytes(fig))


def plot_profile(stats: Sequence[KernelStat], title: str, out: Path) -> None:
    """A horizontal bar chart of the kernels' median times, as a PNG at `out`."""
    plt = pyplot()
    out = check_plot_path(out)
    labels = [f"{s.step}: {s.name}" for s in stats]
    times_us = [s.median_ms * 1000 for s in stats]
    fig, ax = plt.subplots(figsize=(8, 1.5 + 0.3 * len(stats)))
    try:
        bars = ax.barh(range(len(stats)), times_us, color="tab:blue")
        ax.set_yticks(range(len(stats)), labels, fontsize=8)
        ax.invert_yaxis()           # step 0 on top
        ax.set_xlabel("median time per run (us)")
        ax.set_title(title)
        for bar, s in zip(bars, stats):
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                    f" {100 * s.share:.1f}%", va="center", fontsize=7)
        fig.tight_layout()
        save_png(fig, out)
    finally:
        plt.close(fig)


# ---------------------------------------------------------- in-process code

def time_calls(call: Callable[[], object], repeat: int, warmup: int = 0) -> list[float]:
    """Per-invocation times (ms) of `call()`, perf_counter_ns around the call
    alone (so they include one Python-to-C call, see `call_overhead_ms`)."""
    clock = time.perf_counter_ns
    for _ in range(warmup):
        call()
    times = [0] * repeat
    for i in range(repeat):
        t0 = clock()
        call()
        times[i] = clock() - t0
    return [t / 1e6 for t in times]


def call_overhead_ms(repeat: int = 20000) -> float:
    """Median time of an empty call timed the way `time_calls` times: the
    floor under any in-process measurement."""
    return float(np.median(time_calls(lambda: None, repeat)))


def interleave(contenders: dict[str, Callable[[], list[float]]], rounds: int
               ) -> dict[str, list[float]]:
    """Run every contender once per round (its callable times a batch and
    returns the per-invocation times), `rounds` times, rotating the order so
    no contender always follows the same neighbour. Drift in the machine's
    speed then falls on all contenders alike."""
    names = list(contenders)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        shift = r % len(names) if names else 0
        for name in names[shift:] + names[:shift]:
            times[name] += contenders[name]()
    return times


def pin_to_one_core(cpu: int | None = None) -> int:
    """Restrict this process (and the processes it starts) to one CPU: the
    given one, else the last one it may use. Returns the CPU."""
    allowed = sorted(os.sched_getaffinity(0))
    if cpu is None:
        cpu = allowed[-1]
    if cpu not in allowed:
        raise AotError(f"CPU {cpu} is not available (allowed: {allowed})")
    os.sched_setaffinity(0, {cpu})
    return cpu

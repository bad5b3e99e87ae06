#!/usr/bin/env python3
"""aot --threads N against --threads 1 on this machine.

    .venv/bin/python bench/threads.py [--threads N] [--models vww8,ic8,vww,ic,kws8,ultraface]
                                      [--codegen c|llvm] [--method bench|interleave]
                                      [--repeat N] [--processes P]
                                      [--rounds R] [--batch K] [--warm-ms MS] [--json FILE]

Per model, two packages for the host board: the one-thread package (no
thread code) and the one built with --threads N. Their outputs on the
model's saved input must be identical, bit for bit. Then both are timed.

--method bench (the default) times each package as a user does: `aot
bench PKG --repeat N` (200) in a fresh process, P times (3), and keeps
each package's best median; a short process pays the pool's start.

--method interleave times them in interleaved rounds (each round: one harness process per package that
first runs the model for about MS milliseconds untimed, then times a
batch of K runs on the ns clock; the order alternates), and each is
reported by its median and 10th percentile over all rounds, with the
speedup of the medians.

What this measures is the steady state, as a deployed model that runs many
inferences in one process sees it: the warm-up (200 ms by default, as many
runs as the one-thread package takes in that time) keeps a process's start
out of the timings (the worker's first jobs, the pool's first window of
jobs, caches). `--warm-ms 0` times a cold process's first K runs.

Nothing is pinned: the threads need the cores. The machine is shared, so
the load average before and after is printed too; a speedup measured under
load says more about the load than about aot. So is a cache line's round
trip between two CPUs (a pinned ping-pong, before and after): every job
costs a few of those, and on a VM it changes with where the host runs the
vCPUs.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aot.errors import AotError  # noqa: E402
from aot.check.timing import MAX_RUNS, interleave, stats_of, time_package  # noqa: E402

MODELS = REPO.parent / "shared" / "models"
CASES = {"vww8": "mlperf_vww_mbv1_int8.tflite", "ic8": "mlperf_ic_resnet8_int8.tflite",
         "vww": "mlperf_vww_mbv1_f32.tflite", "ic": "mlperf_ic_resnet8_f32.tflite",
         "kws8": "mlperf_kws_dscnn_int8.tflite", "ultraface": "onnx_ultraface_rfb320.onnx"}
WARM_MS = 200.0

# Two threads on two CPUs pass one cache line back and forth: the cost of
# the transfers a split kernel's job makes (and of activations written on
# one core and read on the other). On this VM it changes with where the
# host runs the vCPUs (about 55 ns to 520 ns), and the speedups with it.
PING_PONG = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static int ping __attribute__((aligned(64))), pong __attribute__((aligned(64)));
static void* echo(void* arg) {
    int i, v;
    (void)arg;
    for (i = 1;; i++) {
        while ((v = __atomic_load_n(&ping, __ATOMIC_ACQUIRE)) != i) {
            if (v < 0) return NULL;
        }
        __atomic_store_n(&pong, i, __ATOMIC_RELEASE);
    }
}
int main(int argc, char** argv) {
    enum { TRIPS = 100000 };
    cpu_set_t a, b;
    pthread_attr_t attr;
    pthread_t t;
    struct timespec t0, t1;
    int i;
    (void)argc;
    CPU_ZERO(&a); CPU_SET(atoi(argv[1]), &a);
    CPU_ZERO(&b); CPU_SET(atoi(argv[2]), &b);
    sched_setaffinity(0, sizeof a, &a);
    pthread_attr_init(&attr);
    pthread_attr_setaffinity_np(&attr, sizeof b, &b);
    if (pthread_create(&t, &attr, echo, NULL) != 0) return 1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (i = 1; i <= TRIPS; i++) {
        __atomic_store_n(&ping, i, __ATOMIC_RELEASE);
        while (__atomic_load_n(&pong, __ATOMIC_ACQUIRE) != i) {
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    __atomic_store_n(&ping, -1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    printf("%.0f\n", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / TRIPS);
    return 0;
}
"""


def round_trip_ns(workdir: Path) -> str:
    """A cache line's round trip between the first two CPUs (ns), or why not."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return "n/a (one CPU)"
    src, exe = workdir / "ping_pong.c", workdir / "ping_pong"
    src.write_text(PING_PONG)
    try:
        subprocess.run(["clang", "-O2", "-pthread", str(src), "-o", str(exe)], check=True,
                       capture_output=True)
        out = subprocess.run([str(exe), str(cpus[0]), str(cpus[1])], check=True,
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        return f"n/a ({type(e).__name__})"
    return f"{out.stdout.strip()} ns"


def warm_runs(pkg: Path, board, inputs, warm_ms: float) -> int:
    """How many runs of the package take about warm_ms (its median over a
    few runs in a short process)."""
    if warm_ms <= 0:
        return 0
    once = float(np.median(time_package(pkg, board, inputs, 1, 5)))
    return min(MAX_RUNS, max(1, math.ceil(warm_ms / once)))


def bench_median_ms(pkg: Path, repeat: int, processes: int) -> list[float]:
    """`aot bench PKG --repeat N`'s median, once per fresh process."""
    out = []
    for _ in range(processes):
        run = subprocess.run([sys.executable, "-m", "aot", "bench", str(pkg), "--board", "host",
                              "--repeat", str(repeat), "--json"], check=True,
                             capture_output=True, text=True)
        out.append(float(json.loads(run.stdout)["median_ms"]))
    return out


def best_of_processes(pkgs: dict, repeat: int, processes: int) -> dict:
    """Each package's aot bench medians over fresh processes (the order
    alternates between the packages), as stats_of would: best and median."""
    medians: dict = {t: [] for t in pkgs}
    for k in range(processes):
        for t in (list(pkgs) if k % 2 == 0 else list(pkgs)[::-1]):
            medians[t] += bench_median_ms(pkgs[t], repeat, 1)
    return medians


def measure(name: str, threads: int, codegen: str, rounds: int, batch: int, warm_ms: float,
            workdir: Path, log, method: str = "bench", repeat: int = 200,
            processes: int = 3) -> dict:
    from aot.api import package
    from aot.deploy import run_package
    from aot.packaging.metadata import read_metadata
    from aot.targets import get_board

    board = get_board("host")
    model = MODELS / CASES[name]
    inputs = [np.load(model.with_suffix(".input.npy"))]
    pkgs = {}
    for t in (1, threads):
        pkgs[t] = package(model, board=board, codegen=codegen, threads=t,
                          out_dir=workdir / f"{name}.{t}").path
    outs = {t: [o.tobytes() for o in run_package(p, board, inputs).outputs]
            for t, p in pkgs.items()}
    identical = outs[1] == outs[threads]
    meta = read_metadata(pkgs[threads])
    split = sum(k.get("split", False) for k in meta["kernels"])
    log(f"  {name}: {split} of {len(meta['kernels'])} kernels split, outputs "
        f"{'identical' if identical else 'DIFFER'}")
    if method == "bench":
        medians = best_of_processes(pkgs, repeat, processes)
        best = {t: min(v) for t, v in medians.items()}
        return {"model": name, "file": CASES[name], "threads": threads,
                "kernels": len(meta["kernels"]), "split_kernels": split,
                "identical": identical, "warmup_runs": 0,
                "median_ms": {str(t): best[t] for t in pkgs},
                "p10_ms": {str(t): max(medians[t]) for t in pkgs},
                "speedup": best[1] / best[threads]}
    # the same warm-up time for both: the one-thread package's runs
    warmup = warm_runs(pkgs[1], board, inputs, warm_ms)
    times = interleave({t: (lambda p=p: time_package(p, board, inputs, warmup, batch))
                        for t, p in pkgs.items()}, rounds)
    stats = {t: stats_of(v) for t, v in times.items()}
    return {"model": name, "file": CASES[name], "threads": threads,
            "kernels": len(meta["kernels"]), "split_kernels": split,
            "identical": identical, "warmup_runs": warmup,
            "median_ms": {str(t): s.median_ms for t, s in stats.items()},
            "p10_ms": {str(t): s.p10_ms for t, s in stats.items()},
            "speedup": stats[1].median_ms / stats[threads].median_ms}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2, help="N (default: 2)")
    p.add_argument("--models", default=",".join(CASES),
                   help=f"comma-separated: {', '.join(CASES)} (default: all)")
    p.add_argument("--codegen", choices=("c", "llvm"), default="c")
    p.add_argument("--method", choices=("bench", "interleave"), default="bench",
                   help="bench: aot bench per fresh process, best of --processes; "
                        "interleave: warmed-up interleaved rounds (default: bench)")
    p.add_argument("--repeat", type=int, default=200, help="bench: runs per process (200)")
    p.add_argument("--processes", type=int, default=3, help="bench: processes per package (3)")
    p.add_argument("--rounds", type=int, default=20, help="interleaved rounds (default: 20)")
    p.add_argument("--batch", type=int, default=20,
                   help="timed runs per package per round (default: 20)")
    p.add_argument("--warm-ms", type=float, default=WARM_MS,
                   help=f"untimed runs first in each process, for about this long (default: "
                        f"{WARM_MS:g} ms; 0: none)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = p.parse_args(argv)
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in CASES]
    if unknown or args.threads < 2:
        p.error(f"unknown models {unknown}" if unknown else "--threads must be >= 2")

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    load_before = os.getloadavg()[0]
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="aot-threads-") as tmp:
            trips = [round_trip_ns(Path(tmp))]
            for name in names:
                rows.append(measure(name, args.threads, args.codegen, args.rounds, args.batch,
                                    args.warm_ms, Path(tmp), log, args.method, args.repeat,
                                    args.processes))
            trips.append(round_trip_ns(Path(tmp)))
    except AotError as e:
        print(f"threads.py: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    load_after = os.getloadavg()[0]
    n = args.threads
    bench = args.method == "bench"
    spread = ("worst 1", f"worst {n}") if bench else ("p10 1", f"p10 {n}")
    print(f"{'model':<10} {'1 thread ms':>12} {f'{n} threads ms':>13} {'speedup':>8} "
          f"{spread[0]:>8} {spread[1]:>8}  split kernels  outputs")
    for r in rows:
        m, q = r["median_ms"], r["p10_ms"]
        print(f"{r['model']:<10} {m['1']:>12.3f} {m[str(n)]:>13.3f} {r['speedup']:>7.2f}x "
              f"{q['1']:>8.3f} {q[str(n)]:>8.3f}  {r['split_kernels']:>5} of {r['kernels']:<5}"
              f"  {'identical' if r['identical'] else 'DIFFER'}")
    warm = ", ".join(f"{r['model']} {r['warmup_runs']}" for r in rows)
    start = (f"warmed up for ~{args.warm_ms:g} ms first (steady state; warm-up runs: {warm})"
             if args.warm_ms > 0 else "timed from its first run (a cold process)")
    how = (f"aot bench --repeat {args.repeat}, best median of {args.processes} fresh processes "
           f"per package (worst: their worst median)" if bench else
           f"{args.rounds} interleaved rounds x {args.batch} timed runs per package, each round "
           f"a fresh process {start}")
    print(f"{how}, {args.codegen} codegen, host board, {os.cpu_count()} CPUs; "
          f"load average {load_before:.1f} before, {load_after:.1f} after; a cache line's "
          f"round trip between two CPUs {trips[0]} before, {trips[1]} after")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"threads": n, "codegen": args.codegen, "rounds": args.rounds, "batch": args.batch,
             "warm_ms": args.warm_ms,
             "load_average": [load_before, load_after], "round_trip": trips,
             "models": rows}, indent=2) + "\n")
    return 0 if all(r["identical"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

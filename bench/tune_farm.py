#!/usr/bin/env python3
"""The board farm's wall time against one board at a time.

    .venv/bin/python bench/tune_farm.py [--models ad_fcae_int8,kws_dscnn_int8]
                                        [--boards qemu-aarch64,qemu-aarch64,qemu-armv7,qemu-armv7]
                                        [--trials N] [--num-cpus C] [--json FILE]

Both runs tune every model on every board kind named (one search per model
and kind, the same seed): first here, one search after another on one
board of each kind (`aot tune` without --cluster), then over a local Ray
cluster (`--cluster auto`) with every board named. Same searches, same
number of measurements; the records must be the same (instruction counts
on emulated boards are exact), and the script fails if they are not.

Printed: each run's wall time, the farm's with and without starting the
cluster, the ratio farm / one board, the measurements and the load average
before and after. The builds and the emulated boards all need this
machine's cores: a farm of N boards cannot be faster than the cores allow
(on 2 cores, 2 at a time), and a loaded machine shows its load.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODELS = Path(os.environ.get("AOT_SHARED", REPO.parent / "shared")) / "models"


@contextlib.contextmanager
def inside(where: Path):
    old = Path.cwd()
    os.chdir(where)
    try:
        yield
    finally:
        os.chdir(old)


def records(where: Path) -> set:
    from aot.tune.records import read
    return {(log.name, r.workload, str(r.config), r.instructions, r.default_instructions)
            for log in where.glob("*.jsonl") for r in read(log)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="mlperf_ad_fcae_int8,mlperf_kws_dscnn_int8")
    ap.add_argument("--boards", default="qemu-aarch64,qemu-aarch64,qemu-armv7,qemu-armv7")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--num-cpus", type=int, default=os.cpu_count())
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()

    from aot.tune import farm
    from aot.tune.search import Runner, tune

    models = [MODELS / f"{m}.tflite" if not m.endswith((".onnx", ".tflite")) else Path(m)
              for m in args.models.split(",")]
    boards = farm.parse_boards(args.boards)
    kinds = list(dict.fromkeys(boards))
    options = dict(trials=args.trials, repeat=1, warmup=0)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="aot-bench-farm-") as tmp:
        one, many = Path(tmp) / "one", Path(tmp) / "farm"
        one.mkdir()
        many.mkdir()
        t0 = time.monotonic()
        runs = []

        class Counted(Runner):
            def run(self, *a, **k):
                runs.append(1)
                return super().run(*a, **k)
        with inside(one):
            for m in models:
                for k in kinds:
                    tune(m, k, runner_for=Counted, **options)
        one_s = time.monotonic() - t0
        measurements = len(runs)
        t0 = time.monotonic()
        farm.start_local(boards, num_cpus=args.num_cpus)
        started_s = time.monotonic() - t0
        try:
            with inside(many):
                out = farm.tune_farm(models, boards, "auto", None, **options)
        finally:
            farm.ray_module().shutdown()
        farm_s = time.monotonic() - t0
        same = records(one) == records(many)
    row = {"models": [m.stem for m in models], "boards": boards, "trials": args.trials,
           "cpus": args.num_cpus, "one_board_s": round(one_s, 2),
           "farm_s": round(farm_s, 2), "farm_s_after_start": round(farm_s - started_s, 2),
           "cluster_start_s": round(started_s, 2),
           "ratio": round(farm_s / one_s, 3),
           "ratio_after_start": round((farm_s - started_s) / one_s, 3),
           "measurements": {"one_board": measurements, "farm": out["measurements"]},
           "same_records": same, "load_before": [round(x, 2) for x in load_before],
           "load_after": [round(x, 2) for x in os.getloadavg()]}
    print(f"{len(models)} models x {len(kinds)} board kinds, {args.trials} trials each, "
          f"{row['measurements']['farm']} measurements, {args.num_cpus} CPUs for Ray")
    print(f"  one board per kind, one search at a time: {row['one_board_s']:8.2f} s")
    print(f"  farm of {len(boards)} boards:                   {row['farm_s']:8.2f} s "
          f"({row['cluster_start_s']:.2f} s of it starting the cluster)")
    print(f"  farm / one board: {row['ratio']:.3f} (after the start: "
          f"{row['ratio_after_start']:.3f}); same records: {same}")
    print(f"  load average before {row['load_before']}, after {row['load_after']}")
    if args.json:
        Path(args.json).write_text(json.dumps(row, indent=2) + "\n")
    if not same or row["measurements"]["one_board"] != row["measurements"]["farm"]:
        print("the farm's records or measurements differ from the one-board run's",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

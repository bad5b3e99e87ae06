#!/usr/bin/env python3
"""What tuning gains, and how many measurements the cost model saves.

    nice .venv/bin/python bench/tune_gain.py [--models kws_dscnn_int8,ic_resnet8_int8]
                                             [--boards qemu-aarch64,qemu-armv7]
                                             [--trials N] [--seeds 0,1] [--json FILE]

Per board and model, `aot tune` twice with the same number of batches:
`--search random` and `--search model`, per seed. Each batch measures one
candidate of every tunable workload in one package, so a search of T
batches makes T x workloads measurements. Printed per (board, model,
seed):

- default and tuned: the kernels' instructions (exact on emulated boards)
  with the default schedules and with each search's best configs;
- the batches each search needed: random to reach its own best, the model
  to come within 1% of random's best (`-`: never, in T batches), and the
  ratio model / random of those batches (the cost model's acceptance:
  at most 1/3).

Progress is the search's summary["history"]: after each batch, the tunable
workloads' best cost over their defaults', weighted by the defaults' cost.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODELS = Path(os.environ.get("AOT_SHARED", REPO.parent / "shared")) / "models"
WITHIN = 0.01


def reached(history: list[float], goal: float) -> int | None:
    """The number of batches after which the progress is at most goal."""
    for i, cost in enumerate(history):
        if cost <= goal + 1e-12:
            return i + 1
    return None


def search(model: Path, board: str, trials: int, how: str, seed: int, where: Path) -> dict:
    from aot.tune import tune
    return tune(model, board, trials=trials, search=how, seed=seed,
                log=where / f"{model.stem}.{board}.{how}.{seed}.jsonl")


def totals(out: dict, default_total: float) -> float:
    """The kernels' cost with the search's best configs."""
    gain = sum((1 - b["ratio"]) * b["default_cost"] for b in out["best"].values())
    return default_total - gain


def row(board: str, name: str, seed: int, random_out: dict, model_out: dict) -> dict:
    best = random_out["history"][-1]
    r_n = reached(random_out["history"], best)
    m_n = reached(model_out["history"], best * (1 + WITHIN))
    default = random_out["default_total"]
    return {"board": board, "model": name, "seed": seed, "tunable": random_out["tunable"],
            "batches": len(random_out["history"]), "default": default,
            "tuned_random": round(totals(random_out, default)),
            "tuned_model": round(totals(model_out, default)),
            "random_best": best, "model_best": model_out["history"][-1],
            "random_batches": r_n, "model_batches": m_n,
            "ratio": None if m_n is None or not r_n else round(m_n / r_n, 3),
            "random_history": random_out["history"], "model_history": model_out["history"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="mlperf_kws_dscnn_int8,mlperf_ic_resnet8_int8")
    ap.add_argument("--boards", default="qemu-aarch64,qemu-armv7")
    ap.add_argument("--trials", type=int, default=24)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    rows = []
    print("| board | model | seed | tunable | default instr. | tuned (random) | tuned (model) "
          "| random: batches to its best | model: batches to random's best (1%) "
          "| model / random |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for board in args.boards.split(","):
        for name in args.models.split(","):
            path = MODELS / f"{name}.tflite"
            for seed in map(int, args.seeds.split(",")):
                with tempfile.TemporaryDirectory(prefix="aot-tune-gain-") as tmp:
                    outs = {how: search(path, board, args.trials, how, seed, Path(tmp))
                            for how in ("random", "model")}
                r = row(board, name, seed, outs["random"], outs["model"])
                rows.append(r)
                print(f"| {board} | {name} | {seed} | {r['tunable']} | {r['default']:,.0f} "
                      f"| {r['tuned_random']:,} ({r['random_best']:.3f}) "
                      f"| {r['tuned_model']:,} ({r['model_best']:.3f}) "
                      f"| {r['random_batches']} | {r['model_batches'] or '-'} "
                      f"| {r['ratio'] if r['ratio'] is not None else '-'} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

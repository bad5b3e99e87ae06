#!/usr/bin/env python3
"""What tuning finds on the boards without hand-picked defaults: per board
and model, `aot tune MODEL --board B --trials N` (its log kept), then the
default and the tuned package (`--tuning-records LOG`) counted the way
`aot bench` counts them (exact instructions per run under QEMU), and the
median tuned / default per board.

    bench/tune_boards.py [--boards qemu-riscv64,qemu-armv7,rpi3] [--models a,b]
        [--trials 64] [--budget SECONDS] [--dir DIR] [--json FILE]

`rpi3` is the Raspberry Pi 3's package (Cortex-A53, aarch64-linux-a53)
counted under qemu-aarch64 -cpu cortex-a53, as bench/compare.py counts the
rpi4 and rpi5 packages. Models: the MLPerf Tiny int8 and float32 models of
/work/shared/models (or $AOT_MODELS). Logs go to --dir
(default ~/.cache/aot/tune-boards) and are reused when present, so a run
cut short continues (`--resume` semantics per log).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = ("mlperf_kws_dscnn_int8", "mlperf_vww_mbv1_int8", "mlperf_ic_resnet8_int8",
          "mlperf_ad_fcae_int8", "mlperf_kws_dscnn_f32", "mlperf_vww_mbv1_f32",
          "mlperf_ic_resnet8_f32", "mlperf_ad_fcae_f32")
BOARDS = ("qemu-riscv64", "qemu-armv7", "rpi3")
# Boards counted under another board's emulator: (emulator board, cpu).
COUNTED_AS = {"rpi3": ("qemu-aarch64", "cortex-a53")}


def counting_board(name: str):
    """The board to tune and count on: `name` itself, or its package's
    target on the emulator that models its core."""
    from aot.targets import get_board
    board = get_board(name)
    if name not in COUNTED_AS:
        return board
    emulator, cpu = COUNTED_AS[name]
    emu = get_board(emulator)
    return replace(emu, target=board.target, options={**emu.options, "cpu": cpu},
                   description=f"{name}'s package ({board.target.name}) under {emulator} "
                               f"-cpu {cpu}")


def instructions(model: Path, board, records: Path | None) -> int:
    """Instructions per run of `model`'s package (tuned with `records`)."""
    from aot import api
    with tempfile.TemporaryDirectory() as tmp:
        pkg = Path(tmp) / "pkg"
        info = api.package(str(model), board=board, out_dir=pkg, tuning_records=records)
        result = api.bench(info.path, board=board, warmup=1, repeat=2)
    return int(result.median_instructions)


def one(model: Path, board_name: str, trials: int, budget: float | None, logs: Path) -> dict:
    from aot.tune.search import tune
    board = counting_board(board_name)
    log = logs / f"{model.stem}.{board_name}.jsonl"
    t0 = time.monotonic()
    summary = tune(str(model), board, trials=trials, budget=budget, log=log,
                   resume=log.exists())
    seconds = time.monotonic() - t0
    default = instructions(model, board, None)
    tuned = instructions(model, board, log)
    return {"board": board_name, "model": model.stem, "default": default, "tuned": tuned,
            "ratio": tuned / default, "trials": summary["trials_run"],
            "improved": summary["improved"], "tunable": summary["tunable"],
            "discarded": summary["discarded"], "tune_s": round(seconds, 1)}


def table(rows: list[dict]) -> str:
    out = ["| board | model | default instructions | tuned | tuned / default | trials | "
           "workloads improved / tunable |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        out.append(f"| {r['board']} | {r['model']} | {r['default']:,} | {r['tuned']:,} | "
                   f"{r['ratio']:.3f} | {r['trials']} | {r['improved']} / {r['tunable']} |")
    for board in dict.fromkeys(r["board"] for r in rows):
        ratios = [r["ratio"] for r in rows if r["board"] == board]
        out.append(f"| {board} | median of {len(ratios)} | | | "
                   f"**{statistics.median(ratios):.3f}** | | |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--boards", default=",".join(BOARDS))
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--budget", type=float, default=None, help="seconds per tuning run")
    p.add_argument("--dir", type=Path, default=Path.home() / ".cache/aot/tune-boards")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    models_dir = Path(os.environ.get("AOT_MODELS", "/work/shared/models"))
    args.dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for board in args.boards.split(","):
        for name in args.models.split(","):
            row = one(models_dir / f"{name}.tflite", board, args.trials, args.budget, args.dir)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

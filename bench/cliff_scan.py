#!/usr/bin/env python3
"""The cliff check over a set of models: each packaged with --profile for
each board, its kernels timed (`aot bench --profile`), and every kernel
whose MACs/us falls below a quarter of the best kernel of its family in
the same profile (aot/check/timing.py, flag_cliffs) listed.

    .venv/bin/python bench/cliff_scan.py [MODEL ...] [--boards host,host-avx512]
                                         [--codegen c|llvm] [--repeat N]

Without MODEL: every .tflite and .onnx file directly in ../shared/models
(the MLPerf Tiny models among them). Exit 1 when any kernel is flagged.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models"


def default_models() -> list[Path]:
    return sorted(p for p in MODELS.iterdir() if p.suffix in (".tflite", ".onnx"))


def scan(model: Path, board: str, codegen: str, repeat: int) -> list[dict]:
    """The profile rows of `model` on `board` flagged as cliffs."""
    from aot.api import bench

    r = bench(model, board=board, codegen=codegen, warmup=5, repeat=repeat, profile=True)
    return [k.as_json() for k in r.profile if k.cliff]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="*", type=Path)
    p.add_argument("--boards", default="host,host-avx512")
    p.add_argument("--codegen", default="c", choices=("c", "llvm"))
    p.add_argument("--repeat", type=int, default=30)
    args = p.parse_args(argv)
    models = args.models or default_models()
    flagged = 0
    for board in args.boards.split(","):
        for m in models:
            cliffs = scan(m, board, args.codegen, args.repeat)
            flagged += len(cliffs)
            print(f"{board:<12} {m.name:<36} "
                  + ("ok" if not cliffs else "; ".join(
                      f"{k['name']} {k['macs_per_us']:,.0f} MACs/us ({k['family']})"
                      for k in cliffs)), flush=True)
    print(f"{flagged} kernel(s) flagged")
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())

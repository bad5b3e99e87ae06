#!/usr/bin/env python3
"""aot against ONNX Runtime on the conv shapes real exporters write, on the
host, one thread: the 1-D conv written as a 2-D one (Kx1 and 1xK kernels
between NHWC transposes), a plain 1-D Conv, dilated and grouped convs, many
channels over a small map (aot/testing/conv_shapes.py builds them).

    .venv/bin/python bench/cliffs.py [--shapes a,b] [--rounds R] [--batch K]
                                     [--codegen c|llvm] [--board host|host-avx512]

Per shape: the package's outputs checked against ONNX Runtime, then both
timed in interleaved rounds on one pinned core (bench/compare.py's
contenders); printed are the medians, aot / ONNX Runtime and aot's MACs
per microsecond. A ratio above 1.2 is a cliff.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare  # noqa: E402

from aot.check.timing import interleave, pin_to_one_core, stats_of  # noqa: E402
from aot.testing.conv_shapes import SHAPES, conv_model, input_of  # noqa: E402

CLIFF = 1.2


def bench_shape(s, board, codegen: str, rounds: int, batch: int, workdir: Path) -> dict:
    import onnxruntime as ort

    from aot.api import package
    from aot.deploy import run_package

    path = workdir / f"{s.name}.onnx"
    path.write_bytes(conv_model(s))
    x = input_of(s)
    info = package(path, board=board.name, codegen=codegen, out_dir=workdir / s.name)
    got = run_package(info.path, board, [x]).outputs[0]
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    err = float(np.max(np.abs(got - want)))
    times = interleave({"aot": compare.aot_contender(info.path, board, [x], batch),
                        "ort": compare.onnxruntime_contender(path, [x], batch)}, rounds)
    aot_ms = stats_of(times["aot"]).median_ms
    ort_ms = stats_of(times["ort"]).median_ms
    return {"shape": s.name, "aot_ms": aot_ms, "ort_ms": ort_ms, "ratio": aot_ms / ort_ms,
            "macs_per_us": s.macs() / (aot_ms * 1e3), "max_err": err}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", help="comma-separated names (default: all): "
                   + ", ".join(s.name for s in SHAPES))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--codegen", default="c", choices=("c", "llvm"))
    p.add_argument("--board", default=None, help="host or host-avx512 (default: the fastest)")
    args = p.parse_args(argv)
    wanted = set(args.shapes.split(",")) if args.shapes else None
    shapes = [s for s in SHAPES if wanted is None or s.name in wanted]
    if wanted and len(shapes) != len(wanted):
        print(f"unknown shape in --shapes: {sorted(wanted - {s.name for s in SHAPES})}",
              file=sys.stderr)
        return 2
    from aot.targets import boards
    board = compare.host_board(boards()[args.board] if args.board else None)
    pin_to_one_core()
    print(f"board {board.name}, codegen {args.codegen}, one thread, "
          f"{args.rounds} rounds of {args.batch}")
    print(f"{'shape':<18} {'aot ms':>9} {'ort ms':>9} {'aot/ort':>8} {'MACs/us':>9} {'max err':>8}")
    with tempfile.TemporaryDirectory(prefix="aot-cliffs-") as tmp:
        for s in shapes:
            r = bench_shape(s, board, args.codegen, args.rounds, args.batch, Path(tmp))
            mark = "  <- cliff" if r["ratio"] > CLIFF else ""
            print(f"{r['shape']:<18} {r['aot_ms']:9.3f} {r['ort_ms']:9.3f} {r['ratio']:8.2f} "
                  f"{r['macs_per_us']:9.0f} {r['max_err']:8.1e}{mark}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""aot against ONNX Runtime on the conv shapes real exporters write, on the
host, one thread: the 1-D conv written as a 2-D one (Kx1 and 1xK kernels
between NHWC transposes), a plain 1-D Conv, dilated and grouped convs, many
channels over a small map (aot/testing/conv_shapes.py builds them); with
--resnet50 an ONNX QOperator int8 ResNet-50 too (aot/testing/resnet50.py).

    .venv/bin/python bench/cliffs.py [--shapes a,b] [--rounds R] [--batch K]
                                     [--codegen c|llvm] [--board host|host-avx512]
                                     [--resnet50]

Per shape: the package's outputs checked against ONNX Runtime, then both
timed in interleaved rounds on one pinned core (bench/compare.py's
contenders); printed are the medians, aot / ONNX Runtime and aot's MACs
per microsecond. A ratio above 1.2 is a cliff.
"""
from __future__ import annotations

import argparse
import itertools
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


def bench_model(name: str, path: Path, x: np.ndarray, macs: int, board, codegen: str,
                rounds: int, batch: int, workdir: Path) -> dict:
    """One model file, aot against ONNX Runtime (outputs compared, then timed)."""
    import onnxruntime as ort

    from aot.api import package
    from aot.deploy import run_package

    info = package(path, board=board.name, codegen=codegen, out_dir=workdir / name)
    got = run_package(info.path, board, [x]).outputs[0]
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    times = interleave({"aot": compare.aot_contender(info.path, board, [x], batch),
                        "ort": compare.onnxruntime_contender(path, [x], batch)}, rounds)
    aot_ms = stats_of(times["aot"]).median_ms
    ort_ms = stats_of(times["ort"]).median_ms
    return {"shape": name, "aot_ms": aot_ms, "ort_ms": ort_ms, "ratio": aot_ms / ort_ms,
            "macs_per_us": macs / (aot_ms * 1e3),
            "max_err": float(np.max(np.abs(got.astype(np.float64) - want)))}


def resnet50_rows(board, codegen: str, rounds: int, batch: int, workdir: Path) -> list[dict]:
    """The QOperator ResNet-50 (aot/testing/resnet50.py) with uint8 and with
    int8 activations."""
    from aot.testing.resnet50 import resnet50, quantized

    fp = workdir / "resnet50.onnx"
    fp.write_bytes(resnet50())
    x = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)
    return [bench_model(f"resnet50_qop_{act}", quantized(fp, workdir / f"r50_{act}.onnx", act),
                        x, 4_089_184_256, board, codegen, rounds, batch, workdir)
            for act in ("uint8", "int8")]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", help="comma-separated names (default: all): "
                   + ", ".join(s.name for s in SHAPES))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--codegen", default="c", choices=("c", "llvm"))
    p.add_argument("--board", default=None, help="host or host-avx512 (default: the fastest)")
    p.add_argument("--resnet50", action="store_true",
                   help="also an ONNX QOperator ResNet-50 (quantize_static, uint8 and int8 "
                   "activations; ONNX Runtime's int8-activation QOperator path is slow)")
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
        rows = (bench_shape(s, board, args.codegen, args.rounds, args.batch, Path(tmp))
                for s in shapes)
        if args.resnet50:
            rows = itertools.chain(rows, resnet50_rows(board, args.codegen, args.rounds,
                                                       max(1, args.batch // 5), Path(tmp)))
        for r in rows:
            mark = "  <- cliff" if r["ratio"] > CLIFF else ""
            print(f"{r['shape']:<18} {r['aot_ms']:9.3f} {r['ort_ms']:9.3f} {r['ratio']:8.2f} "
                  f"{r['macs_per_us']:9.0f} {r['max_err']:8.1e}{mark}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

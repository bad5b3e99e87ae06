#!/usr/bin/env python3
"""aot against ONNX Runtime on a YOLOv8n-style detector, on the host.

    .venv/bin/python bench/yolo.py [--size 320] [--codegen c|llvm] [--board B]
                                   [--rounds R] [--batch K] [--profile] [--json FILE]

The model is generated (aot/testing/yolo.py: the structure torch.onnx
writes for ultralytics' yolov8n, random weights from a fixed seed), written
to a temporary directory, packaged per codegen for a board of this machine
(host-avx512 where the CPU has AVX-512, else host: bench/compare.py's
host_board) and checked against ONNX Runtime on one input (float
tolerance: rtol 1e-3, atol 1e-3 on boxes of a few hundred pixels and class
scores in (0, 1)). Then aot (its harness, the package's own timer) and ONNX
Runtime (one thread, sequential, input and output bound once) run in
interleaved rounds, pinned to one core, as bench/compare.py times them;
medians, 10th percentiles and aot / ONNX Runtime by median are printed with
the CPU and the board. `--profile` also prints where aot's time goes: the
kernels' medians summed by kind (conv, swish, concat, ...) from a --profile
package (`aot bench --profile`).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from compare import (WARMUP, aot_contender, cpu_name, host_board,  # noqa: E402
                     onnxruntime_contender, versions)
from aot.errors import AotError  # noqa: E402
from aot.check.timing import interleave, pin_to_one_core, stats_of  # noqa: E402

RTOL = ATOL = 1e-3


def build_model(size: int, workdir: Path) -> Path:
    from aot.testing.yolo import yolov8

    path = workdir / f"yolov8n_{size}.onnx"
    path.write_bytes(yolov8(size).SerializeToString())
    return path


def image(size: int) -> np.ndarray:
    """A deterministic input in [0, 1), as a normalized RGB image is."""
    return np.random.default_rng(0).uniform(0, 1, (1, 3, size, size)).astype(np.float32)


def package_and_check(model: Path, board, codegens: list[str], inputs, workdir: Path,
                      log, profile: bool = False) -> tuple[dict[str, Path], dict, dict]:
    """Packages per codegen, their metadata, and each one's check against
    ONNX Runtime: {codegen: (ok, max abs error)}."""
    from aot.api import as_graph, package
    from aot.deploy import run_package
    from aot.check.reference import compare, reference_outputs

    graph = as_graph(model)
    _, want = reference_outputs(model, graph, inputs)
    packages, checks, meta = {}, {}, {}
    for cg in codegens:
        t0 = time.perf_counter()
        info = package(graph, board=board.name, codegen=cg, profile=profile,
                       out_dir=workdir / f"{model.stem}.{cg}{'.profile' if profile else ''}")
        log(f"  packaged {model.name} ({cg}{', --profile' if profile else ''}) in "
            f"{time.perf_counter() - t0:.1f} s")
        packages[cg], meta = info.path, info.metadata
        got = run_package(info.path, board, inputs).outputs
        rows = [compare(n, g, w, RTOL, ATOL) for n, g, w in zip(graph.outputs, got, want)]
        checks[cg] = (all(r["ok"] for r in rows), max(r["max_abs_err"] or 0.0 for r in rows))
    return packages, meta, checks


def profile_by_kind(pkg: Path, board, inputs, runs: int = 30) -> list[tuple[str, float, int]]:
    """(kind, summed median ms, kernels) per kind of kernel, largest first:
    the kind is the kernel's name without its step number (conv_swish_3 ->
    conv_swish)."""
    from aot.check.timing import bench_package, profile_stats
    from aot.packaging.metadata import read_metadata

    result = bench_package(pkg, board, inputs, WARMUP, runs)
    kinds: dict[str, list[float]] = collections.defaultdict(list)
    for k in profile_stats(read_metadata(pkg), result.profile_ns):
        kinds[re.sub(r"_\d+$", "", k.name)].append(k.median_ms)
    return sorted(((k, sum(v), len(v)) for k, v in kinds.items()), key=lambda r: -r[1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=320, help="input height and width (default 320)")
    p.add_argument("--codegen", choices=("c", "llvm"), help="one codegen (default: both)")
    p.add_argument("--board", help="host or host-avx512 (default: the fastest this CPU runs)")
    p.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default: 15)")
    p.add_argument("--batch", type=int, default=10,
                   help="timed invocations per contender per round (default: 10)")
    p.add_argument("--cpu", type=int, help="the core to pin to (default: the last one)")
    p.add_argument("--profile", action="store_true",
                   help="also print aot's time per kind of kernel (a --profile package)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = p.parse_args(argv)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    try:
        from aot.targets import get_board
        board = host_board(get_board(args.board) if args.board else None)
        if args.rounds < 1 or args.batch < 1:
            raise AotError("--rounds and --batch must be >= 1")
        codegens = [args.codegen] if args.codegen else ["c", "llvm"]
        cpu = pin_to_one_core(args.cpu)
        inputs = [image(args.size)]
        with tempfile.TemporaryDirectory(prefix="aot-yolo-") as tmp:
            work = Path(tmp)
            model = build_model(args.size, work)
            packages, meta, checks = package_and_check(model, board, codegens, inputs, work, log)
            contenders = {f"aot {cg}": aot_contender(pkg, board, inputs, args.batch)
                          for cg, pkg in packages.items()}
            contenders["onnxruntime"] = onnxruntime_contender(model, inputs, args.batch)
            t0 = time.perf_counter()
            times = interleave(contenders, args.rounds)
            log(f"  timed in {time.perf_counter() - t0:.1f} s")
            kinds = []
            if args.profile:
                prof, _, _ = package_and_check(model, board, codegens[:1], inputs, work, log,
                                               profile=True)
                kinds = profile_by_kind(prof[codegens[0]], board, inputs)
    except AotError as e:
        print(f"yolo.py: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2

    stats = {n: stats_of(t) for n, t in times.items()}
    ort = stats["onnxruntime"]
    print(f"YOLOv8n-style detector, 1x3x{args.size}x{args.size}: aot on board {board.name} "
          f"(target {board.target.name}, flags {' '.join(board.target.cflags)}) against "
          f"ONNX Runtime {versions()['onnxruntime']}, one thread")
    print(f"{cpu_name()}, pinned to CPU {cpu}; {args.rounds} interleaved rounds x "
          f"{args.batch} runs (after {WARMUP} warm-up each); load average "
          f"{os.getloadavg()[0]:.1f}")
    print(f"{'contender':<14}{'median ms':>11}{'p10 ms':>9}{'/ ort (median)':>16}"
          f"{'/ ort (p10)':>13}  check vs onnxruntime")
    for name, s in stats.items():
        cg = name.removeprefix("aot ")
        check = ""
        if cg in checks:
            ok, err = checks[cg]
            check = f"{'ok' if ok else 'MISMATCH'} (max abs err {err:.2g})"
        print(f"{name:<14}{s.median_ms:>11.3f}{s.p10_ms:>9.3f}"
              f"{s.median_ms / ort.median_ms:>15.2f}x{s.p10_ms / ort.p10_ms:>12.2f}x  {check}")
    print(f"aot arena {meta['arena_bytes']:,} B (lower bound "
          f"{meta['arena_lower_bound_bytes']:,} B), params {meta['params_bytes']:,} B")
    if kinds:
        total = sum(ms for _, ms, _ in kinds)
        print(f"aot {codegens[0]} per kind of kernel (medians summed, --profile package):")
        for kind, ms, n in kinds:
            print(f"  {kind:<36}{ms * 1000:>9.1f} us {100 * ms / total:>5.1f}%  ({n} kernels)")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "host": {"cpu": cpu_name(), "pinned_cpu": cpu, "board": board.name,
                     "target": board.target.name, "load_average": os.getloadavg()[0]},
            "versions": versions(), "size": args.size, "rounds": args.rounds,
            "batch": args.batch, "contenders": {n: s.as_json() for n, s in stats.items()},
            "checks": {cg: {"ok": ok, "max_abs_err": err} for cg, (ok, err) in checks.items()},
            "arena_bytes": meta["arena_bytes"],
            "profile_by_kind": [{"kind": k, "ms": ms, "kernels": n} for k, ms, n in kinds],
        }, indent=2) + "\n")
    ok = all(ok for ok, _ in checks.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

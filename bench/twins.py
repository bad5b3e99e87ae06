#!/usr/bin/env python3
"""A model against its twin in another precision, in the same run.

    .venv/bin/python bench/twins.py [--pairs half,int16] [--codegen c,llvm]
                                    [--rounds R] [--batch K] [--no-time] [--no-count]
                                    [--host host|host-avx512]

Pairs (aot/testing/twins.py builds both sides from one set of weights):

- half: a ResNet-8-like classifier in float16 (weights, activations,
  inputs and outputs, as onnxconverter-common's conversion writes it)
  against its float32 twin;
- int16: a 3x3 CONV_2D with int16 activations (16x8) against its int8 twin.

For each pair and codegen, the ratio (first / twin) of

- time on this machine's best host board (host-avx512 where the CPU has
  AVX-512, else host): the harness's per-invocation times, both packages
  in interleaved rounds, medians;
- instructions per inference, exact, under qemu-aarch64 with the package's
  core: rpi5 packages (Cortex-A76: FP16, dot product) and rpi4 packages
  (Cortex-A72); the int16 pair also on mps2-an386 (Cortex-M4).

Every package's output is checked against the interpreter's first (float16
within a half's tolerance, integers bit-exact).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aot.errors import AotError  # noqa: E402

# (the board a package is built for, the board that counts its instructions)
ARM_COUNTS = (("rpi5", "qemu-aarch64"), ("rpi4", "qemu-aarch64"))
COUNT_BOARDS = {"half": ARM_COUNTS, "int16": ARM_COUNTS + (("mps2-an386", "mps2-an386"),)}


def pairs() -> dict:
    from aot.frontend.source import ModelBytes
    from aot.testing.twins import onnx_classifier, tflite_conv3x3
    return {
        "half": (ModelBytes(onnx_classifier("float16"), "onnx"),
                 ModelBytes(onnx_classifier("float32"), "onnx")),
        "int16": (ModelBytes(tflite_conv3x3("int16"), "tflite"),
                  ModelBytes(tflite_conv3x3("int8"), "tflite")),
    }


def host_board():
    """host-avx512 where this CPU runs it, else host."""
    from aot.deploy.host import check_cpu
    from aot.targets import get_board
    try:
        return check_cpu(get_board("host-avx512")) or get_board("host-avx512")
    except AotError:
        return get_board("host")


def inputs_of(graph, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for name in graph.inputs:
        t = graph.types[name]
        if np.dtype(t.dtype).kind == "f":
            out.append(rng.standard_normal(t.shape).astype(t.dtype))
        else:
            info = np.iinfo(t.dtype)
            out.append(rng.integers(info.min, info.max + 1, t.shape).astype(t.dtype))
    return out


def check(pkg: Path, board, graph, inputs) -> None:
    """The package's outputs against the interpreter's (float16 within a
    half's tolerance, as aot verify compares them; integers bit-exact)."""
    from aot.deploy import run_package
    from aot.interp import interpret
    want = interpret(graph, dict(zip(graph.inputs, inputs)))
    got = run_package(pkg, board, inputs).outputs
    for name, g in zip(graph.outputs, got):
        w = want[name]
        if np.dtype(w.dtype).kind == "f":
            np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32),
                                       rtol=2.0 ** -9, atol=2.0 ** -10, err_msg=str(pkg))
        else:
            np.testing.assert_array_equal(g, w, err_msg=str(pkg))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", default="half,int16")
    p.add_argument("--codegen", default="c,llvm")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--batch", type=int, default=200)
    p.add_argument("--no-time", action="store_true")
    p.add_argument("--no-count", action="store_true")
    p.add_argument("--host", help="the board of this machine to time on (default: host-avx512 "
                   "where this CPU runs it, else host)")
    args = p.parse_args()

    import aot
    from aot.check.timing import interleave, stats_of, time_package
    from aot.deploy import run_package
    from aot.targets import get_board

    all_pairs = pairs()
    chosen = args.pairs.split(",")
    if unknown := set(chosen) - set(all_pairs):
        raise AotError(f"--pairs: no pair {', '.join(sorted(unknown))} "
                       f"(there are {', '.join(all_pairs)})")
    host = get_board(args.host) if args.host else host_board()
    with tempfile.TemporaryDirectory(prefix="aot-twins-") as tmp:
        for name in chosen:
            first, twin = all_pairs[name]
            graphs = [aot.optimize(aot.load(m)) for m in (first, twin)]
            ins = [inputs_of(g) for g in graphs]
            for cg in args.codegen.split(","):
                if not args.no_time:
                    pkgs = [aot.package(m, host.name, cg, out_dir=Path(tmp) / f"{name}{i}{cg}").path
                            for i, m in enumerate((first, twin))]
                    for pkg, g, x in zip(pkgs, graphs, ins):
                        check(pkg, host, g, x)
                    times = interleave({i: (lambda i=i: time_package(
                        pkgs[i], host, ins[i], 20, args.batch)) for i in (0, 1)}, args.rounds)
                    med = [stats_of(times[i]).median_ms * 1e3 for i in (0, 1)]
                    print(f"{name} {cg} {host.name}: {med[0]:.2f} us / {med[1]:.2f} us = "
                          f"{med[0] / med[1]:.2f}x time", flush=True)
                if args.no_count:
                    continue
                for built_for, counter in COUNT_BOARDS[name]:
                    counts = []
                    board = get_board(counter)
                    for i, m in enumerate((first, twin)):
                        pkg = aot.package(m, built_for, cg,
                                          out_dir=Path(tmp) / f"{name}{i}{cg}{built_for}").path
                        check(pkg, board, graphs[i], ins[i])
                        counts.append(int(np.median(run_package(pkg, board, ins[i], 1, 3)
                                                    .instructions)))
                    print(f"{name} {cg} {built_for} ({counter}): {counts[0]:,} / {counts[1]:,}"
                          f" = {counts[0] / counts[1]:.2f}x instructions", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

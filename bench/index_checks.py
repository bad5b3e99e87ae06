#!/usr/bin/env python3
"""What the run-time index checks cost where indices are not constants.

    .venv/bin/python bench/index_checks.py [--board host] [--rounds 15] [--batch 200]

Each workload is a one-node ONNX model whose indices are a model input:
an embedding lookup (PyTorch's nn.Embedding: Gather on axis 0 of a weight
with int64 ids) with wide and with narrow rows, GatherElements, GatherND
and ScatterND. Each is packaged twice for the board:

- checked: as aot builds it, every index checked before use
  (aot/lower/arith/bounds.py);
- unchecked: the same lowering with the checks left out of the TIR (this
  script swaps bounds' precheck and fail_if for no-ops while it
  packages; aot itself has no switch that turns the checks off).

Constant indices need no comparison: they are checked while packaging and
the kernel has no check (tests/lower/arith/test_bounds.py). Both packages are timed
by their own harness in interleaved rounds, pinned to one core; the table
gives the median per-run time of each and checked / unchecked (1.00: free).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aot.check.timing import interleave, pin_to_one_core, stats_of, time_package  # noqa: E402

WARMUP = 20


def workloads(rng: np.random.Generator) -> dict[str, tuple]:
    """name -> (onnx model, inputs): indices in range, as a model meets them."""
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    def model(node, inputs, inits):
        g = h.make_graph([node], "bench", inputs, [h.make_tensor_value_info("y", T.FLOAT, None)],
                         [nh.from_array(v, k) for k, v in inits.items()])
        return h.make_model(g, opset_imports=[h.make_opsetid("", 18)])

    def vi(name, shape, elem=T.INT64):
        return h.make_tensor_value_info(name, elem, list(shape))

    def table(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    out = {}
    for label, (vocab, dim, n) in {"embedding 1000x64, 128 ids": (1000, 64, 128),
                                   "embedding 1000x4, 4096 ids": (1000, 4, 4096)}.items():
        out[label] = (model(h.make_node("Gather", ["w", "ids"], ["y"], axis=0),
                            [vi("ids", (n,))], {"w": table(vocab, dim)}),
                      [rng.integers(-vocab, vocab, n)])
    out["GatherElements 64x256, axis 1"] = (
        model(h.make_node("GatherElements", ["x", "ids"], ["y"], axis=1),
              [vi("ids", (64, 256))], {"x": table(64, 256)}),
        [rng.integers(-256, 256, (64, 256))])
    out["GatherND 256x64, 128 rows"] = (
        model(h.make_node("GatherND", ["x", "ids"], ["y"]), [vi("ids", (128, 1))],
              {"x": table(256, 64)}),
        [rng.integers(-256, 256, (128, 1))])
    out["ScatterND 1000x64, 128 rows"] = (
        model(h.make_node("ScatterND", ["x", "ids", "u"], ["y"]), [vi("ids", (128, 1))],
              {"x": table(1000, 64), "u": table(128, 64)}),
        [rng.choice(1000, (128, 1), replace=False)])
    return {k: (m, [a.astype(np.int64) for a in ins]) for k, (m, ins) in out.items()}


@contextlib.contextmanager
def checks_left_out():
    """Package without the index checks: bounds' helpers as no-ops where the
    rules call them."""
    import aot.lower.rules.index as index
    import aot.lower.rules.tensor as injective
    from aot.ir.tir import Comment

    saved = (injective.precheck, index.precheck, index.fail_if)
    injective.precheck = index.precheck = lambda *a, **k: None
    index.fail_if = lambda *a, **k: Comment("index not checked (bench)")
    try:
        yield
    finally:
        injective.precheck, index.precheck, index.fail_if = saved


def build(name: str, model, board, codegen: str, work: Path) -> dict[str, Path]:
    import onnx

    from aot.api import package

    stem = "".join(c if c.isalnum() else "_" for c in name)
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"{stem}.onnx"
    onnx.save(model, path)
    pkgs = {"checked": package(path, board=board, codegen=codegen,
                               out_dir=work / f"{stem}_checked").path}
    with checks_left_out():
        pkgs["unchecked"] = package(path, board=board, codegen=codegen,
                                    out_dir=work / f"{stem}_unchecked").path
    checks = json.loads((pkgs["checked"] / "metadata.json").read_text())["index_checks"]
    assert checks and not json.loads((pkgs["unchecked"] / "metadata.json").read_text()
                                     )["index_checks"]
    return pkgs


def main(argv: list[str] | None = None) -> int:
    from aot.targets import get_board

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--board", default="host")
    p.add_argument("--codegen", default="c,llvm")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--batch", type=int, default=200, help="timed runs per round")
    p.add_argument("--cpu", type=int, help="the core to pin to (default: the last one)")
    p.add_argument("--json", help="also write the rows to this file")
    args = p.parse_args(argv)
    board = get_board(args.board)
    cpu = pin_to_one_core(args.cpu)
    rows = []
    print(f"board {board.name}, pinned to CPU {cpu}, {args.rounds} rounds of {args.batch} runs")
    print(f"{'workload':<32} {'codegen':<7} {'checked us':>11} {'unchecked us':>13} "
          f"{'ratio':>6}")
    with tempfile.TemporaryDirectory(prefix="aot-bench-checks-") as tmp:
        for name, (model, inputs) in workloads(np.random.default_rng(0)).items():
            for codegen in args.codegen.split(","):
                pkgs = build(name, model, board, codegen, Path(tmp) / codegen)
                times = interleave({k: (lambda p=p: time_package(p, board, inputs, WARMUP,
                                                                 args.batch))
                                    for k, p in pkgs.items()}, args.rounds)
                med = {k: stats_of(v).median_ms * 1000 for k, v in times.items()}
                ratio = med["checked"] / med["unchecked"]
                rows.append({"workload": name, "codegen": codegen, "checked_us": med["checked"],
                             "unchecked_us": med["unchecked"], "ratio": ratio})
                print(f"{name:<32} {codegen:<7} {med['checked']:>11.2f} "
                      f"{med['unchecked']:>13.2f} {ratio:>6.2f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

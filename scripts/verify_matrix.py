#!/usr/bin/env python
"""`aot verify` for every shared model on every emulated Linux board with
both code generators, sharing what does not depend on the board:

    scripts/verify_matrix.py [--boards qemu-aarch64,...] [--codegens c,llvm]
                             [--models GLOB] [--jobs N] [--json FILE] [--target NAME]

Per model the graph is loaded and optimized once, the input read once and
the reference runtime run once; then one package per (board, codegen) is
built (lowered for that board's target, compiled by clang for it) and run on
the board through its transport. Each check is what aot.api.verify does
(same steps, same comparison: integers bit-exact, floats within rtol = atol
= 1e-4). Prints a model x (board, codegen) table of max |error| and the
time spent per board; exit 1 when any check fails. --target builds every
board's packages with that target in place of the board's own (as `aot
verify --target`): `--target generic-c99 --codegens c` checks portable C
built by each board's GCC, `generic-c99-clang` by its clang.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
MODELS = Path(os.environ.get("AOT_SHARED", REPO.parent / "shared")) / "models"
BOARDS = ("qemu-aarch64", "qemu-armv7", "qemu-riscv64")
CODEGENS = ("c", "llvm")


@dataclass
class Prepared:
    """A model's board-independent half of a verify: graph, input, reference."""
    path: Path
    graph: object
    origin: str
    inputs: list
    reference: str
    want: list


def prepare(path: Path, seed: int = 0) -> Prepared:
    import aot
    from aot.api import as_graph
    from aot.check.reference import reference_outputs, saved_or_random_inputs

    graph = as_graph(aot.load(path))
    origin, inputs, _ = saved_or_random_inputs(path, graph, seed)
    reference, want = reference_outputs(path, graph, inputs)
    return Prepared(path, graph, origin, inputs, reference, want)


def verify_prepared(p: Prepared, board: str, codegen: str,
                    inspect: Callable[[Path], None] | None = None,
                    target: str | None = None) -> dict:
    """One cell: package for (board, codegen), run there, compare.
    `inspect(package_dir)` runs before the package is removed; `target`
    replaces the board's own (aot.targets.on_board)."""
    from aot.api import package
    from aot.deploy import run_package
    from aot.check.reference import compare
    from aot.packaging.build import check_fits
    from aot.targets import get_board, get_target, on_board

    brd = get_board(board)
    if target:
        brd = on_board(brd, get_target(target))
    check_fits(p.graph, brd)
    with tempfile.TemporaryDirectory(prefix="aot-matrix-") as tmp:
        t0 = time.perf_counter()
        info = package(p.graph, board=brd, codegen=codegen, out_dir=Path(tmp) / "pkg")
        t1 = time.perf_counter()
        got = run_package(info.path, brd, p.inputs, warmup=0, runs=1).outputs
        t2 = time.perf_counter()
        if inspect is not None:
            inspect(info.path)
    if len(got) != len(p.want):
        rows = [{"name": "outputs", "max_abs_err": None, "ok": False,
                 "error": f"{len(got)} outputs, reference {len(p.want)}"}]
    else:
        rows = [compare(n, g, w) for n, g, w in zip(p.graph.outputs, got, p.want)]
    errs = [r["max_abs_err"] for r in rows if r["max_abs_err"] is not None]
    return {"model": p.path.name, "board": board, "codegen": codegen,
            "reference": p.reference, "inputs": p.origin,
            "ok": all(r["ok"] for r in rows), "outputs": rows,
            "max_abs_err": max(errs) if len(errs) == len(rows) else None,
            "package_s": round(t1 - t0, 3), "run_s": round(t2 - t1, 3)}


def _model_cells(job: tuple[str, tuple[str, ...], tuple[str, ...], str | None]) -> list[dict]:
    path, boards, codegens, target = job
    t0 = time.perf_counter()
    p = prepare(Path(path))
    prep_s = time.perf_counter() - t0
    cells = []
    for board in boards:
        for codegen in codegens:
            try:
                cell = verify_prepared(p, board, codegen, target=target)
            except Exception as e:      # one broken cell must not hide the others
                cell = {"model": p.path.name, "board": board, "codegen": codegen, "ok": False,
                        "max_abs_err": None, "error": f"{type(e).__name__}: {e}",
                        "package_s": 0.0, "run_s": 0.0}
            cell["prepare_s"] = round(prep_s, 3)
            cells.append(cell)
    return cells


def _cell_text(c: dict) -> str:
    if c.get("error"):
        return "ERROR"
    err = c["max_abs_err"]
    return f"{'ok' if c['ok'] else 'FAIL'} {err:.2g}" if err is not None else "FAIL"


def table(cells: list[dict], boards, codegens) -> str:
    by = {(c["model"], c["board"], c["codegen"]): c for c in cells}
    models = sorted({c["model"] for c in cells})
    cols = [(b, g) for b in boards for g in codegens]
    width = max(len(m) for m in models)
    head = f"{'model':<{width}}  " + "  ".join(f"{b}/{g:<4}"[:18].ljust(18) for b, g in cols)
    lines = [head, "-" * len(head)]
    for m in models:
        lines.append(f"{m:<{width}}  " + "  ".join(
            _cell_text(by[(m, b, g)]).ljust(18) if (m, b, g) in by else "-".ljust(18)
            for b, g in cols))
    lines.append("")
    lines.append(f"{'board':<14} {'codegen':<8} {'cells':>5} {'ok':>4} {'package s':>10} "
                 f"{'run s':>8}")
    for b, g in cols:
        sel = [c for c in cells if c["board"] == b and c["codegen"] == g]
        lines.append(f"{b:<14} {g:<8} {len(sel):>5} {sum(c['ok'] for c in sel):>4} "
                     f"{sum(c['package_s'] for c in sel):>10.1f} "
                     f"{sum(c['run_s'] for c in sel):>8.1f}")
    errors = [c for c in cells if c.get("error")]
    for c in errors:
        lines.append(f"error {c['model']} {c['board']} {c['codegen']}: {c['error']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--boards", default=",".join(BOARDS))
    ap.add_argument("--codegens", default=",".join(CODEGENS))
    ap.add_argument("--models", default="*", help="a glob in ../shared/models (default: all)")
    ap.add_argument("--jobs", type=int, default=2, help="models verified at once (default 2)")
    ap.add_argument("--json", metavar="FILE", help="also write every cell as JSON")
    ap.add_argument("--target", metavar="NAME",
                    help="build with this target in place of each board's (e.g. generic-c99)")
    args = ap.parse_args(argv)
    boards, codegens = tuple(args.boards.split(",")), tuple(args.codegens.split(","))
    models = sorted(p for p in MODELS.glob(args.models) if p.suffix in (".onnx", ".tflite"))
    if not models:
        print(f"no models match {args.models} in {MODELS}", file=sys.stderr)
        return 2
    jobs = [(str(m), boards, codegens, args.target) for m in models]
    start = time.perf_counter()
    cells: list[dict] = []
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        for got in pool.imap_unordered(_model_cells, jobs):
            cells += got
            print(f"{got[0]['model']}: " + " ".join(_cell_text(c) for c in got),
                  file=sys.stderr, flush=True)
    wall = time.perf_counter() - start
    print(table(cells, boards, codegens))
    print(f"\n{len(cells)} checks, {sum(c['ok'] for c in cells)} ok, {wall:.0f} s wall "
          f"with {args.jobs} jobs")
    if args.json:
        Path(args.json).write_text(json.dumps(cells, indent=1, sort_keys=True) + "\n")
    return 0 if all(c["ok"] for c in cells) else 1


if __name__ == "__main__":
    sys.exit(main())

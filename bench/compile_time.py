#!/usr/bin/env python3
"""How long `aot package` takes on the MLPerf Tiny models, and where it goes.

    .venv/bin/python bench/compile_time.py [--models kws,vww,ic,ad] [--codegen c,llvm]
                                           [--board host] [--repeat N] [--json FILE]

For every model (int8 and float) and codegen this runs, N times each:

- `python -m aot package MODEL --board B --codegen C -o DIR --force` as a
  fresh process: its wall time is the number the 5 s budget is about
  (interpreter start-up and imports included);
- the same packaging in a child process that wraps the pipeline's stages
  with timers, for the split: import (aot and its dependencies), load
  (frontend + passes), lower (TIR, views elided), plan (both arena plans),
  params, codegen (C printing or LLVM objects), render (templates),
  compile (the library's sources, in parallel), archive, harness (the
  bench harness link), other (writing files, metadata, footprint).

Each row shows the fastest of the N runs (the machine is shared: the
minimum is the least disturbed), its CPU time (user + sys, children
included) and the load average when the row was measured.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("AOT_SHARED", REPO.parent / "shared"))
MODELS = SHARED / "models"
FAMILIES = {"kws": "mlperf_kws_dscnn", "vww": "mlperf_vww_mbv1",
            "ic": "mlperf_ic_resnet8", "ad": "mlperf_ad_fcae"}
PHASES = ("import", "load", "lower", "plan", "params", "codegen", "render", "compile",
          "archive", "harness", "other")
BUDGET_S = 5.0


# ------------------------------------------------------------------ the child

def _timed(table: dict, phase: str, module, attr: str) -> None:
    """Wrap module.attr so its calls add their wall time to table[phase]
    (absent in an older aot: nothing to wrap)."""
    inner = getattr(module, attr, None)
    if inner is None:
        return

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            table[phase] = table.get(phase, 0.0) + time.perf_counter() - start
    setattr(module, attr, wrapper)


def child(model: str, board: str, codegen: str, out: str) -> None:
    """Package once with the stages timed; print the phases as JSON."""
    start = time.perf_counter()
    sys.path.insert(0, str(REPO))
    import aot
    import aot.api
    import aot.codegen
    import aot.codegen.llvm
    import aot.lower
    import aot.packaging.build
    import aot.packaging.toolchain
    table = {"import": time.perf_counter() - start}
    wraps = [("load", aot, "load"), ("load", aot, "optimize"), ("lower", aot.lower, "lower_graph"),
             ("lower", aot.packaging.build, "elide_views"), ("plan", aot.packaging.build, "plan_kernels"),
             ("params", aot.packaging.build, "link_params"), ("codegen", aot.codegen, "emit_c"),
             ("codegen", aot.codegen, "c_declarations"),
             ("codegen", aot.codegen.llvm, "emit_objects"),
             ("codegen", aot.codegen.llvm, "emit_object"), ("render", aot.packaging.build, "render"),
             ("compile", aot.packaging.toolchain, "compile_sources"),
             ("archive", aot.packaging.toolchain, "archive"),
             ("harness", aot.packaging.toolchain, "build_harness")]
    for phase, module, attr in wraps:
        _timed(table, phase, module, attr)
    body = time.perf_counter()
    aot.api.package(model, board=board, codegen=codegen, out_dir=out, force=True)
    total = time.perf_counter() - start
    table["other"] = (time.perf_counter() - body) - sum(v for k, v in table.items()
                                                       if k != "import")
    print(json.dumps({"total": total, **table}))


# ----------------------------------------------------------------- the parent

def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _run(argv: list[str]) -> tuple[float, float, str]:
    """(wall s, cpu s, stdout) of one child process."""
    cpu, start = _cpu_children(), time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - start
    if r.returncode != 0:
        sys.exit(f"compile_time: {' '.join(argv)} failed:\n{r.stderr.strip()[-2000:]}")
    return wall, _cpu_children() - cpu, r.stdout


def measure(model: Path, board: str, codegen: str, repeat: int, tmp: Path) -> dict:
    out = str(tmp / f"{model.stem}_{codegen}")
    cli = [sys.executable, "-m", "aot", "package", str(model), "--board", board,
           "--codegen", codegen, "-o", out, "--force"]
    split = [sys.executable, __file__, "--child", str(model), board, codegen, out]
    walls, cpus, phases = [], [], []
    for _ in range(repeat):
        wall, cpu, _ = _run(cli)
        walls.append(wall)
        cpus.append(cpu)
        phases.append(json.loads(_run(split)[2].strip().splitlines()[-1]))
    best = min(range(repeat), key=lambda i: walls[i])
    return {"model": model.stem, "codegen": codegen, "board": board,
            "wall_s": walls[best], "cpu_s": cpus[best], "walls_s": walls,
            "phases_s": min(phases, key=lambda p: p["total"]),
            "load": os.getloadavg()[0]}


def table(rows: list[dict]) -> str:
    head = ["model", "cg", "wall s", "cpu s", *PHASES, "loadavg"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        p = r["phases_s"]
        mark = "" if r["wall_s"] < BUDGET_S else " (over)"
        lines.append("| " + " | ".join([r["model"], r["codegen"], f"{r['wall_s']:.2f}{mark}",
                                        f"{r['cpu_s']:.2f}",
                                        *(f"{p.get(k, 0.0):.2f}" for k in PHASES),
                                        f"{r['load']:.1f}"]) + " |")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:6])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="kws,vww,ic,ad",
                    help=f"comma-separated families ({', '.join(FAMILIES)})")
    ap.add_argument("--codegen", default="c,llvm", help="comma-separated: c, llvm")
    ap.add_argument("--board", default="host")
    ap.add_argument("--repeat", type=int, default=3, help="runs per row (the fastest is shown)")
    ap.add_argument("--json", help="also write every number to this file")
    args = ap.parse_args()
    families = args.models.split(",")
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        ap.error(f"unknown model family {unknown[0]} (known: {', '.join(FAMILIES)})")
    rows = []
    with tempfile.TemporaryDirectory(prefix="aot-ct-") as tmp:
        for fam in families:
            for kind in ("int8", "f32"):
                for codegen in args.codegen.split(","):
                    model = MODELS / f"{FAMILIES[fam]}_{kind}.tflite"
                    rows.append(measure(model, args.board, codegen, args.repeat, Path(tmp)))
                    print(f"{rows[-1]['model']} {codegen}: {rows[-1]['wall_s']:.2f} s",
                          file=sys.stderr)
    print(f"aot package on board {args.board}, fastest of {args.repeat}, "
          f"{os.cpu_count()} cores; budget {BUDGET_S:.0f} s per model")
    print(table(rows))
    worst = max(rows, key=lambda r: r["wall_s"])
    print(f"slowest: {worst['model']} {worst['codegen']} {worst['wall_s']:.2f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()

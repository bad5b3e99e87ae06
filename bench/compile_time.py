#!/usr/bin/env python3
"""How long `aot package` takes on the MLPerf Tiny models, and where it goes.

    .venv/bin/python bench/compile_time.py [--models kws,vww,ic,ad] [--codegen c,llvm]
                                           [--board host] [--repeat N] [--json FILE]
                                           [--detector] [--cold]

For every model (int8 and float), with --detector also a 7.5 MB float
detector (bench/detector_model.py), and codegen this runs, N times each:

- `python -m aot package MODEL --board B --codegen C -o DIR --force` as a
  fresh process: its wall time is the number the budgets are about (1 s a
  model, 3 s the detector; interpreter start-up and imports included),
  its CPU time (user + sys, the compilers it ran included) and its peak RSS
  (the budget: 250 MB);
- the same packaging in a child process that wraps the pipeline's stages
  with timers, for the split: import (aot and its dependencies), load
  (frontend + passes), lower (TIR, views elided), plan (both arena plans),
  params, codegen (C printing or LLVM objects), render (templates),
  compile (waiting for the compilers: each source compiles from when it
  is written, in parallel, so this is what is left after the Python
  work), archive, harness (the bench harness link), other (writing
  files, metadata, footprint).

aot keeps compiled objects and templates in its cache ($AOT_CACHE_DIR,
~/.cache/aot): every run after a model's first takes them from there, as
packaging a model again does. --cold gives every run a cache of its own,
empty: what the first packaging of a model costs.

Each row shows the fastest of the N runs (the machine is shared: the
minimum is the least disturbed), its CPU time, the largest RSS of the N
and the load average when the row was measured.
"""
from __future__ import annotations

import argparse
import json
import os
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
BUDGET_S = 1.0             # each MLPerf Tiny model
DETECTOR = "detector"      # bench/detector_model.py's 7.5 MB model (--detector)
DETECTOR_BUDGET_S = 3.0
RSS_BUDGET_MB = 250


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
    if codegen == "llvm":       # imported when used, as aot does
        import aot.codegen.llvm
    import aot.lower
    import aot.packaging.build
    import aot.packaging.toolchain
    table = {"import": time.perf_counter() - start}
    wraps = [("load", aot, "load"), ("load", aot, "optimize"), ("lower", aot.lower, "lower_graph"),
             ("lower", aot.packaging.build, "elide_views"), ("plan", aot.packaging.build, "plan_kernels"),
             ("params", aot.packaging.build, "link_params"), ("codegen", aot.codegen, "emit_c"),
             ("codegen", aot.codegen, "c_declarations"),
             *([("codegen", aot.codegen.llvm, "emit_objects"),
                ("codegen", aot.codegen.llvm, "emit_object")] if codegen == "llvm" else []),
             ("render", aot.packaging.build, "render"),
             ("compile", aot.packaging.toolchain, "compile_sources"),
             ("compile", getattr(aot.packaging.toolchain, "CompilePool", None), "wait"),
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

def _run(argv: list[str], env: dict | None = None) -> tuple[float, float, float, str]:
    """(wall s, cpu s, peak RSS MB, stdout) of one child process (its cpu
    and RSS with the compilers it waited for: wait4's accounting)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, cwd=REPO, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            sys.exit(f"compile_time: {' '.join(argv)} failed:\n"
                     f"{err.read().decode(errors='replace').strip()[-2000:]}")
        return (wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024,
                out.read().decode())


def measure(model: Path, board: str, codegen: str, repeat: int, tmp: Path,
            cold: bool = False) -> dict:
    out = str(tmp / f"{model.stem}_{codegen}")
    cli = [sys.executable, "-m", "aot", "package", str(model), "--board", board,
           "--codegen", codegen, "-o", out, "--force"]
    split = [sys.executable, __file__, "--child", str(model), board, codegen, out]
    walls, cpus, rss, phases = [], [], [], []
    for run in range(repeat):
        env = None
        if cold:         # a cache of its own for each run: nothing compiled before
            env = {**os.environ, "AOT_CACHE_DIR": tempfile.mkdtemp(prefix="cache-", dir=tmp)}
        wall, cpu, mb, _ = _run(cli, env)
        walls.append(wall)
        cpus.append(cpu)
        rss.append(mb)
        if cold:
            env = {**os.environ, "AOT_CACHE_DIR": tempfile.mkdtemp(prefix="cache-", dir=tmp)}
        phases.append(json.loads(_run(split, env)[3].strip().splitlines()[-1]))
    best = min(range(repeat), key=lambda i: walls[i])
    return {"model": model.stem, "codegen": codegen, "board": board,
            "wall_s": walls[best], "cpu_s": cpus[best], "walls_s": walls,
            "cpus_s": cpus, "rss_mb": max(rss),
            "phases_s": min(phases, key=lambda p: p["total"]),
            "load": os.getloadavg()[0]}


def stale_bytecode() -> str | None:
    """An aot module without its up-to-date .pyc (the first found), else None."""
    import importlib.util
    for source in sorted((REPO / "aot").rglob("*.py")):
        cached = Path(importlib.util.cache_from_source(str(source)))
        if not cached.exists() or cached.stat().st_mtime < source.stat().st_mtime:
            return str(source.relative_to(REPO))
    return None


def budget(row: dict) -> float:
    return DETECTOR_BUDGET_S if row["model"] == DETECTOR else BUDGET_S


def table(rows: list[dict]) -> str:
    head = ["model", "cg", "wall s", "cpu s", "RSS MB", *PHASES, "loadavg"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        p = r["phases_s"]
        mark = "" if r["wall_s"] <= budget(r) else " (over)"
        rss = "" if r["rss_mb"] <= RSS_BUDGET_MB else " (over)"
        lines.append("| " + " | ".join([r["model"], r["codegen"], f"{r['wall_s']:.2f}{mark}",
                                        f"{r['cpu_s']:.2f}", f"{r['rss_mb']:.0f}{rss}",
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
    ap.add_argument("--cold", action="store_true",
                    help="an empty cache for every run (nothing compiled before)")
    ap.add_argument("--detector", action="store_true",
                    help="also the 7.5 MB float detector of bench/detector_model.py")
    args = ap.parse_args()
    stale = stale_bytecode()
    if stale:
        print(f"compile_time: {stale} has no compiled bytecode, so every run compiles aot's "
              f"modules first (~0.3 s; PYTHONDONTWRITEBYTECODE keeps Python from writing "
              f"it): run `python -m compileall -q aot` for an installed aot's times",
              file=sys.stderr)
    families = args.models.split(",")
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        ap.error(f"unknown model family {unknown[0]} (known: {', '.join(FAMILIES)})")
    rows = []
    with tempfile.TemporaryDirectory(prefix="aot-ct-") as tmp:
        if args.detector:
            from detector_model import build
            model = Path(tmp) / f"{DETECTOR}.onnx"
            build(model)
            for codegen in args.codegen.split(","):
                rows.append(measure(model, args.board, codegen, args.repeat, Path(tmp),
                                    args.cold))
                print(f"{DETECTOR} {codegen}: {rows[-1]['wall_s']:.2f} s", file=sys.stderr)
        for fam in families:
            for kind in ("int8", "f32"):
                for codegen in args.codegen.split(","):
                    model = MODELS / f"{FAMILIES[fam]}_{kind}.tflite"
                    rows.append(measure(model, args.board, codegen, args.repeat, Path(tmp),
                                    args.cold))
                    print(f"{rows[-1]['model']} {codegen}: {rows[-1]['wall_s']:.2f} s",
                          file=sys.stderr)
    print(f"aot package on board {args.board}, fastest of {args.repeat}, "
          f"{os.cpu_count()} cores; budget {BUDGET_S:.1f} s per model "
          f"({DETECTOR_BUDGET_S:.0f} s the detector), {RSS_BUDGET_MB} MB peak RSS; "
          f"{'an empty cache each run' if args.cold else 'objects cached after the first run'}")
    print(table(rows))
    worst = max(rows, key=lambda r: r["wall_s"])
    print(f"slowest: {worst['model']} {worst['codegen']} {worst['wall_s']:.2f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()

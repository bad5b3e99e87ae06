#!/usr/bin/env python3
"""Every MLPerf Tiny model in ../shared/models on the emulated Pi 4:
`aot verify MODEL --board qemu-rpi4` and `aot bench MODEL --board qemu-rpi4
--json --profile`, then one table (verify result, median/min ms, the
slowest kernel and its share).

Each command boots and stops its own VM, as a user's would; with --up the
script keeps one VM up for the whole matrix (aot board up/down), which is
faster. Times are the emulator's on this machine (see the bench note).

    .venv/bin/python scripts/rpi4_matrix.py [--up] [--repeat N] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODELS = Path(os.environ.get("AOT_SHARED", REPO.parent / "shared")) / "models"
BOARD = "qemu-rpi4"


def aot(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aot", *args], capture_output=True, text=True,
                          timeout=1800)


def error_of(r: subprocess.CompletedProcess) -> str:
    lines = r.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit {r.returncode}"


def cell(model: Path, repeat: int) -> dict:
    row: dict = {"model": model.stem}
    t0 = time.monotonic()
    r = aot("verify", str(model), "--board", BOARD, "--json")
    row["verify_s"] = round(time.monotonic() - t0, 1)
    try:
        v = json.loads(r.stdout.strip().splitlines()[-1])
        row["verify"] = "OK" if v.get("ok") else ("MISMATCH" if "outputs" in v else "ERROR")
        row["max_abs_err"] = max((o.get("max_abs_err") or 0) for o in v.get("outputs", [{}]))
        if "error" in v:
            row["verify_error"] = v["error"]
    except (ValueError, IndexError):
        row["verify"], row["verify_error"] = "ERROR", error_of(r)
    t0 = time.monotonic()
    r = aot("bench", str(model), "--board", BOARD, "--json", "--profile",
            "--repeat", str(repeat), "--warmup", "2")
    row["bench_s"] = round(time.monotonic() - t0, 1)
    if r.returncode != 0:
        row["bench_error"] = error_of(r)
        return row
    b = json.loads(r.stdout)
    row.update(median_ms=b["median_ms"], min_ms=b["min_ms"])
    kernels = b.get("profile") or []
    if kernels:
        top = max(kernels, key=lambda k: k.get("median_ms", 0))
        row["top_kernel"] = top.get("name", "?")
        row["top_share"] = top.get("share")
        row["kernels"] = len(kernels)
    return row


def print_table(rows: list[dict]) -> None:
    print(f"{'MODEL':<26} {'VERIFY':<8} {'MAX ERR':>9} {'MEDIAN ms':>10} {'MIN ms':>9} "
          f"{'KERNELS':>7}  SLOWEST KERNEL (SHARE)   VERIFY s  BENCH s")
    for r in rows:
        share = r.get("top_share")
        top = f"{r.get('top_kernel', '-')[:18]} ({share:.0%})" if share is not None else "-"
        err = r.get("max_abs_err")
        err = f"{err:.2g}" if err is not None else "-"
        print(f"{r['model']:<26} {r['verify']:<8} {err:>9} "
              f"{r.get('median_ms', float('nan')):>10.3f} {r.get('min_ms', float('nan')):>9.3f} "
              f"{r.get('kernels', '-'):>7}  {top:<24} {r['verify_s']:>8} {r['bench_s']:>8}")
        for key in ("verify_error", "bench_error"):
            if key in r:
                print(f"    {key}: {r[key]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--up", action="store_true", help="one VM for the whole matrix")
    ap.add_argument("--repeat", type=int, default=20, help="timed runs per bench (default 20)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON too")
    args = ap.parse_args()
    models = sorted(p for p in MODELS.glob("mlperf_*.tflite"))
    if not models:
        print(f"no mlperf_*.tflite in {MODELS}", file=sys.stderr)
        return 2
    if args.up:
        r = aot("board", "up", BOARD)
        if r.returncode != 0:
            print(error_of(r), file=sys.stderr)
            return 2
    t0 = time.monotonic()
    try:
        rows = []
        for m in models:
            rows.append(cell(m, args.repeat))
            print(f"{m.stem}: {rows[-1]['verify']} ({rows[-1]['verify_s']} s + "
                  f"{rows[-1]['bench_s']} s)", file=sys.stderr)
    finally:
        if args.up:
            aot("board", "down", BOARD)
    print_table(rows)
    print(f"{len(rows)} models in {time.monotonic() - t0:.0f} s "
          f"({'one VM kept up' if args.up else 'each command booted its own VM'})")
    if args.json:
        print(json.dumps(rows, indent=1))
    ok = all(r["verify"] == "OK" and "bench_error" not in r for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

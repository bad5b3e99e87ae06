#!/usr/bin/env python3
"""The long runtime fuzz run: small random models packaged under ASan and
UBSan and run on hostile inputs (aot/testing/fuzz/runtime.py).

    .venv/bin/python scripts/fuzz_runtime.py --models 400 --cases 16 --jobs 2

Model i is aot.testing.fuzz.runtime.random_model(--seed-start + i), packaged once
and run on --cases input sets (plain, hostile values, out-of-range indices,
both, in turn): models x cases runs. The run is deterministic; a model can
be replayed alone (--only SEED). Each model runs in a worker process; the
harness runs are child processes of those, so a sanitizer abort or a crash
fails its case only. Every failure leaves a reproducer in OUT/failures: the
model, its inputs (.npz, in the model's input order) and a .txt saying what
happened. The summary counts the runs by family and outcome.
"""
from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def one_model(job: tuple[int, int, str]) -> dict:
    from aot.testing.fuzz.runtime import fuzz_model

    seed, cases, root = job
    work = Path(tempfile.mkdtemp(prefix=f"m{seed}-", dir=root))
    try:
        report = fuzz_model(seed, cases, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"seed": seed, "family": report.family, "codegen": report.codegen,
            "detail": report.detail, "seconds": round(report.seconds, 3),
            "results": [[r.status, r.kind, r.message[:500]] for r in report.results]}


def save_reproducer(out: Path, seed: int, case: int, result: list) -> None:
    import numpy as np

    from aot.testing.fuzz.runtime import random_model, replay_inputs

    model = random_model(seed)
    failures = out / "failures"
    failures.mkdir(parents=True, exist_ok=True)
    stem = f"model{seed}_case{case}"
    (failures / f"model{seed}.onnx").write_bytes(model.data)
    np.savez(failures / f"{stem}.npz", **{s.name: a for s, a in
                                          zip(model.inputs, replay_inputs(seed, case))})
    (failures / f"{stem}.txt").write_text(
        f"model {seed} ({model.family}): {model.detail}\ncase {case}: {result[1]}: "
        f"{result[2]}\nreplay: .venv/bin/python scripts/fuzz_runtime.py --only {seed} "
        f"--cases {case + 1}\n")


def summarize(rows: list[dict], seconds: float) -> str:
    runs = [(row["family"], r[0], r[1]) for row in rows for r in row["results"]]
    status = collections.Counter(s for _, s, _ in runs)
    lines = [f"fuzz_runtime: {len(rows)} models, {len(runs)} runs in {seconds:.0f} s: "
             f"{status['ok']} ran, {status['index_error']} stopped at an index check "
             f"(AOT_ERR_INDEX), {status['refused']} refused when packaging, "
             f"{status['failed']} failures", "",
             f"{'family':<8} {'ran':>6} {'index':>6} {'refused':>8} {'failed':>7}"]
    for family in sorted({f for f, _, _ in runs}):
        c = collections.Counter(s for f, s, _ in runs if f == family)
        lines.append(f"{family:<8} {c['ok']:>6} {c['index_error']:>6} {c['refused']:>8} "
                     f"{c['failed']:>7}")
    kinds = collections.Counter(k for _, s, k in runs if s == "failed")
    if kinds:
        lines += ["", "failures: " + ", ".join(f"{k} {n}" for k, n in kinds.most_common())]
    codegens = collections.Counter(row["codegen"] for row in rows)
    lines.append("\ncodegens: " + ", ".join(f"{k} {n} models" for k, n in sorted(codegens.items())))
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=int, default=400)
    p.add_argument("--cases", type=int, default=16, help="input sets per model")
    p.add_argument("--seed-start", type=int, default=0)
    p.add_argument("--only", type=int, nargs="*", help="model seeds to replay")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", default="build/fuzz_runtime")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = args.only or list(range(args.seed_start, args.seed_start + args.models))
    root = tempfile.mkdtemp(prefix="aot-fuzz-runtime-")
    rows: list[dict] = []
    t0 = time.monotonic()
    ctx = multiprocessing.get_context("fork")
    try:
        with open(out / "results.jsonl", "w") as log, ctx.Pool(args.jobs) as pool:
            for row in pool.imap_unordered(one_model, [(s, args.cases, root) for s in seeds]):
                rows.append(row)
                log.write(json.dumps(row, sort_keys=True) + "\n")
                for case, r in enumerate(row["results"]):
                    if r[0] == "failed":
                        print(f"FAIL model {row['seed']} case {case} {r[1]}: {r[2][:200]}",
                              flush=True)
                        save_reproducer(out, row["seed"], case, r)
                if len(rows) % 25 == 0:
                    print(f"{len(rows)}/{len(seeds)} models, {time.monotonic() - t0:.0f} s",
                          flush=True)
    except KeyboardInterrupt:
        print(f"interrupted: the summary covers the {len(rows)} models done", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    summary = summarize(sorted(rows, key=lambda r: r["seed"]), time.monotonic() - t0)
    (out / "summary.txt").write_text(summary + "\n")
    print(summary)
    return 1 if any(r[0] == "failed" for row in rows for r in row["results"]) else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The long fuzz run of what aot reads back (aot/testing/fuzz/readback.py):
mutated metadata.json, tuning logs, --input .npy files and harness reports,
each through the real `aot` command in a subprocess under RLIMIT_AS (1 GiB)
and a time limit.

    .venv/bin/python scripts/fuzz_readback.py --cases 200 --jobs 2 --out build/fuzz_readback

Case (kind, seed) is deterministic: --only KIND:SEED replays one (its
directory is kept). The summary counts exit codes per kind; a failure is an
exit other than 0, 1 or 2, an exit 2 that is not one error line, a hang, or
a file written outside the case's output. Each failure's case directory is
kept under OUT/cases, its command in OUT/results.jsonl.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODELS = Path(os.environ.get("AOT_SHARED", REPO.parent / "shared")) / "models"


def summarize(results: list[dict], seconds: float) -> str:
    from aot.testing.fuzz.readback import KINDS

    failed = [r for r in results if r["failure"]]
    lines = [f"fuzz_readback: {len(results)} cases in {seconds:.0f} s, {len(failed)} failures",
             "", f"{'kind':<10} {'cases':>6} {'exit 0':>7} {'exit 1':>7} {'exit 2':>7} "
             f"{'other':>6} {'hang':>5} {'failed':>7} {'slowest s':>10}"]
    for kind in KINDS:
        mine = [r for r in results if r["kind"] == kind]
        if not mine:
            continue
        codes = collections.Counter(r["code"] for r in mine)
        other = sum(n for c, n in codes.items() if c not in (0, 1, 2, None))
        slow = max(r["seconds"] for r in mine)
        lines.append(f"{kind:<10} {len(mine):>6} {codes[0]:>7} {codes[1]:>7} {codes[2]:>7} "
                     f"{other:>6} {codes[None]:>5} {sum(1 for r in mine if r['failure']):>7} "
                     f"{slow:>10.1f}")
    commands = collections.Counter((r["kind"], r["command"]) for r in results)
    lines += ["", "commands: " + ", ".join(f"{k}/{c} {n}"
                                          for (k, c), n in sorted(commands.items()))]
    for r in failed[:20]:
        lines.append(f"FAIL {r['kind']}:{r['seed']} {r['failure']} ({r['detail'][:80]})")
    return "\n".join(lines)


def main() -> int:
    from aot.testing.fuzz.readback import KINDS, prepare, run_case

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=100, help="cases of each kind")
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--seed-start", type=int, default=0)
    p.add_argument("--only", nargs="*", help="KIND:SEED cases to replay")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--time-limit", type=float, default=60.0, help="seconds per command")
    p.add_argument("--out", default="build/fuzz_readback")
    args = p.parse_args()
    out = Path(args.out).resolve()
    setup = prepare(out, MODELS)
    if args.only:
        todo = [(s.partition(":")[0], int(s.partition(":")[2])) for s in args.only]
    else:
        kinds = [k for k in args.kinds.split(",") if k]
        unknown = [k for k in kinds if k not in KINDS]
        if unknown:
            raise SystemExit(f"no kind {', '.join(unknown)} (known: {', '.join(KINDS)})")
        # interleaved, so that an interrupted run has some of each
        todo = [(k, args.seed_start + i) for i in range(args.cases) for k in kinds]
    results: list[dict] = []
    t0 = time.monotonic()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with open(out / "results.jsonl", "w") as log, ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_case, setup, kind, seed, args.time_limit, bool(args.only))
                   for kind, seed in todo]
        try:
            for f in futures:
                r = f.result().as_json()
                results.append(r)
                log.write(json.dumps(r, sort_keys=True) + "\n")
                log.flush()
                if r["failure"]:
                    print(f"FAIL {r['kind']}:{r['seed']} {r['failure']}", flush=True)
                if len(results) % 50 == 0:
                    print(f"{len(results)}/{len(todo)} cases, {time.monotonic() - t0:.0f} s",
                          flush=True)
        except (KeyboardInterrupt, SystemExit):
            print(f"interrupted: the summary covers the {len(results)} cases done", flush=True)
            for f in futures:
                f.cancel()
    summary = summarize(results, time.monotonic() - t0)
    (out / "summary.txt").write_text(summary + "\n")
    print(summary)
    return 1 if any(r["failure"] for r in results) else 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())

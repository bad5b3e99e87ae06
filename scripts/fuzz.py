#!/usr/bin/env python3
"""The long fuzz run: hostile variants of the shared models through `aot package`,
and hostile harnesses, reports, .npy inputs and board files (aot/testing/fuzz/io.py).

    .venv/bin/python scripts/fuzz.py --cases 3000 --io-cases 2000 --jobs 2 --out build/fuzz

Case i is seed (--seed-start + i) of model i mod len(models): the run is
deterministic and any case can be replayed alone (--only MODEL:SEED, or
io:KIND:SEED for the other fuzzers). Models are packaged at aot's default
element limit and compile-memory budget unless --max-elements lowers it.
Each case runs in a worker process under a memory rlimit (RLIMIT_AS, 1 GiB
by default: `aot package` of any model must fit it or say why) and a time
limit; a worker that crashes, runs out of memory or hangs is killed, the
case counted as a failure and a fresh worker started. Every failure leaves
a reproducer (the mutated model and a .txt saying what was done) in
OUT/failures. The summary counts outcomes: packaged (accepted), refused
(exit 2) by error class, failures by kind.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODELS = Path(os.environ.get("AOT_SHARED", REPO.parent / "shared")) / "models"
GRACE_S = 15.0   # on top of the case's own alarm, before the worker is killed


# ------------------------------------------------------------------ the worker

def worker(args: argparse.Namespace) -> int:
    """Read `MODEL SEED` lines, answer one JSON line per case on the original stdout."""
    import resource

    from aot.testing.fuzz.models import mutate, run_case

    from aot.testing.fuzz.io import run_io_case
    from aot.limits import DEFAULT_MAX_ELEMENTS

    limit = args.memory_mb << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    answer = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # compilers' chatter must not mix in
    work = Path(args.workdir)
    for line in sys.stdin:
        model, seed = line.split()
        if model.startswith("io:"):
            start = time.monotonic()
            outcome, detail = run_io_case(model[3:], int(seed), work, args.time_limit)
            answer.write(json.dumps({"status": outcome.status, "class": outcome.error_class,
                                     "message": outcome.message, "detail": detail,
                                     "seconds": round(time.monotonic() - start, 3),
                                     "mutation": model}) + "\n")
            continue
        mutant = mutate(MODELS / model, int(seed))
        case = work / f"case{mutant.suffix}"
        case.write_bytes(mutant.data)
        out = work / "pkg"
        start = time.monotonic()
        outcome = run_case(case, out, args.time_limit, args.max_elements or DEFAULT_MAX_ELEMENTS)
        seconds = time.monotonic() - start
        subprocess.run(["rm", "-rf", str(out)], check=False)
        answer.write(json.dumps({"status": outcome.status, "class": outcome.error_class,
                                 "message": outcome.message, "seconds": round(seconds, 3),
                                 "mutation": mutant.mutation}) + "\n")
    return 0


@dataclass
class Worker:
    proc: subprocess.Popen
    workdir: Path
    case: tuple[str, int] | None = None
    started: float = 0.0
    buf: bytes = field(default=b"")


def spawn(args: argparse.Namespace, root: Path, k: int) -> Worker:
    workdir = Path(tempfile.mkdtemp(prefix=f"w{k}-", dir=root))
    argv = [sys.executable, __file__, "--worker", "--workdir", str(workdir),
            "--time-limit", str(args.time_limit), "--memory-mb", str(args.memory_mb),
            "--max-elements", str(args.max_elements or 0)]
    log = open(workdir / "stderr.log", "wb")
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                            cwd=REPO)
    log.close()
    os.set_blocking(proc.stdout.fileno(), False)
    return Worker(proc, workdir)


# ------------------------------------------------------------------ the driver

def cases(args: argparse.Namespace) -> list[tuple[str, int]]:
    from aot.testing.fuzz.io import KINDS

    if args.only:
        return [(spec.rpartition(":")[0], int(spec.rpartition(":")[2])) for spec in args.only]
    names = sorted(p.name for pattern in args.models.split(",") for p in MODELS.glob(pattern)
                   if p.suffix in (".onnx", ".tflite"))
    if not names and args.cases:
        raise SystemExit(f"no models match {args.models} in {MODELS}")
    todo = [(names[i % len(names)], args.seed_start + i) for i in range(args.cases)]
    kinds = KINDS if args.io == "all" else tuple(k for k in args.io.split(",") if k)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise SystemExit(f"no fuzzer {', '.join(unknown)} (--io takes {', '.join(KINDS)})")
    # interleaved, so that an interrupted run has some of each
    io = [(f"io:{k}", args.seed_start + i) for i in range(args.io_cases) for k in kinds]
    return todo + io


def save_reproducer(out: Path, model: str, seed: int, result: dict) -> Path:
    from aot.testing.fuzz.models import mutate

    if model.startswith("io:"):
        note = out / "failures" / f"{model[3:]}_seed{seed}.txt"
        note.parent.mkdir(parents=True, exist_ok=True)
        note.write_text(f"{model} seed {seed}: {result.get('detail', '?')}\n"
                        f"{result['class']}: {result['message']}\n"
                        f"replay: .venv/bin/python scripts/fuzz.py --only {model}:{seed}\n")
        return note
    mutant = mutate(MODELS / model, seed)
    stem = f"{Path(model).stem}_seed{seed}"
    failures = out / "failures"
    failures.mkdir(parents=True, exist_ok=True)
    (failures / f"{stem}{mutant.suffix}").write_bytes(mutant.data)
    (failures / f"{stem}.txt").write_text(
        f"{mutant.label()}\n{result['class']}: {result['message']}\n"
        f"replay: .venv/bin/python scripts/fuzz.py --only {model}:{seed}\n"
        f"or: AOT_MAX_TENSOR_ELEMENTS=<n> aot package failures/{stem}{mutant.suffix} -o /tmp/x\n")
    return failures / f"{stem}{mutant.suffix}"


def drive(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    todo = collections.deque(cases(args))
    total = len(todo)
    results: list[dict] = []
    root = Path(tempfile.mkdtemp(prefix="aot-fuzz-"))
    sel = selectors.DefaultSelector()
    workers: list[Worker] = []
    log = open(out / "results.jsonl", "w")
    t0 = time.monotonic()

    def finish(w: Worker, result: dict) -> None:
        model, seed = w.case
        result.update(model=model, seed=seed)
        if result["status"] == "failed":
            result["reproducer"] = str(save_reproducer(out, model, seed, result))
            print(f"FAIL {model}:{seed} {result['class']}: {result['message']}", flush=True)
        results.append(result)
        log.write(json.dumps(result, sort_keys=True) + "\n")
        w.case = None
        if len(results) % 100 == 0:
            print(f"{len(results)}/{total} cases, {time.monotonic() - t0:.0f} s", flush=True)

    def replace(w: Worker) -> Worker:
        sel.unregister(w.proc.stdout)
        w.proc.kill()
        w.proc.wait()
        fresh = spawn(args, root, len(results) + 1000)
        sel.register(fresh.proc.stdout, selectors.EVENT_READ, fresh)
        workers[workers.index(w)] = fresh
        return fresh

    for k in range(args.jobs):
        w = spawn(args, root, k)
        workers.append(w)
        sel.register(w.proc.stdout, selectors.EVENT_READ, w)
    try:
        while todo or any(w.case for w in workers):
            for w in workers:
                if w.case is None and todo:
                    w.case = todo.popleft()
                    w.started = time.monotonic()
                    w.proc.stdin.write(f"{w.case[0]} {w.case[1]}\n".encode())
                    w.proc.stdin.flush()
            for key, _ in sel.select(timeout=1.0):
                w = key.data
                chunk = w.proc.stdout.read() or b""
                w.buf += chunk
                if b"\n" in w.buf:
                    line, _, w.buf = w.buf.partition(b"\n")
                    finish(w, json.loads(line))
                elif not chunk and w.proc.poll() is not None:  # died mid-case
                    code = w.proc.returncode
                    kind = "crash" if code < 0 else f"worker exit {code}"
                    tail = (w.workdir / "stderr.log").read_text(errors="replace")[-300:]
                    finish(w, {"status": "failed", "class": kind,
                               "message": f"worker died ({code}): {tail.strip()[-200:]}",
                               "seconds": time.monotonic() - w.started, "mutation": "?"})
                    replace(w)
            now = time.monotonic()
            for w in list(workers):
                if w.case and now - w.started > args.time_limit + GRACE_S:
                    finish(w, {"status": "failed", "class": "hang",
                               "message": f"killed after {now - w.started:.0f} s",
                               "seconds": now - w.started, "mutation": "?"})
                    replace(w)
    except (KeyboardInterrupt, SystemExit):
        print(f"interrupted: the summary covers the {len(results)} cases done", flush=True)
    finally:
        for w in workers:
            w.proc.kill()
            w.proc.wait()
        subprocess.run(["rm", "-rf", str(root)], check=False)
        log.close()
    summary = summarize(results, time.monotonic() - t0)
    (out / "summary.txt").write_text(summary + "\n")
    print(summary)
    return 1 if any(r["status"] == "failed" for r in results) else 0


def summarize(results: list[dict], seconds: float) -> str:
    by = collections.Counter((r["status"], r["class"]) for r in results)
    status = collections.Counter(r["status"] for r in results)
    lines = [f"fuzz: {len(results)} cases in {seconds:.0f} s: {status['packaged']} packaged, "
             f"{status['accepted']} accepted (io), {status['refused']} refused (exit 2), "
             f"{status['failed']} failures", "",
             f"{'outcome':<12} {'class':<22} {'cases':>6}"]
    for (st, cls), n in sorted(by.items(), key=lambda kv: (kv[0][0], -kv[1])):
        lines.append(f"{st:<12} {cls or '-':<22} {n:>6}")
    muts = collections.defaultdict(collections.Counter)
    for r in results:
        muts[r["mutation"].split("+")[0]][r["status"]] += 1
    lines += ["", f"{'mutation':<24} {'packaged':>9} {'refused':>8} {'failed':>7}"]
    for name in sorted(muts):
        c = muts[name]
        lines.append(f"{name:<24} {c['packaged'] + c['accepted']:>9} {c['refused']:>8} "
                     f"{c['failed']:>7}")
    slow = max(results, key=lambda r: r["seconds"], default=None)
    if slow:
        lines.append(f"\nslowest case: {slow['model']}:{slow['seed']} {slow['seconds']:.1f} s")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=1000)
    p.add_argument("--seed-start", type=int, default=0)
    p.add_argument("--models", default="*", help="comma-separated globs in the shared models")
    p.add_argument("--only", nargs="*", help="MODEL:SEED cases to replay")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--time-limit", type=float, default=60.0, help="seconds per case")
    p.add_argument("--io-cases", type=int, default=0,
                   help="cases of each fuzzer of aot/testing/fuzz/io.py (--io)")
    p.add_argument("--io", default="all", help="which of them: all, or serve,report,npy,toml")
    p.add_argument("--memory-mb", type=int, default=1024, help="RLIMIT_AS per worker")
    p.add_argument("--max-elements", type=int, default=0,
                   help="AOT_MAX_TENSOR_ELEMENTS for the cases (0: aot's default)")
    p.add_argument("--out", default="build/fuzz")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--workdir", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    # kill(1) ends the run like Ctrl-C: the workers are stopped, the temp dir removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # summarizes what is done
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())

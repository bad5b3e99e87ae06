#!/usr/bin/env python3
"""Does a change to aot change what it generates? Replays a base revision
and the working tree on the shared models and a zoo of convolutions, pools
and fully connected layers (float and int8, every padding, stride, dilation,
grouping and odd depth the kernels branch on), on each board and thread
count, and compares what they emit.

    bench/same_code.py BASE_REV [--boards host,rpi4|all] [--threads 1,2] [--no-zoo]
        [--llvm] [--package] [--tables] [--strict] [--jobs N] [--cache DIR]

Always: the kernels' C. --llvm: also the LLVM IR the llvm codegen builds
from the same kernels (with --package, also the llvm packages, objects
included). --package: every file aot.package writes for each model, board
and thread count, byte for byte (metadata.json without "versions"); the
models' kernels are then compared there. --tables: the op table with its
rules, the legalization table in order, both pass pipelines and the tuning
sites, functions named without their module (bench/same_code_tables.py).

Where only the kernels' C differs, the default compiles both with the
board's compiler and flags and compares the disassembly function by
function: identical object code proves a refactor costs nothing on that
board, else it prints each changed function's static instruction count
before -> after (back it with bench/compare.py --count-instructions and
timings). --strict, implied by --llvm, --package and --tables (the proof
that moving modules changes nothing), counts identical text only and prints
a diff of what changed. Exit status 1 when anything changed.

The replay runs bench/same_code_emit.py in a process per source tree and
chunk of work, --jobs of them at once (a chunk per board when N > 1).
--cache DIR keeps the base revision's results there, so comparing further
changes against the same base replays only the working tree.
"""
from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EMIT = Path(__file__).resolve().parent / "same_code_emit.py"
TABLES = EMIT.with_name("same_code_tables.py")
BOARDS = ("host", "host-avx512", "rpi4", "mps2-an386")
# --boards all: the boards a move of modules is proven on
ALL_BOARDS = ("host", "host-avx512", "rpi4", "rpi5", "mps2-an386", "mps3-an547", "qemu-armv7",
              "qemu-riscv64")
PART = "\n/* @@ next source file @@ */\n"     # same_code_emit.PART
DIFF_LINES = 40         # of each changed text file's diff
DIFFS_SHOWN = 12        # changed files whose diff is printed; the rest are named


@dataclass(frozen=True)
class Job:
    """One child process: what one tree emits for some boards."""
    side: str                       # "base" or "work"
    boards: tuple[str, ...]
    tables: bool

    def args(self, opts: argparse.Namespace, models: Path) -> list[str]:
        flags = [f for f, on in (("--zoo", not opts.no_zoo), ("--llvm", opts.llvm),
                                 ("--package", opts.package), ("--tables", self.tables)) if on]
        return ["--boards", ",".join(self.boards), "--threads", opts.threads,
                "--models", str(models), *flags]


def snapshot(tmp: Path) -> Path:
    """The replay scripts copied once: editing them while a run goes on
    leaves its later replays as its first."""
    tool = tmp / "tool"
    tool.mkdir()
    for script in (EMIT, TABLES):
        shutil.copyfile(script, tool / script.name)
    return tool / EMIT.name


def run_job(emit: Path, job: Job, tree: Path, out: Path, args: list[str],
            shared: Path) -> dict:
    r = subprocess.run([sys.executable, str(emit), str(tree), str(out), *args],
                       capture_output=True, text=True, cwd=tree,
                       env={**os.environ, "AOT_SHARED": str(shared)})
    if r.returncode:
        sys.exit(f"replaying {tree} ({job.side}, {','.join(job.boards)}) failed:\n"
                 f"{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def base_sha(rev: str) -> str:
    r = subprocess.run(["git", "rev-parse", "--verify", rev + "^{commit}"], cwd=ROOT,
                       capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"same_code: {rev!r} is not a revision of {ROOT}")
    return r.stdout.strip()


def base_tree(sha: str) -> Path:
    tree = Path(tempfile.mkdtemp(prefix=f"aot-same-code-{sha[:12]}-"))
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), sha], cwd=ROOT,
                   check=True)
    return tree


def environment(boards: tuple[str, ...], models: Path) -> list[str]:
    """What a base result depends on besides the revision: the tools, the
    Python packages, the models."""
    from aot.targets import get_board
    out = [sys.version]
    for dist in ("numpy", "onnx", "llvmlite"):
        try:
            out.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            out.append(f"{dist} absent")
    for cc in sorted({get_board(b).target.cc for b in boards}):
        r = subprocess.run([cc, "--version"], capture_output=True, text=True)
        out.append(r.stdout.split("\n", 1)[0])
    out += [f"{p.name} {p.stat().st_size} {p.stat().st_mtime_ns}"
            for p in sorted(models.iterdir()) if p.is_file()]
    return out


def cache_dir(cache: Path, sha: str, job: Job, args: list[str], models: Path,
              emit: Path) -> Path:
    text = json.dumps([sha, args, emit.read_text(), emit.with_name(TABLES.name).read_text(),
                       environment(job.boards, models)])
    return cache / f"{sha[:12]}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def replay(opts, jobs: list[Job], shared: Path, tmp: Path) -> dict[str, dict]:
    """{side: {key: (status, file)}} for both trees, the base's from
    --cache where it has them."""
    sha, models, emit = base_sha(opts.base), shared / "models", snapshot(tmp)
    runs, results, base = [], {"base": {}, "work": {}}, None
    for i, job in enumerate(jobs):
        args = job.args(opts, models)
        if job.side == "base" and opts.cache:
            out = cache_dir(opts.cache, sha, job, args, models, emit)
            if (out / "status.json").is_file():
                results["base"].update({k: (s, out / k) for k, s in
                                        json.loads((out / "status.json").read_text()).items()})
                continue
        else:
            out = tmp / f"{job.side}{i}"
        runs.append((job, out, args))
    if any(job.side == "base" for job, _, _ in runs):
        base = base_tree(sha)
    try:
        def one(run):
            job, out, args = run
            fresh = out.with_name(out.name + ".part") if opts.cache and job.side == "base" else out
            shutil.rmtree(fresh, ignore_errors=True)
            status = run_job(emit, job, base if job.side == "base" else ROOT, fresh, args,
                             shared)
            if fresh != out:        # into the cache whole or not at all
                (fresh / "status.json").write_text(json.dumps(status))
                fresh.rename(out)
            return job.side, {k: (s, out / k) for k, s in status.items()}
        with ThreadPoolExecutor(max_workers=opts.jobs) as pool:
            for side, status in pool.map(one, runs):
                results[side].update(status)
    finally:
        if base is not None:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT)
    return results


def functions(c_file: Path, board: str, scratch: Path) -> dict[str, list[str]]:
    """Each function's instructions (mnemonic and operands, no addresses)."""
    from aot.targets import get_board
    target = get_board(board).target
    text = ""
    for i, part in enumerate(c_file.read_text().split(PART)):
        src = scratch / f"part{i}.c"
        src.write_text(part)
        obj = src.with_suffix(".o")
        subprocess.run([target.cc, *target.cflags, "-std=c99", "-w", "-c", str(src), "-o",
                        str(obj)], check=True)
        text += subprocess.run(["llvm-objdump", "-d", "--no-show-raw-insn", str(obj)],
                               capture_output=True, text=True, check=True).stdout
    funcs: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        head = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
        if head:
            current = funcs.setdefault(head.group(1), [])
        elif current is not None and re.match(r"^\s+[0-9a-f]+:\s", line):
            insn = line.split(":", 1)[1].strip()
            # branch targets name addresses, which move when code before them does
            current.append(re.sub(r"\b(0x)?[0-9a-f]{3,}\b <", "<", insn))
    return funcs


def same_object_code(key: str, fa: Path, fb: Path, scratch: Path) -> bool:
    """Compiles both C files; prints each function whose code changed."""
    board = key.split("/")[1]
    (scratch / "a").mkdir(exist_ok=True)
    (scratch / "b").mkdir(exist_ok=True)
    da, db = functions(fa, board, scratch / "a"), functions(fb, board, scratch / "b")
    for fn in sorted(set(da) | set(db)):
        if da.get(fn) != db.get(fn):
            print(f"{key} {fn}: {len(da.get(fn, []))} -> {len(db.get(fn, []))} "
                  "instructions (static)")
    return da == db


def show_diff(key: str, a: bytes, b: bytes, whole: bool) -> None:
    try:
        ta, tb = a.decode().splitlines(), b.decode().splitlines()
    except UnicodeDecodeError:
        print(f"{key}: binary, {len(a)} -> {len(b)} bytes, differs")
        return
    lines = list(difflib.unified_diff(ta, tb, f"base/{key}", f"work/{key}", lineterm=""))
    shown = lines if whole else lines[:DIFF_LINES]
    print("\n".join(shown))
    if len(shown) < len(lines):
        print(f"... ({len(lines) - len(shown)} more diff lines)")


def compare(results: dict[str, dict], strict: bool, scratch: Path) -> int:
    """Prints what changed and a count per kind of result; the number changed."""
    a, b = results["base"], results["work"]
    counts: Counter = Counter()
    changed = []
    for key in sorted(set(a) | set(b)):
        kind = key.split("/")[0]
        (sa, fa), (sb, fb) = a.get(key, ("absent", None)), b.get(key, ("absent", None))
        if sa != sb:
            print(f"{key}: base {sa!r}, now {sb!r}")
        elif sa != "ok":
            counts[kind, "failing alike"] += 1
            continue
        elif fa.read_bytes() == fb.read_bytes():
            counts[kind, "identical"] += 1
            continue
        elif kind == "c" and not strict and same_object_code(key, fa, fb, scratch):
            counts[kind, "identical object code"] += 1
            continue
        elif len(changed) < DIFFS_SHOWN or kind == "tables":
            show_diff(key, fa.read_bytes(), fb.read_bytes(), kind == "tables")
        else:
            print(f"{key}: differs")
        counts[kind, "changed"] += 1
        changed.append(key)
    for kind in sorted({k for k, _ in counts}):
        print(f"{kind}: " + ", ".join(f"{counts[kind, v]} {v}" for v in (
            "identical", "identical object code", "failing alike", "changed")
            if counts[kind, v] or v in ("identical", "changed")))
    digest = hashlib.sha1("".join(changed).encode()).hexdigest()[:8]
    print(f"{len(changed)} changed ({digest})" if changed else
          "identical" + ("" if strict else " (C or object code)"))
    return len(changed)


def board_list(text: str) -> tuple[str, ...]:
    from aot.errors import AotError
    from aot.targets import get_board
    boards = ALL_BOARDS if text == "all" else tuple(b for b in text.split(",") if b)
    for b in boards:
        try:
            get_board(b)
        except AotError as e:
            sys.exit(f"same_code: --boards: {e}")
    return boards


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", help="the revision to compare with (e.g. HEAD, a5a75e8)")
    ap.add_argument("--boards", default=",".join(BOARDS),
                    help=f"comma-separated, or all ({','.join(ALL_BOARDS)})")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--no-zoo", action="store_true", help="the shared models only")
    ap.add_argument("--llvm", action="store_true", help="also the llvm codegen's output")
    ap.add_argument("--package", action="store_true", help="every file of every package")
    ap.add_argument("--tables", action="store_true", help="the op, legalization, pass and "
                    "tuning tables")
    ap.add_argument("--strict", action="store_true", help="identical text only counts (implied "
                    "by --llvm, --package, --tables)")
    ap.add_argument("--jobs", type=int, default=1, help="replays at once (a board each)")
    ap.add_argument("--cache", type=Path, help="keep and reuse the base revision's results here")
    opts = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    boards = board_list(opts.boards)
    if not re.fullmatch(r"[1-9][0-9]*(,[1-9][0-9]*)*", opts.threads):
        sys.exit(f"same_code: --threads takes counts like 1,2, not {opts.threads!r}")
    if opts.jobs < 1:
        sys.exit(f"same_code: --jobs {opts.jobs}: give 1 or more")
    strict = opts.strict or opts.llvm or opts.package or opts.tables
    chunks = [boards] if opts.jobs == 1 else [(b,) for b in boards]
    jobs = [Job(side, chunk, opts.tables and i == 0)
            for side in ("base", "work") for i, chunk in enumerate(chunks)]
    shared = Path(os.environ.get("AOT_SHARED", ROOT.parent / "shared")).resolve()
    if not any((shared / "models").glob("*.tflite")):
        sys.exit(f"same_code: no models in {shared}/models: set AOT_SHARED to the shared folder")
    if opts.cache:
        opts.cache = opts.cache.resolve()
        opts.cache.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="aot-same-code-") as tmp:
        results = replay(opts, jobs, shared, Path(tmp))
        scratch = Path(tmp) / "objdump"
        scratch.mkdir()
        changed = compare(results, strict, scratch)
    print(f"({time.monotonic() - start:.0f} s)")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())

"""A seeded fuzzer of what aot reads back, through the real CLI: a
package's metadata.json, tuning logs, .npy files given as --input, .npz
datasets and the harness's report.

Each case mutates one file of a copy of a real package (or a tuning log
beside a model), runs one `aot` command on it in a subprocess under
RLIMIT_AS and a time limit, and judges it:

- the exit code is 0, 1 or 2 (3 is an internal error, anything else a
  crash); an exit 2 is one line `aot: error: ...`;
- it ends within the time limit and the memory limit (a MemoryError,
  which aot reports as `out of memory`, is a failure);
- nothing is written outside the case's output directory: the package
  and the files beside it are as they were.

    metadata  metadata.json with a field of another type or value, removed,
              repeated, nested 100,000 deep, numbers of 5,000 digits, NaN,
              cut, bytes flipped; `aot run`, `inspect` or `verify` on it
    records   a tuning log whose lines are mutated alike; `aot package
              --tuning-records`
    npy       an --input .npy with a hostile header (io.npy_bytes); `aot run`
    report    a harness (bench/bench, a shell script) printing a mutated
              report and output files of the right or wrong size; `aot run`
    npz       a --dataset .npz: its member a hostile .npy (io.npy_bytes),
              raw bytes, another shape, stored or deflated, the archive's
              bytes flipped or cut, sometimes with --limit; `aot verify`

Used by tests/fuzz/test_readback_fuzz.py (a few cases) and
scripts/fuzz_readback.py (the long run).
"""
from __future__ import annotations

import copy
import io
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aot.testing.fuzz.io import npy_bytes

KINDS = ("metadata", "records", "npy", "report", "npz")
# The model the package is made of: small, float, one input and output.
MODEL = "tflm_hello_world_f32.tflite"
MEMORY_BYTES = 1 << 30      # RLIMIT_AS of each command
RAW = "@@raw@@"             # where a mutation puts text json.dumps cannot write
HUGE_DIGITS = "9" * 5000


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


HOSTILE_VALUES = ("1", "", "../../escaped", "object", "float128", "int8", "x" * 1000, "a\0b",
                  0, -1, 1, 1 << 40, (1 << 64) + 1, 1.5, -0.0, 1e308, True, False, None,
                  [], [1], [1 << 40], [1 << 20, 1 << 20], ["1"], [[1]], {}, {"a": 1},
                  RAW + "NaN", RAW + "-Infinity", RAW + HUGE_DIGITS, RAW + "1e999",
                  RAW + nested(100_000), RAW + nested(40))


@dataclass(frozen=True)
class Result:
    kind: str
    seed: int
    command: str
    detail: str
    code: int | None            # None: killed at the time limit
    seconds: float
    failure: str                # "" when the case passed
    stderr: str

    def as_json(self) -> dict:
        return {"kind": self.kind, "seed": self.seed, "command": self.command,
                "detail": self.detail, "code": self.code, "seconds": round(self.seconds, 3),
                "failure": self.failure, "stderr": self.stderr[-300:]}


# ------------------------------------------------------------------ mutating JSON

def _paths(value, prefix=()) -> list[tuple]:
    """Every key and index path into a JSON value (the root is ())."""
    out, todo = [prefix], [(prefix, value)]
    while todo:
        path, v = todo.pop()
        items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
        for k, child in items:
            out.append((*path, k))
            todo.append(((*path, k), child))
    return out


def _raw_text(doc) -> str:
    """json.dumps of `doc`, with RAW-marked strings written as the raw text they carry."""
    text = json.dumps(doc, indent=1)
    while f'"{RAW}' in text:
        start = text.index(f'"{RAW}')
        end = text.index('"', start + 1)
        text = text[:start] + text[start + 1 + len(RAW):end] + text[end + 1:]
    return text


def mutate_json(doc, rng: random.Random, focus: tuple = ()) -> tuple[str, str]:
    """(text, what was done) of `doc` with one or two mutations, on paths
    under `focus` three times in four."""
    doc = copy.deepcopy(doc)
    done = []
    for _ in range(rng.choice((1, 1, 1, 2))):
        paths = _paths(doc)
        near = [p for p in paths if p[:len(focus)] == focus and p] if focus else []
        path = rng.choice(near if near and rng.random() < 0.75 else paths[1:] or paths)
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        key = path[-1] if path else None
        what = rng.choice(("value", "value", "value", "drop", "repeat", "wrap"))
        name = ".".join(map(str, path)) or "the root"
        if key is None:
            doc = rng.choice(HOSTILE_VALUES)
            done.append(f"the root := {str(doc)[:40]}")
        elif what == "drop":
            if isinstance(parent, dict):
                del parent[key]
            else:
                parent.pop(key)
            done.append(f"{name} removed")
        elif what == "repeat" and isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
            done.append(f"{name} repeated")
        elif what == "wrap":
            parent[key] = [parent[key]] if rng.random() < 0.5 else {"v": parent[key]}
            done.append(f"{name} wrapped")
        else:
            parent[key] = rng.choice(HOSTILE_VALUES)
            done.append(f"{name} := {str(parent[key])[:40]}")
    text = _raw_text(doc)
    if rng.random() < 0.15:
        how = rng.choice(("cut", "flip", "bytes"))
        if how == "cut":
            text = text[:rng.randrange(len(text) + 1)]
        elif how == "flip" and text:
            k = rng.randrange(len(text))
            text = text[:k] + chr(ord(text[k]) ^ (1 << rng.randrange(7))) + text[k + 1:]
        else:
            k = rng.randrange(len(text) + 1)
            text = text[:k] + rng.choice(("\udcff", "[", "{", "\"", "\0", ",")) + text[k:]
        done.append(f"text {how}")
    return text, "; ".join(done)


# ------------------------------------------------------------------ running the CLI

def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


def _snapshot(root: Path, skip: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root` but those under `skip`: {path: (size, mtime_ns)}."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        if Path(dirpath) == skip or skip in Path(dirpath).parents:
            dirs[:] = []
            continue
        for f in files:
            st = os.lstat(os.path.join(dirpath, f))
            out[os.path.relpath(os.path.join(dirpath, f), root)] = (st.st_size, st.st_mtime_ns)
    return out


def run_cli(args: list[str], cwd: Path, time_limit: float) -> tuple[int | None, str, float]:
    """(exit code or None at the time limit, stderr, seconds) of `aot ARGS`."""
    env = {k: v for k, v in os.environ.items() if k not in ("AOT_DEBUG",)}
    env["AOT_BOARD"] = "host"
    start = time.monotonic()
    try:
        r = subprocess.run([sys.executable, "-m", "aot", *args], cwd=cwd, env=env,
                           capture_output=True, timeout=time_limit, preexec_fn=_limits,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        return None, (e.stderr or b"").decode("utf-8", "replace"), time.monotonic() - start
    return r.returncode, r.stderr.decode("utf-8", "replace"), time.monotonic() - start


def judge(code: int | None, stderr: str, before: dict, after: dict) -> str:
    """What is wrong with a case's outcome, or ""."""
    if code is None:
        return "hang"
    if code not in (0, 1, 2):
        last = stderr.strip().splitlines()[-1:] or ["no message"]
        return f"exit {code}: {last[0][:200]}"
    if code == 2:
        lines = stderr.strip().splitlines()
        if len(lines) != 1 or not lines[0].startswith("aot: error: "):
            return f"exit 2 without one error line: {stderr[:200]!r}"
        if lines[0].startswith("aot: error: out of memory"):
            return f"over the memory limit: {lines[0][:200]}"
    if before != after:
        changed = sorted(set(before) ^ set(after) | {k for k in before if
                                                     before[k] != after.get(k)})
        return f"wrote outside its output: {', '.join(changed[:5])}"
    return ""


# ------------------------------------------------------------------ the cases

@dataclass(frozen=True)
class Setup:
    """What every case starts from: a package of MODEL for host, the model
    and a valid input beside it."""
    root: Path
    pkg: Path
    model: Path
    input: Path
    meta: dict


def prepare(root: Path, models: Path) -> Setup:
    """Package MODEL into root/base (once per run)."""
    root.mkdir(parents=True, exist_ok=True)
    model = root / MODEL
    shutil.copyfile(models / MODEL, model)
    pkg = root / "base"
    if not (pkg / "metadata.json").is_file():
        r = subprocess.run([sys.executable, "-m", "aot", "package", str(model), "--board", "host",
                            "-o", str(pkg), "--force"], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"aot package {MODEL}: {r.stderr}")
    meta = json.loads((pkg / "metadata.json").read_text())
    x = np.zeros(meta["inputs"][0]["shape"], meta["inputs"][0]["dtype"])
    np.save(root / "x.npy", x)
    return Setup(root, pkg, model, root / "x.npy", meta)


def _case_dir(setup: Setup, kind: str, seed: int) -> Path:
    d = setup.root / "cases" / f"{kind}{seed}"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    return d


def _copy_package(setup: Setup, d: Path) -> Path:
    pkg = d / "pkg"
    shutil.copytree(setup.pkg, pkg, symlinks=True)
    shutil.copyfile(setup.model, d / MODEL)      # what `aot verify PKG` looks for beside it
    shutil.copyfile(setup.input, d / "x.npy")
    return pkg


def metadata_case(setup: Setup, seed: int, d: Path) -> tuple[list[str], str]:
    rng = random.Random(f"readback-metadata:{seed}")
    pkg = _copy_package(setup, d)
    focus = rng.choice(((), ("inputs",), ("outputs",), ("inputs", 0), ("outputs", 0),
                        ("package_format",), ("kernels",), ("source",)))
    text, detail = mutate_json(setup.meta, rng, focus)
    (pkg / "metadata.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    command = rng.choice(("run", "run", "inspect", "verify"))
    args = {"run": ["run", str(pkg), "--input", str(d / "x.npy"), "--out", str(d / "out")],
            "inspect": ["inspect", str(pkg), "--json"],
            "verify": ["verify", str(pkg), "--json"]}[command]
    return args, detail


RECORD = {"workload": "w", "target": "x86_64-linux", "config": {}, "ms": 0.5, "board": "host",
          "aot_version": "0.1.0", "version": 1, "default_ms": 0.5}


def records_case(setup: Setup, seed: int, d: Path) -> tuple[list[str], str]:
    from aot.lower.schedule.space import SITES, TILE_KNOBS

    rng = random.Random(f"readback-records:{seed}")
    shutil.copyfile(setup.model, d / MODEL)
    lines = []
    for i in range(rng.randint(1, 4)):
        config = {}
        if rng.random() < 0.5:
            site = rng.choice(SITES)
            config[site] = {k: rng.randint(1, 4) for k in rng.sample(TILE_KNOBS,
                                                                      rng.randint(1, 2))}
        lines.append(json.dumps({**RECORD, "workload": f"w{i}", "config": config}))
    k = rng.randrange(len(lines))
    text, detail = mutate_json(json.loads(lines[k]), rng, ("config",))
    lines[k] = text.replace("\n", "")
    if rng.random() < 0.1:
        lines.insert(rng.randrange(len(lines) + 1), rng.choice(("", "   ", "x" * 70_000)))
        detail += "; a blank or 70 KB line"
    (d / "log.jsonl").write_bytes("\n".join(lines).encode("utf-8", "surrogateescape") + b"\n")
    return (["package", str(d / MODEL), "--board", "host", "--tuning-records",
             str(d / "log.jsonl"), "-o", str(d / "out")], f"line {k + 1}: {detail}")


def npy_case(setup: Setup, seed: int, d: Path) -> tuple[list[str], str]:
    data, detail, _, _ = npy_bytes(seed)
    pkg = _copy_package(setup, d)
    (d / "in.npy").write_bytes(data)
    return ["run", str(pkg), "--input", str(d / "in.npy"), "--out", str(d / "out")], detail


def _report_text(rng: random.Random, meta: dict) -> tuple[str, str]:
    good = {"arena_bytes": meta["arena_bytes"], "runs": 1, "warmup": 0, "times_ns": [1234]}
    text, detail = rng.choice((
        (json.dumps(good), "a valid report"), ("", "no report"), (nested(100_000), "nested"),
        ('{"times_ns": [' + HUGE_DIGITS + "]}", "a 5000-digit time"),
        ('{"times_ns": [NaN]}', "NaN"), ('{"times_ns": [1e999]}', "1e999"),
        ('{"times_ns": ["5"]}', "a string time"), ('{"times_ns": []}', "no times"),
        ('{"times_ns": [5], "profile_ns": ' + nested(20) + "}", "a nested profile"),
        ("[1]", "a list"), (json.dumps(good) * 2, "two reports on a line"),
        ('{"times_ns": [' + ",".join(["1"] * 100_000) + "]}", "100,000 times for 1 run")))
    if rng.random() < 0.2:
        text, detail = mutate_json(good, rng)
        text = text.replace("\n", "")
    return text, detail


def report_case(setup: Setup, seed: int, d: Path) -> tuple[list[str], str]:
    rng = random.Random(f"readback-report:{seed}")
    pkg = _copy_package(setup, d)
    text, detail = _report_text(rng, setup.meta)
    (d / "report.txt").write_bytes(text.encode("utf-8", "surrogateescape") + b"\n")
    size = setup.meta["outputs"][0]["bytes"]
    out_size = rng.choice((size, size, size, 0, size + 1, size - 1, 1 << 24))
    flood = rng.random() < 0.1
    # the one-shot harness's arguments: WARMUP RUNS IN_0 OUT_0
    script = (f'head -c {max(out_size, 0)} /dev/zero > "$4"\n'
              + ("yes 1234567890 | head -c 50000000\n" if flood else "")
              + f"cat '{d / 'report.txt'}'\n")
    exe = pkg / "bench" / "bench"
    exe.unlink()
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(0o755)
    detail += f"; output of {out_size} bytes" + ("; 50 MB on stdout first" if flood else "")
    return ["run", str(pkg), "--input", str(d / "x.npy"), "--out", str(d / "out")], detail


def _npz_member(rng: random.Random, seed: int, shape: list[int]) -> tuple[bytes, str]:
    """The bytes of the dataset's one member, and what was done to them."""
    kind = rng.choice(("valid", "valid", "npy", "npy", "raw", "shape"))
    if kind == "npy":
        data, detail, _, _ = npy_bytes(seed)
        return data, f"member: {detail}"
    if kind == "raw":
        return rng.randbytes(rng.randint(0, 300)), "member: raw bytes"
    n = rng.choice((1, 3, 40, 1000))
    dims = [n, *shape] if kind == "valid" else [n, *(d + rng.randint(1, 3) for d in shape)]
    buf = io.BytesIO()
    np.save(buf, np.zeros(dims, np.float32), allow_pickle=False)
    return buf.getvalue(), f"member: {'a valid' if kind == 'valid' else 'another'} shape {dims}"


def npz_case(setup: Setup, seed: int, d: Path) -> tuple[list[str], str]:
    rng = random.Random(f"readback-npz:{seed}")
    pkg = _copy_package(setup, d)
    info = setup.meta["inputs"][0]
    member, detail = _npz_member(rng, seed, info["shape"])
    key = rng.choice((info["name"], info["name"], "arr_0", "labels"))
    method = rng.choice((zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as z:
        z.writestr(zipfile.ZipInfo(f"{key}.npy", (1980, 1, 1, 0, 0, 0)), member,
                   compress_type=method)
    data = bytearray(buf.getvalue())
    detail += f", key {key}, {'deflated' if method else 'stored'}"
    archive = rng.choice(("whole", "whole", "flip", "cut"))
    if archive == "flip" and data:
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        detail += ", archive bytes flipped"
    elif archive == "cut":
        data = data[:rng.randrange(len(data))]
        detail += f", archive cut at {len(data)} bytes"
    (d / "data.npz").write_bytes(bytes(data))
    args = ["verify", str(pkg), "--dataset", str(d / "data.npz"), "--json"]
    if rng.random() < 0.5:
        args += ["--limit", str(rng.randint(1, 20))]
    return args, detail


CASES = {"metadata": metadata_case, "records": records_case, "npy": npy_case,
         "report": report_case, "npz": npz_case}


def run_case(setup: Setup, kind: str, seed: int, time_limit: float = 60.0,
             keep: bool = False) -> Result:
    """One case of the named kind, run and judged; its directory is removed
    unless it failed or `keep`."""
    d = _case_dir(setup, kind, seed)
    args, detail = CASES[kind](setup, seed, d)
    before = _snapshot(d, d / "out")
    code, stderr, seconds = run_cli(args, d, time_limit)
    failure = judge(code, stderr, before, _snapshot(d, d / "out"))
    if not failure and not keep:
        shutil.rmtree(d, ignore_errors=True)
    return Result(kind, seed, args[0], detail, code, seconds, failure, stderr)

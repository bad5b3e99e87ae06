#!/usr/bin/env python3
"""A package in a user's firmware build against `aot bench`: is it as fast?

    .venv/bin/python bench/firmware.py [--models kws,ic] [--cc clang,gcc]
                                       [--rounds R] [--batch K] [--cpu N] [--json FILE]

For each model (kws: mlperf_kws_dscnn_int8, ic: mlperf_ic_resnet8_f32, from
../shared/models) the package is built for the host board, then taken into
two firmware projects the way a user would, once per C compiler (--cc):

- cmake: `add_subdirectory(pkg)`, `target_link_libraries(fw PRIVATE <name>)`,
  no build type and no flags of its own (the case that ran 138x slower
  before the package carried its flags);
- make: the package's Makefile (`make -C pkg CC=...`, no CFLAGS), the
  program linked against build/lib<name>.a -lm, again without flags.

Each firmware is a small C main (fw_main.c below) that times every run with
clock_gettime. Every contender times K runs per round after a warm-up, in
interleaved rounds, pinned to one core (aot.check.timing.interleave), and is
reported by its median over all runs and the ratio of that median to
`aot bench`'s on the same package (the package's own harness, built by aot
with the target's compiler, clang). Exit 0 when every firmware built with
that compiler is within 1.25x of aot bench (other compilers are reported,
not judged: the code is the same, the compiler's is not). The outputs of each firmware are
compared with the harness's: int8 exact; float within 1e-5 (a compiler
contracts other multiply-adds into FMAs).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aot.check.timing import interleave, package_inputs, pin_to_one_core, stats_of  # noqa: E402
from aot.errors import AotError  # noqa: E402
from compare import cpu_name  # noqa: E402

SHARED = Path(os.environ.get("AOT_SHARED", REPO.parent / "shared"))
MODELS = {"kws": "mlperf_kws_dscnn_int8", "ic": "mlperf_ic_resnet8_f32"}
WARMUP = 10                 # untimed runs at the start of every batch
ACCEPT = 1.25               # a firmware build's median over aot bench's, at most
FLOAT_TOLERANCE = 1e-5

FW_MAIN = r"""/* A firmware's use of a package: WARMUP untimed runs, then RUNS runs each
 * timed with clock_gettime; prints {"times_ns": [...]} and writes the
 * outputs of the last run.   fw WARMUP RUNS IN_0.bin ... OUT_0.bin ... */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "@NAME@.h"

@BUFFERS@

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int file_io(const char* path, void* data, size_t bytes, int write) {
    FILE* f = fopen(path, write ? "wb" : "rb");
    size_t n;
    if (f == NULL) {
        return 0;
    }
    n = write ? fwrite(data, 1, bytes, f) : fread(data, 1, bytes, f);
    return fclose(f) == 0 && n == bytes;
}

int main(int argc, char** argv) {
    struct @NAME@_inputs in;
    struct @NAME@_outputs out;
    long warmup, runs, i;
    if (argc != 3 + @NUM_IO@) {
        fprintf(stderr, "usage: fw WARMUP RUNS IN... OUT...\n");
        return 2;
    }
    warmup = atol(argv[1]);
    runs = atol(argv[2]);
@BIND@
    for (i = 0; i < warmup; i++) {
        if (@NAME@_run(&in, &out) != AOT_OK) return 1;
    }
    printf("{\"times_ns\": [");
    for (i = 0; i < runs; i++) {
        uint64_t t0 = now_ns();
        if (@NAME@_run(&in, &out) != AOT_OK) return 1;
        printf("%s%llu", i ? ", " : "", (unsigned long long)(now_ns() - t0));
    }
    printf("]}\n");
@WRITE@
    return 0;
}
"""


@dataclass(frozen=True)
class Firmware:
    """One firmware program built against a package."""
    build: str                 # cmake | make
    cc: str
    exe: Path


def fw_main(meta: dict) -> str:
    """fw_main.c for the package described by metadata.json."""
    from aot.codegen.c import C_TYPES

    name, NAME = meta["name"], meta["name"].upper()
    ios = [("in", i, t) for i, t in enumerate(meta["inputs"])] + \
          [("out", i, t) for i, t in enumerate(meta["outputs"])]
    buffers, bind, write = [], [], []
    for k, (kind, i, t) in enumerate(ios):
        macro = f"{NAME}_{'INPUT' if kind == 'in' else 'OUTPUT'}_{t['c_name'].upper()}_SIZE"
        buf = f"{kind}put{i}"
        buffers.append(f"static {C_TYPES[t['dtype']]} {buf}[{macro}];")
        bind.append(f"    {kind}.{t['c_name']} = {buf};")
        if kind == "in":
            bind.append(f"    if (!file_io(argv[{3 + k}], {buf}, sizeof {buf}, 0)) return 2;")
        else:
            write.append(f"    if (!file_io(argv[{3 + k}], {buf}, sizeof {buf}, 1)) return 2;")
    return (FW_MAIN.replace("@BUFFERS@", "\n".join(buffers)).replace("@BIND@", "\n".join(bind))
            .replace("@WRITE@", "\n".join(write)).replace("@NUM_IO@", str(len(ios)))
            .replace("@NAME@", name))


def run_checked(cmd: list[str], cwd: Path) -> str:
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        raise AotError(f"{' '.join(cmd)} failed in {cwd}: {' / '.join(tail)}")
    return r.stdout


def build_cmake(pkg: Path, work: Path, cc: str) -> Path:
    """add_subdirectory, no build type, no flags: what a user writes first."""
    name = json.loads((pkg / "metadata.json").read_text())["name"]
    (work / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.13)\nproject(firmware C)\n"
        f"add_subdirectory({pkg} pkg)\nadd_executable(fw fw_main.c)\n"
        f"target_link_libraries(fw PRIVATE {name})\n")
    run_checked(["cmake", "-S", ".", "-B", "build", f"-DCMAKE_C_COMPILER={cc}"], work)
    run_checked(["cmake", "--build", "build", "-j", "2"], work)
    return work / "build" / "fw"


def build_make(pkg: Path, work: Path, cc: str) -> Path:
    """The package's Makefile without CFLAGS, the program without flags."""
    name = json.loads((pkg / "metadata.json").read_text())["name"]
    copy = work / "pkg"
    run_checked(["cp", "-r", str(pkg), str(copy)], work)
    run_checked(["make", "-C", "pkg", f"CC={cc}", "-j", "2"], work)
    run_checked([cc, "-Ipkg/include", "-Ipkg/runtime_c", "fw_main.c",
                 f"pkg/build/lib{name}.a", "-lm", "-o", "fw"], work)
    return work / "fw"


def build_firmwares(pkg: Path, work: Path, compilers: list[str]) -> list[Firmware]:
    main = fw_main(json.loads((pkg / "metadata.json").read_text()))
    out = []
    for cc in compilers:
        for build, make in (("cmake", build_cmake), ("make", build_make)):
            d = work / f"{build}-{cc}"
            d.mkdir(parents=True)
            (d / "fw_main.c").write_text(main)
            out.append(Firmware(build, cc, make(pkg, d, cc)))
    return out


def run_firmware(fw: Firmware, files: list[Path], outs: list[Path], runs: int) -> list[float]:
    stdout = run_checked([str(fw.exe), str(WARMUP), str(runs), *map(str, files),
                          *map(str, outs)], fw.exe.parent)
    return [t / 1e6 for t in json.loads(stdout)["times_ns"]]


def compare_outputs(meta: dict, reference: list[np.ndarray], outs: list[Path]) -> str:
    """'exact', 'max |diff| x' (float, within tolerance), or raises."""
    worst = 0.0
    for spec, ref, path in zip(meta["outputs"], reference, outs):
        got = np.fromfile(path, dtype=np.dtype(spec["dtype"])).reshape(ref.shape)
        if spec["dtype"].startswith("float"):
            worst = max(worst, float(np.max(np.abs(got - ref))))
        elif not np.array_equal(got, ref):
            raise AotError(f"{path}: {spec['name']} differs from aot's harness")
    if worst > FLOAT_TOLERANCE:
        raise AotError(f"outputs differ from aot's harness by {worst:.3g}")
    return "exact" if worst == 0 else f"max |diff| {worst:.1e}"


def measure(model: str, work: Path, compilers: list[str], rounds: int, batch: int,
            log: Callable[[str], None]) -> dict:
    import aot
    from aot.api import package
    from aot.check.timing import time_package
    from aot.deploy import run_package
    from aot.targets import get_board

    board = get_board("host")
    log(f"{model}: package for {board.name}")
    pkg = work / model / "pkg"
    graph = aot.optimize(aot.load(SHARED / "models" / f"{model}.tflite"))
    info = package(graph, board=board, out_dir=pkg)
    meta = info.metadata
    inputs = package_inputs(meta)
    files = []
    for i, x in enumerate(inputs):
        files.append(work / model / f"in{i}.bin")
        np.ascontiguousarray(x).tofile(files[-1])
    reference = run_package(pkg, board, inputs, warmup=0, runs=1).outputs
    log(f"{model}: firmware builds ({', '.join(compilers)}; cmake and make)")
    firmwares = build_firmwares(pkg, work / model, compilers)
    contenders: dict[str, Callable[[], list[float]]] = {
        "aot bench": lambda: time_package(pkg, board, inputs, WARMUP, batch)}
    checks = {}
    for fw in firmwares:
        outs = [fw.exe.parent / f"out{i}.bin" for i in range(len(meta["outputs"]))]
        run_firmware(fw, files, outs, 1)
        key = f"{fw.build} {fw.cc}"
        checks[key] = compare_outputs(meta, reference, outs)
        contenders[key] = (lambda fw=fw, outs=outs: run_firmware(fw, files, outs, batch))
    log(f"{model}: {rounds} rounds x {batch} runs of {len(contenders)} contenders")
    times = interleave(contenders, rounds)
    base = stats_of(times["aot bench"]).median_ms
    rows = []
    for key, t in times.items():
        s = stats_of(t)
        rows.append({"contender": key, "median_ms": s.median_ms, "p10_ms": s.p10_ms,
                     "runs": s.n, "ratio": s.median_ms / base,
                     "outputs": checks.get(key, "reference")})
    return {"model": model, "package": meta["name"], "cc": board.target.cc,
            "flags": meta["target"]["cflags"], "rows": rows}


def compiler_version(cc: str) -> str:
    try:
        return subprocess.run([cc, "--version"], capture_output=True, text=True,
                              timeout=30).stdout.splitlines()[0]
    except (OSError, IndexError):
        return "unknown"


def table(result: dict):
    from rich.table import Table

    t = Table(title=f"{result['model']}: times per run", title_justify="left")
    for col, justify in (("contender", "left"), ("median us", "right"), ("p10 us", "right"),
                         ("runs", "right"), ("/ aot bench", "right"), ("outputs", "left")):
        t.add_column(col, justify=justify)
    for r in result["rows"]:
        t.add_row(r["contender"], f"{r['median_ms'] * 1000:,.1f}", f"{r['p10_ms'] * 1000:,.1f}",
                  str(r["runs"]), f"{r['ratio']:.2f}x", r["outputs"])
    return t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="kws,ic", help="comma-separated: kws, ic (default: both)")
    p.add_argument("--cc", default="clang,gcc",
                   help="the firmware's C compilers (default: clang,gcc)")
    p.add_argument("--rounds", type=int, default=10, help="interleaved rounds (default: 10)")
    p.add_argument("--batch", type=int, default=200,
                   help="timed runs per contender per round (default: 200)")
    p.add_argument("--cpu", type=int, help="the core to pin to (default: the last one)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = p.parse_args(argv)
    from rich.console import Console

    console = Console() if sys.stdout.isatty() else Console(width=120)
    err = Console(stderr=True)
    try:
        models = [m.strip() for m in args.models.split(",") if m.strip()]
        unknown = [m for m in models if m not in MODELS]
        if unknown or not models:
            raise AotError(f"--models: unknown {', '.join(unknown) or '(none)'} "
                           f"(known: {', '.join(MODELS)})")
        if args.rounds < 1 or args.batch < 1:
            raise AotError("--rounds and --batch must be >= 1")
        compilers = [c.strip() for c in args.cc.split(",") if c.strip()]
        cpu = pin_to_one_core(args.cpu)
        with tempfile.TemporaryDirectory(prefix="aot-fw-bench-") as tmp:
            results = [measure(MODELS[m], Path(tmp), compilers, args.rounds, args.batch,
                               lambda msg: err.print(msg, highlight=False)) for m in models]
    except AotError as e:
        print(f"firmware.py: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    for r in results:
        console.print(table(r))
        console.print()
    versions = {cc: compiler_version(cc) for cc in compilers}
    flags = results[0]["flags"] if results else []
    notes = [f"host: {cpu_name()}, pinned to CPU {cpu}; board host, package flags "
             f"{' '.join(flags)} (aot bench: the package's harness built by aot with clang)",
             "firmware projects add no flags and no build type: the package's build files "
             "bring its flags",
             *(f"{cc}: {v}" for cc, v in versions.items()),
             f"{args.rounds} interleaved rounds x {args.batch} timed runs per contender "
             f"(after {WARMUP} warm-up each round); load average {os.getloadavg()[0]:.1f}"]
    for n in notes:
        console.print(f"- {n}", highlight=False)
    # The verdict compares like with like: the compiler aot built its harness with.
    same = [r["ratio"] for res in results for r in res["rows"]
            if r["contender"].endswith(f" {res['cc']}")]
    worst = max(same, default=1.0)
    console.print(f"- accepted when every firmware build with aot's compiler is within {ACCEPT}x "
                  f"of aot bench: worst {worst:.2f}x, {'ok' if worst <= ACCEPT else 'FAILED'}",
                  highlight=False)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"host": {"cpu": cpu_name(), "pinned_cpu": cpu}, "compilers": versions,
             "rounds": args.rounds, "batch": args.batch, "warmup": WARMUP,
             "accept_ratio": ACCEPT, "models": results}, indent=2) + "\n")
    return 0 if worst <= ACCEPT else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""aot against ONNX Runtime and LiteRT on the MLPerf Tiny models, on the host.

    .venv/bin/python bench/compare.py [--models kws,vww,ic,ad] [--codegen c|llvm]
                                      [--rounds R] [--batch K] [--json FILE]

For each model (int8 and float .tflite in ../shared/models) the contenders
are:

- aot c / aot llvm: the package built for the host, timed inside its harness
  (bench/bench: per-invocation times on the ns clock);
- onnxruntime: the float model's tf2onnx version (derived/*.tf2onnx.b1.onnx,
  NHWC input, the same input as the .tflite), one thread, sequential, input
  and output pre-bound (run_with_iobinding);
- litert xnnpack: LiteRT with its default delegate (XNNPACK), one thread;
- litert builtin: LiteRT without the default delegate (its builtin kernels).

The Python anchors are timed with perf_counter_ns around the call alone;
that includes one Python-to-C call, measured and printed.

Everything is single-threaded and pinned to one core. The machine is shared
and noisy (/work/shared/PERFORMANCE.md): contenders run in interleaved
rounds (every contender runs a batch of K invocations, after a few warm-up
ones, once per round; the order rotates), and each is reported by its median
and its 10th percentile over all rounds.

Memory beside speed: aot's arena (and the lower bound no placement can
beat) and tflite-micro's arena for the same model, read from its recording
allocator; where tflite-micro cannot run the model the published MLPerf
Tiny value is shown, marked as such.

aot is built for a board of this machine: by default host-avx512 where the
CPU has AVX-512 (the anchors' own kernels are picked by the CPU too), else
host (AVX2); `--board host` forces the AVX2 code. `--json FILE` writes every
number the tables show.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aot.bench import (call_overhead_ms, interleave, pin_to_one_core, stats_of,  # noqa: E402
                       time_calls, time_package)
from aot.errors import AotError  # noqa: E402

SHARED = Path(os.environ.get("AOT_SHARED", REPO.parent / "shared"))
MODELS = SHARED / "models"
FAMILIES = {"kws": "mlperf_kws_dscnn", "vww": "mlperf_vww_mbv1",
            "ic": "mlperf_ic_resnet8", "ad": "mlperf_ad_fcae"}
KINDS = ("int8", "f32")
# MLPerf Tiny's tflite-micro arenas for the int8 models, used only when the
# tflite_micro interpreter cannot measure them here.
PUBLISHED_TFLM_ARENA = {"mlperf_kws_dscnn": 24272, "mlperf_vww_mbv1": 103680,
                        "mlperf_ic_resnet8": 55984, "mlperf_ad_fcae": 3984}
ANCHORS = ("onnxruntime", "litert xnnpack", "litert builtin")
SHORT = {"onnxruntime": "ort", "litert xnnpack": "xnnpack", "litert builtin": "builtin"}
WARMUP = 3                 # untimed invocations at the start of every batch


@dataclass
class Case:
    """One model file and what is measured on it."""
    name: str                          # e.g. mlperf_kws_dscnn_int8
    family: str                        # e.g. mlperf_kws_dscnn
    tflite: Path
    onnx: Path | None
    inputs: list[np.ndarray]
    packages: dict[str, Path] = field(default_factory=dict)    # codegen -> package
    meta: dict = field(default_factory=dict)
    check: str = ""
    outputs_ok: bool = False
    tflm: dict = field(default_factory=dict)


# ------------------------------------------------------------------ contenders

def aot_contender(pkg: Path, board, inputs, batch: int) -> Callable[[], list[float]]:
    return lambda: time_package(pkg, board, inputs, WARMUP, batch)


def onnxruntime_contender(path: Path, inputs, batch: int) -> Callable[[], list[float]]:
    """One thread, sequential, input and outputs bound once: run() then does
    nothing but the model."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    binding = sess.io_binding()
    keep = []                          # the bound arrays must outlive the session's runs
    for spec, x in zip(sess.get_inputs(), inputs):
        value = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(x, np.float32))
        binding.bind_ortvalue_input(spec.name, value)
        keep.append(value)
    for spec in sess.get_outputs():
        if all(isinstance(d, int) for d in spec.shape):
            value = ort.OrtValue.ortvalue_from_numpy(np.empty(spec.shape, np.float32))
            binding.bind_ortvalue_output(spec.name, value)
            keep.append(value)
        else:
            binding.bind_output(spec.name)

    def run(_alive=tuple(keep)) -> list[float]:
        return time_calls(lambda: sess.run_with_iobinding(binding), batch, WARMUP)
    return run


def litert_contender(path: Path, inputs, batch: int, xnnpack: bool
                     ) -> Callable[[], list[float]]:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    resolver = (OpResolverType.AUTO if xnnpack
                else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it = Interpreter(model_path=str(path), num_threads=1,
                     experimental_op_resolver_type=resolver)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x)
    return lambda: time_calls(it.invoke, batch, WARMUP)


def contenders(case: Case, board, batch: int) -> dict[str, Callable[[], list[float]]]:
    out = {f"aot {cg}": aot_contender(pkg, board, case.inputs, batch)
           for cg, pkg in case.packages.items()}
    if case.onnx is not None:
        out["onnxruntime"] = onnxruntime_contender(case.onnx, case.inputs, batch)
    out["litert xnnpack"] = litert_contender(case.tflite, case.inputs, batch, True)
    out["litert builtin"] = litert_contender(case.tflite, case.inputs, batch, False)
    return out


# ---------------------------------------------------------------------- memory

def tflm_arena(case: Case) -> dict:
    """tflite-micro's arena for the model: its recording allocator prints the
    bytes used (total; head = the non-persistent tensors) on the C stderr."""
    from tflite_micro.python.tflite_micro import runtime

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as log:
        os.dup2(log.fileno(), 2)
        try:
            it = runtime.Interpreter.from_file(str(case.tflite))
            for i, x in enumerate(case.inputs):
                it.set_input(x, i)
            it.invoke()
            it.print_allocations()
            error = None
        except Exception as e:        # a model tflite-micro refuses: fall back below
            error = str(e).splitlines()[0] if str(e) else type(e).__name__
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        log.seek(0)
        text = log.read().decode(errors="replace")
    total = re.search(r"Arena allocation total (\d+) bytes", text)
    head = re.search(r"Arena allocation head (\d+) bytes", text)
    said = [line for line in text.splitlines() if line.strip() and "Recording" not in line]
    if said:                          # its own reason ("Hybrid models are not supported")
        error = re.sub(r"^\S+\.cc\s+", "", said[0]).strip()
    if error is None and total:
        return {"bytes": int(total[1]), "head_bytes": int(head[1]) if head else None,
                "source": "measured"}
    if case.name.endswith("_int8"):
        return {"bytes": PUBLISHED_TFLM_ARENA[case.family], "head_bytes": None,
                "source": f"published (not measurable here: {error or 'no report'})"}
    return {"bytes": None, "head_bytes": None,
            "source": f"refused: {error or 'no report'}"}


# --------------------------------------------------------------------- prepare

def find_cases(families: list[str]) -> list[Case]:
    cases = []
    for fam in families:
        for kind in KINDS:
            name = f"{fam}_{kind}"
            tflite = MODELS / f"{name}.tflite"
            if not tflite.is_file():
                raise AotError(f"{tflite} is missing: is ../shared/models there?")
            onnx = MODELS / "derived" / f"{name}.tf2onnx.b1.onnx"
            inputs = [np.load(MODELS / f"{name}.input.npy")]
            cases.append(Case(name, fam, tflite, onnx if onnx.is_file() else None, inputs))
    return cases


def prepare(case: Case, board, codegens: list[str], workdir: Path, log) -> None:
    """Package the model per codegen, check the package's outputs against the
    reference runtime, measure tflite-micro's arena."""
    from aot.api import as_graph, package
    from aot.deploy import run_package
    from aot.deploy.reference import compare, reference_outputs

    graph = as_graph(case.tflite)
    ref, want = reference_outputs(case.tflite, graph, case.inputs)
    checks, oks = [], []
    for cg in codegens:
        t0 = time.perf_counter()
        info = package(graph, board=board.name, codegen=cg, out_dir=workdir / f"{case.name}.{cg}")
        log(f"  packaged {case.name} ({cg}) in {time.perf_counter() - t0:.1f} s")
        case.packages[cg] = info.path
        case.meta = info.metadata      # the plan does not depend on the codegen
        got = run_package(info.path, board, case.inputs).outputs
        rows = [compare(n, g, w) for n, g, w in zip(graph.outputs, got, want)]
        ok = all(r["ok"] for r in rows)
        err = max((r["max_abs_err"] or 0.0) for r in rows)
        oks.append(ok)
        checks.append(f"{cg}: {'ok' if ok else 'MISMATCH'} vs {ref} (max err {err:.2g})")
    case.check = "; ".join(checks)
    case.outputs_ok = all(oks)
    case.tflm = tflm_arena(case)


# ---------------------------------------------------------------------- report

def summarize(case: Case, times: dict[str, list[float]]) -> dict:
    stats = {name: stats_of(t) for name, t in times.items()}
    anchors = [a for a in ANCHORS if a in stats]
    best = min(anchors, key=lambda a: stats[a].median_ms)
    best_p10 = min(stats[a].p10_ms for a in anchors)
    ratios = {name: {"median": s.median_ms / stats[best].median_ms,
                     "p10": s.p10_ms / best_p10}
              for name, s in stats.items() if name.startswith("aot")}
    return {"model": case.name, "contenders": {n: s.as_json() for n, s in stats.items()},
            "best_anchor": best, "aot_over_best_anchor": ratios,
            "arena_bytes": case.meta["arena_bytes"],
            "arena_lower_bound_bytes": case.meta["arena_lower_bound_bytes"],
            "params_bytes": case.meta["params_bytes"],
            "tflm_arena_bytes": case.tflm["bytes"],
            "tflm_arena_head_bytes": case.tflm["head_bytes"],
            "tflm_arena_source": case.tflm["source"], "check": case.check,
            "outputs_ok": case.outputs_ok}


def us(ms: float) -> str:
    return f"{ms * 1000:,.1f}"


def nbytes(n) -> str:
    return "n/a" if n is None else f"{n:,}"


def model_table(row: dict):
    from rich.table import Table

    best = row["best_anchor"]
    tflm = row["tflm_arena_bytes"]
    if tflm is None:
        tflm_text = f"n/a, {row['tflm_arena_source']}"
    else:
        head = row["tflm_arena_head_bytes"]
        tflm_text = (f"{nbytes(tflm)} B" + (f" ({nbytes(head)} B of it tensors)" if head else "")
                     + f", {row['tflm_arena_source']}")
    caption = (f"aot arena {nbytes(row['arena_bytes'])} B (lower bound "
               f"{nbytes(row['arena_lower_bound_bytes'])} B), params "
               f"{nbytes(row['params_bytes'])} B; tflite-micro arena {tflm_text}\n"
               f"outputs: {row['check']}")
    table = Table(title=row["model"], caption=caption, title_justify="left",
                  caption_justify="left")
    table.add_column("contender")
    for col in ("median us", "p10 us", "runs", "aot / best anchor (median, p10)"):
        table.add_column(col, justify="right")
    for name, s in row["contenders"].items():
        ratio = row["aot_over_best_anchor"].get(name)
        label = name + (" (best anchor)" if name == best else "")
        table.add_row(label, us(s["median_ms"]), us(s["p10_ms"]), str(s["n"]),
                      f"{ratio['median']:.2f}x, {ratio['p10']:.2f}x" if ratio else "")
    return table


def summary_table(rows: list[dict], codegens: list[str]):
    from rich.table import Table

    table = Table(title="summary: medians in us; aot / best anchor by median (by p10); "
                  "below 1x aot is faster",
                  title_justify="left")
    table.add_column("model")
    for cg in codegens:
        table.add_column(f"aot {cg}", justify="right")
    for a in ANCHORS:
        table.add_column(SHORT.get(a, a), justify="right")
    for cg in codegens:
        table.add_column(f"{cg} / best", justify="right")
    for col in ("arena B", "bound B", "tflm B"):
        table.add_column(col, justify="right")
    for row in rows:
        c = row["contenders"]
        cells = [row["model"].removeprefix("mlperf_")]
        cells += [us(c[f"aot {cg}"]["median_ms"]) for cg in codegens]
        cells += [us(c[a]["median_ms"]) if a in c else "-" for a in ANCHORS]
        ratios = row["aot_over_best_anchor"]
        cells += [f"{ratios[f'aot {cg}']['median']:.2f}x ({ratios[f'aot {cg}']['p10']:.2f}x)"
                  for cg in codegens]
        tflm = nbytes(row["tflm_arena_bytes"])
        if row["tflm_arena_source"].startswith("published"):
            tflm += "*"
        cells += [nbytes(row["arena_bytes"]), nbytes(row["arena_lower_bound_bytes"]), tflm]
        table.add_row(*cells)
    return table


# ------------------------------------------------------------------------ main

def host_board(name: str | None):
    """The board to build for: `name`, which must run on this machine, or by
    default the fastest local board this CPU can run (host-avx512 where the
    CPU has AVX-512, as XNNPACK and ONNX Runtime pick their kernels by it)."""
    from aot.deploy.host import check_cpu
    from aot.targets import boards

    known = boards()
    if name is None:
        for candidate in ("host-avx512", "host"):
            try:
                check_cpu(known[candidate])
                return known[candidate]
            except AotError:
                continue
        name = "host"
    board = known.get(name)
    if board is None or board.transport != "local":
        local = ", ".join(sorted(n for n, b in known.items() if b.transport == "local"))
        raise AotError(f"board '{name}' is not available yet: compare.py runs on this "
                       f"machine's boards only ({local})")
    check_cpu(board)
    return board


def parse_models(text: str | None) -> list[str]:
    if not text:
        return list(FAMILIES.values())
    out = []
    for item in text.split(","):
        item = item.strip().removesuffix("_int8").removesuffix("_f32")
        fam = FAMILIES.get(item, item)
        if fam not in FAMILIES.values():
            raise AotError(f"unknown model '{item}' (known: {', '.join(FAMILIES)})")
        out.append(fam)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", help="comma-separated: kws, vww, ic, ad (default: all)")
    p.add_argument("--codegen", choices=("c", "llvm"), help="one codegen (default: both)")
    p.add_argument("--board", help="a board of this machine: host or host-avx512 (default: "
                   "the fastest this CPU runs)")
    p.add_argument("--rounds", type=int, default=20, help="interleaved rounds (default: 20)")
    p.add_argument("--batch", type=int, default=25,
                   help="timed invocations per contender per round (default: 25)")
    p.add_argument("--cpu", type=int, help="the core to pin to (default: the last one)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = p.parse_args(argv)
    from rich.console import Console

    console = Console()
    if not console.is_terminal:       # a log or a pipe: wide enough for the summary
        console = Console(width=150)
    err = Console(stderr=True)
    try:
        board = host_board(args.board)
        if args.rounds < 1 or args.batch < 1:
            raise AotError("--rounds and --batch must be >= 1")
        families = parse_models(args.models)
        codegens = [args.codegen] if args.codegen else ["c", "llvm"]
        cpu = pin_to_one_core(args.cpu)
        rows = run(find_cases(families), board, codegens, args.rounds, args.batch,
                   lambda msg: err.print(msg, highlight=False))
    except AotError as e:
        print(f"compare.py: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    overhead = call_overhead_ms()
    for row in rows:
        console.print(model_table(row))
        console.print()
    console.print(summary_table(rows, codegens))
    notes = [
        f"host: {cpu_name()}, pinned to CPU {cpu}, one thread everywhere; aot built for "
        f"board {board.name} (target {board.target.name}); load average "
        f"{os.getloadavg()[0]:.1f} at the end",
        f"{args.rounds} interleaved rounds x {args.batch} timed invocations per contender "
        f"(after {WARMUP} warm-up each round); a long invocation is preempted more often on "
        "a loaded machine: where median and p10 differ much, trust p10",
        "aot: per-invocation times from the package's harness (ns clock, in the process "
        "that runs the model)",
        f"Python anchors: perf_counter_ns around invoke() / run_with_iobinding(); an empty "
        f"call timed the same way costs {overhead * 1e3:.2f} us",
        "onnxruntime: the float model's tf2onnx version; int8 models have no ONNX version",
        "tflm: tflite-micro's arena from its recording allocator (n/a: it refuses the "
        "model); * MLPerf Tiny's published value where it cannot be measured",
        "bound: the most bytes live at one step, the least any placement needs",
    ]
    for n in notes:
        console.print(n, highlight=False, soft_wrap=True)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"host": {"cpu": cpu_name(), "pinned_cpu": cpu, "board": board.name,
                      "target": board.target.name,
                      "load_average": os.getloadavg()[0]}, "versions": versions(),
             "rounds": args.rounds, "batch": args.batch, "warmup": WARMUP,
             "python_call_overhead_ms": overhead, "models": rows}, indent=2) + "\n")
    return 0


def run(cases: list[Case], board, codegens: list[str], rounds: int, batch: int, log
        ) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="aot-compare-") as tmp:
        for case in cases:
            prepare(case, board, codegens, Path(tmp), log)
            t0 = time.perf_counter()
            times = interleave(contenders(case, board, batch), rounds)
            log(f"  timed {case.name} in {time.perf_counter() - t0:.1f} s")
            rows.append(summarize(case, times))
    return rows


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("aot", "onnxruntime", "ai-edge-litert", "tflite-micro", "numpy"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "not installed"
    return out


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    sys.exit(main())

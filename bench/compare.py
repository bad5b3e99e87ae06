#!/usr/bin/env python3
"""aot against ONNX Runtime and LiteRT on the MLPerf Tiny models, on the host;
aot alone on another board (--board qemu-rpi4, qemu-aarch64, rpi4 --host ...).

    .venv/bin/python bench/compare.py [--models kws,vww,ic,ad] [--codegen c|llvm]
                                      [--board B [--host H ...]] [--rounds R]
                                      [--batch K] [--threads N] [--json FILE]

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

Everything is single-threaded and pinned to one core, unless --threads N
(N > 1): then aot's packages are built with --threads N, ONNX Runtime gets
intra_op_num_threads=N and LiteRT num_threads=N, and nothing is pinned
(the threads need the cores). The machine is shared
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

    .venv/bin/python bench/compare.py --tuned [--trials N] [--tuning-dir DIR]

tunes each model first (aot.tune, `--trials N`, default 32, on the same
pinned core the timing uses; once per codegen, as a schedule the C
compiler likes best need not suit LLVM) and times aot's tuned packages
(built with the log as --tuning-records) beside the untuned ones and the
anchors, in the same interleaved rounds; the summary gets both and the
median of each over the models. The logs are kept in DIR (default
~/.cache/aot/compare-tuning), one per model file, board, codegen, aot
version and trial count, and a rerun reuses them instead of tuning again.

Any other board of aot's (`aot boards`) reports aot alone, since ONNX Runtime
and LiteRT do not run there: per model and codegen the package built for
the board, its outputs checked against the reference runtime on this
machine, its timings from the harness on the board (same rounds and
batches, aot c and aot llvm interleaved), and the same memory numbers. The
whole run keeps one connection (aot.connect): one VM for qemu-rpi4 (or the
one `aot board up qemu-rpi4` keeps), each harness uploaded and started once.
An SSH board takes --host/--port/--user/--key/--known-hosts/--exec-prefix/
--trust-new-host-key as `aot bench` does, over ~/.config/aot/boards.toml.
Emulated boards (qemu-rpi4, qemu-aarch64) run the real code, but their
times are the emulator's on this machine, and the report says so.

    .venv/bin/python bench/compare.py --board qemu-aarch64 --count-instructions
                                      [--cpu cortex-a72|cortex-a76] [--invocations N]

counts instructions instead of timing, on the same emulated Arm core for
both sides: aot's package built for rpi4 (Cortex-A72) or rpi5 (Cortex-A76),
its median instructions per run from the harness under qemu-aarch64, and
LiteRT with XNNPACK (one thread) run by an arm64 Python under the same
qemu-aarch64 -cpu (aot/deploy/arm64_python.py: the sysroot, the counting
method). Per model the counts, aot / XNNPACK, and the median ratios. ONNX
Runtime is left out: its aarch64 wheel dies at import under qemu-user.

    .venv/bin/python bench/compare.py --board qemu-aarch64 --count-instructions
                                      --tuned [--trials N] [--tuning-dir DIR]

tunes each model's rpi4 (rpi5) package first: aot tune for that board, every
candidate run under qemu-aarch64 with the package's own -cpu, its kernels'
instructions counted exactly (aot/tune/search.py), one log per model file,
board, emulated core, codegen, aot version and trial count, kept in DIR and
reused; then counts the tuned package beside the untuned one and XNNPACK.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aot.check.timing import (call_overhead_ms, interleave, pin_to_one_core, stats_of,  # noqa: E402
                              time_calls, time_package)
from aot.errors import AotError  # noqa: E402
from aot.deploy.arm64_python import INVOCATIONS  # noqa: E402

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
# --count-instructions: the emulated core, and the board aot builds for it.
EMULATED_CPUS = {"cortex-a72": "rpi4", "cortex-a76": "rpi5"}
COUNTED_RUNS = 5           # aot's runs per package (after one warm-up); the counts agree
DEFAULT_TRIALS = 32        # --tuned: aot tune's trials per model
TUNED = " tuned"           # suffix of the tuned packages' variant (aot c tuned)


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
    records: dict[str, Path] = field(default_factory=dict)  # --tuned: codegen -> aot tune log
    tuning: dict = field(default_factory=dict)             # codegen -> what the tuning did


# ------------------------------------------------------------------ contenders

def aot_contender(pkg: Path, board, inputs, batch: int) -> Callable[[], list[float]]:
    return lambda: time_package(pkg, board, inputs, WARMUP, batch)


def onnxruntime_contender(path: Path, inputs, batch: int, threads: int = 1
                          ) -> Callable[[], list[float]]:
    """`threads` threads in one operator at a time, sequential, input and
    outputs bound once: run() then does nothing but the model."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
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


def litert_contender(path: Path, inputs, batch: int, xnnpack: bool, threads: int = 1
                     ) -> Callable[[], list[float]]:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    resolver = (OpResolverType.AUTO if xnnpack
                else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it = Interpreter(model_path=str(path), num_threads=threads,
                     experimental_op_resolver_type=resolver)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x)
    return lambda: time_calls(it.invoke, batch, WARMUP)


def contenders(case: Case, board, batch: int, threads: int = 1
               ) -> dict[str, Callable[[], list[float]]]:
    out = {f"aot {cg}": aot_contender(pkg, board, case.inputs, batch)
           for cg, pkg in case.packages.items()}
    if case.onnx is not None:
        out["onnxruntime"] = onnxruntime_contender(case.onnx, case.inputs, batch, threads)
    out["litert xnnpack"] = litert_contender(case.tflite, case.inputs, batch, True, threads)
    out["litert builtin"] = litert_contender(case.tflite, case.inputs, batch, False, threads)
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


def prepare(case: Case, board, codegens: list[str], workdir: Path, log,
            run_on_board: Callable | None = None, threads: int = 1) -> None:
    """Package the model per codegen, check the package's outputs against the
    reference runtime, measure tflite-micro's arena. `run_on_board(pkg,
    inputs)` runs a package (default: run_package, one run per call)."""
    from aot.api import as_graph, package
    from aot.deploy import run_package
    from aot.check.reference import compare, reference_outputs

    if run_on_board is None:
        def run_on_board(pkg, inputs):
            return run_package(pkg, board, inputs)

    graph = as_graph(case.tflite)
    ref, want = reference_outputs(case.tflite, graph, case.inputs)
    checks, oks = [], []
    variants = [(cg, None) for cg in codegens]
    variants += [(cg + TUNED, case.records[cg]) for cg in codegens if cg in case.records]
    for variant, records in variants:
        cg = variant.removesuffix(TUNED)
        t0 = time.perf_counter()
        info = package(graph, board=board.name, codegen=cg,
                       out_dir=workdir / f"{case.name}.{variant.replace(' ', '-')}",
                       threads=threads, tuning_records=records)
        log(f"  packaged {case.name} ({variant}) in {time.perf_counter() - t0:.1f} s")
        case.packages[variant] = info.path
        if records is None:            # the plan depends on neither codegen nor schedule
            case.meta = info.metadata
        got = run_on_board(info.path, case.inputs).outputs
        rows = [compare(n, g, w) for n, g, w in zip(graph.outputs, got, want)]
        ok = all(r["ok"] for r in rows)
        err = max((r["max_abs_err"] or 0.0) for r in rows)
        oks.append(ok)
        checks.append(f"{variant}: {'ok' if ok else 'MISMATCH'} vs {ref} (max err {err:.2g})")
    case.check = "; ".join(checks)
    case.outputs_ok = all(oks)
    case.tflm = tflm_arena(case)


# ---------------------------------------------------------------------- tuning

def default_tuning_dir() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "aot" / "compare-tuning"


def tuning_log(case: Case, board, codegen: str, trials: int, directory: Path,
               runs_on=None) -> Path:
    """The log of `case` tuned on `board`: one per model file (by content),
    board (and the emulated core it was counted on), codegen, aot version
    and trial count, so a rerun reuses it and a changed model or aot is
    tuned again."""
    import hashlib

    import aot

    digest = hashlib.sha256(case.tflite.read_bytes()).hexdigest()[:12]
    where = board.name if runs_on is None else f"{board.name}@{runs_on.name}-{board.target.cpu}"
    return directory / (f"{case.name}.{digest}.{where}.{codegen}.aot-{aot.__version__}"
                        f".t{trials}.jsonl")


def tune_case(case: Case, board, codegen: str, trials: int, directory: Path, log,
              runs_on=None) -> None:
    """Tune the model for `board` unless its log is there; a run cut short
    leaves no log (it is written under another name and renamed at the end).
    runs_on: the board that measures (qemu-aarch64 counting an rpi4 or rpi5
    package's instructions on the package's own core), else `board`."""
    from functools import partial

    from aot.tune import tune
    from aot.tune.records import read
    from aot.tune.search import Runner

    path = tuning_log(case, board, codegen, trials, directory, runs_on)
    done = path.with_name(path.name + ".summary.json")   # what the search took
    if path.is_file():
        log(f"  reusing {path}")
        before = json.loads(done.read_text()) if done.is_file() else {}
        case.tuning[codegen] = {**before, "log": str(path), "reused": True, "trials": trials,
                                "records": len(read(path))}
    else:
        directory.mkdir(parents=True, exist_ok=True)
        unfinished = path.with_suffix(".partial")
        unfinished.unlink(missing_ok=True)
        t0 = time.perf_counter()
        summary = tune(case.tflite, board, trials=trials, log=unfinished, codegen=codegen,
                       runner_for=partial(Runner, codegen=codegen, runs_on=runs_on))
        unfinished.rename(path)
        log(f"  tuned {case.name} ({codegen}) for {board.name}: {summary['improved']} of "
            f"{summary['tunable']} tunable workloads faster, {trials} trials in "
            f"{time.perf_counter() - t0:.0f} s")
        case.tuning[codegen] = {"log": str(path), "reused": False, "trials": trials,
                       "records": summary["records_written"], "seconds": summary["seconds"],
                       "trials_run": summary["trials_run"],
                       "discarded": summary["discarded"], "failed": summary["failed"],
                       "workloads": summary["workloads"], "tunable": summary["tunable"],
                       "improved": summary["improved"], "best": summary["best"]}
        done.write_text(json.dumps({k: case.tuning[codegen][k] for k in
                                    ("trials_run", "discarded", "failed", "seconds",
                                     "tunable", "improved")}) + "\n")
    case.records[codegen] = path


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
            "best_anchor": best, "aot_over_best_anchor": ratios, **case_facts(case)}


def summarize_alone(case: Case, times: dict[str, list[float]]) -> dict:
    """A board without anchors: aot's timings and the memory numbers."""
    return {"model": case.name,
            "contenders": {n: stats_of(t).as_json() for n, t in times.items()},
            **case_facts(case)}


def case_facts(case: Case) -> dict:
    """What does not depend on the timings: memory and the output check."""
    return {"arena_bytes": case.meta["arena_bytes"],
            "arena_lower_bound_bytes": case.meta["arena_lower_bound_bytes"],
            "params_bytes": case.meta["params_bytes"],
            "tflm_arena_bytes": case.tflm["bytes"],
            "tflm_arena_head_bytes": case.tflm["head_bytes"],
            "tflm_arena_source": case.tflm["source"], "check": case.check,
            "outputs_ok": case.outputs_ok, **({"tuning": case.tuning} if case.tuning else {})}


def us(ms: float) -> str:
    return f"{ms * 1000:,.1f}"


def nbytes(n) -> str:
    return "n/a" if n is None else f"{n:,}"


def model_table(row: dict):
    from rich.table import Table

    best = row.get("best_anchor")          # None on a board without anchors
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
    # Without the ratio column the table is narrow: keep the caption readable.
    table = Table(title=row["model"], caption=caption, title_justify="left",
                  caption_justify="left", min_width=None if best else 80)
    table.add_column("contender")
    cols = ("median us", "p10 us", "runs") + (("aot / best anchor (median, p10)",) if best
                                              else ())
    for col in cols:
        table.add_column(col, justify="right")
    for name, s in row["contenders"].items():
        cells = [name + (" (best anchor)" if name == best else ""), us(s["median_ms"]),
                 us(s["p10_ms"]), str(s["n"])]
        if best:
            ratio = row["aot_over_best_anchor"].get(name)
            cells.append(f"{ratio['median']:.2f}x, {ratio['p10']:.2f}x" if ratio else "")
        table.add_row(*cells)
    return table


def median_over_anchor(rows: list[dict], variants: list[str]) -> dict[str, dict[str, float]]:
    """Per aot variant, the median of aot / best anchor (by median) over all
    the models, the int8 ones and the float ones."""
    groups = {"all": rows, "int8": [r for r in rows if r["model"].endswith("_int8")],
              "f32": [r for r in rows if r["model"].endswith("_f32")]}
    return {v: {g: float(np.median([r["aot_over_best_anchor"][f"aot {v}"]["median"]
                                    for r in rs]))
                for g, rs in groups.items() if rs}
            for v in variants}


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
        table.add_row(*cells, *memory_cells(row))
    return table


def summary_table_alone(rows: list[dict], codegens: list[str], board):
    """The summary on a board without anchors: aot's medians (p10s) and memory."""
    from rich.table import Table

    table = Table(title=f"summary on {board.name}: medians (p10) in us", title_justify="left")
    table.add_column("model")
    for cg in codegens:
        table.add_column(f"aot {cg}", justify="right")
    for col in ("outputs", "arena B", "bound B", "tflm B"):
        table.add_column(col, justify="right")
    for row in rows:
        c = row["contenders"]
        cells = [row["model"].removeprefix("mlperf_")]
        cells += [f"{us(c[f'aot {cg}']['median_ms'])} ({us(c[f'aot {cg}']['p10_ms'])})"
                  for cg in codegens]
        cells.append("ok" if row["outputs_ok"] else "MISMATCH")
        table.add_row(*cells, *memory_cells(row))
    return table


def memory_cells(row: dict) -> list[str]:
    """arena B, bound B, tflm B (* where it is MLPerf Tiny's published value)."""
    tflm = nbytes(row["tflm_arena_bytes"])
    if row["tflm_arena_source"].startswith("published"):
        tflm += "*"
    return [nbytes(row["arena_bytes"]), nbytes(row["arena_lower_bound_bytes"]), tflm]


MEMORY_NOTES = (
    "tflm: tflite-micro's arena from its recording allocator on this machine (n/a: it "
    "refuses the model); * MLPerf Tiny's published value where it cannot be measured",
    "bound: the most bytes live at one step, the least any placement needs",
)


def print_notes(console, notes: list[str]) -> None:
    for n in notes:
        console.print(n, highlight=False, soft_wrap=True)


# ------------------------------------------------------------------------ main

# --host ... as argparse names them (aot.cli._ssh_args): what reaches an SSH board.
SSH_ARGS = ("host", "port", "user", "key", "known_hosts", "exec_prefix", "trust_new_host_key")


def pick_board(args: argparse.Namespace):
    """--board: a board of this machine (host_board: the default, and the
    only kind with anchors), or any other board of aot's, with the SSH options
    merged over its options as every aot command merges them."""
    from aot.cli import _board
    from aot.targets import get_board

    given = [f"--{a.replace('_', '-')}" for a in SSH_ARGS if getattr(args, a) not in (None, False)]
    board = get_board(args.board) if args.board else None    # an unknown name: its error
    if given and (board is None or board.transport != "ssh"):
        what = f"board '{board.name}' ({board.transport})" if board else "the host"
        raise AotError(f"{', '.join(given)}: only for a board reached over SSH, not {what}")
    if board is None or board.transport == "local":
        return host_board(board)
    if args.cpu is not None and board.transport == "ssh":
        raise AotError(f"--cpu pins a process of this machine, but on board '{board.name}' "
                       "the harness runs on the board (pin it there with --exec-prefix "
                       "'taskset -c N')")
    board = _board(args)
    if board.transport == "ssh" and not board.options.get("vm"):
        from aot.deploy.ssh import ssh_params
        ssh_params(board)          # no host, a bad port: say so before any packaging
    return board


def host_board(board=None):
    """The board of this machine to build for: `board` if its CPU flags hold
    here, or by default the fastest local board this CPU can run
    (host-avx512 where the CPU has AVX-512, as XNNPACK and ONNX Runtime pick
    their kernels by it)."""
    from aot.deploy.host import check_cpu
    from aot.targets import boards

    if board is None:
        known = boards()
        for candidate in ("host-avx512", "host"):
            try:
                check_cpu(known[candidate])
                return known[candidate]
            except AotError:
                continue
        board = known["host"]
    check_cpu(board)
    return board


def tuned_options(args: argparse.Namespace, board, counting: bool = False) -> dict | None:
    """--tuned, --trials, --tuning-dir checked: {"trials", "dir"} or None.
    counting: under --count-instructions, where the emulated core measures."""
    if not args.tuned:
        if args.tuning_dir is not None or args.trials is not None:
            raise AotError("--trials and --tuning-dir go with --tuned")
        return None
    args.trials = DEFAULT_TRIALS if args.trials is None else args.trials
    if board.transport != "local" and not counting:
        raise AotError("--tuned compares with ONNX Runtime and LiteRT: boards of this "
                       "machine only (host, host-avx512); tune another board with aot tune")
    if args.threads != 1:
        raise AotError("--tuned: aot tune measures one thread; not with --threads")
    if args.trials < 1:
        raise AotError("--trials must be >= 1")
    return {"trials": args.trials, "dir": args.tuning_dir or default_tuning_dir()}


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
                   "the fastest this CPU runs), or another board of aot's, e.g. qemu-rpi4, "
                   "qemu-aarch64, rpi4 (aot alone)")
    p.add_argument("--rounds", type=int, default=20, help="interleaved rounds (default: 20)")
    p.add_argument("--batch", type=int, default=25,
                   help="timed invocations per contender per round (default: 25)")
    p.add_argument("--cpu", help="the core to pin to (default: the last one); with "
                   "--count-instructions the emulated core: "
                   f"{' or '.join(EMULATED_CPUS)} (default: {next(iter(EMULATED_CPUS))})")
    p.add_argument("--count-instructions", action="store_true",
                   help="with --board qemu-aarch64: count instructions per inference, aot's "
                   "and LiteRT XNNPACK's, on the same emulated core")
    p.add_argument("--invocations", type=int, default=INVOCATIONS,
                   help="with --count-instructions: the N of the anchor's runs with 1, 1+N "
                   f"and 1+2N invocations (default: {INVOCATIONS})")
    p.add_argument("--threads", type=int, default=1, metavar="N",
                   help="on this machine: every contender on N threads, aot's packages built "
                   "with --threads N, nothing pinned (default: 1, pinned to one core)")
    p.add_argument("--tuned", action="store_true",
                   help="tune each model first (aot tune) and time the tuned packages beside "
                   "the untuned ones (on this machine); with --count-instructions tune the "
                   "rpi4/rpi5 package with its candidates counted on the emulated core")
    p.add_argument("--trials", type=int, metavar="N",
                   help="with --tuned: aot tune's trials per model (default: 32)")
    p.add_argument("--tuning-dir", type=Path, metavar="DIR",
                   help="with --tuned: where the tuning logs are kept and reused (default: "
                   "~/.cache/aot/compare-tuning)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    from aot.cli import _ssh_args
    _ssh_args(p)
    args = p.parse_args(argv)
    from rich.console import Console

    console = Console()
    if not console.is_terminal:       # a log or a pipe: wide enough for the summary
        console = Console(width=190 if args.tuned else 150)
    err = Console(stderr=True)
    def log(msg: str) -> None:
        err.print(msg, highlight=False)

    try:
        args.cpu, emulated_cpu = split_cpu(args.cpu, args.count_instructions)
        if args.count_instructions:
            return count_main(console, args, emulated_cpu, log)
        board = pick_board(args)
        if args.rounds < 1 or args.batch < 1:
            raise AotError("--rounds and --batch must be >= 1")
        families = parse_models(args.models)
        codegens = [args.codegen] if args.codegen else ["c", "llvm"]
        if board.transport != "local" and args.threads != 1:
            raise AotError("--threads compares with ONNX Runtime and LiteRT: boards of this "
                           "machine only (host, host-avx512)")
        tuned = tuned_options(args, board)
        if board.transport != "local":
            # qemu-user and bare-metal emulators run here and are pinned; an
            # SSH board (a VM's emulator has threads of its own) is not.
            cpu = None if board.transport == "ssh" else pin_to_one_core(args.cpu)
            t0 = time.perf_counter()
            rows = run_alone(find_cases(families), board, codegens, args.rounds, args.batch,
                             log)
            log(f"  {len(rows)} models on {board.name} in {time.perf_counter() - t0:.0f} s")
            report_alone(console, args, board, codegens, cpu, rows)
            return 0
        if args.threads < 1:
            raise AotError("--threads must be >= 1")
        cpu = pin_to_one_core(args.cpu) if args.threads == 1 else None
        rows = run(find_cases(families), board, codegens, args.rounds, args.batch, log,
                   args.threads, tuned)
    except AotError as e:
        print(f"compare.py: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    overhead = call_overhead_ms()
    for row in rows:
        console.print(model_table(row))
        console.print()
    variants = codegens + ([cg + TUNED for cg in codegens] if tuned else [])
    console.print(summary_table(rows, variants))
    medians = median_over_anchor(rows, variants)
    for v, m in medians.items():
        console.print(f"median aot {v} / best anchor: "
                      + ", ".join(f"{g} {x:.2f}x" for g, x in m.items()), highlight=False)
    notes = [
        f"host: {cpu_name()}, "
        + (f"pinned to CPU {cpu}, one thread everywhere" if args.threads == 1 else
           f"{args.threads} threads everywhere (aot --threads {args.threads}, ONNX Runtime "
           f"intra_op_num_threads, LiteRT num_threads), not pinned")
        + "; aot built for "
        f"board {board.name} (target {board.target.name}: {' '.join(board.target.cflags)}); "
        f"load average "
        f"{os.getloadavg()[0]:.1f} at the end",
        f"{args.rounds} interleaved rounds x {args.batch} timed invocations per contender "
        f"(after {WARMUP} warm-up each round); a long invocation is preempted more often on "
        "a loaded machine: where median and p10 differ much, trust p10",
        "aot: per-invocation times from the package's harness (ns clock, in the process "
        "that runs the model)",
        f"Python anchors: perf_counter_ns around invoke() / run_with_iobinding(); an empty "
        f"call timed the same way costs {overhead * 1e3:.2f} us",
        "onnxruntime: the float model's tf2onnx version; int8 models have no ONNX version",
        *([f"tuned: each model's packages built with --tuning-records from aot tune "
           f"--trials {tuned['trials']} --codegen <the same> on {board.name} (logs in "
           f"{tuned['dir']})"]
          if tuned else []),
        *MEMORY_NOTES,
    ]
    print_notes(console, notes)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"host": {"cpu": cpu_name(), "pinned_cpu": cpu, "board": board.name,
                      "target": board.target.name, "cflags": list(board.target.cflags),
                      "isa_features": sorted(board.target.isa_features),
                      "load_average": os.getloadavg()[0]}, "versions": versions(),
             "rounds": args.rounds, "batch": args.batch, "warmup": WARMUP,
             "threads": args.threads,
             "tuned": ({"trials": tuned["trials"], "dir": str(tuned["dir"])} if tuned
                       else None),
             "median_aot_over_best_anchor": medians,
             "python_call_overhead_ms": overhead, "models": rows}, indent=2) + "\n")
    return 0


def run(cases: list[Case], board, codegens: list[str], rounds: int, batch: int, log,
        threads: int = 1, tuned: dict | None = None) -> list[dict]:
    """tuned: {"trials": N, "dir": DIR} to tune each model first and time
    its tuned packages too."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="aot-compare-") as tmp:
        for case in cases:
            if tuned:
                for cg in codegens:
                    tune_case(case, board, cg, tuned["trials"], tuned["dir"], log)
            prepare(case, board, codegens, Path(tmp), log, threads=threads)
            t0 = time.perf_counter()
            times = interleave(contenders(case, board, batch, threads), rounds)
            log(f"  timed {case.name} in {time.perf_counter() - t0:.1f} s")
            rows.append(summarize(case, times))
    return rows


# ------------------------------------------------------ another board: aot alone

@contextlib.contextmanager
def on_board(board) -> Iterator[Callable]:
    """run(pkg, inputs, warmup=0, runs=1) -> RunResult on the board, for the
    whole benchmark: a hosted board keeps one connection (for qemu-rpi4 one
    VM) and one harness per package, started (uploaded) on first use; a
    bare-metal board has no serve mode, so every call boots its emulator."""
    if board.transport == "qemu-system":
        from aot.deploy import run_package

        yield lambda pkg, inputs, warmup=0, runs=1: run_package(pkg, board, inputs, warmup,
                                                                runs)
        return
    from aot.deploy.device import connect

    with connect(board) as device:
        yield device.request


def board_contender(run_on_board: Callable, pkg: Path, inputs, batch: int
                    ) -> Callable[[], list[float]]:
    """A batch timed by the harness on the board, as time_package does."""
    def timed() -> list[float]:
        result = run_on_board(pkg, inputs, WARMUP, batch)
        if len(result.times_ns) != batch:
            raise AotError(f"the harness reported {len(result.times_ns)} timings, "
                           f"expected {batch}")
        return [t / 1e6 for t in result.times_ns]
    return timed


def run_alone(cases: list[Case], board, codegens: list[str], rounds: int, batch: int, log
              ) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="aot-compare-") as tmp, \
            on_board(board) as run_on_board:
        for case in cases:
            prepare(case, board, codegens, Path(tmp), log, run_on_board)
            t0 = time.perf_counter()
            times = interleave({f"aot {cg}": board_contender(run_on_board, pkg, case.inputs,
                                                              batch)
                                for cg, pkg in case.packages.items()}, rounds)
            log(f"  timed {case.name} on {board.name} in {time.perf_counter() - t0:.1f} s")
            rows.append(summarize_alone(case, times))
    return rows


def report_alone(console, args, board, codegens: list[str], cpu: int | None,
                 rows: list[dict]) -> None:
    from aot.api import EMULATED_NOTE

    for row in rows:
        console.print(model_table(row))
        console.print()
    console.print(summary_table_alone(rows, codegens, board))
    emulated = (EMULATED_NOTE.format(board=board.name, transport=board.transport)
                if board.emulated else None)
    where = (f"pinned to CPU {cpu} of this machine" if cpu is not None else
             "unpinned (--exec-prefix 'taskset -c N' pins it on the board)")
    harness = ("the emulator booted per batch" if board.transport == "qemu-system" else
               "one harness per package, kept running for all rounds")
    notes = [
        f"aot alone on board {board.name} ({board.description}; target "
        f"{board.target.name}): ONNX Runtime and LiteRT do not run there",
        *([f"note: {emulated}"] if emulated else []),
        f"{args.rounds} interleaved rounds x {args.batch} timed invocations per codegen "
        f"(after {WARMUP} warm-up each round); where median and p10 differ much, trust p10",
        f"aot: per-invocation times from the package's harness on the board ({harness}), "
        f"{where}",
        f"outputs: checked against the reference runtime on this machine ({cpu_name()})",
        *MEMORY_NOTES,
    ]
    print_notes(console, notes)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"board": {"name": board.name, "target": board.target.name,
                       "transport": board.transport, "description": board.description,
                       "emulated": board.emulated},
             "note": emulated, "anchors": [],
             "host": {"cpu": cpu_name(), "pinned_cpu": cpu,
                      "load_average": os.getloadavg()[0]}, "versions": versions(),
             "rounds": args.rounds, "batch": args.batch, "warmup": WARMUP,
             "models": rows}, indent=2) + "\n")


# ------------------------------------- instructions on the emulated Arm core

def split_cpu(text: str | None, counting: bool) -> tuple[int | None, str | None]:
    """--cpu: (the core of this machine to pin to, the emulated core). A name
    only with --count-instructions, which needs no pinning (counts are exact)."""
    if text is None:
        return None, next(iter(EMULATED_CPUS)) if counting else None
    if text.isdigit():
        if counting:
            raise AotError(f"--cpu {text}: with --count-instructions --cpu names the "
                           f"emulated core ({', '.join(EMULATED_CPUS)})")
        return int(text), None
    if not counting:
        raise AotError(f"--cpu {text}: a core number, or an emulated core with "
                       "--count-instructions")
    if text not in EMULATED_CPUS:
        raise AotError(f"--cpu {text}: the emulated core is one of {', '.join(EMULATED_CPUS)}")
    return None, text


def count_main(console, args: argparse.Namespace, cpu: str, log) -> int:
    from aot.targets import get_board

    if args.board != "qemu-aarch64":
        raise AotError("--count-instructions runs both sides under qemu-user: it needs "
                       "--board qemu-aarch64")
    if args.invocations < 1:
        raise AotError("--invocations must be >= 1")
    given = [f"--{a.replace('_', '-')}" for a in SSH_ARGS if getattr(args, a) not in (None, False)]
    if given:
        raise AotError(f"{', '.join(given)}: not with --count-instructions (qemu-user runs "
                       "here)")
    runner = get_board(args.board)
    built_for = get_board(EMULATED_CPUS[cpu])
    codegens = [args.codegen] if args.codegen else ["c", "llvm"]
    tuned = tuned_options(args, runner, counting=True)
    cases = find_cases(parse_models(args.models))
    t0 = time.perf_counter()
    rows = run_counted(cases, built_for, runner, cpu, codegens, args.invocations, log, tuned)
    log(f"  {len(rows)} models counted on the emulated {cpu} in "
        f"{time.perf_counter() - t0:.0f} s")
    variants = codegens + ([cg + TUNED for cg in codegens] if tuned else [])
    report_counted(console, args, cpu, built_for, variants, rows, tuned)
    return 0


def run_counted(cases: list[Case], built_for, runner, cpu: str, codegens: list[str],
                invocations: int, log, tuned: dict | None = None) -> list[dict]:
    """Per model: aot's packages for `built_for`, checked and counted under
    `runner` (qemu-aarch64 with the package's own core), and XNNPACK counted
    under the same emulator and core. tuned: {"trials": N, "dir": DIR} to
    tune each model for `built_for` first, its candidates counted the same
    way, and count its tuned packages too."""
    from aot.api import as_graph
    from aot.deploy import run_package
    from aot.deploy.arm64_python import build_sysroot, count_xnnpack
    from aot.deploy.qemu_user import package_cpu
    from aot.check.reference import compare, reference_outputs
    from aot.packaging.metadata import read_metadata

    root = build_sysroot()
    rows = []
    with tempfile.TemporaryDirectory(prefix="aot-compare-") as tmp:
        for case in cases:
            if tuned:
                for cg in codegens:
                    tune_case(case, built_for, cg, tuned["trials"], tuned["dir"], log,
                              runs_on=runner)
            prepare(case, built_for, codegens, Path(tmp), log,
                    lambda pkg, inputs: run_package(pkg, runner, inputs))
            aot = {}
            for cg, pkg in case.packages.items():
                ran_on = package_cpu(read_metadata(pkg), runner) or runner.options["cpu"]
                if ran_on != cpu:      # the emulated core comes from the package's target
                    raise AotError(f"{pkg.name} ran on the emulated {ran_on}, not {cpu}")
                counts = run_package(pkg, runner, case.inputs, 1, COUNTED_RUNS).instructions
                aot[cg] = {"median_instructions": int(np.median(counts)),
                           "instructions": counts}
            t0 = time.perf_counter()
            anchor = count_xnnpack(case.tflite, case.inputs, cpu, invocations, root)
            log(f"  counted XNNPACK on {case.name} in {time.perf_counter() - t0:.1f} s")
            graph = as_graph(case.tflite)
            ref, want = reference_outputs(case.tflite, graph, case.inputs)
            errs = [compare(n, g, w)["max_abs_err"]
                    for n, g, w in zip(graph.outputs, anchor.outputs, want)]
            rows.append({
                "model": case.name, "aot": aot, "xnnpack": anchor.as_json(),
                "xnnpack_max_abs_err_vs_reference": max((e or 0.0) for e in errs),
                "reference": ref,
                "aot_over_xnnpack": {cg: a["median_instructions"] / anchor.per_inference
                                     for cg, a in aot.items()},
                "check": case.check, "outputs_ok": case.outputs_ok,
                **({"tuning": case.tuning} if tuned else {})})
    return rows


def median_ratios(rows: list[dict], codegens: list[str]) -> dict[str, dict[str, float]]:
    """Per codegen, the median of aot / XNNPACK over all models, the int8
    ones and the float ones (the goals differ: int8 <= 1.2, float <= 1.0)."""
    groups = {"all": rows, "int8": [r for r in rows if r["model"].endswith("_int8")],
              "f32": [r for r in rows if r["model"].endswith("_f32")]}
    return {cg: {g: float(np.median([r["aot_over_xnnpack"][cg] for r in rs]))
                 for g, rs in groups.items() if rs}
            for cg in codegens}


def count_table(rows: list[dict], codegens: list[str], cpu: str, built_for):
    from rich.table import Table

    table = Table(title=f"instructions per inference on the emulated {cpu} (qemu-aarch64): "
                  f"aot built for {built_for.name}, LiteRT {SHORT['litert xnnpack']} one "
                  "thread; below 1x aot executes fewer", title_justify="left")
    table.add_column("model")
    for cg in codegens:
        table.add_column(f"aot {cg}", justify="right")
    table.add_column("xnnpack", justify="right")
    for cg in codegens:
        table.add_column(f"{cg} / xnnpack", justify="right")
    table.add_column("xnnpack spread", justify="right")
    table.add_column("aot outputs", justify="right")
    for row in rows:
        table.add_row(row["model"].removeprefix("mlperf_"),
                      *[f"{row['aot'][cg]['median_instructions']:,}" for cg in codegens],
                      f"{row['xnnpack']['per_inference']:,}",
                      *[f"{row['aot_over_xnnpack'][cg]:.2f}x" for cg in codegens],
                      f"{row['xnnpack']['spread']:.2%}",
                      "ok" if row["outputs_ok"] else "MISMATCH")
    return table


def report_counted(console, args, cpu: str, built_for, codegens: list[str],
                   rows: list[dict], tuned: dict | None = None) -> None:
    from aot.deploy.arm64_python import find_sysroot

    sysroot = json.loads((find_sysroot() / "sysroot.json").read_text())
    console.print(count_table(rows, codegens, cpu, built_for))
    medians = median_ratios(rows, codegens)
    for cg, m in medians.items():
        console.print(f"median aot {cg} / xnnpack on {cpu}: "
                      + ", ".join(f"{g} {v:.2f}x" for g, v in m.items()), highlight=False)
    n = args.invocations
    notes = [
        f"aot: the harness's median instructions per run ({COUNTED_RUNS} runs after one "
        f"warm-up) under qemu-aarch64 -cpu {cpu}, package built for board {built_for.name}; "
        "outputs checked against the reference runtime",
        f"xnnpack: ai-edge-litert's default delegate, num_threads=1, in an arm64 Python "
        f"under the same qemu-aarch64 -cpu {cpu}; whole-process totals of runs with 1, "
        f"1+{n} and 1+{2 * n} invocations after the same setup, per inference "
        f"(T(1+{2 * n}) - T(1+{n})) / {n}; spread: how far it is from (T(1+{n}) - T(1)) / {n}; "
        "the 1-invocation run is repeated and must count the same",
        f"xnnpack's sysroot: {', '.join(sysroot['wheels'])}",
        "both include one call per inference: the harness's loop; for xnnpack the Python "
        "loop and Interpreter.invoke's wrapper",
        "onnxruntime: left out, its aarch64 wheel dies at import under qemu-user 7.2 "
        "(segmentation fault)",
        *([f"tuned: each model's package built with --tuning-records from aot tune "
           f"--trials {tuned['trials']} --codegen <the same> for {built_for.name}, every "
           f"candidate's kernels counted under qemu-aarch64 -cpu {cpu} (logs in "
           f"{tuned['dir']}); measurements (batches counted) per model: "
           + ", ".join(tuning_line(r) for r in rows)] if tuned else []),
    ]
    print_notes(console, notes)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"emulated_cpu": cpu, "board": built_for.name, "runner": "qemu-aarch64",
             "invocations": n, "aot_runs": COUNTED_RUNS, "versions": versions(),
             "tuned": ({"trials": tuned["trials"], "dir": str(tuned["dir"])} if tuned
                       else None),
             "xnnpack_sysroot": sysroot,
             "median_aot_over_xnnpack": medians, "models": rows}, indent=2) + "\n")


def tuning_line(row: dict) -> str:
    """What tuning a counted model took: batches counted per codegen."""
    parts = [f"{cg} {t['trials_run']}" if "trials_run" in t else f"{cg} ?"
             for cg, t in row["tuning"].items()]
    return f"{row['model'].removeprefix('mlperf_')} {' '.join(parts)}"


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

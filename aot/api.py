"""The Python API on top of the pipeline: `package` a model for a board.

    info = aot.api.package("model.tflite", board="host", out_dir="build/model")
    info.arena_bytes, info.params_bytes, info.path
"""
from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from aot.errors import AotError, InputError, MismatchError, NotImplementedYet
from aot.frontend.source import ModelBytes, as_file, as_model, file_path, is_package_dir
from aot.support.fsutil import claim_output
from aot.support.gcpause import paused_gc
from aot.ir.graph import Graph, TensorType
from aot.limits import board_flash
from aot.packaging.build import (PackageInfo, as_graph, check_fits, check_pools, check_threads,
                                 default_name, model_source, package_graph, write_tir_dump)
from aot.passes.float_io import float_edges, io_type
from aot.results import BenchResult, VerifyResult
from aot.targets import Board, get_board


def package(model_or_graph: str | Path | ModelBytes | Graph, board: str | Board | None = None,
            codegen: str = "c",
            name: str | None = None, out_dir: str | Path | None = None,
            io_in_arena: bool = False, force: bool = False,
            extra_cflags: Sequence[str] = (), profile: bool = False,
            checks: bool = False, input_shapes: Mapping | None = None,
            bind: Mapping | None = None, dump_tir: str | Path | None = None,
            threads: int = 1, tuning_records: str | Path | None = None,
            pools: bool = False, float_io: bool = False, format: str = "cmake") -> PackageInfo:
    """Compile a model into a package directory built for `board` (default:
    the CLI's, qemu-rpi4 unless $AOT_BOARD names another). The model: a
    path, an onnx.ModelProto, the bytes of an ONNX or TFLite model (recorded
    in metadata.json as "<memory>" with their sha256), or a Graph.

    out_dir defaults to ./<name>; with out_dir=None and no name, the model's.
    extra_cflags are added to every compile and to the harness link, e.g.
    ("-fsanitize=address,undefined", "-g", "-O1") to check a package under
    sanitizers (the harness is then linked dynamically). profile=True builds
    the per-kernel timing hooks in (docs/package.md "Profile"); checks=True
    builds the harness with guard bytes around every buffer ("Checks").
    input_shapes and bind (aot.load's): recorded in metadata.json's source.
    dump_tir: a directory to write each kernel's TIR into, as lowered and
    after each TIR pass (write_tir_dump); replaced with force, like out_dir.
    threads > 1 (a Linux board): the heavy kernels run split over a pool of
    that many threads (docs/package.md "Threads"), outputs bit for bit the
    one-thread package's. tuning_records: an `aot tune` log whose fastest
    schedule per workload the kernels take (aot.tune.applied_records).
    pools=True splits the arena over the board's RAM banks, hottest tensors
    in the fastest (docs/package.md "Memory pools"). float_io=True: the
    model's quantized inputs and outputs are float32 in the package, quantized
    and dequantized by the run as TFLite does (docs/package.md "Float I/O");
    a model without any is packaged as it is (metadata.json has no float_io).
    format: the layout of out_dir, "cmake" (the package as built) or a
    firmware framework's (aot.packaging.formats, docs/firmware.md), made
    from the package built in a temporary directory.
    """
    import aot
    from aot.frontend.shapes import LoadOptions, options_json
    from aot.tune.records import applied_records

    from aot.packaging.formats import check_format, check_package_options

    check_format(format)
    model_or_graph = as_model(model_or_graph, graphs=True)
    # claimed before loading and optimizing: a second writer is refused now
    with claim_output(out_dir, force), claim_output(dump_tir, force), paused_gc():
        brd = get_board(board)
        check_threads(brd, threads)      # before loading and optimizing
        check_package_options(format, brd, codegen, threads)
        if pools:
            check_pools(brd, io_in_arena, threads)
        opts = LoadOptions.of(input_shapes, bind)
        if opts and isinstance(model_or_graph, Graph):
            raise InputError("input_shapes and bind are for a model file; a Graph is loaded "
                             "already")
        graph = (model_or_graph if isinstance(model_or_graph, Graph)
                 else aot.load(model_or_graph, options=opts))
        check_fits(graph, brd)      # weights too big for the flash: say so before optimizing
        name = default_name(graph, name, file_path(model_or_graph))
        if out_dir is None:
            out_dir = Path(name)
        source = (None if isinstance(model_or_graph, Graph) else
                  {**model_source(model_or_graph), **options_json(opts)})
        wrapped, graph = float_edges(graph, float_io)
        with board_flash(brd.name, brd.flash_bytes), applied_records(tuning_records, brd.target):
            graph = as_graph(graph)
            build = (package_graph if format == "cmake" else _package_as(format))
            info = build(graph, brd, Path(out_dir), codegen, name, io_in_arena, force,
                         extra_cflags, profile, checks, source, threads, pools, wrapped)
            if dump_tir is not None:
                write_tir_dump(graph, brd, Path(dump_tir), force, threads)
        return info


def _package_as(fmt: str):
    """package_graph writing format `fmt`: the package is built in a
    temporary directory and exported from there into out_dir."""
    from dataclasses import replace

    from aot.packaging.formats import export_package

    def build(graph, board, out_dir: Path, codegen, name, io_in_arena, force, *rest
              ) -> PackageInfo:
        with tempfile.TemporaryDirectory(prefix="aot-") as tmp:
            info = package_graph(graph, board, Path(tmp) / "pkg", codegen, name, io_in_arena,
                                 False, *rest)
            export_package(info.path, fmt, out_dir, force)
        return replace(info, path=out_dir)
    return build


def package_to_temp(model_or_graph, board: str = "host", codegen: str = "c",
                    io_in_arena: bool = False) -> tuple[tempfile.TemporaryDirectory, PackageInfo]:
    """A package in a fresh temporary directory (removed with the returned handle)."""
    tmp = tempfile.TemporaryDirectory(prefix="aot-")
    info = package(model_or_graph, board, codegen, out_dir=Path(tmp.name) / "pkg",
                   io_in_arena=io_in_arena)
    return tmp, info


def package_dir(model_or_package: str | Path | Graph, board: Board, codegen: str,
                 stack: contextlib.ExitStack, profile: bool = False,
                 input_shapes: Mapping | None = None, bind: Mapping | None = None,
                 threads: int = 1) -> Path:
    """A package directory as it is, or the model packaged into a temporary
    directory that `stack` removes."""
    model_or_package = as_model(model_or_package, graphs=True)
    if is_package_dir(model_or_package):
        _as_built(model_or_package, input_shapes, bind, threads)
        return model_or_package
    tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="aot-"))
    return package(model_or_package, board=board, codegen=codegen, out_dir=Path(tmp) / "pkg",
                   profile=profile, input_shapes=input_shapes, bind=bind,
                   threads=threads).path


def _as_built(pkg: Path, input_shapes: Mapping | None, bind: Mapping | None,
              threads: int = 1) -> None:
    if threads != 1:
        raise InputError(f"{pkg} is a package directory, built with the threads its "
                         "metadata.json records: --threads is for packaging a model")
    if input_shapes or bind:
        raise InputError(f"{pkg} is a package directory, built with the input shapes and bound "
                         "inputs its metadata.json records: --input-shape and --bind are for "
                         "packaging a model")


def run(model_or_package: str | Path | ModelBytes | Graph,
        inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray],
        board: str | Board | None = None, codegen: str = "c",
        input_shapes: Mapping | None = None, bind: Mapping | None = None,
        threads: int = 1) -> dict[str, np.ndarray]:
    """What `aot run` does: run a package directory (or a model, packaged
    into a temporary directory) once on `board` (default: the CLI's).
    `inputs` is {input name: array} or a list in input order; the result
    is {output name: array}. Float data for a quantized input (a package
    without --float-io) is quantized with the package's scale and zero point
    as TFLite does, and a QuantizedInput warning says so."""
    from aot.deploy import check_runs_on, run_package
    from aot.deploy.host import warn_notes
    from aot.packaging.metadata import read_metadata

    brd = get_board(board)
    with contextlib.ExitStack() as stack:
        pkg = package_dir(model_or_package, brd, codegen, stack, input_shapes=input_shapes,
                           bind=bind, threads=threads)
        meta = read_metadata(pkg)
        check_runs_on(pkg, meta, brd)
        result = run_package(pkg, brd, inputs, warmup=0, runs=1)
    warn_notes(result.notes)
    return dict(zip((o["name"] for o in meta["outputs"]), result.outputs))


# Emulated boards run the real code (outputs are the board's) but the clock
# is the emulator's: bench still runs there (it checks the harness works), and
# says so.
EMULATED_NOTE = ("board '{board}' is emulated ({transport}): these times are the emulator's "
                 "on this machine and say nothing about the real board's speed")
INSTRUCTIONS_NOTE = ("; the instruction counts are exact: the board's own instructions per "
                     "run (a proxy for its time, not a time)")
CYCLES_NOTE = ("; the cycle counts are the device's own counter ({counter}), which under "
               "QEMU's -icount follows the instructions run, not a real core's cycles")


def bench(model_or_package: str | Path | ModelBytes | Graph, board: str | Board | None = None,
          codegen: str = "c", warmup: int = 10, repeat: int = 100, profile: bool = False,
          plot: str | Path | None = None, input_shapes: Mapping | None = None,
          bind: Mapping | None = None, threads: int = 1,
          trace: str | Path | None = None) -> BenchResult:
    """What `aot bench` does: `warmup` untimed runs, then `repeat` timed
    ones on `board` (default: the CLI's) of a package directory or of a
    model (as aot.package takes it) packaged into a temporary directory.
    A BenchResult (aot/results.py): the times' statistics in ms, with
    profile=True the median per kernel; `plot` draws those as a bar chart
    (a PNG) and `trace` writes each profiled run's kernel calls as a
    Perfetto trace (aot/check/trace.py)."""
    from aot.check.timing import (bench_package, check_counts, check_plot_path, package_inputs,
                                  plot_profile, profile_stats, stats_of)
    from aot.packaging.metadata import read_metadata
    from aot.check.trace import check_trace_path, write_trace

    brd = get_board(board)
    check_counts(warmup, repeat)
    if plot and not profile:
        raise InputError("--plot draws the per-kernel profile: add --profile")
    if plot:
        check_plot_path(Path(plot))
    if trace and not profile:
        raise InputError("--trace exports the per-kernel profile: add --profile")
    if trace:
        check_trace_path(trace)
    with contextlib.ExitStack() as stack:
        pkg = package_dir(model_or_package, brd, codegen, stack, profile=profile,
                           input_shapes=input_shapes, bind=bind, threads=threads)
        meta = read_metadata(pkg)
        if profile and not meta.get("profile"):
            raise InputError(f"{pkg} was packaged without --profile (aot package --profile)")
        result = bench_package(pkg, brd, package_inputs(meta), warmup, repeat)
    stats = stats_of([t / 1e6 for t in result.times_ns])     # ms, as time_package
    out = {"median_ms": stats.median_ms, "mean_ms": stats.mean_ms, "min_ms": stats.min_ms,
           "max_ms": stats.max_ms, "std_ms": stats.std_ms, "repeat": repeat, "warmup": warmup,
           "board": brd.name, "codegen": meta["codegen"], "model": meta["model"],
           "emulated": brd.emulated, "threads": meta.get("threads", 1)}
    if result.instructions is not None:
        out["median_instructions"] = int(np.median(result.instructions))
        out["instructions"] = result.instructions
    if result.cycles is not None:      # a device's own counter (the serial transport)
        out["median_cycles"] = int(np.median(result.cycles))
        out["cycles"] = result.cycles
        out["cycle_counter"] = result.cycle_counter
        out["counter_hz"] = result.report.get("counter_hz", 0)
    if brd.emulated:
        out["note"] = EMULATED_NOTE.format(board=brd.name, transport=brd.transport)
        if result.instructions is not None:
            out["note"] += INSTRUCTIONS_NOTE
        if result.cycles is not None:
            out["note"] += CYCLES_NOTE.format(counter=result.cycle_counter)
    if profile:
        kernels = profile_stats(meta, result.profile_ns, result.profile_instructions)
        out["profile"] = [k.as_json() for k in kernels]
        if plot:
            plot_profile(kernels, f"{meta['model']} on {brd.name}: median per kernel", Path(plot))
        if trace:
            write_trace(Path(trace), meta, brd.name, result.times_ns, result.profile_ns)
    return BenchResult.from_json(out)


def verify(model: str | Path | ModelBytes, board: str | Board | None = None, codegen: str = "c",
           extra_cflags: Sequence[str] = (), seed: int = 0,
           out_dir: str | Path | None = None, checks: bool = False, count: int = 1,
           dataset: str | Path | None = None, atol: float | None = None,
           rtol: float | None = None, source: str | Path | None = None,
           input_shapes: Mapping | None = None, bind: Mapping | None = None,
           threads: int = 1, float_io: bool = False,
           limit: int | None = None) -> VerifyResult:
    """What `aot verify` does: package `model` for `board` (default: the
    CLI's), run it there and compare with the reference runtime on the same
    inputs. The package is kept in out_dir if given, else built in a
    temporary directory and removed; checks=True packages with the harness's
    guard bytes (a violation fails).

    `model` is what aot.package takes but a Graph (the reference runtime
    needs the model itself), or a package directory: it runs as built, on its own
    board unless `board` says otherwise, against the model its metadata
    names (`source` overrides the path; a model whose sha256 is not the
    recorded one is refused).

    The inputs: the samples of `dataset` (an .npz or a directory,
    aot.check.dataset.open_dataset; `limit`: its first `limit` only), else
    `count` random inputs (seeds seed, seed+1, ...), else the saved input
    beside the model. Samples stream: read, run on the board and in the
    reference a batch at a time, the metrics summed as they come, so memory
    does not grow with their number. Many samples go through one serve
    session (aot.connect) and one reference session; a bare-metal board runs
    one per sample. input_shapes and bind load the model (a package directory's
    are the ones its metadata records); the reference runtime is fed the
    bound inputs too.

    A VerifyResult (aot/results.py): aot.check.validate.output_metrics per output
    over all samples, ok under Tolerance(atol, rtol) (floats within 1e-4,
    integers bit-exact by default); result.check() raises MismatchError
    unless ok.

    A streaming TFLite model (resource variables) is compared over one
    stream instead (aot.check.streaming.verify_stream): the dataset's samples in
    order, else max(count, 50) feature-like steps (inputs "stream"), a row
    per output and per state tensor, and `stream` (a StreamCheck).

    float_io packages the model as aot.package(float_io=True) does; such a
    package (or a package directory built so) is compared with the
    float-wrapped reference: its float inputs quantized as TFLite does, the
    model run, its outputs dequantized (float_io=True in the result). Its
    inputs are the real values of the saved or random ones, or the
    dataset's. Float data of a dataset for a package without float I/O is
    quantized with the model's scale and zero point: the result's notes say
    so."""
    import aot
    from aot.deploy import check_runs_on
    from aot.frontend.shapes import LoadOptions, options_json
    from aot.packaging.build import model_source
    from aot.packaging.metadata import read_metadata
    from aot.check.validate import Tolerance, check_package_io, dequantized_steps, package_model
    from aot.check import streaming

    tol = Tolerance(atol, rtol)
    if count < 1:
        raise InputError(f"--count must be >= 1, got {count}")
    if limit is not None and dataset is None:
        raise InputError("--limit counts the samples of a --dataset (--count N gives N random "
                         "inputs)")
    if limit is not None and limit < 1:
        raise InputError(f"--limit must be >= 1, got {limit}")
    if dataset is not None and count != 1:
        raise InputError("--count and --dataset exclude each other (the dataset's samples are "
                         "the inputs)")
    target = as_model(model)
    with contextlib.ExitStack() as stack:
        if is_package_dir(target):
            if out_dir is not None or checks:
                raise InputError(f"{target} is a package directory, verified as it was built: "
                                 "out_dir and checks are for packaging a model")
            pkg, meta = target, read_metadata(target)
            brd = get_board(board or meta.get("board"))
            check_runs_on(pkg, meta, brd)
            _as_built(pkg, input_shapes, bind, threads)
            model_path = package_model(pkg, meta, source)
            opts = LoadOptions.from_json(meta.get("source"))
            graph = aot.load(model_path, options=opts)
            steps = dequantized_steps(graph)
            if streaming.streams(model_path, graph):
                raise AotError(f"{pkg}: a package of a streaming model keeps its state inside; "
                               "verifying it as built is not supported yet (verify the model "
                               "file: its state is compared step by step)")
            bound = {n: graph.constants[n] for n in opts.bind}   # the reference's feeds
            wrapped, packaged = float_edges(graph, bool(meta.get("float_io")))
            check_package_io(packaged, meta, model_path, pkg)
            origin, samples, input_notes = _verify_inputs(model_path, graph, dataset, count, seed,
                                                         limit)
            summary = {"package": str(pkg), **{k: meta[k] for k in (
                "arena_bytes", "arena_lower_bound_bytes", "params_bytes")}}
        else:
            if source is not None:
                raise InputError(f"--model names the model of a package directory; {target} is "
                                 "a model file")
            # claimed before loading and optimizing: a second writer is refused now
            stack.enter_context(claim_output(out_dir, False))
            # the reference runtimes read files: a model in memory is written to one
            brd, model_path = get_board(board), as_file(target, stack)
            opts = LoadOptions.of(input_shapes, bind)
            graph = aot.load(target, options=opts)
            steps = dequantized_steps(graph)
            bound = {n: graph.constants[n] for n in opts.bind}   # the reference's feeds
            check_fits(graph, brd)
            name = default_name(graph, None, file_path(target))
            if streaming.streams(model_path, graph):    # outputs and state over a stream
                if float_io:
                    raise AotError("verify --float-io: streaming models are not supported yet")
                if threads != 1:
                    raise NotImplementedYet("verify --threads: streaming models are not "
                                            "supported yet (package with --threads and compare "
                                            "runs instead)")
                origin, steps = streaming.stream_inputs(graph, dataset, count, seed, limit)
                where = Path(out_dir) if out_dir else Path(
                    stack.enter_context(tempfile.TemporaryDirectory(prefix="aot-"))) / "pkg"
                return VerifyResult.from_json({**streaming.verify_stream(
                    model_path, graph, brd, name, where, codegen, steps, origin, tol,
                    extra_cflags=extra_cflags, checks=checks,
                    source={**model_source(target), **options_json(opts)}),
                    "model": str(target)})
            wrapped, packaged = float_edges(graph, float_io)
            graph = as_graph(graph)
            origin, samples, input_notes = _verify_inputs(model_path, graph, dataset, count, seed,
                                                         limit)
            where = Path(out_dir) if out_dir else Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="aot-"))) / "pkg"
            check_threads(brd, threads)
            info = package_graph(as_graph(packaged) if wrapped else graph, brd, where, codegen,
                                 name, extra_cflags=extra_cflags, checks=checks,
                                 threads=threads, float_io=wrapped,
                                 source={**model_source(target), **options_json(opts)})
            pkg, summary = info.path, info.summary()
        # inside: a model in memory is a file of `stack` for the reference runtime
        reference, rows, run_notes = _run_samples(model_path, pkg, brd, graph, samples, tol,
                                                  bound, steps, wrapped)
        # a float-io package's quantization is its own, not the data's: no note
        notes = input_notes + ([] if wrapped else run_notes)
    shown = target if isinstance(target, ModelBytes) else model_path
    return VerifyResult.from_json({
        "ok": all(r["ok"] for r in rows), "reference": reference, "inputs": origin,
        "samples": len(samples), "count": len(samples), "model": str(shown),
        "board": brd.name, "outputs": rows, "package": summary,
        **({"float_io": True} if wrapped else {}),
        **({"notes": notes} if notes else {})})


def _verify_inputs(model: Path, graph: Graph, dataset: str | Path | None, count: int,
                   seed: int, limit: int | None = None):
    """(origin, samples, notes): the dataset's (read lazily:
    aot.check.dataset.Dataset, its first `limit`), `count` random ones, or
    the saved one (notes: why a saved one was not used)."""
    from aot.check.reference import saved_or_random_inputs
    from aot.check.dataset import open_dataset
    from aot.check.inputs import RandomSamples

    if dataset is not None:
        return "dataset", open_dataset(dataset, graph, limit), []
    if count == 1:
        origin, first, notes = saved_or_random_inputs(model, graph, seed)
        return origin, [first], notes
    return "random", RandomSamples(graph, seed, count), []


# Samples quantized, run on the board and in the reference together: a batch
# holds their inputs and outputs, so memory is this many samples, whatever
# the dataset's size.
BATCH = 256


@contextlib.contextmanager
def _board_session(pkg: Path, board: Board, count: int):
    """A function running one sample on the board: through one serve session
    for many samples; one run each on a bare-metal board (no stdin to serve
    on) and for a single sample (no session to start)."""
    import aot
    from aot import deploy

    if count == 1 or board.transport == "qemu-system":
        yield lambda inputs: deploy.run_package(pkg, board, inputs, warmup=0, runs=1).outputs
        return
    with aot.connect(board) as dev:
        yield lambda inputs: dev.request(pkg, inputs).outputs


def _run_samples(model: Path, pkg: Path, board: Board, graph: Graph, samples, tol,
                 bound: Mapping[str, np.ndarray], steps: Mapping[str, float | None],
                 wrapped: Mapping[str, TensorType]) -> tuple[str, list[dict], list[str]]:
    """(reference runtime, a metrics row per output, notes): every sample on
    the board and in the reference (one session each), a batch at a time,
    the metrics summed as they come (aot.check.validate.OutputMetrics).
    `wrapped`: a --float-io package's float inputs and outputs; `steps`: the
    quantization step of outputs the model dequantizes. A value-sized output
    is compared in its valid entries (its count output's number, which must
    be the reference's size; the count is no row)."""
    import itertools

    from aot.support import progress
    from aot.check.reference import ReferenceSession
    from aot.ops.detect import count_outputs, valid_entries
    from aot.check.validate import (OutputMetrics, dequantize_outputs, float_samples,
                                    quantize_samples)

    counts = count_outputs(graph)
    names = [n for n in graph.outputs if n not in counts]
    metrics = [OutputMetrics(n, io_type(graph, n, wrapped), tol, steps.get(n)) for n in names]
    notes: dict[str, None] = {}
    reference = ReferenceSession(model, graph, bound)
    total = len(samples)
    it = iter(samples)
    with progress.step(f"verify {total} sample(s) on {board.name}", total=total) as bar,             _board_session(pkg, board, total) as run:
        while batch := list(itertools.islice(it, BATCH)):
            # the board's inputs; the reference's: those quantized (a
            # float-io package's float-wrap)
            batch = float_samples(batch, graph, wrapped)
            fed, batch_notes = quantize_samples(batch, graph)
            notes.update(dict.fromkeys(batch_notes))
            for board_in, ref_in in zip(batch if wrapped else fed, fed):
                got = valid_entries(counts, dict(zip(graph.outputs, run(board_in))))
                want = dequantize_outputs(reference(ref_in), graph, wrapped)
                if len(want) != len(got):
                    raise MismatchError(f"the reference gives {len(want)} outputs, the "
                                        f"package {len(got)}")
                for m, w in zip(metrics, want):
                    m.add(got[m.name], w)
                bar.advance()
    return reference.name, [m.row() for m in metrics], list(notes)

"""Model graph -> package directory (see DESIGN.md "The package a user receives").

    optimized Graph
      lower_graph              -> kernels (PrimFuncs, in call order)
      elide_views              -> the same without pure reshapes (readers read the source)
      plan_kernels             -> arena offsets and live ranges
      link_params              -> const arrays in .rodata.aot (C or a .incbin blob)
      emit_c | emit_objects    -> the kernels (several files, compiled in parallel)
      build_context + render   -> header, entry point, build files, harness
      toolchain                -> lib/lib<name>.a, bench/bench
      library_footprint        -> metadata.json

The directory is written atomically and byte-identically on every run: no
timestamps, no absolute paths, sorted JSON, deterministic archives.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from aot.errors import AotError, InputError, NotImplementedYet
from aot.executor.entry import FILES, HEADERS, Names, build_context, render
from aot.executor.liveness import MemoryPlan, elide_views, plan_kernels
from aot.executor.params import SECTION, LinkedParams, link_params
from aot.packaging.firmware import template_context
from aot.support.fsutil import write_dir_atomically
from aot.ir.graph import Graph, TensorType
from aot.ir.tir import is_split
from aot.ops import node_macs
from aot.packaging.info import PackageInfo
from aot.packaging.metadata import CODEGENS, PACKAGE_FORMAT
from aot.limits import packed_weights
from aot.packaging.memory_budget import check_static_data, static_data, weights_room
from aot.support.resources import data_dir
from aot.targets import Board

RUNTIME_FILES = ("aot_runtime.h", "aot_platform.c")
# generate's hand-over of files as they are final: (files, the library's sources among them)
Ready = Callable[[dict[str, bytes], list[str]], None]
THREAD_FILES = ("aot_threads.h", "aot_threads.c")     # --threads N > 1 only


def check_fits(graph: Graph, board: Board) -> None:
    """Refuse, before any work, weights the board cannot store and inputs
    and outputs no program for it can hold (memory_budget: the arena is
    not planned yet, so this is what no plan can make fit)."""
    check_static_data(board, static_data(graph))


def alignment(board: Board) -> int:
    """Arena and params alignment: 16 bytes, or the target's vector width."""
    return max(16, board.target.vector_bits // 8)


# ------------------------------------------------------------------ metadata

# Where each convolution op has its weight: a depthwise one has one input
# channel per group.
_CONV_WEIGHT = {"Conv": 1, "ConvInteger": 1, "QLinearConv": 3}


def _depthwise(node, types) -> bool:
    """A depthwise convolution: TFLite's, or a grouped conv of one input
    channel per group (its weight [O, 1, k...], [O, k..., 1] channel-last)."""
    if "depthwise" in node.op:
        return True
    at = _CONV_WEIGHT.get(node.op)
    if at is None or int(node.attrs.get("group", 1)) == 1 or len(node.inputs) <= at:
        return False
    w = types.get(node.inputs[at])
    per_group = w and (w.shape[-1] if node.attrs.get("layout") == "NHWC" else w.shape[1])
    return per_group == 1


def _kernel_family(node, types, macs: int) -> dict:
    """{"dtype": its first input's element type, "depth": its MACs per
    output element, "depthwise": true for a depthwise convolution}: what
    `aot bench --profile` compares a kernel's throughput within
    (aot/check/timing.py, kernel_family)."""
    first = node.inputs[0] if node.inputs else ""
    out = {"dtype": types[first].dtype} if first in types else {}
    size = types[node.outputs[0]].size if node.outputs and node.outputs[0] in types else 0
    if macs and size:
        out["depth"] = macs // size
    body = node.attrs["body"] if "body" in node.attrs else None
    if any(_depthwise(n, body.types if body else types) for n in (body.nodes if body else [node])):
        out["depthwise"] = True
    return out


def _versions() -> dict[str, str]:
    """The versions metadata.json records, read from the installed
    distributions: importing onnx (protobuf's C++ runtime) for its version
    cost a TFLite package a 30 ms import, and a Ctrl-C inside that import
    could crash the process (SIGSEGV) instead of stopping it."""
    from aot.support import distributions

    import aot
    out = {"aot": aot.__version__, "numpy": np.__version__}
    for dist in ("onnx", "llvmlite"):
        out[dist] = distributions.version(dist) or "not installed"
    return out


def _tensor_json(graph: Graph, io: dict) -> dict[str, Any]:
    """An input's or output's row (io: its build_context row); a --float-io
    one names the model's quantized type of it as "float_io"."""
    ty = graph.types[io["tensor"]]
    out: dict[str, Any] = {"name": io["tensor"], "c_name": io["member"],
                           "shape": list(ty.shape), "dtype": ty.dtype, "bytes": ty.nbytes}
    if ty.quant is not None:
        out["quant"] = ty.quant.as_json()
    if io["float_io"]:
        out["float_io"] = io["float_io"]
    if io["offset"] is not None:
        out["arena_offset"] = io["offset"]
    return out


def _plan_json(mem: MemoryPlan) -> dict[str, Any]:
    rows = []
    for b in mem.buffers:
        kind, _, rest = b.name.partition(":")
        row = {"offset": mem.plan.offsets[b.name], "size": b.size, "first": b.first,
               "last": b.last}
        if kind == "s":
            step, name = rest.split(":", 1)
            row.update(kind="scratch", step=int(step), name=name)
        else:
            row.update(kind="tensor", name=rest)
            later = [t for t, r in mem.written_over.items() if r == rest]
            if later:       # outputs written over this tensor in place, in step order
                row["then"] = later
        if mem.pools is not None:        # --pools: "offset" is in the pools laid end to end
            pool = mem.pools.pool_of(b.name)
            row.update(pool=pool.name, pool_offset=pool.plan.offsets[b.name],
                       heat=round(mem.pools.heat.get(b.name, 0.0), 3))
        rows.append(row)
    rows.sort(key=lambda r: (r["offset"], r["first"], r["kind"], r["name"]))
    return {"strategy": mem.plan.strategy, "align": mem.align, "buffers": rows}


def _pools_json(mem: MemoryPlan, context: dict) -> dict[str, Any]:
    """metadata.json "pools" (--pools only): the banks, what each holds, and
    the one-arena plan of the same tensors to compare with."""
    pp = mem.pools
    rows = []
    for pool, row in zip(pp.pools, context["pools"]):
        r = pool.region
        rows.append({"name": pool.name, "bytes": pool.bytes, "offset": row["base"],
                     "lower_bound_bytes": pool.plan.lower_bound_bytes,
                     "strategy": pool.plan.strategy, "section": row["section"],
                     "region": {"origin": r.origin, "size": r.size, "free_bytes": r.free_bytes,
                                "cost": r.cost},
                     "buffers": sorted(b.name for b in pool.buffers)})
    return {"pools": rows, "total_bytes": pp.total_bytes,
            "single_arena_bytes": pp.single_arena_bytes, "weights_region": pp.weights_region}


def metadata(graph: Graph, kernels, mem: MemoryPlan, other: MemoryPlan, params: LinkedParams,
             context: dict, board: Board, codegen: str, footprint: dict) -> dict[str, Any]:
    t = board.target
    return {
        "name": context["name"], "model": graph.name, "board": board.name, "codegen": codegen,
        "target": {"name": t.name, "triple": t.triple, "cpu": t.cpu, "features": t.features,
                   "cflags": list(t.cflags)},
        "inputs": [_tensor_json(graph, io) for io in context["inputs"]],
        "outputs": [{**_tensor_json(graph, io),
                     **({"count_of": io["count_of"]} if io["count_of"] else {})}
                    for io in context["outputs"]],
        **({"float_io": True} if context["float_io"] else {}),
        "arena_bytes": mem.arena_bytes, "arena_lower_bound_bytes": mem.lower_bound_bytes,
        "arena_align": mem.align, "io_in_arena": mem.io_in_arena,
        "arena_bytes_io_outside": (other if mem.io_in_arena else mem).arena_bytes,
        "arena_bytes_io_inside": (mem if mem.io_in_arena else other).arena_bytes,
        "params_bytes": params.total_bytes, "params_data_bytes": params.data_bytes,
        "params_section": SECTION,
        "params": [{"symbol": p.symbol, "dtype": p.array.dtype.name,
                    "shape": list(p.array.shape), "bytes": p.nbytes, "sources": list(p.sources),
                    "storage": "blob" if p.in_blob else "c"} for p in params.arrays],
        "state": [{"name": s["tensor"], "c_name": s["symbol"], "update": s["update"],
                   "bytes": graph.types[s["tensor"]].nbytes} for s in context["states"]],
        "state_bytes": context["state_bytes"],
        "plan": _plan_json(mem),
        **({"memory_pools": _pools_json(mem, context)} if mem.pools is not None else {}),
        "kernels": [{"step": i, "name": k.func.name, "symbol": call["symbol"],
                     "ops": [n.op for n in k.node.attrs["body"].nodes]
                     if "body" in k.node.attrs else [k.node.op],
                     "sources": list(k.func.sources),
                     "macs": node_macs(k.node, graph.types),
                     **_kernel_family(k.node, graph.types, node_macs(k.node, graph.types)),
                     "args": [{"kind": a.kind, "param": b.name,
                               **({"tensor": a.name} if a.kind in ("tensor", "const") else {})}
                              for a, b in zip(k.args, k.func.params)]}
                    for i, (k, call) in enumerate(zip(kernels, context["kernels"]))],
        # run-time index checks, numbered as <name>_failed_check() reports them
        "index_checks": [{k: v for k, v in row.items() if k != "message_literal"}
                         for row in context["index_checks"]],
        "footprint": footprint,
        "versions": _versions(),
        "package_format": PACKAGE_FORMAT,
    }


# --------------------------------------------------------------------- build

def firmware_files(board: Board) -> dict[str, bytes]:
    """A bare-metal board's start-up code and linker script (its [firmware]
    table names them as runtime_c/... paths), shipped in the package so the
    harness, and a user's firmware, link from the package alone."""
    fw = board.firmware
    paths = [*fw.get("sources", ()),
             *(fw[k] for k in ("linker_script", "boot2") if fw.get(k))]
    runtime = data_dir("runtime_c")
    out = {}
    for path in paths:
        rel = Path(path).relative_to("runtime_c") if path.startswith("runtime_c/") else None
        if rel is None or not (runtime / rel).is_file():
            raise AotError(f"board '{board.name}': firmware file '{path}' is not in aot's "
                           "runtime_c/")
        out[path] = (runtime / rel).read_bytes()
    return out


@dataclass(frozen=True)
class Generated:
    """A package before compilation."""
    files: dict[str, bytes]        # path in the package -> contents
    kernels: list
    mem: MemoryPlan                # the plan used
    other: MemoryPlan              # the plan with the other io_in_arena choice, for comparison
    params: LinkedParams
    context: dict                  # what the templates printed
    sources: list[str]             # what the library is compiled from
    prebuilt: list[str]            # objects archived as they are


def check_threads(board: Board, threads: int) -> None:
    """--threads N: a count, and N > 1 only where there are POSIX threads."""
    if threads < 1:
        raise InputError(f"--threads {threads}: give 1 or more")
    if threads > 64:
        raise InputError(f"--threads {threads}: the pool has at most 64 threads")
    if threads > 1 and "linux" not in board.target.triple:
        raise InputError(f"--threads {threads}: board '{board.name}' is bare metal "
                         f"({board.target.triple}); thread pools need a Linux target")


def check_pools(board: Board, io_in_arena: bool, threads: int) -> None:
    """--pools: a board with memory regions, neither --io-in-arena nor threads."""
    if not board.regions:
        raise InputError(f"--pools: board '{board.name}' lists no memory regions "
                         "([[regions]] in its board file)")
    if io_in_arena:
        raise NotImplementedYet("--pools with --io-in-arena is not supported yet: inputs and "
                                "outputs stay the caller's buffers")
    if threads > 1:
        raise NotImplementedYet("--pools with --threads is not supported yet")


def generate(graph: Graph, board: Board, codegen: str, name: str,
             io_in_arena: bool, threads: int = 1, pools: bool = False,
             float_io: Mapping[str, TensorType] | None = None,
             checks: bool = False, ready: Ready | None = None) -> Generated:
    """Every file of the package but the compiled ones; threads > 1 splits
    the heavy kernels over a pool of that many (aot/lower/tir_passes/parallel.py);
    pools splits the arena over the board's RAM banks (aot/executor/pools.py);
    float_io: the model's quantized types of the float32 inputs and outputs
    of a graph through aot.passes.float_io.with_float_io; checks: the
    harness is built with --checks (its own arena and input copies);
    ready(files, sources): called with the files as they are final, in
    two batches (the headers, runtime and kernels; then the rest: every
    file once), and which of them the library compiles, so that a caller
    can compile those while the rest is printed."""
    import aot
    from aot.codegen import c_declarations, emit_c
    from aot.codegen.c import part_chars
    from aot.lower import lower_graph
    from aot.lower.tir_passes.parallel import split_kernel

    if codegen not in CODEGENS:
        raise InputError(f"unknown codegen '{codegen}' (known: {', '.join(CODEGENS)})")
    check_threads(board, threads)
    if pools:
        check_pools(board, io_in_arena, threads)
    if codegen == "llvm" and board.target.portable:
        raise InputError(f"target '{board.target.name}' is portable C for any compiler: "
                         "codegen llvm emits one ISA's objects (use --codegen c)")
    check_fits(graph, board)
    target = board.target
    kernels = fitting_kernels(graph, board, threads)
    if threads > 1:
        kernels = [replace(k, func=split_kernel(k.func, threads)) for k in kernels]
    align = alignment(board)
    if pools:       # each pool fits its bank (pooled_memory_plan says so or raises)
        from aot.executor.pools import pooled_memory_plan
        weights = sum(int(a.nbytes) for a in graph.constants.values())
        mem = pooled_memory_plan(graph, kernels, board.regions, board.name, align, weights)
    else:
        mem = plan_kernels(graph, kernels, io_in_arena, align)
    other = plan_kernels(graph, kernels, not io_in_arena, align)
    # the RAM first: linking the params packs every weight
    check_static_data(board, static_data(graph, arena=mem.arena_bytes, checks=checks),
                      io_in_arena, pools)
    names = Names(name, threads=threads)
    if pools:
        names.taken |= {f"{name}_pool_{r.name}" for r in board.regions}
    kernel_prefix = f"{name}_kernel"
    names.taken.add(kernel_prefix)
    inits = {v: a for v, a in graph.variables.items() if np.asarray(a).any()}
    params = link_params(graph, kernels, name, align, names.taken, extra=inits)
    check_static_data(board, static_data(graph, params.total_bytes, mem.arena_bytes, checks),
                      io_in_arena, pools)
    funcs = [k.func for k in kernels]
    # LLVM builds the kernels itself: only the C prototypes are needed then
    csrc = (emit_c(funcs, kernel_prefix, part_chars(target.cc)) if codegen == "c"
            else c_declarations(funcs, kernel_prefix))
    meta = {"version": aot.__version__, "target": target.name, "cc": target.cc,
            "cflags": " ".join(target.cflags),
            "needs_libm": True,   # kernels may call expf, tanhf, ...
            "package_format": PACKAGE_FORMAT, **template_context(target)}
    files: dict[str, bytes] = {}
    prebuilt: list[str] = []
    c_sources = [f"src/{name}.c", f"src/{name}_params.c", "runtime_c/aot_platform.c",
                 *(["runtime_c/aot_threads.c"] if threads > 1 else [])]
    if codegen == "c":
        # several kernel files compile in parallel (emit_c splits large models)
        kernel_files = [_kernel_file("src", name, i, "c") for i in range(len(csrc.parts))]
        files.update({path: text.encode() for path, text in zip(kernel_files, csrc.parts)})
        c_sources[1:1] = kernel_files
    else:
        from aot.codegen.llvm import emit_objects
        for i, obj in enumerate(emit_objects(funcs, kernel_prefix, target)):
            prebuilt.append(_kernel_file("lib", name, i, "o"))
            files[prebuilt[-1]] = obj
    asm_sources = [f"src/{name}_params_blob.S"] if params.has_blob else []
    context = build_context(graph, kernels, mem, params, names, csrc.symbols,
                            "\n".join(csrc.prototypes),
                            {**meta, "c_sources": c_sources, "asm_sources": asm_sources,
                             "prebuilt_objects": prebuilt}, float_io)
    # the headers before any source is handed on: a compile may read them
    files.update({path: text.encode() for path, text in render(context, HEADERS).items()})
    runtime = data_dir("runtime_c")
    for f in RUNTIME_FILES + (THREAD_FILES if threads > 1 else ()):
        files[f"runtime_c/{f}"] = (runtime / f).read_bytes()
    files.update(firmware_files(board))
    early = [src for src in c_sources if src in files]       # the kernels and the runtime
    if ready:
        ready(dict(files), early)
    rest = render(context, [t for t in FILES if t not in HEADERS])
    late = {path: text.encode() for path, text in rest.items()}
    if params.has_blob:
        late[f"src/{name}_params.bin"] = params.blob()
    if ready:
        ready(late, [src for src in c_sources + asm_sources if src not in early])
    files.update(late)
    return Generated(files, kernels, mem, other, params, context, c_sources + asm_sources,
                     prebuilt)


def _kernel_file(folder: str, name: str, part: int, ext: str) -> str:
    """`<folder>/<name>_kernels[_<part>].<ext>`: the first part keeps the
    unsplit name."""
    return f"{folder}/{name}_kernels{f'_{part}' if part else ''}.{ext}"


def build_into(pkg: Path, graph: Graph, board: Board, codegen: str, name: str,
               io_in_arena: bool, extra_cflags: tuple[str, ...] = (), profile: bool = False,
               checks: bool = False, source: dict | None = None,
               threads: int = 1, pools: bool = False,
               float_io: Mapping[str, TensorType] | None = None) -> tuple[dict, float]:
    """Write and build the whole package in `pkg`; (metadata, compile seconds).

    extra_cflags (tests, debugging: sanitizers, -O1 -g) are added to every
    compile of the library and the harness, and recorded in metadata.json.
    profile (-DAOT_PROFILE: per-kernel timing hooks) and checks (-DAOT_CHECKS:
    the harness's guard bytes) are built in the same way, recorded as flags.
    source (model_source: the model file's name and sha256) is recorded for
    `aot verify PACKAGE`.
    """
    from aot.support import progress
    from aot.packaging import toolchain
    from aot.packaging.boot2 import build_boot2
    from aot.packaging.footprint import library_footprint
    from aot.packaging.readme import readme_template, render_readme

    flags = (*extra_cflags, *(["-DAOT_PROFILE"] if profile else []),
             *(["-DAOT_CHECKS"] if checks else []), *(["-pthread"] if threads > 1 else []))
    with toolchain.CompilePool(board.target, pkg) as pool:
        def ready(files: dict[str, bytes], sources: list[str]) -> None:
            for path, data in sorted(files.items()):
                (pkg / path).parent.mkdir(parents=True, exist_ok=True)
                (pkg / path).write_bytes(data)
            pool.submit(sources, ".build", flags)
            if toolchain.HARNESS_MAIN in files and not board.firmware:
                toolchain.start_harness(pool, flags)
        with progress.step(f"compile {name} for {board.name} ({codegen})"):
            gen = generate(graph, board, codegen, name, io_in_arena, threads, pools, float_io,
                           checks, ready)
        readme_template()                 # compiled while the compilers run
        start = time.perf_counter()       # the wait for the build, after the code
        with progress.step(f"build lib{name}.a and the harness ({board.target.cc})"):
            library = toolchain.build_library(board.target, pkg, name, gen.sources,
                                              gen.prebuilt, flags, pool)
            if board.firmware.get("boot2"):     # linked by the harness: built first
                tc = toolchain.toolchain_for(board.target)
                build_boot2(tc.cc, tc.cflags, pkg, board.firmware["boot2"])
            toolchain.build_harness(board.target, pkg, name, library, flags, board.firmware,
                                    pool)
    seconds = time.perf_counter() - start
    meta = metadata(graph, gen.kernels, gen.mem, gen.other, gen.params, gen.context, board,
                    codegen, library_footprint(pkg / library))
    if extra_cflags:
        meta["extra_cflags"] = list(extra_cflags)
    meta["profile"], meta["checks"] = profile, checks
    if threads > 1:      # a one-thread package's metadata stays as it was
        meta["threads"] = threads
        for row, k in zip(meta["kernels"], gen.kernels):
            row["split"] = is_split(k.func)
    if source:
        meta["source"] = source
    (pkg / "metadata.json").write_text(json.dumps(meta, sort_keys=True, indent=2) + "\n")
    header = gen.files[f"include/{name}.h"].decode()
    (pkg / "README.md").write_text(render_readme(meta, header))
    return meta, seconds


def default_name(graph: Graph, name: str | None = None, model_path: Path | None = None) -> str:
    """The package's C name and file stem: `name`, else the model file's
    stem (exporters give many models one graph name: tf2onnx, torch_jit),
    else the graph's, lower case; made a C identifier, so no `/`, `..` or
    NUL reaches a path."""
    from aot.codegen.names import c_identifier
    if name:
        return c_identifier(name, set())
    stem = Path(model_path).stem if model_path else ""
    return c_identifier(stem or graph.name or "model", set()).lower()


def as_graph(model_or_graph: str | Path | Graph, options=None) -> Graph:
    """An optimized graph from a model path or an (un)optimized Graph;
    options (a LoadOptions): input shapes and bound inputs of a model path."""
    from aot.frontend import load
    from aot.passes.pipeline import optimize

    if options and isinstance(model_or_graph, Graph):
        raise InputError("input_shapes and bind are for a model file; a Graph is loaded already")
    graph = (model_or_graph if isinstance(model_or_graph, Graph)
             else load(model_or_graph, options=options))
    fused = all(n.op == "fused" for n in graph.nodes)
    return graph if fused and graph.nodes else optimize(graph)


def fitting_kernels(graph: Graph, board: Board, threads: int = 1) -> list:
    """The graph lowered for the board; on a core whose kernels may widen
    their weights (the DSP extension's: twice the flash), lowered again with
    the weights as packed when the widened params do not fit the flash the
    board leaves them (weights_room)."""
    from aot.lower import lower_graph

    def lowered() -> list:
        return elide_views(graph, lower_graph(graph, board.target, threads=threads))
    kernels = lowered()
    if (not board.target.has("dsp")
            or link_params(graph, kernels, "fit", alignment(board)).total_bytes
            <= weights_room(board)):
        return kernels
    with packed_weights():
        return lowered()


def package_graph(graph: Graph, board: Board, out_dir: Path, codegen: str = "c",
                  name: str | None = None, io_in_arena: bool = False,
                  force: bool = False, extra_cflags: Sequence[str] = (),
                  profile: bool = False, checks: bool = False,
                  source: dict | None = None, threads: int = 1,
                  pools: bool = False, float_io: Mapping[str, TensorType] | None = None
                  ) -> PackageInfo:
    """Package an optimized graph into `out_dir` (created atomically);
    float_io as generate's."""
    name = default_name(graph, name)
    result: dict = {}

    def fill(tmp: Path) -> None:
        result["meta"], result["seconds"] = build_into(tmp, graph, board, codegen, name,
                                                       io_in_arena, tuple(extra_cflags),
                                                       profile, checks, source, threads,
                                                       pools, float_io)
    write_dir_atomically(Path(out_dir), fill, force)
    meta = result["meta"]
    return PackageInfo(Path(out_dir), name, board.name, codegen, meta["arena_bytes"],
                       meta["arena_lower_bound_bytes"], meta["params_bytes"],
                       result["seconds"], meta)


def write_tir_dump(graph: Graph, board: Board, directory: Path, force: bool,
                   threads: int = 1) -> None:
    """aot package --dump-tir: every kernel's TIR as lowered and after each
    TIR pass, `<step>_<kernel>/<nn>_<pass>.tir` (aot/lower/tir_passes/__init__.py),
    the directory whole or not at all. The graph is lowered once more for
    it: lowering is deterministic, so this is the TIR the package holds."""
    from aot.lower import lower_graph
    from aot.lower.tir_passes.parallel import split_kernel
    from aot.lower.tir_passes import PIPELINE, dump_to

    def fill(tmp: Path) -> None:
        kernels = lower_graph(graph, board.target, dump_to(tmp), threads)
        if threads > 1:       # the thread split, last (generate's)
            for step, k in enumerate(kernels):
                dump_to(tmp)(step)(len(PIPELINE) + 1, "split", split_kernel(k.func, threads))
    write_dir_atomically(directory, fill, force)


def model_source(path) -> dict[str, str]:
    """metadata.json "source": the model file's name and sha256 (a model in
    memory: "<memory>", aot.frontend.source). Not its directory: the
    package's bytes would then depend on where the model sits (a home
    directory in every package); `aot verify PACKAGE` looks for the file in
    the working directory and beside the package (aot/check/validate.py)."""
    import hashlib

    from aot.frontend.source import ModelBytes

    if isinstance(path, ModelBytes):
        return path.source()

    path = Path(path)
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError as e:
        raise AotError(f"{path}: cannot read it ({e.strerror})") from None
    return {"file": path.name, "sha256": digest.hexdigest()}

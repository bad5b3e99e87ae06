"""`aot analyze`: what each fused kernel of a model costs, before any run.

Per kernel, in execution order: its multiply-accumulates (the op table's
`macs`, aot/ops/registry.py), the constant bytes it reads (weights, biases,
requantization tables: what the package links into flash), the activation
bytes it reads and writes, where its tensors live (arena offset and live
steps, from the memory plan the package uses) and, when the library is
compiled for a board, the size of its function in the ELF. Totals: MACs,
weights (flash), arena (RAM) and the arena's lower bound.

The model is lowered and planned exactly as `aot package` does (same
`generate`), so the numbers are the package's. Code sizes need a compile for
the board's target (the library only, in a temporary directory, no harness).
"""
from __future__ import annotations

import io
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from aot.errors import AotError, InputError
from aot.frontend.source import as_model, file_path, is_package_dir
from aot.ir.graph import Graph
from aot.ir.tir import BufferKind
from aot.results import AnalyzeResult, Layer, TensorUse
from aot.support.report import out_offsets

# ------------------------------------------------------------------ layers

def _ops(node) -> tuple[str, ...]:
    body = node.attrs.get("body")
    return tuple(n.op for n in body.nodes) if body is not None else (node.op,)


def _tensor_use(graph: Graph, mem, buffers: dict, name: str, access: str) -> TensorUse:
    from aot.executor.liveness import tensor_key

    size = graph.types[name].nbytes
    place = mem.places[name]
    if place.kind != "arena":
        return TensorUse(name, access, place.kind, size)
    # a tensor written over another lives in that one's buffer
    buf = buffers[tensor_key(mem.written_over.get(name, name))]
    return TensorUse(name, access, "arena", size, place.offset, buf.first, buf.last)


def layer_of(graph: Graph, step: int, kernel, symbol: str, mem) -> Layer:
    """What kernel `step` reads, writes and computes."""
    from aot.executor.liveness import scratch_key
    from aot.ops import node_macs

    buffers = {b.name: b for b in mem.buffers}
    weights: dict[tuple[str, str], int] = {}
    uses: list[TensorUse] = []
    seen: set[tuple[str, str]] = set()
    for param, arg in zip(kernel.func.params, kernel.args):
        if arg.kind == "const":
            weights[("const", arg.name)] = int(graph.constants[arg.name].nbytes)
        elif arg.kind == "param":
            weights[("param", param.name)] = int(arg.array.nbytes)
        elif arg.kind == "scratch":
            b = buffers[scratch_key(step, param.name)]
            uses.append(TensorUse(param.name, "scratch", "arena", b.size,
                                  mem.scratch[(step, param.name)], b.first, b.last))
        else:
            access = "write" if param.kind == BufferKind.OUTPUT else "read"
            if (arg.name, access) not in seen:      # one tensor passed twice is read once
                seen.add((arg.name, access))
                uses.append(_tensor_use(graph, mem, buffers, arg.name, access))
    return Layer(step, kernel.func.name, symbol, _ops(kernel.node),
                 node_macs(kernel.node, graph.types), sum(weights.values()),
                 sum(u.size for u in uses if u.access == "read"),
                 sum(u.size for u in uses if u.access == "write"), tuple(uses))


# --------------------------------------------------------------- code size

def function_sizes(library: Path) -> dict[str, int]:
    """Symbol -> bytes of every function defined in a static library's
    objects (ELF symbol sizes; a Thumb function's too)."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    from aot.packaging.footprint import ar_members

    sizes: dict[str, int] = {}
    for _, body in ar_members(library.read_bytes()):
        for section in ELFFile(io.BytesIO(body)).iter_sections():
            if not isinstance(section, SymbolTableSection):
                continue
            for sym in section.iter_symbols():
                if (sym["st_info"]["type"] == "STT_FUNC" and sym["st_shndx"] != "SHN_UNDEF"
                        and sym.name):
                    sizes[sym.name] = sizes.get(sym.name, 0) + int(sym["st_size"])
    return sizes


def _compile(gen, board, name: str) -> tuple[dict[str, int], dict]:
    """Build the package's library for the board in a temporary directory:
    (function sizes, library_footprint)."""
    from aot.support import progress
    from aot.packaging import toolchain
    from aot.packaging.footprint import library_footprint

    with tempfile.TemporaryDirectory(prefix="aot-analyze-") as tmp:
        pkg = Path(tmp)
        for path, data in sorted(gen.files.items()):
            (pkg / path).parent.mkdir(parents=True, exist_ok=True)
            (pkg / path).write_bytes(data)
        with progress.step(f"build lib{name}.a for code sizes ({board.target.cc})"):
            library = pkg / toolchain.build_library(board.target, pkg, name, gen.sources,
                                                    gen.prebuilt)
        return function_sizes(library), library_footprint(library)


# ------------------------------------------------------------------- report

def check_model(model) -> None:
    """A model (aot.package's) or Graph: a package directory has lost what
    analyze reads."""
    if is_package_dir(as_model(model, graphs=True)):
        raise InputError(f"{model}: aot analyze takes a model file (.onnx, .tflite), not a "
                         "package directory")


def analyze(model, board=None, plot: str | Path | None = None, codegen: str = "c",
            code_size: bool | None = None, input_shapes=None, bind=None,
            pools: bool = False, report: str | Path | None = None) -> AnalyzeResult:
    """The `aot analyze` report of a model (as aot.package takes it: a path,
    an onnx.ModelProto, model bytes or a Graph): an AnalyzeResult
    (aot/results.py).

    The model is lowered for `board` (a name or Board; None: the default
    board, as the CLI's). code_size (default: when a board is given) compiles
    the library for it and adds each kernel's code bytes. plot: a PNG of the
    memory plan and of the MACs per kernel. input_shapes, bind: aot.load's.
    pools: plan the arena over the board's RAM banks (aot package --pools);
    the plot then draws each pool. report: a Markdown file, or HTML when
    its name ends in .html (aot/support/report.py)."""
    from aot.support import progress
    from aot.packaging.build import as_graph
    from aot.packaging.footprint import memory_summary
    from aot.support.report import check_report_path
    from aot.check.timing import check_plot_path
    from aot.packaging.build import default_name, generate
    from aot.targets import get_board

    if plot is not None:
        plot = check_plot_path(Path(plot))      # before the work
    if report is not None:
        report = check_report_path(report)
    model = as_model(model, graphs=True)
    check_model(model)
    brd = get_board(board)
    from aot.frontend.shapes import LoadOptions
    graph = as_graph(model, LoadOptions.of(input_shapes, bind))
    name = default_name(graph, model_path=file_path(model))
    with progress.step(f"lower and plan {name} for {brd.name}"):
        gen = generate(graph, brd, codegen, name, io_in_arena=False, pools=pools)
    symbols = [k["symbol"] for k in gen.context["kernels"]]
    layers = [layer_of(graph, i, k, s, gen.mem)
              for i, (k, s) in enumerate(zip(gen.kernels, symbols))]
    out: dict[str, Any] = {
        "model": graph.name, "board": brd.name, "target": brd.target.name, "codegen": codegen,
        "total_macs": sum(layer.macs for layer in layers),
        "weights_bytes": gen.params.total_bytes, "weights_data_bytes": gen.params.data_bytes,
        "arena_bytes": gen.mem.arena_bytes,
        "arena_lower_bound_bytes": gen.mem.lower_bound_bytes,
        "state_bytes": int(sum(graph.types[v].nbytes for v in graph.variables)),
        "io_bytes": {"inputs": int(sum(graph.types[t].nbytes for t in graph.inputs)),
                     "outputs": int(sum(graph.types[t].nbytes for t in graph.outputs))},
    }
    if gen.mem.pools is not None:
        out["memory_pools"] = {p.name: p.bytes for p in gen.mem.pools.pools}
    if code_size is None:
        code_size = board is not None
    if code_size:
        sizes, fp = _compile(gen, brd, name)
        missing = [s for s in symbols if s not in sizes]
        if missing:     # the entry point calls every kernel: a bug, not the input
            raise RuntimeError(f"the library for board '{brd.name}' has no function {missing[0]}")
        layers = [replace(layer, code_bytes=sizes[layer.symbol]) for layer in layers]
        out["kernels_code_bytes"] = sum(sizes[s] for s in symbols)
        out["memory"] = memory_summary(fp, gen.mem.arena_bytes, out["state_bytes"])
    out["layers"] = [layer.as_json() for layer in layers]
    if plot is not None:
        plot_analysis(out, gen.mem, Path(plot))
    if report is not None:
        write_analysis_report(out, gen.mem, report, plot)
    return AnalyzeResult.from_json(out)


def write_analysis_report(out: dict[str, Any], mem, path: Path, plot: Path | None) -> None:
    """The report file: HTML embeds the charts (when matplotlib is there to
    draw them), Markdown links the --plot PNG."""
    from aot.support.report import Chart, analysis_document, chart_link, is_html, write_report

    caption = "memory plan and MACs per kernel"
    chart = None
    if is_html(path):
        try:
            chart = Chart(analysis_png(out, mem), None, caption)
        except AotError:       # no matplotlib: the report without its chart
            chart = None
    elif plot is not None:
        chart = Chart(None, chart_link(path, plot), caption)
    write_report(path, analysis_document(out, chart))


# --------------------------------------------------------------------- plot

def plot_analysis(report: dict[str, Any], mem, out: Path) -> None:
    """The charts of `analysis_png` as a PNG file at `out`."""
    from aot.support.fsutil import write_file_atomically
    from aot.check.timing import check_plot_path

    out = check_plot_path(out)
    write_file_atomically(out, analysis_png(report, mem))


def analysis_png(report: dict[str, Any], mem) -> bytes:
    """Charts over the kernel steps in one PNG: the memory plan (each arena
    buffer a box over its live steps and its bytes, the arena size and its
    lower bound as lines; with pools, one chart per pool) and the MACs of
    each kernel."""
    from aot.check.timing import png_bytes, pyplot

    plt = pyplot()
    layers = report["layers"]
    steps = len(layers)
    views = _plan_views(mem, report)
    fig, axes = plt.subplots(len(views) + 1, 1, sharex=True,
                             figsize=(max(9, 0.3 * steps + 4), 5 + 3 * len(views)),
                             gridspec_kw={"height_ratios": (*(3,) * len(views), 2)})
    try:
        # buffers copied out after the kernels (state updates) live to step n
        last = max([steps - 1, *(b.last for b in mem.buffers)])
        for ax, view in zip(axes, views):
            _draw_plan(ax, view, last)
        _draw_macs(axes[-1], layers, last)
        fig.suptitle(f"{report['model']} for {report['board']}\n{report['total_macs']:,} MACs, "
                     f"arena {report['arena_bytes']:,} B, weights {report['weights_bytes']:,} B",
                     fontsize=11)
        fig.tight_layout()
        return png_bytes(fig)
    finally:
        plt.close(fig)


@dataclass(frozen=True)
class PlanView:
    """One memory chart: the arena, or one pool of it."""
    title: str
    what: str             # "arena" or "pool <name>"
    buffers: tuple
    offsets: dict[str, int]
    size: int
    lower_bound: int


def _plan_views(mem, report: dict[str, Any]) -> list[PlanView]:
    if mem.pools is None:
        return [PlanView("memory plan: each buffer over the steps it is live", "arena",
                         mem.buffers, mem.plan.offsets, report["arena_bytes"],
                         report["arena_lower_bound_bytes"])]
    return [PlanView(f"pool {p.name} (bank at 0x{p.region.origin:08x}, relative access cost "
                     f"{p.region.cost}): its buffers over the steps they are live",
                     f"pool {p.name}", p.buffers, p.plan.offsets, p.bytes,
                     p.plan.lower_bound_bytes) for p in mem.pools.pools]


def _draw_plan(ax, view: PlanView, last: int) -> None:
    from matplotlib.patches import Patch, Rectangle

    colors = {"t": "tab:blue", "s": "tab:orange"}
    unit, label = (1024, "KiB") if view.size >= 4096 else (1, "bytes")
    for b in view.buffers:
        kind = b.name.split(":", 1)[0]
        off = view.offsets[b.name]
        ax.add_patch(Rectangle((b.first - 0.45, off / unit), b.last - b.first + 0.9,
                               b.size / unit, facecolor=colors[kind], edgecolor="black",
                               linewidth=0.5, alpha=0.6))
    arena, bound = view.size / unit, view.lower_bound / unit
    ax.axhline(arena, color="tab:red", linewidth=1.2)
    ax.axhline(bound, color="tab:green", linewidth=1.2, linestyle="--")
    ax.set_xlim(-0.6, last + 0.6)
    ax.set_ylim(0, max(arena, bound, 1e-3) * 1.08)
    ax.set_ylabel(f"{view.what} offset ({label})")
    ax.set_title(view.title, fontsize=10)
    ax.legend(handles=[Patch(color=colors["t"], alpha=0.6, label="tensor"),
                       Patch(color=colors["s"], alpha=0.6, label="scratch"),
                       _legend_line("tab:red", "-", f"{view.what} {view.size:,} B"),
                       _legend_line("tab:green", "--", f"lower bound {view.lower_bound:,} B")],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax.grid(axis="y", linewidth=0.3)


def _legend_line(color: str, style: str, label: str):
    from matplotlib.lines import Line2D
    return Line2D([], [], color=color, linestyle=style, label=label)


def _draw_macs(ax, layers: list[dict[str, Any]], last: int) -> None:
    unit, label = (1e6, "millions") if max([0, *(la["macs"] for la in layers)]) >= 1e6 \
        else (1e3, "thousands")
    ax.bar(range(len(layers)), [layer["macs"] / unit for layer in layers], width=0.8,
           color="tab:purple")
    ax.set_ylabel(f"MACs ({label})")
    ax.set_title("multiply-accumulates per kernel", fontsize=10)
    names = [f"{layer['step']} {layer['name']}" for layer in layers]
    names += [f"{step} (after the kernels)" for step in range(len(layers), last + 1)]
    ax.set_xticks(range(len(names)), names, rotation=90, fontsize=7)
    ax.set_xlabel("step: kernel")
    ax.grid(axis="y", linewidth=0.3)


# ----------------------------------------------------------------- terminal

def print_report(report: dict[str, Any]) -> None:
    """The report as a rich table, one row per kernel, then the totals."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    code = bool(report["layers"]) and "code_bytes" in report["layers"][0]
    table = Table(title=f"{report['model']} for {report['board']} ({report['codegen']})",
                  caption="bytes; weights: constants read; in/out: activations read/written; "
                  "out @: arena offset of the outputs", box=box.SIMPLE_HEAD,
                  collapse_padding=True, pad_edge=False)
    # A long kernel name folds over lines, never cut; the numbers stay whole.
    table.add_column("step", justify="right", no_wrap=True)
    table.add_column("kernel", overflow="fold", min_width=len("kernel"))
    for col in ("MACs", "weights", "in", "out", "out @", *(("code",) if code else ())):
        table.add_column(col, justify="right", no_wrap=True, min_width=len(col))
    for layer in report["layers"]:
        table.add_row(str(layer["step"]), layer["name"], f"{layer['macs']:,}",
                      f"{layer['weights_bytes']:,}", f"{layer['activations_read_bytes']:,}",
                      f"{layer['activations_written_bytes']:,}", out_offsets(layer["tensors"]),
                      *((f"{layer['code_bytes']:,}",) if code else ()))
    console = Console()
    console.print(table)
    lines = [f"MACs     {report['total_macs']:>12,}",
             f"weights  {report['weights_bytes']:>12,} bytes (flash, section .rodata.aot)",
             f"arena    {report['arena_bytes']:>12,} bytes (RAM; lower bound "
             f"{report['arena_lower_bound_bytes']:,})"]
    for pool, size in report.get("memory_pools", {}).items():
        lines.append(f"  pool {pool:<10} {size:>9,} bytes")
    if report["state_bytes"]:
        lines.append(f"state    {report['state_bytes']:>12,} bytes (RAM)")
    if "memory" in report:
        mem = report["memory"]
        lines += [f"code     {mem['code_bytes']:>12,} bytes (kernels "
                  f"{report['kernels_code_bytes']:,})",
                  f"flash    {mem['flash_bytes']:>12,} bytes, RAM {mem['ram_bytes']:,} bytes "
                  "(the library alone)"]
    for line in lines:
        console.print(line, highlight=False)

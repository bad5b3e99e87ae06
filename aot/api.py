"""The Python API on top of the pipeline: `package` a model for a board.

    info = aot.api.package("model.tflite", board="host", out_dir="build/model")
    info.arena_bytes, info.params_bytes, info.path
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Sequence

from aot.fsutil import refuse_existing
from aot.ir.graph import Graph
from aot.package import PackageInfo, check_fits, default_name, package_graph
from aot.targets import get_board


def as_graph(model_or_graph: str | Path | Graph) -> Graph:
    """An optimized graph from a model path or an (un)optimized Graph."""
    import aot

    graph = model_or_graph if isinstance(model_or_graph, Graph) else aot.load(model_or_graph)
    fused = all(n.op == "fused" for n in graph.nodes)
    return graph if fused and graph.nodes else aot.optimize(graph)


def package(model_or_graph: str | Path | Graph, board: str = "host", codegen: str = "c",
            name: str | None = None, out_dir: str | Path | None = None,
            io_in_arena: bool = False, force: bool = False,
            extra_cflags: Sequence[str] = (), profile: bool = False,
            checks: bool = False) -> PackageInfo:
    """Compile a model into a package directory built for `board`.

    out_dir defaults to ./<name>; with out_dir=None and no name, the model's.
    extra_cflags are added to every compile and to the harness link, e.g.
    ("-fsanitize=address,undefined", "-g", "-O1") to check a package under
    sanitizers (the harness is then linked dynamically). profile=True builds
    the per-kernel timing hooks in (docs/package.md "Profile"); checks=True
    builds the harness with guard bytes around every buffer ("Checks").
    """
    import aot

    if out_dir is not None:
        refuse_existing(Path(out_dir), force)     # before loading and optimizing
    brd = get_board(board)
    graph = model_or_graph if isinstance(model_or_graph, Graph) else aot.load(model_or_graph)
    check_fits(graph, brd)      # weights too big for the flash: say so before optimizing
    graph = as_graph(graph)
    if out_dir is None:
        out_dir = Path(default_name(graph, name))
    return package_graph(graph, brd, Path(out_dir), codegen, name, io_in_arena, force,
                         extra_cflags, profile, checks)


def package_to_temp(model_or_graph, board: str = "host", codegen: str = "c",
                    io_in_arena: bool = False) -> tuple[tempfile.TemporaryDirectory, PackageInfo]:
    """A package in a fresh temporary directory (removed with the returned handle)."""
    tmp = tempfile.TemporaryDirectory(prefix="aot-")
    info = package(model_or_graph, board, codegen, out_dir=Path(tmp.name) / "pkg",
                   io_in_arena=io_in_arena)
    return tmp, info


def verify(model: str | Path, board: str = "host", codegen: str = "c",
           extra_cflags: Sequence[str] = (), seed: int = 0,
           out_dir: str | Path | None = None, checks: bool = False, count: int = 1) -> dict:
    """What `aot verify` does: package `model` for `board`, run it there on
    the saved input (or a random one drawn from `seed`), compare with the
    reference runtime. {ok, reference, inputs, count, outputs: [{name,
    max_abs_err}], package: the PackageInfo summary}. The package is kept in
    out_dir if given, else built in a temporary directory and removed.

    count > 1 runs `count` random inputs (seeds seed, seed+1, ...) through
    one serve session (aot.connect); max_abs_err is then the worst over them.
    checks=True packages with the harness's guard bytes (a violation fails)."""
    import aot
    from aot.deploy import run_package
    from aot.deploy.reference import compare, reference_outputs, saved_or_random_inputs
    from aot.errors import AotError
    from aot.testing import random_inputs

    if count < 1:
        raise AotError(f"--count must be >= 1, got {count}")
    brd = get_board(board)
    graph = aot.load(model)
    check_fits(graph, brd)
    graph = as_graph(graph)
    if count == 1:
        origin, first = saved_or_random_inputs(Path(model), graph, seed)
        batches = [first]
    else:
        origin = "random"
        batches = [[d[n] for n in graph.inputs]
                   for d in (random_inputs(graph, seed + i) for i in range(count))]
    with tempfile.TemporaryDirectory(prefix="aot-") as tmp:
        info = package(graph, board=brd, codegen=codegen,
                       out_dir=Path(out_dir) if out_dir else Path(tmp) / "pkg",
                       extra_cflags=extra_cflags, checks=checks)
        if count == 1:
            results = [run_package(info.path, brd, batches[0], warmup=0, runs=1).outputs]
        else:
            with aot.connect(brd) as dev:
                results = [dev.run(info.path, inputs).outputs for inputs in batches]
    rows: list[dict] = []
    for inputs, got in zip(batches, results):
        reference, want = reference_outputs(Path(model), graph, inputs)
        if len(want) != len(got):
            raise AotError(f"the reference gives {len(want)} outputs, the package {len(got)}")
        rows = _worst(rows, [compare(name, g, w) for name, g, w in
                             zip(graph.outputs, got, want)])
    ok = all(r.pop("ok") for r in rows)
    return {"ok": ok, "reference": reference, "inputs": origin, "count": count,
            "outputs": rows, "package": info.summary()}


def _worst(rows: list[dict], new: list[dict]) -> list[dict]:
    """Per output, the larger error of two comparisons (a failed one wins)."""
    if not rows:
        return new
    out = []
    for a, b in zip(rows, new):
        if a["ok"] != b["ok"]:
            out.append(a if not a["ok"] else b)
        elif (b["max_abs_err"] is None) or (a["max_abs_err"] is not None
                                            and b["max_abs_err"] > a["max_abs_err"]):
            out.append(b)
        else:
            out.append(a)
    return out

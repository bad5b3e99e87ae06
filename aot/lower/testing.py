"""A test harness for compute rules: lower a graph, compile its kernels to a
shared library and run them from Python on numpy buffers.

Not the deployed runtime (that is the package's entry point with a planned
arena): here every graph tensor is its own numpy array and the kernels are
called through ctypes in order, each with pointers in `Kernel.args` order.
That is enough to check a rule's arithmetic against `aot.interpret`.

    outs = build_and_run(aot.optimize(graph), {"x": x})
    many = build_and_run_many([(g1, ins1), (g2, ins2)])   # one compile

The generated C is compiled with the project's warning flags
(`-std=c99 -Wall -Wextra -Werror`), so a rule whose C does not compile
cleanly fails here too.
"""
from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from aot.errors import UnsupportedError
from aot.ir.graph import Graph
from aot.lower import Kernel, lower_graph
from aot.targets import Target, get_board

CFLAGS = ("-shared", "-fPIC", "-O1", "-std=c99", "-Wall", "-Wextra", "-Werror")
ALIGN = 64
_CACHE = Path(tempfile.gettempdir()) / f"aot-lower-testing-{os.getuid()}"


def host_target() -> Target:
    return get_board("host").target


def build_and_run(graph: Graph, inputs: Mapping[str, np.ndarray], codegen: str = "c",
                  target: Target | None = None) -> dict[str, np.ndarray]:
    """The graph's outputs computed by its generated kernels. `graph` must be
    optimized (fused); `inputs` maps each graph input to an array."""
    return build_and_run_many([(graph, inputs)], codegen, target)[0]


def build_and_run_many(cases: Sequence[tuple[Graph, Mapping[str, np.ndarray]]],
                       codegen: str = "c", target: Target | None = None,
                       cc: str | None = None) -> list[dict[str, np.ndarray]]:
    """build_and_run for several graphs with one compile (kernels renamed
    per case so their names cannot collide)."""
    target = target or host_target()
    lowered = [_lower_renamed(g, target, f"c{n}_") for n, (g, _) in enumerate(cases)]
    lib, symbols = compile_kernels([k for ks in lowered for k in ks], codegen, cc)
    return [run_kernels(lib, symbols, g, ks, ins)
            for (g, ins), ks in zip(cases, lowered)]


def _lower_renamed(graph: Graph, target: Target, tag: str) -> list[Kernel]:
    return [dataclasses.replace(k, func=dataclasses.replace(k.func, name=tag + k.func.name))
            for k in lower_graph(graph, target)]


def compile_kernels(kernels: Sequence[Kernel], codegen: str = "c", cc: str | None = None):
    """(ctypes library, {func name: C symbol}) for the kernels' PrimFuncs.

    Libraries are cached by the hash of their source, so re-running a test
    suite does not recompile what did not change.
    """
    if codegen != "c":
        raise UnsupportedError(f"aot.lower.testing: codegen {codegen!r} (only 'c' so far)")
    from aot.codegen.c import emit_c
    funcs = [k.func for k in kernels]
    src = emit_c(funcs, "t")
    symbols = src.symbols
    if not isinstance(symbols, Mapping):
        symbols = {f.name: s for f, s in zip(funcs, symbols)}
    cc = cc or os.environ.get("CC", "cc")
    digest = hashlib.sha256((cc + " ".join(CFLAGS) + src.source).encode()).hexdigest()[:20]
    _CACHE.mkdir(parents=True, exist_ok=True)
    so = _CACHE / f"k{digest}.so"
    if not so.exists():
        c_file = _CACHE / f"k{digest}.c"
        c_file.write_text(src.source)
        tmp = so.with_suffix(f".{os.getpid()}.tmp")
        proc = subprocess.run([cc, *CFLAGS, "-o", str(tmp), str(c_file), "-lm"],
                              capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"{cc} failed on {c_file}:\n{proc.stderr[-4000:]}")
        os.replace(tmp, so)
    return ctypes.CDLL(str(so)), dict(symbols)


def run_kernels(lib, symbols: Mapping[str, str], graph: Graph, kernels: Sequence[Kernel],
                inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Call the kernels in order on one numpy array per graph tensor."""
    tensors: dict[str, np.ndarray] = {}
    for name in graph.inputs:
        ty = graph.types[name]
        tensors[name] = aligned(np.asarray(inputs[name], dtype=ty.dtype).reshape(ty.shape))
    for name, value in graph.variables.items():
        tensors[name] = aligned(value)
    for name, value in graph.constants.items():
        tensors[name] = aligned(value)
    keep = []       # the arrays ctypes points into stay alive for the whole run
    for k in kernels:
        ptrs = []
        for arg, buf in zip(k.args, k.func.params):
            arr = _bind(arg, buf, graph, tensors)
            keep.append(arr)
            ptrs.append(ctypes.c_void_p(arr.ctypes.data))
        fn = getattr(lib, symbols[k.func.name])
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p] * len(ptrs)
        fn(*ptrs)
    for var, tensor in graph.updates.items():
        tensors[var] = tensors[tensor]
    return {name: tensors[name] for name in graph.outputs}


def aligned(array: np.ndarray, align: int = ALIGN) -> np.ndarray:
    """A C-contiguous copy of `array` starting at an `align`-byte boundary (what
    the arena guarantees; vector code may rely on it)."""
    array = np.asarray(array)
    raw = np.zeros(array.nbytes + align, np.uint8)
    start = -raw.ctypes.data % align
    out = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    out[...] = array
    return out


def _bind(arg, buf, graph: Graph, tensors: dict[str, np.ndarray]) -> np.ndarray:
    if arg.kind in ("tensor", "const"):
        if arg.name not in tensors:      # an activation: first written here
            ty = graph.types[arg.name]
            tensors[arg.name] = aligned(np.zeros(ty.shape, ty.dtype))
        arr = tensors[arg.name]
    elif arg.kind == "param":
        arr = aligned(arg.array)
    elif arg.kind == "scratch":
        arr = aligned(np.zeros(buf.size, buf.dtype.scalar))
    else:
        raise ValueError(f"unknown kernel argument kind {arg.kind!r}")
    if arr.size != buf.size or arr.dtype != np.dtype(buf.dtype.scalar):
        raise ValueError(f"argument {arg.name} ({arr.dtype}{list(arr.shape)}) does not fit "
                         f"parameter {buf.name} ({buf.dtype}{list(buf.shape)})")
    return arr

"""A test harness for compute rules: lower a graph, compile its kernels to a
shared library and run them from Python on numpy buffers.

Not the deployed runtime (that is the package's entry point with a planned
arena): here every graph tensor is its own numpy array and the kernels are
called through ctypes in order, each with pointers in `Kernel.args` order.
That is enough to check a rule's arithmetic against `aot.interpret`.

    outs = build_and_run(aot.optimize(graph), {"x": x})
    many = build_and_run_many([(g1, ins1), (g2, ins2)])   # one compile

The generated C is compiled with the project's warning flags
(`-std=c99 -Wall -Wextra -Werror`) plus the target's, so a rule whose C does
not compile cleanly fails here too; codegen="llvm" runs the LLVM backend's
object code instead.

Also here, for rule tests: `single_op_graph` (a one-node ONNX model,
optimized), `vectorized_kernel` (a value rule's `lanes`-wide form) and
`compare_with_interpreter` (many cases, one compile, a reason per case).
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
PREFIX = "t"    # kernel symbols are t_<name>
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
    lib, symbols = compile_kernels([k for ks in lowered for k in ks], codegen, cc, target)
    return [run_kernels(lib, symbols, g, ks, ins)
            for (g, ins), ks in zip(cases, lowered)]


def _lower_renamed(graph: Graph, target: Target, tag: str) -> list[Kernel]:
    return [dataclasses.replace(k, func=dataclasses.replace(k.func, name=tag + k.func.name))
            for k in lower_graph(graph, target)]


def compile_kernels(kernels: Sequence[Kernel], codegen: str = "c", cc: str | None = None,
                    target: Target | None = None):
    """(ctypes library, {func name: C symbol}) for the kernels' PrimFuncs.

    codegen "c": the C source compiled by the target's compiler (or $CC) with
    the target's flags, at -O1 to keep tests quick. codegen "llvm": the LLVM
    backend's object, linked into a shared library. Libraries are cached by
    the hash of what they are built from, so re-running a suite does not
    rebuild what did not change.
    """
    from aot.codegen.names import symbol_names
    target = target or host_target()
    funcs = [k.func for k in kernels]
    cc = cc or os.environ.get("CC") or target.cc or "cc"
    if codegen == "c":
        from aot.codegen.c import emit_c
        flags = [*CFLAGS, *(f for f in target.cflags if not f.startswith("-O"))]
        source = emit_c(funcs, PREFIX).source
        so = _build(cc, flags, source.encode(), ".c")
    elif codegen == "llvm":
        from aot.codegen.llvm import emit_object
        so = _build(cc, ["-shared"], emit_object(funcs, PREFIX, target), ".o")
    else:
        raise UnsupportedError(f"aot.testing.kernels: unknown codegen {codegen!r} (c or llvm)")
    return ctypes.CDLL(str(so)), symbol_names([f.name for f in funcs], PREFIX)


def _build(cc: str, flags: Sequence[str], content: bytes, suffix: str) -> Path:
    """A shared library built from one C file or object, cached by content."""
    digest = hashlib.sha256(" ".join([cc, *flags]).encode() + content).hexdigest()[:20]
    _CACHE.mkdir(parents=True, exist_ok=True)
    so = _CACHE / f"k{digest}.so"
    if not so.exists():
        src = _CACHE / f"k{digest}{suffix}"
        src.write_bytes(content)
        tmp = so.with_suffix(f".{os.getpid()}.tmp")
        proc = subprocess.run([cc, *flags, "-o", str(tmp), str(src), "-lm"],
                              capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"{cc} failed on {src}:\n{proc.stderr[-4000:]}")
        os.replace(tmp, so)
    return so


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


# ---- building test graphs -------------------------------------------------------------------

def single_op_graph(op: str, inputs: Sequence, attrs: Mapping | None = None,
                    outputs: int = 1, opset: int = 21, layout: bool = True) -> Graph:
    """An optimized graph of one ONNX node.

    Each input is a (shape, dtype) pair for a graph input, a numpy array for
    a constant (an initializer: weights, shape arguments), or None for an
    absent optional input. Graph inputs are named x0, x1, ...; outputs y0, ...
    layout=False skips the channels-last pass, so NCHW ops reach the rules.
    """
    import onnx
    from onnx import helper

    from aot.frontend.onnx import import_onnx
    from aot.passes.pipeline import PIPELINE

    names, vis, inits = [], [], []
    for k, spec in enumerate(inputs):
        if spec is None:
            names.append("")
        elif isinstance(spec, (np.ndarray, np.generic)):
            names.append(f"c{k}")
            inits.append(onnx.numpy_helper.from_array(np.asarray(spec), f"c{k}"))
        else:
            shape, dtype = spec
            names.append(f"x{k}")
            vis.append(helper.make_tensor_value_info(
                f"x{k}", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), list(shape)))
    outs = [f"y{k}" for k in range(outputs)]
    node = helper.make_node(op, names, outs, **dict(attrs or {}))
    g = helper.make_graph([node], op, vis,
                          [helper.make_tensor_value_info(o, 0, None) for o in outs], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    graph = import_onnx(model.SerializeToString(), op)
    for name, run in PIPELINE:
        if layout or name != "to_channels_last":
            graph = run(graph)
    return graph


def vectorized_kernel(graph: Graph, lanes: int, target: Target | None = None) -> Kernel:
    """The one value-rule op of a one-group graph, computed `lanes` elements at
    a time along the last axis (which `lanes` must divide).

    The driver's own loop nest is scalar; this exercises a value rule's
    vector form the way a kernel's epilogue or prologue would use it.
    """
    from aot.ir.tir import Buffer, BufferKind, For, ForKind, PrimFunc, Store, dt, flat_index
    from aot.lower.driver import Arg, buffer_ref, collect_params
    from aot.lower.rules import VALUE_RULES, LowerCtx

    (fused,) = graph.nodes
    body = fused.attrs["body"]
    (node,) = body.nodes
    ctx = LowerCtx(node, tuple(body.types.get(i) if i else None for i in node.inputs),
                   tuple(body.types[o] for o in node.outputs), target or host_target())
    refs, bound = {}, {}
    for k, (inner, outer) in enumerate(zip(body.inputs, fused.inputs)):
        ty, value = body.types[inner], graph.constants.get(outer)
        buf = Buffer(f"in{k}", dt(ty.dtype), ty.shape,
                     BufferKind.PARAM if value is not None else BufferKind.INPUT)
        refs[inner] = buffer_ref(inner, ty, buf, value)
        bound[buf.name] = Arg("const" if value is not None else "tensor", outer)
    shape = body.types[node.outputs[0]].shape
    out = Buffer("out0", dt(body.types[node.outputs[0]].dtype), shape, BufferKind.OUTPUT)
    bound["out0"] = Arg("tensor", fused.outputs[0])
    if not shape or shape[-1] % lanes:
        raise ValueError(f"{lanes} lanes do not divide the last axis of {list(shape)}")
    idx = tuple(ctx.fresh(f"i{d}") for d in range(len(shape)))
    ins = [refs[i] if i else None for i in node.inputs]
    stmt = Store(out, flat_index(idx, shape), VALUE_RULES[node.op](ctx, ins, idx, lanes))
    for d in reversed(range(len(shape))):
        last = d == len(shape) - 1
        stmt = For(idx[d], shape[d], stmt, ForKind.VECTORIZED if last else ForKind.SERIAL,
                   step=lanes if last else 1)
    params, args = collect_params(stmt, bound, ctx)
    return Kernel(PrimFunc(fused.name, params, stmt, (node.name,)), args, fused)


# ---- checking many cases against the interpreter ----------------------------------------------

def compare_with_interpreter(cases: Mapping[str, tuple[Graph, Mapping[str, np.ndarray]]],
                             lanes: int = 1, rtol: float = 1e-4, atol: float = 1e-4,
                             target: Target | None = None,
                             codegen: str = "c") -> dict[str, str | None]:
    """For each named case, None if the generated kernels reproduce
    `aot.interpret` (floats within rtol/atol, NaN where it has NaN; other
    types exactly), else a one-line reason. lanes > 1: each graph's single
    value op through `vectorized_kernel`. All cases share one compile; when
    it fails, cases are compiled one by one to say which failed."""
    from aot.errors import AotError
    from aot.interp import interpret

    target = target or host_target()
    result: dict[str, str | None] = {}
    lowered: dict[str, list[Kernel]] = {}
    for n, (name, (graph, _)) in enumerate(cases.items()):
        try:
            if lanes == 1:
                lowered[name] = _lower_renamed(graph, target, f"c{n}_")
            else:
                k = vectorized_kernel(graph, lanes, target)
                lowered[name] = [dataclasses.replace(
                    k, func=dataclasses.replace(k.func, name=f"c{n}_{k.func.name}"))]
        except AotError as e:
            result[name] = f"{type(e).__name__}: {e}"
    try:
        libs = dict.fromkeys(lowered, compile_kernels([k for ks in lowered.values() for k in ks],
                                                      codegen, target=target)
                             if lowered else None)
    except (RuntimeError, AotError):
        libs = {}
        for name, ks in lowered.items():
            try:
                libs[name] = compile_kernels(ks, codegen, target=target)
            except AotError as e:       # the code generator refused the TIR
                result[name] = f"{type(e).__name__}: {e}"
            except RuntimeError as e:   # the C compiler refused the C
                result[name] = f"compile error: {str(e).splitlines()[1:3]}"
    for name, (lib, symbols) in libs.items():
        graph, inputs = cases[name]
        got = run_kernels(lib, symbols, graph, lowered[name], inputs)
        want = interpret(graph, inputs)
        result[name] = next(filter(None, (_mismatch(o, got[o], want[o], rtol, atol)
                                          for o in graph.outputs)), None)
    return {name: result[name] for name in cases}


def _mismatch(name: str, got: np.ndarray, want: np.ndarray, rtol: float, atol: float):
    want = np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{name}: {got.dtype}{list(got.shape)} vs {want.dtype}{list(want.shape)}"
    if want.dtype.kind == "f":
        ok = np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    else:
        ok = got == want
    if ok.all():
        return None
    i = int(np.flatnonzero(~ok.reshape(-1))[0])
    return (f"{name}: {int((~ok).sum())}/{ok.size} differ, first at flat {i}: "
            f"{got.reshape(-1)[i]!r} vs {want.reshape(-1)[i]!r}")

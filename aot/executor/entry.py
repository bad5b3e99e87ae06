"""The entry point and the package's C files, rendered from templates/*.j2.

`build_context` gathers everything the templates print: the I/O tensors
with their C names and macros, one call per kernel with each argument at
its planned place, the copies before and after the kernels, the params.
`render` turns it into {relative path: text}. All C names go through
`c_identifier` (unique, valid whatever the model calls things); original
names appear only as C strings (`c_string`) and comments (`c_comment`).
"""
from __future__ import annotations

import functools

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import jinja2
import numpy as np

from aot.codegen.c import C_TYPES, c_float
from aot.codegen.names import c_comment, c_identifier, c_string
from aot.errors import UnsupportedError
from aot.executor.checks import index_checks, kernel_checks
from aot.executor.liveness import MemoryPlan
from aot.executor.params import SECTION, LinkedParams, c_initializer, describe
from aot.ir.graph import Graph, TensorType
from aot.ir.tir import BufferKind, is_split, phases
from aot.lower.driver import Kernel
from aot.ops.detect import count_outputs
from aot.support.resources import data_dir


@dataclass
class Names:
    """The C identifiers a package defines, kept unique together."""
    name: str
    taken: set[str] = field(default_factory=set)
    threads: int = 1          # the pool's (aot package --threads); 1: no thread code

    def __post_init__(self):
        self.taken |= {f"{self.name}_{s}" for s in
                       ("run", "run_with_arena", "run_with_pools", "reset", "arena", "inputs",
                        "outputs", "state_ready", "failed_check", "index_error")}
        if self.threads > 1:
            self.taken |= {f"{self.name}_init", f"{self.name}_deinit", "run_args"}


def c_type(dtype: str) -> str:
    try:
        return C_TYPES[dtype]
    except KeyError:
        raise UnsupportedError(f"dtype {dtype} has no C type in aot packages") from None


def _quant(ty: TensorType) -> dict | None:
    q = ty.quant
    if q is None:
        return None
    scales = [c_float(s, "float64") for s in q.scale]
    if q.axis is None:
        return {"per_tensor": True, "scale": scales[0], "zero_point": int(q.zero_point[0])}
    return {"per_tensor": False, "axis": q.axis, "scale": ", ".join(scales),
            "zero_point": ", ".join(str(int(z)) for z in q.zero_point)}


def _io(graph: Graph, mem: MemoryPlan, direction: str, names: Sequence[str], NAME: str,
        float_io: Mapping[str, TensorType]) -> list[dict]:
    """The templates' rows of the inputs or outputs; `float_io`: the model's
    quantized type of each tensor the package takes or gives as float32
    (aot/passes/float_io.py), whose scale and zero point the header states."""
    members: set[str] = set()
    macros: set[str] = set()
    out = []
    for i, tensor in enumerate(names):
        ty = graph.types[tensor]
        member = c_identifier(tensor, members)
        macro = f"{NAME}_{direction.upper()}_" + c_identifier(member.upper(), macros)
        place = mem.places.get(tensor)
        stored = float_io.get(tensor)
        out.append({
            "direction": direction, "index": i, "tensor": tensor, "member": member,
            "macro": macro, "name_literal": c_string(tensor), "dtype": ty.dtype,
            "ctype": c_type(ty.dtype), "size": ty.size, "nbytes": ty.nbytes,
            "shape": list(ty.shape), "shape_init": ", ".join(str(d) for d in ty.shape),
            "quant": _quant(stored or ty), "comment": c_comment(f"{tensor}: {ty}" + (
                ", IEEE half-precision bits in uint16_t" if ty.dtype == "float16" else "")),
            "float_io": ({"dtype": stored.dtype, "quant": stored.quant.as_json()}
                         if stored else None),
            "offset": place.offset if place is not None and place.kind == "arena" else None,
            "count_of": None,
        })
    return out


def _mark_counts(graph: Graph, outputs: list[dict]) -> None:
    """Each count output (aot.ops.detect.with_counts) says which outputs it
    counts: `count_of` [{index, tensor, axis, padding}], in metadata.json,
    and in the header as `count_lines` and `count_init` (their indices)."""
    index = {io["tensor"]: io["index"] for io in outputs}
    for count, counted in count_outputs(graph).items():
        rows = [{"index": index[t], "tensor": t, "axis": axis, "padding": fill}
                for t, axis, fill in counted if t in index]
        if count in index and rows:
            io = outputs[index[count]]
            io["count_of"] = rows
            io["count_lines"] = [f"output {r['index']} ({c_comment(r['tensor'])}) along its "
                                 f"axis {r['axis']}, padded with {r['padding']}" for r in rows]
            io["count_init"] = ", ".join(str(r["index"]) for r in rows)


def arena_base(pool: str) -> str:
    """The entry point's pointer to the arena, or with --pools to a pool's
    bytes (a local of <name>_run_with_pools: pool names are C identifiers)."""
    return f"p_{pool}" if pool else "a"


def _pools(mem: MemoryPlan, name: str, NAME: str) -> list[dict]:
    """--pools: each pool's symbols and sizes for the templates (none without)."""
    if mem.pools is None:
        return []
    from aot.executor.pools import pool_bases
    bases = pool_bases(mem.pools.pools, mem.align)
    return [{"name": p.name, "bytes": p.bytes, "base": bases[p.name],
             "macro": f"{NAME}_POOL_{p.name.upper()}", "symbol": f"{name}_pool_{p.name}",
             "param": f"pool_{p.name}", "local": arena_base(p.name),
             "section": f".aot_arena_{p.name}", "region": p.region.name.upper(),
             "origin": f"0x{p.region.origin:08x}", "cost": p.region.cost,
             "buffers": len(p.buffers)} for p in mem.pools.pools]


class _Places:
    """C expressions for where each tensor lives, for the entry point."""

    def __init__(self, graph: Graph, mem: MemoryPlan, inputs, outputs, states):
        self.graph, self.mem = graph, mem
        self.input = {io["tensor"]: io for io in inputs}
        self.output = {}
        for io in outputs:
            self.output.setdefault(io["tensor"], io)
        self.state = {s["tensor"]: s for s in states}

    def pointer(self, tensor: str, const: bool) -> str:
        """A pointer to `tensor`'s first element, typed for a kernel argument."""
        ctype = c_type(self.graph.types[tensor].dtype)
        place = self.mem.places.get(tensor)
        if place is None:
            raise UnsupportedError(f"tensor '{tensor}' has no place in the memory plan")
        if place.kind == "arena":
            qualifier = "const " if const else ""
            return f"({qualifier}{ctype}*)({arena_base(place.pool)} + {place.offset})"
        if place.kind == "input":
            return f"inputs->{self.input[tensor]['member']}"
        if place.kind == "output":
            return f"outputs->{self.output[tensor]['member']}"
        return self.state[tensor]["symbol"]


def _task_locals(args: Sequence[str], inputs_struct: str) -> list[str]:
    """A task function's copies of the run's pointers its arguments name."""
    text = " ".join(args)
    wanted = [("(a + ", "uint8_t* const a = run->a;"),
              ("inputs->", f"const struct {inputs_struct}_inputs* const inputs = run->inputs;"),
              ("outputs->", f"struct {inputs_struct}_outputs* const outputs = run->outputs;")]
    return [decl for use, decl in wanted if use in text] or ["(void)run;"]


def _kernel_calls(kernels: Sequence[Kernel], places: _Places, params: LinkedParams,
                  mem: MemoryPlan, symbols: dict[str, str], names: Names) -> list[dict]:
    calls = []
    first_check = 0          # the package-wide number of the kernel's first index check
    for step, k in enumerate(kernels):
        args = []
        for i, (buf, arg) in enumerate(zip(k.func.params, k.args)):
            const = buf.kind in (BufferKind.INPUT, BufferKind.PARAM)
            if arg.kind == "tensor":
                args.append(places.pointer(arg.name, const))
            elif arg.kind in ("const", "param"):
                args.append(params.binding[(step, i)])
            elif arg.kind == "scratch":
                pool = mem.scratch_pools.get((step, buf.name), "")
                args.append(f"({c_type(buf.dtype.scalar)}*)({arena_base(pool)} + "
                            f"{mem.scratch[(step, buf.name)]})")
            else:
                raise ValueError(f"unknown kernel argument kind {arg.kind!r}")
        sources = ", ".join(k.func.sources or (k.node.name,))
        ops = "+".join(n.op for n in k.node.attrs["body"].nodes) if "body" in k.node.attrs \
            else k.node.op
        checks = len(kernel_checks(k))
        # a split kernel (aot/lower/tir_passes/parallel.py) is called through the pool
        task_fn = c_identifier(f"task_step_{step}", names.taken) if is_split(k.func) else None
        calls.append({"step": step, "symbol": symbols[k.func.name], "args": args,
                      "task_fn": task_fn, "phases": phases(k.func),
                      "tasks": dict(k.func.attrs).get("tasks", 0) if task_fn else 0,
                      "task_locals": _task_locals(args, names.name) if task_fn else [],
                      "checks": checks, "first_check": first_check,
                      "wrap": len(", ".join(args)) > 72,
                      "comment": c_comment(f"{ops} from {sources}"),
                      "name_literal": c_string(k.func.name)})
        first_check += checks
    return calls


def _copy(dst: str, src: str, nbytes: int) -> list[str]:
    """memcpy unless the caller already passed the very place (a no-op copy)."""
    return [f"if ((const void*)({dst}) != (const void*)({src})) {{",
            f"    memcpy({dst}, {src}, {nbytes});",
            "}"]


def _copies(graph: Graph, kernels: Sequence[Kernel], mem: MemoryPlan, inputs, outputs, states,
            places: _Places) -> tuple[list[str], list[str]]:
    """Statements before the kernels (inputs into the arena) and after them
    (outputs not written in place, then the state updates)."""
    written = {a.name for k in kernels for a, b in zip(k.args, k.func.params)
               if a.kind == "tensor" and b.kind == BufferKind.OUTPUT}
    before, after = [], []
    if mem.io_in_arena:
        for io in inputs:
            before += _copy(f"a + {io['offset']}", f"inputs->{io['member']}", io["nbytes"])
    for io in outputs:
        t = io["tensor"]
        if t in graph.constants:
            raise UnsupportedError(f"output '{t}' is a constant: aot packages compute every "
                                   "output")
        in_place = places.output[t] is io and t in written and not mem.io_in_arena
        if not in_place:      # in the arena, an input, the state, or a repeated output
            after += _copy(f"outputs->{io['member']}", places.pointer(t, const=True),
                           io["nbytes"])
    for s in states:
        src = s["update"]
        if src is not None and src != s["tensor"]:
            after.append(f"memcpy({s['symbol']}, {places.pointer(src, const=True)}, "
                         f"sizeof({s['symbol']})); /* {c_comment(s['tensor'])} <- "
                         f"{c_comment(src)} */")
    return before, after


def _states(graph: Graph, names: Names, params: LinkedParams) -> list[dict]:
    out = []
    for var, init in graph.variables.items():
        ty = graph.types[var]
        init = np.asarray(init)
        out.append({"tensor": var, "ctype": c_type(ty.dtype), "count": max(ty.size, 1),
                    "symbol": c_identifier(f"{names.name}_state_{var}", names.taken),
                    "init_symbol": None if not init.any() else params.binding[var],
                    "update": graph.updates.get(var),
                    "comment": c_comment(f"{var}: {ty}")})
    return out


def build_context(graph: Graph, kernels: Sequence[Kernel], mem: MemoryPlan,
                  params: LinkedParams, names: Names, symbols: dict[str, str], prototypes: str,
                  meta: dict[str, Any], float_io: Mapping[str, TensorType] | None = None
                  ) -> dict[str, Any]:
    name = names.name
    NAME = name.upper()
    inputs = _io(graph, mem, "input", graph.inputs, NAME, float_io or {})
    outputs = _io(graph, mem, "output", graph.outputs, NAME, float_io or {})
    _mark_counts(graph, outputs)
    states = _states(graph, names, params)
    places = _Places(graph, mem, inputs, outputs, states)
    before, after = _copies(graph, kernels, mem, inputs, outputs, states, places)
    calls = _kernel_calls(kernels, places, params, mem, symbols, names)
    # Every place in the arena is spelled `a + offset`: without one, the
    # entry point says that it ignores `a` (-Wunused-parameter).
    uses_arena = any("(a + " in text for text in
                     (*before, *after, *(arg for k in calls for arg in k["args"])))
    param_rows = [{"symbol": p.symbol, "ctype": p.ctype, "count": params.padded_count(p),
                   "padded_bytes": params.padded_count(p) * p.array.dtype.itemsize,
                   "offset": p.blob_offset, "comment": describe(p), "in_blob": p.in_blob,
                   "init": None if p.in_blob else c_initializer(p.array)}
                  for p in params.arrays]
    return {
        **meta, "name": name, "NAME": NAME, "threads": names.threads,
        "float_io": bool(float_io),
        "title": c_comment(name if graph.name in ("", name) else f"{name} (model {graph.name})"),
        "inputs": inputs, "outputs": outputs, "states": states, "has_state": bool(states),
        "state_bytes": sum(graph.types[s["tensor"]].nbytes for s in states),
        "kernels": calls, "uses_arena": uses_arena,
        "index_checks": [{**row, "message_literal": c_string(row["message"])}
                         for row in index_checks(graph, kernels)],
        "prologue": before, "epilogue": after,
        "arena_bytes": mem.arena_bytes, "align": mem.align, "io_in_arena": mem.io_in_arena,
        "pools": _pools(mem, name, NAME),
        "params": param_rows, "c_params": [p for p in param_rows if not p["in_blob"]],
        "blob_params": [p for p in param_rows if p["in_blob"]],
        "params_bytes": params.total_bytes, "section": SECTION, "prototypes": prototypes,
    }


@functools.lru_cache(maxsize=None)
def template_environment() -> jinja2.Environment:
    """One environment per process: it keeps the compiled templates (compiling
    them dominates packaging a small model), and between processes in the
    cache (aot/executor/template_cache.py)."""
    from aot.executor.template_cache import bytecode_cache

    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(data_dir("templates"))),
                              bytecode_cache=bytecode_cache(),
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                              undefined=jinja2.StrictUndefined, autoescape=False)


# template -> output path ("{n}" is the package name)
FILES = {
    "model.h.j2": "include/{n}.h",
    "model.c.j2": "src/{n}.c",
    "internal.h.j2": "src/{n}_internal.h",
    "params.c.j2": "src/{n}_params.c",
    "params.S.j2": "src/{n}_params_blob.S",
    "sections.ld.j2": "{n}_sections.ld",
    "Makefile.j2": "Makefile",
    "CMakeLists.txt.j2": "CMakeLists.txt",
    "bench_main.c.j2": "bench/main.c",
}


# The templates of the package's headers: a compile reads them (from the
# include path), so they are written before any source compiles.
HEADERS = ("model.h.j2", "internal.h.j2")


def render(context: dict[str, Any], templates: Iterable[str] = FILES) -> dict[str, str]:
    """{path in the package: text} for every generated file (of `templates`)."""
    env = template_environment()
    out = {}
    for template in templates:
        path = FILES[template]
        if template == "params.S.j2" and not context["blob_params"]:
            continue
        out[path.format(n=context["name"])] = env.get_template(template).render(c=context)
    return out

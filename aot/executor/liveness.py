"""Where every tensor of a lowered model lives while it runs.

Kernel i runs at step i; the copies after the last kernel (state updates,
outputs that no kernel writes) happen at step n = len(kernels).

- An intermediate tensor is an arena buffer live from its producer's step to
  its last reader's step (to step n if a variable update copies it back).
- A kernel's scratch buffers are arena buffers live only at its step.
- Model inputs and outputs are the caller's buffers, outside the arena; with
  `io_in_arena` they are arena buffers too (inputs live from step 0, outputs
  until step n), copied in and out unless the caller already placed them there.
  An output that a later kernel reads is read back from where it was written.
- Variables (recurrent state) live in static buffers of their own, outside
  the arena, and persist across runs.
- Graph constants and rule-made arrays are linked params (aot.executor.params).

The arena buffers go to `plan_memory`, which gives their offsets.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from aot.executor.plan import Buffer, Plan, plan_memory
from aot.ir.graph import Graph
from aot.lower.driver import Kernel
from aot.lower.tir_passes.inplace import in_place


@dataclass(frozen=True)
class Place:
    """Where one graph tensor lives: kind "input" | "output" (the caller's
    buffer), "state" (a variable's static buffer), "arena" (at `offset`;
    with memory pools, at `offset` in pool `pool`)."""
    kind: str
    offset: int = 0
    pool: str = ""


@dataclass(frozen=True)
class MemoryPlan:
    places: dict[str, Place]              # tensor name -> where it lives
    scratch: dict[tuple[int, str], int]   # (step, scratch param name) -> arena offset
    buffers: tuple[Buffer, ...]           # what was planned, with live ranges
    plan: Plan
    align: int
    io_in_arena: bool
    # tensor -> the tensor whose buffer it was written over (in place)
    written_over: dict[str, str] = dataclasses.field(default_factory=dict)
    # --pools: the plan per bank (aot.executor.pools.PoolPlan), and the pool
    # of each scratch buffer (its offset in `scratch` is the pool's)
    pools: Any = None
    scratch_pools: dict[tuple[int, str], str] = dataclasses.field(default_factory=dict)

    @property
    def arena_bytes(self) -> int:
        return self.plan.arena_bytes

    @property
    def lower_bound_bytes(self) -> int:
        return self.plan.lower_bound_bytes


# Ops that keep every element at its flat row-major position: their output
# is their input's bytes under another shape.
VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})


def _view_of(graph: Graph, k: Kernel) -> str | None:
    """The tensor kernel k merely re-labels, if k is a pure view of it."""
    body = k.node.attrs.get("body")
    if body is None or not body.nodes or any(n.op not in VIEW_OPS for n in body.nodes):
        return None
    tensors = [a for a in k.args if a.kind == "tensor"]
    if len(tensors) != 2 or len(k.args) != 2 or len(k.node.outputs) != 1:
        return None
    src, dst = tensors[0].name, k.node.outputs[0]
    if tensors[1].name != dst or graph.types[src].dtype != graph.types[dst].dtype:
        return None
    return src


def elide_views(graph: Graph, kernels: Sequence[Kernel]) -> list[Kernel]:
    """Drop kernels that only reshape: their readers read the source instead.

    A view whose result is a graph output or a variable update keeps its
    kernel (the caller's buffer or the copy-back needs its own bytes).
    """
    keep_bytes = set(graph.outputs) | set(graph.updates.values())
    alias: dict[str, str] = {}
    out = []
    for k in kernels:
        src = _view_of(graph, k)
        if src is not None and k.node.outputs[0] not in keep_bytes:
            alias[k.node.outputs[0]] = alias.get(src, src)
            continue
        args = tuple(dataclasses.replace(a, name=alias[a.name])
                     if a.kind == "tensor" and a.name in alias else a for a in k.args)
        out.append(dataclasses.replace(k, args=args) if args != k.args else k)
    return out


def tensor_key(name: str) -> str:
    """The planner's name for a tensor's buffer (prefixed: tensor names are arbitrary)."""
    return "t:" + name


def scratch_key(step: int, name: str) -> str:
    """The planner's name for scratch buffer `name` of the kernel at `step`."""
    return f"s:{step}:{name}"


def _live_ranges(graph: Graph, kernels: Sequence[Kernel]) -> dict[str, list[int]]:
    """Tensor -> [first, last] step over the kernels that write or read it."""
    ranges: dict[str, list[int]] = {}
    for step, k in enumerate(kernels):
        for arg in k.args:
            if arg.kind == "tensor":
                r = ranges.setdefault(arg.name, [step, step])
                r[1] = step
    return ranges


def _written_over(graph: Graph, kernels: Sequence[Kernel],
                  ranges: dict[str, list[int]]) -> dict[str, str]:
    """Tensor -> the tensor whose bytes it takes: a kernel's output written
    over an input (aot/lower/tir_passes/inplace.py says the code allows it) that dies
    at that kernel, both intermediate tensors, the input passed to the
    kernel only once. Chains resolve to the first tensor."""
    fixed = (set(graph.inputs) | set(graph.outputs) | set(graph.variables)
             | set(graph.constants) | set(graph.updates.values()))
    root: dict[str, str] = {}
    for step, k in enumerate(kernels):
        arg_of = {p.name: a for p, a in zip(k.func.params, k.args)}
        names = [a.name for a in k.args if a.kind == "tensor"]
        for src_param, dst_param in in_place(k.func):
            src, dst = arg_of[src_param], arg_of[dst_param]
            if (src.kind == dst.kind == "tensor" and not {src.name, dst.name} & fixed
                    and names.count(src.name) == 1 and ranges[src.name][1] == step
                    and graph.types[src.name].nbytes == graph.types[dst.name].nbytes):
                root[dst.name] = root.get(src.name, src.name)
    return root


def arena_buffers(graph: Graph, kernels: Sequence[Kernel], io_in_arena: bool,
                  align: int) -> tuple[list[Buffer], dict[str, str]]:
    """The buffers to plan in the arena, each with its live range, and the
    tensors that live in another's buffer (written over it)."""
    end = len(kernels)
    ranges = _live_ranges(graph, kernels)
    for t in graph.updates.values():          # copied back into the state after the kernels
        ranges.setdefault(t, [end, end])[1] = end
    for t in graph.outputs:                   # copied out after the kernels (io_in_arena)
        ranges.setdefault(t, [end, end])[1] = end
    for t in graph.inputs:
        ranges.setdefault(t, [0, 0])[0] = 0
    over = _written_over(graph, kernels, ranges)
    for t, r in over.items():                 # one buffer, live from the first to the last
        whole = ranges[r]
        whole[0], whole[1] = min(whole[0], ranges[t][0]), max(whole[1], ranges[t][1])
    caller = set(graph.inputs) | set(graph.outputs)
    buffers = []
    for name, (first, last) in ranges.items():
        if name in graph.variables or name in graph.constants or name in over:
            continue
        if name in caller and not io_in_arena:
            continue
        buffers.append(Buffer(tensor_key(name), graph.types[name].nbytes, first, last, align))
    for step, k in enumerate(kernels):
        for param, arg in zip(k.func.params, k.args):
            if arg.kind == "scratch":
                buffers.append(Buffer(scratch_key(step, param.name), param.nbytes, step, step,
                                      align))
    return buffers, over


def places_of(graph: Graph, buffers: Sequence[Buffer], over: dict[str, str], io_in_arena: bool,
              where: Callable[[str], Place]
              ) -> tuple[dict[str, Place], dict[tuple[int, str], Place]]:
    """Every tensor's place and every scratch buffer's, `where` giving a
    planned buffer's (by its planner name)."""
    places: dict[str, Place] = {}
    for t in graph.variables:
        places[t] = Place("state")
    if not io_in_arena:
        places.update({t: Place("input") for t in graph.inputs})
        places.update({t: Place("output") for t in graph.outputs if t not in places})
    scratch = {}
    for b in buffers:
        kind, _, rest = b.name.partition(":")
        if kind == "s":
            step, name = rest.split(":", 1)
            scratch[(int(step), name)] = where(b.name)
        else:
            places[rest] = where(b.name)
    for t, r in over.items():
        places[t] = places[r]
    return places, scratch


def plan_kernels(graph: Graph, kernels: Sequence[Kernel], io_in_arena: bool = False,
                 align: int = 16) -> MemoryPlan:
    buffers, over = arena_buffers(graph, kernels, io_in_arena, align)
    plan = plan_memory(buffers, align)
    places, scratch = places_of(graph, buffers, over, io_in_arena,
                                lambda key: Place("arena", plan.offsets[key]))
    return MemoryPlan(places, {k: p.offset for k, p in scratch.items()}, tuple(buffers), plan,
                      align, io_in_arena, over)

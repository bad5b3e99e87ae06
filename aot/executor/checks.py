"""The package's run-time index checks, numbered across its kernels.

Each kernel lists its checks in PrimFunc.attrs (aot/lower/arith/bounds.py); a
failing one returns its number within the kernel, and the entry point adds
the kernel's base to get the number `<name>_failed_check()` reports. Here
each check gets that number, the model inputs its indices come from, and the
one-line message the harness prints and `aot run` shows.
"""
from __future__ import annotations

from typing import Any, Sequence

from aot.ir.graph import Graph
from aot.lower.arith.bounds import ATTR, IndexCheck
from aot.lower.driver import Kernel


def kernel_checks(kernel: Kernel) -> tuple[IndexCheck, ...]:
    return dict(kernel.func.attrs).get(ATTR, ())


def _producers(graph: Graph) -> dict[str, tuple[str, ...]]:
    """tensor -> the tensors its node reads, through every fused body."""
    out: dict[str, tuple[str, ...]] = {}
    for n in graph.nodes:
        body = n.attrs.get("body") if n.op == "fused" else None
        for inner in (body.nodes if body is not None else (n,)):
            for o in inner.outputs:
                out[o] = tuple(i for i in inner.inputs if i)
    return out


def source_inputs(graph: Graph, tensor: str) -> list[str]:
    """The model inputs (and state variables) `tensor` is computed from, in
    the model's order."""
    producers = _producers(graph)
    seen, stack, found = set(), [tensor], set()
    while stack:
        t = stack.pop()
        if t in seen:
            continue
        seen.add(t)
        if t in graph.inputs or t in graph.variables:
            found.add(t)
        stack.extend(producers.get(t, ()))
    order = [*graph.inputs, *graph.variables]
    return [t for t in order if t in found]


def message(check: IndexCheck, inputs: Sequence[str], graph: Graph) -> str:
    """`input 'ids' gives an index out of range in node 'Gather_3' (...)`."""
    names = [f"'{t}'" for t in inputs if t in graph.inputs]
    states = [f"'{t}'" for t in inputs if t not in graph.inputs]
    if names:
        who = f"input{'s' if len(names) > 1 else ''} {', '.join(names)} " \
              f"give{'' if len(names) > 1 else 's'}"
    elif states:
        who = f"state {', '.join(states)} gives"
    else:
        who = "the model computes"
    sizes = " x ".join(str(d) for d in check.dims)
    what = "a dimension of size" if len(check.dims) == 1 else "dimensions of sizes"
    return (f"{who} an index out of range in node '{check.node}' ({check.op}: "
            f"{what} {sizes})")


def index_checks(graph: Graph, kernels: Sequence[Kernel]) -> list[dict[str, Any]]:
    """Every check of every kernel, in the numbering the entry point uses."""
    rows = []
    for step, k in enumerate(kernels):
        for check in kernel_checks(k):
            inputs = source_inputs(graph, check.tensor)
            rows.append({"check": len(rows), "step": step, "kernel": k.func.name,
                         "node": check.node, "op": check.op, "indices": check.tensor,
                         "dims": list(check.dims), "inputs": inputs,
                         "message": message(check, inputs, graph)})
    return rows

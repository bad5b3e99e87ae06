"""Evaluating nodes and graphs with the ops' numpy references.

It sits with the ops, below the interpreter (aot/interp.py, which checks a
model's inputs and runs it): the fused group's reference runs its body here,
so the ops need nothing from above them.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Mapping, MutableMapping

import numpy as np

from aot.errors import node_label
from aot.ir.graph import Graph, Node, TensorType
from aot.ops.registry import Call, op_def


def run_node(node: Node, types: Mapping[str, TensorType],
             args: list[np.ndarray | None]) -> list[np.ndarray]:
    """Evaluate one node on concrete inputs; outputs are checked against types."""
    opdef = op_def(node)
    in_types = tuple(types.get(i) if i else None for i in node.inputs)
    out_types = tuple(types[o] for o in node.outputs)
    if not opdef.needs_values:
        args = [None] * len(args)
    call = Call(node, in_types, out_types)
    half = opdef.name not in HALF_AS_IS and any(
        t is not None and t.dtype == "float16" for t in in_types + out_types)
    if half:
        call, args = _in_float32(call, args)
    outs = list(opdef.ref(call, args))
    if half:
        with np.errstate(over="ignore"):     # beyond 65504 a half is infinite, as meant
            outs = [np.asarray(a).astype(t.dtype) if t.dtype == "float16" else a
                    for a, t in zip(outs, out_types)]
    if len(outs) < len(node.outputs):
        raise RuntimeError(f"{node_label(node)}: reference gave {len(outs)} outputs")
    result = []
    for name, ty, arr in zip(node.outputs, out_types, outs):
        arr = np.asarray(arr)
        if tuple(arr.shape) != ty.shape or arr.dtype.name != ty.dtype:
            raise RuntimeError(
                f"{node_label(node)}: output {name} is {arr.dtype}{list(arr.shape)}, "
                f"type inference said {ty}")
        result.append(arr)
    return result


# float16 is computed as ONNX Runtime computes it on CPU: the operands
# widened to float32, the op computed there (reductions accumulate in float32
# or wider), the outputs rounded to the nearest half. These ops take halves
# as they are: conversions (numpy rounds float64 to float16 once, not twice
# through float32), bit reinterpretation, and the fused group, whose body's
# nodes each round at their own outputs.
HALF_AS_IS = frozenset(("Cast", "CastLike", "BitCast", "fused"))


def _in_float32(call: Call, args: list) -> tuple[Call, list]:
    """The call with its float16 types and arrays widened to float32 (exactly)."""
    def widen(t: TensorType | None) -> TensorType | None:
        return replace(t, dtype="float32") if t is not None and t.dtype == "float16" else t
    args = [a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype == np.float16 else a
            for a in args]
    return Call(call.node, tuple(map(widen, call.in_types)),
                tuple(map(widen, call.out_types))), args


def run_graph(graph: Graph, inputs: Mapping[str, np.ndarray],
              state: MutableMapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Run the graph on inputs taken as they are: {output name: array}.

    A stateful graph starts from its variables' initial values, or from
    `state` when given; `state` is then updated in place."""
    env: dict[str, np.ndarray] = dict(graph.constants)
    for var, init in graph.variables.items():
        env[var] = np.array(state[var] if state is not None and var in state else init)
    env.update({k: np.asarray(v) for k, v in inputs.items()})
    for node in graph.nodes:
        args = [env[i] if i else None for i in node.inputs]
        env.update(zip(node.outputs, run_node(node, graph.types, args)))
    if state is not None:
        for var, tensor in graph.updates.items():
            state[var] = env[tensor].copy()
    return {o: env[o] for o in graph.outputs}

"""Evaluating nodes and graphs with the ops' numpy references.

It sits with the ops, below the interpreter (aot/interp.py, which checks a
model's inputs and runs it): the fused group's reference runs its body here,
so the ops need nothing from above them.
"""
from __future__ import annotations

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
    outs = list(opdef.ref(Call(node, in_types, out_types), args))
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

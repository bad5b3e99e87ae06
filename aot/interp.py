"""The reference interpreter: runs a Graph with the ops' numpy references.

This is what every pass is checked against, and what `aot verify` trusts
when no external reference runtime applies.
"""
from __future__ import annotations

from typing import Mapping, MutableMapping

import numpy as np

from aot.errors import ShapeError, node_label
from aot.ir.graph import Graph, Node, TensorType
from aot.ops import Call, op_def


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


def check_inputs(graph: Graph, inputs: Mapping[str, np.ndarray]) -> None:
    missing = [i for i in graph.inputs if i not in inputs]
    if missing:
        raise ShapeError(f"missing model input(s): {', '.join(missing)}")
    unknown = [k for k in inputs if k not in graph.inputs]
    if unknown:
        raise ShapeError(f"unknown model input(s): {', '.join(unknown)} "
                         f"(the model takes {', '.join(graph.inputs)})")
    for name in graph.inputs:
        ty, arr = graph.types[name], np.asarray(inputs[name])
        if tuple(arr.shape) != ty.shape or arr.dtype.name != ty.dtype:
            raise ShapeError(f"input {name}: expected {ty}, got "
                             f"{arr.dtype.name}[{'x'.join(map(str, arr.shape))}]")


def interpret(graph: Graph, inputs: Mapping[str, np.ndarray],
              state: MutableMapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Run the graph. Returns {output name: array}.

    A stateful graph starts from its variables' initial values, or from
    `state` when given; `state` is then updated in place, so passing the same
    dict to successive calls behaves like successive invocations on a device.
    """
    check_inputs(graph, inputs)
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

"""The reference interpreter: runs a Graph with the ops' numpy references.

This is what every pass is checked against, and what `aot verify` trusts
when no external reference runtime applies.
"""
from __future__ import annotations

from typing import Mapping, MutableMapping

import numpy as np

from aot.errors import ShapeError
from aot.ir.graph import Graph
from aot.ops.evaluate import run_graph, run_node

__all__ = ["check_inputs", "interpret", "run_node"]


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
    return run_graph(graph, inputs, state)

"""Wide fan-in, split into narrow steps.

A Sum, Max, Min, Mean or Concat of n inputs lowers to one expression nested
n deep (n - 1 additions, n - 1 selects), and everything that walks such a
tree recursively (TIR hashing and printing, the binding of long values, the
C compiler's parser: gcc stops at 256 brackets) then has a depth set by the
model: a Sum of 1,000 inputs was a RecursionError. Here a node with more
than MAX_FAN_IN inputs becomes a chain (Sum, Max, Min, Mean: the same
left-to-right order, so the same rounding) or a tree (Concat) of nodes with
at most MAX_FAN_IN inputs each. Fusion groups hold a few nodes, so a kernel's
expression depth stays bounded whatever the model.
"""
from __future__ import annotations

import numpy as np

from aot.ir.graph import Graph, Node
from aot.passes.rewrite import Rewrite, Rewriter, rewrite

MAX_FAN_IN = 16
CHAINED = ("Sum", "Max", "Min")
# ONNX TensorProto codes of the dtypes a Mean of integers is computed in and returns.
_ONNX_CODES = {"float32": 1, "uint8": 2, "int8": 3, "uint16": 4, "int16": 5, "int32": 6,
               "int64": 7, "bool": 9, "float64": 11, "uint32": 12, "uint64": 13}


def _chain(node: Node, rw: Rewriter, op: str, inputs: list[str],
           outputs: tuple[str, ...] | None = None) -> list[Node]:
    """op over inputs, MAX_FAN_IN at a time, left to right: each step's
    result is the first input of the next; the last writes `outputs`."""
    nodes: list[Node] = []
    take = inputs[:MAX_FAN_IN]
    rest = inputs[MAX_FAN_IN:]
    while rest:
        nodes.append(rw.node(op, take, name=f"{node.name}_part"))
        take = [nodes[-1].outputs[0], *rest[:MAX_FAN_IN - 1]]
        rest = rest[MAX_FAN_IN - 1:]
    nodes.append(rw.node(op, take, name=node.name if outputs else f"{node.name}_part",
                         outputs=outputs))
    return nodes


def _concat_tree(node: Node, rw: Rewriter, inputs: list[str]) -> list[Node]:
    """Concats of MAX_FAN_IN consecutive inputs, then of their results, up
    to one node writing the original output."""
    nodes: list[Node] = []
    while len(inputs) > MAX_FAN_IN:
        level = [rw.node("Concat", inputs[k:k + MAX_FAN_IN], name=f"{node.name}_part",
                         attrs=node.attrs)
                 for k in range(0, len(inputs), MAX_FAN_IN)]
        nodes += level
        inputs = [n.outputs[0] for n in level]
    return nodes + [rw.node("Concat", inputs, name=node.name, attrs=node.attrs,
                            outputs=node.outputs)]


def _mean(node: Node, rw: Rewriter, inputs: list[str]) -> list[Node]:
    """Sum, then divide by n: in the output's float type, as the lowering
    of one Mean accumulates; integers in float64, truncated back."""
    out = rw.type(node.outputs[0]).dtype
    nodes: list[Node] = []
    acc = out if out.startswith("float") else "float64"
    if acc != out:
        nodes = [rw.node("Cast", [i], name=f"{node.name}_wide", attrs={"to": _ONNX_CODES[acc]})
                 for i in inputs]
        inputs = [n.outputs[0] for n in nodes]
    nodes += _chain(node, rw, "Sum", inputs)
    count = rw.constant(f"{node.name}_count", np.array(len(inputs), acc))
    if acc == out:
        return nodes + [rw.node("Div", [nodes[-1].outputs[0], count], name=node.name,
                                outputs=node.outputs)]
    nodes.append(rw.node("Div", [nodes[-1].outputs[0], count], name=f"{node.name}_div"))
    return nodes + [rw.node("Cast", [nodes[-1].outputs[0]], name=node.name,
                            attrs={"to": _ONNX_CODES[out]}, outputs=node.outputs)]


def split_rule(node: Node, rw: Rewriter) -> Rewrite | None:
    inputs = [i for i in node.inputs if i]
    if len(inputs) <= MAX_FAN_IN:
        return None
    if node.op in CHAINED:
        return Rewrite(_chain(node, rw, node.op, inputs, node.outputs))
    if node.op == "Mean":
        return Rewrite(_mean(node, rw, inputs))
    if node.op == "Concat":
        return Rewrite(_concat_tree(node, rw, inputs))
    return None


def split_fan_in(graph: Graph) -> Graph:
    return rewrite(graph, [split_rule])

"""Decomposition: ops without a kernel of their own become ops that have one.

Einsum (PyTorch's exporter writes it for attention scores, bilinear layers
and many batched products) becomes, per pair of operands, the product
numpy's einsum would compute: labels used by nothing later summed out
(ReduceSum), each operand transposed to [batch, free, contracted] and
reshaped to 3-D, one batched MatMul, reshaped back; a last Transpose puts
the labels in the output's order. Transposes and reshapes that change
nothing are left for simplify to remove.
"""
from __future__ import annotations

import numpy as np

from aot.ir.graph import Graph, Node
from aot.ops.einsum import Equation, label_sizes, parse_equation
from aot.ops.registry import Sig
from aot.passes.rewrite import Rewrite, Rewriter, rewrite


class _Builder:
    """The nodes replacing one Einsum, each operand a (tensor, labels) pair."""

    def __init__(self, node: Node, rw: Rewriter, sizes: dict[str, int]):
        self.node, self.rw, self.sizes = node, rw, sizes
        self.nodes: list[Node] = []

    def add(self, op: str, inputs: list[str], attrs: dict | None = None,
            output: str | None = None) -> str:
        made = self.rw.node(op, inputs, name=f"{self.node.name}_{op.lower()}", attrs=attrs,
                            outputs=[output] if output else None)
        self.nodes.append(made)
        return made.outputs[0]

    def const(self, values) -> str:
        return self.rw.constant(f"{self.node.name}_shape", np.asarray(values, np.int64))

    def sum_out(self, t: str, labels: str, keep: set[str]) -> tuple[str, str]:
        axes = [i for i, c in enumerate(labels) if c not in keep]
        if not axes:
            return t, labels
        out = self.add("ReduceSum", [t, self.const(axes)], {"keepdims": 0})
        return out, "".join(c for c in labels if c in keep)

    def transpose(self, t: str, labels: str, order: str, output: str | None = None) -> str:
        perm = [labels.index(c) for c in order]
        if perm == list(range(len(perm))) and output is None:
            return t
        return self.add("Transpose", [t], {"perm": perm}, output)

    def reshape(self, t: str, shape: list[int], output: str | None = None) -> str:
        return self.add("Reshape", [t, self.const(shape)], output=output)

    def size(self, labels: str) -> int:
        return int(np.prod([self.sizes[c] for c in labels], dtype=np.int64))

    def product(self, a: tuple[str, str], b: tuple[str, str], keep: set[str]) -> tuple[str, str]:
        """a x b as one batched MatMul, keeping the labels in `keep`."""
        (ta, la), (tb, lb) = a, b
        batch = "".join(c for c in la if c in lb and c in keep)
        contract = "".join(c for c in la if c in lb and c not in keep)
        left = "".join(c for c in la if c not in lb)
        right = "".join(c for c in lb if c not in la)
        ta = self.reshape(self.transpose(ta, la, batch + left + contract),
                          [self.size(batch), self.size(left), self.size(contract)])
        tb = self.reshape(self.transpose(tb, lb, batch + contract + right),
                          [self.size(batch), self.size(contract), self.size(right)])
        prod = self.add("MatMul", [ta, tb])
        labels = batch + left + right
        return self.reshape(prod, [self.sizes[c] for c in labels]), labels


def einsum_rule(node: Node, rw: Rewriter) -> Rewrite | None:
    if node.op != "Einsum":
        return None
    types = tuple(rw.type(i) for i in node.inputs)
    sig = Sig(node, types, tuple(rw.const(i) for i in node.inputs))
    eq: Equation = parse_equation(sig, tuple(len(t.shape) for t in types))
    b = _Builder(node, rw, label_sizes(sig, eq, [t.shape for t in types]))
    operands = list(zip(node.inputs, eq.inputs))

    def needed(rest) -> set[str]:
        return set(eq.output).union(*(set(l) for _, l in rest))

    operands[0] = b.sum_out(*operands[0], needed(operands[1:]))
    while len(operands) > 1:
        first, second, rest = operands[0], operands[1], operands[2:]
        second = b.sum_out(*second, needed(rest) | set(first[1]))
        operands = [b.product(first, second, needed(rest)), *rest]
    t, labels = operands[0]
    t, labels = b.sum_out(t, labels, set(eq.output))
    out = node.outputs[0]
    if labels == eq.output and b.nodes and b.nodes[-1].outputs[0] == t:
        # the last node made computes the output: give it the output's name
        last = b.nodes.pop()
        b.add(last.op, list(last.inputs), dict(last.attrs), output=out)
    elif labels == eq.output:
        b.add("Identity", [t], output=out)
    else:
        b.transpose(t, labels, eq.output, output=out)
    return Rewrite(b.nodes)


def decompose(graph: Graph) -> Graph:
    return rewrite(graph, (einsum_rule,))

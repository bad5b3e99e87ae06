"""Constant folding: nodes computable at compile time become constants.

A node folds when all its inputs are constants, or when its op needs only
its inputs' types (Shape, Size: `OpDef.needs_values=False`). The folded
outputs keep their tensor names, so the result is deterministic and the
listing still reads like the model.

Folding must not blow up the weights: ConstantOfShape / Expand / Tile can
turn a few bytes into a large tensor that is cheaper to compute on the
device than to store in flash. Such a node stays an op while every consumer
computes elementwise (the fill is then inlined into that kernel); it folds
when its outputs are small (FOLD_ALWAYS elements), no bigger than GROWTH
times its constant inputs, or read as data by some consumer (a Conv weight
made by ConstantOfShape has to exist in memory anyway).

Every fold is priced before it runs (aot.limits: the compile-memory budget,
the board's flash): over budget, a node the device can compute stays an op,
and one whose value must exist in memory is refused.
"""
from __future__ import annotations

from aot.errors import BudgetError, node_label
from aot.interp import run_node
from aot.limits import check_compile_time
from aot.ir.graph import Graph, Node
from aot.ops import Pattern, op_def
from aot.passes.infer import affordable
from aot.passes.rewrite import Rewrite, Rewriter, rewrite

FOLD_ALWAYS = 1024  # output elements that always fold
GROWTH = 2          # else outputs may be at most this many times the inputs


def foldable(node: Node, rw: Rewriter) -> bool:
    if node.op == "fused" or any(not o or rw.pinned(o) for o in node.outputs):
        return False  # a model output stays computed by a kernel
    opdef = op_def(node)
    if opdef.needs_values and not all(not i or rw.const(i) is not None for i in node.inputs):
        return False
    if not affordable(node, rw.types):
        return False
    out_size = sum(rw.type(o).size for o in node.outputs)
    in_size = sum(rw.type(i).size for i in node.inputs if rw.const(i) is not None)
    wanted = out_size <= max(FOLD_ALWAYS, GROWTH * in_size) or read_as_data(node, rw)
    return wanted and within_budget(node, rw, out_size)


def within_budget(node: Node, rw: Rewriter, out_size: int) -> bool:
    try:
        check_compile_time(out_size, sum(rw.type(o).nbytes for o in node.outputs),
                           node_label(node), rw.created_bytes)
    except BudgetError:
        if read_as_data(node, rw):
            raise
        return False
    return True


def read_as_data(node: Node, rw: Rewriter) -> bool:
    """Whether some consumer needs the node's outputs in memory, not as an
    inlinable elementwise operand."""
    return any(op_def(c).pattern > Pattern.BROADCAST
               for o in node.outputs for c in rw.consumers(o))


def fold_rule(node: Node, rw: Rewriter) -> Rewrite | None:
    if not foldable(node, rw):
        return None
    args = [rw.const(i) if i else None for i in node.inputs]
    for name, value in zip(node.outputs, run_node(node, rw.types, args)):
        rw.set_constant(name, value)
    return Rewrite(())


def fold_constants(graph: Graph) -> Graph:
    return rewrite(graph, [fold_rule])

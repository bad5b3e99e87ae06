"""Dead code elimination: nodes whose outputs nothing uses, unused
constants, types of tensors that no longer exist."""
from __future__ import annotations

from aot.ir.graph import Graph
from aot.passes.rewrite import Rewriter


def dead_code(graph: Graph) -> Graph:
    # A Rewriter with no rules only drops what is dead and prunes tables.
    return Rewriter(graph).finish(retype=False)

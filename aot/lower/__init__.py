"""Lowering: the optimized, fused Graph -> one Kernel (PrimFunc) per node."""
from __future__ import annotations

from typing import Callable

from aot.errors import UnsupportedError, node_label
from aot.ir.graph import Graph
from aot.lower.driver import Arg, Kernel, lower_group
from aot.lower.tir_passes import Dump
from aot.targets import Target

# Importing the rule modules fills the rule tables, in this order (rules
# register in import order).
from aot.lower import rules  # noqa: F401
from aot.lower.rules import attention, batchnorm, detect, elementwise, index, tensor  # noqa: F401
from aot.lower.rules.quant import (  # noqa: F401
    tflite_elementwise, tflite_fc, tflite_pool, tflite_rowwise,
)
from aot.lower.rules import lstm, ml, movement, nn  # noqa: F401
from aot.lower.rules.quant import onnx_quant  # noqa: F401
from aot.lower.rules import pool, reduce, resize, rnn, rows, sampling, signal, trees  # noqa: F401
from aot.lower.rules import mediapipe  # noqa: F401
from aot.lower.rules.quant import tflite_conv, tflite_int16, tflite_lut  # noqa: F401

# Below every rule module's import: each op in the table must now have its
# rule (or say why it needs none); an error names the op and what is missing.
rules.check_op_table()


def lower_graph(graph: Graph, target: Target,
                dump: Callable[[int], Dump] | None = None, threads: int = 1) -> list[Kernel]:
    """Kernels in call order. The graph must have been through `fuse`.
    dump(step) (tir_passes.dump_to) sees kernel `step`'s TIR after each pass;
    `threads` is the pool the package is built for (--threads)."""
    kernels = []
    for step, node in enumerate(graph.nodes):
        if node.op != "fused":
            raise UnsupportedError(f"{node_label(node)}: lowering needs a fused graph "
                                   "(run aot.optimize first)")
        kernels.append(lower_group(graph, node, target, dump(step) if dump else None, threads))
    return kernels


__all__ = ["Arg", "Kernel", "lower_graph", "lower_group"]

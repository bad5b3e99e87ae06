"""Type and shape inference.

Walks the nodes in order and asks each op for its output types. Shape
arguments computed inside the graph (ONNX's Shape -> Gather -> Concat ->
Reshape chains) are evaluated on the fly from constants and input types, so
every shape ends up static; folding them into constants is constant_fold's
job, this pass only types.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from aot.errors import AotError, ModelError, ShapeError, node_label
from aot.ir.graph import Graph, Node, TensorType
from aot.limits import check_shape
from aot.ops import Pattern, Sig, op_def

# Values up to this many elements are evaluated during inference so that
# shape computations resolve; bigger ones are left to constant folding.
EVAL_LIMIT = 1 << 16
# Reducing and windowed ops (Conv, pooling, MatMul, reductions) read up to
# all their inputs per output element, and their numpy references
# materialize the windows (im2col): a model of constants could make one
# compile-time evaluation take terabytes. Beyond this many output x input
# elements such a node is not evaluated at compile time: the device computes it.
EVAL_WORK_LIMIT = 1 << 26


def affordable(node: Node, types: Mapping[str, TensorType]) -> bool:
    """Whether evaluating a node at compile time costs reasonable memory and time."""
    if op_def(node).pattern < Pattern.REDUCE:
        return True
    out = sum(types[o].size for o in node.outputs if o)
    ins = sum(types[i].size for i in node.inputs if i)
    return out * ins <= EVAL_WORK_LIMIT


def node_types(node: Node, types: Mapping[str, TensorType],
               values: Mapping[str, np.ndarray]) -> list[TensorType]:
    """The output types of one node, checked."""
    opdef = op_def(node)
    for i in node.inputs:
        if i and i not in types:
            raise ShapeError(f"{node_label(node)}: input '{i}' is not produced by any node "
                             "and is not a model input or initializer")
    sig = Sig(node,
              tuple(types[i] if i else None for i in node.inputs),
              tuple(values.get(i) if i else None for i in node.inputs))
    try:
        outs = list(opdef.infer(sig))
    except AotError:
        raise
    except Exception as e:  # noqa: BLE001 - an op's checks missed a malformed node
        raise ModelError(f"{node_label(node)}: malformed node ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else 'no detail'})") from e
    if len(outs) < len(node.outputs):
        raise ShapeError(f"{node_label(node)}: has {len(node.outputs)} outputs, "
                         f"the op defines {len(outs)}")
    outs = outs[:len(node.outputs)]
    # An op whose output quantization is a free parameter (tfl.conv2d, ...)
    # infers none: the importer's declared type carries it, so keep it.
    outs = [_keep_declared_quant(ty, types.get(name)) for name, ty in zip(node.outputs, outs)]
    for name, ty in zip(node.outputs, outs):
        check_shape(ty.shape, f"{node_label(node)} output '{name}'", allow_empty=True)
    return outs


def _keep_declared_quant(ty: TensorType, declared: TensorType | None) -> TensorType:
    if (ty.quant is None and declared is not None and declared.quant is not None
            and declared.dtype == ty.dtype):
        return ty.__class__(ty.shape, ty.dtype, declared.quant)
    return ty


def can_evaluate(node: Node, types: Mapping[str, TensorType],
                 values: Mapping[str, np.ndarray], limit: int) -> bool:
    """Whether a node's outputs are computable at compile time."""
    opdef = op_def(node)
    if node.op == "fused" or any(types[o].size > limit for o in node.outputs):
        return False
    if not affordable(node, types):
        return False
    if not opdef.needs_values:
        return True
    return all(not i or i in values for i in node.inputs)


def infer_types(graph: Graph) -> Graph:
    from aot.interp import run_node  # the interpreter sits above the passes' inputs

    types = dict(graph.types)
    for name in list(graph.inputs) + list(graph.constants) + list(graph.variables):
        if name not in types:
            raise ShapeError(f"tensor '{name}' has no type")
        check_shape(types[name].shape, f"tensor '{name}'",
                    allow_empty=name in graph.constants)
    values: dict[str, np.ndarray] = dict(graph.constants)
    for node in graph.nodes:
        types.update(zip(node.outputs, node_types(node, types, values)))
        if can_evaluate(node, types, values, EVAL_LIMIT):
            args = [values.get(i) if i else None for i in node.inputs]
            values.update(zip(node.outputs, run_node(node, types, args)))
    missing = [o for o in graph.outputs if o not in types]
    if missing:
        raise ShapeError(f"model output(s) {', '.join(missing)} are produced by no node")
    for name in graph.outputs:
        check_shape(types[name].shape, f"model output '{name}'")
    used = set(graph.tensor_names()) | set(graph.constants) | set(graph.variables)
    return graph.replace(types={k: v for k, v in types.items() if k in used})

"""Float I/O for a quantized model (aot package --float-io): the model's
quantized inputs become float32 inputs quantized at the entry, its quantized
outputs float32 outputs dequantized at the exit.

The edges are real `tfl.quantize` / `tfl.dequantize` nodes, so they are
typed, planned, lowered and emitted like any other node, on every board:
TFLite's QUANTIZE (round half away from zero of a float32 x / scale, plus
the zero point, clamped) and DEQUANTIZE ((float)((double)scale * (q - zp))),
../shared/TFLITE_INT8.md section 10. The model's tensors keep their names
(the package's I/O names do not change); the quantized ones inside are
renamed `<name>_quantized`.
"""
from __future__ import annotations

from typing import Mapping

from aot.errors import AotError, UnsupportedError
from aot.ir.graph import Graph, Node, TensorType, claim_name

# The stored dtypes the edges convert from and to (tfl.quantize's outputs).
QUANTIZED = ("int8", "uint8", "int16")


def quantizable(ty: TensorType) -> bool:
    """Whether float data stands for a tensor of type `ty`, quantized on the
    way in: int8, uint8 or int16 with one scale and zero point."""
    return ty.dtype in QUANTIZED and ty.quant is not None and len(ty.quant.scale) == 1


def quantized_io(graph: Graph) -> dict[str, TensorType]:
    """{name: type} of the inputs and outputs --float-io wraps: the
    quantizable ones."""
    out = {}
    for name in (*graph.inputs, *graph.outputs):
        ty = graph.types[name]
        if ty.dtype not in QUANTIZED or ty.quant is None:
            continue
        if not quantizable(ty):
            raise UnsupportedError(f"--float-io: '{name}' is quantized per channel (axis "
                                   f"{ty.quant.axis}); only per-tensor quantized inputs and "
                                   "outputs are supported yet")
        out[name] = ty
    return out


def _renamed(node: Node, old: str, new: str) -> Node:
    return node.with_(inputs=tuple(new if t == old else t for t in node.inputs),
                      outputs=tuple(new if t == old else t for t in node.outputs))


def with_float_io(graph: Graph) -> Graph:
    """`graph` with float32 in place of its quantized inputs and outputs
    (quantized_io); a graph without any is returned as it is."""
    wrapped = quantized_io(graph)
    through = set(graph.inputs) & set(graph.outputs) & set(wrapped)
    if through:
        raise UnsupportedError(f"--float-io: '{sorted(through)[0]}' is both an input and an "
                               "output of the model; such a model is not supported")
    if not wrapped:
        return graph
    taken = {*graph.tensor_names(), *graph.constants, *graph.variables,
             *(n.name for n in graph.nodes)}
    nodes, types = list(graph.nodes), dict(graph.types)
    updates = dict(graph.updates)
    first, last = [], []
    for name, ty in wrapped.items():
        inner = claim_name(f"{name}_quantized", taken)
        nodes = [_renamed(n, name, inner) for n in nodes]
        updates = {v: inner if t == name else t for v, t in updates.items()}
        types[inner], types[name] = ty, io_type(graph, name, wrapped)
        if name in graph.inputs:
            first.append(Node("tfl.quantize", claim_name(f"{name}_quantize", taken), (name,),
                              (inner,), {"dtype": ty.dtype}))
        else:
            last.append(Node("tfl.dequantize", claim_name(f"{name}_dequantize", taken),
                             (inner,), (name,)))
    return graph.replace(nodes=tuple(first + nodes + last), types=types, updates=updates)


def float_edges(graph: Graph, on: bool) -> tuple[dict[str, TensorType], Graph]:
    """(the quantized types of the tensors made float32, the graph) for
    aot.package's float_io: with_float_io when `on`, else the graph as it is."""
    if not on:
        return {}, graph
    if any(n.op == "fused" for n in graph.nodes):
        raise AotError("--float-io adds nodes at the model's edges: give the model, or its "
                       "graph before aot.optimize")
    return quantized_io(graph), with_float_io(graph)


def io_type(graph: Graph, name: str, float_io: Mapping[str, TensorType]) -> TensorType:
    """An input's or output's type in the package: float32 if `float_io`
    (quantized_io's) wraps it, else the graph's."""
    ty = graph.types[name]
    return TensorType(ty.shape, "float32") if name in float_io else ty

from aot.ir.graph import Graph, Node, Quant, TensorType, print_graph

__all__ = ["Graph", "Node", "Quant", "TensorType", "print_graph"]

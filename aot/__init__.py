"""aot: an ahead-of-time deployment packager for edge devices.

model file -> load -> Graph -> optimize -> (later: TIR -> code -> package -> board)
"""
from aot.deploy.device import connect
from aot.errors import AotError
from aot.frontend import load
from aot.interp import interpret
from aot.ir.graph import Graph, print_graph
from aot.passes.pipeline import optimize

__version__ = "0.1.0"

__all__ = ["AotError", "Graph", "connect", "interpret", "load", "optimize", "print_graph",
           "__version__"]

"""aot: an ahead-of-time deployment packager for edge devices.

model file -> load -> Graph -> optimize -> (later: TIR -> code -> package -> board)

The names below are imported on first use, so that `import aot` (and with
it `python -m aot` start-up, before the CLI can handle Ctrl-C) stays cheap.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

_LAZY = {"connect": "aot.deploy.device", "AotError": "aot.errors", "load": "aot.frontend",
         "interpret": "aot.interp", "Graph": "aot.ir.graph", "print_graph": "aot.ir.graph",
         "optimize": "aot.passes.pipeline"}

__all__ = ["AotError", "Graph", "connect", "interpret", "load", "optimize", "print_graph",
           "__version__"]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'aot' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])

"""aot: an ahead-of-time deployment packager for edge devices.

model file -> load -> Graph -> optimize -> package -> run / verify / bench on a board

    pkg = aot.package("model.tflite", board="host", out_dir="build/model")
    with aot.connect("host") as dev:
        y = dev.run(pkg, {"input_1": x})["Identity"]

The names below are imported on first use, so that `import aot` (and with
it `python -m aot` start-up, before the CLI can handle Ctrl-C) stays cheap.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

# What the CLI's commands do, with its defaults: aot.package, aot.run, ...
_COMMANDS = {name: "aot.api" for name in ("package", "run", "verify", "bench")}
_ERRORS = ("AotError", "ModelError", "UnsupportedError", "ShapeError", "BudgetError",
           "NotImplementedYet", "InputError", "BoardUnreachableError", "MissingToolError",
           "MismatchError")
_RESULTS = ("AnalyzeResult", "BenchResult", "VerifyResult", "OutputCheck", "StreamCheck")
_LAZY = {"connect": "aot.deploy.device", "load": "aot.frontend",
         "interpret": "aot.interp", "Graph": "aot.ir.graph", "print_graph": "aot.ir.graph",
         "optimize": "aot.passes.pipeline", "analyze": "aot.analysis",
         "run_stream": "aot.check.streaming", "PackageInfo": "aot.packaging.info",
         "TensorInfo": "aot.packaging.info", "QuantizedInput": "aot.deploy.host", **_COMMANDS,
         **dict.fromkeys(_ERRORS, "aot.errors"), **dict.fromkeys(_RESULTS, "aot.results")}

__all__ = ["Graph", "PackageInfo", "QuantizedInput", "TensorInfo", "analyze", "bench", "connect", "interpret",
           "load", "optimize", "package", "print_graph", "run", "run_stream", "verify",
           *_ERRORS, *_RESULTS, "__version__"]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'aot' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])

"""The lowering's floors: the modules the convolutions build on
and the rule modules beside them never reach back into the convolution
modules (aot/lower/nn.py, tflite_int8.py, winograd.py), not even through a
function-level import, so no import circle runs through a convolution."""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

LOWER = Path(__file__).resolve().parents[2] / "aot" / "lower"
CONVOLUTIONS = {"nn", "tflite_int8", "winograd"}
# Shared parts under the convolutions, and the rules that moved out of them.
BELOW = ["builders", "tiles", "windows", "conv_walk", "conv_schedule", "conv", "dense", "pool", "batchnorm", "resize",
         "int8_common", "int8_fc", "int8_math", "int8_window", "int8_elementwise", "int8_pool",
         "int8_rowwise", "int8_dsp", "int8_mve", "index", "detect"]


def lower_imports(source: str) -> set[str]:
    """The aot.lower modules a file imports, at any depth of its code."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "aot.lower":
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aot.lower."):
            found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[2] for a in node.names
                      if a.name.startswith("aot.lower.")}
    return {m for m in found if (LOWER / f"{m}.py").exists()}


@functools.cache
def reach(module: str) -> frozenset[str]:
    """Every aot.lower module `module` imports, directly or through others."""
    seen, todo = set(), [module]
    while todo:
        for m in lower_imports((LOWER / f"{todo.pop()}.py").read_text()) - seen:
            seen.add(m)
            todo.append(m)
    return frozenset(seen)


def test_lower_imports_sees_every_form():
    src = ("from aot.lower import qmath as q, nn\nimport aot.lower.tiles\n"
           "def f():\n    from aot.lower.tflite_int8 import conv_nest\n")
    assert lower_imports(src) == {"qmath", "nn", "tiles", "tflite_int8"}


@pytest.mark.parametrize("module", BELOW)
def test_module_below_the_convolutions_never_imports_them(module):
    assert not reach(module) & CONVOLUTIONS, sorted(reach(module) & CONVOLUTIONS)


def test_winograd_reaches_the_dense_product_without_the_float_convolution():
    """nn.conv picks Winograd and Winograd's products are dense.py's: nn
    imports winograd, never the other way round."""
    assert "dense" in reach("winograd") and "nn" not in reach("winograd")

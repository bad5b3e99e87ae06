"""The lowering's floors: the modules the convolutions build on
and the rule modules beside them never reach back into the convolution
modules (aot/lower/rules/nn.py, rules/quant/tflite_conv.py,
kernels/int8_conv.py, kernels/winograd.py), not even through a
function-level import, so no import circle runs through a convolution."""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

LOWER = Path(__file__).resolve().parents[2] / "aot" / "lower"
CONVOLUTIONS = {"rules.nn", "rules.quant.tflite_conv", "kernels.int8_conv", "kernels.winograd"}
# Shared parts under the convolutions, and the rules that moved out of them.
BELOW = ["arith.loops", "kernels.tiles", "kernels.windows", "kernels.conv_walk", "schedule.conv",
         "kernels.conv_tile", "kernels.dense", "rules.pool", "rules.batchnorm", "rules.resize",
         "arith.quant", "rules.quant.tflite_fc", "arith.gemmlowp", "kernels.int8_window",
         "rules.quant.tflite_elementwise", "rules.quant.tflite_pool", "rules.quant.tflite_rowwise",
         "kernels.cortex_m", "kernels.cortex_m.dsp", "kernels.cortex_m.mve", "rules.index",
         "rules.detect"]


def lower_imports(source: str) -> set[str]:
    """The aot.lower modules a file imports, at any depth of its code, by
    their names under aot.lower ("rules.nn")."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aot.lower"):
            below = node.module.removeprefix("aot.lower").removeprefix(".")
            found.add(below)
            found |= {f"{below}.{a.name}".lstrip(".") for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("aot.lower.") for a in node.names
                      if a.name.startswith("aot.lower.")}
    return {m for m in found if m and module_file(m).exists()}


def module_file(module: str) -> Path:
    path = LOWER.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


@functools.cache
def reach(module: str) -> frozenset[str]:
    """Every aot.lower module `module` imports, directly or through others."""
    seen, todo = set(), [module]
    while todo:
        for m in lower_imports(module_file(todo.pop()).read_text()) - seen:
            seen.add(m)
            todo.append(m)
    return frozenset(seen)


def test_lower_imports_sees_every_form():
    src = ("from aot.lower.arith import qmath as q\nfrom aot.lower.rules import nn\n"
           "import aot.lower.kernels.tiles\n"
           "def f():\n    from aot.lower.kernels.int8_conv import conv_nest\n")
    assert lower_imports(src) == {"arith", "arith.qmath", "rules", "rules.nn", "kernels.tiles",
                                  "kernels.int8_conv"}


@pytest.mark.parametrize("module", BELOW)
def test_module_below_the_convolutions_never_imports_them(module):
    assert not reach(module) & CONVOLUTIONS, sorted(reach(module) & CONVOLUTIONS)


def test_winograd_reaches_the_dense_product_without_the_float_convolution():
    """nn.conv picks Winograd and Winograd's products are dense.py's: nn
    imports winograd, never the other way round."""
    assert "kernels.dense" in reach("kernels.winograd")
    assert "rules.nn" not in reach("kernels.winograd")

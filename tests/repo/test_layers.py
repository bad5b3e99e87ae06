"""Lower floors never import higher ones (DESIGN.md): the IR and the op
table stand on their own, so the interpreter, the passes and the lowering
can all use them without an import circle."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

AOT = Path(__file__).resolve().parents[2] / "aot"
# What each floor may import from aot.
ALLOWED = {"ir": ("aot.errors", "aot.ir"),
           "ops": ("aot.errors", "aot.ir", "aot.ops", "aot.limits")}


def aot_imports(path: Path) -> set[str]:
    """Every aot module a file imports, at its top or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m == "aot" or m.startswith("aot.")}


@pytest.mark.parametrize("floor", sorted(ALLOWED))
def test_a_floor_imports_only_what_is_below_it(floor):
    allowed = ALLOWED[floor]
    bad = {f"{p.relative_to(AOT)}: {m}" for p in sorted((AOT / floor).rglob("*.py"))
           for m in aot_imports(p)
           if not any(m == a or m.startswith(a + ".") for a in allowed)}
    assert not bad, sorted(bad)

"""The floors of aot (docs/architecture.md): each folder imports only its
own floor and the floors below it, at the top of a module or inside a
function alike; no import circle, even through function-level imports; no
private name imported across modules. The few exceptions are listed below,
each with its reason, so that the list can only shrink."""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

AOT = Path(__file__).resolve().parents[2] / "aot"
# Bottom-up: a module may import its own floor and every floor before it.
FLOORS = (
    ("aot.errors", "aot.limits", "aot.targets", "aot.support", "aot.__version__"),
    ("aot.ir",),
    ("aot.ops",),
    ("aot.interp",),
    ("aot.isa",),
    ("aot.passes",),
    ("aot.frontend",),
    ("aot.lower",),
    ("aot.codegen",),
    ("aot.executor",),
    ("aot.packaging",),
    ("aot.deploy",),
    ("aot.tune.records", "aot.tune.database", "aot.check"),
    # aot.tune's search packages and times candidates as aot.api does
    ("aot", "aot.__main__", "aot.api", "aot.analysis", "aot.cli", "aot.doctor", "aot.results",
     "aot.tune"),
    ("aot.testing",),     # not product: nothing below imports it
)
# Imports that climb a floor, with why they still do.
UPWARD: dict[tuple[str, str], str] = {
}
# Import circles not broken yet (each a set of modules), with why.
CIRCLES: dict[frozenset[str], str] = {
}
# `from aot.x import _name` across modules, with why.
PRIVATE: dict[tuple[str, str], str] = {
}


def module_name(path: Path) -> str:
    parts = path.relative_to(AOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(AOT.rglob("*.py"))}


@functools.cache
def lazy_names() -> dict[str, str]:
    """aot's lazy attributes (aot/__init__.py _LAZY): name -> module."""
    import aot
    return {**aot._LAZY, "__version__": "aot.__version__"}


def target(module: str, name: str | None) -> str:
    """The module `from module import name` reaches."""
    if name is not None and f"{module}.{name}" in MODULES:
        return f"{module}.{name}"
    if module == "aot" and name in lazy_names():
        return lazy_names()[name]
    return module


def imports(module: str) -> set[tuple[str, str, int]]:
    """(imported module, the name imported, line) for every aot import in
    `module`, at its top or inside a function; `import aot` followed by
    `aot.name` counts as importing what `name` is."""
    tree = ast.parse(MODULES[module].read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "aot":
            found |= {(target(node.module, a.name), a.name, node.lineno) for a in node.names}
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "aot" and a.asname is None:
                    found |= {(target("aot", n.attr), n.attr, n.lineno) for n in ast.walk(tree)
                              if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                              and n.value.id == "aot"}
                elif a.name.split(".")[0] == "aot":
                    found.add((a.name, "", node.lineno))
    return {(m, n, line) for m, n, line in found if m != module}


def floor_of(module: str) -> int:
    best = max((prefix for floor in FLOORS for prefix in floor
                if module == prefix or module.startswith(prefix + ".")), key=len)
    return next(i for i, floor in enumerate(FLOORS) if best in floor)


def graph() -> dict[str, set[str]]:
    return {m: {t for t, _, _ in imports(m)} for m in MODULES}


def circles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while not component or w != v:
                w = stack.pop()
                on.discard(w)
                component.add(w)
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_floor():
    assert all(floor_of(m) >= 0 for m in MODULES)


def test_imports_see_every_form(tmp_path, monkeypatch):
    src = ("from aot.lower.schedule import space\nimport aot.ir.tir\nimport aot\n"
           "def f():\n    from aot import __version__, tune\n    return aot.load\n")
    monkeypatch.setitem(MODULES, "aot.probe", tmp_path / "probe.py")
    (tmp_path / "probe.py").write_text(src)
    assert {m for m, _, _ in imports("aot.probe")} == {
        "aot.lower.schedule.space", "aot.ir.tir", "aot.__version__", "aot.tune", "aot.frontend"}


def test_circles_are_found():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
        frozenset({"a", "b", "c"})]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_module_imports_only_its_floor_and_below(module):
    mine = floor_of(module)
    bad = sorted(f"line {line}: {t}" for t, _, line in imports(module)
                 if floor_of(t) > mine and (module, t) not in UPWARD)
    assert not bad, f"{module} (floor {mine}) imports above its floor: {bad}"


def test_no_import_circle():
    found = set(circles(graph()))
    assert found <= set(CIRCLES), sorted(map(sorted, found - set(CIRCLES)))
    assert set(CIRCLES) <= found, f"broken, remove from CIRCLES: {set(CIRCLES) - found}"


def test_no_private_name_crosses_modules():
    bad = sorted(f"{m}:{line}: {t}.{n}" for m in MODULES for t, n, line in imports(m)
                 if n.startswith("_") and not n.startswith("__") and (m, n) not in PRIVATE)
    assert not bad, bad


def test_every_exception_is_still_needed():
    edges = {(m, t) for m in MODULES for t, _, _ in imports(m)}
    private = {(m, n) for m in MODULES for _, n, _ in imports(m)}
    assert not set(UPWARD) - edges, set(UPWARD) - edges
    assert not set(PRIVATE) - private, set(PRIVATE) - private

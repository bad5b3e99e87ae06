#!/usr/bin/env python3
"""Applies scripts/layout_map.tsv to a tree laid out the old way: moves each
module with `git mv`, gives every new package an __init__.py, and rewrites
every mention of a moved module in aot/, tests/, bench/, scripts/, docs/,
README.md and the comments of targets/ and boards/:

- `from aot.X import a, b` where X itself moved, and where `a` is a module
  that moved (`from aot.lower import space` becomes
  `from aot.lower.schedule import space`);
- dotted names anywhere (`import aot.lower.conv`, "aot.tools.shutil.which"
  in a monkeypatch), by the longest moved module they start with;
- file paths (`aot/lower/conv.py`, and `lower/conv.py` inside aot's folders).

templates/ is left alone: what it names reaches generated packages, and the
one module it names (aot/deploy/serve.py) does not move.

    scripts/apply_layout_map.py [--map scripts/layout_map.tsv] [--dry-run]

Run once, from the repository's top, on a clean tree; a second run finds
nothing to move and stops.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REWRITTEN = ("aot", "tests", "bench", "scripts", "docs", "README.md", "targets", "boards")
# Written against the new layout and the old one alike: left as they are.
LAYOUT_AWARE = ("bench/same_code_emit.py", "scripts/apply_layout_map.py")
SUFFIXES = (".py", ".md", ".toml", ".txt", ".cfg", ".sh")
DOTTED = re.compile(r"(?<![\w.])aot(?:\.[A-Za-z_]\w*)+")
PATH = re.compile(r"(?<![\w/.-])(aot/)?((?:[a-z_]\w*/)*[a-z_]\w*)\.py\b")
FROM_IMPORT = re.compile(r"^(?P<indent>[ \t]*)from (?P<module>aot(?:\.\w+)*) import "
                         r"(?P<names>\([^)]*\)|[^\n#]*?)(?P<tail>[ \t]*(?:#[^\n]*)?)$",
                         re.MULTILINE)
# What each new package holds and what it may import (tests/repo/test_layers.py
# holds the floors).
PACKAGE_DOCS = {
    "aot.support": "This machine and plain files: external tools and the Debian packages that "
                   "provide them, atomic writes, progress, .npy files, the installed data "
                   "directories, config validation, report documents. The lowest floor: "
                   "imports only aot.errors, aot.limits and each other.",
    "aot.isa": "The call vocabulary lowering and code generation share: each instruction "
               "family's calls (calls.py: the runtime helpers and generic vector calls; "
               "arm_dsp.py, arm_mve.py), with their C and LLVM spellings. Imports the IR and "
               "the floors below it, never aot.lower or aot.codegen.",
    "aot.ops.quant": "The quantized ops of the op table: TFLite int8 and int16, the lookup-table "
                     "ops, ONNX's QLinear ops, and the fixed-point arithmetic they share "
                     "(qmath.py). Same floor as aot.ops.",
    "aot.frontend.tflite": "The TFLite importer: importer.py walks the flatbuffer, ops.py "
                           "converts each builtin, vars.py resolves variables, sparse.py "
                           "densifies sparse tensors. Same floor as aot.frontend.",
    "aot.lower.rules.quant": "Lowering rules of aot/ops/quant/, one module per family: TFLite "
                             "int8 (conv, fc, pool, rowwise, elementwise), int16, lookup "
                             "tables, ONNX QLinear.",
    "aot.lower.kernels": "Target-neutral loop nests the rules call: convolution walks and "
                         "tiles, windows, dense products, Winograd, int8 windows. One folder "
                         "per target family for target-specific kernels (cortex_m/).",
    "aot.lower.kernels.cortex_m": "Cortex-M int8 kernels: dsp.py (the DSP extension's SMLAD "
                                  "family, CMSIS-NN's layout) and mve.py (Helium).",
    "aot.lower.schedule": "How a kernel is scheduled: the tuning space (sites, configs), tile "
                          "sizes, the accumulation strategy, the float conv schedule.",
    "aot.lower.arith": "TIR arithmetic builders: loops, quantized arithmetic, gemmlowp-style "
                       "fixed point, 32-bit fixed point, index bounds.",
    "aot.packaging": "A Graph -> a package directory: build.py (generate, package_graph), the "
                     "package's metadata, README and toolchain, firmware and footprint. "
                     "Imports every floor up to aot.executor.",
    "aot.check": "What a user checks on a board: datasets and metrics (validate.py), streaming, "
                 "timing and traces, inputs, the reference runtimes, `aot ops`. Imports every "
                 "floor up to aot.deploy and aot.tune.",
    "aot.testing.fuzz": "Fuzzers: random models (models.py), the packages' I/O (io.py) and the "
                        "runtime (runtime.py). Not product: nothing in the product imports it.",
}
FLOOR_NOTE = "Same floor as its parent package (tests/repo/test_layers.py)."


def read_map(path: Path) -> dict[str, str]:
    """old module -> new module, in the map's order."""
    moves = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            old, new = line.split()
            moves[old] = new
    return moves


def module_file(module: str, packages: set[str]) -> Path:
    """Where `module` lives: its package's __init__.py when it is a package."""
    parts = Path(*module.split("."))
    return parts / "__init__.py" if module in packages else parts.with_suffix(".py")


def new_packages(moves: dict[str, str]) -> set[str]:
    """Every package the new layout has: each parent of a new module."""
    found = set()
    for new in moves.values():
        parts = new.split(".")
        found.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return found


def move_files(moves: dict[str, str], dry_run: bool) -> None:
    packages = new_packages(moves)
    for old, new in moves.items():
        src = ROOT / Path(*old.split(".")).with_suffix(".py")
        if not src.is_file():
            src = ROOT / Path(*old.split(".")) / "__init__.py"
        dst = ROOT / module_file(new, packages)
        if src == dst:
            continue
        if not src.is_file():
            raise SystemExit(f"apply_layout_map: {old} is not in this tree (moved already?)")
        if dst.exists():
            raise SystemExit(f"apply_layout_map: {dst.relative_to(ROOT)} exists")
        print(f"git mv {src.relative_to(ROOT)} {dst.relative_to(ROOT)}")
        if not dry_run:
            dst.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["git", "mv", str(src), str(dst)], cwd=ROOT, check=True)
    for package in sorted(packages):
        init = ROOT / Path(*package.split(".")) / "__init__.py"
        if not init.exists():
            print(f"create {init.relative_to(ROOT)}")
            if not dry_run:
                init.parent.mkdir(parents=True, exist_ok=True)
                init.write_text(f'"""{wrap(PACKAGE_DOCS.get(package, FLOOR_NOTE))}"""\n')
                subprocess.run(["git", "add", str(init)], cwd=ROOT, check=True)


def wrap(text: str, width: int = 76) -> str:
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return "\n".join([*lines, line])


def rename_dotted(name: str, moves: dict[str, str]) -> str:
    """`name` with the longest moved module it starts with replaced."""
    parts = name.split(".")
    for i in range(len(parts), 1, -1):
        head = ".".join(parts[:i])
        if head in moves:
            return ".".join([moves[head], *parts[i:]])
    return name


def rewrite_from_import(match: re.Match, moves: dict[str, str]) -> str:
    """A `from aot.X import ...` statement: names that are moved modules are
    imported from their new package, the rest from X's new name."""
    module, names = match["module"], match["names"]
    inner = names.strip()[1:-1] if names.strip().startswith("(") else names
    comments = re.findall(r"#[^\n]*", inner)
    inner = re.sub(r"#[^\n]*", "", inner)
    items = [n.strip() for n in inner.replace("\n", " ").split(",") if n.strip()]
    moved = [i for i in items if f"{module}.{i.split()[0]}" in moves]
    if not moved:
        return match.group(0).replace(module, rename_dotted(module, moves), 1)
    indent, lines = match["indent"], []
    by_source: dict[str, list[str]] = {}
    for item in items:
        name, _, alias = item.partition(" as ")
        full = f"{module}.{name.strip()}"
        if full in moves:
            parent, stem = moves[full].rsplit(".", 1)
            shown = alias.strip() or name.strip()
            by_source.setdefault(parent, []).append(stem if stem == shown else f"{stem} as {shown}")
        else:
            by_source.setdefault(rename_dotted(module, moves), []).append(item)
    for source, got in by_source.items():
        text = f"{indent}from {source} import {', '.join(got)}"
        if len(text) > 100:
            body = ",\n".join(f"{indent}    {g}" for g in got)
            text = f"{indent}from {source} import (\n{body},\n{indent})"
        lines.append(text)
    lines[0] += match["tail"] or "".join(f"  {c}" for c in comments[:1])
    return "\n".join(lines)


def old_path_module(path: str) -> str:
    parts = path.split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def rewrite_path(match: re.Match, moves: dict[str, str], packages: set[str]) -> str:
    """`aot/lower/conv.py` (or `lower/conv.py`, short for it) at its new place."""
    prefix, body = match[1] or "", match[2]
    module = old_path_module(f"aot/{body}")
    if module not in moves or (not prefix and not body.count("/")):
        return match.group(0)
    new = module_file(moves[module], packages).as_posix()
    return new if prefix else new.removeprefix("aot/")


def rewrite_text(text: str, moves: dict[str, str], packages: set[str]) -> str:
    """One pass over `text`: an import statement is rewritten whole, and
    the text between them name by name, so no new name is renamed again
    (`aot.lower.schedule` is a moved module and a new package)."""
    out, end = [], 0
    for match in FROM_IMPORT.finditer(text):
        out += [rewrite_names(text[end:match.start()], moves, packages),
                rewrite_from_import(match, moves)]
        end = match.end()
    return "".join([*out, rewrite_names(text[end:], moves, packages)])


def rewrite_names(text: str, moves: dict[str, str], packages: set[str]) -> str:
    text = DOTTED.sub(lambda m: rename_dotted(m.group(0), moves), text)
    return PATH.sub(lambda m: rewrite_path(m, moves, packages), text)


def rewritten_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", *REWRITTEN], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.split()
    return [ROOT / f for f in listed
            if f.endswith(SUFFIXES) and f not in LAYOUT_AWARE and (ROOT / f).is_file()]


def update_pyproject(packages: list[str]) -> None:
    """pyproject.toml's package list: every package of aot, then the data."""
    path = ROOT / "pyproject.toml"
    text = path.read_text()
    line = re.search(r'^packages = \[(.*)\]$', text, re.MULTILINE)
    data = [p for p in re.findall(r'"([^"]+)"', line[1]) if p.startswith("aot._data.")]
    listed = ", ".join(f'"{p}"' for p in [*packages, *data])
    path.write_text(text[:line.start()] + f"packages = [{listed}]" + text[line.end():])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--map", type=Path, default=ROOT / "scripts" / "layout_map.tsv")
    parser.add_argument("--dry-run", action="store_true")
    opts = parser.parse_args()
    moves = read_map(opts.map)
    packages = new_packages(moves) | {m for m in moves if m == moves[m]}
    move_files(moves, opts.dry_run)
    changed = 0
    for path in rewritten_files():
        text = path.read_text()
        new = rewrite_text(text, moves, packages)
        if new != text:
            changed += 1
            if not opts.dry_run:
                path.write_text(new)
    if not opts.dry_run:
        tree = sorted(".".join(p.parent.relative_to(ROOT).parts)
                      for p in (ROOT / "aot").rglob("__init__.py"))
        update_pyproject(tree)
    print(f"{len(moves)} modules mapped, {changed} files rewritten", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

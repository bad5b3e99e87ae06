"""aot's tables as text, for bench/same_code.py --tables: the op table with
its rules, the layout facts of every op, the instruction legalization table
in order, both pass pipelines and the tuning sites. A function appears by
its qualified name without its module and without the underscore that
marks a name private, so a table whose entries only moved between modules
or became public prints the same.

Runs inside bench/same_code_emit.py, in the tree being replayed; `need`
finds a name in that tree's layout (same_code_emit.WHERE).
"""
from __future__ import annotations

import re
import sys
from typing import Any, Callable


def name_of(fn: Any, seen: frozenset = frozenset()) -> str:
    """`fn`'s qualified name, and those of the functions its closure holds
    (a pipeline's lambda around the pass it runs), never its module, and
    each part without a leading private underscore."""
    if fn is None:
        return "-"
    name = re.sub(r"(^|\.)_(?!_)", r"\1", getattr(fn, "__qualname__", type(fn).__qualname__))
    if id(fn) in seen:      # a recursive closure holds itself
        return name
    inner = [c.cell_contents for c in getattr(fn, "__closure__", None) or ()
             if callable(getattr(c, "cell_contents", None))]
    held = ", ".join(name_of(f, seen | {id(fn)}) for f in inner)
    return f"{name}({held})" if inner else name


def family(fn: Any) -> str:
    """The op family: the stem of the module defining the op's reference
    (the same stem before and after a move, by the layout's rule)."""
    return getattr(fn, "__module__", "?").rsplit(".", 1)[-1]


def op_table(need: Callable) -> list[str]:
    lines = []
    for name, d in sorted(need("OPS").items()):
        rule = f"{d.rule.kind.name} {name_of(d.rule.fn)}" if d.rule else "-"
        lines.append(f"{name}: family {family(d.ref)}, pattern {d.pattern.name}, rule {rule}, "
                     f"never_lowered {d.never_lowered!r}, needs_values {d.needs_values}, "
                     f"infer {name_of(d.infer)}, ref {name_of(d.ref)}, macs {name_of(d.macs)}")
    return lines


def layout_facts(need: Callable) -> list[str]:
    """What the layout pass may do with each op: the op's `layout` in the
    op table, or in a tree from before the facts moved there, what
    aot/passes/layout.py's name lists said, read the way its rules read
    them."""
    ops = need("OPS")
    read = _listed_layout(need) if not hasattr(next(iter(ops.values())), "layout") else \
        (lambda name, d: (d.layout.channels_first, d.layout.weighted, d.layout.sink.value,
                          d.layout.axis))
    return [f"{name}: channels_first {cf}, weighted {w}, sink {sink}, axis {axis}"
            for name, d in sorted(ops.items()) for cf, w, sink, axis in [read(name, d)]]


def _listed_layout(need: Callable) -> Callable:
    lists = {n: need(n) for n in ("SPATIAL", "WEIGHTED", "NOT_BROADCAST", "PER_AXIS",
                                  "AXIS_OPS", "REDUCES")}
    by_name = {"Concat": ("concat", 0), "Split": ("axis", 0), "Resize": ("resize", 0),
               "Pad": ("pad", 0), "Slice": ("slice", 0),
               **{n: ("axis", -1) for n in lists["AXIS_OPS"]},
               **{n: ("reduce", 0) for n in lists["REDUCES"]}}

    def read(name, d):
        elementwise = d.pattern.name in ("ELEMWISE", "BROADCAST") and \
            not name.startswith("tfl.") and name not in lists["NOT_BROADCAST"]
        if elementwise:
            sink = ("per axis", 1) if name in lists["PER_AXIS"] else ("broadcast", 0)
        else:
            sink = by_name.get(name, ("stay", 0))
        return (name in lists["SPATIAL"], name in lists["WEIGHTED"], *sink)
    return read


def legalization(need: Callable) -> list[str]:
    """In order: the first instruction that fits a call wins."""
    return [repr(i) for i in need("INSTRUCTIONS")]


def pipeline(passes) -> list[str]:
    return [f"{name}: {name_of(fn)}" for name, fn in passes]


def tuning_sites(need: Callable) -> list[str]:
    """The sites a config may name, and every function marked @tunable in
    the modules loaded (aot.lower loads every rule and schedule module):
    each is a closure of tunable's, recognised by its code object."""
    tunable = need("tunable")
    wrapper = tunable("probe")(lambda: None).__code__
    marked = set()
    for module in [m for n, m in sorted(sys.modules.items()) if n.split(".")[0] == "aot"]:
        for fn in vars(module).values():
            if getattr(fn, "__code__", None) is wrapper:
                cells = dict(zip(fn.__code__.co_freevars,
                                 (c.cell_contents for c in fn.__closure__)))
                marked.add(f"@tunable({cells['site']!r}) {fn.__qualname__}")
    return [f"SITES {list(need('SITES'))}", f"TILE_KNOBS {list(need('TILE_KNOBS'))}",
            *(f"NAMED {site} {list(names)}" for site, names in sorted(need("NAMED").items())),
            *sorted(marked)]


def tables(need: Callable) -> dict[str, list[str]]:
    need("lower_graph")     # imports every rule module: the op table is complete
    return {"ops": op_table(need), "layout": layout_facts(need), "legalize": legalization(need),
            "graph_passes": pipeline(need("GRAPH_PIPELINE")),
            "tir_passes": pipeline(need("TIR_PIPELINE")), "tuning_sites": tuning_sites(need)}

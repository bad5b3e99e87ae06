"""The optimization pipeline: the passes, in the order they run.

Each pass is a pure function Graph -> Graph. `optimize` runs them in order;
`dump_dir` writes the IR after each one (aot graph --dump-ir).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from aot.ir.graph import Graph, print_graph
from aot.passes.dce import dead_code
from aot.passes.decompose import decompose
from aot.passes.fanin import split_fan_in
from aot.passes.fold import fold_constants
from aot.passes.fuse import fuse
from aot.passes.infer import infer_types
from aot.passes.layout import to_channels_last
from aot.passes.qdq import qdq
from aot.passes.simplify import simplify

Pass = Callable[[Graph], Graph]

PIPELINE: tuple[tuple[str, Pass], ...] = (
    ("infer_types", infer_types),
    ("split_fan_in", split_fan_in),
    ("qdq", qdq),
    ("decompose", decompose),
    ("fold_constants", fold_constants),
    ("simplify", simplify),
    ("to_channels_last", to_channels_last),
    ("dead_code", dead_code),
    ("fuse", fuse),
)


def optimize(graph: Graph, dump: Callable[[int, str, Graph], None] | None = None) -> Graph:
    for i, (name, run) in enumerate(PIPELINE):
        graph = run(graph)
        if dump is not None:
            dump(i, name, graph)
    return graph


def dump_to(directory: Path) -> Callable[[int, str, Graph], None]:
    """A dump callback writing `NN_<pass>.txt` files into directory."""
    def write(i: int, name: str, graph: Graph) -> None:
        (directory / f"{i:02d}_{name}.txt").write_text(print_graph(graph) + "\n")
    return write

"""The schedule of a tree ensemble as one frozen object.

Small ensembles become if-else code: each tree a nest of comparisons with
its thresholds as immediates, no node tables. Larger ones become flat node
arrays in flash (const) walked iteratively: a fixed number of steps (the
deepest tree's depth), a step at a leaf standing still. Neither recurses nor
allocates. `walk` names the builder aot/lower/rules/trees.py runs.
"""
from __future__ import annotations

from dataclasses import dataclass

from aot.ops.trees import Forest
from aot.targets import Target

# Beyond these, if-else code grows the program more than node arrays would
# (one compare-and-branch of ~10 bytes of code per node against 8-12 bytes
# of arrays, but each leaf's votes are code too) and deep nests stop paying.
IF_ELSE_MAX_NODES = 256
IF_ELSE_MAX_DEPTH = 10


@dataclass(frozen=True)
class TreeSchedule:
    """walk: "if_else" (nested comparisons) or "node_arrays" (flat arrays in
    flash, walked `depth` steps)."""
    walk: str
    depth: int


def tree_schedule(target: Target, forest: Forest) -> TreeSchedule:
    """The default policy: if-else code for small, shallow ensembles."""
    depth = forest.depth()
    small = len(forest.feature) <= IF_ELSE_MAX_NODES and depth <= IF_ELSE_MAX_DEPTH
    return TreeSchedule("if_else" if small else "node_arrays", depth)

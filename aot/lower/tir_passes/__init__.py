"""The TIR pipeline: the passes each kernel goes through after lowering.

Each pass is a pure function (PrimFunc, Target) -> PrimFunc; `run_passes`
runs them in order, and its `dump` callback sees the function as lowered
and after each pass (aot package --dump-tir, `dump_to`). The graph's
pipeline is aot/passes/pipeline.py; this is its TIR counterpart. Adding a
pass is adding its line to PIPELINE.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

from aot.ir.tir import PrimFunc
from aot.ir.tir_print import print_func
from aot.lower.tir_passes.bind import bind_values
from aot.lower.tir_passes.float16 import promote_float16
from aot.lower.tir_passes.inplace import mark_in_place
from aot.lower.tir_passes.legalize import legalize
from aot.lower.tir_passes.simplify import simplify
from aot.targets import Target

TirPass = Callable[[PrimFunc, Target], PrimFunc]


def _any_target(run: Callable[[PrimFunc], PrimFunc]) -> TirPass:
    """A pass that does the same on every target."""
    return lambda func, target: run(func)


PIPELINE: tuple[tuple[str, TirPass], ...] = (
    # first: float16 only at memory, so every later pass sees float32 arithmetic
    ("float16", _any_target(promote_float16)),
    # first: in-place reads are judged on the whole store values, before
    # bind computes parts of them into locals of their own
    ("in_place", _any_target(mark_in_place)),
    ("bind", _any_target(bind_values)),
    ("simplify", _any_target(simplify)),
    # last: generic calls -> the target's instructions (aot/lower/tir_passes/legalize.py)
    ("legalize", legalize),
)

# dump(nn, pass name, func): nn is 0 for the function as lowered, then k
# after the k-th pass
Dump = Callable[[int, str, PrimFunc], None]


def run_passes(func: PrimFunc, target: Target, dump: Dump | None = None) -> PrimFunc:
    if dump is not None:
        dump(0, "lowered", func)
    for k, (name, run) in enumerate(PIPELINE, 1):
        func = run(func, target)
        if dump is not None:
            dump(k, name, func)
    return func


def _file_name(name: str) -> str:
    """A node name as one path component (they may hold `/`, `:`, spaces)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:80].strip("._") or "kernel"


def dump_to(directory: Path) -> Callable[[int], Dump]:
    """For kernel `step` (its place in call order), a Dump writing
    `<step>_<kernel>/<nn>_<pass>.tir` files into directory."""
    def for_step(step: int) -> Dump:
        def write(k: int, name: str, func: PrimFunc) -> None:
            folder = Path(directory) / f"{step:03d}_{_file_name(func.name)}"
            folder.mkdir(exist_ok=True)
            (folder / f"{k:02d}_{name}.tir").write_text(print_func(func))
        return write
    return for_step

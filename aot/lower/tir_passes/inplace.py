"""Which of a kernel's outputs may be written over one of its inputs.

A residual add fused into a convolution reads the skip tensor only in its
epilogue, at the very element it is about to store: once that input dies
at this kernel, the output can take its bytes and the arena holds one
tensor fewer at that step. The planner (aot/executor/liveness.py) decides
whether the input dies there; this module decides whether the kernel's
code allows it, from the TIR alone:

- input and output have the same size and element width;
- every Load of the input is inside the value of a Store to the output,
  at the same index and width (read just before that element is written);
- every Store to the output reads the input that way (no store writes an
  element whose input was not read first);
- nothing else reads the input, and nothing reads the output.

Lowering writes every output element once (exact-size tiles and remainder
blocks, disjoint border regions), so each input element is read before its
place is overwritten. The pairs found go into the PrimFunc's attrs under
"in_place" (the mark_in_place pass, first in aot/lower/tir_passes/__init__.py: it
judges the whole store values, before bind computes parts of them into
locals); the code generators then drop restrict / noalias from those two
parameters, since they may point at the same bytes.
"""
from __future__ import annotations

from dataclasses import replace

from aot.ir.tir import (Buffer, BufferKind, Load, PrimFunc, Store, dtype_of, walk_expr,
                        walk_expr_loads, walk_stmt)

ATTR = "in_place"


def _loads(e, buf: Buffer) -> list[Load]:
    return [x for x in walk_expr(e) if isinstance(x, Load) and x.buffer == buf]


def _overwritable(func: PrimFunc, src: Buffer, dst: Buffer) -> bool:
    stored = False
    for s in walk_stmt(func.body):
        if isinstance(s, Store) and s.buffer == dst:
            reads = _loads(s.value, src)
            lanes = dtype_of(s.value).lanes
            if not reads or any(r.index != s.index or r.lanes != lanes for r in reads):
                return False
            if _loads(s.index, src) or _loads(s.value, dst) or _loads(s.index, dst):
                return False
            stored = True
        elif any(x.buffer in (src, dst) for x in walk_expr_loads(s)):
            return False
    return stored


def in_place_pairs(func: PrimFunc) -> tuple[tuple[str, str], ...]:
    """(input, output) parameter names the output may overwrite; each
    buffer in one pair at most."""
    ins = [p for p in func.params if p.kind is BufferKind.INPUT]
    outs = [p for p in func.params if p.kind is BufferKind.OUTPUT]
    pairs, used = [], set()
    for dst in outs:
        for src in ins:
            if (src.name not in used and src.nbytes == dst.nbytes
                    and src.dtype.bits == dst.dtype.bits and _overwritable(func, src, dst)):
                pairs.append((src.name, dst.name))
                used.add(src.name)
                break
    return tuple(pairs)


def mark_in_place(func: PrimFunc) -> PrimFunc:
    """The pass: func with its in-place pairs, if any, first in its attrs."""
    pairs = in_place_pairs(func)
    if not pairs:
        return func
    attrs = tuple((k, v) for k, v in func.attrs if k != ATTR)
    return replace(func, attrs=((ATTR, pairs),) + attrs)


def in_place(func: PrimFunc) -> tuple[tuple[str, str], ...]:
    """The pairs recorded in the PrimFunc's attrs."""
    return dict(func.attrs).get(ATTR, ())


def aliased_params(func: PrimFunc) -> frozenset[str]:
    """Parameters that may share bytes with another (no restrict/noalias)."""
    return frozenset(name for pair in in_place(func) for name in pair)

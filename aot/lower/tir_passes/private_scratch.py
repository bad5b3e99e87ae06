"""Scratch buffers a split loop's trips can each have to themselves.

A convolution stages the input rows of one output row in a scratch buffer,
then reads them: every trip of its row loop writes the same elements, so the
trips are not apart (aot/lower/tir_passes/parallel.py) and the kernel would
run whole. But if each trip reads only elements it wrote itself first, a
trip never sees another's values: every task may then run its share of the
trips on its own copy. `trip_private` proves that property for one loop
body; `give_each_task_its_own` turns the buffer into one copy per task (the
arena planner reserves them all: the buffer's size is the tasks' total) and
moves every access by TASK copies.

The proof walks the body in order with the set of elements written so far
(concrete element indices: every loop has a constant extent): a read must
lie inside it; an If adds only what both branches write; a loop is taken
at once over all its trips when its reads lie inside what was written
before it (a running sum over what an earlier loop filled), else trip by
trip.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from aot.ir.tir import (TASK, Assign, Bin, Buffer, Decl, Expr, For, If, Load, PrimFunc, Seq,
                        Stmt, Store, Var, const, dtype_of, map_expr, map_stmt, stmt_exprs,
                        walk_expr, walk_stmt)
from aot.lower.tir_passes.affine import affine

# Beyond this many elements in one access's index set, or trips walked one
# by one, the proof gives up (the kernel keeps its shared scratch, whole).
MAX_ELEMENTS = 1 << 20
MAX_TRIPS = 20_000


def _writes(s: Stmt, name: str) -> bool:
    return any(isinstance(x, Store) and x.buffer.name == name for x in walk_stmt(s))


def _reads(s: Stmt, name: str) -> bool:
    return any(isinstance(e, Load) and e.buffer.name == name
               for x in walk_stmt(s) for ex in stmt_exprs(x) for e in walk_expr(ex))


class _Walk:
    def __init__(self, buf: Buffer, assigned: set[Var]):
        self.buf = buf
        self.assigned = assigned
        self.frozen = False     # stores add nothing: reads must lie in what came before
        self.trips = 0

    def elements(self, index: Expr, lanes: int, ranges: dict, lets: dict) -> np.ndarray | None:
        """The flat element indices `index` takes over `ranges`, lanes included."""
        form = affine(index, lets)
        if form is None:
            return None
        idx = np.array([form.get(None, 0)], dtype=np.int64)
        for v, c in form.items():
            if v is None or c == 0:
                continue
            if v not in ranges:
                return None
            start, extent, step = ranges[v]
            vals = np.arange(start, start + extent, step, dtype=np.int64)
            idx = np.unique((idx[:, None] + c * vals[None, :]).ravel())
            if idx.size > MAX_ELEMENTS:
                return None
        idx = (idx[:, None] + np.arange(lanes, dtype=np.int64)[None, :]).ravel()
        if idx.size and (idx.min() < 0 or idx.max() >= self.buf.size):
            return None
        return idx

    def reads_covered(self, exprs, written: np.ndarray, ranges: dict, lets: dict) -> bool:
        for ex in exprs:
            for e in walk_expr(ex):
                if isinstance(e, Load) and e.buffer.name == self.buf.name:
                    idx = self.elements(e.index, e.lanes, ranges, lets)
                    if idx is None or not written[idx].all():
                        return False
        return True

    def stmt(self, s: Stmt, written: np.ndarray, ranges: dict, lets: dict) -> np.ndarray | None:
        """`written` after s runs (a new array), or None if s may read an
        element of the buffer not written before."""
        if isinstance(s, Seq):
            lets = dict(lets)
            for x in s.stmts:
                written = self.stmt(x, written, ranges, lets)
                if written is None:
                    return None
                if isinstance(x, Decl) and x.var not in self.assigned:
                    form = affine(x.init, lets)
                    if form is not None:
                        lets[x.var] = form
            return written
        if isinstance(s, If):
            if not self.reads_covered([s.cond], written, ranges, lets):
                return None
            then = self.stmt(s.then, written.copy(), ranges, lets)
            other = self.stmt(s.orelse, written.copy(), ranges, lets) \
                if s.orelse is not None else written
            return None if then is None or other is None else then & other
        if isinstance(s, For):
            return self.loop(s, written, ranges, lets)
        if not self.reads_covered(stmt_exprs(s), written, ranges, lets):
            return None
        if isinstance(s, Store) and s.buffer.name == self.buf.name and not self.frozen:
            idx = self.elements(s.index, dtype_of(s.value).lanes, ranges, lets)
            if idx is None:
                return None
            written = written.copy()
            written[idx] = True
        return written

    def loop(self, s: For, written: np.ndarray, ranges: dict, lets: dict) -> np.ndarray | None:
        name = self.buf.name
        if s.extent <= 0:
            return written
        every = {**ranges, s.var: (s.start, s.extent, s.step)}
        if not (_writes(s.body, name) and _reads(s.body, name)):
            # all trips at once: nothing a trip writes is read in the loop
            return self.stmt(s.body, written, every, lets)
        if not self.frozen:
            self.frozen = True
            before = self.stmt(s.body, written, every, lets)
            self.frozen = False
            if before is not None:      # no trip needs what the loop itself writes
                return self.stmt(s.body, written, every, lets)
        for value in range(s.start, s.start + s.extent, s.step):
            self.trips += 1
            if self.trips > MAX_TRIPS:
                return None
            written = self.stmt(s.body, written, {**ranges, s.var: (value, 1, 1)}, lets)
            if written is None:
                return None
        return written


def trip_private(loop: For, buf: Buffer) -> bool:
    """Whether every element of `buf` one trip of `loop` reads was written
    earlier in that same trip (so the trips may run on copies of buf)."""
    assigned = {x.var for x in walk_stmt(loop.body) if isinstance(x, Assign)}
    if buf.size > MAX_ELEMENTS:
        return False
    start = np.zeros(buf.size, dtype=bool)
    return _Walk(buf, assigned).stmt(loop.body, start, {}, {}) is not None


def give_each_task_its_own(func: PrimFunc, names: frozenset[str], tasks: int) -> PrimFunc:
    """func with each scratch buffer in `names` `tasks` times as large, task
    k's accesses moved to copy k; attrs "tasks" records the copies (the
    entry point runs at most that many tasks of this kernel)."""
    if not names:
        return func
    bigger = {b.name: replace(b, shape=(tasks, *b.shape)) for b in func.params
              if b.name in names}
    size = {b.name: b.size for b in func.params if b.name in names}

    def moved(buf: Buffer, index: Expr) -> Expr:
        return Bin("+", index, Bin("*", TASK, const(size[buf.name])))

    def expr(e: Expr):
        if isinstance(e, Load) and e.buffer.name in bigger:
            return Load(bigger[e.buffer.name], moved(e.buffer, e.index), e.lanes)
        return None

    def stmt(s: Stmt):
        s = _map_exprs(s, expr)
        if isinstance(s, Store) and s.buffer.name in bigger:
            return Store(bigger[s.buffer.name], moved(s.buffer, s.index), s.value)
        return s

    body = map_stmt(func.body, stmt)
    params = tuple(bigger.get(b.name, b) for b in func.params)
    attrs = tuple((k, v) for k, v in func.attrs if k != "tasks") + (("tasks", tasks),)
    return replace(func, params=params, body=body, attrs=attrs)


def _map_exprs(s: Stmt, f) -> Stmt:
    """s's own expressions (not those of nested statements) mapped by f."""
    if isinstance(s, Store):
        return Store(s.buffer, map_expr(s.index, f), map_expr(s.value, f))
    if isinstance(s, Decl):
        return Decl(s.var, map_expr(s.init, f))
    if isinstance(s, Assign):
        return Assign(s.var, map_expr(s.value, f))
    if isinstance(s, If):
        return If(map_expr(s.cond, f), s.then, s.orelse)
    return s

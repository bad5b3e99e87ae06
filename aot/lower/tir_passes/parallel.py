"""The thread split: which kernels run as tasks of the package's thread pool.

`split_kernel(func, threads)` marks, in a kernel heavy enough to be worth a
pool dispatch, one loop of each independent top-level loop nest
ForKind.PARALLEL: task k of n then runs its own balanced share of that
loop's trips (the codegens print the bounds). Whatever the kernel does
outside those nests runs in one task (an If on tir.TASK). The split is
proven, not assumed:

- every access to a buffer the kernel writes (an output, its scratch, an
  input an output is written over) is an affine index whose per-dimension
  coordinates stay inside the buffer's shape: a box of elements;
- inside a split nest, the split loop's variable moves one coordinate by
  more than the whole spread of every other term there, so two trips never
  touch the same element (and a trip reads only what it wrote itself);
  a scratch buffer only that nest touches, which every trip writes before
  it reads (a convolution's staged rows), instead gets a copy per task
  (aot/lower/tir_passes/private_scratch.py);
- the boxes of two different top-level statements touching such a buffer
  never meet when one of them writes it; where they do (a scratch buffer
  filled, then read: a convolution's zero padding), the later statement
  starts a new phase, and the pool finishes one phase on every task before
  it starts the next (PrimFunc attrs "phases", tir.PHASE).

An iteration's own arithmetic is untouched (reductions stay inside one
trip, in their order), so a split package computes the one-thread package's
outputs bit for bit, whatever the number of tasks at run time. A kernel
that can fail (index checks) or whose accesses cannot be proven disjoint
stays whole.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from aot.ir.tir import (NTASKS, PHASE, TASK, Assign, Bin, BufferKind, Cast, Comment, Const, Decl,
                        Expr, For, ForKind, If, Load, PrimFunc, Seq, Stmt, Store, Var, can_fail,
                        const, dtype_of, seq, stmt_exprs, walk_expr, walk_stmt)
from aot.lower.tir_passes.affine import Affine, affine as _affine
from aot.lower.tir_passes.inplace import in_place
from aot.lower.tir_passes.private_scratch import give_each_task_its_own, trip_private

# Below this many operations (stores and assignments times their trips, a
# vector one counting once: about an instruction each, whatever its lanes)
# a kernel runs whole on the calling thread: a pool dispatch and barrier
# cost about a microsecond and a half on a 2-core x86 (bench/threads.py),
# what a vww depthwise kernel of ~5,000 vector operations takes in all.
MIN_WORK = 20_000
# A split loop may balance this much worse than the best-balanced one if
# its trips write larger blocks (see _split_nest).
BALANCE_SLACK = 1.1

@dataclass(frozen=True)
class _Access:
    buffer: str            # the written buffer it touches (an aliased input: its output)
    form: tuple            # the flat index, affine: ((var or None, coefficient), ...)
    lanes: int
    write: bool
    ranges: tuple          # ((loop var, (first, last value)), ...) of the loops around it
    dims: tuple = ()       # per dimension ({var: coefficient}, constant): see _box
    shape: tuple = ()      # the view of the buffer dims index (its shape, or flat)

    def interval(self, d: int, skip: Var | None = None) -> tuple[int, int]:
        """The values dimension d's coordinate takes (lanes included)."""
        lo, hi = _interval(*self.dims[d], dict(self.ranges), skip)
        return lo, hi + (self.lanes - 1 if d == len(self.dims) - 1 else 0)


def _strides(shape: tuple[int, ...]) -> list[int]:
    out, s = [], 1
    for d in reversed(shape):
        out.append(s)
        s *= d
    return out[::-1]


def _box(form: Affine, shape: tuple[int, ...], lanes: int, ranges: dict) -> tuple | None:
    """The flat index as per-dimension coordinates ({var: coef}, constant),
    each term given to the outermost dimension whose stride divides it; None
    unless every coordinate provably stays inside its dimension (only then
    are boxes that do not meet elements that do not meet)."""
    shape = shape or (1,)
    strides = _strides(shape)
    coords: list[list] = [[{}, 0] for _ in shape]
    for var, c in form.items():
        if var is None:
            continue
        if c == 0:
            continue
        if var not in ranges:
            return None
        d = next(k for k, s in enumerate(strides) if shape[k] > 1 and c % s == 0 or s == 1)
        coords[d][0][var] = coords[d][0].get(var, 0) + c // strides[d]
    rest = form.get(None, 0)
    for d, s in enumerate(strides):
        q, rest = divmod(rest, s) if d < len(strides) - 1 else (rest, 0)
        coords[d][1] += q
    dims = tuple((dict(terms), k) for terms, k in coords)
    for d, (terms, k) in enumerate(dims):
        lo, hi = _interval(terms, k, ranges)
        if d == len(dims) - 1:
            hi += lanes - 1
        if lo < 0 or hi >= shape[d]:
            return None
    return dims


def _interval(terms: dict, k: int, ranges: dict, skip: Var | None = None) -> tuple[int, int]:
    lo = hi = k
    for v, c in terms.items():
        if v is skip:
            continue
        a, b = ranges[v]
        lo, hi = lo + min(c * a, c * b), hi + max(c * a, c * b)
    return lo, hi


def _last(f: For) -> int:
    return f.start + (-(-f.extent // f.step) - 1) * f.step


# ---------------------------------------------------------------------- accesses

def _accesses(s: Stmt, func: PrimFunc, skip: frozenset[str] = frozenset()) -> list[_Access] | None:
    """Every access in s to a buffer the kernel writes (an output, its
    scratch, an input an output is written over, under the output's name),
    boxed; None if one cannot be. Scratch buffers in `skip` are left out
    (their trips run on copies of their own, or only one unit touches them)."""
    written = {b.name: b for b in func.params
               if b.kind in (BufferKind.OUTPUT, BufferKind.SCRATCH) and b.name not in skip}
    alias = dict(in_place(func))
    assigned = {x.var for x in walk_stmt(s) if isinstance(x, Assign)}
    raw: list[_Access] = []

    def visit(x: Stmt, ranges: dict, lets: dict) -> bool:
        if isinstance(x, For):
            return visit(x.body, {**ranges, x.var: (x.start, _last(x))}, lets)
        if isinstance(x, Seq):
            lets = dict(lets)
            for y in x.stmts:
                if not visit(y, ranges, lets):
                    return False
                if isinstance(y, Decl) and y.var not in assigned:
                    form = _affine(y.init, lets)
                    if form is not None:
                        lets[y.var] = form
            return True
        if isinstance(x, If):
            return visit(x.then, ranges, lets) and (x.orelse is None or
                                                     visit(x.orelse, ranges, lets))
        touched = [(x.buffer, x.index, dtype_of(x.value).lanes, True)] \
            if isinstance(x, Store) else []
        touched += [(e.buffer, e.index, e.lanes, False) for ex in stmt_exprs(x)
                    for e in walk_expr(ex) if isinstance(e, Load)]
        for buf, index, lanes, write in touched:
            name = alias.get(buf.name, buf.name)
            if name not in written:
                continue
            form = _affine(index, lets)
            if form is None or any(v is not None and v not in ranges for v in form):
                return False
            raw.append(_Access(name, tuple(form.items()), lanes, write,
                               tuple((v, ranges[v]) for v in form if v is not None)))
        return True

    if not visit(s, {}, {}):
        return None
    out = []
    for name, buf in written.items():
        mine = [a for a in raw if a.buffer == name]
        # the buffer's own dimensions, else seen flat: one view for all its accesses
        for shape in (buf.shape, (buf.size,)):
            dims = [_box(dict(a.form), shape, a.lanes, dict(a.ranges)) for a in mine]
            if all(d is not None for d in dims):
                out += [replace(a, dims=d, shape=shape or (1,)) for a, d in zip(mine, dims)]
                break
        else:
            return None
    return out


def _disjoint(a: _Access, b: _Access) -> bool:
    """Whether the boxes of two accesses to one buffer never meet."""
    for d in range(len(a.dims)):
        (lo_a, hi_a), (lo_b, hi_b) = a.interval(d), b.interval(d)
        if hi_a < lo_b or hi_b < lo_a:
            return True
    return False


def _trips_apart(loop: For, accesses: list[_Access]) -> bool:
    """Whether two different trips of `loop` touch no element in common:
    per buffer, one dimension where the loop moves every access by the same
    coefficient, by more than everything else spreads there."""
    by_buffer: dict[str, list[_Access]] = {}
    for acc in accesses:
        by_buffer.setdefault(acc.buffer, []).append(acc)
    for group in by_buffer.values():
        if not any(a.write for a in group):
            continue
        if not any(_apart_in(loop, group, d) for d in range(len(group[0].dims))):
            return False
    return True


def _block(loop: For, accesses: list[_Access]) -> int:
    """How far one trip of `loop` moves the written elements: the least,
    over the buffers it writes, of its coefficient times the stride of the
    outermost dimension it moves (a row of an NHWC output: W * C)."""
    sizes = []
    for acc in accesses:
        if acc.write:
            strides = _strides(acc.shape)
            moved = [d for d, (terms, _) in enumerate(acc.dims) if terms.get(loop.var, 0)]
            sizes.append(abs(acc.dims[moved[0]][0][loop.var]) * strides[moved[0]] * loop.step
                         if moved else 0)
    return min(sizes, default=0)


def _apart_in(loop: For, group: list[_Access], d: int) -> bool:
    coefs = {a.dims[d][0].get(loop.var, 0) for a in group}
    if len(coefs) != 1 or 0 in coefs:
        return False
    lo = min(a.interval(d, skip=loop.var)[0] for a in group)
    hi = max(a.interval(d, skip=loop.var)[1] for a in group)
    return hi - lo < abs(coefs.pop()) * loop.step


# -------------------------------------------------------------------- the split

def _work(s: Stmt, trips: int = 1) -> int:
    """Operations s performs: stores and assignments, times trips, a vector
    one counting once whatever its lanes (it takes about one instruction)."""
    if isinstance(s, For):
        return _work(s.body, trips * -(-s.extent // s.step))
    if isinstance(s, Seq):
        return sum(_work(x, trips) for x in s.stmts)
    if isinstance(s, If):
        return _work(s.then, trips) + (_work(s.orelse, trips) if s.orelse else 0)
    if isinstance(s, (Store, Decl, Assign)):
        return trips
    return 0


def _perfect_nest(s: For) -> list[For]:
    nest = [s]
    while isinstance(nest[-1].body, For):
        nest.append(nest[-1].body)
    return nest


def _imbalance(loop: For, threads: int) -> float:
    trips = -(-loop.extent // loop.step)
    return -(-trips // threads) * threads / trips


def _declared(s: Stmt) -> set[Var]:
    return {x.var for x in walk_stmt(s) if isinstance(x, Decl)} | \
        {x.var for x in walk_stmt(s) if isinstance(x, For)}


def _used(s: Stmt) -> set[Var]:
    used = {x.var for x in walk_stmt(s) if isinstance(x, Assign)}
    for x in walk_stmt(s):
        for e in stmt_exprs(x):
            used.update(v for v in walk_expr(e) if isinstance(v, Var))
    return used


def _units(stmts: tuple[Stmt, ...]) -> list[tuple[Stmt, ...]]:
    """Top-level statements grouped so that a local declared at the top
    level is used only inside its own group (a unit runs in one task)."""
    units: list[list[Stmt]] = []
    owner: dict[Var, int] = {}      # top-level local -> index of its unit
    for s in stmts:
        needs = {owner[v] for v in _used(s) if v in owner}
        if needs:
            first = min(needs)
            units[first:] = [[x for u in units[first:] for x in u] + [s]]
            owner = {v: min(k, first) for v, k in owner.items()}
        else:
            units.append([s])
        if isinstance(s, Decl):
            owner[s.var] = len(units) - 1
    return [tuple(u) for u in units]


def _scratch_of(s: Stmt, func: PrimFunc) -> set[str]:
    scratch = {b.name for b in func.params if b.kind is BufferKind.SCRATCH}
    return {x.buffer.name for x in walk_stmt(s) if isinstance(x, Store)} & scratch | \
        {e.buffer.name for x in walk_stmt(s) for ex in stmt_exprs(x) for e in walk_expr(ex)
         if isinstance(e, Load)} & scratch


def _candidates(loop: For, func: PrimFunc, alone: frozenset[str]) -> list[tuple[For, frozenset,
                                                                                 list]]:
    """The loops of the nest whose trips are apart, each with the scratch
    buffers its trips need copies of (those among `alone`, the scratch
    only this nest touches, that every trip writes before it reads) and
    the accesses left to prove apart."""
    params = {b.name: b for b in func.params}
    out = []
    for f in _perfect_nest(loop):
        if f.kind not in (ForKind.SERIAL, ForKind.VECTORIZED):
            continue
        own = frozenset(n for n in sorted(alone) if trip_private(f, params[n]))
        accesses = _accesses(loop, func, own)
        if accesses is not None and _trips_apart(f, accesses):
            # copies only where the shared buffer would not do
            shared = _accesses(loop, func)
            if own and shared is not None and _trips_apart(f, shared):
                own, accesses = frozenset(), shared
            out.append((f, own, accesses))
    return out


def _split_nest(loop: For, func: PrimFunc, threads: int,
                alone: frozenset[str] = frozenset()) -> tuple[For, frozenset[str]] | None:
    """The nest with its best-balanced provably independent loop PARALLEL,
    and the scratch buffers each task then needs a copy of."""
    if _used(loop) - _declared(loop):
        return None       # reads or assigns a local of the enclosing code
    found = _candidates(loop, func, alone)
    if not found:
        return None
    candidates = [f for f, _, _ in found]
    own = {id(f): o for f, o, _ in found}
    access_of = {id(f): a for f, _, a in found}
    # Of the loops that balance about as well as the best, the one whose
    # trips write the largest blocks (output rows before columns before
    # channels): a task then writes a contiguous band of each output, and
    # the next kernel's task k, splitting its rows alike, reads the band
    # task k wrote, in its own core's cache. Moving activations between the
    # two cores each kernel cost vww f32 ~35 us a run where a cache line
    # takes ~500 ns to cross. First of equals.
    least = min(_imbalance(f, threads) for f in candidates)
    balanced = [f for f in candidates if _imbalance(f, threads) <= least * BALANCE_SLACK]
    best = max(balanced, key=lambda f: _block(f, access_of[id(f)]))
    return _replace_loop(loop, best), own[id(best)]


def _replace_loop(s: For, target: For) -> For:
    if s is target:
        return replace(s, kind=ForKind.PARALLEL)
    return replace(s, body=_replace_loop(s.body, target))


def _phases(boxes: list) -> list[list[int]]:
    """Consecutive units grouped into phases whose units may run at once:
    a unit that touches what one of its phase writes (or whose accesses
    cannot be boxed) starts the next phase. Phases run one after another."""
    out: list[list[int]] = []
    for i, mine in enumerate(boxes):
        if out and mine is not None and all(
                boxes[j] is not None and not any(
                    a.buffer == b.buffer and (a.write or b.write) and not _disjoint(a, b)
                    for a in mine for b in boxes[j]) for j in out[-1]):
            out[-1].append(i)
        else:
            out.append([i])
    return out


def _phase_body(units: list[tuple[Stmt, ...]], split: list[For | None]) -> Stmt:
    """The split nests as they are; the other units whole, in the last task."""
    body: list[Stmt] = []
    alone: list[Stmt] = []

    def flush():
        if alone:
            last = Bin("==", TASK, Bin("-", NTASKS, const(1)))
            body.append(If(last, seq(*alone)))
            alone.clear()
    for u, s in zip(units, split):
        if s is None and all(isinstance(x, Comment) for x in u):
            flush()             # a note (an empty border): no task runs it
            body.extend(u)
        elif s is None:
            alone.extend(u)
        else:
            flush()
            body.append(s)
    flush()
    return seq(*body)


def split_kernel(func: PrimFunc, threads: int) -> PrimFunc:
    """func with its independent loop nests split over tasks (see the module
    docstring), or func itself when it is small or cannot be split safely."""
    if threads <= 1 or can_fail(func) or _work(func.body) < MIN_WORK:
        return func
    stmts = func.body.stmts if isinstance(func.body, Seq) else (func.body,)
    units = _units(stmts)
    # a scratch buffer only one unit touches never meets another unit's
    touched = [_scratch_of(seq(*u), func) for u in units]
    alone = frozenset(n for t in touched for n in t if sum(n in o for o in touched) == 1)
    boxes = [_accesses(seq(*u), func, alone) for u in units]
    nests = [_split_nest(u[0], func, threads, alone & t) if len(u) == 1 and isinstance(u[0], For)
             and b is not None else None for u, b, t in zip(units, boxes, touched)]
    split = [n[0] if n is not None else None for n in nests]
    copies = frozenset(x for n in nests if n is not None for x in n[1])
    # a kernel whose work is mostly in whole statements (a recurrence)
    # would pay for the dispatches and gain nothing
    shared = sum(_work(s) for s in split if s is not None)
    if shared < MIN_WORK or 2 * shared < _work(func.body):
        return func
    groups = _phases(boxes)
    bodies = [_phase_body([units[i] for i in g], [split[i] for i in g]) for g in groups]
    if len(bodies) == 1:
        return give_each_task_its_own(replace(func, body=bodies[0]), copies, threads)
    body = seq(*(If(Bin("==", PHASE, const(k)), b) for k, b in enumerate(bodies)))
    attrs = tuple((k, v) for k, v in func.attrs if k != "phases")
    return give_each_task_its_own(replace(func, body=body, attrs=attrs + (("phases", len(bodies)),)),
                                  copies, threads)
def split_kernels(funcs: Iterable[PrimFunc], threads: int) -> list[PrimFunc]:
    return [split_kernel(f, threads) for f in funcs]

"""Kernel rules for the tree ensembles of aot/ops/trees.py.

One loop over the input rows. Per row: the scores (and whether a class or
target has a vote yet) in a small workspace, zeroed; every tree walked by
the schedule's walk (aot/lower/schedule/trees.py), its leaf's votes added
as the aggregate function says; then the row finished as ONNX Runtime
finishes it (aot.ops.trees: finish_targets, finish_classes, binary_scores)
and written out. The arithmetic follows the reference: scores in the
thresholds' type, the post transforms in float32.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from aot.ir.tir import (Assign, Bin, Buffer, Cast, Const, Decl, Expr, For, If, Load, Select,
                        Stmt, Store, Unary, Var, const, dt, dtype_of, seq)
from aot.lower.rules import LowerCtx, TensorRef, kernel_rule
from aot.lower.rules.elementwise import const_like, math_call
from aot.lower.schedule.trees import TreeSchedule, tree_schedule
from aot.ops.trees import MODES, TREE_OPS, Forest, forest_of

F32 = dt("float32")
OPS = {"BRANCH_LEQ": "<=", "BRANCH_LT": "<", "BRANCH_GTE": ">=", "BRANCH_GT": ">",
       "BRANCH_EQ": "==", "BRANCH_NEQ": "!="}


@dataclass(frozen=True)
class Row:
    """What a walk needs of the row being scored."""
    feature: Callable[[Expr], Expr]     # feature index -> x[row, f] in the thresholds' type
    score: Buffer                       # [targets], the thresholds' type
    has: Buffer                         # [targets] uint8: a vote seen


# ---- votes -------------------------------------------------------------------------------

def vote(forest: Forest, row: Row, target: Expr, weight: Expr) -> Stmt:
    """One leaf vote folded into the row's score for `target`."""
    cur, seen = Load(row.score, target), Bin("!=", Load(row.has, target), Const(0, dt("uint8")))
    if forest.aggregate in ("SUM", "AVERAGE"):
        new = Bin("+", cur, weight)
    else:
        better = Bin("<" if forest.aggregate == "MIN" else ">", weight, cur)
        new = Select(Bin("or", Unary("not", seen), better), weight, cur)
    return seq(Store(row.score, target, new), Store(row.has, target, Const(1, dt("uint8"))))


def _weight(forest: Forest, w: float) -> Expr:
    return Const(float(w), dt(forest.dtype.name))


def static_votes(forest: Forest, row: Row, leaf: int) -> Stmt:
    """A leaf known when the code is generated: its votes with constants."""
    return seq(*(vote(forest, row, const(t), _weight(forest, w))
                 for t, w in forest.leaf_votes(leaf)))


def _leaf_tables(ctx: LowerCtx, forest: Forest, row: Row) -> Callable[[Expr], Stmt]:
    """Votes of a leaf known at run time, from tables in flash: one (target,
    weight) per leaf when every leaf has one vote, else a weight per leaf and
    target (with a table of which exist when some do not)."""
    votes = [forest.leaf_votes(leaf) for leaf in range(forest.n_leaves)]
    if all(len(v) == 1 for v in votes):
        weights = ctx.param("leaf_weight", np.array([v[0][1] for v in votes], forest.dtype))
        targets = None
        if forest.n_targets > 1:
            targets = ctx.param("leaf_target", _narrow([v[0][0] for v in votes]))
        return lambda leaf: vote(forest, row, const(0) if targets is None else
                                 Cast(dt("int32"), Load(targets, leaf)), Load(weights, leaf))
    n = forest.n_targets
    dense = np.zeros((forest.n_leaves, n), forest.dtype)
    present = np.zeros((forest.n_leaves, n), np.uint8)
    for leaf, vs in enumerate(votes):
        for t, w in vs:      # several votes for one target: folded as the aggregate folds them
            dense[leaf, t] = _fold(forest, dense[leaf, t], w, present[leaf, t])
            present[leaf, t] = 1
    weights = ctx.param("leaf_weights", dense)
    mask = None if present.all() else ctx.param("leaf_has", present)

    def leaf_votes(leaf: Expr) -> Stmt:
        k = ctx.fresh("k")
        at = Bin("+", Bin("*", leaf, const(n)), k)
        one = vote(forest, row, k, Load(weights, at))
        if mask is not None:
            one = If(Bin("!=", Load(mask, at), Const(0, dt("uint8"))), one)
        return For(k, n, one)
    return leaf_votes


def _fold(forest: Forest, cur, w, seen):
    if forest.aggregate in ("SUM", "AVERAGE"):
        return cur + w
    if not seen:
        return w
    return min(cur, w) if forest.aggregate == "MIN" else max(cur, w)


def _narrow(values) -> np.ndarray:
    """Indices in the smallest signed type holding them (flash is scarce)."""
    arr = np.asarray(values, np.int64)
    for t in (np.int8, np.int16, np.int32):
        if arr.size == 0 or (arr.min() >= np.iinfo(t).min and arr.max() <= np.iinfo(t).max):
            return arr.astype(t)
    return arr


# ---- comparisons ----------------------------------------------------------------------------

def _goes_true(op: str, v: Expr, threshold: Expr, missing: Expr | None) -> Expr:
    """The comparison, or with a missing-value track, also `v is NaN`."""
    cond = Bin(op, v, threshold)
    if missing is None:
        return cond
    return Bin("or", cond, Bin("and", missing, Bin("!=", v, v)))


# ---- walks -----------------------------------------------------------------------------------

def if_else_walk(ctx: LowerCtx, forest: Forest, sched: TreeSchedule, row: Row) -> Stmt:
    """Each tree a nest of Ifs with its thresholds as constants."""
    thr = dt(forest.dtype.name)

    def tree(root: int) -> Stmt:
        # built bottom-up from an explicit post-order, no recursion
        order, stack = [], [root]
        while stack:
            node = stack.pop()
            order.append(node)
            if node >= 0:
                stack += [int(forest.true_next[node]), int(forest.false_next[node])]
        built: dict[int, Stmt] = {}
        for node in reversed(order):
            if node < 0:
                built[node] = static_votes(forest, row, ~node)
                continue
            v = row.feature(const(int(forest.feature[node])))
            missing = Const(True, dt("bool")) if forest.missing_true[node] else None
            cond = _goes_true(OPS[MODES[forest.mode[node]]], v,
                              Const(float(forest.threshold[node]), thr), missing)
            built[node] = If(cond, built[int(forest.true_next[node])],
                             built[int(forest.false_next[node])])
        return built[root]
    return seq(*(tree(int(r)) for r in forest.roots))


def node_array_walk(ctx: LowerCtx, forest: Forest, sched: TreeSchedule, row: Row) -> Stmt:
    """Flat node arrays in flash; each tree walked `depth` steps from its
    root (a step at a leaf stands still), then its leaf's votes added."""
    feature = ctx.param("node_feature", _narrow(forest.feature))
    threshold = ctx.param("node_threshold", forest.threshold)
    true_next = ctx.param("node_true", _narrow(forest.true_next))
    false_next = ctx.param("node_false", _narrow(forest.false_next))
    roots = ctx.param("tree_root", _narrow(forest.roots))
    modes = sorted(set(forest.mode.tolist()))
    mode = ctx.param("node_mode", forest.mode.astype(np.uint8)) if len(modes) > 1 else None
    missing = (ctx.param("node_missing", forest.missing_true.astype(np.uint8))
               if forest.missing_true.any() else None)
    leaf_votes = _leaf_tables(ctx, forest, row)
    i32 = dt("int32")
    t, step, at = ctx.fresh("t"), ctx.fresh("step"), ctx.fresh("node")
    v = ctx.fresh("v", forest.dtype.name)
    tv = Load(threshold, at)
    miss = None if missing is None else Bin("!=", Load(missing, at), Const(0, dt("uint8")))
    cond = _goes_true(OPS[MODES[modes[-1]]], v, tv, miss)
    for m in reversed(modes[:-1]):      # mixed modes: chosen by each node's mode
        cond = Select(Bin("==", Load(mode, at), Const(m, dt("uint8"))),
                      _goes_true(OPS[MODES[m]], v, tv, miss), cond)
    walk_step = If(Bin(">=", at, const(0)), seq(
        Decl(v, row.feature(Cast(i32, Load(feature, at)))),
        Assign(at, Select(cond, Cast(i32, Load(true_next, at)),
                          Cast(i32, Load(false_next, at))))))
    body = seq(Decl(at, Cast(i32, Load(roots, t))),
               For(step, sched.depth, walk_step) if sched.depth else seq(),
               leaf_votes(Bin("-", const(-1), at)))
    return For(t, len(forest.roots), body)


WALKS = {"if_else": if_else_walk, "node_arrays": node_array_walk}


# ---- finishing a row ---------------------------------------------------------------------------

def logistic(x: Expr) -> Expr:
    e = Bin("/", Const(1.0, F32), Bin("+", Const(1.0, F32),
                                      math_call("exp", Unary("neg", Unary("abs", x)))))
    return Select(Bin("<", x, Const(0.0, F32)), Bin("-", Const(1.0, F32), e), e)


def probit(ctx: LowerCtx, x: Expr) -> tuple[Stmt, Expr]:
    """sqrt(2) * erfinv(2x - 1) with ONNX Runtime's erfinv approximation."""
    y, lg, a = ctx.fresh("p", F32), ctx.fresh("lg", F32), ctx.fresh("pa", F32)
    f = lambda v: Const(float(np.float32(v)), F32)  # noqa: E731
    sgn = Select(Bin("<", y, f(0)), f(-1), f(1))
    stmts = seq(
        Decl(y, Bin("-", Bin("*", f(2), x), f(1))),
        Decl(lg, math_call("log", Bin("*", Bin("-", f(1), y), Bin("+", f(1), y)))),
        Decl(a, Bin("+", Bin("/", f(2), Bin("*", f(np.float32(np.pi)), f(0.147))),
                    Bin("*", f(0.5), lg))))
    b = Bin("*", Bin("/", f(1), f(0.147)), lg)
    root = math_call("sqrt", Bin("+", Unary("neg", a), math_call("sqrt", Bin("-", Bin("*", a, a), b))))
    return stmts, Bin("*", f(np.sqrt(np.float32(2))), Bin("*", sgn, root))


def _write_all(ctx: LowerCtx, forest: Forest, scores: Buffer, put: Callable[[Expr, Expr], Stmt]) -> Stmt:
    """write_scores for two or more float32 scores: the transform, then put(k, value)."""
    n, tr = forest.n_targets, forest.transform
    k = ctx.fresh("k")
    s = Load(scores, k)
    if tr == "LOGISTIC":
        return For(k, n, put(k, logistic(s)))
    if tr == "PROBIT":
        pre, value = probit(ctx, s)
        return For(k, n, seq(pre, put(k, value)))
    if tr == "NONE":
        return For(k, n, put(k, s))
    top, total = ctx.fresh("top", F32), ctx.fresh("total", F32)
    k1, k2 = ctx.fresh("k"), ctx.fresh("k")
    s1, s2 = Load(scores, k1), Load(scores, k2)
    e = math_call("exp", Bin("-", s1, top))
    if tr == "SOFTMAX_ZERO":
        keep = Bin("or", Bin(">", s1, Const(1e-7, F32)), Bin("<", s1, Const(-1e-7, F32)))
        exps = seq(Store(scores, k1, Select(keep, e, Bin("*", s1, math_call("exp", Unary("neg", top))))),
                   If(keep, Assign(total, Bin("+", total, Load(scores, k1)))))
    else:
        exps = seq(Store(scores, k1, e), Assign(total, Bin("+", total, Load(scores, k1))))
    return seq(
        Decl(top, Const(float(-np.finfo(np.float32).max), F32)),
        For(k, n, If(Bin(">", s, top), Assign(top, s))),
        Decl(total, Const(0.0, F32)),
        For(k1, n, exps),
        For(k2, n, put(k2, Bin("/", s2, total))))


def _masked(row: Row, k: Expr, value: Expr) -> Expr:
    """A score whose class or target has no vote reads 0 (ONNX Runtime's ScoreValue)."""
    seen = Bin("!=", Load(row.has, k), Const(0, dt("uint8")))
    return Select(seen, value, const_like(0, value))


def finish_targets(ctx: LowerCtx, forest: Forest, row: Row, out: Buffer,
                   put: Callable[[Expr, Expr], Stmt]) -> Stmt:
    """A regressor's row: put(k, value) for each target."""
    thr = dt(forest.dtype.name)
    n_trees, base = len(forest.roots), forest.base_values
    s0 = Load(row.score, const(0))
    if forest.single:
        origin = Const(float(base[0]) if len(base) == 1 else 0.0, thr)
        s = Bin("/", s0, Const(float(n_trees), thr)) if forest.aggregate == "AVERAGE" else s0
        s = Bin("+", s, origin)
        if forest.aggregate in ("MIN", "MAX"):
            s = Select(Bin("!=", Load(row.has, const(0)), Const(0, dt("uint8"))), s, origin)
        if forest.transform != "PROBIT":
            return put(const(0), s)
        v = ctx.fresh("y", F32)
        pre, value = probit(ctx, v)
        return seq(Decl(v, _to_f32(s)), pre, put(const(0), value))
    k = ctx.fresh("k")
    s = Load(row.score, k)
    if forest.aggregate == "AVERAGE":
        s = Bin("/", s, Const(float(n_trees), thr))
    if len(base) == forest.n_targets:
        s = Bin("+", s, Load(ctx.param("base_values", base), k))
    return seq(For(k, forest.n_targets, Store(out, k, _to_f32(_masked(row, k, s)))),
               _write_all(ctx, forest, out, put))


def _to_f32(e: Expr) -> Expr:
    return e if dtype_of(e) == F32 else Cast(F32, e)


def finish_classes(ctx: LowerCtx, forest: Forest, row: Row, out: Buffer,
                   put_label: Callable[[Expr], Stmt], put: Callable[[Expr, Expr], Stmt]) -> Stmt:
    """A classifier's row of three or more classes: base values (a class
    with one counts as voted), the label of the first highest voted score."""
    n, base = forest.n_targets, forest.base_values[:forest.n_targets]
    u8 = dt("uint8")
    stmts = []
    for k, b in enumerate(base):
        stmts += [Store(row.score, const(k), Bin("+", Load(row.score, const(k)),
                                                 _weight(forest, b))),
                  Store(row.has, const(k), Const(1, u8))]
    best = ctx.fresh("best")
    k = ctx.fresh("k")
    seen = Bin("!=", Load(row.has, k), Const(0, u8))
    higher = Bin("or", Bin("<", best, const(0)),
                 Bin(">", Load(row.score, k), Load(row.score, Select(Bin("<", best, const(0)),
                                                                      const(0), best))))
    labels = ctx.param("class_labels", np.asarray(forest.classes.labels, np.int64))
    k2 = ctx.fresh("k")
    stmts += [Decl(best, const(-1)),
              For(k, n, If(Bin("and", seen, higher), Assign(best, k))),
              put_label(Load(labels, Select(Bin("<", best, const(0)), const(0), best))),
              For(k2, n, Store(out, k2, _to_f32(_masked(row, k2, Load(row.score, k2))))),
              _write_all(ctx, forest, out, put)]
    return seq(*stmts)


def finish_binary(ctx: LowerCtx, forest: Forest, row: Row, out: Buffer,
                  put_label: Callable[[Expr], Stmt], put: Callable[[Expr, Expr], Stmt]) -> Stmt:
    """Two classes, as aot.ops.trees.binary_scores decides them."""
    thr, u8 = dt(forest.dtype.name), dt("uint8")
    base, c = forest.base_values, forest.classes
    s0, s1 = ctx.fresh("s0", thr), ctx.fresh("s1", thr)
    h0, h1 = ctx.fresh("h0", dt("bool")), ctx.fresh("h1", dt("bool"))
    zero = Const(0.0, thr)
    stmts = [Decl(s0, Load(row.score, const(0))), Decl(s1, Load(row.score, const(1))),
             Decl(h0, Bin("!=", Load(row.has, const(0)), Const(0, u8))),
             Decl(h1, Bin("!=", Load(row.has, const(1)), Const(0, u8)))]
    if len(base) == 2:
        b0, b1 = _weight(forest, base[0]), _weight(forest, base[1])
        s1_new = Select(h1, Bin("+", b1, s0), Bin("+", s1, b1))
        s0_new = Select(h1, Unary("neg", Bin("+", b1, s0)), Bin("+", s0, b0))
        stmts += [Assign(s1, s1_new), Assign(s0, s0_new)]
    elif len(base) == 1:
        stmts.append(Assign(s0, Bin("+", s0, _weight(forest, base[0]))))
    two = Const(True, dt("bool")) if len(base) > 1 else h1
    pos = Select(Bin("and", two, h1), s1, Select(h0, s0, zero))
    labels = ctx.param("class_labels", np.asarray(c.labels, np.int64))
    i64 = dt("int64")
    if c.binary:
        win = Bin(">", pos, Const(0.5 if c.all_positive else 0.0, thr))
        label = Load(labels, Select(win, const(1), const(0)))
    else:
        win = Bin(">", pos, zero)
        label = Select(win, Const(1, i64), Const(0, i64))
    v0 = ctx.fresh("v0", F32)
    stmts += [put_label(label), Decl(v0, _to_f32(Select(h0, s0, zero))),
              Store(out, const(0), v0), Store(out, const(1), _to_f32(Select(h1, s1, zero)))]
    both = _write_all(ctx, forest, out, put)
    one = _one_score(forest, v0, win, put)
    if len(base) > 1:
        stmts.append(both)
    else:
        stmts.append(If(h1, both, one))
    return seq(*stmts)


def _one_score(forest: Forest, s: Var, win: Expr, put) -> Stmt:
    """The score vector built back from one score (write_scores' binary case)."""
    c = forest.classes
    one = Const(1.0, F32)
    if c.binary and c.all_positive:
        return seq(put(const(0), Bin("-", one, s)), put(const(1), s))
    if c.binary or len(forest.base_values) == 0:
        if forest.transform == "LOGISTIC":
            return seq(put(const(0), logistic(Unary("neg", s))), put(const(1), logistic(s)))
        return seq(put(const(0), Unary("neg", s)), put(const(1), s))
    return seq(put(const(0), s), put(const(1), Const(0.0, F32)))


# ---- the rule ----------------------------------------------------------------------------------

@kernel_rule(*TREE_OPS)
def _tree_ensemble(ctx: LowerCtx, ins, emit):
    forest = forest_of(ctx.node, ctx.in_types[0].dtype)
    sched = tree_schedule(ctx.target, forest)
    x: TensorRef = ins[0]
    rows = 1 if len(x.shape) == 1 else x.shape[0]
    r = ctx.fresh("row")
    thr = dt(forest.dtype.name)

    def feature(f: Expr) -> Expr:
        v = x.load((f,) if len(x.shape) == 1 else (r, f))
        return v if x.dtype == thr else Cast(thr, v)
    n = forest.n_targets
    row = Row(feature, ctx.scratch_buffer("score", thr, (n,)),
              ctx.scratch_buffer("has", "uint8", (n,)))
    out = ctx.scratch_buffer("out", F32, (n,))
    k = ctx.fresh("k")
    zero = For(k, n, seq(Store(row.score, k, Const(0.0, thr)),
                         Store(row.has, k, Const(0, dt("uint8")))))
    walk = WALKS[sched.walk](ctx, forest, sched, row)
    scores_out = 1 if forest.classes is not None else 0
    y_type = dt(ctx.out_types[scores_out].dtype)
    lead = (r,) if len(ctx.out_types[scores_out].shape) == 2 else ()

    def put(k: Expr, value: Expr) -> Stmt:
        return emit(scores_out, (*lead, k), value if dtype_of(value) == y_type else Cast(y_type, value))

    def put_label(value: Expr) -> Stmt:
        return emit(0, (r,), value)
    if forest.classes is None:
        finish = finish_targets(ctx, forest, row, out, put)
    elif n == 2:
        finish = finish_binary(ctx, forest, row, out, put_label, put)
    else:
        finish = finish_classes(ctx, forest, row, out, put_label, put)
    return For(r, rows, seq(zero, walk, finish))

"""Rules for the ONNX-ML ops (aot/ops/ml.py): the classifiers and
regressors as kernels, one row at a time; the preprocessors as value rules.

Each classifier row computes its raw scores into a small scratch row (one
per class, pair of classes or support vector), picks its label there and
writes the transformed scores, so nothing bigger than a row is ever
held. Weights, support vectors and labels are const tables; every loop has
a compile-time trip count; the pairs of a one-vs-one SVM are unrolled at
compile time (a classifier has a handful of classes). Float sums run in
float32 in the order of aot/ops/ml.py; an SVM's pair sums in float64 as
ONNX Runtime adds them (they decide the votes, hence the label).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from aot.ir.tir import (Assign, Bin, Buffer, Decl, Expr, For, If, Load, Select, Stmt, Store,
                        Unary, Var, const, dtype_of, seq)
from aot.lower.arith.loops import fma, shared_param, unravel
from aot.lower.arith.quant import table
from aot.lower.rules import LowerCtx, TensorRef, kernel_rule, value_rule
from aot.lower.rules.elementwise import cast, const_like, float_to_int, math_call, wrapping
from aot.lower.rules.tensor import vector_ok
from aot.ops import ml
from aot.ops.registry import Sig

F32 = "float32"
LOWEST = float(-np.finfo(np.float32).max)


def _sig(ctx: LowerCtx) -> Sig:
    return Sig(ctx.node, ctx.in_types, (None,) * len(ctx.in_types))


def _f(v) -> Expr:
    """A float32 constant (rounded to float32 as the C++ literal is)."""
    return const(float(np.float32(v)), F32)


def _row_loader(x: TensorRef) -> Callable[[Expr, Expr], Expr]:
    """(row, feature) -> x there as float32; a rank-1 input is one row."""
    def load(n: Expr, f: Expr) -> Expr:
        return cast(x.load((f,) if len(x.shape) == 1 else (n, f)), F32)
    return load


def _rows(ctx: LowerCtx, x: TensorRef, body: Callable[[Var], Stmt]) -> Stmt:
    n = ctx.fresh("n")
    return For(n, 1 if len(x.shape) == 1 else x.shape[0], body(n))


def _dot(ctx: LowerCtx, features: int, term: Callable[[Var], Expr], name: str = "acc"
         ) -> tuple[Stmt, Var]:
    """acc = sum of term(f) over the features, in order, in float32."""
    acc, f = ctx.fresh(name, F32), ctx.fresh("f")
    return seq(Decl(acc, _f(0)), For(f, features, Assign(acc, fma(acc, *term(f))))), acc


def _weights_row(buf: Buffer, row: Expr, features: int) -> Callable[[Expr], Expr]:
    return lambda f: Load(buf, Bin("+", Bin("*", row, const(features)), f)
                          if features != 1 else row)


def _argmax(ctx: LowerCtx, count: int, value: Callable[[Expr], Expr]) -> tuple[Stmt, Var, Var]:
    """The first position of the largest value (a strict > scan): (stmts, best, position)."""
    first = value(const(0))
    best, pos, j = ctx.fresh("best", dtype_of(first)), ctx.fresh("pos"), ctx.fresh("j")
    v = ctx.fresh("v", best.dtype)
    take = Bin(">", v, best)
    return seq(Decl(best, first), Decl(pos, const(0)),
               For(j, count - 1, seq(Decl(v, value(j)), If(take, seq(Assign(best, v),
                                                                      Assign(pos, j)))),
                   start=1)), best, pos


# ---- score transforms (ml_common.h) ---------------------------------------------------------

def logistic(v: Expr) -> Expr:
    e = Bin("/", _f(1), Bin("+", _f(1), math_call("exp", Unary("neg", Unary("abs", v)))))
    return Select(Bin("<", v, _f(0)), Bin("-", _f(1), e), e)


def probit(v: Expr) -> Expr:
    x = Bin("-", Bin("*", _f(2), v), _f(1))
    sgn = Select(Bin("<", x, _f(0)), _f(-1), _f(1))
    lg = math_call("log", Bin("*", Bin("-", _f(1), x), Bin("+", _f(1), x)))
    a = Bin("+", _f(np.float32(2) / (np.float32(np.pi) * np.float32(0.147))),
            Bin("*", _f(0.5), lg))
    b = Bin("*", _f(np.float32(1) / np.float32(0.147)), lg)
    r = math_call("sqrt", Bin("+", Unary("neg", a), math_call("sqrt", Bin("-", Bin("*", a, a),
                                                                           b))))
    return Bin("*", _f(np.sqrt(2)), Bin("*", sgn, r))


def transformed(ctx: LowerCtx, how: str, row: Buffer, count: int,
                put: Callable[[Expr, Expr], Stmt]) -> Stmt:
    """put(j, score j) for a scratch row of count >= 2 raw scores, as ONNX
    Runtime transforms them (softmax in place in the row)."""
    j = ctx.fresh("j")
    at = Load(row, j)
    if how in ("NONE", "LOGISTIC", "PROBIT"):
        f = {"NONE": lambda v: v, "LOGISTIC": logistic, "PROBIT": probit}[how]
        return For(j, count, put(j, f(at)))
    m, total, k = ctx.fresh("m", F32), ctx.fresh("sum", F32), ctx.fresh("k")
    find = seq(Decl(m, _f(LOWEST)), For(k, count, If(Bin(">", Load(row, k), m),
                                                     Assign(m, Load(row, k)))))
    e = ctx.fresh("e", F32)
    if how == "SOFTMAX":
        body = seq(Decl(e, math_call("exp", Bin("-", at, m))), Store(row, j, e),
                   Assign(total, Bin("+", total, e)))
        prep = find
    else:    # SOFTMAX_ZERO: (near) zeros stay out of the sum, scaled by exp(-max)
        scale = ctx.fresh("exp_neg_max", F32)
        keep = Bin("or", Bin(">", at, _f(1e-7)), Bin("<", at, _f(-1e-7)))
        body = If(keep, seq(Decl(e, math_call("exp", Bin("-", at, m))), Store(row, j, e),
                            Assign(total, Bin("+", total, e))),
                  Store(row, j, Bin("*", at, scale)))
        prep = seq(find, Decl(scale, math_call("exp", Unary("neg", m))))
    j2 = ctx.fresh("j")
    return seq(prep, Decl(total, _f(0)), For(j, count, body),
               For(j2, count, put(j2, Bin("/", Load(row, j2), total))))


def two_columns(how: str, v: Expr, negate: bool, put: Callable[[Expr, Expr], Stmt]) -> Stmt:
    """One score as two columns (aot.ops.ml.two_columns)."""
    if how == "LOGISTIC":
        return seq(put(const(0), logistic(Unary("neg", v))), put(const(1), logistic(v)))
    return seq(put(const(0), Unary("neg", v) if negate else Bin("-", _f(1), v)), put(const(1), v))


def single(how: str, v: Expr) -> Expr:
    """A row of one score: ONNX Runtime applies PROBIT only."""
    return probit(v) if how == "PROBIT" else v


# ---- LinearClassifier / LinearRegressor --------------------------------------------------

def _scores(ctx: LowerCtx, x: TensorRef, n: Expr, w: np.ndarray, bias: np.ndarray | None,
            row: Buffer) -> Stmt:
    """row[t] = x[n] . w[t] (+ bias[t]) for every target t."""
    targets, features = w.shape
    wbuf = ctx.param("coefficients", w.astype(np.float32))
    load = _row_loader(x)
    t = ctx.fresh("t")
    wrow = _weights_row(wbuf, t, features)
    stmts, acc = _dot(ctx, features, lambda f: (load(n, f), wrow(f)))
    value = acc if bias is None else Bin("+", acc, Load(ctx.param("intercepts", bias), t))
    return For(t, targets, seq(stmts, Store(row, t, value)))


@kernel_rule("LinearClassifier")
def _linear_classifier(ctx: LowerCtx, ins, emit):
    x = ins[0]
    w, b, labels, columns = ml.linear_classifier_shape(_sig(ctx))
    how = ml.transform(ctx.node)
    c = b.size
    row = ctx.scratch_buffer("scores", F32, (c,))

    def one(n: Var) -> Stmt:
        compute = _scores(ctx, x, n, w, b.astype(np.float32), row)
        if c == 1:
            v = Load(row, const(0))
            pos, neg = (labels[1], labels[0]) if labels.size == 2 else (1, 0)
            label = Select(Bin(">", v, _f(0)), const(int(pos), "int64"), const(int(neg), "int64"))
            out = two_columns(how, v, False, lambda j, e: emit(1, (n, j), e)) \
                if columns == 2 else emit(1, (n, const(0)), single(how, v))
            return seq(compute, emit(0, (n,), label), out)
        find, _, pos = _argmax(ctx, c, lambda j: Load(row, j))
        lab = table(ctx, "labels", labels)
        return seq(compute, find, emit(0, (n,), lab(pos)),
                   transformed(ctx, how, row, c, lambda j, v: emit(1, (n, j), v)))
    return _rows(ctx, x, one)


@kernel_rule("LinearRegressor")
def _linear_regressor(ctx: LowerCtx, ins, emit):
    x = ins[0]
    targets = ctx.out_types[0].shape[1]
    w = ml.weights(_sig(ctx), "coefficients", targets, x.shape[-1])
    b = ml.floats(ctx.node, "intercepts")
    how = ml.transform(ctx.node)
    row = ctx.scratch_buffer("scores", F32, (targets,))

    def one(n: Var) -> Stmt:
        compute = _scores(ctx, x, n, w, b if b.size == targets else None, row)
        if targets == 1:
            return seq(compute, emit(0, (n, const(0)), single(how, Load(row, const(0)))))
        return seq(compute, transformed(ctx, how, row, targets, lambda j, v: emit(0, (n, j), v)))
    return _rows(ctx, x, one)


# ---- SVMs ---------------------------------------------------------------------------------

def kernel_value(ctx: LowerCtx, x: TensorRef, n: Expr, sv: Buffer, v: Expr, features: int,
                 params: tuple[str, float, float, float]) -> tuple[Stmt, Expr]:
    """kernel(x[n], support vector v): (stmts, value)."""
    kind, gamma, coef0, degree = params
    load, svrow = _row_loader(x), _weights_row(sv, v, features)
    if kind == "RBF":
        d = ctx.fresh("d", F32)
        acc, f = ctx.fresh("dist", F32), ctx.fresh("f")
        stmts = seq(Decl(acc, _f(0)), For(f, features, seq(
            Decl(d, Bin("-", load(n, f), svrow(f))), Assign(acc, fma(acc, d, d)))))
        return stmts, math_call("exp", Bin("*", Unary("neg", _f(gamma)), acc))
    stmts, acc = _dot(ctx, features, lambda f: (load(n, f), svrow(f)))
    if kind == "LINEAR":
        return stmts, acc
    t = ctx.fresh("k", F32)
    stmts = seq(stmts, Decl(t, Bin("+", Bin("*", _f(gamma), acc), _f(coef0))))
    if kind == "SIGMOID":
        return stmts, math_call("tanh", t)
    if degree == 2:
        return stmts, Bin("*", t, t)
    if degree == 3:
        return stmts, Bin("*", Bin("*", t, t), t)
    return stmts, math_call("pow", t, _f(degree))


def _kernel_row(ctx: LowerCtx, x: TensorRef, n: Expr, sv: np.ndarray, row: Buffer) -> Stmt:
    vectors, features = sv.shape
    buf = ctx.param("support_vectors", sv.astype(np.float32))
    v = ctx.fresh("v")
    stmts, value = kernel_value(ctx, x, n, buf, v, features, ml.kernel_params(ctx.node))
    return For(v, vectors, seq(stmts, Store(row, v, value)))


def _pair_sums(ctx: LowerCtx, coef: np.ndarray, counts: np.ndarray, rho: np.ndarray,
               kern: Buffer, pairs: Buffer, votes: Buffer) -> Stmt:
    """pairs[k] = the one-vs-one decision value of classes (i, j), its sum in
    float64; votes[i] or votes[j] + 1 as it is > 0 or not."""
    c = counts.size
    start = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int)
    cbuf = ctx.param("coefficients", coef.astype(np.float32))
    vcount = coef.shape[1]
    stmts = [Store(votes, const(i), const(0)) for i in range(c)]
    k = 0
    for i in range(c - 1):
        for j in range(i + 1, c):
            s = ctx.fresh("sum", "float64")
            part = [Decl(s, const(0.0, "float64"))]
            for row, cls in ((j - 1, i), (i, j)):
                m = ctx.fresh("m")
                at = Bin("+", const(int(start[cls])), m)
                term = Bin("*", Load(cbuf, Bin("+", const(row * vcount), at)), Load(kern, at))
                part.append(For(m, int(counts[cls]), Assign(s, Bin("+", s, cast(term, "float64")))))
            winner = Select(Bin(">", s, const(0.0, "float64")), const(i), const(j))
            part += [Assign(s, Bin("+", s, const(float(rho[k]), "float64"))),
                     Store(pairs, const(k), cast(s, F32)),
                     Store(votes, winner, Bin("+", Load(votes, winner), const(1)))]
            stmts.append(seq(*part))
            k += 1
    return seq(*stmts)


def _pair_probabilities(ctx: LowerCtx, c: int, pa: np.ndarray, pb: np.ndarray, pairs: Buffer,
                        r: Buffer) -> Stmt:
    """r[i, j] (i < j) = Platt's probability of pair k clipped to
    [1e-7, 1 - 1e-7], r[j, i] = 1 - r[i, j]."""
    stmts, k = [], 0
    for i in range(c - 1):
        for j in range(i + 1, c):
            v = ctx.fresh("p", F32)
            raw = Bin("-", _f(1), logistic(Bin("+", Bin("*", Load(pairs, const(k)), _f(pa[k])),
                                                   _f(pb[k]))))
            clipped = Bin("min", Bin("max", raw, _f(1e-7)), _f(np.float32(1) - np.float32(1e-7)))
            stmts += [Decl(v, clipped), Store(r, const(i * c + j), v),
                      Store(r, const(j * c + i), Bin("-", _f(1), v))]
            k += 1
    return seq(*stmts)


def multiclass_probability(ctx: LowerCtx, c: int, r: Buffer, p: Buffer) -> Stmt:
    """p from the pairwise r: Wu, Lin and Weng's iteration (at most 100
    steps, stopping below 0.005 / C) in ONNX Runtime's order of operations."""
    q, qp = ctx.scratch_buffer("q", F32, (c * c,)), ctx.scratch_buffer("qp", F32, (c,))
    init = []
    for i in range(c):
        init += [Store(p, const(i), _f(np.float32(1) / np.float32(c))),
                 Store(q, const(i * c + i), _f(0))]
        for j in range(c):
            if j == i:
                continue
            rji = Load(r, const(j * c + i))
            init.append(Store(q, const(i * c + i), Bin("+", Load(q, const(i * c + i)),
                                                      Bin("*", rji, rji))))
            init.append(Store(q, const(i * c + j), Load(q, const(j * c + i)) if j < i else
                              Unary("neg", Bin("*", rji, Load(r, const(i * c + j))))))
    done, it = ctx.fresh("done"), ctx.fresh("step")
    pqp, err = ctx.fresh("pqp", F32), ctx.fresh("max_error", F32)
    i, j = ctx.fresh("i"), ctx.fresh("j")
    acc = ctx.fresh("acc", F32)
    measure = seq(
        Assign(pqp, _f(0)),
        For(i, c, seq(Decl(acc, _f(0)),
                      For(j, c, Assign(acc, fma(acc, Load(q, Bin("+", Bin("*", i, const(c)), j)),
                                                Load(p, j)))),
                      Store(qp, i, acc), Assign(pqp, fma(pqp, Load(p, i), acc)))),
        Assign(err, _f(0)))
    i2 = ctx.fresh("i")
    e = ctx.fresh("error", F32)
    measure = seq(measure, For(i2, c, seq(
        Decl(e, Unary("abs", Bin("-", Load(qp, i2), pqp))),
        If(Bin(">", e, err), Assign(err, e)))))
    i3, j3 = ctx.fresh("i"), ctx.fresh("j")
    diff, one = ctx.fresh("diff", F32), ctx.fresh("one", F32)
    qii = Load(q, Bin("+", Bin("*", i3, const(c)), i3))
    step = For(i3, c, seq(
        Decl(diff, Bin("/", Bin("+", Unary("neg", Load(qp, i3)), pqp), qii)),
        Store(p, i3, Bin("+", Load(p, i3), diff)),
        Decl(one, Bin("+", _f(1), diff)),
        Assign(pqp, Bin("/", Bin("/", Bin("+", pqp, Bin("*", diff, Bin(
            "+", Bin("*", diff, qii), Bin("*", _f(2), Load(qp, i3))))), one), one)),
        For(j3, c, seq(
            Store(qp, j3, Bin("/", Bin("+", Load(qp, j3), Bin(
                "*", diff, Load(q, Bin("+", Bin("*", i3, const(c)), j3)))), one)),
            Store(p, j3, Bin("/", Load(p, j3), one))))))
    loop = For(it, 100, If(Bin("==", done, const(0)), seq(
        measure, If(Bin("<", err, _f(np.float32(0.005) / np.float32(c))),
                    Assign(done, const(1)), step))))
    return seq(*init, Decl(done, const(0)), Decl(pqp, _f(0)), Decl(err, _f(0)), loop)


@kernel_rule("SVMClassifier")
def _svm_classifier(ctx: LowerCtx, ins, emit):
    x = ins[0]
    mode, labels, sv, coef, counts, rho, pa, pb, columns = ml.svm_layout(_sig(ctx))
    how = ml.transform(ctx.node)
    c = labels.size
    lab = table(ctx, "labels", labels)
    if mode == "linear":
        return _svm_linear(ctx, x, emit, coef, labels, rho, pa, how)
    npairs = c * (c - 1) // 2
    kern = ctx.scratch_buffer("kernel", F32, (sv.shape[0],))
    pairs = ctx.scratch_buffer("pairs", F32, (npairs,))
    votes = ctx.scratch_buffer("votes", "int32", (c,))

    def one(n: Var) -> Stmt:
        find, _, pos = _argmax(ctx, c, lambda j: Load(votes, j))
        head = seq(_kernel_row(ctx, x, n, sv, kern),
                   _pair_sums(ctx, coef, counts, rho, kern, pairs, votes),
                   find, emit(0, (n,), lab(pos)))
        put = lambda j, v: emit(1, (n, j), v)     # noqa: E731
        if pa.size:
            r = ctx.scratch_buffer("pair_probabilities", F32, (c * c,))
            p = ctx.scratch_buffer("probabilities", F32, (c,))
            return seq(head, _pair_probabilities(ctx, c, pa, pb, pairs, r),
                       multiclass_probability(ctx, c, r, p), transformed(ctx, how, p, c, put))
        if c > 2:
            return seq(head, transformed(ctx, how, pairs, npairs, put))
        return seq(head, two_columns(how, Load(pairs, const(0)), how == "NONE", put))
    return _rows(ctx, x, one)


def _svm_linear(ctx: LowerCtx, x: TensorRef, emit, w: np.ndarray, labels: np.ndarray,
                rho: np.ndarray, pa: np.ndarray, how: str) -> Stmt:
    """liblinear mode (no support vectors): a score per class, x . w[c] + rho[0]."""
    c = labels.size
    row = ctx.scratch_buffer("scores", F32, (c,))
    lab = table(ctx, "labels", labels)
    bias = np.full(c, rho[0], np.float32)

    def one(n: Var) -> Stmt:
        find, best, pos = _argmax(ctx, c, lambda j: Load(row, j))
        label = lab(pos)
        if c == 2 and not pa.size:      # ONNX Runtime's two-class rule (ml.py)
            second = Bin(">=", best, _f(0.5)) if np.all(w >= 0) else Bin(">", best, _f(0))
            label = Select(second, const(int(labels[1]), "int64"), label)
        out = transformed(ctx, how, row, c, lambda j, v: emit(1, (n, j), v)) if c > 1 else \
            emit(1, (n, const(0)), single(how, Load(row, const(0))))
        return seq(_scores(ctx, x, n, w, bias, row), find, emit(0, (n,), label), out)
    return _rows(ctx, x, one)


@kernel_rule("SVMRegressor")
def _svm_regressor(ctx: LowerCtx, ins, emit):
    x = ins[0]
    sv, coef, rho = ml.svm_regressor_layout(_sig(ctx))
    one_class = bool(ctx.attrs.get("one_class", 0))

    def one(n: Var) -> Stmt:
        if sv is None:
            stmts, acc = _dot(ctx, coef.size, lambda f: (
                _row_loader(x)(n, f), Load(ctx.param("coefficients", coef), f)))
        else:
            kern = ctx.scratch_buffer("kernel", F32, (sv.shape[0],))
            cbuf = ctx.param("coefficients", coef.astype(np.float32))
            dot, acc = _dot(ctx, sv.shape[0], lambda v: (Load(kern, v), Load(cbuf, v)))
            stmts = seq(_kernel_row(ctx, x, n, sv, kern), dot)
        y = Bin("+", acc, _f(rho))
        if one_class:
            y = Select(Bin(">", y, _f(0)), _f(1), _f(-1))
        return seq(stmts, emit(0, (n, const(0)), y))
    return _rows(ctx, x, one)


# ---- Normalizer ---------------------------------------------------------------------------

@kernel_rule("Normalizer")
def _normalizer(ctx: LowerCtx, ins, emit):
    x = ins[0]
    norm = ctx.attrs.get("norm", "MAX")
    features = x.shape[-1]
    at = (lambda n, f: (f,)) if len(x.shape) == 1 else (lambda n, f: (n, f))

    def one(n: Var) -> Stmt:
        raw = lambda f: x.load(at(n, f))              # noqa: E731
        val = lambda f: cast(raw(f), F32)            # noqa: E731
        d, f, g = ctx.fresh("d", F32), ctx.fresh("f"), ctx.fresh("f")
        if norm == "MAX":
            gather = Assign(d, Select(Bin(">", val(f), d), val(f), d))
            init = _f(LOWEST)
        elif norm == "L1":
            a = raw(f)
            gather = Assign(d, Bin("+", d, cast(Unary("abs", a) if x.dtype.is_float else
                                                  Select(Bin("<", a, const_like(0, a)),
                                                         wrapping("-", const_like(0, a), a), a),
                                                  F32)))
            init = _f(0)
        else:
            gather = Assign(d, Bin("+", d, _square(raw(f))))
            init = _f(0)
        if norm == "L2":
            r = math_call("sqrt", Bin("/", _square(raw(g)), d))
            value = Select(Bin("<", raw(g), const_like(0, raw(g))), Unary("neg", r), r)
        else:
            value = Bin("/", val(g), d)
        value = Select(Bin("!=", d, _f(0)), value, val(g))
        return seq(Decl(d, init), For(f, features, gather),
                   For(g, features, emit(0, at(n, g), value)))
    return _rows(ctx, x, one)


def _square(v: Expr) -> Expr:
    """x * x in x's type (wrapping for integers), then float32, as ONNX Runtime."""
    return cast(Bin("*", v, v) if dtype_of(v).is_float else wrapping("*", v, v), F32)


# ---- preprocessors: value rules ------------------------------------------------------------

def _feature(ctx: LowerCtx, base: str, values: np.ndarray, idx: tuple) -> Expr:
    """values[feature of idx] of a per-feature table (one value: a constant)."""
    values = np.asarray(values)
    if values.size == 1 or np.all(values == values.reshape(-1)[0]):
        return const(values.reshape(-1)[0].item(), values.dtype.name)
    return Load(shared_param(ctx, base, values), idx[-1])


@value_rule("Scaler")
def _scaler(ctx: LowerCtx, ins, idx, lanes):
    vector_ok(ctx, lanes, False, "a per-feature table")
    x = ins[0]
    f = x.shape[-1]
    work = "float64" if x.dtype.scalar == "float64" else F32
    scale = ml.per_feature(_sig(ctx), "scale", f).astype(work)
    offset = ml.per_feature(_sig(ctx), "offset", f).astype(work)
    v = cast(x.load(tuple(idx)), work)
    out = Bin("*", Bin("-", v, _feature(ctx, "offset", offset, idx)),
              _feature(ctx, "scale", scale, idx))
    return cast(out, F32)


@value_rule("Binarizer")
def _binarizer(ctx: LowerCtx, ins, idx, lanes):
    vector_ok(ctx, lanes, False, "a comparison per element")
    t = ctx.attrs.get("threshold", ml.BINARIZER_DEFAULT)
    return Select(Bin(">", ins[0].load(tuple(idx)), _f(t)), _f(1), _f(0))


@value_rule("Imputer")
def _imputer(ctx: LowerCtx, ins, idx, lanes):
    vector_ok(ctx, lanes, False, "a per-feature table")
    x = ins[0]
    values, replaced = ml.imputer_values(_sig(ctx))
    if values.size != x.shape[-1]:
        values = values[:1]
    v = x.load(tuple(idx))
    if x.dtype.is_float and np.isnan(replaced):
        hit = Bin("!=", v, v)
    else:
        hit = Bin("==", v, const_like(replaced, v))
    return Select(hit, _feature(ctx, "imputed", values.astype(x.dtype.scalar), idx), v)


@value_rule("OneHotEncoder")
def _one_hot_encoder(ctx: LowerCtx, ins, idx, lanes):
    vector_ok(ctx, lanes, False, "a comparison per element")
    x = ins[0]
    cats = ml.one_hot_categories(_sig(ctx))
    # a repeated category matches its last position only: the others never match
    live = np.where(ml.one_hot_matches(cats), cats, 0)
    v = x.load(tuple(idx[:-1]))
    key = float_to_int(v, "int64") if x.dtype.is_float else cast(v, "int64")
    hit = Bin("==", key, Load(shared_param(ctx, "categories", live.astype(np.int64)), idx[-1]))
    if not ml.one_hot_matches(cats).all():
        hit = Bin("and", hit, Bin("!=", Load(shared_param(
            ctx, "category_live", ml.one_hot_matches(cats).astype(np.int32)), idx[-1]),
            const(0)))
    if x.dtype.is_float:      # NaN, infinities and what int64 cannot hold match nothing
        lim = float(2 ** 63)
        hit = Bin("and", hit, Bin("and", Bin(">=", v, const_like(-lim, v)),
                                  Bin("<", v, const_like(lim, v))))
    return Select(hit, _f(1), _f(0))


@value_rule("LabelEncoder")
def _label_encoder(ctx: LowerCtx, ins, idx, lanes):
    vector_ok(ctx, lanes, False, "a table lookup")
    keys, values, default = ml.label_encoder_table(_sig(ctx))
    v = ins[0].load(tuple(idx))
    out: Expr = const(default.item(), values.dtype.name)
    for key, value in zip(keys[::-1], values[::-1]):      # the first key tested first
        match = Bin("!=", v, v) if key != key else Bin("==", v, const(key.item(),
                                                                      keys.dtype.name))
        out = Select(match, const(value.item(), values.dtype.name), out)
    return out


@value_rule("ArrayFeatureExtractor")
def _array_feature_extractor(ctx: LowerCtx, ins, idx, lanes):
    vector_ok(ctx, lanes, False, "a gather of features")
    x = ins[0]
    picks = ml.feature_indices(Sig(ctx.node, ctx.in_types, (None, ins[1].value)))
    at = Load(shared_param(ctx, "feature_index", picks.astype(np.int32)), idx[-1])
    lead = () if len(x.shape) == 1 else tuple(idx[:-1])
    return x.load(lead + (at,))


@value_rule("FeatureVectorizer")
def _feature_vectorizer(ctx: LowerCtx, ins, idx, lanes):
    vector_ok(ctx, lanes, False, "features joined from several inputs")
    dims = ctx.attrs["inputdimensions"]
    n, j = idx
    out: Expr = _f(0)
    start = sum(dims)
    for x, d in reversed(list(zip(ins, dims))):
        start -= d
        width = min(d, _row_size(x))
        if width == 0:
            continue
        # clamped into the input: a select may load both branches
        col = Bin("min", Bin("max", Bin("-", j, const(start)), const(0)), const(width - 1))
        # each input is read as rows of its flattened features
        flat = col if len(x.shape) == 1 else Bin("+", Bin("*", n, const(_row_size(x))), col)
        inside = Bin("and", Bin(">=", j, const(start)), Bin("<", j, const(start + width)))
        out = Select(inside, cast(x.load(unravel(flat, x.shape)), F32), out)
    return out


def _row_size(x: TensorRef) -> int:
    return int(np.prod(x.shape[1:])) if len(x.shape) > 1 else int(x.shape[0])


@value_rule("ZipMap")
def _zipmap(ctx: LowerCtx, ins, idx, lanes):
    return ins[0].load(tuple(idx), lanes)

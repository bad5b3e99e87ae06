"""Kernel rules for reductions and the ops built on them: Reduce*, ArgMax/ArgMin,
Softmax/LogSoftmax/Hardmax, GlobalAveragePool/GlobalMaxPool/GlobalLpPool,
LayerNormalization, InstanceNormalization, GroupNormalization,
RMSNormalization, MeanVarianceNormalization and LRN.

Every rule has the same shape: loops over the kept axes outside, one or more
passes over the reduced axes inside, each pass a register accumulator
(Decl, then Assign in the loop), and `emit` for the results. Floats
accumulate in float32 (the references use float64; the 1e-4 tolerance
holds for the row lengths real models have), integers in int64 as numpy.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from aot.ir.graph import TensorType
from aot.ir.tir import (Assign, Bin, Const, Decl, DType, Expr, For, ForKind, Select,
                        Stmt, Unary, Var, add, const, dt, dtype_of, mul, seq)
from aot.lower.rules.elementwise import (vector_math, broadcast_load, cast, const_like, float_to_int, int_abs,
                                         math_call, wrapping)
from aot.lower.rules import LowerCtx, TensorRef, kernel_rule
from aot.ops.reduce import reduce_axes
from aot.ops.registry import Sig

Index = dict[int, Expr]      # axis -> index expression


def loops(ctx: LowerCtx, shape: Sequence[int], axes: Sequence[int],
          body: Callable[[Index], Stmt], name: str = "i") -> Stmt:
    """Nested loops over `axes` of `shape` (in that order); body gets axis -> var."""
    vars_ = {a: ctx.fresh(f"{name}{a}") for a in axes}
    stmt = body(dict(vars_))
    for a in reversed(list(axes)):
        stmt = For(vars_[a], int(shape[a]), stmt)
    return stmt


def full_index(at: Index, rank: int) -> tuple[Expr, ...]:
    return tuple(at[a] for a in range(rank))


def accumulate(ctx: LowerCtx, x: TensorRef, at: Index, axes: Sequence[int], init: Expr,
               update: Callable[[Expr, Expr], Expr], name: str = "acc") -> tuple[Stmt, Var]:
    """acc = init; for each index over `axes` (the others fixed by `at`):
    acc = update(acc, x[index]). Returns the statements and acc. A vector
    init makes a vector accumulator over `lanes` consecutive last-axis
    elements (the last axis must then not be reduced)."""
    acc = ctx.fresh(name, dtype_of(init))
    rank, lanes = len(x.shape), dtype_of(init).lanes
    loop = loops(ctx, x.shape, axes, lambda v: Assign(
        acc, update(acc, x.load(full_index({**at, **v}, rank), lanes))), "k")
    return seq(Decl(acc, init), loop), acc


def _first(x: TensorRef, at: Index, axes: Sequence[int], lanes: int = 1) -> Expr:
    """x at the start of the reduced axes: the seed of a max or min."""
    return x.load(full_index({**at, **{a: const(0) for a in axes}}, len(x.shape)), lanes)


def _vector_rows(ctx: LowerCtx, x: TensorRef, axes: Sequence[int], lanes: int,
                 row: Callable[[Index, int], Stmt]) -> Stmt:
    """Like per_row, but the last axis (kept) is walked `lanes` elements at a
    time, then one by one for the remainder: row(at, lanes) builds one
    vector of rows, every lane its own reduction (GlobalAveragePool over
    NHWC: one accumulator vector per channel tile)."""
    rank = len(x.shape)
    last, n = rank - 1, x.shape[-1]
    main = n - n % lanes

    def inner(at: Index) -> Stmt:
        parts = []
        if main:
            v = ctx.fresh(f"i{last}")
            parts.append(For(v, main, row({**at, last: v}, lanes), ForKind.VECTORIZED,
                             step=lanes))
        if n % lanes:
            v = ctx.fresh(f"i{last}")
            parts.append(For(v, n - main, row({**at, last: v}, 1), start=main))
        return seq(*parts)
    outer = [a for a in range(rank - 1) if a not in axes]
    return loops(ctx, x.shape, outer, inner)


def _reduce_lanes(ctx: LowerCtx, x: TensorRef, axes: Sequence[int]) -> int:
    """Vector lanes for a float reduction that keeps the last axis, else 1."""
    if not x.dtype.is_float or not x.shape or len(x.shape) - 1 in axes:
        return 1
    lanes = ctx.target.lanes(x.dtype.compute_bits)
    return lanes if x.shape[-1] >= lanes else 1


def per_row(ctx: LowerCtx, x: TensorRef, axes: Sequence[int],
            row: Callable[[Index], Stmt]) -> Stmt:
    """Loops over the axes not in `axes`; row(at) builds one row's statements."""
    kept = [a for a in range(len(x.shape)) if a not in axes]
    return loops(ctx, x.shape, kept, row)


def _count(shape, axes) -> int:
    return int(np.prod([shape[a] for a in axes], dtype=np.int64))


# ---- Reduce* -------------------------------------------------------------------------------

def _acc_type(x: TensorRef, op: str = "") -> DType:
    """Floats in their type; integers in int64, wrapping as numpy does, or
    in float64 for a mean (numpy's, which the reference uses)."""
    if x.dtype.is_float:
        return x.dtype
    return dt("float64") if op == "ReduceMean" else dt("int64")


def _sum_of(f: Callable[[Expr], Expr]):
    return lambda acc, v: wrapping("+", acc, f(cast(v, acc.dtype)))


# op -> (init, update(acc, x), finish(acc, count)); init None seeds with the first element
REDUCERS: dict[str, tuple] = {
    "ReduceSum": (0, _sum_of(lambda v: v), lambda s, n: s),
    "ReduceMean": (0, _sum_of(lambda v: v), None),     # finish: see _mean
    "ReduceMax": (None, lambda acc, v: Bin("max", acc, v), lambda s, n: s),
    "ReduceMin": (None, lambda acc, v: Bin("min", acc, v), lambda s, n: s),
    "ReduceProd": (1, lambda acc, v: wrapping("*", acc, cast(v, acc.dtype)), lambda s, n: s),
    "ReduceL1": (0, _sum_of(lambda v: int_abs(v) if not dtype_of(v).is_float
                            else Unary("abs", v)), lambda s, n: s),
    "ReduceSumSquare": (0, _sum_of(lambda v: wrapping("*", v, v)), lambda s, n: s),
    "ReduceL2": (0, _sum_of(lambda v: Bin("*", v, v)), lambda s, n: math_call("sqrt", s)),
    "ReduceLogSum": (0, _sum_of(lambda v: v), lambda s, n: math_call("log", s)),
}


def _mean(s: Expr, n: int, out: DType) -> Expr:
    if out.is_float:
        return Bin("/", s, const_like(n, s))
    # integers: numpy's mean is a float64 one, truncated back
    return float_to_int(Bin("/", cast(s, "float64"), Const(float(n), dt("float64"))), out)


def _axes(ctx: LowerCtx, ins) -> tuple[int, ...] | None:
    if len(ins) > 1 and ins[1] is not None and ins[1].value is None:
        raise ctx.unsupported("reduction axes given at run time")
    sig = Sig(ctx.node, ctx.in_types, tuple(r.value if r is not None else None for r in ins))
    return reduce_axes(sig)


def _out_index(at: Index, rank: int, axes, keepdims: bool) -> tuple[Expr, ...]:
    if keepdims:
        return tuple(const(0) if a in axes else at[a] for a in range(rank))
    return tuple(at[a] for a in range(rank) if a not in axes)


def reduce_kernel(ctx: LowerCtx, x: TensorRef, axes: Sequence[int], keepdims: bool,
                  op: str, emit) -> Stmt:
    """One Reduce* op over `axes` of x, each result emitted as output 0."""
    init, update, finish = REDUCERS[op]
    rank, n = len(x.shape), _count(x.shape, axes)
    out = dt(ctx.out_types[0].dtype)
    if finish is not None and op in ("ReduceL2", "ReduceLogSum") and not out.is_float:
        raise ctx.unsupported(f"{op} on {out.scalar}")

    def row(at: Index, lanes: int = 1) -> Stmt:
        acc_type = _acc_type(x, op).with_lanes(lanes)
        seed = _first(x, at, axes, lanes) if init is None else const_like(init, acc_type)
        stmts, acc = accumulate(ctx, x, at, axes, seed, update)
        value = _mean(acc, n, out) if finish is None else finish(acc, n)
        return seq(stmts, emit(0, _out_index(at, rank, axes, keepdims), cast(value, out)))
    lanes = _reduce_lanes(ctx, x, axes)
    if lanes > 1:
        return _vector_rows(ctx, x, axes, lanes, row)
    return per_row(ctx, x, axes, row)


def _identity_kernel(ctx: LowerCtx, x: TensorRef, emit) -> Stmt:
    rank = len(x.shape)
    return loops(ctx, x.shape, range(rank),
                 lambda at: emit(0, full_index(at, rank), x.load(full_index(at, rank))))


@kernel_rule(*REDUCERS, "ReduceLogSumExp")
def _reduce(ctx: LowerCtx, ins, emit):
    x = ins[0]
    axes = _axes(ctx, ins)
    if axes == ():
        return _identity_kernel(ctx, x, emit)
    axes = tuple(range(len(x.shape))) if axes is None else axes
    keepdims = bool(ctx.attrs.get("keepdims", 1))
    if ctx.node.op == "ReduceLogSumExp":
        return _log_sum_exp(ctx, x, axes, keepdims, emit)
    return reduce_kernel(ctx, x, axes, keepdims, ctx.node.op, emit)


def _log_sum_exp(ctx: LowerCtx, x: TensorRef, axes: Sequence[int], keepdims: bool, emit) -> Stmt:
    if not x.dtype.is_float:
        raise ctx.unsupported(f"ReduceLogSumExp on {x.dtype.scalar}")
    rank = len(x.shape)

    def row(at: Index) -> Stmt:
        find_max, m = accumulate(ctx, x, at, axes, _first(x, at, axes),
                                 lambda acc, v: Bin("max", acc, v), "m")
        # an infinite max would give inf - inf: shift by 0 instead, as the reference
        shift = Select(Bin("==", Bin("-", m, m), const_like(0, m)), m, const_like(0, m))
        sum_exp, s = accumulate(ctx, x, at, axes, const_like(0, m),
                                lambda acc, v: Bin("+", acc, math_call("exp", Bin("-", v, shift))),
                                "s")
        value = Bin("+", math_call("log", s), shift)
        return seq(find_max, sum_exp, emit(0, _out_index(at, rank, axes, keepdims), value))
    return per_row(ctx, x, axes, row)


# ---- ArgMax / ArgMin ---------------------------------------------------------------------

@kernel_rule("ArgMax", "ArgMin")
def _arg(ctx: LowerCtx, ins, emit):
    x = ins[0]
    rank = len(x.shape)
    axis = ctx.attrs.get("axis", 0) % rank
    keepdims = bool(ctx.attrs.get("keepdims", 1))
    better = ">" if ctx.node.op == "ArgMax" else "<"
    if ctx.attrs.get("select_last_index", 0):
        better += "="        # ties move to the later index

    def row(at: Index) -> Stmt:
        best = ctx.fresh("best", x.dtype)
        pos = ctx.fresh("pos", "int32")
        k = ctx.fresh("k")
        v = ctx.fresh("v", x.dtype)
        take = Bin(better, v, best)
        # k = 0 compares the seed with itself: no change, for > and >= alike
        scan = For(k, x.shape[axis], seq(
            Decl(v, x.load(full_index({**at, axis: k}, rank))),
            Assign(pos, Select(take, k, pos)),
            Assign(best, Select(take, v, best))))
        return seq(Decl(best, _first(x, at, (axis,))), Decl(pos, const(0)), scan,
                   emit(0, _out_index(at, rank, (axis,), keepdims), cast(pos, "int64")))
    return per_row(ctx, x, (axis,), row)


# ---- Softmax / LogSoftmax / Hardmax ----------------------------------------------------------


@kernel_rule("Softmax", "LogSoftmax", "Hardmax")
def _softmax(ctx: LowerCtx, ins, emit):
    x = ins[0]
    rank = len(x.shape)
    if rank == 0:
        raise ctx.unsupported(f"{ctx.node.op} of a scalar")
    axis = int(ctx.attrs.get("axis", -1)) % rank
    op = ctx.node.op

    def row(at: Index, lanes: int = 1) -> Stmt:
        if op == "Hardmax":
            return _hardmax_row(ctx, x, at, axis, emit)
        # three passes, as the reference: the max, the sum of exp(x - max), the outputs
        find_max, m = accumulate(ctx, x, at, (axis,), _first(x, at, (axis,), lanes),
                                 lambda acc, v: Bin("max", acc, v), "m")
        sum_exp, s = accumulate(ctx, x, at, (axis,), const_like(0, m),
                                lambda acc, v: Bin("+", acc, vector_math("exp", Bin("-", v, m))), "s")
        if op == "Softmax":
            scale = ctx.fresh("r", m.dtype)
            prep = Decl(scale, Bin("/", const_like(1, s), s))
            value = lambda v: Bin("*", vector_math("exp", Bin("-", v, m)), scale)  # noqa: E731
        else:
            scale = ctx.fresh("log_s", m.dtype)
            prep = Decl(scale, math_call("log", s))
            value = lambda v: Bin("-", Bin("-", v, m), scale)  # noqa: E731
        out = loops(ctx, x.shape, (axis,),
                    lambda v: emit(0, full_index({**at, **v}, rank),
                                   value(x.load(full_index({**at, **v}, rank), lanes))), "k")
        return seq(find_max, sum_exp, prep, out)
    # Along another axis than the last, neighbours on the last axis are
    # independent rows: a vector of them at a time (LogSoftmax's log stays a
    # libm call per lane, so it stays scalar).
    lanes = _reduce_lanes(ctx, x, (axis,)) if op == "Softmax" else 1
    if lanes > 1:
        return _vector_rows(ctx, x, (axis,), lanes, row)
    return per_row(ctx, x, (axis,), row)


def _hardmax_row(ctx: LowerCtx, x: TensorRef, at: Index, axis: int, emit) -> Stmt:
    rank = len(x.shape)
    best, pos = ctx.fresh("best", x.dtype), ctx.fresh("pos", "int32")
    k, v = ctx.fresh("k"), ctx.fresh("v", x.dtype)
    take = Bin(">", v, best)      # the first maximum wins, as np.argmax
    scan = For(k, x.shape[axis], seq(
        Decl(v, x.load(full_index({**at, axis: k}, rank))),
        Assign(pos, Select(take, k, pos)),
        Assign(best, Select(take, v, best))))
    out = loops(ctx, x.shape, (axis,), lambda i: emit(
        0, full_index({**at, **i}, rank),
        Select(Bin("==", i[axis], pos), const_like(1, x.dtype), const_like(0, x.dtype))), "j")
    return seq(Decl(best, _first(x, at, (axis,))), Decl(pos, const(0)), scan, out)


# ---- global pools ------------------------------------------------------------------------

def _spatial(x: TensorRef, layout: str) -> tuple[int, ...]:
    rank = len(x.shape)
    return tuple(range(1, rank - 1)) if layout == "NHWC" else tuple(range(2, rank))


@kernel_rule("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(ctx: LowerCtx, ins, emit):
    x = ins[0]
    op = "ReduceMean" if ctx.node.op == "GlobalAveragePool" else "ReduceMax"
    return reduce_kernel(ctx, x, _spatial(x, ctx.attrs.get("layout", "NCHW")), True, op, emit)


@kernel_rule("GlobalLpPool")
def _global_lp_pool(ctx: LowerCtx, ins, emit):
    """(sum |x|^p)^(1/p) over the spatial axes: p = 1 and 2 are ReduceL1 and
    ReduceL2 (vector rows, no pow); other p a pow per element, scalar."""
    x = ins[0]
    p = float(ctx.attrs.get("p", 2))
    axes = _spatial(x, ctx.attrs.get("layout", "NCHW"))
    if p in (1, 2):
        return reduce_kernel(ctx, x, axes, True, "ReduceL1" if p == 1 else "ReduceL2", emit)
    rank = len(x.shape)

    def row(at: Index) -> Stmt:
        stmts, acc = accumulate(ctx, x, at, axes, const_like(0, x.dtype), lambda acc, v: Bin(
            "+", acc, math_call("pow", Unary("abs", v), const_like(p, v))))
        value = math_call("pow", acc, const_like(1 / p, acc))
        return seq(stmts, emit(0, _out_index(at, rank, axes, True), value))
    return per_row(ctx, x, axes, row)


# ---- normalizations -------------------------------------------------------------------------

def _mean_var(ctx: LowerCtx, x: TensorRef, at: Index, axes: Sequence[int], lanes: int = 1):
    """Statements computing the mean and the variance over `axes` (two passes:
    no cancellation in float32), for `lanes` consecutive last-axis positions
    at once; the statements and the two expressions."""
    n = _count(x.shape, axes)
    ty = x.dtype.with_lanes(lanes)
    total, s = accumulate(ctx, x, at, axes, const_like(0, ty),
                          lambda acc, v: Bin("+", acc, v), "sum")
    mean = ctx.fresh("mean", ty)
    sq, ss = accumulate(ctx, x, at, axes, const_like(0, ty),
                        lambda acc, v: Bin("+", acc, Bin("*", Bin("-", v, mean),
                                                         Bin("-", v, mean))), "var")
    return seq(total, Decl(mean, Bin("/", s, const_like(n, s))), sq), mean, \
        Bin("/", ss, const_like(n, ss))


def _moments(ctx: LowerCtx, x: TensorRef, at: Index, axes: Sequence[int], eps: float,
             lanes: int = 1):
    """Statements computing the mean and 1/sqrt(var + eps) over `axes`."""
    stats, mean, var = _mean_var(ctx, x, at, axes, lanes)
    inv = ctx.fresh("inv_std", mean.dtype)
    return seq(stats, Decl(inv, Bin("/", const_like(1, var),
                                    math_call("sqrt", Bin("+", var, const_like(eps, var)))))), \
        mean, inv


@kernel_rule("LayerNormalization")
def _layer_norm(ctx: LowerCtx, ins, emit):
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    rank = len(x.shape)
    axis = int(ctx.attrs.get("axis", -1)) % rank
    axes = tuple(range(axis, rank))
    eps = float(ctx.attrs.get("epsilon", 1e-5))

    def row(at: Index) -> Stmt:
        stats, mean, inv = _moments(ctx, x, at, axes, eps)

        def out(v: Index) -> Stmt:
            idx = full_index({**at, **v}, rank)
            y = Bin("*", Bin("*", Bin("-", x.load(idx), mean), inv), broadcast_load(scale, idx))
            if bias is not None:
                y = Bin("+", y, broadcast_load(bias, idx))
            return emit(0, idx, y)
        stat_at = full_index({**at, **{a: const(0) for a in axes}}, rank)
        extra = [emit(k, stat_at, cast(value, ctx.out_types[k].dtype))
                 for k, value in ((1, mean), (2, inv)) if k < len(ctx.node.outputs)]
        return seq(stats, loops(ctx, x.shape, axes, out, "j"), *extra)
    return per_row(ctx, x, axes, row)


@kernel_rule("InstanceNormalization")
def _instance_norm(ctx: LowerCtx, ins, emit):
    x, scale, bias = ins[:3]
    rank = len(x.shape)
    layout = ctx.attrs.get("layout", "NCHW")
    axes = _spatial(x, layout)
    cax = rank - 1 if layout == "NHWC" else 1
    eps = float(ctx.attrs.get("epsilon", 1e-5))

    def row(at: Index, lanes: int = 1) -> Stmt:
        stats, mean, inv = _moments(ctx, x, at, axes, eps, lanes)
        ch = (at[cax],)
        # per channel: y = x * a + b with a = scale * inv, b = bias - mean * a
        a, b = ctx.fresh("a", inv.dtype), ctx.fresh("b", inv.dtype)
        coeffs = seq(Decl(a, Bin("*", scale.load(ch, lanes), inv)),
                     Decl(b, Bin("-", bias.load(ch, lanes), Bin("*", mean, a))))
        out = loops(ctx, x.shape, axes, lambda v: emit(
            0, full_index({**at, **v}, rank),
            Bin("+", Bin("*", x.load(full_index({**at, **v}, rank), lanes), a), b)), "j")
        return seq(stats, coeffs, out)
    # NHWC: a vector of channels at a time, each lane its own instance
    lanes = _reduce_lanes(ctx, x, axes)
    if lanes > 1:
        return _vector_rows(ctx, x, axes, lanes, row)
    return per_row(ctx, x, axes, row)


@kernel_rule("LRN")
def _lrn(ctx: LowerCtx, ins, emit):
    x = ins[0]
    rank = len(x.shape)
    cax = rank - 1 if ctx.attrs.get("layout", "NCHW") == "NHWC" else 1
    size = int(ctx.attrs["size"])
    alpha = float(ctx.attrs.get("alpha", 1e-4))
    beta = float(ctx.attrs.get("beta", 0.75))
    bias = float(ctx.attrs.get("bias", 1.0))
    lo, channels = (size - 1) // 2, x.shape[cax]

    def element(at: Index) -> Stmt:
        c = ctx.fresh("c")
        acc = ctx.fresh("sq", x.dtype)
        ch = Bin("+", Bin("-", at[cax], const(lo)), c)
        inside = Bin("and", Bin(">=", ch, const(0)), Bin("<", ch, const(channels)))
        # channels outside [0, C) count as 0 (the reference zero-pads); the load
        # index is clamped so it stays in bounds whatever the select evaluates
        clamped = Bin("min", Bin("max", ch, const(0)), const(channels - 1))
        v = x.load(full_index({**at, cax: clamped}, rank))
        body = Assign(acc, Bin("+", acc, Select(inside, Bin("*", v, v), const_like(0, v))))
        denom = math_call("pow", Bin("+", const_like(bias, acc),
                                     Bin("*", const_like(alpha / size, acc), acc)),
                          const_like(beta, acc))
        idx = full_index(at, rank)
        return seq(Decl(acc, const_like(0, x.dtype)), For(c, size, body),
                   emit(0, idx, Bin("/", x.load(idx), denom)))
    return loops(ctx, x.shape, range(rank), element)


def _scaled_rows(ctx: LowerCtx, x: TensorRef, axes: Sequence[int], stats, value, emit) -> Stmt:
    """Per row over the axes not in `axes`: `stats(at)` -> (statements,
    locals), then each element of the row emitted as value(x, idx, locals)."""
    rank = len(x.shape)

    def row(at: Index) -> Stmt:
        prep, held = stats(at)
        out = loops(ctx, x.shape, axes, lambda v: emit(
            0, full_index({**at, **v}, rank), value(x.load(full_index({**at, **v}, rank)),
                                               full_index({**at, **v}, rank), held)), "j")
        return seq(prep, out)
    return per_row(ctx, x, axes, row)


@kernel_rule("MeanVarianceNormalization")
def _mean_variance_norm(ctx: LowerCtx, ins, emit):
    """(x - mean) / (std + 1e-9) over `axes`, ONNX's definition. The spec
    writes the variance E[x^2] - E[x]^2; two passes give the same value
    without its float32 cancellation."""
    x = ins[0]
    rank = len(x.shape)
    axes = tuple(sorted({int(a) % rank for a in ctx.attrs.get("axes", (0, 2, 3))}))

    def stats(at: Index):
        prep, mean, var = _mean_var(ctx, x, at, axes)
        d = ctx.fresh("inv_std", mean.dtype)
        std = math_call("sqrt", Bin("max", var, const_like(0, var)))
        return seq(prep, Decl(d, Bin("/", const_like(1, var),
                                     Bin("+", std, const_like(1e-9, var))))), (mean, d)
    return _scaled_rows(ctx, x, axes, stats,
                        lambda v, idx, h: Bin("*", Bin("-", v, h[0]), h[1]), emit)


@kernel_rule("RMSNormalization")
def _rms_norm(ctx: LowerCtx, ins, emit):
    """x / sqrt(mean(x^2) + epsilon) * scale over the axes from `axis` on."""
    x, scale = ins[0], ins[1]
    rank = len(x.shape)
    axes = tuple(range(int(ctx.attrs.get("axis", -1)) % rank, rank))
    eps = float(ctx.attrs.get("epsilon", 1e-5))
    n = _count(x.shape, axes)

    def stats(at: Index):
        prep, ss = accumulate(ctx, x, at, axes, const_like(0, x.dtype),
                              lambda acc, v: Bin("+", acc, Bin("*", v, v)), "sq")
        inv = ctx.fresh("inv_rms", x.dtype)
        ms = Bin("+", Bin("/", ss, const_like(n, ss)), const_like(eps, ss))
        return seq(prep, Decl(inv, Bin("/", const_like(1, ss), math_call("sqrt", ms)))), inv
    return _scaled_rows(ctx, x, axes, stats, lambda v, idx, inv: Bin(
        "*", Bin("*", v, inv), broadcast_load(scale, idx)), emit)


@kernel_rule("GroupNormalization")
def _group_norm(ctx: LowerCtx, ins, emit):
    """Per sample and group of C / num_groups consecutive channels: the
    moments over the group's channels and every spatial position, then
    scale and bias per channel. The input is seen as [N, G, C/G, spatial...]
    (x's channel g * C/G + k), so no index is divided."""
    x, scale, bias = ins[:3]
    n, c, *spatial = x.shape
    groups = int(ctx.attrs["num_groups"])
    width = c // groups
    eps = float(ctx.attrs.get("epsilon", 1e-5))

    def channel(idx) -> Expr:
        return add(mul(idx[1], const(width)), idx[2])

    view = TensorRef(x.name, TensorType((n, groups, width, *spatial), x.type.dtype),
                     lambda idx, lanes=1: x.load((idx[0], channel(idx), *idx[3:]), lanes))
    axes = tuple(range(2, len(view.shape)))

    def stats(at: Index):
        prep, mean, inv = _moments(ctx, view, at, axes, eps)
        return prep, (mean, inv)

    def value(v, idx, held):
        mean, inv = held
        ch = (channel(idx),)
        return Bin("+", Bin("*", Bin("*", Bin("-", v, mean), inv), scale.load(ch)), bias.load(ch))

    def emit_x(k, idx, value):
        return emit(k, (idx[0], channel(idx), *idx[3:]), value)
    return _scaled_rows(ctx, view, axes, stats, value, emit_x)

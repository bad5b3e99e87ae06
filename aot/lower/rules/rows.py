"""Kernel rules for aot/ops/rows.py: CumSum/CumProd (a running accumulator
along the axis), LpNormalization (the row's norm, then each element over
it) and Det (Gaussian elimination with partial pivoting on a scratch copy
of each matrix). Floats are computed in their own type; integer running
sums and products wrap, as numpy's."""
from __future__ import annotations

from aot.ir.tir import (Assign, Bin, Decl, For, If, Load, Select, Store, Unary, const, flat_index,
                        seq, sub)
from aot.lower.rules.elementwise import const_like, math_call, wrapping
from aot.lower.rules.reduce import accumulate, loops
from aot.lower.rules import LowerCtx, kernel_rule
from aot.ops.registry import Sig
from aot.ops.rows import lp_params, scan_axis


def _full(at: dict, rank: int) -> tuple:
    return tuple(at[a] for a in range(rank))


@kernel_rule("CumSum", "CumProd")
def _scan(ctx: LowerCtx, ins, emit):
    x = ins[0]
    if ins[1].value is None:
        raise ctx.unsupported(f"{ctx.node.op} with its axis computed at run time")
    axis = scan_axis(Sig(ctx.node, ctx.in_types, (None, ins[1].value)))
    rank, n = len(x.shape), x.shape[axis]
    op, identity = ("+", 0) if ctx.node.op == "CumSum" else ("*", 1)
    exclusive = bool(ctx.attrs.get("exclusive", 0))
    reverse = bool(ctx.attrs.get("reverse", 0))

    def row(at: dict):
        acc = ctx.fresh("acc", x.dtype)
        k = ctx.fresh("k")
        pos = sub(const(n - 1), k) if reverse else k
        where = _full({**at, axis: pos}, rank)
        step = Assign(acc, wrapping(op, acc, x.load(where, 1)))
        out = emit(0, where, acc)
        body = seq(out, step) if exclusive else seq(step, out)
        return seq(Decl(acc, const_like(identity, x.dtype)), For(k, n, body))
    return loops(ctx, x.shape, [a for a in range(rank) if a != axis], row)


@kernel_rule("LpNormalization")
def _lp_normalization(ctx: LowerCtx, ins, emit):
    x = ins[0]
    rank = len(x.shape)
    axis, p = lp_params(ctx, rank)
    square = (lambda v: Bin("*", v, v)) if p == 2 else (lambda v: Unary("abs", v))

    def row(at: dict):
        total, s = accumulate(ctx, x, at, (axis,), const_like(0, x.dtype),
                              lambda acc, v: Bin("+", acc, square(v)), "norm")
        norm = ctx.fresh("inv", x.dtype)
        # a zero row stays zero (the reference's 0 / 0 = 0)
        value = math_call("sqrt", s) if p == 2 else s
        inv = Select(Bin("==", s, const_like(0, s)), const_like(0, s),
                     Bin("/", const_like(1, s), value))
        k = ctx.fresh("k")
        where = _full({**at, axis: k}, rank)
        scale = For(k, x.shape[axis], emit(0, where, Bin("*", x.load(where, 1), norm)))
        return seq(total, Decl(norm, inv), scale)
    return loops(ctx, x.shape, [a for a in range(rank) if a != axis], row)


@kernel_rule("Det")
def _det(ctx: LowerCtx, ins, emit):
    x = ins[0]
    m = x.shape[-1]
    batch = x.shape[:-2]
    d = x.dtype
    a = ctx.scratch_buffer("lu", d, (m, m))

    def at(i, j):
        return flat_index((i, j), (m, m))

    def matrix(outer: dict):
        lead = tuple(outer[b] for b in range(len(batch)))
        i, j = ctx.fresh("i"), ctx.fresh("j")
        copy = For(i, m, For(j, m, Store(a, at(i, j), x.load(lead + (i, j), 1))))
        det, k = ctx.fresh("det", d), ctx.fresh("k")
        piv, best, r = ctx.fresh("p"), ctx.fresh("best", d), ctx.fresh("r")
        take = Bin(">", Unary("abs", Load(a, at(r, k))), best)
        find = seq(Decl(piv, k), Decl(best, Unary("abs", Load(a, at(k, k)))),
                   For(r, m, If(Bin(">", r, k), seq(
                       Assign(piv, Select(take, r, piv)),
                       Assign(best, Select(take, Unary("abs", Load(a, at(r, k))), best))))))
        c, t = ctx.fresh("c"), ctx.fresh("t", d)
        swap = If(Bin("!=", piv, k), seq(
            For(c, m, seq(Decl(t, Load(a, at(k, c))),
                          Store(a, at(k, c), Load(a, at(piv, c))),
                          Store(a, at(piv, c), t))),
            Assign(det, Unary("neg", det))))
        pivot = ctx.fresh("pivot", d)
        f, row, col = ctx.fresh("f", d), ctx.fresh("row"), ctx.fresh("col")
        eliminate = For(row, m, If(Bin(">", row, k), seq(
            Decl(f, Bin("/", Load(a, at(row, k)), pivot)),
            For(col, m, If(Bin(">", col, k), Store(
                a, at(row, col), Bin("-", Load(a, at(row, col)),
                                     Bin("*", f, Load(a, at(k, col))))))))))
        # a zero pivot makes the determinant 0: the elimination stops there
        step = seq(find, swap, Decl(pivot, Load(a, at(k, k))), Assign(det, Bin("*", det, pivot)),
                   If(Bin("!=", pivot, const_like(0, pivot)), eliminate))
        body = seq(copy, Decl(det, const_like(1, d)), For(k, m, step),
                   emit(0, lead, det))
        return body
    return loops(ctx, x.shape, range(len(batch)), matrix) if batch else matrix({})

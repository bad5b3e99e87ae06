"""Kernel rules for the transformer ops of aot/ops/attention.py.

Attention is one loop nest, not MatMul/Softmax kernels with their
[batch, heads, q, keys] scores in the arena: for each query row the scores
go into one scratch row of `keys` elements (the only workspace), then three
passes over it (max, sum of exponentials, probabilities) and one product
with V. Masks are computed where a score is, never materialized. The cache
(past_key, then K) is walked as two runs of key positions, so no load
chooses between two tensors. Grouped-query heads read their key/value head
h / group; 3-D inputs are read in place at [b, s, h * size + d].
"""
from __future__ import annotations

from typing import Callable

from aot.ir.tir import (Assign, Bin, Decl, Expr, For, Load, Select, Stmt, Store, Var,
                        add, const, dt, mul, seq, sub)
from aot.lower.bounds import position, precheck
from aot.lower.elementwise import broadcast_index, cast, const_like, math_call
from aot.lower.reduce import loops
from aot.lower.rules import LowerCtx, TensorRef, kernel_rule
from aot.ops.attention import (COS, K, MASK, NONPAD, PAST_KEY, PAST_VALUE, POSITIONS, Q,
                               QK_BIASED, QK_SOFTMAX, SIN, V, X, Geometry, Options, geometry,
                               options, rotary_geometry)

HeadLoad = Callable[[Expr, Expr, Expr, Expr], Expr]    # (batch, head, position, element)


def head_view(ref: TensorRef, three_d: bool, size: int) -> HeadLoad:
    """Element [b, h, s, d] of a 4-D tensor, or of a 3-D one holding heads of
    `size` elements side by side in its last axis."""
    if three_d:
        return lambda b, h, s, d: ref.load((b, s, add(mul(h, const(size)), d)))
    return lambda b, h, s, d: ref.load((b, h, s, d))


def _runs(past: TensorRef | None, new: TensorRef, geo: Geometry,
          size: int) -> list[tuple[int, int, HeadLoad]]:
    """The key (or value) positions as runs (start, count, load at an
    absolute position): the cache first, then the new ones."""
    fresh = head_view(new, geo.three_d, size)
    runs = []
    if past is not None and geo.past_len:
        runs.append((0, geo.past_len, lambda b, h, j, d: past.load((b, h, j, d))))
    runs.append((geo.past_len, geo.kv_len,
                 lambda b, h, j, d: fresh(b, h, sub(j, const(geo.past_len)), d)))
    return runs


def _over_runs(ctx: LowerCtx, runs, body: Callable[[Var, HeadLoad], Stmt]) -> Stmt:
    stmts = []
    for start, count, load in runs:
        j = ctx.fresh("j")
        stmts.append(For(j, count, body(j, load), start=start))
    return seq(*stmts)


def _neg_inf(d) -> Expr:
    return const_like(float("-inf"), d)


def _allowed(ctx: LowerCtx, ins, geo: Geometry, opts: Options, at: tuple) -> Expr | None:
    """Whether query (b, h, i) may attend key j, as a bool expression (None:
    always): the boolean mask, the padding, causality and the window, as
    ops/attention.py allowed_keys."""
    b, h, i, j = at
    conds: list[Expr] = []
    mask = ins[MASK]
    if mask is not None:
        if mask.shape[-1] < geo.total:       # keys past the mask's end are masked
            conds.append(Bin("<", j, const(mask.shape[-1])))
        if mask.dtype.scalar == "bool":
            conds.append(_mask_load(mask, at, geo.total))
    offset: Expr = const(geo.past_len)
    if ins[NONPAD] is not None:
        valid = cast(ins[NONPAD].load((b,)), "int32")
        conds.append(Bin("<", j, valid))
        offset = sub(valid, const(geo.q_len))
    diff = sub(add(i, offset), j)            # how far key j lies before the query
    if opts.causal:
        conds.append(Bin(">=", diff, const(0)))
    if opts.left_window >= 0:
        conds.append(Bin("<=", diff, const(opts.left_window)))
    if opts.right_window >= 0:
        conds.append(Bin(">=", diff, const(-opts.right_window)))
    if not conds:
        return None
    out = conds[0]
    for c in conds[1:]:
        out = Bin("and", out, c)
    return out


def _mask_load(mask: TensorRef, at: tuple, total: int) -> Expr:
    """attn_mask broadcast to [b, h, i, j], j clamped into a mask shorter
    than the `total` keys (the positions past its end are masked by _allowed)."""
    idx = list(broadcast_index(at, mask.shape))
    if 1 < mask.shape[-1] < total:
        idx[-1] = Bin("min", at[3], const(mask.shape[-1] - 1))
    return mask.load(tuple(idx))


def _bias(ctx: LowerCtx, ins, geo: Geometry, opts: Options, at: tuple) -> Expr:
    """What is added to score (b, h, i, j): the float mask or 0 where the key
    is allowed, -inf where not."""
    f32 = dt("float32")
    mask = ins[MASK]
    value = (_mask_load(mask, at, geo.total) if mask is not None and mask.dtype.is_float
             else const_like(0, f32))
    allowed = _allowed(ctx, ins, geo, opts, at)
    return value if allowed is None else Select(allowed, value, _neg_inf(f32))


def _dot(ctx: LowerCtx, n: int, a: Callable[[Var], Expr], b: Callable[[Var], Expr],
         name: str) -> tuple[Stmt, Var]:
    acc = ctx.fresh(name, "float32")
    d = ctx.fresh("d")
    return seq(Decl(acc, const_like(0, acc.dtype)),
               For(d, n, Assign(acc, Bin("+", acc, Bin("*", a(d), b(d)))))), acc


@kernel_rule("Attention")
def _attention(ctx: LowerCtx, ins, emit):
    ins = list(ins) + [None] * (7 - len(ins))
    geo = geometry(ctx.node, ctx.in_types)
    opts = options(ctx.node, ctx.in_types, geo)
    outputs = len(ctx.node.outputs)
    f32, sm = dt("float32"), dt(opts.softmax_dtype)
    q = head_view(ins[Q], geo.three_d, geo.head)
    keys = _runs(ins[PAST_KEY], ins[K], geo, geo.head)
    values = _runs(ins[PAST_VALUE], ins[V], geo, geo.v_head)
    row = ctx.scratch_buffer("scores", sm, (geo.total,))

    def query(at: dict) -> Stmt:
        b, h, i = at[0], at[1], at[2]
        kv = Bin("/", h, const(geo.group)) if geo.group > 1 else h
        top, top_bias = ctx.fresh("top", sm), ctx.fresh("top_bias", f32)

        def score(j: Var, load: HeadLoad) -> Stmt:
            dot, acc = _dot(ctx, geo.head, lambda d: q(b, h, i, d), lambda d: load(b, kv, j, d),
                            "qk")
            s: Expr = Bin("*", acc, const_like(opts.scale, f32))
            if opts.softcap > 0:
                cap = const_like(opts.softcap, f32)
                s = Bin("*", cap, math_call("tanh", Bin("/", s, cap)))
            capped, bias = ctx.fresh("score", f32), ctx.fresh("bias", f32)
            logit = ctx.fresh("logit", f32)
            stmts = [dot, Decl(capped, s), Decl(bias, _bias(ctx, ins, geo, opts, (b, h, i, j))),
                     Decl(logit, Bin("+", capped, bias)),
                     Store(row, j, cast(logit, sm)),
                     Assign(top, Bin("max", top, cast(logit, sm))),
                     Assign(top_bias, Bin("max", top_bias, bias))]
            if outputs > 3 and opts.qk_mode != QK_SOFTMAX:
                stmts.append(emit(3, (b, h, i, j),
                                  logit if opts.qk_mode == QK_BIASED else capped))
            return seq(*stmts)

        # the max shifts the exponentials; a row of -inf shifts by 0 and sums to 0
        shift, total, inv = ctx.fresh("shift", sm), ctx.fresh("sum", sm), ctx.fresh("inv", sm)
        j = ctx.fresh("j")
        sum_exp = seq(Decl(total, const_like(0, sm)), For(j, geo.total, Assign(
            total, Bin("+", total, math_call("exp", Bin("-", Load(row, j), shift))))))
        # a query whose every key is masked attends to nothing: Y = 0
        dead = Bin("==", top_bias, _neg_inf(f32))
        k = ctx.fresh("j")
        p = ctx.fresh("p", f32)
        prob = Select(dead, const_like(0, f32), cast(
            Bin("*", math_call("exp", Bin("-", Load(row, k), shift)), inv), f32))
        normalize = For(k, geo.total, seq(
            Decl(p, prob), Store(row, k, cast(p, sm)),
            *([emit(3, (b, h, i, k), p)] if outputs > 3 and opts.qk_mode == QK_SOFTMAX else [])))

        def output(e: Var) -> Stmt:
            acc = ctx.fresh("y", f32)
            weighted = _over_runs(ctx, values, lambda j, load: Assign(acc, Bin(
                "+", acc, Bin("*", cast(Load(row, j), f32), load(b, kv, j, e)))))
            y_at = (b, i, add(mul(h, const(geo.v_head)), e)) if geo.three_d else (b, h, i, e)
            return seq(Decl(acc, const_like(0, f32)), weighted, emit(0, y_at, acc))
        ev = ctx.fresh("e")
        return seq(
            Decl(top, _neg_inf(sm)), Decl(top_bias, _neg_inf(f32)),
            _over_runs(ctx, keys, score),
            Decl(shift, Select(Bin("==", top, _neg_inf(sm)), const_like(0, sm), top)),
            sum_exp,
            Decl(inv, Bin("/", const_like(1, sm), Select(
                Bin("==", total, const_like(0, sm)), const_like(1, sm), total))),
            normalize, For(ev, geo.v_head, output(ev)))

    rows = loops(ctx, (geo.batch, geo.q_heads, geo.q_len), range(3), query, "q")
    caches = [_present(ctx, ins[past], ins[new], geo, size, emit, k)
              for k, past, new, size in ((1, PAST_KEY, K, geo.head),
                                         (2, PAST_VALUE, V, geo.v_head)) if k < outputs]
    return seq(rows, *caches)


def _present(ctx: LowerCtx, past: TensorRef | None, new: TensorRef, geo: Geometry, size: int,
             emit, k: int) -> Stmt:
    """present_key / present_value: the cache, then the new positions."""
    runs = _runs(past, new, geo, size)

    def head(at: dict) -> Stmt:
        b, h = at[0], at[1]

        def copy(j: Var, load: HeadLoad) -> Stmt:
            d = ctx.fresh("d")
            return For(d, size, emit(k, (b, h, j, d), load(b, h, j, d)))
        return _over_runs(ctx, runs, copy)
    return loops(ctx, (geo.batch, geo.kv_heads), range(2), head, "c")


# ---- RotaryEmbedding ----------------------------------------------------------------------

@kernel_rule("RotaryEmbedding")
def _rotary(ctx: LowerCtx, ins, emit):
    geo = rotary_geometry(ctx.node, ctx.in_types)
    x, cos, sin = ins[X], ins[COS], ins[SIN]
    positions = ins[POSITIONS] if len(ins) > POSITIONS else None
    if positions is not None and positions.value is None:
        precheck(ctx, positions, (cos.shape[0],))
    view = head_view(x, geo.three_d, geo.head)

    def out_at(b, h, s, d) -> tuple:
        return (b, s, add(mul(h, const(geo.head)), d)) if geo.three_d else (b, h, s, d)

    def token(at: dict) -> Stmt:
        b, h, s = at[0], at[1], at[2]
        if positions is None:
            cache_at: Callable = lambda k: (b, s, k)                       # noqa: E731
            decls = []
        else:
            pos = ctx.fresh("pos")
            decls = [Decl(pos, position(positions.load((b, s)), cos.shape[0]))]
            cache_at = lambda k: (pos, k)                                  # noqa: E731
        k = ctx.fresh("k")
        if geo.interleaved:
            first, second = mul(k, const(2)), add(mul(k, const(2)), const(1))
        else:
            first, second = k, add(k, const(geo.half))
        c, sn = ctx.fresh("c", "float32"), ctx.fresh("s", "float32")
        x1, x2 = ctx.fresh("x1", "float32"), ctx.fresh("x2", "float32")
        pair = For(k, geo.half, seq(
            Decl(c, cos.load(cache_at(k))), Decl(sn, sin.load(cache_at(k))),
            Decl(x1, view(b, h, s, first)), Decl(x2, view(b, h, s, second)),
            emit(0, out_at(b, h, s, first), Bin("-", Bin("*", c, x1), Bin("*", sn, x2))),
            emit(0, out_at(b, h, s, second), Bin("+", Bin("*", sn, x1), Bin("*", c, x2)))))
        d = ctx.fresh("d")
        rest = (For(d, geo.head - geo.rotary, emit(0, out_at(b, h, s, d), view(b, h, s, d)),
                    start=geo.rotary) if geo.rotary < geo.head else None)
        return seq(*decls, pair, *([rest] if rest else []))
    return loops(ctx, (geo.batch, geo.heads, geo.seq), range(3), token, "t")

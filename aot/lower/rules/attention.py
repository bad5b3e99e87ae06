"""Rules for the transformer ops of aot/ops/attention.py.

Attention is one loop nest, not MatMul/Softmax kernels with their
[batch, heads, q, keys] scores in the arena: for each query row the scores
go into one scratch row of `keys` elements (the only workspace), then three
passes over it (max, sum of exponentials, probabilities) and one product
with V. Masks are computed where a score is, never materialized. The cache
(past_key, then K) is walked as two runs of key positions, so no load
chooses between two tensors. Grouped-query heads read their key/value head
h / group; 3-D inputs are read in place at [b, s, h * size + d].

SwiGLU and TensorScatter are value rules (they inline into their neighbours);
RotaryEmbedding, CausalConvWithState and LinearAttention are small loop
nests, LinearAttention's state in a [key, value] scratch buffer.
"""
from __future__ import annotations

from typing import Callable

from aot.ir.tir import (INT32, Assign, Bin, Broadcast, Cast, Decl, Expr, For, ForKind, If, Load,
                        Select, Stmt, Store, Unary, Var, add, const, dt, mul, seq, sub)
from aot.lower.arith.bounds import IndexCheck, fail_if, position, precheck
from aot.lower.rules.elementwise import broadcast_index, cast, const_like, math_call, select
from aot.lower.rules.reduce import loops
from aot.lower.rules import LowerCtx, TensorRef, kernel_rule, value_rule
from aot.ops.attention import (BETA, CACHE, CONV_BIAS, CONV_STATE, CONV_W, CONV_X, COS, DECAY,
                               K, LK, LQ, LSTATE, LV, MASK, NONPAD, PAST_KEY, PAST_VALUE,
                               POSITIONS, Q, QK_BIASED, QK_SOFTMAX, SIN, UPDATE, V, WRITE_AT, X,
                               Geometry, Options, geometry, linear_geometry, options,
                               rotary_geometry, scatter_axis)

# (batch, head, position, element[, lanes]) -> element, or `lanes` consecutive ones
HeadLoad = Callable[..., Expr]


def head_view(ref: TensorRef, three_d: bool, size: int) -> HeadLoad:
    """Element [b, h, s, d] of a 4-D tensor, or of a 3-D one holding heads of
    `size` elements side by side in its last axis."""
    if three_d:
        return lambda b, h, s, d, lanes=1: ref.load((b, s, add(mul(h, const(size)), d)), lanes)
    return lambda b, h, s, d, lanes=1: ref.load((b, h, s, d), lanes)


def _in_lanes(ctx: LowerCtx, n: int, body: Callable[[Expr, int], Stmt]) -> Stmt:
    """for e < n: body(e, lanes), `lanes` elements at a time (the target's
    float32 vector), then one at a time for the remainder."""
    lanes = ctx.target.lanes(32)
    main = n - n % lanes if lanes > 1 else 0
    parts = []
    if main == lanes:           # one vector: no loop
        parts.append(body(const(0), lanes))
    elif main:
        e = ctx.fresh("e")
        parts.append(For(e, main, body(e, lanes), ForKind.VECTORIZED, step=lanes))
    if n > main:
        e = ctx.fresh("e")
        parts.append(For(e, n - main, body(e, 1), start=main))
    return seq(*parts)


def _runs(past: TensorRef | None, new: TensorRef, geo: Geometry,
          size: int) -> list[tuple[int, int, HeadLoad]]:
    """The key (or value) positions as runs (start, count, load at an
    absolute position): the cache first, then the new ones."""
    fresh = head_view(new, geo.three_d, size)
    runs = []
    if past is not None and geo.past_len:
        runs.append((0, geo.past_len, lambda b, h, j, d, lanes=1: past.load((b, h, j, d), lanes)))
    runs.append((geo.past_len, geo.kv_len,
                 lambda b, h, j, d, lanes=1: fresh(b, h, sub(j, const(geo.past_len)), d, lanes)))
    return runs


def _over_runs(ctx: LowerCtx, runs, body: Callable[[Var, HeadLoad], Stmt]) -> Stmt:
    stmts = []
    for start, count, load in runs:
        j = ctx.fresh("j")
        stmts.append(For(j, count, body(j, load), start=start))
    return seq(*stmts)


def _splat(e: Expr, lanes: int) -> Expr:
    return e if lanes == 1 else Broadcast(e, lanes)


def _neg_inf(d) -> Expr:
    return const_like(float("-inf"), d)


def _allowed(ins, geo: Geometry, opts: Options, at: tuple) -> Expr | None:
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


def _added(ins, geo: Geometry, at: tuple) -> Expr:
    """What is added to an allowed key's score: the float mask, or 0."""
    mask = ins[MASK]
    if mask is not None and mask.dtype.is_float:
        return _mask_load(mask, at, geo.total)
    return const_like(0, dt("float32"))


def _dot(ctx: LowerCtx, n: int, a: Callable[..., Expr], b: Callable[..., Expr],
         name: str) -> tuple[Stmt, Var]:
    """acc = sum over d < n of a(d) * b(d), both contiguous in d.

    A scalar sum is one chain of dependent adds (C may not reorder float
    sums); a vector of partial sums, added up at the end through the
    `lanes` scratch, runs `lanes` chains at once."""
    f32 = dt("float32")
    acc = ctx.fresh(name, f32)
    lanes = ctx.target.lanes(32)
    if lanes == 1 or n < 2 * lanes:
        d = ctx.fresh("d")
        return seq(Decl(acc, const_like(0, f32)),
                   For(d, n, Assign(acc, Bin("+", acc, Bin("*", a(d), b(d)))))), acc
    main = n - n % lanes
    part = ctx.fresh(f"{name}_lanes", f32.with_lanes(lanes))
    spill = ctx.scratch.get("dot_lanes") or ctx.scratch_buffer("dot_lanes", f32, (lanes,))
    d, r = ctx.fresh("d"), ctx.fresh("d")
    total: Expr = Load(spill, const(0))
    for k in range(1, lanes):
        total = Bin("+", total, Load(spill, const(k)))
    stmts = [Decl(part, const_like(0, part.dtype)),
             For(d, main, Assign(part, Bin("+", part, Bin("*", a(d, lanes), b(d, lanes)))),
                 ForKind.VECTORIZED, step=lanes),
             Store(spill, const(0), part), Decl(acc, total)]
    if n > main:
        stmts.append(For(r, n - main, Assign(acc, Bin("+", acc, Bin("*", a(r), b(r)))),
                         start=main))
    return seq(*stmts), acc


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
    y_row = ctx.scratch_buffer("y_row", f32, (geo.v_head,))

    def query(at: dict) -> Stmt:
        b, h, i = at[0], at[1], at[2]
        kv = Bin("/", h, const(geo.group)) if geo.group > 1 else h
        top, top_bias = ctx.fresh("top", sm), ctx.fresh("top_bias", f32)

        def score(j: Var, load: HeadLoad) -> Stmt:
            """The key's logit into the row; a masked key's is -inf, and
            unless its raw score is an output it is not computed at all."""
            at = (b, h, i, j)
            dot, acc = _dot(ctx, geo.head, lambda d, lanes=1: q(b, h, i, d, lanes),
                            lambda d, lanes=1: load(b, kv, j, d, lanes), "qk")
            s: Expr = Bin("*", acc, const_like(opts.scale, f32))
            if opts.softcap > 0:
                cap = const_like(opts.softcap, f32)
                s = Bin("*", cap, math_call("tanh", Bin("/", s, cap)))
            capped, bias = ctx.fresh("score", f32), ctx.fresh("bias", f32)
            logit = ctx.fresh("logit", f32)
            allowed = _allowed(ins, geo, opts, at)
            shows_raw = outputs > 3 and opts.qk_mode not in (QK_BIASED, QK_SOFTMAX)
            added = _added(ins, geo, at)
            if allowed is not None and shows_raw:
                added = Select(allowed, added, _neg_inf(f32))
            stmts = [dot, Decl(capped, s), Decl(bias, added),
                     Decl(logit, Bin("+", capped, bias)),
                     Store(row, j, cast(logit, sm)),
                     Assign(top, Bin("max", top, cast(logit, sm))),
                     Assign(top_bias, Bin("max", top_bias, bias))]
            if outputs > 3 and opts.qk_mode != QK_SOFTMAX:
                stmts.append(emit(3, at, logit if opts.qk_mode == QK_BIASED else capped))
            if allowed is None or shows_raw:
                return seq(*stmts)
            masked = [Store(row, j, _neg_inf(sm))]
            if outputs > 3 and opts.qk_mode == QK_BIASED:
                masked.append(emit(3, at, _neg_inf(f32)))
            return If(allowed, seq(*stmts), seq(*masked))

        # the max shifts the exponentials; a row of -inf shifts by 0 and sums to 0
        shift, total, inv = ctx.fresh("shift", sm), ctx.fresh("sum", sm), ctx.fresh("inv", sm)
        j = ctx.fresh("j")
        ex = ctx.fresh("ex", sm)
        sum_exp = seq(Decl(total, const_like(0, sm)), For(j, geo.total, seq(
            Decl(ex, math_call("exp", Bin("-", Load(row, j), shift))), Store(row, j, ex),
            Assign(total, Bin("+", total, ex)))))
        # a query whose every key is masked attends to nothing: Y = 0
        dead = Bin("==", top_bias, _neg_inf(f32))
        k = ctx.fresh("j")
        p = ctx.fresh("p", f32)
        prob = Select(dead, const_like(0, f32), cast(Bin("*", Load(row, k), inv), f32))
        normalize = For(k, geo.total, seq(
            Decl(p, prob), Store(row, k, cast(p, sm)),
            *([emit(3, (b, h, i, k), p)] if outputs > 3 and opts.qk_mode == QK_SOFTMAX else [])))

        # Y's row: each key's value row, weighted by its probability, added
        # into an accumulator row (a vector along the value's elements)
        def weigh(j: Var, load: HeadLoad) -> Stmt:
            pj = ctx.fresh("pj", f32)
            return seq(Decl(pj, cast(Load(row, j), f32)), _in_lanes(
                ctx, geo.v_head, lambda e, n: Store(y_row, e, Bin(
                    "+", Load(y_row, e, n), Bin("*", _splat(pj, n), load(b, kv, j, e, n))))))

        def y_at(e: Var) -> tuple:
            return (b, i, add(mul(h, const(geo.v_head)), e)) if geo.three_d else (b, h, i, e)
        output = seq(
            _in_lanes(ctx, geo.v_head,
                      lambda e, n: Store(y_row, e, const_like(0, f32.with_lanes(n)))),
            _over_runs(ctx, values, weigh),
            _in_lanes(ctx, geo.v_head, lambda e, n: emit(0, y_at(e), Load(y_row, e, n))))
        return seq(
            Decl(top, _neg_inf(sm)), Decl(top_bias, _neg_inf(f32)),
            _over_runs(ctx, keys, score),
            Decl(shift, Select(Bin("==", top, _neg_inf(sm)), const_like(0, sm), top)),
            sum_exp,
            Decl(inv, Bin("/", const_like(1, sm), Select(
                Bin("==", total, const_like(0, sm)), const_like(1, sm), total))),
            normalize, output)

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
            return _in_lanes(ctx, size, lambda d, n: emit(k, (b, h, j, d), load(b, h, j, d, n)))
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


# ---- SwiGLU ----------------------------------------------------------------------------

def _silu(x: Expr, alpha: float = 1.0) -> Expr:
    """x * sigmoid(alpha * x)."""
    scaled = x if alpha == 1.0 else Bin("*", const_like(alpha, x), x)
    return Bin("/", x, Bin("+", const_like(1, x), math_call("exp", Unary("neg", scaled))))


@value_rule("SwiGLU")
def _swiglu(ctx: LowerCtx, ins, idx, lanes):
    a, b = ins
    return Bin("*", _silu(a.load(idx, lanes), float(ctx.attrs.get("alpha", 1.0))),
               b.load(idx, lanes))


# ---- TensorScatter -----------------------------------------------------------------------

def _check_writes(ctx: LowerCtx, writes: TensorRef, last: int) -> None:
    """Linear mode, write indices known at run time: each must lie in
    [0, last], or the kernel returns an index error before its loops."""
    key = f"{ctx.node.name}/{writes.name}"
    if key in ctx.prechecks:
        return
    b, flag = ctx.fresh("c0"), ctx.fresh("bad")
    w = writes.load((b,))
    bad = Bin("|", Cast(INT32, Bin("<", w, const(0, "int64"))),
              Cast(INT32, Bin(">", w, const(last, "int64"))))
    check = IndexCheck(ctx.node.name, ctx.node.op, writes.name, (last + 1,))
    ctx.prechecks[key] = seq(Decl(flag, const(0)),
                             For(b, writes.shape[0], Assign(flag, Bin("|", flag, bad))),
                             fail_if(ctx, Bin("!=", flag, const(0)), check))


@value_rule("TensorScatter")
def _tensor_scatter(ctx: LowerCtx, ins, idx, lanes):
    cache, update = ins[CACHE], ins[UPDATE]
    writes = ins[WRITE_AT] if len(ins) > WRITE_AT else None
    axis = scatter_axis(ctx)
    if lanes > 1 and axis == len(cache.shape) - 1:
        raise ctx.unsupported(f"a {lanes}-lane vector of TensorScatter along its last axis")
    size, count = cache.shape[axis], update.shape[axis]
    start = cast(writes.load((idx[0],)), "int32") if writes is not None else const(0)
    step = sub(idx[axis], start)            # which update lands at this position
    if ctx.attrs.get("mode", "linear") == "circular":
        wrapped = Bin("%", step, const(size))
        step = Select(Bin("<", wrapped, const(0)), add(wrapped, const(size)), wrapped)
        written = Bin("<", step, const(count))
    else:
        if writes is not None and writes.value is None:
            _check_writes(ctx, writes, size - count)
        written = Bin("and", Bin(">=", step, const(0)), Bin("<", step, const(count)))
    inside = Bin("min", Bin("max", step, const(0)), const(count - 1))
    at = tuple(inside if a == axis else i for a, i in enumerate(idx))
    return select(written, update.load(at, lanes), cache.load(idx, lanes))


# ---- CausalConvWithState -------------------------------------------------------------------

@kernel_rule("CausalConvWithState")
def _causal_conv(ctx: LowerCtx, ins, emit):
    ins = list(ins) + [None] * (4 - len(ins))
    x, w, bias, state = ins[CONV_X], ins[CONV_W], ins[CONV_BIAS], ins[CONV_STATE]
    batch, channels, length = x.shape
    k = w.shape[2]
    silu = ctx.attrs.get("activation", "none") != "none"
    f32 = dt("float32")

    def padded(b: Expr, c: Expr, p: Expr) -> Expr:
        """Position p of the past state followed by the input; both loads
        stay in bounds whichever the select keeps."""
        new = x.load((b, c, Bin("max", sub(p, const(k - 1)), const(0))))
        if state is None:
            return Select(Bin("<", p, const(k - 1)), const_like(0, f32), new)
        old = state.load((b, c, Bin("min", p, const(k - 2))))
        return Select(Bin("<", p, const(k - 1)), old, new)

    def channel(at: dict) -> Stmt:
        b, c = at[0], at[1]
        t, m = ctx.fresh("t"), ctx.fresh("m")
        acc, y = ctx.fresh("acc", f32), ctx.fresh("y", f32)
        init = bias.load((c,)) if bias is not None else const_like(0, f32)
        conv = For(t, length, seq(
            Decl(acc, init),
            For(m, k, Assign(acc, Bin("+", acc, Bin("*", w.load((c, const(0), m)),
                                                    padded(b, c, add(t, m)))))),
            Decl(y, _silu(acc) if silu else acc), emit(0, (b, c, t), y)))
        s = ctx.fresh("s")
        keep = For(s, k - 1, emit(1, (b, c, s), padded(b, c, add(s, const(length)))))
        return seq(conv, keep) if k > 1 else conv
    return loops(ctx, (batch, channels), range(2), channel, "i")


# ---- LinearAttention -----------------------------------------------------------------------

@kernel_rule("LinearAttention")
def _linear_attention(ctx: LowerCtx, ins, emit):
    """Per batch and key/value head, the [key, value] state walks the time
    steps in a scratch buffer: decay, delta correction, rank-1 update, then
    each query head of the group reads it."""
    ins = list(ins) + [None] * (6 - len(ins))
    geo = linear_geometry(ctx.node, ctx.in_types)
    f32 = dt("float32")
    q, k, v = (head_view(ins[LQ], True, geo.key), head_view(ins[LK], True, geo.key),
               head_view(ins[LV], True, geo.value))
    state = ctx.scratch_buffer("state", f32, (geo.key, geo.value))
    fresh_v = ctx.scratch_buffer("update", f32, (geo.value,)) if geo.delta else None

    def cell(d: Expr, e: Expr) -> Expr:
        return add(mul(d, const(geo.value)), e)

    def over_state(body: Callable[[Var, Var], Stmt]) -> Stmt:
        d, e = ctx.fresh("d"), ctx.fresh("e")
        return For(d, geo.key, For(e, geo.value, body(d, e)))

    def head(at: dict) -> Stmt:
        b, h = at[0], at[1]
        past = ins[LSTATE]
        init = over_state(lambda d, e: Store(state, cell(d, e), past.load((b, h, d, e))
                                             if past is not None else const_like(0, f32)))
        t = ctx.fresh("t")
        steps = [For(t, geo.time, _linear_step(ctx, ins, geo, state, fresh_v, b, h, t,
                                               q, k, v, over_state, cell, emit))]
        out = over_state(lambda d, e: emit(1, (b, h, d, e), Load(state, cell(d, e))))
        return seq(init, *steps, out)
    return loops(ctx, (geo.batch, geo.kv_heads), range(2), head, "i")


def _linear_step(ctx, ins, geo, state, fresh_v, b, h, t, q, k, v, over_state, cell, emit):
    f32 = dt("float32")
    stmts = []
    if geo.gated:
        d, e = ctx.fresh("d"), ctx.fresh("e")
        factor = ctx.fresh("decay", f32)
        at = (b, t, add(mul(h, const(geo.key)), d)) if geo.decay_per_key else (b, t, h)
        stmts.append(For(d, geo.key, seq(
            Decl(factor, math_call("exp", ins[DECAY].load(at))),
            For(e, geo.value, Store(state, cell(d, e), Bin("*", Load(state, cell(d, e)),
                                                         factor))))))
    if geo.delta:
        # v - what the state recalls for this key, scaled by beta
        e, d = ctx.fresh("e"), ctx.fresh("d")
        recall = ctx.fresh("recall", f32)
        beta = ins[BETA].load((b, t, h if geo.beta_per_head else const(0)))
        stmts.append(For(e, geo.value, seq(
            Decl(recall, const_like(0, f32)),
            For(d, geo.key, Assign(recall, Bin("+", recall, Bin(
                "*", Load(state, cell(d, e)), k(b, h, t, d))))),
            Store(fresh_v, e, Bin("*", beta, Bin("-", v(b, h, t, e), recall))))))
        value = lambda e: Load(fresh_v, e)              # noqa: E731
    else:
        value = lambda e: v(b, h, t, e)                 # noqa: E731
    stmts.append(over_state(lambda d, e: Store(state, cell(d, e), Bin(
        "+", Load(state, cell(d, e)), Bin("*", k(b, h, t, d), value(e))))))
    def read(hq: Expr) -> Stmt:
        """Query head hq's output at step t."""
        e, d = ctx.fresh("e"), ctx.fresh("d")
        acc = ctx.fresh("y", f32)
        return For(e, geo.value, seq(
            Decl(acc, const_like(0, f32)),
            For(d, geo.key, Assign(acc, Bin("+", acc, Bin("*", q(b, hq, t, d),
                                                          Load(state, cell(d, e)))))),
            emit(0, (b, t, add(mul(hq, const(geo.value)), e)),
                 Bin("*", const_like(geo.scale, f32), acc))))
    if geo.group == 1:
        stmts.append(read(h))
    else:
        g = ctx.fresh("g")
        stmts.append(For(g, geo.group, read(add(mul(h, const(geo.group)), g))))
    return seq(*stmts)

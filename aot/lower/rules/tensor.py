"""Value rules for data movement (aot/ops/tensor.py, DepthToSpace/SpaceToDepth):
each computes the input index an output element comes from.

A vector (`lanes` > 1) is `lanes` consecutive elements along the output's
last axis; a rule can load it as one vector only when those elements are
consecutive along the input's last axis too. Where an op breaks that (a
transpose of the last axis, a strided slice of it, ...) the vector form
raises an UnsupportedError; the scalar form always works.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from aot.ir.tir import Bin, Expr, Load, Select, add, const, dt, flat_index, mul, sub
from aot.lower.arith.bounds import position, precheck
from aot.lower.rules.elementwise import broadcast_load, const_like, scalar_load, select
from aot.lower.rules.reduce import loops
from aot.lower.rules import LowerCtx, TensorRef, kernel_rule, value_rule
from aot.ops.nn import nchw_shape
from aot.ops.registry import Sig
from aot.ops.tensor import pad_widths, slice_params


def _div(a: Expr, d: int) -> Expr:
    return a if d == 1 else Bin("/", a, const(d))


def _mod(a: Expr, d: int) -> Expr:
    return const(0) if d == 1 else Bin("%", a, const(d))


def vector_ok(ctx: LowerCtx, lanes: int, ok: bool, why: str) -> None:
    if lanes > 1 and not ok:
        raise ctx.unsupported(f"a {lanes}-lane vector of {ctx.node.op} ({why})")


# ---- reshapes: the flat index is preserved ---------------------------------------------

def _blocks(out_shape: Sequence[int], in_shape: Sequence[int]):
    """Pair up runs of output and input axes with equal element counts.

    Yields (out_axes, in_axes); size-1 axes are left out (their index is 0).
    Within a block the row-major offset is the same on both sides, so a
    reshape that keeps most dimensions (Unsqueeze, a Flatten of the last
    two) costs a division only where dimensions really merge or split.
    """
    outs = [a for a, d in enumerate(out_shape) if d != 1]
    ins = [a for a, d in enumerate(in_shape) if d != 1]
    i = j = 0
    while i < len(outs) or j < len(ins):
        bo, bi = [outs[i]], [ins[j]]
        po, pi = out_shape[outs[i]], in_shape[ins[j]]
        i, j = i + 1, j + 1
        while po != pi:
            if po < pi:
                bo.append(outs[i])
                po *= out_shape[outs[i]]
                i += 1
            else:
                bi.append(ins[j])
                pi *= in_shape[ins[j]]
                j += 1
        yield bo, bi


def reshape_index(idx: Sequence[Expr], out_shape: Sequence[int],
                  in_shape: Sequence[int]) -> tuple[Expr, ...]:
    """The input multi-index holding the same flat element as idx."""
    at: list[Expr] = [const(0)] * len(in_shape)
    if 0 in out_shape:
        return tuple(at)        # no elements: nothing is ever loaded
    for bo, bi in _blocks(out_shape, in_shape):
        offset = flat_index(tuple(idx[a] for a in bo), tuple(out_shape[a] for a in bo))
        stride = int(np.prod([in_shape[a] for a in bi], dtype=np.int64))
        for a in bi:
            stride //= in_shape[a]
            at[a] = offset if len(bi) == 1 else _mod(_div(offset, stride), in_shape[a])
    return tuple(at)


@value_rule("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def _reshape(ctx: LowerCtx, ins, idx, lanes):
    x = ins[0]
    out_shape, in_shape = ctx.out_types[0].shape, x.shape
    if x.buffer is not None and (x.value is None or x.value.size > 1):
        # in memory already: the same flat offset, one load whatever the shapes
        return Load(x.buffer, flat_index(tuple(idx), out_shape), lanes)
    vector_ok(ctx, lanes, bool(out_shape) and bool(in_shape)
              and out_shape[-1] == in_shape[-1], "the last axis changes")
    return x.load(reshape_index(idx, out_shape, in_shape), lanes)


# ---- Transpose / Slice / Expand / Tile ----------------------------------------------------

@value_rule("Transpose")
def _transpose(ctx: LowerCtx, ins, idx, lanes):
    rank = len(ins[0].shape)
    perm = ctx.attrs.get("perm")
    perm = list(range(rank))[::-1] if perm is None else [int(p) for p in perm]
    vector_ok(ctx, lanes, perm[-1] == rank - 1, "the last axis moves")
    at: list[Expr] = [const(0)] * rank
    for k, p in enumerate(perm):
        at[p] = idx[k]
    return ins[0].load(tuple(at), lanes)


def _slice_params(ctx: LowerCtx, ins) -> list[tuple[int, int]]:
    """(start, step) per input axis, clamped as the reference does."""
    values = tuple(r.value if r is not None else None for r in ins)
    for i in range(1, len(ins)):
        if ins[i] is not None and ins[i].value is None:
            raise ctx.unsupported(f"Slice with a runtime input {i}")
    sig = Sig(ctx.node, ctx.in_types, values)
    out = []
    for s, d in zip(slice_params(sig), ins[0].shape):
        start, _, step = s.indices(d)
        out.append((start, step))
    return out


@value_rule("Slice")
def _slice(ctx: LowerCtx, ins, idx, lanes):
    params = _slice_params(ctx, ins)
    vector_ok(ctx, lanes, not params or params[-1][1] == 1, "a strided last axis")
    at = tuple(add(const(start), mul(i, const(step))) for i, (start, step) in zip(idx, params))
    return ins[0].load(at, lanes)


@value_rule("Expand")
def _expand(ctx: LowerCtx, ins, idx, lanes):
    return broadcast_load(ins[0], idx, lanes)


@value_rule("Tile")
def _tile(ctx: LowerCtx, ins, idx, lanes):
    shape = ins[0].shape
    reps = ctx.out_types[0].shape
    vector_ok(ctx, lanes, not shape or shape[-1] == reps[-1], "a repeated last axis")
    return ins[0].load(tuple(i if d == r else _mod(i, d)
                             for i, d, r in zip(idx, shape, reps)), lanes)


# ---- Pad --------------------------------------------------------------------------------

def _pad_widths(ctx: LowerCtx, ins) -> list[tuple[int, int]]:
    for i in (1, 3):
        if i < len(ins) and ins[i] is not None and ins[i].value is None:
            raise ctx.unsupported(f"Pad with a runtime input {i}")
    return pad_widths(Sig(ctx.node, ctx.in_types, tuple(r.value if r else None for r in ins)))


def _pad_source(i: Expr, n: int, mode: str, before: bool, after: bool) -> Expr:
    """Where output position i (relative to the data start) reads from, for
    data of length n padded before and/or after: clamped for edge (and for
    constant, whose outside positions are replaced anyway), mirrored for
    reflect, modular for wrap."""
    if mode == "wrap":
        return Bin("%", add(Bin("%", i, const(n)), const(n)), const(n))
    out = i
    if after:
        high = sub(const(2 * n - 2), i) if mode == "reflect" else const(n - 1)
        out = Select(Bin(">=", i, const(n)), high, out)
    if before:   # one reflection suffices: pads < n (checked by infer)
        low = sub(const(0), i) if mode == "reflect" else const(0)
        out = Select(Bin("<", i, const(0)), low, out)
    return out


@value_rule("Pad")
def _pad(ctx: LowerCtx, ins, idx, lanes):
    x = ins[0]
    mode = ctx.attrs.get("mode", "constant")
    widths = _pad_widths(ctx, ins)
    vector_ok(ctx, lanes, not widths or widths[-1] == (0, 0), "a padded last axis")
    at, inside = [], None
    for i, d, (b, e) in zip(idx, x.shape, widths):
        if (b, e) == (0, 0):
            at.append(i)
            continue
        # negative pads crop: work on the kept part [lo, lo + n)
        lo, n = max(-b, 0), d - max(-b, 0) - max(-e, 0)
        rel = sub(i, const(max(b, 0)))
        at.append(add(_pad_source(rel, n, mode, b > 0, e > 0), const(lo)))
        if mode == "constant" and (b > 0 or e > 0):
            ok = Bin("and", Bin(">=", rel, const(0)), Bin("<", rel, const(n)))
            inside = ok if inside is None else Bin("and", inside, ok)
    value = x.load(tuple(at), lanes)
    if inside is None:
        return value
    if len(ins) > 2 and ins[2] is not None and ins[2].type.size:
        fill = scalar_load(ins[2], lanes)
    else:
        fill = const_like(0, value)
    return select(inside, value, fill)


# ---- Concat / Gather ----------------------------------------------------------------------

@value_rule("Concat")
def _concat(ctx: LowerCtx, ins, idx, lanes):
    parts = [r for r in ins if r is not None and r.type.size]
    rank = len(ctx.out_types[0].shape)
    axis = ctx.attrs.get("axis", 0) % rank
    vector_ok(ctx, lanes, axis != rank - 1 or len(parts) == 1, "joined along the last axis")
    offsets = np.cumsum([0] + [p.shape[axis] for p in parts])
    i = idx[axis]

    def part(k: int) -> Expr:
        # clamped into the part: a vector select (or LLVM's) loads every branch
        at = list(idx)
        pos = sub(i, const(int(offsets[k])))
        if parts[k].shape[axis] == 1:
            pos = const(0)
        if k > 0 and parts[k].shape[axis] > 1:
            pos = Bin("max", pos, const(0))
        if k < len(parts) - 1 and parts[k].shape[axis] > 1:
            pos = Bin("min", pos, const(parts[k].shape[axis] - 1))
        at[axis] = pos
        return parts[k].load(tuple(at), lanes)

    # the last part needs no test; each earlier one is taken below its end
    out = part(len(parts) - 1)
    for k in range(len(parts) - 2, -1, -1):
        out = select(Bin("<", i, const(int(offsets[k + 1]))), part(k), out)
    return out


def _gather_index(ctx: LowerCtx, indices: TensorRef, at: tuple, dim: int) -> Expr:
    """The (non-negative, int32) position along the gathered axis. Constant
    indices were checked by type inference; run-time ones are checked
    before the kernel's loops (bounds.precheck)."""
    if indices.value is not None:
        v = np.asarray(indices.value).astype(np.int64)
        v = np.where(v < 0, v + dim, v).astype(np.int32)
        if v.size == 1:
            return const(int(v.reshape(())))
        return Load(ctx.param("gather_index", v), flat_index(at, v.shape))
    precheck(ctx, indices, (dim,))
    return position(indices.load(at, 1), dim)


@value_rule("Gather")
def _gather(ctx: LowerCtx, ins, idx, lanes):
    x, indices = ins
    rank = len(x.shape)
    axis = ctx.attrs.get("axis", 0) % rank
    vector_ok(ctx, lanes, axis != rank - 1, "gathered along the last axis")
    q = len(indices.shape)
    pos = _gather_index(ctx, indices, tuple(idx[axis:axis + q]), x.shape[axis])
    return x.load(tuple(idx[:axis]) + (pos,) + tuple(idx[axis + q:]), lanes)


# ---- DepthToSpace / SpaceToDepth ------------------------------------------------------------

def _nchw_axes(layout: str) -> tuple[int, int, int, int]:
    """Positions of N, C, H, W in the tensor."""
    return (0, 3, 1, 2) if layout == "NHWC" else (0, 1, 2, 3)


@value_rule("DepthToSpace", "SpaceToDepth")
def _depth_space(ctx: LowerCtx, ins, idx, lanes):
    layout = ctx.attrs.get("layout", "NCHW")
    bs = int(ctx.attrs["blocksize"])
    crd = ctx.attrs.get("mode", "DCR") == "CRD"
    axn, axc, axh, axw = _nchw_axes(layout)
    # NHWC DepthToSpace DCR reads a run of consecutive channels; everything else
    # interleaves the last axis (SpaceToDepth's channel blocks may split a vector)
    vector_ok(ctx, lanes, layout == "NHWC" and not crd and ctx.node.op == "DepthToSpace",
              f"{layout} {ctx.node.op} {'CRD' if crd else 'DCR'} interleaves the last axis")
    n, c, y, xw = idx[axn], idx[axc], idx[axh], idx[axw]
    if ctx.node.op == "DepthToSpace":
        oc = nchw_shape(ctx.out_types[0].shape, layout)[1]
        i, j = _mod(y, bs), _mod(xw, bs)
        block = add(mul(i, const(bs)), j)
        ch = add(mul(c, const(bs * bs)), block) if crd else add(mul(block, const(oc)), c)
        src = {axn: n, axc: ch, axh: _div(y, bs), axw: _div(xw, bs)}
    else:
        ic = nchw_shape(ins[0].shape, layout)[1]
        # output channel = (i*bs + j)*C + ch (DCR) or ch*bs*bs + i*bs + j (CRD)
        if crd:
            ch, block = _div(c, bs * bs), _mod(c, bs * bs)
        else:
            ch, block = _mod(c, ic), _div(c, ic)
        i, j = _div(block, bs), _mod(block, bs)
        src = {axn: n, axc: ch, axh: add(mul(y, const(bs)), i), axw: add(mul(xw, const(bs)), j)}
    return ins[0].load(tuple(src[a] for a in range(4)), lanes)


# ---- several outputs: one output at a time (ctx.output) -------------------------------
# Split and Dropout keep their chain patterns (INJECTIVE, ELEMWISE) and are
# value rules like the rest of their family: the fusion pass never puts a
# node with several outputs in a group with others, so each output becomes
# a loop nest of its own, and the one-output forms (identities that simplify
# removes when it runs) inline like any reshape.

@value_rule("Split")
def _split(ctx: LowerCtx, ins, idx, lanes):
    x = ins[0]
    axis = ctx.attrs.get("axis", 0) % len(x.shape)
    start = sum(ty.shape[axis] for ty in ctx.out_types[:ctx.output])
    at = list(idx)
    at[axis] = add(idx[axis], const(start))
    return x.load(tuple(at), lanes)


@value_rule("Dropout")
def _dropout(ctx: LowerCtx, ins, idx, lanes):
    """Inference Dropout: x, and a mask keeping everything."""
    if ctx.output == 1:
        return const_like(True, dt("bool", lanes))
    return ins[0].load(idx, lanes)


# ---- values known at compile time ----------------------------------------------------

@kernel_rule("Shape", "Size", "ConstantOfShape", "Range")
def _compile_time_kernel(ctx: LowerCtx, ins, emit):
    """These survive folding only where they make a model output (which a
    kernel must write) or a large fill; their value is known, so the kernel
    stores a constant, or copies a table linked in as const data. (OPAQUE,
    so never fused: a loop nest of their own.)"""
    shape = ctx.out_types[0].shape
    rank = len(shape)
    return loops(ctx, shape, range(rank), lambda at: emit(
        0, tuple(at[a] for a in range(rank)),
        _compile_time_value(ctx, ins, tuple(at[a] for a in range(rank)), 1)))


def _compile_time_value(ctx: LowerCtx, ins, idx, lanes):
    from aot.errors import node_label
    from aot.interp import run_node
    from aot.limits import check_compile_time
    from aot.ops import OPS
    from aot.ops.tensor import fill_value

    if OPS[ctx.node.op].needs_values and any(r is not None and r.value is None for r in ins):
        raise ctx.unsupported(f"{ctx.node.op} of a value computed at run time")
    if ctx.node.op == "ConstantOfShape":    # one value, however large the fill
        return const_like(fill_value(ctx.attrs)[0].item(), dt(ctx.out_types[0].dtype, lanes))
    out = ctx.out_types[0]
    check_compile_time(out.size, out.nbytes, node_label(ctx.node))  # before run_node
    types = {n: t for n, t in zip(ctx.node.inputs, ctx.in_types) if n}
    types.update(zip(ctx.node.outputs, ctx.out_types))
    args = [r.value if r is not None else None for r in ins]
    value = run_node(ctx.node, types, args)[0]
    d = dt(value.dtype.name, lanes)
    flat = value.reshape(-1)
    if flat.size and np.all(flat == flat[0]):
        return const_like(flat[0].item(), d)
    table = ctx.param(f"{ctx.node.op.lower()}_values", value)
    return Load(table, flat_index(tuple(idx), value.shape), lanes)

"""Rules for the ops whose addresses come from a tensor's values
(aot/ops/index.py): GatherElements, GatherND and OneHot as value rules,
ScatterElements, ScatterND and MaxUnpool (a scatter into zeros) as kernel
rules.

Every index read at run time is checked before it addresses anything
(aot/lower/arith/bounds.py): the gathers check their whole index tensor before
the kernel's loops, the scatters each index tuple before its stores. OneHot
compares instead of addressing, so it needs no check: an index outside
[-depth, depth) matches no position and its row is all off values, as the
ONNX spec says.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from aot.errors import ShapeError, node_label
from aot.ir.tir import (Bin, Cast, Const, Decl, Expr, Load, Select, Stmt, Store, Var, add,
                        const, dt, flat_index, seq)
from aot.lower.arith.bounds import IndexCheck, any_of, fail_if, outside, position, precheck
from aot.lower.rules.elementwise import cast, const_like
from aot.lower.rules.tensor import vector_ok
from aot.lower.arith.loops import unravel
from aot.lower.rules.reduce import loops
from aot.lower.rules import LowerCtx, TensorRef, kernel_rule, value_rule
from aot.ops.index import reduction


def _axis(ctx: LowerCtx, rank: int, default: int = 0) -> int:
    return int(ctx.attrs.get("axis", default)) % rank


def _positions(ctx: LowerCtx, indices: TensorRef, at: tuple, dims: Sequence[int],
               components: bool) -> list[Expr]:
    """The int32 positions the indices at `at` give, once checked (constant
    indices by type inference, others by the rule's check)."""
    if not components:
        return [position(indices.load(at, 1), dims[0])]
    return [position(indices.load(at + (const(j),), 1), d) for j, d in enumerate(dims)]


# ---- gathers ------------------------------------------------------------------------

@value_rule("GatherElements")
def _gather_elements(ctx: LowerCtx, ins, idx, lanes):
    x, indices = ins
    axis = _axis(ctx, len(x.shape))
    # each lane has its own index: its elements are not consecutive in x
    vector_ok(ctx, lanes, False, "an index per element")
    if indices.value is None:
        precheck(ctx, indices, (x.shape[axis],))
    at = list(idx)
    at[axis] = _positions(ctx, indices, tuple(idx), (x.shape[axis],), False)[0]
    return x.load(tuple(at), lanes)


@value_rule("GatherND")
def _gather_nd(ctx: LowerCtx, ins, idx, lanes):
    x, indices = ins
    b = int(ctx.attrs.get("batch_dims", 0))
    q, k = len(indices.shape), indices.shape[-1]
    dims = tuple(x.shape[b:b + k])
    # the last axis is x's own only when the tuples leave some of x's axes
    vector_ok(ctx, lanes, b + k < len(x.shape), "whole elements gathered")
    if indices.value is None:
        precheck(ctx, indices, dims, components=True)
    pos = _positions(ctx, indices, tuple(idx[:q - 1]), dims, True)
    return x.load(tuple(idx[:b]) + tuple(pos) + tuple(idx[q - 1:]), lanes)


# ---- OneHot -------------------------------------------------------------------------

@value_rule("OneHot")
def _one_hot(ctx: LowerCtx, ins, idx, lanes):
    indices, depth, values = ins
    vector_ok(ctx, lanes, False, "a comparison per element")
    rank = len(ctx.out_types[0].shape)
    axis = _axis(ctx, rank, -1)
    d = ctx.out_types[0].shape[axis]
    v = indices.load(tuple(i for a, i in enumerate(idx) if a != axis), 1)
    if indices.dtype.is_float:
        # truncated as ONNX Runtime casts them; NaN, inf and what cannot be in
        # range are never converted (undefined in C) but become d: no match
        valid = Bin("and", Bin(">", v, const_like(-d - 1, v)), Bin("<", v, const_like(d, v)))
        v = Select(valid, cast(Select(valid, v, const_like(0, v)), "int64"),
                   const(d, "int64"))
    v = cast(v, "int64")
    # in int64, an index of 2**32 stays itself (ONNX Runtime wraps it to 0)
    wrapped = Select(Bin("<", v, const_like(0, v)), add(v, const_like(d, v)), v)
    hot = Bin("==", wrapped, cast(idx[axis], "int64"))
    return Select(hot, values.load((const(1),), 1), values.load((const(0),), 1))


# ---- scatters -----------------------------------------------------------------------

def _combine(reduction: str) -> Callable[[Expr, Expr], Expr]:
    from aot.lower.rules.elementwise import BINARY
    ops = {"none": lambda old, new: new,
           "add": lambda old, new: BINARY["Add"](old, new, {}),
           "mul": lambda old, new: BINARY["Mul"](old, new, {}),
           "max": lambda old, new: Bin("max", old, new),
           "min": lambda old, new: Bin("min", old, new)}
    return ops[reduction]


def _scatter(ctx: LowerCtx, data: TensorRef, emit, updates: Callable) -> Stmt:
    """Copy data, apply the updates in order, store. `updates(store)` gives
    the statements applying each update through store(target, value).

    Reduction "none" stores straight into the output; the others read what
    they update, so they work in a scratch copy that is stored at the end."""
    shape = tuple(data.shape)
    rank = len(shape)
    combine = _combine(reduction(ctx))
    if reduction(ctx) == "none":
        copy = loops(ctx, shape, range(rank),
                     lambda at: emit(0, tuple(at[a] for a in range(rank)),
                                     data.load(tuple(at[a] for a in range(rank)))))
        return seq(copy, updates(lambda target, value: emit(0, target, value)))
    work = ctx.scratch_buffer("scatter", dt(ctx.out_types[0].dtype), shape)

    def full(at) -> tuple:
        return tuple(at[a] for a in range(rank))

    fill = loops(ctx, shape, range(rank),
                 lambda at: Store(work, flat_index(full(at), shape), data.load(full(at))))

    def update(target, value) -> Stmt:
        place = flat_index(tuple(target), shape)
        return Store(work, place, combine(Load(work, place), value))

    out = loops(ctx, shape, range(rank),
                lambda at: emit(0, full(at), Load(work, flat_index(full(at), shape))))
    return seq(fill, updates(update), out)


def _locals(ctx: LowerCtx, values: Sequence[Expr]) -> tuple[list[Stmt], list[Var]]:
    """Each position computed once, into a local, before the stores using it."""
    names = [ctx.fresh("p") for _ in values]
    return [Decl(n, v) for n, v in zip(names, values)], names


@kernel_rule("ScatterElements")
def _scatter_elements(ctx: LowerCtx, ins, emit):
    data, indices, upd = ins
    rank = len(data.shape)
    axis = _axis(ctx, rank)
    dim = data.shape[axis]
    check = IndexCheck(ctx.node.name, ctx.node.op, indices.name, (dim,))

    def updates(store) -> Stmt:
        def body(at):
            p = tuple(at[a] for a in range(rank))
            v = indices.load(p, 1)
            guard = [] if indices.value is not None else [fail_if(ctx, outside(v, dim), check)]
            decls, (pos,) = _locals(ctx, [position(v, dim)])
            target = p[:axis] + (pos,) + p[axis + 1:]
            return seq(*guard, *decls, store(target, upd.load(p, 1)))
        return loops(ctx, indices.shape, range(rank), body, "u")
    return _scatter(ctx, data, emit, updates)


@kernel_rule("ScatterND")
def _scatter_nd(ctx: LowerCtx, ins, emit):
    data, indices, upd = ins
    q, k = len(indices.shape), indices.shape[-1]
    dims = tuple(data.shape[:k])
    rest = tuple(data.shape[k:])
    check = IndexCheck(ctx.node.name, ctx.node.op, indices.name, dims)

    def updates(store) -> Stmt:
        def body(at):
            outer = tuple(at[a] for a in range(q - 1))
            vs = [indices.load(outer + (const(j),), 1) for j in range(k)]
            guard = [] if indices.value is not None else [
                fail_if(ctx, any_of([outside(v, d) for v, d in zip(vs, dims)]), check)]
            decls, pos = _locals(ctx, [position(v, d) for v, d in zip(vs, dims)])
            inner = loops(ctx, rest, range(len(rest)), lambda r: store(
                tuple(pos) + tuple(r[a] for a in range(len(rest))),
                upd.load(outer + tuple(r[a] for a in range(len(rest))), 1)), "r")
            return seq(*guard, *decls, inner)
        return loops(ctx, indices.shape[:-1], range(q - 1), body, "u")
    return _scatter(ctx, data, emit, updates)


@kernel_rule("MaxUnpool")
def _max_unpool(ctx: LowerCtx, ins, emit):
    """Zeros, then each input value stored at its index: a flat position in
    the whole output, as MaxPool's Indices give it (and ONNX Runtime and
    PyTorch read it with an output_shape). Unlike ONNX's other indices a
    negative one is out of range (the reference refuses it)."""
    x, indices = ins[0], ins[1]
    shape = tuple(ctx.out_types[0].shape)
    size = int(np.prod(shape, dtype=np.int64))
    if indices.value is not None and indices.value.size and (
            indices.value.min() < 0 or indices.value.max() >= size):
        raise ShapeError(f"{node_label(ctx.node)}: indices fall outside the output of "
                         f"{size} elements")
    zeros = TensorRef(x.name, ctx.out_types[0],
                      lambda idx, lanes=1: const_like(0, dt(ctx.out_types[0].dtype, lanes)))
    check = IndexCheck(ctx.node.name, ctx.node.op, indices.name, (size,))
    rank = len(x.shape)

    def updates(store) -> Stmt:
        def body(at):
            p = tuple(at[a] for a in range(rank))
            v = indices.load(p, 1)
            # unsigned: a negative index is as far out as one past the end
            bad = Bin(">=", Cast(dt("uint64"), v), Const(size, dt("uint64")))
            guard = [] if indices.value is not None else [fail_if(ctx, bad, check)]
            decls, (pos,) = _locals(ctx, [cast(v, "int32")])
            return seq(*guard, *decls, store(unravel(pos, shape), x.load(p, 1)))
        return loops(ctx, x.shape, range(rank), body, "u")
    return _scatter(ctx, zeros, emit, updates)


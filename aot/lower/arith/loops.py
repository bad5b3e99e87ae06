"""Small statement builders the kernels share: the float ones (aot/lower/rules/nn.py's
convolutions and dense products, pooling, BatchNormalization, Resize) and,
for loops and loop nests, the integer rule modules too.

A loop of one trip is its body and a loop of none is nothing (None), so
callers compose without special cases; seq_of drops the Nones. PARAM arrays
a kernel already holds are reused (value rules run once per load site).
Accumulators are named locals of the tile's vector widths. unravel (a
flat position's multi-index) serves the index and detector rules too.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from aot.ir.tir import (Bin, Broadcast, Buffer, Comment, Const, Decl, DType, Expr, For, ForKind,
                        Stmt, add, dtype_of, seq, sub)
from aot.lower.rules import LowerCtx


def loop(ctx: LowerCtx, name: str, trips: int, body: Callable[[Expr], Stmt | None],
          start: int = 0, step: int = 1, kind: ForKind = ForKind.SERIAL) -> Stmt | None:
    """for name = start, start + step, ... (`trips` times): body(name); a
    single iteration is the body itself."""
    if trips <= 0:
        return None
    if trips == 1:
        return body(Const(start))
    v = ctx.fresh(name)
    inner = body(v)
    return None if inner is None else For(v, int(trips) * step, inner, kind, start=start, step=step)


def nest(ctx: LowerCtx, names: Sequence[str], extents: Sequence[int],
         body: Callable[[tuple], Stmt]) -> Stmt:
    """Nested loops, outermost first: body(indices)."""
    if not names:
        return body(())
    return loop(ctx, names[0], extents[0],
                lambda v: nest(ctx, names[1:], extents[1:], lambda rest: body((v,) + rest)))


def rows(ctx: LowerCtx, shape: Sequence[int], row: Callable[[tuple], Stmt]) -> Stmt:
    """row(index) for every index of shape[:-1] (loops r0, r1, ...): the
    rows of a kernel that works along its last axis."""
    lead = tuple(shape[:-1])
    return nest(ctx, tuple(f"r{k}" for k in range(len(lead))), lead, row)


def plus(e: Expr, c: int) -> Expr:
    """e + c, printed as `e - 1` rather than `e + -1`."""
    return add(e, Const(c)) if c >= 0 else sub(e, Const(-c))


def seq_of(*stmts: Stmt | None) -> Stmt:
    kept = [s for s in stmts if s is not None]
    return seq(*kept) if kept else Comment("nothing to do")


def splat(e: Expr, lanes: int) -> Expr:
    return e if lanes == 1 or dtype_of(e).lanes == lanes else Broadcast(e, lanes)


def fma(acc: Expr, a: Expr, b: Expr) -> Expr:
    return Bin("+", acc, Bin("*", a, b))


def shared_param(ctx: LowerCtx, base: str, array: np.ndarray) -> Buffer:
    """ctx.param, reusing an identical array this kernel already has (value
    rules are evaluated once per load site)."""
    for buf, have in ctx.params.values():
        if (buf.name.startswith(base) and have.dtype == array.dtype
                and have.shape == array.shape and np.array_equal(have, array)):
            return buf
    return ctx.param(base, array)


def offsets(widths: Sequence[int]) -> list[int]:
    return [sum(widths[:j]) for j in range(len(widths))]


def accumulators(ctx: LowerCtx, dtype: DType, widths, init: Callable[[int, int], Expr]):
    """One local per accumulator width, initialised by init(offset, width)."""
    accs = [ctx.fresh("acc", dtype.with_lanes(w)) for w in widths]
    decls = [Decl(a, init(off, w)) for a, off, w in zip(accs, offsets(widths), widths)]
    return accs, decls


def float_only(ctx: LowerCtx, dtype: DType) -> None:
    if not dtype.is_float:
        raise ctx.unsupported(f"{ctx.node.op} on {dtype.scalar}")


def unravel(i: Expr, dims: Sequence[int]) -> tuple[Expr, ...]:
    """The multi-index of flat position i in a row-major array of `dims`."""
    if isinstance(i, Const):
        return tuple(Const(int(v)) for v in np.unravel_index(i.value, dims))
    out, stride, total = [], 1, int(np.prod(dims))
    for d in reversed(dims):
        q = i if stride == 1 else Bin("/", i, Const(stride))
        out.append(Const(0) if d == 1 else q if stride * d == total else Bin("%", q, Const(d)))
        stride *= d
    return tuple(reversed(out))

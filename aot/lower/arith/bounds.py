"""Run-time index checks: every address computed from a tensor's values.

A rule that turns values into an address (Gather's indices, ScatterND's
index tuples) checks each value against the dimension it indexes before any
load or store uses it. Out of range, the kernel stops with `tir.Fail(k)`;
the entry point returns AOT_ERR_INDEX and records which check failed, and
the package's metadata.json "index_checks" names its node and the model
inputs the indices come from (aot/executor/entry.py). Negative indices keep
their ONNX meaning: -dim <= i < dim is in range, i < 0 counts from the end.

Value rules cannot stop a kernel from inside an expression, so their checks
are hoisted: a loop over the whole index tensor runs before the kernel's
loops (`precheck`). That checks every index, read or not, as ONNX Runtime
does, and costs one compare per index rather than per element gathered.
Kernel rules check where they compute the address (`fail_if`).
Constant indices are checked by type inference and cost nothing here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from aot.ir.tir import (INT32, Assign, Bin, Cast, Const, Decl, DType, Expr, Fail, For, If,
                        Select, Stmt, add, const, dtype_of, seq)
from aot.lower.rules.elementwise import cast
from aot.lower.rules import LowerCtx, TensorRef

# PrimFunc.attrs key: the kernel's IndexChecks; Fail(k) is the k-th (from 1).
ATTR = "index_checks"


@dataclass(frozen=True)
class IndexCheck:
    """One tensor of indices checked at run time."""
    node: str                 # the graph node using the indices
    op: str
    tensor: str               # the graph tensor holding them
    dims: tuple[int, ...]     # the sizes they index (GatherND: one per component)


def outside(v: Expr, dim: int) -> Expr:
    """v < -dim or v >= dim, as one unsigned comparison: the unsigned sum
    v + dim wraps, so it is below 2 * dim exactly for v in [-dim, dim). An
    int64 index of 2**32 is compared as itself."""
    d = dtype_of(v)
    u = DType("u" + d.scalar, d.lanes)
    return Bin(">=", Bin("+", Cast(u, v), Const(dim, u)), Const(2 * dim, u))


def any_of(conds: Sequence[Expr]) -> Expr:
    """The conditions or-ed without short-circuit (a loop of them vectorizes)."""
    out = conds[0]
    for c in conds[1:]:
        out = Bin("|", out, c)
    return out


def position(v: Expr, dim: int) -> Expr:
    """A checked index as an int32 position: negative ones count from the end."""
    i = cast(v, "int32")
    return Select(Bin("<", i, const(0)), add(i, const(dim)), i)


def fail_if(ctx: LowerCtx, bad: Expr, check: IndexCheck) -> Stmt:
    """`if (bad) return k;`, k numbering `check` among the kernel's checks."""
    ctx.checks.append(check)
    return If(bad, Fail(len(ctx.checks)))


def precheck(ctx: LowerCtx, indices: TensorRef, dims: Sequence[int],
             components: bool = False) -> None:
    """Check every value of `indices` before the kernel's loops, once per node
    and input. Each value indexes dims[0]; with `components`, the last axis
    holds one index per dim instead (GatherND's index tuples).

    The loop only or-s the outcomes into a flag, tested once after it: no
    branch in the loop, which then vectorizes (a branch per index cost 50%
    on a GatherElements, bench/index_checks.py)."""
    key = f"{ctx.node.name}/{indices.name}"
    if key in ctx.prechecks:
        return
    shape = tuple(indices.shape)
    outer = shape[:-1] if components else shape
    at = tuple(ctx.fresh(f"c{a}") for a in range(len(outer)))
    # The conditions first: loading the indices may inline another checked
    # rule (a Gather of a Gather), whose check must come, and be numbered,
    # before this one.
    if components:
        bad = any_of([outside(indices.load(at + (const(j),)), d) for j, d in enumerate(dims)])
    else:
        bad = outside(indices.load(at), dims[0])
    flag = ctx.fresh("bad")
    stmt: Stmt = Assign(flag, Bin("|", flag, Cast(INT32, bad)))
    for var, extent in reversed(list(zip(at, outer))):
        stmt = For(var, int(extent), stmt)
    check = IndexCheck(ctx.node.name, ctx.node.op, indices.name, tuple(int(d) for d in dims))
    ctx.prechecks[key] = seq(Decl(flag, const(0)), stmt,
                             fail_if(ctx, Bin("!=", flag, const(0)), check))

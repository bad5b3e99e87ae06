"""Store values too long to read, split into named steps.

A fused epilogue (a requantization, then a residual add that rescales both
sides, then a clamp) is one expression tree; printed whole it is a C line
of several hundred characters. This pass binds the large subexpressions
of a long store value to locals, innermost first, so that each line holds
one step of about LIMIT nodes.

Values are pure, so computing them just before their store changes
nothing, except inside a Select's branches and the operands of `and` /
`or`, which may be guarded (a load valid only where the condition holds):
those stay where they are. A load counts as one node (its index is an
address, not a step).

bind_values is the pass (aot/lower/tir_passes/__init__.py): the locals it makes are
named apart from every variable and buffer the function has.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from aot.ir.tir import (Assign, Bin, Broadcast, Call, Cast, Decl, DType, Expr, For, PrimFunc,
                        Select, Stmt, Store, Unary, Var, dtype_of, map_stmt, nodes_of, seq,
                        stmt_exprs, walk_stmt)

# Calls nested deeper than this (helper calls, conversions, min/max: what
# prints as a function call) get their innermost ones bound first.
DEPTH = 2
# A store value larger than this many nodes is split at all.
LIMIT = 12


def _rebuild(e: Expr, visit: Callable[[Expr], Expr]) -> Expr:
    """e with `visit` applied to the children it may bind inside."""
    if isinstance(e, Select):           # the branches may be guarded
        return Select(visit(e.cond), e.a, e.b)
    if isinstance(e, Bin):
        if e.op in ("and", "or"):
            return e
        return Bin(e.op, visit(e.a), visit(e.b))
    if isinstance(e, Unary):
        return Unary(e.op, visit(e.a))
    if isinstance(e, Cast):
        return Cast(e.dtype, visit(e.a), e.bits)
    if isinstance(e, Call):
        return Call(e.fn, tuple(visit(a) for a in e.args), e.dtype)
    if isinstance(e, Broadcast):
        return Broadcast(visit(e.value), e.lanes)
    return e                            # Var, Const, Load


def _size(e: Expr) -> int:
    if isinstance(e, Select):
        return 1 + _size(e.cond) + _size(e.a) + _size(e.b)
    if isinstance(e, Bin):
        return 1 + _size(e.a) + _size(e.b)
    if isinstance(e, (Unary, Cast)):
        return 1 + _size(e.a)
    if isinstance(e, Call):
        return 1 + sum(_size(a) for a in e.args)
    if isinstance(e, Broadcast):
        return _size(e.value)
    return 1


def _is_call(e: Expr) -> bool:
    """What the C prints as a function call around its operands."""
    return isinstance(e, (Call, Cast)) or (isinstance(e, Bin) and e.op in ("min", "max"))


def _children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, Select):
        return (e.cond,)
    if isinstance(e, Bin):
        return () if e.op in ("and", "or") else (e.a, e.b)
    if isinstance(e, (Unary, Cast)):
        return (e.a,)
    if isinstance(e, Call):
        return e.args
    if isinstance(e, Broadcast):
        return (e.value,)
    return ()


def _depth(e: Expr) -> int:
    inner = max((_depth(c) for c in _children(e)), default=0)
    return inner + (1 if _is_call(e) else 0)


def _name(e: Expr) -> str:
    if isinstance(e, Call):
        return e.fn.removeprefix("aot_")
    if isinstance(e, Bin) and e.op in ("min", "max"):
        return "clamped"
    return "v"


def split_value(value: Expr, fresh: Callable[[str, DType], Var]) -> tuple[list[Stmt], Expr]:
    """(the Decls binding value's deep parts, innermost first; what is left)."""
    lets: list[Stmt] = []

    def bind(e: Expr) -> Expr:
        var = fresh(_name(e), dtype_of(e))
        lets.append(Decl(var, e))
        return var

    def visit(e: Expr) -> Expr:
        e = _rebuild(e, visit)
        if _depth(e) > DEPTH or _size(e) > 2 * LIMIT:
            e = _rebuild(e, lambda c: bind(c) if _is_call(c) or _size(c) > 1 else c)
        return e

    return lets, visit(value)


def bind_long_values(stmt: Stmt, fresh: Callable[[str, DType], Var]) -> Stmt:
    """stmt with every store value larger than LIMIT nodes split into steps."""
    def one(s: Stmt) -> Stmt | None:
        if not isinstance(s, Store) or _size(s.value) <= LIMIT:
            return None
        lets, value = split_value(s.value, fresh)
        return seq(*lets, Store(s.buffer, s.index, value)) if lets else None
    return map_stmt(stmt, one)


def _names_in(func: PrimFunc) -> set[str]:
    """Every buffer and variable name func uses."""
    names = {b.name for b in func.params}
    for s in walk_stmt(func.body):
        if isinstance(s, (For, Decl, Assign)):
            names.add(s.var.name)
        for e in stmt_exprs(s):
            names.update(x.name for x in nodes_of(e, Var))
    return names


def fresh_namer(func: PrimFunc) -> Callable[[str, DType], Var]:
    """A maker of variables named apart from func's names and each other:
    `base`, else `base1`, `base2`, ... (`base_1` when base ends in a digit)."""
    taken: set[str] = set()

    def fresh(base: str, dtype: DType) -> Var:
        # func's names are gathered at the first call: most kernels split
        # no value and so need no walk over their body
        if not taken:
            taken.update(_names_in(func))
        sep = "_" if base[-1:].isdigit() else ""
        name, n = base, 0
        while name in taken:
            n += 1
            name = f"{base}{sep}{n}"
        taken.add(name)
        return Var(name, dtype)
    return fresh


def bind_values(func: PrimFunc) -> PrimFunc:
    """The pass: func with its long store values split into named steps."""
    return replace(func, body=bind_long_values(func.body, fresh_namer(func)))

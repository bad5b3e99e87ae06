"""Simplify: integer arithmetic on constants evaluated, comparisons that the
operands' ranges decide replaced by their value (a TIR pass).

gcc -Wextra (-Wtype-limits) rejects `u >= 0` or `i8 <= 127`, even through a
cast, and clang `x < x`: such a comparison is a constant, printed as one.
The ranges come from interval arithmetic over types and constants (what
gcc's -Wtype-limits knows, and more). Run in the TIR pipeline, so the LLVM
backend gets the same folded TIR as C; the C printer runs it too, on TIR
built by hand (already simplified TIR comes back unchanged).
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from aot.ir.tir import (Bin, Cast, Const, DType, Expr, PrimFunc, Select, Stmt, Unary, dtype_of,
                        map_stmt_exprs, nodes_of, per_object, stmt_exprs, walk_stmt)

_COMPARE = {"<", "<=", ">", ">=", "==", "!="}


def _type_range(d: DType) -> tuple[int, int]:
    if d.scalar == "bool":
        return 0, 1
    info = np.iinfo(d.scalar)
    return int(info.min), int(info.max)


def _int_range(e: Expr) -> tuple[int, int]:
    """Bounds of an integer expression's value from types and constants: what
    gcc's -Wtype-limits knows (it sees through widening casts), and more."""
    d = dtype_of(e)
    full = _type_range(d)
    if isinstance(e, Const):
        return int(e.value), int(e.value)
    if isinstance(e, Cast):
        src = dtype_of(e.a)
        if src.is_float:
            return full
        lo, hi = _int_range(e.a)
        return (lo, hi) if full[0] <= lo and hi <= full[1] else full
    if isinstance(e, Select):
        (a0, a1), (b0, b1) = _int_range(e.a), _int_range(e.b)
        return min(a0, b0), max(a1, b1)
    if isinstance(e, Bin) and e.op in _COMPARE or d.scalar == "bool":
        return 0, 1
    if not isinstance(e, Bin) or e.op not in _RANGE_OPS:
        return full
    (a0, a1), (b0, b1) = _int_range(e.a), _int_range(e.b)
    lo, hi = _RANGE_OPS[e.op](a0, a1, b0, b1)
    return (lo, hi) if full[0] <= lo and hi <= full[1] else full


def _corners(f):
    """Interval arithmetic for an op monotonic in each argument."""
    def bounds(a0, a1, b0, b1):
        vals = [f(x, y) for x in (a0, a1) for y in (b0, b1)]
        return min(vals), max(vals)
    return bounds


def _div_range(a0, a1, b0, b1):
    if b0 != b1 or b0 == 0:
        return -2**64, 2**64
    return _corners(lambda x, y: _INT_FOLD["/"](x, y))(a0, a1, b0, b1)


def _mod_range(a0, a1, b0, b1):
    if b0 != b1 or b0 == 0:
        return -2**64, 2**64
    m = abs(b0) - 1
    return (0 if a0 >= 0 else -m), (0 if a1 <= 0 else m)


def _and_range(a0, a1, b0, b1):
    if a0 >= 0 and b0 >= 0:
        return 0, min(a1, b1)
    return -2**64, 2**64


def _shr_range(a0, a1, b0, b1):
    if b0 < 0 or b1 > 63:
        return -2**64, 2**64
    return min(a0 >> b0, a0 >> b1), max(a1 >> b0, a1 >> b1)


_RANGE_OPS = {"+": _corners(lambda x, y: x + y), "-": _corners(lambda x, y: x - y),
              "*": _corners(lambda x, y: x * y), "min": _corners(min), "max": _corners(max),
              "/": _div_range, "%": _mod_range, "&": _and_range, ">>": _shr_range}

# Comparisons decided by the operands' bounds: op -> (always true, always false).
_DECIDED = {"<": (lambda a, b: a[1] < b[0], lambda a, b: a[0] >= b[1]),
            "<=": (lambda a, b: a[1] <= b[0], lambda a, b: a[0] > b[1]),
            ">": (lambda a, b: a[0] > b[1], lambda a, b: a[1] <= b[0]),
            ">=": (lambda a, b: a[0] >= b[1], lambda a, b: a[1] < b[0]),
            "==": (lambda a, b: a[0] == a[1] == b[0] == b[1], lambda a, b: a[1] < b[0] or
                   b[1] < a[0]),
            "!=": (lambda a, b: a[1] < b[0] or b[1] < a[0], lambda a, b: a[0] == a[1] == b[0] ==
                   b[1])}
_SELF = {"<": False, ">": False, "!=": False, "<=": True, ">=": True, "==": True}


def _fold_tautology(e: Expr) -> Expr | None:
    if not (isinstance(e, Bin) and e.op in _COMPARE) or dtype_of(e.a).lanes != 1:
        return None
    d = dtype_of(e.a)
    if e.a == e.b and (not d.is_float or e.op in ("<", ">")):
        return Const(_SELF[e.op], DType("bool"))     # clang: self-comparison warnings
    if d.is_float:
        return None
    a, b = _int_range(e.a), _int_range(e.b)
    always, never = _DECIDED[e.op]
    if always(a, b):
        return Const(True, DType("bool"))
    if never(a, b):
        return Const(False, DType("bool"))
    return None


def _fold_cast(e: Expr) -> Expr | None:
    """A cast of a constant is a constant (`(uint32_t)0` reads, and warns, worse than `0u`)."""
    if not (isinstance(e, Cast) and isinstance(e.a, Const) and e.dtype.lanes == 1) or e.bits:
        return None
    value, dst = e.a.value, e.dtype.scalar
    if dst == "bool":
        return Const(bool(value), e.dtype)
    if dst.startswith("float"):
        return Const(float(np.dtype(dst).type(value)), e.dtype)
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        value = math.trunc(value)
    info = np.iinfo(dst)
    if e.a.dtype.is_float and not info.min <= value <= info.max:
        return None                      # undefined in C: leave it to the compiler
    return Const((int(value) - info.min) % 2**info.bits + info.min, e.dtype)


def _wrap_int(value: int, scalar: str) -> int:
    info = np.iinfo(scalar)
    return (value - info.min) % 2**info.bits + info.min


_INT_FOLD = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "&": lambda a, b: a & b, "|": lambda a, b: a | b, "^": lambda a, b: a ^ b,
    "min": min, "max": max,
    "/": lambda a, b: (abs(a) // abs(b)) * (1 if (a < 0) == (b < 0) else -1) if b else None,
    "%": lambda a, b: a - b * ((abs(a) // abs(b)) * (1 if (a < 0) == (b < 0) else -1))
    if b else None,
    "<<": lambda a, b: a << b if b >= 0 else None, ">>": lambda a, b: a >> b if b >= 0 else None,
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
    "and": lambda a, b: a and b, "or": lambda a, b: a or b,
}


def _fold_int(e: Expr) -> Expr | None:
    """Integer and bool arithmetic on constants, evaluated (wrapping, as LLVM
    does): compilers judge `-(-128) <= x` by its value and warn."""
    if isinstance(e, Unary) and isinstance(e.a, Const) and not e.a.dtype.is_float:
        d, v = e.a.dtype, int(e.a.value)
        if e.op == "not":
            return Const(not v, DType("bool", d.lanes))
        if d.scalar != "bool" and e.op in ("neg", "bitnot"):
            return Const(_wrap_int(-v if e.op == "neg" else ~v, d.scalar), d)
    if isinstance(e, Bin) and isinstance(e.a, Const) and isinstance(e.b, Const) \
            and not e.a.dtype.is_float and e.op in _INT_FOLD:
        d = e.a.dtype
        value = _INT_FOLD[e.op](int(e.a.value), int(e.b.value))
        if value is None or (e.op in ("<<", ">>") and int(e.b.value) >= d.bits):
            return None
        if e.op in _COMPARE or d.scalar == "bool":
            return Const(bool(value), DType("bool"))
        return Const(_wrap_int(value, d.scalar), d)
    return None


def simplify_expr(e: Expr) -> Expr | None:
    # what no fold applies to, asked first: most nodes of a kernel
    if isinstance(e, Bin):
        if e.op not in _COMPARE and not (isinstance(e.a, Const) and isinstance(e.b, Const)):
            return e
    elif not isinstance(e, (Cast, Unary)):
        return e
    e = _fold_cast(e) or _fold_int(e) or e
    return _fold_tautology(e) or e


def simplify_body(body: Stmt) -> Stmt:
    # Already simplified TIR (what the printer gets from the pipeline) has
    # no node to fold: finding that takes a walk, cheaper than the rebuild,
    # and asked again of the same body is no walk at all (per_object).
    # Where no node folds as it is, none of its parents can: nothing changes.
    if not _foldable(body):
        return body
    return map_stmt_exprs(body, simplify_expr)


@per_object
def _foldable(body: Stmt) -> bool:
    """Whether simplify_expr replaces any node of body as it is."""
    for s in walk_stmt(body):
        for e in stmt_exprs(s):
            if any(simplify_expr(x) is not x for x in nodes_of(e, (Bin, Cast, Unary))):
                return True
    return False


def simplify(func: PrimFunc) -> PrimFunc:
    """The pass: func with every expression simplified."""
    return replace(func, body=simplify_body(func.body))

"""Index expressions as affine forms in loop variables: {var: coefficient,
None: constant}, the shape the thread split proves its accesses apart in."""
from __future__ import annotations

from aot.ir.tir import Bin, Cast, Const, Expr, Var

Affine = dict  # Var or None (the constant term) -> int coefficient


def affine(e: Expr, lets: dict) -> Affine | None:
    """e as {var: coef, None: constant}, or None when it is not affine in
    loop variables and let-bound locals."""
    if isinstance(e, Const):
        return {None: int(e.value)} if not e.dtype.is_float and e.dtype.lanes == 1 else None
    if isinstance(e, Var):
        return lets[e] if e in lets else {e: 1}
    if isinstance(e, Cast) and not e.dtype.is_float and e.dtype.lanes == 1:
        return affine(e.a, lets)
    if isinstance(e, Bin) and e.op in ("+", "-", "*"):
        a, b = affine(e.a, lets), affine(e.b, lets)
        if a is None or b is None:
            return None
        if e.op == "*":
            if set(a) == {None}:
                a, b = b, a
            if set(b) != {None}:
                return None
            return {k: v * b[None] for k, v in a.items()}
        sign = 1 if e.op == "+" else -1
        out = dict(a)
        for k, v in b.items():
            out[k] = out.get(k, 0) + sign * v
        return out
    return None

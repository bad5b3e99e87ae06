"""A readable text form of a PrimFunc (aot package --dump-tir).

TVM-script-like: a signature with every buffer's dtype, shape and kind,
Python-style blocks, infix arithmetic with the fewest parentheses that keep
it unambiguous. Deterministic (the same PrimFunc always prints the same
text) and total: every node prints, so a dump never hides what a pass did.

    # conv: from node_a, node_b
    func conv(in0: int8[1, 8, 8, 4] input, in1: int8[4, 4] param, out0: int8[1, 8, 8, 4] output):
      for i0 in range(8):
        var acc: int32 = 0
        for k in unrolled(0, 4, 1):
          acc = acc + int32(in0[i0 * 4 + k]) * int32(in1[k])
        out0[i0] = int8(acc)

Vector lanes show where they are: a load of 8 lanes is `in0[ramp(i, 8)]`,
a splat `broadcast(x, 8)`, a vector dtype `int32x8`. Constants other than
int32 and float32 say their type (`int8(-128)`), float32 ones end in `f`.
"""
from __future__ import annotations

import math

from aot.ir.tir import (Assign, Bin, Broadcast, Buffer, Call, Cast, Comment, Const, Decl, Expr,
                        Fail, For, ForKind, If, Load, PrimFunc, Select, Seq, Stmt, Store, Unary,
                        Var, dtype_of, expr_children, map_expr)

INDENT = "  "

# Binding strength, Python's order; an operand binding less than its operator
# (or as much, on the right) is parenthesized.
_PREC = {"or": 1, "and": 2, "<": 4, "<=": 4, ">": 4, ">=": 4, "==": 4, "!=": 4,
         "|": 5, "^": 6, "&": 7, "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "%": 10}
_UNARY, _ATOM = 11, 12
_INFIX = {"and": "&&", "or": "||"}
_PREFIX = {"neg": "-", "not": "!", "bitnot": "~"}


def _const(c: Const) -> str:
    d, v = c.dtype, c.value
    if d.scalar == "bool":
        text = "true" if v else "false"
        return text if d.lanes == 1 else f"{d}({text})"
    if d.is_float:
        v = float(v)
        text = repr(v) if math.isfinite(v) else str(v)
        if d.scalar == "float32" and d.lanes == 1 and math.isfinite(v):
            return text + "f"
        return f"{d}({text})"
    return str(int(v)) if d.scalar == "int32" and d.lanes == 1 else f"{d}({int(v)})"


def _paren(part: tuple[str, int], prec: int) -> str:
    text, p = part
    return f"({text})" if p < prec else text


def _node(e: Expr, kids: list[tuple[str, int]]) -> tuple[str, int]:
    """One node's text and binding strength, from its operands' already printed."""
    if isinstance(e, Var):
        return e.name, _ATOM
    if isinstance(e, Const):
        text = _const(e)
        return text, _UNARY if text.startswith("-") else _ATOM
    if isinstance(e, Bin):
        if e.op not in _PREC:                       # min, max
            return f"{e.op}({kids[0][0]}, {kids[1][0]})", _ATOM
        p = _PREC[e.op]
        # comparisons do not chain: both sides parenthesized at their own level
        left = _paren(kids[0], p + 1 if p == 4 else p)
        return f"{left} {_INFIX.get(e.op, e.op)} {_paren(kids[1], p + 1)}", p
    if isinstance(e, Unary):
        if e.op in _PREFIX:
            # only an atom goes bare: `-x`, `-(a + b)`, `-(-3)`
            return _PREFIX[e.op] + _paren(kids[0], _ATOM), _UNARY
        return f"{e.op}({kids[0][0]})", _ATOM
    if isinstance(e, Cast):
        return f"{'bits_as_' if e.bits else ''}{e.dtype}({kids[0][0]})", _ATOM
    if isinstance(e, Select):
        return f"select({kids[0][0]}, {kids[1][0]}, {kids[2][0]})", _ATOM
    if isinstance(e, Call):
        return f"{e.fn}({', '.join(k[0] for k in kids)})", _ATOM
    if isinstance(e, Load):
        index = kids[0][0] if e.lanes == 1 else f"ramp({kids[0][0]}, {e.lanes})"
        return f"{e.buffer.name}[{index}]", _ATOM
    if isinstance(e, Broadcast):
        return f"broadcast({kids[0][0]}, {e.lanes})", _ATOM
    raise TypeError(f"not a TIR expression: {e!r}")


def print_expr(e: Expr) -> str:
    """e as text. map_expr visits operands left to right before their node,
    iteratively (expressions nest deeper than Python's recursion), so the
    operands' texts are the last ones on the stack when their node comes."""
    parts: list[tuple[str, int]] = []

    def visit(x: Expr) -> None:
        n = len(expr_children(x))
        kids = parts[len(parts) - n:]
        del parts[len(parts) - n:]
        parts.append(_node(x, kids))
    map_expr(e, visit)
    return parts[0][0]


def _loop_head(s: For) -> str:
    kind = {ForKind.SERIAL: "range", ForKind.UNROLLED: "unrolled",
            ForKind.VECTORIZED: "vectorized", ForKind.PARALLEL: "parallel"}[s.kind]
    end = s.start + s.extent
    if s.step != 1:
        bounds = f"{s.start}, {end}, {s.step}"
    else:
        bounds = f"{s.start}, {end}" if s.start else f"{end}"
    return f"for {s.var.name} in {kind}({bounds}):"


def _one_line(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _stmt(s: Stmt, depth: int, out: list[str]) -> None:
    pad = INDENT * depth
    if isinstance(s, Seq):
        if not s.stmts:
            out.append(pad + "pass")
        for x in s.stmts:
            _stmt(x, depth, out)
    elif isinstance(s, Store):
        value = print_expr(s.value)
        index = print_expr(s.index)
        lanes = dtype_of(s.value).lanes
        target = index if lanes == 1 else f"ramp({index}, {lanes})"
        out.append(f"{pad}{s.buffer.name}[{target}] = {value}")
    elif isinstance(s, Decl):
        out.append(f"{pad}var {s.var.name}: {s.var.dtype} = {print_expr(s.init)}")
    elif isinstance(s, Assign):
        out.append(f"{pad}{s.var.name} = {print_expr(s.value)}")
    elif isinstance(s, For):
        out.append(pad + _loop_head(s))
        _stmt(s.body, depth + 1, out)
    elif isinstance(s, If):
        out.append(f"{pad}if {print_expr(s.cond)}:")
        _stmt(s.then, depth + 1, out)
        if s.orelse is not None:
            out.append(pad + "else:")
            _stmt(s.orelse, depth + 1, out)
    elif isinstance(s, Comment):
        out.append(f"{pad}# {_one_line(s.text)}")
    elif isinstance(s, Fail):
        out.append(f"{pad}fail({s.code})")
    else:
        raise TypeError(f"not a TIR statement: {s!r}")


def _param(b: Buffer) -> str:
    align = "" if b.align == 16 else f" align={b.align}"
    return f"{b.name}: {b.dtype}[{', '.join(map(str, b.shape))}] {b.kind.value}{align}"


def print_func(func: PrimFunc) -> str:
    """The whole PrimFunc: header comment, attributes (frozen dataclasses and
    tuples, so their repr is deterministic), signature, body."""
    sources = ", ".join(_one_line(x) for x in func.sources) or _one_line(func.name)
    lines = [f"# {_one_line(func.name)}: from {sources}"]
    lines += [f"# {key} = {_one_line(repr(value))}" for key, value in func.attrs]
    lines.append(f"func {func.name}({', '.join(_param(b) for b in func.params)}):")
    _stmt(func.body, 1, lines)
    return "\n".join(lines) + "\n"

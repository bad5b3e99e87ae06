"""TIR builders for TFLite's fixed-point primitives (TFLITE_INT8.md §2).

Each builder returns a plain TIR expression (int64 products, shifts,
compares, selects), so both codegens get the exact arithmetic for free and
the C reads as the formula. Operands are int32 expressions (scalar or
vector; constants follow the operand's lanes); multipliers and shifts may
be Python ints (compile-time, folded) or int32 expressions (per-channel
tables loaded from a PARAM buffer).

The compile-time multipliers come from aot.ops.quant.qmath (quantize_multiplier
and friends): this module only builds the arithmetic. MBQM, the
requantization these compose, is aot/lower/arith/requant.py's.

An operand a formula reads more than once (RDBPOT's x, SATSHL's x, the
saturation test of SRDHM) is inlined only when it is a variable or a
constant; any larger expression goes to the codegens' runtime helper of
the same primitive (aot/isa/calls.py: aot_rdbpot, aot_srdhm,
aot_satshl), which evaluates it once. Kernel rules name their intermediate
values with `Block.let`, so their code is the inline arithmetic; value rules
(inlined epilogues, no locals) get readable helper calls instead of
exponentially repeated sub-expressions.

On vectors (lanes > 1) SRDHM without saturation and RDBPOT by a constant
are calls of the codegens' whole-vector helpers instead (aot_rdhm: pmuldq
on x86; aot_rdbpot: int32 lanes), since int64 lanes are slow where AVX2
has no 64-bit multiply or arithmetic shift.

C notes: `>>` on negative values is an arithmetic shift and int64 -> int32
conversion wraps (true of every compiler we target, and of LLVM's ashr /
trunc); no signed overflow is ever relied on: products are formed in int64.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from aot.ir.tir import (Bin, Broadcast, Call, Cast, Const, Decl, Expr, Select, Stmt, Var, dt,
                        dtype_of, seq)
from aot.lower.rules.elementwise import const_like
from aot.ops.quant.qmath import INT32_MAX, INT32_MIN

Operand = Expr | int


def _lanes(e: Expr) -> int:
    return dtype_of(e).lanes


def as_type(e: Operand, scalar: str, lanes: int = 1) -> Expr:
    """e as an expression of `scalar` type (Python ints become constants)."""
    if isinstance(e, int):
        return const_like(e, dt(scalar, lanes))
    d = dtype_of(e)
    if d.scalar == scalar:
        return e
    if isinstance(e, Const):
        return Const(e.value, dt(scalar))
    return Cast(dt(scalar, d.lanes), e)


def i32(e: Operand, lanes: int = 1) -> Expr:
    return as_type(e, "int32", lanes)


def i64(e: Operand, lanes: int = 1) -> Expr:
    return as_type(e, "int64", lanes)


def _flag(cond: Expr, scalar: str) -> Expr:
    """A comparison as 0/1 of an integer type."""
    return Cast(dt(scalar, _lanes(cond)), cond)


def _c(value: int, like: Expr) -> Expr:
    return const_like(value, like)


def _is_atom(e: Operand) -> bool:
    """Cheap and side-effect free to repeat: a variable or a constant."""
    return isinstance(e, (int, Var, Const)) or (
        isinstance(e, Broadcast) and isinstance(e.value, (Var, Const)))


def _helper(fn: str, *args: Expr) -> Expr:
    return Call(fn, tuple(args), dtype_of(args[0]))


def _is_int(e: Operand) -> bool:
    return isinstance(e, int) or isinstance(e, Const)


def _int(e: Operand) -> int:
    return e if isinstance(e, int) else int(e.value)


# ------------------------------------------------------------------- primitives

def srdhm(a: Expr, b: Operand, saturate: bool = True) -> Expr:
    """SaturatingRoundingDoublingHighMul: floor((a*b + 2**30) / 2**31), int32.

    Only a = b = INT32_MIN overflows (to INT32_MAX); that test is left out
    when b is a constant other than INT32_MIN, or when the caller knows the
    operands never both are (saturate=False).
    """
    lanes = _lanes(a)
    no_overflow = not saturate or (_is_int(b) and _int(b) != INT32_MIN)
    if lanes > 1 and no_overflow:    # int32 vectors: the codegens' whole-vector helper
        return Call("aot_rdhm", (a, i32(b, lanes)), dt("int32", lanes))
    prod = Bin("*", i64(a, lanes), i64(b, lanes))
    high = Bin(">>", Bin("+", prod, _c(1 << 30, prod)), _c(31, prod))
    out = i32(high, lanes)
    if no_overflow:
        return out
    if not (_is_atom(a) and _is_atom(b)):
        return _helper("aot_srdhm", a, i32(b, lanes))
    bb = i32(b, lanes)
    both_min = Bin("and", Bin("==", a, _c(INT32_MIN, a)), Bin("==", bb, _c(INT32_MIN, bb)))
    return Select(both_min, _c(INT32_MAX, a), out)


def rdbpot(x: Expr, e: Operand) -> Expr:
    """RoundingDivideByPOT: x / 2**e rounded half away from zero, 0 <= e <= 31.

    A constant e is folded to `(x + 2**(e-1) - (x < 0)) >> e` in int64 (no
    overflow near INT32_MAX); a per-channel e calls the runtime helper.
    """
    lanes = _lanes(x)
    if _is_int(e):
        e = _int(e)
        if not 0 <= e <= 31:
            raise ValueError(f"rdbpot: exponent {e} out of [0, 31]")
        if e == 0:
            return x
        if lanes > 1 or not _is_atom(x):   # vectors: the whole-vector helper, no int64
            return _helper("aot_rdbpot", x, const_like(e, x))
        wide = i64(x, lanes)
        nudged = Bin("-", Bin("+", wide, _c(1 << (e - 1), wide)),
                     _flag(Bin("<", x, _c(0, x)), "int64"))
        return i32(Bin(">>", nudged, _c(e, wide)), lanes)
    # a per-channel exponent: the runtime helper (mask and threshold form)
    return _helper("aot_rdbpot", x, i32(e, lanes))


def satshl(x: Expr, k: int) -> Expr:
    """SaturatingRoundingMultiplyByPOT<k>, k > 0: x * 2**k saturated to int32."""
    if k <= 0:
        raise ValueError(f"satshl: shift {k} must be positive")
    if not _is_atom(x) and k < 31:
        return _helper("aot_satshl", x, const_like(k, x))
    limit = (1 << (31 - k)) - 1
    shifted = Bin("*", x, _c(1 << k, x)) if k < 31 else _c(0, x)
    return Select(Bin(">", x, _c(limit, x)), _c(INT32_MAX, x),
                  Select(Bin("<", x, _c(-limit, x)), _c(INT32_MIN, x), shifted))


def shift_left_wrapping(x: Expr, left: Operand) -> Expr:
    """x * 2**left wrapped to int32 (MBQM's unsaturated left shift)."""
    lanes = _lanes(x)
    if _is_int(left):
        if _int(left) == 0:
            return x
        return i32(Bin("*", i64(x, lanes), const_like(1 << _int(left), dt("int64", lanes))), lanes)
    # A multiply by 2**left, not `<<`: shifting a negative value is undefined in C.
    wide = i64(x, lanes)
    return i32(Bin("*", wide, Bin("<<", _c(1, wide), i64(left, lanes))), lanes)


def offset(x: Expr, c: int) -> Expr:
    """x + c, printed as `x - 128` rather than `x + -128` (or `x - -128`)."""
    if c == 0:
        return x
    return Bin("+", x, _c(c, x)) if c > 0 else Bin("-", x, _c(-c, x))


def clamp(x: Expr, lo: Operand, hi: Operand) -> Expr:
    lo = _c(lo, x) if isinstance(lo, int) else lo
    hi = _c(hi, x) if isinstance(hi, int) else hi
    return Bin("min", Bin("max", x, lo), hi)


def div_round_away(total: Expr, count: Operand) -> Expr:
    """C-truncating `(total ± count/2) / count`: division rounding half away from zero."""
    if _is_int(count):
        n, half = _c(_int(count), total), _c(_int(count) // 2, total)
    else:
        n, half = count, Bin("/", count, _c(2, total))
    return Select(Bin(">", total, _c(0, total)), Bin("/", Bin("+", total, half), n),
                  Bin("/", Bin("-", total, half), n))


# ------------------------------------------------------------------- locals

@dataclass
class Block:
    """Straight-line code with named locals: `v = b.let("acc", expr)` declares
    `int32_t acc = expr;` and returns the variable, so a sub-expression used
    several times is computed once and the C reads step by step."""
    ctx: object
    stmts: list[Stmt] = field(default_factory=list)

    def let(self, name: str, value: Expr) -> Var:
        var = self.ctx.fresh(name, dtype_of(value))
        self.stmts.append(Decl(var, value))
        return var

    def add(self, *stmts: Stmt) -> None:
        self.stmts.extend(stmts)

    def stmt(self) -> Stmt:
        return seq(*self.stmts)


__all__ = ["Block", "clamp", "div_round_away", "i32", "i64", "offset", "rdbpot", "satshl",
           "shift_left_wrapping", "srdhm"]

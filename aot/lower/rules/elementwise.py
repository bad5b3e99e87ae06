"""Value rules for the elementwise and broadcasting ops (aot/ops/elementwise.py).

Each op is a small function of its operands' values, in one of four tables:
unary float math, unary ops on any number type, binary ops, comparisons.
The operands arrive already loaded at the output index (broadcasting is
done once, by `broadcast_load`), so a table entry only says the arithmetic.

Float math is done in the tensor's own type (float32 -> expf, tanhf, ...),
as a C runtime would; the references compute some ops in float64, which
float32 math matches well within the 1e-4 tolerance.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

from aot.ir.tir import (Bin, Broadcast, Call, Cast, Const, DType, Expr, Select, Unary, dt,
                        dtype_of)
from aot.lower.rules import LowerCtx, TensorRef, value_rule


# ---- helpers shared with the other rule modules ----------------------------------

def broadcast_index(idx: Sequence[Expr], shape: Sequence[int]) -> tuple[Expr, ...]:
    """The index into a tensor of `shape` that broadcasts to an output index:
    shapes are right-aligned, size-1 dimensions always read index 0."""
    tail = tuple(idx)[len(idx) - len(shape):] if shape else ()
    return tuple(Const(0) if d == 1 else i for i, d in zip(tail, shape))


def broadcast_load(ref: TensorRef, idx: Sequence[Expr], lanes: int = 1) -> Expr:
    """ref's value at output index idx (numpy broadcasting), `lanes` wide.

    When the input does not vary along the last axis (a scalar, or a last
    dimension of 1) a vector is one scalar load splatted to all lanes.
    """
    shape = tuple(ref.shape)
    at = broadcast_index(idx, shape)
    if lanes > 1 and (not shape or shape[-1] == 1):
        value = ref.load(at, 1)
        return value if dtype_of(value).lanes == lanes else Broadcast(value, lanes)
    return ref.load(at, lanes)


def scalar_load(ref: TensorRef, lanes: int = 1) -> Expr:
    """The one element of a size-1 tensor (a Clip bound, a Pad value), splatted."""
    value = ref.load(tuple(Const(0) for _ in ref.shape), 1)
    return value if lanes == 1 else Broadcast(value, lanes)


def const_like(value, like: Expr | DType) -> Expr:
    """A constant of like's element type, splatted to its lanes."""
    d = like if isinstance(like, DType) else dtype_of(like)
    py = float(value) if d.is_float else bool(value) if d.scalar == "bool" else int(value)
    c = Const(py, d.with_lanes(1))
    return c if d.lanes == 1 else Broadcast(c, d.lanes)


def math_call(fn: str, *args: Expr) -> Expr:
    """A libm function of the operands' float type: expf for float32, exp for float64."""
    d = dtype_of(args[0])
    return Call(fn + "f" if d.scalar == "float32" else fn, tuple(args), d)


# float32 functions with a helper that vectorizes (aot/isa/calls.py): a
# libm call is one call per lane (expf in a YOLO head's softmax took 5 ns an
# element, tanhf 4.8 ms of a file-type classifier).
VECTOR_MATH = {"exp": "aot_exp", "tanh": "aot_tanh", "sigmoid": "aot_sigmoid"}


def vector_math(fn: str, x: Expr) -> Expr:
    """fn(x): through its vectorizing helper in float32, else libm's."""
    d = dtype_of(x)
    if d.scalar == "float32":
        return Call(VECTOR_MATH[fn], (x,), d)
    return math_call(fn, x)


def cast(x: Expr, to: DType | str) -> Expr:
    """x converted to `to` (lanes kept) with ONNX's rules: to bool is `x != 0`."""
    d = dtype_of(x)
    to = dt(to).with_lanes(d.lanes)
    if to == d:
        return x
    if to.scalar == "bool":
        return Bin("!=", x, const_like(0, d))
    return Cast(to, x)


def select(cond: Expr, a: Expr, b: Expr) -> Expr:
    """Select with a scalar condition splatted to vector branches."""
    lanes = dtype_of(a).lanes
    if dtype_of(cond).lanes != lanes:
        cond = Broadcast(cond, lanes)
    return Select(cond, a, b)


def clamp(x: Expr, lo, hi) -> Expr:
    return Bin("min", Bin("max", x, const_like(lo, x)), const_like(hi, x))


# ---- arithmetic on tensor values, defined for every value ---------------------------------
# C leaves signed overflow, INT_MIN / -1 and out-of-range float -> int
# conversions undefined (x86 traps on the division); a model's inputs can
# hold anything. numpy and ONNX Runtime wrap, as these do. Index arithmetic
# (loop counters, offsets) stays plain: its range is known.

def _wide_signed(d: DType) -> bool:
    """int32/int64: C does not promote them, so their overflow is undefined
    (narrower types are computed in int and converted back, which wraps)."""
    return d.scalar in ("int32", "int64")


def wrapping(op: str, a: Expr, b: Expr) -> Expr:
    """a + b, a - b or a * b in two's complement: computed unsigned (the same
    instructions) and converted back."""
    d = dtype_of(a)
    if not _wide_signed(d):
        return Bin(op, a, b)
    u = DType("u" + d.scalar, d.lanes)
    return Cast(d, Bin(op, Cast(u, a), Cast(u, b)))


def wrapping_neg(x: Expr) -> Expr:
    return wrapping("-", const_like(0, x), x) if _wide_signed(dtype_of(x)) else Unary("neg", x)


def int_abs(x: Expr) -> Expr:
    """|x|, with |INT_MIN| = INT_MIN as numpy has it."""
    if not _wide_signed(dtype_of(x)):
        return Unary("abs", x)
    return Select(Bin("<", x, const_like(0, x)), wrapping_neg(x), x)


# 2**63: the first float beyond int64, exact in float32 and float64
_INT64_LIMIT = float(2**63)


def float_to_int(x: Expr, to: DType | str) -> Expr:
    """x converted to the integer type `to`, for every value: truncated
    toward zero into int64, then wrapped to `to` (what numpy and ONNX Runtime
    give on x86 for the narrow types); NaN, infinities and values int64
    cannot hold give 0. aot.ops.elementwise.cast_array is the reference."""
    d = dtype_of(x)
    to = dt(to).with_lanes(d.lanes)
    fits = Bin("and", Bin(">=", x, const_like(-_INT64_LIMIT, x)),
               Bin("<", x, const_like(_INT64_LIMIT, x)))
    wide = Cast(DType("int64", d.lanes), Select(fits, x, const_like(0, x)))
    return cast(wide, to)


# ---- the tables: value(s) -> value, with the node attributes at hand ---------------

def _is_inf(x, a):
    tests = [Bin("==", x, const_like(sign * math.inf, x))
             for sign, attr in ((1, "detect_positive"), (-1, "detect_negative")) if a.get(attr, 1)]
    if not tests:
        return const_like(False, DType("bool", dtype_of(x).lanes))
    return tests[0] if len(tests) == 1 else Bin("or", *tests)


def _sigmoid(x):
    if dtype_of(x).scalar == "float32":
        return vector_math("sigmoid", x)
    one = const_like(1, x)
    return Bin("/", one, Bin("+", one, math_call("exp", Unary("neg", x))))


def _softplus(x):
    # log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|), as np.logaddexp(0, x)
    return Bin("+", Bin("max", x, const_like(0, x)),
               math_call("log1p", math_call("exp", Unary("neg", Unary("abs", x)))))


def _gelu(x, a):
    half_x = Bin("*", const_like(0.5, x), x)
    approx = a.get("approximate", "none")
    if approx == "tanh":
        cube = Bin("*", Bin("*", x, x), x)
        inner = Bin("*", const_like(math.sqrt(2 / math.pi), x),
                    Bin("+", x, Bin("*", const_like(0.044715, x), cube)))
        return Bin("*", half_x, Bin("+", const_like(1, x), vector_math("tanh", inner)))
    if approx != "none":
        return None
    erf = math_call("erf", Bin("*", x, const_like(1 / math.sqrt(2), x)))
    return Bin("*", half_x, Bin("+", const_like(1, x), erf))


def _elu_neg(x, alpha):
    """alpha * (e^x - 1), the negative branch of Elu/Selu/Celu."""
    return Bin("*", const_like(alpha, x), math_call("expm1", x))


def _selu(x, a):
    alpha = a.get("alpha", 1.67326319217681884765625)
    gamma = a.get("gamma", 1.05070102519989013671875)
    return Bin("*", const_like(gamma, x),
               Select(Bin(">", x, const_like(0, x)), x, _elu_neg(x, alpha)))


def _celu(x, a):
    alpha = a.get("alpha", 1.0)
    neg = Bin("*", const_like(alpha, x),
              math_call("expm1", Bin("*", x, const_like(1 / alpha, x))))
    return Bin("+", Bin("max", x, const_like(0, x)), Bin("min", neg, const_like(0, x)))


def _shrink(x, a):
    lambd, bias = a.get("lambd", 0.5), a.get("bias", 0.0)
    return Select(Bin("<", x, const_like(-lambd, x)), Bin("+", x, const_like(bias, x)),
                  Select(Bin(">", x, const_like(lambd, x)), Bin("-", x, const_like(bias, x)),
                         const_like(0, x)))


def _lib(fn: str) -> Callable:
    return lambda x, a: math_call(fn, x)


UNARY_FLOAT: dict[str, Callable[[Expr, dict], Expr | None]] = {
    **{op: _lib(fn) for op, fn in (
        ("Sqrt", "sqrt"), ("Log", "log"), ("Ceil", "ceil"),
        ("Floor", "floor"), ("Round", "rint"),  # rint: half to even in the default mode
        ("Erf", "erf"), ("Sin", "sin"), ("Cos", "cos"), ("Tan", "tan"),
        ("Asin", "asin"), ("Acos", "acos"), ("Atan", "atan"), ("Sinh", "sinh"),
        ("Cosh", "cosh"), ("Asinh", "asinh"), ("Acosh", "acosh"), ("Atanh", "atanh"))},
    "Exp": lambda x, a: vector_math("exp", x),
    "Tanh": lambda x, a: vector_math("tanh", x),
    "Reciprocal": lambda x, a: Bin("/", const_like(1, x), x),
    "Sigmoid": lambda x, a: _sigmoid(x),
    "Softplus": lambda x, a: _softplus(x),
    "Softsign": lambda x, a: Bin("/", x, Bin("+", const_like(1, x), Unary("abs", x))),
    "HardSwish": lambda x, a: Bin("*", x, clamp(Bin("+", Bin("/", x, const_like(6, x)),
                                                    const_like(0.5, x)), 0, 1)),
    "HardSigmoid": lambda x, a: clamp(Bin("+", Bin("*", const_like(a.get("alpha", 0.2), x), x),
                                          const_like(a.get("beta", 0.5), x)), 0, 1),
    "Mish": lambda x, a: Bin("*", x, vector_math("tanh", _softplus(x))),
    "LeakyRelu": lambda x, a: Select(Bin(">=", x, const_like(0, x)), x,
                                     Bin("*", x, const_like(a.get("alpha", 0.01), x))),
    "Elu": lambda x, a: Select(Bin(">", x, const_like(0, x)), x,
                               _elu_neg(x, a.get("alpha", 1.0))),
    "Selu": _selu,
    "Celu": _celu,
    "ThresholdedRelu": lambda x, a: Select(Bin(">", x, const_like(a.get("alpha", 1.0), x)), x,
                                           const_like(0, x)),
    "Shrink": _shrink,
    "Gelu": _gelu,
    "IsNaN": lambda x, a: Bin("!=", x, x),
    "IsInf": lambda x, a: _is_inf(x, a),
    "Swish": lambda x, a: Bin("*", x, _sigmoid(Bin("*", const_like(a.get("alpha", 1.0), x), x))),
}


def _unsigned(x: Expr) -> bool:
    return dtype_of(x).scalar.startswith(("uint", "bool"))


def _sign(x, a):
    zero = const_like(0, x)
    if _unsigned(x):
        return Select(Bin(">", x, zero), const_like(1, x), zero)
    # x itself for 0 and NaN, as np.sign
    return Select(Bin(">", x, zero), const_like(1, x),
                  Select(Bin("<", x, zero), const_like(-1, x), x))


UNARY_ANY: dict[str, Callable[[Expr, dict], Expr]] = {
    "Abs": lambda x, a: x if _unsigned(x) else int_abs(x),
    "Neg": lambda x, a: wrapping_neg(x),
    "Sign": _sign,
    "Relu": lambda x, a: Bin("max", x, const_like(0, x)),
    "Not": lambda x, a: Unary("not", x),
    "BitwiseNot": lambda x, a: Unary("bitnot", x),
    "Identity": lambda x, a: x,
}


def _nonzero(y: Expr) -> Expr:
    """y with 0 replaced by 1: integer division by zero is undefined in C, and
    the reference divides by 1 there. A signed -1 becomes 1 too: INT_MIN / -1
    overflows (x86 traps), and x % -1 is x % 1, 0."""
    one = const_like(1, y)
    bad = Bin("==", y, const_like(0, y))
    if not _unsigned(y):
        bad = Bin("or", bad, Bin("==", y, const_like(-1, y)))
    return Select(bad, one, y)


def _div(x, y, a):
    if dtype_of(x).is_float:
        return Bin("/", x, y)
    q = Bin("/", x, _nonzero(y))         # C truncates toward zero, as ONNX
    if _unsigned(x):
        return q
    return Select(Bin("==", y, const_like(-1, y)), wrapping_neg(x), q)


def _mod(x, y, a):
    if dtype_of(x).is_float:
        r = math_call("fmod", x, y)
        if a.get("fmod", 0):
            return r
        # numpy's mod: the sign of the divisor (a zero keeps fmod's sign)
        fix = Bin("and", Bin("!=", r, const_like(0, r)),
                  Bin("!=", Bin("<", r, const_like(0, r)), Bin("<", y, const_like(0, y))))
        return Select(fix, Bin("+", r, y), r)
    y = _nonzero(y)
    r = Bin("%", x, y)                   # C's %: the sign of x (fmod)
    if a.get("fmod", 0) or _unsigned(x):
        return r
    # Python's remainder takes the sign of the divisor
    fix = Bin("and", Bin("!=", r, const_like(0, r)),
              Bin("!=", Bin("<", r, const_like(0, r)), Bin("<", y, const_like(0, y))))
    return Select(fix, Bin("+", r, y), r)


def _bit_shift(x, y, a):
    """ONNX BitShift, for every count: a negative one or one of the width or
    more (undefined in C) gives 0 to the left, the sign fill to the right."""
    d = dtype_of(x)
    inside = Bin("<", y, const_like(d.bits, y))
    if not _unsigned(y):        # an unsigned count is never negative (and -Wtype-limits says so)
        inside = Bin("and", Bin(">=", y, const_like(0, y)), inside)
    count = Select(inside, y, const_like(0, y))
    if a.get("direction") == "LEFT":
        if _unsigned(x):
            return Select(inside, Bin("<<", x, count), const_like(0, x))
        # shifted as unsigned: a negative value shifted left is undefined in C
        u = DType("u" + d.scalar, d.lanes)
        return Select(inside, Cast(d, Bin("<<", Cast(u, x), Cast(u, count))), const_like(0, x))
    if a.get("direction") != "RIGHT":
        return None
    fill = const_like(0, x) if _unsigned(x) else Select(
        Bin("<", x, const_like(0, x)), const_like(-1, x), const_like(0, x))
    return Select(inside, Bin(">>", x, count), fill)


def _const_value(e: Expr):
    """The value of a constant (or a splatted constant) expression, else None."""
    if isinstance(e, Broadcast):
        e = e.value
    return e.value if isinstance(e, Const) else None


def _pow(x, y, a):
    dx = dtype_of(x)
    if dx.is_float:
        if _const_value(y) == 2:        # x * x is exactly powf(x, 2), without the call
            return Bin("*", x, x)
        if _const_value(y) == 1:
            return x
        return math_call("pow", x, cast(y, dx))
    # integer Pow: exact in double, truncated back
    f64 = DType("float64", dx.lanes)
    return float_to_int(math_call("pow", cast(x, f64), cast(y, f64)), dx)


BINARY: dict[str, Callable[[Expr, Expr, dict], Expr | None]] = {
    "Add": lambda x, y, a: wrapping("+", x, y),
    "Sub": lambda x, y, a: wrapping("-", x, y),
    "Mul": lambda x, y, a: wrapping("*", x, y),
    "Div": _div,
    "Mod": _mod,
    "Pow": _pow,
    "BitwiseAnd": lambda x, y, a: Bin("&", x, y),
    "BitwiseOr": lambda x, y, a: Bin("|", x, y),
    "BitwiseXor": lambda x, y, a: Bin("^", x, y),
    "BitShift": _bit_shift,
    "And": lambda x, y, a: Bin("and", x, y),
    "Or": lambda x, y, a: Bin("or", x, y),
    "Xor": lambda x, y, a: Bin("!=", x, y),
    "Equal": lambda x, y, a: Bin("==", x, y),
    "Less": lambda x, y, a: Bin("<", x, y),
    "Greater": lambda x, y, a: Bin(">", x, y),
    "LessOrEqual": lambda x, y, a: Bin("<=", x, y),
    "GreaterOrEqual": lambda x, y, a: Bin(">=", x, y),
    "PRelu": lambda x, slope, a: Select(Bin("<", x, const_like(0, x)), wrapping("*", x, slope), x),
}

# variadic ops: a fold of a binary op over all operands
VARIADIC = {"Max": "max", "Min": "min", "Sum": "+"}


# ---- the rules ---------------------------------------------------------------------

def _operands(ins, idx, lanes) -> list[Expr]:
    return [broadcast_load(r, idx, lanes) for r in ins if r is not None]


def _checked(ctx: LowerCtx, value: Expr | None, what: str) -> Expr:
    if value is None:
        raise ctx.unsupported(what)
    return value


@value_rule(*UNARY_FLOAT, *UNARY_ANY)
def _unary(ctx: LowerCtx, ins, idx, lanes):
    x = broadcast_load(ins[0], idx, lanes)
    fn = UNARY_FLOAT.get(ctx.node.op) or UNARY_ANY[ctx.node.op]
    return _checked(ctx, fn(x, ctx.attrs), f"{ctx.node.op} with attributes {dict(ctx.attrs)}")


@value_rule(*BINARY)
def _binary(ctx: LowerCtx, ins, idx, lanes):
    x, y = _operands(ins, idx, lanes)
    return _checked(ctx, BINARY[ctx.node.op](x, y, ctx.attrs),
                    f"{ctx.node.op} on {dtype_of(x).scalar} with attributes {dict(ctx.attrs)}")


@value_rule(*VARIADIC)
def _variadic(ctx: LowerCtx, ins, idx, lanes):
    xs = _operands(ins, idx, lanes)
    out = xs[0]
    op = VARIADIC[ctx.node.op]
    for x in xs[1:]:
        out = wrapping(op, out, x) if op == "+" else Bin(op, out, x)
    return out


@value_rule("Mean")
def _mean(ctx: LowerCtx, ins, idx, lanes):
    xs = _operands(ins, idx, lanes)
    d = dtype_of(xs[0])
    # integers: the reference averages in float64 and truncates back
    acc = d if d.is_float else DType("float64", d.lanes)
    total = cast(xs[0], acc)
    for x in xs[1:]:
        total = Bin("+", total, cast(x, acc))
    mean = Bin("/", total, const_like(len(xs), acc))
    return mean if d.is_float else float_to_int(mean, d)


@value_rule("Clip")
def _clip(ctx: LowerCtx, ins, idx, lanes):
    out = broadcast_load(ins[0], idx, lanes)
    for op, bound in (("max", ins[1] if len(ins) > 1 else None),
                      ("min", ins[2] if len(ins) > 2 else None)):
        if bound is not None:
            out = Bin(op, out, scalar_load(bound, lanes))
    return out


@value_rule("Where")
def _where(ctx: LowerCtx, ins, idx, lanes):
    cond, x, y = _operands(ins, idx, lanes)
    return Select(cond, x, y)


@value_rule("Cast", "CastLike")
def _cast(ctx: LowerCtx, ins, idx, lanes):
    x = broadcast_load(ins[0], idx, lanes)
    to = dt(ctx.out_types[0].dtype)
    if dtype_of(x).is_float and not to.is_float and to.scalar != "bool":
        # undefined in ONNX beyond the target's range: defined here for all
        return float_to_int(x, to)
    return cast(x, to)

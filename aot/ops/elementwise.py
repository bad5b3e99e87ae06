"""Elementwise ops with ONNX semantics (latest opset): unary math and
activations, broadcasting binary arithmetic, comparisons and logic, the
variadic Max/Min/Mean/Sum, Where, Cast, Identity and Dropout.

Most ops are one line in a table: (name, numpy function, kind). The numpy
function gets the input arrays and the node's attributes; its result is cast
to the inferred output dtype, so numpy's promotion rules (float32 op python
float -> float64 in old numpy, int / int -> float) never leak into results.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from aot.errors import UnsupportedError, node_label
from aot.ir.graph import TensorType
from aot.ops.registry import Call, Layout, Pattern, Sig, Sink, register

FLOATS = ("float32", "float64", "float16")
_erf_obj = np.frompyfunc(math.erf, 1, 1)  # exact, ~0.1 s per million elements


def _erf(x) -> np.ndarray:
    return np.asarray(_erf_obj(np.asarray(x, np.float64)), dtype=np.float64)


# ---- type inference helpers ---------------------------------------------------

def broadcast(sig: Sig, shapes) -> tuple[int, ...]:
    """Multidirectional (numpy) broadcasting of the shapes, or a ShapeError."""
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise sig.fail("cannot broadcast shapes "      # each once: a Sum may have 1,000 inputs
                       + ", ".join(dict.fromkeys(str(list(s)) for s in shapes))) from None


def _present(sig: Sig) -> list[TensorType]:
    return [t for t in sig.in_types if t is not None]


def _same_dtype(sig: Sig, types: list[TensorType]) -> str:
    dtypes = {t.dtype for t in types}
    if len(dtypes) != 1:
        raise sig.fail(f"operands have different dtypes {sorted(dtypes)}")
    return types[0].dtype


def _require_float(sig: Sig, dtype: str) -> None:
    if dtype not in FLOATS:
        raise sig.fail(f"needs a float input, got {dtype}")


def arity(lo: int, hi: int | None = None):
    """Wrap an infer function with a check of the node's input count; the
    first `lo` inputs are required (None for hi: any number more)."""
    def wrap(infer):
        def checked(sig: Sig):
            n = len(sig.node.inputs)
            if n < lo or (hi is not None and n > hi) or not all(sig.has(i) for i in range(lo)):
                want = f"{lo}" if hi == lo else f"{lo} to {hi}" if hi else f"at least {lo}"
                raise sig.fail(f"takes {want} inputs, got {n} "
                               f"({', '.join(i or '<absent>' for i in sig.node.inputs)})")
            return infer(sig)
        return checked
    return wrap


def _no_bool(sig: Sig, types) -> None:
    if any(t.dtype == "bool" for t in types):
        raise sig.fail("does not take bool inputs")


def _infer_unary(float_only: bool):
    def infer(sig: Sig):
        t = sig.in_types[0]
        if float_only:
            _require_float(sig, t.dtype)
        _no_bool(sig, [t])
        return [TensorType(t.shape, t.dtype)]
    return infer


def _infer_nary(out_dtype: str | None = None, allow_bool: bool = False,
                integer_only: bool = False):
    """Same-dtype operands broadcast together; result dtype = operands' or out_dtype."""
    def infer(sig: Sig):
        types = _present(sig)
        if not types:
            raise sig.fail("needs at least one input")
        dtype = _same_dtype(sig, types)
        if not allow_bool:
            _no_bool(sig, types)
        if integer_only and not np.issubdtype(np.dtype(dtype), np.integer):
            raise sig.fail(f"needs integer inputs, got {dtype}")
        return [TensorType(broadcast(sig, [t.shape for t in types]), out_dtype or dtype)]
    return infer


def _infer_pow(sig: Sig):
    base, exp = sig.in_types[0], sig.in_types[1]
    _no_bool(sig, [base, exp])
    return [TensorType(broadcast(sig, [base.shape, exp.shape]), base.dtype)]


def _infer_logic(sig: Sig):
    types = _present(sig)
    if any(t.dtype != "bool" for t in types):
        raise sig.fail("logical ops need bool inputs, got "
                       + ", ".join(t.dtype for t in types))
    return _infer_nary("bool", allow_bool=True)(sig)


def _finish(call: Call, result) -> list[np.ndarray]:
    # a contiguous array of the inferred dtype (never a broadcast view);
    # integer Pow and Mean computed in float64 convert back as Cast does
    result, dtype = np.asarray(result), call.out_types[0].dtype
    if result.dtype.kind == "f" and np.dtype(dtype).kind in "iu":
        result = cast_array(result, dtype)
    return [np.require(result.astype(dtype, copy=False), requirements="C")]


def _define(name: str, fn: Callable, infer, pattern: Pattern) -> None:
    def ref(call: Call, args):
        with np.errstate(all="ignore"):  # inf/nan follow IEEE, as in ONNX
            return _finish(call, fn(*[a for a in args if a is not None], **_attrs_for(fn, call)))
    register(name, infer=infer, pattern=pattern)(ref)


def _attrs_for(fn: Callable, call: Call) -> dict:
    # Table functions that take attributes declare a keyword `a` (the attrs).
    code = getattr(fn, "__code__", None)  # ufuncs take no attributes
    return {"a": call.attrs} if code and "a" in code.co_varnames[:code.co_argcount] else {}


# ---- numpy definitions ----------------------------------------------------------

def _int_div(x, y):
    """ONNX integer Div truncates toward zero (numpy's // floors)."""
    if np.issubdtype(x.dtype, np.integer):
        safe = np.where(y == 0, 1, y)
        q = np.floor_divide(x, safe)
        fix = (np.remainder(x, safe) != 0) & ((x < 0) != (safe < 0))
        return q + fix.astype(q.dtype)
    return np.divide(x, y)


def _mod(x, y, a):
    if a.get("fmod", 0):
        return np.fmod(x, y)
    if np.issubdtype(x.dtype, np.floating):
        return np.mod(x, y)     # the sign of the divisor, as Python's %
    return np.remainder(x, np.where(y == 0, 1, y))


def _bit_shift(x, y, a):
    """ONNX BitShift; a shift by a negative count or by the width or more
    gives 0 (LEFT) or the sign fill (RIGHT), as the onnx reference."""
    width = x.dtype.itemsize * 8
    inside = (y >= 0) & (y < width)
    count = np.where(inside, y, 0)
    if a.get("direction") == "LEFT":
        unsigned = np.dtype(f"u{x.dtype.itemsize}")
        shifted = np.left_shift(x.view(unsigned), count.astype(unsigned)).view(x.dtype)
        return np.where(inside, shifted, 0)
    if a.get("direction") != "RIGHT":
        raise UnsupportedError(f"BitShift: direction {a.get('direction')!r} is not LEFT or RIGHT")
    return np.where(inside, np.right_shift(x, count), np.where(x < 0, -1, 0))


def _swish(x, a):
    return x * _sigmoid(a.get("alpha", 1.0) * x.astype(np.float64))


def _is_inf(x, a):
    return ((np.isposinf(x) & bool(a.get("detect_positive", 1)))
            | (np.isneginf(x) & bool(a.get("detect_negative", 1))))


def _pow(x, y):
    if np.issubdtype(x.dtype, np.integer):
        # ONNX integer Pow: exact integer result (negative exponents truncate)
        return np.power(x.astype(np.float64), y.astype(np.float64))
    return np.power(x, y.astype(x.dtype))


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _gelu(x, a):
    x64 = x.astype(np.float64)
    if a.get("approximate", "none") == "tanh":
        return 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64 ** 3)))
    if a.get("approximate", "none") != "none":
        raise UnsupportedError(f"Gelu: approximate={a['approximate']!r} is not supported")
    return 0.5 * x64 * (1 + _erf(x64 / math.sqrt(2)))


def _variadic(reduce_fn):
    def fn(*xs):
        out = xs[0]
        for x in xs[1:]:
            out = reduce_fn(out, x)
        return np.broadcast_to(out, np.broadcast_shapes(*[x.shape for x in xs]))
    return fn


def _mean(*xs):
    return _variadic(np.add)(*[x.astype(np.float64) for x in xs]) / len(xs)


def _elu(x, a):
    alpha = a.get("alpha", 1.0)
    return np.where(x > 0, x, alpha * (np.exp(x.astype(np.float64)) - 1))


def _selu(x, a):
    alpha = a.get("alpha", 1.67326319217681884765625)
    gamma = a.get("gamma", 1.05070102519989013671875)
    x64 = x.astype(np.float64)
    return gamma * np.where(x64 > 0, x64, alpha * (np.exp(x64) - 1))


def _celu(x, a):
    alpha = a.get("alpha", 1.0)
    x64 = x.astype(np.float64)
    return np.maximum(0, x64) + np.minimum(0, alpha * (np.exp(x64 / alpha) - 1))


def _hard_sigmoid(x, a):
    return np.clip(a.get("alpha", 0.2) * x.astype(np.float64) + a.get("beta", 0.5), 0, 1)


def _shrink(x, a):
    lambd, bias = a.get("lambd", 0.5), a.get("bias", 0.0)
    return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0))


UNARY_FLOAT = {  # float-only unary ops
    "Sqrt": np.sqrt, "Exp": np.exp, "Log": np.log, "Ceil": np.ceil,
    "Floor": np.floor, "Round": np.round,  # np.round: half to even, as ONNX
    "Reciprocal": np.reciprocal, "Tanh": np.tanh, "Sigmoid": _sigmoid,
    "Erf": _erf,
    "Sin": np.sin, "Cos": np.cos, "Tan": np.tan, "Asin": np.arcsin,
    "Acos": np.arccos, "Atan": np.arctan, "Sinh": np.sinh, "Cosh": np.cosh,
    "Asinh": np.arcsinh, "Acosh": np.arccosh, "Atanh": np.arctanh,
    "Softplus": lambda x: np.logaddexp(0, x),
    "Softsign": lambda x: x / (1 + np.abs(x)),
    "HardSwish": lambda x: x * np.clip(x / 6 + 0.5, 0, 1),
    "Mish": lambda x: x * np.tanh(np.logaddexp(0, x)),
    "LeakyRelu": lambda x, a: np.where(x >= 0, x, x * a.get("alpha", 0.01)),
    "Elu": _elu, "Selu": _selu, "Celu": _celu, "HardSigmoid": _hard_sigmoid,
    "ThresholdedRelu": lambda x, a: np.where(x > a.get("alpha", 1.0), x, 0),
    "Shrink": _shrink, "Gelu": _gelu, "Swish": _swish,
}
UNARY_ANY = {  # unary ops on any numeric dtype
    "Abs": np.abs, "Neg": np.negative, "Sign": np.sign,
    "Relu": lambda x: np.maximum(x, 0),
}
BINARY = {  # same-dtype operands, broadcast, result of the operands' dtype
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": _int_div,
    "Mod": _mod, "BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or,
    "BitwiseXor": np.bitwise_xor, "BitShift": _bit_shift,
}
COMPARE = {  # -> bool
    "Equal": np.equal, "Less": np.less, "Greater": np.greater,
    "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal,
}
LOGIC = {"And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor}
VARIADIC = {"Max": _variadic(np.maximum), "Min": _variadic(np.minimum),
            "Sum": _variadic(np.add), "Mean": _mean}

BITWISE = ("BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitShift")

for _name, _fn in UNARY_FLOAT.items():
    _define(_name, _fn, arity(1, 1)(_infer_unary(True)), Pattern.ELEMWISE)
for _name, _fn in UNARY_ANY.items():
    _define(_name, _fn, arity(1, 1)(_infer_unary(False)), Pattern.ELEMWISE)
for _name, _fn in BINARY.items():
    _define(_name, _fn, arity(2, 2)(_infer_nary(integer_only=_name in BITWISE)),
            Pattern.BROADCAST)
for _name, _fn in VARIADIC.items():
    _define(_name, _fn, arity(1)(_infer_nary()), Pattern.BROADCAST)
for _name, _fn in COMPARE.items():
    _define(_name, _fn, arity(2, 2)(_infer_nary("bool", allow_bool=_name == "Equal")),
            Pattern.BROADCAST)
for _name, _fn in LOGIC.items():
    _define(_name, _fn, arity(2, 2)(_infer_logic), Pattern.BROADCAST)
_define("Pow", _pow, arity(2, 2)(_infer_pow), Pattern.BROADCAST)
_define("Not", np.logical_not, arity(1, 1)(_infer_logic), Pattern.ELEMWISE)


def _infer_isnan(sig: Sig):
    _require_float(sig, sig.in_types[0].dtype)
    return [TensorType(sig.in_types[0].shape, "bool")]


_define("IsNaN", np.isnan, arity(1, 1)(_infer_isnan), Pattern.ELEMWISE)
_define("IsInf", _is_inf, arity(1, 1)(_infer_isnan), Pattern.ELEMWISE)


def _infer_bitwise_not(sig: Sig):
    t = sig.in_types[0]
    if not np.issubdtype(np.dtype(t.dtype), np.integer):
        raise sig.fail(f"needs an integer input, got {t.dtype}")
    return [TensorType(t.shape, t.dtype)]


_define("BitwiseNot", np.invert, arity(1, 1)(_infer_bitwise_not), Pattern.ELEMWISE)


# ---- ops with their own shape rules ------------------------------------------------

def _infer_prelu(sig: Sig):
    x, slope = sig.in_types[0], sig.in_types[1]
    _same_dtype(sig, [x, slope])
    # the slope broadcasts to X (unidirectionally)
    if broadcast(sig, [x.shape, slope.shape]) != x.shape:
        raise sig.fail(f"slope {list(slope.shape)} does not broadcast to X {list(x.shape)}")
    return [TensorType(x.shape, x.dtype)]


@register("PRelu", infer=arity(2, 2)(_infer_prelu), pattern=Pattern.BROADCAST)
def _prelu(call: Call, args):
    x, slope = args
    return _finish(call, np.where(x < 0, x * slope, x))


def _infer_clip(sig: Sig):
    x = sig.in_types[0]
    for i in (1, 2):
        if sig.has(i):
            if sig.in_types[i].size != 1:
                raise sig.fail(f"min/max must be scalars, got {list(sig.in_types[i].shape)}")
            # a float16 input also takes float32 bounds: Clip before opset 11
            # had float attributes, imported as float32 scalars (max and min
            # of halves with a float32 bound, rounded, are those of its half)
            if sig.in_types[i].dtype != x.dtype and (x.dtype, sig.in_types[i].dtype) != (
                    "float16", "float32"):
                raise sig.fail(f"min/max dtype {sig.in_types[i].dtype} differs from input {x.dtype}")
    return [TensorType(x.shape, x.dtype, x.quant)]


@register("Clip", infer=arity(1, 3)(_infer_clip), pattern=Pattern.ELEMWISE)
def _clip(call: Call, args):
    x = args[0]
    lo = args[1] if len(args) > 1 else None
    hi = args[2] if len(args) > 2 else None
    out = x
    if lo is not None:
        out = np.maximum(out, lo.reshape(()))
    if hi is not None:
        out = np.minimum(out, hi.reshape(()))
    return _finish(call, out)


def _infer_where(sig: Sig):
    cond, x, y = sig.in_types
    if cond.dtype != "bool":
        raise sig.fail(f"condition must be bool, got {cond.dtype}")
    dtype = _same_dtype(sig, [x, y])
    return [TensorType(broadcast(sig, [cond.shape, x.shape, y.shape]), dtype)]


@register("Where", infer=arity(3, 3)(_infer_where), pattern=Pattern.BROADCAST)
def _where(call: Call, args):
    return _finish(call, np.where(*args))


# ONNX TensorProto data type codes -> numpy names (those the IR knows).
ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16",
               6: "int32", 7: "int64", 9: "bool", 10: "float16", 11: "float64",
               12: "uint32", 13: "uint64"}


def _cast_target(sig_or_call) -> str:
    to = sig_or_call.attrs.get("to")
    if to not in ONNX_DTYPES:
        raise UnsupportedError(f"{node_label(sig_or_call.node)}: cast to ONNX data type "
                               f"{to} is not supported")
    return ONNX_DTYPES[to]


@register("Cast", infer=arity(1, 1)(lambda s: [TensorType(s.in_types[0].shape, _cast_target(s))]),
          pattern=Pattern.ELEMWISE)
def _cast(call: Call, args):
    return [cast_array(args[0], call.out_types[0].dtype)]


@register("CastLike", infer=arity(2, 2)(lambda s: [TensorType(s.in_types[0].shape,
                                                         s.in_types[1].dtype)]),
          pattern=Pattern.ELEMWISE)
def _cast_like(call: Call, args):
    return [cast_array(args[0], call.out_types[0].dtype)]


def cast_array(x: np.ndarray, dtype: str) -> np.ndarray:
    """ONNX Cast. Float -> int, undefined in ONNX out of the target's range,
    is defined for every value as the generated code computes it
    (aot.lower.rules.elementwise.float_to_int): truncated toward zero into int64,
    then wrapped to the target; NaN, infinities and values int64 cannot
    hold give 0."""
    with np.errstate(all="ignore"):
        if np.issubdtype(x.dtype, np.floating) and np.issubdtype(np.dtype(dtype), np.integer):
            limit = float(2**63)
            x = np.where((x >= -limit) & (x < limit), np.trunc(x), 0.0)
            return x.astype(np.int64).astype(dtype)
        return x.astype(dtype)


def _infer_identity(sig: Sig):
    return [sig.in_types[0]]


@register("Identity", infer=arity(1, 1)(_infer_identity), pattern=Pattern.ELEMWISE)
def _identity(call: Call, args):
    return [args[0]]


def _infer_dropout(sig: Sig):
    x = sig.in_types[0]
    if any(sig.has(i) and sig.in_types[i].size != 1 for i in (1, 2)):
        raise sig.fail("ratio and training_mode must be scalars")
    if sig.has(2) and bool(sig.const(2).reshape(())):
        ratio = float(sig.const(1).reshape(())) if sig.has(1) else 0.5
        if ratio != 0.0:  # a random mask: nothing to compile ahead of time
            raise UnsupportedError(f"{node_label(sig.node)}: Dropout in training mode is "
                                   "not supported (aot compiles for inference)")
    return [TensorType(x.shape, x.dtype, x.quant), TensorType(x.shape, "bool")]


# Its ratio and training_mode inputs are no broadcast operands.
@register("Dropout", infer=arity(1, 3)(_infer_dropout), pattern=Pattern.ELEMWISE,
          layout=Layout(sink=Sink.STAY))
def _dropout(call: Call, args):
    # Inference: identity; the mask (if asked for) keeps everything.
    return [args[0], np.ones(args[0].shape, dtype=bool)]

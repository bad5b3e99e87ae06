"""PrimFuncs -> one C99 translation unit.

The printer decides nothing: loops, vector widths and unrolling come from the
TIR as given. What it owns is spelling: types, exactly round-tripping
constants, the fewest parentheses that are still unambiguous (and quiet under
-Wall -Wextra), and small `static inline` helpers for what C has no operator
for (min/max, vector loads via memcpy, per-lane vector compare/select/math,
the fixed-point runtime helpers of aot/isa/calls.py).

Vectors use the GCC/Clang vector extension (`vector_size`); a bool vector is
a vector of uint8_t lanes holding 0 or 1.

C semantics relied on, as GCC and Clang define them on every target we
build for: `>>` of a negative value is arithmetic, `<<` of one shifts its
two's complement bits, conversion to a narrower signed type wraps. Results
of 8- and 16-bit arithmetic are cast back to their type (C computes them in
int), unsigned narrow products in uint32_t so they cannot overflow int.
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from aot.isa import arm_dsp, arm_mve, half, neon, rvv, x86
from aot.isa.arm_dsp import DspOp
from aot.isa.arm_mve import MveOp
from aot.codegen.check import check_func
from aot.isa.half import HalfOp
from aot.isa.calls import Helper, Lane, PairPack, PairSums, check_call, vector_helper
from aot.isa.dots import PairDot, QuadDot
from aot.isa.neon import (NeonFixedPoint, PairedQuadDot, PairwiseAdd, SaturatingNarrow, SixteenDot,
                          WideningMla)
from aot.isa.x86 import Fmadd, Pmuldq
from aot.codegen.names import c_comment, c_identifier, kernel_symbols
from aot.codegen.split import balanced_groups
from aot.errors import UnsupportedError
from aot.ir.tir import (Assign, Bin, Broadcast, Buffer, BufferKind, Call, Cast, Comment, Const,
                        Decl, DType, Expr, Fail, For, ForKind, If, Load, PrimFunc, Select, Seq,
                        Stmt, Store, Unary, Var, NTASKS, PHASE, TASK, can_fail, dtype_of,
                        is_split, nodes_of, phases, stmt_exprs, walk_stmt)
from aot.lower.tir_passes.inplace import aliased_params
from aot.lower.tir_passes.simplify import simplify_body

C_TYPES = {"bool": "uint8_t", "int8": "int8_t", "uint8": "uint8_t", "int16": "int16_t",
           "uint16": "uint16_t", "int32": "int32_t", "uint32": "uint32_t", "int64": "int64_t",
           "uint64": "uint64_t", "float32": "float", "float64": "double",
           "float16": "uint16_t"}      # a half's bits: every C compiler and target has them
_SHORT = {"bool": "b8", "int8": "i8", "uint8": "u8", "int16": "i16", "uint16": "u16",
          "int32": "i32", "uint32": "u32", "int64": "i64", "uint64": "u64", "float32": "f32",
          "float64": "f64", "float16": "f16"}
_ELEM_BYTES = {"bool": 1, "float32": 4, "float64": 8}

# C precedence, higher binds tighter. 16: primary/postfix, 15: unary and casts.
PRIMARY, UNARY, TERNARY = 16, 15, 3
_PREC = {"*": 13, "/": 13, "%": 13, "+": 12, "-": 12, "<<": 11, ">>": 11,
         "<": 10, "<=": 10, ">": 10, ">=": 10, "==": 9, "!=": 9,
         "&": 8, "^": 7, "|": 6, "and": 5, "or": 4}
_C_OP = {"and": "&&", "or": "||"}
_COMPARE = {"<", "<=", ">", ">=", "==", "!="}
_BITS = {"<<", ">>", "&", "^", "|"}
_WRAPPING = {"+", "-", "*", "/", "%", "<<"}             # may leave a narrow int's range
_LANE_NAMES = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne",
               "and": "and", "or": "or", "min": "min", "max": "max", "%": "fmod"}


@dataclass(frozen=True)
class CSource:
    source: str                      # a complete C99 translation unit
    prototypes: tuple[str, ...]      # `void name(...);` for a header, in func order
    symbols: dict[str, str]          # PrimFunc name -> C function name
    parts: tuple[str, ...] = ()      # the same functions as translation units of about
                                     # PART_CHARS each, for compiling in parallel


def c_type(d: DType) -> str:
    if d.lanes == 1:
        return C_TYPES[d.scalar]
    return f"aot_{_SHORT[d.scalar]}x{d.lanes}"


def _elem_bytes(scalar: str) -> int:
    return _ELEM_BYTES.get(scalar) or int("".join(c for c in scalar if c.isdigit())) // 8


def _narrow(d: DType) -> bool:
    """C promotes these to int: arithmetic results must be cast back to wrap."""
    return d.lanes == 1 and not d.is_float and d.bits < 32


# -------------------------------------------------------------------- constants

def c_float(value: float, scalar: str = "float32") -> str:
    """A literal that reads back as exactly `value` (inf/nan via <math.h>)."""
    value = float(value)
    if math.isnan(value):
        return "NAN" if scalar == "float32" else "(double)NAN"
    if math.isinf(value):
        text = "INFINITY" if scalar == "float32" else "(double)INFINITY"
        return "-" + text if value < 0 else text
    # numpy prints the shortest decimal that rounds back to the same float32.
    text = str(np.float32(value)) if scalar == "float32" else repr(value)
    if not any(c in text for c in ".e"):
        text += ".0"
    return text + "f" if scalar == "float32" else text


@functools.lru_cache(maxsize=None)
def _int_limits(scalar: str) -> tuple[int, int, int]:
    """(min, max, bits) of an integer type: np.iinfo builds an object a
    call, and a kernel prints ~10^4 integer constants."""
    info = np.iinfo(scalar)
    return int(info.min), int(info.max), info.bits


def c_int(value: int, scalar: str) -> str:
    v = int(value)
    lo, hi, bits = _int_limits(scalar)
    if not lo <= v <= hi:
        raise UnsupportedError(f"constant {v} does not fit {scalar}")
    if scalar.startswith("u"):
        return f"UINT64_C({v})" if bits == 64 else f"{v}u" if bits == 32 else str(v)
    if v == lo and bits >= 32:
        return f"INT{bits}_MIN"
    if v == hi and bits >= 32:
        return f"INT{bits}_MAX"
    if bits == 64:
        return f"-INT64_C({-v})" if v < 0 else f"INT64_C({v})"
    return str(v)


def c_half(value: float) -> str:
    """A float16 value as the uint16_t bits the C code holds halves in."""
    return f"0x{int(np.float16(value).view(np.uint16)):04x}u"


def c_const(c: Const) -> str:
    s = c.dtype.scalar
    if s == "bool":
        return "1" if c.value else "0"
    if s == "float16":
        return c_half(c.value)
    if c.dtype.is_float:
        return c_float(c.value, s)
    return c_int(c.value, s)


# ---------------------------------------------------------------------- module

@dataclass
class _Module:
    """What the functions printed so far need above them."""
    vectors: set = field(default_factory=set)         # DTypes with lanes > 1
    helpers: dict = field(default_factory=dict)       # name -> C text, dependency order
    gcc_x86: bool = False     # GCC_X86_SPELLINGS: the function's target is x86
    half_hw: bool = False     # HALF_CONVERSIONS: the target converts halves in hardware

    def vector(self, d: DType) -> str:
        if d.lanes & (d.lanes - 1):
            raise UnsupportedError(f"vector of {d.lanes} lanes: C vectors need a power of two")
        self.vectors.add(d)
        return c_type(d)

    def helper(self, name: str, make: Callable[[], str]) -> str:
        """Define `name` once; `make` may itself define what it depends on."""
        if name not in self.helpers:
            self.helpers[name] = None          # reserve: recursion guard
            text = make()
            del self.helpers[name]
            self.helpers[name] = text
        return name

    def preamble(self) -> str:
        lines = ["#include <math.h>", "#include <stdint.h>", "#include <string.h>", ""]
        if self.vectors:
            lines += ["/* Compilers note that passing vectors wider than the ISA's changes the",
                      "   ABI; these vectors never cross a translation unit. */",
                      "#if defined(__clang__)", "#if __has_warning(\"-Wpsabi\")",
                      '#pragma clang diagnostic ignored "-Wpsabi"', "#endif",
                      "#elif defined(__GNUC__)",
                      '#pragma GCC diagnostic ignored "-Wpsabi"', "#endif", ""]
            for d in sorted(self.vectors, key=lambda d: (list(C_TYPES).index(d.scalar), d.lanes)):
                size = _elem_bytes(d.scalar) * d.lanes
                lines.append(f"typedef {C_TYPES[d.scalar]} {c_type(d)} "
                             f"__attribute__((vector_size({size})));")
            lines.append("")
        for text in self.helpers.values():
            lines += [w for line in text.split("\n") for w in _wrap(line)] + [""]
        return "\n".join(lines)


def _lane_helper(mod: _Module, name: str, result: DType, args: Sequence[DType],
                 lane: Callable[[list[str]], str]) -> str:
    """A helper applying a scalar expression lane by lane (compilers re-vectorize it)."""
    def make() -> str:
        names = "abc"[:len(args)]
        params = ", ".join(f"{mod.vector(a) if a.lanes > 1 else c_type(a)} {n}"
                           for a, n in zip(args, names))
        elems = [f"{n}[k]" if a.lanes > 1 else n for a, n in zip(args, names)]
        rt = mod.vector(result)
        return (f"static inline {rt} {name}({params})\n{{\n    {rt} r = {{0}};\n"
                f"    for (int k = 0; k < {result.lanes}; ++k)\n"
                f"        r[k] = {lane(elems)};\n    return r;\n}}")
    return mod.helper(name, make)


# -------------------------------------------------------------------- float16

# Halves are uint16_t bits converted by these two: integer arithmetic only,
# so every compiler and target has them (no _Float16, no __fp16, no F16C).
_HALF_TO_FLOAT = """\
/* float16 bits -> float: exact (subnormals, infinities and NaN payloads kept) */
static inline float aot_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu;          /* exponent and mantissa */
    uint32_t bits;
    float f;
    if (em >= 0x7c00u) {                /* infinity, NaN: the top exponent */
        bits = (em << 13) | 0x7f800000u;
    } else if (em >= 0x0400u) {         /* normal: the exponent rebiased by 127 - 15 */
        bits = (em << 13) + 0x38000000u;
    } else {                            /* zero, subnormal: em * 2^-24 is exact */
        f = (float)em * 5.9604644775390625e-8f;
        memcpy(&bits, &f, sizeof bits);
    }
    bits |= sign;
    memcpy(&f, &bits, sizeof f);
    return f;
}"""
_FLOAT_TO_HALF = """\
/* float -> float16 bits, rounded to nearest even; a NaN stays a (quiet) NaN */
static inline uint16_t aot_float_to_half(float f)
{
    uint32_t x, ax, h;
    memcpy(&x, &f, sizeof x);
    ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) {             /* NaN: quiet, the payload's top bits kept */
        h = 0x7e00u | ((ax >> 13) & 0x3ffu);
    } else if (ax >= 0x477ff000u) {     /* 65520 and up round to infinity */
        h = 0x7c00u;
    } else if (ax >= 0x38800000u) {     /* a normal half: round at bit 13, then rebias */
        h = (ax + 0xfffu + ((ax >> 13) & 1u) - 0x38000000u) >> 13;
    } else {                            /* a subnormal half or zero: m * 2^-24, m rounded */
        uint32_t shift = 126u - (ax >> 23);
        uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t rest, half;
        shift = shift < 25u ? shift : 25u;  /* below 2^-25 every value rounds to 0 */
        h = m >> shift;
        rest = m & ((1u << shift) - 1u);
        half = 1u << (shift - 1u);
        h += rest > half || (rest == half && (h & 1u));
    }
    return (uint16_t)(((x >> 16) & 0x8000u) | h);
}"""
# by the type converted to: (helper name, its text)
_HALF_HELPERS = {"float32": ("aot_half_to_float", lambda: _HALF_TO_FLOAT),
                 "float16": ("aot_float_to_half", lambda: _FLOAT_TO_HALF)}

# The same conversions on vectors, branch-free in vector arithmetic (GCC's
# and Clang's vector extension: a comparison gives all-ones lanes, selected
# with & and |), so they compile to a few vector instructions per vector.
_HALF_TO_FLOAT_VECTOR = """\
/* float16 bits -> float, lane-wise: aot_half_to_float without branches */
static inline {f} aot_half_to_float_{fs}({h} h)
{{
    {u} x = __builtin_convertvector(h, {u});
    {u} em = x & 0x7fffu;
    {u} shifted = em << 13;
    {u} special = ({u})(em >= 0x7c00u);
    {u} normal = ({u})(em >= 0x0400u);
    {f} tiny = __builtin_convertvector(em, {f}) * 5.9604644775390625e-8f;
    {u} bits = (special & (shifted | 0x7f800000u))
        | (~special & normal & (shifted + 0x38000000u)) | (~normal & ({u})tiny);
    return ({f})(bits | ((x & 0x8000u) << 16));
}}"""
_FLOAT_TO_HALF_VECTOR = """\
/* float -> float16 bits, lane-wise: aot_float_to_half without branches */
static inline {h} aot_float_to_half_{hs}({f} f)
{{
    {u} x = ({u})f;
    {u} ax = x & 0x7fffffffu;
    {u} nan = 0x7e00u | ((ax >> 13) & 0x3ffu);
    {u} normal = (ax + 0xfffu + ((ax >> 13) & 1u) - 0x38000000u) >> 13;
    /* subnormal or zero: the significand shifted right by 14..25, rounded
       to nearest even (exponents of normal halves clamped: shifts stay < 32) */
    {u} e = ax >> 23;
    {u} low = ({u})(e < 112u);
    {u} shift = 126u - ((low & e) | (~low & 112u));
    {u} in_range = ({u})(shift < 25u);
    {u} s1 = ((in_range & shift) | (~in_range & 25u)) - 1u;
    {u} m = (ax & 0x7fffffu) | 0x800000u;
    {u} r1 = m >> s1;
    {u} q = r1 >> 1;
    {u} sticky = ({u})(m != (r1 << s1)) & 1u;
    {u} tiny = q + ((r1 & 1u) & (sticky | (q & 1u)));
    {u} is_nan = ({u})(ax > 0x7f800000u);
    {u} is_inf = ({u})(ax >= 0x477ff000u);
    {u} is_normal = ({u})(ax >= 0x38800000u);
    {u} h = (is_nan & nan) | (~is_nan & is_inf & 0x7c00u)
        | (~is_inf & is_normal & normal) | (~is_normal & tiny);
    return __builtin_convertvector(h | ((x >> 16) & 0x8000u), {h});
}}"""


def _half_vector_helper(mod: "_Module", dst: DType) -> str:
    """The vector conversion to dst (float32 or float16 lanes), defined once."""
    return mod.helper(*_half_vector_text(mod, dst))


def _half_vector_text(mod: "_Module", dst: DType) -> tuple[str, Callable[[], str]]:
    """(name, text) of the vector conversion to dst."""
    f, h, u = (mod.vector(DType(s, dst.lanes)) for s in ("float32", "float16", "uint32"))
    to_float = dst.scalar == "float32"
    name = f"aot_half_to_float_{f[4:]}" if to_float else f"aot_float_to_half_{h[4:]}"
    text = _HALF_TO_FLOAT_VECTOR if to_float else _FLOAT_TO_HALF_VECTOR
    return name, lambda: text.format(f=f, h=h, u=u, fs=f[4:], hs=h[4:])


def _half_instruction_helper(mod: "_Module", dst: DType) -> str:
    """The conversion to dst with the target's instructions (aot/isa/half.py)
    under `#if`, the portable helper defined and called in the `#else` (so
    that no branch leaves a function unused), defined once."""
    n = dst.lanes
    f, h = ((mod.vector(DType(s, n)) for s in ("float32", "float16")) if n > 1
            else (C_TYPES["float32"], C_TYPES["float16"]))
    to_float = dst.scalar == "float32"
    portable, text = _half_vector_text(mod, dst) if n > 1 else _HALF_HELPERS[dst.scalar]
    name = f"aot_convert_{'half_to_float' if to_float else 'float_to_half'}_{n}"
    mod.helper("aot_half_include", lambda: half.C_INCLUDE)
    if n > 1:
        mod.helper(f"aot_float16x{n}", lambda: half.c_half_typedefs(n))
    src, ret = (h, f) if to_float else (f, h)
    return mod.helper(name, lambda: half.c_half_helper(
        name, n, to_float, f, h, src, ret, portable, text()))


# ------------------------------------------------------------------ expressions

def _negative_const(e: Expr) -> bool:
    """A scalar constant whose negation is representable and positive."""
    if not isinstance(e, Const) or e.dtype.lanes != 1 or e.dtype.scalar == "bool":
        return False
    if e.dtype.is_float:
        return not math.isnan(e.value) and math.copysign(1.0, e.value) < 0
    return e.value < 0 and e.value != np.iinfo(e.dtype.scalar).min

def _needs_parens(parent: str, child: str) -> bool:
    """Parentheses that precedence makes redundant but -Wparentheses (and a
    reader) wants: inside shifts and bit ops, `&&` under `||`, `a < b < c`."""
    if parent in _BITS:
        return child != parent or parent in ("<<", ">>")
    if parent == "or":
        return child == "and"
    return parent in _COMPARE and child in _COMPARE


class _Printer:
    def __init__(self, mod: _Module, names: dict[Var, str], where: str):
        self.mod = mod
        self.names = names
        self.where = where
        # id -> (node, text, precedence): a sub-expression shared by several
        # places (about a third of an unrolled kernel's inner nodes) is
        # printed once; the node is kept so that its id stays its own
        self.printed: dict[int, tuple[Expr, str, int]] = {}
        self.methods: dict[type, Callable] = {}     # node class -> its _<class> method

    def error(self, what: str) -> UnsupportedError:
        return UnsupportedError(f"C codegen, {self.where}: {what}")

    def expr(self, e: Expr) -> str:
        return self.p(e)[0]

    def p(self, e: Expr) -> tuple[str, int]:
        """(text, precedence) of e."""
        hit = self.printed.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1], hit[2]
        method = self.methods.get(e.__class__)
        if method is None:
            method = getattr(self, "_" + type(e).__name__.lower(), None)
            if method is None:
                raise self.error(f"not a TIR expression: {e!r}")
            self.methods[e.__class__] = method
        text, prec = method(e)
        self.printed[id(e)] = (e, text, prec)
        return text, prec

    def wrap(self, e: Expr, min_prec: int) -> str:
        text, prec = self.p(e)
        return f"({text})" if prec < min_prec else text

    # leaves
    def _var(self, e: Var):
        return self.names[e], PRIMARY

    def _const(self, e: Const):
        text = c_const(e)
        return text, UNARY if text.startswith("-") else PRIMARY

    def _load(self, e: Load):
        buf = self.names[e.buffer]
        if e.lanes == 1:
            return f"{buf}[{self.expr(e.index)}]", PRIMARY
        vt = e.buffer.dtype.with_lanes(e.lanes)
        return f"{self._load_helper(vt)}(&{buf}[{self.expr(e.index)}])", PRIMARY

    def _load_helper(self, vt: DType) -> str:
        t, st = self.mod.vector(vt), C_TYPES[vt.scalar]
        return self.mod.helper(f"aot_load_{t[4:]}", lambda: (
            f"static inline {t} aot_load_{t[4:]}(const {st} *p)\n{{\n"
            f"    {t} v;\n    memcpy(&v, p, sizeof v);\n    return v;\n}}"))

    def store_helper(self, vt: DType) -> str:
        t, st = self.mod.vector(vt), C_TYPES[vt.scalar]
        return self.mod.helper(f"aot_store_{t[4:]}", lambda: (
            f"static inline void aot_store_{t[4:]}({st} *p, {t} v)\n{{\n"
            f"    memcpy(p, &v, sizeof v);\n}}"))

    def _broadcast(self, e: Broadcast):
        d = dtype_of(e)
        t = self.mod.vector(d)
        # An initializer, not a lane loop: GCC turns only this into one broadcast.
        lanes = ", ".join(["a"] * d.lanes)
        name = self.mod.helper(f"aot_splat_{t[4:]}", lambda: (
            f"static inline {t} aot_splat_{t[4:]}({C_TYPES[d.scalar]} a)\n{{\n"
            f"    {t} r = {{{lanes}}};\n    return r;\n}}"))
        return f"{name}({self.expr(e.value)})", PRIMARY

    # arithmetic
    def _bin(self, e: Bin):
        da = dtype_of(e.a)
        if da.lanes > 1:
            return self._vector_bin(e, da)
        if e.op in ("min", "max"):
            return self._call_text(self._minmax_helper(e.op, da), [e.a, e.b])
        if e.op == "%" and da.is_float:
            return self._call_text("fmodf" if da.scalar == "float32" else "fmod", [e.a, e.b])
        if _narrow(da) and e.op in _WRAPPING:
            if da.scalar.startswith("u") and e.op in ("*", "<<"):
                # uint16 * uint16 promotes to int and may overflow it: multiply unsigned.
                u32 = DType("uint32")
                e = Bin(e.op, Cast(u32, e.a), Cast(u32, e.b) if e.op == "*" else e.b)
            return f"({C_TYPES[da.scalar]})({self._infix(e)})", UNARY
        return self._infix(e), _PREC[e.op]

    def _infix(self, e: Bin) -> str:
        prec = _PREC[e.op]
        if e.op in ("+", "-") and _negative_const(e.b):
            # `x - -128` reads better as `x + 128`, and means the same (also in IEEE).
            e = Bin("-" if e.op == "+" else "+", e.a, Const(-e.b.value, e.b.dtype))

        def side(x: Expr, right: bool) -> str:
            text, p = self.p(x)
            child_op = x.op if isinstance(x, Bin) and p == _PREC.get(x.op) else None
            paren = p < prec or (right and p == prec)
            if child_op and _needs_parens(e.op, child_op):
                paren = True
            return f"({text})" if paren else text
        return f"{side(e.a, False)} {_C_OP.get(e.op, e.op)} {side(e.b, True)}"

    def _minmax_helper(self, op: str, d: DType) -> str:
        t = C_TYPES[d.scalar]
        cmp = "<" if op == "min" else ">"
        name = f"aot_{op}_{_SHORT[d.scalar]}"
        note = f"/* a {cmp} b ? a : b, as the LLVM backend does: a NaN in a picks b */\n"
        return self.mod.helper(name, lambda: (
            (note if d.is_float else "") +
            f"static inline {t} {name}({t} a, {t} b)\n{{\n"
            f"    return a {cmp} b ? a : b;\n}}"))

    def _vector_minmax(self, op: str, d: DType) -> str:
        """min/max of whole vectors as a compare and a bit blend: the lanes
        of `a < b ? a : b` (a NaN in a picks b), written so that compilers
        emit one min or max instruction at any width (a lane-by-lane loop
        over 16 lanes stays scalar under clang -O2)."""
        t = self.mod.vector(d)
        # A vector comparison gives the signed integer vector of the same
        # lane width, all ones where true.
        m = self.mod.vector(DType(f"int{8 * _elem_bytes(d.scalar)}", d.lanes))
        cmp = "<" if op == "min" else ">"
        name = f"aot_{op}_{t[4:]}"
        blend = (f"    const {m} m = a {cmp} b;\n"
                 f"    return ({t})((({m})a & m) | (({m})b & ~m));\n")
        if d.lanes * _elem_bytes(d.scalar) > 32 or not self.mod.gcc_x86:
            return self.mod.helper(name, lambda: (
                f"static inline {t} {name}({t} a, {t} b)\n{{\n{blend}}}"))
        body = x86.c_gcc_minmax(t, d.lanes, cmp, blend)
        return self.mod.helper(name, lambda: (
            f"static inline {t} {name}({t} a, {t} b)\n{{\n{body}}}"))

    def _vector_bin(self, e: Bin, d: DType):
        native = e.op in ("+", "-", "*", "/") or (
            not d.is_float and e.op in ("%", "<<", ">>", "&", "|", "^"))
        if native and d.scalar in ("int8", "int16") and e.op in ("+", "-", "*", "<<"):
            # Vector lanes are not promoted to int: wrap in the unsigned type instead
            # of overflowing a signed lane (undefined, and GCC exploits it).
            t, u = self.mod.vector(d), self.mod.vector(DType("u" + d.scalar, d.lanes))
            a, b = (f"({u}){self.wrap(x, UNARY)}" for x in (e.a, e.b))
            return f"({t})({a} {e.op} {b})", UNARY
        if native and d.scalar != "bool":
            return self._infix(e), _PREC[e.op]
        t = self.mod.vector(d)
        out = dtype_of(e)
        if e.op in ("min", "max"):
            return self._call_text(self._vector_minmax(e.op, d), [e.a, e.b])
        elif e.op == "%":
            fn = "fmodf" if d.scalar == "float32" else "fmod"
            lane = lambda a: f"{fn}({a[0]}, {a[1]})"  # noqa: E731
        else:
            op = _C_OP.get(e.op, e.op)
            lane = lambda a: f"{a[0]} {op} {a[1]}"  # noqa: E731
        name = _lane_helper(self.mod, f"aot_{_LANE_NAMES.get(e.op, 'op')}_{t[4:]}", out,
                            [d, d], lane)
        return self._call_text(name, [e.a, e.b])

    def _unary(self, e: Unary):
        d = dtype_of(e.a)
        if e.op == "neg":
            text = self.wrap(e.a, PRIMARY) if self._starts_signed(e.a) else self.wrap(e.a, UNARY)
            if _narrow(d):
                return f"({C_TYPES[d.scalar]})-{text}", UNARY
            if d.lanes > 1 and d.scalar in ("int8", "int16"):     # as in _vector_bin
                u = self.mod.vector(DType("u" + d.scalar, d.lanes))
                return f"({self.mod.vector(d)})-({u}){self.wrap(e.a, UNARY)}", UNARY
            return f"-{text}", UNARY
        if e.op == "not":
            if d.lanes > 1:
                t = self.mod.vector(d)
                name = _lane_helper(self.mod, f"aot_not_{t[4:]}", d.with_lanes(d.lanes) if
                                    d.scalar == "bool" else DType("bool", d.lanes), [d],
                                    lambda a: f"!{a[0]}")
                return self._call_text(name, [e.a])
            return f"!{self.wrap(e.a, UNARY)}", UNARY
        if e.op == "bitnot":
            if _narrow(d):
                return f"({C_TYPES[d.scalar]})~{self.wrap(e.a, UNARY)}", UNARY
            return f"~{self.wrap(e.a, UNARY)}", UNARY
        if e.op == "abs":
            if d.is_float:
                fn = "fabsf" if d.scalar == "float32" else "fabs"
                lane = lambda a: f"{fn}({a[0]})"  # noqa: E731
            else:
                t = C_TYPES[d.scalar]
                fn = self.mod.helper(f"aot_abs_{_SHORT[d.scalar]}", lambda: (
                    f"static inline {t} aot_abs_{_SHORT[d.scalar]}({t} a)\n{{\n"
                    f"    return a < 0 ? ({t})-a : a;\n}}"))
                lane = lambda a: f"{fn}({a[0]})"  # noqa: E731
            if d.lanes > 1:
                t = self.mod.vector(d)
                fn = _lane_helper(self.mod, f"aot_abs_{t[4:]}", d, [d], lane)
            return self._call_text(fn, [e.a])
        raise self.error(f"unknown unary op '{e.op}'")

    @staticmethod
    def _starts_signed(e: Expr) -> bool:
        """`- -x` must not print as `--x`."""
        return (isinstance(e, Unary) and e.op in ("neg", "-")) or (
            isinstance(e, Const) and (e.value < 0 or (e.dtype.is_float and
                                                     math.copysign(1.0, e.value) < 0)))

    def _cast(self, e: Cast):
        src, dst = dtype_of(e.a), e.dtype
        if e.bits and src.scalar != dst.scalar:
            return self._bit_cast(src, dst, e.a)
        if "float16" in (src.scalar, dst.scalar):
            return self._half_cast(src, dst, e.a)
        if dst.lanes > 1:
            if src == dst:
                return self.p(e.a)
            if dst.scalar == "bool":
                t = self.mod.vector(src)
                name = _lane_helper(self.mod, f"aot_nonzero_{t[4:]}", dst, [src],
                                    lambda a: f"{a[0]} != 0")
                return self._call_text(name, [e.a])
            return self._call_text(self._convert_helper(src, dst), [e.a])
        if dst.scalar == "bool":
            return f"({self.wrap(e.a, _PREC['!='] + 1)} != 0)", PRIMARY
        if src == dst:
            return self.p(e.a)
        return f"({C_TYPES[dst.scalar]}){self.wrap(e.a, UNARY)}", UNARY

    def _bit_cast(self, src: DType, dst: DType, a: Expr):
        """The bits of `a` read as dst: a vector cast (GCC's and Clang's vector
        extension reinterprets between vectors of one size), a memcpy for a
        scalar (strict-aliasing safe; compilers make it a register move)."""
        if dst.lanes > 1:
            return f"({self.mod.vector(dst)}){self.wrap(a, UNARY)}", UNARY
        s, d = C_TYPES[src.scalar], C_TYPES[dst.scalar]
        name = f"aot_bits_{src.scalar}_as_{dst.scalar}"
        self.mod.helper(name, lambda: (
            f"static inline {d} {name}({s} x)\n{{\n    {d} y;\n"
            f"    memcpy(&y, &x, sizeof y);\n    return y;\n}}"))
        return self._call_text(name, [a])

    def _half_cast(self, src: DType, dst: DType, a: Expr):
        """A float16 <-> float32 conversion (aot/lower/tir_passes/float16.py leaves no other)."""
        if (src.scalar, dst.scalar) not in (("float16", "float32"), ("float32", "float16")):
            raise self.error(f"conversion from {src} to {dst} (the float16 pass converts "
                             "halves to and from float32 only)")
        if self.mod.half_hw:
            return self._call_text(_half_instruction_helper(self.mod, dst), [a])
        if dst.lanes > 1:
            return self._call_text(_half_vector_helper(self.mod, dst), [a])
        return self._call_text(self.mod.helper(*_HALF_HELPERS[dst.scalar]), [a])

    def _convert_helper(self, src: DType, dst: DType) -> str:
        """__builtin_convertvector; on an x86 target (GCC_X86_SPELLINGS, set
        by the legalization pass) spelled for GCC on x86 as it vectorizes
        best (x86.c_gcc_convert)."""
        ts, td = self.mod.vector(src), self.mod.vector(dst)
        name = f"aot_convert_{td[4:]}_{ts[4:]}"
        if not self.mod.gcc_x86:
            return self.mod.helper(name, lambda: (
                f"static inline {td} {name}({ts} a)\n{{\n"
                f"    return __builtin_convertvector(a, {td});\n}}"))
        body = x86.c_gcc_convert(self.mod, src, dst, C_TYPES[dst.scalar])
        return self.mod.helper(name, lambda: (
            "/* __builtin_convertvector, spelled for GCC on x86 as it vectorizes best */\n"
            f"static inline {td} {name}({ts} a)\n{{\n{body}}}"))

    def _select(self, e: Select):
        dc, da = dtype_of(e.cond), dtype_of(e.a)
        if da.lanes > 1:
            t = self.mod.vector(da)
            name = _lane_helper(self.mod, f"aot_select_{t[4:]}", da, [dc, da, da],
                                lambda a: f"{a[0]} ? {a[1]} : {a[2]}")
            return self._call_text(name, [e.cond, e.a, e.b])
        cond = self.wrap(e.cond, TERNARY + 1)
        return f"{cond} ? {self.wrap(e.a, TERNARY + 1)} : {self.wrap(e.b, TERNARY)}", TERNARY

    def _call(self, e: Call):
        fn = check_call(e.fn, e.args, e.dtype)
        if isinstance(fn, DspOp):
            return self._call_text(arm_dsp.c_helper(self.mod, fn), list(e.args))
        if isinstance(fn, MveOp):
            return arm_mve.c_call(self, fn, e.args), PRIMARY
        if isinstance(fn, PairDot):
            return self._call_text(self._pair_dot(e.dtype, fn), list(e.args))
        if isinstance(fn, PairPack):
            return self._call_text(self._pair_pack(e.dtype, fn), list(e.args))
        if isinstance(fn, QuadDot):
            return self._call_text(self._quad_dot(e.dtype, fn), list(e.args))
        if isinstance(fn, WideningMla):
            return self._call_text(neon.c_widening_mla(self.mod, e.dtype, fn), list(e.args))
        if isinstance(fn, PairedQuadDot):
            return self._call_text(neon.c_paired_quad_dot(self.mod, fn), list(e.args))
        if isinstance(fn, SixteenDot):
            return self._call_text(neon.c_sixteen_dot(self.mod, fn), list(e.args))
        if isinstance(fn, PairwiseAdd):
            return self._call_text(neon.c_pairwise_add(self.mod, fn), list(e.args))
        if isinstance(fn, SaturatingNarrow):
            return self._call_text(neon.c_saturating_narrow(self.mod, fn), list(e.args))
        if isinstance(fn, NeonFixedPoint):
            n = e.dtype.lanes
            args = [a if dtype_of(a).lanes > 1 else Broadcast(a, n) for a in e.args]
            generic = self._vector_helper_fn(vector_helper(fn.generic, n))
            generic4 = self._vector_helper_fn(vector_helper(fn.generic, 4)) if n != 4 else ""
            return self._call_text(neon.c_fixed_point(self.mod, fn, generic, n, generic4), args)
        if isinstance(fn, HalfOp):
            return self._call_text(self._half_op(fn), list(e.args))
        if isinstance(fn, Lane):        # a vector subscript (GCC's and Clang's vector extension)
            return f"{self.wrap(e.args[0], PRIMARY)}[{self.expr(e.args[1])}]", PRIMARY
        if isinstance(fn, PairSums):
            return self._call_text(self._pair_sums(e.dtype), list(e.args))
        if isinstance(fn, (Helper, Pmuldq)) and e.dtype.lanes > 1:
            pmuldq = isinstance(fn, Pmuldq)
            whole = vector_helper(fn.generic if pmuldq else fn.name, e.dtype.lanes)
            if whole is not None:
                args = [a if dtype_of(a).lanes > 1 else Broadcast(a, e.dtype.lanes)
                        for a in e.args]
                return self._call_text(self._vector_helper_fn(whole, pmuldq), args)
        if isinstance(fn, Fmadd):
            return self._call_text(self._fmadd(e.dtype), [
                a if dtype_of(a).lanes > 1 else Broadcast(a, e.dtype.lanes) for a in e.args])
        name = self._helper_fn(fn) if isinstance(fn, Helper) else fn.c_name
        if e.dtype.lanes > 1:
            arg_types = [dtype_of(a) for a in e.args]
            t = self.mod.vector(e.dtype)
            name = _lane_helper(self.mod, f"{name}_{t[4:]}" if name.startswith("aot_")
                                else f"aot_{name}_{t[4:]}", e.dtype, arg_types,
                                lambda a, n=name: f"{n}({', '.join(a)})")
        return self._call_text(name, list(e.args))

    def _fmadd(self, d: DType) -> str:
        """x86_fmadd (x86.Fmadd): the vfmadd intrinsic (x86.c_fmadd) under
        `#if`, fmaf's lane loop otherwise."""
        t = self.mod.vector(d)
        name = f"aot_fmaf_{t[4:]}"
        head, isa, fast = x86.c_fmadd(d.lanes, t)
        return self.mod.helper(name, lambda: (
            f"{head}static inline {t} {name}({t} a, {t} b, {t} c)\n{{\n"
            f"#if {isa}\n    return {fast};\n#else\n    {t} r = {{0}};\n"
            f"    for (int k = 0; k < {d.lanes}; ++k)\n        r[k] = fmaf(a[k], b[k], c[k]);\n"
            "    return r;\n#endif\n}"))

    def _pair_sums(self, d: DType) -> str:
        """aot_pair_sums (calls.PairSums): the even lanes of both operands
        plus their odd lanes, two shuffles and an add where the compiler
        has __builtin_shufflevector (Clang, GCC 12), else the lane formula."""
        t = self.mod.vector(d)
        name = f"aot_pair_sums_{t[4:]}"
        n = d.lanes
        even = ", ".join(str(i) for i in range(0, 2 * n, 2))
        odd = ", ".join(str(i) for i in range(1, 2 * n, 2))
        lanes = ", ".join(f"{v}[{i}] + {v}[{i + 1}]" for v in "ab" for i in range(0, n, 2))
        return self.mod.helper(name, lambda: (
            f"static inline {t} {name}({t} a, {t} b)\n{{\n"
            "#if defined(__clang__) || __GNUC__ >= 12\n"
            f"    return __builtin_shufflevector(a, b, {even})\n"
            f"        + __builtin_shufflevector(a, b, {odd});\n"
            f"#else\n    {t} r = {{{lanes}}};\n    return r;\n#endif\n}}"))

    def _half_op(self, op: HalfOp) -> str:
        """A half op's helper (aot/isa/half.py: FMLA, FADD, FSUB on 8 half
        lanes), defined once."""
        h = self.mod.vector(DType("float16", op.lanes))
        # the scalar conversions the package already spells (the portable
        # helpers sit in their `#else`, so they are not defined again)
        if self.mod.half_hw:
            to_float = _half_instruction_helper(self.mod, DType("float32"))
            to_half = _half_instruction_helper(self.mod, DType("float16"))
        else:
            to_float = self.mod.helper(*_HALF_HELPERS["float32"])
            to_half = self.mod.helper(*_HALF_HELPERS["float16"])
        return self.mod.helper(f"{op.name}_{op.lanes}",
                               lambda: half.c_half_op(op, h, to_float, to_half))

    def _pair_dot(self, d: DType, fn: PairDot) -> str:
        """aot_dot2 / aot_dot2p (dots.PairDot): the lane formula, or for
        x86_pmaddwd(_packed) pmaddwd (x86.c_pmaddwd) with the formula left
        for a compiler not given the ISA."""
        packed = fn.packed
        rt, wt = self.mod.vector(d), self.mod.vector(DType("int16", 2 * d.lanes))
        name = f"aot_dot2{'p' if packed else ''}_{rt[4:]}"
        fast = x86.c_pmaddwd(d.lanes, rt, wt, packed) if fn.pmaddwd else ""
        if fn.shifts:
            ut = self.mod.vector(DType("uint32", d.lanes))
            return self.mod.helper(name, lambda: (
                f"/* the halves of the pairs by shifts of their int32 view (aot/isa/rvv.py) */\n"
                f"static inline {rt} {name}({'int32_t p' if packed else 'int16_t x0, int16_t x1'}"
                f", {wt} w)\n{{\n{rvv.c_pair_dot(rt, ut, packed)}}}"))
        if packed:
            params = f"int32_t p, {wt} w"
            halves = ("    const int16_t x0 = (int16_t)p;\n"
                      "    const int32_t x1 = (p - (p & 65535)) / 65536;\n")
        else:
            params = f"int16_t x0, int16_t x1, {wt} w"
            halves = ""
        return self.mod.helper(name, lambda: (
            f"static inline {rt} {name}({params})\n{{\n{fast}{halves}"
            f"    {rt} r = {{0}};\n    for (int k = 0; k < {d.lanes}; ++k) {{\n"
            f"        r[k] = x0 * w[2 * k] + x1 * w[2 * k + 1];\n    }}\n    return r;\n"
            + ("#endif\n" if fast else "") + "}"))

    def _pair_pack(self, d: DType, fn: PairPack) -> str:
        """aot_pack2 / aot_pack4 (intrinsics.PairPack): the lane formula, or
        for aot_pack2_bytes / aot_pack4_bytes the vector's bytes (the formula
        left for a compiler that does not say it is little-endian)."""
        n = fn.group
        if d.lanes == 1:
            return self._quad_pack_one(fn)
        rt, vt = self.mod.vector(d), self.mod.vector(DType(fn.source, n * d.lanes))
        name = f"aot_pack{n}_{rt[4:]}"
        mask, last = (65535, "v[2 * k + 1] * 65536") if n == 2 else (255, "v[4 * k + 3] * 16777216")
        low = " + ".join(f"(v[{n} * k{f' + {j}' if j else ''}] & {mask})"
                         + (f" * {1 << 8 * j}" if j else "") for j in range(n - 1))
        formula = (f"    {rt} r = {{0}};\n    for (int k = 0; k < {d.lanes}; ++k) {{\n"
                   f"        r[k] = {low} + {last};\n    }}\n"
                   "    return r;\n")
        if fn.bytes:
            formula = ("#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__\n"
                       f"    return ({rt})v;\n#else\n{formula}#endif\n")
        return self.mod.helper(name, lambda: f"static inline {rt} {name}({vt} v)\n{{\n{formula}}}")

    def _quad_pack_one(self, fn: PairPack) -> str:
        """aot_pack4 of one quad (int8 x 4 -> int32): its bytes through
        memcpy on a little-endian compiler, else the formula."""
        vt = self.mod.vector(DType("int8", 4))
        name = "aot_pack4_bytes_i32" if fn.bytes else "aot_pack4_i32"
        formula = ("    return (v[0] & 255) + (v[1] & 255) * 256 + (v[2] & 255) * 65536"
                   " + v[3] * 16777216;\n")
        if fn.bytes:
            formula = ("#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__\n"
                       "    int32_t r;\n    memcpy(&r, &v, sizeof r);\n    return r;\n"
                       f"#else\n{formula}#endif\n")
        return self.mod.helper(name, lambda: f"static inline int32_t {name}({vt} v)\n{{\n"
                               f"{formula}}}")

    def _quad_dot(self, d: DType, fn: QuadDot) -> str:
        """aot_dot4 / aot_dot4u / aot_dot4s (dots.QuadDot): the lane
        formula, or for arm_sdot, arm_smull_dot4 and x86_vpdpbusd the
        instruction (neon.c_quad_dot, x86.c_vpdpbusd) with the formula left
        for a compiler not given the ISA."""
        rt, wt = self.mod.vector(d), self.mod.vector(DType("int8", 4 * d.lanes))
        name = f"{fn.name}_{rt[4:]}"
        byte = "(int32_t)(u >> {s} & 255u)" if fn.unsigned else \
            "(((int32_t)(u >> {s} & 255u) ^ 128) - 128)"
        terms = " + ".join(f"{byte.format(s=8 * j)} * w[4 * k + {j}]" for j in range(4))
        formula = (f"    const uint32_t u = (uint32_t)q;\n    {rt} r = acc;\n"
                   f"    for (int k = 0; k < {d.lanes}; ++k) {{\n"
                   f"        r[k] += {terms};\n    }}\n    return r;\n")
        head, body = "", formula
        if fn.instruction == "vpdpbusd":
            head, isa, fast = x86.c_vpdpbusd(d.lanes, rt)
            body = f"#if {isa}\n    return {fast};\n#else\n{formula}#endif\n"
        elif fn.instruction:
            head, isa, fast = neon.c_quad_dot(fn, rt)
            body = f"#if {isa}\n{fast}#else\n{formula}#endif\n"
        return self.mod.helper(name, lambda: (
            f"{head}static inline {rt} {name}({rt} acc, int32_t q, {wt} w)\n{{\n{body}}}"))

    def _helper_fn(self, h: Helper) -> str:
        def make() -> str:
            names = {p: p.name for p in h.params}
            inner = _Printer(self.mod, names, h.name)
            params = ", ".join(f"{c_type(p.dtype)} {p.name}" for p in h.params)
            lines = [f"/* {c_comment(h.doc)} */",
                     f"static inline {c_type(h.dtype)} {h.name}({params})", "{"]
            for var, value in h.lets:
                text = inner.expr(value)
                names[var] = var.name
                lines.append(f"    const {c_type(var.dtype)} {var.name} = {text};")
            lines += [f"    return {inner.expr(h.result)};", "}"]
            return "\n".join(lines)
        return self.mod.helper(h.name, make)

    def _vector_helper_fn(self, h: Helper, pmuldq: bool = False) -> str:
        """A whole-vector helper (calls.vector_helper), named for its
        lanes; `pmuldq` (x86_pmuldq_rdhm): aot_rdhm multiplies with pmuldq
        (x86.c_pmuldq_rdhm), which compilers do not form from the int64
        formula."""
        d = h.dtype
        t = self.mod.vector(d)
        name = f"{h.name}_{t[4:]}"
        fast = pmuldq and d.lanes in x86.C_PMULDQ

        def make() -> str:
            names = {p: p.name for p in h.params}
            inner = _Printer(self.mod, names, name)
            params = ", ".join(f"{self.mod.vector(p.dtype)} {p.name}" for p in h.params)
            lines = [f"/* {c_comment(h.doc)} */", f"static inline {t} {name}({params})", "{"]
            if h.name == "aot_rdhm" and d.scalar == "int32":
                # Both branches spell their constants out: a splat helper
                # used by one branch only would be an unused function.
                wide = self.mod.vector(DType("int64", d.lanes))
                splat = lambda v, n: "{" + ", ".join([v] * n) + "}"  # noqa: E731
                formula = [
                    f"    const {wide} round = {splat('INT64_C(1073741824)', d.lanes)};",
                    f"    const {wide} shift = {splat('INT64_C(31)', d.lanes)};",
                    f"    return __builtin_convertvector((__builtin_convertvector(a, {wide}) "
                    f"* __builtin_convertvector(b, {wide}) + round) >> shift, {t});"]
                if not fast:
                    return "\n".join(lines + formula + ["}"])
                return "\n".join(lines + x86.c_pmuldq_rdhm(self.mod, d.lanes, t, formula)
                                  + ["}"])
            for var, value in h.lets:
                text = inner.expr(value)
                names[var] = var.name
                lines.append(f"    const {self.mod.vector(var.dtype)} {var.name} = {text};")
            lines.append(f"    return {inner.expr(h.result)};")
            return "\n".join(lines + ["}"])
        return self.mod.helper(name, make)

    def _call_text(self, name: str, args: list[Expr]):
        return f"{name}({', '.join(self.expr(a) for a in args)})", PRIMARY


# ------------------------------------------------------------------- statements

def _signature(func: PrimFunc, symbol: str, names: dict, taken: set[str]) -> str:
    """`void symbol(T *restrict p, ...)`, naming each parameter in `names`;
    an output written over an input and that input are not restrict."""
    params = []
    shared = aliased_params(func)
    for b in func.params:
        names[b] = c_identifier(b.name, taken)
        const = "const " if b.kind in (BufferKind.INPUT, BufferKind.PARAM) else ""
        restrict = "" if b.name in shared else "restrict "
        params.append(f"{const}{C_TYPES[b.dtype.scalar]} *{restrict}{names[b]}")
    if is_split(func):      # which task of how many runs now (tir.ForKind.PARALLEL)
        split = (PHASE, TASK, NTASKS) if phases(func) > 1 else (TASK, NTASKS)
        for v in split:
            names[v] = c_identifier(v.name, taken)
            params.append(f"int32_t {names[v]}")
    # a kernel with run-time checks returns its status (tir.Fail)
    head = f"{'int32_t' if can_fail(func) else 'void'} {symbol}("
    one_line = head + ", ".join(params) + ")"
    if len(one_line) <= 100 or not params:
        return one_line if params else head + "void)"
    return head + "\n" + ",\n".join("    " + p for p in params) + ")"


class _FuncPrinter:
    def __init__(self, mod: _Module, func: PrimFunc, symbol: str):
        uses = check_func(func)
        self.func = func
        self.body = simplify_body(func.body)
        self.symbol = symbol
        self.taken: set[str] = set()
        self.names: dict = {}
        self.ex = _Printer(mod, self.names, f"function {func.name}")
        self.mod = mod
        self.lines: list[str] = []
        # what simplify folded may have read a variable: then walk its result
        self.used, self.read = uses if self.body is func.body else _buffers_and_vars(self.body)

    def signature(self) -> str:
        return _signature(self.func, self.symbol, self.names, self.taken)

    def print(self) -> str:
        sig = self.signature()
        out = [*_header_comment(self.func), sig, "{"]
        for b in self.func.params:
            if b not in self.used:
                self.lines.append(f"    (void){self.names[b]};")
        self.stmt(self.body, 1)
        if can_fail(self.func):
            self.emit(1, "return 0;")
        return "\n".join(out + self.lines + ["}"])

    def emit(self, depth: int, text: str):
        self.lines.extend(_wrap("    " * depth + text))

    def declare(self, var: Var) -> str:
        if var not in self.names:
            self.names[var] = c_identifier(var.name, self.taken)
        return self.names[var]

    def stmt(self, s: Stmt, depth: int):
        if isinstance(s, Seq):
            for x in s.stmts:
                self.stmt(x, depth)
        elif isinstance(s, Store):
            self.store(s, depth)
        elif isinstance(s, Decl):
            value = self.ex.expr(s.init)
            name = self.declare(s.var)
            self.emit(depth, f"{self._type(s.var.dtype)} {name} = {value};")
            if s.var not in self.read:
                self.emit(depth, f"(void){name};")
        elif isinstance(s, Assign):
            self.emit(depth, f"{self.names[s.var]} = {self.ex.expr(s.value)};")
        elif isinstance(s, For):
            self.loop(s, depth)
        elif isinstance(s, If):
            self.emit(depth, f"if ({self.ex.expr(s.cond)}) {{")
            self.stmt(s.then, depth + 1)
            if s.orelse is not None:
                self.emit(depth, "} else {")
                self.stmt(s.orelse, depth + 1)
            self.emit(depth, "}")
        elif isinstance(s, Comment):
            self.emit(depth, f"/* {c_comment(s.text)} */")
        elif isinstance(s, Fail):
            self.emit(depth, f"return {s.code};")

    def _type(self, d: DType) -> str:
        return self.mod.vector(d) if d.lanes > 1 else C_TYPES[d.scalar]

    def store(self, s: Store, depth: int):
        d = dtype_of(s.value)
        buf = self.names[s.buffer]
        index, value = self.ex.expr(s.index), self.ex.expr(s.value)
        if d.lanes == 1:
            self.emit(depth, f"{buf}[{index}] = {value};")
        else:
            self.emit(depth, f"{self.ex.store_helper(d)}(&{buf}[{index}], {value});")

    def loop(self, s: For, depth: int):
        i = self.declare(s.var)
        t = C_TYPES[s.var.dtype.scalar]
        if t == "int32_t":
            # A pointer-sized counter, as hand-written index loops use: with an
            # int32_t one, clang recomputes and zero-extends `i + k` for every
            # constant k of an unrolled tile instead of folding k into the
            # address (ResNet-8 int8: 9% more instructions). Indices fit int32
            # either way, so the values are the same.
            t = "intptr_t"
        end = c_int(s.start + s.extent, s.var.dtype.scalar)
        step = "++" + i if s.step == 1 else f"{i} += {s.step}"
        if s.kind is ForKind.PARALLEL:
            self.emit(depth, f"for ({t} {i} = {self._share(s, depth, 0)}; "
                             f"{i} < {self._share(s, depth, 1)}; {step}) {{")
            self.stmt(s.body, depth + 1)
            self.emit(depth, "}")
            return
        if s.kind is ForKind.UNROLLED:
            trips = max(1, -(-s.extent // s.step))
            self.lines.append(f"#pragma GCC unroll {trips}")
        elif s.kind is ForKind.VECTORIZED:
            self.emit(depth, f"/* vectorized: {c_comment(s.var.name)} steps by {s.step} */")
        self.emit(depth, f"for ({t} {i} = {c_int(s.start, s.var.dtype.scalar)}; "
                         f"{i} < {end}; {step}) {{")
        self.stmt(s.body, depth + 1)
        self.emit(depth, "}")


    def _share(self, s: For, depth: int, end: int) -> str:
        """Where this task's balanced share of the loop's trips starts (end
        0) or ends (end 1), declared as a constant before the loop."""
        trips = -(-s.extent // s.step)
        i = self.names[s.var]
        if end == 0:
            self.emit(depth, f"/* this task's share of the {trips} trips of {i} */")
        name = c_identifier(f"{i}_{'end' if end else 'first'}", self.taken)
        task = self.names[TASK] if not end else f"({self.names[TASK]} + 1)"
        self.emit(depth, f"const intptr_t {name} = (intptr_t){task} * {trips} / "
                         f"{self.names[NTASKS]};")
        scaled = name if s.step == 1 else f"{name} * {s.step}"
        return scaled if s.start == 0 else f"{s.start} + {scaled}"


WIDTH = 100
_BREAK_BEFORE = (" ? ", " : ", " || ", " && ", " + ", " - ", " * ", " | ", " & ")


# by text: an unrolled kernel repeats its statements (a third of
# ic_resnet8_f32's long lines are another's twin), and the split is the same
@functools.lru_cache(maxsize=1 << 14)
def _wrap(line: str, width: int = WIDTH) -> tuple[str, ...]:
    """A long statement split at its outermost operators or commas, with
    continuation lines indented two levels (generated code has no strings).

    Each piece breaks at the outermost break point within the width, the
    last of equals; failing that at the first outermost one past it (a line
    a little long beats one of 200 characters). The break points are found
    once for the whole statement: a piece's depths and positions are the
    statement's less a constant, which changes no choice."""
    stripped = line.lstrip()
    if len(line) <= width or stripped.startswith(("/*", "#")):
        return (line,)
    cont = " " * (len(line) - len(stripped) + 8)
    points = _break_points(line, len(cont) + 8)
    # later[i]: the outermost, first break point among points[i:]
    later: list[tuple[int, int] | None] = [None] * (len(points) + 1)
    for i in range(len(points) - 1, -1, -1):
        pos, depth, at = points[i]
        later[i] = min((depth, at), later[i + 1]) if later[i + 1] else (depth, at)
    out: list[str] = []
    shift, i, text = 0, 0, line     # the piece's position p is the statement's p + shift
    while len(text) > width:
        while i < len(points) and points[i][0] - shift <= len(cont) + 8:
            i += 1
        best, j = None, i
        while j < len(points) and points[j][0] - shift < width:
            key = (points[j][1], -points[j][2])
            if best is None or key < best:
                best = key
            j += 1
        if best is None and later[j] is None:
            break
        at = (-best[1] if best is not None else later[j][1]) - shift
        out.append(text[:at].rstrip())
        rest = text[at:].lstrip()
        shift += at + (len(text) - at - len(rest)) - len(cont)
        text = cont + rest
    return (*out, text)


# A bracket, a space before an operator of _BREAK_BEFORE (group 1 matched:
# the line breaks at the space) or a space after a comma or an `=` (it breaks
# after the space): one search finds them all and skips a line's other spaces.
_WRAP_POINTS = re.compile(r"[()\[\]]| (?=(%s))|(?<=,) |(?<= =) " % "|".join(
    re.escape(b[1:]) for b in _BREAK_BEFORE))


def _break_points(line: str, first: int) -> list[tuple[int, int, int]]:
    """(position, bracket depth, where the line breaks) of each space past
    `first` a statement may break at: before an operator of _BREAK_BEFORE,
    or after a comma or an `=`."""
    points, depth = [], 0
    for m in _WRAP_POINTS.finditer(line):
        pos = m.start()
        ch = line[pos]
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif pos > first:
            points.append((pos, depth, pos if m.start(1) >= 0 else pos + 1))
    return points


def _header_comment(func: PrimFunc) -> list[str]:
    """`/* name: from node, node */`, one node a line when that is too long."""
    sources = [c_comment(x) for x in func.sources] or [c_comment(func.name)]
    one = f"/* {c_comment(func.name)}: from {', '.join(sources)} */"
    if len(one) <= WIDTH:
        return [one]
    return [f"/* {c_comment(func.name)}: from", *(f" *   {x}" for x in sources), " */"]


def _buffers_and_vars(body: Stmt) -> tuple[set, set]:
    """The buffers body stores or loads, and the variables it reads (one walk)."""
    used, read, leaves = set(), set(), []
    for s in walk_stmt(body):
        if isinstance(s, Store):
            used.add(s.buffer)
        for e in stmt_exprs(s):
            nodes_of(e, (Load, Var), leaves)
    # by object first: a buffer or variable is a few objects met 10^4 times,
    # and hashing a frozen dataclass hashes its fields over again
    objects = {id(x.buffer if isinstance(x, Load) else x):
               x.buffer if isinstance(x, Load) else x for x in leaves}
    for x in objects.values():
        (used if isinstance(x, Buffer) else read).add(x)
    return used, read


# ------------------------------------------------------------------------ entry

# Printed kernels per translation unit when a package splits them: the C
# compiler takes most of `aot package`, and separate units compile in
# parallel. A unit costs clang ~0.05 s of its own (its headers and
# helpers), a 110-120 KB model (KWS, ResNet-8 int8) ~0.5 s (-O2, x86-64):
# as two units it keeps two cores busy. clang gives each function the same
# code in any unit (every kernel of the MLPerf Tiny packages for host and
# rpi4 compared); GCC optimizes a unit's functions together (identical
# ones folded into one body, inlining budgets from the unit's size), so
# its units keep the size they had and their kernels their code.
PART_CHARS = 64_000
GCC_PART_CHARS = 160_000
MAX_PARTS = 8


def part_chars(cc: str) -> int:
    """The printed size of a translation unit for the compiler `cc`."""
    return PART_CHARS if "clang" in Path(cc).name else GCC_PART_CHARS


@dataclass(frozen=True)
class _Printed:
    body: str
    mod: _Module                     # what this function alone needs above it


def emit_c(funcs: Sequence[PrimFunc], prefix: str, unit_chars: int | None = None) -> CSource:
    """One translation unit defining `<prefix>_<name>` for each PrimFunc,
    and the same functions split into `parts` of about unit_chars each
    (part_chars; PART_CHARS if not given)."""
    symbols = kernel_symbols(funcs, prefix)
    printed = []
    for f in funcs:
        attrs = dict(f.attrs)
        mod = _Module(gcc_x86=bool(attrs.get(x86.GCC_X86_SPELLINGS)),
                      half_hw=bool(attrs.get(half.HALF_CONVERSIONS)))
        printed.append(_Printed(_FuncPrinter(mod, f, symbols[f.name]).print(), mod))
    prototypes = tuple(_declaration(p.body) for p in printed)
    return CSource(_unit(printed), prototypes, symbols,
                   tuple(_unit(g) for g in _balanced(printed, unit_chars or PART_CHARS)))


def c_declarations(funcs: Sequence[PrimFunc], prefix: str) -> CSource:
    """What emit_c gives besides the code: the prototypes and symbols (a
    package whose kernels LLVM compiles needs only these); no source."""
    symbols = kernel_symbols(funcs, prefix)
    prototypes = tuple(_signature(f, symbols[f.name], {}, set()) + ";" for f in funcs)
    return CSource("", prototypes, symbols)


def _unit(printed: Sequence[_Printed]) -> str:
    """A translation unit: the union of what its functions need (each
    function's helpers come in dependency order, so their union does too)."""
    mod = _Module()
    for p in printed:
        mod.vectors |= p.mod.vectors
        for name, text in p.mod.helpers.items():
            mod.helpers.setdefault(name, text)
    return "\n".join([mod.preamble(), "\n\n".join(p.body for p in printed), ""])


def _balanced(printed: Sequence[_Printed], unit_chars: int) -> list[list[_Printed]]:
    """Functions in groups of about equal printed size, each in call order."""
    groups = balanced_groups([len(p.body) for p in printed], unit_chars, MAX_PARTS)
    return [[printed[i] for i in group] for group in groups]


def _declaration(body: str) -> str:
    """The signature lines of a printed function, as a declaration."""
    lines = body.split("\n")
    sig = lines[next(k for k, line in enumerate(lines) if line.startswith(("void ", "int32_t "))):
                lines.index("{")]
    return "\n".join(sig) + ";"

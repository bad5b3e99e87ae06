"""The small builders every integer (TFLite-semantics) rule module shares.

Int32 widening and narrowing casts, compile-time tables (a PARAM buffer,
or one constant when every entry agrees), the two roundings of a float to
an integer, and the constant inputs the rules read (filters, biases,
axes); the requantizers built on them are aot/lower/arith/requant.py's.
The convolutions (aot/lower/rules/quant/tflite_conv.py) and every other
int8 / int16 rule module (int8_elementwise, int8_pool, int8_rowwise,
tflite_int16, onnx_quant, lstm, int8_dsp) build on these, so they live apart
from any one of them. Their loops and loop nests are aot/lower/arith/loops.py's,
the float kernels' too.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from aot.ir.tir import Bin, Call, Cast, Const, Expr, Load, Stmt, add, dt, dtype_of, mul
from aot.lower.arith import qmath as q
from aot.lower.rules.elementwise import const_like
from aot.lower.rules import LowerCtx, TensorRef
from aot.ops.quant import tflite_int8 as ref


def scale_zp(ctx: LowerCtx, ty, what: str) -> tuple[float, int]:
    return ref.scale_zp(ty, what, ctx.node)


def unravel(flat: Expr, shape: Sequence[int]) -> tuple[Expr, ...]:
    """The multi-index of a row-major offset (for reshaping views)."""
    idx = []
    for k, d in enumerate(shape):
        stride = int(np.prod(shape[k + 1:], dtype=np.int64))
        i = Bin("/", flat, Const(stride)) if stride > 1 else flat
        idx.append(Bin("%", i, Const(d)) if k > 0 else i)
    return tuple(Const(0) if d == 1 else i for i, d in zip(idx, shape))


def to_i32(e: Expr) -> Expr:
    return q.i32(e, dtype_of(e).lanes)


def narrow(e: Expr, dtype: str) -> Expr:
    return Cast(dt(dtype, dtype_of(e).lanes), e)


def table(ctx: LowerCtx, name: str, values: np.ndarray) -> Callable[[Expr], Expr]:
    """index -> values[index]: a PARAM table, or one constant when all entries
    are equal (per-tensor quantization folds away)."""
    values = np.asarray(values).reshape(-1)
    if values.size and np.all(values == values[0]):
        c = Const(values[0].item(), dt(values.dtype.name))
        return lambda index: c
    buf = ctx.param(name, values)
    return lambda index: Load(buf, index)


def lazy_table(ctx: LowerCtx, name: str, values: np.ndarray) -> Callable[[Expr], Expr]:
    """table(), its PARAM made only when first read (vector kernels read the
    scalar tables only for remainder channels, if any)."""
    made: list = []

    def at(index: Expr) -> Expr:
        if not made:
            made.append(table(ctx, name, values))
        return made[0](index)
    return at


def const_input(ctx: LowerCtx, ref_: TensorRef | None, what: str) -> np.ndarray | None:
    if ref_ is None:
        return None
    if ref_.value is None:
        raise ctx.unsupported(f"a non-constant {what}")
    return ref_.value


def weight_dtype(w: np.ndarray) -> np.ndarray:
    """Weights as int8 when they fit (after zero-point centring), else int16."""
    if w.min() >= -128 and w.max() <= 127:
        return w.astype(np.int8)
    return w.astype(np.int16)


class CallView:
    """What aot/ops' shared checks read from a Call, taken from a LowerCtx."""

    def __init__(self, ctx: LowerCtx):
        self.node, self.in_types, self.out_types = ctx.node, ctx.in_types, ctx.out_types
        self.attrs = ctx.attrs


def round_half_even(v: Expr) -> Expr:
    """Round half to even, in v's float type."""
    d = dtype_of(v)
    return Call("rintf" if d.scalar == "float32" else "rint", (v,), d)


def round_half_away_to_int(v: Expr) -> Expr:
    """std::round to int32: C's roundf/round, exactly the reference's rounding.

    Clamped into int32's range first, since converting an out-of-range float
    to an integer is undefined in C; callers clamp to int8 afterwards anyway.
    """
    d = dtype_of(v)
    r = Call("roundf" if d.scalar == "float32" else "round", (v,), d)
    r = Bin("max", Bin("min", r, const_like(2147483520.0, v)), const_like(-2147483648.0, v))
    return Cast(dt("int32", d.lanes), r)


def bias_values(ctx: LowerCtx, ins, k: int, cout: int) -> np.ndarray:
    b = const_input(ctx, ins[k] if len(ins) > k else None, "bias")
    return np.zeros(cout, np.int64) if b is None else b.astype(np.int64).reshape(-1)


# ------------------------------------------------------------ vector tiles

def vector_lanes(ctx: LowerCtx) -> int:
    """int32 lanes of the target's vectors (1: scalar code)."""
    return ctx.target.lanes(32)


def vec_table(ctx: LowerCtx, name: str, values: np.ndarray, dtype: str):
    """(index, lanes) -> values[index:index+lanes] of `dtype`: a splatted
    constant when all entries agree (an immediate operand), else vector
    loads from a PARAM table."""
    values = np.asarray(values).reshape(-1)
    if values.size and np.all(values == values[0]):
        return lambda index, lanes: const_like(values[0].item(), dt(dtype, lanes))
    buf = ctx.param(name, values.astype(dtype))
    return lambda index, lanes: Load(buf, index, lanes)


def in_block(ctx: LowerCtx, body: Callable[[q.Block], Stmt]) -> Stmt:
    """body(block) in a block of its own: a register tile's store, the
    requantization's locals made from the accumulator's register (every
    accumulator is at most one vector wide, so no sums go through memory)."""
    b = q.Block(ctx)
    b.add(body(b))
    return b.stmt()


def pair_widths(count: int, lanes: int, smallest: int = 4) -> list[int]:
    """A pixel's `count` pairs as vectors of `lanes`, then halving powers of
    two down to `smallest` lanes, then single pairs (1)."""
    out, width = [], lanes
    while count:
        if width < smallest:
            return out + [1] * count
        out += [width] * (count // width)
        count %= width
        width //= 2
    return out


def quad_value(xs: Sequence[Expr], offset: int) -> Expr:
    """The int32 whose bytes are xs[j] + offset (low byte first); the top
    byte taken signed, so the sum cannot overflow."""
    parts = []
    for j, x in enumerate(xs):
        v = Bin("&", add(to_i32(x), Const(offset)), Const(255))
        if j == 3:
            v = Bin("-", Bin("^", v, Const(128)), Const(128))
        parts.append(mul(v, Const(1 << 8 * j)) if j else v)
    return Bin("+", Bin("+", parts[0], parts[1]), Bin("+", parts[2], parts[3]))

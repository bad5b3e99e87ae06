"""Compute rules for ONNX's quantized ops (semantics: aot/ops/quant/onnx_quant.py).

ONNX rounds half to even (rint) where TFLite rounds half away from zero,
and QLinear* requantize in floating point as ONNX Runtime does:
float32(acc) * float32(x_s * w_s / y_s) in float32, rounded, plus the zero
point, saturated. Scales and zero points are inputs in ONNX; the code
generator needs them as constants, but for the input zero point of
ConvInteger and MatMulInteger, which quantize_dynamic computes at run time
(DynamicQuantizeLinear).

QLinearConv and ConvInteger reuse the integer convolution loop nest of the
tfl.* rules (aot/lower/kernels/int8_conv.py: conv_nest), in either layout;
1-D and 3-D inputs run as 2-D planes (_plane).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from aot.ir.graph import TensorType
from aot.ir.tir import (Assign, Bin, Broadcast, Call, Cast, Const, DType, Expr, If, Load, Select,
                        Stmt, add, dt, dtype_of, mul, seq, sub)
from aot.lower.arith import qmath as q
from aot.lower.arith.loops import loop, nest
from aot.lower.rules.elementwise import broadcast_index, broadcast_load, const_like
from aot.lower.arith.quant import CallView, round_half_even, table, to_i32, vec_table
from aot.lower.arith.requant import onnx_multipliers, onnx_requantizer
from aot.lower.rules import VALUE_RULES, LowerCtx, TensorRef, kernel_rule, value_rule
from aot.lower.kernels.dense import product
from aot.lower.kernels.int8_conv import conv_nest, vector_conv_nest
from aot.lower.kernels.windows import ConvGeom
from aot.lower.rules.quant.tflite_fc import Int8Product
from aot.lower.schedule.conv import int8_conv_schedule, int8_fc_schedule
from aot.ops.quant import onnx_quant as ref
from aot.ops.quant.qmath import wrap_int32
from aot.ops.nn import Window, window_counts, resolve_window


def _value(ctx: LowerCtx, ins, i: int, what: str) -> np.ndarray | None:
    r = ins[i] if i < len(ins) else None
    if r is None:
        return None
    if r.value is None:
        raise ctx.unsupported(f"a non-constant {what}")
    return np.asarray(r.value)


def _qparam(ctx: LowerCtx, name: str, values: np.ndarray, shape, idx, lanes: int) -> Expr:
    """A scale or zero point at output index idx: per tensor, or per axis."""
    values = np.asarray(values)
    scalar = dt(values.dtype.name, lanes)
    if values.size == 1 and values.ndim <= 1:
        return const_like(values.reshape(()).item(), scalar)
    if int(ctx.attrs.get("block_size", 0)):
        raise ctx.unsupported("blocked quantization (block_size)")
    axis = int(ctx.attrs.get("axis", 1)) % len(shape)
    if np.all(values == values.reshape(-1)[0]):
        return const_like(values.reshape(-1)[0].item(), scalar)
    table = ctx.param(name, values.reshape(-1))
    if axis == len(shape) - 1:
        return Load(table, idx[-1], lanes)
    v = Load(table, idx[axis])
    return v if lanes == 1 else Broadcast(v, lanes)


def _saturate(v: Expr, dtype: str) -> Expr:
    """rint then clamp to dtype, from a float (clamped first: the bounds are
    integers, so clamp and rint commute, and the conversion stays in range)."""
    info = np.iinfo(dtype)
    clamped = Bin("min", Bin("max", v, const_like(float(info.min), v)),
                  const_like(float(info.max), v))
    return Cast(dt(dtype, dtype_of(v).lanes), round_half_even(clamped))


@value_rule("QuantizeLinear")
def quantize_linear(ctx: LowerCtx, ins, idx, lanes):
    x = broadcast_load(ins[0], idx, lanes)
    if dtype_of(x).scalar != "float32":
        raise ctx.unsupported(f"QuantizeLinear of {dtype_of(x).scalar}")
    shape = ins[0].shape
    scale = _qparam(ctx, "scale", _value(ctx, ins, 1, "y_scale").astype(np.float32), shape,
                    idx, lanes)
    v = Bin("/", x, scale)                                  # float32, as the reference
    zp = _value(ctx, ins, 2, "y_zero_point")
    out = ctx.out_types[0].dtype
    info = np.iinfo(out)
    # rint in float32, then integers: clamp to int32's range before converting
    r = round_half_even(Bin("min", Bin("max", v, const_like(-2.0 ** 30, v)),
                            const_like(2.0 ** 30, v)))
    y = Cast(dt("int32", lanes), r)
    if zp is not None:
        y = Bin("+", y, _qparam(ctx, "zero_point", zp.astype(np.int32), shape, idx, lanes))
    return Cast(dt(out, lanes), q.clamp(y, int(info.min), int(info.max)))


@value_rule("DequantizeLinear")
def dequantize_linear(ctx: LowerCtx, ins, idx, lanes):
    x = broadcast_load(ins[0], idx, lanes)
    out = ctx.out_types[0].dtype
    if out != "float32":
        raise ctx.unsupported(f"DequantizeLinear to {out}")
    shape = ins[0].shape
    f32 = dt("float32", lanes)
    d = Cast(f32, x)
    zp = _value(ctx, ins, 2, "x_zero_point")
    if zp is not None:
        d = Bin("-", d, _qparam(ctx, "zero_point", zp.astype(np.float32), shape, idx, lanes))
    scale = _value(ctx, ins, 1, "x_scale").astype(np.float32)
    return Bin("*", d, _qparam(ctx, "scale", scale, shape, idx, lanes))


# ----------------------------------------------------------- requantization

def _requantizer(ctx: LowerCtx, ins, scales: tuple[int, int, int], zp_at: int,
                 mult: np.ndarray | None = None):
    """onnx_requantizer with M = float32(s_in * s_w / s_out) from the scale
    inputs at `scales` (or `mult`) and the output zero point from input zp_at."""
    names = ("input scale", "weight scale", "output scale")
    if mult is None:
        mult = onnx_multipliers(*(_value(ctx, ins, i, what).astype(np.float32)
                                  for i, what in zip(scales, names)))
    zp = _value(ctx, ins, zp_at, "output zero point")
    return onnx_requantizer(ctx, mult, 0 if zp is None else int(np.asarray(zp).reshape(-1)[0]))


def _zero_point(v: np.ndarray | None) -> int:
    if v is None:
        return 0
    v = np.asarray(v).reshape(-1)
    if v.size != 1:
        raise ValueError("per-channel zero point")
    return int(v[0])


# --------------------------------------------------------- integer convolution

@dataclass(frozen=True)
class _Plane:
    """A 1-D, 2-D or 3-D convolution as the 2-D one conv_nest computes:
    `geom` over NHWC pixels (n, y, x, c), `weights` [C_out, KH, KW, D'];
    load(pixel) reads the real input there as int32, out(pixel) is the real
    output index of an output pixel."""
    geom: ConvGeom
    weights: np.ndarray
    load: Callable[[tuple], Expr]
    out: Callable[[tuple], tuple]


def _index(nhwc: bool, n: Expr, c: Expr, pos: tuple) -> tuple:
    return (n, *pos, c) if nhwc else (n, c, *pos)


def _plane(ctx: LowerCtx, x, w: np.ndarray, zp: Expr, centre: bool) -> _Plane:
    """1-D as 2-D of unit height; 3-D through _depth_folded. centre: load
    reads x - zp (a zero point known at run time), else x."""
    rank = len(x.shape)
    if rank not in (3, 4, 5):
        raise ctx.unsupported(f"{ctx.node.op} on a {rank - 2}-D input")
    nhwc = ctx.attrs.get("layout", "NCHW") == "NHWC"
    w = w if nhwc else np.moveaxis(w, 1, -1)             # O, I, ... -> O, ..., I
    spatial = tuple(x.shape[1:-1] if nhwc else x.shape[2:])
    win = resolve_window(CallView(ctx), spatial, tuple(w.shape[1:-1]))

    def read(v: Expr) -> Expr:
        return Bin("-", to_i32(v), zp) if centre else to_i32(v)
    if rank == 5:
        return _depth_folded(x, w, read, Const(0) if centre else zp, nhwc, spatial, win)
    unit = rank == 3
    h, ww = (1, spatial[0]) if unit else spatial
    cin = x.shape[-1] if nhwc else x.shape[1]
    geom = _geom(x.shape[0], (h, ww), win, cin // w.shape[-1], w.shape[0], w.shape[-1])

    def pos(iy, ix):
        return (ix,) if unit else (iy, ix)
    return _Plane(geom, w[:, None] if unit else w,
                  lambda i: read(x.load(_index(nhwc, i[0], i[3], pos(i[1], i[2])))),
                  lambda i: _index(nhwc, i[0], i[3], pos(i[1], i[2])))


def _geom(n: int, size: tuple[int, int], win: Window, groups: int, cout: int,
          depth: int) -> ConvGeom:
    """The 2-D geometry of the last two axes of `win` (a 1-D window: unit height)."""
    def two(t, unit):
        return tuple(t[-2:]) if len(t) > 1 else (unit, t[-1])
    kh, kw = two(win.kernel, 1)
    return ConvGeom(n=n, h=size[0], w=size[1], oh=two(win.out, 1)[0], ow=two(win.out, 1)[1],
                    kh=kh, kw=kw, groups=groups, depth=depth,
                    per_group=cout // groups, strides=two(win.strides, 1),
                    dilations=two(win.dilations, 1), pad_top=two(win.pad_begin, 0)[0],
                    pad_left=two(win.pad_begin, 0)[1])


def _depth_folded(x, w: np.ndarray, read: Callable[[Expr], Expr], gap: Expr, nhwc: bool,
                  spatial, win: Window) -> _Plane:
    """A 3-D convolution as a 2-D one: each (batch, output depth) a batch
    entry of the plane, the KD kernel depths extra input channels of each
    group (plane channel g * KD * I + kd * I + i). A tap in the depth
    padding reads `gap`: what a zero-point code reads as, adding nothing."""
    cout, kd, kh, kw, depth = w.shape
    od, step, dil, pad, size = (win.out[0], win.strides[0], win.dilations[0], win.pad_begin[0],
                                spatial[0])
    cin = x.shape[-1] if nhwc else x.shape[1]
    geom = _geom(x.shape[0] * od, spatial[1:], win, cin // depth, cout, kd * depth)
    folded = np.moveaxis(w, 1, 3).reshape(cout, kh, kw, kd * depth)

    def load(i):
        n, iy, ix, c = i
        g, r = Bin("/", c, Const(kd * depth)), Bin("%", c, Const(kd * depth))
        channel = add(mul(g, Const(depth)), Bin("%", r, Const(depth)))
        at = add(sub(mul(Bin("%", n, Const(od)), Const(step)), Const(pad)),
                 mul(Bin("/", r, Const(depth)), Const(dil)))
        inside = Bin("and", Bin(">=", at, Const(0)), Bin("<", at, Const(size)))
        # read in range either way: a select may evaluate both sides
        safe = Bin("min", Bin("max", at, Const(0)), Const(size - 1))
        v = read(x.load(_index(nhwc, Bin("/", n, Const(od)), channel, (safe, iy, ix))))
        return Select(inside, v, gap)

    def out(i):
        n, oy, ox, c = i
        return _index(nhwc, Bin("/", n, Const(od)), c, (Bin("%", n, Const(od)), oy, ox))
    return _Plane(geom, folded, load, out)


def _int_conv(ctx: LowerCtx, x, w: np.ndarray, x_zp, w_zp, bias, emit, value) -> Stmt:
    """The exact integer convolution of zero-point-centred operands (1-D to
    3-D, either layout), through the shared int8 window nests (in vector
    tiles when 2-D channels-last); value(acc, channel, lanes) is what is
    stored for each accumulator of `lanes` channels. x_zp is a constant, a
    TensorRef (DynamicQuantizeLinear's, known at run time) or None."""
    w = w.astype(np.int64)
    if w_zp is not None:
        w = w - np.asarray(w_zp, np.int64).reshape((-1,) + (1,) * (w.ndim - 1))
    b = q.Block(ctx)
    if isinstance(x_zp, TensorRef):
        # subtracted from each value read; conv_nest then folds a zero point 0
        zp_var = b.let("x_zero_point", _run_time_scalar(ctx, x_zp, "x_zero_point"))
        plane, zp = _plane(ctx, x, w, zp_var, centre=True), 0
    else:
        if x_zp is not None and x_zp.size != 1:
            raise ctx.unsupported("a per-channel input zero point")
        zp = _zero_point(x_zp)
        plane = _plane(ctx, x, w, Const(zp), centre=False)
    g = plane.geom
    init = np.zeros(g.cout, np.int64) if bias is None else bias.astype(np.int64).reshape(-1)
    nhwc = ctx.attrs.get("layout", "NCHW") == "NHWC"
    # 2-D, channels innermost, a constant zero point: the int8 kernels'
    # vector tiles where the schedule gives them (tfl.conv2d's); uint8
    # activations (ONNX Runtime's U8S8 models) read as int8 (_as_int8)
    tiled = nhwc and len(x.shape) == 4 and x.type.dtype in ("int8", "uint8") and \
        not isinstance(x_zp, TensorRef)
    sched = int8_conv_schedule(ctx.target, g, plane.weights) if tiled else None
    if sched is not None and sched.algorithm == "vector":
        def epilogue(blk, idx, acc, lanes):
            return emit(0, idx, value(acc, idx[3], lanes))
        load, vzp = (x.load, zp) if x.type.dtype == "int8" else (_as_int8(x.load), zp - 128)
        b.add(vector_conv_nest(ctx, g, sched, load, vzp, plane.weights, init, epilogue))
    else:
        b.add(conv_nest(ctx, g, plane.load, zp, plane.weights, init,
                        lambda idx, acc: emit(0, plane.out(idx), value(acc, idx[3]))))
    return b.stmt()


def _as_int8(load: Callable) -> Callable:
    """A uint8 tensor's loads as int8, x - 128 (x ^ 0x80, the same bits read
    as int8): with the zero point less 128 every difference x - zp, and so
    the convolution, is the same."""
    def read(idx, lanes: int = 1) -> Expr:
        v = load(idx, lanes)
        return Cast(DType("int8", lanes), Bin("^", v, const_like(0x80, v)), bits=True)
    return read


def _run_time_scalar(ctx: LowerCtx, ref_: TensorRef, what: str) -> Expr:
    """A one-element tensor computed at run time (DynamicQuantizeLinear's
    zero point), as int32."""
    if ref_.type.size != 1:
        raise ctx.unsupported(f"a non-constant {what} of {ref_.type.size} entries")
    return to_i32(ref_.load((Const(0),) * len(ref_.shape)))


def _zero_point_input(ctx: LowerCtx, ins, i: int):
    """A zero point input: its constant value, the TensorRef of a run-time
    scalar, or None when absent."""
    r = ins[i] if i < len(ins) else None
    if r is None:
        return None
    return r if r.value is None else np.asarray(r.value)


@kernel_rule("QLinearConv")
def qlinear_conv(ctx: LowerCtx, ins, emit):
    return _int_conv(ctx, ins[0], _value(ctx, ins, 3, "weight"),
                     _value(ctx, ins, 2, "x_zero_point"), _value(ctx, ins, 5, "w_zero_point"),
                     _value(ctx, ins, 8, "bias"), emit, _requantizer(ctx, ins, (1, 4, 6), 7))


@kernel_rule("ConvInteger")
def conv_integer(ctx: LowerCtx, ins, emit):
    return _int_conv(ctx, ins[0], _value(ctx, ins, 1, "weight"),
                     _zero_point_input(ctx, ins, 2), _value(ctx, ins, 3, "w_zero_point"),
                     None, emit, lambda acc, c, lanes=1: acc)


# ------------------------------------------------------------ integer matmul

def _int_matmul(ctx: LowerCtx, a, b, a_zp, b_zp, emit, value) -> Stmt:
    """Σ_k (a - a_zp)(b - b_zp) exactly, per output element (numpy matmul
    broadcasting over batch dims); value(acc, column) is what is stored.
    A constant 2-D B is centred and transposed to [N, K] (unit stride), and a
    per-tensor A zero point folded into a per-column start value. a_zp may
    be a TensorRef: DynamicQuantizeLinear's, known at run time."""
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise ctx.unsupported(f"{ctx.node.op} with a 1-D operand")
    out_shape = ctx.out_types[0].shape
    m_dim, (k_dim, n_dim) = a.shape[-2], b.shape[-2:]
    outer = q.Block(ctx)
    if isinstance(a_zp, TensorRef):
        a_off = outer.let("a_zero_point", _run_time_scalar(ctx, a_zp, "a_zero_point"))
    else:
        a_off = _row_table(ctx, a_zp, m_dim)
    bz = np.zeros(n_dim, np.int64) if b_zp is None else \
        np.broadcast_to(np.asarray(b_zp, np.int64).reshape(-1), (n_dim,))
    folded = b.value is not None and len(b.shape) == 2 and not callable(a_off)
    if folded:
        bc = b.value.astype(np.int64) - bz
        packed = ctx.param("b", bc.T.astype(np.int16 if np.abs(bc).max() > 127 else np.int8))
        if isinstance(a_off, int):
            start = table(ctx, "column_start", (-a_off * bc.sum(axis=0)).astype(np.int32))
        else:
            sums = table(ctx, "column_sum", bc.sum(axis=0).astype(np.int32))
            start = (lambda n: Bin("*", Bin("-", Const(0), a_off), sums(n)))
    else:
        b_off = table(ctx, "b_zero_point", bz.astype(np.int32))

    def at(idx):
        batch, m, n = idx[:-2], idx[-2], idx[-1]
        blk = q.Block(ctx)
        a_at = broadcast_index(batch, a.shape[:-2])
        if folded:
            acc = blk.let("acc", start(n))

            def term(k):
                return Bin("*", to_i32(a.load(a_at + (m, k))),
                           to_i32(Load(packed, add(mul(n, Const(k_dim)), k))))
        else:
            acc = blk.let("acc", Const(0))
            b_at = broadcast_index(batch, b.shape[:-2])
            row_off = Const(a_off) if isinstance(a_off, int) else \
                a_off(m) if callable(a_off) else a_off

            def term(k):
                return Bin("*", Bin("-", to_i32(a.load(a_at + (m, k))), row_off),
                           Bin("-", to_i32(b.load(b_at + (k, n))), b_off(n)))
        blk.add(loop(ctx, "k", k_dim, lambda k: Assign(acc, Bin("+", acc, term(k)))))
        blk.add(emit(0, idx, value(acc, n)))
        return blk.stmt()
    outer.add(nest(ctx, tuple(f"i{d}" for d in range(len(out_shape))), out_shape, at))
    return outer.stmt()


def _row_table(ctx: LowerCtx, zp, rows: int):
    """A's zero point: an int (per tensor) or index -> entry (one per row)."""
    if zp is None:
        return 0
    zp = np.asarray(zp, np.int64).reshape(-1)
    if zp.size == 1 or np.all(zp == zp[0]):
        return int(zp[0])
    if zp.size != rows:
        raise ctx.unsupported(f"an A zero point of {zp.size} entries for {rows} rows")
    return table(ctx, "a_zero_point", zp.astype(np.int32))


def _vector_fc(ctx: LowerCtx, a, b: np.ndarray | None, a_zp, b_zp, c: np.ndarray | None,
               emit, requantize) -> Stmt | None:
    """A product of int8 / uint8 rows A [M, K] by a constant B [K, N] on the
    int8 fully connected kernels of tfl.fully_connected (tflite_fc.Int8Product:
    VNNI's vpdpbusd on AVX-512): B centred and transposed to TFLite's
    [N, K] weights, A's per-tensor zero point and the int32 C folded into
    the bias (uint8 rows read as int8, x - 128, the zero point with them:
    the same differences), requantize(acc, column, lanes) stored. None where
    the schedule gives no vector tiles or the centred B is not int8."""
    if b is None or len(a.shape) != 2 or len(b.shape) != 2 or \
            a.type.dtype not in ("int8", "uint8") or isinstance(a_zp, TensorRef) or \
            (a_zp is not None and np.asarray(a_zp).size != 1):
        return None
    bz = 0 if b_zp is None else np.asarray(b_zp, np.int64).reshape(1, -1)
    w = np.ascontiguousarray((np.asarray(b, np.int64) - bz).T)
    if w.min() < -128 or w.max() > 127:
        return None
    sched = int8_fc_schedule(ctx.target, w, a.in_memory)
    if sched.algorithm != "vector":
        return None
    unsigned = a.type.dtype == "uint8"
    zp = _zero_point(a_zp) - (128 if unsigned else 0)
    load = _as_int8(a.load) if unsigned else a.load
    units = w.shape[0]
    start = np.zeros(units, np.int64) if c is None else \
        np.broadcast_to(np.asarray(c, np.int64).reshape(-1), (units,))
    bias = wrap_int32(start - zp * w.sum(axis=1))

    def store(blk, bi, col, acc, lanes):
        return emit(0, bi + (col,), requantize(acc, col, lanes))
    fc = Int8Product.make(ctx, sched, w, bias, lambda lead: lambda d: load(lead + (d,)),
                          None, store, 1)
    return product(ctx, fc, (a.shape[0],), 1, units)


@kernel_rule("QLinearMatMul")
def qlinear_matmul(ctx: LowerCtx, ins, emit):
    a_zp = _value(ctx, ins, 2, "a_zero_point")
    if a_zp is not None and a_zp.size != 1:
        raise ctx.unsupported("a per-row zero point of A")
    b_zp, requantize = _value(ctx, ins, 5, "b_zero_point"), _requantizer(ctx, ins, (1, 4, 6), 7)
    fc = _vector_fc(ctx, ins[0], ins[3].value, a_zp, b_zp, None, emit, requantize)
    return fc if fc is not None else _int_matmul(ctx, ins[0], ins[3], a_zp, b_zp, emit,
                                                 requantize)


@kernel_rule("MatMulInteger")
def matmul_integer(ctx: LowerCtx, ins, emit):
    return _int_matmul(ctx, ins[0], ins[1], _zero_point_input(ctx, ins, 2),
                       _value(ctx, ins, 3, "b_zero_point"), emit, lambda acc, n: acc)


# ------------------------------------------------------- DynamicQuantizeLinear

@kernel_rule("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx: LowerCtx, ins, emit):
    """uint8 quantization with the range of this very input (always containing
    0): a pass for min/max, the scale and zero point, then the quantization."""
    x = ins[0]
    shape = x.shape
    f32 = dt("float32")
    zero, one = Const(0.0, f32), Const(1.0, f32)
    names = tuple(f"i{d}" for d in range(len(shape)))
    b = q.Block(ctx)
    lo, hi = b.let("lo", zero), b.let("hi", zero)
    b.add(nest(ctx, names, shape, lambda i: seq(Assign(lo, Bin("min", lo, x.load(i))),
                                                  Assign(hi, Bin("max", hi, x.load(i))))))
    scale = b.let("scale", Select(Bin("==", hi, lo), one,
                                  Bin("/", Bin("-", hi, lo), Const(255.0, f32))))
    zp = b.let("zero_point", _saturate(Bin("-", zero, Bin("/", lo, scale)), "uint8"))
    zpf = Cast(f32, zp)
    b.add(nest(ctx, names, shape, lambda i: emit(0, i, _saturate(
        Bin("+", round_half_even(Bin("/", x.load(i), scale)), zpf), "uint8"))))
    b.add(emit(1, (), scale), emit(2, (), zp))
    return b.stmt()


# ------------------------------------------- com.microsoft QOperator ops
# The arithmetic of aot/ops/quant/onnx_quant.py (ONNX Runtime's MLAS x86 kernels):
# float32 steps in the same order, rounding half to even, saturation. The
# targets build with -ffp-contract=fast, so each multiply-add is spelled out:
# fmaf where the reference fuses (QLinearAdd, as MLAS's AVX2 kernel does),
# a product that contraction cannot change where it rounds first
# (rounded_product): the package computes the reference bit for bit.

def _scalar_qparams(ctx: LowerCtx, ins, scale_at: int, zp_at: int) -> tuple[np.float32, int]:
    known = {i: _value(ctx, ins, i, "scale or zero point") for i in (scale_at, zp_at)}
    args = [known.get(i) for i in range(max(known) + 1)]
    return ref.scalar_qparams(CallView(ctx), args, scale_at, zp_at)


def _f32(value, lanes: int) -> Expr:
    return const_like(float(value), dt("float32", lanes))


def _as_f32(e: Expr) -> Expr:
    return Cast(dt("float32", dtype_of(e).lanes), e)


def rounded_product(v: Expr, m, lanes: int) -> Expr:
    """float32(v * m) rounded once, for a float32 v holding an integer below
    2**16, in a form multiply-add contraction cannot change: m = hi + lo
    with hi's top 8 significant bits, so v*hi is exact and fmaf(v, lo, v*hi)
    rounds once by definition. (A plain v*m feeding an add would be fused
    with the add into one rounding under -ffp-contract=fast.)"""
    m = np.float32(m)
    step = np.float32(2.0 ** (np.frexp(m)[1] - 8)) if m != 0 else np.float32(1)
    hi = np.float32(np.trunc(m / step) * step)
    return Call("fmaf", (v, _f32(m - hi, lanes), Bin("*", v, _f32(hi, lanes))),
                dt("float32", lanes))


@value_rule("QLinearAdd")
def qlinear_add(ctx: LowerCtx, ins, idx, lanes):
    (sa, za), (sb, zb) = _scalar_qparams(ctx, ins, 1, 2), _scalar_qparams(ctx, ins, 4, 5)
    ra, rb, fixed = ref.add_params(sa, za, sb, zb, *_scalar_qparams(ctx, ins, 6, 7))
    a = _as_f32(broadcast_load(ins[0], idx, lanes))
    b = _as_f32(broadcast_load(ins[3], idx, lanes))
    f32 = dt("float32", lanes)
    y = Call("fmaf", (b, _f32(rb, lanes), Call("fmaf", (a, _f32(ra, lanes), _f32(fixed, lanes)),
                                               f32)), f32)
    return _saturate(y, ctx.out_types[0].dtype)


@value_rule("QLinearMul")
def qlinear_mul(ctx: LowerCtx, ins, idx, lanes):
    (sa, za), (sb, zb) = _scalar_qparams(ctx, ins, 1, 2), _scalar_qparams(ctx, ins, 4, 5)
    sc, zc = _scalar_qparams(ctx, ins, 6, 7)
    a = q.offset(to_i32(broadcast_load(ins[0], idx, lanes)), -za)
    b = q.offset(to_i32(broadcast_load(ins[3], idx, lanes)), -zb)
    # |(a - za)(b - zb)| <= 255 * 255 < 2**16
    y = Bin("+", rounded_product(_as_f32(Bin("*", a, b)), ref.mul_ratio(sa, sb, sc), lanes),
            _f32(zc, lanes))
    return _saturate(y, ctx.out_types[0].dtype)


@kernel_rule("QLinearSigmoid", "QLinearLeakyRelu")
def qlinear_lookup(ctx: LowerCtx, ins, emit):
    """One table load per element, in a scalar loop (a vector of table loads
    would be a gather, which the code generators do not emit)."""
    x = ins[0]
    dtype = x.type.dtype
    values = ref.lookup_table(ctx.node, dtype, *_scalar_qparams(ctx, ins, 1, 2),
                              *_scalar_qparams(ctx, ins, 3, 4))
    lut = ctx.param("lut", values)
    low = int(np.iinfo(dtype).min)
    shape = ctx.out_types[0].shape
    return nest(ctx, tuple(f"i{d}" for d in range(len(shape))), shape, lambda i: emit(
        0, i, Load(lut, q.offset(to_i32(x.load(i)), -low))))


@value_rule("QLinearConcat")
def qlinear_concat(ctx: LowerCtx, ins, idx, lanes):
    """Concat of the inputs, each through its requantization table unless
    its parameters are the output's (then a copy, as ONNX Runtime does)."""
    sy, zy = _scalar_qparams(ctx, ins, 0, 1)
    parts = []
    for i in range(2, len(ins), 3):
        x = ins[i]
        values = ref.requantize_table(x.type.dtype, *_scalar_qparams(ctx, ins, i + 1, i + 2),
                                      sy, zy)
        if values is None:
            parts.append(x)
            continue
        if lanes > 1:
            raise ctx.unsupported("a vectorized requantizing QLinearConcat")
        lut, low = ctx.param("requantize", values), int(np.iinfo(x.type.dtype).min)
        parts.append(TensorRef(x.name, x.type, lambda at, n=1, x=x, lut=lut, low=low: Load(
            lut, q.offset(to_i32(x.load(at, n)), -low))))
    return VALUE_RULES["Concat"](ctx, parts, idx, lanes)


def _pool_geometry(ctx: LowerCtx, x) -> tuple[bool, tuple[int, ...], "Window"]:
    layout = ref.pool_layout(ctx)
    nhwc = layout == "NHWC"
    spatial = tuple(x.shape[1:-1] if nhwc else x.shape[2:])
    if ctx.node.op == "QLinearGlobalAveragePool":
        kernel = spatial
        win = Window(kernel, (1,) * len(spatial), (1,) * len(spatial), (0,) * len(spatial),
                     (0,) * len(spatial), (1,) * len(spatial))
    else:
        kernel = tuple(int(k) for k in ctx.attrs["kernel_shape"])
        win = resolve_window(CallView(ctx), spatial, kernel, bool(ctx.attrs.get("ceil_mode", 0)))
    return nhwc, spatial, win


@kernel_rule("QLinearAveragePool", "QLinearGlobalAveragePool")
def qlinear_avg_pool(ctx: LowerCtx, ins, emit):
    """Per output element, over the window's in-image taps: the float32 sum
    of the dequantized codes in row-major order (ref._qlinear_avgpool),
    or for a whole-image window the exact int32 sum of (x - zx) as ONNX
    Runtime's global pool takes it (ref.pool_output); then the float32
    average and quantization. The divisor counts the taps as the reference
    does."""
    x = ins[0]
    sx, zx = _scalar_qparams(ctx, ins, 1, 2)
    sy, zy = _scalar_qparams(ctx, ins, 3, 4)
    nhwc, spatial, win = _pool_geometry(ctx, x)
    include_pad = bool(ctx.attrs.get("count_include_pad", 0))
    counts = np.maximum(window_counts(win, spatial, include_pad), 1).astype(np.float32)
    count_at = table(ctx, "count", counts)
    shape = ctx.out_types[0].shape
    nsp = len(spatial)
    dtype = ctx.out_types[0].dtype
    f32 = dt("float32")
    exact = ctx.node.op == "QLinearGlobalAveragePool" or ref.pool_is_global(ctx, spatial)

    def term(v: Expr) -> Expr:
        v = q.offset(to_i32(v), -zx)
        return v if exact else rounded_product(Cast(f32, v), sx, 1)

    def out(idx):
        opos = idx[1:-1] if nhwc else idx[2:]
        b = q.Block(ctx)
        acc = b.let("acc", Const(0) if exact else Const(0.0, f32))

        def tap(a: int, ipos: list) -> Stmt:
            if a == nsp:
                at = (idx[0], *ipos, idx[-1]) if nhwc else (idx[0], idx[1], *ipos)
                return Assign(acc, Bin("+", acc, term(x.load(at))))
            def step(k):
                pos = add(sub(mul(opos[a], Const(win.strides[a])), Const(win.pad_begin[a])),
                          mul(k, Const(win.dilations[a])))
                body = tap(a + 1, ipos + [pos])
                needs_test = win.pad_begin[a] or win.pad_end[a] or win.extra_end(spatial)[a]
                if not needs_test:
                    return body
                inside = Bin("and", Bin(">=", pos, Const(0)), Bin("<", pos, Const(spatial[a])))
                return If(inside, body)
            return loop(ctx, f"k{a}", win.kernel[a], step)

        b.add(tap(0, []))
        flat = Const(0)
        for a in range(nsp):
            flat = add(mul(flat, Const(win.out[a])), opos[a])
        total = Bin("*", Cast(f32, acc), Const(float(sx), f32)) if exact else acc
        avg = Bin("/", total, count_at(flat))
        y = Bin("+", Bin("/", avg, Const(float(sy), f32)), Const(float(zy), f32))
        b.add(emit(0, idx, _saturate(y, dtype)))
        return b.stmt()
    return nest(ctx, tuple(f"i{d}" for d in range(len(shape))), shape, out)


@kernel_rule("QLinearSoftmax")
def qlinear_softmax(ctx: LowerCtx, ins, emit):
    """ONNX Runtime's table softmax (ref._qlinear_softmax) row by row: the
    row's max, the float32 sum of table[x - max + 255] in order, then each
    element's share scaled by floor(1 / y_scale), rounded, offset, capped
    at 255 and stored into the 8-bit type (wrapping, as ONNX Runtime's
    store does)."""
    x = ins[0]
    sx, _ = _scalar_qparams(ctx, ins, 1, 2)
    sy, zy = _scalar_qparams(ctx, ins, 3, 4)
    shape = x.shape
    depth = shape[-1]
    exp = ctx.param("exp", ref.softmax_exp_table(sx, depth))
    f32 = dt("float32")

    def row(lead):
        b = q.Block(ctx)
        top = b.let("row_max", Const(int(np.iinfo(x.type.dtype).min)))
        b.add(loop(ctx, "k", depth, lambda k: Assign(top, Bin("max", top, to_i32(
            x.load(lead + (k,)))))))

        def e(k):
            return Load(exp, add(sub(to_i32(x.load(lead + (k,))), top), Const(255)))
        total = b.let("sum", Const(0.0, f32))
        b.add(loop(ctx, "k", depth, lambda k: Assign(total, Bin("+", total, e(k)))))
        scale = Const(float(ref.softmax_y_scale(sy)), f32)

        def out(k):
            share = Cast(dt("int32"), round_half_even(Bin("/", Bin("*", e(k), scale), total)))
            y = Bin("min", q.offset(share, zy), Const(255))
            return emit(0, lead + (k,), Cast(dt(x.type.dtype), y))
        b.add(loop(ctx, "k", depth, out))
        return b.stmt()
    return nest(ctx, tuple(f"i{d}" for d in range(len(shape) - 1)), shape[:-1], row)


@kernel_rule("QGemm")
def qgemm(ctx: LowerCtx, ins, emit):
    """The integer product of QLinearMatMul (B constant when transposed),
    plus the int32 C per column, then ONNX Runtime's requantization, or
    float32(acc) * scale when there is no output zero point."""
    if ctx.attrs.get("transA", 0):
        raise ctx.unsupported("QGemm with transA")
    b = ins[3]
    if ctx.attrs.get("transB", 0):
        w = _value(ctx, ins, 3, "transposed B")
        b = TensorRef(b.name, TensorType(w.shape[::-1], b.type.dtype), b.load, value=w.T)
    y_s = _value(ctx, ins, 7, "y_scale")
    mult = ref.qgemm_multipliers(ctx.attrs.get("alpha", 1.0), _value(ctx, ins, 1, "a_scale"),
                                 _value(ctx, ins, 4, "b_scale"), y_s)
    c = _value(ctx, ins, 6, "C")
    if len(ins) > 8 and ins[8] is not None:
        requantize = _requantizer(ctx, ins, (1, 4, 7), 8, mult)
    else:
        m_at = vec_table(ctx, "scale", mult, "float32")

        def requantize(acc, n, lanes=1):
            return Bin("*", Cast(dt("float32", lanes), acc), m_at(n, lanes))
    a_zp, b_zp = _value(ctx, ins, 2, "a_zero_point"), _value(ctx, ins, 5, "b_zero_point")
    fc = _vector_fc(ctx, ins[0], b.value, a_zp, b_zp, c, emit, requantize)
    if fc is not None:
        return fc
    c_at = None if c is None else table(ctx, "c", np.broadcast_to(
        c.astype(np.int32).reshape(-1), (ctx.out_types[0].shape[1],)))

    def value(acc, n):
        return requantize(acc if c_at is None else Bin("+", acc, c_at(n)), n)
    return _int_matmul(ctx, ins[0], b, a_zp, b_zp, emit, value)

"""Kernel rules for MediaPipe's custom ops (aot/ops/mediapipe.py).

Convolution2DTransposeBias is ConvTranspose in NHWC with MediaPipe's crop:
its weight turned to [I, KH, KW, O] and the ConvTranspose rule's scatter
kernel run on it. The pooling pair, the bilinear transform and the
landmark ops are direct loop nests in the kernels' own order; the matrix
of Landmarks2TransformMatrix runs the reference's steps
(aot.ops.mediapipe.crop_matrix) on TIR expressions, its landmark indices
being compile-time attributes.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from aot.ir.graph import TensorType
from aot.ir.tir import Assign, Bin, Cast, Decl, Expr, For, If, Select, const, dt, seq
from aot.lower.arith.loops import float_only
from aot.lower.rules.elementwise import const_like, math_call
from aot.lower.rules.nn import conv_transpose
from aot.lower.rules.reduce import loops
from aot.lower.rules.sampling import V, all_of
from aot.lower.rules import LowerCtx, TensorRef, kernel_rule
from aot.ops.mediapipe import (ACTIVATION_RANGES, INDEX_BIAS, crop_matrix,
                               pool_geometry, transpose_conv_geometry, unpool_geometry)


def _f32(ctx: LowerCtx) -> None:
    float_only(ctx, dt(ctx.out_types[0].dtype))


# ---- Convolution2DTransposeBias --------------------------------------------------------------

@kernel_rule("mediapipe.Convolution2DTransposeBias")
def _transpose_conv(ctx: LowerCtx, ins, emit):
    x, w, bias = ins
    if w.value is None:
        raise ctx.unsupported(f"{ctx.node.op} with a weight computed at run time")
    (oh, ow), (top, left), strides = transpose_conv_geometry(ctx)
    kh, kw = w.shape[1:3]
    full = [s * (i - 1) + k for s, i, k in zip(strides, x.shape[1:3], (kh, kw))]
    attrs = {"layout": "NHWC", "kernel_shape": (kh, kw), "strides": strides,
             "pads": (top, left, full[0] - oh - top, full[1] - ow - left)}
    ihwo = np.ascontiguousarray(w.value.transpose(3, 1, 2, 0))
    weight = TensorRef(w.name, TensorType(ihwo.shape, w.type.dtype), w.load, value=ihwo)
    as_convt = replace(ctx, node=replace(ctx.node, op="ConvTranspose", attrs=attrs))
    return conv_transpose(as_convt, [x, weight, bias], emit)


# ---- MaxPoolingWithArgmax2D ------------------------------------------------------------------

@kernel_rule("mediapipe.MaxPoolingWithArgmax2D")
def _pool_argmax(ctx: LowerCtx, ins, emit):
    x = ins[0]
    _f32(ctx)
    _, (pt, pl), (kh, kw), (sh, sw) = pool_geometry(ctx)
    _, h, w, _ = x.shape
    lo, hi = ACTIVATION_RANGES[ctx.attrs["activation"]]
    f = x.dtype

    def pixel(at):
        n, oy, ox, c = (at[a] for a in range(4))
        best, where = ctx.fresh("best", f), ctx.fresh("where")
        taps = []
        for ky in range(kh):            # window order: a later tap must be larger to win
            for kx in range(kw):
                iy = Bin("+", Bin("*", oy, const(sh)), const(ky - pt))
                ix = Bin("+", Bin("*", ox, const(sw)), const(kx - pl))
                inside = all_of([Bin(">=", iy, const(0)), Bin("<", iy, const(h)),
                               Bin(">=", ix, const(0)), Bin("<", ix, const(w))])
                v = x.load((n, iy, ix, c), 1)
                taps.append(If(inside, If(Bin(">", v, best), seq(
                    Assign(best, v), Assign(where, const(ky * kw + kx))))))
        value = best
        if lo > -np.inf:
            value = Bin("max", value, const_like(lo, value))
        if hi < np.inf:
            value = Bin("min", value, const_like(hi, value))
        index = Bin("+", Cast(f, where), const_like(float(INDEX_BIAS), best))
        return seq(Decl(best, const_like(float(np.finfo(np.float32).min), best)),
                   Decl(where, const(0)), *taps,
                   emit(0, (n, oy, ox, c), value), emit(1, (n, oy, ox, c), index))
    return loops(ctx, ctx.out_types[0].shape, range(4), pixel)


# ---- MaxUnpooling2D --------------------------------------------------------------------------

@kernel_rule("mediapipe.MaxUnpooling2D")
def _unpool(ctx: LowerCtx, ins, emit):
    """Zeros, then the inputs stored in order: an index whose position
    falls outside the output stores nothing."""
    x, indices = ins
    _f32(ctx)
    (oh, ow), (pt, pl), (_, kw), (sh, sw) = unpool_geometry(ctx)
    shape = ctx.out_types[0].shape
    zero = const_like(0, x.dtype)
    clear = loops(ctx, shape, range(4), lambda at: emit(0, tuple(at[a] for a in range(4)), zero),
                  "z")

    def store(at):
        n, iy, ix, c = (at[a] for a in range(4))
        k = ctx.fresh("k")
        oy, ox = ctx.fresh("oy"), ctx.fresh("ox")
        inside = all_of([Bin(">=", k, const(0)), Bin(">=", oy, const(0)), Bin("<", oy, const(oh)),
                       Bin(">=", ox, const(0)), Bin("<", ox, const(ow))])
        # clamped first: a far-off float has no int32 value, and any index that
        # large lands outside the output anyway
        v = indices.load((n, iy, ix, c), 1)
        bounded = Bin("min", Bin("max", v, const_like(-1, v)), const_like(2 ** 30, v))
        return seq(Decl(k, Cast(dt("int32"), bounded)),
                   Decl(oy, Bin("+", Bin("*", iy, const(sh)), Bin("-", Bin("/", k, const(kw)),
                                                                 const(pt)))),
                   Decl(ox, Bin("+", Bin("*", ix, const(sw)), Bin("-", Bin("%", k, const(kw)),
                                                                 const(pl)))),
                   If(inside, emit(0, (n, oy, ox, c), x.load((n, iy, ix, c), 1))))
    return seq(clear, loops(ctx, x.shape, range(4), store, "u"))


# ---- TransformTensorBilinear -----------------------------------------------------------------

def _matrix_rows(ctx: LowerCtx, m: TensorRef) -> tuple[list, list]:
    """The matrix's first two rows as locals (a 4x4 of any shape of 16)."""
    shape = m.shape
    entries = [m.load(tuple(const(int(i)) for i in np.unravel_index(k, shape)), 1)
               for k in range(8)]
    decls, rows = [], []
    for k, e in enumerate(entries):
        var = ctx.fresh(f"m{k}", m.dtype)
        decls.append(Decl(var, e))
        rows.append(var)
    return decls, [rows[:4], rows[4:]]


@kernel_rule("mediapipe.TransformTensorBilinear")
def _bilinear(ctx: LowerCtx, ins, emit):
    x, m = ins
    _f32(ctx)
    _, h, w, channels = x.shape
    f = x.dtype
    decls, (rx, ry) = _matrix_rows(ctx, m)
    half = const_like(0.5, rx[0])
    for row in (rx, ry):   # the aligned-corners correction, as bilinear_rows does it
        fixed = ctx.fresh("t", f)
        decls.append(Decl(fixed, Bin("-", Bin("+", Bin("+", row[3], Bin("*", row[0], half)),
                                             Bin("*", row[1], half)), half)))
        row[3] = fixed

    def pixel(at):
        oy, ox = at[1], at[2]
        fx, fy = Cast(f, ox), Cast(f, oy)
        tx, ty, x0, y0 = (ctx.fresh(s, f) for s in ("tx", "ty", "x0", "y0"))
        ix, iy = ctx.fresh("ix"), ctx.fresh("iy")
        c = ctx.fresh("c")
        inside = all_of([Bin(">=", tx, const_like(0, tx)), Bin("<=", tx, const_like(w - 1, tx)),
                       Bin(">=", ty, const_like(0, ty)), Bin("<=", ty, const_like(h - 1, ty))])

        def read(dy: int, dx: int) -> Expr:
            # floor(t) + 1 may be one past the edge: read 0 there
            yy, xx = Bin("+", iy, const(dy)), Bin("+", ix, const(dx))
            safe = (Bin("min", yy, const(h - 1)), Bin("min", xx, const(w - 1)))
            v = x.load((const(0), *safe, c), 1)
            ok = [Bin("<", t, const(n)) for t, n, d in ((yy, h, dy), (xx, w, dx)) if d]
            return v if not ok else Select(all_of(ok), v, const_like(0, v))
        right, lower = V(Bin("-", tx, x0)), V(Bin("-", ty, y0))
        upper_row = (1 - right) * V(read(0, 0)) + right * V(read(0, 1))
        lower_row = (1 - right) * V(read(1, 0)) + right * V(read(1, 1))
        value = lower * lower_row + (1 - lower) * upper_row
        sample = seq(Decl(x0, math_call("floor", tx)), Decl(y0, math_call("floor", ty)),
                     Decl(ix, Cast(dt("int32"), x0)), Decl(iy, Cast(dt("int32"), y0)),
                     For(c, channels, emit(0, (const(0), oy, ox, c), value.e)))
        blank = For(c, channels, emit(0, (const(0), oy, ox, c), const_like(0, tx)))
        return seq(
            Decl(tx, Bin("+", Bin("+", Bin("*", rx[0], fx), Bin("*", rx[1], fy)), rx[3])),
            Decl(ty, Bin("+", Bin("+", Bin("*", ry[0], fx), Bin("*", ry[1], fy)), ry[3])),
            If(inside, sample, blank))
    return seq(*decls, loops(ctx, ctx.out_types[0].shape, (1, 2), pixel))


# ---- TransformLandmarks ----------------------------------------------------------------------

@kernel_rule("mediapipe.TransformLandmarks")
def _landmarks(ctx: LowerCtx, ins, emit):
    pts, m = ins
    _f32(ctx)
    decls, (rx, ry) = _matrix_rows(ctx, m)
    dims = pts.shape[2]

    def landmark(at):
        i = at[1]
        x, y = pts.load((const(0), i, const(0)), 1), pts.load((const(0), i, const(1)), 1)
        out = [Bin("+", Bin("+", Bin("*", r[0], x), Bin("*", r[1], y)), r[3]) for r in (rx, ry)]
        if dims == 3:
            out.append(pts.load((const(0), i, const(2)), 1))
        return seq(*(emit(0, (const(0), i, const(k)), v) for k, v in enumerate(out)))
    return seq(*decls, loops(ctx, pts.shape, (1,), landmark))


# ---- Landmarks2TransformMatrix ---------------------------------------------------------------

class _Tir:
    """crop_matrix's arithmetic on V (TIR expressions with operators)."""
    atan2 = staticmethod(lambda a, b: V(math_call("atan2", a.e, b.e)))
    cos = staticmethod(lambda a: V(math_call("cos", a.e)))
    sin = staticmethod(lambda a: V(math_call("sin", a.e)))
    max = staticmethod(lambda a, b: V(Bin("max", a.e, b.e)))
    min = staticmethod(lambda a, b: V(Bin("min", a.e, b.e)))


@kernel_rule("mediapipe.Landmarks2TransformMatrix")
def _matrix(ctx: LowerCtx, ins, emit):
    pts = ins[0]
    _f32(ctx)
    decls: dict[int, tuple[V, V]] = {}
    stmts = []

    def landmark(i: int) -> tuple[V, V]:
        # each landmark read once, into locals: the unrolled code reuses them
        if i not in decls:
            xy = []
            for k in range(2):
                var = ctx.fresh(f"p{i}_{k}", pts.dtype)
                stmts.append(Decl(var, pts.load((const(0), const(i), const(k)), 1)))
                xy.append(V(var))
            decls[i] = tuple(xy)
        return decls[i]
    entries = crop_matrix(ctx.attrs, landmark, _Tir)
    stores = [emit(0, (const(0), const(k // 4), const(k % 4)),
                   e.e if isinstance(e, V) else const_like(e, pts.dtype))
              for k, e in enumerate(entries)]
    return seq(*stmts, *stores)

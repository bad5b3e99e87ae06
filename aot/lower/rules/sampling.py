"""Kernel rules for aot/ops/sampling.py.

GridSample runs the reference's own coordinate steps (aot.ops.sampling.
grid_taps) on TIR expressions: `Tir` is the arithmetic namespace, `V` a
thin wrapper giving TIR expressions Python's operators. Per output point
the taps' positions, weights and in-range tests become locals, then one
loop over the channels sums the taps. DeformConv samples the same way
(linear, zeros outside) inside its convolution loops. Col2Im gathers: each image element
adds the column entries whose block covers it. AffineGrid is the affine map
of each base-grid point.
"""
from __future__ import annotations

import itertools
import math

from aot.ir.tir import (Assign, Bin, Cast, Decl, DType, Expr, For, If, Select, add, const,
                        dtype_of, flat_index, mul, seq, sub)
from aot.lower.rules.elementwise import cast, const_like, math_call
from aot.lower.rules.reduce import loops
from aot.lower.rules import LowerCtx, kernel_rule
from aot.ops.registry import Sig
from aot.ops.sampling import (affine_size, base_coordinate, col2im_geometry, deform_geometry,
                              grid_sample_params, grid_taps, pixel_taps)


class V:
    """A TIR expression with Python's arithmetic operators (numbers become
    constants of the expression's type)."""

    def __init__(self, e: Expr):
        self.e = e

    @staticmethod
    def of(v, like: Expr) -> Expr:
        return v.e if isinstance(v, V) else const_like(v, like)

    def _bin(self, op: str, other, swap: bool = False) -> "V":
        o = V.of(other, self.e)
        return V(Bin(op, o, self.e) if swap else Bin(op, self.e, o))

    def __add__(self, o):
        return self._bin("+", o)

    def __radd__(self, o):
        return self._bin("+", o, True)

    def __sub__(self, o):
        return self._bin("-", o)

    def __rsub__(self, o):
        return self._bin("-", o, True)

    def __mul__(self, o):
        return self._bin("*", o)

    def __rmul__(self, o):
        return self._bin("*", o, True)

    def __truediv__(self, o):
        return self._bin("/", o)


def _expr(v, like: Expr) -> Expr:
    return V.of(v, like)


class Tir:
    """aot.ops.sampling.Numpy's operations on V; `keep` declares locals in
    the statements list `decls` of the kernel context being built."""

    def __init__(self, ctx: LowerCtx):
        self.ctx = ctx
        self.decls: list = []

    def keep(self, v: V) -> V:
        var = self.ctx.fresh("g", dtype_of(v.e))
        self.decls.append(Decl(var, v.e))
        return V(var)

    @staticmethod
    def floor(v: V) -> V:
        return V(math_call("floor", v.e))

    @staticmethod
    def rint(v: V) -> V:
        return V(math_call("rint", v.e))

    @staticmethod
    def fmod(v: V, d: float) -> V:
        return V(math_call("fmod", v.e, const_like(d, v.e)))

    @staticmethod
    def where(c: V, a, b) -> V:
        like = a.e if isinstance(a, V) else b.e
        return V(Select(c.e, _expr(a, like), _expr(b, like)))

    @staticmethod
    def clip(v: V, lo, hi) -> V:
        return V(Bin("min", Bin("max", v.e, const_like(lo, v.e)), const_like(hi, v.e)))

    @staticmethod
    def lt(a, b) -> V:
        like = a.e if isinstance(a, V) else b.e
        return V(Bin("<", _expr(a, like), _expr(b, like)))

    @staticmethod
    def either(a: V, b: V) -> V:
        return V(Bin("or", a.e, b.e))

    @staticmethod
    def both(a: V, b: V) -> V:
        return V(Bin("and", a.e, b.e))

    @staticmethod
    def to_int(v: V, length: int) -> V:
        # clamped in float first: a far-off coordinate converts to int32 defined
        bounded = Bin("min", Bin("max", v.e, const_like(-1, v.e)), const_like(length, v.e))
        return V(Cast(DType("int32"), bounded))


# ---- GridSample ------------------------------------------------------------------------------

@kernel_rule("GridSample")
def _grid_sample(ctx: LowerCtx, ins, emit):
    x, grid = ins
    mode, padding, align = grid_sample_params(ctx)
    dims = x.shape[2:]
    r = len(dims)
    f = x.dtype

    def point(at: dict):
        n, o = at[0], tuple(at[a] for a in range(2, 2 + r))
        m = Tir(ctx)
        axes = []
        for i, d in enumerate(dims):
            g = m.keep(V(cast(grid.load((n, *o, const(r - 1 - i)), 1), f)))
            axes.append(grid_taps(m, g, d, mode, padding, align))
        c = ctx.fresh("c")
        total = None
        for combo in itertools.product(*axes):
            value = x.load((n, c, *(i.e for i, _, _ in combo)), 1)
            ok = [t.e for _, _, t in combo if t is not None]
            if ok:
                value = Select(ok[0] if len(ok) == 1 else all_of(ok), value, const_like(0, value))
            for _, w, _ in combo:
                if w is not None:
                    value = Bin("*", w.e, value)
            total = value if total is None else Bin("+", total, value)
        return seq(*m.decls, For(c, x.shape[1], emit(0, (n, c, *o), total)))
    return loops(ctx, ctx.out_types[0].shape, [0, *range(2, 2 + r)], point)


def all_of(tests: list[Expr]) -> Expr:
    """The tests and-ed."""
    out = tests[0]
    for t in tests[1:]:
        out = Bin("and", out, t)
    return out


# ---- AffineGrid ----------------------------------------------------------------------------

@kernel_rule("AffineGrid")
def _affine_grid(ctx: LowerCtx, ins, emit):
    theta, size_ref = ins
    if size_ref.value is None:
        raise ctx.unsupported("AffineGrid with its size computed at run time")
    size = affine_size(Sig(ctx.node, ctx.in_types, (None, size_ref.value)))
    align = bool(ctx.attrs.get("align_corners", 0))
    dims = size[2:]
    r = len(dims)
    f = theta.dtype
    out_shape = ctx.out_types[0].shape

    def body(at: dict):
        n, k = at[0], at[r + 1]
        value = theta.load((n, k, const(r)), 1)
        for j in range(r):          # coordinate j: spatial axis r - 1 - j (x innermost)
            axis = r - j
            base = base_coordinate(V(cast(at[axis], f)), dims[axis - 1], align)
            value = Bin("+", value, Bin("*", theta.load((n, k, const(j)), 1),
                                        _expr(base, value)))
        return emit(0, tuple(at[a] for a in range(r + 2)), value)
    return loops(ctx, out_shape, range(r + 2), body)


# ---- Col2Im ---------------------------------------------------------------------------------

@kernel_rule("Col2Im")
def _col2im(ctx: LowerCtx, ins, emit):
    x = ins[0]
    if any(ref.value is None for ref in ins[1:]):
        raise ctx.unsupported("Col2Im with image or block shape computed at run time")
    geo = col2im_geometry(Sig(ctx.node, ctx.in_types, (None, ins[1].value, ins[2].value)))
    r, block, counts = len(geo["image"]), geo["block"], geo["counts"]
    per_channel = math.prod(block)

    def pixel(at: dict):
        n, c, y = at[0], at[1], tuple(at[a] for a in range(2, 2 + r))
        acc = ctx.fresh("acc", x.dtype)

        def tap(kk: dict):
            k = tuple(kk[a] for a in range(r))
            # the block at k covers y where y + pad - k * dilation = stride * position
            p = [sub(add(y[i], const(geo["pads"][i])), mul(k[i], const(geo["dilations"][i])))
                 for i in range(r)]
            pos = [Bin("/", p[i], const(geo["strides"][i])) for i in range(r)]
            valid = all_of([Bin(">=", p[i], const(0)) for i in range(r)]
                         + [Bin("==", Bin("%", p[i], const(geo["strides"][i])), const(0))
                            for i in range(r) if geo["strides"][i] > 1]
                         + [Bin("<", pos[i], const(counts[i])) for i in range(r)])
            col = add(mul(c, const(per_channel)), flat_index(k, tuple(block)))
            value = x.load((n, col, flat_index(tuple(pos), tuple(counts))), 1)
            return If(valid, Assign(acc, Bin("+", acc, value)))
        gather = loops(ctx, block, range(r), tap, "k")
        return seq(Decl(acc, const_like(0, x.dtype)), gather,
                   emit(0, (n, c, *y), acc))
    return loops(ctx, ctx.out_types[0].shape, range(r + 2), pixel)


# ---- DeformConv ------------------------------------------------------------------------------

@kernel_rule("DeformConv")
def _deform_conv(ctx: LowerCtx, ins, emit):
    x, w, off = ins[:3]
    bias = ins[3] if len(ins) > 3 else None
    mask = ins[4] if len(ins) > 4 else None
    geo = deform_geometry(Sig(ctx.node, ctx.in_types, (None,) * len(ins)))
    (kh, kw), ipg, opg = geo["kernel"], geo["in_per_group"], geo["out_per_group"]
    f = x.dtype

    def output(at: dict):
        n, o, oy, ox = (at[a] for a in range(4))
        acc = ctx.fresh("acc", f)
        ci, i, j = ctx.fresh("ci"), ctx.fresh("ki"), ctx.fresh("kj")
        c = add(mul(Bin("/", o, const(opg)), const(ipg)), ci)      # the input channel
        g = Bin("/", c, const(geo["in_per_offset_group"]))         # its offset group
        tap = add(mul(g, const(kh * kw)), add(mul(i, const(kw)), j))
        m = Tir(ctx)
        coords = []
        for axis, (k, out_pos) in enumerate(((i, oy), (j, ox))):
            base = sub(add(mul(out_pos, const(geo["strides"][axis])),
                           mul(k, const(geo["dilations"][axis]))), const(geo["pads"][axis]))
            shift = off.load((n, add(mul(tap, const(2)), const(axis)), oy, ox), 1)
            pos = m.keep(V(Bin("+", cast(base, f), shift)))
            coords.append(pixel_taps(m, pos, x.shape[2 + axis], "linear", "zeros", True))
        sample = None
        for (iy, wy, oky), (ix, wx, okx) in itertools.product(*coords):
            value = Select(Bin("and", oky.e, okx.e), x.load((n, c, iy.e, ix.e), 1),
                           const_like(0, f))
            term = Bin("*", Bin("*", wy.e, wx.e), value)
            sample = term if sample is None else Bin("+", sample, term)
        if mask is not None:
            sample = Bin("*", sample, mask.load((n, tap, oy, ox), 1))
        weight = w.load((o, ci, i, j), 1)
        step = seq(*m.decls, Assign(acc, Bin("+", acc, Bin("*", weight, sample))))
        init = bias.load((o,), 1) if bias is not None else const_like(0, f)
        return seq(Decl(acc, init), For(ci, ipg, For(i, kh, For(j, kw, step))),
                   emit(0, (n, o, oy, ox), acc))
    return loops(ctx, ctx.out_types[0].shape, range(4), output)

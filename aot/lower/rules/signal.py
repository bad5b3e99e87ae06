"""Rules for the signal ops (aot/ops/signal.py): DFT and STFT as kernel rules,
the windows and MelWeightMatrix as compile-time tables.

A DFT length that is a power of two (the frames of audio front ends) is an
in-place radix-2 FFT, O(n log n) per row: the samples copied in
bit-reversed order into a scratch row of 2n floats, then log2(n) passes of
butterflies. Other lengths are direct sums, O(n x bins) per row, without
scratch. Both take their twiddle factors from one table of cos and one of
sin over the DFT length (2n floats of flash); the direct sums read them at
(bin x sample) mod n, kept as a running index so no product can overflow.
Everything is float32 (the reference is float64; the error stays near
float32's epsilon times the row's magnitude).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from aot.interp import run_node
from aot.ir.tir import (Assign, Bin, Decl, Expr, For, Load, Select, Stmt, Store, Var, const,
                        flat_index, seq)
from aot.lower.rules.elementwise import const_like
from aot.lower.rules.reduce import loops
from aot.lower.rules import LowerCtx, kernel_rule
from aot.ops.signal import WINDOWS, dft_params, optional_int, stft_params
from aot.ops.registry import Sig

# (x_j, its imaginary part or None) of sample j of the summed sequence
Sample = Callable[[Expr], tuple[Expr, Expr | None]]


def _tables(ctx: LowerCtx, n: int):
    angle = 2 * np.pi * np.arange(n) / n
    return (ctx.param("dft_cos", np.cos(angle).astype(np.float32)),
            ctx.param("dft_sin", np.sin(angle).astype(np.float32)))


def rotated_sum(ctx: LowerCtx, n: int, count: int, step: Var, sample: Sample,
                inverse: bool) -> tuple[Stmt, Var, Var]:
    """(statements, re, im) of sum_{j < count} x_j e^{-+2 pi i j step / n}
    (the sign + for the inverse), x_j = sample(j)."""
    cos_t, sin_t = _tables(ctx, n)
    re, im = ctx.fresh("re", "float32"), ctx.fresh("im", "float32")
    m, j = ctx.fresh("m"), ctx.fresh("j")
    a, b = sample(j)
    c, s = Load(cos_t, m), Load(sin_t, m)
    if inverse:       # (a + ib)(c + is)
        dre = Bin("*", a, c) if b is None else Bin("-", Bin("*", a, c), Bin("*", b, s))
        dim = Bin("*", a, s) if b is None else Bin("+", Bin("*", b, c), Bin("*", a, s))
    else:             # (a + ib)(c - is)
        dre = Bin("*", a, c) if b is None else Bin("+", Bin("*", a, c), Bin("*", b, s))
        dim = Bin("-", const_like(0, a), Bin("*", a, s)) if b is None \
            else Bin("-", Bin("*", b, c), Bin("*", a, s))
    nxt = Bin("+", m, step)
    body = seq(Assign(re, Bin("+", re, dre)), Assign(im, Bin("+", im, dim)),
               Assign(m, Select(Bin(">=", nxt, const(n)), Bin("-", nxt, const(n)), nxt)))
    zero = const_like(0, a)
    return seq(Decl(re, zero), Decl(im, zero), Decl(m, const(0)), For(j, count, body)), re, im


def fft(ctx: LowerCtx, n: int, count: int, sample: Sample, inverse: bool, bins: int,
        store: Callable[[Var, Expr, Expr], Stmt]) -> Stmt:
    """The first `bins` of the length-n DFT of x_0 .. x_{count-1} (zero
    beyond), n a power of two: store(k, re, im) for each bin k."""
    bits = n.bit_length() - 1
    rev = np.array([int(format(i, f"0{bits}b")[::-1], 2) for i in range(n)], np.int32)
    rev_t = ctx.param("fft_bitrev", rev)
    cos_t, sin_t = _tables(ctx, n)
    re, im = (ctx.scratch_buffer(name, "float32", (n,)) for name in ("fft_re", "fft_im"))
    t, src = ctx.fresh("t"), ctx.fresh("src")
    a, b = sample(Bin("min", src, const(count - 1)) if count < n else src)
    zero = const_like(0, a)
    if count < n:     # zero padding: the (clamped) load is discarded
        a = Select(Bin("<", src, const(count)), a, zero)
        b = None if b is None else Select(Bin("<", src, const(count)), b, zero)
    passes = [For(t, n, seq(Decl(src, Load(rev_t, t)), Store(re, t, a),
                            Store(im, t, zero if b is None else b)))]
    for level in range(bits):
        half = 1 << level
        i, j, p, q = (ctx.fresh(v) for v in ("i", "j", "p", "q"))
        wr, wi, tr, ti, ur, ui = (ctx.fresh(v, "float32")
                                  for v in ("wr", "wi", "tr", "ti", "ur", "ui"))
        twiddle = Bin("*", j, const(n // (2 * half)))
        sin = Load(sin_t, twiddle)
        passes.append(For(i, n // 2, seq(
            # butterfly i joins p and q = p + half; j is its place in its group
            Decl(j, Bin("&", i, const(half - 1))),
            Decl(p, Bin("+", Bin("*", Bin("-", i, j), const(2)), j)),
            Decl(q, Bin("+", p, const(half))),
            Decl(wr, Load(cos_t, twiddle)),
            Decl(wi, sin if inverse else Bin("-", const_like(0, sin), sin)),
            Decl(tr, Bin("-", Bin("*", Load(re, q), wr), Bin("*", Load(im, q), wi))),
            Decl(ti, Bin("+", Bin("*", Load(re, q), wi), Bin("*", Load(im, q), wr))),
            Decl(ur, Load(re, p)), Decl(ui, Load(im, p)),
            Store(re, q, Bin("-", ur, tr)), Store(im, q, Bin("-", ui, ti)),
            Store(re, p, Bin("+", ur, tr)), Store(im, p, Bin("+", ui, ti)))))
    k = ctx.fresh("k")
    passes.append(For(k, bins, store(k, Load(re, k), Load(im, k))))
    return seq(*passes)


def transform(ctx: LowerCtx, n: int, count: int, sample: Sample, inverse: bool, bins: int,
              store: Callable[[Var, Expr, Expr], Stmt]) -> Stmt:
    """store(k, re, im) for the first `bins` bins of the length-n DFT (the
    inverse unscaled) of x_0 .. x_{count-1}: an FFT for n a power of two."""
    if n >= 4 and n & (n - 1) == 0:
        return fft(ctx, n, count, sample, inverse, bins, store)
    k = ctx.fresh("k")
    sums, re, im = rotated_sum(ctx, n, count, k, sample, inverse)
    return For(k, bins, seq(sums, store(k, re, im)))


@kernel_rule("DFT")
def _dft(ctx: LowerCtx, ins, emit):
    x = ins[0]
    rank = len(x.shape)
    values = [r.value if r is not None else None for r in ins]
    lengths = (optional_int(values, 1), optional_int(values, 2))
    axis, n, inverse, onesided = dft_params(ctx, x.shape, lengths)
    out = ctx.out_types[0].shape
    complex_in = x.shape[-1] == 2
    outer = [a for a in range(rank - 1) if a != axis]

    def at(idx, axis_value, part) -> tuple:
        return tuple(axis_value if a == axis else part if a == rank - 1 else idx[a]
                     for a in range(rank))

    def row(idx) -> Stmt:
        def sample(j):
            a = x.load(at(idx, j, const(0)))
            return a, (x.load(at(idx, j, const(1))) if complex_in else None)

        if inverse and onesided:
            # the real signal of a Hermitian spectrum given by its first half:
            # the real part of the inverse of X_j, X_{n-j} = conj(X_j)
            def hermitian(j):
                half, given = n // 2 + 1, x.shape[axis]
                mirrored = Bin(">=", j, const(half))
                at_j = Select(mirrored, Bin("-", const(n), j), j)
                a, b = sample(Bin("min", at_j, const(given - 1)))
                zero = const_like(0, a)
                inside = Bin("<", at_j, const(given))
                b = Select(mirrored, Bin("-", zero, b), b)
                return Select(inside, a, zero), Select(inside, b, zero)
            return transform(ctx, n, n, hermitian, True, out[axis], lambda k, re, im: emit(
                0, at(idx, k, const(0)), Bin("*", re, const_like(1 / n, re))))
        scale = (lambda v: Bin("*", v, const_like(1 / n, v))) if inverse else (lambda v: v)
        return transform(ctx, n, min(x.shape[axis], n), sample, inverse, out[axis],
                         lambda k, re, im: seq(emit(0, at(idx, k, const(0)), scale(re)),
                                               emit(0, at(idx, k, const(1)), scale(im))))
    return loops(ctx, x.shape, outer, row)


@kernel_rule("STFT")
def _stft(ctx: LowerCtx, ins, emit):
    x = ins[0]
    window = ins[2] if len(ins) > 2 else None
    sig = Sig(ctx.node, ctx.in_types, tuple(r.value if r is not None else None for r in ins))
    step, n, frames, _ = stft_params(sig)
    batch, bins = x.shape[0], ctx.out_types[0].shape[2]
    complex_in = x.shape[-1] == 2

    def frame(at) -> Stmt:
        b, f = at[0], at[1]

        def sample(j):
            t = Bin("+", Bin("*", f, const(step)), j)
            parts = [x.load((b, t, const(p))) for p in range(2 if complex_in else 1)]
            if window is not None:
                w = window.load((j,))
                parts = [Bin("*", p, w) for p in parts]
            return parts[0], (parts[1] if complex_in else None)
        return transform(ctx, n, n, sample, False, bins,
                         lambda k, re, im: seq(emit(0, (b, f, k, const(0)), re),
                                               emit(0, (b, f, k, const(1)), im)))
    return loops(ctx, (batch, frames), (0, 1), frame)


# ---- values known at compile time ---------------------------------------------------------

@kernel_rule(*WINDOWS, "MelWeightMatrix")
def compile_time_tables(ctx: LowerCtx, ins, emit):
    """Ops whose inputs are all compile-time constants (the windows and mel
    filters: shape arguments alone) fold, unless their outputs are the
    model's: each output is then copied from a table linked in as const
    data."""
    if any(r is not None and r.value is None for r in ins):
        raise ctx.unsupported(f"{ctx.node.op} of a value computed at run time")
    types = {n: t for n, t in zip(ctx.node.inputs, ctx.in_types) if n}
    types.update(zip(ctx.node.outputs, ctx.out_types))
    values = run_node(ctx.node, types, [r.value if r is not None else None for r in ins])
    parts = []
    for k, value in enumerate(values):
        table = ctx.param(f"{ctx.node.op.lower()}_values", value)
        rank = value.ndim

        def copy(at, k=k, table=table, shape=value.shape) -> Stmt:
            idx = tuple(at[a] for a in range(rank))
            return emit(k, idx, Load(table, flat_index(idx, shape)))
        parts.append(loops(ctx, value.shape, range(rank), copy))
    return seq(*parts)

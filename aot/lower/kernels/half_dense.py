"""The dense product computed in half (aot/isa/half.py's aot_hfma: FMLA on
8 half lanes), for targets with FP16 arithmetic: a strategy (Accumulate)
of dense.py's register-tiled product, with float16 operands A and B.

Each register tile keeps float32 accumulators (float16-typed locals the
float16 pass widens) and sums the reduction in chunks of CHUNK steps: a
chunk's products accumulate in half (one rounding to half per
multiply-add), then the chunk's half sums are widened and added to the
float32 accumulators. A long reduction thus loses no more than a chunk's
worth of half roundings, not K's (error against the float32 product:
tests/lower/kernels/test_half_dense.py). The inputs are read eight steps
at a time by lane (`fmla v.8h, v.8h, v.h[i]`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from aot.isa.calls import lane
from aot.isa.half import HFMA, has_half_arithmetic, hfma
from aot.ir.tir import Assign, Bin, Broadcast, Const, Decl, DType, Expr, ForKind, Stmt, add
from aot.lower.arith.loops import loop, offsets, plus, seq_of
from aot.lower.rules.elementwise import const_like
from aot.lower.rules import LowerCtx
from aot.lower.schedule.tile_sizes import Tile
from aot.lower.kernels.dense import FloatProduct, Operand, product

LANES = HFMA.lanes

# Reduction steps summed in half before the float32 accumulators take the
# sum: each chunk costs a tile 4 instructions per accumulator (two FCVTL,
# two FADD) against the 8 multiply-adds per 8 steps it saves.
CHUNK = 16

# 4 pixels x 2 vectors of 8 channels: per pixel 4 float32 accumulator
# registers, 2 half ones and its input vector, with 2 weight vectors: 30 of
# AArch64's 32 registers.
TILE = Tile(LANES, 2, mr=4, max_accs=8, k_lanes=LANES)


def applies(target, dtype: DType, k: int, n: int) -> bool:
    """Whether a [. x k] x [k x n] float16 product computes in half here:
    the target has FP16 arithmetic and k and n are whole vectors."""
    return (has_half_arithmetic(target) and dtype.scalar == "float16"
            and k % LANES == 0 and n % LANES == 0)


def direct_fits(target, dtype: DType, layout: str, group: int, icg: int, ocg: int) -> bool:
    """Whether a float16 direct convolution computes in half here
    (half_conv.py): channel-last, one group, whole vectors of channels."""
    return layout == "NHWC" and group == 1 and applies(target, dtype, icg, ocg)


@dataclass(frozen=True)
class HalfProduct(FloatProduct):
    """The half strategy: the float one's accumulators (from zero) and
    epilogue, its reduction in chunks of CHUNK steps summed in half by
    lane."""

    def reduce(self, bi, rows, c0, widths, accs) -> Stmt | None:
        return half_chunks(self.ctx, accs, widths, self.k,
                           lambda r, kk: self.a.load(bi, rows[r], kk, LANES),
                           lambda kk, off: self.b.load(bi, kk, plus(c0, off), LANES))


def half_chunks(ctx: LowerCtx, accs, widths, k: int, x_load: Callable[[int, Expr], Expr],
                w_load: Callable[[Expr, int], Expr]) -> Stmt | None:
    """accs[r][j] += sum over s < k of x[r][s] * w[s][columns of j], in
    chunks of CHUNK steps summed in half (k a multiple of LANES):
    x_load(r, s) the LANES inputs of row r from step s, w_load(s, offset)
    the weights of step s from channel offset."""
    full, rest = divmod(k, CHUNK)
    return seq_of(
        loop(ctx, "kc", full, lambda k0: _chunk(ctx, accs, widths, k0, CHUNK, x_load, w_load),
             step=CHUNK),
        _chunk(ctx, accs, widths, Const(full * CHUNK), rest, x_load, w_load) if rest else None)


def _chunk(ctx: LowerCtx, accs, widths, k0: Expr, size: int, x_load, w_load) -> Stmt:
    """accs += the half sums of steps [k0, k0 + size), by lane."""
    ht = DType("float16", LANES)
    sums = [[ctx.fresh("hs", ht) for _ in widths] for _ in accs]
    decls = [Decl(h, const_like(0, ht)) for row in sums for h in row]

    def steps(kk: Expr) -> Stmt:
        xs = [ctx.fresh("xh", ht) for _ in accs]
        out: list[Stmt] = [Decl(x, x_load(r, kk)) for r, x in enumerate(xs)]
        for l in range(LANES):
            ws = [ctx.fresh("wh", ht) for _ in widths]
            out += [Decl(w, w_load(plus(kk, l), off)) for w, off in zip(ws, offsets(widths))]
            out += [Assign(h, hfma(h, Broadcast(lane(x, l), LANES), w))
                    for x, row in zip(xs, sums) for h, w in zip(row, ws)]
        return seq_of(*out)
    trips = size // LANES
    body = loop(ctx, "k", trips, lambda j: steps(add(k0, j)), step=LANES,
                kind=ForKind.UNROLLED if trips <= 2 else ForKind.SERIAL)
    merge = [Assign(a, Bin("+", a, h)) for row, hrow in zip(accs, sums)
             for a, h in zip(row, hrow)]
    return seq_of(*decls, body, *merge)


def half_dense(ctx: LowerCtx, emit, a: Operand, b: Operand, batch, m: int, k: int, n: int,
               out_index, finish) -> Stmt:
    """dense.dense's product (A and B read through Operands, B's rows
    unit-stride) computed in half: `applies` must hold."""
    dtype = DType("float16", 1)
    return product(ctx, HalfProduct(ctx, dtype, TILE, a, b, k, emit, out_index, finish),
                   batch, m, n)

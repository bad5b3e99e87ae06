"""The register-tiled dense product: Y[batch, i, j] = the epilogue of
sum_k A[batch, i, k] * B[batch, k, j], written once (product: batch
loops, a prologue, row blocks x column tiles, register tiles) for every
accumulator strategy (Accumulate): the float one here (FloatProduct; A and
B read through an Operand, a constant B packed into column panels) and the
int8 fully connected layer's (aot/lower/rules/quant/tflite_fc.py). Gemm and MatMul
(nn.py), the pointwise convolution (nn.py) and Winograd's per-frequency
products (winograd.py) are built on it; it sits below them, so neither
imports the other through it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

from aot.ir.tir import Assign, Bin, Buffer, Const, DType, Expr, Load, Stmt, Var, add, dt, mul
from aot.lower.arith.loops import accumulators, loop, offsets, plus, seq_of, shared_param
from aot.lower.rules.elementwise import const_like
from aot.lower.rules import LowerCtx
from aot.lower.schedule.tile_sizes import Tile, matvec_tile, tile
from aot.lower.kernels.tiles import (lane_update, position_blocks, rank1_update, reduce_steps,
                                     register_tile, tile_parts, tile_widths)


@dataclass(frozen=True)
class Operand:
    """How the dense inner loop reads one operand: load(batch, row, col, lanes)."""
    load: Callable[[tuple, Expr, Expr, int], Expr]
    vector_cols: bool          # consecutive columns are consecutive in memory


def column_panels(n_tiles: list[tuple[int, tuple[int, ...]]],
                  panel: Callable[[slice, tuple[int, ...]], np.ndarray | None]) -> np.ndarray:
    """Constant weights as column panels, one per channel tile of n_tiles
    (tile_widths), flat and in tile order: `panel(columns, widths)` is a
    tile's weights in the order its loop reads them (None: the tile reads
    none from panels), so each tile's are one contiguous stream. The float
    product's [K][N] B gives its [K][tile width]; the int8 FC's quads
    their [D/4][tile width][4] (tflite_fc.quad_panels). Either way the
    panel of the tile from column c0 starts at c0 * depth."""
    parts, c0 = [], 0
    for count, widths in n_tiles:
        width = sum(widths)
        for _ in range(count):
            part = panel(slice(c0, c0 + width), widths)
            if part is not None:
                parts.append(part.reshape(-1))
            c0 += width
    return np.concatenate(parts)


class Accumulate(Protocol):
    """An accumulator strategy of the dense product: what its register
    tiles hold (`dtype`, sized by `tile`) and how they start, sum and end.
    FloatProduct here (FMA, rank-1 or by lane); the int8 fully connected
    layer's pairs, quads and single steps (aot/lower/rules/quant/tflite_fc.py)."""
    dtype: DType
    tile: Tile

    def prologue(self, bi: tuple) -> Stmt | None:
        """Once per batch index, before its rows (e.g. staging the input)."""

    def init(self, bi: tuple, c0: Expr, widths: tuple[int, ...], off: int, width: int) -> Expr:
        """The start of the accumulator of `width` columns from c0 + off
        (of a tile of `widths`)."""

    def reduce(self, bi: tuple, rows: list, c0: Expr, widths: tuple[int, ...],
               accs: tuple[tuple[Var, ...], ...]) -> Stmt | None:
        """accs[r][j] += sum over k of A[rows[r], k] * B[k, columns of j]."""

    def store(self, bi: tuple, row: Expr, c0: Expr, off: int, acc: Var, width: int) -> Stmt:
        """The accumulator through the epilogue, from its register."""


def product(ctx: LowerCtx, s: Accumulate, batch: Sequence[int], m: int, n: int) -> Stmt:
    """The dense product's one loop nest: for every batch index, its
    prologue, then tiles of MR rows (tile.block) x the column tiles of
    tile_widths, a block with more accumulators than registers in parts
    (tile_parts); each tile declares its accumulators, runs the strategy's
    reduction and stores every accumulator through its epilogue."""
    t = s.tile

    def row_tile(bi, rows, c0, widths) -> Stmt:
        rt = register_tile(ctx, s.dtype, rows, widths, lambda off, w: s.init(bi, c0, tuple(widths), off, w))
        return rt.code(s.reduce(bi, rows, c0, tuple(widths), rt.accs),
                       lambda row, off, acc, w: s.store(bi, row, c0, off, acc, w))

    def batch_level(d: int, bi: tuple) -> Stmt:
        if d == len(batch):
            return seq_of(s.prologue(bi), position_blocks(
                ctx, "i", m, 0, t.block(m), lambda rows: tile_parts(
                    ctx, tile_widths(n, t), t, rows, lambda c0, widths, part: row_tile(
                        bi, part, c0, widths))))
        return loop(ctx, f"b{d}", batch[d], lambda v: batch_level(d + 1, bi + (v,)))

    return seq_of(batch_level(0, ()))


@dataclass(frozen=True)
class FloatProduct:
    """The float strategy: accumulators from zero, rank-1 FMA updates (by
    lane of A's rows where they are unit-stride and the tile says so; a
    one-row tile's even and odd k apart, split_k), finish(acc, bi, i, j)
    then emit at out_index(bi, i, j). A constant B is read from its column
    panels."""
    ctx: LowerCtx
    dtype: DType
    tile: Tile
    a: Operand
    b: Operand | Buffer
    k: int
    emit: Callable
    out_index: Callable[[tuple, Expr, Expr], tuple]
    finish: Callable[[Expr, tuple, Expr, Expr], Expr]

    def prologue(self, bi: tuple) -> None:
        return None

    def init(self, bi: tuple, c0: Expr, widths, off: int, width: int) -> Expr:
        return const_like(0, self.dtype.with_lanes(width))

    def _b(self, bi, kk, c0, width, off, lanes) -> Expr:
        if isinstance(self.b, Buffer):     # column panels
            return Load(self.b, plus(add(mul(c0, Const(self.k)), mul(kk, Const(width))), off),
                        lanes)
        return self.b.load(bi, kk, plus(c0, off), lanes)

    def reduce(self, bi, rows, c0, widths, accs) -> Stmt | None:
        ctx, dtype, t, a, offs = self.ctx, self.dtype, self.tile, self.a, offsets(widths)

        def weights(kk):
            return [self._b(bi, kk, c0, sum(widths), off, wd) for off, wd in zip(offs, widths)]

        def step(kk, into=accs):
            return rank1_update(ctx, dtype, into, [a.load(bi, i, kk, 1) for i in rows],
                                weights(kk), widths)

        def lane_step(kk):
            return lane_update(ctx, dtype, accs, [a.load(bi, i, kk, t.k_lanes) for i in rows],
                               lambda l: weights(plus(kk, l)), widths)
        by_lane = lane_step if a.vector_cols and t.k_lanes > 1 else None
        if by_lane is None and split_k(dtype, rows, widths, self.k, t):
            return seq_of(*split_k_loop(ctx, dtype, accs, widths, self.k, step))
        return reduce_steps(ctx, "k", self.k, t, step, by_lane)

    def store(self, bi, row, c0, off, acc, width) -> Stmt:
        j = plus(c0, off)
        return self.emit(0, self.out_index(bi, row, j), self.finish(acc, bi, row, j))


def dense(ctx: LowerCtx, emit, a: Operand, b: Operand | np.ndarray, batch: Sequence[int],
          m: int, k: int, n: int, out_index: Callable[[tuple, Expr, Expr], tuple],
          finish: Callable[[Expr, tuple, Expr, Expr], Expr]) -> Stmt:
    """Y[batch, i, j] = finish(sum_k A[batch, i, k] * B[batch, k, j]) in
    tiles of MR rows x NR columns, the columns in vectors when B's rows are
    unit-stride: the product with the float strategy. A constant B (a
    [K][N] array) is packed into column panels."""
    dtype = dt(ctx.out_types[0].dtype)
    const_b = isinstance(b, np.ndarray)
    t = tile(ctx.target, dtype, (const_b or b.vector_cols) and n > 1, pixels=m > 1)
    if m == 1:
        t = matvec_tile(ctx.target, dtype, t)
    if const_b:
        b_const = b.astype(dtype.scalar)
        b = shared_param(ctx, "b_panels", column_panels(tile_widths(n, t),
                                                         lambda cols, _: b_const[:, cols]))
    return product(ctx, FloatProduct(ctx, dtype, t, a, b, k, emit, out_index, finish),
                   batch, m, n)


def split_k(dtype: DType, rows: list, widths: Sequence[int], k: int, t: Tile) -> bool:
    """Whether a float row tile sums even and odd k in separate accumulators:
    one row (a matrix-vector product) has too few accumulators to hide the
    FMA latency (ad_fcae f32: 2.6% faster)."""
    return (dtype.is_float and len(rows) == 1 and max(widths) > 1 and k >= 4
            and 2 * len(widths) <= t.max_accs)


def split_k_loop(ctx: LowerCtx, dtype: DType, accs: list[list[Var]], widths: Sequence[int],
                  k: int, step: Callable) -> list[Stmt | None]:
    """The k loop over pairs, the odd k into a second set of accumulators
    added to the first at the end (an odd k's last step alone)."""
    odd, decls = accumulators(ctx, dtype, widths,
                               lambda off, w: const_like(0, dtype.with_lanes(w)))
    pairs = loop(ctx, "k", k // 2, lambda kk: seq_of(step(kk), step(plus(kk, 1), [odd])),
                  step=2)
    last = step(Const(k - 1)) if k % 2 else None
    merge = [Assign(a, Bin("+", a, b)) for a, b in zip(accs[0], odd)]
    return [*decls, pairs, last, *merge]

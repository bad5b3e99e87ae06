"""The register-tiled dense product of the float kernels: Y[batch, i, j] =
finish(sum_k A[batch, i, k] * B[batch, k, j]), A and B read through an
Operand, a constant B packed into column panels. Gemm and MatMul (nn.py),
the pointwise convolution (nn.py) and Winograd's per-frequency products
(winograd.py) are built on it; it sits below them, so neither imports the
other through it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from aot.ir.tir import Assign, Bin, Const, DType, Expr, Load, Stmt, Var, add, dt, mul
from aot.lower.builders import accumulators, loop, offsets, plus, seq_of, shared_param
from aot.lower.elementwise import const_like
from aot.lower.rules import LowerCtx
from aot.lower.schedule import Tile, matvec_tile, tile
from aot.lower.tiles import (lane_update, position_blocks, rank1_update, reduce_steps,
                             register_tile, tile_parts, tile_widths)


@dataclass(frozen=True)
class Operand:
    """How the dense inner loop reads one operand: load(batch, row, col, lanes)."""
    load: Callable[[tuple, Expr, Expr, int], Expr]
    vector_cols: bool          # consecutive columns are consecutive in memory


def column_panels(b: np.ndarray, n_tiles: list[tuple[int, tuple[int, ...]]]) -> np.ndarray:
    """A constant [K][N] matrix as column panels, one per channel tile, each
    [K][tile width]: a tile's weights are one contiguous stream. The panel
    of the tile starting at column c0 starts at c0 * K."""
    parts, c0 = [], 0
    for count, widths in n_tiles:
        width = sum(widths)
        for _ in range(count):
            parts.append(b[:, c0:c0 + width].reshape(-1))
            c0 += width
    return np.concatenate(parts)


def dense(ctx: LowerCtx, emit, a: Operand, b: Operand | np.ndarray, batch: Sequence[int],
          m: int, k: int, n: int, out_index: Callable[[tuple, Expr, Expr], tuple],
          finish: Callable[[Expr, tuple, Expr, Expr], Expr]) -> Stmt:
    """Y[batch, i, j] = finish(sum_k A[batch, i, k] * B[batch, k, j]) in
    tiles of MR rows x NR columns, the columns in vectors when B's rows are
    unit-stride. A constant B (a [K][N] array) is packed into column panels."""
    dtype = dt(ctx.out_types[0].dtype)
    const_b = isinstance(b, np.ndarray)
    t = tile(ctx.target, dtype, (const_b or b.vector_cols) and n > 1, pixels=m > 1)
    if m == 1:
        t = matvec_tile(ctx.target, dtype, t)
    if const_b:
        panels = shared_param(ctx, "b_panels", column_panels(b.astype(dtype.scalar), tile_widths(n, t)))

    def b_load(bi, kk, c0, width, off, lanes) -> Expr:
        if const_b:
            return Load(panels, plus(add(mul(c0, Const(k)), mul(kk, Const(width))), off), lanes)
        return b.load(bi, kk, plus(c0, off), lanes)

    def row_tile(bi, rows, c0, widths) -> Stmt:
        """A tile of len(rows) rows x sum(widths) columns (tile_parts: a
        block with more accumulators than registers is done in parts)."""
        offs = offsets(widths)
        rt = register_tile(ctx, dtype, rows, widths,
                           lambda off, w: const_like(0, dtype.with_lanes(w)))
        accs = rt.accs

        def weights(kk):
            return [b_load(bi, kk, c0, sum(widths), off, wd) for off, wd in zip(offs, widths)]

        def step(kk, into=accs):
            return rank1_update(ctx, dtype, into, [a.load(bi, i, kk, 1) for i in rows],
                                 weights(kk), widths)

        def lane_step(kk):
            return lane_update(ctx, dtype, accs, [a.load(bi, i, kk, t.k_lanes) for i in rows],
                                lambda l: weights(plus(kk, l)), widths)

        def store(i, off, acc, _) -> Stmt:
            return emit(0, out_index(bi, i, plus(c0, off)), finish(acc, bi, i, plus(c0, off)))
        by_lane = lane_step if a.vector_cols and t.k_lanes > 1 else None
        if by_lane is None and split_k(dtype, rows, widths, k, t):
            return rt.code(seq_of(*split_k_loop(ctx, dtype, accs, widths, k, step)), store)
        return rt.code(reduce_steps(ctx, "k", k, t, step, by_lane), store)

    def batch_level(d: int, bi: tuple) -> Stmt:
        if d == len(batch):
            return position_blocks(ctx, "i", m, 0, t.block(m), lambda rows: tile_parts(
                ctx, tile_widths(n, t), t, rows, lambda c0, widths, part: row_tile(
                    bi, part, c0, widths)))
        return loop(ctx, f"b{d}", batch[d], lambda v: batch_level(d + 1, bi + (v,)))

    return seq_of(batch_level(0, ()))


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

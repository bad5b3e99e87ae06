"""Winograd convolution: a 3x3, stride-1 float convolution in fewer multiplies.

F(m x m, 3 x 3) (Lavin and Gray, "Fast Algorithms for Convolutional Neural
Networks", 2015) computes an m x m block of outputs from an (m + 2) x
(m + 2) patch of the input with (m + 2)^2 multiplies per input and output
channel pair instead of 9 m^2: F(2x2, 3x3) 16 instead of 36. Per block

    Y = A^T [ (G g G^T) (.) (B^T d B) ] A

where g is the 3x3 filter, d the patch and (.) the element-wise product.
Summed over input channels, the element-wise products become, for each of
the (m + 2)^2 "frequencies", a matrix product [blocks x IC] x [IC x OC].

The kernel, channel-last only, one row of blocks at a time (so that its two
workspaces stay in the L1 cache and in a small part of the arena; the rows
in one share per thread of the package's pool, each with its own
workspaces, for the thread split):

1. input transform: each block's patch (taps outside the image are known
   zeros at compile time: the blocks of a row are split into runs whose
   in-image patch columns agree, as the direct conv's regions are, and
   each row of blocks takes the code of its run of rows, a test per row)
   -> V[frequency][block][input channel];
2. one matrix product per frequency, the dense kernels' register tiles
   (dense.py): V[f] x U[f] -> M[f][block][output channel], U = G g G^T
   computed at compile time (const data);
3. output transform of M plus the bias, through the group's fused epilogue
   (activation, residual add) like the direct conv's stores; a block that
   overhangs the output stores only its outputs inside.

The results differ from the direct convolution's by rounding (the
transforms' sums, and U rounded to float32; ALGORITHMS says how much).
Whether a convolution takes this path, and in which block size, is a
schedule choice (strategy.conv_algorithm: the default policy per target,
`aot tune` may change it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from aot.ir.tir import (Bin, Buffer, Comment, Const, Decl, DType, Expr, If, Load, Stmt, Store,
                        Unary, add, dt, flat_index, mul, seq)
from aot.isa.half import HADD, HSUB, half_op
from aot.lower.kernels import half_dense
from aot.lower.kernels.dense import Operand, dense
from aot.lower.arith.loops import loop, offsets, plus
from aot.lower.rules.elementwise import const_like
from aot.lower.rules import LowerCtx, TensorRef
from aot.lower.schedule.tile_sizes import Tile
from aot.lower.kernels.tiles import over_tiles
from aot.lower.kernels.windows import SpatialOp
from aot.ops import nn as ref

# F(m x m, 3 x 3): (A^T, G, B^T) by output block size m, the interpolation
# points 0, 1, -1 (and 2, -2 for m = 4) and infinity (Lavin and Gray).
MATRICES = {
    2: (np.array([[1, 1, 1, 0],
                  [0, 1, -1, -1]], np.float64),
        np.array([[1, 0, 0],
                  [1 / 2, 1 / 2, 1 / 2],
                  [1 / 2, -1 / 2, 1 / 2],
                  [0, 0, 1]], np.float64),
        np.array([[1, 0, -1, 0],
                  [0, 1, 1, 0],
                  [0, -1, 1, 0],
                  [0, 1, 0, -1]], np.float64)),
    4: (np.array([[1, 1, 1, 1, 1, 0],
                  [0, 1, -1, 2, -2, 0],
                  [0, 1, 1, 4, 4, 0],
                  [0, 1, -1, 8, -8, 1]], np.float64),
        np.array([[1 / 4, 0, 0],
                  [-1 / 6, -1 / 6, -1 / 6],
                  [-1 / 6, 1 / 6, -1 / 6],
                  [1 / 24, 1 / 12, 1 / 6],
                  [1 / 24, -1 / 12, 1 / 6],
                  [0, 0, 1]], np.float64),
        np.array([[4, 0, -5, 0, 1, 0],
                  [0, -4, -4, 1, 1, 0],
                  [0, 4, -4, -1, 1, 0],
                  [0, -2, -1, 2, 1, 0],
                  [0, 2, -1, -2, 1, 0],
                  [0, 4, 0, -5, 0, 1]], np.float64)),
}

# Workspaces: the rows of blocks are dealt out in one contiguous share per
# thread of the package's pool (LowerCtx.threads), each with its own pair of
# workspaces, so that the thread split (aot/lower/tir_passes/parallel.py) runs the
# shares at once (ResNet-8 f32 at --threads 2: 36 KB more arena than one
# share); a one-thread package has one share.

# The schedule's names for the block sizes (strategy.conv_algorithm).
# F(2x2, 3x3)'s transforms are adds and subtracts only (and halves in U);
# F(4x4, 3x3) takes 2.25 multiplies per output instead of 4, for larger
# transforms (coefficients up to 8) and about ten times the rounding error
# (3x3 convs of 16-64 channels, ReLU'd normal inputs: max error against
# float64 2-4e-6 of the largest output, F(2x2) 1.4-4e-7, direct 4-6e-7).
ALGORITHMS = {"winograd_2x2": 2, "winograd_4x4": 4}

# At least this many input and output channels: where it was measured
# (ResNet-8's 16-, 32- and 64-channel convs); a first layer's 3 channels
# would pay the transforms for few multiplies.
MIN_CHANNELS = 16


def transform_weights(w: np.ndarray, m: int, half: bool = False) -> np.ndarray:
    """U = G g G^T for every channel pair: w [3][3][IC][OC] (float) ->
    [(m + 2)^2][IC][OC] in w's type (float32 for halves: U is not rounded to
    half, but for products computed in half, `half`), computed in float64."""
    _, g, _ = MATRICES[m]
    u = np.einsum("ia,abco,jb->ijco", g, w.astype(np.float64), g)
    alpha = m + 2
    kind = np.float32 if w.dtype == np.float16 and not half else w.dtype
    return np.ascontiguousarray(u.reshape(alpha * alpha, *w.shape[2:]).astype(kind))


def reference(x: np.ndarray, w: np.ndarray, m: int) -> np.ndarray:
    """The algorithm in numpy, for the tests: x [H][W][IC] already zero
    padded, w [3][3][IC][OC] -> the valid correlation [H - 2][W - 2][OC]
    (float64), block by block."""
    at, _, bt = MATRICES[m]
    alpha = m + 2
    h, wd = x.shape[0] - 2, x.shape[1] - 2
    bh, bw = -(-h // m), -(-wd // m)
    xp = np.zeros((bh * m + 2, bw * m + 2, x.shape[2]))
    xp[:x.shape[0], :x.shape[1]] = x
    u = transform_weights(w.astype(np.float64), m).reshape(alpha, alpha, *w.shape[2:])
    y = np.zeros((bh * m, bw * m, w.shape[3]))
    for by in range(bh):
        for bx in range(bw):
            d = xp[by * m:by * m + alpha, bx * m:bx * m + alpha]
            v = np.einsum("ir,rsc,js->ijc", bt, d, bt)
            mm = np.einsum("ijc,ijco->ijo", v, u)
            y[by * m:by * m + m, bx * m:bx * m + m] = np.einsum("ia,abo,jb->ijo", at, mm, at)
    return y[:h, :wd]


def applies(xin: SpatialOp, win: ref.Window, group: int, dtype: DType, icg: int,
            ocg: int) -> bool:
    """Whether a convolution fits this kernel: 2-D, channel-last, one
    group, a 3x3 window at stride and dilation 1, float32 or float16 (its
    workspaces and transformed weights float32: aot/lower/tir_passes/float16.py
    keeps computed workspaces in float32), and enough channels on both sides."""
    return (xin.layout == "NHWC" and len(win.kernel) == 2 and group == 1
            and win.kernel == (3, 3) and win.strides == (1, 1) and win.dilations == (1, 1)
            and dtype.scalar in ("float32", "float16") and icg >= MIN_CHANNELS
            and ocg >= MIN_CHANNELS)


# ------------------------------------------------------------------ blocks

@dataclass(frozen=True)
class BlockRun:
    """Consecutive blocks along one axis whose patches have the same
    in-image rows [lo, hi) and which store the same number of outputs."""
    start: int
    count: int
    lo: int
    hi: int
    outputs: int


def block_runs(n_out: int, n_in: int, pad: int, m: int) -> list[BlockRun]:
    """The runs of one spatial axis: block b's patch starts at input
    position b * m - pad and its outputs at b * m."""
    alpha = m + 2
    runs: list[BlockRun] = []
    for b in range(-(-n_out // m)):
        p0 = b * m - pad
        key = (max(0, -p0), min(alpha, n_in - p0), min(m, n_out - b * m))
        if runs and (runs[-1].lo, runs[-1].hi, runs[-1].outputs) == key:
            last = runs[-1]
            runs[-1] = BlockRun(last.start, last.count + 1, *key)
        else:
            runs.append(BlockRun(b, 1, *key))
    return runs


def _channel_chunks(ctx: LowerCtx, total: int, lanes: int,
                    body: Callable[[Expr, int], Stmt]) -> Stmt:
    """body(first channel, width) over `total` channels in vectors of
    `lanes`, then the exact-size remainder (narrower vectors, scalars)."""
    return over_tiles(ctx, total, Tile(lanes, 1), lambda c0, widths: seq(*(
        body(plus(c0, off), w) for off, w in zip(offsets(widths), widths))))


def combine(coeffs: Sequence[float], values: Sequence[Expr | None], dtype: DType) -> Expr | None:
    """sum(c * v) over the nonzero coefficients and the values that are not
    known zeros (None), written as adds and subtracts of the unit terms;
    None when nothing is left."""
    terms = [(float(c), v) for c, v in zip(coeffs, values) if c != 0 and v is not None]
    if not terms:
        return None

    def scaled(c: float, v: Expr) -> Expr:
        return v if c == 1 else Bin("*", v, const_like(c, dtype))
    first = next((i for i, (c, _) in enumerate(terms) if c > 0), 0)
    c, v = terms.pop(first)
    acc = scaled(c, v) if c > 0 else Unary("neg", scaled(-c, v))
    for c, v in terms:
        acc = Bin("+", acc, scaled(c, v)) if c > 0 else Bin("-", acc, scaled(-c, v))
    return acc


def half_combine(coeffs: Sequence[float], values: Sequence[Expr | None],
                 dtype: DType) -> Expr | None:
    """combine's sum for coefficients 0 and +-1, in half arithmetic
    (aot_hadd, aot_hsub: each rounded to half)."""
    terms = [(float(c), v) for c, v in zip(coeffs, values) if c != 0 and v is not None]
    if not terms:
        return None
    first = next((i for i, (c, _) in enumerate(terms) if c > 0), None)
    if first is None:
        acc = half_op(HSUB, const_like(0, dtype), terms.pop(0)[1])
    else:
        acc = terms.pop(first)[1]
    for c, v in terms:
        acc = half_op(HADD if c > 0 else HSUB, acc, v)
    return acc


def _locals(ctx: LowerCtx, base: str, values: list[list[Expr | None]], dtype: DType):
    """Each value a named local (None stays None): (names, declarations)."""
    decls: list[Stmt] = []
    names = []
    for row in values:
        out = []
        for e in row:
            if e is None:
                out.append(None)
                continue
            v = ctx.fresh(base, dtype)
            decls.append(Decl(v, e))
            out.append(v)
        names.append(out)
    return names, decls


def _transform(ctx: LowerCtx, mat: np.ndarray, d: list[list[Expr | None]], dtype: DType,
               rows: int, cols: int, base: str, combine=combine):
    """mat . d . mat^T restricted to `rows` x `cols` results: the column
    pass into locals, then the row pass (expressions)."""
    half = [[combine(mat[i], [d[r][s] for r in range(len(d))], dtype)
             for s in range(len(d[0]))] for i in range(rows)]
    names, decls = _locals(ctx, base, half, dtype)
    return decls, [[combine(mat[j], names[i], dtype) for j in range(cols)] for i in range(rows)]


# ------------------------------------------------------------------ the kernel

def conv(ctx: LowerCtx, emit, x: TensorRef, weights: np.ndarray, bias: TensorRef | None,
         xin: SpatialOp, out: SpatialOp, win: ref.Window, algorithm: str) -> Stmt:
    """The convolution `applies` accepted, weights [3][3][IC][OC], in
    blocks of ALGORITHMS[algorithm] outputs square."""
    m = ALGORITHMS[algorithm]
    at, _, bt = MATRICES[m]
    alpha = m + 2
    freqs = alpha * alpha
    dtype = dt(ctx.out_types[0].dtype)
    ic, oc = weights.shape[2:]
    lanes = ctx.target.lanes(dtype.compute_bits) if xin.vectorizable else 1
    yruns = block_runs(win.out[0], xin.spatial[0], win.pad_begin[0], m)
    xruns = block_runs(win.out[1], xin.spatial[1], win.pad_begin[1], m)
    rows, blocks = sum(r.count for r in yruns), sum(r.count for r in xruns)
    slots = max(1, min(ctx.threads, rows))
    share = -(-rows // slots)
    # the products in half where the target computes in half (half_dense.py;
    # V and U then halves), else in float32 workspaces
    in_half = xin.vectorizable and half_dense.applies(ctx.target, dtype, ic, oc)
    u = ctx.param("w_winograd", transform_weights(weights, m, in_half))  # [f][IC][OC]
    # and the input transform too where its coefficients are +-1 (F(2x2))
    half_in = in_half and bool(np.isin(bt, (-1, 0, 1)).all())
    v_buf = ctx.scratch_buffer("wg_in", dtype, (slots, freqs, blocks, ic))
    m_buf = ctx.scratch_buffer("wg_prod", dtype, (slots, freqs, blocks, oc))

    def pos(block: Expr, offset: int) -> Expr:
        """Position `offset` of a block's patch or outputs along its axis."""
        return plus(mul(block, Const(m)), offset)

    def input_block(n, slot, by, ry: BlockRun, bx, rx: BlockRun) -> Stmt:
        def chunk(c0, w) -> Stmt:
            vt = dtype.with_lanes(w)
            d = [[x.load(xin.index(n, [pos(by, r - win.pad_begin[0]),
                                       pos(bx, s - win.pad_begin[1])], c0), w)
                  if ry.lo <= r < ry.hi and rx.lo <= s < rx.hi else None
                  for s in range(alpha)] for r in range(alpha)]
            decls, v = _transform(ctx, bt, d, vt, alpha, alpha, "t",
                                  half_combine if half_in else combine)
            zero = const_like(0, vt)
            return seq(*decls, *(
                Store(v_buf, flat_index((slot, Const(i * alpha + j), bx, c0), v_buf.shape),
                      zero if v[i][j] is None else v[i][j])
                for i in range(alpha) for j in range(alpha)))
        return _channel_chunks(ctx, ic, half_dense.LANES if half_in else lanes, chunk)

    def output_block(n, slot, by, ry: BlockRun, bx, rx: BlockRun) -> Stmt:
        def chunk(c0, w) -> Stmt:
            vt = dtype.with_lanes(w)
            prods, loads = _locals(ctx, "p", [[
                Load(m_buf, flat_index((slot, Const(i * alpha + j), bx, c0), m_buf.shape), w)
                for j in range(alpha)] for i in range(alpha)], vt)
            decls, y = _transform(ctx, at, prods, vt, ry.outputs, rx.outputs, "s")
            b = None if bias is None else bias.load((c0,), w)
            return seq(*loads, *decls, *(
                emit(0, out.index(n, [pos(by, i), pos(bx, j)], c0),
                     y[i][j] if b is None else Bin("+", y[i][j], b))
                for i in range(ry.outputs) for j in range(rx.outputs)))
        return _channel_chunks(ctx, oc, lanes, chunk)

    def over_row(n, slot, by, body) -> Stmt:
        """body for every block of row `by`, in the code of its y run (the
        runs differ in the patch rows read and the output rows stored)."""
        def of_run(ry: BlockRun) -> Stmt:
            return seq(*(loop(ctx, "bx", rx.count, lambda bx, rx=rx: body(n, slot, by, ry, bx, rx),
                               rx.start) for rx in xruns))
        return _select_run(by, yruns, of_run)

    def products(slot) -> Stmt:
        def operand(buf: Buffer) -> Operand:
            lead = (slot,) if len(buf.shape) == 4 else ()
            return Operand(lambda bi, r, c, w: Load(
                buf, flat_index((*lead, bi[0], r, c), buf.shape), w), True)
        return (half_dense.half_dense if in_half else dense)(ctx, lambda k, idx, value: Store(
            m_buf, flat_index((slot, *idx), m_buf.shape), value),
            operand(v_buf), operand(u), (freqs,), blocks, ic, oc,
            lambda bi, i, j: (bi[0], i, j), lambda acc, bi, i, j: acc)

    def row(n, slot, r) -> Stmt:
        by = ctx.fresh("by")
        body = seq(over_row(n, slot, by, input_block), products(slot),
                   over_row(n, slot, by, output_block))
        if slots * share > rows:            # the last share is shorter
            body = If(Bin("<", by, Const(rows)), body)
        return seq(Decl(by, add(mul(slot, Const(share)), r)), body)

    note = Comment(f"Winograd F({m}x{m}, 3x3): {rows} x {blocks} blocks in {slots} shares of "
                   f"rows, each with its workspace; per row {freqs} products of "
                   f"[{blocks} x {ic}] x [{ic} x {oc}]")
    return seq(note, loop(ctx, "n", xin.batch, lambda n: loop(
        ctx, "slot", slots, lambda slot: loop(ctx, "r", share, lambda r: row(n, slot, r)))))


def _select_run(by: Expr, runs: list[BlockRun], body: Callable[[BlockRun], Stmt]) -> Stmt:
    """body(the run of row `by`): a test per run but the last."""
    stmt = body(runs[-1])
    for run in reversed(runs[:-1]):
        stmt = If(Bin("<", by, Const(run.start + run.count)), body(run), stmt)
    return stmt

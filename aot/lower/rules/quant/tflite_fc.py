"""The TFLite-semantics integer fully connected layer (`tfl.fully_connected`),
bit-exact with aot/ops/quant/tflite_int8.py (TFLITE_INT8.md §6): a dot product
per output, the input zero point folded into the bias (FC never pads), then
the requantization. The schedule (aot/lower/schedule/conv.py:
int8_fc_schedule) picks the kernel: on vector targets the dense product
(aot/lower/kernels/dense.py) with the int8 strategy Int8Product, on Cortex-M
the matrix product of aot/lower/kernels/cortex_m/ (its FC table: the DSP
extension's words or Helium's vectors), else one unit at a time.
tflite_int16.py's 16x8 FC walks its rows with row_loops too.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from aot.isa.calls import lane as lane_of
from aot.isa.calls import pack_quads
from aot.isa.dots import pair_dot
from aot.isa.neon import paired_quad_dot, pairwise_add
from aot.ir.tir import (Assign, Bin, Broadcast, Buffer, Cast, Const, Decl, DType, Expr, Load,
                        Stmt, Store, add, dt, flat_index, mul, seq)
from aot.lower.kernels import cortex_m, riscv
from aot.lower.kernels.cortex_m import dsp as int8_dsp
from aot.lower.arith import qmath as q
from aot.lower.arith.loops import loop, offsets, rows, splat
from aot.lower.kernels.dense import column_panels, product
from aot.lower.kernels.tiles import tile_widths
from aot.lower.arith.quant import (bias_values, const_input, in_block, pair_widths, quad_value,
                                   scale_zp, table, to_i32, unravel, vector_lanes, weight_dtype)
from aot.lower.arith.requant import TfliteRequant, TfliteRequant32, TfliteVecRequant
from aot.lower.rules import LowerCtx, TensorRef, kernel_rule
from aot.lower.schedule.conv import Int8ConvSchedule, int8_fc_schedule
from aot.lower.schedule.tile_sizes import Tile
from aot.lower.schedule.strategy import Accumulator
from aot.ops.quant import qmath as ref_q
from aot.ops.quant import tflite_int8 as ref

def row_reader(x: TensorRef, out_shape, depth: int) -> Callable[[tuple], Callable[[Expr], Expr]]:
    """x_at(out_lead)(d): element d of the row of x that output row
    out_lead (an index of the output's leading dims) reads, x read as
    x.shape[:-1] rows of `depth` (TFLite FC flattens its input to rows of
    the weight depth)."""
    lead = tuple(out_shape[:-1])
    x_shape = tuple(x.shape)

    def at(out_lead):
        row = flat_index(out_lead, lead)
        if x_shape[-1] == depth:
            x_lead = out_lead if x_shape[:-1] == lead else unravel(row, x_shape[:-1])
            return lambda d: x.load(x_lead + (d,))

        def offset(d):
            return add(mul(row, Const(depth)), d)
        if x.in_memory:    # the offset itself
            return lambda d: Load(x.buffer, offset(d))
        return lambda d: x.load(unravel(offset(d), x_shape))
    return at

# The named kernels of every target family (the schedule names one).
FC = {**cortex_m.FC, **riscv.FC}


def row_loops(ctx: LowerCtx, x: TensorRef, out_shape, depth: int,
              body: Callable[[tuple, Callable[[Expr], Expr]], Stmt]) -> Stmt:
    """Loops over the output's leading dims; body(out_lead, x_at) with
    x_at = row_reader's for that row."""
    reader = row_reader(x, out_shape, depth)
    return rows(ctx, out_shape, lambda out_lead: body(out_lead, reader(out_lead)))


@kernel_rule("tfl.fully_connected")
def fully_connected(ctx: LowerCtx, ins, emit):
    x = ins[0]
    w = const_input(ctx, ins[1], "weight").astype(np.int64)
    out_ty = ctx.out_types[0]
    units, depth = w.shape
    s_in, zp_in = scale_zp(ctx, x.type, "the input")
    s_out, zp_out = scale_zp(ctx, out_ty, "the output")
    wq = ins[1].type.quant
    if len(wq.scale) == 1:   # per-tensor kernels subtract the filter zero point
        w = w - int(wq.zero_point[0])
    rq = TfliteRequant.make(ctx, *ref.fc_multipliers(s_in, wq, s_out))
    # FC has no padding: fold the input zero point into the bias
    bias = ref_q.wrap_int32(bias_values(ctx, ins, 2, units) - zp_in * w.sum(axis=1))
    lo, hi = ctx.attrs["act_min"], ctx.attrs["act_max"]
    sched = int8_fc_schedule(ctx.target, w, x.in_memory)
    if sched.algorithm == "vector":
        vrq = TfliteVecRequant.make(ctx, *ref.fc_multipliers(s_in, wq, s_out))

        def requant(b: q.Block, bi: tuple, c: Expr, acc: Expr, lanes: int) -> Stmt:
            r = rq.apply(b, acc, c) if lanes == 1 else vrq.apply(b, acc, c)
            y = q.clamp(q.offset(r, zp_out), lo, hi)
            return emit(0, bi + (c,), Cast(dt(out_ty.dtype, lanes), y))
        fc = Int8Product.make(ctx, sched, w, bias, row_reader(x, out_ty.shape, depth),
                              x.buffer if x.value is None else None, requant,
                              len(out_ty.shape) - 1)
        return product(ctx, fc, tuple(out_ty.shape[:-1]), 1, units)
    if sched.algorithm in FC:
        # on the DSP cores the output zero point in the rounding term, the clamp an SSAT
        dsp = int8_dsp.saturating(ctx.target, out_ty.dtype)
        frq = TfliteRequant32.make(ctx, *ref.fc_multipliers(s_in, wq, s_out),
                                   int8_dsp.acc_bound(w, bias, 0), zp_out if dsp else 0,
                                   merged=dsp, floor_ok=dsp and lo >= zp_out) or rq

        def finish(out_lead, o, acc):
            b = q.Block(ctx)
            y = q.offset(frq.apply(b, acc, o), zp_out - getattr(frq, "zp", 0))
            y = int8_dsp.saturate(y, lo, hi) if dsp else q.clamp(y, lo, hi)
            b.add(emit(0, out_lead + (o,), Cast(dt(out_ty.dtype), y)))
            return b.stmt()
        return FC[sched.algorithm](ctx, x, w, bias, out_ty.shape, finish)
    start = table(ctx, "bias", bias.astype(np.int32))
    weights = ctx.param("weights", weight_dtype(w))

    def row(out_lead, x_at):
        def unit(o):
            b = q.Block(ctx)
            acc = b.let("acc", start(o))
            b.add(loop(ctx, "d", depth, lambda d: Assign(acc, Bin("+", acc, Bin(
                "*", to_i32(x_at(d)),
                to_i32(Load(weights, add(mul(o, Const(depth)), d))))))))
            y = q.clamp(q.offset(rq.apply(b, acc, o), zp_out), lo, hi)
            b.add(emit(0, out_lead + (o,), Cast(dt(out_ty.dtype), y)))
            return b.stmt()
        return loop(ctx, "o", units, unit)
    return row_loops(ctx, x, out_ty.shape, depth, row)


@dataclass(frozen=True)
class Int8Product:
    """The int8 strategy of the dense product (dense.product), one FC row
    (m = 1) per batch index: units across the lanes, int32 accumulators
    from the bias (the input zero point already in it), then the
    requantization in int32 vectors. Depth steps go kind.group at a time
    (aot/lower/schedule/strategy.py): two per aot_dot2 (weights [D/2, U, 2]), or
    four per aot_dot4 (weights [D/4, U, 4]) from the row staged as int32
    quads first (the prologue; whole vectors at a time when it is in
    memory, `x_buffer`); a last odd step or steps and tiles narrower than 4
    lanes take one input at a time (weights [D, U]).

    `by_lane` (the strategy's by_lane: AArch64): four quads per vector
    load, each a lane of it (the A76's SDOT by element; on the A72 each
    pair of lanes broadcast for the paired SMULL quads), and the quad
    weights in column panels, each tile's [D/4, tile width, 4] one
    contiguous stream (at c0 * D), so a step's weights are neighbouring
    loads and the next step's follow them; a row in memory whose depth is
    a multiple of 16 is read where it lies, not staged. ad int8 under qemu
    (instructions per inference, C / LLVM): -cpu cortex-a76 52,784 / 46,900
    -> 35,987 / 35,811, -cpu cortex-a72 99,850 / 98,952 -> 74,921 / 75,906
    (with arm_dot4p's instructions written out in C)."""
    ctx: LowerCtx
    dtype: DType
    tile: Tile
    w: np.ndarray
    kind: Accumulator
    grouped: Buffer | None
    staged: Buffer | None
    x_at: Callable[[tuple], Callable[[Expr], Expr]]
    x_buffer: Buffer | None
    requant: Callable[[q.Block, tuple, Expr, Expr, int], Stmt]
    base_bias: np.ndarray          # the input zero point folded in already
    params: dict = field(default_factory=dict)     # made on first use: weights, biases
    by_lane: bool = False          # quads by lane, the weights in column panels

    @staticmethod
    def make(ctx: LowerCtx, sched: Int8ConvSchedule, w: np.ndarray, bias: np.ndarray, x_at,
             x_buffer, requant, batch_rank: int = 0) -> "Int8Product":
        """The product of int8_fc_schedule's vector tiles (its tile and
        accumulator strategy); `batch_rank`: how many leading indices x_at
        takes."""
        t, kind = sched.tile, sched.accumulator
        steps = w.shape[1] // kind.group
        lead = steps * kind.group
        by_lane = kind.by_lane and steps >= 4
        packed = (quad_panels(kind, w[:, :lead], t) if by_lane
                  else kind.interleave(w[:, :lead])) if steps else None
        grouped = ctx.param("weight_quads" if kind.group == 4 else "weight_pairs",
                            weight_dtype(packed)) if steps else None
        fc = Int8Product(ctx, dt("int32"), t, w, kind, grouped, None, x_at, x_buffer, requant,
                         bias, by_lane=by_lane)
        fc.bias(kind.offset)
        if kind.group == 4 and not (by_lane and lead == w.shape[1] and steps % 4 == 0
                                    and _reads_buffer(x_at((Const(0),) * batch_rank),
                                                      x_buffer)):
            return replace(fc, staged=ctx.scratch_buffer("quad_row", "int32", (steps,)))
        return fc

    @property
    def steps(self) -> int:
        return self.w.shape[1] // self.kind.group

    def bias(self, offset: int) -> Buffer:
        """The bias less offset * the grouped steps' weights (staged quads
        hold x + offset)."""
        if offset not in self.params:
            lead = self.steps * self.kind.group
            self.params[offset] = self.ctx.param("bias", ref_q.wrap_int32(
                self.base_bias - offset * self.w[:, :lead].sum(axis=1)).astype(np.int32))
        return self.params[offset]

    def singles(self) -> Buffer:
        if "singles" not in self.params:
            self.params["singles"] = self.ctx.param(
                "weights", weight_dtype(np.ascontiguousarray(self.w.T)))
        return self.params["singles"]

    def _grouped(self, widths) -> bool:
        return bool(self.steps) and min(widths) >= 4

    def prologue(self, bi: tuple) -> Stmt | None:
        if self.staged is None:
            return None
        return _stage_quads(self.ctx, self.staged, self.x_at(bi), self.x_buffer,
                            self.kind.offset)

    def init(self, bi: tuple, c0: Expr, widths, off: int, width: int) -> Expr:
        offset = self.kind.offset if self._grouped(widths) else 0
        return Load(self.bias(offset), add(c0, Const(off)), width)

    def reduce(self, bi, rows, c0, widths, accs) -> Stmt:
        ctx, kind, x_at = self.ctx, self.kind, self.x_at(bi)
        units, depth = self.w.shape
        steps, group, staged = self.steps, kind.group, self.staged
        lead = steps * group
        offs = offsets(widths)
        (row_accs,) = accs

        def single(d):
            xv = ctx.fresh("xv")
            out = [Decl(xv, to_i32(x_at(d)))]
            out += [Assign(a, Bin("+", a, Bin("*", splat(xv, wd), Cast(dt("int32", wd), Load(
                self.singles(), add(mul(d, Const(units)), add(c0, Const(off))), wd)))))
                    for a, off, wd in zip(row_accs, offs, widths)]
            return seq(*out)

        def w_group(s, off, wd):
            if self.by_lane:     # the tile's panel: [steps, sum(widths), group] from c0 * lead
                return Load(self.grouped, add(mul(c0, Const(lead)), add(
                    mul(s, Const(group * sum(widths))), Const(group * off))), group * wd)
            return Load(self.grouped, flat_index((s, add(c0, Const(off)), Const(0)),
                                                 self.grouped.shape), group * wd)

        def quad_block(cb):
            """Quads 4 cb .. 4 cb + 3 in one vector, each by lane."""
            xq = ctx.fresh("xq", dt("int32", 4))
            body = [Decl(xq, self._quads(x_at, cb))]
            for j in range(4):
                s = add(mul(cb, Const(4)), Const(j))
                body += [Assign(a, kind.dot(a, lane_of(xq, j), w_group(s, off, wd)))
                         for a, off, wd in zip(row_accs, offs, widths)]
            return seq(*body)

        def quad(s):
            xq = ctx.fresh("xq")
            return seq(Decl(xq, Load(staged, s)), *[
                Assign(a, kind.dot(a, xq, w_group(s, off, wd)))
                for a, off, wd in zip(row_accs, offs, widths)])

        def pair(dp):
            x0, x1 = ctx.fresh("xv", dt("int16")), ctx.fresh("xv", dt("int16"))
            out = [Decl(x0, Cast(dt("int16"), x_at(mul(dp, Const(2))))),
                   Decl(x1, Cast(dt("int16"), x_at(add(mul(dp, Const(2)), Const(1)))))]
            out += [Assign(a, Bin("+", a, pair_dot(x0, x1, Cast(dt("int16", 2 * wd),
                                                                 w_group(dp, off, wd)))))
                    for a, off, wd in zip(row_accs, offs, widths)]
            return seq(*out)

        def paired_quads() -> list[Stmt]:
            """Quads two at a time, each lane of the int16 products
            holding two (aot_dot4p_lo / _hi: SMULL, SMLAL, SADALP; the
            weights have no -128) into half sums, ADDP'd into acc."""
            halves = [[ctx.fresh("half", dt("int32", 4)) for _ in "lh"] for _ in row_accs]
            decls = [Decl(h, Broadcast(Const(0), 4)) for hs in halves for h in hs]

            def two(sp, xq=None):
                """Quads 2 sp and 2 sp + 1: loaded, or the given scalars."""
                at = [mul(sp, Const(2)), add(mul(sp, Const(2)), Const(1))]
                body = []
                if xq is None:
                    xq = [ctx.fresh("xq") for _ in at]
                    body = [Decl(v, Load(staged, s)) for v, s in zip(xq, at)]
                for hs, off, wd in zip(halves, offs, widths):
                    wq = [ctx.fresh("wq", dt("int8", 16)) for _ in at]
                    body += [Decl(v, w_group(s, off, wd)) for v, s in zip(wq, at)]
                    body += [Assign(h, paired_quad_dot(h, *xq, *wq, high))
                             for h, high in zip(hs, (False, True))]
                return seq(*body)

            def four(cf):
                """Quads 4 cf .. 4 cf + 3 from one vector load, each
                broadcast from its lane: fewer loads and address updates."""
                xv = ctx.fresh("xq", dt("int32", 4))
                return seq(Decl(xv, self._quads(x_at, cf)), *[
                    two(add(mul(cf, Const(2)), Const(h)), [lane_of(xv, 2 * h + j) for j in (0, 1)])
                    for h in (0, 1)])
            pairs = steps // 2
            body = [loop(ctx, "cf", steps // 4, four)] if steps >= 4 else []
            body += [two(Const(pairs - 1))] if pairs % 2 else []
            tail = [quad(Const(steps - 1))] if steps % 2 else []
            return [*decls, *body, *tail,
                    *[Assign(a, Bin("+", a, pairwise_add(*hs))) for a, hs in zip(row_accs, halves)]]
        if self._grouped(widths) and kind.symmetric and steps >= 2 and set(widths) == {4}:
            code = paired_quads() + [single(Const(d)) for d in range(lead, depth)]
        elif self._grouped(widths) and self.by_lane:
            code = [loop(ctx, "cb", steps // 4, quad_block)]
            code += [quad(Const(s)) for s in range(steps // 4 * 4, steps)]
            code += [single(Const(d)) for d in range(lead, depth)]
        elif self._grouped(widths):
            code = [loop(ctx, "cq" if group == 4 else "dp", steps, quad if group == 4 else pair)]
            code += [single(Const(d)) for d in range(lead, depth)]
        else:
            code = [loop(ctx, "d", depth, single)]
        return seq(*code)

    def store(self, bi, row, c0, off, acc, width) -> Stmt:
        return in_block(self.ctx, lambda b: self.requant(b, bi, add(c0, Const(off)), acc, width))

    def _quads(self, x_at, cb: Expr) -> Expr:
        """Quads 4 cb .. 4 cb + 3 as an int32 vector: from the staged row,
        else the row's 16 bytes where they lie."""
        if self.staged is not None:
            return Load(self.staged, mul(cb, Const(4)), 4)
        at = x_at(mul(cb, Const(16)))
        return pack_quads(Load(at.buffer, at.index, 16))


def _reads_buffer(x_at: Callable[[Expr], Expr], x_buffer: Buffer | None) -> bool:
    """Whether the row reader loads straight from x_buffer."""
    first = x_at(Const(0))
    return x_buffer is not None and isinstance(first, Load) and first.buffer is x_buffer


def quad_panels(kind: Accumulator, w: np.ndarray, t: Tile) -> np.ndarray:
    """Weights [U, D] as column panels of quads (dense.column_panels): per
    tile of tile_widths whose vectors take quads (4+ lanes), its
    [D/4, width, 4]."""
    return column_panels(tile_widths(len(w), t), lambda units, widths:
                         kind.interleave(w[units]) if min(widths) >= 4 else None)


def _stage_quads(ctx: LowerCtx, staged: Buffer, x_at: Callable, x_buffer, offset: int) -> Stmt:
    """An FC row's first 4 len(staged) inputs as int32 quads of their bytes
    + offset: whole vectors when the row is in memory (x_at reads x_buffer),
    else four loads per quad."""
    nq = staged.shape[0]
    if not _reads_buffer(x_at, x_buffer):
        return loop(ctx, "cq", nq, lambda cq: Store(staged, cq, quad_value(
            [x_at(add(mul(cq, Const(4)), Const(j))) for j in range(4)], offset)))
    runs, cq = [], 0
    for count in pair_widths(nq, vector_lanes(ctx), smallest=2):
        if count == 1:
            value = quad_value([x_at(Const(4 * cq + j)) for j in range(4)], offset)
        else:
            at = x_at(Const(4 * cq))
            v = Load(at.buffer, at.index, 4 * count)
            if offset:
                v = Bin("^", v, Broadcast(Const(-128, dt("int8")), 4 * count))
            value = pack_quads(v)
        runs.append(Store(staged, Const(cq), value))
        cq += count
    return seq(*runs)

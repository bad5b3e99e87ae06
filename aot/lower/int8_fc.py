"""The TFLite-semantics integer fully connected layer (`tfl.fully_connected`),
bit-exact with aot/ops/tflite_int8.py (TFLITE_INT8.md §6): a dot product
per output, the input zero point folded into the bias (FC never pads), then
the requantization. Vector targets run it in vector tiles (vector_fc),
Cortex-M with the DSP extension in int8_dsp's, scalar ones one unit at a
time. tflite_int16.py's 16x8 FC walks its rows with row_loops too.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from aot.codegen.intrinsics import pack_quads, pair_dot, paired_quad_dot, pairwise_add
from aot.ir.tir import (Assign, Bin, Broadcast, Buffer, Cast, Const, Decl, Expr, Load, Stmt,
                        Store, add, dt, flat_index, mul, seq)
from aot.lower import int8_dsp
from aot.lower import qmath as q
from aot.lower.builders import loop, nest, offsets, splat
from aot.lower.int8_common import (Requant, VecRequant, bias_values, block_store, const_input,
                                   pair_widths, quad_value, scale_zp, table, to_i32, unravel,
                                   vector_lanes, weight_dtype)
from aot.lower.rules import LowerCtx, TensorRef, kernel_rule
from aot.lower.schedule import tile
from aot.lower.strategy import PAIRS, int8_accumulator
from aot.lower.tiles import over_tiles, register_tile, tile_widths
from aot.ops import qmath as ref_q
from aot.ops import tflite_int8 as ref

def row_loops(ctx: LowerCtx, x: TensorRef, out_shape, depth: int,
              body: Callable[[tuple, Callable[[Expr], Expr]], Stmt]) -> Stmt:
    """Loops over the output's leading dims; body(out_lead, x_at) where x_at(d)
    is element d of that row of x, read as x.shape[:-1] rows of `depth` (TFLite
    FC flattens its input to rows of the weight depth)."""
    lead = tuple(out_shape[:-1])
    x_shape = tuple(x.shape)

    def at(out_lead):
        row = flat_index(out_lead, lead)
        if x_shape[-1] == depth:
            x_lead = out_lead if x_shape[:-1] == lead else unravel(row, x_shape[:-1])
            return body(out_lead, lambda d: x.load(x_lead + (d,)))
        def offset(d):
            return add(mul(row, Const(depth)), d)
        if x.buffer is not None and x.value is None:    # in memory: the offset itself
            return body(out_lead, lambda d: Load(x.buffer, offset(d)))
        return body(out_lead, lambda d: x.load(unravel(offset(d), x_shape)))
    return nest(ctx, tuple(f"r{k}" for k in range(len(lead))), lead, at)


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
    rq = Requant.make(ctx, *ref.fc_multipliers(s_in, wq, s_out))
    # FC has no padding: fold the input zero point into the bias
    bias = ref_q.wrap_int32(bias_values(ctx, ins, 2, units) - zp_in * w.sum(axis=1))
    lo, hi = ctx.attrs["act_min"], ctx.attrs["act_max"]
    if vector_lanes(ctx) > 1 and units >= 4:
        return row_loops(ctx, x, out_ty.shape, depth, vector_fc(
            ctx, w, bias, emit, out_ty, zp_out, lo, hi, rq,
            VecRequant.make(ctx, *ref.fc_multipliers(s_in, wq, s_out)),
            x.buffer if x.value is None else None))
    if int8_dsp.fits_fc(ctx, x, w):
        frq = int8_dsp.Requant32.make(ctx, *ref.fc_multipliers(s_in, wq, s_out),
                                      int8_dsp.acc_bound(w, bias, 0)) or rq

        def finish(out_lead, o, acc):
            b = q.Block(ctx)
            y = q.clamp(q.offset(frq.apply(b, acc, o), zp_out), lo, hi)
            b.add(emit(0, out_lead + (o,), Cast(dt(out_ty.dtype), y)))
            return b.stmt()
        return int8_dsp.fully_connected(ctx, x, w, bias, out_ty.shape, finish)
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


def vector_fc(ctx: LowerCtx, w: np.ndarray, bias: np.ndarray, emit, out_ty, zp_out: int,
              lo: int, hi: int, rq: Requant, vrq: VecRequant, x_buffer=None):
    """The body of one FC row in vector tiles: units across the lanes, the
    input zero point already in `bias`, then the requantization in int32
    vectors (VecRequant). Depth steps go `group` at a time (the accumulator
    strategy's, aot/lower/strategy.py): two per aot_dot2 (weights [D/2, U,
    2]), or four per aot_dot4 (weights [D/4, U, 4]) from the row staged as
    int32 quads first (whole vectors at a time when it is in memory,
    `x_buffer`); a last odd step or steps and tiles narrower than 4 lanes
    take one input at a time (weights [D, U])."""
    units, depth = w.shape
    t = tile(ctx.target, "int32")
    tiles = tile_widths(units, t)
    kind = int8_accumulator(ctx.target)
    if kind.group == 4 and not (kind.fits(w) and any(min(ws) >= 4 for _, ws in tiles)):
        kind = PAIRS
    group = kind.group
    steps = depth // group
    lead = steps * group           # the depth the grouped steps cover
    grouped = ctx.param("weight_quads" if group == 4 else "weight_pairs",
                        weight_dtype(kind.interleave(w[:, :lead]))) if steps else None
    singles = {}

    def single_w():
        if not singles:
            singles["w"] = ctx.param("weights", weight_dtype(np.ascontiguousarray(w.T)))
        return singles["w"]
    biases = {}

    def bias_buf(offset: int) -> Buffer:
        """The bias less offset * the grouped steps' weights (staged quads
        hold x + offset)."""
        if offset not in biases:
            biases[offset] = ctx.param("bias", ref_q.wrap_int32(
                bias - offset * w[:, :lead].sum(axis=1)).astype(np.int32))
        return biases[offset]
    bias_buf(kind.offset)
    staged = ctx.scratch_buffer("quad_row", "int32", (steps,)) if group == 4 else None

    def body(out_lead, x_at) -> Stmt:
        stmts = [] if staged is None else [_stage_quads(ctx, staged, x_at, x_buffer, kind.offset)]

        def tile_code(c0, widths) -> Stmt:
            offs = offsets(widths)
            use = steps and min(widths) >= 4
            rt = register_tile(ctx, dt("int32"), [out_lead], widths, lambda off, wd: Load(
                bias_buf(kind.offset if use else 0), add(c0, Const(off)), wd))
            (accs,) = rt.accs
            code = []

            def single(d):
                xv = ctx.fresh("xv")
                out = [Decl(xv, to_i32(x_at(d)))]
                out += [Assign(a, Bin("+", a, Bin("*", splat(xv, wd), Cast(dt("int32", wd), Load(
                    single_w(), add(mul(d, Const(units)), add(c0, Const(off))), wd)))))
                        for a, off, wd in zip(accs, offs, widths)]
                return seq(*out)

            def w_group(s, off, wd):
                return Load(grouped, flat_index((s, add(c0, Const(off)), Const(0)),
                                                grouped.shape), group * wd)

            def quad(s):
                xq = ctx.fresh("xq")
                return seq(Decl(xq, Load(staged, s)), *[
                    Assign(a, kind.dot(a, xq, w_group(s, off, wd)))
                    for a, off, wd in zip(accs, offs, widths)])

            def pair(dp):
                x0, x1 = ctx.fresh("xv", dt("int16")), ctx.fresh("xv", dt("int16"))
                out = [Decl(x0, Cast(dt("int16"), x_at(mul(dp, Const(2))))),
                       Decl(x1, Cast(dt("int16"), x_at(add(mul(dp, Const(2)), Const(1)))))]
                out += [Assign(a, Bin("+", a, pair_dot(x0, x1, Cast(dt("int16", 2 * wd),
                                                                     w_group(dp, off, wd)))))
                        for a, off, wd in zip(accs, offs, widths)]
                return seq(*out)
            def paired_quads() -> list[Stmt]:
                """Quads two at a time, each lane of the int16 products
                holding two (aot_dot4p_lo / _hi: SMULL, SMLAL, SADALP; the
                weights have no -128) into half sums, ADDP'd into acc."""
                halves = [[ctx.fresh("half", dt("int32", 4)) for _ in "lh"] for _ in accs]
                decls = [Decl(h, Broadcast(Const(0), 4)) for hs in halves for h in hs]

                def two(sp):
                    at = [mul(sp, Const(2)), add(mul(sp, Const(2)), Const(1))]
                    xq = [ctx.fresh("xq") for _ in at]
                    body = [Decl(v, Load(staged, s)) for v, s in zip(xq, at)]
                    for hs, off, wd in zip(halves, offs, widths):
                        wq = [ctx.fresh("wq", dt("int8", 16)) for _ in at]
                        body += [Decl(v, w_group(s, off, wd)) for v, s in zip(wq, at)]
                        body += [Assign(h, paired_quad_dot(h, *xq, *wq, high))
                                 for h, high in zip(hs, (False, True))]
                    return seq(*body)
                tail = [quad(Const(steps - 1))] if steps % 2 else []
                return [*decls, loop(ctx, "cp", steps // 2, two), *tail,
                        *[Assign(a, Bin("+", a, pairwise_add(*hs))) for a, hs in zip(accs, halves)]]
            if use and kind.symmetric and steps >= 2 and set(widths) == {4}:
                code += paired_quads()
                code += [single(Const(d)) for d in range(lead, depth)]
            elif use:
                code.append(loop(ctx, "cq" if group == 4 else "dp", steps,
                                 quad if group == 4 else pair))
                code += [single(Const(d)) for d in range(lead, depth)]
            else:
                code.append(loop(ctx, "d", depth, single))

            def requant(b, lead, k, acc, lanes):
                c = add(c0, Const(k))
                r = rq.apply(b, acc, c) if lanes == 1 else vrq.apply(b, acc, c)
                y = q.clamp(q.offset(r, zp_out), lo, hi)
                return emit(0, lead + (c,), Cast(dt(out_ty.dtype, lanes), y))
            return rt.code(seq(*code), block_store(ctx, requant))

        stmts.append(over_tiles(ctx, units, t, tile_code))
        return seq(*stmts)
    return body


def _stage_quads(ctx: LowerCtx, staged: Buffer, x_at: Callable, x_buffer, offset: int) -> Stmt:
    """An FC row's first 4 len(staged) inputs as int32 quads of their bytes
    + offset: whole vectors when the row is in memory (x_at reads x_buffer),
    else four loads per quad."""
    nq = staged.shape[0]
    first = x_at(Const(0))
    if not (isinstance(first, Load) and first.buffer is x_buffer):
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

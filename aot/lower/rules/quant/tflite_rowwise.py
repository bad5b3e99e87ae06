"""Integer kernels that read a whole row before they write it: softmax,
log-softmax and L2 normalization over the last axis, cumsum along one.

Bit-exact with aot/ops/quant/tflite_int8.py (tflite-micro's kernels). Softmax
makes three passes over each row (max; sum of exps; outputs, the exp
recomputed as TFLM does), each step of the fixed-point exp and reciprocal
(aot/lower/arith/gemmlowp.py) a named local.
"""
from __future__ import annotations

from aot.ir.tir import Assign, Bin, Cast, Const, Expr, Select, Var, dt
from aot.lower.arith import qmath as q
from aot.lower.arith.requant import mbqm
from aot.lower.arith.loops import loop, nest, rows
from aot.lower.arith.quant import scale_zp, to_i32
from aot.lower.arith.gemmlowp import (count_leading_zeros, exp_on_negative_values, inv_sqrt_block,
                                      log_x_ge_1_block, one_over_one_plus_x)
from aot.lower.rules import LowerCtx, TensorRef, kernel_rule
from aot.ops.quant import qmath as ref_q
from aot.ops.quant import tflite_int8 as ref


def row_max(ctx: LowerCtx, b: q.Block, x: TensorRef, lead: tuple, depth: int,
            lowest: int = -128) -> Var:
    """The largest value of x[lead + (i,)] over the last axis, as int32, from
    `lowest` (softmax and log-softmax both start from it)."""
    mx = b.let("max", Const(lowest))
    b.add(loop(ctx, "i", depth, lambda i: Assign(mx, Bin("max", mx, to_i32(
        x.load(lead + (i,)))))))
    return mx


@kernel_rule("tfl.softmax")
def softmax(ctx: LowerCtx, ins, emit):
    x = ins[0]
    s_in, _ = scale_zp(ctx, x.type, "the input")
    s_out, zp_out = scale_zp(ctx, ctx.out_types[0], "the output")
    if zp_out != -128 or s_out != 1.0 / 256:
        raise ctx.unsupported(f"int8 softmax with output scale {s_out}, zero point {zp_out}")
    mult, left, diff_min = ref.softmax_params(float(ctx.attrs.get("beta", 1.0)), s_in)
    if left > 30:
        raise ctx.unsupported(f"softmax input scaling with left shift {left}")
    shape = x.shape
    depth = shape[-1]

    def exp_of(b: q.Block, lead, i, mx) -> tuple[Expr, Var]:
        """(active, exp(x_i - max)) for element i of the row."""
        d = b.let("diff", Bin("-", to_i32(x.load(lead + (i,))), mx))
        active = Bin(">=", d, Const(diff_min))
        # in Q5.26; inactive entries (far below the max) are masked out later
        z = b.let("z", q.srdhm(Select(active, Bin("*", d, Const(1 << left)), Const(0)), mult))
        return active, exp_on_negative_values(b, z)

    def row(lead):
        b = q.Block(ctx)
        mx = row_max(ctx, b, x, lead, depth)
        total = b.let("sum", Const(0))

        def accumulate(i):
            eb = q.Block(ctx)
            active, e = exp_of(eb, lead, i, mx)
            eb.add(Assign(total, Bin("+", total, Select(active, q.rdbpot(e, 12), Const(0)))))
            return eb.stmt()
        b.add(loop(ctx, "i", depth, accumulate))
        clz, normalized = count_leading_zeros(b, total)
        t = q.i32(Bin("-", normalized, Const(1 << 31, dt("int64"))))
        inverse = one_over_one_plus_x(b, t)
        shift = b.let("out_shift", Bin("-", Const(35), clz))   # (12 - clz) + 23

        def output(i):
            ob = q.Block(ctx)
            active, e = exp_of(ob, lead, i, mx)
            y = Bin("-", q.rdbpot(q.srdhm(inverse, e, saturate=False), shift), Const(128))
            y = Select(active, q.clamp(y, -128, 127), Const(-128))
            ob.add(emit(0, lead + (i,), Cast(dt("int8"), y)))
            return ob.stmt()
        b.add(loop(ctx, "i", depth, output))
        return b.stmt()
    return rows(ctx, shape, row)


@kernel_rule("tfl.l2_normalization")
def l2_normalization(ctx: LowerCtx, ins, emit):
    x = ins[0]
    _, zp = scale_zp(ctx, x.type, "the input")
    shape = x.shape
    depth = shape[-1]
    if depth * 255 * 255 >= 1 << 31:
        raise ctx.unsupported(f"int8 L2 normalization over {depth} values (its int32 sum of "
                              "squares would overflow)")

    def row(lead):
        b = q.Block(ctx)
        acc = b.let("sum_of_squares", Const(0))

        def square(i):
            d = q.offset(to_i32(x.load(lead + (i,))), -zp)
            return Assign(acc, Bin("+", acc, Bin("*", d, d)))
        b.add(loop(ctx, "i", depth, square))
        mult, exp = inv_sqrt_block(b, acc)
        total = b.let("out_shift", Bin("+", exp, Const(7)))
        left = b.let("left", Bin("max", total, Const(0)))
        right = b.let("right", Bin("max", Bin("-", Const(0), total), Const(0)))

        def output(i):
            d = q.offset(to_i32(x.load(lead + (i,))), -zp)
            y = q.clamp(mbqm(d, mult, left=left, right=right), -128, 127)
            return emit(0, lead + (i,), Cast(dt("int8"), y))
        b.add(loop(ctx, "i", depth, output))
        return b.stmt()
    return rows(ctx, shape, row)


@kernel_rule("tfl.cumsum")
def cumsum(ctx: LowerCtx, ins, emit):
    x = ins[0]
    s_in, zp_in = scale_zp(ctx, x.type, "the input")
    s_out, zp_out = scale_zp(ctx, ctx.out_types[0], "the output")
    (mi, ei), (mo, eo) = ref.add_n_params(s_in, s_out, ctx.node)
    a = ctx.attrs
    axis, shape = a["axis"], x.shape
    n = shape[axis]
    others = [d for d in range(len(shape)) if d != axis]

    def scaled(v):
        return q.rdbpot(q.srdhm(Bin("*", v, Const(1 << ref.ADD_N_SHIFT)), mi), -ei)

    def line(outer):
        b = q.Block(ctx)
        acc = b.let("running", scaled(Const(-zp_in)))

        def step(i):
            pos = Bin("-", Const(n - 1), i) if a["reverse"] else i
            full = list(outer)
            full.insert(axis, pos)
            full = tuple(full)
            sb = q.Block(ctx)
            add = Assign(acc, Bin("+", acc, scaled(q.offset(to_i32(x.load(full)), -zp_in))))
            y = q.clamp(q.offset(q.rdbpot(q.srdhm(acc, mo), -eo), zp_out), -128, 127)
            out = emit(0, full, Cast(dt("int8"), y))
            sb.add(*((out, add) if a["exclusive"] else (add, out)))
            return sb.stmt()
        b.add(loop(ctx, "i", n, step))
        return b.stmt()
    return nest(ctx, tuple(f"o{k}" for k in range(len(others))), [shape[d] for d in others],
                line)


@kernel_rule("tfl.log_softmax")
def log_softmax(ctx: LowerCtx, ins, emit):
    x = ins[0]
    s_in, _ = scale_zp(ctx, x.type, "the input")
    mult, left, diff_min, rdiv, rshift = ref.log_softmax_params(s_in)
    shape = x.shape
    depth = shape[-1]

    def scaled_diff(b: q.Block, lead, i, mx) -> tuple[Var, Var]:
        d = b.let("diff", Bin("-", to_i32(x.load(lead + (i,))), mx))
        return d, b.let("q5", mbqm(d, mult, left))

    def row(lead):
        b = q.Block(ctx)
        mx = row_max(ctx, b, x, lead, depth)
        total = b.let("sum", Const(0))

        def accumulate(i):
            eb = q.Block(ctx)
            d, q5 = scaled_diff(eb, lead, i, mx)
            e = exp_on_negative_values(eb, q5)
            eb.add(Assign(total, Bin("+", total, Select(Bin(">=", d, Const(diff_min)),
                                                        q.rdbpot(e, 12), Const(0)))))
            return eb.stmt()
        b.add(loop(ctx, "i", depth, accumulate))
        lg = log_x_ge_1_block(b, total)
        shifted = Bin("-", Bin("-", lg, Const(ref_q.INT32_MAX)), Const(1))   # lg + INT32_MIN
        adjusted = b.let("adjusted_diff_min", Bin("max", Const(diff_min - 1),
                                                   mbqm(shifted, rdiv, rshift)))

        def output(i):
            ob = q.Block(ctx)
            d, q5 = scaled_diff(ob, lead, i, mx)
            y = q.clamp(q.offset(q.rdbpot(Bin("-", q5, lg), 22), 127), -128, 127)
            y = Select(Bin(">", d, adjusted), y, Const(-128))
            ob.add(emit(0, lead + (i,), Cast(dt("int8"), y)))
            return ob.stmt()
        b.add(loop(ctx, "i", depth, output))
        return b.stmt()
    return rows(ctx, shape, row)

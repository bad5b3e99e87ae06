"""Value rules for aot/ops/movement.py: each output element is one input
element (at an index computed here) or a constant."""
from __future__ import annotations

from aot.ir.tir import Bin, Cast, Select, add, const, dt, dtype_of, sub
from aot.lower.rules.elementwise import cast, const_like, select
from aot.lower.rules import LowerCtx, value_rule
from aot.ops.movement import crop_offsets, eye_dtype, sequence_axes, trilu_k
from aot.ops.registry import Sig


def _constant_input(ctx: LowerCtx, ins, i: int, what: str):
    """The inputs' compile-time values (None where unknown); input i, when
    present, must be one of them."""
    if i < len(ins) and ins[i] is not None and ins[i].value is None:
        raise ctx.unsupported(f"{ctx.node.op} with {what} computed at run time")
    return [r.value if r is not None else None for r in ins]


def _diagonal_test(op: str, row, col, k: int):
    """col - row against k, as an int32 comparison."""
    return Bin(op, sub(col, row), const(k))


@value_rule("Trilu")
def _trilu(ctx: LowerCtx, ins, idx, lanes):
    k = trilu_k(_constant_input(ctx, ins, 1, "k"))
    row, col = idx[-2], idx[-1]
    keep = _diagonal_test(">=" if ctx.attrs.get("upper", 1) else "<=", row, col, k)
    if lanes > 1:
        raise ctx.unsupported(f"a {lanes}-lane vector of Trilu (the mask varies along it)")
    x = ins[0].load(tuple(idx), 1)
    return Select(keep, x, const_like(0, x))


@value_rule("EyeLike")
def _eye_like(ctx: LowerCtx, ins, idx, lanes):
    if lanes > 1:
        raise ctx.unsupported(f"a {lanes}-lane vector of EyeLike")
    d = dt(eye_dtype(ctx))
    on = _diagonal_test("==", idx[0], idx[1], int(ctx.attrs.get("k", 0)))
    return cast(on, d)


@value_rule("ReverseSequence")
def _reverse_sequence(ctx: LowerCtx, ins, idx, lanes):
    x, lens = ins
    batch, time = sequence_axes(ctx)
    if lanes > 1 and len(x.shape) == 2:
        raise ctx.unsupported(f"a {lanes}-lane vector of ReverseSequence on a 2-D tensor")
    steps = x.shape[time]
    # clamped into [0, steps]: a run-time length beyond it must not read outside x
    n = Cast(dt("int32"), Bin("min", Bin("max", lens.load((idx[batch],), 1),
                                         const(0, "int64")), const(steps, "int64")))
    t = idx[time]
    at = list(idx)
    at[time] = Select(Bin("<", t, n), sub(sub(n, const(1)), t), t)
    return x.load(tuple(at), lanes)


@value_rule("CenterCropPad")
def _center_crop_pad(ctx: LowerCtx, ins, idx, lanes):
    x = ins[0]
    values = _constant_input(ctx, ins, 1, "the shape")
    shape, offset = crop_offsets(Sig(ctx.node, ctx.in_types, tuple(values)))
    if lanes > 1 and shape[-1] > x.shape[-1]:
        raise ctx.unsupported(f"a {lanes}-lane vector of CenterCropPad padding the last axis")
    at, inside = [], None
    for i, o, d, n in zip(idx, offset, shape, x.shape):
        src = add(i, const(o)) if o else i
        if d <= n:
            at.append(src)
            continue
        # padded: positions outside [0, n) are zeros (and read in bounds)
        at.append(Bin("min", Bin("max", src, const(0)), const(n - 1)))
        ok = Bin("and", Bin(">=", src, const(0)), Bin("<", src, const(n)))
        inside = ok if inside is None else Bin("and", inside, ok)
    value = x.load(tuple(at), lanes)
    return value if inside is None else select(inside, value, const_like(0, value))


@value_rule("BitCast")
def _bitcast(ctx: LowerCtx, ins, idx, lanes):
    x = ins[0].load(tuple(idx), lanes)
    to = dt(ctx.out_types[0].dtype, dtype_of(x).lanes)
    # Same width (type inference checks it). A half's bits stay:
    # aot/lower/tir_passes/float16.py reads a reinterpreted half from memory as it is,
    # not widened. Both integers (or bool -> uint8): C's conversion keeps
    # the bits too.
    return Cast(to, x, bits=dtype_of(x).is_float or to.is_float)

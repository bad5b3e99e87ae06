"""Compute rule for the int8 table kernels (`aot/ops/quant/tflite_lut.py`).

A kernel rule with a scalar loop: a vector of table loads would be a gather,
which the code generators do not emit.
"""
from __future__ import annotations

from aot.ir.tir import Bin, Cast, Const, Load, dt
from aot.lower.arith.loops import nest
from aot.lower.arith.quant import to_i32
from aot.lower.rules import LowerCtx, kernel_rule
from aot.ops.quant.tflite_int8 import INT8_TABLES
from aot.ops.quant.tflite_lut import table_for


@kernel_rule("tfl.logistic", *INT8_TABLES)
def lut(ctx: LowerCtx, ins, emit):
    x = ins[0]
    values = table_for(ctx.node, x.type, ctx.out_types[0])
    buf = ctx.param("lut", values)
    shape = ctx.out_types[0].shape

    def at(idx):
        return emit(0, idx, Cast(dt("int8"), Load(buf, Bin("+", to_i32(x.load(idx)), Const(128)))))
    return nest(ctx, tuple(f"i{d}" for d in range(len(shape))), shape, at)

"""int8 TFLite kernels that are a function of one int8 value: a 256-entry table.

tflite-micro computes int8 LOGISTIC in gemmlowp fixed point (the input
rescaled to Q4.27, exp on negative values, 1/(1+x)); as its input has 256
values, the exact result of that arithmetic for each of them is a table built
at compile time, and the kernel is one load per element (reference and
lowering read the same table).
"""
from __future__ import annotations

import numpy as np

from aot.errors import UnsupportedError, node_label
from aot.ir.graph import TensorType
from aot.ops.quant import qmath
from aot.ops.registry import Call, Pattern, Sig, register
from aot.ops.quant.tflite_int8 import INT8_TABLES, scale_zp, one_over_one_plus_x

_INPUT_INT_BITS = 4  # TFLM's logistic rescales its input to Q4.27
# gemmlowp's barrel shifter: exp(-2**e) in Q0.31 for e = -2 .. 4
def logistic_table(s_in: float, zp_in: int) -> np.ndarray:
    """TFLM's int8 logistic (reference_integer_ops::Logistic) for every int8 input."""
    real = s_in * float(1 << (31 - _INPUT_INT_BITS))
    q, shift = np.frexp(real)
    mult = int(np.round(q * (1 << 31)))
    radius = int(np.floor(((1 << _INPUT_INT_BITS) - 1) * float(1 << (31 - _INPUT_INT_BITS))
                          / float(2.0 ** int(shift))))
    x = np.arange(-128, 128, dtype=np.int64) - zp_in
    a = qmath.mbqm(x, mult, int(shift))
    pos = a > 0
    mag = np.where(pos, a, -a)
    r_pos = one_over_one_plus_x(qmath.exp_on_negative_values(-mag, _INPUT_INT_BITS))
    r = np.where(a == 0, 1 << 30, np.where(pos, r_pos, qmath.INT32_MAX - r_pos))
    y = np.clip(qmath.rdbpot(r, 31 - 8) - 128, -128, 127)
    y = np.where(x <= -radius, -128, np.where(x >= radius, 127, y))
    return y.astype(np.int8)


def _logistic_check(node, in_ty: TensorType, out_ty: TensorType) -> tuple[float, int]:
    s_in, zp_in = scale_zp(in_ty, "the input", node)
    s_out, zp_out = scale_zp(out_ty, "the output", node)
    if zp_out != -128 or s_out != 1.0 / 256:
        raise UnsupportedError(f"{node_label(node)}: int8 logistic output must have "
                               f"scale 1/256 and zero point -128, got {s_out}, {zp_out}")
    return s_in, zp_in


def table_for(node, in_ty: TensorType, out_ty: TensorType) -> np.ndarray:
    """The op's 256 outputs, indexed by input + 128 (shared with the lowering)."""
    if node.op == "tfl.logistic":
        return logistic_table(*_logistic_check(node, in_ty, out_ty))
    if node.op in INT8_TABLES:
        return INT8_TABLES[node.op](node, in_ty, out_ty)
    raise UnsupportedError(f"{node_label(node)}: no int8 table for {node.op}")


def _infer(sig: Sig):
    x = sig.in_types[0]
    if x.dtype != "int8":
        raise UnsupportedError(f"{node_label(sig.node)}: {x.dtype} input "
                               "(the table kernels take int8)")
    return [TensorType(x.shape, "int8")]


@register("tfl.logistic", infer=_infer, pattern=Pattern.OPAQUE)
def logistic(call: Call, args):
    t = table_for(call.node, call.in_types[0], call.out_types[0])
    return [t[args[0].astype(np.int64) + 128]]

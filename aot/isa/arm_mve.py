"""Helium (the M-profile Vector Extension, MVE) int8 operations, as TIR calls.

    aot_dot16(acc, a, b)   (int32, int8 x 16, int8 x 16) -> int32:
                           acc + the sum of the 16 products a[i] * b[i],
                           wrapping as the instruction does
    aot_widen4(v)          int8 x 4 -> int32 x 4: each lane sign-extended
    aot_lanes4(a, b, c, d) int32 x 4 of four int32 (two VMOV Q[2], Q[0]):
                           a tile's 4 scalar accumulators as one vector for
                           the vector requantization

aot_dot16 is sixteen int8 multiply-accumulates into one scalar register:
the inner step of a convolution or fully connected layer whose input
channels lie along the vector (one output channel and pixel per
accumulator). aot_widen4 of a load is VLDRB.S32, four int8 read into int32
lanes: a depthwise convolution's 4 channels, multiplied and added as
int32 x 4 vectors (VMUL, VADD).

Generic, it is its lane formula (any target computes it; the host tests use
it). On Arm targets with the "mve" ISA feature the legalization pass
(aot/lower/tir_passes/legalize.py) makes them `arm_vmladava` and `arm_vldrb_s32`: in
C the ACLE intrinsics `vmladavaq_s8` and `vldrbq_s32` (given the load's
address) from <arm_mve.h> under `__ARM_FEATURE_MVE` (the formula
otherwise: the user's compiler may not be told the core); in LLVM
`llvm.arm.mve.vmldava`, and a sign extension the backend folds into the
load. The generic aot_dot16 in LLVM is the widening multiply and the add
reduction.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from aot.isa.arm_dsp import ARCHS, check_operands
from aot.isa.instruction import Instruction
from aot.isa.neon import MVE_RDBPOT, MVE_VQRDMULH
from aot.ir.tir import INT32, Call, DType, Expr, Load

INT8X16 = DType("int8", 16)
INT8X4 = DType("int8", 4)
INT32X4 = DType("int32", 4)


@dataclass(frozen=True)
class MveOp:
    """One of the operations above (`kind` "dot16", "widen4" or "lanes4"),
    or with `instruction` its Arm instruction (legalized)."""
    name: str
    kind: str
    instruction: bool = False

    @property
    def operands(self) -> tuple[DType, ...]:
        if self.kind == "lanes4":
            return (INT32,) * 4
        return (INT32, INT8X16, INT8X16) if self.kind == "dot16" else (INT8X4,)

    @property
    def result(self) -> DType:
        return INT32 if self.kind == "dot16" else INT32X4


DOT16 = MveOp("aot_dot16", "dot16")
ARM_VMLADAVA = MveOp("arm_vmladava", "dot16", instruction=True)
WIDEN4 = MveOp("aot_widen4", "widen4")
ARM_VLDRB_S32 = MveOp("arm_vldrb_s32", "widen4", instruction=True)
LANES4 = MveOp("aot_lanes4", "lanes4")
MVE_OPS: dict[str, MveOp] = {o.name: o for o in (DOT16, ARM_VMLADAVA, WIDEN4, ARM_VLDRB_S32,
                                                 LANES4)}


def dot16(acc: Expr, a: Expr, b: Expr) -> Call:
    """aot_dot16: acc plus the 16 products of a's and b's int8 lanes."""
    return Call(DOT16.name, (acc, a, b), INT32)


def widen4(v: Expr) -> Call:
    """aot_widen4: an int8 x 4 vector's lanes as int32 x 4."""
    return Call(WIDEN4.name, (v,), INT32X4)


def lanes4(*values: Expr) -> Call:
    """aot_lanes4: four int32 as the lanes of an int32 x 4."""
    return Call(LANES4.name, tuple(values), INT32X4)


def check_mve(fn: str, args: tuple[Expr, ...], dtype: DType) -> MveOp:
    op = MVE_OPS[fn]
    return check_operands(op, args, dtype, op.result)


_MVE1, _MVE4 = ((1, ("mve",)),), ((4, ("mve",)),)

# Helium (Cortex-M55): one VMLADAVA.S8 per 16 int8 products into a scalar;
# its fixed-point instructions are NEON's (neon.py).
ROWS: tuple[Instruction, ...] = (
    Instruction(DOT16.name, ARM_VMLADAVA.name, ARCHS, _MVE1),
    Instruction(WIDEN4.name, ARM_VLDRB_S32.name, ARCHS, _MVE4),
    Instruction(MVE_VQRDMULH.generic, MVE_VQRDMULH.name, ARCHS, _MVE4,
                little_endian=True, only="int32"),
    Instruction(MVE_RDBPOT.generic, MVE_RDBPOT.name, ARCHS, _MVE4,
                little_endian=True, only="int32"),
)


def _include(mod) -> None:
    mod.helper("aot_arm_mve",
               lambda: "#if defined(__ARM_FEATURE_MVE)\n#include <arm_mve.h>\n#endif")


def c_call(printer, op: MveOp, args: tuple[Expr, ...]):
    """The C text of a call of op (c.py's _Printer: its module, names and
    expressions): VLDRB.S32 is given the address of the load it widens."""
    mod = printer.mod
    if op.kind == "widen4" and op.instruction and isinstance(args[0], Load):
        load = args[0]
        at = f"&{printer.names[load.buffer]}[{printer.expr(load.index)}]"
        return f"{_c_widen_at(mod, c_helper(mod, WIDEN4))}({at})"
    return f"{c_helper(mod, op)}({', '.join(printer.expr(a) for a in args)})"


def _c_widen_at(mod, generic: str) -> str:
    t, v = mod.vector(INT32X4), mod.vector(INT8X4)
    _include(mod)
    name = "arm_vldrb_s32_at"
    return mod.helper(name, lambda: (
        "/* VLDRB.S32: four int8 at p as int32 lanes */\n"
        f"static inline {t} {name}(const int8_t *p)\n{{\n"
        f"#if defined(__ARM_FEATURE_MVE)\n    return ({t})vldrbq_s32(p);\n#else\n"
        f"    {v} v;\n    memcpy(&v, p, sizeof v);\n    return {generic}(v);\n#endif\n}}"))


def c_helper(mod, op: MveOp) -> str:
    """Define op's C function in the module (c.py's _Module) and name it."""
    if op.kind == "lanes4":
        t = mod.vector(INT32X4)
        return mod.helper(op.name, lambda: (
            f"static inline {t} {op.name}(int32_t a, int32_t b, int32_t c, int32_t d)\n{{\n"
            f"    {t} v = {{a, b, c, d}};\n    return v;\n}}"))
    if op.kind == "widen4":
        # the formula; the instruction on a value that is not a load is that too
        t, v = mod.vector(INT32X4), mod.vector(INT8X4)
        return mod.helper(WIDEN4.name, lambda: (
            f"static inline {t} {WIDEN4.name}({v} v)\n{{\n"
            f"    return __builtin_convertvector(v, {t});\n}}"))
    t = mod.vector(INT8X16)
    params = f"int32_t acc, {t} a, {t} b"
    if not op.instruction:
        return mod.helper(op.name, lambda: (
            "/* acc + the 16 products of a's and b's lanes, wrapping as VMLADAVA does */\n"
            f"static inline int32_t {op.name}({params})\n{{\n"
            "    uint32_t sum = (uint32_t)acc;\n"
            "    for (int i = 0; i < 16; ++i) {\n"
            "        sum += (uint32_t)((int32_t)a[i] * b[i]);\n    }\n"
            "    return (int32_t)sum;\n}"))
    generic = c_helper(mod, DOT16)
    _include(mod)
    return mod.helper(op.name, lambda: (
        "/* VMLADAVA.S8: acc + the 16 products of a's and b's lanes */\n"
        f"static inline int32_t {op.name}({params})\n{{\n"
        "#if defined(__ARM_FEATURE_MVE)\n"
        "    return vmladavaq_s8(acc, (int8x16_t)a, (int8x16_t)b);\n"
        f"#else\n    return {generic}(acc, a, b);\n#endif\n}}"))


def llvm_emit(b: ir.IRBuilder, module: ir.Module, op: MveOp, args: list) -> ir.Value:
    """arm_vmladava: llvm.arm.mve.vmldava (signed, adding, not exchanged);
    aot_dot16: acc + reduce_add(sext(a) * sext(b)), which the Arm backend
    computes in widened 32-bit lanes (it folds the sign extensions into the
    loads before it could match VMLADAVA.S8)."""
    i32 = ir.IntType(32)
    if op.kind == "lanes4":
        v = ir.Constant(ir.VectorType(i32, 4), ir.Undefined)
        for k, a in enumerate(args):
            v = b.insert_element(v, a, ir.Constant(i32, k))
        return v
    if op.kind == "widen4":
        return b.sext(args[0], ir.VectorType(i32, 4))
    acc, x, w = args
    if op.instruction:
        v8 = ir.VectorType(ir.IntType(8), 16)
        name = "llvm.arm.mve.vmldava.v16i8"
        fn = module.globals.get(name) or ir.Function(
            module, ir.FunctionType(i32, [i32] * 4 + [v8, v8]), name)
        zero = ir.Constant(i32, 0)
        return b.call(fn, [zero, zero, zero, acc, x, w])
    v32 = ir.VectorType(ir.IntType(32), 16)
    products = b.mul(b.sext(x, v32), b.sext(w, v32))
    name = "llvm.vector.reduce.add.v16i32"
    reduce = module.globals.get(name) or ir.Function(
        module, ir.FunctionType(ir.IntType(32), [v32]), name)
    return b.add(acc, b.call(reduce, [products]))


__all__ = ["ARM_VLDRB_S32", "ARM_VMLADAVA", "DOT16", "INT32X4", "INT8X16", "INT8X4", "LANES4",
           "MVE_OPS", "MveOp", "ROWS", "WIDEN4", "c_call", "c_helper", "check_mve", "dot16",
           "lanes4", "llvm_emit", "widen4"]

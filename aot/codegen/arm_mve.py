"""Helium (the M-profile Vector Extension, MVE) int8 dot product, as a TIR call.

    aot_dot16(acc, a, b)   (int32, int8 x 16, int8 x 16) -> int32:
                           acc + the sum of the 16 products a[i] * b[i],
                           wrapping as the instruction does

Sixteen int8 multiply-accumulates into one scalar register: the inner step
of a convolution or fully connected layer whose input channels lie along
the vector (one output channel and pixel per accumulator).

Generic, it is its lane formula (any target computes it; the host tests use
it). On Arm targets with the "mve" ISA feature the legalization pass
(aot/lower/legalize.py) makes it `arm_vmladava`: in C the ACLE intrinsic
`vmladavaq_s8` from <arm_mve.h> under `__ARM_FEATURE_MVE` (the formula
otherwise: the user's compiler may not be told the core); in LLVM
`llvm.arm.mve.vmldava`. The generic form in LLVM is the widening multiply
and the add reduction.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from aot.codegen.arm_dsp import check_operands
from aot.ir.tir import INT32, Call, DType, Expr

INT8X16 = DType("int8", 16)


@dataclass(frozen=True)
class MveOp:
    """aot_dot16, or with `instruction` its Arm instruction (legalized)."""
    name: str
    instruction: bool = False

    @property
    def operands(self) -> tuple[DType, ...]:
        return (INT32, INT8X16, INT8X16)


DOT16 = MveOp("aot_dot16")
ARM_VMLADAVA = MveOp("arm_vmladava", instruction=True)
MVE_OPS: dict[str, MveOp] = {o.name: o for o in (DOT16, ARM_VMLADAVA)}


def dot16(acc: Expr, a: Expr, b: Expr) -> Call:
    """aot_dot16: acc plus the 16 products of a's and b's int8 lanes."""
    return Call(DOT16.name, (acc, a, b), INT32)


def check_mve(fn: str, args: tuple[Expr, ...], dtype: DType) -> MveOp:
    return check_operands(MVE_OPS[fn], args, dtype)


def c_helper(mod, op: MveOp) -> str:
    """Define op's C function in the module (c.py's _Module) and name it."""
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
    mod.helper("aot_arm_mve",
               lambda: "#if defined(__ARM_FEATURE_MVE)\n#include <arm_mve.h>\n#endif")
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
    acc, x, w = args
    i32 = ir.IntType(32)
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


__all__ = ["ARM_VMLADAVA", "DOT16", "INT8X16", "MVE_OPS", "MveOp", "c_helper", "check_mve",
           "dot16", "llvm_emit"]

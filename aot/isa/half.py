"""The half-precision conversion instructions: x86's F16C (vcvtph2ps,
vcvtps2ph; 16 lanes with AVX-512F) and AArch64's FCVT / FCVTL / FCVTN
(every AArch64 core has them).

The float16 pass (aot/lower/tir_passes/float16.py) leaves two conversions,
half to float32 at each load and float32 to half at each store. Where the
target has these instructions the legalization pass marks the function with
HALF_CONVERSIONS, and the code generators convert with them: in C
F16C's intrinsics or AArch64's `_Float16` under `#if` on the macro that
says the compiler was given the ISA, the portable integer arithmetic in the
`#else` (docs/package.md, "In a firmware project"); in LLVM `fpext` /
`fptrunc` of `half`, which instruction selection makes those instructions.
Elsewhere both print the integer arithmetic alone (no `__extendhfsf2`
calls on soft-float cores).

The instructions round to nearest even (the default rounding mode) as the
integer arithmetic does, and give the same bits for every half and every
float32 but NaNs: F16C and FCVT quiet a signalling NaN (the payload kept),
which the integer half-to-float conversion leaves signalling.

Half arithmetic (Armv8.2-A FP16, the target feature `fp16`: the Cortex-A76,
A78, Neoverse N1; not the A72 or A53) is three calls on float16 x 8,
rounded once to half: `aot_hfma(acc, a, b)` acc + a * b (FMLA on 8 half
lanes, twice float32's), `aot_hadd` and `aot_hsub` (HalfOp). The float16
pass leaves their operands and the locals they compute in half; a kernel
asks for them only where the target has them (has_half_arithmetic).
"""
from __future__ import annotations

from dataclasses import dataclass

from aot.errors import UnsupportedError
from aot.ir.tir import Call, DType, Expr, dtype_of
from aot.targets import Target

ARCHS_X86 = ("x86_64", "x86")

# A PrimFunc attribute the legalization pass sets where the target converts
# halves in hardware; the code generators read it.
HALF_CONVERSIONS = "half_conversion_instructions"


def has_half_conversions(target: Target) -> bool:
    """Whether the target converts halves in hardware (F16C, AArch64)."""
    return target.arch == "aarch64" or (target.arch in ARCHS_X86 and target.has("f16c"))


def has_half_arithmetic(target: Target) -> bool:
    """Whether the target computes in half: AArch64 with FP16 (FMLA .8h)."""
    return target.arch == "aarch64" and target.has("fp16")


@dataclass(frozen=True)
class HalfOp:
    """A half arithmetic call on float16 x 8 vectors, rounded once to half:
    `aot_hfma(acc, a, b)` acc + a * b (FMLA), `aot_hadd(a, b)` (FADD),
    `aot_hsub(a, b)` (FSUB). `neon`: its ACLE intrinsic; `formula`: the
    float32 lane formula of the portable form."""
    name: str
    arity: int
    neon: str
    formula: str
    lanes: int = 8


HFMA = HalfOp("aot_hfma", 3, "vfmaq_f16", "fmaf({1}, {2}, {0})")
HADD = HalfOp("aot_hadd", 2, "vaddq_f16", "{0} + {1}")
HSUB = HalfOp("aot_hsub", 2, "vsubq_f16", "{0} - {1}")
HALF_OPS = {o.name: o for o in (HFMA, HADD, HSUB)}


def check_half_op(fn: str, args: tuple[Expr, ...], dtype: DType) -> HalfOp:
    """A half op's operands: float16 x 8 vectors, the result's type."""
    op = HALF_OPS[fn]
    kinds = [dtype_of(a) for a in args]
    if (len(args) != op.arity or dtype != DType("float16", op.lanes)
            or any(k != dtype for k in kinds)):
        raise UnsupportedError(f"{fn} takes {op.arity} float16 x {op.lanes} -> float16 x "
                               f"{op.lanes}, got ({', '.join(map(str, kinds))}) -> {dtype}")
    return op


def half_op(op: HalfOp, *args: Expr) -> Call:
    """The call of op (see HalfOp)."""
    return Call(op.name, tuple(args), dtype_of(args[0]))


def hfma(acc: Expr, a: Expr, b: Expr) -> Call:
    """aot_hfma(acc, a, b): acc + a * b in half."""
    return half_op(HFMA, acc, a, b)


# ------------------------------------------------------------------------ C

_X86 = "defined(__F16C__)"
_ARM = "defined(__aarch64__)"
C_INCLUDE = f"#if {_X86}\n#include <immintrin.h>\n#endif"

# F16C by lanes: (the `#if` condition, half -> float, float -> half), the
# operand `a` a vector of the lanes' uint16 bits or floats
_C_X86 = {
    1: (_X86, "_cvtsh_ss(a)", "_cvtss_sh(a, _MM_FROUND_TO_NEAREST_INT)"),
    8: (_X86, "({f})_mm256_cvtph_ps((__m128i)a)",
        "({h})_mm256_cvtps_ph((__m256)a, _MM_FROUND_TO_NEAREST_INT)"),
    16: (f"{_X86} && defined(__AVX512F__)", "({f})_mm512_cvtph_ps((__m256i)a)",
         "({h})_mm512_cvtps_ph((__m512)a, _MM_FROUND_TO_NEAREST_INT)"),
}


def c_half_helper(name: str, lanes: int, to_float: bool, f: str, h: str, src: str, ret: str,
                  portable: str, portable_text: str) -> str:
    """The conversion helper `ret name(src a)` (f, h: the C types of the
    float and of the half-bits side): the instruction under `#if`; in the
    `#else` the portable helper `portable` (its definition portable_text)
    and a call of it."""
    head = f"static inline {ret} {name}({src} a)\n{{\n"
    if lanes == 1:
        arm = ("    _Float16 x;\n    memcpy(&x, &a, sizeof x);\n    return (float)x;" if to_float
               else "    _Float16 x = (_Float16)a;\n    uint16_t r;\n"
                    "    memcpy(&r, &x, sizeof r);\n    return r;")
    else:
        arm = (f"    return __builtin_convertvector(({_half_vector(lanes)})a, {f});" if to_float
               else f"    return ({h})__builtin_convertvector(a, {_half_vector(lanes)});")
    out = f"#if {_ARM}\n{head}{arm}\n}}\n"
    if lanes in _C_X86:
        cond, up, down = _C_X86[lanes]
        out += (f"#elif {cond}\n{head}    return {(up if to_float else down).format(f=f, h=h)};"
                "\n}\n")
    return out + f"#else\n{portable_text}\n{head}    return {portable}(a);\n}}\n#endif"


def _half_vector(lanes: int) -> str:
    """AArch64's vector of `lanes` _Float16."""
    return f"aot_float16x{lanes}"


def c_half_typedefs(lanes: int) -> str:
    """The _Float16 vector type c_half_helper's AArch64 branch converts through."""
    return (f"#if {_ARM}\ntypedef _Float16 {_half_vector(lanes)} "
            f"__attribute__((vector_size({2 * lanes})));\n#endif")


def c_half_op(op: HalfOp, h: str, portable_in: str, portable_out: str) -> str:
    """`h aot_h<op>_8(h a, ...)` on the half bits vector type h: the
    instruction under `#if` on the compiler doing FP16 vector arithmetic;
    the portable form computes each lane in float32 (exact for a product of
    two halves; a sum or difference of two halves rounded to float32 then to
    half rounds as the instruction does) and rounds it to half, which for
    aot_hfma may differ from the instruction's single rounding by a half
    step where the float32 sum rounded to a half's tie."""
    names = "abc"[:op.arity]
    params = ", ".join(f"{h} {n}" for n in names)
    head = f"static inline {h} {op.name}_{op.lanes}({params})\n{{\n"
    cast = ", ".join(f"(float16x{op.lanes}_t){n}" for n in names)
    lane = op.formula.format(*(f"{portable_in}({n}[k])" for n in names))
    return (f"#if defined(__ARM_FEATURE_FP16_VECTOR_ARITHMETIC)\n#include <arm_neon.h>\n"
            f"{head}    return ({h}){op.neon}({cast});\n}}\n#else\n"
            f"{head}    {h} r;\n    for (int k = 0; k < {op.lanes}; ++k)\n"
            f"        r[k] = {portable_out}({lane});\n    return r;\n}}\n#endif")


def llvm_half_op(b, module, op: HalfOp, args: list):
    """A half op in LLVM on <8 x half> (the i16 bits bitcast): llvm.fma,
    fadd, fsub, which AArch64's instruction selection makes FMLA (by
    element where an operand splats a lane), FADD, FSUB .8h."""
    from llvmlite import ir
    hv = ir.VectorType(ir.HalfType(), op.lanes)
    xs = [b.bitcast(a, hv) for a in args]
    if op is HFMA:
        name = f"llvm.fma.v{op.lanes}f16"
        fma = module.globals.get(name) or ir.Function(module, ir.FunctionType(hv, [hv] * 3),
                                                      name)
        r = b.call(fma, [xs[1], xs[2], xs[0]])
    else:
        r = (b.fadd if op is HADD else b.fsub)(*xs)
    return b.bitcast(r, args[0].type)



__all__ = ["C_INCLUDE", "HADD", "HALF_CONVERSIONS", "HALF_OPS", "HFMA", "HSUB", "HalfOp",
           "c_half_helper", "c_half_op", "c_half_typedefs", "check_half_op", "half_op",
           "has_half_arithmetic", "has_half_conversions", "hfma", "llvm_half_op"]

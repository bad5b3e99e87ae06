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
"""
from __future__ import annotations

from aot.targets import Target

ARCHS_X86 = ("x86_64", "x86")

# A PrimFunc attribute the legalization pass sets where the target converts
# halves in hardware; the code generators read it.
HALF_CONVERSIONS = "half_conversion_instructions"


def has_half_conversions(target: Target) -> bool:
    """Whether the target converts halves in hardware (F16C, AArch64)."""
    return target.arch == "aarch64" or (target.arch in ARCHS_X86 and target.has("f16c"))


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


__all__ = ["C_INCLUDE", "HALF_CONVERSIONS", "c_half_helper", "c_half_typedefs",
           "has_half_conversions"]

"""The Armv7E-M DSP extension's int8 multiply-accumulate, as TIR calls.

Operations on 32-bit words seen as pairs of int16 halves (the low half
first):

    aot_sxtb16(v)       int8 x 4 -> int32: bytes 0 and 2 of v, sign-extended
                        into the low and high halves
    aot_sxtb16_ror8(v)  int8 x 4 -> int32: bytes 1 and 3 the same way
    aot_smlad(a, b, c)  int32 x 3 -> int32: c + lo(a) lo(b) + hi(a) hi(b),
                        wrapping as the instruction does
    aot_smlabb(a, b, c) c + lo(a) lo(b)  (SMLABB: depthwise keeps the
    aot_smlatt(a, b, c) c + hi(a) hi(b)   channels of a word apart)
    aot_smmulr(a, b)    int32 x 2 -> int32: (a b + 2^31) >> 32, the rounded
                        high word of the product (SMMULR: requantization)
    aot_ssat8(x)        int32 -> int32: x clamped to [-128, 127] (SSAT #8:
                        one instruction where GCC writes the two clamps as
                        compares and conditional moves)

So two SMLADs of the SXTB16 and SXTB16-ROR8 halves of an input word and a
weight word add the word's four products: an int8 dot product of four
terms in six instructions (four with a word already split).

Generic, each is its lane formula (any target computes it, which the host
tests use). On Arm targets with the "dsp" ISA feature the legalization pass
(aot/lower/tir_passes/legalize.py) makes them `arm_sxtb16`, `arm_sxtb16_ror8` and
`arm_smlad`, `arm_smlabb`, `arm_smlatt`, `arm_smmulr`, `arm_ssat8`: in C the ACLE
intrinsics `__sxtb16`, `__smlad`, `__smlabb`, `__smlatt`, `__ssat` under
`__ARM_FEATURE_DSP` (the formula otherwise: the user's compiler may not be
told the core), in LLVM `llvm.arm.<instruction>` (`llvm.arm.ssat` with 8
bits). ACLE has no SMMULR: C writes it as one
instruction of inline assembly, LLVM as the formula, which its Arm
instruction selection makes SMMULR. The ROR #8
is SXTB16's rotated operand: in C one instruction of inline assembly (GCC
12 neither folds a rotate into the intrinsic's operand nor has `__ror`),
in LLVM a funnel shift its instruction selection folds.

On a core without a 32x32->64 multiply (ARMv6-M, the Cortex-M0/M0+: ISA
feature "v6m"), where the formula's 64-bit product is a call to
__aeabi_lmul, aot_smmulr becomes `v6m_smmulr`: the same value from four
32-bit multiplies (MULS) of 16-bit halves, a = ah 2^16 + al, b = bh 2^16 + bl
(ah, bh signed, al, bl in [0, 2^16)):

    u = al bh + ((al bl) >> 16) + 2^15       (al bl unsigned)
    t = ah bl + (u & 0xFFFF)
    (a b + 2^31) >> 32 = ah bh + (u >> 16) + (t >> 16)

since floor((X 2^16 + Y) / 2^32) = floor((X + floor(Y / 2^16)) / 2^16) for
integers X, Y; u and t stay within int32 for every a and b (|ah bl|,
|al bh| < 2^31 - 2^16), so it is exact everywhere, not only within bounds.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from aot.errors import UnsupportedError
from aot.isa.instruction import Instruction
from aot.ir.tir import INT32, Call, DType, Expr, dtype_of

INT8X4 = DType("int8", 4)


@dataclass(frozen=True)
class DspOp:
    """One of the operations above. `odd`: the SXTB16 of bytes 1 and 3;
    `instruction`: the Arm instruction (legalized), else the formula."""
    name: str
    # "sxtb16", "smmulr", "ssat8" or a multiply-accumulate: "smlad", "smlabb", "smlatt"
    kind: str
    odd: bool = False
    instruction: bool = False
    halves: bool = False    # smmulr from 32-bit multiplies of 16-bit halves (v6m_smmulr)

    @property
    def arity(self) -> int:
        return 1 if self.kind in ("sxtb16", "ssat8") else 3

    @property
    def operands(self) -> tuple[DType, ...]:
        if self.kind == "sxtb16":
            return (INT8X4,)
        if self.kind == "ssat8":
            return (INT32,)
        return (INT32,) * (2 if self.kind == "smmulr" else 3)


SXTB16 = DspOp("aot_sxtb16", "sxtb16")
SXTB16_ROR8 = DspOp("aot_sxtb16_ror8", "sxtb16", odd=True)
SMLAD = DspOp("aot_smlad", "smlad")
ARM_SXTB16 = DspOp("arm_sxtb16", "sxtb16", instruction=True)
ARM_SXTB16_ROR8 = DspOp("arm_sxtb16_ror8", "sxtb16", odd=True, instruction=True)
ARM_SMLAD = DspOp("arm_smlad", "smlad", instruction=True)
SMLABB = DspOp("aot_smlabb", "smlabb")
SMLATT = DspOp("aot_smlatt", "smlatt")
ARM_SMLABB = DspOp("arm_smlabb", "smlabb", instruction=True)
ARM_SMLATT = DspOp("arm_smlatt", "smlatt", instruction=True)
SMMULR = DspOp("aot_smmulr", "smmulr")
ARM_SMMULR = DspOp("arm_smmulr", "smmulr", instruction=True)
V6M_SMMULR = DspOp("v6m_smmulr", "smmulr", halves=True)
SSAT8 = DspOp("aot_ssat8", "ssat8")
ARM_SSAT8 = DspOp("arm_ssat8", "ssat8", instruction=True)
DSP_OPS: dict[str, DspOp] = {d.name: d for d in (SXTB16, SXTB16_ROR8, SMLAD, SMLABB, SMLATT,
                                                  SMMULR, ARM_SXTB16, ARM_SXTB16_ROR8, ARM_SMLAD,
                                                  ARM_SMLABB, ARM_SMLATT, ARM_SMMULR, V6M_SMMULR,
                                                  SSAT8, ARM_SSAT8)}
# the halves each multiply-accumulate multiplies: (low, high)
_TERMS = {"smlad": (True, True), "smlabb": (True, False), "smlatt": (False, True)}


def generic_of(op: DspOp) -> DspOp:
    """The formula an instruction stands for."""
    return next(d for d in DSP_OPS.values()
                if d.kind == op.kind and d.odd == op.odd and not d.instruction and not d.halves)


def sxtb16(v: Expr, odd: bool = False) -> Call:
    """aot_sxtb16 (odd: aot_sxtb16_ror8) of an int8 x 4 word."""
    return Call((SXTB16_ROR8 if odd else SXTB16).name, (v,), INT32)


def smlad(a: Expr, b: Expr, acc: Expr) -> Call:
    """aot_smlad: acc plus the two products of a's and b's int16 halves."""
    return Call(SMLAD.name, (a, b, acc), INT32)


def smmulr(a: Expr, b: Expr) -> Call:
    """aot_smmulr: (a * b + 2^31) >> 32."""
    return Call(SMMULR.name, (a, b), INT32)


def ssat8(x: Expr) -> Call:
    """aot_ssat8: x clamped to [-128, 127]."""
    return Call(SSAT8.name, (x,), INT32)


def smla_half(a: Expr, b: Expr, acc: Expr, high: bool) -> Call:
    """aot_smlabb (high: aot_smlatt): acc plus the product of a's and b's
    low (high) halves."""
    return Call((SMLATT if high else SMLABB).name, (a, b, acc), INT32)


def check_dsp(fn: str, args: tuple[Expr, ...], dtype: DType) -> DspOp:
    return check_operands(DSP_OPS[fn], args, dtype)


def check_operands(op, args: tuple[Expr, ...], dtype: DType, result: DType = INT32):
    """op (its name, its operands' types) if the call's arguments are those
    and its result `result`, else a clear error naming it."""
    kinds = tuple(dtype_of(a) for a in args)
    if kinds != op.operands or dtype != result:
        want = ", ".join(map(str, op.operands))
        raise UnsupportedError(f"{op.name} takes ({want}) -> {result}, got "
                               f"({', '.join(map(str, kinds))}) -> {dtype}")
    return op


# ------------------------------------------------------------ legalization

ARCHS = ("arm", "thumb")
_DSP = ((1, ("dsp",)),)

# The Armv7E-M DSP extension (Cortex-M4/M7/M55): SXTB16 reads a little-endian word.
ROWS: tuple[Instruction, ...] = (
    Instruction(SMLAD.name, ARM_SMLAD.name, ARCHS, _DSP),
    Instruction(SMLABB.name, ARM_SMLABB.name, ARCHS, _DSP),
    Instruction(SMLATT.name, ARM_SMLATT.name, ARCHS, _DSP),
    Instruction(SMMULR.name, ARM_SMMULR.name, ARCHS, _DSP),
    Instruction(SSAT8.name, ARM_SSAT8.name, ARCHS, _DSP),
    Instruction(SXTB16.name, ARM_SXTB16.name, ARCHS, _DSP, little_endian=True),
    Instruction(SXTB16_ROR8.name, ARM_SXTB16_ROR8.name, ARCHS, _DSP, little_endian=True),
    # no long multiply: SMMULR's value from MULS of halves (the module docstring)
    Instruction(SMMULR.name, V6M_SMMULR.name, ("thumb",), ((1, ("v6m",)),)),
)


# ------------------------------------------------------------------------ C

_ACLE = "aot_arm_acle"


def c_helper(mod, op: DspOp) -> str:
    """Define op's C function in the module (c.py's _Module) and name it."""
    if op.instruction:
        mod.helper(_ACLE, lambda: "#if defined(__ARM_FEATURE_DSP)\n#include <arm_acle.h>\n#endif")
    generic = c_helper(mod, generic_of(op)) if op.instruction else ""
    if op.kind in _TERMS:
        return mod.helper(op.name, lambda: _c_mac(op, generic))
    if op.halves:
        return mod.helper(op.name, lambda: (
            "/* SMMULR's value, (a * b + 2^31) >> 32, from four 32-bit multiplies of 16-bit\n"
            " * halves: no 64-bit multiply (a core without one calls __aeabi_lmul for it) */\n"
            f"static inline int32_t {op.name}(int32_t a, int32_t b)\n{{\n"
            "    const int32_t ah = a >> 16, bh = b >> 16;\n"
            "    const int32_t al = a & 65535, bl = b & 65535;\n"
            "    const int32_t u = al * bh + (int32_t)(((uint32_t)al * (uint32_t)bl) >> 16) + 32768;\n"
            "    const int32_t t = ah * bl + (u & 65535);\n"
            "    return ah * bh + (u >> 16) + (t >> 16);\n}"))
    if op.kind == "ssat8":
        body = (_guarded("return __ssat(x, 8);", f"return {generic}(x);") if op.instruction else
                "    return x < -128 ? -128 : x > 127 ? 127 : x;\n")
        return mod.helper(op.name, lambda: (
            "/* SSAT #8: x clamped to [-128, 127] */\n"
            f"static inline int32_t {op.name}(int32_t x)\n{{\n{body}}}"))
    if op.kind == "smmulr":
        body = (_guarded('int32_t r;\n    __asm__("smmulr %0, %1, %2" : "=r"(r) : "r"(a), "r"(b));'
                         "\n    return r;", f"return {generic}(a, b);") if op.instruction else
                "    return (int32_t)(((int64_t)a * b + INT64_C(2147483648)) >> 32);\n")
        return mod.helper(op.name, lambda: (
            "/* SMMULR: (a * b + 2^31) >> 32, the rounded high word */\n"
            f"static inline int32_t {op.name}(int32_t a, int32_t b)\n{{\n{body}}}"))
    t = mod.vector(INT8X4)
    lo, hi = (1, 3) if op.odd else (0, 2)
    if op.instruction:
        fast = "uint32_t w;\n    memcpy(&w, &v, sizeof w);\n    "
        if op.odd:      # GCC 12 does not fold a rotate into SXTB16's operand (nor has __ror)
            fast += ("uint32_t r;\n    __asm__(\"sxtb16 %0, %1, ror #8\" : \"=r\"(r) : \"r\"(w));\n"
                     "    return (int32_t)r;")
        else:
            fast += "return (int32_t)__sxtb16(w);"
        body = _guarded(fast, f"return {generic}(v);")
    else:
        body = f"    return (v[{lo}] & 65535) + v[{hi}] * 65536;\n"
    doc = f"SXTB16{' ROR #8' if op.odd else ''}: bytes {lo} and {hi} of v as int16 halves"
    return mod.helper(op.name, lambda: f"/* {doc} */\nstatic inline int32_t {op.name}({t} v)"
                                       f"\n{{\n{body}}}")


def _c_mac(op: DspOp, generic: str) -> str:
    low, high = _TERMS[op.kind]
    if op.instruction:
        body = _guarded(f"return __{op.kind}(a, b, acc);", f"return {generic}(a, b, acc);")
    else:
        lines = ["    /* the halves as the instruction reads them; the sum wraps as it does */"]
        terms = ["(uint32_t)acc"]
        if low:
            lines += ["    const int32_t a_lo = (int16_t)a;",
                      "    const int32_t b_lo = (int16_t)b;"]
            terms.append("(uint32_t)(a_lo * b_lo)")
        if high:
            lines += ["    const int32_t a_hi = (a - (a & 65535)) / 65536;",
                      "    const int32_t b_hi = (b - (b & 65535)) / 65536;"]
            terms.append("(uint32_t)(a_hi * b_hi)")
        body = "\n".join(lines) + f"\n    return (int32_t)({' + '.join(terms)});\n"
    products = " + ".join(p for p, t in (("lo(a) * lo(b)", low), ("hi(a) * hi(b)", high)) if t)
    return (f"/* {op.kind.upper()}: acc + {products}, int16 halves, wrapping */\n"
            f"static inline int32_t {op.name}(int32_t a, int32_t b, int32_t acc)\n{{\n{body}}}")


def _guarded(fast: str, fallback: str) -> str:
    return (f"#if defined(__ARM_FEATURE_DSP)\n    {fast}\n#else\n    {fallback}\n#endif\n")


# --------------------------------------------------------------------- LLVM

def llvm_emit(b: ir.IRBuilder, module: ir.Module, op: DspOp, args: list) -> ir.Value:
    """op on LLVM values: the Arm intrinsic, or the formula."""
    i32 = ir.IntType(32)
    if op.halves:
        return _llvm_halves_smmulr(b, *args)
    if op.kind == "ssat8":
        x, = args
        if op.instruction:
            ssat = module.globals.get("llvm.arm.ssat") or ir.Function(
                module, ir.FunctionType(i32, [i32, i32]), "llvm.arm.ssat")
            return b.call(ssat, [x, ir.Constant(i32, 8)])
        lo = b.select(b.icmp_signed("<", x, ir.Constant(i32, -128)), ir.Constant(i32, -128), x)
        return b.select(b.icmp_signed(">", lo, ir.Constant(i32, 127)), ir.Constant(i32, 127), lo)
    if op.kind == "smmulr":
        i64 = ir.IntType(64)
        a, w = (b.sext(v, i64) for v in args)
        total = b.add(b.mul(a, w), ir.Constant(i64, 1 << 31))
        return b.trunc(b.ashr(total, ir.Constant(i64, 32)), i32)
    if op.kind in _TERMS:
        if op.instruction:
            return b.call(_declare(module, f"llvm.arm.{op.kind}", 3), args)
        a, w, total = args
        low, high = _TERMS[op.kind]
        if low:
            total = b.add(total, b.mul(*(b.sext(b.trunc(x, ir.IntType(16)), i32) for x in (a, w))))
        if high:
            total = b.add(total, b.mul(*(b.ashr(x, ir.Constant(i32, 16)) for x in (a, w))))
        return total
    v = args[0]
    if op.instruction:
        word = b.bitcast(v, i32)
        if op.odd:
            fshr = module.globals.get("llvm.fshr.i32") or ir.Function(
                module, ir.FunctionType(i32, [i32] * 3), "llvm.fshr.i32")
            word = b.call(fshr, [word, word, ir.Constant(i32, 8)])
        return b.call(_declare(module, "llvm.arm.sxtb16", 1), [word])
    lo, hi = (1, 3) if op.odd else (0, 2)
    low = b.and_(b.sext(b.extract_element(v, ir.Constant(i32, lo)), i32), ir.Constant(i32, 0xFFFF))
    high = b.shl(b.sext(b.extract_element(v, ir.Constant(i32, hi)), i32), ir.Constant(i32, 16))
    return b.or_(low, high)


def _llvm_halves_smmulr(b: ir.IRBuilder, a: ir.Value, w: ir.Value) -> ir.Value:
    """v6m_smmulr's formula (the module docstring) in 32-bit operations."""
    i32 = ir.IntType(32)

    def k(v: int) -> ir.Constant:
        return ir.Constant(i32, v)
    ah, bh = b.ashr(a, k(16)), b.ashr(w, k(16))
    al, bl = b.and_(a, k(0xFFFF)), b.and_(w, k(0xFFFF))
    u = b.add(b.add(b.mul(al, bh), b.lshr(b.mul(al, bl), k(16))), k(1 << 15))
    t = b.add(b.mul(ah, bl), b.and_(u, k(0xFFFF)))
    return b.add(b.add(b.mul(ah, bh), b.ashr(u, k(16))), b.ashr(t, k(16)))


def _declare(module: ir.Module, name: str, arity: int) -> ir.Function:
    i32 = ir.IntType(32)
    return module.globals.get(name) or ir.Function(module, ir.FunctionType(i32, [i32] * arity),
                                                   name)


__all__ = ["ARCHS", "ARM_SMLABB", "ARM_SMLAD", "ARM_SMLATT", "ARM_SMMULR", "ARM_SXTB16",
           "ARM_SXTB16_ROR8", "DSP_OPS", "DspOp", "ROWS", "SMLABB", "SMLAD", "SMLATT", "SMMULR",
           "V6M_SMMULR",
           "SSAT8", "ARM_SSAT8", "SXTB16", "SXTB16_ROR8", "c_helper", "check_dsp", "check_operands",
           "generic_of",
           "llvm_emit", "smla_half", "smlad", "smmulr", "ssat8", "sxtb16"]

"""x86's integer SIMD instructions (SSE2, SSE4.1, AVX2, AVX-512, AVX-512
VNNI) and its vector FMA, as TIR calls, with their C and LLVM spellings and
legalization rows.

    x86_pmaddwd(x0, x1, w)     aot_dot2 (dots.PairDot) as pmaddwd of the
    x86_pmaddwd_packed(p, w)   broadcast pair: SSE2 (4 lanes), AVX2 (8),
                               AVX512BW (16); aot_dot2p the same
    x86_pmuldq_rdhm(a, b)      the whole-vector aot_rdhm with pmuldq: SSE4.1
                               (4), AVX2 (8), AVX512F (16)
    x86_vpdpbusd(acc, q, w)    aot_dot4u (dots.QuadDot) as vpdpbusd:
                               AVX512-VNNI (16), with AVX512VL (4, 8)
    x86_fmadd(a, b, c)         fmaf on float32 vectors as vfmadd: FMA (4, 8),
                               AVX512F (16)

The C prints each instruction as the builtin or intrinsic GCC and Clang
share, under `#if` on the macro that says the compiler was given the ISA,
with the lane formula beside it (docs/package.md, "In a firmware
project"); LLVM calls the instruction's intrinsic (pmaddwd, vpdpbusd;
llvm.fma, which it selects vfmadd for) or writes the arithmetic its
instruction selection makes pmuldq of.

GCC_X86_SPELLINGS, a function attribute the legalization pass sets on every
x86 target, lets the C printer spell vector conversions and min/max as GCC
on x86 vectorizes them best, beside the portable spelling.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from aot.errors import UnsupportedError
from aot.isa.dots import PACKED_PAIR_DOT, PAIR_DOT, QUAD_DOT_U, PairDot, QuadDot
from aot.isa.instruction import Instruction
from aot.ir.tir import DType, Expr, dtype_of

ARCHS = ("x86_64", "x86")

X86_PMADDWD = PairDot("x86_pmaddwd", pmaddwd=True)
X86_PMADDWD_PACKED = PairDot("x86_pmaddwd_packed", True, pmaddwd=True)
X86_VPDPBUSD = QuadDot("x86_vpdpbusd", unsigned=True, instruction="vpdpbusd")


@dataclass(frozen=True)
class Pmuldq:
    """`x86_pmuldq_rdhm(a, b)`: the whole-vector aot_rdhm on int32 x n
    (n = 4, 8, 16; a scalar operand is broadcast), computed with x86's
    pmuldq on the even and odd lanes (the high halves of their 64-bit
    products put back in place), which C compilers do not form from the
    int64 formula. The legalization pass chooses it on x86."""
    name: str = "x86_pmuldq_rdhm"
    generic: str = "aot_rdhm"


X86_PMULDQ_RDHM = Pmuldq()


@dataclass(frozen=True)
class Fmadd:
    """`x86_fmadd(a, b, c)`: fmaf on float32 x n (n = 4, 8, 16; a scalar
    operand is broadcast) as vfmadd, one rounding as fmaf. The C spells it
    as the intrinsic (c_fmadd): clang 14 left fmaf's lane loop scalar
    where an operand was a converted load (a QOperator ResNet-50's
    residual adds: each lane extracted, converted and multiplied alone;
    its stage-1 kernels 724 -> 209 us). LLVM's llvm.fma on the vector is
    vfmadd already. The legalization pass chooses it on x86."""
    name: str = "x86_fmadd"
    generic: str = "fmaf"
    llvm: str = "llvm.fma"


X86_FMADD = Fmadd()

# A PrimFunc attribute the legalization pass sets on x86 targets: the C
# printer may then spell vector conversions and min/max as GCC on x86
# vectorizes best, under `#if` beside the portable spelling (which compiler
# builds the C is not known when it is generated; docs/package.md, "gcc and
# clang"). Elsewhere the portable spelling alone.
GCC_X86_SPELLINGS = "c_gcc_x86_spellings"


def check_pmuldq(args: tuple[Expr, ...], dtype: DType) -> Pmuldq:
    return _check_lanewise(X86_PMULDQ_RDHM, "int32", 2, args, dtype)


def check_fmadd(args: tuple[Expr, ...], dtype: DType) -> Fmadd:
    return _check_lanewise(X86_FMADD, "float32", 3, args, dtype)


def _check_lanewise(op, scalar: str, arity: int, args: tuple[Expr, ...], dtype: DType):
    """op, whose `arity` operands and result are `scalar` x n (n = 4, 8,
    16; a scalar operand broadcast), or a clear error."""
    kinds = [dtype_of(a) for a in args]
    times = {2: "twice", 3: "three times"}[arity]
    if (len(args) != arity or dtype.scalar != scalar or dtype.lanes not in (4, 8, 16)
            or any(k.scalar != scalar or k.lanes not in (1, dtype.lanes) for k in kinds)):
        raise UnsupportedError(f"{op.name} takes {scalar} x n (n = 4, 8, 16) {times}, "
                               f"got ({', '.join(map(str, kinds))}) -> {dtype}")
    return op


# ------------------------------------------------------------ legalization

_PMADDWD = ((4, ("sse2",)), (8, ("avx2",)), (16, ("avx512bw",)))
_PMULDQ = ((4, ("sse4.1",)), (8, ("avx2",)), (16, ("avx512f",)))
_FMADD = ((4, ("fma",)), (8, ("fma",)), (16, ("avx512f",)))
_VPDPBUSD = ((4, ("avx512vnni", "avx512vl")), (8, ("avx512vnni", "avx512vl")),
             (16, ("avx512vnni",)))

# pmaddwd and pmuldq: SSE2 to AVX-512; vfmadd: FMA, AVX-512
SIMD_ROWS: tuple[Instruction, ...] = (
    Instruction(PAIR_DOT.name, X86_PMADDWD.name, ARCHS, _PMADDWD),
    Instruction(PACKED_PAIR_DOT.name, X86_PMADDWD_PACKED.name, ARCHS, _PMADDWD),
    Instruction(X86_PMULDQ_RDHM.generic, X86_PMULDQ_RDHM.name, ARCHS, _PMULDQ, only="int32"),
    Instruction(X86_FMADD.generic, X86_FMADD.name, ARCHS, _FMADD, only="float32"),
)
# vpdpbusd reads the quad's bytes as lanes of a broadcast register: little-endian
VNNI_ROWS: tuple[Instruction, ...] = (
    Instruction(QUAD_DOT_U.name, X86_VPDPBUSD.name, ARCHS, _VPDPBUSD, little_endian=True),
)
ROWS = SIMD_ROWS + VNNI_ROWS


# ------------------------------------------------------------------------ C

# The builtins GCC and Clang share, by result lanes, each with the macro
# that says the compiler was given its ISA.
C_PMADDWD = {16: ("__AVX512BW__", "__builtin_ia32_pmaddwd512"),
             8: ("__AVX2__", "__builtin_ia32_pmaddwd256"),
             4: ("__SSE2__", "__builtin_ia32_pmaddwd128")}
C_PMULDQ = {16: ("__AVX512F__", "__builtin_ia32_pmuldq512"),
            8: ("__AVX2__", "__builtin_ia32_pmuldq256"),
            4: ("__SSE4_1__", "__builtin_ia32_pmuldq128")}
# GCC on x86 vectorizes some vector-extension code poorly: helpers spell it
# differently there (measured with gcc 12 against clang 14 on x86-64-v3).
GCC_X86 = ("#if defined(__GNUC__) && !defined(__clang__) && "
           "(defined(__x86_64__) || defined(__i386__))")


def c_pmaddwd(lanes: int, rt: str, wt: str, packed: bool) -> str:
    """The opening of an aot_dot2(p) helper's body (result type rt, weights
    wt) that returns pmaddwd's result under `#if`, the `#else` that leaves
    the formula to follow; "" where no pmaddwd has `lanes` lanes."""
    builtin = C_PMADDWD.get(lanes)
    if builtin is None:
        return ""
    if packed:      # a vector of the int32 pair, seen as int16 lanes (little-endian x86)
        build = f"{rt} p32 = {{{', '.join(['p'] * lanes)}}};\n    {wt} x = ({wt})p32;"
    else:
        build = f"{wt} x = {{{', '.join(['x0, x1'] * lanes)}}};"
    return (f"#if defined({builtin[0]})\n    {build}\n"
            f"    return ({rt}){builtin[1]}(x, w);\n#else\n")


def c_pmuldq_rdhm(mod, lanes: int, t: str, formula: list[str]) -> list[str]:
    """x86_pmuldq_rdhm's body lines (t: the int32 vector's C type; mod:
    c.py's _Module): pmuldq of the even and odd lanes under `#if`, else the
    formula's lines. Both branches spell their constants out: a splat helper
    used by one branch only would be an unused function."""
    isa, builtin = C_PMULDQ[lanes]
    u = mod.vector(DType("uint64", lanes // 2))
    half = lanes // 2
    return [
        f"#if defined({isa})",
        f"    const {u} round = {_braced('UINT64_C(1073741824)', half)};",
        f"    const {u} low = {_braced('UINT64_C(0xFFFFFFFF)', half)};",
        f"    const {u} even = ({u}){builtin}(a, b) + round;",
        f"    const {u} odd = ({u}){builtin}(({t})(({u})a >> 32), ({t})(({u})b >> 32)) + round;",
        f"    return ({t})(((even >> 31) & low) | ((odd << 1) & ~low));",
        "#else", *formula, "#endif"]


def _braced(value: str, n: int) -> str:
    return "{" + ", ".join([value] * n) + "}"


def c_vpdpbusd(lanes: int, rt: str) -> tuple[str, str, str]:
    """(what goes above the helper, the `#if` condition, the expression) of
    x86_vpdpbusd on `lanes` lanes of type rt, Intel's _mm*_dpbusd_epi32."""
    isa = "defined(__AVX512VNNI__)" + ("" if lanes == 16 else " && defined(__AVX512VL__)")
    width = {4: ("_mm", "__m128i"), 8: ("_mm256", "__m256i"), 16: ("_mm512", "__m512i")}
    pre, reg = width[lanes]
    return (f"#if {isa}\n#include <immintrin.h>\n#endif\n", isa,
            f"({rt}){pre}_dpbusd_epi32(({reg})acc, {pre}_set1_epi32(q), ({reg})w)")


# fmaf on float32 vectors: (the ISA macro, Intel's intrinsic prefix, its register type)
C_FMADD = {16: ("__AVX512F__", "_mm512", "__m512"), 8: ("__FMA__", "_mm256", "__m256"),
           4: ("__FMA__", "_mm", "__m128")}


def c_fmadd(lanes: int, t: str) -> tuple[str, str, str]:
    """(what goes above the helper, the `#if` condition, the expression) of
    fmaf(a, b, c) on `lanes` float32 lanes of type t: _mm*_fmadd_ps, one
    rounding as fmaf."""
    macro, pre, reg = C_FMADD[lanes]
    isa = f"defined({macro})"
    return (f"#if {isa}\n#include <immintrin.h>\n#endif\n", isa,
            f"({t}){pre}_fmadd_ps(({reg})a, ({reg})b, ({reg})c)")


def c_gcc_minmax(t: str, lanes: int, cmp: str, portable: str) -> str:
    """A vector min/max helper's body for GCC_X86_SPELLINGS: GCC on x86
    makes the portable compare-and-blend a compare and vpblendvb, this loop
    one vpminsd (clamps in kws int8's epilogues: 4% of its time)."""
    return (f"{GCC_X86}\n    {t} r;\n"
            f"    for (int k = 0; k < {lanes}; ++k) {{\n"
            f"        r[k] = a[k] {cmp} b[k] ? a[k] : b[k];\n    }}\n    return r;\n"
            f"#else\n{portable}#endif\n")


def c_gcc_convert(mod, src: DType, dst: DType, lane_type: str) -> str:
    """A vector conversion helper's body for GCC_X86_SPELLINGS (mod: c.py's
    _Module; lane_type: the C type of dst's lanes). GCC 12 on x86 converts
    vectors of 4 or 8 bytes lane by lane in general registers and widens 16
    bytes in halves: kws int8 built with gcc ran 3.7x slower than with
    clang. From a lane-by-lane initializer it widens in one instruction; it
    narrows integers well one halving at a time (int32 -> int16 -> int8)."""
    td = mod.vector(dst)
    if src.is_float or dst.is_float or src.bits <= 2 * dst.bits:
        lanes = ", ".join(f"({lane_type})a[{i}]" for i in range(dst.lanes))
        gcc = f"    {td} r = {{{lanes}}};\n    return r;"
    else:
        # each step wraps, keeping the low bits: the lanes one conversion gives
        gcc, bits = "a", src.bits // 2
        while bits > dst.bits:
            half = mod.vector(DType(f"int{bits}", src.lanes))
            gcc = f"__builtin_convertvector({gcc}, {half})"
            bits //= 2
        gcc = f"    return __builtin_convertvector({gcc}, {td});"
    return f"{GCC_X86}\n{gcc}\n#else\n    return __builtin_convertvector(a, {td});\n#endif\n"


# --------------------------------------------------------------------- LLVM

# pmaddwd's intrinsic by result lanes
LLVM_PMADDWD = {4: "llvm.x86.sse2.pmadd.wd", 8: "llvm.x86.avx2.pmadd.wd",
                16: "llvm.x86.avx512.pmaddw.d.512"}


def llvm_pmaddwd(fb, op: PairDot, n: int, args: list) -> ir.Value:
    """x86_pmaddwd(_packed) on n result lanes (fb: llvm.py's function
    builder, its IRBuilder `b`, `module` and `splat`): pmaddwd of the pair
    broadcast as int32 and seen as int16 lanes (LLVM does not form it from
    the lane formula when the pair is a broadcast)."""
    b = fb.b
    w = args[-1]
    if op.packed:
        x = b.bitcast(fb.splat(args[0], n), w.type)
    else:
        i16, i32 = ir.IntType(16), ir.IntType(32)
        pair = b.insert_element(b.insert_element(
            ir.Constant(ir.VectorType(i16, 2), ir.Undefined), args[0], ir.Constant(i32, 0)),
            args[1], ir.Constant(i32, 1))
        x = b.bitcast(fb.splat(b.bitcast(pair, i32), n), w.type)
    name = LLVM_PMADDWD[n]
    callee = fb.module.globals.get(name) or ir.Function(fb.module, ir.FunctionType(
        ir.VectorType(ir.IntType(32), w.type.count // 2), [w.type, w.type]), name)
    return b.call(callee, [x, w])


def llvm_pmuldq_rdhm(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """x86_pmuldq_rdhm as the C prints it: the even and odd lanes' 64-bit
    products (sign-extended low halves: pmuldq), rounded, their high
    halves merged back in place. From the int64 formula LLVM widens all
    lanes and narrows them again (vpmovzxdq, vpmovqd, vinserti64x4:
    host-avx512 ic int8 conv2d_add_5 3.35 us against the C's 2.0)."""
    n = x.type.count // 2
    wide = ir.VectorType(ir.IntType(64), n)

    def k(value: int) -> ir.Constant:
        return ir.Constant(wide, [value] * n)
    u, v = b.bitcast(x, wide), b.bitcast(y, wide)
    k32, rnd = k(32), k(1 << 30)

    def product(p, q):
        return b.add(b.mul(p, q), rnd)
    even = product(b.ashr(b.shl(u, k32), k32), b.ashr(b.shl(v, k32), k32))
    odd = product(b.ashr(u, k32), b.ashr(v, k32))
    low = k(0xFFFFFFFF)
    merged = b.or_(b.and_(b.lshr(even, k(31)), low), b.and_(b.shl(odd, k(1)), b.not_(low)))
    return b.bitcast(merged, x.type)


def llvm_vpdpbusd(b: ir.IRBuilder, module: ir.Module, acc, x, w) -> ir.Value:
    """x86_vpdpbusd of the broadcast quad x (seen as bytes, the unsigned
    operand) and the weights w."""
    name = f"llvm.x86.avx512.vpdpbusd.{32 * acc.type.count}"
    callee = module.globals.get(name) or ir.Function(
        module, ir.FunctionType(acc.type, [acc.type, w.type, w.type]), name)
    return b.call(callee, [acc, x, w])


__all__ = ["ARCHS", "C_FMADD", "C_PMADDWD", "C_PMULDQ", "Fmadd", "GCC_X86", "GCC_X86_SPELLINGS",
           "LLVM_PMADDWD", "Pmuldq", "ROWS", "SIMD_ROWS", "VNNI_ROWS", "X86_FMADD", "X86_PMADDWD",
           "X86_PMADDWD_PACKED", "X86_PMULDQ_RDHM", "X86_VPDPBUSD", "c_fmadd", "c_gcc_convert",
           "c_gcc_minmax", "c_pmaddwd", "c_pmuldq_rdhm", "c_vpdpbusd", "check_fmadd",
           "check_pmuldq", "llvm_pmaddwd", "llvm_pmuldq_rdhm", "llvm_vpdpbusd"]

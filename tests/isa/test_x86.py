"""x86's instruction family (aot/isa/x86.py): its legalization rows are well
formed, and each instruction is chosen on an x86 target and spelled by both
code generators (the builtin under its ISA's #if in C, the intrinsic or the
pmuldq arithmetic in LLVM), which the generic call is not."""
from __future__ import annotations

import pytest

from aot.isa import x86
from aot.ir.tir import DType
from aot.lower.tir_passes.legalize import legalize
from aot.targets import get_target
from support.kernels import call_kernel, spelled

I8, I16, I32, F32 = (DType(s) for s in ("int8", "int16", "int32", "float32"))
TARGETS = ("x86_64-linux", "x86_64-linux-avx512")


def v(d: DType, lanes: int) -> DType:
    return d.with_lanes(lanes)


# generic call, its operands and result, a target, the instruction it
# becomes there, its C and its LLVM spelling
CASES = [
    ("aot_dot2", (I16, I16, v(I16, 16)), v(I32, 8), "x86_64-linux", "x86_pmaddwd",
     "__builtin_ia32_pmaddwd256", "llvm.x86.avx2.pmadd.wd"),
    ("aot_dot2p", (I32, v(I16, 32)), v(I32, 16), "x86_64-linux-avx512", "x86_pmaddwd_packed",
     "__builtin_ia32_pmaddwd512", "llvm.x86.avx512.pmaddw.d.512"),
    ("aot_rdhm", (v(I32, 4), v(I32, 4)), v(I32, 4), "x86_64-linux", "x86_pmuldq_rdhm",
     "__builtin_ia32_pmuldq128", "to <2 x i64>"),
    ("aot_dot4u", (v(I32, 16), I32, v(I8, 64)), v(I32, 16), "x86_64-linux-avx512",
     "x86_vpdpbusd", "_mm512_dpbusd_epi32", "llvm.x86.avx512.vpdpbusd.512"),
]


def test_rows_are_well_formed():
    names = {x86.X86_PMADDWD.name, x86.X86_PMADDWD_PACKED.name, x86.X86_PMULDQ_RDHM.name,
             x86.X86_VPDPBUSD.name, x86.X86_FMADD.name}
    assert x86.ROWS == x86.SIMD_ROWS + x86.VNNI_ROWS
    for row in x86.ROWS:
        assert row.archs == x86.ARCHS and row.name in names and row.generic not in names, row
        lanes = [n for n, _ in row.features]
        assert len(set(lanes)) == len(lanes) and all(n in (4, 8, 16) for n in lanes), row
        for _, needed in row.features:        # no row no shipped target can take
            assert any(get_target(t).has(*needed) for t in TARGETS), (row, needed)


def test_every_row_has_a_case():
    assert {case[4] for case in CASES} | {x86.X86_FMADD.name} == {row.name for row in x86.ROWS}


@pytest.mark.parametrize("generic, operands, result, target, instruction, c, llvm", CASES,
                         ids=[case[4] for case in CASES])
def test_the_instruction_is_chosen_and_spelled(generic, operands, result, target, instruction,
                                               c, llvm):
    func = call_kernel(generic, operands, result)
    names, source, ir = spelled(func, target)
    assert names == {instruction}
    assert c in source and "#else" in source and llvm in ir
    _, generic_source, generic_ir = spelled(func, target, legalized=False)
    assert c not in generic_source and llvm not in generic_ir     # the formula alone
    # an x86 instruction is never an Arm target's
    assert instruction not in spelled(func, "aarch64-linux-a76")[0]


def test_gcc_spellings_are_x86_only():
    func = call_kernel("aot_rdhm", (v(I32, 8), v(I32, 8)), v(I32, 8))
    x86_func = legalize(func, get_target("x86_64-linux"))
    assert dict(x86_func.attrs)[x86.GCC_X86_SPELLINGS] is True
    assert x86.GCC_X86_SPELLINGS not in dict(legalize(func, get_target("aarch64-linux")).attrs)


@pytest.mark.parametrize("target, lanes, fmadd", [("x86_64-linux", 8, "_mm256_fmadd_ps"),
                                                 ("x86_64-linux-avx512", 16, "_mm512_fmadd_ps"),
                                                 ("x86_64-linux", 16, None)])
def test_vector_fmaf_is_vfmadd_where_the_target_has_it(target, lanes, fmadd):
    """fmaf on float32 vectors: the vfmadd intrinsic under its ISA's #if
    in C (a scalar operand broadcast), where the target has FMA for that
    many lanes (AVX2 has no 16-lane one); LLVM's llvm.fma either way."""
    func = call_kernel("fmaf", (v(F32, lanes), F32, v(F32, lanes)), v(F32, lanes))
    names, source, ir = spelled(func, target)
    assert f"llvm.fma.v{lanes}f32" in ir
    if fmadd is None:
        assert names == {"fmaf"} and "_fmadd_ps" not in source
        return
    assert names == {x86.X86_FMADD.name} and fmadd in source and "#else" in source
    assert "_fmadd_ps" not in spelled(func, target, legalized=False)[1]
    assert x86.X86_FMADD.name not in spelled(func, "aarch64-linux")[0]

"""Intrinsic legalization (aot/lower/tir_passes/legalize.py): generic calls become the
target's instructions by its facts, and the backends print what they are
given, choosing nothing."""
from __future__ import annotations

import dataclasses

import pytest

from aot.codegen.c import emit_c
from aot.isa.calls import pack_pairs
from aot.isa.dots import packed_pair_dot, pair_dot
from aot.codegen.llvm import emit_llvm_ir
from aot.isa.x86 import GCC_X86_SPELLINGS
from aot.ir.tir import (INT32, Bin, Buffer, BufferKind, Call, Cast, Const, DType, For, Load,
                        PrimFunc, Store, Var, seq)
from aot.lower.tir_passes.legalize import INSTRUCTIONS, legalize
from aot.targets import get_target
from support.kernels import calls

I16 = DType("int16")


def _func(n: int) -> PrimFunc:
    """Every generic call the pass knows, with n result lanes, and a scalar aot_rdhm."""
    xs = Buffer("xs", I16, (2 * n,))
    ps = Buffer("ps", INT32, (n,))
    a = Buffer("a", INT32, (n,))
    out = Buffer("out", INT32, (6 * n,), BufferKind.OUTPUT)
    i = Var("i")
    w = Load(xs, Const(0), 2 * n)
    body = seq(
        Store(out, Const(0), pair_dot(Load(xs, Const(0)), Load(xs, Const(1)), w)),
        Store(out, Const(n), packed_pair_dot(Load(ps, Const(0)), w)),
        Store(out, Const(2 * n), pack_pairs(w)),
        Store(out, Const(3 * n), Call("aot_rdhm", (Load(a, Const(0), n), Load(a, Const(0), n)),
                                      DType("int32", n))),
        For(i, n, Store(out, Bin("+", i, Const(4 * n)),
                        Call("aot_rdhm", (Load(a, i), Load(a, i)), INT32))),
        # a vector conversion and min: spelled for GCC too on x86 targets
        Store(out, Const(5 * n), Bin("min", Cast(DType("int32", n), Load(xs, Const(0), n)),
                                     Load(a, Const(0), n))))
    return PrimFunc(f"all_{n}", (xs, ps, a, out), body)


GENERIC = ["aot_dot2", "aot_dot2p", "aot_pack2", "aot_rdhm", "aot_rdhm"]


@pytest.mark.parametrize("target, n, want", [
    ("x86_64-linux", 8, ["x86_pmaddwd", "x86_pmaddwd_packed", "aot_pack2_bytes",
                         "x86_pmuldq_rdhm", "aot_rdhm"]),
    ("x86_64-linux", 4, ["x86_pmaddwd", "x86_pmaddwd_packed", "aot_pack2_bytes",
                         "x86_pmuldq_rdhm", "aot_rdhm"]),
    # 16 lanes want AVX512BW / AVX512F, which the AVX2 target lacks
    ("x86_64-linux", 16, ["aot_dot2", "aot_dot2p", "aot_pack2_bytes", "aot_rdhm", "aot_rdhm"]),
    ("x86_64-linux-avx512", 16, ["x86_pmaddwd", "x86_pmaddwd_packed", "aot_pack2_bytes",
                                 "x86_pmuldq_rdhm", "aot_rdhm"]),
    # NEON: the lane formulas (compilers make widening multiply-adds of them);
    # AArch64's whole-vector aot_rdhm is SQRDMULH (the scalar one stays)
    ("aarch64-linux", 4, ["aot_dot2", "aot_dot2p", "aot_pack2_bytes", "arm_sqrdmulh",
                          "aot_rdhm"]),
    ("armv7-linux", 4, ["aot_dot2", "aot_dot2p", "aot_pack2_bytes", "aot_rdhm", "aot_rdhm"]),
])
def test_calls_become_the_targets_instructions(target, n, want):
    func = _func(n)
    before = calls(func)
    got = legalize(func, get_target(target))
    assert [fn for fn, _ in calls(got)] == want
    assert calls(func) == before                    # pure
    assert legalize(func, get_target(target)) == got    # deterministic
    assert legalize(got, get_target(target)) == got     # idempotent
    assert dict(got.attrs).get(GCC_X86_SPELLINGS) is (True if "x86" in target else None)


def test_big_endian_keeps_the_pack_formula_and_nothing_changes_the_same_object():
    be = dataclasses.replace(get_target("aarch64-linux"), triple="aarch64_be-unknown-linux-gnu")
    assert not be.little_endian
    func = _func(4)
    assert [fn for fn, _ in calls(legalize(func, be))] == GENERIC
    assert legalize(func, be) is func


def test_c_prints_what_it_is_given():
    """Generic calls print as lane formulas (no x86 builtin in Arm's C); an
    x86 instruction prints its builtin under #if with the formula beside it."""
    func = _func(8)
    generic = emit_c([func], "t").source
    for text in ("__builtin_ia32", "__BYTE_ORDER__", "__x86_64__"):
        assert text not in generic, text
    x86 = emit_c([legalize(func, get_target("x86_64-linux"))], "t").source
    for text in ("#if defined(__AVX2__)", "__builtin_ia32_pmaddwd256", "__builtin_ia32_pmuldq256",
                 "__ORDER_LITTLE_ENDIAN__", "r[k] = x0 * w[2 * k] + x1 * w[2 * k + 1];",
                 "!defined(__clang__) && (defined(__x86_64__)", "r[k] = a[k] < b[k] ? a[k] : b[k];",
                 "aot_i32x8 r = {(int32_t)a[0], (int32_t)a[1]"):
        assert text in x86, text
    arm = emit_c([legalize(_func(4), get_target("aarch64-linux"))], "t").source
    assert "__ORDER_LITTLE_ENDIAN__" in arm and "__builtin_convertvector(a, aot_i32x4)" in arm
    assert "__builtin_ia32" not in arm and "__x86_64__" not in arm


def test_llvm_prints_what_it_is_given():
    """The LLVM backend's pmaddwd comes from the call, not the target: the
    same x86 target gets it only where the pass put it."""
    x86 = get_target("x86_64-linux")
    func = _func(8)
    assert "llvm.x86.avx2.pmadd.wd" not in emit_llvm_ir([func], "t", x86)
    assert "llvm.x86.avx2.pmadd.wd" in emit_llvm_ir([legalize(func, x86)], "t", x86)
    # aot_pack2: the lane formula, aot_pack2_bytes the vector's bytes
    pack = "bitcast <16 x i16>"
    assert pack not in emit_llvm_ir([func], "t", x86)
    assert pack in emit_llvm_ir([legalize(func, x86)], "t", x86)


def test_the_tir_pipeline_runs_it_last():
    from aot.lower.tir_passes import PIPELINE
    assert PIPELINE[-1] == ("legalize", legalize)


def test_the_table_is_the_families_rows_each_in_its_order():
    from aot.isa import arm_dsp, arm_mve, neon, rvv, x86
    from aot.isa.calls import PAIR_PACK_ROWS, QUAD_PACK_ROWS
    families = (x86.ROWS, neon.ROWS, arm_dsp.ROWS, arm_mve.ROWS, rvv.ROWS,
                PAIR_PACK_ROWS + QUAD_PACK_ROWS)
    assert sorted(map(repr, INSTRUCTIONS)) == sorted(repr(r) for f in families for r in f)
    for rows in families:
        assert [r for r in INSTRUCTIONS if r in rows] == list(rows)

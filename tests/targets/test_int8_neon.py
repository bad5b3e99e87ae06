"""int8 on NEON without dotprod (Cortex-A72 / A53, rpi4): the `quads_mull`
accumulator strategy (aot/lower/schedule/strategy.py), aot_dot4s legalized to
arm_smull_dot4 (SMULL, SMULL2, ADDP, SADALP) checked under qemu-aarch64
against numpy at the int16 edges, the fallback to pairs for weights holding
-128, and rpi4 packages bit-exact with tflite-micro.
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import aot
from aot.api import verify
from aot.codegen.c import emit_c
from aot.isa.dots import quad_dot
from aot.isa.neon import paired_quad_dot, pairwise_add, sixteen_dot, widening_mla
from aot.codegen.llvm import emit_llvm_ir
from aot.ir.tir import (Buffer, BufferKind, Const, DType, For, Load, PrimFunc, Store, Var, add, mul,
                        seq)
from aot.lower import lower_graph
from aot.lower.tir_passes.legalize import legalize
from aot.lower.schedule.strategy import QUADS_MULL, int8_accumulator, window_row_accumulator
from support import MODELS
from support.kernels import TARGET, call_names, run_qemu
from support.zoo import conv_model

N = 512         # dot products of 4 lanes each

pytestmark = pytest.mark.skipif(shutil.which("qemu-aarch64") is None,
                                reason="qemu-aarch64 is not installed")


def _run(func: PrimFunc, codegen: str, legalized: bool, calls: set[str], asm: str, tmp_path,
         *inputs: np.ndarray) -> np.ndarray:
    """func's int32 output under qemu-aarch64 for the inputs in order; when
    legalized, first checked to call exactly `calls` and, in C, to spell `asm`."""
    if legalized:
        func = legalize(func, TARGET)
        assert call_names(func) == calls
        assert codegen == "llvm" or asm in emit_c([func], "t").source
    return np.frombuffer(run_qemu(func, codegen, tmp_path, b"".join(a.tobytes() for a in inputs)),
                         np.int32)


def _func() -> PrimFunc:
    """out[4i..] = acc[4i..] + aot_dot4s(q[i], w[16i..]), N times."""
    acc = Buffer("acc", DType("int32"), (4 * N,))
    q = Buffer("q", DType("int32"), (N,))
    w = Buffer("w", DType("int8"), (16 * N,))
    out = Buffer("out", DType("int32"), (4 * N,), BufferKind.OUTPUT)
    i = Var("i", DType("int32"))
    at = mul(i, Const(4))
    body = Store(out, at, quad_dot(Load(acc, at, 4), Load(q, i), Load(w, mul(i, Const(16)), 16),
                                   symmetric=True))
    return PrimFunc("dot4s", (acc, q, w, out), For(i, N, body))


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_smull_dot4_matches_numpy_at_the_int16_edges(codegen, tmp_path):
    func = legalize(_func(), TARGET)
    assert call_names(func) == {"arm_smull_dot4"}
    if codegen == "c":
        c = emit_c([func], "t").source
        assert "smull2 %2.8h, %3.16b, %4.16b" in c and "sadalp %0.4s, %1.8h" in c
    else:
        ir = emit_llvm_ir([func], "t", TARGET)
        assert "llvm.aarch64.neon.smull.v8i16" in ir and "llvm.aarch64.neon.addp.v8i16" in ir
    rng = np.random.default_rng(0)
    acc = rng.integers(-2**24, 2**24, 4 * N).astype(np.int32)
    x = rng.integers(-128, 128, (N, 4)).astype(np.int8)
    w = rng.integers(-127, 128, (N, 16)).astype(np.int8)
    # the extremes every int16 pair sum must hold: -128 x -127 and -128 x 127, all four alike
    x[:64], w[:32], w[32:64] = -128, -127, 127
    x[64:96], w[64:96] = 127, 127
    got = np.frombuffer(run_qemu(func, codegen, tmp_path,
                                  acc.tobytes() + x.tobytes() + w.tobytes()), np.int32)
    want = acc.astype(np.int64) + np.einsum("nkj,nj->nk", w.reshape(N, 4, 4).astype(np.int64),
                                            x.astype(np.int64)).reshape(-1)
    np.testing.assert_array_equal(got, want)


def _mlal_func() -> PrimFunc:
    """out[8i..] = aot_mlal_lo(acc[4i..], x[8i..], w[8i..]), then _hi's 4 lanes."""
    acc = Buffer("acc", DType("int32"), (4 * N,))
    x = Buffer("x", DType("int16"), (8 * N,))
    w = Buffer("w", DType("int16"), (8 * N,))
    out = Buffer("out", DType("int32"), (8 * N,), BufferKind.OUTPUT)
    i = Var("i", DType("int32"))
    a, xv, wv = Load(acc, mul(i, Const(4)), 4), Load(x, mul(i, Const(8)), 8), \
        Load(w, mul(i, Const(8)), 8)
    body = seq(Store(out, mul(i, Const(8)), widening_mla(a, xv, wv, False)),
               Store(out, add(mul(i, Const(8)), Const(4)), widening_mla(a, xv, wv, True)))
    return PrimFunc("mlal", (acc, x, w, out), For(i, N, body))


@pytest.mark.parametrize("codegen", ["c", "llvm"])
@pytest.mark.parametrize("legalized", [False, True], ids=["formula", "smlal"])
def test_widening_mla_matches_numpy(codegen, legalized, tmp_path):
    func = _mlal_func()
    rng = np.random.default_rng(1)
    acc = rng.integers(-2**30, 2**30, 4 * N).astype(np.int32)
    x = rng.integers(-2**15, 2**15, 8 * N).astype(np.int16)
    w = rng.integers(-2**15, 2**15, 8 * N).astype(np.int16)
    x[:8], w[:8] = -2**15, -2**15
    got = _run(func, codegen, legalized, {"arm_smlal_lo", "arm_smlal_hi"},
               "vmlal_high_s16(", tmp_path, acc, x, w)
    prod = x.astype(np.int64).reshape(N, 2, 4) * w.astype(np.int64).reshape(N, 2, 4)
    want = (acc.astype(np.int64).reshape(N, 1, 4) + prod).reshape(-1)
    np.testing.assert_array_equal(got, ((want + 2**31) % 2**32 - 2**31).astype(np.int32))


def _dot4p_func() -> PrimFunc:
    """out[4i..] = aot_addp(aot_dot4p_lo(acc, ..), aot_dot4p_hi(acc, ..)) for
    quads q[2i], q[2i + 1] and weights w[32i..], w[32i + 16..]."""
    acc = Buffer("acc", DType("int32"), (4 * N,))
    q = Buffer("q", DType("int32"), (2 * N,))
    w = Buffer("w", DType("int8"), (32 * N,))
    out = Buffer("out", DType("int32"), (4 * N,), BufferKind.OUTPUT)
    i = Var("i", DType("int32"))
    a = Load(acc, mul(i, Const(4)), 4)
    qs = [Load(q, add(mul(i, Const(2)), Const(s))) for s in (0, 1)]
    ws = [Load(w, add(mul(i, Const(32)), Const(16 * s)), 16) for s in (0, 1)]
    halves = [paired_quad_dot(a, *qs, *ws, high) for high in (False, True)]
    return PrimFunc("dot4p", (acc, q, w, out), For(i, N, Store(out, mul(i, Const(4)),
                                                                pairwise_add(*halves))))


@pytest.mark.parametrize("codegen", ["c", "llvm"])
@pytest.mark.parametrize("legalized", [False, True], ids=["formula", "smlal"])
def test_paired_quad_dot_matches_numpy(codegen, legalized, tmp_path):
    """Two quads' products in SMULL + SMLAL's int16 lanes (weights in
    [-127, 127]), half sums by SADALP, ADDP of the halves: acc twice plus
    the two 4-way dot products."""
    func = _dot4p_func()
    rng = np.random.default_rng(2)
    acc = rng.integers(-2**24, 2**24, 4 * N).astype(np.int32)
    x = rng.integers(-128, 128, (N, 2, 4)).astype(np.int8)
    w = rng.integers(-127, 128, (N, 2, 4, 4)).astype(np.int8)
    x[:64], w[:32], w[32:64] = -128, -127, 127
    got = _run(func, codegen, legalized, {"arm_dot4p_lo", "arm_dot4p_hi", "arm_addp"},
               "smlal2 %1.8h, %4.16b, %5.16b", tmp_path, acc, x, w)
    dots = np.einsum("nsuj,nsj->nu", w.astype(np.int64), x.astype(np.int64)).reshape(-1)
    # each half holds acc's lanes in pairs: ADDP adds acc's pairs into both halves
    a = acc.astype(np.int64).reshape(N, 2, 2).sum(axis=2)
    np.testing.assert_array_equal(got, (np.concatenate([a, a], axis=1).reshape(-1) + dots))


def _dot16_func() -> PrimFunc:
    """out[4i..] = aot_addp of aot_addp's of aot_dot16p(acc, x[16i..],
    w[64i + 16u..]) for the 4 output channels u: acc's lane sums plus each
    channel's 16-deep dot product."""
    acc = Buffer("acc", DType("int32"), (4 * N,))
    x = Buffer("x", DType("int8"), (16 * N,))
    w = Buffer("w", DType("int8"), (64 * N,))
    out = Buffer("out", DType("int32"), (4 * N,), BufferKind.OUTPUT)
    i = Var("i", DType("int32"))
    a, xv = Load(acc, mul(i, Const(4)), 4), Load(x, mul(i, Const(16)), 16)
    p = [sixteen_dot(a, xv, Load(w, add(mul(i, Const(64)), Const(16 * u)), 16)) for u in range(4)]
    return PrimFunc("dot16", (acc, x, w, out), For(i, N, Store(out, mul(i, Const(4)), pairwise_add(
        pairwise_add(p[0], p[1]), pairwise_add(p[2], p[3])))))


@pytest.mark.parametrize("codegen", ["c", "llvm"])
@pytest.mark.parametrize("legalized", [False, True], ids=["formula", "smlal2"])
def test_sixteen_dot_matches_numpy_at_the_int16_edges(codegen, legalized, tmp_path):
    """16 products of one output channel in SMULL + SMLAL2's int16 lanes
    (weights in [-127, 127]), SADALP into 4 partial sums, folded by ADDP."""
    func = _dot16_func()
    rng = np.random.default_rng(3)
    acc = rng.integers(-2**24, 2**24, 4 * N).astype(np.int32)
    x = rng.integers(-128, 128, (N, 16)).astype(np.int8)
    w = rng.integers(-127, 128, (N, 4, 16)).astype(np.int8)
    x[:64], w[:32], w[32:64] = -128, -127, 127
    x[64:96], w[64:96] = 127, 127
    got = _run(func, codegen, legalized, {"arm_dot16p", "arm_addp"},
               "smlal2 %1.8h, %2.16b, %3.16b", tmp_path, acc, x, w)
    dots = np.einsum("nuj,nj->nu", w.astype(np.int64), x.astype(np.int64))
    # every channel's partials start from acc: the folds add all of acc's lanes
    want = acc.astype(np.int64).reshape(N, 4).sum(axis=1, keepdims=True) + dots
    np.testing.assert_array_equal(got, ((want + 2**31) % 2**32 - 2**31).reshape(-1))


def test_strategy_on_arm_cores_without_dotprod():
    assert int8_accumulator(TARGET) == QUADS_MULL
    assert window_row_accumulator(TARGET) == QUADS_MULL
    assert not QUADS_MULL.fits(np.array([-128, 5])) and QUADS_MULL.fits(np.array([-127, 127]))


def test_weights_holding_minus_128_fall_back_to_pairs():
    """SMULL's int16 pair sums would overflow on -128 x -128: such a conv
    keeps the pairs strategy; one without -128 takes arm_smull_dot4."""
    shapes = ([1, 6, 5, 8], [16, 3, 3, 8], [1, 6, 5, 16], dict(Padding=0, StrideH=1, StrideW=1))
    used = []
    for floor in (-127, -128):
        g = conv_model("CONV_2D", *shapes, zp_in=-128, seed=7)
        name = next(n for n, v in g.constants.items() if v.dtype == np.int8 and v.ndim == 4)
        w = g.constants[name].copy()
        w.flat[0] = floor
        g = g.replace(constants={**g.constants, name: w})
        used.append({c for k in lower_graph(g, TARGET) for c in call_names(k.func)})
    assert "arm_smull_dot4" in used[0] and "aot_dot2p" not in used[0]
    assert "arm_smull_dot4" not in used[1] and "aot_dot2p" in used[1]


# every shared int8 model: each must stay bit-exact with tflite-micro on the Pis' cores
INT8 = sorted(p.stem for p in MODELS.glob("*int8*.tflite"))


@pytest.mark.parametrize("codegen, model", [("c", m) for m in INT8]
                         + [("llvm", "mlperf_kws_dscnn_int8")])
def test_rpi4_package_bit_exact_under_emulated_cortex_a72(codegen, model, tmp_path):
    """An rpi4 package (quads_mull) runs under qemu-aarch64 -cpu cortex-a72
    and matches tflite-micro bit for bit."""
    path = MODELS / f"{model}.tflite"
    pkg = tmp_path / "pkg"
    aot.package(path, board="rpi4", codegen=codegen, out_dir=pkg)
    if codegen == "c" and model.startswith("mlperf_"):   # the others may take none of these
        kernels = "\n".join(p.read_text() for p in (pkg / "src").glob("*kernels*.c"))
        if model == "mlperf_ad_fcae_int8":   # FC layers: quads in pairs, SMLAL
            assert "arm_dot4p_hi_i32x4(" in kernels and "arm_addp_i32x4(" in kernels
        else:   # 16-deep convs take 16 channels per output channel, SMLAL2
            assert "arm_dot16p_i32x4(" in kernels and "arm_addp_i32x4(" in kernels, model
        if model in ("mlperf_kws_dscnn_int8", "mlperf_vww_mbv1_int8"):   # depthwise: SMLAL2
            assert "arm_smlal_hi_i32x4(" in kernels, model
    out = verify(pkg, board="qemu-aarch64", source=path)
    assert out["reference"] == "tflite-micro", out
    assert out["ok"] and all(r["max_abs_err"] == 0.0 for r in out["outputs"]), out

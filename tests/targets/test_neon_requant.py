"""aot_rdhm / aot_rdbpot / aot_srshl on int32 x 4 legalized for AArch64 NEON
(arm_sqrdmulh, arm_rdbpot, arm_srshl: aot/isa/neon.py NeonFixedPoint), run under
qemu-aarch64 from both code generators against aot.ops.quant.qmath's reference
(the TFLite rules): edge values, every exponent 0..31, ties of both signs."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from aot.isa.neon import saturating_narrow
from aot.ir.tir import Bin, Buffer, BufferKind, Call, Const, DType, For, Load, PrimFunc, Store, Var
from aot.lower.tir_passes.legalize import legalize
from aot.ops.quant import qmath as ref
from aot.targets import get_target
from support.kernels import I32, N, _func, _inputs, call_names, run_qemu

TARGET = get_target("aarch64-linux")

pytestmark = pytest.mark.skipif(shutil.which("qemu-aarch64") is None,
                                reason="qemu-aarch64 is not installed")


@pytest.mark.parametrize("lanes", [4, 16])
@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_neon_fixed_point_matches_the_reference(codegen, lanes, tmp_path):
    """4 lanes: one register; 16: the instructions on each quarter."""
    func = legalize(_func(lanes), TARGET)
    assert {"arm_sqrdmulh", "arm_rdbpot"} <= call_names(func)
    a, m, e = _inputs(np.random.default_rng(0))
    out = run_qemu(func, codegen, tmp_path, a.tobytes() + m.tobytes() + e.tobytes())
    got = np.frombuffer(out, np.int32)
    np.testing.assert_array_equal(got[:N], ref.srdhm(a.astype(np.int64), m.astype(np.int64)))
    np.testing.assert_array_equal(got[N:], ref.rdbpot(a.astype(np.int64), e.astype(np.int64)))


@pytest.mark.parametrize("lanes,legalized", [(4, True), (16, True), (4, False)],
                         ids=["srshl", "srshl16", "formula"])
@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_rounding_shift_matches_srshl(codegen, lanes, legalized, tmp_path):
    """aot_srshl(x, -e) = floor((x + 2^(e-1)) / 2^e), e in 0..31, ties going
    up, no overflow at the int32 ends: SRSHL (arm_srshl) and the formula."""
    a, s = Buffer("a", I32, (N,)), Buffer("s", I32, (N,))
    out = Buffer("out", I32, (N,), BufferKind.OUTPUT)
    i = Var("i")
    v = I32.with_lanes(lanes)
    func = PrimFunc("srshl", (a, s, out), For(i, N, Store(out, i, Call(
        "aot_srshl", (Load(a, i, lanes), Load(s, i, lanes)), v)), step=lanes))
    if legalized:
        func = legalize(func, TARGET)
    assert call_names(func) == {"arm_srshl" if legalized else "aot_srshl"}
    x, _, e = _inputs(np.random.default_rng(2))
    got = np.frombuffer(run_qemu(func, codegen, tmp_path, x.tobytes() + (-e).tobytes()),
                        np.int32)
    e64 = e.astype(np.int64)
    want = (x.astype(np.int64) + np.where(e64 > 0, 1 << np.maximum(e64 - 1, 0), 0)) >> e64
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("legalized", [True, False], ids=["sqxtn", "formula"])
@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_saturating_narrow_clamps_four_vectors_to_int8(codegen, legalized, tmp_path):
    """aot_qnarrow16 (the formula) and arm_qnarrow16 (SQXTN, SQXTN2 twice):
    four int32 x 4 into int8 x 16 in order, each lane clamped to int8."""
    a = Buffer("a", I32, (N,))
    out = Buffer("out", DType("int8"), (N,), BufferKind.OUTPUT)
    i = Var("i")
    quarters = tuple(Load(a, Bin("+", i, Const(4 * k)), 4) for k in range(4))
    func = PrimFunc("narrow", (a, out), For(i, N, Store(out, i, saturating_narrow(*quarters)),
                                            step=16))
    if legalized:
        func = legalize(func, TARGET)
    assert call_names(func) == {"arm_qnarrow16" if legalized else "aot_qnarrow16"}
    rng = np.random.default_rng(1)
    x = rng.integers(-300, 300, N)
    x[:8] = [-2**31, 2**31 - 1, -129, -128, 127, 128, 0, -1]
    x[N // 2:] = rng.integers(-2**31, 2**31, N // 2)
    got = np.frombuffer(run_qemu(func, codegen, tmp_path, x.astype(np.int32).tobytes()), np.int8)
    np.testing.assert_array_equal(got, np.clip(x, -128, 127))

"""aot_rdhm / aot_rdbpot on int32 x 4 legalized for AArch64 NEON (arm_sqrdmulh,
arm_rdbpot: aot/codegen/intrinsics.py NeonFixedPoint), run under
qemu-aarch64 from both code generators against aot.ops.qmath's reference
(the TFLite rules): edge values, every exponent 0..31, ties of both signs."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from aot.ir.tir import (Bin, Buffer, BufferKind, Call, Const, DType, For, Load, PrimFunc, Store,
                        Var, seq)
from aot.lower.legalize import legalize
from aot.ops import qmath as ref
from aot.targets import get_target
from test_int8_neon import run_qemu
from test_legalize import call_names

TARGET = get_target("aarch64-linux")
N = 4096
I32, I4 = DType("int32"), DType("int32", 4)

pytestmark = pytest.mark.skipif(shutil.which("qemu-aarch64") is None,
                                reason="qemu-aarch64 is not installed")


def _func() -> PrimFunc:
    """out[i] = aot_rdhm(a[i], m[i]), out[N + i] = aot_rdbpot(a[i], e[i]), 4 lanes at a time."""
    a, m, e = (Buffer(n, I32, (N,)) for n in "ame")
    out = Buffer("out", I32, (2 * N,), BufferKind.OUTPUT)
    i = Var("i")
    return PrimFunc("fixed_point", (a, m, e, out), For(i, N, seq(
        Store(out, i, Call("aot_rdhm", (Load(a, i, 4), Load(m, i, 4)), I4)),
        Store(out, Bin("+", i, Const(N)), Call("aot_rdbpot", (Load(a, i, 4), Load(e, i, 4)),
                                                I4))), step=4))


def _inputs(rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    edges = np.array([0, 1, -1, 2**31 - 1, -2**31, -2**31 + 1, 2**30, -2**30, 3, -3],
                     np.int64)
    e = np.tile(np.arange(32), N // 32)
    a = rng.integers(-2**31, 2**31, N)
    a[:32 * len(edges)] = np.repeat(edges, 32)
    # ties: x = k 2^e + 2^(e-1), both signs (RDBPOT rounds them away from zero)
    k = rng.integers(-2**20, 2**20, N)
    ties = k * (1 << e) + np.where(e > 0, 1 << np.maximum(e - 1, 0), 0)
    part = slice(N // 2, N // 2 + N // 4)
    a[part] = np.clip(ties[part], -2**31, 2**31 - 1)
    # multipliers as quantize_multiplier makes them (never INT32_MIN), and edges
    m = rng.integers(2**30, 2**31, N) * rng.choice([-1, 1], N)
    m[:8] = [2**31 - 1, -2**31 + 1, 1, -1, 0, 2**30, -2**30, 12345]
    return a.astype(np.int32), m.astype(np.int32), e.astype(np.int32)


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_neon_fixed_point_matches_the_reference(codegen, tmp_path):
    func = legalize(_func(), TARGET)
    assert {"arm_sqrdmulh", "arm_rdbpot"} <= call_names(func)
    a, m, e = _inputs(np.random.default_rng(0))
    out = run_qemu(func, codegen, tmp_path, a.tobytes() + m.tobytes() + e.tobytes())
    got = np.frombuffer(out, np.int32)
    np.testing.assert_array_equal(got[:N], ref.srdhm(a.astype(np.int64), m.astype(np.int64)))
    np.testing.assert_array_equal(got[N:], ref.rdbpot(a.astype(np.int64), e.astype(np.int64)))

"""aot_rdhm / aot_rdbpot on int32 x 4 legalized for AArch64 NEON (arm_sqrdmulh,
arm_rdbpot: aot/isa/neon.py NeonFixedPoint), run under
qemu-aarch64 from both code generators against aot.ops.quant.qmath's reference
(the TFLite rules): edge values, every exponent 0..31, ties of both signs."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from aot.lower.tir_passes.legalize import legalize
from aot.ops.quant import qmath as ref
from aot.targets import get_target
from support.kernels import N, _func, _inputs, call_names, run_qemu

TARGET = get_target("aarch64-linux")

pytestmark = pytest.mark.skipif(shutil.which("qemu-aarch64") is None,
                                reason="qemu-aarch64 is not installed")


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_neon_fixed_point_matches_the_reference(codegen, tmp_path):
    func = legalize(_func(), TARGET)
    assert {"arm_sqrdmulh", "arm_rdbpot"} <= call_names(func)
    a, m, e = _inputs(np.random.default_rng(0))
    out = run_qemu(func, codegen, tmp_path, a.tobytes() + m.tobytes() + e.tobytes())
    got = np.frombuffer(out, np.int32)
    np.testing.assert_array_equal(got[:N], ref.srdhm(a.astype(np.int64), m.astype(np.int64)))
    np.testing.assert_array_equal(got[N:], ref.rdbpot(a.astype(np.int64), e.astype(np.int64)))

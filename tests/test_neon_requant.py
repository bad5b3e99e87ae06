"""aot_rdhm / aot_rdbpot on int32 x 4 legalized for AArch64 NEON (arm_sqrdmulh,
arm_rdbpot: aot/codegen/intrinsics.py NeonFixedPoint), run under
qemu-aarch64 from both code generators against aot.ops.qmath's reference
(the TFLite rules): edge values, every exponent 0..31, ties of both signs."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from aot.codegen.c import emit_c
from aot.codegen.llvm import emit_object
from aot.ir.tir import (Bin, Buffer, BufferKind, Call, Const, DType, For, Load, PrimFunc, Store,
                        Var, seq, stmt_exprs, walk_expr, walk_stmt)
from aot.lower.legalize import legalize
from aot.ops import qmath as ref
from aot.targets import get_target

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


def _calls(func: PrimFunc) -> set[str]:
    return {x.fn for s in walk_stmt(func.body) for e in stmt_exprs(s) for x in walk_expr(e)
            if isinstance(x, Call)}


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


MAIN = r"""
#include <stdint.h>
#include <stdio.h>
%(prototype)s
static int32_t a[%(n)d], m[%(n)d], e[%(n)d], out[2 * %(n)d];
int main(void) {
    if (fread(a, 4, %(n)d, stdin) != %(n)d || fread(m, 4, %(n)d, stdin) != %(n)d
            || fread(e, 4, %(n)d, stdin) != %(n)d) {
        return 2;
    }
    %(fn)s(a, m, e, out);
    return fwrite(out, 4, 2 * %(n)d, stdout) == 2 * %(n)d ? 0 : 3;
}
"""


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_neon_fixed_point_matches_the_reference(codegen, tmp_path):
    func = legalize(_func(), TARGET)
    assert {"arm_sqrdmulh", "arm_rdbpot"} <= _calls(func)
    src = emit_c([func], "t")
    (tmp_path / "main.c").write_text(MAIN % {"n": N, "fn": src.symbols[func.name],
                                             "prototype": src.prototypes[0]})
    if codegen == "c":
        kernel = tmp_path / "k.c"
        kernel.write_text(src.source)
    else:
        kernel = tmp_path / "k.o"
        kernel.write_bytes(emit_object([func], "t", TARGET))
    exe = tmp_path / "t"
    subprocess.run([TARGET.cc, *TARGET.cflags, *TARGET.ldflags, "-static", "-o", str(exe),
                    str(tmp_path / "main.c"), str(kernel)], check=True)
    a, m, e = _inputs(np.random.default_rng(0))
    run = subprocess.run(["qemu-aarch64", str(exe)], input=a.tobytes() + m.tobytes() + e.tobytes(),
                         capture_output=True, check=True, timeout=60)
    got = np.frombuffer(run.stdout, np.int32)
    np.testing.assert_array_equal(got[:N], ref.srdhm(a.astype(np.int64), m.astype(np.int64)))
    np.testing.assert_array_equal(got[N:], ref.rdbpot(a.astype(np.int64), e.astype(np.int64)))

"""int8 on NEON without dotprod (Cortex-A72 / A53, rpi4): the `quads_mull`
accumulator strategy (aot/lower/strategy.py), aot_dot4s legalized to
arm_smull_dot4 (SMULL, SMULL2, ADDP, SADALP) checked under qemu-aarch64
against numpy at the int16 edges, the fallback to pairs for weights holding
-128, and rpi4 packages bit-exact with tflite-micro.
"""
from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

import aot
from aot.api import verify
from aot.codegen.c import emit_c
from aot.codegen.intrinsics import quad_dot
from aot.codegen.llvm import emit_llvm_ir, emit_object
from aot.ir.tir import (Buffer, BufferKind, Call, Const, DType, For, Load, PrimFunc, Store, Var,
                        mul, stmt_exprs, walk_expr, walk_stmt)
from aot.lower import lower_graph
from aot.lower.legalize import legalize
from aot.lower.strategy import QUADS_MULL, int8_accumulator, window_row_accumulator
from aot.targets import get_target
from conftest import MODELS
from test_lower_int8 import conv_model

TARGET = get_target("aarch64-linux")
N = 512         # dot products of 4 lanes each

pytestmark = pytest.mark.skipif(shutil.which("qemu-aarch64") is None,
                                reason="qemu-aarch64 is not installed")


def _calls(func: PrimFunc) -> set[str]:
    return {x.fn for s in walk_stmt(func.body) for e in stmt_exprs(s) for x in walk_expr(e)
            if isinstance(x, Call)}


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


MAIN = r"""
#include <stdint.h>
#include <stdio.h>
%(prototype)s
static int32_t acc[4 * %(n)d], q[%(n)d], out[4 * %(n)d];
static int8_t w[16 * %(n)d];
int main(void) {
    if (fread(acc, 4, 4 * %(n)d, stdin) != 4 * %(n)d || fread(q, 4, %(n)d, stdin) != %(n)d
            || fread(w, 1, 16 * %(n)d, stdin) != 16 * %(n)d) {
        return 2;
    }
    %(fn)s(acc, q, w, out);
    return fwrite(out, 4, 4 * %(n)d, stdout) == 4 * %(n)d ? 0 : 3;
}
"""


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_smull_dot4_matches_numpy_at_the_int16_edges(codegen, tmp_path):
    func = legalize(_func(), TARGET)
    assert _calls(func) == {"arm_smull_dot4"}
    src = emit_c([func], "t")
    if codegen == "c":
        assert "vpadalq_s16(" in src.source and "vmull_high_s8(" in src.source
        kernel = tmp_path / "k.c"
        kernel.write_text(src.source)
    else:
        ir = emit_llvm_ir([func], "t", TARGET)
        assert "llvm.aarch64.neon.smull.v8i16" in ir and "llvm.aarch64.neon.addp.v8i16" in ir
        kernel = tmp_path / "k.o"
        kernel.write_bytes(emit_object([func], "t", TARGET))
    (tmp_path / "main.c").write_text(MAIN % {"n": N, "fn": src.symbols[func.name],
                                             "prototype": src.prototypes[0]})
    exe = tmp_path / "t"
    subprocess.run([TARGET.cc, *TARGET.cflags, *TARGET.ldflags, "-static", "-o", str(exe),
                    str(tmp_path / "main.c"), str(kernel)], check=True)
    rng = np.random.default_rng(0)
    acc = rng.integers(-2**24, 2**24, 4 * N).astype(np.int32)
    x = rng.integers(-128, 128, (N, 4)).astype(np.int8)
    w = rng.integers(-127, 128, (N, 16)).astype(np.int8)
    # the extremes every int16 pair sum must hold: -128 x -127 and -128 x 127, all four alike
    x[:64], w[:32], w[32:64] = -128, -127, 127
    x[64:96], w[64:96] = 127, 127
    run = subprocess.run(["qemu-aarch64", str(exe)],
                         input=acc.tobytes() + x.tobytes() + w.tobytes(),
                         capture_output=True, check=True, timeout=60)
    got = np.frombuffer(run.stdout, np.int32)
    want = acc.astype(np.int64) + np.einsum("nkj,nj->nk", w.reshape(N, 4, 4).astype(np.int64),
                                            x.astype(np.int64)).reshape(-1)
    np.testing.assert_array_equal(got, want)


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
        used.append({c for k in lower_graph(g, TARGET) for c in _calls(k.func)})
    assert "arm_smull_dot4" in used[0] and "aot_dot2p" not in used[0]
    assert "arm_smull_dot4" not in used[1] and "aot_dot2p" in used[1]


INT8 = ["mlperf_ic_resnet8_int8", "mlperf_kws_dscnn_int8", "mlperf_vww_mbv1_int8",
        "mlperf_ad_fcae_int8"]


@pytest.mark.parametrize("codegen, model", [("c", m) for m in INT8]
                         + [("llvm", "mlperf_kws_dscnn_int8")])
def test_rpi4_package_bit_exact_under_emulated_cortex_a72(codegen, model, tmp_path):
    """An rpi4 package (quads_mull) runs under qemu-aarch64 -cpu cortex-a72
    and matches tflite-micro bit for bit."""
    path = MODELS / f"{model}.tflite"
    pkg = tmp_path / "pkg"
    aot.package(path, board="rpi4", codegen=codegen, out_dir=pkg)
    if codegen == "c":
        kernels = "\n".join(p.read_text() for p in (pkg / "src").glob("*kernels*.c"))
        assert "arm_smull_dot4_i32x4(" in kernels, model
        if model != "mlperf_ad_fcae_int8":   # 16-deep convs take the quads by lane
            assert re.search(r"arm_smull_dot4_i32x4\(\w+, \w+\[3\], \w+\)", kernels), model
    out = verify(pkg, board="qemu-aarch64", source=path)
    assert out["reference"] == "tflite-micro", out
    assert out["ok"] and all(r["max_abs_err"] == 0.0 for r in out["outputs"]), out

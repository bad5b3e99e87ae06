"""The Helium (MVE) int8 kernels (aot/lower/kernels/cortex_m/mve.py, aot/isa/arm_mve.py).

- On the host, a scalar target given "dsp" and "mve" gets the MVE kernels
  with aot_dot16's generic formula (legalization makes VMLADAVA only on
  Arm): 1x1 convolutions, dense convolutions and fully connected layers
  over tile remainders, borders and zero points, C and LLVM, bit for bit
  against the interpreter; depths that are not 16k keep the DSP kernels.
- The formula against the instruction's definition on edge vectors.
- Depthwise convolutions over 16 channels in int32 x 4 vectors (aot_widen4),
  the rest in the DSP quads and singles, on the same host.
- On the Cortex-M55 the legalized calls are vmladavaq_s8 and vldrbq_s32 in
  C and VMLADAVA in LLVM's assembly; kws bit-exact with tflite-micro on
  mps3-an547 through both, in fewer instructions than on the M4; every
  shared int8 model bit-exact there (C; ic and vww through LLVM too).
- The vector requantization's fixed point legalized for MVE (VQRDMULH;
  VQADD, VRSHL) run on mps3-an547 against TFLite's rules, C and LLVM.
"""
from __future__ import annotations

import ctypes
import dataclasses
import subprocess

import numpy as np
import pytest

from aot.api import bench, package, verify
from aot.isa.arm_mve import INT8X16, dot16, widen4
from aot.ir.tir import (INT32, Buffer, BufferKind, Const, DType, For, Load, PrimFunc, Store, Var,
                        mul, seq)
from aot.lower import Kernel, lower_graph
from aot.testing import kernels as testing
from aot.lower.tir_passes.legalize import legalize
from aot.testing.kernels import compile_kernels, host_target
from aot.targets import get_target
from support import MODELS, shared_models, zoo
from support.kernels import call_names
from support.zoo import check_graphs, conv_model, fc_model


def mve_host():
    """The host as a scalar core with the DSP extension and Helium."""
    return dataclasses.replace(host_target(), vector_bits=0,
                               declared_features=frozenset({"dsp", "mve"}))


def _graphs():
    pointwise = dict(Padding=0, StrideH=1, StrideW=1)
    return [
        # 2 x 4 tiles with a pixel and 3 channels left over, two vectors unrolled
        conv_model("CONV_2D", [1, 3, 5, 32], [7, 1, 1, 32], [1, 3, 5, 7],
                   dict(pointwise, FusedActivationFunction=1), zp_in=-128, seed=1),
        # 6 vectors (a loop), two images, per-tensor
        conv_model("CONV_2D", [2, 2, 3, 96], [4, 1, 1, 96], [2, 2, 3, 4], pointwise,
                   per_channel=False, zp_in=77, seed=2),
        # dense: SAME borders (zero-point vectors), stride 2 and dilation, VALID
        conv_model("CONV_2D", [1, 6, 7, 16], [5, 3, 3, 16], [1, 6, 7, 5],
                   dict(Padding=0, StrideH=1, StrideW=1, FusedActivationFunction=1), zp_in=-3,
                   seed=7),
        conv_model("CONV_2D", [2, 9, 10, 32], [6, 3, 2, 32], [2, 5, 5, 6],
                   dict(Padding=0, StrideH=2, StrideW=2, DilationHFactor=2), zp_in=100, seed=8),
        conv_model("CONV_2D", [1, 5, 6, 16], [9, 2, 3, 16], [1, 4, 4, 9],
                   dict(Padding=1, StrideH=1, StrideW=1), per_channel=False, zp_in=-128, seed=9),
        # depth 8 over 5 channels: the DSP kernels
        conv_model("CONV_2D", [1, 3, 3, 8], [5, 1, 1, 8], [1, 3, 3, 5], pointwise, seed=3),
        fc_model(True, False, x_shape=(3, 2, 48), units=7),        # rows across dims
        fc_model(False, False, x_shape=(1, 64), zp_in=-128, act=0, units=2),
        # depthwise: 16 channels in vectors, then a quad and 2 singles; SAME
        # borders (zero-point vectors), stride 2 and dilation, a batch
        conv_model("DEPTHWISE_CONV_2D", [1, 7, 5, 26], [1, 3, 3, 26], [1, 7, 5, 26],
                   dict(Padding=0, StrideH=1, StrideW=1, DepthMultiplier=1,
                        FusedActivationFunction=1), zp_in=-128, seed=4),
        conv_model("DEPTHWISE_CONV_2D", [2, 9, 8, 32], [1, 3, 3, 32], [2, 5, 4, 32],
                   dict(Padding=0, StrideH=2, StrideW=2, DepthMultiplier=1), zp_in=5, seed=5),
        conv_model("DEPTHWISE_CONV_2D", [1, 10, 7, 16], [1, 3, 2, 16], [1, 6, 6, 16],
                   dict(Padding=1, StrideH=1, StrideW=1, DepthMultiplier=1, DilationHFactor=2),
                   bias=False, zp_in=127, seed=6),
        # output channels along the vectors (depth not 16k): 16 + 4 channels,
        # SAME with stride 2 (3/4 inside: tested terms), a first layer mostly
        # border (a padded copy), a 1x1 over 8 channels
        conv_model("CONV_2D", [1, 9, 8, 3], [20, 3, 3, 3], [1, 5, 4, 20],
                   dict(Padding=0, StrideH=2, StrideW=2, FusedActivationFunction=3), zp_in=-128,
                   seed=10),
        conv_model("CONV_2D", [2, 13, 6, 1], [16, 10, 4, 1], [2, 7, 3, 16],
                   dict(Padding=0, StrideH=2, StrideW=2, FusedActivationFunction=1), zp_in=-7,
                   seed=13),
        conv_model("CONV_2D", [1, 3, 5, 8], [8, 1, 1, 8], [1, 3, 5, 8], pointwise, zp_in=9,
                   seed=14),
    ]


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_mve_kernels_bit_exact_on_an_mve_host(codegen, tmp_path, monkeypatch):
    monkeypatch.setattr(testing, "host_target", mve_host)
    monkeypatch.setattr(zoo, "host_target", mve_host)      # run_llvm's
    graphs = _graphs()
    calls = [set().union(*(call_names(k.func) for k in lower_graph(g, mve_host()))) for g in graphs]
    assert all("aot_dot16" in c for c in calls[:5] + calls[6:8]), calls
    # a 1x1 and a dense tile's 4 channels requantized as one vector; FC's one by one
    assert "aot_lanes4" in calls[0] and "aot_lanes4" in calls[2], calls
    assert "aot_lanes4" not in calls[6], calls[6]
    assert "aot_dot16" not in calls[5] and "aot_smlad" in calls[5], calls[5]
    assert all("aot_widen4" in c and "aot_smlad" not in c for c in calls[8:]), calls
    assert {"aot_smlabb", "aot_widen4"} <= calls[8], calls[8]
    check_graphs(graphs, codegen=codegen, tmp_path=tmp_path)


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_dot16_formula_is_the_instruction(codegen):
    """-128 x -128 in every lane, 127 x -128, sums that wrap int32 as
    VMLADAVA's accumulator does, and random vectors."""
    rng = np.random.default_rng(0)
    n = 40
    a = rng.integers(-128, 128, (n, 16)).astype(np.int8)
    b = rng.integers(-128, 128, (n, 16)).astype(np.int8)
    a[0], b[0] = -128, -128
    a[1], b[1] = 127, -128
    a[2], b[2] = -128, 127
    acc = rng.integers(-2**31, 2**31, n).astype(np.int32)
    acc[:4] = [2**31 - 1, -2**31, 2**31 - 1 - 16 * 16384 + 1, 0]
    a[3], b[3] = 1, 1
    i = Var("i")
    xa, xb = (Buffer(k, DType("int8"), (16 * n,)) for k in "ab")
    c = Buffer("c", INT32, (n,))
    out = Buffer("out", INT32, (n,), BufferKind.OUTPUT)
    at = mul(i, Const(16))
    body = Store(out, i, dot16(Load(c, i), Load(xa, at, 16), Load(xb, at, 16)))
    func = legalize(PrimFunc("dot16", (xa, xb, c, out), For(i, n, body)), mve_host())
    lib, symbols = compile_kernels([Kernel(func, (), None)], codegen, target=mve_host())
    got = np.zeros(n, np.int32)
    getattr(lib, symbols["dot16"])(*(v.ctypes.data_as(ctypes.c_void_p) for v in (a, b, acc, got)))
    want = (acc.astype(np.int64) + (a.astype(np.int64) * b).sum(axis=1)) & 0xFFFFFFFF
    assert got.tolist() == want.astype(np.uint32).view(np.int32).tolist()


def test_legalize_makes_vmladava_and_vldrb_only_with_mve():
    x = Buffer("x", DType("int8"), (16,))
    out = Buffer("out", INT32, (1,), BufferKind.OUTPUT)
    wide = Buffer("wide", INT32, (4,), BufferKind.OUTPUT)
    func = PrimFunc("f", (x, out, wide), seq(
        Store(out, Const(0), dot16(Const(0), Load(x, Const(0), 16), Load(x, Const(0), 16))),
        Store(wide, Const(0), widen4(Load(x, Const(4), 4)))))
    assert call_names(legalize(func, get_target("cortex-m55"))) == {"arm_vmladava", "arm_vldrb_s32"}
    for name in ("cortex-m4", "aarch64-linux"):
        assert call_names(legalize(func, get_target(name))) == {"aot_dot16", "aot_widen4"}, name
    assert dot16(Const(0), Load(x, Const(0), 16), Load(x, Const(0), 16)).dtype == INT32
    assert INT8X16.lanes == 16


def test_the_m55_runs_vmladava_bit_exact_and_beats_the_m4(tmp_path):
    """kws int8 on mps3-an547 against tflite-micro through the C and the LLVM
    kernels; the C calls vmladavaq_s8, LLVM's object has VMLADAVA; fewer
    instructions per inference than the M4 (exact QEMU counts)."""
    kws = MODELS / "mlperf_kws_dscnn_int8.tflite"
    for codegen in ("c", "llvm"):
        out = verify(kws, board="mps3-an547", codegen=codegen)
        assert out["reference"] == "tflite-micro" and out["ok"], out
        assert all(r["max_abs_err"] == 0 for r in out["outputs"]), out
    counts = {}
    for board, codegen in (("mps3-an547", "c"), ("mps2-an386", "c"), ("mps3-an547", "llvm")):
        pkg = tmp_path / f"{board}-{codegen}"
        package(kws, board=board, codegen=codegen, out_dir=pkg)
        counts[board, codegen] = bench(pkg, board=board, warmup=0, repeat=1)["median_instructions"]
    source = "".join(p.read_text() for p in (tmp_path / "mps3-an547-c" / "src").glob("*.c"))
    assert "vmladavaq_s8(" in source and "vldrbq_s32(" in source
    lib = next((tmp_path / "mps3-an547-llvm" / "lib").glob("lib*.a"))
    # binutils 2.40's objdump decodes VMLADAVA as a coprocessor instruction;
    # llvm-objdump prints it as its alias VMLAVA
    dump = subprocess.run(["llvm-objdump", "-d", "--mattr=+mve", str(lib)],
                          capture_output=True, text=True, check=True).stdout
    assert "vmlava.s8" in dump or "vmladava.s8" in dump
    # kws: 6.56 M on the M4, 3.74 M on the M55 when this was written
    assert counts["mps3-an547", "c"] < 0.7 * counts["mps2-an386", "c"], counts
    assert counts["mps3-an547", "llvm"] < 0.7 * counts["mps2-an386", "c"], counts


INT8 = [p for p in shared_models("*.tflite") if "_int8" in p.stem]
LLVM_TOO = ("mlperf_ic_resnet8_int8", "mlperf_vww_mbv1_int8")


@pytest.mark.parametrize("model", INT8, ids=[p.stem for p in INT8])
def test_shared_int8_models_are_bit_exact_on_the_m55(model):
    for codegen in ("c", "llvm") if model.stem in LLVM_TOO else ("c",):
        out = verify(model, board="mps3-an547", codegen=codegen)
        assert out["reference"] == "tflite-micro" and out["ok"], (codegen, out)
        assert all(r["max_abs_err"] == 0 for r in out["outputs"]), (codegen, out)


M55_MAIN = r"""
#include <stdint.h>
#include <stdio.h>
%(prototype)s
%(data)s
static int32_t out[2 * %(n)d];
int main(void) {
    int bad = 0;
    %(fn)s(a, m, e, out);
    for (int i = 0; i < 2 * %(n)d; ++i) {
        if (out[i] != want[i] && bad++ == 0) {
            printf("%%d: %%ld, want %%ld\n", i, (long)out[i], (long)want[i]);
        }
    }
    return bad > 100 ? 100 : bad;
}
"""


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_mve_fixed_point_matches_the_reference_on_the_m55(codegen, tmp_path):
    """aot_rdhm / aot_rdbpot on int32 x 4 legalized for the M55 (VQRDMULH;
    VQADD of the fixup, VRSHL) run on mps3-an547 against aot.ops.quant.qmath's
    reference (TFLite's rules): the edges (INT32_MIN, INT32_MAX, 0, +-1),
    every exponent 0..31, ties of both signs (test_neon_requant's inputs)."""
    from pathlib import Path

    from aot.codegen.c import emit_c
    from aot.codegen.llvm import emit_object
    from aot.ops.quant import qmath as ref
    from support.kernels import N, _func, _inputs
    target = get_target("cortex-m55")
    func = legalize(_func(), target)
    assert {"mve_vqrdmulh", "mve_rdbpot"} <= call_names(func)
    src = emit_c([func], "t")
    a, m, e = _inputs(np.random.default_rng(0))
    want = np.concatenate([ref.srdhm(a.astype(np.int64), m.astype(np.int64)),
                           ref.rdbpot(a.astype(np.int64), e.astype(np.int64))])
    data = "\n".join(f"static const int32_t {name}[] = {{{', '.join(map(str, v.tolist()))}}};"
                     for name, v in (("a", a), ("m", m), ("e", e), ("want", want)))
    (tmp_path / "main.c").write_text(M55_MAIN % {"n": N, "fn": src.symbols[func.name],
                                                 "prototype": src.prototypes[0], "data": data})
    if codegen == "c":
        kernel = tmp_path / "k.c"
        kernel.write_text(src.source)
        assert "vqrdmulhq_s32" in src.source and "vrshlq_s32" in src.source
    else:
        kernel = tmp_path / "k.o"
        kernel.write_bytes(emit_object([func], "t", target))
    runtime = Path(__file__).resolve().parents[2] / "runtime_c" / "cortex_m"
    exe = tmp_path / "t.elf"
    subprocess.run([target.cc, *target.cflags, "-T", str(runtime / "mps3_an547.ld"),
                    "-I", str(runtime.parent), "-nostartfiles", "--specs=rdimon.specs",
                    "-o", str(exe),
                    str(runtime / "startup.c"), str(tmp_path / "main.c"), str(kernel)],
                   check=True)
    run = subprocess.run(["qemu-system-arm", "-M", "mps3-an547", "-nographic", "-monitor", "none",
                          "-serial", "null", "-semihosting-config", "enable=on,target=native",
                          "-kernel", str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, (run.returncode, run.stdout[-500:], run.stderr[-500:])

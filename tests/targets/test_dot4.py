"""The int8 4-way dot-product accumulator strategy (aot/lower/schedule/strategy.py):
aot_dot4 / aot_dot4u / aot_pack4, their lane formulas and instructions
(Arm sdot, x86 vpdpbusd), the int8 kernels built on them bit-exact on the
targets that choose them, and an rpi5 harness refusing a core without sdot.
"""
from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import aot
from aot.api import verify
from aot.codegen.c import emit_c
from aot.isa.calls import pack_quads
from aot.isa.dots import quad_dot
from aot.codegen.llvm import emit_llvm_ir, emit_object
from aot.ir.tir import (Bin, Buffer, BufferKind, Call, Const, DType, Load, PrimFunc, Store, seq,
                        stmt_exprs, walk_expr, walk_stmt)
from aot.lower.tir_passes.legalize import legalize
from aot.lower.schedule.strategy import (PAIRS, QUADS, QUADS_MULL, QUADS_U8, int8_accumulator,
                                         joined_stores, mlal_depthwise, window_row_accumulator)
from aot.lower import lower_graph
from aot.testing.kernels import build_and_run_many
from aot.targets import get_target
from support import MODELS, cpu_lacks
from support.zoo import QUAD_CONVS, RING_FIRST_LAYERS, _random_inputs, conv_model, fc_model

NO_VNNI = cpu_lacks("host-avx512")
VNNI = not NO_VNNI


def _func(n: int) -> PrimFunc:
    acc = Buffer("acc", DType("int32"), (n,))
    q = Buffer("q", DType("int32"), (1,))
    w = Buffer("w", DType("int8"), (4 * n,))
    out = Buffer("out", DType("int32"), (3 * n,), BufferKind.OUTPUT)
    a, x, wv = Load(acc, Const(0), n), Load(q, Const(0)), Load(w, Const(0), 4 * n)
    return PrimFunc(f"dot4_{n}", (acc, q, w, out), seq(
        Store(out, Const(0), quad_dot(a, x, wv)),
        Store(out, Const(n), quad_dot(a, x, wv, unsigned=True)),
        Store(out, Const(2 * n), pack_quads(wv))))


def _calls(func: PrimFunc) -> list[str]:
    return [e.fn for s in walk_stmt(func.body) for x in stmt_exprs(s)
            for e in walk_expr(x) if isinstance(e, Call)]


@pytest.mark.parametrize("target, n, want", [
    ("aarch64-linux-a76", 4, ["arm_sdot", "aot_dot4u", "aot_pack4_bytes"]),
    ("aarch64-linux", 4, ["aot_dot4", "aot_dot4u", "aot_pack4_bytes"]),    # A72: no dotprod
    ("x86_64-linux-avx512", 16, ["aot_dot4", "x86_vpdpbusd", "aot_pack4_bytes"]),
    ("x86_64-linux-avx512", 8, ["aot_dot4", "x86_vpdpbusd", "aot_pack4_bytes"]),
    ("x86_64-linux", 8, ["aot_dot4", "aot_dot4u", "aot_pack4_bytes"]),     # AVX2: no VNNI
])
def test_legalize_makes_sdot_and_vpdpbusd_where_the_target_has_them(target, n, want):
    assert _calls(legalize(_func(n), get_target(target))) == want


def test_the_default_strategy_follows_the_instructions():
    assert int8_accumulator(get_target("aarch64-linux-a76")) == QUADS
    assert int8_accumulator(get_target("x86_64-linux-avx512")) == QUADS_U8
    assert int8_accumulator(get_target("aarch64-linux")) == QUADS_MULL    # A72: no dotprod
    for name in ("x86_64-linux", "cortex-m55", "armv7-linux"):
        assert int8_accumulator(get_target(name)) == PAIRS, name
    # first layers' window rows: quads where pairs have no instruction, and with
    # VNNI (read from rows of bytes); pairs on AVX2
    assert window_row_accumulator(get_target("aarch64-linux-a76")) == QUADS
    assert window_row_accumulator(get_target("x86_64-linux-avx512")) == QUADS_U8
    assert window_row_accumulator(get_target("x86_64-linux")) == PAIRS
    # depthwise takes SMLAL / SMLAL2 wherever NEON has them, dotprod or not
    assert mlal_depthwise(get_target("aarch64-linux-a76"))
    assert mlal_depthwise(get_target("aarch64-linux"))
    for name in ("x86_64-linux-avx512", "x86_64-linux", "cortex-m55", "armv7-linux"):
        assert not mlal_depthwise(get_target(name)), name
    # a pixel's 16 int8 channels narrowed and stored together where SQXTN does
    # it: NEON little-endian, as the legalization table's row says
    a72 = get_target("aarch64-linux")
    assert joined_stores(get_target("aarch64-linux-a76")) and joined_stores(a72)
    assert not joined_stores(replace(a72, triple="aarch64_be" + a72.triple[len("aarch64"):]))
    for name in ("x86_64-linux-avx512", "x86_64-linux", "cortex-m55", "armv7-linux"):
        assert not joined_stores(get_target(name)), name


def _expected(n: int, acc, q, w) -> np.ndarray:
    signed = np.frombuffer(np.int32(q).tobytes(), np.int8).astype(np.int64)
    wk = w.astype(np.int64).reshape(n, 4)
    return np.concatenate([acc + wk @ signed, acc + wk @ (signed & 255),
                           w.view(np.int32)]).astype(np.int32)


def _run(lib, symbol: str, n: int, rng) -> None:
    fn = getattr(lib, symbol)
    fn.restype = None
    for q in (-1, 0x7F80FF01, -0x7F7F7F80, int(rng.integers(-2**31, 2**31))):
        acc = rng.integers(-2**20, 2**20, n).astype(np.int32)
        w = rng.integers(-128, 128, 4 * n).astype(np.int8)
        w[:4] = -128
        qa, out = np.array([q], np.int32), np.zeros(3 * n, np.int32)
        fn(*(a.ctypes.data_as(ctypes.c_void_p) for a in (acc, qa, w, out)))
        np.testing.assert_array_equal(out, _expected(n, acc, qa[0], w), err_msg=f"q={q:#x}")


def _lib(funcs, codegen: str, target, tmp_path: Path, cflags=None):
    so = tmp_path / f"k_{codegen}.so"
    if codegen == "c":
        src = tmp_path / "k.c"
        src.write_text(emit_c(funcs, "t").source)
        subprocess.run([target.cc, *(cflags or target.cflags), "-shared", "-fPIC", "-o", str(so),
                        str(src)], check=True)
    else:
        obj = tmp_path / "k.o"
        obj.write_bytes(emit_object(funcs, "t", target))
        subprocess.run(["cc", "-shared", "-o", str(so), str(obj)], check=True)
    return ctypes.CDLL(str(so)), emit_c(funcs, "t").symbols


@pytest.mark.parametrize("codegen", ["c", "llvm"])
@pytest.mark.parametrize("legalized", [False, True], ids=["formula", "host-legalized"])
def test_lane_formulas_match_numpy(codegen, legalized, tmp_path):
    """The generic forms (what a target without the instruction runs),
    and the AVX2 target's legalized ones (pack4 as bytes)."""
    target = get_target("x86_64-linux")
    funcs = [_func(n) for n in (4, 8, 16)]
    if legalized:
        funcs = [legalize(f, target) for f in funcs]
    lib, symbols = _lib(funcs, codegen, target, tmp_path)
    rng = np.random.default_rng(0)
    for f in funcs:
        _run(lib, symbols[f.name], f.params[0].shape[0], rng)


@pytest.mark.skipif(not VNNI, reason=NO_VNNI)
@pytest.mark.parametrize("codegen", ["c", "llvm", "c-without-vnni-flags"])
def test_vpdpbusd_matches_numpy(codegen, tmp_path):
    """x86_vpdpbusd at 4, 8 and 16 lanes; the C's #else formula too, for a
    compiler not given -mavx512vnni."""
    target = get_target("x86_64-linux-avx512")
    funcs = [legalize(_func(n), target) for n in (4, 8, 16)]
    assert "x86_vpdpbusd" in _calls(funcs[0])
    flags = [f for f in target.cflags if f != "-mavx512vnni"] if codegen.endswith("flags") else None
    lib, symbols = _lib(funcs, codegen.split("-")[0], target, tmp_path, flags)
    rng = np.random.default_rng(1)
    for f in funcs:
        _run(lib, symbols[f.name], f.params[0].shape[0], rng)


def test_sdot_is_printed_as_the_acle_intrinsic_and_the_llvm_one():
    f = legalize(_func(4), get_target("aarch64-linux-a76"))
    c = emit_c([f], "t").source
    assert "vdotq_s32(" in c and "#if defined(__ARM_FEATURE_DOTPROD)" in c
    ir = emit_llvm_ir([f], "t", get_target("aarch64-linux-a76"))
    assert "llvm.aarch64.neon.sdot.v4i32.v16i8" in ir


# ------------------------------------------------------------------ kernels

def _kernel_graphs():
    graphs = [conv_model("CONV_2D", xs, ws, os_, opts, zp_in=zp, seed=k)
              for k, (xs, ws, os_, opts, zp) in enumerate(QUAD_CONVS)]
    graphs.append(conv_model("CONV_2D", [1, 6, 5, 8], [16, 3, 3, 8], [1, 6, 5, 16],
                             dict(Padding=0, StrideH=1, StrideW=1), zp_in=-128, seed=7))
    graphs += [fc_model(True, False, x_shape=(3, 36), units=24, zp_in=-128),
               fc_model(False, True, x_shape=(2, 2, 19), units=16, zp_in=100),
               fc_model(True, False, x_shape=(1, 64), units=6, zp_in=0)]
    return graphs


@pytest.mark.skipif(not VNNI, reason=NO_VNNI)
@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_vnni_kernels_bit_exact(codegen):
    """Convolutions (padding filled with the zero point, strides, dilations,
    a hybrid one) and FC (odd depths, a narrow tile) on host-avx512's
    vpdpbusd against aot's reference interpreter."""
    target = get_target("x86_64-linux-avx512")
    graphs = _kernel_graphs()
    rng = np.random.default_rng(2)
    cases = [(g, _random_inputs(g, rng)) for g in graphs for _ in range(2)]
    results = build_and_run_many(cases, codegen, target)
    for k, ((g, feeds), got) in enumerate(zip(cases, results)):
        want = aot.interpret(g, feeds)
        for name in g.outputs:
            if g.types[name].dtype == "float32":
                np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)
            else:
                np.testing.assert_array_equal(got[name], want[name], err_msg=f"case {k}")
    used = [{c for k in lower_graph(g, target) for c in _calls(k.func)} for g in graphs]
    # 12 channels tile as 8 + 4 scalars and 6 units as scalars; first layers' window
    # rows (odd depths) read their quads from rows of bytes
    assert ["x86_vpdpbusd" in u for u in used] == [False, True, True, True, True, True, True,
                                                   True, True, False]


def _assert_bit_exact(graphs, target, seed: int, runs: int):
    """Each graph's C kernels for target on `runs` random inputs equal the
    interpreter's outputs."""
    rng = np.random.default_rng(seed)
    cases = [(g, _random_inputs(g, rng)) for g in graphs for _ in range(runs)]
    for (g, feeds), got in zip(cases, build_and_run_many(cases, "c", target)):
        want = aot.interpret(g, feeds)
        for name in g.outputs:
            np.testing.assert_array_equal(got[name], want[name])


def _renamed(graphs, target) -> list:
    """Each graph's kernels lowered for target, renamed apart."""
    return [[replace(k, func=replace(k.func, name=f"c{n}_{k.func.name}"))
             for k in lower_graph(g, target)] for n, g in enumerate(graphs)]


def _assert_lane_formulas_exact(graphs, kernels, seed: int):
    """Each graph's kernels (lowered for an Arm core), compiled for this
    machine in their lane formulas, equal aot's reference interpreter on
    two random inputs."""
    from aot.testing.kernels import compile_kernels, host_target, run_kernels
    lib, symbols = compile_kernels([k for ks in kernels for k in ks], "c", None, host_target())
    rng = np.random.default_rng(seed)
    for g, ks in zip(graphs, kernels):
        for _ in range(2):
            feeds = _random_inputs(g, rng)
            got, want = run_kernels(lib, symbols, g, ks, feeds), aot.interpret(g, feeds)
            for name in g.outputs:
                np.testing.assert_array_equal(got[name], want[name])


@pytest.mark.fast
@pytest.mark.parametrize("target, call", [("aarch64-linux-a76", "arm_sdot"),
                                          ("aarch64-linux", "arm_dot4p_lo")])
def test_arm_fc_quads_by_lane_bit_exact(target, call):
    """The AArch64 fully connected layer (quads four per vector load, each
    from its lane; weights in column panels): rows read where they lie
    (depth 64, two rows) or staged (36: two blocks of four quads and one
    more; 24: a block and a pair), a last odd depth in single steps (50), a
    tile of 16 units and narrower ones, lowered for the A76 (SDOT) and the
    A72 (SMULL pairs) and run in the lane formulas on this machine against
    aot's reference interpreter."""
    target = get_target(target)
    graphs = [fc_model(True, False, x_shape=(2, 64), units=20, zp_in=-128),
              fc_model(False, True, x_shape=(2, 1, 36), units=16, zp_in=5),
              fc_model(True, False, x_shape=(1, 50), units=24, zp_in=100),
              fc_model(True, False, x_shape=(1, 24), units=16, zp_in=-3)]
    kernels = _renamed(graphs, target)
    staged = [any(p.name == "quad_row" for k in ks for p in k.func.params) for ks in kernels]
    assert staged == [False, True, True, True]
    assert all(call in _calls(k.func) for ks in kernels for k in ks)
    _assert_lane_formulas_exact(graphs, kernels, seed=8)


@pytest.mark.skipif(shutil.which("llvm-objdump") is None, reason="llvm-objdump is not installed")
def test_llvm_makes_sdot_by_element_of_a_lane(tmp_path):
    """A quad taken from a lane of a vector (the A76's FC and 16-deep convs)
    is SDOT by element in the LLVM object too, no DUP per quad."""
    target = get_target("aarch64-linux-a76")
    funcs = [k.func for k in lower_graph(fc_model(True, False, x_shape=(1, 64), units=16,
                                                  zp_in=-128), target)]
    obj = tmp_path / "fc.o"
    obj.write_bytes(emit_object(funcs, "t", target))
    text = subprocess.run(["llvm-objdump", "-d", "--mattr=+dotprod", str(obj)], check=True,
                          capture_output=True, text=True).stdout
    by_element = re.findall(r"sdot\s+v\d+\.4s, v\d+\.16b, v\d+\.4b\[\d\]", text)
    assert len(by_element) >= 16 and not re.search(r"\bdup\s+v\d+\.4s, v\d+\.s\[", text)


@pytest.mark.skipif(not VNNI, reason=NO_VNNI)
def test_window_rows_in_quads_bit_exact(monkeypatch):
    """First layers' window rows in quads, as on the A76, here with VNNI's
    unsigned bytes (x86 keeps them in pairs by default)."""
    import aot.lower.schedule.conv as lowering      # the module whose policy asks
    monkeypatch.setattr(lowering, "window_row_accumulator", int8_accumulator)
    target = get_target("x86_64-linux-avx512")
    graphs = [conv_model("CONV_2D", xs, ws, os_, opts, zp_in=zp, seed=k)
              for k, (xs, ws, os_, opts, zp) in enumerate(QUAD_CONVS) if xs[3] % 2]
    assert len(graphs) == 2
    _assert_bit_exact(graphs, target, seed=3, runs=3)
    for g in graphs:
        assert "x86_vpdpbusd" in {c for k in lower_graph(g, target) for c in _calls(k.func)}


@pytest.mark.parametrize("kind", [PAIRS, QUADS], ids=lambda k: k.name)
def test_first_layer_rows_in_a_ring_bit_exact(kind, monkeypatch):
    """Row stride 1: each input row staged once, into slot (oy + ky) % KH,
    in pairs or in quads (here their lane formula), padding rows included."""
    import aot.lower.schedule.conv as lowering      # the module whose policy asks
    monkeypatch.setattr(lowering, "window_row_accumulator", lambda target: kind)
    target = get_target("x86_64-linux")
    graphs = [conv_model("CONV_2D", xs, ws, os_, opts, zp_in=zp, seed=k)
              for k, (xs, ws, os_, opts, zp) in enumerate(RING_FIRST_LAYERS)]
    _assert_bit_exact(graphs, target, seed=5, runs=2)
    for g in graphs:
        funcs = [k.func for k in lower_graph(g, target)]
        assert any(isinstance(e, Bin) and e.op == "%" for f in funcs for s in walk_stmt(f.body)
                   for x in stmt_exprs(s) for e in walk_expr(x))


@pytest.mark.skipif(not VNNI, reason=NO_VNNI)
def test_first_layer_byte_rows_bit_exact():
    """x86 with VNNI: window rows staged as bytes (whole vectors, then the
    row's tail in narrower ones and single bytes) and read as quads at any
    byte: row stride 1 (a ring) and 2, depths 1 and 3, padding filled with a
    zero point that is not -128."""
    target = get_target("x86_64-linux-avx512")
    firsts = RING_FIRST_LAYERS + [c for c in QUAD_CONVS if c[0][3] % 2]
    graphs = [conv_model("CONV_2D", xs, ws, os_, opts, zp_in=zp, seed=k)
              for k, (xs, ws, os_, opts, zp) in enumerate(firsts)]
    _assert_bit_exact(graphs, target, seed=6, runs=3)
    for g in graphs:
        funcs = [k.func for k in lower_graph(g, target)]
        assert any(p.name == "row_bytes" for f in funcs for p in f.params)


# ------------------------------------------------------------- whole models

# every shared int8 model: each must stay bit-exact with tflite-micro on the Pis' cores
INT8 = sorted(p.stem for p in MODELS.glob("*int8*.tflite"))


@pytest.mark.parametrize("codegen, model", [("c", m) for m in INT8]
                         + [("llvm", "mlperf_ic_resnet8_int8"), ("llvm", "mlperf_vww_mbv1_int8")])
def test_rpi5_package_bit_exact_under_emulated_cortex_a76(codegen, model, tmp_path):
    """An rpi5 package (sdot) runs under qemu-aarch64 -cpu cortex-a76 and
    matches tflite-micro bit for bit."""
    path = MODELS / f"{model}.tflite"
    pkg = tmp_path / "pkg"
    aot.package(path, board="rpi5", codegen=codegen, out_dir=pkg)
    kernels = "\n".join(p.read_text() for p in (pkg / "src").glob("*kernels*.c")) \
        if codegen == "c" else ""
    # the MLPerf models' kernels (the others' shapes may take none of these paths)
    mlperf = model.startswith("mlperf_")
    assert codegen == "llvm" or not mlperf or "arm_sdot_i32x4(" in kernels
    if codegen == "c" and mlperf and model != "mlperf_ad_fcae_int8":
        # 16-channel-deep convs take each pixel's quads by lane (sdot by element)
        assert re.search(r"arm_sdot_i32x4\(\w+, \w+\[3\], \w+\)", kernels), model
    if codegen == "c" and model in ("mlperf_kws_dscnn_int8", "mlperf_vww_mbv1_int8"):
        assert "arm_smlal_hi_i32x4(" in kernels, model      # depthwise: SMLAL2
    if codegen == "c" and mlperf:
        # first convs at unit stride (ic's): a window row's quads one vector
        # load per pixel, by lane
        assert ("aot_pack4_i32x4(aot_load_i8x16(&row_bytes[" in kernels) == (
            model == "mlperf_ic_resnet8_int8"), model
    out = verify(pkg, board="qemu-aarch64", source=path)
    assert out["reference"] == "tflite-micro", out
    assert out["ok"] and all(r["max_abs_err"] == 0.0 for r in out["outputs"]), out


def test_rpi5_harness_refuses_a_core_without_sdot(tmp_path):
    """On a Cortex-A72 (no asimddp) the harness exits 5 with one line, not SIGILL."""
    pkg = tmp_path / "pkg"
    aot.package(MODELS / "tflm_hello_world_int8.tflite", board="rpi5", out_dir=pkg)
    run = [str(pkg / "bench" / "bench"), "--serve"]
    r = subprocess.run(["qemu-aarch64", "-cpu", "cortex-a72", *run], input=b"",
                       capture_output=True, timeout=60)
    assert r.returncode == 5, r
    assert b"lacks the Armv8.2 dot product" in r.stderr and r.stdout == b""
    ok = subprocess.run(["qemu-aarch64", "-cpu", "cortex-a76", *run], input=b"",
                        capture_output=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout.startswith(b"AOTH"), ok


@pytest.mark.skipif(not VNNI, reason=NO_VNNI)
def test_host_avx512_package_uses_vpdpbusd_and_is_bit_exact(tmp_path):
    path = MODELS / "mlperf_ic_resnet8_int8.tflite"
    out = verify(path, board="host-avx512", out_dir=tmp_path / "pkg")
    assert out["ok"] and all(r["max_abs_err"] == 0.0 for r in out["outputs"]), out
    kernels = "\n".join(p.read_text() for p in (tmp_path / "pkg" / "src").glob("*kernels*.c"))
    assert "_mm512_dpbusd_epi32(" in kernels and "x86_vpdpbusd_i32x16(" in kernels


@pytest.mark.parametrize("target, call", [("aarch64-linux-a76", "arm_sdot"),
                                          ("aarch64-linux", "arm_dot16p")])
def test_arm_pointwise_quads_walk_short_rows_as_one_bit_exact(target, call):
    """1x1 int8 convs whose rows are too short for the quads' pixel blocks
    (6x6 and, two images, 3x3 with a fused ReLU) stage every pixel of an
    image as one row, each stored pixel's row and column divided back out;
    a 12x12 map keeps its rows. Lowered for the A76 (SDOT) and the A72
    (sixteens), run in the lane formulas on this machine against aot's
    reference interpreter."""
    target = get_target(target)
    graphs = [conv_model("CONV_2D", [1, 6, 6, 32], [24, 1, 1, 32], [1, 6, 6, 24],
                         dict(Padding=1, StrideH=1, StrideW=1), zp_in=-7, seed=1),
              conv_model("CONV_2D", [2, 3, 3, 16], [16, 1, 1, 16], [2, 3, 3, 16],
                         dict(Padding=1, StrideH=1, StrideW=1, FusedActivationFunction=1),
                         zp_in=90, seed=2),
              conv_model("CONV_2D", [1, 12, 12, 16], [8, 1, 1, 16], [1, 12, 12, 8],
                         dict(Padding=1, StrideH=1, StrideW=1), zp_in=-128, seed=3)]
    kernels = _renamed(graphs, target)
    # the staged row's pixels: the whole image, or one row of it
    widths = [p.shape[1] for ks in kernels for k in ks for p in k.func.params
              if p.name.startswith(("quad_rows", "byte_rows"))]
    assert widths == [36, 9, 12]
    assert all(call in _calls(k.func) for ks in kernels for k in ks)
    _assert_lane_formulas_exact(graphs, kernels, seed=9)


@pytest.mark.parametrize("target", ["aarch64-linux-a76", "aarch64-linux"])
def test_arm_conv_with_a_dead_channel_rounds_by_srshl_bit_exact(target):
    """A dead channel (zero weights, a bias near 2^30) is settled into a
    constant, so its bound no longer keeps every channel of the layer off
    AArch64's bounded rounding (one SRSHL by the negated shifts for the
    rounding fix-up's four instructions); lowered for the A76 and the A72,
    run in the lane formulas on this machine against aot's reference
    interpreter."""
    target = get_target(target)
    graphs = [conv_model("CONV_2D", [1, 6, 6, 32], [24, 1, 1, 32], [1, 6, 6, 24],
                         dict(Padding=1, StrideH=1, StrideW=1, FusedActivationFunction=act),
                         zp_in=-7, seed=4, dead=5) for act in (0, 1)]
    kernels = _renamed(graphs, target)
    for ks in kernels:
        assert any(p.name.startswith("rounding_shift") for k in ks for p in k.func.params)
        assert any("srshl" in c for k in ks for c in _calls(k.func))
        assert not any("rdbpot" in c for k in ks for c in _calls(k.func))
    _assert_lane_formulas_exact(graphs, kernels, seed=10)

"""The DSP-extension int8 kernels (aot/lower/kernels/cortex_m/dsp.py, aot/isa/arm_dsp.py).

- On the host, a scalar target given the "dsp" feature gets the DSP kernels
  with the generic formulas of SXTB16 and SMLAD (legalization makes Arm
  instructions only on Arm): 1x1 convolutions and fully connected layers
  over tile remainders, odd depths and zero points, C and LLVM, bit for bit
  against the interpreter.
- The formulas against the instructions' definition on edge words.
- On the Cortex-M4 the legalized calls are the ACLE intrinsics in C and the
  llvm.arm intrinsics in LLVM; kws (all four 1x1 convolutions and its FC on
  this path) bit-exact with tflite-micro through the LLVM kernels.
"""
from __future__ import annotations

import ctypes
import dataclasses

import numpy as np
import pytest

from aot.isa.arm_dsp import smla_half, smlad, smmulr, ssat8, sxtb16
from aot.ir.tir import (INT32, Bin, Buffer, BufferKind, Const, DType, For, Load, PrimFunc, Store,
                        Var, seq)
from aot.lower import Kernel
from aot.lower.tir_passes.legalize import legalize
from aot.lower.arith import requant
from aot.lower.kernels.cortex_m import dsp
from aot.lower import lower_graph
from aot.testing import kernels as testing
from aot.testing.kernels import compile_kernels, host_target
from aot.ops.quant import qmath as ref_q
from support import MODELS, zoo
from support.kernels import call_names
from support.zoo import check_graphs, cortex_m_graphs


def dsp_host():
    """The host as a scalar core with the DSP extension."""
    return dataclasses.replace(host_target(), vector_bits=0,
                               declared_features=frozenset({"dsp"}))


@pytest.mark.parametrize("codegen,requant32", [("c", True), ("llvm", True), ("c", False)])
def test_dsp_kernels_bit_exact_on_a_dsp_host(codegen, requant32, tmp_path, monkeypatch):
    """requant32 False: the bounds taken as unproven, the 64-bit requantization."""
    monkeypatch.setattr(testing, "host_target", dsp_host)
    monkeypatch.setattr(zoo, "host_target", dsp_host)      # run_llvm's
    if not requant32:
        monkeypatch.setattr(requant, "proven", lambda *a: False)
    graphs = cortex_m_graphs()
    funcs = [k.func for g in graphs for k in lower_graph(g, dsp_host())]
    calls = {c for f in funcs for c in call_names(f)}
    want = {"aot_smlad", "aot_smlabb", "aot_smlatt", "aot_sxtb16", "aot_sxtb16_ror8"}
    assert want <= calls, calls
    assert ("aot_smmulr" in calls) == requant32, calls
    check_graphs(graphs, codegen=codegen, tmp_path=tmp_path)


def _requant32(acc, mult, shift, zp=0, floor_ok=False):
    """TfliteRequant32's arithmetic on int64 numpy values (every step proven
    to fit int32), the zero point zp folded into its rounding term; floor_ok:
    without the sign term (a ReLU's floor follows)."""
    left, right = max(shift, 0), max(-shift, 0)
    h = (acc * (1 << (left + 1)) * mult + (1 << 31)) >> 32
    total = h + ((1 << (right - 1)) + zp * (1 << right)) + (0 if floor_ok else h >> 31)
    assert np.all(np.abs(total) < 2**31)
    return total >> right


def test_requant32_equals_tflite_on_edge_cases():
    """Where `proven` holds, TfliteRequant32's formula is TFLite's
    MultiplyByQuantizedMultiplier on the bounds, around 0, at rounding ties
    and at random; where it does not (a shift the bound overflows, no right
    shift), it is refused."""
    rng = np.random.default_rng(0)
    cases = folded = 0
    for mult in (1 << 30, (1 << 30) + 1, 2**31 - 1, 1518500250, 1073741825 + 12345):
        for shift in (-1, -2, -7, -13, -20, -31, 0, 1, 3):
            for bound in (1, 127, 4095, 65535, 1 << 20, (1 << 28) - 1, 2**30 - 1):
                if not requant.proven([mult], [shift], np.array([bound])):
                    assert shift >= 0 or bound << (max(shift, 0) + 1) > 2**31 - 1
                    continue
                cases += 1
                right = max(-shift, 0)
                ties = [k * (1 << right) + (1 << (right - 1)) for k in (-3, -1, 0, 2)]
                accs = np.array([bound, -bound, bound - 1, 1 - bound, 0, 1, -1,
                                 *[t for t in ties if abs(t) <= bound],
                                 *rng.integers(-bound, bound + 1, 40)], np.int64)
                want = ref_q.mbqm(accs, mult, shift).astype(np.int64)
                np.testing.assert_array_equal(_requant32(accs, mult, shift), want,
                                              err_msg=f"M {mult} shift {shift} bound {bound}")
                for zp in (-128, -1, 5, 127):
                    if requant.proven([mult], [shift], np.array([bound]), zp):
                        folded += 1
                        np.testing.assert_array_equal(
                            _requant32(accs, mult, shift, zp), want + zp,
                            err_msg=f"M {mult} shift {shift} bound {bound} zp {zp}")
                        # a floor at the zero point or above: the sign term changes nothing
                        for floor in (zp, zp + 3):
                            np.testing.assert_array_equal(
                                np.maximum(_requant32(accs, mult, shift, zp, True), floor),
                                np.maximum(want + zp, floor),
                                err_msg=f"M {mult} shift {shift} bound {bound} zp {zp} floor")
    assert cases > 100 and folded > 300
    # the zero point's multiple of 2^e is what the bound leaves no room for
    assert requant.proven([1 << 30], [-24], np.array([1]))
    assert not requant.proven([1 << 30], [-24], np.array([1]), -128)
    assert not requant.proven([1 << 30], [0], np.array([100]))          # no right shift
    assert not requant.proven([1 << 30], [-1], np.array([1 << 30]))     # x 2 overflows
    assert not requant.proven([1 << 30], [2], np.array([1 << 28]))      # x 2^3 overflows


def test_constant_channels_settle_to_the_same_outputs():
    """A channel whose output is one constant over all int8 inputs (a dead
    channel: weights near zero, a bias near 2^30, or M = 0) takes zero
    weights and a small bias, with the same int8 output on every input, and
    no longer keeps the layer off the 32-bit requantization; the others stay
    as they were."""
    rng = np.random.default_rng(1)
    terms, zp_in, zp_out = 24, -7, -128
    w = rng.integers(-60, 61, (6, terms))
    w[1] = 0
    w[2] = 0
    w[2, 3] = 1
    w[3] = 0
    bias = np.array([900, 2**30, 2**30 - 5, -(2**30), 1234, 2**30])
    mults = np.array([1518500250, 1569364972, 2**31 - 1, 1171292447, 0, 1 << 30])
    shifts = np.array([-9, -26, -30, -25, -3, -1])   # channel 5: its output varies
    assert not requant.proven(mults, shifts, dsp.acc_bound(w, bias, zp_in))
    sw, sb, sm, ss = requant.settle_constant_channels(w, bias, zp_in, mults, shifts)
    settled = [c for c in range(6) if (sm[c], ss[c]) != (mults[c], shifts[c])]
    assert settled == [1, 2, 3, 4], settled
    np.testing.assert_array_equal(sw[[0, 5]], w[[0, 5]])
    assert requant.proven(sm[:5], ss[:5], dsp.acc_bound(sw[:5], sb[:5], zp_in))
    x = np.concatenate([rng.integers(-128, 128, (300, terms)),
                        np.where(w > 0, 127, -128), np.where(w > 0, -128, 127)])

    def out(w, bias, mults, shifts):
        acc = bias - zp_in * w.sum(axis=1) + x @ w.T               # [inputs, channels]
        return np.clip(ref_q.mbqm(acc, mults, shifts) + zp_out, -128, 127)
    np.testing.assert_array_equal(out(sw, sb, sm, ss), out(w, bias, mults, shifts))


def _sxtb16_ref(word: int, odd: bool) -> int:
    b = np.array([word], "<u4").view(np.int8)
    lo, hi = (int(b[1]), int(b[3])) if odd else (int(b[0]), int(b[2]))
    return int(np.array([(lo & 0xFFFF) | ((hi & 0xFFFF) << 16)], np.uint32).view(np.int32)[0])


def _smlad_ref(a: int, b: int, acc: int, terms=(True, True)) -> int:
    ha = np.array([a], np.int32).view(np.int16)
    hb = np.array([b], np.int32).view(np.int16)
    total = acc + sum(int(ha[k]) * int(hb[k]) for k in (0, 1) if terms[k])
    return int(np.array([total & 0xFFFFFFFF], np.uint64).astype(np.uint32).view(np.int32)[0])


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_generic_formulas_are_the_instructions(codegen):
    """The formulas on words at the edges: bytes -128/127, halves -32768,
    sums that wrap int32 as SMLAD does, SMMULR's rounding."""
    words = np.array([0, -1, 0x7F807F80, -0x7F807F81, 0x80000000 - (1 << 32), 0x7FFFFFFF,
                      0x12345678, -0x12345678, 0x00FF00FF, 0x7F7F7F7F, 0x01800180], np.int64)
    words = np.concatenate([words, np.random.default_rng(0).integers(-2**31, 2**31, 53)])
    words = words.astype(np.int32)
    n = len(words)
    i32, i8 = INT32, DType("int8")
    a, b, c = (Buffer(k, i32, (n,)) for k in "abc")
    x = Buffer("x", i8, (4 * n,))
    even, odd, mac, bb, tt, mulr, sat = (Buffer(k, i32, (n,), BufferKind.OUTPUT)
                                         for k in ("even", "odd", "mac", "bb", "tt", "mulr",
                                                   "sat"))
    i = Var("i")
    word = Load(x, Bin("*", i, Const(4)), 4)
    body = seq(Store(even, i, sxtb16(word)), Store(odd, i, sxtb16(word, odd=True)),
               Store(mac, i, smlad(Load(a, i), Load(b, i), Load(c, i))),
               Store(bb, i, smla_half(Load(a, i), Load(b, i), Load(c, i), high=False)),
               Store(tt, i, smla_half(Load(a, i), Load(b, i), Load(c, i), high=True)),
               Store(mulr, i, smmulr(Load(a, i), Load(b, i))),
               Store(sat, i, ssat8(Bin(">>", Load(c, i), Bin("&", Load(a, i), Const(31))))))
    func = legalize(PrimFunc("dsp_ops", (a, b, c, x, even, odd, mac, bb, tt, mulr, sat),
                             For(i, n, body)),
                    dsp_host())
    lib, symbols = compile_kernels([Kernel(func, (), None)], codegen, target=dsp_host())
    rng = np.random.default_rng(1)
    av, bv = rng.permutation(words), words[::-1].copy()
    cv = np.concatenate([[2**31 - 1, -2**31], rng.integers(-2**31, 2**31, n - 2)]).astype(np.int32)
    outs = [np.zeros(n, np.int32) for _ in range(7)]
    args = [v.ctypes.data_as(ctypes.c_void_p) for v in (av, bv, cv, words.view(np.int8), *outs)]
    getattr(lib, symbols["dsp_ops"])(*args)
    assert outs[0].tolist() == [_sxtb16_ref(int(w) & 0xFFFFFFFF, False) for w in words]
    assert outs[1].tolist() == [_sxtb16_ref(int(w) & 0xFFFFFFFF, True) for w in words]
    triples = [(int(p), int(q), int(r)) for p, q, r in zip(av, bv, cv)]
    assert outs[2].tolist() == [_smlad_ref(*t) for t in triples]
    assert outs[3].tolist() == [_smlad_ref(*t, terms=(True, False)) for t in triples]
    assert outs[4].tolist() == [_smlad_ref(*t, terms=(False, True)) for t in triples]
    assert outs[5].tolist() == [(p * q + (1 << 31)) >> 32 for p, q, _ in triples]
    # SSAT #8 on values around and far beyond [-128, 127]
    assert outs[6].tolist() == [min(max(r >> (p & 31), -128), 127) for p, _, r in triples]


def test_the_m4_gets_the_instructions_and_stays_bit_exact(tmp_path):
    """kws int8 on mps2-an386 through the LLVM kernels (llvm.arm.smlad...)
    and on mps3-an547 through the C kernels, against tflite-micro; the M4's
    C calls the ACLE intrinsics."""
    from aot.api import package, verify
    kws = MODELS / "mlperf_kws_dscnn_int8.tflite"
    for board, codegen in (("mps2-an386", "llvm"), ("mps3-an547", "c")):
        out = verify(kws, board=board, codegen=codegen)
        assert out["reference"] == "tflite-micro" and out["ok"], out
        assert all(r["max_abs_err"] == 0 for r in out["outputs"]), out
    package(kws, board="mps2-an386", out_dir=tmp_path / "kws")
    source = "".join(p.read_text() for p in (tmp_path / "kws" / "src").glob("*_kernels.c"))
    for name in ("__smlad(", "__sxtb16(", "__smlabb(", "__smlatt(", "smmulr %0", "__ssat("):
        assert name in source, name

"""x86's 32-bit fixed point (aot/lower/arith/fixed32.py): the ADD operand rescale
as two 32-bit multiplies and the rounding shift as adds, against TFLite's
arithmetic (aot.ops.quant.qmath) on every input they can see, and the kernels
using them (conv requantization, ADD / SUB, a residual add fused into a
conv) bit-exact with the interpreter on x86 targets; Arm keeps qmath's forms.
"""
from __future__ import annotations

import numpy as np
import pytest

import aot
from aot.lower import lower_graph
from aot.lower.arith.fixed32 import nudged_requant, shift_add_rounding, small_rescale_terms
from aot.testing.kernels import build_and_run_many, compare_with_interpreter, vectorized_kernel
from aot.ops.quant import qmath as ref
from aot.targets import get_target
from support import cpu_lacks
from support.kernels import call_names
from support.zoo import _tflite_graph
from support.tflite_models import TinyModel

NO_AVX512 = cpu_lacks("host-avx512")


def _rescale(d, mult, shift, right):
    return ref.rdbpot(ref.srdhm(ref.wrap_int32(np.asarray(d, np.int64) << shift), mult), right)


def test_small_rescale_terms_equal_tflite_on_every_operand():
    """The terms' formula itself (not small_rescale_terms' own check):
    random multipliers, right shifts 0-12 and zero points, every int8 d."""
    rng = np.random.default_rng(0)
    for _ in range(400):
        mult, right = int(rng.integers(1 << 30, 1 << 31)), int(rng.integers(0, 13))
        zp = int(rng.integers(-128, 128))
        d = np.arange(-128 - zp, 128 - zp, dtype=np.int64)
        mh, ml, b, sign, s = small_rescale_terms(mult, 20, right, int(d[0]), int(d[-1]))
        got = d * mh + ((d * ml + b + (d >> 31) * sign) >> s)
        np.testing.assert_array_equal(got, _rescale(d, mult, 20, right))
        assert max(abs(d * ml + b + (d >> 31) * sign).max(), abs(d * mh).max()) < 2**31


def test_small_rescale_declines_what_int32_cannot_hold():
    # int16 operands (left shift 15) span 17 bits: d * Ml overflows
    assert small_rescale_terms(1518500250, 15, 3, -32768, 32767) is None


def test_only_x86_takes_the_32_bit_forms():
    assert shift_add_rounding(get_target("x86_64-linux-avx512"))
    assert shift_add_rounding(get_target("x86_64-linux"))
    for name in ("aarch64-linux-a76", "aarch64-linux", "armv7-linux", "cortex-m55", "cortex-m4"):
        assert not shift_add_rounding(get_target(name)), name


def test_x86_and_aarch64_convolutions_take_the_nudge():
    for name in ("x86_64-linux-avx512", "x86_64-linux", "aarch64-linux-a76", "aarch64-linux"):
        assert nudged_requant(get_target(name)), name
    for name in ("armv7-linux", "cortex-m55", "cortex-m4"):
        assert not nudged_requant(get_target(name)), name


def _binary(op, act, s1, z1, s2, z2, so, zo, n):
    m = TinyModel()
    a = m.tensor("a", [1, n], scale=[s1], zp=[z1])
    b = m.tensor("b", [1, n], scale=[s2], zp=[z2])
    y = m.tensor("y", [1, n], scale=[so], zp=[zo])
    m.op(op, [a, b], [y], ({"ADD": "AddOptions", "SUB": "SubOptions"}[op],
                           dict(FusedActivationFunction=act)))
    return _tflite_graph(m.build([a, b], [y]))


# scales and zero points: either side the larger, output shifts from 15 to 20,
# activations none / relu / relu6, SUB
BINARY = [("ADD", 0, 0.031, -5, 0.077, 12, 0.05, 2),
          ("ADD", 1, 0.11, 100, 0.013, -128, 0.09, -128),
          ("SUB", 3, 0.02, 0, 0.021, 7, 0.004, -20),
          ("ADD", 0, 0.5, -128, 0.0041, 127, 0.6, 5)]


@pytest.mark.parametrize("target, lanes", [("x86_64-linux-avx512", 16), ("x86_64-linux", 8)])
def test_add_sub_bit_exact_on_every_pair_of_int8_values(target, lanes):
    """All 65,536 (a, b) pairs, per scale choice, in int32 vectors as a
    fused epilogue computes them, in one compile."""
    if lanes == 16 and NO_AVX512:
        pytest.skip(NO_AVX512)
    n = 1 << 16
    values = np.arange(n)
    feeds = {"a": (values % 256 - 128).astype(np.int8).reshape(1, n),
             "b": (values // 256 - 128).astype(np.int8).reshape(1, n)}
    graphs = {f"{k}": _binary(*case, n) for k, case in enumerate(BINARY)}
    for g in graphs.values():
        assert "aot_rdbpot" not in call_names(vectorized_kernel(g, lanes, get_target(target)).func)
    got = compare_with_interpreter({k: (g, feeds) for k, g in graphs.items()}, lanes,
                                   target=get_target(target))
    assert got == dict.fromkeys(graphs)


def _assert_no_rdbpot(graphs, target):
    """Every rounding shift took the shift-and-add form (no aot_rdbpot)."""
    for g in graphs:
        for k in lower_graph(g, target):
            assert "aot_rdbpot" not in call_names(k.func), k.func.name


def _residual(act: int, seed: int):
    """conv 3x3 (16 channels) then ADD with a skip input: the add fuses into
    the conv's epilogue, as in ResNet."""
    rng = np.random.default_rng(seed)
    m = TinyModel()
    x = m.tensor("x", [1, 6, 7, 16], scale=[0.05], zp=[-3])
    wscale = rng.uniform(0.002, 0.02, 16)
    w = m.tensor("w", [16, 3, 3, 16], scale=wscale, zp=[0] * 16, data=rng.integers(-127, 128,
                                                                                   (16, 3, 3, 16)))
    bias = m.tensor("bias", [16], "int32", scale=0.05 * wscale, zp=[0] * 16,
                    data=rng.integers(-3000, 3000, 16))
    y = m.tensor("y", [1, 6, 7, 16], scale=[0.07], zp=[-10])
    m.op("CONV_2D", [x, w, bias], [y], ("Conv2DOptions", dict(
        Padding=0, StrideH=1, StrideW=1, FusedActivationFunction=act)))
    skip = m.tensor("skip", [1, 6, 7, 16], scale=[0.04], zp=[6])
    out = m.tensor("out", [1, 6, 7, 16], scale=[0.1], zp=[-128])
    m.op("ADD", [y, skip], [out], ("AddOptions", dict(FusedActivationFunction=1)))
    return _tflite_graph(m.build([x, skip], [out]))


@pytest.mark.skipif(bool(NO_AVX512), reason=NO_AVX512)
@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_residual_add_fused_into_a_conv_bit_exact(codegen):
    target = get_target("x86_64-linux-avx512")
    graphs = [_residual(act, seed) for seed, act in enumerate((0, 1))]
    assert [len(lower_graph(g, target)) for g in graphs] == [1, 1]    # fused
    _assert_no_rdbpot(graphs, target)
    rng = np.random.default_rng(5)
    cases = [(g, {"x": rng.integers(-128, 128, (1, 6, 7, 16)).astype(np.int8),
                  "skip": rng.integers(-128, 128, (1, 6, 7, 16)).astype(np.int8)})
             for g in graphs for _ in range(3)]
    for (g, feeds), got in zip(cases, build_and_run_many(cases, codegen, target)):
        np.testing.assert_array_equal(got["out"], aot.interpret(g, feeds)["out"])

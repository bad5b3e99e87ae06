"""Fixed-point primitives (aot/ops/quant/qmath.py) against worked values, exact
rational references (Python big ints) and the properties TFLITE_INT8.md states."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from aot.errors import ModelError
from aot.ops.quant import qmath
from aot.ops.quant import tflite_int8 as t8

I32 = (-(1 << 31), (1 << 31) - 1)


# ------------------------------------------------------------ QuantizeMultiplier

@pytest.mark.parametrize("m, expected", [
    (0.0, (0, 0)),
    (0.5, (1 << 30, 0)),
    (1.0, (1 << 30, 1)),
    (0.25, (1 << 30, -1)),
    (2.0 ** -15, (1 << 30, -14)),
    (3.0, (3 << 29, 2)),
    (2.0 ** -40, (0, 0)),          # e < -31 flushes to zero
])
def test_quantize_multiplier_worked_values(m, expected):
    assert qmath.quantize_multiplier(m) == expected


def test_quantize_multiplier_rounds_up_to_the_next_power():
    # q*2^31 rounds to 2^31 exactly: M becomes 2^30 and the exponent grows.
    m = (1 - 2.0 ** -33)
    assert qmath.quantize_multiplier(m) == (1 << 30, 1)


def test_quantize_multiplier_round_trips():
    rng = np.random.default_rng(1)
    for m in np.exp(rng.uniform(-20, 5, 2000)):
        big, e = qmath.quantize_multiplier(float(m))
        assert (1 << 30) <= big < (1 << 31)
        approx = big * 2.0 ** (e - 31)
        assert abs(approx - m) <= m * 2.0 ** -31


def test_quantize_multiplier_ties_go_away_from_zero():
    # q * 2^31 = k + 0.5 exactly: std::round goes up, not to even.
    q = (2 * (1 << 30) + 1) / 2.0 ** 32   # (2^30 + 0.5) / 2^31
    assert qmath.quantize_multiplier(q) == ((1 << 30) + 1, 0)


def test_smaller_and_greater_than_one_guards():
    # a model's scales can give it: refused as the model's fault (exit 2)
    with pytest.raises(ModelError, match="multiplier of 1.5 is not in"):
        qmath.quantize_multiplier_smaller_than_one(1.5)
    with pytest.raises(ValueError):
        qmath.quantize_multiplier_greater_than_one(0.5)
    assert qmath.quantize_multiplier_greater_than_one(2.0)[1] >= 0


# ------------------------------------------------------------------ SRDHM / RDBPOT

def _srdhm_exact(a: int, b: int) -> int:
    if a == b == -(1 << 31):
        return (1 << 31) - 1
    return math.floor(Fraction(a * b + (1 << 30), 1 << 31))


def _rdbpot_exact(x: int, e: int) -> int:
    q = Fraction(abs(x), 1 << e)
    r = math.floor(q + Fraction(1, 2))
    return r if x >= 0 else -r


def test_srdhm_tie_cases():
    # a*b = 2^30 * odd: an exact half; ties go toward +infinity for both signs.
    assert qmath.srdhm(1 << 30, 1).item() == 1      # 0.5 -> 1
    assert qmath.srdhm(-(1 << 30), 1).item() == 0   # -0.5 -> 0
    assert qmath.srdhm(3 << 30, 1).item() == 2      # 1.5 -> 2
    assert qmath.srdhm(-(3 << 30), 1).item() == -1  # -1.5 -> -1
    assert qmath.srdhm(I32[0], I32[0]).item() == I32[1]  # the one saturating case


def test_srdhm_matches_exact_reference():
    rng = np.random.default_rng(2)
    a = rng.integers(*I32, 5000, endpoint=True)
    b = rng.integers(*I32, 5000, endpoint=True)
    got = qmath.srdhm(a, b)
    assert all(int(g) == _srdhm_exact(int(x), int(y)) for g, x, y in zip(got, a, b))


def test_rdbpot_ties_away_from_zero():
    assert qmath.rdbpot([5, -5, 6, -6, 7, -7], 1).tolist() == [3, -3, 3, -3, 4, -4]
    assert qmath.rdbpot([2, -2, 6, -6], 2).tolist() == [1, -1, 2, -2]
    assert qmath.rdbpot([123, -123], 0).tolist() == [123, -123]


def test_rdbpot_matches_exact_reference():
    rng = np.random.default_rng(3)
    x = rng.integers(*I32, 3000, endpoint=True)
    e = rng.integers(0, 32, 3000)
    got = qmath.rdbpot(x, e)
    assert all(int(g) == _rdbpot_exact(int(v), int(s)) for g, v, s in zip(got, x, e))


def test_satshl_saturates():
    assert qmath.satshl([1 << 29, -(1 << 29), (1 << 29) - 1, 5], 2).tolist() == [I32[1], I32[0], ((1 << 29) - 1) * 4, 20]


def test_mbqm_is_double_rounding():
    rng = np.random.default_rng(4)
    x = rng.integers(-(1 << 20), 1 << 20, 4000)
    mult = rng.integers(1 << 30, 1 << 31, 4000)
    shift = rng.integers(-20, 3, 4000)
    got = qmath.mbqm(x, mult, shift)
    for g, v, m, s in zip(got, x, mult, shift):
        v, m, s = int(v), int(m), int(s)
        want = _rdbpot_exact(_srdhm_exact(v << max(s, 0), m), max(-s, 0))
        assert int(g) == want
    # Close to the real product, never off by more than one.
    real = x * (mult / 2.0 ** 31) * 2.0 ** shift
    assert np.max(np.abs(got - real)) <= 1.0


def test_mbqm_differs_from_single_rounding_sometimes():
    # The reason the double rounding matters: a case where rounding once differs.
    x, m, e = 3, 1 << 30, -1     # 3 * 0.5 * 0.5 = 0.75: SRDHM gives 2 (1.5 -> 2), /2 -> 1
    assert qmath.mbqm(x, m, e).item() == 1
    x = 5                         # 5 * 0.25 = 1.25; SRDHM 2.5 -> 3, RDBPOT(3,1) = 2 (1.5 away)
    assert qmath.mbqm(x, m, e).item() == 2  # single rounding would give 1


# ------------------------------------------------------------ prepare helpers

def test_activation_range():
    assert qmath.activation_range("NONE", 0.1, 3) == (-128, 127)
    assert qmath.activation_range("RELU", 0.1, -5) == (-5, 127)
    assert qmath.activation_range("RELU6", 0.05, -128) == (-128, -8)
    assert qmath.activation_range("RELU_N1_TO_1", 0.01, 0) == (-100, 100)
    assert qmath.activation_range("RELU6", 0.001, 0) == (0, 127)


@pytest.mark.parametrize("size, k, s, d, pad, expected", [
    (96, 3, 2, 1, "SAME", (48, 0, 1)),
    (96, 3, 1, 1, "SAME", (96, 1, 1)),
    (49, 10, 2, 1, "SAME", (25, 4, 5)),
    (10, 4, 2, 1, "VALID", (4, 0, 0)),
    (10, 3, 1, 2, "SAME", (10, 2, 2)),
    (7, 3, 1, 2, "VALID", (3, 0, 0)),
])
def test_compute_padding(size, k, s, d, pad, expected):
    assert qmath.compute_padding(size, k, s, d, pad) == expected


# ------------------------------------------------------------ int16 LUT functions

def test_sigmoid_table_is_the_tflm_table():
    t = qmath.SIGMOID_TABLE_UINT16
    assert t.size == 256 and t[0] == 32768 and t[-1] == 65535
    regenerated = np.round(65536 / (1 + np.exp(-np.arange(256) / 24)))
    assert int(np.sum(t == regenerated + 1)) == 44   # as TFLITE_INT8.md §11 says


def test_sigmoid16_and_tanh16_ranges_and_accuracy():
    x = np.arange(-32768, 32768)
    s = qmath.sigmoid16(x)
    assert (s.min(), s.max()) == (11, 32757)
    assert np.max(np.abs(s / 32768 - 1 / (1 + np.exp(-x / 4096)))) < 1e-3
    t = qmath.tanh16(x, -12)
    assert (t.min(), t.max()) == (-32767, 32767)
    assert np.max(np.abs(t / 32768 - np.tanh(x / 4096))) < 2e-3
    assert np.all(np.diff(s) >= 0) and np.all(np.diff(t) >= 0)


# ------------------------------------------------------------ softmax helpers

def test_exp_on_negative_values_accuracy():
    a = -np.arange(0, 31 << 26, 1 << 20, dtype=np.int64)
    got = t8.exp_on_negative_values(a) / 2.0 ** 31
    assert np.max(np.abs(got - np.exp(a / 2.0 ** 26))) < 5e-7
    assert t8.exp_on_negative_values(np.array([0])).item() == I32[1]


def test_one_over_one_plus_x_accuracy():
    t = np.arange(0, 1 << 31, 1 << 21, dtype=np.int64)
    got = t8.one_over_one_plus_x(t) / 2.0 ** 31
    assert np.max(np.abs(got - 1 / (1 + t / 2.0 ** 31))) < 1e-8


def test_add_params_give_the_larger_input_half():
    (m1, e1), (m2, e2), (mo, eo) = t8.add_params(0.02, 0.05, 0.06)
    assert (m2, e2) == (1 << 30, 0)
    assert m1 * 2.0 ** (e1 - 31) == pytest.approx(0.2)
    assert mo * 2.0 ** (eo - 31) == pytest.approx(0.1 / (2 ** 20 * 0.06))


def test_round_half_away_is_std_round_at_the_edges():
    """floor(|x| + 0.5) is not std::round: the addition itself rounds."""
    from aot.ops.quant.qmath import round_half_away, round_half_away_array

    x = np.array([0.49999997, 0.5, -0.5, 1.5, -2.5, 2.4999998, 8388609.0, -8388611.0, -0.0],
                 np.float32)
    expected = np.array([0, 1, -1, 2, -3, 2, 8388609, -8388611, -0.0], np.float32)
    np.testing.assert_array_equal(round_half_away_array(x), expected)
    assert round_half_away(0.49999999999999994) == 0.0
    assert [round_half_away(float(v)) for v in x] == expected.tolist()

"""The rule `aot verify` holds a float output to (aot.check.reference.compare):
rounding of a large sum passes, a real error does not."""
from __future__ import annotations

import numpy as np

from aot.check.reference import compare


def dense_in_two_orders(k: int = 256, n: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """y = x @ W in float32, summed first to last (the reference) and last to
    first (the board): outputs in the hundreds, every fourth one a sum of
    terms in the tens that cancels to about zero, as a pose model's
    coordinates relative to an anchor do."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-100, 100, k).astype(np.float32)
    w = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    x64 = x.astype(np.float64)
    for j in range(0, n, 4):
        w[:, j] -= np.float32((x64 @ w[:, j]) / (x64 @ x64)) * x

    def summed(order) -> np.ndarray:
        acc = np.zeros(n, np.float32)
        for i in order:
            acc = acc + x[i] * w[i]
        return acc
    return summed(range(k - 1, -1, -1)), summed(range(k))


def test_a_reordered_float32_sum_passes():
    got, ref = dense_in_two_orders()
    err = np.abs(got.astype(np.float64) - ref)
    assert np.abs(ref).max() > 100 and err.max() > 0
    # an element near zero misses the unscaled rule: what the scaled one is for
    assert np.any(err > 1e-4 + 1e-4 * np.abs(ref))
    assert compare("y", got, ref)["ok"] is True


def test_one_element_off_by_a_thousandth_of_the_range_fails():
    _, ref = dense_in_two_orders()
    for i in (0, 5):                       # near zero, and an output in the hundreds
        bad = ref.copy()
        bad[i] += np.float32(1e-3 * (ref.max() - ref.min()))
        row = compare("y", bad, ref)
        assert row["ok"] is False, i
        assert row["max_abs_err"] > 0.1


def test_an_error_spread_over_every_element_fails_the_l2_bound():
    """Each element within the scaled elementwise term, all of them off."""
    ref = np.full(64, 1.0, np.float32)
    ref[0] = 1000.0
    got = ref + np.float32(0.05)            # 0.05 <= 1e-4 * 1000 + 1e-4 * 1
    assert compare("y", got, ref)["ok"] is False
    assert compare("y", ref + np.float32(1e-5), ref)["ok"] is True


def test_the_absolute_term_in_steps_is_not_scaled():
    ref = np.array([0.0, 200.0, 200.0, 200.0])
    got = np.array([1.5, 200.0, 200.0, 200.0])
    assert compare("y", got, ref, atol=1, rtol=0, scaled=False)["ok"] is False
    assert compare("y", got, ref, atol=1, rtol=0)["ok"] is True
    codes = np.array([0, 100], np.int8)
    assert compare("y", codes + np.int8(1), codes)["ok"] is False    # integers: exact


def test_nan_where_both_have_it_agrees():
    ref = np.array([np.nan, 1.0])
    assert compare("y", ref.copy(), ref)["ok"] is True
    assert compare("y", np.array([0.0, 1.0]), ref)["ok"] is False

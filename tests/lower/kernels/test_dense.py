"""The dense product is written once (aot/lower/kernels/dense.py: product) for
every accumulator strategy: the float Gemm / MatMul / pointwise conv and the
int8 fully connected layer both run its loop nest."""
from __future__ import annotations

import numpy as np
import pytest

from aot.lower.kernels import dense
from aot.lower.rules.quant import tflite_fc as int8_fc
from aot.lower import lower_graph
from aot.testing.kernels import single_op_graph
from aot.targets import get_board
from support.zoo import fc_model


@pytest.fixture
def strategies(monkeypatch):
    """The strategy of every product lowered while the fixture is active."""
    seen = []

    def spy(ctx, s, batch, m, n):
        seen.append((type(s).__name__, tuple(batch), m, n))
        return real(ctx, s, batch, m, n)
    real = dense.product
    monkeypatch.setattr(dense, "product", spy)
    monkeypatch.setattr(int8_fc, "product", spy)
    return seen


@pytest.mark.parametrize("board", ["host", "rpi4"])
def test_float_gemm_and_int8_fc_run_the_one_product(strategies, board):
    target = get_board(board).target
    gemm = single_op_graph("Gemm", [((3, 10), "float32"),
                                    np.ones((10, 13), np.float32)])
    lower_graph(gemm, target)
    lower_graph(fc_model(True, False, x_shape=(2, 3, 36), units=24), target)
    assert ("FloatProduct", (), 3, 13) in strategies
    # one FC row per index of the output's leading dims (2 x 3 rows of 36
    # flattened to 6), the units across the lanes
    assert ("Int8Product", (6,), 1, 24) in strategies


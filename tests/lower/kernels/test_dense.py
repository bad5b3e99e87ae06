"""The dense product is written once (aot/lower/kernels/dense.py: product) for
every accumulator strategy: the float Gemm / MatMul / pointwise conv and the
int8 fully connected layer both run its loop nest."""
from __future__ import annotations

import dataclasses

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



@pytest.mark.parametrize("rows", ["rows", "flat"])
def test_pointwise_conv_blocks_its_pixels_either_way(rows):
    """The pixel_rows site's two answers on a 6x6 map (blocks along each
    row, or across rows over the whole map) compute the same conv."""
    from aot.lower.schedule.space import Config, Schedules, applied
    from aot.testing.kernels import compare_with_interpreter

    rng = np.random.default_rng(0)
    graph = single_op_graph("Conv", [((1, 32, 6, 6), "float32"),
                                     rng.standard_normal((24, 32, 1, 1)).astype(np.float32),
                                     rng.standard_normal(24).astype(np.float32)])
    target = get_board("host").target
    seen = Schedules(record=True)
    with applied(seen):
        plain = lower_graph(graph, target)
    keys = [key for key, (_, defaults, _) in seen.seen.items() if "pixel_rows" in defaults]
    assert len(keys) == 1 and seen.seen[keys[0]][1]["pixel_rows"] == "rows"     # x86's default
    x = {"x0": rng.standard_normal((1, 32, 6, 6)).astype(np.float32)}
    with applied(Schedules({keys[0]: Config.of({"pixel_rows": rows})})):
        tuned = lower_graph(graph, target)
        assert compare_with_interpreter({rows: (graph, x)}, target=target) == {rows: None}
    assert ([k.func for k in plain] == [k.func for k in tuned]) == (rows == "rows")


def test_by_lane_steps_two_a_trip_then_an_odd_one():
    """Arm's by-lane reductions longer than UNROLL_LANE_STEPS take two steps
    a loop trip, then an odd last step and the single ones: a Gemm 30 deep
    (7 by-lane steps, 2 single) and a pointwise conv 40 deep (10) lowered
    for the A72, run in the lane formulas on this machine against aot's
    reference interpreter."""
    from aot.ir.tir import For, walk_stmt
    from aot.interp import interpret
    from aot.lower.kernels.tiles import LANE_STEPS_A_TRIP
    from aot.testing.kernels import compile_kernels, host_target, run_kernels

    rng = np.random.default_rng(1)
    graphs = [single_op_graph("Gemm", [((3, 30), "float32"),
                                       rng.standard_normal((30, 13)).astype(np.float32)]),
              single_op_graph("Conv", [((1, 40, 6, 6), "float32"),
                                       rng.standard_normal((24, 40, 1, 1)).astype(np.float32)])]
    target = get_board("rpi4").target
    kernels = [[dataclasses.replace(k, func=dataclasses.replace(k.func, name=f"c{n}_{k.func.name}"))
                for k in lower_graph(g, target)] for n, g in enumerate(graphs)]
    steps = {f.step for ks in kernels for k in ks for f in walk_stmt(k.func.body)
             if isinstance(f, For) and f.var.name.startswith("k")}
    assert 4 * LANE_STEPS_A_TRIP in steps
    lib, symbols = compile_kernels([k for ks in kernels for k in ks], "c", None, host_target())
    for g, ks in zip(graphs, kernels):
        feeds = {name: rng.standard_normal(g.types[name].shape).astype(np.float32)
                 for name in g.inputs}
        got, want = run_kernels(lib, symbols, g, ks, feeds), interpret(g, feeds)
        for name in g.outputs:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)

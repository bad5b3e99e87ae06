"""Helpers for checking that a transformation preserves behaviour.

Not product: this package holds what the tests, bench/ and scripts/ build
with (tflite_builder, yolo, kernels, the fuzzers of fuzz/); it may import
anything, and nothing in the product imports it.

`assert_same_behaviour` runs two graphs on random inputs (aot/check/inputs.py)
with the reference interpreter and compares every output (exactly for
integer outputs).
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

from aot.check.inputs import random_inputs
from aot.interp import interpret
from aot.ir.graph import Graph


def run_twice(graph: Graph, inputs: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """Outputs of two successive runs (a stateful graph carries its state
    from the first to the second), then the final state."""
    state = {k: np.array(v) for k, v in graph.variables.items()}
    runs = [interpret(graph, inputs, state)]
    if graph.variables:
        runs.append(interpret(graph, inputs, state))
        runs.append({f"state:{k}": v for k, v in state.items()})
    return runs


def assert_close(name: str, got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (
        f"output {name}: {got.dtype}{list(got.shape)} vs {want.dtype}{list(want.shape)}")
    if want.dtype.kind in "iub":
        diff = np.flatnonzero(got.reshape(-1) != want.reshape(-1))
        assert diff.size == 0, (
            f"output {name}: {diff.size} of {want.size} integers differ, first at flat "
            f"index {diff[0]}: {got.reshape(-1)[diff[0]]} vs {want.reshape(-1)[diff[0]]}")
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"output {name}")


def assert_same_behaviour(before: Graph, after: Graph, seeds: Iterable[int] = (0, 1),
                          rtol: float = 1e-4, atol: float = 1e-4) -> None:
    """Both graphs give the same outputs on random inputs (same names, dtypes,
    shapes; integer outputs bit-exact, floats within rtol/atol)."""
    assert tuple(before.inputs) == tuple(after.inputs), "inputs differ"
    assert tuple(before.outputs) == tuple(after.outputs), "outputs differ"
    for name in before.inputs:
        assert before.types[name] == after.types[name], f"input {name} changed type"
    for seed in seeds:
        inputs = random_inputs(before, seed)
        for want, got in zip(run_twice(before, inputs), run_twice(after, inputs)):
            assert want.keys() == got.keys()
            for name in want:
                assert_close(name, got[name], want[name], rtol, atol)

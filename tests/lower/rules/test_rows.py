"""CumSum/CumProd, LpNormalization and Det (aot/ops/rows.py, aot/lower/rules/rows.py)
compiled and run against the interpreter, on what the ONNX node cases miss:
float32 running sums in every direction (the node cases are float64), int8
products that wrap, a zero row, and determinants that need row swaps or are
singular (the node cases are 2 x 2 and 3 x 3 without either)."""
from __future__ import annotations

import numpy as np
import pytest

from aot.testing.kernels import compare_with_interpreter, single_op_graph
from aot.ops.rows import _det

F = "float32"


def _cases():
    rng = np.random.default_rng(7)
    cases = {}
    for op in ("CumSum", "CumProd"):
        for ex in (0, 1):
            for rev in (0, 1):
                g = single_op_graph(op, [((3, 5, 4), F), np.array(1, np.int64)],
                                    {"exclusive": ex, "reverse": rev})
                cases[f"{op}-ex{ex}-rev{rev}"] = (g, {"x0": rng.uniform(0.5, 1.5, (3, 5, 4))
                                                      .astype(np.float32)})
    g = single_op_graph("CumProd", [((2, 9), "int8"), np.array(-1, np.int32)])
    cases["CumProd-int8-wraps"] = (g, {"x0": rng.integers(-9, 9, (2, 9)).astype(np.int8)})
    for p in (1, 2):
        g = single_op_graph("LpNormalization", [((3, 4), F)], {"axis": 0, "p": p})
        x = rng.normal(size=(3, 4)).astype(np.float32)
        x[:, 2] = 0
        cases[f"LpNormalization-p{p}-zero-column"] = (g, {"x0": x})
    pivots = np.array([[0, 2, 1], [1, 0, 3], [4, 1, 0]], np.float32)   # a[0][0] = 0: a swap
    singular = np.array([[1, 2, 3], [2, 4, 6], [1, 0, 1]], np.float32)
    for name, x in (("random", rng.normal(size=(2, 3, 6, 6)).astype(np.float32)),
                    ("pivots", pivots), ("singular", singular)):
        g = single_op_graph("Det", [(x.shape, F)])
        cases[f"Det-{name}"] = (g, {"x0": x})
    return cases


CASES = _cases()


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_rows_against_interpreter(codegen):
    result = compare_with_interpreter(CASES, codegen=codegen, rtol=1e-4, atol=1e-5)
    bad = {k: v for k, v in result.items() if v}
    assert not bad, bad


def test_det_reference():
    """The interpreter itself: a swap negates, a singular matrix gives 0."""
    from aot.ir.graph import TensorType
    from aot.ops.registry import Call

    def det(x):
        t = TensorType(x.shape, "float32")
        return float(_det(Call(None, (t,), (TensorType((), "float32"),)), [x])[0])
    assert det(np.array([[0, 1], [1, 0]], np.float32)) == pytest.approx(-1)
    assert det(np.array([[1, 2], [2, 4]], np.float32)) == pytest.approx(0, abs=1e-6)

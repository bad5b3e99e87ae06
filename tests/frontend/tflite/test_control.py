"""TFLite IF and WHILE on hostile structure (aot/frontend/tflite/control.py):
recursion, branches sharing a callee at every level, loops nested in loops,
the deepest nesting allowed. Each ends quickly in a result or one line."""
from __future__ import annotations

import numpy as np
import pytest

import aot
from aot.cli import main
from aot.errors import BudgetError, UnsupportedError
from aot.frontend.tflite.importer import import_tflite
from aot.limits import MAX_INLINED_NODES, MAX_NESTING
from aot.testing.fuzz.models import alarm_after
from support.tflite_control import SHAPE, chained_if, doubling_if, if_model, nested_while

X = np.arange(SHAPE[0], dtype=np.float32)


def _outputs(data: bytes, feeds: list) -> list[np.ndarray]:
    g = import_tflite(data, "m")
    out = aot.interpret(g, dict(zip(g.inputs, feeds)))
    return [out[o] for o in g.outputs]


def test_the_deepest_nesting_allowed_imports_and_one_more_is_refused():
    # MAX_NESTING - 1 IF levels, each a subgraph, then the leaf they all reach
    deepest = chained_if(MAX_NESTING - 1)
    for cond in (True, False):
        np.testing.assert_array_equal(_outputs(deepest, [np.array([cond]), X])[0], X + 1)
    with pytest.raises(UnsupportedError, match=f"IF node 'y': control flow nested more than "
                                               f"{MAX_NESTING} subgraphs deep"):
        import_tflite(chained_if(MAX_NESTING), "m")


@pytest.mark.parametrize("calls, cycle", [
    ([(1, 2)], "subgraph 1 -> subgraph 1"),                     # a branch that is itself
    ([(2, 3), (1, 3)], "subgraph 1 -> subgraph 2 -> subgraph 1"),  # mutual recursion
])
def test_recursion_is_refused_with_the_cycle_named(calls, cycle):
    with pytest.raises(UnsupportedError) as e:
        import_tflite(if_model(calls), "m")
    assert f"IF node 'y': subgraph 1 calls itself ({cycle})" in str(e.value)


def test_branches_calling_the_same_subgraph_stop_at_the_node_budget(tmp_path, capsys):
    """30 levels whose two branches both call the next: 2**30 paths in 7 KB."""
    path = tmp_path / "doubling.tflite"
    path.write_bytes(doubling_if(30))
    with alarm_after(20):
        code = main(["graph", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "IF node 'y' (inside subgraph" in err[0]
    assert f"adds more than {MAX_INLINED_NODES} nodes" in err[0]


@pytest.mark.parametrize("trips", [[1000, 1000], [100, 100]])
def test_nested_whiles_stop_at_the_node_budget(trips):
    """Each loop within the unroll limit, together past the node budget."""
    with alarm_after(20), pytest.raises(BudgetError, match="WHILE node 'i_out' .*nested 2 deep"):
        import_tflite(nested_while(trips), "m")


def test_nested_whiles_within_the_budget_unroll_exactly():
    data = nested_while([3, 2, 4])
    g = import_tflite(data, "m")
    assert sum(n.op == "Mul" for n in g.nodes) == 3 * 2 * 4
    np.testing.assert_allclose(_outputs(data, [X])[0], X * 0.5 ** 24)

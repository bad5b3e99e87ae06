"""ONNX If, Loop and Scan (aot/frontend/onnx_control.py): exporter-shaped models
against ONNX Runtime (on host through the package, and in the interpreter),
the refusals (one line naming the node and why, exit 2), and the ONNX
backend node cases of the three ops."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import aot
from aot.cli import main
from aot.limits import MAX_INLINED_NODES, MAX_UNROLL
from support.control_models import init, save, scan_cumsum, torchscript_loop, vad_if, vi

RNG = np.random.default_rng(3)


def ort_run(path, feeds):
    return ort.InferenceSession(str(path)).run(None, feeds)


def refused(capsys, path, *extra) -> str:
    code = main(["graph", str(path), *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    return err[0]


# ---- on the board against ONNX Runtime ----------------------------------------------------

def test_loop_unrolled_verifies_on_host(tmp_path):
    path = torchscript_loop(tmp_path / "loop.onnx", trips=6)
    out = aot.verify(path, board="host", count=2)
    assert out["ok"] and out["reference"] == "onnxruntime", out
    assert [o["name"] for o in out["outputs"]] == ["h_final", "sums"]


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_verifies_on_host(tmp_path, reverse):
    out = aot.verify(scan_cumsum(tmp_path / "scan.onnx", reverse), board="host", count=2)
    assert out["ok"], out


def test_if_on_a_runtime_condition_computes_both_and_selects(tmp_path):
    path = vad_if(tmp_path / "vad.onnx")
    g = aot.optimize(aot.load(path, input_shapes={"x": "2x4"}))
    assert g.inputs == ("x", "sr")
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    for sr in (16000, 8000):
        got = aot.interpret(g, {"x": x, "sr": np.array(sr)})["output"]
        np.testing.assert_allclose(got, ort_run(path, {"x": x, "sr": np.array(sr)})[0],
                                   rtol=1e-5, atol=1e-6)
    # on the board: sr 16000 and 8000 in one dataset, both branches taken
    np.savez(tmp_path / "ds.npz", x=np.stack([x, x]), sr=np.array([16000, 8000]))
    out = aot.verify(path, board="host", dataset=tmp_path / "ds.npz",
                     input_shapes={"x": "2x4"})
    assert out["ok"] and out["samples"] == 2, out


def test_nested_if_and_subgraph_initializers_in_the_taken_branch(tmp_path):
    path = vad_if(tmp_path / "vad.onnx")
    g = aot.load(path, input_shapes={"x": "1x4"}, bind={"sr": 8000})
    # the 8 kHz branch's nested If on Shape(x)[1] == 4 is resolved too: Relu, not Neg
    ops = [n.op for n in g.nodes]
    assert "Relu" in ops and "Neg" not in ops and "If" not in ops


def test_if_on_the_iteration_number_inside_a_loop(tmp_path):
    """TorchScript's `if i == 0:` in a loop body: a nested If whose branches read
    the body's loop-carried input (renamed in every unrolled copy)."""
    first = h.make_graph([h.make_node("Mul", ["h_in", "two"], ["a"])], "first", [],
                         [vi("a", [2])], [init("two", np.float32(2))])
    later = h.make_graph([h.make_node("Add", ["h_in", "w"], ["b"])], "later", [],
                         [vi("b", [2])])
    body = h.make_graph(
        [h.make_node("Equal", ["i", "zero"], ["is0"]),
         h.make_node("If", ["is0"], ["h_out"], then_branch=first, else_branch=later),
         h.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [vi("i", [], T.INT64), vi("cond_in", [], T.BOOL), vi("h_in", [2])],
        [vi("cond_out", [], T.BOOL), vi("h_out", [2])], [init("zero", np.int64(0))])
    g = h.make_graph([h.make_node("Loop", ["n", "t", "h0"], ["h"], body=body)], "m",
                     [vi("h0", [2])], [vi("h", [2])],
                     [init("n", np.int64(4)), init("t", np.bool_(True)),
                      init("w", np.array([0.5, -1], np.float32))])
    path = save(g, tmp_path / "loop_if.onnx", opset=13)
    h0 = np.array([1, 3], np.float32)
    graph = aot.load(path)
    assert [n.op for n in graph.nodes].count("Mul") == 1      # only iteration 0 doubles
    got = aot.interpret(aot.optimize(graph), {"h0": h0})["h"]
    np.testing.assert_array_equal(got, ort_run(path, {"h0": h0})[0])


# ---- refusals ---------------------------------------------------------------------------------

def _if_model(tmp_path, then_shape, else_shape):
    then = h.make_graph([h.make_node("Reshape", ["x", "s1"], ["a"])], "t", [],
                        [vi("a", then_shape)], [init("s1", np.array(then_shape))])
    other = h.make_graph([h.make_node("Reshape", ["x", "s2"], ["b"])], "e", [],
                         [vi("b", else_shape)], [init("s2", np.array(else_shape))])
    g = h.make_graph([h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other,
                                  name="pick")], "m", [vi("x", [2, 6]), vi("c", [], T.BOOL)],
                     [vi("y", ["a", "b"])])
    return save(g, tmp_path / "if.onnx", opset=13)


def test_runtime_if_with_branches_of_different_shapes_is_refused(tmp_path, capsys):
    path = _if_model(tmp_path, [3, 4], [4, 3])
    line = refused(capsys, path)
    assert "If node 'pick': its condition is known only at run time and output 0 differs " \
           "between the branches (float32[3x4] vs float32[4x3])" in line
    code = main(["graph", str(path), "--bind", "c=false", "--json"])
    assert code == 0 and '"shape": [4, 3]' in capsys.readouterr().out


def _loop_model(tmp_path, trips, exit_on_data=False):
    cond = [h.make_node("ReduceSum", ["h_out"], ["s"], keepdims=0),
            h.make_node("Less", ["s", "limit"], ["cond_out"])] if exit_on_data else \
        [h.make_node("Identity", ["cond_in"], ["cond_out"])]
    body = h.make_graph([h.make_node("Add", ["h_in", "one"], ["h_out"]), *cond], "body",
                        [vi("i", [], T.INT64), vi("cond_in", [], T.BOOL), vi("h_in", [2])],
                        [vi("cond_out", [], T.BOOL), vi("h_out", [2])],
                        [init("one", np.float32(1)), init("limit", np.float32(100))])
    g = h.make_graph([h.make_node("Loop", ["n", "", "h0"], ["h"], body=body, name="steps")],
                     "m", [vi("h0", [2])], [vi("h", [2])], [init("n", np.int64(trips))])
    return save(g, tmp_path / "loop.onnx", opset=13)


def test_loop_refusals(tmp_path, capsys):
    line = refused(capsys, _loop_model(tmp_path, 4, exit_on_data=True))
    assert "Loop node 'steps': its exit condition is known only at run time (after " \
           "iteration 0); aot unrolls loops without a data-dependent exit only" in line
    line = refused(capsys, _loop_model(tmp_path, MAX_UNROLL + 1))
    assert f"Loop node 'steps': trip count {MAX_UNROLL + 1} is above the unroll limit of " \
           f"{MAX_UNROLL} iterations" in line


def test_torchscript_while_exits_on_a_compile_time_condition(tmp_path):
    """`while i < 5` scripted: trip count INT64_MAX, the exit condition computed
    from the iteration number, so known after every iteration."""
    body = h.make_graph(
        [h.make_node("Add", ["i", "one"], ["next_i"]),
         h.make_node("Less", ["next_i", "five"], ["cond_out"]),
         h.make_node("Mul", ["h_in", "half"], ["h_out"])], "body",
        [vi("i", [], T.INT64), vi("cond_in", [], T.BOOL), vi("h_in", [3])],
        [vi("cond_out", [], T.BOOL), vi("h_out", [3])],
        [init("one", np.int64(1)), init("five", np.int64(5)), init("half", np.float32(0.5))])
    g = h.make_graph([h.make_node("Loop", ["max", "t", "h0"], ["h"], body=body)], "m",
                     [vi("h0", [3])], [vi("h", [3])],
                     [init("max", np.int64(np.iinfo(np.int64).max)), init("t", np.bool_(True))])
    path = save(g, tmp_path / "while.onnx", opset=13)
    h0 = np.array([32, -8, 1], np.float32)
    got = aot.interpret(aot.optimize(aot.load(path)), {"h0": h0})["h"]
    np.testing.assert_array_equal(got, ort_run(path, {"h0": h0})[0])
    np.testing.assert_array_equal(got, h0 / 32)


def test_loop_at_the_limit_is_unrolled_and_exact(tmp_path):
    path = _loop_model(tmp_path, 300)
    h0 = np.array([0.5, -2], np.float32)
    got = aot.interpret(aot.optimize(aot.load(path)), {"h0": h0})["h"]
    np.testing.assert_array_equal(got, ort_run(path, {"h0": h0})[0])


# ---- the ONNX backend node cases --------------------------------------------------------------

def _scan8_model(tmp_path, lens):
    body = h.make_graph([h.make_node("Add", ["acc_in", "row"], ["acc_out"]),
                         h.make_node("Identity", ["acc_out"], ["o"])], "body",
                        [vi("acc_in", [2]), vi("row", [2])], [vi("acc_out", [2]), vi("o", [2])])
    g = h.make_graph([h.make_node("Scan", ["lens", "acc0", "x"], ["acc", "ys"], body=body,
                                  num_scan_inputs=1, directions=[1], name="scan8")],
                     "m", [vi("acc0", [2, 2]), vi("x", [2, 3, 2])],
                     [vi("acc", [2, 2]), vi("ys", [2, 3, 2])],
                     [init("lens", np.array(lens, np.int64))])
    return save(g, tmp_path / "scan8.onnx", opset=8)


def test_scan8_batch_rows_and_sequence_lens(tmp_path, capsys):
    path = _scan8_model(tmp_path, [3, 3])
    feeds = {"acc0": RNG.standard_normal((2, 2)).astype(np.float32),
             "x": RNG.standard_normal((2, 3, 2)).astype(np.float32)}
    got = aot.interpret(aot.optimize(aot.load(path)), feeds)
    for name, want in zip(("acc", "ys"), ort_run(path, feeds)):
        np.testing.assert_allclose(got[name], want, rtol=1e-6, atol=1e-6)
    line = refused(capsys, _scan8_model(tmp_path, [3, 2]))
    assert "Scan node 'scan8': sequence_lens [3, 2] shorter than the scan inputs" in line


@pytest.mark.parametrize("name", ["test_if", "test_loop11", "test_scan_sum", "test_scan9_sum",
                                  "test_scan9_multi_state", "test_scan9_scalar"])
def test_onnx_node_cases(name):
    from support.conformance import cases, run_case

    case = next(c for _, c in cases() if c.name == name)
    assert run_case(case) is None


def test_mutated_control_flow_is_refused_in_one_line(tmp_path):
    """aot.testing.fuzz.models's ONNX mutators over the control-flow models: every mutant loads
    and optimizes, or is refused with an AotError; nothing else escapes."""
    from aot.errors import AotError
    from aot.testing.fuzz.models import Skip, mutate

    sources = [vad_if(tmp_path / "vad.onnx"), torchscript_loop(tmp_path / "loop.onnx"),
               scan_cumsum(tmp_path / "scan.onnx", True)]
    ran = 0
    for src in sources:
        for seed in range(60):
            try:
                m = mutate(src, seed)
            except Skip:
                continue
            path = tmp_path / f"mutant{m.suffix}"
            path.write_bytes(m.data)
            try:
                aot.optimize(aot.load(path))
            except AotError:
                pass
            except Exception as e:  # noqa: BLE001 - the failure this test looks for
                pytest.fail(f"{m.label()}: {type(e).__name__}: {e}")
            ran += 1
    assert ran > 100


def test_unrolled_node_limit(tmp_path, capsys):
    adds = [h.make_node("Add", [f"h{k}" if k else "h_in", "one"],
                        [f"h{k + 1}" if k < 9 else "h_out"]) for k in range(10)]
    body = h.make_graph([*adds, h.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
                        [vi("i", [], T.INT64), vi("cond_in", [], T.BOOL), vi("h_in", [2])],
                        [vi("cond_out", [], T.BOOL), vi("h_out", [2])],
                        [init("one", np.float32(1))])
    trips = MAX_INLINED_NODES // 11 + 1
    g = h.make_graph([h.make_node("Loop", ["n", "", "h0"], ["h"], body=body, name="long")],
                     "m", [vi("h0", [2])], [vi("h", [2])], [init("n", np.int64(trips))])
    line = refused(capsys, save(g, tmp_path / "long.onnx", opset=13))
    assert f"Loop node 'long': unrolling {trips} iterations of 11 nodes is above the limit " \
           f"of {MAX_INLINED_NODES} nodes" in line


def test_nested_loops_share_one_node_budget(tmp_path, capsys):
    """Each Loop within the unroll limits, the copies together past the budget
    of the model: refused at the budget, not after 10 x 1,000 copies."""
    inner = h.make_graph([h.make_node("Add", ["x_in", "one"], ["x_out"]),
                          h.make_node("Identity", ["c_in"], ["c_out"])], "inner",
                         [vi("j", [], T.INT64), vi("c_in", [], T.BOOL), vi("x_in", [2])],
                         [vi("c_out", [], T.BOOL), vi("x_out", [2])],
                         [init("one", np.float32(1))])
    outer = h.make_graph([h.make_node("Loop", ["m", "", "h_in"], ["h_out"], body=inner,
                                      name="inner"),
                          h.make_node("Identity", ["cond_in"], ["cond_out"])], "outer",
                         [vi("i", [], T.INT64), vi("cond_in", [], T.BOOL), vi("h_in", [2])],
                         [vi("cond_out", [], T.BOOL), vi("h_out", [2])],
                         [init("m", np.int64(1000))])
    g = h.make_graph([h.make_node("Loop", ["n", "", "h0"], ["h"], body=outer, name="outer")],
                     "m", [vi("h0", [2])], [vi("h", [2])], [init("n", np.int64(10))])
    line = refused(capsys, save(g, tmp_path / "nested.onnx", opset=13))
    assert f"Loop node 'outer/4/inner': inlining the model's control flow adds more than " \
           f"{MAX_INLINED_NODES} nodes" in line

"""Tree ensembles (aot/ops/trees.py): the numpy reference against ONNX
Runtime, op by op, on skl2onnx's models and on hand-built ensembles that
reach what exporters rarely write (every node mode, missing-value tracks,
MIN/MAX/AVERAGE, every post transform, float64 *_as_tensor thresholds,
opset-5 TreeEnsemble with membership sets); then the compiled kernels, both
schedules, against the reference."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import aot
from aot.errors import UnsupportedError
from aot.frontend import load
from aot.interp import interpret
from aot.lower.schedule import trees as tree_schedule
from aot.ops.trees import forest_of
from aot.testing.kernels import build_and_run_many
from support import sklearn_trees

FEATURES = 4
ROWS = 40


def _model(op: str, attrs: dict, outputs, ml_opset: int = 3, rows: int = ROWS,
           dtype=TensorProto.FLOAT) -> bytes:
    x = helper.make_tensor_value_info("X", dtype, [rows, FEATURES])
    outs = [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs]
    node = helper.make_node(op, ["X"], [o.name for o in outs], domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph([node], "trees", [x], outs)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                helper.make_opsetid("ai.onnx.ml", ml_opset)])
    m.ir_version = 10
    return m.SerializeToString()


# Two trees over features 0-3. Tree 0: node 0 tests f0, node 1 f1, leaves
# 2, 3, 4. Tree 1: node 0 tests f2, node 2 f3, leaves 1, 3, 4.
def _trees(modes=("BRANCH_LEQ",) * 4, missing=(0, 0, 0, 0), values=(0.0, 0.5, -0.25, 1.0)):
    m = list(modes)
    return dict(
        nodes_treeids=[0, 0, 0, 0, 0, 1, 1, 1, 1, 1],
        nodes_nodeids=[0, 1, 2, 3, 4, 0, 1, 2, 3, 4],
        nodes_featureids=[0, 1, 0, 0, 0, 2, 0, 3, 0, 0],
        nodes_modes=[m[0], m[1], "LEAF", "LEAF", "LEAF", m[2], "LEAF", m[3], "LEAF", "LEAF"],
        nodes_values=[values[0], values[1], 0, 0, 0, values[2], 0, values[3], 0, 0],
        nodes_truenodeids=[1, 2, 0, 0, 0, 1, 0, 3, 0, 0],
        nodes_falsenodeids=[4, 3, 0, 0, 0, 2, 0, 4, 0, 0],
        nodes_missing_value_tracks_true=[missing[0], missing[1], 0, 0, 0,
                                         missing[2], 0, missing[3], 0, 0])


LEAVES = [(0, 2), (0, 3), (0, 4), (1, 1), (1, 3), (1, 4)]


def _regressor(targets=1, weights=None, **kw) -> dict:
    rng = np.random.RandomState(targets)
    votes = [(t, n, k) for t, n in LEAVES for k in range(targets)]
    w = weights if weights is not None else rng.uniform(-1, 1, len(votes)).round(3)
    return dict(n_targets=targets, target_treeids=[v[0] for v in votes],
                target_nodeids=[v[1] for v in votes], target_ids=[v[2] for v in votes],
                target_weights=[float(v) for v in w], **kw)


def _classifier(classes=3, columns=None, weights=None, **kw) -> dict:
    columns = list(range(classes)) if columns is None else columns
    rng = np.random.RandomState(classes)
    votes = [(t, n, k) for t, n in LEAVES for k in columns]
    w = weights if weights is not None else rng.uniform(-1, 1, len(votes)).round(3)
    return dict(classlabels_int64s=list(range(10, 10 + classes)),
                class_treeids=[v[0] for v in votes], class_nodeids=[v[1] for v in votes],
                class_ids=[v[2] for v in votes], class_weights=[float(v) for v in w], **kw)


def _inputs(rows: int = ROWS, seed: int = 0) -> np.ndarray:
    """Random rows, some exactly on a threshold, some NaN."""
    x = np.random.RandomState(seed).uniform(-1.5, 1.5, (rows, FEATURES)).astype(np.float32)
    x[0] = [0.0, 0.5, -0.25, 1.0]            # every threshold hit exactly
    x[1, 1], x[2, 3], x[3, 0], x[4, 2] = 0.5, 1.0, 0.0, -0.25
    x[5:9] = np.where(np.eye(FEATURES, dtype=bool), np.nan, x[5:9])
    x[9] = np.nan
    x[10:16, 0] = [0, 1, 2, 3, -1, 1.5]     # members and near misses of the set {0, 1, 3}
    return x


REG = [("Y", TensorProto.FLOAT, [ROWS, 1])]


def _reg_out(targets: int):
    return [("Y", TensorProto.FLOAT, [ROWS, targets])]


def _cls_out(classes: int):
    return [("label", TensorProto.INT64, [ROWS]),
            ("scores", TensorProto.FLOAT, [ROWS, classes])]


MODES = ("BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ")
CASES = {
    "regressor-leq": ("TreeEnsembleRegressor", {**_trees(), **_regressor()}, REG),
    "regressor-modes-missing": ("TreeEnsembleRegressor", {
        **_trees(MODES, (1, 0, 1, 1)), **_regressor(base_values=[0.25])}, REG),
    "regressor-neq-average": ("TreeEnsembleRegressor", {
        **_trees(("BRANCH_NEQ", "BRANCH_LEQ", "BRANCH_NEQ", "BRANCH_GT"), (0, 1, 0, 0)),
        **_regressor(aggregate_function="AVERAGE", base_values=[-0.5])}, REG),
    "regressor-min": ("TreeEnsembleRegressor", {
        **_trees(), **_regressor(aggregate_function="MIN")}, REG),
    "regressor-max-probit": ("TreeEnsembleRegressor", {
        **_trees(missing=(1, 1, 1, 1)), **_regressor(
            weights=np.linspace(0.1, 0.9, 6), aggregate_function="MAX",
            post_transform="PROBIT")}, REG),
    "regressor-3-softmax": ("TreeEnsembleRegressor", {
        **_trees(), **_regressor(3, post_transform="SOFTMAX", base_values=[0.1, 0.2, 0.3])},
        _reg_out(3)),
    "regressor-3-max-logistic": ("TreeEnsembleRegressor", {
        **_trees(MODES), **_regressor(3, aggregate_function="MAX",
                                      post_transform="LOGISTIC")}, _reg_out(3)),
    "regressor-2-softmax-zero": ("TreeEnsembleRegressor", {
        **_trees(), **_regressor(2, weights=[0, 1, 0.5, 0, 0, -1, 2, 0, 0, 0, 0.5, 0.25],
                                 post_transform="SOFTMAX_ZERO")}, _reg_out(2)),
    "regressor-double": ("TreeEnsembleRegressor", {
        **{k: v for k, v in _trees(values=(0.1, 0.3, -0.7, 0.2)).items() if k != "nodes_values"},
        "nodes_values_as_tensor": numpy_helper.from_array(
            np.array([0.1, 0.3, 0, 0, 0, -0.7, 0, 0.2, 0, 0], np.float64)),
        **{k: v for k, v in _regressor(2).items() if k != "target_weights"},
        "target_weights_as_tensor": numpy_helper.from_array(np.linspace(-1, 1, 12)),
        "base_values_as_tensor": numpy_helper.from_array(np.array([0.5, -0.5]))},
        _reg_out(2)),
    "classifier-3-softmax": ("TreeEnsembleClassifier", {
        **_trees(MODES, (0, 1, 0, 1)), **_classifier(post_transform="SOFTMAX",
                                                     base_values=[0.1, 0, -0.1])}, _cls_out(3)),
    "classifier-4-sparse": ("TreeEnsembleClassifier", {
        **_trees(), **_classifier(4, columns=[1, 3])}, _cls_out(4)),
    "classifier-binary-one-column": ("TreeEnsembleClassifier", {
        **_trees(), **_classifier(2, columns=[1], post_transform="LOGISTIC",
                                  base_values=[0.3])}, _cls_out(2)),
    "classifier-binary-positive": ("TreeEnsembleClassifier", {
        **_trees(), **_classifier(2, columns=[1], weights=np.linspace(0.1, 0.9, 6))},
        _cls_out(2)),
    "classifier-binary-both": ("TreeEnsembleClassifier", {
        **_trees(), **_classifier(2, base_values=[0.2, -0.2])}, _cls_out(2)),
}


def _tree_ensemble_v5(rows: int = ROWS) -> bytes:
    """Opset-5 TreeEnsemble, two trees: tree 0 tests f0 in {0, 1, 3}
    (membership, NaN goes true), then f1 < 0.5; tree 1 a single leaf."""
    f = lambda *v: numpy_helper.from_array(np.array(v, np.float32))  # noqa: E731
    attrs = dict(
        n_targets=2, aggregate_function=1, post_transform=0, tree_roots=[0, 3],
        nodes_featureids=[0, 1, 0, 0], nodes_modes=numpy_helper.from_array(
            np.array([6, 1, 0, 0], np.uint8)),
        nodes_splits=f(0, 0.5, 0, 0), nodes_truenodeids=[0, 1, 0, 3],
        nodes_trueleafs=[1, 1, 0, 1], nodes_falsenodeids=[1, 2, 0, 3],
        nodes_falseleafs=[0, 1, 0, 1], nodes_missing_value_tracks_true=[1, 0, 0, 0],
        membership_values=f(0, 1, 3, np.nan), leaf_targetids=[0, 1, 0, 1],
        leaf_weights=f(1.5, -2, 0.25, 3))
    return _model("TreeEnsemble", attrs, _reg_out(2), ml_opset=5, rows=rows)


def _ort(data: bytes, x: np.ndarray) -> list[np.ndarray]:
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})


def _compare(got: dict, want: list, outputs) -> None:
    for o, w in zip(outputs, want):
        g = got[o].reshape(w.shape)
        if w.dtype.kind == "i":
            np.testing.assert_array_equal(g, w, err_msg=o)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=o)


def _case(name: str) -> tuple[bytes, list, np.ndarray]:
    """The model, its outputs and its input (float64 for "-double" cases,
    whose float64 tensor attributes ONNX Runtime reads for float64 inputs only)."""
    if name == "tree-ensemble-v5":
        return _tree_ensemble_v5(), ["Y"], _inputs()
    op, attrs, outs = CASES[name]
    double = name.endswith("-double")
    data = _model(op, attrs, outs, dtype=TensorProto.DOUBLE if double else TensorProto.FLOAT)
    return data, [o[0] for o in outs], _inputs().astype(np.float64 if double else np.float32)


ALL = [*CASES, "tree-ensemble-v5"]


@pytest.mark.parametrize("name", ALL)
def test_reference_matches_onnxruntime(name, tmp_path):
    data, outs, x = _case(name)
    want = _ort(data, x)
    graph = load(_file(tmp_path, data))
    _compare(interpret(graph, {"X": x}), want, outs)


def _file(tmp_path, data: bytes):
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    return path


def test_membership_unrolls_into_equality_chains():
    data, _, _ = _case("tree-ensemble-v5")
    node = onnx.load_from_string(data).graph.node[0]
    from aot.ir.graph import Node
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    attrs = {k: numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v
             for k, v in attrs.items()}
    forest = forest_of(Node("TreeEnsemble", "t", ("X",), ("Y",), attrs), "float32")
    assert forest.threshold[:3].tolist() == [0, 1, 3] and forest.depth() == 4
    assert forest.missing_true[:3].all()


@pytest.mark.parametrize("name", sorted(sklearn_trees.BUILDERS.keys() - {"isolation_forest"}))
def test_sklearn_models_match_onnxruntime(name):
    """skl2onnx's own ensembles, with NaNs and rows on their thresholds."""
    path = sklearn_trees.path(name)
    graph = load(path)
    (node,) = [n for n in graph.nodes if n.op.startswith("TreeEnsemble")]
    forest = forest_of(node, "float32")
    x = sklearn_trees.features(24)
    x[:8, forest.feature[:8]] = forest.threshold[:8]      # exactly on a split
    x[8:12, :3] = np.nan
    data = path.read_bytes()
    for row in x:            # the model takes one row
        _compare(interpret(graph, {"X": row[None]}), _ort(data, row[None]), graph.outputs)


# ---- the compiled kernels ------------------------------------------------------------------

@pytest.mark.parametrize("walk", ["if_else", "node_arrays"])
def test_kernels_match_the_reference(walk, tmp_path, monkeypatch):
    """Every case compiled (one build) with the schedule forced, against the reference."""
    if walk == "node_arrays":
        monkeypatch.setattr(tree_schedule, "IF_ELSE_MAX_NODES", 0)
    cases, expect = [], []
    for name in ALL:
        data, outs, x = _case(name)
        path = tmp_path / f"{name}.onnx"
        path.write_bytes(data)
        graph = aot.optimize(load(path))
        cases.append((graph, {"X": x}))
        expect.append((name, outs, _ort(data, x)))
    for got, (name, outs, want) in zip(build_and_run_many(cases), expect):
        _compare(got, want, outs)


def test_schedule_is_if_else_for_small_and_arrays_for_large():
    from aot.targets import get_board
    target = get_board("mps2-an386").target
    small = forest_of(load(sklearn_trees.path("gradient_boosting_classifier")).nodes[0], "float32")
    large = forest_of(load(sklearn_trees.path("random_forest")).nodes[0], "float32")
    assert tree_schedule.tree_schedule(target, small).walk == "if_else"
    assert tree_schedule.tree_schedule(target, large).walk == "node_arrays"


# ---- refusals ----------------------------------------------------------------------------------

def test_string_labels_are_refused_naming_the_node(tmp_path):
    attrs = _classifier(2)
    attrs.pop("classlabels_int64s")
    data = _model("TreeEnsembleClassifier", {**_trees(), **attrs,
                                             "classlabels_strings": ["a", "b"]},
                  [("label", TensorProto.STRING, [ROWS]),
                   ("scores", TensorProto.FLOAT, [ROWS, 2])])
    with pytest.raises(UnsupportedError, match="string class labels"):
        load(_file(tmp_path, data))


def test_an_unknown_ml_op_is_refused_naming_op_node_and_domain(tmp_path):
    data = _model("TreeEnsembleSomething", {}, REG)
    with pytest.raises(UnsupportedError, match="TreeEnsembleSomething.*ai.onnx.ml"):
        load(_file(tmp_path, data))


def test_a_child_outside_the_tree_is_refused(tmp_path):
    attrs = {**_trees(), **_regressor()}
    attrs["nodes_truenodeids"] = [1, 2, 0, 0, 0, 7, 0, 3, 0, 0]
    with pytest.raises(aot.errors.ModelError, match="node 0 of tree 1 points to node 7"):
        load(_file(tmp_path, _model("TreeEnsembleRegressor", attrs, REG)))

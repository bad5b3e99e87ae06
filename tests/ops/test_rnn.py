"""ONNX LSTM, GRU and RNN (aot/ops/rnn.py, aot/lower/rules/rnn.py).

* The onnx package's backend node cases of the three ops, in the
  interpreter and packaged on the host with both code generators.
* Random nodes over the attributes (directions, activations with their
  alpha/beta, clip, linear_before_reset, input_forget, peepholes, constant
  sequence_lens, initial states as inputs or constants) against ONNX
  Runtime, interpreted and packaged. ONNX Runtime refuses layout 1, so a
  layout-1 node is compared with its layout-0 twin on transposed data.
* Models laid out as PyTorch's exporter writes nn.LSTM / nn.GRU
  (batch_first: Transposes around a layout-0 node, two stacked
  bidirectional layers, initial states as inputs, Y reshaped between the
  layers; one direction: Y squeezed) verified against ONNX Runtime on the
  host, and one each on qemu-aarch64 (cross-compiled) and mps2-an386
  (Cortex-M4, bare metal).

The packaged cases are built like tests/models/test_conformance_package.py builds
its cases: every package into one shared library, each run in a fork.
"""
from __future__ import annotations

import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper
from onnx import numpy_helper as nh
from support.conformance_package import Run, build, package_case, run_isolated
from support.conformance import _compare, cases, run_case

import aot
from aot.errors import AotError
from aot.frontend.onnx import import_onnx
from aot.interp import interpret
from aot.ops import node_macs
from aot.packaging.build import generate
from aot.passes.infer import infer_types
from aot.passes.pipeline import optimize
from aot.targets import get_board

RNN_OPS = ("LSTM", "GRU", "RNN")
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
RTOL, ATOL = 1e-4, 1e-5


def node_cases():
    return [c for op, c in cases() if op in RNN_OPS]


NODE_CASES = [
    "test_gru_batchwise", "test_gru_bidirectional", "test_gru_defaults", "test_gru_reverse",
    "test_gru_seq_length", "test_gru_with_initial_bias", "test_lstm_batchwise",
    "test_lstm_bidirectional", "test_lstm_defaults", "test_lstm_reverse",
    "test_lstm_with_initial_bias", "test_lstm_with_peepholes", "test_rnn_seq_length",
    "test_simple_rnn_batchwise", "test_simple_rnn_bidirectional", "test_simple_rnn_defaults",
    "test_simple_rnn_reverse", "test_simple_rnn_with_initial_bias"]


def test_every_backend_node_case_is_listed():
    assert sorted(c.name for c in node_cases()) == NODE_CASES


@pytest.mark.parametrize("name", NODE_CASES)
def test_node_case_interpreted(name):
    case = next(c for c in node_cases() if c.name == name)
    assert run_case(case) is None


def _run_batch(runs: list[Run]) -> dict[str, str | None]:
    """{run name: None or why it differs}, all runs built into one library."""
    with tempfile.TemporaryDirectory(prefix="aot-rnn-") as tmp:
        lib, not_built = build(Path(tmp), runs, get_board("host"))
        assert not not_built, not_built
        result = {}
        for run in runs:
            got = run_isolated(lib, run)
            result[run.name] = next((r for out, want in run.expected.items()
                                     if (r := _compare(out, got[out], np.asarray(want)))), None)
    return result


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_node_cases_packaged(codegen):
    board = get_board("host")
    runs, owner = [], {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n, case in enumerate(node_cases()):
            for run in package_case(case, f"rnncase{n}", codegen, board):
                runs.append(run)
                owner[run.name] = case.name
    failed = {owner[k]: v for k, v in _run_batch(runs).items() if v}
    assert not failed


# ---- random nodes against ONNX Runtime ----------------------------------------------------

@dataclass(frozen=True)
class Config:
    op: str
    direction: str = "forward"
    hidden: int = 5
    features: int = 3
    batch: int = 3
    steps: int = 4
    attrs: dict = field(default_factory=dict)
    seq_lens: tuple[int, ...] | None = None
    peepholes: bool = False
    states: str = "none"          # none | input | constant

    @property
    def dirs(self) -> int:
        return 2 if self.direction == "bidirectional" else 1


CONFIGS = {
    "lstm_clip_peepholes_state_inputs": Config("LSTM", attrs={"clip": 0.7}, peepholes=True,
                                               states="input"),
    "lstm_reverse_input_forget_seq_lens": Config(
        "LSTM", "reverse", attrs={"input_forget": 1}, seq_lens=(3, 1, 4), states="constant"),
    "lstm_bidirectional_activations": Config(
        "LSTM", "bidirectional", attrs={
            "activations": ["HardSigmoid", "LeakyRelu", "ScaledTanh",
                            "Sigmoid", "Elu", "Softsign"],
            "activation_alpha": [0.3, 0.2, 0.9, 0.7], "activation_beta": [0.45, 1.5]},
        seq_lens=(4, 2, 3), peepholes=True, states="input"),
    "gru_linear_before_reset_clip": Config("GRU", attrs={"linear_before_reset": 1, "clip": 0.9},
                                           states="input"),
    "gru_bidirectional_activations_seq_lens": Config(
        "GRU", "bidirectional", attrs={
            "activations": ["Affine", "Elu", "ThresholdedRelu", "Softplus"],
            "activation_alpha": [0.3, 0.8, 0.1], "activation_beta": [0.4]},
        seq_lens=(2, 4, 1)),
    "gru_reverse_constant_state": Config("GRU", "reverse", states="constant"),
    "rnn_bidirectional_relu_softplus": Config(
        "RNN", "bidirectional", attrs={"activations": ["Relu", "Softplus"]},
        seq_lens=(4, 4, 2), states="input"),
    "rnn_sigmoid_clip": Config("RNN", attrs={"activations": ["Sigmoid"], "clip": 0.5}),
    "rnn_tanh_batch1_long": Config("RNN", hidden=8, features=6, batch=1, steps=12),
}


ACTIVATION_NAMES = ("Relu", "Tanh", "Sigmoid", "Affine", "LeakyRelu", "ThresholdedRelu",
                    "ScaledTanh", "HardSigmoid", "Elu", "Softsign", "Softplus")


def _random_config(seed: int) -> Config:
    """A node with every attribute drawn at random (short sequences: an
    unbounded activation such as Relu or Affine may grow the state)."""
    rng = np.random.default_rng(seed)
    op = RNN_OPS[seed % 3]
    direction = ("forward", "reverse", "bidirectional")[rng.integers(3)]
    dirs = 2 if direction == "bidirectional" else 1
    batch, steps = int(rng.integers(1, 4)), int(rng.integers(1, 5))
    per = {"LSTM": 3, "GRU": 2, "RNN": 1}[op]
    attrs = {"activations": [str(rng.choice(ACTIVATION_NAMES)) for _ in range(per * dirs)]}
    for name, lo, hi, most in (("activation_alpha", 0.1, 1.0, 3),
                               ("activation_beta", -0.5, 0.5, 2)):
        values = [float(v) for v in rng.uniform(lo, hi, rng.integers(most + 1))]
        if values:
            attrs[name] = values
    if rng.random() < 0.5:
        attrs["clip"] = float(rng.uniform(0.2, 3.0))
    if op == "GRU":
        attrs["linear_before_reset"] = int(rng.integers(2))
    if op == "LSTM":
        attrs["input_forget"] = int(rng.integers(2))
    lens = tuple(int(v) for v in rng.integers(1, steps + 1, batch)) if rng.random() < 0.5 else None
    return Config(op, direction, hidden=int(rng.integers(1, 7)), features=int(rng.integers(1, 6)),
                  batch=batch, steps=steps, attrs=attrs, seq_lens=lens,
                  peepholes=op == "LSTM" and bool(rng.integers(2)),
                  states=("none", "input", "constant")[rng.integers(3)])


RANDOM_SEEDS = range(24)


def _node_model(c: Config, layout: int = 0, seed: int = 0):
    """(model, inputs) of one recurrent node with random weights."""
    rng = np.random.default_rng(seed)
    g, h, d = GATES[c.op], c.hidden, c.dirs

    def rand(*shape, scale=0.5):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    inits = [nh.from_array(rand(d, g * h, c.features), "W"),
             nh.from_array(rand(d, g * h, h), "R"), nh.from_array(rand(d, 2 * g * h), "B")]
    names = ["X", "W", "R", "B", "", ""]
    x_shape = (c.steps, c.batch, c.features) if layout == 0 else (c.batch, c.steps, c.features)
    state_shape = (d, c.batch, h) if layout == 0 else (c.batch, d, h)
    inputs = {"X": rand(*x_shape, scale=1.0)}
    graph_inputs = [helper.make_tensor_value_info("X", T.FLOAT, x_shape)]
    if c.seq_lens is not None:
        inits.append(nh.from_array(np.asarray(c.seq_lens, np.int32), "seq_lens"))
        names[4] = "seq_lens"
    states = ["initial_h"] + (["initial_c"] if c.op == "LSTM" else [])
    if c.op == "LSTM":
        names.append("")
    for k, s in enumerate(states):
        if c.states == "none":
            continue
        names[5 + k] = s
        value = rand(*state_shape, scale=1.0)
        if c.states == "input":
            inputs[s] = value
            graph_inputs.append(helper.make_tensor_value_info(s, T.FLOAT, state_shape))
        else:
            inits.append(nh.from_array(value, s))
    if c.peepholes:
        names += [""] * (8 - len(names))
        names[7] = "P"
        inits.append(nh.from_array(rand(d, 3 * h), "P"))
    while names and not names[-1]:
        names.pop()
    outs = ["Y", "Y_h"] + (["Y_c"] if c.op == "LSTM" else [])
    node = helper.make_node(c.op, names, outs, name="rec", hidden_size=h, direction=c.direction,
                            layout=layout, **c.attrs)
    graph = helper.make_graph([node], "rec", graph_inputs,
                              [helper.make_tensor_value_info(o, T.FLOAT, None) for o in outs],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), inputs


def _onnxruntime(model, inputs: dict) -> dict:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip((o.name for o in model.graph.output), sess.run(None, inputs)))


def _layout1_expected(c: Config, inputs: dict) -> dict:
    """ONNX Runtime's outputs of the layout-0 twin, in layout 1."""
    twin, _ = _node_model(c, layout=0)
    feed = {k: np.ascontiguousarray(np.swapaxes(v, 0, 1)) for k, v in inputs.items()}
    want = _onnxruntime(twin, feed)
    return {k: np.transpose(v, (2, 0, 1, 3)) if k == "Y" else np.swapaxes(v, 0, 1)
            for k, v in want.items()}


def _case(name: str, layout: int):
    c = CONFIGS[name]
    model, inputs = _node_model(c, layout)
    want = _onnxruntime(model, inputs) if layout == 0 else _layout1_expected(c, inputs)
    return model, inputs, want


def _random_case(seed: int):
    c = _random_config(seed)
    model, inputs = _node_model(c, seed=seed)
    return model, inputs, _onnxruntime(model, inputs)


def _assert_close(got: dict, want: dict):
    for k, w in want.items():
        np.testing.assert_allclose(got[k], w, rtol=RTOL, atol=ATOL, err_msg=k)


@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_random_node_interpreted(name, layout):
    model, inputs, want = _case(name, layout)
    graph = optimize(infer_types(import_onnx(model.SerializeToString(), name)))
    _assert_close(interpret(graph, inputs), want)


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_random_nodes_packaged(codegen):
    board = get_board("host")
    runs = []
    for n, name in enumerate(sorted(CONFIGS)):
        for layout in (0, 1):
            model, inputs, want = _case(name, layout)
            graph = optimize(infer_types(import_onnx(model.SerializeToString(), name)))
            gen = generate(graph, board, codegen, f"rnn{n}_{layout}", io_in_arena=False)
            runs.append(Run(gen, graph, inputs, want))
    failed = {k: v for k, v in _run_batch(runs).items() if v}
    assert not failed


def test_random_attributes_against_onnxruntime():
    """Seeded random nodes (every attribute drawn), interpreted and
    packaged (codegen c), against ONNX Runtime."""
    board = get_board("host")
    runs = []
    for seed in RANDOM_SEEDS:
        model, inputs, want = _random_case(seed)
        if not all(np.isfinite(v).all() for v in want.values()):
            # an unbounded gate activation blew the state up: ONNX Runtime's
            # Softplus is log(1 + exp(x)), inf past x = 88, aot's is not
            continue
        graph = optimize(infer_types(import_onnx(model.SerializeToString(), f"r{seed}")))
        try:
            _assert_close(interpret(graph, inputs), want)
        except AssertionError as e:
            raise AssertionError(f"seed {seed}: {_random_config(seed)}: {e}") from None
        runs.append(Run(generate(graph, board, "c", f"rnd{seed}", io_in_arena=False), graph,
                        inputs, want))
    assert len(runs) >= 20
    failed = {k: v for k, v in _run_batch(runs).items() if v}
    assert not failed


# ---- models as PyTorch exports them ------------------------------------------------------

def _torch_like(op: str, seed: int = 0, batch: int = 2, steps: int = 7, features: int = 6,
                hidden: int = 8, layers: int = 2, bidirectional: bool = True):
    """nn.LSTM/nn.GRU(features, hidden, layers, batch_first=True,
    bidirectional=...) with (h0[, c0]) as exported: X [B, T, F] transposed
    to time-major, per layer a node on slices of the stacked initial
    states, Y [T, D, B, H] -> Transpose -> Reshape [T, B, D*H] (one
    direction: Squeeze of axis 1), the last layer's output transposed back
    to batch-first, Y_h concatenated."""
    rng = np.random.default_rng(seed)
    g, dirs = GATES[op], 2 if bidirectional else 1
    nodes, inits = [], []

    def const(name, value):
        inits.append(nh.from_array(np.asarray(value), name))
        return name

    nodes.append(helper.make_node("Transpose", ["x"], ["x_t"], perm=[1, 0, 2]))
    states = ["h0"] + (["c0"] if op == "LSTM" else [])
    state_shape = (dirs * layers, batch, hidden)
    prev, width, finals = "x_t", features, {s: [] for s in states}
    for layer in range(layers):
        ins = [prev]
        for part, shape in (("W", (dirs, g * hidden, width)), ("R", (dirs, g * hidden, hidden)),
                            ("B", (dirs, 2 * g * hidden))):
            scale = 1 / np.sqrt(hidden)
            ins.append(const(f"{part}{layer}", rng.uniform(-scale, scale, shape)
                             .astype(np.float32)))
        ins.append("")
        for s in states:
            sl = f"{s}_{layer}"
            nodes.append(helper.make_node(
                "Slice", [s, const(f"{sl}_start", np.array([dirs * layer])),
                          const(f"{sl}_end", np.array([dirs * (layer + 1)])),
                          const(f"{sl}_axes", np.array([0]))], [sl]))
            ins.append(sl)
        outs = [f"y{layer}", f"yh{layer}"] + ([f"yc{layer}"] if op == "LSTM" else [])
        nodes.append(helper.make_node(op, ins, outs, hidden_size=hidden,
                                      direction="bidirectional" if bidirectional else "forward"))
        finals["h0"].append(outs[1])
        if op == "LSTM":
            finals["c0"].append(outs[2])
        if bidirectional:
            nodes.append(helper.make_node("Transpose", [outs[0]], [f"yt{layer}"],
                                          perm=[0, 2, 1, 3]))
            nodes.append(helper.make_node("Reshape", [f"yt{layer}", const(
                f"shape{layer}", np.array([0, 0, -1]))], [f"yr{layer}"]))
        else:
            nodes.append(helper.make_node("Squeeze", [outs[0], const(
                f"axes{layer}", np.array([1]))], [f"yr{layer}"]))
        prev, width = f"yr{layer}", dirs * hidden
    nodes.append(helper.make_node("Transpose", [prev], ["y"], perm=[1, 0, 2]))
    outputs = ["y"]
    for s in states:
        nodes.append(helper.make_node("Concat", finals[s], [f"{s}_n"], axis=0))
        outputs.append(f"{s}_n")
    graph = helper.make_graph(
        nodes, f"torch_{op.lower()}",
        [helper.make_tensor_value_info("x", T.FLOAT, (batch, steps, features))]
        + [helper.make_tensor_value_info(s, T.FLOAT, state_shape) for s in states],
        [helper.make_tensor_value_info(o, T.FLOAT, None) for o in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("op,codegen,bidirectional", [
    ("LSTM", "c", True), ("GRU", "llvm", True), ("LSTM", "llvm", False), ("GRU", "c", False)])
def test_torch_like_model_verifies_on_host(tmp_path, op, codegen, bidirectional):
    path = tmp_path / f"{op.lower()}.onnx"
    onnx.save(_torch_like(op, bidirectional=bidirectional), path)
    report = aot.verify(path, board="host", codegen=codegen, count=2)
    assert report["ok"] and report["reference"] == "onnxruntime", report


def test_torch_like_lstm_verifies_on_qemu_aarch64(tmp_path):
    path = tmp_path / "lstm.onnx"
    onnx.save(_torch_like("LSTM", seed=1, steps=5), path)
    report = aot.verify(path, board="qemu-aarch64")
    assert report["ok"] and report["board"] == "qemu-aarch64", report


def test_torch_like_gru_verifies_on_cortex_m4(tmp_path):
    path = tmp_path / "gru.onnx"
    onnx.save(_torch_like("GRU", seed=3, steps=5), path)
    report = aot.verify(path, board="mps2-an386")
    assert report["ok"] and report["board"] == "mps2-an386", report


def test_sequence_lens_computed_from_shapes_folds(tmp_path):
    """tf2onnx's full-length sequence_lens, Cast(Expand(T, [B])) from
    Shape(X): a constant once the shapes are static."""
    model, _ = _node_model(Config("LSTM", batch=2, steps=5), seed=1)
    g = model.graph
    g.initializer.extend([nh.from_array(np.array(0, np.int64), "i0"),
                          nh.from_array(np.array([1], np.int64), "i1")])
    lens = [helper.make_node("Shape", ["X"], ["xs"]),
            helper.make_node("Gather", ["xs", "i0"], ["steps"], axis=0),
            helper.make_node("Gather", ["xs", "i1"], ["batch"], axis=0),
            helper.make_node("Expand", ["steps", "batch"], ["lens64"]),
            helper.make_node("Cast", ["lens64"], ["lens"], to=T.INT32)]
    rec = g.node[0]
    rec.input[:] = (list(rec.input) + [""] * 5)[:4] + ["lens"] + list(rec.input[5:])
    nodes = lens + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    path = tmp_path / "lstm.onnx"
    onnx.save(model, path)
    report = aot.verify(path, board="host")
    assert report["ok"] and report["reference"] == "onnxruntime", report


# ---- what is refused -------------------------------------------------------------------------

def _load_error(model) -> str:
    with pytest.raises(AotError) as e:
        infer_types(import_onnx(model.SerializeToString(), "m"))
    return str(e.value)


def _runtime_seq_lens():
    model, _ = _node_model(CONFIGS["gru_bidirectional_activations_seq_lens"])
    lens = next(t for t in model.graph.initializer if t.name == "seq_lens")
    model.graph.initializer.remove(lens)
    model.graph.input.append(helper.make_tensor_value_info("seq_lens", T.INT32, (3,)))
    return model


def test_runtime_sequence_lens_is_refused_by_name():
    assert ("GRU node 'rec': input 4 must be a compile-time constant (sequence_lens bounds "
            "the time loops" in _load_error(_runtime_seq_lens()))


def test_bound_sequence_lens_verifies(tmp_path):
    path = tmp_path / "gru.onnx"
    onnx.save(_runtime_seq_lens(), path)
    report = aot.verify(path, board="host", bind={"seq_lens": np.array([2, 4, 1], np.int32)})
    assert report["ok"] and report["reference"] == "onnxruntime", report


def test_bad_sequence_lens_and_activation_are_refused():
    model, _ = _node_model(Config("RNN", seq_lens=(4, 0, 5)))
    assert "sequence_lens [4, 0, 5] (expected 3 lengths from 1 to 4)" in _load_error(model)
    model, _ = _node_model(Config("RNN", attrs={"activations": ["Gelu"]}))
    assert "activation 'Gelu' is not supported" in _load_error(model)
    model, _ = _node_model(Config("GRU", "sideways"))
    assert "GRU node 'rec': direction 'sideways' (ONNX defines" in _load_error(model)
    model, _ = _node_model(Config("LSTM"), layout=2)
    assert "LSTM node 'rec': layout 2 (ONNX defines 0 and 1)" in _load_error(model)


def test_macs():
    c = CONFIGS["lstm_bidirectional_activations"]
    model, _ = _node_model(c)
    graph = infer_types(import_onnx(model.SerializeToString(), "m"))
    node = graph.nodes[0]
    want = c.dirs * c.batch * c.steps * 4 * c.hidden * (c.features + c.hidden)
    assert node_macs(node, graph.types) == want

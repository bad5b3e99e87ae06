"""Hostile model files: `aot package` packages them whole or refuses them with
one line (exit 2); never a traceback, a crash, a hang or a memory blow-up.

120 deterministic cases (aot.testing.fuzz.models.mutate) over the small shared models, in
chunks that pytest-xdist spreads. Most run in-process through aot.cli.main
under an alarm, with the element limit lowered to keep them quick; every
tenth runs as a real `python -m aot package` subprocess at the default
element limit under a 1 GiB RLIMIT_AS, where a crash, an allocation a
budget did not price (out of memory) or a MemoryError would show.
scripts/fuzz.py is the long run.
"""
from __future__ import annotations

import collections
import os
import re
import resource
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from aot.testing.fuzz.models import Outcome, judge, mutate, run_case
from support import MODELS

SMALL = ("tflm_hello_world_int8.tflite", "onnx_mnist8.onnx", "tflm_hello_world_f32.tflite",
         "onnx_mlir_mnist.onnx", "mlperf_ad_fcae_int8.tflite", "tflm_micro_speech_int8.tflite",
         "tflm_mnist_lstm_int8.tflite", "mlperf_kws_dscnn_int8.tflite")
CASES = 120
CHUNKS = 6
SUBPROCESS_EVERY = 10
MAX_ELEMENTS = 1 << 20      # AOT_MAX_TENSOR_ELEMENTS for the in-process cases
TIME_LIMIT_S = 60.0         # per case; a packaged small model takes about a second
MEMORY_BYTES = 1 << 30      # RLIMIT_AS of the subprocess cases (at the default limits)


def run_subprocess(model: Path, out: Path) -> Outcome:
    """The real CLI in a child process, under a memory and a time limit, with
    aot's default element limit and compile-memory budget."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))

    env = {k: v for k, v in os.environ.items()
           if k not in ("AOT_DEBUG", "AOT_MAX_TENSOR_ELEMENTS", "AOT_COMPILE_MEMORY")}
    try:
        proc = subprocess.run([sys.executable, "-m", "aot", "package", str(model), "-o", str(out)],
                              capture_output=True, text=True, env=env, preexec_fn=limit,
                              timeout=TIME_LIMIT_S)
    except subprocess.TimeoutExpired:
        return Outcome("failed", "timeout", f"no result within {TIME_LIMIT_S:g} s")
    return judge(proc.returncode, proc.stderr, out)


def run_chunk(chunk: int, tmp: Path) -> tuple[collections.Counter, list[str]]:
    counts: collections.Counter = collections.Counter()
    failures = []
    for i in range(chunk, CASES, CHUNKS):
        mutant = mutate(MODELS / SMALL[i % len(SMALL)], i)
        case = tmp / f"case{i}{mutant.suffix}"
        case.write_bytes(mutant.data)
        out = tmp / f"pkg{i}"
        if i % SUBPROCESS_EVERY == 0:
            outcome = run_subprocess(case, out)
            counts["subprocess"] += 1
        else:
            outcome = run_case(case, out, TIME_LIMIT_S, MAX_ELEMENTS)
        counts[outcome.status] += 1
        if outcome.status == "refused":  # the CLI prints no class: a subprocess's is unknown
            counts[outcome.error_class if i % SUBPROCESS_EVERY else "in subprocesses"] += 1
        if outcome.failed:
            failures.append(f"{mutant.label()}: {outcome.error_class}: {outcome.message}")
    return counts, failures


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_hostile_models_package_or_refuse(chunk, tmp_path, record_property):
    counts, failures = run_chunk(chunk, tmp_path)
    n = counts["packaged"] + counts["refused"] + counts["failed"]
    classes = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())
                        if k not in ("packaged", "refused", "failed", "subprocess"))
    record_property("summary", f"fuzz chunk {chunk + 1}/{CHUNKS}: {n} cases "
                    f"({counts['subprocess']} as subprocesses): {counts['packaged']} packaged, "
                    f"{counts['refused']} refused (exit 2: {classes}), "
                    f"{counts['failed']} failures")
    assert n == len(range(chunk, CASES, CHUNKS))
    assert not failures, "\n".join(failures)


def test_mutations_are_deterministic():
    for name in ("onnx_mnist8.onnx", "tflm_hello_world_int8.tflite"):
        a, b = mutate(MODELS / name, 7), mutate(MODELS / name, 7)
        assert a == b
        variants = {mutate(MODELS / name, s).data for s in range(20)}
        assert len(variants) >= 18      # seeds differ (a rare collision is fine)
        assert (MODELS / name).read_bytes() not in variants


# ---- shapes over the limit are refused before anything of that size is allocated

def _onnx_model(op: str, inputs: list[str], consts: dict[str, np.ndarray], opset=13) -> bytes:
    from onnx import TensorProto, helper, numpy_helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])
    graph = helper.make_graph([helper.make_node(op, inputs, ["y"])], "g", [x],
                              [helper.make_empty_tensor_value_info("y")],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return model.SerializeToString()


def _i64(*v):
    return np.array(v, np.int64)


HUGE = {
    "ConstantOfShape": ("ConstantOfShape", ["s"], {"s": _i64(1 << 20, 1 << 20)}),
    "Expand": ("Expand", ["x", "s"], {"s": _i64(1 << 20, 3, 4, 4)}),
    "Tile": ("Tile", ["x", "r"], {"r": _i64(1 << 30, 1, 1, 1)}),
    "Range": ("Range", ["a", "b", "c"], {"a": np.float32(0), "b": np.float32(1e12),
                                         "c": np.float32(1)}),
    "Resize": ("Resize", ["x", "", "s"], {"s": np.array([1, 1, 1e6, 1e6], np.float32)}),
    "Resize sizes": ("Resize", ["x", "", "", "s"], {"s": _i64(1, 3, 1 << 20, 1 << 20)}),
    "Pad": ("Pad", ["x", "p"], {"p": _i64(0, 0, 1 << 30, 1 << 30, 0, 0, 1 << 30, 1 << 30)}),
}


@pytest.mark.parametrize("case", sorted(HUGE))
def test_shape_computing_ops_refuse_huge_outputs_without_allocating(case, tmp_path, monkeypatch):
    import aot
    from aot.errors import ShapeError

    op, inputs, consts = HUGE[case]
    model = tmp_path / "huge.onnx"
    model.write_bytes(_onnx_model(op, inputs, consts))
    monkeypatch.setenv("AOT_MAX_TENSOR_ELEMENTS", str(1 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(ShapeError, match="AOT_MAX_TENSOR_ELEMENTS"):
            aot.optimize(aot.load(model))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20     # the refused output would need terabytes


def test_initializer_dims_over_the_limit_are_refused_before_decoding(tmp_path, monkeypatch):
    import aot
    from aot.errors import ShapeError
    from onnx import TensorProto, helper

    w = helper.make_tensor("w", TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0])
    w.dims[:] = [1 << 20, 1 << 20]   # 16 bytes of data claiming 4 TiB
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x],
                              [helper.make_empty_tensor_value_info("y")], [w])
    model = tmp_path / "huge_init.onnx"
    model.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
                      .SerializeToString())
    monkeypatch.setenv("AOT_MAX_TENSOR_ELEMENTS", str(1 << 20))
    with pytest.raises(ShapeError, match="initializer 'w'.*AOT_MAX_TENSOR_ELEMENTS"):
        aot.load(model)


def test_tflite_tensor_dims_over_the_limit_are_refused(tmp_path, monkeypatch):
    """A dim of the input tensor patched to 2**20: the shape check refuses it."""
    import aot
    import tflite
    from aot.errors import ShapeError

    data = bytearray((MODELS / "tflm_hello_world_f32.tflite").read_bytes())
    sg = tflite.Model.GetRootAsModel(data, 0).Subgraphs(0)
    t = sg.Tensors(sg.Inputs(0))
    start = t._tab.Vector(t._tab.Offset(4))
    data[start:start + 4] = (1 << 20).to_bytes(4, "little")
    model = tmp_path / "huge.tflite"
    model.write_bytes(bytes(data))
    monkeypatch.setenv("AOT_MAX_TENSOR_ELEMENTS", str(1 << 10))
    with pytest.raises(ShapeError, match="AOT_MAX_TENSOR_ELEMENTS"):
        aot.load(model)


def test_conv_of_constants_is_not_evaluated_at_compile_time_when_costly(tmp_path):
    """A Conv of a 1024x1024 constant by a 32x32 one: folding it would build a
    4 GB im2col matrix; it is left for the device to compute."""
    import aot
    from onnx import TensorProto, helper, numpy_helper

    consts = [numpy_helper.from_array(np.ones((1, 1, 1024, 1024), np.float32), "X"),
              numpy_helper.from_array(np.ones((1, 1, 32, 32), np.float32), "W")]
    nodes = [helper.make_node("Conv", ["X", "W"], ["c"]),
             helper.make_node("ReduceSum", ["c"], ["s"], keepdims=0),
             helper.make_node("Add", ["x", "s"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph(nodes, "g", [x], [helper.make_empty_tensor_value_info("y")], consts)
    model = tmp_path / "conv_of_constants.onnx"
    model.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
                      .SerializeToString())
    tracemalloc.start()
    try:
        graph = aot.optimize(aot.load(model))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 256 << 20
    ops = {m.op for n in graph.nodes
           for m in (n.attrs["body"].nodes if n.op == "fused" else [n])}
    assert "Conv" in ops


def _graph_model(nodes, inputs, outputs, opset=13) -> bytes:
    from onnx import TensorProto, helper
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 6]) for n in inputs]
    vo = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 6]) for n in outputs]
    graph = helper.make_graph(nodes, "g", vi, vo)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]
                             ).SerializeToString()


def _node(op, ins, outs, **attrs):
    from onnx import helper
    return helper.make_node(op, ins, outs, **attrs)


BROKEN_GRAPHS = {
    "two writers": (_graph_model([_node("Relu", ["x"], ["y"]), _node("Neg", ["x"], ["y"])],
                                 ["x"], ["y"]), "writes tensor 'y'"),
    "writes an input": (_graph_model([_node("Relu", ["x"], ["x"])], ["x"], ["x"]),
                        "writes tensor 'x'"),
    "input twice": (_graph_model([_node("Relu", ["x"], ["y"])], ["x", "x"], ["y"]),
                    "input 'x' is listed twice"),
    "output twice": (_graph_model([_node("Relu", ["x"], ["y"])], ["x"], ["y", "y"]),
                     "output is listed twice"),
    "cycle": (_graph_model([_node("Relu", ["b"], ["a"]), _node("Neg", ["a"], ["b"])],
                           ["x"], ["b"]), "input 'b' is not produced"),
    "attribute of another type": (_graph_model([_node("LeakyRelu", ["x"], ["y"], alpha="0.1")],
                                               ["x"], ["y"]), "attribute 'alpha' has type"),
    "node without outputs": (_graph_model([_node("Relu", ["x"], []), _node("Neg", ["x"], ["y"])],
                                          ["x"], ["y"]), "has no outputs"),
    "Constant without output": (_graph_model([_node("Constant", [], [], value_float=1.0),
                                              _node("Relu", ["x"], ["y"])], ["x"], ["y"]),
                                "Constant node"),
}


@pytest.mark.parametrize("case", sorted(BROKEN_GRAPHS))
def test_broken_onnx_graphs_are_refused_by_name(case, tmp_path):
    import aot
    from aot.errors import AotError

    data, message = BROKEN_GRAPHS[case]
    model = tmp_path / "broken.onnx"
    model.write_bytes(data)
    with pytest.raises(AotError, match=message):
        aot.optimize(aot.load(model))


def test_unnamed_middle_output_is_an_unused_output(tmp_path):
    """Split(x) -> (a, "", c): the middle output is simply not used."""
    import aot

    model = tmp_path / "split.onnx"
    model.write_bytes(_graph_model([_node("Split", ["x"], ["a", "", "c"], axis=1,
                                          num_outputs=3)], ["x"], ["a", "c"], opset=18))
    graph = aot.optimize(aot.load(model))
    assert graph.outputs == ("a", "c")


def _chain_model(op: str, length: int, rank: int = 2) -> bytes:
    from onnx import TensorProto, helper
    shape = [1] * (rank - 1) + [4]
    nodes = [_node(op, [f"t{i}" if i else "x"], [f"t{i + 1}"]) for i in range(length)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         shape)],
                              [helper.make_tensor_value_info(f"t{length}", TensorProto.FLOAT,
                                                             shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]
                             ).SerializeToString()


@pytest.mark.parametrize("op,length", [("Sign", 40), ("Neg", 300)])
def test_long_elementwise_chains_package_quickly(op, length, tmp_path):
    """Sign reads its input three times: one fused expression for the whole
    chain grew as 3**40 (a hang); 300 Negs nested past gcc's 256 brackets."""
    model = tmp_path / "chain.onnx"
    model.write_bytes(_chain_model(op, length))
    outcome = run_case(model, tmp_path / "pkg", time_limit=60)
    assert outcome.status == "packaged", outcome


def test_rank_over_the_limit_is_refused(tmp_path):
    import aot
    from aot.errors import ShapeError

    model = tmp_path / "rank.onnx"
    model.write_bytes(_chain_model("Relu", 1, rank=300))
    with pytest.raises(ShapeError, match="rank 300 exceeds"):
        aot.load(model)


@pytest.mark.parametrize("model, seed, message", [
    # an LSTM gate bias rewired to a weight tensor: numpy broadcast error in lowering
    ("tflm_mnist_lstm_int8.tflite", 201546, r"gate input bias \[10, 560\], expected \[20\]"),
    # an activation at quantization scale 0: 0/0 in its activation range
    ("mlperf_ad_fcae_int8.tflite", 90127, "quantization scale 0"),
    # a convolution's output typed as a resource (a variable's handle)
    ("tflm_micro_speech_int8.tflite", 11634, "DEPTHWISE_CONV_2D node 'Relu': tensor 'Relu' is a "
                                             "resource handle"),
    # an ADD's output at scale 1e-30: a requantization multiplier of 4e23
    ("mlperf_ic_resnet8_int8.tflite", 11749, r"multiplier of 4\.14359e\+23 is not in \(0, 1\)"),
])
def test_long_run_findings_are_refused_by_name(model, seed, message, tmp_path):
    """Cases scripts/fuzz.py found (internal errors, now one-line refusals)."""
    mutant = mutate(MODELS / model, seed)
    path = tmp_path / f"m{Path(model).suffix}"
    path.write_bytes(mutant.data)
    r = subprocess.run([sys.executable, "-m", "aot", "package", str(path), "--board", "host",
                        "-o", str(tmp_path / "pkg")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aot: error: "), lines
    assert re.search(message, lines[0]), lines[0]
    assert not (tmp_path / "pkg").exists()

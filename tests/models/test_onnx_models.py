"""Real ONNX models: import, optimize, interpret, and match ONNX Runtime and
the saved reference outputs.

Shared models (../shared/models/*.onnx) run on their saved input; derived
ones (../shared/models/derived/*.onnx) on a deterministic random input, with
ONNX Runtime as the reference. The onnx package's "light" zoo models must
import and optimize; the two cheap ones also run against ONNX Runtime.
"""
from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import aot
from support import MODELS, shared_models

RTOL = ATOL = 1e-4

DERIVED = sorted((MODELS / "derived").glob("*.onnx"))
LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
LIGHT = sorted(LIGHT_DIR.glob("*.onnx"))
# Interpreting the others takes seconds each (ImageNet-sized convolutions);
# these two run in under one.
LIGHT_RUN = {"light_squeezenet.onnx", "light_shufflenet.onnx"}


def _ort(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3  # quiet about unused initializers in old zoo models
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _random_input(graph: aot.Graph, name: str, seed_text: str) -> np.ndarray:
    ty = graph.types[name]
    rng = np.random.default_rng(zlib.crc32(seed_text.encode()))
    if np.issubdtype(np.dtype(ty.dtype), np.floating):
        return rng.uniform(-1.0, 1.0, ty.shape).astype(ty.dtype)
    info = np.iinfo(ty.dtype)
    return rng.integers(max(info.min, -128), min(info.max, 127), ty.shape, dtype=ty.dtype,
                        endpoint=True)


def _run(path: Path, feeds=None, graph: aot.Graph | None = None):
    graph = graph or aot.optimize(aot.load(path))
    if feeds is None:
        feeds = {n: _random_input(graph, n, path.name) for n in graph.inputs}
    out = aot.interpret(graph, feeds)
    return graph, feeds, [out[o] for o in graph.outputs]


def _saved_outputs(path: Path) -> list[np.ndarray]:
    stem = path.with_suffix("")
    outs = [np.load(f"{stem}.output.npy")]
    k = 1
    while Path(f"{stem}.output.{k}.npy").exists():
        outs.append(np.load(f"{stem}.output.{k}.npy"))
        k += 1
    return outs


@pytest.mark.parametrize("path", shared_models("*.onnx"), ids=lambda p: p.name)
def test_shared_model_matches_ort_and_saved_output(path: Path):
    x = np.load(path.with_suffix(".input.npy"))
    graph = aot.optimize(aot.load(path))
    assert len(graph.inputs) == 1
    graph, feeds, got = _run(path, {graph.inputs[0]: x}, graph)
    ref = _ort(path, feeds)
    saved = _saved_outputs(path)
    assert len(got) == len(ref) == len(saved)
    for g, r, s in zip(got, ref, saved):
        assert g.dtype == r.dtype and g.shape == r.shape
        np.testing.assert_allclose(g, r, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(g, s, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("path", DERIVED, ids=lambda p: p.name)
def test_derived_model_matches_ort(path: Path):
    graph, feeds, got = _run(path)
    ref = _ort(path, feeds)
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and g.shape == r.shape
        np.testing.assert_allclose(g, r, rtol=RTOL, atol=ATOL)


def test_light_models_exist():
    assert len(LIGHT) >= 5, f"onnx's light models are missing from {LIGHT_DIR}"


@pytest.mark.parametrize("path", LIGHT, ids=lambda p: p.name)
def test_light_model_imports(path: Path, tmp_path: Path):
    graph = aot.optimize(aot.load(path))
    assert graph.nodes and all(graph.types[o].size > 0 for o in graph.outputs)
    if path.name not in LIGHT_RUN:
        return
    path = _logits(path, tmp_path)
    graph, feeds, got = _run(path)
    for g, r in zip(got, _ort(path, feeds)):
        np.testing.assert_allclose(g, r, rtol=RTOL, atol=ATOL)


def _logits(path: Path, tmp_path: Path) -> Path:
    """The model with its final Softmax's input as the output. The light
    models' random weights give logits near 5e9, where float32's step (512)
    alone decides the softmax: its output says only which logits round to
    the maximum (ONNX Runtime 1.32: all 1,000, 0.001 each; aot: 256, 1/256
    each), so the logits are what is compared."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(path))
    producer = {o: n for n in model.graph.node for o in n.output}
    node = producer.get(model.graph.output[0].name)
    while node is not None and node.op_type in ("Reshape", "Flatten", "Identity"):
        node = producer.get(node.input[0])
    if node is None or node.op_type != "Softmax":
        return path
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info(node.input[0], TensorProto.FLOAT,
                                                            None))
    out = tmp_path / path.name
    onnx.save(model, str(out))
    return out

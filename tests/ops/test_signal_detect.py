"""Signal and detection ops (aot/ops/signal.py, aot/ops/detect.py): every
ONNX backend node case of DFT, STFT, the windows, MelWeightMatrix, TopK,
NonMaxSuppression, Compress, NonZero, Unique and RoiAlign through the
interpreter and through the compiled package on the host (codegen c and
llvm); the STFT, TopK, NonMaxSuppression and Attention cases in one package
on qemu-aarch64 (an Arm build of them all); an audio front end and a detector
head as exporters write them, against ONNX Runtime; NonZero, Compress and
Unique of run-time inputs against ONNX Runtime; the refusals of value-sized
outputs other nodes read.

Shape arguments the node tests feed as graph inputs (k, frame_step, sizes,
max_output_boxes_per_class) are bound to the case's values, as
tests/models/test_onnx_conformance.py does. A value-sized model
output is a static bound and a count (docs/ops.md, "Signal and detection
ops"): the expected entries first, then padding, and the count says how
many.
"""
from __future__ import annotations

import functools
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

import support.conformance_package as pkg
from support.conformance import (_compare, _has_empty_tensor, _needs_constant, bind_and_retry,
                                 data_sets, skip_reason)

from aot.api import run
from aot.errors import UnsupportedError
from aot.frontend.onnx import import_onnx
from aot.interp import interpret
from aot.ops.detect import count_outputs, valid_entries
from aot.passes.infer import infer_types
from aot.passes.pipeline import optimize
from aot.targets import get_board

OPS = ("DFT", "STFT", "HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix",
       "TopK", "NonMaxSuppression", "Compress", "NonZero", "Unique", "RoiAlign")
ON_QEMU = ("STFT", "TopK", "NonMaxSuppression")
# tests/packaging/test_sanitizers.py's flags (importing it needs the shared models)
SANITIZE = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer", "-g", "-O1", "-Wall", "-Wextra", "-Werror")


@functools.lru_cache(maxsize=None)
def cases() -> dict[str, object]:
    """{case name: case} of OPS (not the expanded function bodies, which test
    other ops), without the ones whose tensor types aot does not support."""
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        everything = collect_testcases(None)
    return {c.name: c for c in everything
            if "_expanded" not in c.name and c.model.graph.node[0].op_type in OPS
            and not skip_reason(c)}


def op_of(case) -> str:
    return case.model.graph.node[0].op_type


def graph_of(model, name: str):
    return optimize(infer_types(import_onnx(model.SerializeToString(), name)))


def check(case_name: str, got: dict, expected: dict, counts: dict) -> None:
    """The outputs against the case's; a counted output (`counts`:
    count_outputs of the graph) in its first `count` entries, which must be
    all the case has, and the rest of its static bound the padding value
    (-1 in index outputs, 0 in the others: docs/ops.md)."""
    for count, counted in counts.items():
        n = int(got[count][0])
        for out, axis, fill in counted:
            padding = np.take(got[out], np.arange(n, got[out].shape[axis]), axis=axis)
            assert np.all(padding == fill), (case_name, out, n, got[out])
    got = valid_entries(counts, got)
    for out, want in expected.items():
        reason = _compare(out, np.asarray(got[out]), np.asarray(want))
        assert reason is None, f"{case_name}: {reason}"


def test_every_case_is_here():
    """The cases this file runs: all of the ops' backend node cases but the
    bfloat16 ones (a change to the onnx package's set shows here)."""
    assert len(cases()) == 50
    assert {op_of(c) for c in cases().values()} == set(OPS)


@pytest.mark.parametrize("name", sorted(cases()))
def test_interpreter(name):
    case = cases()[name]
    for ins, outs in data_sets(case):
        graph, _ = bind_and_retry(case.model, ins, lambda m: graph_of(m, name))
        with np.errstate(all="ignore"):
            got = interpret(graph, {k: v for k, v in ins.items() if k in graph.inputs})
        check(name, got, outs, count_outputs(graph))


# ---- compiled on the host ------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def host_results(codegen: str) -> dict[str, dict]:
    """{case name: [(outputs, expected)] per data set}: every case packaged,
    all built into one library, each run in a child process."""
    board = get_board("host")
    packaged = {}
    for n, name in enumerate(sorted(cases())):
        with np.errstate(all="ignore"):
            packaged[name] = pkg.package_case(cases()[name], f"sd{n}", codegen, board)
    with tempfile.TemporaryDirectory(prefix="aot-signal-") as tmp:
        lib, failed = pkg.build(Path(tmp), [r for rs in packaged.values() for r in rs], board)
        assert not failed, failed
        return {name: [(pkg.run_isolated(lib, r), r.expected, count_outputs(r.graph))
                       for r in rs]
                for name, rs in packaged.items()}


@pytest.mark.parametrize("codegen", ("c", "llvm"))
def test_compiled_on_host(codegen):
    results = host_results(codegen)
    assert len(results) == len(cases())
    for name, runs in results.items():
        for got, expected, counts in runs:
            check(name, got, expected, counts)


# ---- compiled on qemu-aarch64 ----------------------------------------------------------------

def attention_cases() -> dict[str, object]:
    """{case name: case} of Attention (opset 23 and 24, with and without
    masks, causal, GQA, a KV cache, softcap, windows), not the expanded
    ones; without float16 cases, which are compared at float16's precision
    elsewhere (this runner's tolerance is float32's)."""
    from support.conformance import cases as every_case
    return {c.name: c for op, c in every_case() if op == "Attention"
            and "_expanded" not in c.name and not skip_reason(c)
            and not _has_empty_tensor(c) and "fp16" not in c.name and "float16" not in c.name}


def merged_model(names: list[str], table: dict | None = None):
    """One model running every named case side by side (names prefixed by
    the case's index), its shape arguments bound; and its inputs and
    expected outputs. table: the cases by name (default: this file's)."""
    nodes, inputs, outputs, inits = [], [], [], []
    feeds, expected = {}, {}
    opset = 1
    for i, name in enumerate(names):
        case = (table or cases())[name]
        g = case.model.graph
        opset = max(opset, case.model.opset_import[0].version)

        def p(s: str, i=i) -> str:
            return f"c{i}_{s}" if s else s
        for k, node in enumerate(g.node):
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            nodes.append(helper.make_node(node.op_type, [p(x) for x in node.input],
                                          [p(x) for x in node.output], name=p(f"n{k}"), **attrs))
        for vi, into in [(vi, inputs) for vi in g.input] + [(vi, outputs) for vi in g.output]:
            into.append(onnx.ValueInfoProto())
            into[-1].CopyFrom(vi)
            into[-1].name = p(vi.name)
        ins, outs = next(data_sets(case))
        feeds.update({p(k): v for k, v in ins.items()})
        expected.update({p(k): (op_of(case), v) for k, v in outs.items()})
    model = helper.make_model(helper.make_graph(nodes, "merged", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", opset)])
    return model, feeds, expected


def test_acceptance_cases_on_qemu_aarch64():
    """Every backend node case of STFT, TopK, NonMaxSuppression and
    Attention in one package on qemu-aarch64."""
    table = {**{n: c for n, c in cases().items() if op_of(c) in ON_QEMU}, **attention_cases()}
    assert len(table) >= 19 + 80
    model, feeds, expected = merged_model(sorted(table), table)
    graph, bound = bind_and_retry(model, feeds, lambda m: graph_of(m, "merged"))
    assert {b for b, _ in bound} >= {n for n in feeds if n.endswith(("_k", "_frame_step"))}
    got = run(graph, {k: v for k, v in feeds.items() if k in graph.inputs},
              board="qemu-aarch64")
    counts = count_outputs(graph)
    assert len(counts) == sum(op == "NonMaxSuppression" for op, _ in expected.values())
    check("merged", got, {out: want for out, (_, want) in expected.items()}, counts)


# ---- the FFT (power-of-two lengths) against numpy -------------------------------------------

def test_fft_lengths_against_numpy(tmp_path):
    """Power-of-two DFT lengths take the FFT: zero-padded and truncated
    rows, inverse, one-sided forward and inverse, complex input, a complex
    STFT with a run-time window; one package, compared with numpy.fft (not
    aot's reference)."""
    rng = np.random.default_rng(3)
    xc = rng.standard_normal((2, 50, 2)).astype(np.float32)
    xr = rng.standard_normal((2, 50, 1)).astype(np.float32)
    xs = rng.standard_normal((2, 20, 2)).astype(np.float32)
    sc = rng.standard_normal((1, 300, 2)).astype(np.float32)
    window = rng.uniform(0, 1, 64).astype(np.float32)
    nodes = [_const("n64", np.array(64, np.int64)), _const("n32", np.array(32, np.int64)),
             _const("axis", np.array(1, np.int64)), _const("step", np.array(50, np.int64)),
             helper.make_node("DFT", ["xc", "n64", "axis"], ["fwd64"]),
             helper.make_node("DFT", ["xc", "n32", "axis"], ["inv32"], inverse=1),
             helper.make_node("DFT", ["xr", "n64", "axis"], ["rfft64"], onesided=1),
             helper.make_node("DFT", ["xc", "n64", "axis"], ["irfft64"], inverse=1, onesided=1),
             helper.make_node("DFT", ["xc", "n32", "axis"], ["irfft32"], inverse=1, onesided=1),
             helper.make_node("DFT", ["xs", "n64", "axis"], ["irfft_pad"], inverse=1, onesided=1),
             helper.make_node("STFT", ["sc", "step", "window"], ["stft"], onesided=0)]
    inputs = [helper.make_tensor_value_info(n, T.FLOAT, a.shape)
              for n, a in (("xc", xc), ("xr", xr), ("xs", xs), ("sc", sc), ("window", window))]
    outputs = [helper.make_tensor_value_info(n, T.FLOAT, None)
               for n in ("fwd64", "inv32", "rfft64", "irfft64", "irfft32", "irfft_pad", "stft")]
    model = helper.make_model(helper.make_graph(nodes, "ffts", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", 20)])
    onnx.save(model, tmp_path / "ffts.onnx")
    got = run(tmp_path / "ffts.onnx",
              {"xc": xc, "xr": xr, "xs": xs, "sc": sc, "window": window}, board="host")
    zc, zs = xc[..., 0] + 1j * xc[..., 1], sc[..., 0] + 1j * sc[..., 1]
    frames = np.stack([zs[:, f * 50:f * 50 + 64] * window for f in range(5)], axis=1)
    want = {"fwd64": np.fft.fft(zc, 64, axis=1), "inv32": np.fft.ifft(zc, 32, axis=1),
            "rfft64": np.fft.rfft(xr[..., 0], 64, axis=1), "stft": np.fft.fft(frames, axis=-1)}
    for name, z in want.items():
        np.testing.assert_allclose(got[name], np.stack([z.real, z.imag], -1),
                                   rtol=1e-4, atol=1e-4, err_msg=name)
    # one-sided spectra of 50 bins truncated to the 33 of n = 64 and the 17 of
    # 32; one of 20 bins padded to 33
    zs20 = xs[..., 0] + 1j * xs[..., 1]
    for name, z, n in (("irfft64", zc, 64), ("irfft32", zc, 32), ("irfft_pad", zs20, 64)):
        np.testing.assert_allclose(got[name][..., 0], np.fft.irfft(z, n, axis=1),
                                   rtol=1e-4, atol=1e-5, err_msg=name)


# ---- exporter-shaped models against ONNX Runtime ----------------------------------------

def _const(name: str, value) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(
        np.asarray(value), name))


def log_mel_model(n_fft: int = 256, hop: int = 128, mels: int = 40, rate: int = 16000):
    """audio [1, L] -> log mel energies [1, frames, mels], as torchaudio's and
    tf2onnx's exports write a front end: a Hann window, a one-sided STFT,
    the power spectrum, the mel filter bank as a MatMul, a log."""
    nodes = [
        _const("axes", np.array([2], np.int64)),
        helper.make_node("Unsqueeze", ["audio", "axes"], ["signal"]),
        _const("n_fft", np.array(n_fft, np.int64)),
        _const("hop", np.array(hop, np.int64)),
        helper.make_node("HannWindow", ["n_fft"], ["window"], periodic=1),
        helper.make_node("STFT", ["signal", "hop", "window", "n_fft"], ["spec"], onesided=1),
        _const("two", np.array(2, np.float32)),
        helper.make_node("Pow", ["spec", "two"], ["sq"]),
        _const("last", np.array([-1], np.int64)),
        helper.make_node("ReduceSum", ["sq", "last"], ["power"], keepdims=0),
        _const("mels", np.array(mels, np.int64)),
        _const("rate", np.array(rate, np.int64)),
        _const("lo", np.array(20.0, np.float32)),
        _const("hi", np.array(rate / 2, np.float32)),
        helper.make_node("MelWeightMatrix", ["mels", "n_fft", "rate", "lo", "hi"], ["filters"]),
        helper.make_node("MatMul", ["power", "filters"], ["mel"]),
        _const("eps", np.array(1e-6, np.float32)),
        helper.make_node("Add", ["mel", "eps"], ["mel_eps"]),
        helper.make_node("Log", ["mel_eps"], ["log_mel"]),
    ]
    graph = helper.make_graph(nodes, "log_mel",
                              [helper.make_tensor_value_info("audio", T.FLOAT, [1, 2048])],
                              [helper.make_tensor_value_info("log_mel", T.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def detector_head_model(boxes: int = 64, classes: int = 3, k: int = 8, per_class: int = 20):
    """boxes [1, N, 4] and scores [1, C, N] -> the k best boxes by their best
    class score (ReduceMax, TopK, GatherElements on the boxes), and the
    NonMaxSuppression selection of each class."""
    nodes = [
        _const("classes", np.array([1], np.int64)),
        helper.make_node("ReduceMax", ["scores", "classes"], ["best"], keepdims=0),
        _const("k", np.array([k], np.int64)),
        helper.make_node("TopK", ["best", "k"], ["top_scores", "top_index"], axis=1),
        _const("last", np.array([2], np.int64)),
        helper.make_node("Unsqueeze", ["top_index", "last"], ["top_index3"]),
        _const("shape", np.array([1, k, 4], np.int64)),
        helper.make_node("Expand", ["top_index3", "shape"], ["gather_index"]),
        helper.make_node("GatherElements", ["boxes", "gather_index"], ["top_boxes"], axis=1),
        _const("per_class", np.array([per_class], np.int64)),
        _const("iou", np.array([0.45], np.float32)),
        _const("min_score", np.array([0.3], np.float32)),
        helper.make_node("NonMaxSuppression",
                         ["boxes", "scores", "per_class", "iou", "min_score"], ["selected"]),
    ]
    graph = helper.make_graph(
        nodes, "detector_head",
        [helper.make_tensor_value_info("boxes", T.FLOAT, [1, boxes, 4]),
         helper.make_tensor_value_info("scores", T.FLOAT, [1, classes, boxes])],
        [helper.make_tensor_value_info(n, t, None) for n, t in
         (("top_scores", T.FLOAT), ("top_boxes", T.FLOAT), ("selected", T.INT64))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _onnxruntime(model, feeds: dict) -> dict:
    import onnxruntime as ort
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def test_log_mel_front_end_against_onnxruntime(tmp_path):
    model = log_mel_model()
    rng = np.random.default_rng(0)
    t = np.arange(2048) / 16000
    audio = (0.5 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(2048))
    feeds = {"audio": audio[None].astype(np.float32)}
    want = _onnxruntime(model, feeds)["log_mel"]
    path = tmp_path / "log_mel.onnx"
    onnx.save(model, path)
    got = run(path, feeds, board="host")["log_mel"]
    assert got.shape == want.shape == (1, 15, 40)
    # log energies: compare in dB-like absolute terms (the DFT sums in float32)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-3)


def _boxes(rng, n: int) -> np.ndarray:
    """[1, n, 4] boxes as (y1, x1, y2, x2), clustered so that many overlap,
    a few with flipped corners."""
    centre = rng.integers(0, 4, (n, 2)) / 4 + rng.uniform(-0.03, 0.03, (n, 2))
    size = rng.uniform(0.15, 0.2, (n, 2))
    box = np.concatenate([centre - size / 2, centre + size / 2], axis=1)
    flip = rng.random(n) < 0.2
    box[flip] = box[flip][:, [2, 3, 0, 1]]
    return box[None].astype(np.float32)


@pytest.mark.parametrize("seed", (0, 1))
def test_detector_head_against_onnxruntime(tmp_path, seed):
    model = detector_head_model()
    rng = np.random.default_rng(seed)
    scores = rng.uniform(0, 1, (1, 3, 64)).round(2).astype(np.float32)   # ties included
    feeds = {"boxes": _boxes(rng, 64), "scores": scores}
    want = _onnxruntime(model, feeds)
    path = tmp_path / "head.onnx"
    onnx.save(model, path)
    got = run(path, feeds, board="host")
    np.testing.assert_array_equal(got["top_scores"], want["top_scores"])
    np.testing.assert_array_equal(got["top_boxes"], want["top_boxes"])
    selected = got["selected"]
    count = want["selected"].shape[0]
    assert selected.shape == (60, 3) and 0 < count < 60
    assert got["selected_count"].tolist() == [count]
    np.testing.assert_array_equal(selected[:count], want["selected"])
    assert np.all(selected[count:] == -1)


def test_selection_count_in_the_package_and_in_verify(tmp_path):
    """The selection's count is an output after the model's own: int32 [1],
    named in the header (_COUNT_OF) and metadata.json (count_of); aot verify
    compares the valid rows with ONNX Runtime, over samples whose counts
    differ, and leaves the count out of its rows."""
    import json

    import aot
    from aot.api import verify
    from aot.check.inputs import random_inputs
    onnx.save(detector_head_model(), tmp_path / "head.onnx")
    graph = aot.load(tmp_path / "head.onnx")
    assert graph.outputs == ("top_scores", "top_boxes", "selected", "selected_count")
    assert count_outputs(graph) == {"selected_count": (("selected", 0, -1),)}
    counts = {int(interpret(graph, random_inputs(graph, seed))["selected_count"][0])
              for seed in range(3)}
    assert len(counts) > 1, counts
    out = verify(tmp_path / "head.onnx", board="host", count=3, out_dir=tmp_path / "pkg")
    assert out["ok"] and [r["name"] for r in out["outputs"]] == ["top_scores", "top_boxes",
                                                                "selected"], out
    meta = json.loads((tmp_path / "pkg" / "metadata.json").read_text())
    assert meta["outputs"][3]["count_of"] == [{"index": 2, "tensor": "selected", "axis": 0,
                                               "padding": -1}]
    assert "count_of" not in meta["outputs"][2]
    header = (tmp_path / "pkg" / "include" / "head.h").read_text()
    assert "#define HEAD_OUTPUT_SELECTED_COUNT_COUNT_OF {2}\n" in header


def test_counted_outputs_compare_by_their_count():
    """What aot verify and the runners compare of a counted output: its
    first `count` rows; a reference with another number of rows fails, and
    a count past the bound is an error."""
    from aot.errors import AotError
    from aot.ir.graph import TensorType
    from aot.check.validate import output_metrics
    counts = {"sel_count": (("sel", 0, -1),)}
    got = {"sel": np.array([[0, 0, 1], [0, 0, 2], [-1, -1, -1]], np.int64),
           "sel_count": np.array([2], np.int32)}
    valid = valid_entries(counts, got)
    assert list(valid) == ["sel"] and valid["sel"].tolist() == [[0, 0, 1], [0, 0, 2]]
    ty = TensorType((3, 3), "int64")
    assert output_metrics("sel", [valid["sel"]], [got["sel"][:2]], ty)["ok"]
    row = output_metrics("sel", [valid["sel"]], [got["sel"]], ty)
    assert not row["ok"] and "shape [2, 3] vs reference [3, 3]" in row["error"], row
    with pytest.raises(AotError, match="says 4 valid entries of the 3 of output 'sel'"):
        valid_entries(counts, {**got, "sel_count": np.array([4], np.int32)})


def value_sized_model():
    """NonZero, Compress and Unique of run-time inputs, each a model output:
    their bounded forms, with counts."""
    nodes = [helper.make_node("NonZero", ["f"], ["nz_f"]),
             helper.make_node("NonZero", ["b"], ["nz_b"]),
             helper.make_node("NonZero", ["zeros"], ["nz_none"]),
             helper.make_node("Compress", ["m", "keep_cols"], ["cols"], axis=1),
             helper.make_node("Compress", ["m", "keep_rows"], ["rows"], axis=-2),
             helper.make_node("Compress", ["m", "keep_flat"], ["flat"]),
             helper.make_node("Unique", ["ints"], ["u", "u_first", "u_inverse", "u_counts"]),
             helper.make_node("Unique", ["m"], ["v", "v_first", "v_inverse", "v_counts"],
                              sorted=0),
             helper.make_node("Unique", ["rows3"], ["r", "r_first", "r_inverse", "r_counts"],
                              axis=0),
             helper.make_node("Unique", ["cols3"], ["c", "c_first", "c_inverse", "c_counts"],
                              axis=-1, sorted=0)]
    ins = [("f", T.FLOAT, [3, 4, 5]), ("b", T.BOOL, [7]), ("zeros", T.INT32, [2, 3]),
           ("m", T.FLOAT, [4, 6]), ("keep_cols", T.BOOL, [6]), ("keep_rows", T.BOOL, [3]),
           ("keep_flat", T.BOOL, [24]), ("ints", T.INT64, [20]),
           ("rows3", T.FLOAT, [7, 3]), ("cols3", T.FLOAT, [2, 2, 6])]
    outs = ["nz_f", "nz_b", "nz_none", "cols", "rows", "flat"] + [
        f"{u}{part}" for u in "uvrc" for part in ("", "_first", "_inverse", "_counts")]
    graph = helper.make_graph(nodes, "value_sized",
                              [helper.make_tensor_value_info(*i) for i in ins],
                              [helper.make_tensor_value_info(
                                  o, T.FLOAT if o in ("cols", "rows", "flat", "v", "r", "c") else
                                  T.INT64, None) for o in outs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def value_sized_feeds(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    f = rng.standard_normal((3, 4, 5)).astype(np.float32)
    f[rng.random(f.shape) < 0.6] = 0
    f.flat[:3] = (-0.0, np.nan, np.inf)
    return {"f": f, "b": rng.random(7) < 0.5, "zeros": np.zeros((2, 3), np.int32),
            "m": rng.integers(-3, 3, (4, 6)).astype(np.float32),
            "keep_cols": rng.random(6) < 0.5, "keep_rows": rng.random(3) < 0.5,
            "keep_flat": rng.random(24) < 0.3, "ints": rng.integers(-5, 5, 20, dtype=np.int64),
            # rows and columns drawn from three, so that some repeat
            "rows3": np.float32([[1, 0, 1], [0, 2, 1], [1, 0, -1]])[rng.integers(0, 3, 7)],
            "cols3": np.float32([[[1, 0, 1], [0, 2, 1]], [[1, 0, 1], [0, 2, 2]]])[
                ..., rng.integers(0, 3, 6)]}


@pytest.mark.parametrize("codegen", ("c", "llvm"))
def test_value_sized_outputs_of_run_time_inputs_against_onnxruntime(tmp_path, codegen):
    """NonZero (float with -0.0, NaN and inf; bool; all zeros), Compress
    (an axis, a negative one, a condition shorter than the axis, none) and
    Unique (sorted and in order of appearance, with ties; of elements,
    rows, and columns along a negative axis) on run-time
    inputs: their valid entries are ONNX Runtime's, the padding -1 or 0, in
    the interpreter and compiled, on two draws of inputs."""
    model = value_sized_model()
    onnx.save(model, tmp_path / "sized.onnx")
    graph = graph_of(model, "value_sized")
    counts = count_outputs(graph)
    assert sorted(counts) == ["c_count", "cols_count", "flat_count", "nz_b_count", "nz_f_count",
                              "nz_none_count", "r_count", "rows_count", "u_count", "v_count"]
    assert counts["c_count"] == (("c", 2, 0), ("c_first", 0, -1), ("c_counts", 0, 0))
    assert graph.types["u"].shape == (20,) and graph.types["nz_f"].shape == (3, 60)
    for seed in (0, 1):
        feeds = value_sized_feeds(seed)
        want = _onnxruntime(model, feeds)
        check(f"interpreter {seed}", interpret(graph, feeds), want, counts)
        got = run(tmp_path / "sized.onnx", feeds, board="host", codegen=codegen)
        check(f"{codegen} {seed}", got, want, counts)
        assert got["nz_none_count"].tolist() == [0]


# ---- RoiAlign ------------------------------------------------------------------------------

def roi_align_model(ratio: int, **attrs):
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], name="roi",
                            output_height=3, output_width=4, sampling_ratio=ratio, **attrs)
    graph = helper.make_graph([node], "roi", [
        helper.make_tensor_value_info("x", T.FLOAT, [2, 3, 12, 16]),
        helper.make_tensor_value_info("rois", T.FLOAT, [6, 4]),
        helper.make_tensor_value_info("batch", T.INT64, [6])],
        [helper.make_tensor_value_info("y", T.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])


def test_roi_align_against_the_onnx_reference(tmp_path):
    """ROIs partly or wholly outside the map, malformed (x2 < x1), a spatial
    scale, both modes and coordinate conventions: the package on the host
    and the interpreter against onnx.reference; an adaptive grid
    (sampling_ratio 0) in the interpreter, refused by the code generator."""
    from onnx.reference import ReferenceEvaluator
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 12, 16)).astype(np.float32)
    rois = np.array([[4, 4, 40, 30], [-20, -8, 12, 10], [50, 30, 70, 60], [30, 20, 10, 5],
                     [0, 0, 63, 47], [8.5, 3.25, 9, 3.5]], np.float32)
    feeds = {"x": x, "rois": rois, "batch": np.array([0, 1, 1, 0, 1, 0], np.int64)}
    for k, (mode, coords) in enumerate((("avg", "half_pixel"), ("max", "output_half_pixel"))):
        model = roi_align_model(3, mode=mode, coordinate_transformation_mode=coords,
                                spatial_scale=0.25)
        want = ReferenceEvaluator(model).run(None, feeds)[0]
        onnx.save(model, tmp_path / f"roi{k}.onnx")
        got = run(tmp_path / f"roi{k}.onnx", feeds, board="host")["y"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=mode)
    model = roi_align_model(0, spatial_scale=0.25)
    graph = graph_of(model, "roi")
    np.testing.assert_allclose(interpret(graph, feeds)["y"],
                               ReferenceEvaluator(model).run(None, feeds)[0], rtol=1e-5,
                               atol=1e-6)
    onnx.save(model, tmp_path / "adaptive.onnx")
    with pytest.raises(UnsupportedError, match="'roi'.*sampling_ratio 0"):
        run(tmp_path / "adaptive.onnx", feeds, board="host")


# ---- the kernels' memory accesses under the sanitizers -----------------------------------

def test_kernels_are_clean_under_sanitizers(tmp_path, monkeypatch):
    """The heap and kept list of NonMaxSuppression, the FFT's scratch rows,
    TopK, GatherElements on its indices, RoiAlign's clamped taps and the
    bounded NonZero, Compress and Unique (Unique's scratch flags), built
    with ASan and UBSan (any report aborts) and -Wall -Wextra -Werror, on
    inputs that exercise them, matching ONNX Runtime / onnx.reference."""
    from onnx.reference import ReferenceEvaluator

    from aot.api import package
    from aot.deploy import run_package
    monkeypatch.setenv("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=0")
    rng = np.random.default_rng(7)
    rois = np.array([[4, 4, 40, 30], [-20, -8, 12, 10], [50, 30, 70, 60], [30, 20, 10, 5],
                     [0, 0, 63, 47], [8.5, 3.25, 9, 3.5]], np.float32)
    models = {
        "head": (detector_head_model(boxes=200, classes=4, k=10, per_class=30),
                 {"boxes": _boxes(rng, 200),
                  "scores": rng.uniform(0, 1, (1, 4, 200)).round(2).astype(np.float32)}),
        "mel": (log_mel_model(), {"audio": rng.standard_normal((1, 2048)).astype(np.float32)}),
        "sized": (value_sized_model(), value_sized_feeds(2)),
        "roi": (roi_align_model(2, mode="max", spatial_scale=0.5),
                {"x": rng.standard_normal((2, 3, 12, 16)).astype(np.float32), "rois": rois,
                 "batch": np.array([0, 1, 1, 0, -1, 0], np.int64)}),
    }
    for name, (model, feeds) in models.items():
        onnx.save(model, tmp_path / f"{name}.onnx")
        info = package(tmp_path / f"{name}.onnx", board="host", codegen="c",
                       out_dir=tmp_path / name, extra_cflags=SANITIZE)
        got = run_package(info.path, get_board("host"), list(feeds.values())).outputs
        if name == "sized":     # the bounded forms: valid entries, padding, counts
            names = [o["name"] for o in info.metadata["outputs"]]
            check(name, dict(zip(names, got)), _onnxruntime(model, feeds),
                  count_outputs(graph_of(model, "value_sized")))
            continue
        if name == "roi":
            feeds["batch"] = np.array([0, 1, 1, 0, 1, 0], np.int64)  # the reference's form
            want = ReferenceEvaluator(model).run(None, feeds)
        else:
            want = list(_onnxruntime(model, feeds).values())
        for g, w in zip(got, want):
            if name == "head" and w.dtype == np.int64:     # the selection: bound, -1 rows
                assert np.all(g[len(w):] == -1)
                g = g[:len(w)]
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-3, err_msg=name)


# ---- value-sized outputs of run-time values other nodes read: refused, naming the node ----

@pytest.mark.parametrize("op, inputs, what", [
    ("NonZero", [("x", T.FLOAT, [4])], "input 0"),
    ("Unique", [("x", T.FLOAT, [4])], "input 0"),
    ("Compress", [("x", T.FLOAT, [4]), ("c", T.BOOL, [4])], "input 1"),
])
def test_value_sized_outputs_of_run_time_values_are_refused(op, inputs, what):
    """A value-sized output another node reads would read its padding: the
    node is refused unless its size is known at compile time."""
    node = helper.make_node(op, [n for n, _, _ in inputs], ["y"], name="picky")
    after = helper.make_node("Neg", ["y"], ["z"])
    graph = helper.make_graph([node, after], "g",
                              [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(n, T.FLOAT, None)
                               for n in ("y", "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedError) as e:
        graph_of(model, "g")
    msg = str(e.value)
    assert "\n" not in msg and f"'picky'" in msg and op in msg and what in msg, msg
    assert "output size depends on the values" in msg, msg
    # the conformance runners bind exactly such inputs
    assert _needs_constant(model, e.value, {n: None for n, _, _ in inputs}) == \
        inputs[int(what[-1])][0]

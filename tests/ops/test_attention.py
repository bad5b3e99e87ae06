"""The transformer ops (aot/ops/attention.py, aot/lower/rules/attention.py):
every ONNX backend node case of theirs through the interpreter and through
the compiled package on the host (both code generators), Attention cases
with and without masks on qemu-aarch64, and a small PyTorch-exporter-shaped
transformer block against ONNX Runtime.

The node cases run as tests/models/test_onnx_conformance.py and
tests/models/test_conformance_package.py run them (same binding of inputs that
must be constants, same comparison), only restricted to these ops, so a
regression here names the case.
"""
from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import support.conformance_package as package_runs
from support.conformance import _compare, cases, data_sets, run_case, skip_reason

import aot
from aot.errors import AotError, ShapeError, UnsupportedError
from aot.targets import get_board

OPS = ("Attention", "RotaryEmbedding", "SwiGLU", "TensorScatter", "CausalConvWithState",
       "LinearAttention")
# Cases aot refuses, with the reason it gives: kept in the runs, so a fix shows.
REFUSED = {"test_causal_conv_with_state_kernel_size_one":
           "present_state': dimension 0 in shape [2, 4, 0]",     # aot has no empty tensors
           # ONNX's float16 reference rounds every intermediate to half; aot (as
           # ONNX Runtime) computes in float32 and rounds once: a half ulp at 0.5-1
           "test_attention_4d_causal_fp16": "elements differ (max abs diff 0.000488)"}


def _cases(op: str) -> list:
    return [c for o, c in cases() if o == op and not skip_reason(c)]


def _all_cases() -> list:
    return [c for op in OPS for c in _cases(op)]


def _quietly(fn, *args):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return fn(*args)


@pytest.mark.parametrize("op", OPS)
def test_node_cases_in_the_interpreter(op):
    runnable = _cases(op)
    assert len(runnable) >= 3, f"only {len(runnable)} {op} cases"
    failed = {c.name: r for c in runnable if (r := _quietly(run_case, c))}
    _check_failures(failed)


def _check_failures(failed: dict[str, str]) -> None:
    """Only the REFUSED cases fail, each for its reason."""
    for name, reason in list(failed.items()):
        known = REFUSED.get(name.split("_expanded")[0])
        if known and known in reason:
            del failed[name]
    assert not failed, failed


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_node_cases_compiled_on_host(codegen):
    """Every case packaged (expanded variants are other ops' cases), built
    into one library, each run on garbage-filled arenas."""
    board = get_board("host")
    runnable = [c for c in _all_cases() if "_expanded" not in c.name]
    assert len(runnable) >= 110
    failed: dict[str, str] = {}
    packaged = {}
    for n, case in enumerate(runnable):
        try:
            packaged[case.name] = _quietly(package_runs.package_case, case,
                                           f"attn{n}", codegen, board)
        except AotError as e:
            failed[case.name] = f"packaging: {e}"
    with tempfile.TemporaryDirectory(prefix="aot-attention-") as tmp:
        lib, not_built = package_runs.build(Path(tmp), [r for rs in packaged.values()
                                                        for r in rs], board)
        for name, runs in packaged.items():
            for run in runs:
                if run.name in not_built:
                    failed[name] = not_built[run.name]
                    break
                got = package_runs.run_isolated(lib, run)
                reason = next((r for out, want in run.expected.items()
                               if (r := _compare(out, got[out], np.asarray(want)))), None)
                if reason:
                    failed[name] = reason
                    break
    _check_failures(failed)


# ---- qemu-aarch64: a handful of cases in one package (one of each other op too) ------------

QEMU_CASES = ("test_attention_4d_attn_mask", "test_attention_4d_attn_mask_bool_4d",
              "test_attention_3d_gqa_causal",
              "test_attention_4d_with_past_and_present_qk_matmul_bias_4d_mask_causal",
              "test_attention_4d_causal_nonpad_attn_mask_composition",
              "test_rotary_embedding_interleaved", "test_swiglu_alpha",
              "test_tensorscatter_circular", "test_causal_conv_with_state_silu_with_past_state",
              "test_linear_attention_gated_delta_gqa")


def merged_cases(parts) -> tuple[onnx.ModelProto, dict, dict]:
    """One model running single-node models side by side (names prefixed
    c0_, c1_, ...). parts: case names (their first data set) or (model,
    inputs, expected outputs)."""
    by_name = {c.name: c for _, c in cases()}
    nodes, ins, outs, inits, opset, inputs, expected = [], [], [], [], 0, {}, {}
    for k, part in enumerate(parts):
        if isinstance(part, str):
            part = (by_name[part].model, *next(data_sets(by_name[part])))
        model, data_in, data_out = part
        m = onnx.compose.add_prefix(model, f"c{k}_")
        nodes += m.graph.node
        ins += m.graph.input
        outs += m.graph.output
        inits += m.graph.initializer
        opset = max([opset] + [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")])
        inputs.update({f"c{k}_{n}": v for n, v in data_in.items()})
        expected.update({f"c{k}_{n}": v for n, v in data_out.items()})
    graph = helper.make_graph(nodes, "attention_cases", ins, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=10)
    return model, inputs, expected


def test_attention_cases_on_qemu_aarch64(tmp_path):
    """The cases, and a wide-head Attention (vector partial sums and their
    remainder at NEON's 4 lanes)."""
    model, inputs, expected = merged_cases([*QEMU_CASES, wide_attention(37, 21)])
    path = tmp_path / "cases.onnx"
    onnx.save(model, path)
    got = aot.run(path, inputs, board="qemu-aarch64")
    assert set(got) == set(expected)
    for name, want in expected.items():
        assert _compare(name, got[name], want) is None, _compare(name, got[name], want)


# ---- a small transformer block, as PyTorch's exporter writes one ---------------------------

def transformer_block(mlp: str = "gelu", seq: int = 8, embed: int = 32, q_heads: int = 4,
                      kv_heads: int = 2, hidden: int = 64, seed: int = 0) -> onnx.ModelProto:
    """Pre-norm decoder block: LayerNormalization, Q/K/V projections,
    RotaryEmbedding on Q and K, causal grouped-query Attention on 3-D
    tensors, output projection and residual, then LayerNormalization and a
    Gelu MLP (opset 23) or a SwiGLU one (gate and up projections, opset 28)
    with its residual."""
    rng = np.random.default_rng(seed)
    head = embed // q_heads
    f = TensorProto.FLOAT

    def weight(name, *shape, scale=None, mean=0.0):
        scale = scale if scale is not None else 1 / np.sqrt(shape[0])
        return onnx.numpy_helper.from_array(
            (mean + rng.standard_normal(shape) * scale).astype(np.float32), name)

    angles = np.arange(seq)[:, None] / 10000 ** (np.arange(head // 2) / (head // 2))
    inits = [weight("ln1_g", embed, scale=0.2, mean=1.0), weight("ln1_b", embed, scale=0.1),
             weight("wq", embed, embed), weight("wk", embed, kv_heads * head),
             weight("wv", embed, kv_heads * head), weight("wo", embed, embed),
             weight("ln2_g", embed, scale=0.2, mean=1.0), weight("ln2_b", embed, scale=0.1),
             weight("w1", embed, hidden), weight("w2", hidden, embed),
             weight("w_gate", embed, hidden),
             onnx.numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos"),
             onnx.numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin"),
             onnx.numpy_helper.from_array(np.arange(seq, dtype=np.int64)[None], "pos")]
    n = helper.make_node
    nodes = [
        n("LayerNormalization", ["x", "ln1_g", "ln1_b"], ["h"], axis=-1, epsilon=1e-5),
        n("MatMul", ["h", "wq"], ["q"]), n("MatMul", ["h", "wk"], ["k"]),
        n("MatMul", ["h", "wv"], ["v"]),
        n("RotaryEmbedding", ["q", "cos", "sin", "pos"], ["q_rot"], num_heads=q_heads),
        n("RotaryEmbedding", ["k", "cos", "sin", "pos"], ["k_rot"], num_heads=kv_heads),
        n("Attention", ["q_rot", "k_rot", "v"], ["att"], is_causal=1, q_num_heads=q_heads,
          kv_num_heads=kv_heads),
        n("MatMul", ["att", "wo"], ["proj"]), n("Add", ["x", "proj"], ["r1"]),
        n("LayerNormalization", ["r1", "ln2_g", "ln2_b"], ["h2"], axis=-1, epsilon=1e-5),
        n("MatMul", ["h2", "w1"], ["up"]),
        *([n("Gelu", ["up"], ["act"])] if mlp == "gelu" else
          [n("MatMul", ["h2", "w_gate"], ["gate"]), n("SwiGLU", ["gate", "up"], ["act"])]),
        n("MatMul", ["act", "w2"], ["down"]), n("Add", ["r1", "down"], ["y"])]
    graph = helper.make_graph(nodes, "block",
                              [helper.make_tensor_value_info("x", f, [1, seq, embed])],
                              [helper.make_tensor_value_info("y", f, [1, seq, embed])], inits)
    opset = 23 if mlp == "gelu" else 28
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=10 if mlp == "gelu" else 13)
    onnx.checker.check_model(model, full_check=True)
    return model


def _reference_run(path: Path, x: np.ndarray, mlp: str) -> np.ndarray:
    """ONNX Runtime for the Gelu block; its 1.32 has no SwiGLU (opset 28),
    so the SwiGLU block runs on onnx's reference evaluator."""
    if mlp == "gelu":
        import onnxruntime as ort
        return ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    from onnx.reference import ReferenceEvaluator
    return ReferenceEvaluator(str(path)).run(None, {"x": x})[0]


@pytest.mark.parametrize("mlp", ["gelu", "swiglu"])
def test_transformer_block_against_reference(tmp_path, mlp):
    model = transformer_block(mlp)
    path = tmp_path / "block.onnx"
    onnx.save(model, path)
    x = np.random.default_rng(1).standard_normal((1, 8, 32)).astype(np.float32)
    want = _reference_run(path, x, mlp)
    graph = aot.optimize(aot.load(path))
    ops = [n.op for n in graph.nodes for n in n.attrs["body"].nodes]
    assert {"Attention", "RotaryEmbedding", "LayerNormalization"} <= set(ops)
    assert ("SwiGLU" in ops) == (mlp == "swiglu")
    np.testing.assert_allclose(aot.interpret(graph, {"x": x})["y"], want, rtol=1e-4, atol=1e-4)
    got = aot.run(path, {"x": x}, board="host")["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# ---- refusals name the node ---------------------------------------------------------------

def _single(op: str, inputs: dict, attrs: dict, opset: int = 23, n_out: int = 1):
    from aot.frontend.onnx import import_onnx
    from aot.passes.infer import infer_types
    types = {np.float32: TensorProto.FLOAT, np.int64: TensorProto.INT64,
             np.bool_: TensorProto.BOOL}
    ins = [helper.make_tensor_value_info(k, types[v.dtype.type], v.shape)
           for k, v in inputs.items()]
    outs = [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None) for i in range(n_out)]
    node = helper.make_node(op, list(inputs), [o.name for o in outs], name="the_node", **attrs)
    model = helper.make_model(helper.make_graph([node], "g", ins, outs),
                              opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    return infer_types(import_onnx(model.SerializeToString(), "m"))


def _qkv(b=1, hq=4, hkv=2, lq=3, lk=5, d=8):
    rng = np.random.default_rng(0)
    return {"Q": rng.standard_normal((b, hq, lq, d)).astype(np.float32),
            "K": rng.standard_normal((b, hkv, lk, d)).astype(np.float32),
            "V": rng.standard_normal((b, hkv, lk, d)).astype(np.float32)}


@pytest.mark.parametrize("inputs, attrs, error, words", [
    (_qkv(hq=3, hkv=2), {}, ShapeError, "not a multiple of 2 key/value heads"),
    ({k: v.reshape(1, v.shape[2], -1) for k, v in _qkv().items()}, {}, ShapeError,
     "need q_num_heads and kv_num_heads"),
    ({**_qkv(), "mask": np.ones((3, 7), np.float32)}, {}, ShapeError, "does not broadcast"),
    (_qkv(), {"softmax_precision": 10}, UnsupportedError, "softmax_precision 10"),
])
def test_attention_refusals(inputs, attrs, error, words):
    with pytest.raises(error, match=words) as e:
        _single("Attention", inputs, attrs)
    assert "the_node" in str(e.value)


def test_rotary_refusals():
    x = np.zeros((1, 2, 3, 8), np.float32)
    cache = np.zeros((4, 3), np.float32)
    with pytest.raises(ShapeError, match="rotary_embedding_dim 10 must be even and at most the head size 8"):
        _single("RotaryEmbedding", {"x": x, "cos": cache, "sin": cache},
                {"rotary_embedding_dim": 10})
    with pytest.raises(ShapeError, match=r"the_node.*caches are \[positions, 4\]"):
        _single("RotaryEmbedding", {"x": x, "cos": cache, "sin": cache,
                                    "pos": np.zeros((1, 3), np.int64)}, {})


def test_rotary_position_out_of_range_is_refused_at_run_time(tmp_path):
    """position_ids index the caches: out of range, the package returns an
    index error instead of reading past them (aot/lower/arith/bounds.py)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 3, 8)).astype(np.float32)
    cache = rng.standard_normal((4, 4)).astype(np.float32)
    f = TensorProto.FLOAT
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", f, x.shape),
                      helper.make_tensor_value_info("pos", TensorProto.INT64, [1, 3])],
        [helper.make_tensor_value_info("y", f, x.shape)],
        [onnx.numpy_helper.from_array(cache, "cos"), onnx.numpy_helper.from_array(cache, "sin")])
    path = tmp_path / "rope.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)],
                                ir_version=10), path)
    ok = aot.run(path, {"x": x, "pos": np.array([[0, 3, -1]])}, board="host")["y"]
    want = aot.interpret(aot.load(path), {"x": x, "pos": np.array([[0, 3, -1]])})["y"]
    np.testing.assert_allclose(ok, want, rtol=1e-6)
    with pytest.raises(AotError, match="index"):
        aot.run(path, {"x": x, "pos": np.array([[0, 4, 1]])}, board="host")


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter_write_indices_at_run_time(tmp_path, mode):
    """Linear mode refuses a block past the cache's end with an index error;
    circular mode wraps any index, negative ones too, as Python's %."""
    rng = np.random.default_rng(0)
    cache = rng.standard_normal((2, 4, 5)).astype(np.float32)
    update = rng.standard_normal((2, 3, 5)).astype(np.float32)
    f = TensorProto.FLOAT
    node = helper.make_node("TensorScatter", ["cache", "update", "at"], ["y"], mode=mode,
                            axis=1)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("cache", f, cache.shape),
                      helper.make_tensor_value_info("update", f, update.shape),
                      helper.make_tensor_value_info("at", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", f, cache.shape)])
    path = tmp_path / "scatter.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)],
                                ir_version=10), path)
    from onnx.reference import ReferenceEvaluator
    good = [0, 1] if mode == "linear" else [3, -6]
    inputs = {"cache": cache, "update": update, "at": np.array(good, np.int64)}
    want = ReferenceEvaluator(str(path)).run(None, inputs)[0]
    np.testing.assert_array_equal(aot.run(path, inputs, board="host")["y"], want)
    if mode == "linear":
        with pytest.raises(AotError, match="index"):
            aot.run(path, {**inputs, "at": np.array([0, 2], np.int64)}, board="host")


def wide_attention(head: int, v_head: int) -> tuple[onnx.ModelProto, dict, dict]:
    """3-D GQA Attention with a cache, a float mask and causality, all four
    outputs; the model, random inputs and onnx.reference's outputs."""
    rng = np.random.default_rng(head)
    b, hq, hkv, lq, lk, past = 2, 4, 2, 5, 3, 4
    inputs = {"Q": rng.standard_normal((b, lq, hq * head)),
              "K": rng.standard_normal((b, lk, hkv * head)),
              "V": rng.standard_normal((b, lk, hkv * v_head)),
              "mask": rng.standard_normal((lq, past + lk)),
              "past_key": rng.standard_normal((b, hkv, past, head)),
              "past_value": rng.standard_normal((b, hkv, past, v_head))}
    inputs = {k: v.astype(np.float32) for k, v in inputs.items()}
    f = TensorProto.FLOAT
    outs = ["Y", "present_key", "present_value", "qk"]
    node = helper.make_node("Attention", list(inputs), outs, is_causal=1, q_num_heads=hq,
                            kv_num_heads=hkv, qk_matmul_output_mode=3)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(k, f, v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, f, None) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)],
                              ir_version=10)
    from onnx.reference import ReferenceEvaluator
    return model, inputs, dict(zip(outs, ReferenceEvaluator(model).run(None, inputs)))


@pytest.mark.parametrize("head, v_head", [(37, 21), (64, 64)])
def test_attention_wide_heads_against_onnx_reference(tmp_path, head, v_head):
    """Head sizes past the host's 8 float lanes (partial sums in vectors plus
    a scalar remainder; the output row in vectors plus a remainder)."""
    model, inputs, want = wide_attention(head, v_head)
    path = tmp_path / "attention.onnx"
    onnx.save(model, path)
    got = aot.run(path, inputs, board="host")
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5, err_msg=name)

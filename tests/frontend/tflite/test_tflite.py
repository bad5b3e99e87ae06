"""The TFLite importer and the tfl.* ops against the reference runtimes.

- int8 models: bit-exact with tflite-micro's interpreter (reference kernels),
  on the saved input and on random inputs.
- float models: within 1e-4 of LiteRT and of the saved output.
- LSTM models: state carried across invocations, as on a device.
- Single-op models built here (flatbuffers) check each tfl.* op against
  tflite-micro on edge cases the real models do not reach (dilation,
  depth multiplier, broadcasting, SAME padding at the borders, MEAN, MUL...).
- Corrupt files raise ModelError; unsupported ops UnsupportedError.

The saved outputs come from LiteRT's builtin (optimized) kernels, which round
differently from the reference kernels (TFLITE_INT8.md §12: ruy requantizes
with a single rounding). Measured on the saved inputs (our result is
bit-exact with tflite-micro on all of them):
    mlperf_ad_fcae_int8     max |diff| vs LiteRT = 1 (FULLY_CONNECTED via ruy)
    mlperf_ic_resnet8_int8  max |diff| vs LiteRT = 1 (CONV_2D via ruy)
    all other int8 models   bit-exact with LiteRT too.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
import tflite

import aot
from aot.errors import AotError, ModelError, ShapeError, UnsupportedError
from aot.frontend.tflite.importer import import_tflite
from support import MODELS, shared_models
from support.tflite_models import TinyModel, _lstm_model

TFLITE_MODELS = shared_models("*.tflite")
INT8 = [p for p in TFLITE_MODELS if p.stem.endswith("int8")]
FLOAT = [p for p in TFLITE_MODELS if p.stem.endswith("f32")]
PERSON_FIXED = MODELS / "derived" / "tflm_person_detect_int8.qdim_fixed.tflite"

# Max |ours - saved LiteRT output| on the saved input; see the module docstring.
LITERT_INT8_DIFF = {"mlperf_ad_fcae_int8": 1, "mlperf_ic_resnet8_int8": 1}


def _ident(p):
    return p.stem


@functools.lru_cache(maxsize=None)
def loaded(path) -> aot.Graph:
    return aot.load(path)


@functools.lru_cache(maxsize=None)
def compiled(path) -> aot.Graph:
    return aot.optimize(loaded(path))


def reference_io(path):
    stem = path.name.split(".")[0]
    return np.load(MODELS / f"{stem}.input.npy"), np.load(MODELS / f"{stem}.output.npy")


def run(graph, x, state=None):
    return aot.interpret(graph, {graph.inputs[0]: x}, state)[graph.outputs[0]]


def tflm(path_or_bytes):
    from tflite_micro.python.tflite_micro import runtime
    if isinstance(path_or_bytes, bytes):
        return runtime.Interpreter.from_bytes(path_or_bytes)
    return runtime.Interpreter.from_file(str(path_or_bytes))


def tflm_run(interp, *xs):
    for i, x in enumerate(xs):
        interp.set_input(x, i)
    interp.invoke()
    return interp.get_output(0)


def litert_run(path, x):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    it = Interpreter(model_path=str(path), num_threads=1,
                     experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


def random_inputs(graph, n, seed):
    ty = graph.types[graph.inputs[0]]
    rng = np.random.default_rng(seed)
    return [rng.integers(-128, 128, ty.shape).astype(np.int8) for _ in range(n)]


# ------------------------------------------------------------ real int8 models

@pytest.mark.parametrize("path", INT8 + [PERSON_FIXED], ids=_ident)
def test_int8_model_bit_exact_with_tflm(path):
    g = compiled(path)
    x, saved = reference_io(path)
    interp = tflm(path)
    ours = run(g, x)
    assert ours.dtype == np.int8
    np.testing.assert_array_equal(ours, tflm_run(interp, x))
    stateless = not g.variables
    for k, xr in enumerate(random_inputs(g, 3, seed=len(path.stem))):
        if not stateless:
            interp.reset()   # tflite-micro's reset = our initial variable values
        np.testing.assert_array_equal(run(g, xr), tflm_run(interp, xr), err_msg=f"random {k}")


@pytest.mark.parametrize("path", INT8, ids=_ident)
def test_int8_model_against_saved_litert_output(path):
    g = compiled(path)
    x, saved = reference_io(path)
    diff = int(np.max(np.abs(run(g, x).astype(np.int32) - saved.astype(np.int32))))
    assert diff <= LITERT_INT8_DIFF.get(path.stem, 0), f"max |ours - LiteRT| = {diff}"


def test_person_detect_with_per_channel_bias_axis_3():
    # The original file's 1-D biases say quantized_dimension 3; TFLM accepts it.
    path = MODELS / "tflm_person_detect_int8.tflite"
    g = loaded(path)
    biases = [g.types[n.inputs[2]] for n in g.nodes if n.op == "tfl.conv2d"]
    assert biases and all(b.quant.axis == 0 for b in biases if b.quant.per_channel)
    x, _ = reference_io(path)
    np.testing.assert_array_equal(run(compiled(path), x), run(compiled(PERSON_FIXED), x))
    np.testing.assert_array_equal(run(compiled(path), x), tflm_run(tflm(path), x))


# ------------------------------------------------------------ real float models

@pytest.mark.parametrize("path", FLOAT, ids=_ident)
def test_float_model_matches_litert(path):
    g = compiled(path)
    x, saved = reference_io(path)
    ours = run(g, x)
    np.testing.assert_allclose(ours, saved, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ours, litert_run(path, x), rtol=1e-4, atol=1e-4)


def test_hybrid_model_dynamic_mode_tracks_litert():
    """The default hybrid="dynamic" runs LiteRT's hybrid conv (activations
    quantized on the fly), so it matches LiteRT on any input. The
    "dequantize" mode (float math on dequantized weights) matches the saved
    output only because its softmax saturates: on random inputs it differs
    from LiteRT by up to ~0.08 in probability (measured: 20 inputs, max 0.08,
    no argmax flips)."""
    path = MODELS / "mlperf_kws_dscnn_f32.tflite"
    g = aot.optimize(aot.load(path))
    assert any(n.op == "tfl.conv2d" for n in aot.load(path).nodes)
    x, saved = reference_io(path)
    rng = np.random.default_rng(11)
    inputs = [x] + [((rng.integers(-128, 128, x.shape) - 83) * 0.584702909).astype(np.float32)
                    for _ in range(4)]
    for k, xi in enumerate(inputs):
        np.testing.assert_allclose(run(g, xi), litert_run(path, xi), rtol=1e-4, atol=1e-4,
                                   err_msg=f"input {k}")


def test_hybrid_model_dequantize_mode():
    from aot.passes.infer import infer_types
    path = MODELS / "mlperf_kws_dscnn_f32.tflite"
    g = infer_types(import_tflite(path.read_bytes(), "kws", hybrid="dequantize"))
    deq = [n for n in g.nodes if n.op == "tfl.dequantize"]
    assert len(deq) == 5 and all(g.types[n.inputs[0]].dtype == "int8" for n in deq)


# ------------------------------------------------------------ stateful LSTM models

@pytest.mark.parametrize("name", ["tflm_mnist_lstm_int8", "tflm_mnist_lstm_f32"])
def test_lstm_state_carries_across_invocations(name):
    path = MODELS / f"{name}.tflite"
    g = compiled(path)
    assert set(g.updates) == set(g.variables) and len(g.variables) == 2
    lstm = next(n for n in loaded(path).nodes if n.op == "tfl.lstm")
    seq = lstm.outputs[0]
    probe = g.replace(outputs=g.outputs + (seq,))  # fusion keeps group outputs' names
    x, saved = reference_io(path)
    interp = tflm(path)
    state: dict = {}
    first = aot.interpret(probe, {g.inputs[0]: x}, state)
    x2 = np.roll(x, 5, axis=1)
    second = aot.interpret(probe, {g.inputs[0]: x2}, state)
    fresh = aot.interpret(probe, {g.inputs[0]: x2})
    r1, r2 = tflm_run(interp, x), tflm_run(interp, x2)
    # The state really changed the result of the second run.
    assert not np.array_equal(second[seq], fresh[seq])
    if name.endswith("int8"):
        np.testing.assert_array_equal(first[g.outputs[0]], saved)
        np.testing.assert_array_equal(first[g.outputs[0]], r1)
        np.testing.assert_array_equal(second[g.outputs[0]], r2)
    else:
        np.testing.assert_allclose(first[g.outputs[0]], saved, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(first[g.outputs[0]], r1, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(second[g.outputs[0]], r2, rtol=1e-4, atol=1e-4)


def test_int8_lstm_sequence_output_bit_exact_over_invocations():
    """The final softmax saturates; compare the LSTM's own output every step."""
    from tflite_micro.python.tflite_micro import runtime
    path = MODELS / "tflm_mnist_lstm_int8.tflite"
    g = compiled(path)
    lstm = next(n for n in loaded(path).nodes if n.op == "tfl.lstm")
    probe = g.replace(outputs=(lstm.outputs[0],))
    interp = runtime.Interpreter.from_file(
        str(path), intrepreter_config=runtime.InterpreterConfig.kPreserveAllTensors)
    index = _tensor_index(path, lstm.outputs[0])
    state: dict = {}
    for k, x in enumerate([reference_io(path)[0]] + random_inputs(g, 3, seed=7)):
        ours = aot.interpret(probe, {g.inputs[0]: x}, state)[lstm.outputs[0]]
        tflm_run(interp, x)
        np.testing.assert_array_equal(ours, interp.GetTensor(index, 0)["tensor_data"],
                                      err_msg=f"invocation {k}")


def _tensor_index(path, name: str) -> int:
    m = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    sg = m.Subgraphs(0)
    return next(i for i in range(sg.TensorsLength()) if sg.Tensors(i).Name().decode() == name)


def test_variables_start_at_tflm_reset_values():
    g = compiled(MODELS / "tflm_mnist_lstm_int8.tflite")
    for name, init in g.variables.items():
        ty = g.types[name]
        expected = ty.quant.zero_point[0] if ty.dtype == "int8" else 0
        assert init.dtype.name == ty.dtype and np.all(init == expected)


# ------------------------------------------------------------ robustness

@pytest.fixture(scope="module")
def hello_bytes():
    return (MODELS / "tflm_hello_world_int8.tflite").read_bytes()


@pytest.mark.parametrize("cut", [0, 3, 7, 8, 16, 100, 1000, -1000, -10])
def test_truncated_file_is_a_model_error(hello_bytes, cut):
    with pytest.raises(ModelError):
        import_tflite(hello_bytes[:cut], "t")


def test_bad_identifier_is_a_model_error(hello_bytes):
    with pytest.raises(ModelError, match="TFL3"):
        import_tflite(hello_bytes[:4] + b"ONNX" + hello_bytes[8:], "t")


def test_random_corruption_never_crashes(hello_bytes):
    rng = np.random.default_rng(5)
    for _ in range(150):
        data = bytearray(hello_bytes)
        for pos in rng.integers(0, len(data), 4):
            data[pos] = rng.integers(0, 256)
        try:
            import_tflite(bytes(data), "t")
        except AotError as e:
            assert "\n" not in str(e)


def test_load_reports_corrupt_file(tmp_path, hello_bytes):
    p = tmp_path / "bad.tflite"
    p.write_bytes(hello_bytes[: len(hello_bytes) // 2])
    with pytest.raises(ModelError):
        aot.load(p)


# ------------------------------------------------------------ single-op models

def check_against_tflm(data: bytes, inputs, runs: int = 3, seed: int = 0):
    """Import and run the model, compare with tflite-micro bit for bit."""
    from aot.passes.infer import infer_types
    g = aot.optimize(infer_types(import_tflite(data, "tiny")))
    interp = tflm(data)
    rng = np.random.default_rng(seed)
    for _ in range(runs):
        xs = [inp(rng) for inp in inputs]
        ours = aot.interpret(g, dict(zip(g.inputs, xs)))[g.outputs[0]]
        ref = tflm_run(interp, *xs)
        assert ours.dtype == ref.dtype and ours.shape == ref.shape
        if ours.dtype.kind == "f":
            np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-6)
        else:
            np.testing.assert_array_equal(ours, ref)
    return g


def int8_input(shape):
    return lambda rng: rng.integers(-128, 128, shape).astype(np.int8)


def _conv_model(op, x_shape, w_shape, out_shape, options, per_channel=True, bias=True, seed=0):
    rng = np.random.default_rng(seed)
    m = TinyModel()
    cout = w_shape[0] if op == "CONV_2D" else w_shape[3]
    wscale = rng.uniform(0.002, 0.02, cout) if per_channel else [0.01]
    qdim = 0 if op == "CONV_2D" else 3
    x = m.tensor("x", x_shape, scale=[0.05], zp=[3])
    w = m.tensor("w", w_shape, scale=wscale, zp=[0] * len(wscale), qdim=qdim,
                 data=rng.integers(-127, 128, w_shape))
    ins = [x, w]
    if bias:
        bscale = 0.05 * np.asarray(wscale) * np.ones(cout)
        ins.append(m.tensor("b", [cout], "int32", scale=bscale, zp=[0] * cout,
                            data=rng.integers(-3000, 3000, cout)))
    y = m.tensor("y", out_shape, scale=[0.07], zp=[-10])
    cls = "Conv2DOptions" if op == "CONV_2D" else "DepthwiseConv2DOptions"
    m.op(op, ins, [y], (cls, options))
    return m.build([x], [y])


@pytest.mark.parametrize("x_shape, w_shape, out_shape, options, per_channel", [
    ([1, 9, 11, 3], [4, 3, 3, 3], [1, 5, 6, 4],
     dict(Padding=0, StrideH=2, StrideW=2, FusedActivationFunction=3), True),
    ([2, 10, 8, 2], [3, 3, 2, 2], [2, 6, 4, 3],
     dict(Padding=1, StrideH=1, StrideW=2, DilationHFactor=2, DilationWFactor=1), False),
    ([1, 7, 7, 4], [5, 1, 1, 4], [1, 7, 7, 5],
     dict(Padding=0, StrideH=1, StrideW=1, FusedActivationFunction=1), True),
    ([1, 8, 8, 2], [3, 4, 4, 2], [1, 8, 8, 3],
     dict(Padding=0, StrideH=1, StrideW=1, DilationHFactor=2, DilationWFactor=2), True),
])
def test_conv2d_op_against_tflm(x_shape, w_shape, out_shape, options, per_channel):
    data = _conv_model("CONV_2D", x_shape, w_shape, out_shape, options, per_channel)
    check_against_tflm(data, [int8_input(x_shape)])


@pytest.mark.parametrize("x_shape, w_shape, out_shape, options, bias", [
    ([1, 9, 9, 3], [1, 3, 3, 6], [1, 5, 5, 6],
     dict(Padding=0, StrideH=2, StrideW=2, DepthMultiplier=2, FusedActivationFunction=3), True),
    ([1, 10, 7, 4], [1, 3, 2, 4], [1, 6, 6, 4],
     dict(Padding=1, StrideH=1, StrideW=1, DepthMultiplier=1, DilationHFactor=2), False),
    ([1, 6, 6, 2], [1, 5, 5, 2], [1, 6, 6, 2],
     dict(Padding=0, StrideH=1, StrideW=1, DepthMultiplier=1, FusedActivationFunction=1), True),
])
def test_depthwise_conv_op_against_tflm(x_shape, w_shape, out_shape, options, bias):
    data = _conv_model("DEPTHWISE_CONV_2D", x_shape, w_shape, out_shape, options, bias=bias)
    check_against_tflm(data, [int8_input(x_shape)])


@pytest.mark.parametrize("per_channel, keep", [(False, False), (True, False), (False, True)])
def test_fully_connected_op_against_tflm(per_channel, keep):
    rng = np.random.default_rng(3)
    m = TinyModel()
    x = m.tensor("x", [2, 3, 20], scale=[0.1], zp=[-7])
    wscale = rng.uniform(0.001, 0.01, 6) if per_channel else [0.004]
    w = m.tensor("w", [6, 20], scale=wscale, zp=[0] * len(wscale),
                 data=rng.integers(-127, 128, (6, 20)))
    bscale = (0.1 * np.asarray(wscale) * np.ones(6)).astype(np.float32)
    b = m.tensor("b", [6], "int32", scale=bscale, zp=[0] * 6, data=rng.integers(-900, 900, 6))
    y = m.tensor("y", [2, 3, 6] if keep else [6, 6], scale=[0.09], zp=[4])
    m.op("FULLY_CONNECTED", [x, w, b], [y],
         ("FullyConnectedOptions", dict(FusedActivationFunction=1, KeepNumDims=keep)))
    check_against_tflm(m.build([x], [y]), [int8_input([2, 3, 20])])


@pytest.mark.parametrize("op, act", [("ADD", 0), ("ADD", 1), ("SUB", 3), ("MUL", 0), ("MUL", 2)])
def test_binary_ops_against_tflm(op, act):
    m = TinyModel()
    a = m.tensor("a", [1, 4, 5, 3], scale=[0.031], zp=[-5])
    b = m.tensor("b", [1, 1, 5, 3], scale=[0.077], zp=[12])
    y = m.tensor("y", [1, 4, 5, 3], scale=[0.05 if op != "MUL" else 0.11], zp=[2])
    cls = {"ADD": "AddOptions", "SUB": "SubOptions", "MUL": "MulOptions"}[op]
    m.op(op, [a, b], [y], (cls, dict(FusedActivationFunction=act)))
    check_against_tflm(m.build([a, b], [y]), [int8_input([1, 4, 5, 3]), int8_input([1, 1, 5, 3])])


@pytest.mark.parametrize("op, padding, k, s, out_hw", [
    ("AVERAGE_POOL_2D", 0, 3, 2, (4, 5)),
    ("AVERAGE_POOL_2D", 1, 2, 2, (3, 4)),
    ("MAX_POOL_2D", 0, 3, 2, (4, 5)),
    ("MAX_POOL_2D", 1, 3, 1, (5, 7)),
])
def test_pool_ops_against_tflm(op, padding, k, s, out_hw):
    m = TinyModel()
    x = m.tensor("x", [1, 7, 9, 3], scale=[0.02], zp=[-3])
    y = m.tensor("y", [1, *out_hw, 3], scale=[0.02], zp=[-3])
    m.op(op, [x], [y], ("Pool2DOptions", dict(Padding=padding, StrideH=s, StrideW=s,
                                              FilterHeight=k, FilterWidth=k,
                                              FusedActivationFunction=1)))
    check_against_tflm(m.build([x], [y]), [int8_input([1, 7, 9, 3])])


@pytest.mark.parametrize("beta, scale", [(1.0, 0.1), (0.5, 0.04), (1.0, 0.9)])
def test_softmax_op_against_tflm(beta, scale):
    m = TinyModel()
    x = m.tensor("x", [3, 17], scale=[scale], zp=[5])
    y = m.tensor("y", [3, 17], scale=[1 / 256], zp=[-128])
    m.op("SOFTMAX", [x], [y], ("SoftmaxOptions", dict(Beta=beta)))
    check_against_tflm(m.build([x], [y]), [int8_input([3, 17])], runs=5)


@pytest.mark.parametrize("same_quant", [True, False])
def test_mean_op_against_tflm(same_quant):
    m = TinyModel()
    x = m.tensor("x", [1, 6, 5, 4], scale=[0.05], zp=[3])
    axes = m.tensor("axes", [2], "int32", data=[1, 2])
    y = m.tensor("y", [1, 1, 1, 4], scale=[0.05 if same_quant else 0.02],
                 zp=[3 if same_quant else -9])
    m.op("MEAN", [x, axes], [y], ("ReducerOptions", dict(KeepDims=True)))
    check_against_tflm(m.build([x], [y]), [int8_input([1, 6, 5, 4])])


def test_quantize_and_dequantize_against_tflm():
    m = TinyModel()
    x = m.tensor("x", [2, 50], "float32")
    q = m.tensor("q", [2, 50], scale=[0.0173], zp=[-3])
    r = m.tensor("r", [2, 50], scale=[0.041], zp=[10])
    y = m.tensor("y", [2, 50], "float32")
    m.op("QUANTIZE", [x], [q])
    m.op("QUANTIZE", [q], [r])
    m.op("DEQUANTIZE", [r], [y])
    # Halves of the scale exercise round-half-away in the float32 division.
    data = m.build([x], [y])
    check_against_tflm(data, [lambda rng: (rng.integers(-300, 300, (2, 50)) * 0.5 * 0.0173
                                           ).astype(np.float32)])
    check_against_tflm(data, [lambda rng: rng.uniform(-3, 3, (2, 50)).astype(np.float32)])


def test_reshape_passes_quantization_through():
    m = TinyModel()
    x = m.tensor("x", [1, 2, 3, 4], scale=[0.05], zp=[1])
    y = m.tensor("y", [1, 24], scale=[0.05], zp=[1])
    z = m.tensor("z", [1, 24], scale=[1 / 256], zp=[-128])
    m.op("RESHAPE", [x], [y])
    m.op("SOFTMAX", [y], [z], ("SoftmaxOptions", dict(Beta=1.0)))
    g = check_against_tflm(m.build([x], [z]), [int8_input([1, 2, 3, 4])])
    assert g.types["y"].quant == g.types["x"].quant


# ------------------------------------------------------------ importer errors

def test_unsupported_op_names_op_and_node():
    m = TinyModel()
    x = m.tensor("x", [4], "float32")
    y = m.tensor("unique_out", [4], "float32")
    m.op("UNIQUE", [x], [y])
    with pytest.raises(UnsupportedError, match=r"unsupported op 'UNIQUE' at node 'unique_out'"):
        import_tflite(m.build([x], [y]), "t")


def test_tensor_index_out_of_range_is_a_model_error():
    m = TinyModel()
    x = m.tensor("x", [4], "float32")
    y = m.tensor("y", [4], "float32")
    m.op("RELU", [x], [7])
    with pytest.raises(ModelError, match="tensor index 7"):
        import_tflite(m.build([x], [y]), "t")


def test_buffer_index_out_of_range_is_a_model_error():
    m = TinyModel()
    x = m.tensor("x", [4], "float32")
    w = m.tensor("w", [4], "float32", buffer=9)
    y = m.tensor("y", [4], "float32")
    m.op("ADD", [x, w], [y])
    with pytest.raises(ModelError, match="buffer 9"):
        import_tflite(m.build([x], [y]), "t")


@pytest.mark.parametrize("dim", [0, -3])
def test_bad_dimension_is_a_shape_error(dim):
    m = TinyModel()
    x = m.tensor("x", [2, dim], "float32")
    y = m.tensor("y", [2, dim], "float32")
    m.op("RELU", [x], [y])
    with pytest.raises(ShapeError):
        import_tflite(m.build([x], [y]), "t")


def test_short_buffer_is_a_model_error():
    m = TinyModel()
    x = m.tensor("x", [4], "float32")
    w = m.tensor("w", [4], "float32", data=np.zeros(2, np.float32))
    y = m.tensor("y", [4], "float32")
    m.op("ADD", [x, w], [y])
    with pytest.raises(ModelError, match="buffer has 8 bytes"):
        import_tflite(m.build([x], [y]), "t")


@pytest.mark.parametrize("own_empty_buffer", [False, True])
def test_a_computed_tensor_at_scale_0_is_a_model_error(own_empty_buffer):
    """Found by fuzzing: an activation at scale 0 (with its own, empty,
    buffer as converters give every tensor) made the activation range 0/0."""
    m = TinyModel()
    x = m.tensor("x", [1, 8], scale=[0.1], zp=[0])
    if own_empty_buffer:
        m.buffers.append(b"")
    y = m.tensor("y", [1, 8], scale=[0.0], zp=[0],
                 buffer=len(m.buffers) - 1 if own_empty_buffer else None)
    m.op("RELU", [x], [y])
    with pytest.raises(ModelError, match="tensor 'y': quantization scale 0"):
        import_tflite(m.build([x], [y]), "t")


def test_node_names_are_deterministic():
    a = import_tflite((MODELS / "mlperf_kws_dscnn_f32.tflite").read_bytes(), "m")
    b = import_tflite((MODELS / "mlperf_kws_dscnn_f32.tflite").read_bytes(), "m")
    assert [n.name for n in a.nodes] == [n.name for n in b.nodes]
    assert len({n.name for n in a.nodes}) == len(a.nodes)


# ------------------------------------------------------------ float single-op models

def float_input(shape):
    return lambda rng: rng.standard_normal(shape).astype(np.float32)


def _float_model(op, cls, x_shape, w_shape, out_shape, options, seed=0):
    rng = np.random.default_rng(seed)
    m = TinyModel()
    x = m.tensor("x", x_shape, "float32")
    ins = [x]
    if w_shape is not None:
        cout = w_shape[3] if op == "DEPTHWISE_CONV_2D" else w_shape[0]
        ins.append(m.tensor("w", w_shape, "float32", data=rng.standard_normal(w_shape)))
        ins.append(m.tensor("b", [cout], "float32", data=rng.standard_normal(cout)))
    y = m.tensor("y", out_shape, "float32")
    m.op(op, ins, [y], (cls, options) if cls else None)
    return m.build([x], [y])


@pytest.mark.parametrize("op, cls, x_shape, w_shape, out_shape, options", [
    ("CONV_2D", "Conv2DOptions", [1, 9, 11, 3], [4, 3, 3, 3], [1, 5, 6, 4],
     dict(Padding=0, StrideH=2, StrideW=2, FusedActivationFunction=3)),
    ("CONV_2D", "Conv2DOptions", [1, 10, 8, 2], [3, 3, 2, 2], [1, 6, 4, 3],
     dict(Padding=1, StrideH=1, StrideW=2, DilationHFactor=2, FusedActivationFunction=2)),
    ("DEPTHWISE_CONV_2D", "DepthwiseConv2DOptions", [1, 9, 9, 3], [1, 3, 3, 6], [1, 5, 5, 6],
     dict(Padding=0, StrideH=2, StrideW=2, DepthMultiplier=2, FusedActivationFunction=1)),
    ("FULLY_CONNECTED", "FullyConnectedOptions", [2, 3, 20], [6, 20], [2, 3, 6],
     dict(KeepNumDims=True, FusedActivationFunction=1)),
    ("FULLY_CONNECTED", "FullyConnectedOptions", [1, 2, 2, 5], [6, 20], [1, 6],
     dict(KeepNumDims=False)),
    ("AVERAGE_POOL_2D", "Pool2DOptions", [1, 7, 9, 3], None, [1, 4, 5, 3],
     dict(Padding=0, StrideH=2, StrideW=2, FilterHeight=3, FilterWidth=3)),
    ("MAX_POOL_2D", "Pool2DOptions", [1, 7, 9, 3], None, [1, 4, 5, 3],
     dict(Padding=0, StrideH=2, StrideW=2, FilterHeight=3, FilterWidth=3,
          FusedActivationFunction=3)),
    ("SOFTMAX", "SoftmaxOptions", [3, 11], None, [3, 11], dict(Beta=0.7)),
])
def test_float_ops_against_tflm(op, cls, x_shape, w_shape, out_shape, options):
    data = _float_model(op, cls, x_shape, w_shape, out_shape, options)
    check_against_tflm(data, [float_input(x_shape)])


def test_only_the_first_subgraph_is_the_model():
    m = TinyModel()
    x = m.tensor("x", [4], "float32")
    y = m.tensor("y", [4], "float32")
    m.op("RELU", [x], [y])
    g = import_tflite(m.build([x], [y], subgraphs=3), "t")
    assert [n.op for n in g.nodes] == ["Relu"]


def test_buffer_outside_the_file_is_a_model_error():
    m = TinyModel()
    x = m.tensor("x", [4], "float32")
    w = m.tensor("w", [4], "float32", buffer=1)
    m.external[1] = (1 << 20, 16)   # offset, size: far past the end of the file
    m.buffers.append(b"")
    y = m.tensor("y", [4], "float32")
    m.op("ADD", [x, w], [y])
    with pytest.raises(ModelError, match="outside"):
        import_tflite(m.build([x], [y]), "t")


def test_data_movement_ops_against_tflm():
    m = TinyModel()
    a = m.tensor("a", [1, 3, 4, 2], scale=[0.05], zp=[-4])
    b = m.tensor("b", [1, 3, 4, 3], scale=[0.05], zp=[-4])
    cat = m.tensor("cat", [1, 3, 4, 5], scale=[0.05], zp=[-4])
    pads = m.tensor("pads", [4, 2], "int32", data=[[0, 0], [1, 2], [0, 1], [0, 0]])
    padded = m.tensor("padded", [1, 6, 5, 5], scale=[0.05], zp=[-4])
    perm = m.tensor("perm", [4], "int32", data=[0, 3, 1, 2])
    y = m.tensor("y", [1, 5, 6, 5], scale=[0.05], zp=[-4])
    m.op("CONCATENATION", [a, b], [cat], ("ConcatenationOptions", dict(Axis=3)))
    m.op("PAD", [cat, pads], [padded])
    m.op("TRANSPOSE", [padded, perm], [y])
    check_against_tflm(m.build([a, b], [y]), [int8_input([1, 3, 4, 2]), int8_input([1, 3, 4, 3])])


def test_float_mean_and_activations_against_tflm():
    m = TinyModel()
    x = m.tensor("x", [2, 4, 5, 3], "float32")
    axes = m.tensor("axes", [2], "int32", data=[1, 2])
    mean = m.tensor("mean", [2, 3], "float32")
    y = m.tensor("y", [2, 3], "float32")
    m.op("MEAN", [x, axes], [mean], ("ReducerOptions", dict(KeepDims=False)))
    m.op("LOGISTIC", [mean], [y])
    check_against_tflm(m.build([x], [y]), [float_input([2, 4, 5, 3])])


@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("int8", [False, True])
def test_lstm_op_against_tflm_with_state(time_major, int8):
    from aot.passes.infer import infer_types
    data, x_shape = _lstm_model(time_major, int8)
    g = aot.optimize(infer_types(import_tflite(data, "lstm")))
    interp = tflm(data)
    rng = np.random.default_rng(1)
    state: dict = {}
    for k in range(3):   # state carried through three invocations
        x = int8_input(x_shape)(rng) if int8 else float_input(x_shape)(rng)
        ours = run(g, x, state)
        ref = tflm_run(interp, x)
        if int8:
            np.testing.assert_array_equal(ours, ref, err_msg=f"invocation {k}")
        else:
            np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5, err_msg=f"invocation {k}")


# ------------------------------------------------------------ an open batch

def open_batch_model() -> bytes:
    """x[-1, 8] -> FULLY_CONNECTED -> RELU -> y[-1, 4], the way the TFLite
    converter writes a Keras model with an unknown batch: each tensor's shape
    at batch 1, its shape_signature at -1."""
    from aot.testing.tflite_builder import TFLiteBuilder

    rng = np.random.default_rng(3)
    m = TFLiteBuilder()
    x = m.tensor("serving_default_x:0", [1, 8], "float32", signature=[-1, 8])
    w = m.const("dense/MatMul", rng.standard_normal((4, 8)).astype(np.float32))
    b = m.const("dense/BiasAdd", rng.standard_normal(4).astype(np.float32))
    y = m.tensor("StatefulPartitionedCall:0", [1, 4], "float32", signature=[-1, 4])
    m.op("FULLY_CONNECTED", [x, w, b], [y], "FullyConnectedOptions", FusedActivationFunction=1)
    return m.build([x], [y])


def test_an_open_batch_is_imported_at_one_and_matches_litert(tmp_path):
    from aot.check.reference import litert

    path = tmp_path / "open_batch.tflite"
    path.write_bytes(open_batch_model())
    graph = aot.load(path)
    assert graph.types[graph.inputs[0]].shape == (1, 8)
    x = np.random.default_rng(4).standard_normal((1, 8)).astype(np.float32)
    got = aot.interpret(aot.optimize(graph), {graph.inputs[0]: x})[graph.outputs[0]]
    (want,) = litert(path, graph, [x])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert aot.load(path, input_shapes={"serving_default_x:0": "1x8"}).types == graph.types


def test_another_size_for_an_open_batch_is_refused(tmp_path):
    path = tmp_path / "open_batch.tflite"
    path.write_bytes(open_batch_model())
    with pytest.raises(UnsupportedError) as e:
        aot.load(path, input_shapes={"serving_default_x:0": "4x8"})
    assert str(e.value) == (
        "--input-shape serving_default_x:0: dimension 0 is open (-1) in the model's signature "
        "and its tensors are written at 1; aot packages a TFLite model at that size, not 4 "
        "(run the package once per sample)")

"""Quantized ONNX as integer kernels: QDQ groups (aot/passes/qdq.py) and the
com.microsoft QOperator ops, against ONNX Runtime.

The models are made here, at test time, with ONNX Runtime's own quantizer
(quantize_static, a small deterministic calibration set) in a temporary
directory: ResNet-8 (MLPerf Tiny) from its float ONNX export in QDQ form,
and in QOperator form; single-op models for the other ops.
"""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper, numpy_helper

import aot
from aot.errors import UnsupportedError
from support import MODELS

RESNET8 = MODELS / "derived" / "mlperf_ic_resnet8_f32.tf2onnx.b1.onnx"
RESNET8_INT8 = MODELS / "mlperf_ic_resnet8_int8.tflite"


def quantize(src, dst, fmt: str, samples: int = 8, per_channel: bool = True,
             activations: str = "QInt8"):
    """ONNX Runtime's quantize_static, int8 weights and activations (or
    uint8 ones: activations="QUInt8"), on uniform [0, 1) calibration inputs
    from a fixed seed."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    model = onnx.load(str(src))
    rng = np.random.default_rng(0)
    inits = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]

    class Reader(CalibrationDataReader):
        def __init__(self):
            shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in inputs}
            self.data = iter([{n: rng.random(s, dtype=np.float32) for n, s in shapes.items()}
                              for _ in range(samples)])

        def get_next(self):
            return next(self.data, None)
    quantize_static(str(src), str(dst), Reader(), quant_format=getattr(QuantFormat, fmt),
                    per_channel=per_channel, activation_type=getattr(QuantType, activations),
                    weight_type=QuantType.QInt8)
    return dst


def ort_run(path, feeds: dict, level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL) -> list:
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def int_ops(graph) -> set[str]:
    return {n.op for f in graph.nodes for n in f.attrs["body"].nodes}


@pytest.fixture(scope="module")
def resnet8_qdq(tmp_path_factory):
    return quantize(RESNET8, tmp_path_factory.mktemp("qdq") / "resnet8_qdq.onnx", "QDQ")


def _logits_model(path, out):
    """The QDQ ResNet-8 with its int8 logits (the dense layer's quantized
    output, before the softmax) as the output."""
    m = onnx.load(str(path))
    name = next(n.output[0] for n in m.graph.node if n.op_type == "QuantizeLinear"
                and n.input[0].startswith("Add__"))
    del m.graph.output[:]
    m.graph.output.append(helper.make_tensor_value_info(name, T.INT8, [1, 10]))
    onnx.save(m, str(out))
    return out


def test_resnet8_qdq_is_int8_and_as_lean_as_tflite(resnet8_qdq):
    """Every Conv, Add, pool and the dense layer become integer ops; the
    arena and the weights are the TFLite int8 package's, within 10% / 15%
    (measured: 36,224 vs 36,224 B arena, 81,280 vs 81,504 B weights)."""
    g = aot.optimize(aot.load(resnet8_qdq))
    ops = int_ops(g)
    assert {"QLinearConv", "QLinearAdd", "QLinearAveragePool", "QLinearMatMul"} <= ops
    assert "Conv" not in ops and "Add" not in ops
    ours = aot.analyze(resnet8_qdq, board="host", code_size=False)
    tfl = aot.analyze(RESNET8_INT8, board="host", code_size=False)
    assert ours["arena_bytes"] <= 1.10 * tfl["arena_bytes"]
    assert abs(ours["weights_bytes"] - tfl["weights_bytes"]) <= 0.15 * tfl["weights_bytes"]


def test_resnet8_qdq_matches_onnxruntime(resnet8_qdq, tmp_path):
    """The package runs what the interpreter computes, bit for bit, and its int8
    logits are ONNX Runtime's but for rounding: ONNX Runtime itself runs the
    model as a mix (on x86 it fuses only the 3 Convs whose int8 input has one
    consumer, docs/ops.md; the other 6 run in float between DQ and Q), and
    its optimized and unoptimized runs are up to 3 steps apart on these
    logits. Measured over 200 inputs: 88.2% of our logits equal ONNX
    Runtime's, 98.0% within one step, at most 4 apart (3 on these 20)."""
    logits = _logits_model(resnet8_qdq, tmp_path / "logits.onnx")
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "ort_optimized.onnx")
    ort.InferenceSession(str(logits), so, providers=["CPUExecutionProvider"])
    ran = [n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node]
    assert (ran.count("QLinearConv"), ran.count("Conv")) == (3, 6), "docs/ops.md's account"
    g = aot.optimize(aot.load(logits))
    name = g.outputs[0]
    rng = np.random.default_rng(3)
    feeds = [{"input_1": rng.random((1, 32, 32, 3), dtype=np.float32)} for _ in range(20)]
    pkg = aot.package(logits, board="host", out_dir=tmp_path / "pkg")
    with aot.connect("host") as dev:
        got = [dev.run(pkg, f)[name] for f in feeds]
    diffs = []
    for f, y in zip(feeds, got):
        want = aot.interpret(g, f)[name].astype(np.int32)
        assert np.array_equal(y.astype(np.int32), want)
        diffs.append(np.abs(want - ort_run(logits, f)[0].astype(np.int32)))
    diffs = np.concatenate(diffs)
    assert diffs.max() <= 3 and np.mean(diffs == 0) >= 0.8 and np.mean(diffs <= 1) >= 0.95


def test_resnet8_qdq_verifies_against_onnxruntime(resnet8_qdq, capsys):
    """`aot verify` of the QDQ ResNet-8 at its defaults, as a user
    runs it: its float output is DequantizeLinear(scale 1/255), held to
    one step; the package's int8 kernels land within it on the default
    input, with the output's step and max LSB in the JSON."""
    from aot.cli import main
    code = main(["verify", str(resnet8_qdq), "--board", "host", "--json"])
    out = json.loads(capsys.readouterr().out)
    (row,) = out["outputs"]
    assert out["reference"] == "onnxruntime" and row["step"] == pytest.approx(1 / 255)
    assert row["max_lsb"] == 1 and row["top1_agreement"] == 1.0     # measured: 1 step
    assert code == 0 and out["ok"], out
    # the same input held to a tenth of a step (--atol replaces the default) fails
    assert main(["verify", str(resnet8_qdq), "--board", "host", "--json",
                 "--atol", str(0.1 / 255)]) == 1


def _int8_output(path, out):
    """The model with the integer tensor its last DequantizeLinear reads as
    its output: results compared in quantization steps."""
    m = onnx.load(str(path))
    dq = next(n for n in m.graph.node if n.op_type == "DequantizeLinear"
              and n.output[0] == m.graph.output[0].name)
    del m.graph.output[:]
    zero_point = next(t for t in m.graph.initializer if t.name == dq.input[2])
    m.graph.output.append(helper.make_tensor_value_info(dq.input[0], zero_point.data_type, None))
    onnx.save(m, str(out))
    return out


def _package_against_ort(path, tmp_path, feeds) -> int:
    """Runs the package on host: returns its largest difference from ONNX
    Runtime in steps; the interpreter must agree with the package exactly."""
    g = aot.optimize(aot.load(path))
    name = g.outputs[0]
    pkg = aot.package(path, board="host", out_dir=tmp_path / "pkg")
    worst = 0
    with aot.connect("host") as dev:
        for f in feeds:
            got = dev.run(pkg, f)[name].astype(np.int32)
            assert np.array_equal(got, aot.interpret(g, f)[name].astype(np.int32))
            worst = max(worst, int(np.abs(got - ort_run(path, f)[0].astype(np.int32)).max()))
    return worst


def test_resnet8_qoperator_matches_onnxruntime(tmp_path):
    """QOperator ResNet-8 (QLinearConv, com.microsoft QLinearAdd,
    QLinearAveragePool, QLinearSoftmax): the same integer graph as the QDQ
    model, and ONNX Runtime runs these very kernels: the softmax's int8
    output equals ONNX Runtime's on every input (measured: 200 of 200 inputs
    bit-exact on the logits)."""
    model = quantize(RESNET8, tmp_path / "resnet8_qop.onnx", "QOperator")
    assert {"QLinearAdd", "QLinearSoftmax"} <= int_ops(aot.optimize(aot.load(model)))
    probs = _int8_output(model, tmp_path / "probs.onnx")
    rng = np.random.default_rng(5)
    feeds = [{"input_1": rng.random((1, 32, 32, 3), dtype=np.float32)} for _ in range(10)]
    assert _package_against_ort(probs, tmp_path, feeds) == 0


def _small_model(path):
    """Conv, Sigmoid, LeakyRelu, Mul, Add, Concat, AveragePool,
    GlobalAveragePool, Flatten, Gemm: every QOperator op ONNX Runtime's
    quantizer writes for them."""
    rng = np.random.default_rng(0)

    def init(name, a):
        return numpy_helper.from_array(np.asarray(a, np.float32), name)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c1"], ["s"]),
             helper.make_node("Conv", ["x", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("LeakyRelu", ["c2"], ["l"], alpha=0.1),
             helper.make_node("Mul", ["s", "l"], ["m"]),
             helper.make_node("Add", ["m", "c1"], ["a"]),
             helper.make_node("Concat", ["a", "l"], ["cat"], axis=1),
             helper.make_node("AveragePool", ["cat"], ["p"], kernel_shape=[3, 3],
                              strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["p"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "wd", "bd"], ["y"], transB=1)]
    inits = [init("w1", rng.normal(0, .3, (4, 3, 3, 3))), init("b1", rng.normal(0, .1, 4)),
             init("w2", rng.normal(0, .3, (4, 3, 3, 3))), init("b2", rng.normal(0, .1, 4)),
             init("wd", rng.normal(0, .5, (5, 8))), init("bd", rng.normal(0, .1, 5))]
    g = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", T.FLOAT,
                                                                         [1, 3, 12, 12])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1, 5])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("fmt", ["QOperator", "QDQ"])
@pytest.mark.parametrize("activations", ["QInt8", "QUInt8"])
def test_quantized_ops_match_onnxruntime(fmt, activations, tmp_path):
    """Both formats of the small model become the same integer ops. ONNX
    Runtime runs the QOperator model with these very kernels: bit-exact
    (measured on 200 inputs). The QDQ model it runs partly in float between
    DQ and Q (Sigmoid, Mul, Add, Concat): 96% of the outputs equal, at most
    2 steps apart (200 inputs). uint8 activations alike."""
    model = quantize(_small_model(tmp_path / "small.onnx"), tmp_path / f"small_{fmt}.onnx", fmt,
                     activations=activations)
    ops = int_ops(aot.optimize(aot.load(model)))
    assert {"QLinearConv", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearMul", "QLinearAdd",
            "QLinearConcat", "QLinearAveragePool", "QLinearGlobalAveragePool",
            "QGemm"} <= ops
    assert not ops & {"Conv", "Sigmoid", "Mul", "Add", "Concat", "AveragePool"}
    out = _int8_output(model, tmp_path / "int8_out.onnx")
    rng = np.random.default_rng(7)
    feeds = [{"x": rng.random((1, 3, 12, 12), dtype=np.float32)} for _ in range(8)]
    assert _package_against_ort(out, tmp_path, feeds) <= (0 if fmt == "QOperator" else 2)


def test_unsupported_microsoft_op_is_refused(tmp_path):
    node = helper.make_node("QLinearWhere", ["c", "x", "s", "z", "x", "s", "z", "s", "z"],
                            ["y"], domain="com.microsoft")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", T.INT8, [2])],
                          [helper.make_tensor_value_info("y", T.INT8, [2])])
    path = tmp_path / "where.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                  helper.make_opsetid("com.microsoft", 1)]),
              str(path))
    with pytest.raises(UnsupportedError, match="QLinearWhere.*com.microsoft"):
        aot.load(path)


def _init(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


@pytest.mark.parametrize("act", ["Relu", "Clip"])
def test_activation_between_op_and_quantize(act, tmp_path):
    """DQ -> Conv -> Relu/Clip -> Q, the output zero point not at the type's
    minimum: a QLinearConv and a Clip of its codes (Q is monotonic, so that
    is exact); then DQ -> MaxPool -> Q and DQ -> Resize (nearest) -> Q with
    equal parameters: the ops on the int8 codes. Against ONNX Runtime within
    one step."""
    rng = np.random.default_rng(2)
    ws = rng.uniform(0.002, 0.01, 6).astype(np.float32)
    xs, ys = np.float32(0.02), np.float32(0.01)
    inits = [_init("xs", xs), _init("xz", np.int8(3)),
             _init("w", rng.integers(-127, 128, (6, 4, 3, 3)).astype(np.int8)),
             _init("ws", ws), _init("wz", np.zeros(6, np.int8)),
             _init("b", rng.integers(-2000, 2000, 6).astype(np.int32)),
             # the Clip case's bias in twice the accumulator's scale: rescaled
             _init("bs", (xs * ws * (1 if act == "Relu" else 2)).astype(np.float32)),
             _init("bz", np.zeros(6, np.int32)),
             _init("ys", ys), _init("yz", np.int8(-7)),
             _init("lo", np.float32(-0.3)), _init("hi", np.float32(0.5))]
    clip_ins = ["c"] if act == "Relu" else ["c", "lo", "hi"]
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bf"], axis=0),
             helper.make_node("Conv", ["xf", "wf", "bf"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node(act, clip_ins, ["r"]),
             helper.make_node("QuantizeLinear", ["r", "ys", "yz"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "ys", "yz"], ["qf"]),
             helper.make_node("MaxPool", ["qf"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("QuantizeLinear", ["p", "ys", "yz"], ["pq"]),
             helper.make_node("DequantizeLinear", ["pq", "ys", "yz"], ["pf"]),
             helper.make_node("Resize", ["pf", "", "scales"], ["u"], mode="nearest"),
             helper.make_node("QuantizeLinear", ["u", "ys", "yz"], ["y"])]
    inits.append(_init("scales", np.array([1, 1, 2, 2], np.float32)))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.INT8, [1, 4, 8, 8])],
                          [helper.make_tensor_value_info("y", T.INT8, [1, 6, 8, 8])], inits)
    path = tmp_path / f"{act}.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    ops = int_ops(aot.optimize(aot.load(path)))
    assert {"QLinearConv", "Clip", "MaxPool", "Resize"} <= ops and not ops & {"Conv", "Relu"}
    feeds = [{"x": rng.integers(-128, 128, (1, 4, 8, 8)).astype(np.int8)} for _ in range(4)]
    assert _package_against_ort(path, tmp_path, feeds) <= 1


def test_conv_transpose_qdq(tmp_path):
    """DQ -> ConvTranspose (stride 2, pads, output_padding, per-channel
    weights on axis 1) -> Q: a QLinearConv over the input spread out with
    zero-point codes, the kernel flipped (ONNX Runtime runs it in float
    between DQ and Q; measured: 14,400 of 14,400 outputs equal)."""
    rng = np.random.default_rng(0)

    def init(name, a):
        return numpy_helper.from_array(np.asarray(a, np.float32), name)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r"]),
             helper.make_node("ConvTranspose", ["r", "wt", "bt"], ["y"], strides=[2, 2],
                              pads=[1, 1, 1, 1], output_padding=[1, 1], kernel_shape=[3, 3])]
    inits = [init("w1", rng.normal(0, .3, (4, 3, 3, 3))), init("b1", rng.normal(0, .1, 4)),
             init("wt", rng.normal(0, .3, (4, 5, 3, 3))), init("bt", rng.normal(0, .1, 5))]
    g = helper.make_graph(nodes, "ct", [helper.make_tensor_value_info("x", T.FLOAT, [1, 3, 6, 6])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1, 5, 12, 12])], inits)
    src = tmp_path / "ct.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(src))
    model = quantize(src, tmp_path / "ct_qdq.onnx", "QDQ")
    ops = int_ops(aot.optimize(aot.load(model)))
    assert "QLinearConv" in ops and not ops & {"Conv", "ConvTranspose"}
    out = _int8_output(model, tmp_path / "ct_int8.onnx")
    feeds = [{"x": rng.random((1, 3, 6, 6), dtype=np.float32)} for _ in range(4)]
    assert _package_against_ort(out, tmp_path, feeds) <= 1


def _qlinear_binary_model(path, op: str, qparams) -> "Path":
    """com.microsoft QLinearAdd/QLinearMul of an int8 column [256, 1] and
    row [1, 256]: fed every code, its output holds every pair of codes."""
    (sa, za), (sb, zb), (sc, zc) = qparams
    inits = [_init("sa", np.float32(sa)), _init("za", np.int8(za)),
             _init("sb", np.float32(sb)), _init("zb", np.int8(zb)),
             _init("sc", np.float32(sc)), _init("zc", np.int8(zc))]
    node = helper.make_node(op, ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"], ["y"],
                            domain="com.microsoft")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", T.INT8, [256, 1]),
                                        helper.make_tensor_value_info("b", T.INT8, [1, 256])],
                          [helper.make_tensor_value_info("y", T.INT8, [256, 256])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                  helper.make_opsetid("com.microsoft", 1)]),
              str(path))
    return path


# Scales (from a search over 400 random ones: at most one pair moves) where
# the multiply-adds fused into one rounding each move one of the 65,536
# QLinearAdd outputs by one step.
_TIE_QPARAMS = ((0.09954255819320679, -10), (0.038434918969869614, 15),
                (0.02644411474466324, -10))


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_qlinear_binary_package_is_the_interpreter_bit_for_bit(op, tmp_path):
    """Every pair of int8 codes: the package (built with -ffp-contract=fast,
    on x86 with FMA) computes what the interpreter computes, bit for bit,
    and so does ONNX Runtime. For QLinearAdd the scales are ones where the
    two fused multiply-adds of MLAS's AVX2 kernel (ONNX Runtime's on this
    host) differ from a rounded product then an add: the test fails if the
    reference or the package rounds the products."""
    from aot.ops.quant import onnx_quant as ref
    path = _qlinear_binary_model(tmp_path / "binary.onnx", op, _TIE_QPARAMS)
    codes = np.arange(-128, 128, dtype=np.int8)
    feeds = {"a": codes.reshape(256, 1), "b": codes.reshape(1, 256)}
    if op == "QLinearAdd":
        ra, rb, fixed = ref.add_params(*(np.float32(v) if i % 2 == 0 else v
                                         for q in _TIE_QPARAMS for i, v in enumerate(q)))
        a, b = codes.astype(np.float64).reshape(256, 1), codes.astype(np.float64).reshape(1, 256)
        fused = np.float32(np.float32(fixed + a * np.float64(ra)) + b * np.float64(rb))
        plain = np.float32(np.float32(fixed + np.float32(np.float32(a) * ra))
                           + np.float32(np.float32(b) * rb))
        assert np.sum(np.rint(np.clip(fused, -128, 127)) != np.rint(np.clip(plain, -128, 127))) == 1
    want = aot.interpret(aot.optimize(aot.load(path)), feeds)["y"]
    pkg = aot.package(path, board="host", out_dir=tmp_path / "pkg")
    with aot.connect("host") as dev:
        got = dev.run(pkg, feeds)["y"]
    assert np.array_equal(got, want)
    assert np.array_equal(want, ort_run(path, feeds)[0])


def _volume_model(path):
    """A PyTorch-style Conv3d block: Conv3d -> Relu -> AvgPool3d -> Conv3d
    (per-output-channel weights once quantized)."""
    rng = np.random.default_rng(1)

    def init(name, a):
        return numpy_helper.from_array(np.asarray(a, np.float32), name)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r"]),
             helper.make_node("AveragePool", ["r"], ["p"], kernel_shape=[2, 3, 2],
                              strides=[1, 2, 2], pads=[0, 1, 0, 0, 1, 0]),
             helper.make_node("Conv", ["p", "w2", "b2"], ["y"], strides=[1, 2, 1])]
    inits = [init("w1", rng.normal(0, .3, (6, 2, 3, 3, 3))), init("b1", rng.normal(0, .1, 6)),
             init("w2", rng.normal(0, .3, (4, 6, 2, 2, 2))), init("b2", rng.normal(0, .1, 4))]
    g = helper.make_graph(nodes, "volume", [helper.make_tensor_value_info("x", T.FLOAT,
                                                                          [1, 2, 5, 8, 7])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_qdq_3d_conv_and_pool_equal_onnxruntime(tmp_path):
    """quantize_static's U8S8 QDQ around Conv3d and AvgPool3d: QLinearConv
    and QLinearAveragePool over 3-D inputs (ONNX Runtime fuses the same
    groups), the package's codes equal to ONNX Runtime's on 4 inputs."""
    model = quantize(_volume_model(tmp_path / "volume.onnx"), tmp_path / "volume_qdq.onnx",
                     "QDQ", activations="QUInt8")
    ops = int_ops(aot.optimize(aot.load(model)))
    assert {"QLinearConv", "QLinearAveragePool"} <= ops and not ops & {"Conv", "AveragePool"}
    out = _int8_output(model, tmp_path / "codes.onnx")
    rng = np.random.default_rng(5)
    feeds = [{"x": rng.random((1, 2, 5, 8, 7), dtype=np.float32)} for _ in range(4)]
    assert _package_against_ort(out, tmp_path, feeds) == 0

"""Model-local ONNX functions, written the way PyTorch's dynamo exporter
writes them, inlined at import and run against ONNX Runtime."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import aot
from aot.errors import UnsupportedError
from aot.frontend.onnx import import_onnx

LIB = "pkg.onnxscript.torch_lib"          # one function per aten op
MODULES = "pkg.torch.2.3.0+cpu"           # one function per nn.Module


def ref_attr(name: str, ref: str, kind: int) -> onnx.AttributeProto:
    """An attribute whose value is the calling node's attribute `ref`."""
    return onnx.AttributeProto(name=name, ref_attr_name=ref, type=kind)


def torch_lib() -> list[onnx.FunctionProto]:
    """aten_leaky_relu (negative_slope by reference, a default of its own) and
    aten_mul_scalar (a Constant whose value_float is the attribute)."""
    A = onnx.AttributeProto
    leaky = h.make_node("LeakyRelu", ["self"], ["out"], name="n0")
    leaky.attribute.append(ref_attr("alpha", "negative_slope", A.FLOAT))
    const = h.make_node("Constant", [], ["other"], name="n0")
    const.attribute.append(ref_attr("value_float", "other", A.FLOAT))
    return [
        h.make_function(LIB, "aten_leaky_relu", ["self"], ["out"], [leaky],
                        [h.make_opsetid("", 18)],
                        attribute_protos=[h.make_attribute("negative_slope", 0.2)]),
        h.make_function(LIB, "aten_mul_scalar", ["self"], ["out"],
                        [const, h.make_node("CastLike", ["other", "self"], ["cast"], name="n1"),
                         h.make_node("Mul", ["self", "cast"], ["out"], name="n2")],
                        [h.make_opsetid("", 18)], attributes=["other"])]


def dynamo_model(opset: int = 18) -> onnx.ModelProto:
    """main_graph calls the Linear module's function, which calls two
    torch_lib functions; main_graph calls one of them again with the
    attribute's default."""
    linear = h.make_function(MODULES, "torch_nn_modules_linear_Linear_fc1_1",
                             ["input", "weight", "bias"], ["out"],
                             [h.make_node("Gemm", ["input", "weight", "bias"], ["gemm"],
                                          transB=1, name="n0"),
                              h.make_node("aten_leaky_relu", ["gemm"], ["act"], domain=LIB,
                                          negative_slope=0.1, name="n1"),
                              h.make_node("aten_mul_scalar", ["act"], ["out"], domain=LIB,
                                          other=2.0, name="n2")],
                             [h.make_opsetid("", opset), h.make_opsetid(LIB, 1)])
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32),
                                       "fc1.weight"),
               numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "fc1.bias")]
    graph = h.make_graph(
        [h.make_node("torch_nn_modules_linear_Linear_fc1_1", ["x", "fc1.weight", "fc1.bias"],
                     ["fc1_1"], domain=MODULES, name="fc1_1"),
         h.make_node("aten_leaky_relu", ["fc1_1"], ["y"], domain=LIB, name="leaky_relu")],
        "main_graph", [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
        [h.make_tensor_value_info("y", T.FLOAT, [2, 4])], weights)
    return h.make_model(graph, functions=[linear, *torch_lib()], ir_version=9,
                        opset_imports=[h.make_opsetid("", opset), h.make_opsetid(MODULES, 1),
                                       h.make_opsetid(LIB, 1)])


X = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)


def test_nested_functions_with_attribute_references_match_ort():
    m = dynamo_model()
    onnx.checker.check_model(m)
    graph = aot.load(m)
    assert [n.op for n in graph.nodes] == ["Gemm", "LeakyRelu", "CastLike", "Mul", "LeakyRelu"]
    assert [n.attrs["alpha"] for n in graph.nodes if n.op == "LeakyRelu"] == \
        pytest.approx([0.1, 0.2])
    got = aot.interpret(aot.optimize(graph), {"x": X})["y"]
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": X})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_a_function_of_another_opset_is_converted_to_the_models():
    """ReduceMean with its axes as an input (opset 18) in a function of an
    opset-17 model: converted to the axes attribute, the same mean."""
    F = "pkg.custom"
    axes = numpy_helper.from_array(np.array([-1], np.int64))
    mean = h.make_function(F, "mean_last", ["x"], ["y"],
                           [h.make_node("Constant", [], ["axes"], value=axes),
                            h.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=0)],
                           [h.make_opsetid("", 18)])
    graph = h.make_graph([h.make_node("mean_last", ["x"], ["y"], domain=F, name="mean")], "g",
                         [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                         [h.make_tensor_value_info("y", T.FLOAT, [2])])
    m = h.make_model(graph, functions=[mean], ir_version=9,
                     opset_imports=[h.make_opsetid("", 17), h.make_opsetid(F, 1)])
    got = aot.interpret(aot.optimize(aot.load(m)), {"x": X})["y"]
    np.testing.assert_allclose(got, X.mean(axis=-1), rtol=1e-6)


def test_a_call_to_no_local_function_is_refused_by_op_node_and_domain():
    m = dynamo_model()
    del m.functions[0]                       # the Linear module's function is missing
    with pytest.raises(UnsupportedError) as e:
        import_onnx(m.SerializeToString(), "m")
    message = str(e.value)
    assert message.startswith(f"unsupported op 'torch_nn_modules_linear_Linear_fc1_1' of domain "
                              f"'{MODULES}' at node 'fc1_1' (aot reads the default ONNX domain")
    assert "\n" not in message

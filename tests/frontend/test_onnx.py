"""The ONNX importer: opset normalization (checked against ONNX Runtime on the
original, old-opset model), error handling, names, attributes, dtypes."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import aot
from aot.errors import ModelError, ShapeError, UnsupportedError
from aot.frontend.onnx import import_onnx
from aot.passes.infer import infer_types


def model(nodes, inputs, outputs, opset: int, inits=(), domain_opsets=()):
    g = h.make_graph(nodes, "m", inputs, outputs,
                     initializer=[numpy_helper.from_array(v, k) for k, v in inits])
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset), *domain_opsets],
                        ir_version=7)


def vi(name, shape, dtype=T.FLOAT):
    return h.make_tensor_value_info(name, dtype, shape)


def load(m) -> aot.Graph:
    return infer_types(import_onnx(m.SerializeToString(), "m"))


def check_against_ort(m, feeds, rtol=1e-5, atol=1e-6) -> aot.Graph:
    graph = load(m)
    got = aot.interpret(aot.optimize(graph), feeds)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    for name, w in zip(graph.outputs, want):
        assert got[name].dtype == w.dtype and got[name].shape == w.shape
        np.testing.assert_allclose(got[name], w, rtol=rtol, atol=atol)
    return graph


X = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)


def ops(graph):
    return [n.op for n in graph.nodes]


# ---- opset upgrades ---------------------------------------------------------------------

def test_slice_opset7_attrs_become_inputs():
    m = model([h.make_node("Slice", ["x"], ["y"], starts=[1, 0], ends=[1000, -1], axes=[1, 3])],
              [vi("x", X.shape)], [vi("y", None)], opset=7)
    g = check_against_ort(m, {"x": X})
    node = g.nodes[0]
    assert node.attrs == {} and len(node.inputs) == 4
    assert g.constants[node.inputs[1]].tolist() == [1, 0]
    assert g.types["y"].shape == (2, 2, 4, 4)


def test_squeeze_unsqueeze_axes_attr_opset11():
    m = model([h.make_node("Unsqueeze", ["x"], ["u"], axes=[0, 3]),
               h.make_node("Squeeze", ["u"], ["y"], axes=[0])],
              [vi("x", X.shape)], [vi("y", None)], opset=11)
    g = check_against_ort(m, {"x": X})
    assert g.types["u"].shape == (1, 2, 3, 1, 4, 5) and g.types["y"].shape == (2, 3, 1, 4, 5)
    assert all(not n.attrs for n in g.nodes)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_opset7_attrs(mode):
    attrs = {"pads": [0, 0, 1, 2, 0, 0, 2, 1], "mode": mode}
    if mode == "constant":
        attrs["value"] = 1.5
    m = model([h.make_node("Pad", ["x"], ["y"], **attrs)], [vi("x", X.shape)],
              [vi("y", None)], opset=7)
    g = check_against_ort(m, {"x": X})
    assert g.types["y"].shape == (2, 3, 7, 8)
    assert set(g.nodes[0].attrs) == {"mode"}


def test_pad_opset18_axes_and_negative_pads():
    m = model([h.make_node("Pad", ["x", "p", "", "a"], ["y"], mode="constant")],
              [vi("x", X.shape)], [vi("y", None)], opset=18,
              inits=[("p", np.array([2, -1, 0, 3], np.int64)),
                     ("a", np.array([1, 3], np.int64))])
    check_against_ort(m, {"x": X})


def test_clip_opset7_min_max_attrs():
    m = model([h.make_node("Clip", ["x"], ["y"], min=-0.5, max=0.25)],
              [vi("x", X.shape)], [vi("y", None)], opset=7)
    check_against_ort(m, {"x": X})


def test_upsample_opset7_and_9_become_resize():
    m7 = model([h.make_node("Upsample", ["x"], ["y"], scales=[1.0, 1.0, 2.0, 3.0])],
               [vi("x", X.shape)], [vi("y", None)], opset=7)
    m9 = model([h.make_node("Upsample", ["x", "s"], ["y"], mode="nearest")],
               [vi("x", X.shape)], [vi("y", None)], opset=9,
               inits=[("s", np.array([1, 1, 2, 3], np.float32))])
    for m in (m7, m9):
        g = check_against_ort(m, {"x": X})
        assert ops(g) == ["Resize"] and g.types["y"].shape == (2, 3, 8, 15)


def test_softmax_opset11_flattens_at_axis():
    # before opset 13, softmax normalizes over all dims from `axis` on
    m = model([h.make_node("Softmax", ["x"], ["y"], axis=1),
               h.make_node("LogSoftmax", ["x"], ["z"], axis=2)],
              [vi("x", X.shape)], [vi("y", None), vi("z", None)], opset=11)
    check_against_ort(m, {"x": X})


def test_reduce_axes_attr_and_split_attr_opset11():
    m = model([h.make_node("ReduceMean", ["x"], ["m"], axes=[1, -1], keepdims=0),
               h.make_node("ReduceSum", ["x"], ["s"], axes=[2]),
               h.make_node("Split", ["x"], ["a", "b"], axis=3, split=[2, 3]),
               h.make_node("Split", ["x"], ["c", "d"], axis=2)],
              [vi("x", X.shape)], [vi(n, None) for n in "msabcd"], opset=11)
    g = check_against_ort(m, {"x": X})
    assert g.types["m"].shape == (2, 4) and g.types["b"].shape == (2, 3, 4, 3)
    assert g.types["d"].shape == (2, 3, 2, 5)


def test_old_batchnorm_and_dropout_attrs_dropped():
    c = X.shape[1]
    rng = np.random.default_rng(1)
    inits = [("s", rng.random(c, np.float32)), ("b", rng.random(c, np.float32)),
             ("mu", rng.random(c, np.float32)), ("var", rng.random(c, np.float32) + 0.5)]
    m = model([h.make_node("BatchNormalization", ["x", "s", "b", "mu", "var"], ["n"],
                           spatial=1, epsilon=1e-3),
               h.make_node("Dropout", ["n"], ["y"], ratio=0.3)],
              [vi("x", X.shape)], [vi("y", None)], opset=7, inits=inits)
    g = check_against_ort(m, {"x": X})
    assert "spatial" not in g.nodes[0].attrs and "ratio" not in g.nodes[1].attrs


def test_shape_computation_chain_resolves_statically():
    # Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as PyTorch exports flatten
    m = model([h.make_node("Shape", ["x"], ["s"]),
               h.make_node("Gather", ["s", "i0"], ["n"], axis=0),
               h.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
               h.make_node("Concat", ["n1", "m1"], ["shape"], axis=0),
               h.make_node("Reshape", ["x", "shape"], ["y"])],
              [vi("x", X.shape)], [vi("y", None)], opset=13,
              inits=[("i0", np.array(0, np.int64)), ("ax", np.array([0], np.int64)),
                     ("m1", np.array([-1], np.int64))])
    g = check_against_ort(m, {"x": X})
    assert g.types["y"].shape == (2, 60)


def test_elementwise_mix_against_ort():
    y = np.random.default_rng(2).standard_normal((3, 1, 5)).astype(np.float32)
    nodes = [h.make_node("Add", ["x", "y"], ["a"]), h.make_node("Mul", ["a", "y"], ["b"]),
             h.make_node("Div", ["b", "y"], ["c"]), h.make_node("Sigmoid", ["c"], ["d"]),
             h.make_node("HardSwish", ["d"], ["e"]), h.make_node("Erf", ["e"], ["f"]),
             h.make_node("Gelu", ["f"], ["g"]), h.make_node("Greater", ["g", "y"], ["k"]),
             h.make_node("Where", ["k", "g", "y"], ["w"]),
             h.make_node("Max", ["w", "x", "y"], ["o"])]
    m = model(nodes, [vi("x", X.shape), vi("y", y.shape)], [vi("o", None)], opset=20)
    check_against_ort(m, {"x": X, "y": y})


def test_integer_div_truncates():
    a = np.array([7, -7, 7, -7, 0], np.int32)
    b = np.array([2, 2, -2, -2, 3], np.int32)
    m = model([h.make_node("Div", ["a", "b"], ["y"])], [vi("a", [5], T.INT32),
              vi("b", [5], T.INT32)], [vi("y", None)], opset=14)
    g = load(m)
    assert aot.interpret(g, {"a": a, "b": b})["y"].tolist() == [3, -3, -3, 3, 0]


def test_float32_stays_float32():
    m = model([h.make_node("Elu", ["x"], ["a"]), h.make_node("Selu", ["a"], ["b"]),
               h.make_node("Mean", ["a", "b"], ["c"]), h.make_node("ReduceMean", ["c"], ["y"])],
              [vi("x", X.shape)], [vi("y", None)], opset=18)
    g = load(m)
    assert all(g.types[t].dtype == "float32" for t in ("a", "b", "c", "y"))
    assert aot.interpret(g, {"x": X})["y"].dtype == np.float32


# ---- constants, names, attributes -----------------------------------------------------------

def test_constant_nodes_become_constants_and_names_are_generated():
    m = model([h.make_node("Constant", [], ["c"], value_floats=[1.0, 2.0, 3.0, 4.0, 5.0]),
               h.make_node("Constant", [], ["k"], value_int=2),
               h.make_node("Add", ["x", "c"], ["a"]),
               h.make_node("Relu", ["a"], ["y"], name="my_relu")],
              [vi("x", X.shape)], [vi("y", None)], opset=13)
    g = load(m)
    assert ops(g) == ["Add", "Relu"]
    assert [n.name for n in g.nodes] == ["Add_2", "my_relu"]
    assert g.constants["c"].dtype == np.float32 and g.constants["k"].dtype == np.int64


def test_initializer_listed_as_input_is_a_weight():
    w = np.ones((5,), np.float32)
    m = model([h.make_node("Add", ["x", "w"], ["y"])], [vi("x", X.shape), vi("w", [5])],
              [vi("y", None)], opset=8, inits=[("w", w)])
    g = load(m)
    assert g.inputs == ("x",) and "w" in g.constants


def test_attribute_decoding():
    m = model([h.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
               h.make_node("Pad", ["t", "p"], ["y"], mode="reflect"),
               h.make_node("ConstantOfShape", ["s"], ["z"],
                           value=numpy_helper.from_array(np.array([3], np.int32)))],
              [vi("x", X.shape)], [vi("y", None), vi("z", None)], opset=13,
              inits=[("p", np.zeros(8, np.int64)), ("s", np.array([2, 2], np.int64))])
    g = load(m)
    assert g.nodes[0].attrs["perm"] == (0, 2, 3, 1)
    assert g.nodes[1].attrs["mode"] == "reflect"
    assert isinstance(g.nodes[2].attrs["value"], np.ndarray)
    assert g.types["z"].dtype == "int32"


# ---- errors -----------------------------------------------------------------------------------

def simple() -> onnx.ModelProto:
    return model([h.make_node("Relu", ["x"], ["y"])], [vi("x", [1, 4])], [vi("y", None)],
                 opset=13, inits=[("w", np.ones((64, 64), np.float32))])


@pytest.mark.parametrize("cut", [0.5, 0.9, 0.99])
def test_truncated_file_is_a_model_error(cut):
    data = simple().SerializeToString()
    with pytest.raises(ModelError):
        import_onnx(data[:int(len(data) * cut)], "m")


@pytest.mark.parametrize("data", [b"", b"\x00\x01garbage\xff" * 7, b"hello world",
                                  b"\x08\x07\x12\x04abc"])
def test_garbage_is_a_model_error(data):
    with pytest.raises(ModelError) as e:
        import_onnx(data, "junk")
    assert "\n" not in str(e.value)


def test_unsupported_op_names_op_and_node():
    # ImageDecoder (opset 20): decoding JPEG/PNG bytes is no edge kernel's work
    m = model([h.make_node("ImageDecoder", ["x"], ["y"], name="dec1")],
              [vi("x", [16], T.UINT8)], [vi("y", None, T.UINT8)], opset=20)
    with pytest.raises(UnsupportedError,
                       match=r"unsupported op 'ImageDecoder' at node 'dec1' \(ONNX opset 20\)"):
        import_onnx(m.SerializeToString(), "m")


def test_other_domain_is_unsupported():
    node = h.make_node("FusedConv", ["x"], ["y"], domain="com.microsoft")
    m = model([node], [vi("x", [1, 4])], [vi("y", None)], opset=13,
              domain_opsets=[h.make_opsetid("com.microsoft", 1)])
    with pytest.raises(UnsupportedError, match="com.microsoft"):
        import_onnx(m.SerializeToString(), "m")


ML = "ai.onnx.ml"


def _ml_model(nodes, outputs=("y",), default_opset: bool = True):
    opsets = [h.make_opsetid(ML, 3)] + ([h.make_opsetid("", 17)] if default_opset else [])
    g = h.make_graph(nodes, "g", [vi("x", [2, 3])], [vi(o, None) for o in outputs])
    return h.make_model(g, opset_imports=opsets)


def test_an_onnx_ml_model_needs_no_default_domain_opset():
    scaler = h.make_node("Scaler", ["x"], ["y"], domain=ML, offset=[1.0], scale=[2.0])
    g = import_onnx(_ml_model([scaler], default_opset=False).SerializeToString(), "m")
    assert [n.op for n in g.nodes] == ["Scaler"]


@pytest.mark.parametrize("op,domain,match", [
    ("DictVectorizer", ML, r"unsupported op 'DictVectorizer' of domain 'ai.onnx.ml' at node "
                           r"'n1' \(aot reads .*LinearClassifier"),
    ("Relu", ML, r"unsupported op 'Relu' of domain 'ai.onnx.ml' at node 'n1'"),
    ("Scaler", "", r"unsupported op 'Scaler' of the default domain at node 'n1' \(Scaler is an "
                   r"op of ai.onnx.ml\)"),
    ("Scaler", "ai.onnx.preview", r"unsupported op 'Scaler' of domain 'ai.onnx.preview' at "
                                  r"node 'n1'"),
])
def test_an_op_outside_its_domain_is_refused_in_one_line(op, domain, match):
    node = h.make_node(op, ["x"], ["y"], name="n1", domain=domain)
    with pytest.raises(UnsupportedError, match=match) as e:
        import_onnx(_ml_model([node]).SerializeToString(), "m")
    assert "\n" not in str(e.value)


def test_zipmap_maps_read_by_a_node_are_refused_naming_it():
    nodes = [h.make_node("ZipMap", ["x"], ["maps"], name="zip", domain=ML,
                         classlabels_int64s=[0, 1, 2]),
             h.make_node("Identity", ["maps"], ["y"], name="reader")]
    with pytest.raises(UnsupportedError, match="Identity node 'reader': reads the sequence of "
                                               "maps of ZipMap node 'zip'"):
        import_onnx(_ml_model(nodes).SerializeToString(), "m")


def test_unsupported_opset():
    m = simple()
    m.opset_import[0].version = 6
    with pytest.raises(UnsupportedError, match="opset 6"):
        import_onnx(m.SerializeToString(), "m")


@pytest.mark.parametrize("dims,match", [([0, 4], "dimension 0 is 0"),
                                        ([1, -1], r"dimension 1 is unknown.*--input-shape x=1xN"),
                                        (["N", 4], "symbolic"),
                                        ([None, 4], "unknown")])
def test_bad_input_dims_are_shape_errors(dims, match):
    m = model([h.make_node("Relu", ["x"], ["y"])], [vi("x", dims)], [vi("y", None)], opset=13)
    with pytest.raises(ShapeError, match=match) as e:
        import_onnx(m.SerializeToString(), "m")
    assert "'x'" in str(e.value)


def test_a_minus_one_dim_is_open_as_older_exporters_write_it(tmp_path):
    # paddle2onnx and tf2onnx before dim_param wrote -1 for a dynamic dimension.
    m = model([h.make_node("Relu", ["x"], ["y"])], [vi("x", [-1, 3])], [vi("y", None)], opset=13)
    onnx.save(m, tmp_path / "m.onnx")
    g = aot.load(tmp_path / "m.onnx", input_shapes={"x": (2, 3)})
    assert g.types["x"].shape == (2, 3)


@pytest.mark.parametrize("dtype", [T.STRING, T.BFLOAT16, T.COMPLEX64, T.FLOAT8E4M3FN])
def test_unsupported_input_dtype(dtype):
    m = model([h.make_node("Identity", ["x"], ["y"])], [vi("x", [2], dtype)], [vi("y", None)],
              opset=21)
    with pytest.raises(UnsupportedError, match="data type"):
        import_onnx(m.SerializeToString(), "m")


def test_unsupported_initializer_dtype():
    m = simple()
    t = h.make_tensor("b", T.BFLOAT16, [2], [1.0, 2.0])
    m.graph.initializer.append(t)
    with pytest.raises(UnsupportedError, match="BFLOAT16"):
        import_onnx(m.SerializeToString(), "m")


def test_external_data_is_unsupported():
    m = simple()
    t = m.graph.initializer[0]
    t.ClearField("raw_data")
    t.data_location = T.EXTERNAL
    t.external_data.add(key="location", value="weights.bin")
    with pytest.raises(UnsupportedError, match="external"):
        import_onnx(m.SerializeToString(), "m")


def test_shape_mismatch_is_a_shape_error_naming_the_node():
    m = model([h.make_node("Add", ["x", "z"], ["y"], name="bad_add")],
              [vi("x", [2, 3]), vi("z", [4])], [vi("y", None)], opset=13)
    with pytest.raises(ShapeError, match="bad_add"):
        load(m)


def test_training_dropout_is_unsupported():
    m = model([h.make_node("Dropout", ["x", "r", "t"], ["y"])], [vi("x", [2, 3])],
              [vi("y", None)], opset=13,
              inits=[("r", np.array(0.5, np.float32)), ("t", np.array(True))])
    with pytest.raises(UnsupportedError, match="training"):
        load(m)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [[1, 1, 2, 3], [1, 1, 1.5, 2.5], [1, 1, 0.5, 0.6], [1, 1, 1, 0.35]])
def test_resize_opset10_matches_ort(mode, scales):
    m = model([h.make_node("Resize", ["x", "s"], ["y"], mode=mode)], [vi("x", X.shape)],
              [vi("y", None)], opset=10, inits=[("s", np.array(scales, np.float32))])
    g = check_against_ort(m, {"x": X}, rtol=1e-5, atol=1e-5)
    assert g.nodes[0].attrs["coordinate_transformation_mode"] == "asymmetric"


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_opset9_fractional_matches_ort(mode):
    m = model([h.make_node("Upsample", ["x", "s"], ["y"], mode=mode)], [vi("x", X.shape)],
              [vi("y", None)], opset=9, inits=[("s", np.array([1, 1, 1.5, 2.5], np.float32))])
    check_against_ort(m, {"x": X}, rtol=1e-5, atol=1e-5)


def test_resize_opset10_mixed_nearest_is_unsupported():
    m = model([h.make_node("Resize", ["x", "s"], ["y"], mode="nearest")], [vi("x", X.shape)],
              [vi("y", None)], opset=10,
              inits=[("s", np.array([1, 1, 0.5, 2], np.float32))])
    with pytest.raises(UnsupportedError, match="Resize_0"):
        load(m)


def test_control_flow_with_a_runtime_trip_count_is_refused_by_node():
    # If/Loop/Scan import (tests/frontend/test_onnx_control.py); what cannot be lowered names the node
    body = h.make_graph([h.make_node("Identity", ["c_in"], ["c_out"])], "b",
                        [vi("i", [], T.INT64), vi("c_in", [], T.BOOL)], [vi("c_out", [], T.BOOL)])
    m = model([h.make_node("Loop", ["n", ""], [], name="loop", body=body)],
              [vi("n", [], T.INT64)], [vi("y", None)], opset=13)
    m.graph.node[0].output.append("y")
    with pytest.raises(UnsupportedError, match="Loop node 'loop': input 0 must be a "
                       "compile-time constant \\(the trip count 'n' is known only at run time"):
        import_onnx(m.SerializeToString(), "m")


def test_symbolic_batch_bound_by_dim_params():
    m = model([h.make_node("Relu", ["x"], ["y"])], [vi("x", ["batch", 4])], [vi("y", None)],
              opset=13)
    g = infer_types(import_onnx(m.SerializeToString(), "m", dim_params={"batch": 3}))
    assert g.types["x"].shape == (3, 4) and g.types["y"].shape == (3, 4)


# ---- ops beyond the conformance list, against ONNX Runtime ------------------------------------

_R = np.random.default_rng(0)
XF = (_R.standard_normal((3, 4, 5)) * 2).astype(np.float32)
XI = _R.integers(-9, 10, (3, 4, 5)).astype(np.int32)
YI = (_R.integers(1, 5, (4, 5)) * np.where(_R.random((4, 5)) < .5, -1, 1)).astype(np.int32)
INITS = {"axes": np.array([0, 2], np.int64), "start": np.array(2, np.int32),
         "limit": np.array(17, np.int32), "delta": np.array(3, np.int32),
         "idx": np.array([[-1, 0], [2, -4]], np.int64), "reps": np.array([2, 1, 3], np.int64),
         "to": np.array([2, 1, 4, 1], np.int64), "st": np.array([-1, 4], np.int64),
         "en": np.array([-100, 0], np.int64), "ax": np.array([0, 2], np.int64),
         "sp": np.array([-1, -2], np.int64), "pads": np.array([0, 2, 3, 0, 1, 2], np.int64),
         "lo": np.array(-3, np.int32), "hi": np.array(4, np.int32)}
N = h.make_node
OP_CASES = {
    "ArgMax_last": ([N("ArgMax", ["x"], ["y"], axis=1, keepdims=0, select_last_index=1)],
                    {"x": np.round(XF)}),
    "ArgMin": ([N("ArgMin", ["x"], ["y"], axis=-1)], {"x": np.round(XF)}),
    "Mod_int": ([N("Mod", ["x", "z"], ["y"])], {"x": XI, "z": YI}),
    "Mod_fmod": ([N("Mod", ["x", "z"], ["y"], fmod=1)], {"x": XI, "z": YI}),
    "Div_int": ([N("Div", ["x", "z"], ["y"])], {"x": XI, "z": YI}),
    "Pow_int": ([N("Pow", ["x", "z"], ["y"])], {"x": XI, "z": np.abs(YI)}),
    "Pow_float": ([N("Pow", ["x", "z"], ["y"])], {"x": np.abs(XF), "z": XF[0]}),
    "Round": ([N("Round", ["x"], ["y"])],
              {"x": np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4], np.float32)}),
    "ReduceProd": ([N("ReduceProd", ["x", "axes"], ["y"], keepdims=0)], {"x": XF}),
    "ReduceL2": ([N("ReduceL2", ["x", "axes"], ["y"])], {"x": XF}),
    "ReduceLogSumExp": ([N("ReduceLogSumExp", ["x", "axes"], ["y"])], {"x": XF}),
    "ReduceSum_int": ([N("ReduceSum", ["x", "axes"], ["y"])], {"x": XI}),
    "ReduceMean_all": ([N("ReduceMean", ["x"], ["y"], keepdims=0)], {"x": XF}),
    "Cast_f2i": ([N("Cast", ["x"], ["y"], to=T.INT32)], {"x": XF}),
    "Cast_f2u8": ([N("Cast", ["x"], ["y"], to=T.UINT8)], {"x": np.abs(XF)}),
    "Cast_i2b": ([N("Cast", ["x"], ["y"], to=T.BOOL)], {"x": XI}),
    "Celu": ([N("Celu", ["x"], ["y"], alpha=0.7)], {"x": XF}),
    "Mish": ([N("Mish", ["x"], ["y"])], {"x": XF}),
    "ThresholdedRelu": ([N("ThresholdedRelu", ["x"], ["y"], alpha=0.3)], {"x": XF}),
    "Shrink": ([N("Shrink", ["x"], ["y"], lambd=0.7, bias=0.2)], {"x": XF}),
    "Sin": ([N("Sin", ["x"], ["y"])], {"x": XF}),
    "Logic": ([N("Less", ["x", "z"], ["l"]), N("Equal", ["x", "z"], ["e"]),
               N("Or", ["l", "e"], ["o"]), N("Not", ["o"], ["y"])], {"x": XI, "z": YI}),
    "Size": ([N("Size", ["x"], ["y"])], {"x": XF}),
    "Shape_start_end": ([N("Shape", ["x"], ["y"], start=-2, end=10)], {"x": XF}),
    "Range": ([N("Range", ["start", "limit", "delta"], ["y"])], {}),
    "Gather_negative": ([N("Gather", ["x", "idx"], ["y"], axis=1)], {"x": XF}),
    "Tile": ([N("Tile", ["x", "reps"], ["y"])], {"x": XF}),
    "Expand": ([N("Expand", ["x", "to"], ["y"])], {"x": XF[:, :1]}),
    "Slice_negative_steps": ([N("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], {"x": XF}),
    "Split_uneven": ([N("Split", ["x"], ["y", "y2", "y3"], axis=2, num_outputs=3)], {"x": XF}),
    "Pad_edge": ([N("Pad", ["x", "pads"], ["y"], mode="edge")], {"x": XF}),
    "Pad_wrap": ([N("Pad", ["x", "pads"], ["y"], mode="wrap")], {"x": XF}),
    "Squeeze_all": ([N("Squeeze", ["x"], ["y"])], {"x": XF[:1, :, None]}),
    "Softplus_large": ([N("Softplus", ["x"], ["y"])], {"x": XF * 30}),
    "Sigmoid_large": ([N("Sigmoid", ["x"], ["y"])], {"x": XF * 30}),
    "Clip_int": ([N("Clip", ["x", "lo", "hi"], ["y"])], {"x": XI}),
    "Max_int": ([N("Max", ["x", "z"], ["y"])], {"x": XI, "z": YI}),
    "Where_int": ([N("Where", ["c", "x", "z"], ["y"])], {"c": XI > 0, "x": XI, "z": YI}),
    "Gelu_tanh": ([N("Gelu", ["x"], ["y"], approximate="tanh")], {"x": XF}),
    "Sign_int": ([N("Sign", ["x"], ["y"])], {"x": XI}),
}


@pytest.mark.parametrize("case", sorted(OP_CASES))
def test_op_matches_ort(case):
    nodes, feeds = OP_CASES[case]
    used = {i for n in nodes for i in n.input}
    inputs = [h.make_tensor_value_info(k, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for k, v in feeds.items()]
    outputs = [onnx.ValueInfoProto(name=o) for o in nodes[-1].output]
    m = model(nodes, inputs, outputs, opset=20,
              inits=[(k, v) for k, v in INITS.items() if k in used])
    check_against_ort(m, feeds, rtol=1e-5, atol=1e-5)


# ---- opsets 21-23 ---------------------------------------------------------------------

RNG = np.random.default_rng(7)
XG = RNG.standard_normal((2, 6, 3, 3)).astype(np.float32)
X8 = RNG.standard_normal((2, 8)).astype(np.float32)
GN_SCALE, GN_BIAS = RNG.standard_normal(6).astype(np.float32), RNG.standard_normal(6).astype(np.float32)
OPSET_CASES = {
    # 21: blocked dequantization (block_size), QuantizeLinear's output_dtype
    "DequantizeLinear_blocked_21": (21, [
        N("DequantizeLinear", ["wq", "ws"], ["w"], axis=0, block_size=4),
        N("MatMul", ["x", "w"], ["y"])], {"x": X8}, {
        "wq": RNG.integers(-127, 127, (8, 4)).astype(np.int8),
        "ws": RNG.uniform(0.01, 0.02, (2, 4)).astype(np.float32)}),
    "QuantizeLinear_output_dtype_21": (21, [
        N("QuantizeLinear", ["x", "s"], ["y"], output_dtype=T.INT16)], {"x": XF},
        {"s": np.float32(0.001)}),
    # 21: scale and bias per channel
    "GroupNormalization_21": (21, [
        N("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3, epsilon=1e-3)],
        {"x": XG}, {"s": GN_SCALE, "b": GN_BIAS}),
    # 18: per group, as opset-18 exporters wrote it
    "GroupNormalization_18": (18, [
        N("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3, epsilon=1e-3)],
        {"x": XG}, {"s": GN_SCALE[:3], "b": GN_BIAS[:3]}),
    # 22: new element types only
    "Conv_Elu_AveragePool_22": (22, [
        N("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), N("Elu", ["c"], ["e"], alpha=0.5),
        N("AveragePool", ["e"], ["y"], kernel_shape=[2, 2], strides=[1, 1])], {"x": XG},
        {"w": RNG.standard_normal((4, 6, 3, 3)).astype(np.float32)}),
    # 23: DequantizeLinear's output_dtype, QuantizeLinear's precision
    "DequantizeLinear_output_dtype_23": (23, [
        N("DequantizeLinear", ["q", "s"], ["y"], output_dtype=T.FLOAT16)],
        {"q": RNG.integers(-128, 127, (2, 8)).astype(np.int8)}, {"s": np.float32(0.05)}),
    "QuantizeLinear_precision_23": (23, [
        N("QuantizeLinear", ["x", "s", "z"], ["y"], precision=T.FLOAT)], {"x": XF},
        {"s": np.float32(0.01), "z": np.int8(3)}),
    "Reshape_Transpose_Pad_23": (23, [
        N("Reshape", ["x", "shape"], ["r"]), N("Transpose", ["r"], ["t"], perm=[1, 0]),
        N("Pad", ["t", "pads"], ["y"], mode="reflect")], {"x": X8},
        {"shape": np.array([4, 4], np.int64), "pads": np.array([1, 1, 1, 1], np.int64)}),
}


@pytest.mark.parametrize("case", sorted(OPSET_CASES))
def test_opset_21_to_23_forms_match_ort(case):
    opset, nodes, feeds, inits = OPSET_CASES[case]
    inputs = [h.make_tensor_value_info(k, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for k, v in feeds.items()]
    m = model(nodes, inputs, [onnx.ValueInfoProto(name="y")], opset=opset,
              inits=list(inits.items()))
    m.ir_version = 10
    check_against_ort(m, feeds, rtol=1e-5, atol=1e-5)


def test_quantize_linear_in_another_precision_is_refused():
    """precision (opset 23) asks for a float16 division of float32 values."""
    m = model([N("QuantizeLinear", ["x", "s", "z"], ["y"], precision=T.FLOAT16, name="q")],
              [vi("x", [2, 3])], [vi("y", None, T.INT8)], opset=23,
              inits=[("s", np.float32(0.01)), ("z", np.int8(3))])
    with pytest.raises(UnsupportedError, match=r"QuantizeLinear node 'q': dividing float32 by a "
                       r"float32 y_scale in float16 \(aot divides in float32\)"):
        load(m)


def test_dropout_opset7_mask_has_input_type():
    m = model([h.make_node("Dropout", ["x"], ["y", "mask"], ratio=0.2)], [vi("x", X.shape)],
              [vi("y", None), vi("mask", None)], opset=7)
    g = load(m)
    assert g.types["mask"].dtype == "float32"
    out = aot.interpret(g, {"x": X})
    np.testing.assert_array_equal(out["y"], X)  # inference: identity


def test_sequence_input_is_unsupported():
    seq = h.make_tensor_sequence_value_info("s", T.FLOAT, [2])
    m = model([h.make_node("Identity", ["s"], ["y"])], [seq], [vi("y", None)], opset=13)
    with pytest.raises(UnsupportedError, match="'s'"):
        import_onnx(m.SerializeToString(), "m")


# ---- quantization through data movement (docs/ops.md) -------------------------------------------

def _quant_graph(op, attrs, shape, quant, consts=(), n_out=1):
    from aot.ir.graph import Graph, Node, TensorType, type_of
    constants = dict(consts)
    types = {"x": TensorType(shape, "int8", quant), **{k: type_of(v) for k, v in constants.items()}}
    outs = tuple(f"y{i}" for i in range(n_out))
    node = Node(op, "n", ("x", *constants), outs, attrs)
    return infer_types(Graph("q", ("x",), outs, (node,), types, constants))


def test_quant_follows_the_channel_axis():
    from aot.ir.graph import Quant
    pc = Quant((0.1, 0.2, 0.3), (0, 1, 2), axis=1)
    g = _quant_graph("Transpose", {"perm": (1, 0, 2)}, (2, 3, 4), pc)
    assert g.types["y0"].quant == Quant(pc.scale, pc.zero_point, axis=0)
    g = _quant_graph("Unsqueeze", {}, (2, 3, 4), pc, [("a", np.array([0, 3], np.int64))])
    assert g.types["y0"].quant.axis == 2
    g = _quant_graph("Reshape", {}, (2, 3, 4), pc, [("s", np.array([1, 2, 3, 2, 2], np.int64))])
    assert g.types["y0"].quant.axis == 2
    g = _quant_graph("Slice", {}, (2, 3, 4), pc, [("b", np.array([1], np.int64)),
                                                  ("e", np.array([3], np.int64)),
                                                  ("a", np.array([1], np.int64))])
    assert g.types["y0"].quant == Quant((0.2, 0.3), (1, 2), axis=1)
    g = _quant_graph("Split", {"axis": 1}, (2, 3, 4), pc, [("s", np.array([1, 2], np.int64))],
                     n_out=2)
    assert g.types["y0"].quant == Quant((0.1,), (0,), axis=1)
    assert g.types["y1"].quant == Quant((0.2, 0.3), (1, 2), axis=1)
    per_tensor = Quant((0.5,), (3,))
    g = _quant_graph("Flatten", {"axis": 2}, (2, 3, 4), per_tensor)
    assert g.types["y0"].quant == per_tensor


def test_quant_that_cannot_follow_is_refused():
    from aot.ir.graph import Quant
    pc = Quant((0.1, 0.2, 0.3), (0, 1, 2), axis=1)
    with pytest.raises(UnsupportedError, match="per-channel"):
        _quant_graph("Reshape", {}, (2, 3, 4), pc, [("s", np.array([4, 6], np.int64))])


@pytest.mark.parametrize("op,inputs,dtype", [("Add", ["x"], T.FLOAT), ("Relu", ["x", "x"], T.FLOAT),
                                             ("Where", ["x", "x"], T.BOOL),
                                             ("Add", ["x", "x"], T.BOOL),
                                             ("Sqrt", ["x"], T.INT32),
                                             ("Concat", ["x", "x"], None)])
def test_bad_operands_are_shape_errors(op, inputs, dtype):
    x = vi("x", [2, 3], dtype) if dtype else h.make_tensor_value_info("x", T.FLOAT, [2, 3])
    attrs = {"axis": 0} if op == "Concat" else {}
    m = model([h.make_node(op, inputs, ["y"], name="bad", **attrs)], [x], [vi("y", None)],
              opset=13)
    if op == "Concat":  # a valid Concat: the control case
        assert load(m).types["y"].shape == (4, 3)
        return
    with pytest.raises(ShapeError, match="bad"):
        load(m)


def test_duplicate_node_names_and_unasked_outputs():
    m = model([h.make_node("Relu", ["x"], ["a"], name="same"),
               h.make_node("Dropout", ["a"], ["b", ""], name="same"),
               h.make_node("Relu", ["b"], ["y"])],
              [vi("x", [2, 3])], [vi("y", None)], opset=13)
    g = load(m)
    assert [n.name for n in g.nodes] == ["same", "same_1", "Relu_2"]
    assert g.nodes[1].outputs == ("b",)

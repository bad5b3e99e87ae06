"""Neural-network and ONNX quantized ops, checked against ONNX Runtime (or
onnx.reference where ORT lacks the op/attribute) on single-node models."""
from __future__ import annotations


import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from aot.errors import ShapeError, UnsupportedError
from aot.interp import interpret
from aot.ir.graph import Graph, Node, type_of
from aot.passes.infer import infer_types

RTOL = ATOL = 1e-4
OPSET = 21


def _tuple_attrs(attrs):
    return {k: tuple(v) if isinstance(v, list) else v for k, v in attrs.items()}


def run_aot(op, inputs, consts, attrs, n_out=1, order=None):
    """Run one node through infer_types + interpret. `order` lists input names
    ("" for absent) in the op's input order; default: inputs then consts."""
    order = order or list(inputs) + list(consts)
    outs = tuple(f"y{i}" for i in range(n_out))
    types = {k: type_of(v) for k, v in {**inputs, **consts}.items()}
    node = Node(op, "n0", tuple(order), outs, _tuple_attrs(attrs))
    g = Graph("g", tuple(inputs), outs, (node,), types, dict(consts))
    g = infer_types(g)
    res = interpret(g, inputs)
    return [res[o] for o in outs]


def onnx_model(op, inputs, consts, attrs, n_out=1, order=None, opset=OPSET):
    order = order or list(inputs) + list(consts)
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, order, outs, **attrs)
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for k, v in inputs.items()]
    inits = [numpy_helper.from_array(v, k) for k, v in consts.items()]
    out_vi = [helper.make_empty_tensor_value_info(o) for o in outs]
    g = helper.make_graph([node], "g", ins, out_vi, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def run_ort(model, inputs):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)


def run_ref(model, inputs):
    return ReferenceEvaluator(model).run(None, inputs)


def check(op, inputs, consts=None, attrs=None, n_out=1, order=None, ref=run_ort,
          opset=OPSET, exact=False, aot_attrs=None):
    consts = consts or {}
    attrs = attrs or {}
    ours = run_aot(op, inputs, consts, {**attrs, **(aot_attrs or {})}, n_out, order)
    theirs = ref(onnx_model(op, inputs, consts, attrs, n_out, order, opset), inputs)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape, (a.shape, b.shape)
        assert a.dtype == b.dtype, (a.dtype, b.dtype)
        if exact:
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)
    return ours


def rnd(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(dtype)


def nhwc(x):
    return np.ascontiguousarray(np.moveaxis(x, 1, -1))


# ---------------------------------------------------------------- Conv

CONV_CASES = [
    # (x shape, w shape, attrs)
    ((1, 3, 9, 9), (4, 3, 3, 3), {}),
    ((2, 4, 8, 7), (6, 2, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    ((1, 4, 10, 10), (4, 1, 3, 3), {"group": 4, "strides": [2, 2], "pads": [1, 0, 1, 2]}),
    ((1, 3, 11, 9), (5, 3, 3, 2), {"dilations": [2, 1], "strides": [1, 2]}),
    ((1, 3, 9, 8), (4, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 3, 9, 8), (4, 3, 4, 4), {"auto_pad": "SAME_LOWER", "strides": [2, 3]}),
    ((1, 3, 9, 8), (4, 3, 3, 3), {"auto_pad": "VALID", "strides": [2, 2]}),
    ((1, 8, 7, 7), (8, 1, 5, 5), {"group": 8, "pads": [2, 2, 2, 2], "dilations": [1, 1]}),
    ((1, 2, 16), (3, 2, 5), {"strides": [3], "pads": [2, 1]}),
    ((1, 2, 5, 6, 7), (3, 2, 3, 2, 3), {"pads": [1, 0, 1, 1, 1, 0], "strides": [1, 2, 2]}),
    ((1, 16, 6, 6), (32, 16, 1, 1), {}),
]


@pytest.mark.parametrize("xs,ws,attrs", CONV_CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_conv(xs, ws, attrs, bias):
    consts = {"w": rnd(*ws, seed=1)}
    order = ["x", "w"]
    if bias:
        consts["b"] = rnd(ws[0], seed=2)
        order.append("b")
    y = check("Conv", {"x": rnd(*xs)}, consts, attrs, order=order)[0]
    # Channels-last gives the same numbers, transposed.
    w_ohwi = np.ascontiguousarray(np.moveaxis(consts["w"], 1, -1))
    y2 = run_aot("Conv", {"x": nhwc(rnd(*xs))}, {**consts, "w": w_ohwi},
                 {**attrs, "layout": "NHWC"}, order=order)[0]
    np.testing.assert_allclose(y2, nhwc(y), rtol=1e-5, atol=1e-5)


def test_conv_shape_errors():
    with pytest.raises(ShapeError, match="input channels"):
        run_aot("Conv", {"x": rnd(1, 3, 5, 5)}, {"w": rnd(2, 2, 3, 3)}, {})
    with pytest.raises(ShapeError, match="window extent"):
        run_aot("Conv", {"x": rnd(1, 3, 2, 2)}, {"w": rnd(2, 3, 3, 3)}, {})
    with pytest.raises(ShapeError, match="bias"):
        run_aot("Conv", {"x": rnd(1, 3, 5, 5)}, {"w": rnd(2, 3, 3, 3), "b": rnd(3)}, {})
    with pytest.raises(UnsupportedError, match="layout"):
        run_aot("Conv", {"x": rnd(1, 3, 5, 5)}, {"w": rnd(2, 3, 3, 3)}, {"layout": "NCWH"})
    with pytest.raises(ShapeError, match="same rank"):
        run_aot("Conv", {"x": rnd(1, 3, 5, 5)}, {"w": rnd(2, 3, 3)}, {})
    with pytest.raises(ShapeError, match="mix dtypes"):
        run_aot("Conv", {"x": rnd(1, 3, 5, 5)}, {"w": rnd(2, 3, 3, 3, dtype=np.float64)}, {})
    with pytest.raises(UnsupportedError, match="dtype int8"):
        run_aot("Conv", {"x": np.zeros((1, 3, 5, 5), np.int8)}, {"w": rnd(2, 3, 3, 3)}, {})
    with pytest.raises(ShapeError, match="kernel_shape"):
        run_aot("Conv", {"x": rnd(1, 3, 5, 5)}, {"w": rnd(2, 3, 3, 3)}, {"kernel_shape": [2, 2]})


# ---------------------------------------------------------------- Pools

POOL_CASES = [
    ((1, 3, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((2, 2, 9, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 2, 9, 7), {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 2, 10, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 1, 1],
                     "ceil_mode": 1}),
    # ceil_mode: the last window would start in the end padding and is dropped.
    ((1, 2, 6, 6), {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 1, 1],
                    "ceil_mode": 1}),
    ((1, 2, 9, 8), {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 2, 9, 8), {"kernel_shape": [2, 3], "auto_pad": "SAME_LOWER", "strides": [2, 1]}),
    ((1, 2, 9, 8), {"kernel_shape": [3, 3], "auto_pad": "VALID"}),
    ((1, 2, 12), {"kernel_shape": [4], "strides": [3], "pads": [1, 2]}),
    ((1, 2, 5, 6, 7), {"kernel_shape": [2, 3, 2], "strides": [1, 2, 2]}),
]


@pytest.mark.parametrize("xs,attrs", POOL_CASES)
def test_maxpool(xs, attrs):
    x = rnd(*xs)
    y = check("MaxPool", {"x": x}, attrs=attrs)[0]
    y2 = run_aot("MaxPool", {"x": nhwc(x)}, {}, {**attrs, "layout": "NHWC"})[0]
    np.testing.assert_array_equal(y2, nhwc(y))


@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [2, 2], "dilations": [2, 2]},
])
def test_maxpool_indices(attrs, storage_order):
    check("MaxPool", {"x": rnd(2, 3, 7, 6)}, attrs={**attrs, "storage_order": storage_order},
          n_out=2, exact=True)


@pytest.mark.parametrize("dt", ["int8", "uint8"])
def test_maxpool_int(dt):
    x = np.random.default_rng(0).integers(-128 if dt == "int8" else 0, 128, (1, 3, 7, 7))
    check("MaxPool", {"x": x.astype(dt)},
          attrs={"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, exact=True)


def test_maxpool_dilations():
    check("MaxPool", {"x": rnd(1, 2, 10, 9)},
          attrs={"kernel_shape": [2, 3], "dilations": [2, 2], "pads": [1, 1, 0, 1]})


@pytest.mark.parametrize("xs,attrs", POOL_CASES)
@pytest.mark.parametrize("cip", [0, 1])
def test_avgpool(xs, attrs, cip):
    x = rnd(*xs)
    attrs = {**attrs, "count_include_pad": cip}
    y = check("AveragePool", {"x": x}, attrs=attrs)[0]
    y2 = run_aot("AveragePool", {"x": nhwc(x)}, {}, {**attrs, "layout": "NHWC"})[0]
    np.testing.assert_allclose(y2, nhwc(y), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("cip", [0, 1])
def test_avgpool_dilations(cip):
    check("AveragePool", {"x": rnd(1, 2, 10, 9)},
          attrs={"kernel_shape": [2, 3], "dilations": [2, 2], "pads": [1, 1, 0, 1],
                 "count_include_pad": cip})


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("xs", [(2, 3, 5, 4), (1, 4, 7), (1, 2, 3, 4, 5)])
def test_global_pool(op, xs):
    x = rnd(*xs)
    y = check(op, {"x": x})[0]
    y2 = run_aot(op, {"x": nhwc(x)}, {}, {"layout": "NHWC"})[0]
    np.testing.assert_allclose(y2, nhwc(y), rtol=1e-6, atol=1e-6)


def test_global_max_pool_int8():
    x = np.random.default_rng(0).integers(-128, 128, (1, 3, 5, 4)).astype(np.int8)
    check("GlobalMaxPool", {"x": x}, exact=True, ref=run_ref)


def test_pool_errors():
    with pytest.raises(ShapeError, match="kernel_shape"):
        run_aot("MaxPool", {"x": rnd(1, 2, 4, 4)}, {}, {})
    with pytest.raises(ShapeError, match="window extent"):
        run_aot("AveragePool", {"x": rnd(1, 2, 2, 2)}, {}, {"kernel_shape": [3, 3]})


# ---------------------------------------------------------------- Dense

@pytest.mark.parametrize("ta,tb,alpha,beta,cshape", [
    (0, 0, 1.0, 1.0, None), (1, 0, 0.5, 1.0, (5,)), (0, 1, 1.0, 2.0, (3, 5)),
    (1, 1, 2.0, 0.5, (1, 5)), (0, 1, 1.0, 1.0, (3, 1)), (0, 0, 1.0, 1.0, ()),
])
def test_gemm(ta, tb, alpha, beta, cshape):
    a = rnd(4, 3) if ta else rnd(3, 4)
    b = rnd(5, 4, seed=1) if tb else rnd(4, 5, seed=1)
    consts = {"b": b}
    if cshape is not None:
        consts["c"] = rnd(*cshape, seed=2) if cshape else np.array(0.7, np.float32)
    check("Gemm", {"a": a}, consts,
          {"transA": ta, "transB": tb, "alpha": alpha, "beta": beta})


def test_gemm_errors():
    with pytest.raises(ShapeError, match="inner"):
        run_aot("Gemm", {"a": rnd(3, 4)}, {"b": rnd(3, 5)}, {})
    with pytest.raises(ShapeError, match="C shape"):
        run_aot("Gemm", {"a": rnd(3, 4)}, {"b": rnd(4, 5), "c": rnd(2, 5)}, {})


@pytest.mark.parametrize("sa,sb", [
    ((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)),
    ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 2)), ((7, 4), (2, 4, 3)),
])
def test_matmul(sa, sb):
    check("MatMul", {"a": rnd(*sa)}, {"b": rnd(*sb, seed=1)})


@pytest.mark.parametrize("dt", [np.int32, np.int64])
def test_matmul_int(dt):
    r = np.random.default_rng(0)
    check("MatMul", {"a": r.integers(-50, 50, (2, 3, 4)).astype(dt)},
          {"b": r.integers(-50, 50, (4, 5)).astype(dt)}, exact=True)
    check("Gemm", {"a": r.integers(-50, 50, (3, 4)).astype(dt)},
          {"b": r.integers(-50, 50, (5, 4)).astype(dt), "c": r.integers(-9, 9, (5,)).astype(dt)},
          {"transB": 1}, exact=True, ref=run_ref)  # ORT has no integer Gemm


def test_matmul_errors():
    with pytest.raises(ShapeError, match="inner"):
        run_aot("MatMul", {"a": rnd(3, 4)}, {"b": rnd(3, 5)}, {})
    with pytest.raises(ShapeError, match="broadcast"):
        run_aot("MatMul", {"a": rnd(2, 3, 4)}, {"b": rnd(3, 4, 5)}, {})


# ---------------------------------------------------------------- Softmax

@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis", [-1, 0, 1, 2])
def test_softmax(op, axis):
    check(op, {"x": rnd(2, 3, 4) * 5}, attrs={"axis": axis})


def test_softmax_axis_error():
    with pytest.raises(ShapeError, match="axis"):
        run_aot("Softmax", {"x": rnd(2, 3)}, {}, {"axis": 2})


# ---------------------------------------------------------------- Normalization

@pytest.mark.parametrize("xs", [(2, 3, 4, 5), (2, 3), (1, 3, 6)])
def test_batchnorm(xs):
    c = xs[1]
    consts = {"s": rnd(c, seed=1), "b": rnd(c, seed=2), "m": rnd(c, seed=3),
              "v": np.abs(rnd(c, seed=4)) + 0.1}
    x = rnd(*xs)
    y = check("BatchNormalization", {"x": x}, consts, {"epsilon": 1e-3})[0]
    if len(xs) > 2:
        y2 = run_aot("BatchNormalization", {"x": nhwc(x)}, consts,
                     {"epsilon": 1e-3, "layout": "NHWC"})[0]
        np.testing.assert_allclose(y2, nhwc(y), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("momentum", [0.9, 0.5])
def test_batchnorm_training(momentum):
    c = 3
    consts = {"s": rnd(c, seed=1), "b": rnd(c, seed=2), "m": rnd(c, seed=3),
              "v": np.abs(rnd(c, seed=4)) + 0.1}
    check("BatchNormalization", {"x": rnd(4, 3, 5, 2)}, consts,
          {"epsilon": 1e-3, "momentum": momentum, "training_mode": 1}, n_out=3, ref=run_ref)


@pytest.mark.parametrize("xs", [(2, 3, 4, 5), (1, 2, 3, 4, 2)])
def test_instance_norm(xs):
    c = xs[1]
    consts = {"s": rnd(c, seed=1), "b": rnd(c, seed=2)}
    x = rnd(*xs)
    y = check("InstanceNormalization", {"x": x}, consts, {"epsilon": 1e-4})[0]
    y2 = run_aot("InstanceNormalization", {"x": nhwc(x)}, consts,
                 {"epsilon": 1e-4, "layout": "NHWC"})[0]
    np.testing.assert_allclose(y2, nhwc(y), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axis", [-1, 1, 2])
@pytest.mark.parametrize("with_bias", [False, True])
def test_layer_norm(axis, with_bias):
    x = rnd(2, 3, 4, 5)
    ns = x.shape[axis:]
    consts = {"s": rnd(*ns, seed=1)}
    if with_bias:
        consts["b"] = rnd(*ns, seed=2)
    check("LayerNormalization", {"x": x}, consts, {"axis": axis, "epsilon": 1e-3}, n_out=3)


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_lrn(size):
    x = rnd(2, 6, 4, 3)
    attrs = {"size": size, "alpha": 1e-3, "beta": 0.6, "bias": 2.0}
    if size % 2:
        y = check("LRN", {"x": x}, attrs=attrs)[0]
    else:
        # ORT only takes odd sizes and onnx.reference's LRN is broken (it
        # loops over the batch), so even sizes are checked on the spec formula.
        y = run_aot("LRN", {"x": x}, {}, attrs)[0]
        lo, hi = (size - 1) // 2, (size - 1) - (size - 1) // 2
        sq = np.stack([(x[:, max(0, c - lo):c + hi + 1] ** 2).sum(axis=1)
                       for c in range(x.shape[1])], axis=1)
        np.testing.assert_allclose(y, x / (2.0 + 1e-3 / size * sq) ** 0.6, rtol=1e-5)
    y2 = run_aot("LRN", {"x": nhwc(x)}, {}, {**attrs, "layout": "NHWC"})[0]
    np.testing.assert_allclose(y2, nhwc(y), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool(p):
    check("LpPool", {"x": rnd(1, 3, 7, 6)},
          attrs={"p": p, "kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1]})
    check("GlobalLpPool", {"x": rnd(1, 3, 7, 6)}, attrs={"p": p})


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space(mode):
    x = rnd(2, 8, 3, 4)
    y = check("DepthToSpace", {"x": x}, attrs={"blocksize": 2, "mode": mode}, exact=True)[0]
    y2 = run_aot("DepthToSpace", {"x": nhwc(x)}, {}, {"blocksize": 2, "mode": mode,
                                                      "layout": "NHWC"})[0]
    np.testing.assert_array_equal(y2, nhwc(y))
    # SpaceToDepth's CRD mode is opset 24; it inverts DepthToSpace's.
    back = check("SpaceToDepth", {"x": y}, attrs={"blocksize": 2, "mode": mode}, exact=True,
                 ref=run_ref, opset=24)[0]
    np.testing.assert_array_equal(back, x)
    with pytest.raises(ShapeError, match="divisible"):
        run_aot("DepthToSpace", {"x": rnd(1, 6, 2, 2)}, {}, {"blocksize": 2})


# ---------------------------------------------------------------- ConvTranspose

CONVT_CASES = [
    ((1, 3, 4, 5), (3, 2, 3, 3), {}),
    ((1, 4, 4, 4), (4, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                  "output_padding": [1, 1]}),
    ((2, 4, 3, 5), (4, 1, 2, 3), {"group": 2, "strides": [2, 1], "dilations": [1, 2]}),
    ((1, 2, 3, 3), (2, 2, 3, 3), {"strides": [2, 2], "output_shape": [7, 8]}),
    ((1, 2, 3, 3), (2, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 3, 3), (2, 2, 4, 4), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 7), (2, 3, 4), {"strides": [3], "pads": [1, 2], "output_padding": [2]}),
    ((1, 2, 2, 3, 2), (2, 2, 2, 2, 2), {"strides": [2, 1, 2]}),
]


@pytest.mark.parametrize("xs,ws,attrs", CONVT_CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose(xs, ws, attrs, bias):
    consts = {"w": rnd(*ws, seed=1)}
    order = ["x", "w"]
    if bias:
        consts["b"] = rnd(ws[1] * attrs.get("group", 1), seed=2)
        order.append("b")
    # ORT's SAME_* padding split differs from the spec's; the spec's
    # reference is the authority there.
    ref = run_ref if "auto_pad" in attrs else run_ort
    x = rnd(*xs)
    y = check("ConvTranspose", {"x": x}, consts, attrs, order=order, ref=ref)[0]
    # Channels last: weight [I, k..., O/group].
    w_last = np.ascontiguousarray(np.moveaxis(consts["w"], 1, -1))
    y2 = run_aot("ConvTranspose", {"x": nhwc(x)}, {**consts, "w": w_last},
                 {**attrs, "layout": "NHWC"}, order=order)[0]
    np.testing.assert_allclose(y2, nhwc(y), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- Resize

def _resize(x, attrs, scales=None, sizes=None, roi=None, ref=run_ref):
    consts, order = {}, ["x", "", "", ""]
    if roi is not None:
        consts["roi"] = np.array(roi, np.float32)
        order[1] = "roi"
    if scales is not None:
        consts["scales"] = np.array(scales, np.float32)
        order[2] = "scales"
    if sizes is not None:
        consts["sizes"] = np.array(sizes, np.int64)
        order[3] = "sizes"
    while order and order[-1] == "":
        order.pop()
    return check("Resize", {"x": x}, consts, attrs, order=order, ref=ref)[0]


RESIZE_CTMS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
               "half_pixel_symmetric"]


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("ctm", RESIZE_CTMS)
@pytest.mark.parametrize("scales", [(1, 1, 2.0, 1.5), (1, 1, 0.6, 0.5), (1, 1, 1.0, 3.0)])
def test_resize_scales(mode, ctm, scales):
    x = rnd(1, 2, 5, 4)
    _resize(x, {"mode": mode, "coordinate_transformation_mode": ctm}, scales=scales)


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil",
                                          "floor", "ceil"])
@pytest.mark.parametrize("sizes", [(1, 2, 9, 3), (1, 2, 4, 10)])
def test_resize_nearest_sizes(nearest_mode, sizes):
    x = rnd(1, 2, 5, 4)
    attrs = {"mode": "nearest", "nearest_mode": nearest_mode,
             "coordinate_transformation_mode": "asymmetric"}
    _resize(x, attrs, sizes=sizes, ref=run_ort)
    _resize(x, {**attrs, "coordinate_transformation_mode": "half_pixel"}, sizes=sizes)


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
def test_resize_axes_policy(policy):
    x = rnd(1, 2, 5, 4)
    _resize(x, {"mode": "linear", "axes": [2, 3], "keep_aspect_ratio_policy": policy},
            sizes=(8, 9))


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("scales", [(1, 1, 0.5, 0.4), (1, 1, 2.0, 0.7)])
def test_resize_antialias(mode, scales):
    _resize(rnd(1, 2, 10, 8), {"mode": mode, "antialias": 1}, scales=scales)


def test_resize_cubic_exclude_outside():
    _resize(rnd(1, 2, 5, 4), {"mode": "cubic", "exclude_outside": 1, "cubic_coeff_a": -0.5},
            scales=(1, 1, 1.7, 0.8))


def test_resize_crop_and_resize():
    _resize(rnd(1, 2, 6, 5), {"mode": "linear",
                              "coordinate_transformation_mode": "tf_crop_and_resize",
                              "extrapolation_value": 3.0},
            roi=[0, 0, -0.2, 0.3, 1, 1, 0.8, 1.4], sizes=(1, 2, 4, 5))


def test_resize_ort_common():
    # The forms real models use, against ONNX Runtime.
    x = rnd(1, 3, 6, 5)
    _resize(x, {"mode": "nearest"}, scales=(1, 1, 2, 2), ref=run_ort)
    _resize(x, {"mode": "linear"}, scales=(1, 1, 2, 2), ref=run_ort)
    _resize(x, {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
            sizes=(1, 3, 11, 7), ref=run_ort)
    _resize(x, {"mode": "cubic", "coordinate_transformation_mode": "pytorch_half_pixel"},
            sizes=(1, 3, 3, 9), ref=run_ort)


def test_resize_errors():
    with pytest.raises(ShapeError, match="scales"):
        run_aot("Resize", {"x": rnd(1, 2, 3, 3)}, {"s": np.array([2, 2], np.float32)},
                {}, order=["x", "", "s"])
    with pytest.raises(UnsupportedError, match="mode"):
        run_aot("Resize", {"x": rnd(1, 2, 3, 3)}, {"s": np.ones(4, np.float32)},
                {"mode": "area"}, order=["x", "", "s"])


# ---------------------------------------------------------------- ONNX quantized ops

def qrand(shape, dtype, seed=0):
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(info.min, info.max + 1, shape).astype(dtype)


def f32(*v):
    return np.array(v if len(v) > 1 else v[0], np.float32)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16"])
@pytest.mark.parametrize("form", ["tensor", "axis", "block"])
def test_quantize_dequantize(dtype, form):
    x = rnd(2, 6, 4) * 40
    # Halves land exactly on .5 to exercise round-half-to-even.
    x[0, 0, :] = [0.5, 1.5, 2.5, -2.5]
    attrs = {}
    if form == "tensor":
        scale, zp_shape = f32(0.5), ()
    elif form == "axis":
        scale, zp_shape = np.linspace(0.25, 1.0, 6).astype(np.float32), (6,)
        attrs = {"axis": 1}
    else:
        scale, zp_shape = (np.abs(rnd(2, 3, 4, seed=3)) + 0.2), (2, 3, 4)
        attrs = {"axis": 1, "block_size": 2}
    if form == "tensor":
        scale = f32(1.0)
    zp = qrand(zp_shape, dtype, seed=5) // 4
    ref = run_ort if form != "block" else run_ref
    q = check("QuantizeLinear", {"x": x}, {"s": scale, "z": zp}, attrs, exact=True, ref=ref)[0]
    check("DequantizeLinear", {"q": q}, {"s": scale, "z": zp}, attrs, exact=True, ref=ref)


def test_quantize_no_zero_point_and_output_dtype():
    x = rnd(3, 4) * 100
    check("QuantizeLinear", {"x": x}, {"s": f32(0.7)}, exact=True)
    y = check("QuantizeLinear", {"x": x}, {"s": f32(0.7)}, {"output_dtype": 3}, exact=True)[0]
    assert y.dtype == np.int8
    check("DequantizeLinear", {"q": qrand((3, 4), "int32")}, {"s": f32(0.01)}, exact=True)


def test_quantize_errors():
    with pytest.raises(ShapeError, match="y_scale"):
        run_aot("QuantizeLinear", {"x": rnd(2, 3)}, {"s": np.ones(2, np.float32)}, {})
    with pytest.raises(UnsupportedError, match="int32"):
        run_aot("QuantizeLinear", {"x": rnd(2, 3)}, {"s": f32(1.0)}, {"output_dtype": 6})


def test_dynamic_quantize():
    check("DynamicQuantizeLinear", {"x": rnd(3, 5) * 3}, n_out=3, exact=True)
    check("DynamicQuantizeLinear", {"x": np.abs(rnd(3, 5))}, n_out=3, exact=True)
    check("DynamicQuantizeLinear", {"x": np.zeros((2, 2), np.float32)}, n_out=3, exact=True)


@pytest.mark.parametrize("dt", ["int8", "uint8"])
@pytest.mark.parametrize("sa,sb,per_col", [((3, 8), (8, 5), False), ((2, 3, 8), (8, 4), True),
                                           ((4, 6), (2, 6, 3), False)])
def test_qlinear_matmul(dt, sa, sb, per_col):
    n = sb[-1]
    consts = {"as": f32(0.02), "az": np.array(3, dt), "b": qrand(sb, dt, 1),
              "bs": (np.linspace(0.01, 0.05, n).astype(np.float32) if per_col else f32(0.03)),
              "bz": (np.arange(n).astype(dt) if per_col else np.array(2, dt)),
              "ys": f32(0.09), "yz": np.array(5, dt)}
    order = ["a", "as", "az", "b", "bs", "bz", "ys", "yz"]
    check("QLinearMatMul", {"a": qrand(sa, dt)}, consts, order=order, exact=True, ref=run_ref)
    if not per_col:
        check("QLinearMatMul", {"a": qrand(sa, dt)}, consts, order=order, exact=True)


QCONV_CASES = [
    ((1, 3, 7, 7), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 4, 8, 8), (4, 1, 3, 3), {"group": 4, "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 9), (3, 2, 3), {"dilations": [2]}),
]


@pytest.mark.parametrize("xs,ws,attrs", QCONV_CASES)
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("xdt", ["uint8", "int8"])
def test_qlinear_conv(xs, ws, attrs, per_channel, xdt):
    o = ws[0]
    consts = {"xs_": f32(0.05), "xz": np.array(7 if xdt == "uint8" else -3, xdt),
              "w": qrand(ws, "int8", 1),
              "ws_": np.linspace(0.002, 0.01, o).astype(np.float32) if per_channel else f32(0.004),
              "wz": np.zeros(o, np.int8) if per_channel else np.array(0, np.int8),
              "ys": f32(0.1), "yz": np.array(100 if xdt == "uint8" else 0, xdt),
              "b": np.random.default_rng(2).integers(-500, 500, o).astype(np.int32)}
    order = ["x", "xs_", "xz", "w", "ws_", "wz", "ys", "yz", "b"]
    x = qrand(xs, xdt)
    if len(xs) == 3 and per_channel:
        # onnx.reference only handles per-channel scales in 2-D: compare the
        # 1-D conv with the same problem as a 2-D conv of height 1.
        y = run_aot("QLinearConv", {"x": x}, consts, attrs, order=order)[0]
        attrs2 = {"dilations": [1] + attrs["dilations"]}
        consts2 = {**consts, "w": consts["w"][:, :, None]}
        y2 = run_ref(onnx_model("QLinearConv", {"x": x[:, :, None]}, consts2, attrs2,
                                order=order), {"x": x[:, :, None]})[0]
        np.testing.assert_array_equal(y, y2[:, :, 0])
        return
    y = check("QLinearConv", {"x": x}, consts, attrs, order=order, exact=True, ref=run_ref)[0]
    if len(xs) == 4:
        w_ohwi = np.ascontiguousarray(np.moveaxis(consts["w"], 1, -1))
        y2 = run_aot("QLinearConv", {"x": nhwc(x)}, {**consts, "w": w_ohwi},
                     {**attrs, "layout": "NHWC"}, order=order)[0]
        np.testing.assert_array_equal(y2, nhwc(y))


def test_qlinear_conv_ort():
    # ONNX Runtime's float32 requantization is the reference's, bit for bit
    # (1-D/3-D and U8S8 cases: tests/ops/quant/test_onnx_quant.py).
    consts = {"xs_": f32(0.05), "xz": np.array(7, np.uint8), "w": qrand((4, 3, 3, 3), "int8", 1),
              "ws_": f32(0.004), "wz": np.array(0, np.int8), "ys": f32(0.1),
              "yz": np.array(100, np.uint8)}
    order = ["x", "xs_", "xz", "w", "ws_", "wz", "ys", "yz"]
    ours = run_aot("QLinearConv", {"x": qrand((1, 3, 6, 6), "uint8")}, consts, {}, order=order)[0]
    theirs = run_ort(onnx_model("QLinearConv", {"x": qrand((1, 3, 6, 6), "uint8")}, consts, {},
                                order=order), {"x": qrand((1, 3, 6, 6), "uint8")})[0]
    np.testing.assert_array_equal(ours, theirs)


def test_integer_ops():
    consts = {"w": qrand((4, 3, 3, 3), "int8", 1), "xz": np.array(9, np.uint8),
              "wz": np.array(0, np.int8)}
    check("ConvInteger", {"x": qrand((1, 3, 6, 6), "uint8")}, consts, {"pads": [1, 1, 1, 1]},
          order=["x", "w", "xz", "wz"], exact=True)
    check("MatMulInteger", {"a": qrand((2, 3, 8), "uint8")},
          {"b": qrand((8, 5), "int8", 1), "az": np.array(3, np.uint8),
           "bz": np.array(-1, np.int8)}, order=["a", "b", "az", "bz"], exact=True)


# ---------------------------------------------------------------- Other normalizations

@pytest.mark.parametrize("groups", [1, 2, 4])
def test_group_norm(groups):
    consts = {"s": rnd(4, seed=1), "b": rnd(4, seed=2)}
    check("GroupNormalization", {"x": rnd(2, 4, 3, 5)}, consts,
          {"num_groups": groups, "epsilon": 1e-3})


@pytest.mark.parametrize("axis", [-1, 1])
def test_rms_norm(axis):
    x = rnd(2, 3, 4)
    check("RMSNormalization", {"x": x}, {"s": rnd(*x.shape[axis:], seed=1)},
          {"axis": axis}, ref=run_ref, opset=23)


@pytest.mark.parametrize("axes", [None, [1], [0, 2, 3]])
def test_mean_variance_norm(axes):
    attrs = {} if axes is None else {"axes": axes}
    check("MeanVarianceNormalization", {"x": rnd(2, 3, 4, 5)}, attrs=attrs)


@pytest.mark.parametrize("xs", [(1, 2, 6, 4), (2, 2, 7, 5)])
def test_maxunpool(xs):
    x = rnd(*xs)
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    y, idx = run_aot("MaxPool", {"x": x}, {}, attrs, n_out=2)
    if xs[-1] % 2 == 0 and xs[-2] % 2 == 0:
        check("MaxUnpool", {"y": y}, {"i": idx}, attrs)
    else:
        with pytest.raises(ShapeError, match="outside"):
            run_aot("MaxUnpool", {"y": y}, {"i": idx}, attrs)
    check("MaxUnpool", {"y": y}, {"i": idx, "shape": np.array(x.shape, np.int64)}, attrs)


# ---------------------------------------------------------------- Random geometry

from hypothesis import given, settings, strategies as st  # noqa: E402


@st.composite
def geometry(draw):
    """Spatial dims, kernel, strides, dilations and padding of a window op."""
    nsp = draw(st.integers(1, 3))
    k = draw(st.lists(st.integers(1, 3), min_size=nsp, max_size=nsp))
    s = draw(st.lists(st.integers(1, 3), min_size=nsp, max_size=nsp))
    d = draw(st.lists(st.integers(1, 2), min_size=nsp, max_size=nsp))
    sp = [draw(st.integers((kk - 1) * dd + 1, 7)) for kk, dd in zip(k, d)]
    attrs = {"strides": s, "dilations": d}
    auto_pad = draw(st.sampled_from(["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    if auto_pad == "NOTSET":
        attrs["pads"] = [draw(st.integers(0, kk - 1)) for kk in k + k]
    else:
        attrs["auto_pad"] = auto_pad
    return sp, k, attrs


@settings(max_examples=40, deadline=None)
@given(geometry(), st.sampled_from([1, 2]), st.sampled_from(["Conv", "MaxPool", "AveragePool"]),
       st.integers(0, 1))
def test_window_ops_random(geo, group, op, flag):
    sp, k, attrs = geo
    dilated_same = attrs.get("auto_pad", "").startswith("SAME") and max(attrs["dilations"]) > 1
    if op == "Conv":
        if dilated_same:   # ORT refuses dilations with SAME padding
            attrs["dilations"] = [1] * len(k)
        x, w = rnd(1, 2 * group, *sp), rnd(3 * group, 2, *k, seed=7)
        y = check("Conv", {"x": x}, {"w": w}, {**attrs, "group": group})[0]
        w_last = np.ascontiguousarray(np.moveaxis(w, 1, -1))
        y2 = run_aot("Conv", {"x": nhwc(x)}, {"w": w_last},
                     {**attrs, "group": group, "layout": "NHWC"})[0]
        np.testing.assert_allclose(y2, nhwc(y), rtol=1e-5, atol=1e-5)
        return
    if dilated_same:   # ORT and onnx.reference both deviate from the spec here
        attrs["dilations"] = [1] * len(k)
    if attrs.get("auto_pad", "").startswith("SAME"):
        # ORT's pools refuse SAME padding when a stride exceeds the kernel.
        attrs["strides"] = [min(s_, k_) for s_, k_ in zip(attrs["strides"], k)]
    attrs = {**attrs, "kernel_shape": k, "ceil_mode": flag}
    if op == "AveragePool":
        attrs["count_include_pad"] = group - 1
    check(op, {"x": rnd(1, 2, *sp)}, attrs=attrs)

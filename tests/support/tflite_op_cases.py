"""Single-op models of the TFLite Micro op set, one builder per case in CASES
("<name>-<dtype>": (builder, dtype)), and the runs that compare aot with
tflite-micro on them. frontend/tflite/test_tflite_ops.py runs every case;
ops/quant/test_tflite_int16.py builds int16 variants of some."""
from __future__ import annotations

import numpy as np

import aot
from aot.frontend.tflite.importer import import_tflite
from aot.testing.tflite_builder import TFLiteBuilder


def _ours(data: bytes, xs):
    g = aot.optimize(import_tflite(data, "op"))
    out = aot.interpret(g, dict(zip(g.inputs, xs)))
    return [out[o] for o in g.outputs]


# ------------------------------------------------------------ single-op models

def _tflm_outputs(data: bytes, xs):
    from tflite_micro.python.tflite_micro import runtime
    interp = runtime.Interpreter.from_bytes(data)
    for i, x in enumerate(xs):
        interp.set_input(x, i)
    interp.invoke()
    return [np.array(interp.get_output(k)) for k in range(len(_ours_graph(data).outputs))]


def _ours_graph(data: bytes):
    return aot.optimize(import_tflite(data, "op"))


def _q(dtype, scale=0.05, zp=3):
    """Tensor quantization keywords: int8 per-tensor, or none for float."""
    return dict(scale=[scale], zp=[zp]) if dtype == "int8" else {}


def _random(rng, shape, dtype):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in ("int32", "int64"):
        return rng.integers(0, 3, shape).astype(dtype)
    if dtype == "int8":
        return rng.integers(-128, 128, shape).astype(np.int8)
    return (rng.standard_normal(shape) * 3).astype(dtype)


def _model(op, ins, outs, options=None, **fields):
    """One op: ins/outs are (name, shape, dtype, value or None, quant kwargs)."""
    m = TFLiteBuilder()
    idx_in, feeds = [], []
    for name, shape, dtype, value, quant in ins:
        if value is None:
            idx_in.append(m.tensor(name, shape, dtype, **quant))
            feeds.append(idx_in[-1])
        else:
            idx_in.append(m.tensor(name, np.shape(value), dtype, data=value, **quant))
    idx_out = [m.tensor(name, shape, dtype, **quant) for name, shape, dtype, _, quant in outs]
    m.op(op, idx_in, idx_out, options, **fields)
    return m.build(feeds, idx_out)


def X(shape, dtype, scale=0.05, zp=3, name="x"):
    return (name, tuple(shape), dtype, None, _q(dtype, scale, zp))


def C(value, dtype, name="c", **quant):
    return (name, np.shape(value), dtype, np.asarray(value, dtype), quant)


def Y(shape, dtype, scale=0.07, zp=-5, name="y"):
    return (name, tuple(shape), dtype, None, _q(dtype, scale, zp))


S = (2, 5, 4, 3)
CASES = {}


def case(name, dtypes=("float32", "int8")):
    def wrap(fn):
        for dtype in dtypes:
            CASES[f"{name}-{dtype}"] = (fn, dtype)
        return fn
    return wrap


@case("LEAKY_RELU")
def _leaky_relu(t):
    return _model("LEAKY_RELU", [X(S, t)], [Y(S, t)], "LeakyReluOptions", Alpha=0.2)


@case("LEAKY_RELU_negative_alpha")
def _leaky_relu_neg(t):
    return _model("LEAKY_RELU", [X(S, t)], [Y(S, t, 0.2)], "LeakyReluOptions", Alpha=-1.7)


@case("PRELU")
def _prelu(t):
    alpha = np.linspace(-0.5, 1.5, 3)
    if t == "int8":
        return _model("PRELU", [X(S, t), C(np.round(alpha / 0.02), t, scale=[0.02], zp=[0])],
                      [Y(S, t)])
    return _model("PRELU", [X(S, t), C(alpha, t)], [Y(S, t)])


@case("PRELU_broadcast")
def _prelu_bcast(t):
    alpha = np.linspace(-0.3, 0.4, 12).reshape(1, 4, 3)
    if t == "int8":
        return _model("PRELU", [X(S, t), C(np.round(alpha / 0.01) + 2, t, scale=[0.01], zp=[2])],
                      [Y(S, t, 0.03, 10)])
    return _model("PRELU", [X(S, t), C(alpha, t)], [Y(S, t)])


@case("SQUARED_DIFFERENCE")
def _squared_difference(t):
    return _model("SQUARED_DIFFERENCE", [X(S, t), X((4, 3), t, 0.04, -2, "x2")],
                  [Y(S, t, 0.5, -128)])


@case("HARD_SWISH")
def _hard_swish(t):
    return _model("HARD_SWISH", [X(S, t)], [Y(S, t)])


@case("RSQRT", ("float32",))
def _rsqrt(t):
    return _model("RSQRT", [X(S, t)], [Y(S, t)])


@case("LOG_SOFTMAX", ("float32",))
def _log_softmax(t):
    return _model("LOG_SOFTMAX", [X(S, t)], [Y(S, t)])


case("LOG_SOFTMAX", ("int8",))(lambda t: _model("LOG_SOFTMAX", [X((6, 11), t)],
                                                [Y((6, 11), t, 16 / 256, 127)]))
case("LOG_SOFTMAX_coarse", ("int8",))(lambda t: _model(
    "LOG_SOFTMAX", [X((3, 2, 17), t, 0.3, 0)], [Y((3, 2, 17), t, 16 / 256, 127)]))
case("LOG_SOFTMAX_fine", ("int8",))(lambda t: _model(
    "LOG_SOFTMAX", [X((4, 9), t, 0.02, 10)], [Y((4, 9), t, 16 / 256, 127)]))


@case("L2_NORMALIZATION", ("float32",))
def _l2_norm(t):
    return _model("L2_NORMALIZATION", [X(S, t)], [Y(S, t)], "L2NormOptions")


case("L2_NORMALIZATION", ("int8",))(lambda t: _model(
    "L2_NORMALIZATION", [X(S, t)], [Y(S, t, 1 / 128, 0)], "L2NormOptions"))


@case("DIV", ("float32",))
def _div(t):
    return _model("DIV", [X(S, t), C(np.linspace(0.5, 2, 3), t)], [Y(S, t)], "DivOptions",
                  FusedActivationFunction=1)


@case("BATCH_MATMUL")
def _batch_matmul(t):
    return _model("BATCH_MATMUL", [X((2, 3, 5), t), X((2, 4, 5), t, 0.04, -7, name="b")],
                  [Y((2, 3, 4), t, 0.2, 1)], "BatchMatMulOptions", AdjY=True)


@case("BATCH_MATMUL_broadcast")
def _batch_matmul_bcast(t):
    return _model("BATCH_MATMUL", [X((2, 1, 3, 5), t), X((3, 5, 4), t, 0.04, -7, name="b")],
                  [Y((2, 3, 3, 4), t, 0.2, 1)], "BatchMatMulOptions")


def _resize(op, options, out_hw=(7, 9), **fields):
    def build(t):
        return _model(op, [X((1, 4, 5, 2), t), C(list(out_hw), "int32")],
                      [Y((1, *out_hw, 2), t, 0.05, 3)], options, **fields)
    return build


for _name, _flags in (("", {}), ("_align_corners", dict(AlignCorners=True)),
                      ("_half_pixel", dict(HalfPixelCenters=True))):
    case(f"RESIZE_BILINEAR{_name}")(
        _resize("RESIZE_BILINEAR", "ResizeBilinearOptions", **_flags))
    case(f"RESIZE_NEAREST_NEIGHBOR{_name}")(
        _resize("RESIZE_NEAREST_NEIGHBOR", "ResizeNearestNeighborOptions", **_flags))
case("RESIZE_BILINEAR_down")(_resize("RESIZE_BILINEAR", "ResizeBilinearOptions", (3, 2),
                                     HalfPixelCenters=True))
case("RESIZE_NEAREST_NEIGHBOR_down")(
    _resize("RESIZE_NEAREST_NEIGHBOR", "ResizeNearestNeighborOptions", (3, 2)))


@case("EXPAND_DIMS")
def _expand_dims(t):
    return _model("EXPAND_DIMS", [X(S, t), C([2], "int32")], [Y((2, 5, 1, 4, 3), t, 0.05, 3)])


@case("ZEROS_LIKE_plus_x")
def _zeros_like(t):
    m = TFLiteBuilder()
    x = m.tensor("x", S, t, **_q(t))
    z = m.tensor("z", S, t, **_q(t))
    y = m.tensor("y", S, t, **_q(t))
    m.op("ZEROS_LIKE", [x], [z])
    m.op("ADD" if t == "float32" else "MUL", [x, z], [y], "AddOptions" if t == "float32"
         else "MulOptions")
    return m.build([x], [y])


@case("FILL_plus_x")
def _fill(t):
    m = TFLiteBuilder()
    x = m.tensor("x", S, t, **_q(t))
    dims = m.const("dims", list(S), "int32")
    v = m.const("v", 1.5 if t == "float32" else 30, t, **_q(t))
    f = m.tensor("f", S, t, **_q(t))
    y = m.tensor("y", S, t, **_q(t, 0.1, 0))
    m.op("FILL", [dims, v], [f])
    m.op("ADD", [x, f], [y], "AddOptions")
    return m.build([x], [y])


@case("BROADCAST_TO")
def _broadcast_to(t):
    return _model("BROADCAST_TO", [X((5, 1, 3), t), C([2, 5, 4, 3], "int32")],
                  [Y(S, t, 0.05, 3)])


for _op, _cls in (("ARG_MAX", "ArgMaxOptions"), ("ARG_MIN", "ArgMinOptions")):
    for _axis, _out in ((3, "int32"), (1, "int64")):
        def _arg(t, op=_op, cls=_cls, axis=_axis, out=_out):
            shape = tuple(d for k, d in enumerate(S) if k != axis)
            return _model(op, [X(S, t), C([axis], "int32")], [Y(shape, out)], cls,
                          OutputType=2 if out == "int32" else 4)
        # tflite-micro's ARG_MAX/ARG_MIN write int32 only
        case(f"{_op}_axis{_axis}_{_out}", ("float32", "int8") if _out == "int32"
             else ("float32",))(_arg)


@case("PACK")
def _pack(t):
    m = TFLiteBuilder()
    a = m.tensor("a", (4, 3), t, **_q(t))
    b = m.tensor("b", (4, 3), t, **_q(t))
    y = m.tensor("y", (4, 2, 3), t, **_q(t))
    m.op("PACK", [a, b], [y], "PackOptions", ValuesCount=2, Axis=1)
    return m.build([a, b], [y])


@case("UNPACK")
def _unpack(t):
    return _model("UNPACK", [X(S, t)], [Y((2, 5, 3), t, 0.05, 3, f"y{k}") for k in range(4)],
                  "UnpackOptions", Num=4, Axis=2)


@case("SPLIT")
def _split(t):
    m = TFLiteBuilder()
    axis = m.const("axis", [1], "int32")
    x = m.tensor("x", (2, 6, 3), t, **_q(t))
    ys = [m.tensor(f"y{k}", (2, 2, 3), t, **_q(t)) for k in range(3)]
    m.op("SPLIT", [axis, x], ys, "SplitOptions", NumSplits=3)
    return m.build([x], ys)


@case("SPLIT_V")
def _split_v(t):
    return _model("SPLIT_V", [X((2, 7, 3), t), C([2, -1, 1], "int32", "sizes"),
                              C([1], "int32", "axis")],
                  [Y((2, n, 3), t, 0.05, 3, f"y{k}") for k, n in enumerate((2, 4, 1))],
                  "SplitVOptions", NumSplits=3)


for _mode, _mname in ((0, "REFLECT"), (1, "SYMMETRIC")):
    def _mirror(t, mode=_mode):
        return _model("MIRROR_PAD", [X((2, 4, 5, 3), t), C([[0, 0], [2, 1], [1, 3], [0, 0]],
                                                              "int32")],
                      [Y((2, 7, 9, 3), t, 0.05, 3)], "MirrorPadOptions", Mode=mode)
    case(f"MIRROR_PAD_{_mname}")(_mirror)


@case("DEPTH_TO_SPACE")
def _depth_to_space(t):
    return _model("DEPTH_TO_SPACE", [X((1, 3, 2, 8), t)], [Y((1, 6, 4, 2), t, 0.05, 3)],
                  "DepthToSpaceOptions", BlockSize=2)


@case("SPACE_TO_DEPTH")
def _space_to_depth(t):
    return _model("SPACE_TO_DEPTH", [X((1, 6, 4, 2), t)], [Y((1, 3, 2, 8), t, 0.05, 3)],
                  "SpaceToDepthOptions", BlockSize=2)


@case("GATHER_ND")
def _gather_nd(t):
    return _model("GATHER_ND", [X((4, 5, 3), t), C([[1, 2], [3, 0], [0, 4]], "int32")],
                  [Y((3, 3), t, 0.05, 3)])


@case("STRIDED_SLICE")
def _strided_slice(t):
    return _model("STRIDED_SLICE", [X(S, t), C([0, 1, -1, 0], "int32", "b"),
                                    C([2, 5, 0, 3], "int32", "e"),
                                    C([1, 2, -2, 1], "int32", "s")],
                  [Y((2, 2, 2, 3), t, 0.05, 3)], "StridedSliceOptions", BeginMask=1)


@case("STRIDED_SLICE_shrink")
def _strided_slice_shrink(t):
    return _model("STRIDED_SLICE", [X(S, t), C([0, -1, 0, 0], "int32", "b"),
                                    C([2, 0, 4, 3], "int32", "e"),
                                    C([1, 1, 1, 1], "int32", "s")],
                  [Y((2, 4, 3), t, 0.05, 3)], "StridedSliceOptions", ShrinkAxisMask=2)


case("ABS", ("int8",))(lambda t: _model("ABS", [X(S, t)], [Y(S, t)]))
case("ABS_same_scale", ("int8",))(lambda t: _model("ABS", [X(S, t)], [Y(S, t, 0.05, -20)]))
for _code in ("ABS", "CEIL", "FLOOR", "ROUND", "COS", "SIN", "EXP", "NEG", "ELU", "SQUARE"):
    case(_code, ("float32",))(lambda t, code=_code: _model(code, [X(S, t)], [Y(S, t)]))
for _code in ("LOG", "SQRT"):
    case(_code, ("float32",))(lambda t, code=_code: _model(code, [X(S, t)], [Y(S, t)]))
case("LOGICAL_NOT", ("bool",))(lambda t: _model("LOGICAL_NOT", [X(S, t)], [Y(S, t)]))
for _code in ("MAXIMUM", "MINIMUM"):   # TFLM's int8 kernels compare raw values
    case(_code, ("int8",))(lambda t, code=_code: _model(
        code, [X(S, t), X((4, 3), t, name="b")], [Y(S, t, 0.05, 3)]))
for _code in ("MAXIMUM", "MINIMUM", "FLOOR_DIV", "FLOOR_MOD"):
    case(_code, ("float32",))(
        lambda t, code=_code: _model(code, [X(S, t), X((4, 3), t, name="b")], [Y(S, t)]))
for _code in ("EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL"):
    case(_code, ("float32",))(lambda t, code=_code: _model(
        code, [X(S, t), C(np.round(np.linspace(-3, 3, 12)).reshape(4, 3), t)], [Y(S, "bool")]))
for _code in ("EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL"):
    # different scales, so TFLM's rescaling decides the ties
    case(_code, ("int8",))(lambda t, code=_code: _model(
        code, [X(S, t, 0.05, 3), X((4, 3), t, 0.1, -7, "b")], [Y(S, "bool")]))
    case(f"{_code}_close_scales", ("int8",))(lambda t, code=_code: _model(
        code, [X(S, t, 0.05, 3), X(S, t, 0.0501, 0, "b")], [Y(S, "bool")]))
for _code in ("LOGICAL_AND", "LOGICAL_OR"):
    case(_code, ("bool",))(
        lambda t, code=_code: _model(code, [X(S, t), X((4, 3), t, name="b")], [Y(S, t)]))
case("SUM_keep0", ("int8",))(lambda t: _model(
    "SUM", [X(S, t), C([1, -1], "int32")], [Y((2, 4), t, 0.4, -3)], "ReducerOptions"))
case("SUM_keep1", ("int8",))(lambda t: _model(
    "SUM", [X(S, t), C([2], "int32")], [Y((2, 5, 1, 3), t, 0.3, 5)], "ReducerOptions",
    KeepDims=True))
for _code in ("REDUCE_MAX", "REDUCE_MIN"):
    case(f"{_code}_keep0", ("int8",))(lambda t, code=_code: _model(
        code, [X(S, t), C([1, -1], "int32")], [Y((2, 4), t, 0.05, 3)], "ReducerOptions"))
for _code in ("SUM", "REDUCE_MAX", "REDUCE_MIN"):
    for _keep in (False, True):
        case(f"{_code}_keep{int(_keep)}", ("float32",))(lambda t, code=_code, keep=_keep: _model(
            code, [X(S, t), C([1, -1], "int32")], [Y((2, 1, 4, 1) if keep else (2, 4), t)],
            "ReducerOptions", KeepDims=keep))


@case("ADD_N")
def _add_n(t):
    return _model("ADD_N", [X(S, t), X(S, t, name="b"), X(S, t, name="c")], [Y(S, t, 0.1, -6)])


@case("SELECT_V2")
def _select_v2(t):
    return _model("SELECT_V2", [X((4, 3), "bool", name="cond"), X(S, t), X((3,), t, name="b")],
                  [Y(S, t, 0.05, 3)])


@case("L2_POOL_2D", ("float32",))
def _l2_pool(t):
    return _model("L2_POOL_2D", [X((1, 7, 9, 3), t)], [Y((1, 4, 5, 3), t)], "Pool2DOptions",
                  Padding=0, StrideH=2, StrideW=2, FilterHeight=3, FilterWidth=3)


@case("GATHER")
def _gather(t):
    return _model("GATHER", [X(S, t), C([[3, 0], [1, 1]], "int32")],
                  [Y((2, 5, 2, 2, 3), t, 0.05, 3)], "GatherOptions", Axis=2)


@case("EMBEDDING_LOOKUP")
def _embedding_lookup(t):
    return _model("EMBEDDING_LOOKUP", [C([2, 0, 2, 1], "int32", "ids"), X((3, 5), t)],
                  [Y((4, 5), t, 0.05, 3)])


@case("SLICE")
def _slice(t):
    return _model("SLICE", [X(S, t), C([1, 1, 0, 1], "int32", "b"), C([1, 3, -1, 2], "int32", "s")],
                  [Y((1, 3, 4, 2), t, 0.05, 3)])


@case("REVERSE_V2")
def _reverse(t):
    return _model("REVERSE_V2", [X(S, t), C([1, 2], "int32")], [Y(S, t, 0.05, 3)])


@case("CAST", ("float32",))
def _cast(t):
    return _model("CAST", [X(S, t)], [Y(S, "int32")])


case("CAST_to_float32", ("int8",))(lambda t: _model("CAST", [X(S, t)], [Y(S, "float32")]))
case("CAST_to_int32", ("int8",))(lambda t: _model("CAST", [X(S, t)], [Y(S, "int32")]))


@case("SPACE_TO_BATCH_ND")
def _space_to_batch(t):
    return _model("SPACE_TO_BATCH_ND", [X((2, 5, 4, 3), t), C([2, 3], "int32", "block"),
                                        C([[1, 0], [1, 1]], "int32", "pads")],
                  [Y((12, 3, 2, 3), t, 0.05, 3)])


@case("SPACE_TO_BATCH_ND_3d")
def _space_to_batch_3d(t):
    return _model("SPACE_TO_BATCH_ND", [X((2, 6, 3), t), C([3], "int32", "block"),
                                        C([[0, 0]], "int32", "pads")],
                  [Y((6, 2, 3), t, 0.05, 3)])


@case("BATCH_TO_SPACE_ND")
def _batch_to_space(t):
    return _model("BATCH_TO_SPACE_ND", [X((12, 3, 2, 3), t), C([2, 3], "int32", "block"),
                                        C([[1, 0], [1, 1]], "int32", "crops")],
                  [Y((2, 5, 4, 3), t, 0.05, 3)])


@case("BATCH_TO_SPACE_ND_no_crop")
def _batch_to_space_plain(t):
    return _model("BATCH_TO_SPACE_ND", [X((8, 2, 3, 2), t), C([2, 2], "int32", "block"),
                                        C([[0, 0], [0, 0]], "int32", "crops")],
                  [Y((2, 4, 6, 2), t, 0.05, 3)])


def _transpose_conv(padding, out_hw, bias=True):
    def build(t):
        rng = np.random.default_rng(5)
        ins = [C([1, *out_hw, 4], "int32", "shape"),
               C(rng.standard_normal((4, 3, 3, 2)), t, "w"), X((1, 4, 5, 2), t)]
        if bias:
            ins.append(C(rng.standard_normal(4), t, "b"))
        return _model("TRANSPOSE_CONV", ins, [Y((1, *out_hw, 4), t)], "TransposeConvOptions",
                      Padding=padding, StrideH=2, StrideW=2)
    return build


case("TRANSPOSE_CONV_same", ("float32",))(_transpose_conv(0, (8, 10)))
case("TRANSPOSE_CONV_valid", ("float32",))(_transpose_conv(1, (9, 11)))
case("TRANSPOSE_CONV_valid_no_bias", ("float32",))(_transpose_conv(1, (9, 11), bias=False))


def _int8_transpose_conv(padding, out_hw, strides=(2, 2), bias=True, per_channel=True):
    def build(t):
        rng = np.random.default_rng(6)
        w_scale = rng.uniform(0.005, 0.02, 4) if per_channel else np.full(1, 0.01)
        ins = [C([1, *out_hw, 4], "int32", "shape"),
               C(rng.integers(-127, 128, (4, 3, 3, 2)), t, "w", scale=w_scale,
                 zp=np.zeros(w_scale.size, np.int64), qdim=0),
               X((1, 4, 5, 2), t, 0.05, 3)]
        if bias:
            ins.append(C(rng.integers(-3000, 3000, 4), "int32", "b", scale=w_scale * 0.05,
                         zp=np.zeros(w_scale.size, np.int64)))
        return _model("TRANSPOSE_CONV", ins, [Y((1, *out_hw, 4), t, 0.08, -4)],
                      "TransposeConvOptions", Padding=padding, StrideH=strides[0],
                      StrideW=strides[1])
    return build


case("TRANSPOSE_CONV_same", ("int8",))(_int8_transpose_conv(0, (8, 10)))
case("TRANSPOSE_CONV_valid", ("int8",))(_int8_transpose_conv(1, (9, 11)))
case("TRANSPOSE_CONV_valid_no_bias", ("int8",))(_int8_transpose_conv(1, (9, 11), bias=False))
case("TRANSPOSE_CONV_stride1_per_tensor", ("int8",))(
    _int8_transpose_conv(0, (4, 5), (1, 1), per_channel=False))
case("TRANSPOSE_CONV_stride_2x1", ("int8",))(_int8_transpose_conv(1, (9, 7), (2, 1)))

for _axis in (1, 3):
    for _ex in (False, True):
        for _rev in (False, True):
            case(f"CUMSUM_axis{_axis}_exclusive{int(_ex)}_reverse{int(_rev)}")(
                lambda t, axis=_axis, ex=_ex, rev=_rev: _model(
                    "CUMSUM", [X(S, t), C([axis], "int32")], [Y(S, t, 0.2, -1)], "CumsumOptions",
                    Exclusive=ex, Reverse=rev))


@case("DYNAMIC_UPDATE_SLICE")
def _dynamic_update_slice(t):
    return _model("DYNAMIC_UPDATE_SLICE", [X(S, t), X((1, 2, 4, 2), t, name="u"),
                                           C([1, 2, 0, 5], "int32", "start")],
                  [Y(S, t, 0.05, 3)])


@case("REDUCE_ALL", ("bool",))
def _reduce_all(t):
    return _model("REDUCE_ALL", [X(S, t), C([2], "int32")], [Y((2, 5, 3), t)], "ReducerOptions")


# ops converted before this file: each in float32 and, where aot has it, int8
for _code, _cls in (("ADD", "AddOptions"), ("SUB", "SubOptions"), ("MUL", "MulOptions")):
    case(_code)(lambda t, code=_code, cls=_cls: _model(
        code, [X(S, t), X((4, 3), t, 0.03, -9, "b")], [Y(S, t, 0.1, 2)], cls,
        FusedActivationFunction=1))
case("TANH", ("float32",))(lambda t: _model("TANH", [X(S, t)], [Y(S, t)]))
case("TANH", ("int8",))(lambda t: _model("TANH", [X(S, t)], [Y(S, t, 1 / 128, 0)]))
case("RELU")(lambda t: _model("RELU", [X(S, t)], [Y(S, t)]))
# TFLM's int8 RELU6 does not requantize: the output shares the input's scale
case("RELU6")(lambda t: _model("RELU6", [X(S, t)], [Y(S, t, 0.05, 3)]))
case("RELU6_zp_low")(lambda t: _model("RELU6", [X(S, t, 0.03, -100)], [Y(S, t, 0.03, -100)]))
case("LOGISTIC", ("float32",))(lambda t: _model("LOGISTIC", [X(S, t)], [Y(S, t)]))
case("LOGISTIC", ("int8",))(lambda t: _model("LOGISTIC", [X(S, t)], [Y(S, t, 1 / 256, -128)]))
case("SOFTMAX")(lambda t: _model("SOFTMAX", [X((3, 7), t)], [Y((3, 7), t, 1 / 256, -128)],
                                 "SoftmaxOptions", Beta=1.0))
case("MEAN")(lambda t: _model("MEAN", [X(S, t), C([1, 2], "int32")], [Y((2, 1, 1, 3), t)],
                              "ReducerOptions", KeepDims=True))
case("RESHAPE")(lambda t: _model("RESHAPE", [X(S, t), C([10, 12], "int32")],
                                 [Y((10, 12), t, 0.05, 3)]))
case("SQUEEZE")(lambda t: _model("SQUEEZE", [X((2, 1, 4, 1), t)], [Y((2, 4), t, 0.05, 3)]))
case("TRANSPOSE")(lambda t: _model("TRANSPOSE", [X(S, t), C([0, 3, 1, 2], "int32")],
                                   [Y((2, 3, 5, 4), t, 0.05, 3)]))
case("PAD")(lambda t: _model("PAD", [X(S, t), C([[0, 0], [1, 2], [0, 1], [0, 0]], "int32")],
                             [Y((2, 8, 5, 3), t, 0.05, 3)]))
case("PADV2")(lambda t: _model(
    "PADV2", [X(S, t), C([[0, 0], [1, 2], [0, 1], [0, 0]], "int32"),
              C(1.5 if t == "float32" else 40, t, "v", **_q(t))],
    [Y((2, 8, 5, 3), t, 0.05, 3)]))


@case("CONCATENATION")
def _concatenation(t):
    m = TFLiteBuilder()
    a = m.tensor("a", (2, 3), t, **_q(t))
    b = m.tensor("b", (2, 4), t, **_q(t))
    y = m.tensor("y", (2, 7), t, **_q(t))
    m.op("CONCATENATION", [a, b], [y], "ConcatenationOptions", Axis=1)
    return m.build([a, b], [y])


case("QUANTIZE", ("float32",))(lambda t: _model("QUANTIZE", [X(S, t)], [Y(S, "int8")]))
case("QUANTIZE_requantize", ("int8",))(lambda t: _model("QUANTIZE", [X(S, t)], [Y(S, t, 0.021, 7)]))


@case("SHAPE_into_reshape")
def _shape(t):
    m = TFLiteBuilder()
    x = m.tensor("x", S, t, **_q(t))
    shape = m.tensor("shape", (4,), "int32")
    y = m.tensor("y", S, t, **_q(t))
    m.op("SHAPE", [x], [shape], "ShapeOptions", OutType=2)
    m.op("RESHAPE", [x, shape], [y])
    return m.build([x], [y])
case("DEQUANTIZE", ("int8",))(lambda t: _model("DEQUANTIZE", [X(S, t)], [Y(S, "float32")]))

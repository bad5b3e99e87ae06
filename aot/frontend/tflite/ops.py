"""Converters for the TFLite Micro op set beyond the core kernels
(aot/frontend/tflite/importer.py): a mixin of `_op_<BUILTIN>` methods for its
`_Builder`, with the builtin options they read.

Float ops become ONNX-named ops (the float path is shared with ONNX). Data
movement (PACK, UNPACK, SPLIT, DEPTH_TO_SPACE, MIRROR_PAD, ...) becomes ONNX ops that pass int8
quantization through, as TFLM copies bytes for them. Integer arithmetic that
must match TFLM bit for bit is a `tfl.*` op (aot/ops/quant/tflite_int8.py).
"""
from __future__ import annotations

import numpy as np

from aot.errors import ModelError, ShapeError, UnsupportedError
from aot.ir.graph import Quant, TensorType
from aot.ops.quant import qmath

# op -> (options class, fields), merged into tflite._OPTIONS
OPTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "LEAKY_RELU": ("LeakyReluOptions", ("Alpha",)),
    "RESIZE_BILINEAR": ("ResizeBilinearOptions", ("AlignCorners", "HalfPixelCenters")),
    "RESIZE_NEAREST_NEIGHBOR": ("ResizeNearestNeighborOptions",
                                ("AlignCorners", "HalfPixelCenters")),
    "ARG_MAX": ("ArgMaxOptions", ("OutputType",)),
    "ARG_MIN": ("ArgMinOptions", ("OutputType",)),
    "PACK": ("PackOptions", ("ValuesCount", "Axis")),
    "UNPACK": ("UnpackOptions", ("Num", "Axis")),
    "SPLIT": ("SplitOptions", ("NumSplits",)),
    "MIRROR_PAD": ("MirrorPadOptions", ("Mode",)),
    "DEPTH_TO_SPACE": ("DepthToSpaceOptions", ("BlockSize",)),
    "SPACE_TO_DEPTH": ("SpaceToDepthOptions", ("BlockSize",)),
    "BATCH_MATMUL": ("BatchMatMulOptions", ("AdjX", "AdjY")),
    "L2_NORMALIZATION": ("L2NormOptions", ("FusedActivationFunction",)),
    "DIV": ("DivOptions", ("FusedActivationFunction",)),
    "GATHER": ("GatherOptions", ("Axis", "BatchDims")),
    "SUM": ("ReducerOptions", ("KeepDims",)),
    "REDUCE_MAX": ("ReducerOptions", ("KeepDims",)),
    "REDUCE_MIN": ("ReducerOptions", ("KeepDims",)),
    "TRANSPOSE_CONV": ("TransposeConvOptions", ("Padding", "StrideW", "StrideH",
                                                "FusedActivationFunction")),
    "CUMSUM": ("CumsumOptions", ("Exclusive", "Reverse")),
    "SVDF": ("SVDFOptions", ("Rank", "FusedActivationFunction")),
    "IF": ("IfOptions", ("ThenSubgraphIndex", "ElseSubgraphIndex")),
    "WHILE": ("WhileOptions", ("CondSubgraphIndex", "BodySubgraphIndex")),
    "REDUCE_ALL": ("ReducerOptions", ("KeepDims",)),
    "L2_POOL_2D": ("Pool2DOptions", ("Padding", "StrideW", "StrideH", "FilterWidth",
                                     "FilterHeight", "FusedActivationFunction")),
}
# float elementwise builtins that are one ONNX op of the same meaning
_ONNX_UNARY = {"ABS": "Abs", "CEIL": "Ceil", "FLOOR": "Floor", "ROUND": "Round", "COS": "Cos",
               "SIN": "Sin", "EXP": "Exp", "LOG": "Log", "SQRT": "Sqrt", "NEG": "Neg",
               "ELU": "Elu", "LOGICAL_NOT": "Not"}
_ONNX_BINARY = {"MAXIMUM": "Max", "MINIMUM": "Min", "EQUAL": "Equal", "LESS": "Less",
                "LESS_EQUAL": "LessOrEqual", "GREATER": "Greater",
                "GREATER_EQUAL": "GreaterOrEqual", "LOGICAL_AND": "And", "LOGICAL_OR": "Or"}
_COMPARISONS = {"EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL"}
# int8 kernels of TFLM that compare raw values (the tensors share one quantization)
_RAW_INT8 = {"MAXIMUM", "MINIMUM"}
_ONNX_REDUCE = {"SUM": "ReduceSum", "REDUCE_MAX": "ReduceMax", "REDUCE_MIN": "ReduceMin"}
# TFLite TensorType -> ONNX TensorProto data type, for CAST
_ONNX_DTYPES = {"float32": 1, "uint8": 2, "int8": 3, "int16": 5, "int32": 6, "int64": 7,
                "bool": 9, "float16": 10}
DEFAULTS = {"CondSubgraphIndex": 0, "BodySubgraphIndex": 0, "ThenSubgraphIndex": 0,
            "ElseSubgraphIndex": 0, "Rank": 1, "Exclusive": False, "Reverse": False, "Alpha": 0.0,
            "AlignCorners": False, "HalfPixelCenters": False, "OutputType": 4, "ValuesCount": 0, "Num": 0, "NumSplits": 0, "Mode": 0, "BlockSize": 0,
            "AdjX": False, "AdjY": False}

_PADDING_MODES = {0: "SAME", 1: "VALID"}


class TFLMOps:
    """`_op_*` converters; `self` is the importer's _Builder."""

    # -- activations

    def _op_LEAKY_RELU(self, op, ins, outs):
        self._need(ins, 1)
        alpha = float(op.options.get("Alpha", 0.0))
        if self._is_int(ins[0]):
            self._same_int8(ins[0], outs[0], dtypes=("int8", "int16"))
            self.emit(self._int_op("tfl.leaky_relu", ins[0]), ins[:1], outs, alpha=alpha)
        else:
            self.emit("LeakyRelu", ins[:1], outs, alpha=alpha)

    def _op_PRELU(self, op, ins, outs):
        self._need(ins, 2)
        if self._is_int(ins[0]):
            self._same_int8(ins[0], outs[0])
            self._same_int8(ins[1], outs[0], "alpha")
            self.emit("tfl.prelu", ins[:2], outs)
        else:
            self.emit("PRelu", ins[:2], outs)

    def _op_ABS(self, op, ins, outs):
        if self._int16_unary(ins, outs, "tfl.abs_int16"):
            return
        self._int8_table_or(op, ins, outs, "tfl.abs")

    def _op_ELU(self, op, ins, outs):
        self._int8_table_or(op, ins, outs, "tfl.elu")

    def _int8_table_or(self, op, ins, outs, int8_op: str) -> None:
        """int8: the table op; float: the ONNX op of _ONNX_UNARY."""
        if not self._int8_unary(ins, outs, int8_op):
            self._float_elementwise(op, ins, outs)

    def _int8_unary(self, ins, outs, int8_op: str) -> bool:
        """Emits int8_op when the input is int8 (True), else leaves the node to the caller."""
        self._need(ins, 1)
        if not self._is_int(ins[0]):
            return False
        self._same_int8(ins[0], outs[0])
        self.emit(int8_op, ins[:1], outs)
        return True

    def _op_HARD_SWISH(self, op, ins, outs):
        self._need(ins, 1)
        if self._is_int(ins[0]):
            self._same_int8(ins[0], outs[0])
            self.emit("tfl.hard_swish", ins[:1], outs)
        else:
            self.emit("HardSwish", ins[:1], outs)

    def _fixed_int8_output(self, x: str, out: str, scale: str, zero_point: int) -> None:
        """An int8 op whose output TFLM's kernel writes at one fixed scale and
        zero point (`scale` spelled as a fraction, as the message shows it)."""
        self._same_int8(x, out)
        q = self.ty(out).quant
        num, den = (int(v) for v in scale.split("/"))
        if q.scale[0] != num / den or q.zero_point[0] != zero_point:
            raise UnsupportedError(f"{self.op_label}: int8 output must have scale {scale} "
                                   f"and zero point {zero_point} (TFLM's), got {q.scale[0]}, "
                                   f"{q.zero_point[0]}")

    def _op_LOG_SOFTMAX(self, op, ins, outs):
        self._need(ins, 1)
        if self._is_int(ins[0]):
            self._fixed_int8_output(ins[0], outs[0], "16/256", 127)
            self.emit("tfl.log_softmax", ins[:1], outs)
            return
        self._float_only(ins)
        self.emit("LogSoftmax", ins[:1], outs, axis=-1)

    def _op_RSQRT(self, op, ins, outs):
        if self._int16_unary(ins, outs, "tfl.rsqrt_int16"):
            return
        if self._int8_unary(ins, outs, "tfl.rsqrt"):
            return
        self._float_only(ins)
        root = self.tmp("sqrt")
        self.emit("Sqrt", ins[:1], [root], "sqrt")
        self.emit("Reciprocal", [root], outs)

    def _op_SQUARED_DIFFERENCE(self, op, ins, outs):
        self._need(ins, 2)
        if self._is_int(ins[0]):
            self._same_int8(ins[1], ins[0], "second input", dtypes=("int8", "int16"))
            self.emit(self._int_op("tfl.squared_difference", ins[0]), ins[:2], outs)
            return
        diff = self.tmp("difference")
        self.emit("Sub", ins[:2], [diff], "difference")
        self.emit("Mul", [diff, diff], outs)

    def _op_L2_NORMALIZATION(self, op, ins, outs):
        self._need(ins, 1)
        if op.options.get("FusedActivationFunction", 0) != 0:
            raise UnsupportedError(f"{self.op_label}: fused activation on L2_NORMALIZATION "
                                   "is not supported yet")
        if self._is_int(ins[0]):
            self._fixed_int8_output(ins[0], outs[0], "1/128", 0)
            self.emit("tfl.l2_normalization", ins[:1], outs)
            return
        self._float_only(ins)
        x = ins[0]
        rank = len(self.ty(x).shape)
        squares, norm, floor = self.tmp("sum_of_squares"), self.tmp("norm"), self.tmp("clamped")
        self.emit("ReduceSumSquare", [x, self.new_const("axes", np.array([rank - 1], np.int64))],
                  [squares], "sum_of_squares", keepdims=1)
        self.emit("Sqrt", [squares], [norm], "norm")
        # TFLite divides by max(norm, 1e-6)
        self.emit("Max", [norm, self.new_const("epsilon", np.array(1e-6, np.float32))],
                  [floor], "clamped")
        self.emit("Div", [x, floor], outs)

    # -- resizing

    def _resize(self, op, ins, outs, mode: str):
        self._need(ins, 2)
        o = op.options
        align, half = bool(o.get("AlignCorners")), bool(o.get("HalfPixelCenters"))
        if align and half:
            raise UnsupportedError(f"{self.op_label}: align_corners with half_pixel_centers "
                                   "is not supported yet")
        if mode == "linear":
            if self._is_int(ins[0]):
                self._same_int8(ins[0], outs[0])
                size = self.const(ins[1], "size").astype(np.int64).reshape(-1)
                if size.size != 2 or len(self.ty(ins[0]).shape) != 4:
                    raise ShapeError(f"{self.op_label}: expects a 4-D NHWC input and 2 sizes")
                self.emit("tfl.resize_bilinear", ins[:1], outs, size=(int(size[0]), int(size[1])),
                          align_corners=align, half_pixel_centers=half)
                return
            ctm = "align_corners" if align else "half_pixel" if half else "asymmetric"
            extra = {}
        else:
            ctm = "align_corners" if align else "tf_half_pixel_for_nn" if half else "asymmetric"
            extra = {"nearest_mode": "round_prefer_ceil" if align else "floor"}
        size = self.const(ins[1], "size").astype(np.int64).reshape(-1)
        shape = self.ty(ins[0]).shape
        if len(shape) != 4 or size.size != 2:
            raise ShapeError(f"{self.op_label}: expects a 4-D NHWC input and 2 sizes")
        sizes = np.array([shape[0], size[0], size[1], shape[3]], np.int64)
        self.emit("Resize", [ins[0], "", "", self.new_const("sizes", sizes)], outs,
                  layout="NHWC", mode=mode, coordinate_transformation_mode=ctm, **extra)

    def _op_RESIZE_BILINEAR(self, op, ins, outs):
        self._resize(op, ins, outs, "linear")

    def _op_RESIZE_NEAREST_NEIGHBOR(self, op, ins, outs):
        self._resize(op, ins, outs, "nearest")

    # -- shapes and data movement

    def _op_ZEROS_LIKE(self, op, ins, outs):
        self._need(ins, 1)
        ty = self.ty(outs[0])
        self.emit("ConstantOfShape", [self.new_const("shape", np.array(ty.shape, np.int64))],
                  outs, value=np.zeros(1, ty.dtype))

    def _op_FILL(self, op, ins, outs):
        self._need(ins, 2)
        shape = self.const(ins[0], "dims").astype(np.int64).reshape(-1)
        self.emit("Expand", [ins[1], self.new_const("shape", shape)], outs)

    def _op_BROADCAST_TO(self, op, ins, outs):
        self._need(ins, 2)
        shape = self.const(ins[1], "shape").astype(np.int64).reshape(-1)
        self.emit("Expand", [ins[0], self.new_const("shape", shape)], outs)

    def _arg(self, op, ins, outs, onnx_op: str):
        self._need(ins, 2)
        axis = int(self.const(ins[1], "axis").reshape(-1)[0])
        out_dtype = self.ty(outs[0]).dtype
        if out_dtype not in ("int32", "int64"):
            raise UnsupportedError(f"{self.op_label}: {out_dtype} output")
        target = outs[0] if out_dtype == "int64" else self.tmp("index")
        self.emit(onnx_op, ins[:1], [target], "index" if target != outs[0] else "",
                  axis=axis, keepdims=0, select_last_index=0)
        if target != outs[0]:
            self.emit("Cast", [target], outs, to=6)   # ONNX INT32

    def _op_ARG_MAX(self, op, ins, outs):
        self._arg(op, ins, outs, "ArgMax")

    def _op_ARG_MIN(self, op, ins, outs):
        self._arg(op, ins, outs, "ArgMin")

    def _axis(self, axis: int, rank: int) -> int:
        if not -rank <= axis < rank:
            raise ModelError(f"{self.op_label}: axis {axis} out of range for rank {rank}")
        return axis % rank

    def _op_PACK(self, op, ins, outs):
        if not ins or not all(ins):
            raise ModelError(f"{self.op_label}: expects inputs")
        out_shape = self.ty(outs[0]).shape
        axis = self._axis(int(op.options.get("Axis", 0)), len(out_shape))
        parts = []
        for k, x in enumerate(ins):
            part = self.tmp(f"expanded_{k}")
            self.emit("Unsqueeze", [x, self.new_const(f"axes_{k}", np.array([axis], np.int64))],
                      [part], f"expanded_{k}")
            parts.append(part)
        self.emit("Concat", parts, outs, axis=axis)

    def _op_UNPACK(self, op, ins, outs):
        self._need(ins, 1)
        shape = self.ty(ins[0]).shape
        axis = self._axis(int(op.options.get("Axis", 0)), len(shape))
        if shape[axis] != len(outs):
            raise ShapeError(f"{self.op_label}: {len(outs)} outputs for dim {shape[axis]}")
        parts = [self.tmp(f"part_{k}") for k in range(len(outs))]
        self.emit("Split", [ins[0], self.new_const("split", np.ones(len(outs), np.int64))],
                  parts, "split", axis=axis)
        for k, (part, out) in enumerate(zip(parts, outs)):
            self.emit("Squeeze", [part, self.new_const(f"axes_{k}", np.array([axis], np.int64))],
                      [out], f"squeeze_{k}")

    def _split(self, x: str, axis_tensor: str, sizes: np.ndarray | None, outs):
        shape = self.ty(x).shape
        axis = self._axis(int(self.const(axis_tensor, "axis").reshape(-1)[0]), len(shape))
        if sizes is None:
            if shape[axis] % len(outs):
                raise ShapeError(f"{self.op_label}: dim {shape[axis]} does not split in "
                                 f"{len(outs)}")
            sizes = np.full(len(outs), shape[axis] // len(outs), np.int64)
        sizes = sizes.astype(np.int64).reshape(-1)
        if (sizes == -1).sum() == 1:
            sizes[sizes == -1] = shape[axis] - sizes[sizes != -1].sum()
        if sizes.size != len(outs) or np.any(sizes < 0) or sizes.sum() != shape[axis]:
            raise ShapeError(f"{self.op_label}: sizes {sizes.tolist()} do not split dim "
                             f"{shape[axis]} into {len(outs)}")
        self.emit("Split", [x, self.new_const("split", sizes)], outs, axis=axis)

    def _op_SPLIT(self, op, ins, outs):
        self._need(ins, 2)
        self._split(ins[1], ins[0], None, outs)

    def _op_MIRROR_PAD(self, op, ins, outs):
        self._need(ins, 2)
        paddings = self.const(ins[1], "paddings").astype(np.int64).reshape(-1, 2)
        if int(op.options.get("Mode", 0)) == 0:   # REFLECT
            pads = np.concatenate([paddings[:, 0], paddings[:, 1]])
            self.emit("Pad", [ins[0], self.new_const("pads", pads)], outs, mode="reflect")
            return
        # SYMMETRIC repeats the edge element: the mirrored slices, concatenated
        x = ins[0]
        shape = self.ty(x).shape
        for axis, (before, after) in enumerate(paddings.tolist()):
            if not before and not after:
                continue
            if before > shape[axis] or after > shape[axis]:
                raise ShapeError(f"{self.op_label}: pads {before},{after} exceed dim "
                                 f"{shape[axis]}")
            pieces = []
            if before:
                pieces.append(self._mirror(x, axis, before - 1, -shape[axis] - 1, f"b{axis}"))
            pieces.append(x)
            if after:
                pieces.append(self._mirror(x, axis, shape[axis] - 1, shape[axis] - after - 1,
                                           f"a{axis}"))
            last = axis == max(a for a, p in enumerate(paddings.tolist()) if any(p))
            y = outs[0] if last else self.tmp(f"padded_{axis}")
            self.emit("Concat", pieces, [y], f"concat_{axis}" if not last else "", axis=axis)
            x = y
            shape = tuple(s + (before + after if k == axis else 0) for k, s in enumerate(shape))

    def _mirror(self, x: str, axis: int, start: int, end: int, tag: str) -> str:
        """x[start:end:-1] along axis."""
        out = self.tmp(f"mirror_{tag}")
        consts = [self.new_const(f"{tag}_{k}", np.array([v], np.int64))
                  for k, v in (("starts", start), ("ends", end), ("axes", axis), ("steps", -1))]
        self.emit("Slice", [x, *consts], [out], f"mirror_{tag}")
        return out

    def _space_depth(self, op, ins, outs, onnx_op: str):
        self._need(ins, 1)
        block = int(op.options.get("BlockSize", 0))
        if block <= 0:
            raise ModelError(f"{self.op_label}: block size {block}")
        extra = {"mode": "DCR"} if onnx_op == "DepthToSpace" else {}
        self.emit(onnx_op, ins[:1], outs, blocksize=block, layout="NHWC", **extra)

    def _op_DEPTH_TO_SPACE(self, op, ins, outs):
        self._space_depth(op, ins, outs, "DepthToSpace")

    def _op_SPACE_TO_DEPTH(self, op, ins, outs):
        self._space_depth(op, ins, outs, "SpaceToDepth")

    def _op_GATHER_ND(self, op, ins, outs):
        self._need(ins, 2)
        self.emit("GatherND", ins[:2], outs, batch_dims=0)

    def _op_BATCH_MATMUL(self, op, ins, outs):
        self._need(ins, 2)
        o = op.options
        a, b = ins[0], ins[1]
        for flag, name, tag in (("AdjX", "a", "adj_x"), ("AdjY", "b", "adj_y")):
            if o.get(flag):
                src = a if name == "a" else b
                rank = len(self.ty(src).shape)
                perm = tuple(range(rank - 2)) + (rank - 1, rank - 2)
                t = self.tmp(tag)
                self.emit("Transpose", [src], [t], tag, perm=perm)
                a, b = (t, b) if name == "a" else (a, t)
        if not self._is_int(ins[0]):
            self.emit("MatMul", [a, b], outs)
            return
        if self.ty(ins[0]).dtype == "int16":   # int64 sums (aot/ops/quant/tflite_int16.py)
            self.emit("tfl.batch_matmul_int16", [a, b], outs)
            return
        # int8: the exact int32 sums of (a - zp_a)(b - zp_b), then TFLM's
        # requantization by s_a s_b / s_out (double)
        for t in (ins[0], ins[1], outs[0]):
            self._same_int8(t, outs[0])
        qa, qb = self.ty(ins[0]).quant, self.ty(ins[1]).quant
        acc = self.tmp("sums")
        self.types[acc] = TensorType(self.ty(outs[0]).shape, "int32",
                                     Quant((qa.scale[0] * qb.scale[0],), (0,)))
        zps = [self.new_const(f"zero_point_{k}", np.array(q.zero_point[0], np.int8))
               for k, q in enumerate((qa, qb))]
        self.emit("MatMulInteger", [a, b, *zps], [acc], "sums")
        self.emit("tfl.quantize", [acc], outs, dtype="int8")

    def _op_DIV(self, op, ins, outs):
        self._need(ins, 2)
        if self._is_int(ins[0]):
            for t in (ins[0], ins[1], outs[0]):
                self._same_int8(t, t)
            lo, hi = self._act(op.options, outs[0])
            self.emit("tfl.div", ins[:2], outs, act_min=lo, act_max=hi)
            return
        self._float_only(ins)
        pre = self._with_act(op.options, outs[0])
        self.emit("Div", ins[:2], [pre])
        self._finish_act(op.options, pre, outs[0])

    # -- float elementwise, comparisons, reductions

    def _float_elementwise(self, op, ins, outs):
        if op.code in _ONNX_UNARY:
            self._need(ins, 1)
            n = 1
        else:
            self._need(ins, 2)
            n = 2
        if op.code in _COMPARISONS and self._int8_compare(op, ins, outs):
            return
        if self._is_int(ins[0]):
            if op.code not in _RAW_INT8:
                raise UnsupportedError(f"{self.op_label}: {self.ty(ins[0]).dtype} {op.code} "
                                       "is not supported yet")
            for t in (*ins[:n], outs[0]):
                self._same_int8(t, outs[0], dtypes=("int8", "int16"))
            if any(self.ty(t).quant != self.ty(outs[0]).quant for t in ins[:n]):
                raise UnsupportedError(f"{self.op_label}: {self.ty(ins[0]).dtype} {op.code} "
                                       "with inputs "
                                       "quantized unlike the output is not supported yet")
        onnx_op = _ONNX_UNARY.get(op.code) or _ONNX_BINARY[op.code]
        self.emit(onnx_op, ins[:n], outs, **({"alpha": 1.0} if onnx_op == "Elu" else {}))

    def _op_NOT_EQUAL(self, op, ins, outs):
        if self._int8_compare(op, ins, outs):
            return
        self._float_only(ins)
        eq = self.tmp("equal")
        self.emit("Equal", ins[:2], [eq], "equal")
        self.emit("Not", [eq], outs)

    def _int8_compare(self, op, ins, outs) -> bool:
        """int8 comparisons: TFLM rescales both sides first (tfl.compare)."""
        self._need(ins, 2)
        if not self._is_int(ins[0]):
            return False
        for t in ins[:2]:
            self._same_int8(t, t)
        self.emit("tfl.compare", ins[:2], outs, comparison=op.code)
        return True

    def _op_SQUARE(self, op, ins, outs):
        self._float_only(ins)
        self.emit("Mul", [ins[0], ins[0]], outs)

    def _op_FLOOR_DIV(self, op, ins, outs):
        self._need(ins, 2)
        if self.ty(ins[0]).dtype != "float32":
            raise UnsupportedError(f"{self.op_label}: {self.ty(ins[0]).dtype} FLOOR_DIV is "
                                   "not supported yet")
        q = self.tmp("quotient")
        self.emit("Div", ins[:2], [q], "quotient")
        self.emit("Floor", [q], outs)

    def _op_FLOOR_MOD(self, op, ins, outs):
        # fmod, then + y where it is nonzero and its sign differs from y's
        self._need(ins, 2)
        if self.ty(ins[0]).dtype != "float32":
            raise UnsupportedError(f"{self.op_label}: {self.ty(ins[0]).dtype} FLOOR_MOD is "
                                   "not supported yet")
        x, y = ins[0], ins[1]
        zero = self.new_const("zero", np.array(0.0, np.float32))
        t = {k: self.tmp(k) for k in ("fmod", "y_negative", "fmod_negative", "signs_differ",
                                      "fmod_zero", "fmod_nonzero", "adjust", "shifted")}
        self.emit("Mod", [x, y], [t["fmod"]], "fmod", fmod=1)
        self.emit("Less", [y, zero], [t["y_negative"]], "y_negative")
        self.emit("Less", [t["fmod"], zero], [t["fmod_negative"]], "fmod_negative")
        self.emit("Xor", [t["y_negative"], t["fmod_negative"]], [t["signs_differ"]],
                  "signs_differ")
        self.emit("Equal", [t["fmod"], zero], [t["fmod_zero"]], "fmod_zero")
        self.emit("Not", [t["fmod_zero"]], [t["fmod_nonzero"]], "fmod_nonzero")
        self.emit("And", [t["signs_differ"], t["fmod_nonzero"]], [t["adjust"]], "adjust")
        self.emit("Add", [t["fmod"], y], [t["shifted"]], "shifted")
        self.emit("Where", [t["adjust"], t["shifted"], t["fmod"]], outs)

    def _op_ADD_N(self, op, ins, outs):
        self._need(ins, 1)
        if self._is_int(ins[0]):
            self._same_int8(ins[0], outs[0])
            self.emit("tfl.add_n", [i for i in ins if i], outs)
            return
        self._float_only(ins)
        self.emit("Sum", [i for i in ins if i], outs)

    def _op_SELECT_V2(self, op, ins, outs):
        self._need(ins, 3)
        self.emit("Where", ins[:3], outs)

    def _reduce(self, op, ins, outs):
        self._need(ins, 2)
        if self._is_int(ins[0]) and op.code == "SUM":   # MEAN's kernel, no division
            self._same_int8(ins[0], outs[0], dtypes=("int8", "int16"))
            axes = self.const(ins[1], "axes").astype(np.int64).reshape(-1)
            self.emit(self._int_op("tfl.mean", ins[0]), [ins[0], self.new_const("axes", axes)],
                      outs,
                      keep_dims=bool(op.options.get("KeepDims", False)), sum=True)
            return
        if self._is_int(ins[0]):   # MAX and MIN on the raw values, one quantization
            if self.ty(ins[0]).quant != self.ty(outs[0]).quant:
                raise UnsupportedError(f"{self.op_label}: int8 {op.code} with inputs "
                                       "quantized unlike the output is not supported yet")
            self._same_int8(ins[0], outs[0])
        axes = self.const(ins[1], "axes").astype(np.int64).reshape(-1)
        self.emit(_ONNX_REDUCE[op.code], [ins[0], self.new_const("axes", axes)], outs,
                  keepdims=int(bool(op.options.get("KeepDims", False))))

    _op_SUM = _op_REDUCE_MAX = _op_REDUCE_MIN = _reduce

    def _op_L2_POOL_2D(self, op, ins, outs):
        # sqrt of the mean of squares over the in-image taps
        self._float_only(ins)
        o = op.options
        strides = self._strides(o)
        kernel = (int(o["FilterHeight"]), int(o["FilterWidth"]))
        if min(kernel) <= 0:
            raise ModelError(f"{self.op_label}: filter {kernel[0]}x{kernel[1]}")
        pads = self._pads(o, ins[0], kernel, strides, (1, 1))
        squares, mean = self.tmp("squares"), self.tmp("mean_of_squares")
        self.emit("Mul", [ins[0], ins[0]], [squares], "squares")
        self.emit("AveragePool", [squares], [mean], "mean_of_squares", layout="NHWC",
                  kernel_shape=kernel, strides=strides, pads=pads, count_include_pad=0)
        pre = self._with_act(o, outs[0])
        self.emit("Sqrt", [mean], [pre])
        self._finish_act(o, pre, outs[0])

    # -- indexing and types

    def _op_GATHER(self, op, ins, outs):
        self._need(ins, 2)
        if int(op.options.get("BatchDims", 0)):
            raise UnsupportedError(f"{self.op_label}: GATHER with batch_dims is not "
                                   "supported yet")
        self.emit("Gather", ins[:2], outs, axis=int(op.options.get("Axis", 0)))

    def _op_EMBEDDING_LOOKUP(self, op, ins, outs):
        self._need(ins, 2)
        self.emit("Gather", [ins[1], ins[0]], outs, axis=0)

    def _op_SLICE(self, op, ins, outs):
        self._need(ins, 3)
        shape = self.ty(ins[0]).shape
        begin = self.const(ins[1], "begin").astype(np.int64).reshape(-1)
        size = self.const(ins[2], "size").astype(np.int64).reshape(-1)
        if not begin.size == size.size == len(shape):
            raise ShapeError(f"{self.op_label}: begin/size for rank {len(shape)}")
        end = np.where(size == -1, np.array(shape, np.int64), begin + size)
        self.emit("Slice", [ins[0], self.new_const("starts", begin),
                            self.new_const("ends", end)], outs)

    def _op_REVERSE_V2(self, op, ins, outs):
        self._need(ins, 2)
        shape = self.ty(ins[0]).shape
        axes = sorted({self._axis(int(a), len(shape))
                       for a in self.const(ins[1], "axis").reshape(-1)})
        n = len(axes)
        big = np.iinfo(np.int64).min
        self.emit("Slice", [ins[0], self.new_const("starts", np.full(n, -1, np.int64)),
                            self.new_const("ends", np.full(n, big, np.int64)),
                            self.new_const("axes", np.array(axes, np.int64)),
                            self.new_const("steps", np.full(n, -1, np.int64))], outs)

    def _op_CAST(self, op, ins, outs):
        self._need(ins, 1)
        if self._is_int(outs[0]):
            raise UnsupportedError(f"{self.op_label}: CAST to {self.ty(outs[0]).dtype} is "
                                   "not supported yet")
        # from int8, TFLM converts the raw values (no dequantization), as Cast does
        to = _ONNX_DTYPES.get(self.ty(outs[0]).dtype)
        if to is None:
            raise UnsupportedError(f"{self.op_label}: CAST to {self.ty(outs[0]).dtype}")
        self.emit("Cast", ins[:1], outs, to=to)

    def _op_SHAPE(self, op, ins, outs):
        self._need(ins, 1)
        shape = np.array(self.ty(ins[0]).shape, dtype=self.ty(outs[0]).dtype)
        self._fold(outs[0], shape)

    # -- transpose conv, cumsum, broadcast args, reduce all

    def _op_TRANSPOSE_CONV(self, op, ins, outs):
        # inputs: output shape, weight [O, KH, KW, I], x, bias?
        self._need(ins, 3)
        o = op.options
        x, w = ins[2], self._float_weight(ins[1])
        bias = ins[3] if len(ins) > 3 else ""
        out_shape = tuple(int(v) for v in self.const(ins[0], "output_shape").reshape(-1))
        wshape, xshape = self.ty(ins[1]).shape, self.ty(x).shape
        if len(wshape) != 4 or len(xshape) != 4 or out_shape != self.ty(outs[0]).shape:
            raise ShapeError(f"{self.op_label}: weight {list(wshape)}, input {list(xshape)}, "
                             f"output shape {list(out_shape)}")
        strides = self._strides(o)
        padding = _PADDING_MODES.get(o["Padding"])
        if padding is None:
            raise UnsupportedError(f"{self.op_label}: padding mode {o['Padding']}")
        begin, end = [], []
        for k in range(2):   # TFLite pads as the conv from the output back to the input
            _, before, _ = qmath.compute_padding(out_shape[1 + k], wshape[1 + k], strides[k], 1,
                                                 padding)
            full = strides[k] * (xshape[1 + k] - 1) + wshape[1 + k]
            begin.append(before)
            end.append(full - out_shape[1 + k] - before)
        if min(end) < 0:
            raise ShapeError(f"{self.op_label}: output shape {list(out_shape)} is larger than "
                             "the transposed convolution gives")
        if self._is_int(x):
            self._int8_transpose_conv(x, ins[1], bias, outs, strides, begin, end, o)
            return
        if w in self.constants:
            w_ihwo = self.new_const("weight_ihwo",
                                    np.ascontiguousarray(self.constants[w].transpose(3, 1, 2, 0)))
        else:
            w_ihwo = self.tmp("weight_ihwo")
            self.emit("Transpose", [w], [w_ihwo], "weight_ihwo", perm=(3, 1, 2, 0))
        pre = self._with_act(o, outs[0])
        self.emit("ConvTranspose", [x, w_ihwo, bias], [pre], layout="NHWC",
                  kernel_shape=tuple(wshape[1:3]), strides=strides,
                  pads=tuple(begin + end))
        self._finish_act(o, pre, outs[0])

    def _int8_transpose_conv(self, x, w, bias, outs, strides, begin, end, o) -> None:
        """The transposed conv as TFLM's integer conv over the input spread out
        by the strides (the gaps at the input zero point, adding nothing),
        with the kernel flipped: the same exact sums, requantized per channel."""
        wq = self.const(w, "weight")
        kernel = wq.shape[1:3]
        n, h, wd, c = self.ty(x).shape
        zp = self.ty(x).quant.zero_point[0]
        spread = x
        if strides != (1, 1):
            sh, sw = strides
            steps = [self.tmp(f"spread_{k}") for k in range(3)]
            self.emit("Reshape", [x, self.new_const("gaps_shape",
                                                    np.array([n, h, 1, wd, 1, c], np.int64))],
                      [steps[0]], "gaps")
            pads = np.zeros(12, np.int64)
            pads[6 + 2], pads[6 + 4] = sh - 1, sw - 1
            self.emit("Pad", [steps[0], self.new_const("gap_pads", pads),
                              self.new_const("gap_value", np.array(zp, self.ty(x).dtype))],
                      [steps[1]], "fill_gaps", mode="constant")
            self.emit("Reshape", [steps[1], self.new_const(
                "spread_shape", np.array([n, h * sh, wd * sw, c], np.int64))], [steps[2]],
                "spread")
            spread = self.tmp("spread")
            self.emit("Slice", [steps[2], self.new_const("starts", np.zeros(2, np.int64)),
                                self.new_const("ends", np.array([(h - 1) * sh + 1,
                                                                 (wd - 1) * sw + 1], np.int64)),
                                self.new_const("axes", np.array([1, 2], np.int64))],
                      [spread], "trim")
        flipped = self.new_const("weight_flipped", np.ascontiguousarray(wq[:, ::-1, ::-1, :]))
        self.types[flipped] = TensorType(wq.shape, "int8", self.ty(w).quant)
        # the full transposed output is the conv over pads of K - 1; TFLite's crop
        # (begin, end) takes those pads back
        pads = (kernel[0] - 1 - begin[0], kernel[1] - 1 - begin[1],
                kernel[0] - 1 - end[0], kernel[1] - 1 - end[1])
        if min(pads) < 0:
            raise ShapeError(f"{self.op_label}: padding {begin}, {end} beyond the kernel")
        if self.ty(x).dtype == "int16" and bias and self.ty(bias).dtype != "int64":
            # tflite-micro reads it as int64 whatever its type: garbage, not a result
            raise UnsupportedError(f"{self.op_label}: {self.ty(bias).dtype} bias on int16 "
                                   "activations (tflite-micro's int16 TRANSPOSE_CONV reads int64)")
        lo, hi = self._act(o, outs[0])
        self._check_requant(x, w, outs[0])
        self.emit(self._int_op("tfl.conv2d", x), [spread, flipped, bias], outs, strides=(1, 1),
                  dilations=(1, 1), pads=pads, act_min=lo, act_max=hi)

    def _op_CUMSUM(self, op, ins, outs):
        # float: a product with a triangular 0/1 matrix along the axis
        self._need(ins, 2)
        shape = self.ty(ins[0]).shape
        axis = self._axis(int(self.const(ins[1], "axis").reshape(-1)[0]), len(shape))
        n = shape[axis]
        exclusive, reverse = bool(op.options.get("Exclusive")), bool(op.options.get("Reverse"))
        if self._is_int(ins[0]):
            self._same_int8(ins[0], outs[0])
            self.emit("tfl.cumsum", ins[:1], outs, axis=axis, exclusive=exclusive,
                      reverse=reverse)
            return
        self._float_only(ins)
        i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")   # out[j] += x[i]
        take = (i > j if exclusive else i >= j) if reverse else (i < j if exclusive else i <= j)
        tri = self.new_const("triangle", take.astype(np.float32))
        last = len(shape) - 1
        if axis == last:
            self.emit("MatMul", [ins[0], tri], outs)
            return
        perm = tuple(k for k in range(len(shape)) if k != axis) + (axis,)
        inverse = tuple(int(v) for v in np.argsort(perm))
        moved, summed = self.tmp("moved"), self.tmp("summed")
        self.emit("Transpose", ins[:1], [moved], "move", perm=perm)
        self.emit("MatMul", [moved, tri], [summed], "sum")
        self.emit("Transpose", [summed], outs, "back", perm=inverse)

    def _op_DYNAMIC_UPDATE_SLICE(self, op, ins, outs):
        # constant start indices: the update padded out to the operand's shape,
        # chosen inside its box (TFLite clamps the box into the operand)
        self._need(ins, 3)
        operand, update = ins[0], ins[1]
        if ins[2] not in self.constants:
            raise UnsupportedError(f"{self.op_label}: DYNAMIC_UPDATE_SLICE with run-time start "
                                   "indices is not supported yet")
        shape, ushape = self.ty(operand).shape, self.ty(update).shape
        start = self.constants[ins[2]].astype(np.int64).reshape(-1)
        if len(ushape) != len(shape) or start.size != len(shape) or any(
                u > d for u, d in zip(ushape, shape)):
            raise ShapeError(f"{self.op_label}: update {list(ushape)} at {start.tolist()} "
                             f"into {list(shape)}")
        start = np.clip(start, 0, np.array(shape) - np.array(ushape))
        after = np.array(shape) - np.array(ushape) - start
        inside = np.zeros(shape, bool)
        inside[tuple(slice(b, b + u) for b, u in zip(start, ushape))] = True
        padded = self.tmp("padded_update")
        fill = np.array(0, self.ty(update).dtype)
        self.emit("Pad", [update, self.new_const("pads", np.concatenate([start, after])),
                          self.new_const("fill", fill)], [padded], "pad", mode="constant")
        self.emit("Where", [self.new_const("inside", inside), padded, operand], outs)

    def _op_SVDF(self, op, ins, outs):
        """Float SVDF: the state (a variable, [batch, filters * memory]) shifts
        one step left, the input's feature projection enters at the end, each
        filter's time weights reduce it, rank filters sum to a unit."""
        self._need(ins, 3)
        ins = list(ins) + [""] * (5 - len(ins))
        x, w_feature, w_time, bias, state = ins[:5]
        if state not in self.variables:
            raise UnsupportedError(f"{self.op_label}: SVDF state '{state}' must be a variable "
                                   "tensor")
        (batch, _), (filters, memory) = self.ty(x).shape, self.ty(w_time).shape
        rank = int(op.options.get("Rank", 1))
        if rank < 1 or filters % rank or self.ty(state).shape != (batch, filters * memory):
            raise ShapeError(f"{self.op_label}: rank {rank}, {filters} filters, memory "
                             f"{memory}, state {list(self.ty(state).shape)}")
        if self._is_int(x):
            self._int8_svdf(ins[:5], outs, batch, filters, memory, rank)
            return
        if self.ty(w_feature).dtype != "float32":
            raise UnsupportedError(f"{self.op_label}: hybrid SVDF is not supported yet")
        t = {k: self.tmp(k) for k in ("feature", "feature_3d", "state_3d", "kept", "new_state_3d",
                                       "weighted", "per_filter", "per_unit_rank", "units",
                                       "new_state")}
        c = self.new_const
        self.emit("Gemm", [x, w_feature], [t["feature"]], "feature", transB=1)
        self.emit("Reshape", [t["feature"], c("feature_shape", np.array([batch, filters, 1]))],
                  [t["feature_3d"]], "feature_3d")
        if memory > 1:
            self.emit("Reshape", [state, c("state_shape", np.array([batch, filters, memory]))],
                      [t["state_3d"]], "state_3d")
            self.emit("Slice", [t["state_3d"], c("starts", np.array([1])),
                                c("ends", np.array([memory])), c("axes", np.array([2]))],
                      [t["kept"]], "shift")
            self.emit("Concat", [t["kept"], t["feature_3d"]], [t["new_state_3d"]], "append",
                      axis=2)
            new3 = t["new_state_3d"]
        else:
            new3 = t["feature_3d"]
        self.emit("Mul", [new3, w_time], [t["weighted"]], "time_weights")
        self.emit("ReduceSum", [t["weighted"], c("time_axis", np.array([2]))],
                  [t["per_filter"]], "per_filter", keepdims=0)
        self.emit("Reshape", [t["per_filter"], c("unit_shape",
                                                 np.array([batch, filters // rank, rank]))],
                  [t["per_unit_rank"]], "per_unit_rank")
        pre = self._with_act(op.options, outs[0])
        summed = t["units"] if bias else pre
        self.emit("ReduceSum", [t["per_unit_rank"], c("rank_axis", np.array([2]))], [summed],
                  "units", keepdims=0)
        if bias:
            self.emit("Add", [summed, bias], [pre], "bias")
        self._finish_act(op.options, pre, outs[0])
        self.emit("Reshape", [new3, c("flat_state", np.array([batch, filters * memory]))],
                  [t["new_state"]], "new_state")
        self.updates[state] = t["new_state"]

    def _int8_svdf(self, ins, outs, batch, filters, memory, rank) -> None:
        """TFLM's integer SVDF: int8 input and feature weights, int16 state and
        time weights, int32 bias. The feature sums requantized into the int16
        state by s_in s_wf / s_state, the time sums (int32) plus bias by
        s_state s_wt / s_out; TFLM applies no fused activation here."""
        x, w_feature, w_time, bias, state = ins
        types = [self.ty(t) for t in (x, w_feature, w_time, state, outs[0])]
        want = ("int8", "int8", "int16", "int16", "int8")
        if tuple(t.dtype for t in types) != want or any(
                t.quant is None or len(t.quant.scale) != 1 for t in types):
            raise UnsupportedError(f"{self.op_label}: integer SVDF needs int8 input, feature "
                                   "weights and output, int16 time weights and state, "
                                   "per-tensor quantized")
        qx, qf, qt, qs = (t.quant for t in types[:4])
        c = self.new_const
        t = {k: self.tmp(k) for k in ("feature_sums", "feature", "feature_3d", "state_3d",
                                       "kept", "new_state_3d", "state_i32", "time_i32",
                                       "weighted", "per_filter", "per_unit_rank", "units",
                                       "biased", "new_state")}
        self.types[t["feature_sums"]] = TensorType((batch, filters), "int32",
                                                   Quant((qx.scale[0] * qf.scale[0],), (0,)))
        self.types[t["feature"]] = TensorType((batch, filters), "int16", qs)
        wf_t = c("weights_feature_t", np.ascontiguousarray(self.const(w_feature, "weights").T))
        self.emit("MatMulInteger", [x, wf_t, c("input_zero_point",
                                               np.array(qx.zero_point[0], np.int8)),
                                    c("weight_zero_point", np.array(0, np.int8))],
                  [t["feature_sums"]], "feature_sums")
        self.emit("tfl.quantize", [t["feature_sums"]], [t["feature"]], "feature", dtype="int16")
        self.emit("Reshape", [t["feature"], c("feature_shape", np.array([batch, filters, 1]))],
                  [t["feature_3d"]], "feature_3d")
        new3 = t["feature_3d"]
        if memory > 1:
            self.emit("Reshape", [state, c("state_shape", np.array([batch, filters, memory]))],
                      [t["state_3d"]], "state_3d")
            self.emit("Slice", [t["state_3d"], c("starts", np.array([1])),
                                c("ends", np.array([memory])), c("axes", np.array([2]))],
                      [t["kept"]], "shift")
            self.emit("Concat", [t["kept"], t["feature_3d"]], [t["new_state_3d"]], "append",
                      axis=2)
            new3 = t["new_state_3d"]
        self.emit("Cast", [new3], [t["state_i32"]], "state_i32", to=6)
        self.emit("Cast", [w_time], [t["time_i32"]], "time_i32", to=6)
        self.emit("Mul", [t["state_i32"], t["time_i32"]], [t["weighted"]], "time_weights")
        self.emit("ReduceSum", [t["weighted"], c("time_axis", np.array([2]))],
                  [t["per_filter"]], "per_filter", keepdims=0)
        self.emit("Reshape", [t["per_filter"], c("unit_shape",
                                                 np.array([batch, filters // rank, rank]))],
                  [t["per_unit_rank"]], "per_unit_rank")
        acc = t["biased"] if bias else t["units"]
        self.types[acc] = TensorType((batch, filters // rank), "int32",
                                     Quant((qs.scale[0] * qt.scale[0],), (0,)))
        self.emit("ReduceSum", [t["per_unit_rank"], c("rank_axis", np.array([2]))],
                  [t["units"]], "units", keepdims=0)
        if bias:
            self.emit("Add", [t["units"], bias], [t["biased"]], "bias")
        self.emit("tfl.quantize", [acc], outs, dtype="int8")
        self.emit("Reshape", [new3, c("flat_state", np.array([batch, filters * memory]))],
                  [t["new_state"]], "new_state")
        self.updates[state] = t["new_state"]

    def _op_BROADCAST_ARGS(self, op, ins, outs):
        self._need(ins, 2)
        a, b = (tuple(int(v) for v in self.const(t, "shape").reshape(-1)) for t in ins[:2])
        try:
            shape = np.broadcast_shapes(a, b)
        except ValueError:
            raise ShapeError(f"{self.op_label}: shapes {list(a)} and {list(b)} do not "
                             "broadcast") from None
        self._fold(outs[0], np.array(shape, dtype=self.ty(outs[0]).dtype))

    def _op_REDUCE_ALL(self, op, ins, outs):
        self._need(ins, 2)
        axes = self.const(ins[1], "axes").astype(np.int64).reshape(-1)
        as_int, low = self.tmp("as_int"), self.tmp("minimum")
        self.emit("Cast", ins[:1], [as_int], "as_int", to=6)
        self.emit("ReduceMin", [as_int, self.new_const("axes", axes)], [low], "minimum",
                  keepdims=int(bool(op.options.get("KeepDims", False))))
        self.emit("Cast", [low], outs, to=9)

    # -- space <-> batch

    def _blocks(self, ins, what: str):
        x = ins[0]
        shape = self.ty(x).shape
        block = self.const(ins[1], "block_shape").astype(np.int64).reshape(-1)
        pads = self.const(ins[2], what).astype(np.int64).reshape(-1, 2)
        m = block.size
        if m < 1 or len(shape) < m + 1 or pads.shape[0] != m or np.any(block < 1) \
                or np.any(pads < 0):
            raise ShapeError(f"{self.op_label}: block shape {block.tolist()} and {what} "
                             f"{pads.tolist()} for input {list(shape)}")
        return x, shape, block.tolist(), pads

    def _op_SPACE_TO_BATCH_ND(self, op, ins, outs):
        # pad the spatial dims, split each into (dim / block, block), move the
        # block factors in front of the batch
        self._need(ins, 3)
        x, shape, block, pads = self._blocks(ins, "paddings")
        m, n, rest = len(block), shape[0], list(shape[1 + len(block):])
        padded = [d + int(p.sum()) for d, p in zip(shape[1:1 + m], pads)]
        if any(d % b for d, b in zip(padded, block)):
            raise ShapeError(f"{self.op_label}: padded dims {padded} not divisible by "
                             f"block {block}")
        if pads.any():
            full = np.zeros((len(shape), 2), np.int64)
            full[1:1 + m] = pads
            out_q = self.ty(outs[0]).quant
            fill = np.array(out_q.zero_point[0] if out_q is not None else 0,
                            self.ty(x).dtype)
            xp = self.tmp("padded")
            self.emit("Pad", [x, self.new_const("pads", full.T.reshape(-1)),
                              self.new_const("value", fill)], [xp], "pad", mode="constant")
            x = xp
        split = [n]
        for d, b in zip(padded, block):
            split += [d // b, b]
        split += rest
        perm = ([2 + 2 * k for k in range(m)] + [0] + [1 + 2 * k for k in range(m)]
                + list(range(1 + 2 * m, 1 + 2 * m + len(rest))))
        self._reshape_transpose_reshape(x, split, perm, outs[0])

    def _op_BATCH_TO_SPACE_ND(self, op, ins, outs):
        self._need(ins, 3)
        x, shape, block, crops = self._blocks(ins, "crops")
        m, rest = len(block), list(shape[1 + len(block):])
        prod = int(np.prod(block))
        if shape[0] % prod:
            raise ShapeError(f"{self.op_label}: batch {shape[0]} not divisible by {prod}")
        n = shape[0] // prod
        split = block + [n] + list(shape[1:1 + m]) + rest
        perm = [m] + [k for j in range(m) for k in (m + 1 + j, j)] + \
            list(range(1 + 2 * m, 1 + 2 * m + len(rest)))
        spatial = [d * b for d, b in zip(shape[1:1 + m], block)]
        if not crops.any():
            self._reshape_transpose_reshape(x, split, perm, outs[0])
            return
        joined = self.tmp("uncropped")
        self._reshape_transpose_reshape(x, split, perm, joined, [n] + spatial + rest)
        ends = [d - int(c[1]) for d, c in zip(spatial, crops)]
        self.emit("Slice", [joined, self.new_const("starts", crops[:, 0].copy()),
                            self.new_const("ends", np.array(ends, np.int64)),
                            self.new_const("axes", np.arange(1, 1 + m, dtype=np.int64))],
                  outs, "crop")

    def _reshape_transpose_reshape(self, x: str, split, perm, out: str, final=None) -> None:
        a, b = self.tmp("blocks"), self.tmp("moved")
        self.emit("Reshape", [x, self.new_const("split_shape", np.array(split, np.int64))],
                  [a], "split")
        self.emit("Transpose", [a], [b], "move", perm=tuple(perm))
        final = self.ty(out).shape if final is None else final
        self.emit("Reshape", [b, self.new_const("joined_shape", np.array(final, np.int64))],
                  [out], "join")

    # -- helpers

    def _same_int8(self, x: str, out: str, what: str = "input",
                   dtypes: tuple[str, ...] = ("int8",)) -> None:
        """x and out per-tensor quantized, of one of `dtypes` (an op's int16
        form, where aot has one, is in aot/ops/quant/tflite_int16.py)."""
        for t in (x, out):
            ty = self.ty(t)
            if ty.dtype not in dtypes or ty.quant is None or len(ty.quant.scale) != 1:
                raise UnsupportedError(f"{self.op_label}: {what} '{t}' of type {ty.dtype} "
                                       f"({' or '.join(dtypes)} per-tensor quantized "
                                       "supported)")


for _code in (*_ONNX_UNARY, *_ONNX_BINARY):
    if f"_op_{_code}" in vars(TFLMOps):
        continue
    setattr(TFLMOps, f"_op_{_code}", TFLMOps._float_elementwise)

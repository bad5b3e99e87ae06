"""TFLite importer: a .tflite flatbuffer in, a Graph out.

Two stages. `decode` (schema.py) reads the flatbuffer into plain Python
values; the bindings read lazily and a corrupt file makes them fail with arbitrary
exceptions (IndexError, struct.error, ...), so all reading happens there,
under one handler that turns any failure into a ModelError. `_Builder` then
maps the decoded operators onto ops:

- integer kernels (int8 activations) -> `tfl.*` ops with TFLite's exact
  arithmetic, explicit pads and the fused activation as an int clamp;
- float kernels -> the ONNX-named float ops (Conv NHWC, Gemm, ...), so the
  float path is shared with the ONNX importer;
- data movement (RESHAPE, CONCATENATION, PAD, ...) -> ONNX ops, which pass
  quantization through.

The first subgraph is the model. The others are IF branches and WHILE
conditions and bodies, inlined where they are called
(aot/frontend/tflite/control.py), and CALL_ONCE initializers of resource
variables (aot/frontend/tflite/vars.py).
"""
from __future__ import annotations

from typing import Iterator, Mapping, Sequence

import numpy as np

from aot.errors import AotError, ModelError, ShapeError, UnsupportedError
from aot.frontend.tflite.control import ControlFlowOps, Evaluator, Inlining, Work, walk
from aot.frontend.tflite.mediapipe import MediaPipeOps
from aot.frontend.tflite.ops import TFLMOps
from aot.frontend.tflite.schema import (DTYPE_NAMES, DTYPES, Model, Op, Tensor, decode,
                                        unique_names)
from aot.frontend.tflite.sparse import SparseSpec, densify
from aot.frontend.tflite.vars import RESOURCE, VariableOps
from aot.ir.graph import Graph, Node, Quant, TensorType
from aot.limits import check_shape
from aot.ops.quant import qmath
from aot.ops.quant.tflite_int16 import INT16_OPS

_PADDING = {0: "SAME", 1: "VALID"}
_ACTIVATION = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6", 4: "TANH",
               5: "SIGN_BIT", 6: "SIGMOID"}

HYBRID_MODES = ("dequantize", "dynamic")


def import_tflite(data: bytes, name: str, hybrid: str = "dynamic",
                  input_shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    """Import a .tflite model (its first subgraph).

    A dimension the converter left open (-1 in an input's shape_signature, a
    batch of any size) is imported at the size its tensors are written with,
    1 for a batch; `input_shapes` (--input-shape) may restate that size, and
    another one is refused: every tensor of the model is written at it.

    hybrid: what a float CONV_2D with int8 weights (a dynamic-range model)
    becomes. "dynamic" (default): LiteRT's hybrid kernel, which quantizes the
    activations to int8 on the fly (`tfl.conv2d` on a float input); that is
    the model's meaning in LiteRT, the reference for float TFLite models.
    "dequantize": a float Conv on the dequantized weights (pure float math,
    the weights fold to float32); it differs from LiteRT by the activation
    quantization error (up to 0.08 in kws_dscnn's output probabilities).
    """
    if hybrid not in HYBRID_MODES:
        raise UnsupportedError(f"hybrid mode {hybrid!r} (expected one of {HYBRID_MODES})")
    data = bytes(data)
    try:
        model = decode(data)
    except AotError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of the bindings means a corrupt file
        raise ModelError(f"corrupt or truncated TFLite file ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else 'unreadable'})") from None
    graph = _Builder(model, name, hybrid).build()
    _check_open_dims(model, graph, input_shapes or {})
    return graph


def _check_open_dims(model: Model, graph: Graph,
                     input_shapes: Mapping[str, Sequence[int]]) -> None:
    """--input-shape may not resize a dimension the signature leaves open."""
    names = unique_names(model.tensors)
    tensors = {names[i]: model.tensors[i] for i in model.inputs}
    for name, given in input_shapes.items():
        t = tensors.get(name)
        if t is None or len(t.signature) != len(t.shape) or len(given) != len(t.shape):
            continue        # not an input, or a rank check_static reports
        for i, (d, g, sig) in enumerate(zip(t.shape, given, t.signature)):
            if sig < 0 and d != g:
                raise UnsupportedError(
                    f"--input-shape {name}: dimension {i} is open (-1) in the model's "
                    f"signature and its tensors are written at {d}; aot packages a TFLite model "
                    f"at that size, not {g} (run the package once per sample)")


def converted_builtins() -> list[str]:
    """The builtin operators the importer converts: its `_op_<BUILTIN>`
    methods (aot ops --format tflite)."""
    return sorted(attr[len("_op_"):] for attr in dir(_Builder)
                  if attr.startswith("_op_") and callable(getattr(_Builder, attr)))


# ------------------------------------------------------------------ building

class _Builder(VariableOps, ControlFlowOps, TFLMOps, MediaPipeOps):
    def __init__(self, model: Model, name: str, hybrid: str = "dynamic"):
        self.m = model
        self.name = name
        self.hybrid = hybrid
        self.names = unique_names(model.tensors)
        self.types: dict[str, TensorType] = {}
        self.constants: dict[str, np.ndarray] = {}
        self.variables: dict[str, np.ndarray] = {}
        self.updates: dict[str, str] = {}
        self.nodes: list[Node] = []
        self.node_names: set[str] = set()
        self.cur = ""   # the current operator's node name, for errors and derived names
        self.code = ""  # and its builtin op name
        self.inlining = Inlining()      # a subgraph's builder shares its caller's
        self.evaluator = Evaluator(self.nodes, self.types, self.constants)

    # -- tensors

    def tensor(self, i: int) -> str:
        """The graph name of tensor index i ('' for an absent optional input, -1)."""
        if i == -1:
            return ""
        if not 0 <= i < len(self.m.tensors):
            raise ModelError(f"corrupt TFLite file: tensor index {i} out of range "
                             f"(the subgraph has {len(self.m.tensors)} tensors)")
        return self.names[i]

    def _declare(self, i: int) -> None:
        t = self.m.tensors[i]
        name = self.names[i]
        if t.type_code == RESOURCE:  # a variable's handle: VAR_HANDLE gives it meaning
            return
        dtype = DTYPES.get(t.type_code)
        if dtype is None:
            raise UnsupportedError(f"tensor '{name}': TFLite type "
                                   f"{DTYPE_NAMES.get(t.type_code, t.type_code)} is not supported")
        shape = check_shape(t.shape, f"tensor '{name}'")
        # Only constants may carry scale 0 (tflite's converter gives unused
        # biases one); a computed tensor at scale 0 has no real values.
        constant = 0 < t.buffer < len(self.m.buffers) and len(self.m.buffers[t.buffer]) > 0
        self.types[name] = TensorType(shape, dtype, self._quant(t, name, shape, dtype, constant))
        if t.is_variable:
            self.variables[name] = self._initial_value(self.types[name])
            return
        if not 0 <= t.buffer < len(self.m.buffers):
            raise ModelError(f"corrupt TFLite file: tensor '{name}' uses buffer {t.buffer} "
                             f"of {len(self.m.buffers)}")
        raw = self.m.buffers[t.buffer] if t.buffer > 0 else b""
        if raw and t.sparsity is not None:
            self.constants[name] = self._sparse_array(raw, dtype, shape, name, t.sparsity)
        elif raw:
            self.constants[name] = self._array(raw, dtype, shape, name)

    @staticmethod
    def _quant(t: Tensor, name: str, shape, dtype: str, constant: bool) -> Quant | None:
        if t.quant is None:
            return None
        scales, zps, qdim = t.quant
        if np.dtype(dtype).kind in "iu" and zps.size:
            info = np.iinfo(dtype)
            if zps.min() < info.min or zps.max() > info.max:
                bad = zps.min() if zps.min() < info.min else zps.max()
                raise ModelError(f"tensor '{name}': zero point {bad} out of the {dtype} range")
        if zps.size != scales.size:
            if zps.size == 1:
                zps = np.full(scales.size, zps[0])
            else:
                raise ModelError(f"tensor '{name}': {scales.size} scales but {zps.size} zero points")
        if not np.all(np.isfinite(scales)) or np.any(scales < 0):
            raise ModelError(f"tensor '{name}': invalid quantization scale {scales.min()}")
        if scales.size == 1:
            if scales[0] == 0 and not constant:
                raise ModelError(f"tensor '{name}': quantization scale 0")
            return Quant((float(scales[0]),), (int(zps[0]),))
        # tflite-micro accepts per-channel params on 1-D tensors whatever
        # quantized_dimension says (person_detect's biases carry 3).
        if len(shape) == 1:
            axis = 0
        elif 0 <= qdim < len(shape):
            axis = qdim
        else:
            raise ModelError(f"tensor '{name}': quantized_dimension {qdim} out of range "
                             f"for shape {list(shape)}")
        if not shape or shape[axis] != scales.size:
            raise ModelError(f"tensor '{name}': {scales.size} scales along dimension {axis} "
                             f"of shape {list(shape)}")
        return Quant(tuple(float(s) for s in scales), tuple(int(z) for z in zps), axis)

    @staticmethod
    def _initial_value(ty: TensorType) -> np.ndarray:
        # tflite-micro resets variables to their zero point (int16 cell: 0).
        fill = ty.quant.zero_point[0] if ty.quant is not None and ty.dtype == "int8" else 0
        return np.full(ty.shape, fill, dtype=ty.dtype)

    @staticmethod
    def _array(raw: bytes, dtype: str, shape, name: str) -> np.ndarray:
        dt = np.dtype(dtype).newbyteorder("<")
        count = int(np.prod(shape, dtype=np.int64))
        if len(raw) != count * dt.itemsize:
            raise ModelError(f"tensor '{name}': buffer has {len(raw)} bytes, shape "
                             f"{list(shape)} of {dtype} needs {count * dt.itemsize}")
        return np.frombuffer(raw, dtype=dt).astype(dtype).reshape(shape)

    @staticmethod
    def _sparse_array(raw: bytes, dtype: str, shape, name: str, spec: SparseSpec) -> np.ndarray:
        dt = np.dtype(dtype).newbyteorder("<")
        if len(raw) % dt.itemsize:
            raise ModelError(f"tensor '{name}': sparse buffer of {len(raw)} bytes is not a "
                             f"whole number of {dtype} values")
        values = np.frombuffer(raw, dtype=dt).astype(dtype)
        return densify(values, spec, tuple(shape), name)

    def ty(self, name: str) -> TensorType:
        if name not in self.types:     # a resource handle (a variable's) has no tensor type
            raise ModelError(f"{self.op_label}: tensor '{name}' is a resource handle, "
                             f"not a tensor this op can read or write")
        return self.types[name]

    def const(self, name: str, what: str) -> np.ndarray:
        if name not in self.constants:
            raise UnsupportedError(f"{self.op_label}: {what} '{name}' must be a constant")
        return self.constants[name]

    def new_const(self, suffix: str, value: np.ndarray) -> str:
        name = f"{self.cur}/{suffix}"
        self.constants[name] = value
        self.types[name] = TensorType(tuple(int(d) for d in value.shape), value.dtype.name)
        return name

    def tmp(self, suffix: str) -> str:
        return f"{self.cur}/{suffix}"

    # -- nodes

    def emit(self, op: str, inputs, outputs, suffix: str = "", **attrs) -> None:
        name = self.cur + (f"/{suffix}" if suffix else "")
        self.inlining.spend()
        self.nodes.append(Node(op, name, tuple(inputs), tuple(outputs), attrs))

    @property
    def op_label(self) -> str:
        return f"{self.code} node '{self.cur}'"

    def build(self) -> Graph:
        m = self.m
        # Only tensors the graph uses: LSTM intermediates may have empty shapes.
        used = set(m.inputs) | set(m.outputs)
        for op in m.ops:
            used.update(op.inputs)
            used.update(op.outputs)
        for i in sorted(used - {-1}):
            self.tensor(i)  # range check
            self._declare(i)
        inputs = tuple(self.tensor(i) for i in m.inputs)
        outputs = tuple(self.tensor(i) for i in m.outputs)
        for what, names in (("input", inputs), ("output", outputs)):
            if len(set(names)) != len(names):
                raise ModelError(f"corrupt TFLite file: a subgraph {what} is listed twice "
                                 f"({', '.join(names)})")
        self.available = set(inputs) | set(self.constants) | set(self.variables)
        walk(self._convert_ops(m.ops))
        for o in outputs:
            if o in self.constants:
                raise UnsupportedError(f"model output '{o}' is a constant")
            if o not in self.available:
                raise ModelError(f"model output '{o}' is written by no operator")
        return Graph(self.name, tuple(i for i in inputs
                                      if i not in self.constants and i not in self.variables),
                     outputs, tuple(self.nodes), self.types, self.constants,
                     self.variables, self.updates)

    def _node_name(self, k: int, op: Op) -> str:
        base = self.names[op.outputs[0]] if op.outputs and 0 <= op.outputs[0] < len(self.names) \
            else f"op_{k}"
        if base in self.node_names:
            base = f"{base}_{k}"
        self.node_names.add(base)
        return base

    def _convert_ops(self, ops: Sequence[Op]) -> Work:
        """Converts `ops` in order; an IF or WHILE converter is a generator,
        handed to `walk` (control.py), which runs it before the next op."""
        for k, op in enumerate(ops):
            work = self._convert(k, op)
            if work is not None:
                yield work

    def _convert(self, k: int, op: Op) -> Iterator | None:
        self.cur = self._node_name(k, op)
        self.code = op.code
        custom = op.code.startswith("CUSTOM:")
        handler = (self.custom_converter(op.code[len("CUSTOM:"):], op.version) if custom
                   else getattr(self, f"_op_{op.code}", None))
        if handler is None:
            raise UnsupportedError(f"unsupported op '{op.code}' at node '{self.cur}'")
        ins = [self.tensor(i) for i in op.inputs]
        outs = [self.tensor(i) for i in op.outputs]
        if not outs and op.code not in ("CALL_ONCE", "ASSIGN_VARIABLE"):
            raise ModelError(f"{self.op_label}: operator has no outputs")
        if not all(outs):
            raise ModelError(f"{self.op_label}: output index -1 (only inputs may be absent)")
        for i in ins:
            if i and i not in self.available:
                raise ModelError(f"{self.op_label}: reads tensor '{i}' before any operator "
                                 "writes it")
        for o in outs:
            if o in self.available:
                raise ModelError(f"{self.op_label}: writes tensor '{o}', which is an input, "
                                 "a constant or already written")
        self.available.update(outs)
        return handler(op, ins, outs)

    def _need(self, ins, n: int) -> None:
        if len(ins) < n or any(not ins[i] for i in range(n)):
            raise ModelError(f"{self.op_label}: expects {n} inputs, has {len(ins)}")

    # -- shared helpers

    def _is_int(self, name: str) -> bool:
        return self.ty(name).dtype in ("int8", "uint8", "int16")

    def _int_op(self, op: str, x: str) -> str:
        """The integer kernel for input x: the int16-activation form where TFLM has one."""
        return INT16_OPS.get(op, op) if self.ty(x).dtype == "int16" else op

    def _act(self, opts, out: str) -> tuple[int, int]:
        act = _ACTIVATION.get(opts.get("FusedActivationFunction", 0), "?")
        if act not in ("NONE", "RELU", "RELU6", "RELU_N1_TO_1"):
            raise UnsupportedError(f"{self.op_label}: fused activation {act}")
        ty = self.ty(out)
        ranges = {"int8": (-128, 127), "int16": (-32768, 32767), "uint8": (0, 255)}
        if ty.dtype not in ranges:
            raise UnsupportedError(f"{self.op_label}: {ty.dtype} output '{out}' of an "
                                   "integer kernel")
        if ty.quant is None:
            raise UnsupportedError(f"{self.op_label}: output '{out}' has no quantization")
        lo, hi = ranges[ty.dtype]
        return qmath.activation_range(act, ty.quant.scale[0], ty.quant.zero_point[0], lo, hi)

    def _check_requant(self, x: str, w: str, out: str) -> None:
        """The kernel rescales its int32 sums by input scale x weight scale /
        output scale as a 31-bit fixed-point multiplier and a shift of at most
        31 bits: refuse scales that make it unrepresentable."""
        qs = [self.ty(t).quant for t in (x, w, out)]
        if any(q is None for q in qs):
            raise UnsupportedError(f"{self.op_label}: integer kernel without quantization "
                                   "on its input, weight or output")
        m = qs[0].scale[0] * np.asarray(qs[1].scale, np.float64) / qs[2].scale[0] \
            if qs[2].scale[0] > 0 else np.array([np.inf])
        if not np.all(np.isfinite(m)) or m.max() >= 2.0 ** 31:
            raise ModelError(f"{self.op_label}: requantization multiplier {m.max():g} "
                             "(input scale x weight scale / output scale) is out of range")

    def _float_act(self, opts, pre: str, out: str) -> None:
        """The fused activation of a float op as its own node: pre -> out."""
        act = _ACTIVATION.get(opts.get("FusedActivationFunction", 0), "?")
        if act == "NONE":
            self.emit("Identity", [pre], [out], "act")
        elif act == "RELU":
            self.emit("Relu", [pre], [out], "act")
        elif act in ("RELU6", "RELU_N1_TO_1"):
            lo, hi = (0.0, 6.0) if act == "RELU6" else (-1.0, 1.0)
            self.emit("Clip", [pre, self.new_const("min", np.array(lo, np.float32)),
                               self.new_const("max", np.array(hi, np.float32))], [out], "act")
        elif act == "TANH":
            self.emit("Tanh", [pre], [out], "act")
        elif act == "SIGMOID":
            self.emit("Sigmoid", [pre], [out], "act")
        else:
            raise UnsupportedError(f"{self.op_label}: fused activation {act}")

    def _with_act(self, opts, out: str) -> str:
        """Where a float op should write: out itself, or a temp the activation reads."""
        if _ACTIVATION.get(opts.get("FusedActivationFunction", 0)) == "NONE":
            return out
        return self.tmp("pre_act")

    def _finish_act(self, opts, pre: str, out: str) -> None:
        if pre != out:
            self._float_act(opts, pre, out)

    def _strides(self, opts) -> tuple[int, int]:
        sh, sw = int(opts["StrideH"]), int(opts["StrideW"])
        if sh <= 0 or sw <= 0:
            raise ModelError(f"{self.op_label}: stride {sh}x{sw}")
        return sh, sw

    def _dilations(self, opts) -> tuple[int, int]:
        dh, dw = int(opts.get("DilationHFactor", 1)), int(opts.get("DilationWFactor", 1))
        if dh <= 0 or dw <= 0:
            raise ModelError(f"{self.op_label}: dilation {dh}x{dw}")
        return dh, dw

    def _pads(self, opts, x: str, kernel, strides, dilations) -> tuple[int, int, int, int]:
        shape = self.ty(x).shape
        if len(shape) != 4:
            raise ShapeError(f"{self.op_label}: expects a 4-D NHWC input, got {list(shape)}")
        padding = _PADDING.get(opts["Padding"])
        if padding is None:
            raise UnsupportedError(f"{self.op_label}: padding mode {opts['Padding']}")
        _, top, bottom = qmath.compute_padding(shape[1], kernel[0], strides[0], dilations[0], padding)
        _, left, right = qmath.compute_padding(shape[2], kernel[1], strides[1], dilations[1], padding)
        return top, left, bottom, right

    # -- convolution

    def _op_CONV_2D(self, op, ins, outs):
        self._need(ins, 2)
        x, w = ins[0], ins[1]
        bias = ins[2] if len(ins) > 2 else ""
        o = op.options
        strides, dil = self._strides(o), self._dilations(o)
        wshape = self.ty(w).shape
        if len(wshape) != 4:
            raise ShapeError(f"{self.op_label}: weight must be 4-D OHWI, got {list(wshape)}")
        pads = self._pads(o, x, wshape[1:3], strides, dil)
        if self._is_int(x):
            lo, hi = self._act(o, outs[0])
            self._check_requant(x, w, outs[0])
            self.emit(self._int_op("tfl.conv2d", x), [x, w, bias], outs, strides=strides,
                      dilations=dil, pads=pads, act_min=lo, act_max=hi)
            return
        pre = self._with_act(o, outs[0])
        if self.hybrid == "dynamic" and self._hybrid_conv_ok(x, w, dil):
            self.emit("tfl.conv2d", [x, w, bias], [pre], strides=strides, dilations=dil,
                      pads=pads, act_min=-128, act_max=127)
            self._finish_act(o, pre, outs[0])
            return
        w = self._float_weight(w)
        groups = self.ty(x).shape[3] // wshape[3] if wshape[3] else 1
        self.emit("Conv", [x, w, bias], [pre], layout="NHWC", kernel_shape=tuple(wshape[1:3]),
                  strides=strides, dilations=dil, pads=pads, group=groups)
        self._finish_act(o, pre, outs[0])

    def _hybrid_conv_ok(self, x: str, w: str, dilations) -> bool:
        """Whether LiteRT would run this conv with its per-tensor hybrid kernel."""
        wt = self.ty(w)
        return (self.ty(x).dtype == "float32" and wt.dtype == "int8" and wt.quant is not None
                and len(set(wt.quant.scale)) == 1 and dilations == (1, 1)
                and self.ty(x).shape[3] == wt.shape[3])

    def _float_weight(self, w: str) -> str:
        """A float op's weight; int8 weights of a hybrid model are dequantized first."""
        if self.ty(w).dtype == "float32":
            return w
        out = self.tmp("dequantized_weight")
        self.emit("tfl.dequantize", [w], [out], "dequantize_weight")
        return out

    def _op_DEPTHWISE_CONV_2D(self, op, ins, outs):
        self._need(ins, 2)
        x, w = ins[0], ins[1]
        bias = ins[2] if len(ins) > 2 else ""
        o = op.options
        strides, dil = self._strides(o), self._dilations(o)
        wshape, xshape = self.ty(w).shape, self.ty(x).shape
        if len(wshape) != 4 or wshape[0] != 1:
            raise ShapeError(f"{self.op_label}: weight must be [1,KH,KW,C*M], got {list(wshape)}")
        pads = self._pads(o, x, wshape[1:3], strides, dil)
        if wshape[3] % xshape[3]:
            raise ShapeError(f"{self.op_label}: {wshape[3]} filter channels for "
                             f"{xshape[3]} input channels")
        multiplier = wshape[3] // xshape[3]
        if self._is_int(x):
            lo, hi = self._act(o, outs[0])
            self._check_requant(x, w, outs[0])
            self.emit(self._int_op("tfl.depthwise_conv2d", x), [x, w, bias], outs,
                      strides=strides,
                      dilations=dil, pads=pads, depth_multiplier=multiplier,
                      act_min=lo, act_max=hi)
            return
        # Float: a grouped Conv, one group per input channel; weight [C*M, KH, KW, 1].
        w = self._float_weight(w)
        if w in self.constants:
            w_ohwi = self.new_const("weight_ohwi",
                                    np.ascontiguousarray(self.constants[w][0].transpose(2, 0, 1)[..., None]))
        else:
            w_ohwi = self.tmp("weight_ohwi")
            self.emit("Transpose", [w], [w_ohwi], "weight_ohwi", perm=(3, 1, 2, 0))
        pre = self._with_act(o, outs[0])
        self.emit("Conv", [x, w_ohwi, bias], [pre], layout="NHWC",
                  kernel_shape=tuple(wshape[1:3]), strides=strides, dilations=dil, pads=pads,
                  group=xshape[3])
        self._finish_act(o, pre, outs[0])

    # -- fully connected

    def _op_FULLY_CONNECTED(self, op, ins, outs):
        self._need(ins, 2)
        x, w = ins[0], ins[1]
        bias = ins[2] if len(ins) > 2 else ""
        o = op.options
        if o.get("WeightsFormat", 0) != 0:
            raise UnsupportedError(f"{self.op_label}: shuffled weights format")
        keep = bool(o.get("KeepNumDims", False))
        if self._is_int(x):
            lo, hi = self._act(o, outs[0])
            self._check_requant(x, w, outs[0])
            self.emit(self._int_op("tfl.fully_connected", x), [x, w, bias], outs,
                      act_min=lo, act_max=hi, keep_num_dims=keep)
            return
        xshape, wshape = self.ty(x).shape, self.ty(w).shape  # dequantizing keeps the shape
        w = self._float_weight(w)
        if len(wshape) != 2 or wshape[1] == 0 or int(np.prod(xshape)) % wshape[1]:
            raise ShapeError(f"{self.op_label}: input {list(xshape)} does not match "
                             f"weight {list(wshape)}")
        rows = int(np.prod(xshape)) // wshape[1]
        x2 = x
        if xshape != (rows, wshape[1]):
            x2 = self.tmp("rows")
            self.emit("Reshape", [x, self.new_const("rows_shape",
                                                    np.array([rows, wshape[1]], np.int64))],
                      [x2], "flatten")
        out_shape = (xshape[:-1] + (wshape[0],)) if keep else (rows, wshape[0])
        final = outs[0]
        gemm_out = final if out_shape == (rows, wshape[0]) else self.tmp("gemm")
        pre = self._with_act(o, gemm_out)
        self.emit("Gemm", [x2, w, bias], [pre], transB=1)
        self._finish_act(o, pre, gemm_out)
        if gemm_out != final:
            self.emit("Reshape", [gemm_out, self.new_const("out_shape",
                                                           np.array(out_shape, np.int64))],
                      [final], "unflatten")

    # -- pooling

    def _pool(self, op, ins, outs, int_op: str, float_op: str):
        self._need(ins, 1)
        x = ins[0]
        o = op.options
        strides = self._strides(o)
        kernel = (int(o["FilterHeight"]), int(o["FilterWidth"]))
        if min(kernel) <= 0:
            raise ModelError(f"{self.op_label}: filter {kernel[0]}x{kernel[1]}")
        pads = self._pads(o, x, kernel, strides, (1, 1))
        if self._is_int(x):
            lo, hi = self._act(o, outs[0])
            self.emit(self._int_op(int_op, x), [x], outs, kernel=kernel, strides=strides,
                      pads=pads, act_min=lo, act_max=hi)
            return
        pre = self._with_act(o, outs[0])
        extra = {"count_include_pad": 0} if float_op == "AveragePool" else {}
        self.emit(float_op, [x], [pre], layout="NHWC", kernel_shape=kernel, strides=strides,
                  pads=pads, **extra)
        self._finish_act(o, pre, outs[0])

    def _op_AVERAGE_POOL_2D(self, op, ins, outs):
        self._pool(op, ins, outs, "tfl.avg_pool2d", "AveragePool")

    def _op_MAX_POOL_2D(self, op, ins, outs):
        self._pool(op, ins, outs, "tfl.max_pool2d", "MaxPool")

    # -- elementwise arithmetic

    def _binary(self, op, ins, outs, int_op: str, float_op: str):
        self._need(ins, 2)
        o = op.options
        if self._is_int(ins[0]):
            lo, hi = self._act(o, outs[0])
            self.emit(self._int_op(int_op, ins[0]), ins[:2], outs, act_min=lo, act_max=hi)
            return
        pre = self._with_act(o, outs[0])
        self.emit(float_op, ins[:2], [pre])
        self._finish_act(o, pre, outs[0])

    def _op_ADD(self, op, ins, outs):
        self._binary(op, ins, outs, "tfl.add", "Add")

    def _op_SUB(self, op, ins, outs):
        self._binary(op, ins, outs, "tfl.sub", "Sub")

    def _op_MUL(self, op, ins, outs):
        self._binary(op, ins, outs, "tfl.mul", "Mul")

    def _op_MEAN(self, op, ins, outs):
        self._need(ins, 2)
        keep = bool(op.options.get("KeepDims", False))
        axes = self.const(ins[1], "axes").astype(np.int64).reshape(-1)
        if self._is_int(ins[0]):
            self.emit(self._int_op("tfl.mean", ins[0]), [ins[0], self.new_const("axes", axes)],
                      outs, keep_dims=keep)
        else:
            self.emit("ReduceMean", [ins[0], self.new_const("axes", axes)], outs,
                      keepdims=int(keep))

    def _op_SOFTMAX(self, op, ins, outs):
        self._need(ins, 1)
        beta = float(op.options.get("Beta", 1.0))
        if self._is_int(ins[0]):
            self.emit(self._int_op("tfl.softmax", ins[0]), ins[:1], outs, beta=beta)
            return
        x = ins[0]
        if beta != 1.0:
            x = self.tmp("scaled")
            self.emit("Mul", [ins[0], self.new_const("beta", np.array(beta, np.float32))],
                      [x], "beta")
        self.emit("Softmax", [x], outs, axis=-1)

    def _op_LOGISTIC(self, op, ins, outs):
        self._need(ins, 1)
        if self.ty(ins[0]).dtype in ("int8", "int16"):
            self.emit(self._int_op("tfl.logistic", ins[0]), ins[:1], outs)
            return
        self._float_only(ins)
        self.emit("Sigmoid", ins[:1], outs)

    def _op_TANH(self, op, ins, outs):
        self._need(ins, 1)
        if self.ty(ins[0]).dtype == "int16":
            self.emit(self._int_op("tfl.tanh", ins[0]), ins[:1], outs)
            return
        if self._int8_unary(ins, outs, "tfl.tanh"):
            return
        self._float_only(ins)
        self.emit("Tanh", ins[:1], outs)

    def _op_RELU(self, op, ins, outs):
        if self._int16_unary(ins, outs, "tfl.relu_int16"):
            return
        if self._int8_unary(ins, outs, "tfl.relu"):
            return
        self._float_only(ins)
        self.emit("Relu", ins[:1], outs)

    def _op_RELU6(self, op, ins, outs):
        if self._int16_unary(ins, outs, "tfl.relu6_int16"):
            return
        if self._int8_unary(ins, outs, "tfl.relu6"):
            return
        self._float_only(ins)
        self._float_act({"FusedActivationFunction": 3}, ins[0], outs[0])

    def _int16_unary(self, ins, outs, int16_op: str) -> bool:
        """Emits int16_op when the input is int16 (True), else leaves the node to the caller."""
        self._need(ins, 1)
        if self.ty(ins[0]).dtype != "int16":
            return False
        self._same_int8(ins[0], outs[0], dtypes=("int16",))
        self.emit(int16_op, ins[:1], outs)
        return True

    def _float_only(self, ins):
        self._need(ins, 1)
        if self._is_int(ins[0]):
            raise UnsupportedError(f"{self.op_label}: {self.ty(ins[0]).dtype} input "
                                   "(only float is supported for this op)")

    # -- quantization

    def _op_QUANTIZE(self, op, ins, outs):
        self._need(ins, 1)
        self.emit("tfl.quantize", ins[:1], outs, dtype=self.ty(outs[0]).dtype)

    def _op_DEQUANTIZE(self, op, ins, outs):
        self._need(ins, 1)
        if ins[0] in self.constants and self.ty(ins[0]).dtype == "float16":
            # float16 weights: float32 from import on, as LiteRT computes with them
            self._fold(outs[0], self.constants[ins[0]].astype(np.float32))
            return
        self.emit("tfl.dequantize", ins[:1], outs)

    def _op_DENSIFY(self, op, ins, outs):
        # the sparse constant it reads was densified at import
        self._need(ins, 1)
        self._fold(outs[0], self.const(ins[0], "input"))

    def _fold(self, out: str, value: np.ndarray) -> None:
        """out becomes a constant computed at import."""
        if tuple(value.shape) != self.ty(out).shape or value.dtype.name != self.ty(out).dtype:
            raise ModelError(f"{self.op_label}: output '{out}' declared "
                             f"{self.ty(out).dtype}{list(self.ty(out).shape)}, computes "
                             f"{value.dtype.name}{list(value.shape)}")
        self.constants[out] = value

    # -- data movement (quantization passes through)

    def _reshape_to_output(self, ins, outs):
        self._need(ins, 1)
        shape = np.array(self.ty(outs[0]).shape, dtype=np.int64)
        self.emit("Reshape", [ins[0], self.new_const("shape", shape)], outs)

    def _op_RESHAPE(self, op, ins, outs):
        self._reshape_to_output(ins, outs)

    def _op_SQUEEZE(self, op, ins, outs):
        self._reshape_to_output(ins, outs)

    def _op_EXPAND_DIMS(self, op, ins, outs):
        self._reshape_to_output(ins, outs)

    def _op_CONCATENATION(self, op, ins, outs):
        o = op.options
        if _ACTIVATION.get(o.get("FusedActivationFunction", 0)) != "NONE":
            raise UnsupportedError(f"{self.op_label}: fused activation on concatenation")
        self.emit("Concat", [i for i in ins if i], outs, axis=int(o.get("Axis", 0)))

    def _op_TRANSPOSE(self, op, ins, outs):
        self._need(ins, 2)
        perm = tuple(int(p) for p in self.const(ins[1], "perm").reshape(-1))
        self.emit("Transpose", ins[:1], outs, perm=perm)

    def _op_PAD(self, op, ins, outs):
        self._need(ins, 2)
        paddings = self.const(ins[1], "paddings").astype(np.int64).reshape(-1, 2)
        pads = np.concatenate([paddings[:, 0], paddings[:, 1]])
        ty = self.ty(ins[0])
        if len(ins) > 2 and ins[2]:
            value = ins[2]
        else:  # quantized PAD fills with the output's zero point, i.e. real 0
            out_q = self.ty(outs[0]).quant
            zp = out_q.zero_point[0] if out_q is not None else 0
            value = self.new_const("value", np.array(zp, dtype=ty.dtype))
        self.emit("Pad", [ins[0], self.new_const("pads", pads), value], outs, mode="constant")

    _op_PADV2 = _op_PAD

    # -- recurrent

    def _op_UNIDIRECTIONAL_SEQUENCE_LSTM(self, op, ins, outs):
        if len(ins) < 20:
            raise ModelError(f"{self.op_label}: expects 24 inputs, has {len(ins)}")
        if self.ty(ins[0]).dtype == "int16":
            raise UnsupportedError(f"{self.op_label}: int16 activations (tflite-micro's 16x8 "
                                   "LSTM) are not supported yet")
        ins = list(ins) + [""] * (24 - len(ins))
        o = op.options
        act = _ACTIVATION.get(o.get("FusedActivationFunction", 0), "?")
        h_var, c_var = ins[18], ins[19]
        for v in (h_var, c_var):
            if v not in self.variables:
                raise UnsupportedError(f"{self.op_label}: LSTM state '{v}' must be a "
                                       "variable tensor")
        new_h, new_c = self.tmp("hidden_state"), self.tmp("cell_state")
        self.emit("tfl.lstm", ins, [outs[0], new_h, new_c],
                  time_major=bool(o.get("TimeMajor", False)),
                  cell_clip=float(o.get("CellClip", 0.0)),
                  proj_clip=float(o.get("ProjClip", 0.0)), activation=act)
        self.updates[h_var] = new_h
        self.updates[c_var] = new_c

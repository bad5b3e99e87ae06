"""What the TFLite schema's enums mean to aot, shared by the importer and
the variable resolution (vars.py), which both read tensor types; and the
flatbuffer read into plain Python values (`decode`), the importer's first
stage, which aot/check/streaming.py reads tensors with too."""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aot.errors import ModelError
from aot.frontend.tflite import ops as tflite_ops
from aot.frontend.tflite.sparse import SparseSpec, decode_sparsity

# TFLite TensorType enum -> numpy dtype name (None: not representable here).
DTYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 5: None,
          6: "bool", 7: "int16", 8: None, 9: "int8", 10: "float64", 11: None,
          12: "uint64", 13: None, 14: None, 15: "uint32", 16: "uint16", 17: None}
DTYPE_NAMES = {5: "STRING", 8: "COMPLEX64", 11: "COMPLEX128", 13: "RESOURCE",
               14: "VARIANT", 17: "INT4"}

# Builtin options we read: op -> (options class, fields).
_OPTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "CONV_2D": ("Conv2DOptions", ("Padding", "StrideW", "StrideH", "FusedActivationFunction",
                                  "DilationWFactor", "DilationHFactor")),
    "DEPTHWISE_CONV_2D": ("DepthwiseConv2DOptions",
                          ("Padding", "StrideW", "StrideH", "DepthMultiplier",
                           "FusedActivationFunction", "DilationWFactor", "DilationHFactor")),
    "FULLY_CONNECTED": ("FullyConnectedOptions",
                        ("FusedActivationFunction", "WeightsFormat", "KeepNumDims")),
    "AVERAGE_POOL_2D": ("Pool2DOptions", ("Padding", "StrideW", "StrideH", "FilterWidth",
                                          "FilterHeight", "FusedActivationFunction")),
    "MAX_POOL_2D": ("Pool2DOptions", ("Padding", "StrideW", "StrideH", "FilterWidth",
                                      "FilterHeight", "FusedActivationFunction")),
    "SOFTMAX": ("SoftmaxOptions", ("Beta",)),
    "ADD": ("AddOptions", ("FusedActivationFunction",)),
    "SUB": ("SubOptions", ("FusedActivationFunction",)),
    "MUL": ("MulOptions", ("FusedActivationFunction",)),
    "CONCATENATION": ("ConcatenationOptions", ("Axis", "FusedActivationFunction")),
    "MEAN": ("ReducerOptions", ("KeepDims",)),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": ("UnidirectionalSequenceLSTMOptions",
                                     ("FusedActivationFunction", "CellClip", "ProjClip",
                                      "TimeMajor", "AsymmetricQuantizeInputs")),
    "STRIDED_SLICE": ("StridedSliceOptions", ("BeginMask", "EndMask", "EllipsisMask",
                                              "NewAxisMask", "ShrinkAxisMask", "Offset")),
    "CALL_ONCE": ("CallOnceOptions", ("InitSubgraphIndex",)),
    "VAR_HANDLE": ("VarHandleOptions", ("Container", "SharedName")),
}
# Flatbuffer defaults, used when an operator carries no options table.
_DEFAULTS = {"Padding": 0, "StrideW": 1, "StrideH": 1, "FusedActivationFunction": 0,
             "DilationWFactor": 1, "DilationHFactor": 1, "DepthMultiplier": 1,
             "WeightsFormat": 0, "KeepNumDims": False, "FilterWidth": 1, "FilterHeight": 1,
             "Beta": 1.0, "Axis": 0, "KeepDims": False, "CellClip": 0.0, "ProjClip": 0.0,
             "TimeMajor": False, "AsymmetricQuantizeInputs": False,
             "BeginMask": 0, "EndMask": 0, "EllipsisMask": 0, "NewAxisMask": 0,
             "ShrinkAxisMask": 0, "Offset": False, "InitSubgraphIndex": 0,
             "Container": b"", "SharedName": b""}
_OPTIONS.update(tflite_ops.OPTIONS)
_DEFAULTS.update(tflite_ops.DEFAULTS)


# ------------------------------------------------------------------ decoding

@dataclass
class Tensor:
    name: str
    shape: tuple[int, ...]
    type_code: int
    buffer: int
    quant: tuple[np.ndarray, np.ndarray, int] | None
    is_variable: bool
    sparsity: SparseSpec | None = None
    signature: tuple[int, ...] = ()     # shape_signature: -1 where a dimension is open


@dataclass
class Op:
    code: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    options: dict[str, Any] = field(default_factory=dict)
    custom: bytes = b""      # a CUSTOM operator's options, raw
    version: int = 1         # its operator code's version


@dataclass
class Model:
    tensors: list[Tensor]
    buffers: list[bytes]
    ops: list[Op]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    others: tuple["Model", ...] = ()  # subgraphs 1.. (branches, bodies, initializers), same buffers
    name: str = ""                    # the subgraph's own name, for errors


def _builtin_names() -> dict[int, str]:
    import tflite
    return {v: k for k, v in vars(tflite.BuiltinOperator).items()
            if not k.startswith("_") and isinstance(v, int)}


def _count(n: int, data: bytes, what: str) -> int:
    # A corrupt length would make us loop for ever; each entry takes >= 4 bytes.
    if n < 0 or n * 4 > len(data):
        raise ModelError(f"corrupt TFLite file: {what} count {n} exceeds the file size")
    return n


def _ints(getter_numpy, length: int) -> tuple[int, ...]:
    return tuple(int(v) for v in getter_numpy()) if length else ()


def _decode_quant(t) -> tuple[np.ndarray, np.ndarray, int] | None:
    q = t.Quantization()
    if q is None or q.ScaleLength() == 0:
        return None
    scales = np.array(q.ScaleAsNumpy(), dtype=np.float32)
    zps = (np.array(q.ZeroPointAsNumpy(), dtype=np.int64) if q.ZeroPointLength()
           else np.zeros(scales.size, dtype=np.int64))
    return scales, zps, int(q.QuantizedDimension())


def _decode_buffer(b, data: bytes) -> bytes:
    if b is None:
        return b""
    offset, size = int(b.Offset()), int(b.Size())
    if offset > 1:  # data stored after the flatbuffer (models over 2 GB)
        if offset + size > len(data):
            raise ModelError(f"corrupt TFLite file: a buffer at offset {offset} "
                             f"(+{size} bytes) lies outside the {len(data)}-byte file")
        return bytes(data[offset:offset + size])
    if b.DataLength() == 0:
        return b""
    return b.DataAsNumpy().tobytes()


def _decode_options(op, code: str) -> dict[str, Any]:
    import tflite
    spec = _OPTIONS.get(code)
    if spec is None:
        return {}
    cls_name, fields = spec
    table = op.BuiltinOptions()
    if table is None:
        return {f: _DEFAULTS[f] for f in fields}
    opts = getattr(tflite, cls_name)()
    opts.Init(table.Bytes, table.Pos)
    return {f: getattr(opts, f)() for f in fields}


def _decode_tensor(t) -> Tensor:
    raw = t.Name()
    name = raw.decode("utf-8", "replace") if raw else ""
    shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
    signature = (tuple(int(d) for d in t.ShapeSignatureAsNumpy())
                 if t.ShapeSignatureLength() else ())
    return Tensor(name, shape, int(t.Type()), int(t.Buffer()), _decode_quant(t),
                   bool(t.IsVariable()), decode_sparsity(t), signature)


def decode(data: bytes) -> Model:
    import tflite
    if len(data) < 8:
        raise ModelError(f"not a TFLite model: the file has only {len(data)} bytes")
    if data[4:8] != b"TFL3":
        raise ModelError("not a TFLite model: missing the 'TFL3' file identifier")
    root = struct.unpack_from("<I", data, 0)[0]
    if root + 4 > len(data):
        raise ModelError("corrupt TFLite file: root table offset is past the end of the file")
    model = tflite.Model.GetRootAsModel(data, 0)
    names = _builtin_names()
    opcodes = []
    for i in range(_count(model.OperatorCodesLength(), data, "operator code")):
        oc = model.OperatorCodes(i)
        code = max(int(oc.BuiltinCode()), int(oc.DeprecatedBuiltinCode()))
        name = names.get(code, f"BUILTIN_{code}")
        if name == "CUSTOM":
            custom = oc.CustomCode()
            name = f"CUSTOM:{custom.decode('utf-8', 'replace') if custom else '?'}"
        opcodes.append((name, int(oc.Version())))
    if model.SubgraphsLength() < 1:
        raise ModelError("TFLite model has no subgraph")
    buffers = [_decode_buffer(model.Buffers(i), data)
               for i in range(_count(model.BuffersLength(), data, "buffer"))]
    subgraphs = [_decode_subgraph(model.Subgraphs(k), data, opcodes, buffers)
                 for k in range(_count(model.SubgraphsLength(), data, "subgraph"))]
    main = subgraphs[0]
    main.others = tuple(subgraphs[1:])
    return main


def _decode_subgraph(sg, data: bytes, opcodes: list[tuple[str, int]],
                     buffers: list[bytes]) -> Model:
    tensors = [_decode_tensor(sg.Tensors(i))
               for i in range(_count(sg.TensorsLength(), data, "tensor"))]
    ops = []
    for i in range(_count(sg.OperatorsLength(), data, "operator")):
        op = sg.Operators(i)
        idx = int(op.OpcodeIndex())
        if not 0 <= idx < len(opcodes):
            raise ModelError(f"corrupt TFLite file: operator {i} uses opcode index {idx} "
                             f"of {len(opcodes)}")
        code, version = opcodes[idx]
        custom = op.CustomOptionsAsNumpy().tobytes() if op.CustomOptionsLength() else b""
        ops.append(Op(code, _ints(op.InputsAsNumpy, op.InputsLength()),
                       _ints(op.OutputsAsNumpy, op.OutputsLength()),
                       _decode_options(op, code), custom, version))
    raw = sg.Name()
    return Model(tensors, buffers, ops,
                  _ints(sg.InputsAsNumpy, sg.InputsLength()),
                  _ints(sg.OutputsAsNumpy, sg.OutputsLength()),
                  name=raw.decode("utf-8", "replace") if raw else "")


def unique_names(tensors: list[Tensor]) -> list[str]:
    seen: set[str] = set()
    out = []
    for i, t in enumerate(tensors):
        name = t.name or f"tensor_{i}"
        if name in seen:
            name = f"{name}_{i}"
        seen.add(name)
        out.append(name)
    return out

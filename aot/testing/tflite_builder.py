"""A small TFLite model builder for tests and fuzzing: a few ops on float32,
float16, int8 (per-tensor or per-channel) or integer tensors, constant
buffers (dense or sparse), builtin options. There is no TensorFlow here, so
the tests of the TFLite importer build their .tflite flatbuffers with this;
tflite-micro (the int8 oracle) and LiteRT (the float oracle) load them.

    m = TFLiteBuilder()
    x = m.tensor("x", [1, 4], "int8", scale=0.1, zp=0)
    y = m.tensor("y", [1, 4], "int8", scale=0.1, zp=0)
    m.op("LEAKY_RELU", [x], [y], "LeakyReluOptions", Alpha=0.2)
    data = m.build([x], [y])

A custom operator (`custom`) is named by its custom code and version and
carries its options as raw bytes (a flexbuffer, or a C struct's bytes).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

TYPE_CODES = {"float32": 0, "float16": 1, "int32": 2, "uint8": 3, "int64": 4, "bool": 6,
              "int16": 7, "int8": 9, "resource": 13}   # resource: a VAR_HANDLE's handle
DENSE, SPARSE_CSR = 0, 1
# Ops whose first version LiteRT registers is above 1.
MIN_VERSIONS = {"BROADCAST_TO": 2}


@dataclass(frozen=True)
class CustomCode:
    """The operator code of a CUSTOM op: its name and version."""
    name: str
    version: int = 1


@dataclass(frozen=True)
class Sparsity:
    """TFLite sparsity parameters, in the flatbuffer's own terms.

    traversal_order: the order of the expanded dims (the tensor's dims, then one
    per block dim); block_map: the original dim each block dim splits;
    levels: per traversal level ("dense", size) or ("csr", segments, indices).
    """
    traversal_order: tuple[int, ...]
    block_map: tuple[int, ...]
    levels: tuple[tuple, ...]


def sparsify(dense: np.ndarray, formats: Sequence[int], block_map: Sequence[int] = (),
             block_size: Sequence[int] = (), traversal_order: Sequence[int] | None = None
             ) -> tuple[np.ndarray, Sparsity]:
    """(values, Sparsity) of `dense` as TFLite's converter stores it: the
    expanded dims visited in traversal order, a CSR level keeping only the
    indices whose sub-block holds a nonzero, a dense level keeping all."""
    rank = dense.ndim
    expanded = [d // block_size[block_map.index(k)] if k in block_map else d
                for k, d in enumerate(dense.shape)] + list(block_size)
    order = tuple(range(len(expanded))) if traversal_order is None else tuple(traversal_order)
    # the dense tensor re-indexed by the expanded dims, then put in traversal order
    split_shape, axes = [], []
    for k, d in enumerate(dense.shape):
        if k in block_map:
            split_shape += [expanded[k], block_size[block_map.index(k)]]
            axes += [k, rank + block_map.index(k)]
        else:
            split_shape.append(d)
            axes.append(k)
    blocked = dense.reshape(split_shape)
    perm_expanded = [axes.index(e) for e in range(len(expanded))]
    traversed = blocked.transpose(perm_expanded).transpose(order)
    levels: list[tuple] = []
    blocks = [traversed]   # the kept sub-blocks of the current level, in order
    for level, fmt in enumerate(formats):
        size = traversed.shape[level]
        nxt = []
        if fmt == DENSE:
            levels.append(("dense", size))
            for b in blocks:
                nxt.extend(b[i] for i in range(size))
        else:
            segments, indices = [0], []
            for b in blocks:
                for i in range(size):
                    if np.any(b[i] != 0):
                        indices.append(i)
                        nxt.append(b[i])
                segments.append(len(indices))
            levels.append(("csr", tuple(segments), tuple(indices)))
        blocks = nxt
    values = np.array([np.asarray(b).reshape(()) for b in blocks], dtype=dense.dtype)
    return values.reshape(-1), Sparsity(order, tuple(block_map), tuple(levels))


class TFLiteBuilder:
    """Builds a one-subgraph .tflite flatbuffer."""

    def __init__(self):
        self.tensors: list[dict[str, Any]] = []
        self.buffers: list[bytes] = [b""]
        self.ops: list[tuple] = []
        self.codes: list[str | CustomCode] = []
        self.extra: list[tuple] = []   # further subgraphs: (builder, inputs, outputs)

    def tensor(self, name: str, shape, dtype: str = "int8", scale=None, zp=None, data=None,
               qdim: int = 0, variable: bool = False, sparsity: Sparsity | None = None,
               signature=None) -> int:
        """A tensor; `data` makes it a constant (for a sparse one, its values);
        `signature` its shape_signature (-1: a dimension left open)."""
        buf = 0
        if data is not None:
            self.buffers.append(np.ascontiguousarray(data, dtype=dtype).tobytes())
            buf = len(self.buffers) - 1
        if scale is not None and zp is None:
            zp = np.zeros(np.size(scale), np.int64)
        self.tensors.append(dict(name=name, shape=tuple(int(d) for d in shape), dtype=dtype,
                                 scale=scale, zp=zp, qdim=qdim, buffer=buf, variable=variable,
                                 sparsity=sparsity, signature=signature))
        return len(self.tensors) - 1

    def const(self, name: str, value, dtype: str | None = None, **quant) -> int:
        value = np.asarray(value, dtype=dtype)
        return self.tensor(name, value.shape, value.dtype.name, data=value, **quant)

    def op(self, code: str, inputs: Sequence[int], outputs: Sequence[int],
           options: str | None = None, **fields) -> None:
        """One operator; `options` names its builtin options table
        ("LeakyReluOptions"), `fields` its fields (Alpha=0.2)."""
        self._add(code, inputs, outputs, options, fields, b"")

    def custom(self, name: str, inputs: Sequence[int], outputs: Sequence[int],
               options: bytes = b"", version: int = 1) -> None:
        """One CUSTOM operator `name` of `version`, its custom options the raw
        bytes `options`, as exporters write them."""
        self._add(CustomCode(name, version), inputs, outputs, None, {}, bytes(options))

    def _add(self, code, inputs, outputs, options, fields, custom: bytes) -> None:
        if code not in self.codes:
            self.codes.append(code)
        self.ops.append((self.codes.index(code), tuple(inputs), tuple(outputs), options, fields,
                         custom))

    def subgraph(self, sub: "TFLiteBuilder", inputs: Sequence[int],
                 outputs: Sequence[int]) -> int:
        """Adds `sub`'s tensors and ops as a further subgraph of this model (an
        IF branch, a CALL_ONCE initializer); its index in the model."""
        self.extra.append((sub, tuple(inputs), tuple(outputs)))
        return len(self.extra)

    # ------------------------------------------------------------- serializing

    def _subgraph(self, b, owner: "TFLiteBuilder", inputs, outputs) -> int:
        """One SubGraph table; owner's buffers and op codes are merged into ours."""
        import tflite
        buffer_of, code_of = {0: 0}, {}
        if owner is not self:
            for k, raw in enumerate(owner.buffers[1:], 1):
                self.buffers.append(raw)
                buffer_of[k] = len(self.buffers) - 1
            for k, c in enumerate(owner.codes):
                if c not in self.codes:
                    self.codes.append(c)
                code_of[k] = self.codes.index(c)
        tensors = [self._tensor(b, dict(t, buffer=buffer_of.get(t["buffer"], t["buffer"])))
                   for t in owner.tensors]
        ops = [self._operator(b, code_of.get(op[0], op[0]), *op[1:]) for op in owner.ops]
        sg_t = _offsets(b, tflite.SubGraphStartTensorsVector, tensors)
        sg_i = _ints(b, tflite.SubGraphStartInputsVector, inputs)
        sg_o = _ints(b, tflite.SubGraphStartOutputsVector, outputs)
        sg_ops = _offsets(b, tflite.SubGraphStartOperatorsVector, ops)
        tflite.SubGraphStart(b)
        tflite.SubGraphAddTensors(b, sg_t)
        tflite.SubGraphAddInputs(b, sg_i)
        tflite.SubGraphAddOutputs(b, sg_o)
        tflite.SubGraphAddOperators(b, sg_ops)
        return tflite.SubGraphEnd(b)

    def build(self, inputs: Sequence[int], outputs: Sequence[int]) -> bytes:
        import flatbuffers
        import tflite

        b = flatbuffers.Builder(1024)
        subgraphs = [self._subgraph(b, self, inputs, outputs)]
        subgraphs += [self._subgraph(b, sub, i, o) for sub, i, o in self.extra]
        codes = [_operator_code(b, c) for c in self.codes]
        bufs = []
        for raw in self.buffers:
            data = b.CreateNumpyVector(np.frombuffer(raw, np.uint8)) if raw else None
            tflite.BufferStart(b)
            if data is not None:
                tflite.BufferAddData(b, data)
            bufs.append(tflite.BufferEnd(b))
        v_sg = _offsets(b, tflite.ModelStartSubgraphsVector, subgraphs)
        v_codes = _offsets(b, tflite.ModelStartOperatorCodesVector, codes)
        v_bufs = _offsets(b, tflite.ModelStartBuffersVector, bufs)
        tflite.ModelStart(b)
        tflite.ModelAddVersion(b, 3)
        tflite.ModelAddSubgraphs(b, v_sg)
        tflite.ModelAddOperatorCodes(b, v_codes)
        tflite.ModelAddBuffers(b, v_bufs)
        b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())

    @staticmethod
    def _tensor(b, t: dict) -> int:
        import tflite
        name = b.CreateString(t["name"])
        shape = _ints(b, tflite.TensorStartShapeVector, t["shape"])
        quant = None
        if t["scale"] is not None:
            scale = b.CreateNumpyVector(np.asarray(t["scale"], np.float32).reshape(-1))
            zp = b.CreateNumpyVector(np.asarray(t["zp"], np.int64).reshape(-1))
            tflite.QuantizationParametersStart(b)
            tflite.QuantizationParametersAddScale(b, scale)
            tflite.QuantizationParametersAddZeroPoint(b, zp)
            tflite.QuantizationParametersAddQuantizedDimension(b, t["qdim"])
            quant = tflite.QuantizationParametersEnd(b)
        sparsity = _sparsity(b, t["sparsity"]) if t["sparsity"] is not None else None
        signature = (None if t["signature"] is None else
                     _ints(b, tflite.TensorStartShapeSignatureVector, t["signature"]))
        tflite.TensorStart(b)
        tflite.TensorAddShape(b, shape)
        if signature is not None:
            tflite.TensorAddShapeSignature(b, signature)
        tflite.TensorAddType(b, TYPE_CODES[t["dtype"]])
        tflite.TensorAddBuffer(b, t["buffer"])
        tflite.TensorAddName(b, name)
        tflite.TensorAddIsVariable(b, t["variable"])
        if quant is not None:
            tflite.TensorAddQuantization(b, quant)
        if sparsity is not None:
            tflite.TensorAddSparsity(b, sparsity)
        return tflite.TensorEnd(b)

    @staticmethod
    def _operator(b, code_index: int, ins, outs, options, fields, custom: bytes) -> int:
        import tflite
        opt = None
        if options is not None:
            # strings (VarHandleOptions' SharedName) go in before the table starts
            values = {k: b.CreateString(v) if isinstance(v, (str, bytes)) else v
                      for k, v in fields.items()}
            getattr(tflite, f"{options}Start")(b)
            for k, v in values.items():
                getattr(tflite, f"{options}Add{k}")(b, v)
            opt = getattr(tflite, f"{options}End")(b)
        iv = _ints(b, tflite.OperatorStartInputsVector, ins)
        ov = _ints(b, tflite.OperatorStartOutputsVector, outs)
        cv = b.CreateNumpyVector(np.frombuffer(custom, np.uint8)) if custom else None
        tflite.OperatorStart(b)
        tflite.OperatorAddOpcodeIndex(b, code_index)
        tflite.OperatorAddInputs(b, iv)
        tflite.OperatorAddOutputs(b, ov)
        if opt is not None:
            tflite.OperatorAddBuiltinOptionsType(b, getattr(tflite.BuiltinOptions, options))
            tflite.OperatorAddBuiltinOptions(b, opt)
        if cv is not None:
            tflite.OperatorAddCustomOptions(b, cv)   # format FLEXBUFFERS (0), the default
        return tflite.OperatorEnd(b)


def _operator_code(b, code: str | CustomCode) -> int:
    import tflite
    name = b.CreateString(code.name) if isinstance(code, CustomCode) else None
    value = tflite.BuiltinOperator.CUSTOM if name is not None else getattr(
        tflite.BuiltinOperator, code)
    tflite.OperatorCodeStart(b)
    tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(value, 127))
    tflite.OperatorCodeAddBuiltinCode(b, value)
    if name is not None:
        tflite.OperatorCodeAddCustomCode(b, name)
        tflite.OperatorCodeAddVersion(b, code.version)
    else:
        tflite.OperatorCodeAddVersion(b, MIN_VERSIONS.get(code, 1))
    return tflite.OperatorCodeEnd(b)


def _ints(b, start, values) -> int:
    values = [int(v) for v in values]
    start(b, len(values))
    for v in reversed(values):
        b.PrependInt32(v)
    return b.EndVector()


def _offsets(b, start, offsets) -> int:
    start(b, len(offsets))
    for o in reversed(offsets):
        b.PrependUOffsetTRelative(o)
    return b.EndVector()


def _int32_vector(b, values) -> int:
    import tflite
    vec = _ints(b, tflite.Int32VectorStartValuesVector, values)
    tflite.Int32VectorStart(b)
    tflite.Int32VectorAddValues(b, vec)
    return tflite.Int32VectorEnd(b)


def _sparsity(b, sp: Sparsity) -> int:
    import tflite
    dims = []
    for level in sp.levels:
        if level[0] == "dense":
            tflite.DimensionMetadataStart(b)
            tflite.DimensionMetadataAddFormat(b, DENSE)
            tflite.DimensionMetadataAddDenseSize(b, level[1])
        else:
            segments, indices = _int32_vector(b, level[1]), _int32_vector(b, level[2])
            tflite.DimensionMetadataStart(b)
            tflite.DimensionMetadataAddFormat(b, SPARSE_CSR)
            tflite.DimensionMetadataAddArraySegmentsType(b, tflite.SparseIndexVector.Int32Vector)
            tflite.DimensionMetadataAddArraySegments(b, segments)
            tflite.DimensionMetadataAddArrayIndicesType(b, tflite.SparseIndexVector.Int32Vector)
            tflite.DimensionMetadataAddArrayIndices(b, indices)
        dims.append(tflite.DimensionMetadataEnd(b))
    order = _ints(b, tflite.SparsityParametersStartTraversalOrderVector, sp.traversal_order)
    block_map = _ints(b, tflite.SparsityParametersStartBlockMapVector, sp.block_map)
    metadata = _offsets(b, tflite.SparsityParametersStartDimMetadataVector, dims)
    tflite.SparsityParametersStart(b)
    tflite.SparsityParametersAddTraversalOrder(b, order)
    tflite.SparsityParametersAddBlockMap(b, block_map)
    tflite.SparsityParametersAddDimMetadata(b, metadata)
    return tflite.SparsityParametersEnd(b)

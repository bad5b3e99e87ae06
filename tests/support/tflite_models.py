"""Single-op .tflite flatbuffers built in memory (TinyModel), to test one op
at a time, and the LSTM models the importer and the int8 kernels are checked
on."""
from __future__ import annotations

import flatbuffers
import numpy as np
import tflite


# ------------------------------------------------------------ single-op models

_CODES = {k: v for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
_TYPES = {"float32": 0, "int32": 2, "int8": 9, "int16": 7, "int64": 4}


class TinyModel:
    """Builds a one-subgraph .tflite flatbuffer, to test one op at a time."""

    def __init__(self):
        self.tensors: list[dict] = []
        self.buffers: list[bytes] = [b""]
        self.ops: list[tuple] = []
        self.codes: list[str] = []
        self.external: dict[int, tuple[int, int]] = {}   # buffer -> (offset, size)

    def tensor(self, name, shape, dtype="int8", scale=None, zp=None, data=None, qdim=0,
               variable=False, buffer=None) -> int:
        buf = 0
        if data is not None:
            self.buffers.append(np.ascontiguousarray(data, dtype=dtype).tobytes())
            buf = len(self.buffers) - 1
        self.tensors.append(dict(name=name, shape=shape, dtype=dtype, scale=scale, zp=zp,
                                 qdim=qdim, buffer=buf if buffer is None else buffer,
                                 variable=variable))
        return len(self.tensors) - 1

    def op(self, code, inputs, outputs, options=None):
        if code not in self.codes:
            self.codes.append(code)
        self.ops.append((self.codes.index(code), inputs, outputs, options))

    def build(self, inputs, outputs, subgraphs: int = 1) -> bytes:
        b = flatbuffers.Builder(1024)

        def ivec(start, values):
            start(b, len(values))
            for v in reversed(values):
                b.PrependInt32(v)
            return b.EndVector()

        def tvec(start, offsets):
            start(b, len(offsets))
            for o in reversed(offsets):
                b.PrependUOffsetTRelative(o)
            return b.EndVector()

        tensors = []
        for t in self.tensors:
            name = b.CreateString(t["name"])
            shape = ivec(tflite.TensorStartShapeVector, list(t["shape"]))
            quant = None
            if t["scale"] is not None:
                scale = b.CreateNumpyVector(np.asarray(t["scale"], np.float32).reshape(-1))
                zp = b.CreateNumpyVector(np.asarray(t["zp"], np.int64).reshape(-1))
                tflite.QuantizationParametersStart(b)
                tflite.QuantizationParametersAddScale(b, scale)
                tflite.QuantizationParametersAddZeroPoint(b, zp)
                tflite.QuantizationParametersAddQuantizedDimension(b, t["qdim"])
                quant = tflite.QuantizationParametersEnd(b)
            tflite.TensorStart(b)
            tflite.TensorAddShape(b, shape)
            tflite.TensorAddType(b, _TYPES[t["dtype"]])
            tflite.TensorAddBuffer(b, t["buffer"])
            tflite.TensorAddName(b, name)
            tflite.TensorAddIsVariable(b, t["variable"])
            if quant is not None:
                tflite.TensorAddQuantization(b, quant)
            tensors.append(tflite.TensorEnd(b))
        ops = []
        for code_index, ins, outs, options in self.ops:
            opt = None
            if options is not None:
                cls, fields = options
                built = {}
                getattr(tflite, f"{cls}Start")(b)
                for k, v in fields.items():
                    getattr(tflite, f"{cls}Add{k}")(b, v)
                opt = getattr(tflite, f"{cls}End")(b)
                built = getattr(tflite.BuiltinOptions, cls)
            iv = ivec(tflite.OperatorStartInputsVector, list(ins))
            ov = ivec(tflite.OperatorStartOutputsVector, list(outs))
            tflite.OperatorStart(b)
            tflite.OperatorAddOpcodeIndex(b, code_index)
            tflite.OperatorAddInputs(b, iv)
            tflite.OperatorAddOutputs(b, ov)
            if opt is not None:
                tflite.OperatorAddBuiltinOptionsType(b, built)
                tflite.OperatorAddBuiltinOptions(b, opt)
            ops.append(tflite.OperatorEnd(b))
        sg_t = tvec(tflite.SubGraphStartTensorsVector, tensors)
        sg_i = ivec(tflite.SubGraphStartInputsVector, list(inputs))
        sg_o = ivec(tflite.SubGraphStartOutputsVector, list(outputs))
        sg_ops = tvec(tflite.SubGraphStartOperatorsVector, ops)
        tflite.SubGraphStart(b)
        tflite.SubGraphAddTensors(b, sg_t)
        tflite.SubGraphAddInputs(b, sg_i)
        tflite.SubGraphAddOutputs(b, sg_o)
        tflite.SubGraphAddOperators(b, sg_ops)
        sg = tflite.SubGraphEnd(b)
        codes = []
        for c in self.codes:
            tflite.OperatorCodeStart(b)
            tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(_CODES[c], 127))
            tflite.OperatorCodeAddBuiltinCode(b, _CODES[c])
            tflite.OperatorCodeAddVersion(b, 1)
            codes.append(tflite.OperatorCodeEnd(b))
        bufs = []
        for k, raw in enumerate(self.buffers):
            data = b.CreateNumpyVector(np.frombuffer(raw, np.uint8)) if raw else None
            tflite.BufferStart(b)
            if data is not None:
                tflite.BufferAddData(b, data)
            if k in self.external:
                tflite.BufferAddOffset(b, self.external[k][0])
                tflite.BufferAddSize(b, self.external[k][1])
            bufs.append(tflite.BufferEnd(b))
        v_sg = tvec(tflite.ModelStartSubgraphsVector, [sg] * subgraphs)
        v_codes = tvec(tflite.ModelStartOperatorCodesVector, codes)
        v_bufs = tvec(tflite.ModelStartBuffersVector, bufs)
        tflite.ModelStart(b)
        tflite.ModelAddVersion(b, 3)
        tflite.ModelAddSubgraphs(b, v_sg)
        tflite.ModelAddOperatorCodes(b, v_codes)
        tflite.ModelAddBuffers(b, v_bufs)
        b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())


def _lstm_model(time_major: bool, int8: bool, batch=2, steps=5, features=4, units=3, seed=0):
    """A one-op UNIDIRECTIONAL_SEQUENCE_LSTM model (standard form)."""
    rng = np.random.default_rng(seed)
    m = TinyModel()
    x_shape = [steps, batch, features] if time_major else [batch, steps, features]
    q8 = dict(scale=[0.02], zp=[-3]) if int8 else {}
    x = m.tensor("x", x_shape, "int8" if int8 else "float32", **q8)
    ins = [x]
    for k in range(8):
        shape = [units, features] if k < 4 else [units, units]
        if int8:
            ins.append(m.tensor(f"w{k}", shape, scale=[0.01 + 0.002 * k], zp=[0],
                                data=rng.integers(-127, 128, shape)))
        else:
            ins.append(m.tensor(f"w{k}", shape, "float32", data=rng.standard_normal(shape) * 0.5))
    ins += [-1, -1, -1]
    for k in range(4):
        if int8:
            ins.append(m.tensor(f"b{k}", [units], "int32", scale=[0.02 * (0.01 + 0.002 * k)],
                                zp=[0], data=rng.integers(-500, 500, units)))
        else:
            ins.append(m.tensor(f"b{k}", [units], "float32", data=rng.standard_normal(units)))
    ins += [-1, -1]
    h_q = dict(scale=[1 / 128], zp=[5]) if int8 else {}
    c_q = dict(scale=[2 ** -11], zp=[0]) if int8 else {}
    ins.append(m.tensor("h", [batch, units], "int8" if int8 else "float32", variable=True, **h_q))
    ins.append(m.tensor("c", [batch, units], "int16" if int8 else "float32", variable=True, **c_q))
    ins += [-1, -1, -1, -1]
    out_shape = [steps, batch, units] if time_major else [batch, steps, units]
    y = m.tensor("y", out_shape, "int8" if int8 else "float32", **h_q)
    m.op("UNIDIRECTIONAL_SEQUENCE_LSTM", ins, [y],
         ("UnidirectionalSequenceLSTMOptions",
          dict(FusedActivationFunction=4, CellClip=0.4, TimeMajor=time_major)))
    return m.build([x], [y]), x_shape

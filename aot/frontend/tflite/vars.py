"""TFLite resource variables and the ops of streaming models, for the TFLite importer.

A streaming model (microWakeWord, ...) keeps state between invocations in
resource variables: VAR_HANDLE names one (by container and shared name),
READ_VARIABLE reads it, ASSIGN_VARIABLE replaces its value, and CALL_ONCE
runs an initializer subgraph on the first invocation whose ASSIGN_VARIABLEs
give the initial values. Here each variable becomes a graph variable (a
persistent state buffer of the package, as LSTM state is): its initial value
is the constant the initializer assigns, a READ is its current value, the last
ASSIGN its update. What does not fit this (an initializer that computes, a
variable read before it has a value, a type that changes) is refused.

`VariableOps` is a mixin of the importer's `_Builder`: its `_op_*` methods are
found by op name like the builder's own, and use the builder's helpers.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from aot.errors import ModelError, ShapeError, UnsupportedError
from aot.frontend.tflite.schema import DTYPES
from aot.ir.graph import TensorType

RESOURCE = 13  # TFLite TensorType RESOURCE: a variable's handle, no data of its own
_INT64_MAX = np.iinfo(np.int64).max
_INT64_MIN = np.iinfo(np.int64).min


def _var_key(options: dict[str, Any]) -> tuple[str, str]:
    def text(v) -> str:
        return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v or "")
    return text(options.get("Container")), text(options.get("SharedName"))


class VariableOps:
    """Resource variables, CALL_ONCE, STRIDED_SLICE and SPLIT_V for `_Builder`."""

    # -- resource variables

    def _vars_state(self) -> dict[str, Any]:
        st = self.__dict__.get("_var_state")
        if st is None:
            st = self.__dict__["_var_state"] = {
                "handles": {},   # resource tensor name -> variable key
                "names": {},     # variable key -> its graph name (the first handle's)
                "init": {},      # variable key -> (TensorType, initial value)
                "current": {},   # graph name -> the tensor holding its value now
                "called": False,
            }
        return st

    def _op_CALL_ONCE(self, op, ins, outs):
        st = self._vars_state()
        if st["called"] or st["current"]:
            raise UnsupportedError(f"CALL_ONCE node '{self.cur}': a second CALL_ONCE, or one "
                                   "after a variable is used, is not supported yet")
        st["called"] = True
        index = int(op.options.get("InitSubgraphIndex", 0))
        if not 0 < index <= len(self.m.others):
            raise ModelError(f"CALL_ONCE node '{self.cur}': initializer subgraph {index} "
                             f"of {len(self.m.others) + 1}")
        st["init"].update(self._initial_values(self.m.others[index - 1], index))

    def _initial_values(self, sub, index: int
                        ) -> dict[tuple[str, str], tuple[TensorType, np.ndarray]]:
        """The constants the initializer subgraph assigns, by variable key."""
        handles: dict[int, tuple[str, str]] = {}
        values: dict[tuple[str, str], tuple[TensorType, np.ndarray]] = {}
        for k, op in enumerate(sub.ops):
            where = f"CALL_ONCE initializer subgraph {index}, operator {k} ({op.code})"
            if op.code == "VAR_HANDLE" and len(op.outputs) == 1:
                handles[op.outputs[0]] = _var_key(op.options)
            elif op.code == "ASSIGN_VARIABLE" and len(op.inputs) == 2:
                h, v = op.inputs
                if h not in handles:
                    raise ModelError(f"{where}: assigns through a tensor no VAR_HANDLE gives")
                values[handles[h]] = self._sub_constant(sub, v, where)
            else:
                raise UnsupportedError(f"{where}: only VAR_HANDLE and ASSIGN_VARIABLE of "
                                       "constants are supported in an initializer yet")
        return values

    def _sub_constant(self, sub, i: int, where: str) -> tuple[TensorType, np.ndarray]:
        if not 0 <= i < len(sub.tensors):
            raise ModelError(f"{where}: tensor index {i} out of range")
        t = sub.tensors[i]
        dtype = DTYPES.get(t.type_code)
        raw = self.m.buffers[t.buffer] if 0 < t.buffer < len(self.m.buffers) else b""
        if dtype is None or not raw:
            raise UnsupportedError(f"{where}: the assigned value '{t.name}' is not a constant "
                                   "(not supported yet)")
        ty = TensorType(t.shape, dtype, self._quant(t, t.name, t.shape, dtype, True))
        return ty, self._array(raw, dtype, t.shape, t.name)

    def _op_VAR_HANDLE(self, op, ins, outs):
        st = self._vars_state()
        key = _var_key(op.options)
        st["handles"][outs[0]] = key
        st["names"].setdefault(key, outs[0])

    def _variable(self, handle: str, ty: TensorType, what: str) -> str:
        """The graph variable behind a handle, declared on first use with type ty."""
        st = self._vars_state()
        key = st["handles"].get(handle)
        if key is None:
            raise ModelError(f"{self.op_label}: '{handle}' is not a VAR_HANDLE output")
        name = st["names"][key]
        label = f"resource variable '{key[1] or name}'"
        if name not in self.variables:
            if key not in st["init"]:
                raise UnsupportedError(f"{self.op_label}: {label} has no initial value from a "
                                       "CALL_ONCE initializer (not supported yet)")
            init_ty, value = st["init"][key]
            if (init_ty.shape, init_ty.dtype) != (ty.shape, ty.dtype):
                raise UnsupportedError(f"{self.op_label}: {label} is initialized as "
                                       f"{init_ty.dtype}{list(init_ty.shape)} but {what} "
                                       f"{ty.dtype}{list(ty.shape)} (not supported yet)")
            self.types[name] = ty
            self.variables[name] = value.astype(ty.dtype)
            st["current"][name] = name
        elif self.types[name] != ty:
            vt = self.types[name]
            raise UnsupportedError(f"{self.op_label}: {label} holds {vt.dtype}{list(vt.shape)} "
                                   f"{vt.quant} but {what} {ty.dtype}{list(ty.shape)} {ty.quant} "
                                   "(not supported yet)")
        return name

    def _op_READ_VARIABLE(self, op, ins, outs):
        self._need(ins, 1)
        name = self._variable(ins[0], self.ty(outs[0]), "is read as")
        self.emit("Identity", [self._vars_state()["current"][name]], outs)

    def _op_ASSIGN_VARIABLE(self, op, ins, outs):
        self._need(ins, 2)
        name = self._variable(ins[0], self.ty(ins[1]), "is assigned")
        if ins[1] in self.constants or ins[1] in {self.tensor(i) for i in self.m.inputs}:
            raise UnsupportedError(f"{self.op_label}: assigning a constant or a model input "
                                   "to a variable is not supported yet")
        self._vars_state()["current"][name] = ins[1]
        self.updates[name] = ins[1]

    # -- slicing

    def _op_STRIDED_SLICE(self, op, ins, outs):
        self._need(ins, 3)
        o = op.options
        for flag in ("EllipsisMask", "NewAxisMask", "Offset"):
            if int(o.get(flag, 0)):
                raise UnsupportedError(f"{self.op_label}: {flag} is not supported yet")
        shape = self.ty(ins[0]).shape
        begin = self.const(ins[1], "begin").astype(np.int64).reshape(-1)
        end = self.const(ins[2], "end").astype(np.int64).reshape(-1)
        strides = (self.const(ins[3], "strides").astype(np.int64).reshape(-1)
                   if len(ins) > 3 and ins[3] else np.ones_like(begin))
        if not len(begin) == len(end) == len(strides) <= len(shape):
            raise ModelError(f"{self.op_label}: begin, end and strides of lengths {len(begin)}, "
                             f"{len(end)}, {len(strides)} for a rank-{len(shape)} input")
        bm, em, sm = (int(o.get(f, 0)) for f in ("BeginMask", "EndMask", "ShrinkAxisMask"))
        starts, ends, steps = [], [], []
        for a in range(len(begin)):
            b, e, s = int(begin[a]), int(end[a]), int(strides[a])
            if s == 0:
                raise ModelError(f"{self.op_label}: stride 0 on axis {a}")
            if sm >> a & 1:
                b = b + shape[a] if b < 0 else b
                if not 0 <= b < shape[a]:
                    raise ShapeError(f"{self.op_label}: shrunk axis {a} index "
                                     f"{int(begin[a])} outside dimension {shape[a]}")
                e, s = b + 1, 1
            else:
                if bm >> a & 1:
                    b = 0 if s > 0 else _INT64_MAX
                if em >> a & 1:
                    e = _INT64_MAX if s > 0 else _INT64_MIN
            starts.append(b)
            ends.append(e)
            steps.append(s)
        sliced = outs[0] if not sm else self.tmp("sliced")
        self.emit("Slice", [ins[0], self.new_const("starts", np.array(starts, np.int64)),
                            self.new_const("ends", np.array(ends, np.int64)),
                            self.new_const("axes", np.arange(len(starts), dtype=np.int64)),
                            self.new_const("steps", np.array(steps, np.int64))], [sliced])
        if sm:  # the shrunk axes go: the declared output shape
            self.emit("Reshape", [sliced, self.new_const(
                "shape", np.array(self.ty(outs[0]).shape, np.int64))], outs, "shrink")

    def _op_SPLIT_V(self, op, ins, outs):
        self._need(ins, 3)
        shape = self.ty(ins[0]).shape
        axis = int(self.const(ins[2], "axis").reshape(-1)[0])
        if not -len(shape) <= axis < len(shape):
            raise ModelError(f"{self.op_label}: axis {axis} for a rank-{len(shape)} input")
        axis %= len(shape)
        sizes = [int(v) for v in self.const(ins[1], "size_splits").reshape(-1)]
        if sizes.count(-1) == 1:
            sizes[sizes.index(-1)] = shape[axis] - (sum(sizes) + 1)
        self.emit("Split", [ins[0], self.new_const("split", np.array(sizes, np.int64))], outs,
                  axis=axis)


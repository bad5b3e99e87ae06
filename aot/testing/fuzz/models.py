"""Hostile model files: seeded, deterministic mutators and a case runner.

`mutate(path, seed)` turns one of the shared models into a hostile variant:
the same (model, seed) always gives the same bytes. Mutations are either
structure-aware (the ONNX protobuf edited with the onnx package; the TFLite
flatbuffer patched in place at the offsets its bindings report, since the
`tflite` package has no object API) or byte-level (truncation, bit flips,
chunks inserted, deleted or overwritten).

`run_case(path, out_dir, ...)` packages one file through `aot.cli.main` in
this process, under a wall-clock alarm and a cap on AOT_MAX_TENSOR_ELEMENTS,
and judges the outcome: exit 0 with the package whole, or exit 2 with one
line `aot: error: ...`. Anything else (another exit code, a traceback, an
'internal error', a timeout, a partial output) is a failure.
Used by tests/fuzz/test_fuzz.py and scripts/fuzz.py.
"""
from __future__ import annotations

import contextlib
import io
import os
import random
import signal
import struct
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Optional

# Values that break assumptions: signs, zero, 32/64-bit edges, "big enough to
# exhaust memory if trusted".
HOSTILE_DIMS = (0, -1, -7, 1 << 30, (1 << 31) - 1, 1 << 20, 1 << 40, 1 << 62, 65536, 3)
HOSTILE_I32 = (-1, -2, 0, 1, 255, 256, 65535, 1 << 20, (1 << 31) - 1, -(1 << 31))
HOSTILE_U32 = (0, 1, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFF, 1 << 20)
HOSTILE_F32 = (float("nan"), float("inf"), float("-inf"), 0.0, -1.0, 1e30, 1e-30, 1e6)


@dataclass(frozen=True)
class Mutant:
    model: str       # the source model's file name
    seed: int
    mutation: str    # the mutator's name
    detail: str      # what exactly it changed
    data: bytes
    suffix: str      # ".onnx" or ".tflite"

    def label(self) -> str:
        return f"{self.model} seed {self.seed}: {self.mutation} ({self.detail})"


class Skip(Exception):
    """A mutator that does not apply to this model (the caller picks another)."""


Mutator = Callable[[bytes, random.Random], tuple[bytes, str]]


# ------------------------------------------------------------------ byte level

def _truncate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    n = rng.choice((0, 1, 4, 7, 8, 16, rng.randrange(len(data)), len(data) - 1,
                    len(data) // 2, rng.randrange(len(data))))
    return data[:n], f"truncated to {n} of {len(data)} bytes"


def _bit_flips(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    out = bytearray(data)
    k = rng.choice((1, 1, 2, 4, 8, 32))
    region = rng.choice(("any", "head"))  # the head holds the tables' offsets
    span = min(len(out), 4096) if region == "head" else len(out)
    for _ in range(k):
        i = rng.randrange(span)
        out[i] ^= 1 << rng.randrange(8)
    return bytes(out), f"{k} bit flips ({region})"


def _overwrite_words(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    out = bytearray(data)
    k = rng.choice((1, 2, 4))
    span = min(len(out), rng.choice((256, 4096, len(out))))
    for _ in range(k):
        i = rng.randrange(max(1, span - 4))
        struct.pack_into("<I", out, i, rng.choice(HOSTILE_U32 + (len(data), len(data) + 4)))
    return bytes(out), f"{k} 32-bit words overwritten"


def _chunk(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    i = rng.randrange(len(data))
    n = rng.choice((1, 3, 16, 100, 1000))
    kind = rng.choice(("insert", "delete", "duplicate", "zero", "random"))
    if kind == "insert":
        return data[:i] + rng.randbytes(n) + data[i:], f"{n} random bytes inserted at {i}"
    if kind == "delete":
        return data[:i] + data[i + n:], f"{n} bytes deleted at {i}"
    if kind == "duplicate":
        return data[:i] + data[i:i + n] + data[i:], f"{n} bytes duplicated at {i}"
    if kind == "zero":
        return data[:i] + bytes(len(data[i:i + n])) + data[i + n:], f"{n} bytes zeroed at {i}"
    return data[:i] + rng.randbytes(len(data[i:i + n])) + data[i + n:], \
        f"{n} bytes randomized at {i}"


BYTE_MUTATORS: dict[str, Mutator] = {
    "truncate": _truncate, "bit_flips": _bit_flips, "overwrite_words": _overwrite_words,
    "chunk": _chunk,
}


# ------------------------------------------------------------------ TFLite (patched in place)

@dataclass(frozen=True)
class _Site:
    """One patchable field of the flatbuffer: where it is and how it is stored."""
    what: str
    pos: int
    fmt: str       # struct format: "<i", "<I", "<b", "<B", "<f", "<q", "<Q"
    kind: str      # what values make sense: dim, tensor, buffer, opcode, type, scale, ...


def _field(table, slot: int) -> Optional[int]:
    """Absolute position of a table's scalar field, None when absent (default)."""
    o = table._tab.Offset(4 + 2 * slot)
    return table._tab.Pos + o if o else None


def _vector(table, slot: int) -> Optional[tuple[int, int]]:
    """(length-prefix position, element start) of a table's vector field."""
    o = table._tab.Offset(4 + 2 * slot)
    if not o:
        return None
    start = table._tab.Vector(o)
    return start - 4, start


# Builtin options tables we patch: field formats by slot.
_OPTION_FIELDS = {
    "Conv2DOptions": ("<b", "<i", "<i", "<b", "<i", "<i"),
    "DepthwiseConv2DOptions": ("<b", "<i", "<i", "<i", "<b", "<i", "<i"),
    "Pool2DOptions": ("<b", "<i", "<i", "<i", "<i", "<b"),
    "FullyConnectedOptions": ("<b", "<b", "<B", "<B"),
    "SoftmaxOptions": ("<f",),
    "ConcatenationOptions": ("<i", "<b"),
    "AddOptions": ("<b", "<B"),
    "MulOptions": ("<b",),
    "ReducerOptions": ("<B",),
    "UnidirectionalSequenceLSTMOptions": ("<b", "<f", "<f", "<B", "<B"),
}


def _vec_sites(table, slot: int, what: str, fmt: str, kind: str, size: int) -> list[_Site]:
    v = _vector(table, slot)
    if v is None:
        return []
    n = struct.unpack_from("<I", table._tab.Bytes, v[0])[0]
    sites = [_Site(f"{what} length", v[0], "<I", "length")]
    sites += [_Site(f"{what}[{k}]", v[1] + k * size, fmt, kind) for k in range(n)]
    return sites


@lru_cache(maxsize=32)
def _tflite_sites(data: bytes) -> tuple[_Site, ...]:
    import tflite
    model = tflite.Model.GetRootAsModel(data, 0)
    sites: list[_Site] = []
    for i in range(model.OperatorCodesLength()):
        oc = model.OperatorCodes(i)
        for slot, fmt in ((0, "<b"), (3, "<i")):
            pos = _field(oc, slot)
            if pos is not None:
                sites.append(_Site(f"operator_codes[{i}].builtin_code", pos, fmt, "opcode"))
    for i in range(model.BuffersLength()):
        b = model.Buffers(i)
        sites += _vec_sites(b, 0, f"buffers[{i}].data", "<B", "byte", 1)[:1]
        for slot, name in ((1, "offset"), (2, "size")):
            pos = _field(b, slot)
            if pos is not None:
                sites.append(_Site(f"buffers[{i}].{name}", pos, "<Q", "u64"))
    sg = model.Subgraphs(0)
    sites += _vec_sites(sg, 1, "subgraph.inputs", "<i", "tensor", 4)
    sites += _vec_sites(sg, 2, "subgraph.outputs", "<i", "tensor", 4)
    sites += _vec_sites(sg, 0, "subgraph.tensors", "<I", "offset", 4)[:1]
    sites += _vec_sites(sg, 3, "subgraph.operators", "<I", "offset", 4)[:1]
    for i in range(sg.TensorsLength()):
        t = sg.Tensors(i)
        sites += _vec_sites(t, 0, f"tensors[{i}].shape", "<i", "dim", 4)
        for slot, name, fmt, kind in ((1, "type", "<b", "type"), (2, "buffer", "<I", "buffer"),
                                      (5, "is_variable", "<B", "bool")):
            pos = _field(t, slot)
            if pos is not None:
                sites.append(_Site(f"tensors[{i}].{name}", pos, fmt, kind))
        q = t.Quantization()
        if q is not None:
            sites += _vec_sites(q, 2, f"tensors[{i}].scale", "<f", "scale", 4)
            sites += _vec_sites(q, 3, f"tensors[{i}].zero_point", "<q", "i64", 8)
            pos = _field(q, 6)
            if pos is not None:
                sites.append(_Site(f"tensors[{i}].quantized_dimension", pos, "<i", "i32"))
    for i in range(sg.OperatorsLength()):
        op = sg.Operators(i)
        pos = _field(op, 0)
        if pos is not None:
            sites.append(_Site(f"operators[{i}].opcode_index", pos, "<I", "opcode_index"))
        sites += _vec_sites(op, 1, f"operators[{i}].inputs", "<i", "tensor", 4)
        sites += _vec_sites(op, 2, f"operators[{i}].outputs", "<i", "tensor", 4)
        pos = _field(op, 3)
        if pos is not None:
            sites.append(_Site(f"operators[{i}].builtin_options_type", pos, "<B", "options_type"))
        sites += _option_sites(op, i)
    return tuple(sites)


def _option_sites(op, i: int) -> list[_Site]:
    import tflite
    names = {v: k for k, v in vars(tflite.BuiltinOptions).items() if isinstance(v, int)}
    cls = names.get(op.BuiltinOptionsType())
    table = op.BuiltinOptions()
    if cls not in _OPTION_FIELDS or table is None:
        return []
    opts = getattr(tflite, cls)()
    opts.Init(table.Bytes, table.Pos)
    sites = []
    for slot, fmt in enumerate(_OPTION_FIELDS[cls]):
        pos = _field(opts, slot)
        if pos is not None:
            kind = {"<f": "f32", "<B": "bool", "<b": "enum"}.get(fmt, "i32")
            sites.append(_Site(f"operators[{i}].{cls}.field{slot}", pos, fmt, kind))
    return sites


def _tflite_counts(data: bytes) -> tuple[int, int, int, int]:
    import tflite
    model = tflite.Model.GetRootAsModel(data, 0)
    sg = model.Subgraphs(0)
    return (sg.TensorsLength(), model.BuffersLength(), model.OperatorCodesLength(),
            sg.OperatorsLength())


def _site_value(site: _Site, rng: random.Random, counts, old) -> object:
    tensors, buffers, opcodes, _ = counts
    kind = site.kind
    if kind == "dim":
        return rng.choice((0, -1, -7, (1 << 31) - 1, 1 << 20, 65536, 1 << 14, old + 1, old * 1000))
    if kind == "tensor":
        return rng.choice((-1, -2, tensors, tensors + 100, (1 << 31) - 1,
                           rng.randrange(tensors), rng.randrange(tensors)))
    if kind == "buffer":
        return rng.choice((0, buffers, 0xFFFFFFFF, rng.randrange(buffers), rng.randrange(buffers)))
    if kind == "opcode_index":
        return rng.choice((opcodes, 0xFFFFFFFF, rng.randrange(opcodes)))
    if kind == "opcode":
        return rng.choice((-1, 0, 32, 127, 150, 255, 1000, rng.randrange(200))) \
            if site.fmt == "<i" else rng.choice((-1, 0, 32, 127, rng.randrange(127)))
    if kind == "type":
        return rng.choice((0, 1, 2, 3, 5, 6, 7, 9, 10, 13, 17, 99, -1, rng.randrange(20)))
    if kind in ("scale", "f32"):
        return rng.choice(HOSTILE_F32)
    if kind == "i64":
        return rng.choice((1 << 40, -(1 << 40), 255, -129, 128, (1 << 63) - 1))
    if kind == "u64":
        return rng.choice((0, 1, 2, 1 << 40, (1 << 64) - 1, old + 1, old * 2))
    if kind == "length":
        return rng.choice((0, old + 1, old * 2 + 1, 0x7FFFFFFF, 0xFFFFFFFF, 1 << 20))
    if kind == "offset":
        return rng.choice((0, 4, old + 4, 0xFFFFFFFF))
    if kind == "bool":
        return rng.choice((0, 1, 2, 255))
    if kind == "enum":
        return rng.choice((-1, 0, 1, 2, 3, 4, 5, 6, 7, 100))
    if kind == "options_type":
        return rng.choice((0, 1, 2, 5, 8, 9, 10, 200))
    if kind == "byte":
        return rng.randrange(256)
    return rng.choice(HOSTILE_I32)


def _patch_sites(data: bytes, rng: random.Random, kinds: tuple[str, ...],
                 max_sites: int = 1) -> tuple[bytes, str]:
    sites = [s for s in _tflite_sites(data) if s.kind in kinds]
    if not sites:
        raise Skip(f"no {kinds} fields")
    counts = _tflite_counts(data)
    out = bytearray(data)
    done = []
    for _ in range(rng.randint(1, max_sites)):
        site = rng.choice(sites)
        old = struct.unpack_from(site.fmt, out, site.pos)[0]
        value = _site_value(site, rng, counts, old)
        value = _fit(site.fmt, value)
        struct.pack_into(site.fmt, out, site.pos, value)
        done.append(f"{site.what} {old} -> {value}")
    return bytes(out), "; ".join(done)


def _fit(fmt: str, value):
    """Wrap an integer into the field's range (a hostile value, kept representable)."""
    if fmt == "<f":
        return float(value)
    bits = struct.calcsize(fmt) * 8
    value = int(value) & ((1 << bits) - 1)
    if fmt[-1].islower() and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def _tfl(kinds: tuple[str, ...], max_sites: int = 1) -> Mutator:
    def mutate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
        return _patch_sites(data, rng, kinds, max_sites)
    return mutate


def _swap_operators(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Reorder two operators: a reader now runs before its writer (a cycle in
    TFLite's terms, where the operator order is the schedule)."""
    import tflite
    sg = tflite.Model.GetRootAsModel(data, 0).Subgraphs(0)
    n = sg.OperatorsLength()
    if n < 2:
        raise Skip("one operator")
    _, start = _vector(sg, 3)
    i, j = sorted(rng.sample(range(n), 2))
    out = bytearray(data)
    pi, pj = start + 4 * i, start + 4 * j
    ti = pi + struct.unpack_from("<I", data, pi)[0]
    tj = pj + struct.unpack_from("<I", data, pj)[0]
    struct.pack_into("<I", out, pi, tj - pi)
    struct.pack_into("<I", out, pj, ti - pj)
    return bytes(out), f"operators {i} and {j} swapped"


def _self_loop(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """An operator reads its own output."""
    import tflite
    sg = tflite.Model.GetRootAsModel(data, 0).Subgraphs(0)
    i = rng.randrange(sg.OperatorsLength())
    op = sg.Operators(i)
    if not op.InputsLength() or not op.OutputsLength():
        raise Skip("operator without inputs")
    _, start = _vector(op, 1)
    k = rng.randrange(op.InputsLength())
    out = bytearray(data)
    struct.pack_into("<i", out, start + 4 * k, int(op.Outputs(0)))
    return bytes(out), f"operators[{i}].inputs[{k}] := its own output {op.Outputs(0)}"


TFLITE_MUTATORS: dict[str, Mutator] = {
    "tfl_dims": _tfl(("dim",), 2),
    "tfl_tensor_index": _tfl(("tensor",)),
    "tfl_buffer_index": _tfl(("buffer",)),
    "tfl_buffer_extent": _tfl(("u64", "length")),
    "tfl_opcode": _tfl(("opcode", "opcode_index")),
    "tfl_dtype": _tfl(("type",)),
    "tfl_quant": _tfl(("scale", "i64", "i32")),
    "tfl_options": _tfl(("f32", "bool", "enum", "i32", "options_type"), 2),
    "tfl_variable": _tfl(("bool",)),
    "tfl_offsets": _tfl(("offset",)),
    "tfl_swap_operators": _swap_operators,
    "tfl_self_loop": _self_loop,
}


# ------------------------------------------------------------------ ONNX (edited as protobuf)

def _onnx_model(data: bytes):
    import onnx
    return onnx.ModelProto.FromString(data)


def _tensor_names(g) -> list[str]:
    names = [i.name for i in g.input] + [t.name for t in g.initializer]
    names += [o for n in g.node for o in n.output if o]
    return names


def _onnx_edit(edit: Callable) -> Mutator:
    def mutate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
        model = _onnx_model(data)
        detail = edit(model, rng)
        return model.SerializeToString(), detail
    return mutate


def _pick(seq, rng: random.Random, what: str):
    if not len(seq):
        raise Skip(f"no {what}")
    return seq[rng.randrange(len(seq))]


def _onnx_input_dims(model, rng):
    vi = _pick([i for i in model.graph.input
                if i.name not in {t.name for t in model.graph.initializer}], rng, "inputs")
    dims = vi.type.tensor_type.shape.dim
    d = _pick(dims, rng, "dims")
    choice = rng.choice(HOSTILE_DIMS + ("param", "unset"))
    if choice == "param":
        d.dim_param = "N"
    elif choice == "unset":
        d.Clear()
    else:
        d.dim_value = choice
    return f"input '{vi.name}' dim := {choice}"


def _onnx_input_dtype(model, rng):
    vi = _pick(model.graph.input, rng, "inputs")
    code = rng.choice((0, 2, 3, 5, 7, 8, 9, 10, 11, 16, 17, 22, 99))
    vi.type.tensor_type.elem_type = code
    return f"input '{vi.name}' elem_type := {code}"


def _onnx_init_dims(model, rng):
    t = _pick(model.graph.initializer, rng, "initializers")
    kind = rng.choice(("set", "add", "drop"))
    if kind == "add" or not t.dims:
        t.dims.append(rng.choice(HOSTILE_DIMS))
    elif kind == "drop":
        del t.dims[rng.randrange(len(t.dims))]
    else:
        t.dims[rng.randrange(len(t.dims))] = rng.choice(HOSTILE_DIMS)
    return f"initializer '{t.name}' dims := {list(t.dims)}"


def _onnx_init_dtype(model, rng):
    t = _pick(model.graph.initializer, rng, "initializers")
    code = rng.choice((0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 16, 17, 21, 99))
    t.data_type = code
    return f"initializer '{t.name}' data_type := {code}"


def _onnx_init_data(model, rng):
    t = _pick(model.graph.initializer, rng, "initializers")
    kind = rng.choice(("truncate", "external", "clear", "double"))
    if kind == "truncate" and t.raw_data:
        t.raw_data = t.raw_data[:rng.randrange(len(t.raw_data))]
    elif kind == "external":
        import onnx
        t.data_location = onnx.TensorProto.EXTERNAL
        e = t.external_data.add()
        e.key, e.value = "location", rng.choice(("../../etc/passwd", "weights.bin"))
    elif kind == "double" and t.raw_data:
        t.raw_data = t.raw_data + t.raw_data
    else:
        t.ClearField("raw_data")
        del t.float_data[:]
        del t.int64_data[:]
    return f"initializer '{t.name}' data {kind}"


def _onnx_init_remove(model, rng):
    inits = model.graph.initializer
    k = rng.randrange(len(inits)) if len(inits) else -1
    if k < 0:
        raise Skip("no initializers")
    name = inits[k].name
    del inits[k]
    return f"initializer '{name}' removed"


def _onnx_rewire(model, rng):
    g = model.graph
    node = _pick(g.node, rng, "nodes")
    if not node.input:
        raise Skip("node without inputs")
    k = rng.randrange(len(node.input))
    kind = rng.choice(("missing", "any", "self", "later", "empty"))
    if kind == "missing":
        new = "no_such_tensor"
    elif kind == "self":
        new = node.output[0]
    elif kind == "later":  # a later node's output: a cycle or a forward reference
        index = list(g.node).index(node)
        later = [o for n in g.node[index:] for o in n.output]
        new = _pick(later, rng, "later outputs")
    elif kind == "empty":
        new = ""
    else:
        new = _pick(_tensor_names(g), rng, "tensors")
    old = node.input[k]
    node.input[k] = new
    return f"node '{node.name}' ({node.op_type}) input {k} '{old}' -> '{new}' ({kind})"


def _onnx_outputs(model, rng):
    g = model.graph
    node = _pick(g.node, rng, "nodes")
    kind = rng.choice(("duplicate", "rename_graph_output", "drop_output", "extra_output"))
    if kind == "duplicate":
        new = _pick(_tensor_names(g), rng, "tensors")
        node.output[0] = new
        return f"node '{node.name}' output := '{new}' (written twice)"
    if kind == "rename_graph_output":
        g.output[0].name = rng.choice(("nowhere", _pick(_tensor_names(g), rng, "tensors")))
        return f"graph output := '{g.output[0].name}'"
    if kind == "drop_output":
        del node.output[:]
        return f"node '{node.name}' has no outputs"
    node.output.append(f"{node.output[0]}_extra")
    return f"node '{node.name}' gains an output"


def _onnx_op_type(model, rng):
    node = _pick(model.graph.node, rng, "nodes")
    old = node.op_type
    node.op_type = rng.choice((
        "Conv", "Gemm", "MatMul", "Reshape", "Transpose", "Concat", "Slice", "Gather",
        "Expand", "Tile", "Pad", "Resize", "ConstantOfShape", "Range", "Split", "Softmax",
        "MaxPool", "AveragePool", "BatchNormalization", "Add", "Relu", "Squeeze", "Unsqueeze",
        "Flatten", "Cast", "Clip", "ReduceMean", "Shape", "QLinearConv", "LSTM", "If", "Loop",
        "NoSuchOp", ""))
    if rng.random() < 0.2:
        node.domain = rng.choice(("com.microsoft", "ai.onnx.ml", "ai.onnx"))
    return f"node '{node.name}' op {old} -> {node.op_type} (domain '{node.domain}')"


def _onnx_attr(model, rng):
    import onnx
    nodes = [n for n in model.graph.node if n.attribute]
    node = _pick(nodes, rng, "nodes with attributes")
    a = _pick(node.attribute, rng, "attributes")
    A = onnx.AttributeProto
    kind = rng.choice(("value", "drop", "type", "value"))
    if kind == "drop":
        node.attribute.remove(a)
        return f"node '{node.name}' attribute '{a.name}' dropped"
    if kind == "type":
        a.type = rng.choice((A.FLOAT, A.INT, A.STRING, A.TENSOR, A.GRAPH, A.INTS, A.FLOATS,
                             A.UNDEFINED))
        return f"node '{node.name}' attribute '{a.name}' type := {a.type}"
    if a.type == A.INTS and len(a.ints):
        a.ints[rng.randrange(len(a.ints))] = rng.choice(HOSTILE_DIMS)
        if rng.random() < 0.3:
            a.ints.append(rng.choice(HOSTILE_DIMS))
    elif a.type == A.INT:
        a.i = rng.choice(HOSTILE_DIMS + (-(1 << 63), 2, 5))
    elif a.type == A.FLOAT:
        a.f = rng.choice(HOSTILE_F32)
    elif a.type == A.STRING:
        a.s = rng.choice((b"", b"nope", b"\xff\xfe", b"reflect", b"edge"))
    elif a.type == A.TENSOR:
        a.t.dims.append(rng.choice(HOSTILE_DIMS))
    else:
        raise Skip("attribute of another kind")
    return f"node '{node.name}' attribute '{a.name}' := {onnx.helper.get_attribute_value(a)!r}"[:200]


def _onnx_reorder(model, rng):
    g = model.graph
    if len(g.node) < 2:
        raise Skip("one node")
    i, j = sorted(rng.sample(range(len(g.node)), 2))
    a, b = type(g.node[i])(), type(g.node[j])()
    a.CopyFrom(g.node[i])
    b.CopyFrom(g.node[j])
    g.node[i].CopyFrom(b)
    g.node[j].CopyFrom(a)
    return f"nodes {i} and {j} swapped"


def _onnx_remove_node(model, rng):
    g = model.graph
    k = rng.randrange(len(g.node)) if len(g.node) else -1
    if k < 0:
        raise Skip("no nodes")
    name = g.node[k].name
    del g.node[k]
    return f"node {k} '{name}' removed"


def _onnx_opset(model, rng):
    o = _pick([o for o in model.opset_import if o.domain in ("", "ai.onnx")], rng, "opsets")
    old = o.version
    o.version = rng.choice((0, 1, 6, 7, 9, 11, 13, 18, 21, 99, -1))
    return f"opset {old} -> {o.version}"


def _int_tensor(name: str, values, dtype="int64"):
    import numpy as np
    from onnx import numpy_helper
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


def _shape_op(model, rng):
    """A shape-computing op with hostile constant operands, its output made a
    graph output (or fed to an existing node)."""
    from onnx import helper
    g = model.graph
    sources = [i.name for i in g.input if i.name not in {t.name for t in g.initializer}]
    sources += [o for n in g.node for o in n.output if o]
    x = _pick(sources, rng, "tensors")
    huge = rng.choice(((1 << 20, 1 << 20), (1 << 40,), (1 << 62,), (-5, 3), (0, 4),
                       (1 << 31, 2), (3, 1 << 16, 1 << 16), (2, 3)))
    op = rng.choice(("ConstantOfShape", "Expand", "Tile", "Range", "Resize", "Pad", "Reshape"))
    k = len(g.node)
    c = f"fuzz_const_{k}"
    y = f"fuzz_out_{k}"
    inits = []
    if op == "ConstantOfShape":
        inits.append(_int_tensor(c, huge))
        inputs = [c]
    elif op in ("Expand", "Reshape"):
        inits.append(_int_tensor(c, huge))
        inputs = [x, c]
    elif op == "Tile":
        inits.append(_int_tensor(c, [rng.choice((1 << 30, -3, 0, 1 << 62))] * 4))
        inputs = [x, c]
    elif op == "Range":
        lo, hi, step = rng.choice(((0, 1e12, 1), (0, 10, 0), (0, float("inf"), 1),
                                   (0, float("nan"), 1), (0, -(1 << 40), -1), (5, 0, 1)))
        dtype = rng.choice(("float32", "int64"))
        if dtype == "int64":
            lo, hi, step = (int(v) if v == v and abs(v) != float("inf") else 1 << 62
                            for v in (lo, hi, step))
        inits += [_int_tensor(f"{c}_{s}", v, dtype) for s, v in
                  (("start", lo), ("limit", hi), ("delta", step))]
        inputs = [f"{c}_start", f"{c}_limit", f"{c}_delta"]
    elif op == "Resize":
        scales = rng.choice(([1, 1, 1e6, 1e6], [1, 1, -2, 2], [1, 1, 0, 0],
                             [1, 1, float("nan"), 1], [1e9, 1, 1, 1]))
        inits.append(_int_tensor(f"{c}_scales", scales, "float32"))
        inputs = [x, "", f"{c}_scales"]
        if rng.random() < 0.4:
            inits.append(_int_tensor(f"{c}_sizes", [1, 1, 1 << 20, 1 << 20]))
            inputs = [x, "", "", f"{c}_sizes"]
    else:  # Pad
        pads = rng.choice(([0, 0, 1 << 30, 1 << 30] * 2, [0, 0, -1000, -1000] * 2,
                           [1 << 62] * 8, [0, 0, 1, 1]))
        inits.append(_int_tensor(c, pads))
        inputs = [x, c]
    g.initializer.extend(inits)
    g.node.append(helper.make_node(op, inputs, [y], name=f"fuzz_{op}_{k}"))
    if rng.random() < 0.7 or not g.node[:-1]:
        g.output.append(helper.make_empty_tensor_value_info(y))
        where = "a new graph output"
    else:  # feed an existing node: the new node must now come first
        target = g.node[rng.randrange(len(g.node) - 1)]
        if not target.input:
            raise Skip("target without inputs")
        target.input[0] = y
        g.node.insert(0, g.node.pop())
        where = f"input 0 of node '{target.name}'"
    if rng.random() < 0.5:  # in its latest form: ops upgraded from old opsets too
        for o in model.opset_import:
            if o.domain in ("", "ai.onnx"):
                o.version = max(o.version, 13)
    return f"{op} on '{x}' with {huge if op in ('ConstantOfShape', 'Expand', 'Reshape') else 'hostile operands'} -> {where}"


def _fan_in(model, rng):
    """A variadic node over many inputs: wide fan-in (a Sum of 1,000 tensors
    nests 1,000 deep if lowered as one expression)."""
    from onnx import helper
    g = model.graph
    sources = [i.name for i in g.input if i.name not in {t.name for t in g.initializer}]
    sources += [o for n in g.node for o in n.output if o]
    picks = [_pick(sources, rng, "tensors") for _ in range(rng.choice((1, 1, 2)))]
    n = rng.choice((17, 100, 1000, 3000))
    op = rng.choice(("Sum", "Max", "Min", "Mean", "Concat"))
    attrs = {"axis": rng.choice((0, 1, -1))} if op == "Concat" else {}
    y = f"fuzz_fan_in_{len(g.node)}"
    g.node.append(helper.make_node(op, [picks[k % len(picks)] for k in range(n)], [y],
                                   name=f"fuzz_{op}_{len(g.node)}", **attrs))
    g.output.append(helper.make_empty_tensor_value_info(y))
    return f"{op} of {n} inputs ({', '.join(picks)}) {attrs or ''}"


def _huge_constant(model, rng):
    """A Constant node whose tensor claims a huge shape with little data."""
    from onnx import helper
    g = model.graph
    t = _int_tensor("c", [1, 2, 3], rng.choice(("int64", "float32")))
    del t.dims[:]
    t.dims.extend(rng.choice(((1 << 20, 1 << 20), (1 << 62,), (-3,), (3, 0))))
    y = f"fuzz_constant_{len(g.node)}"
    g.node.insert(0, helper.make_node("Constant", [], [y], value=t))
    consumer = _pick(g.node[1:], rng, "nodes")
    if consumer.input:
        consumer.input[rng.randrange(len(consumer.input))] = y
    return f"Constant with dims {list(t.dims)} feeding node '{consumer.name}'"


ONNX_MUTATORS: dict[str, Mutator] = {
    "onnx_input_dims": _onnx_edit(_onnx_input_dims),
    "onnx_input_dtype": _onnx_edit(_onnx_input_dtype),
    "onnx_init_dims": _onnx_edit(_onnx_init_dims),
    "onnx_init_dtype": _onnx_edit(_onnx_init_dtype),
    "onnx_init_data": _onnx_edit(_onnx_init_data),
    "onnx_init_remove": _onnx_edit(_onnx_init_remove),
    "onnx_rewire": _onnx_edit(_onnx_rewire),
    "onnx_outputs": _onnx_edit(_onnx_outputs),
    "onnx_op_type": _onnx_edit(_onnx_op_type),
    "onnx_attr": _onnx_edit(_onnx_attr),
    "onnx_reorder": _onnx_edit(_onnx_reorder),
    "onnx_remove_node": _onnx_edit(_onnx_remove_node),
    "onnx_opset": _onnx_edit(_onnx_opset),
    "onnx_shape_op": _onnx_edit(_shape_op),
    "onnx_huge_constant": _onnx_edit(_huge_constant),
    "onnx_fan_in": _onnx_edit(_fan_in),
}


# ------------------------------------------------------------------ choosing a mutation

STRUCTURED_SHARE = 0.7   # the rest are byte-level


@lru_cache(maxsize=32)
def _read(path: Path) -> bytes:
    return path.read_bytes()


def mutate(path: str | Path, seed: int) -> Mutant:
    """The hostile variant `seed` of the model at `path` (deterministic)."""
    path = Path(path)
    data = _read(path)
    rng = random.Random(f"{path.name}:{seed}")  # str seeds hash with sha512: stable
    suffix = path.suffix.lower()
    structured = ONNX_MUTATORS if suffix == ".onnx" else TFLITE_MUTATORS
    for _ in range(50):
        table = structured if rng.random() < STRUCTURED_SHARE else BYTE_MUTATORS
        name = rng.choice(sorted(table))
        try:
            out, detail = table[name](data, rng)
        except Skip:
            continue
        if rng.random() < 0.1 and table is structured:  # a second, byte-level blow
            extra = rng.choice(sorted(BYTE_MUTATORS))
            out, more = BYTE_MUTATORS[extra](out, rng)
            name, detail = f"{name}+{extra}", f"{detail}; {more}"
        if out == data:
            continue  # a no-op (a value set to what it was): wasted case
        return Mutant(path.name, seed, name, detail, out, suffix)
    raise RuntimeError(f"no mutator applies to {path.name}")


# ------------------------------------------------------------------ running one case

@dataclass(frozen=True)
class Outcome:
    status: str        # "packaged" | "refused" | "failed" (aot.testing.fuzz.io: "accepted", not "packaged")
    error_class: str   # the AotError subclass of a refusal, or the failure kind
    message: str       # the error line, or what went wrong

    @property
    def failed(self) -> bool:
        return self.status == "failed"


class CaseTimeout(BaseException):
    """Raised by the alarm: a BaseException, so no `except Exception` hides it."""


@contextlib.contextmanager
def alarm_after(seconds: float):
    """CaseTimeout raised in the block once `seconds` have passed."""
    def ring(signum, frame):
        raise CaseTimeout()
    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@contextlib.contextmanager
def env_set(name: str, value: str):
    """The environment variable `name` set to `value` within the block."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


@contextlib.contextmanager
def _error_class_recorder(box: list):
    """Note the class of the error the CLI reports (it prints only the message)."""
    from aot import cli
    original = cli.fail

    def fail(*args, **kwargs):
        box.append(sys.exc_info()[0])
        return original(*args, **kwargs)
    cli.fail = fail
    try:
        yield
    finally:
        cli.fail = original


PACKAGE_FILES = ("metadata.json", "Makefile", "src", "include", "lib", "bench/bench")


def run_case(model: Path, out_dir: Path, time_limit: float = 30.0,
             max_elements: int = 1 << 22) -> Outcome:
    """`aot package model -o out_dir` in this process, judged."""
    from aot import cli
    out_dir = Path(out_dir)
    stderr, classes = io.StringIO(), []
    try:
        with env_set("AOT_MAX_TENSOR_ELEMENTS", str(max_elements)), \
                _error_class_recorder(classes), contextlib.redirect_stderr(stderr), \
                contextlib.redirect_stdout(io.StringIO()), alarm_after(time_limit):
            code = cli.main(["package", str(model), "-o", str(out_dir)])
    except CaseTimeout:
        return Outcome("failed", "timeout", f"no result within {time_limit:g} s")
    except SystemExit as e:  # argparse, or a stray sys.exit
        code = e.code if isinstance(e.code, int) else 1
    return judge(code, stderr.getvalue(), out_dir,
                 classes[-1].__name__ if classes and classes[-1] else "")


def judge(code: int, stderr: str, out_dir: Path, error_class: str = "") -> Outcome:
    """Exit 0 with the whole package, or exit 2 with one error line; else a failure."""
    lines = stderr.splitlines()
    leftovers = [p.name for p in out_dir.parent.glob(f".{out_dir.name}.*")]
    if leftovers:
        return Outcome("failed", "leftover", f"temporary dirs left behind: {leftovers}")
    if "Traceback" in stderr or "internal error" in stderr:
        return Outcome("failed", "internal", (lines or ["?"])[-1][:300])
    if code == 0:
        missing = [f for f in PACKAGE_FILES if not (out_dir / f).exists()]
        if missing:
            return Outcome("failed", "partial", f"exit 0 but the package lacks {missing}")
        return Outcome("packaged", "", "")
    if code == 2:
        if len(lines) != 1 or not lines[0].startswith("aot: error: "):
            return Outcome("failed", "stderr", f"exit 2 with {len(lines)} stderr lines: "
                           f"{stderr[:300]!r}")
        if out_dir.exists():
            return Outcome("failed", "partial", "exit 2 but the output dir exists")
        if lines[0].startswith("aot: error: out of memory"):
            # exit 2 for the user, but a budget (aot.limits) should have priced it
            return Outcome("failed", "oom", lines[0][:300])
        return Outcome("refused", error_class or "AotError", lines[0][len("aot: error: "):])
    if code is not None and code < 0:
        return Outcome("failed", "crash", f"killed by signal {-code}")
    return Outcome("failed", f"exit {code}", (lines or ["(no stderr)"])[-1][:300])

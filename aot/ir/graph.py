"""The graph IR: typed tensors, constants and nodes in topological order.

A Graph is a value: passes never mutate one, they build a new one (use
`Graph.replace`). Tensors are referred to by name; a node input named ""
is an absent optional input (ONNX's convention).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np

# The dtypes the IR knows, by numpy name.
DTYPES = ("float32", "float64", "float16", "int8", "uint8", "int16", "uint16",
          "int32", "uint32", "int64", "uint64", "bool")


@dataclass(frozen=True)
class Quant:
    """Affine quantization: real = scale * (q - zero_point).

    Per-tensor when axis is None (one scale and zero point), else per-channel
    along `axis` with one entry per channel.
    """
    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    axis: int | None = None

    def __post_init__(self):
        if len(self.scale) != len(self.zero_point):
            raise ValueError("Quant: scale and zero_point lengths differ")

    @property
    def per_channel(self) -> bool:
        return self.axis is not None

    def as_json(self) -> dict[str, Any]:
        """As metadata.json writes it: {scale: [...], zero_point: [...], axis}."""
        return {"scale": [float(s) for s in self.scale],
                "zero_point": [int(z) for z in self.zero_point], "axis": self.axis}

    def __str__(self) -> str:
        if self.axis is None:
            return f"q(s={self.scale[0]:.6g}, zp={self.zero_point[0]})"
        return f"q(axis={self.axis}, {len(self.scale)} ch)"


@dataclass(frozen=True)
class TensorType:
    shape: tuple[int, ...]
    dtype: str
    quant: Quant | None = None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize

    def __str__(self) -> str:
        dims = "x".join(str(d) for d in self.shape) or "scalar"
        q = f" {self.quant}" if self.quant else ""
        return f"{self.dtype}[{dims}]{q}"


def claim_name(base: str, taken: set[str], sep: str = "_") -> str:
    """base, or base<sep>1, base<sep>2, ...: the first not in taken, which it
    joins (deterministic: the same names taken, the same name)."""
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}{sep}{k}"
    taken.add(name)
    return name


def type_of(array: np.ndarray, quant: Quant | None = None) -> TensorType:
    return TensorType(tuple(int(d) for d in array.shape), array.dtype.name, quant)


@dataclass(frozen=True)
class Node:
    op: str
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)

    def with_(self, **changes) -> "Node":
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, eq=False)
class Graph:
    """A model: inputs, outputs, nodes in topological order.

    types: every tensor's type, once known (the importer may leave
        intermediate tensors untyped; type inference fills them in).
    constants: tensor name -> numpy array (weights, folded values).
    variables: stateful tensors (LSTM state) -> their initial value; they
        persist across runs of a deployed model and are reset to it.
    updates: variable name -> the tensor holding its value after a run.
    """
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    nodes: tuple[Node, ...]
    types: Mapping[str, TensorType]
    constants: Mapping[str, np.ndarray] = field(default_factory=dict)
    variables: Mapping[str, np.ndarray] = field(default_factory=dict)
    updates: Mapping[str, str] = field(default_factory=dict)

    def replace(self, **changes) -> "Graph":
        return dataclasses.replace(self, **changes)

    def type(self, name: str) -> TensorType:
        return self.types[name]

    def producers(self) -> dict[str, Node]:
        return {t: n for n in self.nodes for t in n.outputs}

    def consumers(self) -> dict[str, list[Node]]:
        users: dict[str, list[Node]] = {}
        for n in self.nodes:
            for t in n.inputs:
                if t:
                    users.setdefault(t, []).append(n)
        return users

    def tensor_names(self) -> Iterable[str]:
        seen = dict.fromkeys(self.inputs)
        for n in self.nodes:
            seen.update(dict.fromkeys(t for t in n.inputs if t))
            seen.update(dict.fromkeys(n.outputs))
        return seen.keys()


def _fmt_attr(v: Any) -> str:
    if isinstance(v, Graph):
        return f"<graph {v.name}: {len(v.nodes)} nodes>"
    if isinstance(v, np.ndarray):
        return f"array{list(v.shape)}"
    if isinstance(v, float):
        return f"{v:.6g}"
    return repr(v)


def print_graph(g: Graph, indent: str = "") -> str:
    """A readable listing: signature, constants summary, one line per node."""
    def t(name: str) -> str:
        ty = g.types.get(name)
        return f"%{name}: {ty}" if ty else f"%{name}"

    lines = [f"{indent}graph {g.name}({', '.join(t(i) for i in g.inputs)})"
             f" -> ({', '.join(t(o) for o in g.outputs)})"]
    if g.constants:
        nbytes = sum(a.nbytes for a in g.constants.values())
        lines.append(f"{indent}  # {len(g.constants)} constants, {nbytes} bytes")
    for name, init in g.variables.items():
        upd = g.updates.get(name)
        lines.append(f"{indent}  var {t(name)}" + (f" <- %{upd}" if upd else ""))
    for n in g.nodes:
        ins = ", ".join(("$" + i if i in g.constants else "%" + i) if i else "_"
                        for i in n.inputs)
        attrs = {k: v for k, v in n.attrs.items() if not isinstance(v, Graph)}
        attr_s = (" {" + ", ".join(f"{k}={_fmt_attr(v)}" for k, v in sorted(attrs.items())) + "}"
                  if attrs else "")
        outs = ", ".join(t(o) for o in n.outputs)
        lines.append(f"{indent}  {outs} = {n.op}({ins}){attr_s}  # {n.name}")
        for k, v in sorted(n.attrs.items()):
            if isinstance(v, Graph):
                lines.append(print_graph(v, indent + "    "))
    return "\n".join(lines)

"""Random inputs for a graph: what `aot run`, `aot bench` and `aot verify`
feed a package when the user gives none, drawn deterministically from a seed
so that the same command sees the same data."""
from __future__ import annotations

import numpy as np

from aot.ir.graph import Graph, TensorType


def random_array(ty: TensorType, rng: np.random.Generator) -> np.ndarray:
    """One random tensor of type ty.

    Quantized integer tensors cover their whole range (that is what real
    int8 inputs do); plain integers stay small (they are often indices or
    counts); floats are uniform in [-1, 1).
    """
    dt = np.dtype(ty.dtype)
    if dt == np.bool_:
        return rng.integers(0, 2, ty.shape).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        lo, hi = (info.min, info.max) if ty.quant is not None or dt.itemsize == 1 \
            else (0, 3)
        return rng.integers(lo, hi, ty.shape, endpoint=True, dtype=dt)
    return rng.uniform(-1.0, 1.0, ty.shape).astype(dt)


def random_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: random_array(graph.types[name], rng) for name in graph.inputs}


class RandomSamples:
    """`count` samples of random_inputs (seeds seed, seed+1, ...), each a
    list in the graph's input order, made as they are iterated."""

    def __init__(self, graph: Graph, seed: int, count: int) -> None:
        self.graph, self.seed, self.count = graph, seed, count

    def __len__(self) -> int:
        return self.count

    def __iter__(self):
        for i in range(self.count):
            d = random_inputs(self.graph, self.seed + i)
            yield [d[n] for n in self.graph.inputs]

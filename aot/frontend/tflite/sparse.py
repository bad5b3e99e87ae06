"""Sparse TFLite constants, densified at import.

A sparse tensor's buffer holds only the values its sparsity parameters keep:
the tensor's dims, some of them split into blocks (block_map, one extra
"block dim" per split), are visited in traversal_order; a DENSE level visits
every index, a SPARSE_CSR level the indices array_indices lists between
array_segments[parent] and array_segments[parent + 1]. Each leaf of that
walk takes the next value. The walk here is level by level over arrays, so
a large weight costs numpy operations, not a Python call per element.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aot.errors import ModelError

DENSE, SPARSE_CSR = 0, 1


@dataclass(frozen=True)
class SparseLevel:
    format: int
    dense_size: int
    segments: tuple[int, ...] = ()
    indices: tuple[int, ...] = ()


@dataclass(frozen=True)
class SparseSpec:
    traversal_order: tuple[int, ...]
    block_map: tuple[int, ...]
    levels: tuple[SparseLevel, ...]


def _index_vector(kind: int, table) -> tuple[int, ...]:
    import tflite
    if table is None or kind == 0:
        return ()
    cls = {1: tflite.Int32Vector, 2: tflite.Uint16Vector, 3: tflite.Uint8Vector}.get(kind)
    if cls is None:
        raise ModelError(f"corrupt TFLite file: sparse index vector type {kind}")
    vec = cls()
    vec.Init(table.Bytes, table.Pos)
    return tuple(int(v) for v in vec.ValuesAsNumpy()) if vec.ValuesLength() else ()


def decode_sparsity(t) -> SparseSpec | None:
    """The sparsity parameters of a flatbuffer Tensor, or None (dense)."""
    sp = t.Sparsity()
    if sp is None:
        return None
    levels = []
    for i in range(sp.DimMetadataLength()):
        d = sp.DimMetadata(i)
        levels.append(SparseLevel(int(d.Format()), int(d.DenseSize()),
                                  _index_vector(int(d.ArraySegmentsType()), d.ArraySegments()),
                                  _index_vector(int(d.ArrayIndicesType()), d.ArrayIndices())))
    order = tuple(int(v) for v in sp.TraversalOrderAsNumpy()) if sp.TraversalOrderLength() else ()
    block_map = tuple(int(v) for v in sp.BlockMapAsNumpy()) if sp.BlockMapLength() else ()
    return SparseSpec(order, block_map, tuple(levels))


def _expanded_dims(spec: SparseSpec, shape: tuple[int, ...], name: str) -> list[int]:
    """Sizes of the tensor's dims (blocked ones divided) and of its block dims."""
    rank = len(shape)
    n = rank + len(spec.block_map)
    if sorted(spec.traversal_order) != list(range(n)) or len(spec.levels) != n:
        raise ModelError(f"tensor '{name}': sparsity traversal order {list(spec.traversal_order)}"
                         f" with {len(spec.levels)} dim metadata does not cover its {rank} dims "
                         f"and {len(spec.block_map)} block dims")
    if any(not 0 <= d < rank for d in spec.block_map) or len(set(spec.block_map)) != len(
            spec.block_map):
        raise ModelError(f"tensor '{name}': sparsity block map {list(spec.block_map)}")
    sizes = list(shape) + [0] * len(spec.block_map)
    for level, dim in zip(spec.levels, spec.traversal_order):
        if dim >= rank:   # a block dim: its size is its level's dense_size
            block = level.dense_size
            orig = spec.block_map[dim - rank]
            if level.format != DENSE:
                raise ModelError(f"tensor '{name}': block dim {dim} is not a dense sparsity level")
            if block <= 0 or shape[orig] % block:
                raise ModelError(f"tensor '{name}': block size {block} does not divide "
                                 f"dim {orig} of shape {list(shape)}")
            sizes[dim] = block
    for k, orig in enumerate(spec.block_map):
        sizes[orig] //= sizes[rank + k]
    return sizes


def densify(values: np.ndarray, spec: SparseSpec, shape: tuple[int, ...], name: str
            ) -> np.ndarray:
    """The dense tensor of `shape` the sparse `values` stand for (zeros elsewhere)."""
    rank = len(shape)
    sizes = _expanded_dims(spec, shape, name)
    parents = np.zeros(1, np.int64)            # each leaf-so-far's position in its level
    coords = np.zeros((1, 0), np.int64)        # its index along each level visited
    for level, dim in zip(spec.levels, spec.traversal_order):
        size = sizes[dim]
        if level.format == DENSE:
            if level.dense_size != size:
                raise ModelError(f"tensor '{name}': dense sparsity level of size "
                                 f"{level.dense_size} for a dim of {size}")
            idx = np.tile(np.arange(size, dtype=np.int64), parents.size)
            parents = (np.repeat(parents, size) * size + idx)
            coords = np.column_stack([np.repeat(coords, size, axis=0), idx])
        elif level.format == SPARSE_CSR:
            seg = np.asarray(level.segments, np.int64)
            ind = np.asarray(level.indices, np.int64)
            if (seg.size < (int(parents.max()) + 2 if parents.size else 1) or
                    (seg.size and (seg[0] != 0 or np.any(np.diff(seg) < 0)
                                   or seg[-1] > ind.size))
                    or np.any(ind < 0) or np.any(ind >= size)):
                raise ModelError(f"tensor '{name}': corrupt sparse (CSR) dim metadata")
            starts, ends = seg[parents], seg[parents + 1]
            counts = ends - starts
            total = int(counts.sum())
            # positions starts[p] .. ends[p] - 1 for every parent p, in order
            offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts,
                                                                   counts)
            pos = np.repeat(starts, counts) + offsets
            coords = np.column_stack([np.repeat(coords, counts, axis=0), ind[pos]])
            parents = pos
        else:
            raise ModelError(f"tensor '{name}': sparsity dim format {level.format}")
    if parents.size != values.size:
        raise ModelError(f"tensor '{name}': sparsity metadata addresses {parents.size} "
                         f"values, the buffer holds {values.size}")
    orig = np.zeros((values.size, rank), np.int64)
    for level_k, dim in enumerate(spec.traversal_order):
        if dim < rank:
            scale = sizes[rank + spec.block_map.index(dim)] if dim in spec.block_map else 1
            orig[:, dim] += coords[:, level_k] * scale
        else:
            orig[:, spec.block_map[dim - rank]] += coords[:, level_k]
    dense = np.zeros(shape, values.dtype)
    dense[tuple(orig.T)] = values
    return dense

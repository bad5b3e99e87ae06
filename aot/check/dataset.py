"""The samples of `aot verify --dataset`, read lazily (docs/deploy.md
"Validation on your data").

`open_dataset(path, graph, limit)` checks the whole dataset up front from
the .npy headers alone (an .npz member's header read from its zip stream,
its data size against the one the archive records: aot.support.npyfile),
against the model's inputs and the dataset budgets of aot/limits.py, and
returns a `Dataset`: its length, and its samples in order, read a block at a
time when iterated. Nothing of a sample's data is in memory before it is
needed, so a run's memory does not grow with the number of samples.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import numpy as np

from aot.errors import InputError
from aot.ir.graph import Graph, TensorType
from aot.limits import check_dataset
from aot.passes.float_io import quantizable
from aot.support.npyfile import NpzArchive, read_header, read_npy

SUFFIXES = (".npz", ".npy")
# Samples read from an .npz member at a time: a few hundred KB for a
# keyword-spotting input, and the zip stream's per-read cost spread thin.
BLOCK = 256


class Dataset:
    """The samples of a dataset, each [one array per graph input, in order];
    len() of them, read when iterated (a fresh pass each time)."""

    def __init__(self, path: Path, graph: Graph, count: int, held: int, files=None,
                 members=None) -> None:
        self.path, self.graph, self.held = path, graph, held
        self._count, self._files, self._members = count, files, members

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[list[np.ndarray]]:
        if self._files is not None:
            for f in self._files[:self._count]:
                yield _read_sample_file(f, self.graph)
        else:
            yield from _npz_samples(self.path, self.graph, self._members, self._count)


def open_dataset(path: str | Path, graph: Graph, limit: int | None = None) -> Dataset:
    """The dataset at `path`, checked against `graph`'s inputs: an .npz with
    one array per input name and a leading sample axis (a single-input model
    also takes one unnamed array, `arr_0`), or a directory of one .npz (input
    names as keys, no sample axis) or .npy (single-input models) per sample,
    in sorted file-name order. `limit`: only the first `limit` samples."""
    path = Path(path)
    if limit is not None and limit < 1:
        raise InputError(f"--limit must be >= 1, got {limit}")
    if path.is_dir():
        return _open_directory(path, graph, limit)
    if not path.is_file():
        raise InputError(f"dataset {path}: no such file or directory")
    if path.suffix.lower() != ".npz":
        raise InputError(f"dataset {path}: not an .npz file (a dataset is an .npz with one "
                         "array per input, or a directory of .npz/.npy files, one per sample)")
    return _open_npz(path, graph, limit)


def load_dataset(path: str | Path, graph: Graph, limit: int | None = None
                 ) -> list[list[np.ndarray]]:
    """Every sample of open_dataset(path, graph, limit), in memory."""
    return list(open_dataset(path, graph, limit))


def _sample_bytes(graph: Graph) -> int:
    return sum(math.prod(graph.types[n].shape) * np.dtype(graph.types[n].dtype).itemsize
               for n in graph.inputs)


# ------------------------------------------------------------------ .npz stacks

def _open_npz(path: Path, graph: Graph, limit: int | None) -> Dataset:
    where = f"dataset {path}"
    members = {}
    with NpzArchive(path, where) as npz:
        for name in graph.inputs:
            member = _pick(where, npz.names, graph, name)
            with npz.open(member) as m:
                _stacked_shape(where, name, graph.types[name], m.shape)
                _check_dtype(where, name, graph.types[name], m.dtype)
                m.check_rows()
                members[name] = (member, m.shape[0])
    counts = [members[n][1] for n in graph.inputs]
    if counts and any(c != counts[0] for c in counts):
        other = next(n for n in graph.inputs if members[n][1] != counts[0])
        raise InputError(f"{where}: input '{graph.inputs[0]}' has {counts[0]} samples, input "
                         f"'{other}' has {members[other][1]}")
    if not counts or counts[0] == 0:
        raise InputError(f"{where}: no samples (the leading sample axis is empty)")
    count = counts[0] if limit is None else min(limit, counts[0])
    check_dataset(where, count, count * _sample_bytes(graph))
    return Dataset(path, graph, count, counts[0],
                   members={n: m for n, (m, _) in members.items()})


def _pick(where: str, held: Sequence[str], graph: Graph, name: str) -> str:
    if name in held:
        return name
    if len(graph.inputs) == 1 and "arr_0" in held:
        return "arr_0"
    listed = ", ".join(repr(k) for k in sorted(held)) or "no arrays"
    raise InputError(f"{where}: no array for input '{name}' (it holds {listed})")


def _stacked_shape(where: str, name: str, ty: TensorType, shape: tuple[int, ...]) -> None:
    """A member of shape [samples, *input shape], or with the sample axis
    standing in for the input's batch axis of 1 (a Keras-style
    [N, 49, 10, 1] for a [1, 49, 10, 1] input)."""
    want = tuple(ty.shape)
    if len(shape) == len(want) + 1 and shape[1:] == want:
        return
    if want[:1] == (1,) and len(shape) == len(want) and shape[1:] == want[1:]:
        return
    alt = f" or [N, {', '.join(map(str, want[1:]))}]" if want[:1] == (1,) else ""
    raise InputError(f"{where}: input '{name}' needs an array of shape "
                     f"[N, {', '.join(map(str, want))}]{alt}, got {list(shape)}")


def _npz_samples(path: Path, graph: Graph, members: Mapping[str, str], count: int
                 ) -> Iterator[list[np.ndarray]]:
    where = f"dataset {path}"
    with NpzArchive(path, where) as npz:
        opened = [npz.open(members[n]) for n in graph.inputs]
        try:
            done = 0
            while done < count:
                n = min(BLOCK, count - done)
                blocks = [_cast(where, name, graph.types[name],
                                m.read_rows(n).reshape(n, *graph.types[name].shape))
                          for name, m in zip(graph.inputs, opened)]
                for i in range(n):
                    yield [b[i] for b in blocks]
                done += n
        finally:
            for m in opened:
                m.close()


# --------------------------------------------------------- a file per sample

def _open_directory(folder: Path, graph: Graph, limit: int | None) -> Dataset:
    where = f"dataset {folder}"
    try:
        with os.scandir(folder) as entries:
            names = [e.name for e in entries
                     if os.path.splitext(e.name)[1].lower() in SUFFIXES and e.is_file()]
    except OSError as e:
        raise InputError(f"{where}: cannot list it ({e.strerror or e})") from None
    if not names:
        raise InputError(f"{where}: no .npz or .npy files (one per sample)")
    count = len(names) if limit is None else min(limit, len(names))
    check_dataset(where, count, count * _sample_bytes(graph))
    files = [folder / n for n in sorted(names)[:count]]
    for f in files:             # every header, before anything is built
        _check_sample_file(f, graph)
    return Dataset(folder, graph, count, len(names), files=files)


def _check_sample_file(f: Path, graph: Graph) -> None:
    where = f"dataset {f}"
    if f.suffix.lower() == ".npy":
        _single_input(f, graph)
        name = graph.inputs[0]
        try:
            with open(f, "rb") as fh:
                shape, _, dtype = read_header(fh, where)
        except OSError as e:
            raise InputError(f"{where}: cannot read it ({e.strerror or e})") from None
        _one_shape(where, name, graph.types[name], shape)
        _check_dtype(where, name, graph.types[name], dtype)
        return
    with NpzArchive(f, where) as npz:
        for name in graph.inputs:
            with npz.open(_pick(where, npz.names, graph, name)) as m:
                _one_shape(where, name, graph.types[name], m.shape)
                _check_dtype(where, name, graph.types[name], m.dtype)


def _read_sample_file(f: Path, graph: Graph) -> list[np.ndarray]:
    """One sample file's arrays, each read with its expected element count
    as the limit (a file changed since it was checked is refused, not read)."""
    where = f"dataset {f}"
    if f.suffix.lower() == ".npy":
        _single_input(f, graph)
        ty = graph.types[graph.inputs[0]]
        array = read_npy(f, where, limit_elements=math.prod(ty.shape))
        return [_one_sample(where, graph.inputs[0], ty, array)]
    with NpzArchive(f, where) as npz:
        return [_one_sample(where, n, graph.types[n],
                            npz.read(_pick(where, npz.names, graph, n), graph.types[n].shape))
                for n in graph.inputs]


def _single_input(f: Path, graph: Graph) -> None:
    if len(graph.inputs) != 1:
        raise InputError(f"dataset {f}: an .npy holds one array, the model takes "
                         f"{len(graph.inputs)} inputs ({', '.join(graph.inputs)}): use one "
                         ".npz per sample")


def _one_shape(where: str, name: str, ty: TensorType, shape: tuple[int, ...]) -> None:
    """One sample file's array: the input's shape, or that shape without its
    batch axis of 1."""
    want = tuple(ty.shape)
    if shape != want and not (want[:1] == (1,) and shape == want[1:]):
        raise InputError(f"{where}: input '{name}' has shape {list(want)}, got {list(shape)}")


def _one_sample(where: str, name: str, ty: TensorType, array: np.ndarray) -> np.ndarray:
    _one_shape(where, name, ty, array.shape)
    return _cast(where, name, ty, array.reshape(ty.shape))


# ------------------------------------------------------------------- dtypes

def _check_dtype(where: str, name: str, ty: TensorType, dtype: np.dtype) -> None:
    """The exact dtype, or float data for a float32 input (numpy's default
    float64: the cast any float32 runtime would do) or for a per-tensor
    quantized input (kept as float32 for quantize_samples)."""
    if dtype.name == ty.dtype:
        return
    if dtype.kind == "f" and (ty.dtype == "float32" or quantizable(ty)):
        return
    raise InputError(f"{where}: input '{name}' is {ty.dtype}, got {dtype.name}")


def _cast(where: str, name: str, ty: TensorType, array: np.ndarray) -> np.ndarray:
    _check_dtype(where, name, ty, array.dtype)
    if array.dtype.name != ty.dtype:
        return array.astype(np.float32)
    return array if array.dtype.isnative else array.astype(array.dtype.newbyteorder("="))

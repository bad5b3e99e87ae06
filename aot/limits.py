"""Resource limits that protect aot from hostile or absurd models.

A shape is refused before anything of that size is allocated. The limit is
configurable through the environment so a user with a big machine can lift it.

Compile-time memory: every array aot computes while compiling (a folded
constant, a lowering table) is priced before it is allocated, against
AOT_COMPILE_MEMORY and, while a package for a board is built, against the
board's flash: a 100-byte model whose Range or ConstantOfShape would make a
gigabyte of weights is one line, not a MemoryError.
"""
from __future__ import annotations

import contextlib
import os
import re
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Callable, Iterator

from aot.errors import AotError, BudgetError, InputError, ShapeError

# Elements in any one tensor. 2**28 float32 is 1 GiB: far past any edge model.
DEFAULT_MAX_ELEMENTS = 1 << 28
# Dimensions of any one tensor. numpy stops at 64, and the lowering nests a
# loop (and a Python call) per dimension; edge models stay below 8.
MAX_RANK = 32


def max_elements() -> int:
    return int(os.environ.get("AOT_MAX_TENSOR_ELEMENTS", DEFAULT_MAX_ELEMENTS))


def check_shape(shape, what: str, allow_empty: bool = False) -> tuple[int, ...]:
    """Validate a static shape: positive dims, rank and size within the limits.

    allow_empty admits zero dims: empty tensors are legitimate inside shape
    arithmetic (an empty axes list, an empty prefix of a shape) and fold
    away; a model's own inputs and outputs must never be empty.
    """
    dims = tuple(int(d) for d in shape)
    if len(dims) > MAX_RANK:
        raise ShapeError(f"{what}: rank {len(dims)} exceeds the limit of {MAX_RANK} dimensions")
    bad = [d for d in dims if d < 0 or (d == 0 and not allow_empty)]
    if bad:
        raise ShapeError(f"{what}: dimension {bad[0]} in shape {list(dims)} "
                         "(dimensions must be positive and static)")
    size = 1
    for d in dims:
        size *= d
        if size > max_elements():
            raise ShapeError(f"{what}: shape {list(dims)} exceeds the limit of "
                             f"{max_elements()} elements (AOT_MAX_TENSOR_ELEMENTS)")
    return dims


# ---- datasets -----------------------------------------------------------------------

# Samples one `aot verify --dataset` runs (after --limit). Memory does not grow
# with them (samples stream in batches), time does: each is a request to the
# board and a reference run, 8 to 9.5 ms for the kws int8 model on host (most
# of it tflite-micro's), so the default is two to three hours. A 1 MB .npz of
# zeros holds 67 million float samples: refused up front with its size, not
# run for a week.
DEFAULT_MAX_DATASET_SAMPLES = 1_000_000
# Bytes of samples one run reads (decompressed), for the same reason.
DEFAULT_MAX_DATASET_BYTES = 16 << 30


def max_dataset_samples() -> int:
    """AOT_MAX_DATASET_SAMPLES, else DEFAULT_MAX_DATASET_SAMPLES."""
    text = os.environ.get("AOT_MAX_DATASET_SAMPLES")
    if text is None:
        return DEFAULT_MAX_DATASET_SAMPLES
    if not text.strip().isdigit():
        raise AotError(f"AOT_MAX_DATASET_SAMPLES={text!r}: expected a whole number")
    return int(text)


def max_dataset_bytes() -> int:
    """AOT_MAX_DATASET_BYTES, else DEFAULT_MAX_DATASET_BYTES."""
    text = os.environ.get("AOT_MAX_DATASET_BYTES")
    return (DEFAULT_MAX_DATASET_BYTES if text is None
            else parse_bytes(text, "AOT_MAX_DATASET_BYTES"))


def check_dataset(what: str, samples: int, nbytes: int) -> None:
    """Refuse a dataset of `samples` samples and `nbytes` bytes of data
    beyond the budgets, before any of it is read."""
    if samples > max_dataset_samples():
        raise InputError(f"{what}: {samples} samples ({nbytes} bytes), more than the limit of "
                          f"{max_dataset_samples()} samples (AOT_MAX_DATASET_SAMPLES lifts it; "
                          "--limit N runs the first N)")
    if nbytes > max_dataset_bytes():
        raise InputError(f"{what}: {nbytes} bytes of samples ({samples} samples), more than "
                          f"the limit of {max_dataset_bytes()} bytes (AOT_MAX_DATASET_BYTES "
                          "lifts it; --limit N runs the first N)")


# ---- control flow inlined at import ------------------------------------------------

# Iterations of one loop aot unrolls (ONNX Loop and Scan, TFLite WHILE).
MAX_UNROLL = 1024
# Nodes control flow may add to one model when it is inlined at import: every
# branch copy and unrolled iteration together, nested ones included, since
# every node becomes code (1,024 iterations of an 8-node body, 8,193 nodes:
# import 0.3 s, optimize 0.7 s, package 5 s for host on 2 cores, 2,047 kernels).
# One budget for the whole model: a per-loop one multiplies under nesting.
MAX_INLINED_NODES = 8192
# Subgraphs nested in one another (a branch in a body in a branch ...): the
# names of inlined tensors grow with the depth. ONNX's protobuf parser stops
# near 32 nested graphs; real models nest two or three.
MAX_NESTING = 64


class NodeBudget:
    """The nodes one model's control flow has added so far, against MAX_INLINED_NODES."""

    def __init__(self) -> None:
        self.used = 0

    def spend(self, count: int, where: Callable[[], str]) -> None:
        """Count `count` more nodes; `where()` names what added them, for the error."""
        self.used += count
        if self.used > MAX_INLINED_NODES:
            raise BudgetError(f"{where()}: inlining the model's control flow adds more than "
                              f"{MAX_INLINED_NODES} nodes (the budget of branches and unrolled "
                              "loops together, nested ones included)")


# ---- compile-time memory ---------------------------------------------------------------

# Bytes aot may compute at compile time, per evaluation and in total.
# `aot package` itself takes about 330 MB of address space (Python, numpy,
# onnx), so the default keeps it within a 1 GiB RLIMIT_AS; the largest real
# edge models fold a few MB.
DEFAULT_COMPILE_MEMORY = 256 << 20
# An evaluation's peak per output element, measured with tracemalloc: the
# numpy references work in 64 bits (Range: an int64 arange and a float64
# product, 16 bytes per float32 element; Tile: 4.4 bytes per element).
EVAL_BYTES_PER_ELEMENT = 16
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_bytes(text: str, what: str) -> int:
    """A byte count: `268435456`, `512M`, `2G` (binary units, an optional
    trailing `B` or `iB`)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise AotError(f"{what}={text!r}: expected a byte count such as 268435456, 512M or 2G")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def compile_memory() -> int:
    """AOT_COMPILE_MEMORY, else DEFAULT_COMPILE_MEMORY."""
    text = os.environ.get("AOT_COMPILE_MEMORY")
    return DEFAULT_COMPILE_MEMORY if text is None else parse_bytes(text, "AOT_COMPILE_MEMORY")


@dataclass(frozen=True)
class Flash:
    board: str
    nbytes: int


_FLASH: ContextVar[Flash | None] = ContextVar("aot_board_flash", default=None)


@contextlib.contextmanager
def board_flash(board: str, nbytes: int) -> Iterator[None]:
    """While compiling for a board: no compile-time constant may exceed its flash."""
    token = _FLASH.set(Flash(board, int(nbytes)))
    try:
        yield
    finally:
        _FLASH.reset(token)


_WIDE_WEIGHTS: ContextVar[bool] = ContextVar("aot_wide_weights", default=True)


@contextlib.contextmanager
def packed_weights() -> Iterator[None]:
    """While compiling: weights stay as the model packs them (no kernel
    stores them in a wider form: a board whose flash has no room for it)."""
    token = _WIDE_WEIGHTS.set(False)
    try:
        yield
    finally:
        _WIDE_WEIGHTS.reset(token)


def wide_weights() -> bool:
    """Whether kernels may store weights in a wider form (twice their bytes
    at most): yes unless compiling under packed_weights."""
    return _WIDE_WEIGHTS.get()


def _over_budget(what: str, need: str) -> BudgetError:
    return BudgetError(f"{what}: {need}, more than the compile-memory budget of "
                       f"{compile_memory()} bytes (AOT_COMPILE_MEMORY, e.g. "
                       "AOT_COMPILE_MEMORY=2G, lifts it)")


def check_flash(nbytes: int, what: str) -> None:
    """While compiling for a board: refuse a constant larger than its whole flash."""
    flash = _FLASH.get()
    if flash is not None and nbytes > flash.nbytes:
        raise BudgetError(f"{what}: a {int(nbytes)}-byte constant does not fit the flash of "
                          f"board '{flash.board}' ({flash.nbytes} bytes)")


def check_evaluation(elements: int, what: str) -> None:
    """Refuse to compute `elements` values at compile time when that would
    take more than the compile-memory budget; call it before allocating."""
    need = int(elements) * EVAL_BYTES_PER_ELEMENT
    if need > compile_memory():
        raise _over_budget(what, f"computing its {int(elements)} elements at compile time "
                                 f"takes about {need} bytes")


def check_created(nbytes: int, created_bytes: int, what: str) -> None:
    """Refuse a new constant that, with the `created_bytes` aot made before
    it, would outgrow the compile-memory budget."""
    if nbytes + created_bytes > compile_memory():
        raise _over_budget(what, f"the constants made at compile time would take "
                                 f"{int(nbytes + created_bytes)} bytes")


def check_compile_time(elements: int, nbytes: int, what: str, created_bytes: int = 0) -> None:
    """Everything a compile-time evaluation of `elements` values making a
    constant of `nbytes` must pass, before it runs: the board's flash, the
    evaluation's memory, the constants made so far."""
    check_flash(nbytes, what)
    check_evaluation(elements, what)
    check_created(nbytes, created_bytes, what)

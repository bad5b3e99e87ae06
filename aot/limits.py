"""Resource limits that protect aot from hostile or absurd models.

A shape is refused before anything of that size is allocated. The limit is
configurable through the environment so a user with a big machine can lift it.
"""
from __future__ import annotations

import os

from aot.errors import ShapeError

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

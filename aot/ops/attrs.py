"""Attribute and constant-input readers the op families share: axes
checked against a rank (a bad one is a ShapeError naming the node), and
integer lists as plain ints."""
from __future__ import annotations

import numpy as np

from aot.ops.registry import Sig


def ints(a) -> list[int]:
    return [int(v) for v in np.asarray(a).reshape(-1)]


def normalize_axis(sig: Sig, axis: int, rank: int, what: str = "axis") -> int:
    """axis in [0, rank), from ONNX's [-rank, rank)."""
    if not -rank <= axis < rank:
        raise sig.fail(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank


def normalize_axes(sig: Sig, axes, rank: int) -> list[int]:
    """normalize_axis of each; a repeated axis is an error."""
    out = [normalize_axis(sig, a, rank) for a in axes]
    if len(set(out)) != len(out):
        raise sig.fail(f"repeated axes {list(axes)}")
    return out

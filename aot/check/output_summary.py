"""What `aot run` shows of an output when it writes no files: its shape,
dtype, min/max/mean and, for class scores, the top 5.

Values are the package's own (an int8 output is shown in int8, not
dequantized): the numbers a user compares with another runtime's raw output.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from aot.ops.detect import topk_order

TOP = 5


def summarize(name: str, array: np.ndarray) -> dict[str, Any]:
    """{name, shape, dtype[, min, max, mean][, top5]}: min/max/mean when the
    output has values, top5 ([{index, score}], highest first, ties by index)
    when it is one row of scores (shape [N] or [1, N], N >= 2)."""
    a = np.asarray(array)
    out: dict[str, Any] = {"name": name, "shape": list(a.shape), "dtype": a.dtype.name}
    if a.size:
        out.update(min=a.min().item(), max=a.max().item(), mean=float(a.mean(dtype=np.float64)))
    if _is_score_row(a.shape):
        row = a.reshape(-1)
        out["top5"] = [{"index": int(i), "score": row[i].item()}
                       for i in topk_order(row, 0, True)[:TOP]]
    return out


def _is_score_row(shape: tuple[int, ...]) -> bool:
    return (len(shape) == 1 or (len(shape) == 2 and shape[0] == 1)) and shape[-1] >= 2


def summary_lines(s: dict[str, Any]) -> list[str]:
    """One line for the output, and one for its top 5 when it has them."""
    head = f"{s['name']}: {s['dtype']}{s['shape']}"
    if "min" in s:
        head += f"  min {_num(s['min'])}  max {_num(s['max'])}  mean {_num(s['mean'])}"
    else:
        head += "  (no values)"
    lines = [head]
    if "top5" in s:
        lines.append("  top-5: " + ", ".join(f"{t['index']} ({_num(t['score'])})"
                                            for t in s["top5"]))
    return lines


def _num(x: float | int) -> str:
    return str(x) if isinstance(x, int) else format(x, ".6g")

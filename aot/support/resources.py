"""Where aot's data directories are: templates, targets, boards, runtime_c.

In a checkout they sit at the top of the repo; a wheel installs them inside
the package as aot/_data/<dir> (pyproject.toml maps them there).
"""
from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent.parent     # aot/
DATA_DIRS = ("templates", "targets", "boards", "runtime_c")


def data_dir(kind: str) -> Path:
    if kind not in DATA_DIRS:
        raise ValueError(f"unknown data directory {kind!r}")
    for candidate in (_PKG / "_data" / kind, _PKG.parent / kind):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"aot's {kind}/ directory is missing from this installation")

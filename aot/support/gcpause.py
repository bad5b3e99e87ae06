"""Python's cyclic garbage collector paused while aot builds a package.

Lowering builds ~10^5 small frozen TIR nodes a large kernel, and the
collector walks the live ones each time it runs a generation: its
collections took about a third of the CPU time of packaging the MLPerf
Tiny float ResNet. The nodes form no reference cycles (reference counting
frees them as soon as a pass drops them), so the peak RSS stays within
2 MB of the collected run's (the ResNet, a 7.5 MB detector). The collector
is enabled again on the way out, error or not, if it was on the way in.
"""
from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()

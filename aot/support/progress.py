"""Progress on the terminal for the long steps (compile, build, boot, upload,
run): rich spinners and bars on stderr.

Library code marks its steps with `step(...)`; nothing shows unless the
command line turned progress on (`enable()`), and it stays off with --json
or when stderr is not a terminal, so pipes, tests and the Python API see no
progress output at all.

    with progress.step("compile kernels", total=len(groups)) as s:
        for g in groups:
            ...
            s.advance()
"""
from __future__ import annotations

import contextlib
import sys
import time
from typing import Iterator

_state: dict = {"enabled": False, "progress": None, "depth": 0}


def enable(on: bool = True) -> None:
    """Show progress from now on (when stderr is a terminal)."""
    _state["enabled"] = bool(on) and sys.stderr.isatty()


def enabled() -> bool:
    return bool(_state["enabled"])


class Step:
    """A running step: `advance(n)` moves its bar (if it has a total)."""

    def __init__(self, progress, task) -> None:
        self._progress, self._task = progress, task

    def advance(self, n: float = 1) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, n)

    def update(self, description: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=description)


@contextlib.contextmanager
def step(description: str, total: float | None = None) -> Iterator[Step]:
    """One step: a spinner (or a bar with `total`) while it runs, then a
    line saying how long it took."""
    if not _state["enabled"]:
        yield Step(None, None)
        return
    from rich.console import Console
    from rich.progress import (BarColumn, Progress, SpinnerColumn, TextColumn,
                               TimeElapsedColumn)

    if _state["progress"] is None:
        _state["progress"] = Progress(SpinnerColumn(), TextColumn("{task.description}"),
                                      BarColumn(), TimeElapsedColumn(),
                                      console=Console(stderr=True), transient=True)
        _state["progress"].start()
    progress = _state["progress"]
    task = progress.add_task(description, total=total)
    _state["depth"] += 1
    t0 = time.perf_counter()
    ok = False
    try:
        yield Step(progress, task)
        ok = True
    finally:
        progress.remove_task(task)
        _state["depth"] -= 1
        mark = "[green]done[/]" if ok else "[red]failed[/]"
        progress.console.print(f"  {description}: {mark} in {time.perf_counter() - t0:.1f} s")
        if _state["depth"] == 0:
            progress.stop()
            _state["progress"] = None

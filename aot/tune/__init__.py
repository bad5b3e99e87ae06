"""Schedule tuning: `aot tune` searches schedule configs on the
board (search.py) and logs them (records.py); `--tuning-records LOG`
applies the best per workload at build time (`applied_records`)."""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from aot.lower.schedule.space import applied


@contextlib.contextmanager
def applied_records(path: str | Path | None, target) -> Iterator[None]:
    """Builds for `target` inside apply the log's best config per workload
    (None: the default policy, as without this context)."""
    if path is None:
        yield
        return
    from aot.tune.records import schedules_for
    with applied(schedules_for(path, target.name)):
        yield


def tune(*args, **kwargs):
    """aot.tune.search.tune (imported on first use)."""
    from aot.tune.search import tune as run
    return run(*args, **kwargs)


__all__ = ["applied_records", "tune"]

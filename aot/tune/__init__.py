"""Schedule tuning: `aot tune` searches schedule configs on the
board (search.py) and logs them (records.py); `--tuning-records LOG`
applies the best per workload at build time (`applied_records`)."""
from __future__ import annotations

from aot.tune.records import applied_records


def tune(*args, **kwargs):
    """aot.tune.search.tune (imported on first use)."""
    from aot.tune.search import tune as run
    return run(*args, **kwargs)


__all__ = ["applied_records", "tune"]

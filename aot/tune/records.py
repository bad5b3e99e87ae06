"""Tuning records: one JSON line per measured schedule (TVM's tuning log).

    {"workload": "tfl.conv2d-37de63605ec5cb31", "target": "x86_64-linux",
     "config": {"tile/pixels": {"vectors": 1, "mr": 2, "max_accs": 8}},
     "ms": 0.0211, "board": "host", "aot_version": "0.1.0", "version": 1,
     "default_ms": 0.0245}

`ms` is the workload's kernels' median time on `board` with `config`
(`default_ms`: the default schedule's, measured interleaved with it). A
log holds every workload's default record ({} config) and the configs
that beat it; `best` picks the fastest per workload, ties to the default.
"""
from __future__ import annotations

import contextlib
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Mapping

from aot.errors import AotError
from aot.lower.schedule.space import DEFAULT, Config, Schedules, applied

FORMAT_VERSION = 1
FIELDS = ("workload", "target", "config", "ms", "board", "aot_version")


@dataclass(frozen=True)
class Record:
    workload: str
    target: str
    config: Config
    ms: float
    board: str
    aot_version: str
    version: int = FORMAT_VERSION
    default_ms: float | None = None
    # Where the board counts instructions (emulated boards): the workload's
    # kernels' median instructions, and the default's in the same batch.
    instructions: int | None = None
    default_instructions: int | None = None

    def as_json(self) -> dict:
        out = {"workload": self.workload, "target": self.target,
               "config": self.config.as_json(), "ms": self.ms, "board": self.board,
               "aot_version": self.aot_version, "version": self.version}
        for name in ("default_ms", "instructions", "default_instructions"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    def line(self) -> str:
        return json.dumps(self.as_json(), sort_keys=True) + "\n"


def _record(obj, where: str) -> Record:
    if not isinstance(obj, dict):
        raise AotError(f"{where}: a tuning record is a JSON object")
    missing = [f for f in FIELDS if f not in obj]
    if missing:
        raise AotError(f"{where}: a tuning record needs {', '.join(missing)}")
    ms = obj["ms"]
    if not isinstance(ms, (int, float)) or isinstance(ms, bool) or not math.isfinite(ms) \
            or ms < 0:
        raise AotError(f"{where}: ms must be a finite time >= 0, not {ms!r}")
    for f in ("workload", "target", "board", "aot_version"):
        if not isinstance(obj[f], str) or not obj[f]:
            raise AotError(f"{where}: {f} must be a non-empty string")
    version = obj.get("version", FORMAT_VERSION)
    if not isinstance(version, int) or isinstance(version, bool):
        raise AotError(f"{where}: version must be an integer")
    try:
        config = Config.of(obj["config"]) if version == FORMAT_VERSION else DEFAULT
    except AotError as e:
        raise AotError(f"{where}: {e}") from None
    default_ms = obj.get("default_ms")
    counts = [obj.get(f) for f in ("instructions", "default_instructions")]
    for f, n in zip(("instructions", "default_instructions"), counts):
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 0):
            raise AotError(f"{where}: {f} must be a count >= 0, not {n!r}")
    return Record(obj["workload"], obj["target"], config, float(ms), obj["board"],
                  obj["aot_version"], version,
                  float(default_ms) if isinstance(default_ms, (int, float)) else None,
                  *counts)


def read(path: str | Path) -> list[Record]:
    """Every record of a log, in order; a line that is not a record is
    refused with its line number."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise AotError(f"tuning records {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise AotError(f"tuning records {path}: cannot read it ({e})") from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise AotError(f"tuning records {path} line {n}: not JSON ({e.msg})") from None
        out.append(_record(obj, f"tuning records {path} line {n}"))
    return out


def append(path: Path, records: Iterable[Record]) -> None:
    """Add records to the log, flushed line by line (an interrupted tune
    keeps what it measured: --resume continues from it)."""
    with open(path, "a") as f:
        for r in records:
            f.write(r.line())
            f.flush()


def best(records: Iterable[Record], target: str) -> dict[str, Config]:
    """The fastest config per workload among the records of `target` in the
    current format, the default config where it is the fastest or ties."""
    mine = [r for r in records if r.target == target and r.version == FORMAT_VERSION]
    defaults = {r.workload: r.ms for r in mine if r.config == DEFAULT}

    def rank(r: Record) -> tuple:
        """Cost relative to the default measured beside it (batches differ
        in noise, ratios less), then the default first on a tie, then the
        config's text: the same log always gives the same choice."""
        return (relative(r, r.default_ms or defaults.get(r.workload) or r.ms),
                r.config != DEFAULT, str(r.config))

    fastest: dict[str, Record] = {}
    for r in mine:
        if r.workload not in fastest or rank(r) < rank(fastest[r.workload]):
            fastest[r.workload] = r
    return {k: r.config for k, r in sorted(fastest.items()) if r.config != DEFAULT}


def relative(r: Record, default_ms: float) -> float:
    """The record's cost over its default's: instructions where both were
    counted, else time (1.0 for a default's own record)."""
    if r.instructions is not None and r.default_instructions:
        return r.instructions / r.default_instructions
    return r.ms / default_ms if default_ms > 0 else 1.0


def schedules_for(path: str | Path, target: str, warn=None) -> Schedules:
    """The Schedules a build for `target` applies from the log at `path`:
    one warning line for records of another target or format version."""
    records = read(path)
    other = [r for r in records if r.target != target or r.version != FORMAT_VERSION]
    if other:
        targets = sorted({r.target for r in other if r.target != target})
        versions = sorted({r.version for r in other if r.version != FORMAT_VERSION})
        why = (([f"target {', '.join(targets)}"] if targets else [])
               + ([f"format version {', '.join(map(str, versions))}"] if versions else []))
        message = (f"aot: warning: {path}: {len(other)} of {len(records)} tuning records "
                   f"skipped ({' and '.join(why)}; this build is for target {target}, "
                   f"format version {FORMAT_VERSION})")
        (warn or (lambda m: print(m, file=sys.stderr)))(message)
    return Schedules(best(records, target))


def configs_json(configs: Mapping[str, Config]) -> dict:
    return {k: c.as_json() for k, c in sorted(configs.items())}


@contextlib.contextmanager
def applied_records(path: str | Path | None, target) -> Iterator[None]:
    """Builds for `target` inside apply the log's best config per workload
    (None: the default policy, as without this context)."""
    if path is None:
        yield
        return
    with applied(schedules_for(path, target.name)):
        yield

"""Tuning records: one JSON line per measured schedule (TVM's tuning log),
or one row of a tuning database (database.py) holding the same fields.

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
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Mapping

from aot.errors import AotError
from aot.lower.schedule.space import DEFAULT, Config, Schedules, applied
from aot.support.json_schema import INT, NAME, SIZE, TIME, check, obj, optional
from aot.support.jsonfile import loads, type_name
from aot.tune import database

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


# A record is a line of a few hundred bytes; a log of a whole model's search
# a few MB (200,000 records fit 64 MiB). Nesting: {"config": {site: {knob: n}}}.
MAX_LINE_BYTES = 64 << 10
MAX_LOG_BYTES = 64 << 20
RECORD_DEPTH = 3

RECORD = obj({"workload": NAME, "target": NAME, "config": obj({}), "ms": TIME, "board": NAME,
              "aot_version": NAME, "version": INT, "default_ms": optional(TIME),
              "instructions": optional(SIZE), "default_instructions": optional(SIZE)},
             FIELDS)


def parse(value, where: str) -> Record:
    """A line's JSON value as a Record, or an AotError naming the field."""
    if not isinstance(value, dict):
        raise AotError(f"{where}: a tuning record is a JSON object, got {type_name(value)}")
    check(value, RECORD, where)
    version = value.get("version", FORMAT_VERSION)
    try:
        config = Config.of(value["config"]) if version == FORMAT_VERSION else DEFAULT
    except AotError as e:
        raise AotError(f"{where}: {e}") from None
    default_ms = value.get("default_ms")
    return Record(value["workload"], value["target"], config, float(value["ms"]),
                  value["board"], value["aot_version"], version,
                  None if default_ms is None else float(default_ms),
                  value.get("instructions"), value.get("default_instructions"))


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(number, text) of the log's lines, each and the whole bounded."""
    what = f"tuning records {path}"
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise AotError(f"{what}: no such file") from None
    except OSError as e:
        raise AotError(f"{what}: cannot read it ({e.strerror or e})") from None
    with f:
        total = 0
        for n, raw in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), 1):
            total += len(raw)
            if len(raw) > MAX_LINE_BYTES:
                raise AotError(f"{what} line {n}: longer than {MAX_LINE_BYTES} bytes, not a "
                               "tuning record")
            if total > MAX_LOG_BYTES:
                raise AotError(f"{what}: larger than {MAX_LOG_BYTES} bytes")
            try:
                yield n, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise AotError(f"{what} line {n}: byte {e.start} is not UTF-8") from None


def read(path: str | Path) -> list[Record]:
    """Every record of a log, in order; a line that is not a record (not
    JSON, nested or numbered absurdly, a field of the wrong type) is
    refused with its line number. A tuning database (database.py) is read
    the same way, row by row."""
    path = Path(path)
    if database.is_database(path):
        return [parse(value, where) for where, value in database.read(path)]
    out = []
    for n, line in _lines(path):
        if not line.strip():
            continue
        where = f"tuning records {path} line {n}"
        out.append(parse(loads(line, where, RECORD_DEPTH), where))
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

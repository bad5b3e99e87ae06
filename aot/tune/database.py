"""The tuning database: one SQLite file shared by models and runs.

    aot tune a.tflite --board qemu-armv7 --database zoo.db
    aot tune b.tflite --board qemu-armv7 --database zoo.db   # starts from a's best
    aot package b.tflite --board qemu-armv7 --tuning-records zoo.db

It holds the same records as a JSON log (records.py), keyed by (workload,
target, format version), plus each workload's signature (op, dtype, operand
shapes, loop attributes): a new model's workload finds the nearest measured
workloads of the same op and dtype by it (`nearest`), whose best configs the
search tries first.

A database is read like any file aot reads back: opened read-only, its
tables and columns checked by name, every row through the JSON log's
schema (records.RECORD) and the config through Config.of, sizes bounded;
a file that is not such a database is one AotError line. Writes are one
transaction each (BEGIN IMMEDIATE, with a busy timeout): two tuners
writing one database wait for each other and never interleave a batch.
"""
from __future__ import annotations

import contextlib
import json
import math
import sqlite3
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from aot.errors import AotError
from aot.support.json_schema import check, list_of, obj, of
from aot.support.jsonfile import loads

MAGIC = b"SQLite format 3\x00"
SCHEMA = "aot-tuning-database"
SCHEMA_VERSION = 1
# As the JSON log's bounds: a database of a model zoo's searches is a few MB.
MAX_DB_BYTES = 256 << 20
MAX_ROWS = 1_000_000
# Seconds a writer waits for another's transaction before giving up.
BUSY_TIMEOUT_S = 60.0

TABLES = {
    "meta": ("key", "value"),
    "records": ("workload", "target", "version", "config", "ms", "board", "aot_version",
                "default_ms", "instructions", "default_instructions"),
    "workloads": ("workload", "target", "op", "dtype", "signature"),
}
CREATE = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS records (workload TEXT NOT NULL, target TEXT NOT NULL, "
    "version INTEGER NOT NULL, config TEXT NOT NULL, ms REAL NOT NULL, board TEXT NOT NULL, "
    "aot_version TEXT NOT NULL, default_ms REAL, instructions INTEGER, "
    "default_instructions INTEGER, UNIQUE (workload, target, version, board, config))",
    "CREATE TABLE IF NOT EXISTS workloads (workload TEXT NOT NULL, target TEXT NOT NULL, "
    "op TEXT NOT NULL, dtype TEXT NOT NULL, signature TEXT NOT NULL, "
    "PRIMARY KEY (workload, target))",
)
# A signature: the operands' shapes and the attributes that shape the loops.
SIGNATURE = obj({"shapes": list_of(list_of(of((int,), "an integer"), "a list of integers"),
                                   "a list of shapes"),
                 "attrs": obj({})}, ("shapes", "attrs"))
SIGNATURE_DEPTH = 4


def is_database(path: str | Path) -> bool:
    """Whether the file at `path` starts as an SQLite database does (a
    JSON log cannot)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def _what(path: Path) -> str:
    return f"tuning database {path}"


@contextlib.contextmanager
def _opened(path: Path, write: bool) -> Iterator[sqlite3.Connection]:
    """A connection to the database at `path`: read-only (and refused
    unless it is one aot wrote) or read-write (created when missing). No
    SQL the file holds runs: trusted_schema off, no views or triggers read."""
    what = _what(path)
    if not write or path.exists():
        if not path.exists():
            raise AotError(f"{what}: no such file")
        try:
            size = path.stat().st_size
        except OSError as e:
            raise AotError(f"{what}: cannot read it ({e.strerror or e})") from None
        if size > MAX_DB_BYTES:
            raise AotError(f"{what}: larger than {MAX_DB_BYTES} bytes")
        # (an empty file: another writer's database, just created)
        if not is_database(path) and not (write and size == 0):
            raise AotError(f"{what}: not an SQLite database")
    uri = f"{path.resolve().as_uri()}?mode={'rwc' if write else 'ro'}"
    try:
        con = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error as e:
        raise AotError(f"{what}: cannot open it ({e})") from None
    try:
        con.execute("PRAGMA trusted_schema = OFF")
        yield con
    except sqlite3.Error as e:
        raise AotError(f"{what}: {_sqlite_error(e)}") from None
    finally:
        con.close()


def _sqlite_error(e: sqlite3.Error) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return f"not a readable tuning database ({text[:120]})"


def _check_tables(con: sqlite3.Connection, path: Path) -> None:
    """The tables and columns aot writes, by name, and the schema mark."""
    for table, columns in TABLES.items():
        found = tuple(row[1] for row in con.execute(f"PRAGMA table_info({table})"))
        if found[:len(columns)] != columns:
            raise AotError(f"{_what(path)}: table {table} "
                           + ("missing" if not found else
                              f"has columns {', '.join(found)[:120]}, expected "
                              f"{', '.join(columns)}"))
    marks = dict(con.execute("SELECT key, value FROM meta WHERE key IN ('schema', 'version')"))
    if marks.get("schema") != SCHEMA:
        raise AotError(f"{_what(path)}: not an aot tuning database (meta.schema is "
                       f"{str(marks.get('schema'))[:40]!r})")
    if marks.get("version") != str(SCHEMA_VERSION):
        raise AotError(f"{_what(path)}: database layout version "
                       f"{str(marks.get('version'))[:20]}, this aot reads {SCHEMA_VERSION}")


def _rows(con: sqlite3.Connection, path: Path, sql: str, args: Sequence = ()) -> list:
    rows = con.execute(sql + f" LIMIT {MAX_ROWS + 1}", args).fetchall()
    if len(rows) > MAX_ROWS:
        raise AotError(f"{_what(path)}: more than {MAX_ROWS} rows")
    return rows


_COLUMNS = TABLES["records"]


# A config's JSON: {site: {knob: n}} or {site: name}.
CONFIG_DEPTH = 2


def _value(row: tuple, path: Path, rowid: int) -> tuple[str, dict]:
    """A records row as the JSON log's value (records.parse checks it)."""
    where = f"{_what(path)} record {rowid}"
    value = dict(zip(_COLUMNS, row))
    if not isinstance(value["config"], str):
        raise AotError(f"{where}: config must be JSON text")
    value["config"] = loads(value["config"], f"{where} config", CONFIG_DEPTH)
    for name in ("instructions", "default_instructions", "default_ms"):
        if value[name] is None:
            del value[name]
    return where, value


def read(path: str | Path, target: str | None = None,
         workloads: Iterable[str] | None = None) -> list[tuple[str, dict]]:
    """The database's records (of `target` and these `workloads` where
    given) in the order they were written, each as (where, the JSON log's
    value): records.read checks them as it checks a log's lines."""
    path = Path(path)
    with _opened(path, write=False) as con:
        _check_tables(con, path)
        sql = f"SELECT rowid, {', '.join(_COLUMNS)} FROM records"
        where, args = [], []
        if target is not None:
            where.append("target = ?")
            args.append(target)
        rows = _rows(con, path, sql + (f" WHERE {' AND '.join(where)}" if where else "")
                     + " ORDER BY rowid", args)
    wanted = None if workloads is None else set(workloads)
    return [_value(row[1:], path, row[0]) for row in rows
            if wanted is None or row[1] in wanted]


def write(path: str | Path, records: Sequence[dict],
          signatures: Iterable[tuple[str, str, str, str, dict]] = ()) -> int:
    """Add records (as the JSON log's values) and workload signatures ((workload, target, op, dtype,
    signature)) in one transaction; a record already there (same workload,
    target, version, board and config) is kept as it was. The number of
    records added."""
    path = Path(path)
    with _opened(path, write=True) as con:
        con.execute("BEGIN IMMEDIATE")
        try:
            for sql in CREATE:
                con.execute(sql)
            con.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?), ('version', ?)",
                        (SCHEMA, str(SCHEMA_VERSION)))
            _check_tables(con, path)
            before = con.total_changes
            con.executemany(
                f"INSERT OR IGNORE INTO records ({', '.join(_COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(_COLUMNS))})",
                [tuple(_column(r, c) for c in _COLUMNS) for r in records])
            added = con.total_changes - before
            con.executemany("INSERT OR IGNORE INTO workloads VALUES (?, ?, ?, ?, ?)",
                            [(w, t, op, dtype, json.dumps(sig, sort_keys=True))
                             for w, t, op, dtype, sig in signatures])
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    return added


def _column(record: dict, name: str):
    value = record.get(name)
    return json.dumps(value, sort_keys=True, separators=(",", ":")) if name == "config" \
        else value


def signature_of(workload) -> tuple[str, str, dict]:
    """(op, dtype, signature) of a schedule Workload: what `nearest`
    compares."""
    dtype = "/".join(filter(None, (workload.inputs[0][1], workload.inputs[0][2]))) \
        if workload.inputs else ""
    attrs = {k: v for k, v in workload.attrs
             if isinstance(v, (int, str)) or (isinstance(v, (list, tuple))
                                             and all(isinstance(x, int) for x in v))}
    return workload.op, dtype, {"shapes": [list(s) for s, _, _ in workload.inputs],
                                "attrs": {k: list(v) if isinstance(v, tuple) else v
                                          for k, v in sorted(attrs.items())}}


def distance(a: dict, b: dict) -> float:
    """How far two signatures of one op are: the sum over operand
    dimensions of |log2| of their ratio, and 4 per differing attribute
    (a kernel size or stride changes the loop nest more than a size)."""
    if len(a["shapes"]) != len(b["shapes"]) or any(
            len(x) != len(y) for x, y in zip(a["shapes"], b["shapes"])):
        return math.inf
    d = sum(abs(math.log2(max(x, 1) / max(y, 1)))
            for sa, sb in zip(a["shapes"], b["shapes"]) for x, y in zip(sa, sb))
    keys = set(a["attrs"]) | set(b["attrs"])
    return d + 4 * sum(1 for k in keys if a["attrs"].get(k) != b["attrs"].get(k))


def nearest(path: str | Path, target: str, op: str, dtype: str, signature: dict,
            exclude: str, limit: int = 3) -> list[tuple[float, str]]:
    """Up to `limit` measured workloads of `target` with the same op and
    dtype, nearest `signature` first: (distance, workload key). Ties go to
    the key's order, so the same database always gives the same list."""
    path = Path(path)
    with _opened(path, write=False) as con:
        _check_tables(con, path)
        rows = _rows(con, path, "SELECT workload, signature FROM workloads WHERE target = ? "
                     "AND op = ? AND dtype = ? AND workload != ?", (target, op, dtype, exclude))
    out = []
    for key, text in rows:
        where = f"{_what(path)} workload {str(key)[:80]}"
        if not isinstance(key, str) or not isinstance(text, str):
            raise AotError(f"{where}: workload and signature must be text")
        sig = check(loads(text, where, SIGNATURE_DEPTH), SIGNATURE, where)
        d = distance(signature, sig)
        if math.isfinite(d):
            out.append((d, key))
    return sorted(out)[:limit]

"""The tuning database (aot/tune/database.py): records in and out, the
nearest workloads, hostile files refused in one line, two writers."""
from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from aot.errors import AotError
from aot.lower.schedule.space import DEFAULT, Config
from aot.tune import database
from aot.tune.records import Record, read, schedules_for

TILE = Config.of({"tile": {"vectors": 2, "mr": 1, "max_accs": 12}})


def record(workload: str, config: Config = DEFAULT, target: str = "aarch64-linux",
           ratio: float = 1.0, version: int = 1) -> dict:
    return Record(workload, target, config, ratio, "qemu-aarch64", "0.1.0", version,
                  default_ms=1.0, instructions=int(1000 * ratio),
                  default_instructions=1000).as_json()


def sig(*shapes, **attrs) -> tuple:
    return ("Gemm", "float32", {"shapes": [list(s) for s in shapes], "attrs": attrs})


def test_records_round_trip_and_apply_by_target(tmp_path):
    db = tmp_path / "t.db"
    added = database.write(db, [record("Gemm-a"), record("Gemm-a", TILE, ratio=0.8),
                                record("Gemm-b", TILE, target="armv7-linux", ratio=0.5),
                                record("Gemm-c", TILE, ratio=0.7, version=2)],
                           [("Gemm-a", "aarch64-linux", *sig((1, 64), (128, 64)))])
    assert added == 4 and database.is_database(db)
    # the same record again is kept once
    assert database.write(db, [record("Gemm-a", TILE, ratio=0.8)]) == 0
    got = read(db)
    assert [(r.workload, r.config, r.target) for r in got][:2] == [
        ("Gemm-a", DEFAULT, "aarch64-linux"), ("Gemm-a", TILE, "aarch64-linux")]
    warnings = []
    applied = schedules_for(db, "aarch64-linux", warnings.append)
    assert applied.configs == {"Gemm-a": TILE}
    assert len(warnings) == 1 and "2 of 4 tuning records skipped" in warnings[0]


def test_nearest_workloads_same_op_and_dtype_nearest_shape_first(tmp_path):
    db = tmp_path / "t.db"
    database.write(db, [], [
        ("Gemm-64", "t", *sig((1, 64), (128, 64))),
        ("Gemm-512", "t", *sig((1, 512), (1024, 512))),
        ("Gemm-96", "t", *sig((1, 96), (128, 96))),
        ("Gemm-other", "u", *sig((1, 64), (128, 64))),
        ("Gemm-3d", "t", *sig((1, 1, 64), (128, 64))),
        ("Conv-64", "t", "Conv", "float32", {"shapes": [[1, 64], [128, 64]], "attrs": {}}),
    ])
    near = database.nearest(db, "t", *sig((1, 70), (128, 70)), exclude="Gemm-new")
    assert [k for _, k in near] == ["Gemm-64", "Gemm-96", "Gemm-512"]
    assert database.nearest(db, "t", *sig((1, 64), (128, 64)), exclude="Gemm-64")[0][1] \
        == "Gemm-96"


def _forge(db: Path, sql: str, args=()) -> None:
    con = sqlite3.connect(db)
    con.execute(sql, args)
    con.commit()
    con.close()


@pytest.mark.parametrize("harm, message", [
    ("garbage", "not a readable tuning database (file is not a database)"),
    ("truncated", "not a readable tuning database"),
    ("no_meta", "table meta missing"),
    ("foreign", "not an aot tuning database"),
    ("layout", "database layout version 99"),
    ("columns", "table records has columns"),
    ("config", "config: unknown schedule site 'fission'"),
    ("config_text", "config must be an object, got an integer"),
    ("deep", "config: column 3: nested deeper than 2 levels"),
    ("ms", "ms must be a finite time"),
    ("blob", "board must be a non-empty string"),
    ("signature", "shapes must be a list of shapes"),
])
def test_hostile_databases_are_one_line_errors(tmp_path, harm, message):
    db = tmp_path / "t.db"
    database.write(db, [record("Gemm-a"), record("Gemm-a", TILE, ratio=0.8)],
                   [("Gemm-a", "aarch64-linux", *sig((1, 64), (128, 64)))])
    if harm == "garbage":
        db.write_bytes(b"SQLite format 3\x00" + b"\xff" * 5000)
    elif harm == "truncated":
        db.write_bytes(db.read_bytes()[:2000])
    elif harm == "no_meta":
        _forge(db, "DROP TABLE meta")
    elif harm == "foreign":
        _forge(db, "UPDATE meta SET value = 'something else' WHERE key = 'schema'")
    elif harm == "layout":
        _forge(db, "UPDATE meta SET value = '99' WHERE key = 'version'")
    elif harm == "columns":
        _forge(db, "ALTER TABLE records RENAME COLUMN ms TO seconds")
    elif harm == "config":
        _forge(db, "UPDATE records SET config = '{\"fission\": 4}' WHERE rowid = 2")
    elif harm == "config_text":
        _forge(db, "UPDATE records SET config = 7 WHERE rowid = 2")
    elif harm == "deep":
        _forge(db, "UPDATE records SET config = ? WHERE rowid = 2", ("[" * 100000 + "]" * 100000,))
    elif harm == "ms":
        _forge(db, "UPDATE records SET ms = -1")
    elif harm == "blob":
        _forge(db, "UPDATE records SET board = ?", (b"\x00\x01",))
    elif harm == "signature":
        _forge(db, "UPDATE workloads SET signature = '{\"shapes\": 1, \"attrs\": {}}'")
    with pytest.raises(AotError) as e:
        read(db)
        database.nearest(db, "aarch64-linux", *sig((1, 64), (128, 64)), exclude="x")
    text = str(e.value)
    assert message in text and "\n" not in text and str(db) in text


def test_a_view_or_trigger_in_the_file_runs_no_sql(tmp_path):
    """A forged database whose records table is a view calling an unsafe
    function: SQLite refuses to run it (trusted_schema off), one line."""
    db = tmp_path / "t.db"
    database.write(db, [record("Gemm-a")])
    _forge(db, "DROP TABLE records")
    _forge(db, "CREATE VIEW records AS SELECT load_extension('x') AS workload")
    with pytest.raises(AotError, match="not a readable tuning database .unsafe use of load_"):
        read(db)


def test_two_writers_interleave_no_batch(tmp_path):
    """Two threads each writing 30 batches of 5 records (one transaction
    per batch, separate connections): every record lands, each once."""
    db = tmp_path / "t.db"
    errors = []

    def writer(name: str) -> None:
        try:
            for b in range(30):
                database.write(db, [record(f"Gemm-{name}{b}-{i}") for i in range(5)])
        except Exception as e:      # noqa: BLE001 (reported below)
            errors.append(e)
    threads = [threading.Thread(target=writer, args=(n,)) for n in "xy"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    keys = [r.workload for r in read(db)]
    assert len(keys) == 300 == len(set(keys))

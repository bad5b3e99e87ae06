"""The board farm on Ray (aot/tune/farm.py): one local cluster for the
module (loopback only, 2 CPUs), four emulated boards of two kinds."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.cli import cli
from support.tune_models import mlp

BOARDS = ["qemu-aarch64", "qemu-aarch64", "qemu-armv7", "qemu-armv7"]
QUICK = dict(trials=2, repeat=1, warmup=0)


@pytest.fixture(scope="module")
def cluster():
    from aot.tune import farm

    ray = farm.ray_module()
    farm.start_local(BOARDS, num_cpus=2)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> list[Path]:
    where = tmp_path_factory.mktemp("models")
    return [mlp(where / "wide.onnx", [64, 128, 128, 10], 1),
            mlp(where / "narrow.onnx", [24, 48, 10], 3)]


def measured(where: Path) -> set:
    """What every log in `where` holds, less the emulator's clock."""
    from aot.tune.records import read
    return {(log.name, r.workload, r.target, str(r.config), r.instructions,
             r.default_instructions) for log in where.glob("*.jsonl") for r in read(log)}


def test_the_cluster_listens_on_loopback_only(cluster):
    node, = cluster.nodes()
    assert node["NodeManagerAddress"] == "127.0.0.1"
    assert cluster.get_runtime_context().gcs_address.startswith("127.0.0.1:")
    assert cluster.cluster_resources()["board:qemu-armv7"] == 2


def test_the_farm_keeps_the_sequential_records_when_a_board_dies(cluster, models, tmp_path,
                                                                 monkeypatch):
    """Two models on two kinds of boards: the farm's logs hold the same
    records as the search run here one job after another (instruction
    counts are exact), though one armv7 board's actor is killed after the
    first batch: that batch's successor is measured on the other one."""
    from aot.tune import farm
    from aot.tune.search import tune

    for where in ("sequential", "farm"):
        (tmp_path / where).mkdir()
    monkeypatch.chdir(tmp_path / "sequential")
    for m in models:
        for kind in dict.fromkeys(BOARDS):
            tune(m, kind, **QUICK)

    killed = []

    def kill_one(ray, model, board, trial):
        if not killed and board == "qemu-armv7":
            killed.append(board)
            ray.kill(ray.get_actor("aot-board-2-qemu-armv7"), no_restart=True)

    monkeypatch.chdir(tmp_path / "farm")
    out = farm.tune_farm(models, BOARDS, "auto", None, on_batch=kill_one, **QUICK)
    assert killed and out["retried"] >= 1
    assert [(j["board"], j["trials_run"], j["failed"]) for j in out["jobs"]] == [
        (k, 2, 0) for _ in models for k in dict.fromkeys(BOARDS)]
    farm_records = measured(tmp_path / "farm")
    assert farm_records == measured(tmp_path / "sequential") and len(farm_records) >= 12


def test_the_cli_tunes_a_matrix_and_refuses_what_the_farm_lacks(cluster, models, tmp_path):
    code, _, err = cli("tune", str(models[1]), "--boards", "qemu-armv7,qemu-armv7,qemu-armv7",
                       "--cluster", "auto")
    assert code == 2 and "the cluster offers 2" in err
    farm_toml = tmp_path / "farm.toml"
    farm_toml.write_text('[[node]]\naddress = "127.0.0.1"\nboards = ["qemu-armv7"]\n')
    code, out, err = cli("tune", str(models[1]), "--boards", "qemu-armv7", "--cluster", "auto",
                         "--farm", str(farm_toml), "--trials", "1", "--repeat", "1",
                         "--warmup", "0", "--database", str(tmp_path / "cli.db"), "--json")
    assert code == 0, err
    result = json.loads(out)
    assert [j["trials_run"] for j in result["jobs"]] == [1] and result["measurements"] == 4


def test_bench_over_the_farm_counts_what_bench_here_counts(cluster, models):
    """aot bench MODELS... --boards ... --cluster: a cell per model and board
    kind, the same instructions as aot bench on that board here."""
    from aot.api import bench

    code, out, err = cli("bench", str(models[1]), "--boards", "qemu-armv7,qemu-aarch64",
                         "--cluster", "auto", "--repeat", "2", "--warmup", "0", "--json")
    assert code == 0, err
    cells = json.loads(out)["cells"]
    assert [c["board"] for c in cells] == ["qemu-armv7", "qemu-aarch64"]
    here = bench(models[1], board="qemu-armv7", repeat=2, warmup=0)
    assert cells[0]["median_instructions"] == here["median_instructions"] > 0

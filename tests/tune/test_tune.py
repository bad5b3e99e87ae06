"""aot tune and --tuning-records (docs/tuning.md)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from support import MODELS
from support.cli import cli
from support.tune_models import mlp
from support.sshd import sshd  # noqa: F401 (the fixture)

RESNET8_INT8 = MODELS / "mlperf_ic_resnet8_int8.tflite"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """Conv 3x3 (8 -> 16) + Relu, Conv 1x1, global pool, Gemm: a dense conv
    tile, a pointwise tile and an FC tile to tune, built in a second."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)

    def w(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"]),
        helper.make_node("GlobalAveragePool", ["c2"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [w("w1", 16, 8, 3, 3), w("b1", 16), w("w2", 24, 16, 1, 1), w("b2", 24),
         w("w3", 10, 24), w("b3", 10)])
    path = tmp_path_factory.mktemp("tiny") / "tiny.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def digest(pkg: Path) -> dict[str, str]:
    """The package's generated files and built library, by content."""
    return {str(f.relative_to(pkg)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(pkg.rglob("*"))
            if f.is_file() and (f.parent.name in ("src", "include", "lib"))}


def lines(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


# ------------------------------------------------------------------ spaces

def test_configs_equal_to_the_defaults_change_no_byte(tiny, tmp_path):
    """The default policy as explicit configs (what each site answered)
    packages the same bytes as no Schedules at all."""
    from aot.api import as_graph, package
    from aot.lower.schedule.space import Config, Schedules, applied, tile_knobs
    from aot.targets import get_board
    from aot.lower import lower_graph

    def explicit_defaults(graph, target) -> dict:
        seen = Schedules(record=True)
        with applied(seen):
            lower_graph(graph, target)
        out = {k: Config.of({site: a if isinstance(a, (str, int)) else a.name
                             if site in ("accumulator", "int8_kernel") else tile_knobs(a)
                             for site, a in defaults.items()})
               for k, (_, defaults, _) in seen.seen.items()}
        assert any(c.sites for c in out.values())
        return out

    graph = as_graph(tiny)
    explicit = explicit_defaults(graph, get_board("host").target)
    plain = package(graph, board="host", out_dir=tmp_path / "plain").path
    with applied(Schedules(explicit)):
        same = package(graph, board="host", out_dir=tmp_path / "explicit").path
    assert digest(plain) == digest(same)

    # int8 (tiles, accumulator, row staging), on host and a dot-product core:
    # the same kernels, compared as TIR and weights
    int8 = as_graph(RESNET8_INT8)
    for board in ("host", "rpi5"):
        target = get_board(board).target
        explicit = explicit_defaults(int8, target)
        assert any(c.get("int8_rows") for c in explicit.values())
        plain = lower_graph(int8, target)
        with applied(Schedules(explicit)):
            same = lower_graph(int8, target)
        assert [k.func for k in plain] == [k.func for k in same]
        assert all(np.array_equal(a.array, b.array) for k, j in zip(plain, same)
                   for a, b in zip(k.args, j.args) if a.array is not None)


def test_spaces_fit_the_registers_and_keys_are_stable():
    import aot
    from aot.lower.schedule.space import Config, legal_tile
    from aot.targets import get_board
    from aot.tune.search import workloads_of

    graph = aot.optimize(aot.load(RESNET8_INT8))
    host, a72 = get_board("host").target, get_board("rpi4").target
    works = workloads_of(graph, host)
    assert [w.key for w in works] == [w.key for w in workloads_of(graph, host)]
    assert not {w.key for w in works} & {w.key for w in workloads_of(graph, a72)}
    conv = next(w for w in works if w.desc.startswith("tfl.conv2d 1x32x32x16 16x3x3x16"))
    assert len(conv.space) > 20 and conv.space[0] == Config()
    assert Config.of({"int8_rows": "direct"}) in conv.space
    for c in conv.space[1:]:
        if c.get("tile/pixels"):
            knobs = dict(c.get("tile/pixels"))
            assert legal_tile("tile/pixels", knobs, host.vector_registers)
        assert Config.of(json.loads(json.dumps(c.as_json()))) == c


# ------------------------------------------------------------------ tune on host

def test_tune_writes_records_that_packages_apply(tiny, tmp_path):
    log = tmp_path / "tiny.jsonl"
    code, out, err = cli("tune", str(tiny), "--board", "host", "--trials", "4", "-o", str(log),
                         "--repeat", "10", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["trials_run"] == 4 and summary["tunable"] >= 3
    assert summary["discarded"] == 0 and summary["failed"] == 0
    records = lines(log)
    assert {"workload", "target", "config", "ms", "board", "aot_version"} <= set(records[0])
    defaults = [r for r in records if r["config"] == {}]
    assert len(defaults) == summary["workloads"]           # every workload's default first
    for r in records[len(defaults):]:                      # then only configs that beat it
        assert r["config"] and r["ms"] < r["default_ms"]
    assert len(records) == summary["records_written"]

    # --resume measures no config twice
    code, out, err = cli("tune", str(tiny), "--board", "host", "--trials", "2", "-o", str(log),
                         "--repeat", "10", "--resume", "--json")
    assert code == 0, err
    again = lines(log)[len(records):]
    assert all(r["config"] for r in again)
    tried = [(r["workload"], json.dumps(r["config"], sort_keys=True)) for r in lines(log)]
    assert len(tried) == len(set(tried))

    # the same log: the same bytes, and outputs within float tolerance of the default's
    pkgs = []
    for name in ("a", "b"):
        code, _, err = cli("package", str(tiny), "--board", "host", "--tuning-records",
                           str(log), "-o", str(tmp_path / name))
        assert code == 0, err
        pkgs.append(tmp_path / name)
    assert digest(pkgs[0]) == digest(pkgs[1])
    code, out, err = cli("verify", str(tiny), "--board", "host", "--tuning-records", str(log),
                         "--json")
    assert code == 0 and json.loads(out)["ok"], err


def test_a_log_with_a_better_tile_changes_the_package(tiny, tmp_path):
    """A record of a non-default config is applied (and its kernel differs)."""
    import aot
    from aot.api import as_graph
    from aot.targets import get_board
    from aot.tune.search import workloads_of

    host = get_board("host").target
    work = next(w for w in workloads_of(as_graph(tiny), host) if len(w.space) > 1)
    log = tmp_path / "log.jsonl"
    config = work.space[1]
    log.write_text("".join(json.dumps(r) + "\n" for r in (
        {"workload": work.key, "target": host.name, "config": {}, "ms": 1.0, "board": "host",
         "aot_version": aot.__version__, "version": 1},
        {"workload": work.key, "target": host.name, "config": config.as_json(), "ms": 0.5,
         "board": "host", "aot_version": aot.__version__, "version": 1, "default_ms": 1.0})))
    plain = aot.api.package(tiny, board="host", out_dir=tmp_path / "plain").path
    tuned = aot.api.package(tiny, board="host", out_dir=tmp_path / "tuned",
                            tuning_records=log).path
    kernels = [k for k in digest(plain) if k.endswith("_kernels.c")]
    assert kernels and digest(plain)[kernels[0]] != digest(tuned)[kernels[0]]


@pytest.mark.parametrize("rows", ["tiles", "direct"])
def test_int8_records_stay_bit_exact(tmp_path, rows):
    """Every ResNet-8 conv in 1 vector x 3 pixel tiles, the FC in 3
    vectors (or every conv reading its rows directly, unstaged): the
    package still matches tflite-micro bit for bit."""
    import aot
    from aot.targets import get_board
    from aot.tune.search import workloads_of

    host = get_board("host").target
    graph = aot.optimize(aot.load(RESNET8_INT8))
    log = tmp_path / "int8.jsonl"
    records = []
    for w in workloads_of(graph, host):
        for c in w.space[1:]:
            knobs = dict(c.get("tile/pixels") or c.get("tile") or ())
            if (knobs.get("vectors") in (1, 3) and knobs.get("mr") in (1, 3)
                    if rows == "tiles" else c.get("int8_rows") == rows):
                records.append({"workload": w.key, "target": host.name,
                                "config": c.as_json(), "ms": 0.5, "default_ms": 1.0,
                                "board": "host", "aot_version": aot.__version__})
                break
    assert len(records) >= 9
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    code, out, err = cli("verify", str(RESNET8_INT8), "--board", "host", "--tuning-records",
                         str(log), "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["ok"] and all(o["max_abs"] == 0 for o in result["outputs"])


@pytest.mark.parametrize("text, message", [
    (None, "no such file"),
    ("{not json\n", "line 1: not JSON"),
    ('{"workload": "w"}\n', "lacks target, config, ms, board, aot_version"),
    ('{"workload": "w", "target": "t", "config": {"tile": {"lanes": 4}}, "ms": 1, '
     '"board": "host", "aot_version": "0.1.0"}\n', "tile takes positive integers"),
    ('{"workload": "w", "target": "t", "config": {"fission": 4}, "ms": 1, '
     '"board": "host", "aot_version": "0.1.0"}\n', "unknown schedule site 'fission'"),
    ('{"workload": "w", "target": "t", "config": {"unroll": 3}, "ms": 1, '
     '"board": "host", "aot_version": "0.1.0"}\n', "unroll is one of 0, 1, 2, 4, 8"),
    ('{"workload": "w", "target": "t", "config": {"int8_kernel": "fast"}, "ms": 1, '
     '"board": "host", "aot_version": "0.1.0"}\n', "int8_kernel is one of dsp_dense"),
    ('{"workload": "w", "target": "t", "config": {}, "ms": -1, '
     '"board": "host", "aot_version": "0.1.0"}\n', "ms must be a finite time"),
])
def test_bad_logs_are_refused(tiny, tmp_path, text, message):
    log = tmp_path / "bad.jsonl"
    if text is not None:
        log.write_text(text)
    code, _, err = cli("package", str(tiny), "--board", "host", "--tuning-records", str(log),
                       "-o", str(tmp_path / "pkg"))
    assert code == 2 and message in err, err
    assert not (tmp_path / "pkg").exists()


def test_other_targets_and_versions_are_skipped_with_one_warning(tiny, tmp_path):
    log = tmp_path / "other.jsonl"
    log.write_text(
        '{"workload": "w", "target": "aarch64-linux", "config": {}, "ms": 1, '
        '"board": "rpi4", "aot_version": "0.1.0"}\n'
        '{"workload": "w", "target": "x86_64-linux", "config": {"later": 1}, "ms": 1, '
        '"board": "host", "aot_version": "9.0", "version": 2}\n')
    code, _, err = cli("package", str(tiny), "--board", "host", "--tuning-records", str(log),
                       "-o", str(tmp_path / "pkg"))
    assert code == 0, err
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "2 of 2 tuning records skipped" in warnings[0]
    assert "aarch64-linux" in warnings[0] and "format version 2" in warnings[0]


def test_tune_refuses_an_existing_log_without_resume(tiny, tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text("")
    code, _, err = cli("tune", str(tiny), "--board", "host", "-o", str(log))
    assert code == 2 and "--resume" in err
    code, _, err = cli("tune", str(tiny), "--board", "host", "-o", str(tmp_path / "no.jsonl"),
                       "--resume")
    assert code == 2 and "does not exist" in err
    code, _, err = cli("tune", str(tiny), "--board", "host", "--trials", "0")
    assert code == 2 and "--trials" in err


# ------------------------------------------------------------------ over SSH

def test_tune_over_ssh(sshd, tmp_path, monkeypatch):  # noqa: F811 (fixture)
    """rpi4 reached over the loopback sshd (the harness under qemu-aarch64):
    one serve session per package, records for the rpi4 target. The int8
    autoencoder: its FC tiles and accumulators are tunable on AArch64."""
    remote = tmp_path / "remote"
    remote.mkdir()
    config = tmp_path / "boards.toml"
    config.write_text(f'[rpi4]\nremote_tmp = "{remote}"\nconnect_timeout_s = 3\n')
    monkeypatch.setenv("AOT_CONFIG", str(config))
    log = tmp_path / "ssh.jsonl"
    code, out, err = cli("tune", str(MODELS / "mlperf_ad_fcae_int8.tflite"), "--board", "rpi4",
                         *sshd.cli_args(),
                         "--exec-prefix", "qemu-aarch64", "--trials", "2", "--repeat", "3",
                         "-o", str(log), "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["board"] == "rpi4" and summary["trials_run"] == 2 and summary["tunable"]
    assert summary["failed"] == 0 and summary["discarded"] == 0
    records = lines(log)
    assert records and all(r["board"] == "rpi4" and r["target"] == summary["target"]
                           for r in records)
    assert list(remote.iterdir()) == []


def test_best_is_the_lowest_time_relative_to_the_default():
    from aot.lower.schedule.space import Config
    from aot.tune.records import Record, best

    a = Config.of({"tile": {"vectors": 2}})
    b = Config.of({"tile": {"vectors": 1}})

    def r(w, config, ms, default_ms=None, target="t"):
        return Record(w, target, config, ms, "host", "0.1.0", default_ms=default_ms)
    records = [r("w1", Config(), 1.0), r("w1", a, 0.45, 0.5), r("w1", b, 0.5, 0.6),
               r("w2", Config(), 1.0), r("w2", a, 1.0, 1.0),       # a tie: the default
               r("w3", b, 0.1, 1.0, target="other")]
    # b: 0.5 / 0.6 = 0.83 of its batch's default, a 0.90 (though a's ms is lower)
    assert best(records, "t") == {"w1": b}
    assert best(records[::-1], "t") == best(records, "t")


def test_budget_stops_before_the_first_batch(tiny, tmp_path):
    log = tmp_path / "log.jsonl"
    code, out, err = cli("tune", str(tiny), "--board", "host", "--budget", "0.01",
                         "-o", str(log), "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["trials_run"] == 0 and len(lines(log)) == summary["workloads"]


def test_emulated_boards_tune_on_counted_instructions(tmp_path):
    """qemu-aarch64: every kernel's instructions counted exactly (aot's QEMU
    plugin) are the cost, not the emulator's clock."""
    log = tmp_path / "qa.jsonl"
    code, out, err = cli("tune", str(RESNET8_INT8), "--board", "qemu-aarch64", "--trials", "2",
                         "--repeat", "2", "-o", str(log), "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["trials_run"] == 2 and summary["failed"] == summary["discarded"] == 0
    records = lines(log)
    assert all(r["instructions"] > 0 for r in records)
    for r in records[summary["workloads"]:]:
        assert r["instructions"] < r["default_instructions"]


def test_model_search_end_to_end(tmp_path):
    """`aot tune --search model` on qemu-aarch64: whole configs of each
    workload's joint space, the same records again under the same seed,
    and its records package like random search's."""
    from aot.tune.evolve import JointSpace
    from aot.tune.records import read
    from aot.tune.search import workloads_of
    import aot
    from aot.targets import get_board

    model = mlp(tmp_path / "m.onnx", [64, 128, 128, 10], 1)
    quick = ("--board", "qemu-aarch64", "--repeat", "1", "--warmup", "0", "--json",
             "--search", "model", "--seed", "3", "--trials", "3")
    runs = []
    for name in ("a", "b"):
        code, out, err = cli("tune", str(model), "-o", str(tmp_path / f"{name}.jsonl"), *quick)
        assert code == 0, err
        runs.append(json.loads(out))
        assert runs[-1]["search"] == "model" and runs[-1]["failed"] == 0
        assert len(runs[-1]["history"]) == 3
    assert [(r.workload, r.config, r.instructions) for r in read(tmp_path / "a.jsonl")] == \
        [(r.workload, r.config, r.instructions) for r in read(tmp_path / "b.jsonl")]
    assert runs[0]["history"] == runs[1]["history"] and runs[0]["history"][-1] < 1
    target = get_board("qemu-aarch64").target
    spaces = {w.key: JointSpace.of(w.space)
              for w in workloads_of(aot.optimize(aot.load(model)), target)}
    assert all(spaces[r.workload].holds(r.config) for r in read(tmp_path / "a.jsonl"))
    code, _, err = cli("package", str(model), "--board", "qemu-aarch64", "--tuning-records",
                       str(tmp_path / "a.jsonl"), "-o", str(tmp_path / "pkg"))
    assert code == 0, err


# ------------------------------------------------------------------ the database

def test_a_second_model_starts_from_the_first_ones_best(tmp_path):
    """Two MLPs on qemu-aarch64 (instructions: deterministic): the second
    model's first batch, seeded from the database of the first's search,
    costs less than its cold first batch; the database packages like a log."""
    first = mlp(tmp_path / "first.onnx", [64, 128, 128, 10], 1)
    second = mlp(tmp_path / "second.onnx", [48, 96, 160, 12], 2)
    db = tmp_path / "zoo.db"
    quick = ("--board", "qemu-aarch64", "--repeat", "1", "--warmup", "0", "--json")
    code, out, err = cli("tune", str(first), "--trials", "6", "--database", str(db), *quick)
    assert code == 0, err
    assert json.loads(out)["improved"] >= 2
    runs = {}
    for name, where in (("warm", ("--database", str(db))),
                        ("cold", ("-o", str(tmp_path / "cold.jsonl")))):
        code, out, err = cli("tune", str(second), "--trials", "1", *where, *quick)
        assert code == 0, err
        runs[name] = json.loads(out)
    assert runs["warm"]["seeded"] == 3 and runs["cold"]["seeded"] == 0
    assert runs["warm"]["first_batch"] < 0.95 < runs["cold"]["first_batch"]
    code, _, err = cli("package", str(second), "--board", "qemu-aarch64", "--tuning-records",
                       str(db), "-o", str(tmp_path / "pkg"))
    assert code == 0, err
    db.write_bytes(db.read_bytes()[:3000])
    code, _, err = cli("package", str(second), "--board", "qemu-aarch64", "--tuning-records",
                       str(db), "-o", str(tmp_path / "bad"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "tuning database" in err
    assert not (tmp_path / "bad").exists()


def test_a_package_for_a_pi_tunes_counted_on_its_own_emulated_core(tiny, tmp_path):
    """rpi5's package (Cortex-A76) tuned with every candidate run under
    qemu-aarch64, which takes -cpu from the package: the records are rpi5's
    target's, their cost the instructions counted there."""
    from functools import partial

    from aot.targets import get_board
    from aot.tune import tune
    from aot.tune.search import Runner

    log = tmp_path / "rpi5.jsonl"
    summary = tune(tiny, get_board("rpi5"), trials=1, log=log, warmup=0, repeat=1,
                   runner_for=partial(Runner, runs_on=get_board("qemu-aarch64")))
    assert summary["trials_run"] == 1 and summary["failed"] == summary["discarded"] == 0
    records = lines(log)
    assert {r["target"] for r in records} == {get_board("rpi5").target.name}
    assert all(r["instructions"] > 0 for r in records)

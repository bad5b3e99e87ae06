"""A board farm on Ray: `aot tune MODELS... --boards B1,B2 --cluster auto`.

One tuning job per (model, board kind), each the search of search.py with
its own seed, so a farm run measures what a sequential run measures and
keeps the same records. Jobs run side by side, each in a thread of the
driver, and share the farm through two kinds of Ray work:

- builds: Ray tasks (one CPU each) on any node, returning the package as a
  tar archive;
- measurements: one Ray actor per board, holding that board's session
  (search.Runner: a serve session on the host and SSH boards, the
  instruction counter on emulated ones), placed by the custom resource
  `board:<name>` that the node holding the board offers (`ray start
  --resources '{"board:rpi4": 2}'`), or on the node a farm TOML names.

A batch takes a board of its kind for all its runs (the default's and the
candidate's, interleaved on one board) and gives it back; when the actor
dies (a board gone, a node lost) the batch is measured again on another
board of that kind. Records are written by the driver only, as each job's
batches return. What an actor or task sends back is checked as any file
aot reads back: a package archive through tarfile's data filter and a size
bound, a measurement as bounded JSON against a schema and the package's
own output shapes and dtypes.

Ray has no authentication of its own by default: anyone who can reach a
cluster's ports can run code on it ("ShadowRay"). `--cluster auto` starts a
cluster bound to 127.0.0.1 with the dashboard off and stops it afterwards;
joining a remote cluster is an explicit ray://HOST:PORT.
"""
from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import queue
import tarfile
import tempfile
import threading
import time
import tomllib
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from aot.errors import AotError
from aot.support.json_schema import (INT, NAME, OBJECTS, SIZES, STR, check, list_of, obj,
                                     optional)
from aot.support.jsonfile import loads

EXTRA = "aot[farm]"
# A package's archive as a build task returns it, and a measurement's JSON.
MAX_PACKAGE_BYTES = 256 << 20
MAX_MEASUREMENT_BYTES = 64 << 20
# Seconds one run may take on a board before it counts as gone.
MEASURE_TIMEOUT_S = 1800.0
# Seconds a batch waits for a board of its kind before the job fails.
BOARD_WAIT_S = 3600.0
# Ray's own switch that makes a node's address the loopback one (its
# default on Windows and macOS): every server of the cluster then listens
# on 127.0.0.1 only.
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def ray_module():
    """Ray, or a one-line error naming the extra that installs it."""
    try:
        import ray
    except ImportError:
        raise AotError(f"--cluster needs Ray, which aot does not install by default: "
                       f"pip install '{EXTRA}'") from None
    return ray


# ---------------------------------------------------------------- the farm

@dataclass(frozen=True)
class Node:
    """A node of the farm TOML: its address and the boards attached to it."""
    address: str
    boards: tuple[str, ...]


def read_farm(path: str | Path) -> list[Node]:
    """The farm TOML:

        [[node]]
        address = "10.0.0.5"          # the node's address as Ray knows it
        boards = ["rpi4", "rpi4"]     # a name twice: two boards of that kind
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise AotError(f"farm {path}: no such file") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise AotError(f"farm {path}: not a valid farm description ({e})") from None
    schema = obj({"node": list_of(obj({"address": NAME, "boards": list_of(NAME, "a list of "
                                                                          "board names")},
                                      ("address", "boards")), "a list of [[node]] tables")},
                 ("node",))
    check(data, schema, f"farm {path}")
    unknown = sorted(set(data) - {"node"})
    if unknown:
        raise AotError(f"farm {path}: unknown key {unknown[0]!r} (a farm has [[node]] tables)")
    return [Node(n["address"], tuple(n["boards"])) for n in data["node"]]


def parse_boards(text: str) -> list[str]:
    """--boards B1,B2,B1: board names in order; a name twice is two boards."""
    names = [b.strip() for b in text.split(",")]
    if not names or any(not b for b in names):
        raise AotError(f"--boards {text!r}: board names separated by commas")
    return names


def _counts(names: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in names:
        out[n] = out.get(n, 0) + 1
    return out


@contextlib.contextmanager
def connected(cluster: str, boards: Sequence[str], num_cpus: int | None = None
              ) -> Iterator[Any]:
    """Ray, connected: `auto` starts a cluster on this machine, bound to
    127.0.0.1, its dashboard off, offering `board:<name>` for each board
    named (stopped on leaving); ray://HOST:PORT joins that cluster; with Ray
    connected already (a test's cluster), that one."""
    ray = ray_module()
    if ray.is_initialized():
        yield ray
        return
    if cluster == "auto":
        start_local(boards, num_cpus)
    elif cluster.startswith("ray://") and len(cluster) > len("ray://"):
        try:
            ray.init(address=cluster, log_to_driver=False)
        except Exception as e:      # noqa: BLE001 (Ray raises many kinds; one line)
            raise AotError(f"--cluster {cluster}: cannot join it "
                           f"({str(e).splitlines()[0][:160] if str(e) else type(e).__name__})"
                           ) from None
    else:
        raise AotError(f"--cluster {cluster!r}: auto, or ray://HOST:PORT of a running cluster")
    try:
        yield ray
    finally:
        ray.shutdown()


def start_local(boards: Sequence[str], num_cpus: int | None = None) -> None:
    """A Ray cluster of this machine alone: every server on 127.0.0.1, no
    dashboard, the named boards as custom resources. Refused (and stopped)
    if Ray put the node on another address."""
    os.environ[LOOPBACK_ENV] = "0"      # read when Ray is imported (workers inherit it)
    ray = ray_module()
    # ... and, where something imported Ray before, its constant; the address
    # check below refuses a cluster that is not on loopback whatever Ray does
    constants = getattr(getattr(ray, "_private", None), "ray_constants", None)
    if constants is not None and hasattr(constants, "ENABLE_RAY_CLUSTER"):
        constants.ENABLE_RAY_CLUSTER = False
    resources = {f"board:{name}": float(n) for name, n in _counts(boards).items()}
    ray.init(num_cpus=num_cpus, include_dashboard=False, _node_ip_address="127.0.0.1",
             resources=resources, log_to_driver=False, configure_logging=False)
    where = sorted({n.get("NodeManagerAddress") for n in ray.nodes()})
    if where != ["127.0.0.1"]:
        ray.shutdown()
        raise AotError(f"--cluster auto: Ray put the node on {', '.join(map(str, where))}, "
                       "not 127.0.0.1 only; nothing was run")


def placements(boards: Sequence[str], farm: Sequence[Node] | None, available: dict
               ) -> list[tuple[str, dict]]:
    """Per board named: (name, where its actor goes): {"node": address} from
    the farm TOML (the node holding it), else {"resources": ...}: the
    `board:<name>` resource some node offers, refused here when the cluster
    offers too few."""
    if farm is not None:
        slots = [(b, n.address) for n in farm for b in n.boards]
        out = []
        for name in boards:
            i = next((i for i, (b, _) in enumerate(slots) if b == name), None)
            if i is None:
                raise AotError(f"--boards: the farm has no more board {name!r} "
                               f"({_counts(boards)[name]} named)")
            out.append((name, {"node": slots.pop(i)[1]}))
        return out
    for name, n in _counts(boards).items():
        have = available.get(f"board:{name}", 0)
        if have < n:
            raise AotError(f"--boards names {n} x {name}, the cluster offers {have:g} "
                           f"(resource board:{name}; ray start --resources "
                           f"'{{\"board:{name}\": {n}}}' on the node holding them)")
    return [(name, {"resources": {f"board:{name}": 1.0}}) for name in boards]


def actor_options(ray, where: dict) -> dict:
    """Ray's options placing a board actor `where` (placements) says."""
    if "resources" in where:
        return {"resources": where["resources"]}
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    ids = [n["NodeID"] for n in ray.nodes()
           if n.get("Alive") and n.get("NodeManagerAddress") == where["node"]]
    if not ids:
        known = sorted(str(n.get("NodeManagerAddress")) for n in ray.nodes() if n.get("Alive"))
        raise AotError(f"--farm names node {where['node']}, the cluster has no live node "
                       f"there (its nodes: {', '.join(known)[:200]})")
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(ids[0], soft=False)}


# ---------------------------------------------------------------- worker side

def _package_tar(pkg: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(pkg, arcname="pkg")
    return buf.getvalue()


def build_package(graph, board: str, codegen: str, configs: dict | None,
                  profile: bool = True) -> bytes:
    """A Ray task: the (--profile) package of `graph` for `board` with these
    schedule configs ({workload: config JSON}; None: the default policy),
    as a tar archive."""
    from aot.api import package
    from aot.lower.schedule.space import Config, Schedules, applied

    schedules = None if configs is None else Schedules(
        {k: Config.of(v) for k, v in configs.items()})
    with tempfile.TemporaryDirectory(prefix="aot-farm-build-") as tmp:
        with applied(schedules):
            pkg = package(graph, board=board, codegen=codegen, out_dir=Path(tmp) / "pkg",
                          profile=profile).path
        return _package_tar(pkg)


def unpack(data: Any, where: Path, what: str) -> Path:
    """A package archive from a worker, unpacked under `where`: bytes within
    the bound, members through tarfile's data filter (no links out, no
    devices, no absolute paths), a package directory with its metadata."""
    if not isinstance(data, bytes):
        raise AotError(f"{what}: a worker sent {type(data).__name__}, not a package archive")
    if len(data) > MAX_PACKAGE_BYTES:
        raise AotError(f"{what}: a package archive of {len(data)} bytes, over "
                       f"{MAX_PACKAGE_BYTES}")
    where.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            tar.extractall(where, filter="data")
    except (tarfile.TarError, OSError, ValueError) as e:
        raise AotError(f"{what}: not a package archive ({e})") from None
    pkg = where / "pkg"
    if not (pkg / "metadata.json").is_file():
        raise AotError(f"{what}: the archive holds no package (no pkg/metadata.json)")
    return pkg


class BoardActor:
    """A Ray actor holding one board's session (search.Runner); runs
    packages it is sent, each unpacked once and kept until released."""

    def __init__(self, board: str):
        from aot.targets import get_board
        from aot.tune.search import Runner

        self.stack = contextlib.ExitStack()
        self.tmp = Path(self.stack.enter_context(
            tempfile.TemporaryDirectory(prefix="aot-farm-board-")))
        self.runner = Runner(None, get_board(board), self.stack, self.tmp)
        self.packages: dict[str, Path] = {}

    def run(self, key: str, archive: bytes, inputs: list, warmup: int, runs: int) -> str:
        """The run's outputs, kernel times and counts as JSON (errors too:
        {"error": "..."}), for the driver to check."""
        try:
            pkg = self.packages.get(key)
            if pkg is None:
                pkg = self.packages[key] = unpack(archive, self.tmp / key, f"package {key}")
            result = self.runner.run(pkg, inputs, warmup, runs)
        except AotError as e:
            return json.dumps({"error": str(e)})
        return json.dumps({
            "outputs": [{"dtype": str(a.dtype), "shape": list(a.shape),
                         "data": base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()}
                        for a in result.outputs],
            "profile_ns": result.profile_ns, "profile_instructions": result.profile_instructions,
            "times_ns": result.times_ns, "instructions": result.instructions})

    def release(self, key: str) -> None:
        pkg = self.packages.pop(key, None)
        if pkg is not None:
            self.runner.release(pkg)


# ---------------------------------------------------------------- driver side

ROWS = list_of(SIZES, "a list of lists of integers >= 0")
MEASUREMENT = obj({"error": NAME,
                   "outputs": OBJECTS,
                   "profile_ns": optional(ROWS), "profile_instructions": optional(ROWS),
                   "times_ns": optional(SIZES), "instructions": optional(SIZES)})
OUTPUT = obj({"dtype": NAME, "shape": list_of(INT, "a list of integers"), "data": STR},
             ("dtype", "shape", "data"))


@dataclass(frozen=True)
class Measured:
    """A board's run as the search reads it (the fields of RunResult it uses)."""
    outputs: list
    profile_ns: list | None
    profile_instructions: list | None
    times_ns: list | None = None
    instructions: list | None = None


def measurement(text: Any, meta: dict, what: str) -> Measured:
    """A BoardActor.run reply, checked: bounded JSON of the schema, outputs
    of the package's own dtypes and shapes and exactly their bytes, a
    profile row per run with a number per kernel."""
    if not isinstance(text, str) or len(text) > MAX_MEASUREMENT_BYTES:
        raise AotError(f"{what}: a measurement is JSON text of at most "
                       f"{MAX_MEASUREMENT_BYTES} bytes")
    value = check(loads(text, what, 4), MEASUREMENT, what)
    if "error" in value:
        raise AotError(f"{what}: {value['error'][:400]}")
    if "outputs" not in value:
        raise AotError(f"{what}: a measurement lacks outputs")
    specs = meta["outputs"]
    if len(value["outputs"]) != len(specs):
        raise AotError(f"{what}: {len(value['outputs'])} outputs, the package has {len(specs)}")
    outputs = []
    for i, (out, spec) in enumerate(zip(value["outputs"], specs)):
        check(out, OUTPUT, f"{what} outputs[{i}]")
        if out["dtype"] != spec["dtype"] or out["shape"] != list(spec["shape"]):
            raise AotError(f"{what}: outputs[{i}] is {out['dtype']}{out['shape']}, the "
                           f"package's {spec['dtype']}{list(spec['shape'])}")
        dtype = np.dtype(spec["dtype"])
        size = int(np.prod(spec["shape"], dtype=np.int64)) * dtype.itemsize
        try:
            raw = base64.b64decode(out["data"], validate=True)
        except ValueError:
            raise AotError(f"{what}: outputs[{i}].data is not base64") from None
        if len(raw) != size:
            raise AotError(f"{what}: outputs[{i}] has {len(raw)} bytes, its shape {size}")
        outputs.append(np.frombuffer(raw, dtype).reshape(spec["shape"]).copy())
    kernels = len(meta.get("kernels", []))
    for name in ("profile_ns", "profile_instructions"):
        rows = value.get(name)
        if rows is not None and any(len(r) != kernels for r in rows):
            raise AotError(f"{what}: {name} rows must have {kernels} numbers (the kernels)")
    return Measured(outputs, value.get("profile_ns"), value.get("profile_instructions"),
                    value.get("times_ns"), value.get("instructions"))


class _Pool:
    """The live board actors of one kind: a batch takes one and gives it
    back; a dead one is dropped (its batch measured again elsewhere)."""

    def __init__(self, kind: str):
        self.kind = kind
        self.free: queue.Queue = queue.Queue()
        self.live = 0
        self.lock = threading.Lock()

    def add(self, actor) -> None:
        with self.lock:
            self.live += 1
        self.free.put(actor)

    def take(self):
        deadline = time.monotonic() + BOARD_WAIT_S
        while True:
            with self.lock:
                if self.live == 0:
                    raise AotError(f"no board {self.kind!r} left in the farm: every one failed")
            try:
                return self.free.get(timeout=0.5)
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise AotError(f"no board {self.kind!r} free for {BOARD_WAIT_S:g} s") \
                        from None

    def drop(self) -> None:
        with self.lock:
            self.live -= 1


class FarmRunner:
    """search.Runner's methods over the farm, for one job: builds as Ray
    tasks, runs on a board actor of the job's kind taken per batch
    (`measure`), a batch measured again on another board when its actor
    dies."""

    def __init__(self, ray, pool: _Pool, graph, board, tmp: Path, codegen: str,
                 build_task, events: dict, lock: threading.Lock, profile: bool = True):
        from aot.tune.search import counts_instructions
        self.profile = profile
        self.ray, self.pool, self.graph_ref = ray, pool, ray.put(graph)
        self.board, self.codegen, self.tmp = board.name, codegen, tmp
        self.build_task, self.events, self.lock = build_task, events, lock
        self.local = threading.local()
        self.counts = counts_instructions(board)
        self.base_key, self.meta = "", None

    def build(self, schedules, name: str):
        configs = None if schedules is None else {
            k: c.as_json() for k, c in schedules.configs.items()}
        ref = self.build_task.remote(self.graph_ref, self.board, self.codegen, configs,
                                     self.profile)
        try:
            self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as e:
            cause = e.as_instanceof_cause() if hasattr(e, "as_instanceof_cause") else e
            if isinstance(cause, AotError):
                raise AotError(str(cause).splitlines()[0]) from None
            raise
        # the key names the package on every board actor: unique in the farm
        return (f"{name}-{uuid.uuid4().hex[:12]}", ref)

    def metadata(self, handle) -> dict:
        """The default package's metadata (the first package a job builds):
        its outputs and kernels are what every measurement is checked by."""
        from aot.packaging.metadata import read_metadata
        key, ref = handle
        self.base_key = key
        self.meta = read_metadata(unpack(self.ray.get(ref), self.tmp / key, f"package {key}"))
        return self.meta

    def measure(self, fn: Callable[[], Any]) -> Any:
        """fn() with a board of the kind held: runs of one batch on one
        board; the whole batch again on another when the board's actor dies."""
        while True:
            actor = self.pool.take()
            self.local.actor, self.local.used = actor, set()
            try:
                out = fn()
            except self.ray.exceptions.RayActorError:
                self.pool.drop()
                with self.lock:
                    self.events["retried"] += 1
                continue
            except BaseException:
                self.pool.free.put(actor)
                raise
            used = self.local.used
            self.pool.free.put(actor)
            for key in used - {self.base_key}:
                actor.release.remote(key)
            return out

    def run(self, handle, inputs, warmup: int, runs: int) -> Measured:
        key, ref = handle
        self.local.used.add(key)
        actor = self.local.actor
        try:
            text = self.ray.get(actor.run.remote(key, ref, list(inputs), warmup, runs),
                                timeout=MEASURE_TIMEOUT_S)
        except self.ray.exceptions.GetTimeoutError:
            # a board that stopped answering: gone, as far as this farm goes
            self.ray.kill(actor, no_restart=True)
            raise self.ray.exceptions.RayActorError() from None
        with self.lock:
            self.events["measurements"] += 1
        return measurement(text, self.meta, f"board {self.board} measurement")

    def release(self, handle) -> None:
        pass


@contextlib.contextmanager
def _boards(ray, boards: Sequence[str], nodes: Sequence[Node] | None) -> Iterator[dict]:
    """A pool of board actors per kind, killed on leaving (a shared cluster
    gets its boards back)."""
    slots = placements(boards, nodes, ray.cluster_resources())
    actor_class = ray.remote(num_cpus=0, max_restarts=0)(BoardActor)
    pools = {k: _Pool(k) for k in dict.fromkeys(boards)}
    actors = []
    try:
        for i, (name, where) in enumerate(slots):
            actors.append(actor_class.options(name=f"aot-board-{i}-{name}",
                                              **actor_options(ray, where)).remote(name))
            pools[name].add(actors[-1])
        yield pools
    finally:
        for actor in actors:
            ray.kill(actor, no_restart=True)


def _side_by_side(jobs: Sequence, work: Callable) -> list:
    """work(i, *job) for every job, each in a thread of its own; the first
    AotError raised after all have ended."""
    results: list = [None] * len(jobs)

    def run(i: int, job) -> None:
        try:
            results[i] = work(i, *job)
        except AotError as e:
            results[i] = e
    threads = [threading.Thread(target=run, args=(i, j), daemon=True) for i, j in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors = [r for r in results if isinstance(r, AotError)]
    if errors:
        raise errors[0]
    return results


def tune_farm(models: Sequence, boards: Sequence[str], cluster: str, farm: str | Path | None,
              database: str | Path | None = None, num_cpus: int | None = None,
              on_batch: Callable[[Any, str, str, int], None] | None = None,
              **options) -> dict[str, Any]:
    """Tune every model on every board kind named in `boards` over a Ray
    farm (the module doc): one job per (model, kind), jobs side by side.
    `on_batch(ray, model, board, trial)` after each batch (tests kill an
    actor from it). The summary: {jobs: [search.tune's summary per job],
    boards, measurements, retried, seconds}."""
    from aot.support import progress
    from aot.tune.search import tune

    started = time.monotonic()
    nodes = read_farm(farm) if farm is not None else None
    kinds = list(dict.fromkeys(boards))
    progress.enable(False)          # jobs in threads: one bar would interleave them
    events = {"measurements": 0, "retried": 0}
    lock = threading.Lock()
    with connected(cluster, boards, num_cpus) as ray, _boards(ray, boards, nodes) as pools:
        build_task = ray.remote(num_cpus=1, max_retries=2)(build_package)

        def job(i: int, model, kind: str) -> dict:
            def runner_for(graph, board, stack, tmp: Path) -> FarmRunner:
                return FarmRunner(ray, pools[kind], graph, board, tmp,
                                  options.get("codegen", "c"), build_task, events, lock)
            hook = None if on_batch is None else (
                lambda trial: on_batch(ray, str(model), kind, trial))
            return tune(model, kind, database=database, runner_for=runner_for,
                        on_batch=hook, **options)
        results = _side_by_side([(m, k) for m in models for k in kinds], job)
    return {"jobs": results, "boards": list(boards), "measurements": events["measurements"],
            "retried": events["retried"], "seconds": round(time.monotonic() - started, 2)}


def bench_farm(models: Sequence, boards: Sequence[str], cluster: str, farm: str | Path | None,
               codegen: str = "c", warmup: int = 10, repeat: int = 100,
               tuning_records: str | Path | None = None, num_cpus: int | None = None,
               input_shapes=None, bind=None) -> dict[str, Any]:
    """`aot bench MODELS... --boards ... --cluster`: every model on every
    board kind, built as Ray tasks and run on the farm's boards side by
    side. Per cell: {model, board, median_ms, ..., median_instructions}."""
    from aot.check.timing import check_counts, package_inputs, stats_of
    from aot.frontend.shapes import LoadOptions
    from aot.frontend.source import as_model
    from aot.lower.schedule.space import Schedules
    from aot.packaging.build import as_graph
    from aot.targets import get_board
    from aot.tune.records import schedules_for

    check_counts(warmup, repeat)
    started = time.monotonic()
    nodes = read_farm(farm) if farm is not None else None
    kinds = list(dict.fromkeys(boards))
    graphs = [as_graph(as_model(m, graphs=True), LoadOptions.of(input_shapes, bind))
              for m in models]
    schedules = {k: (schedules_for(tuning_records, get_board(k).target.name)
                     if tuning_records else None) for k in kinds}
    events = {"measurements": 0, "retried": 0}
    lock = threading.Lock()
    with connected(cluster, boards, num_cpus) as ray, _boards(ray, boards, nodes) as pools, \
            tempfile.TemporaryDirectory(prefix="aot-farm-bench-") as tmp:
        build_task = ray.remote(num_cpus=1, max_retries=2)(build_package)

        def cell(i: int, model, graph, kind: str) -> dict:
            runner = FarmRunner(ray, pools[kind], graph, get_board(kind), Path(tmp) / f"c{i}",
                                codegen, build_task, events, lock, profile=False)
            pkg = runner.build(schedules[kind] or Schedules(), "bench")
            meta = runner.metadata(pkg)
            inputs = package_inputs(meta)
            result = runner.measure(lambda: runner.run(pkg, inputs, warmup, repeat))
            if result.times_ns is None or len(result.times_ns) != repeat:
                raise AotError(f"board {kind}: the harness reported "
                               f"{len(result.times_ns or [])} timings, expected {repeat}")
            stats = stats_of([t / 1e6 for t in result.times_ns])
            out = {"model": str(model), "board": kind, "median_ms": stats.median_ms,
                   "min_ms": stats.min_ms, "max_ms": stats.max_ms, "repeat": repeat,
                   "warmup": warmup}
            if result.instructions:
                out["median_instructions"] = int(np.median(result.instructions))
            return out
        cells = _side_by_side([(m, g, k) for m, g in zip(models, graphs) for k in kinds], cell)
    return {"cells": cells, "boards": list(boards), "measurements": events["measurements"],
            "retried": events["retried"], "seconds": round(time.monotonic() - started, 2)}

"""`aot tune`: schedule search measured on the board (TVM's AutoTVM loop).

1. Lower the model once with the default policy, recording what each
   workload's schedule sites answered (aot/lower/schedule/space.py): its space.
2. Build the default package once (--profile: every kernel timed) and keep
   a serve session on it; its outputs are the reference.
3. Each trial is one batch: one candidate config per workload, all in ONE
   package (kernels are timed one by one, so one build measures a candidate
   of every workload), run on the board alternately with the default
   package (interleaved rounds of `repeat` runs: both see the same noise),
   median per kernel. A batch whose outputs differ from the default's
   (int8: any bit; float: beyond 1e-4 relative) is discarded whole.
4. A candidate faster than the default in its batch is appended to the log
   with both times; each workload's default is logged first. The first half
   of the trials draw at random, the rest the untried configs nearest the
   best so far.
"""
from __future__ import annotations

import contextlib
import random
import tempfile
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from aot.errors import AotError
from aot.lower.schedule.space import DEFAULT, Config, Schedules, applied, first_tries, space_of
from aot.tune import records as rec

# A candidate must beat the default by this share in its own batch to be
# logged: below it, two equal schedules differ by noise alone.
MIN_GAIN = 0.01
# ... and by this much time: a kernel of tens of ns moves by the clock's
# resolution (the 60 ns FC of ResNet-8 read 60 or 70 ns under one schedule).
MIN_GAIN_MS = 0.0002
ROUNDS = 3
SEARCHES = ("random", "model")


@dataclass
class _Workload:
    key: str
    desc: str
    kernels: list[str]
    space: list[Config]
    tried: set = field(default_factory=set)
    best: Config = DEFAULT
    best_ratio: float = 1.0
    # the default's cost (instructions where counted, else ms): the weight
    # of this workload's gains in the search's progress (summary["history"])
    default_cost: float | None = None
    # (op, dtype, signature) for the database's nearest-workload search
    signature: tuple = ()
    # configs to measure before any drawn one: the nearest workloads' best
    seeds: list = field(default_factory=list)
    # what each site answered by default (space.py's record mode)
    answers: dict = field(default_factory=dict)

    def untried(self) -> list[Config]:
        return [c for c in self.space if c not in self.tried]

    def next_seed(self) -> Config | None:
        """The first of its seeds not measured yet (taken off the list)."""
        while self.seeds:
            seed = self.seeds.pop(0)
            if seed not in self.tried:
                return seed
        return None


def workloads_of(graph, target) -> list[_Workload]:
    """The model's workloads in first-use order, with their spaces."""
    from aot.lower import lower_graph
    from aot.tune.database import signature_of

    seen = Schedules(record=True)
    with applied(seen):
        lower_graph(graph, target)
    return [_Workload(k, w.describe(), names, space_of(defaults, target),
                      signature=signature_of(w), answers=dict(defaults))
            for k, (w, defaults, names) in seen.seen.items()]


def _flat(config: Config) -> dict:
    out = {}
    for site, value in config.sites:
        if isinstance(value, (str, int)):
            out[site] = value
        else:
            out.update({(site, k): v for k, v in value})
    return out


def _distance(a: Config, b: Config) -> float:
    fa, fb = _flat(a), _flat(b)
    return sum(0 if fa.get(k) == fb.get(k) else 1 for k in set(fa) | set(fb))


def _draw(w: _Workload, trial: int, trials: int, rng: random.Random) -> Config | None:
    """The workload's candidate in this trial: its seeds first (the
    database's nearest bests, then the algorithm sites' alternatives:
    space.first_tries), then at random for the first half of the trials,
    then the untried configs nearest the best so far."""
    seed = w.next_seed()
    if seed is not None:
        return seed
    left = w.untried()
    if not left:
        return None
    if trial < trials // 2 or w.best == DEFAULT:
        return rng.choice(left)
    nearest = min(_distance(c, w.best) for c in left)
    return rng.choice([c for c in left if _distance(c, w.best) == nearest])


class Runner:
    """Builds packages here and runs them on the board: a serve session per
    package on the host and SSH boards (one upload each), else one
    run_package call: emulated boards run that way so that aot's QEMU
    plugin counts every kernel's instructions (`counts`), the cost there
    (an emulator's clock is no board's). The board farm (farm.py) has the
    same four methods over Ray."""

    def __init__(self, graph, board, stack: contextlib.ExitStack, tmp: Path,
                 codegen: str = "c", runs_on=None):
        """runs_on: the board that runs the packages built for `board`, where
        that is another (an rpi5 package counted under qemu-aarch64, which
        emulates the package's own core)."""
        self.board, self.graph, self.codegen, self.tmp = board, graph, codegen, tmp
        self.runs_on = runs_on or board
        self.device = None
        self.counts = counts_instructions(self.runs_on)
        if self.runs_on.transport == "serial":
            raise AotError(f"board '{board.name}' over a serial port runs the one package "
                           "flashed onto it: tune's candidates would each need a flash, which "
                           "aot tune does not do; tune on the emulated board without --port")
        if self.runs_on.transport in ("local", "ssh"):
            from aot.deploy.device import connect
            self.device = stack.enter_context(connect(self.runs_on))

    def build(self, schedules: Schedules | None, name: str) -> Path:
        from aot.api import package
        with applied(schedules):
            return package(self.graph, board=self.board, codegen=self.codegen,
                           out_dir=self.tmp / name, profile=True).path

    def measure(self, fn):
        """fn(), whose runs are one batch's (the farm holds one board for them)."""
        return fn()

    def metadata(self, pkg: Path) -> dict:
        from aot.packaging.metadata import read_metadata
        return read_metadata(pkg)

    def release(self, pkg: Path) -> None:
        if self.device is not None:
            self.device.release(pkg)
        with contextlib.suppress(OSError):
            _remove(pkg)

    def run(self, pkg: Path, inputs, warmup: int, runs: int):
        if self.device is not None:
            return self.device.request(pkg, inputs, warmup, runs)
        from aot.check.timing import bench_package
        return bench_package(pkg, self.runs_on, inputs, warmup, runs)


def counts_instructions(board) -> bool:
    """Whether the board's runs count each kernel's instructions."""
    return board.transport in ("qemu-user", "qemu-system")


def _kernel_costs(meta: dict, results: Sequence) -> tuple[dict, dict | None]:
    """Per kernel name: the median ms over the results' profiled runs, and
    the median instructions where the board counted them (else None)."""
    from aot.check.timing import profile_stats
    rows = [row for r in results for row in r.profile_ns]
    counted = all(r.profile_instructions for r in results)
    counts = [row for r in results for row in r.profile_instructions] if counted else None
    stats = profile_stats(meta, rows, counts)
    return ({k.name: k.median_ms for k in stats},
            {k.name: k.median_instructions for k in stats} if counted else None)


def _same(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> bool:
    for a, b in zip(outputs, reference):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if np.issubdtype(a.dtype, np.floating):
            scale = float(np.max(np.abs(b))) if b.size else 0.0
            if not np.allclose(a, b, rtol=1e-4, atol=1e-4 * max(scale, 1e-6), equal_nan=True):
                return False
        elif not np.array_equal(a, b):
            return False
    return True


def tune(model, board, trials: int = 32, budget: float | None = None,
         log: str | Path | None = None, resume: bool = False, codegen: str = "c",
         warmup: int = 5, repeat: int = 20, seed: int = 0, input_shapes=None,
         bind=None, database: str | Path | None = None, runner_for=None,
         on_batch=None, search: str = "random") -> dict[str, Any]:
    """Search schedules for `model` on `board` (see the module doc) and
    append the records to `log` (default: <model>.<board>.tune.jsonl), or
    to the tuning `database` (its records of these workloads are taken as
    measured, and a workload it has none of starts from the nearest
    workloads' best). `budget`: seconds after which no new batch starts.
    `runner_for(graph, board, stack, tmp)`: what builds and runs the
    packages (default: Runner, here and on the board; farm.py's over Ray);
    `on_batch(trial)` is called after each batch. `search`: "random" (each
    workload's candidates drawn from its space, then the nearest to the
    best) or "model" (whole configs evolved and ranked by a cost model
    trained on the measurements: guided.py; needs the `aot[tune]` extra).
    The summary: {log, board, target, trials_run, workloads,
    tunable, improved, records_written, discarded, failed, seconds,
    first_batch, seeded, best, search, history (the progress after each
    batch: _cost_now), default_total}."""
    from aot.support import progress
    from aot.packaging.build import as_graph
    from aot.frontend.shapes import LoadOptions
    from aot.frontend.source import as_model
    from aot.ir.graph import Graph
    from aot.targets import get_board
    from aot.check.timing import package_inputs

    started = time.monotonic()
    if trials < 1:
        raise AotError(f"--trials {trials}: at least 1")
    if budget is not None and budget <= 0:
        raise AotError(f"--budget {budget}: a number of seconds > 0")
    if search not in SEARCHES:
        raise AotError(f"--search {search}: one of {', '.join(SEARCHES)}")
    if search == "model":
        from aot.tune.model import require
        require()       # before any work: the extra's one-line error
    brd = get_board(board) if isinstance(board, str) else board
    target = brd.target
    model = as_model(model, graphs=True)
    stem = model.name if isinstance(model, Graph) else model.stem
    graph = as_graph(model, LoadOptions.of(input_shapes, bind))
    works = workloads_of(graph, target)
    sink = _sink(log, database, resume, f"{stem}.{brd.name}.tune.jsonl")
    known = sink.known(target.name, {w.key for w in works})
    by_key = {w.key: w for w in works}
    guide = None
    if search == "model":
        from aot.tune.guided import ModelSearch
        guide = ModelSearch(graph, target, works, seed)
    for r in known:
        w = by_key[r.workload]
        w.tried.add(r.config)
        ratio = rec.relative(r, r.default_ms or r.ms)
        if ratio < w.best_ratio:
            w.best, w.best_ratio = r.config, ratio
        if r.config == DEFAULT:
            w.default_cost = r.instructions if r.instructions is not None else r.ms
        if guide is not None:
            guide.observe(w, r.config, ratio)
    for w in works:
        w.tried.add(DEFAULT)
    tunable = [w for w in works if len(w.space) > 1]
    seeded = sink.seed(tunable, target.name, {r.workload for r in known})
    if guide is None:
        for w in tunable:
            w.seeds = list(dict.fromkeys(w.seeds + first_tries(w.space)))
    rng = random.Random(seed)
    summary = {"log": str(sink.path), "board": brd.name, "target": target.name,
               "search": search, "history": [],
               "workloads": len(works), "tunable": len(tunable), "trials_run": 0,
               "records_written": 0, "discarded": 0, "failed": 0, "seeded": seeded,
               "first_batch": None}

    def write(new: list) -> None:
        summary["records_written"] += sink.add(new, works, target.name)

    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="aot-tune-")))
        runner = (runner_for or partial(Runner, codegen=codegen))(graph, brd, stack, tmp)
        with progress.step(f"build the default package for {brd.name}"):
            base = runner.build(None, "default")
        meta = runner.metadata(base)
        inputs = package_inputs(meta)
        reference = runner.measure(lambda: runner.run(base, inputs, warmup, 1)).outputs
        defaults_known = {r.workload for r in known if r.config == DEFAULT}
        if any(w.key not in defaults_known for w in works):   # each workload's default first
            times, counts = _kernel_costs(meta, [runner.measure(
                lambda: runner.run(base, inputs, warmup, repeat))])
            for w in works:
                if w.key not in defaults_known:
                    w.default_cost = _sum(counts if counts is not None else times, w)
                    if guide is not None:
                        guide.observe(w, DEFAULT, 1.0)
            write([_record(w.key, DEFAULT, _sum(times, w), None, brd, target, _sum(counts, w))
                   for w in works if w.key not in defaults_known])
        with progress.step(f"tune {len(tunable)} workloads on {brd.name}",
                           total=trials) as bar:
            for trial in range(trials):
                if budget is not None and time.monotonic() - started > budget:
                    break
                if guide is not None:
                    guide.train()
                    picks = {w.key: c for w in tunable if (c := guide.draw(w)) is not None}
                else:
                    picks = {w.key: c for w in tunable
                             if (c := _draw(w, trial, trials, rng)) is not None}
                if not picks:
                    break
                for w in tunable:
                    if w.key in picks:
                        w.tried.add(picks[w.key])
                summary["trials_run"] += 1
                observed: list = []
                new, ratio = _batch(runner, base, meta, inputs, reference, warmup, repeat,
                                    picks, by_key, brd, target, summary, trial, observed)
                if guide is not None:
                    for key, config, r in observed:
                        guide.observe(by_key[key], config, r)
                summary["history"].append(_cost_now(tunable))
                if summary["first_batch"] is None and ratio is not None:
                    summary["first_batch"] = ratio
                write(new)
                if on_batch is not None:
                    on_batch(trial)
                bar.update(_best_line(tunable, trial + 1, trials))
                bar.advance()
        runner.release(base)
    summary["improved"] = sum(1 for w in tunable if w.best != DEFAULT)
    summary["best"] = {w.key: {"desc": w.desc, "config": w.best.as_json(),
                               "ratio": round(w.best_ratio, 4),
                               "default_cost": w.default_cost} for w in tunable}
    summary["default_total"] = sum(w.default_cost or 0 for w in works)
    summary["seconds"] = round(time.monotonic() - started, 2)
    return summary


def _batch(runner, base, meta: dict, inputs, reference, warmup: int, repeat: int, picks: dict,
           by_key: dict, brd, target, summary: dict, trial: int,
           observed: list | None = None) -> tuple[list, float | None]:
    """Build and measure one batch: its records and its cost over the
    default's (None where it failed or was discarded); each pick's
    (workload, config, cost / default) goes to `observed`."""
    try:
        pkg = runner.build(Schedules(picks), f"trial{trial}")
    except AotError:
        # a config the lowering refuses: none of this batch is kept
        summary["failed"] += 1
        return [], None
    try:
        return runner.measure(lambda: _measure(runner, base, pkg, meta, inputs, reference,
                                               warmup, repeat, picks, by_key, brd, target,
                                               summary, observed))
    except AotError:        # the candidate's harness failed on the board
        summary["failed"] += 1
        return [], None
    finally:
        runner.release(pkg)


def _known(path: Path, target: str, keys: set) -> list[rec.Record]:
    """The records at path (a JSON log or a database: rec.read takes both)
    of these workloads on this target, in this format version."""
    if not path.exists():
        return []
    return [r for r in rec.read(path) if r.target == target
            and r.version == rec.FORMAT_VERSION and r.workload in keys]


class _LogSink:
    """Records into a JSON log (records.append), as `aot tune -o LOG`."""

    def __init__(self, path: Path, resume: bool):
        if path.exists() and not resume:
            raise AotError(f"{path} exists: --resume continues it, or name another log with -o")
        if resume and not path.exists():
            raise AotError(f"--resume: {path} does not exist")
        self.path = path

    def known(self, target: str, keys: set) -> list[rec.Record]:
        return _known(self.path, target, keys)

    def seed(self, tunable, target: str, measured: set) -> int:
        return 0

    def add(self, new: list, works, target: str) -> int:
        rec.append(self.path, new)
        return len(new)


class _DatabaseSink:
    """Records into a tuning database (database.py), one transaction per
    batch; what it holds of these workloads counts as measured."""

    def __init__(self, path: Path):
        self.path = path

    def known(self, target: str, keys: set) -> list[rec.Record]:
        return _known(self.path, target, keys)

    def seed(self, tunable, target: str, measured: set) -> int:
        """Give each tunable workload the database has no record of the
        best configs of its nearest workloads (same op and dtype) that its
        space holds: its first candidates. The number of workloads seeded."""
        from aot.tune import database
        if not self.path.exists():
            return 0
        mine = [r for r in rec.read(self.path) if r.target == target
                and r.version == rec.FORMAT_VERSION]
        best = rec.best(mine, target)
        seeded = 0
        for w in tunable:
            if w.key in measured:
                continue
            op, dtype, sig = w.signature
            near = database.nearest(self.path, target, op, dtype, sig, w.key)
            w.seeds = list(dict.fromkeys(best[k] for _, k in near
                                         if k in best and best[k] in w.space))
            seeded += bool(w.seeds)
        return seeded

    def add(self, new: list, works, target: str) -> int:
        from aot.tune import database
        return database.write(self.path, [r.as_json() for r in new],
                              [(w.key, target, *w.signature) for w in works])


def _sink(log, database, resume: bool, default_log: str):
    if database is not None:
        if log is not None or resume:
            raise AotError("--database: the records go to the database; -o and --resume are "
                           "for a JSON log (a database resumes by itself)")
        return _DatabaseSink(Path(database))
    return _LogSink(Path(log) if log else Path(default_log), resume)


def _remove(pkg: Path) -> None:
    import shutil
    shutil.rmtree(pkg)


def _sum(costs: dict | None, w: _Workload):
    return None if costs is None else sum(costs[k] for k in w.kernels)


def _record(key: str, config: Config, ms: float, default_ms: float | None, brd, target,
            instructions: int | None = None,
            default_instructions: int | None = None) -> rec.Record:
    import aot
    return rec.Record(key, target.name, config, round(ms, 6), brd.name, aot.__version__,
                      default_ms=None if default_ms is None else round(default_ms, 6),
                      instructions=instructions, default_instructions=default_instructions)


def _measure(runner, base: Path, pkg: Path, meta: dict, inputs, reference, warmup: int,
             repeat: int, picks: dict, by_key: dict, brd, target, summary: dict,
             observed: list | None = None):
    """Time the candidate package alternately with the default one; the
    records of the candidates that beat the default in this batch (in
    instructions where the board counts them: exact, one round), and the
    batch's picked workloads' cost over the default's."""
    base_runs, cand_runs = [], []
    for _ in range(1 if runner.counts else ROUNDS):
        base_runs.append(runner.run(base, inputs, warmup, repeat))
        cand_runs.append(runner.run(pkg, inputs, warmup, repeat))
    if not _same(cand_runs[-1].outputs, reference):
        summary["discarded"] += 1
        return [], None
    (base_ms, base_n), (cand_ms, cand_n) = (_kernel_costs(meta, base_runs),
                                            _kernel_costs(meta, cand_runs))
    out = []
    counted = base_n is not None and cand_n is not None
    totals = [sum(_sum(c, by_key[k]) for k in picks)
              for c in ((base_n, cand_n) if counted else (base_ms, cand_ms))]
    for key, config in picks.items():
        w = by_key[key]
        before, after = _sum(base_ms, w), _sum(cand_ms, w)
        n_before, n_after = _sum(base_n, w), _sum(cand_n, w)
        if observed is not None:
            seen = (n_after / n_before if n_before and n_after is not None
                    else after / before if before > 0 else None)
            if seen is not None:
                observed.append((key, config, seen))
        if n_before is not None and n_after is not None:
            if not 0 < n_after < n_before:
                continue
            ratio = n_after / n_before
        elif before <= 0 or after >= min(before * (1 - MIN_GAIN), before - MIN_GAIN_MS):
            continue
        else:
            ratio = after / before
        out.append(_record(key, config, after, before, brd, target, n_after, n_before))
        if ratio < w.best_ratio:
            w.best, w.best_ratio = config, ratio
    return out, (round(totals[1] / totals[0], 6) if totals[0] > 0 else None)


def _cost_now(tunable: list[_Workload]) -> float:
    """The tunable workloads' best cost over their defaults' (each weighted
    by its default's cost): the search's progress after each batch
    (summary["history"])."""
    weights = [w.default_cost or 0.0 for w in tunable]
    if sum(weights) <= 0:
        return 1.0
    return round(sum(w.best_ratio * c for w, c in zip(tunable, weights)) / sum(weights), 6)


def _best_line(tunable: list[_Workload], done: int, trials: int) -> str:
    gains = [1 - w.best_ratio for w in tunable]
    improved = sum(1 for g in gains if g > 0)
    top = max(gains, default=0.0)
    return (f"tune: trial {done}/{trials}, {improved}/{len(tunable)} workloads faster than "
            f"default, best gain {top:.0%}")

"""`aot tune --search model`: each workload's next candidate from an
evolutionary search over its whole configs (evolve.py), ranked by a cost
model (model.py) trained on every measurement so far.

A candidate's features come from its lowered kernel (features.py): one
kernel of the workload lowered with the config in force, a few ms, cached
per (workload, config), so a config is lowered once however often it is
ranked. The model learns the candidate's cost over its workload's default
(log2), from the candidate's features and their difference to the
default's: workloads of any shape share one model, and the records of a
tuning database (this model's workloads there) train it before the first
batch. Its prior is the difference of the TIR's instruction estimates
(features' `log_instrs`): the trees learn where that estimate errs (a
regression in that same log2 unit, so the two add up).

Until the model has something to learn from (the first batch), half of
the workloads, drawn by the seed, measure their first algorithm
alternative (space.first_tries: what the random search measures first,
where one choice pays most), the others a whole config drawn at random;
the untried alternatives stay in every later population, ranked with the
evolved configs.
"""
from __future__ import annotations

import math
import random

from aot.errors import AotError
from aot.lower.schedule.space import (DEFAULT, Config, Schedules, answer_value, applied,
                                      first_tries)
from aot.tune.evolve import EPSILON, JointSpace, evolve, untried_draw
from aot.tune.features import NAMES, features
from aot.tune.model import CostModel

# How many of a workload's best measured configs seed its population.
ELITE = 4
# Until the model is trained, the share of workloads whose candidate is an
# algorithm alternative (space.first_tries); the others draw whole configs at
# random: where one algorithm choice pays, the model learns it from the
# first share and ranks it for the rest; where the gain is in the tiles
# (the Cortex-A7's convs), from the second.
FIRST_SHARE = 0.5
# Where a row holds the difference of the instruction estimates: the prior.
PRIOR = len(NAMES) + NAMES.index("log_instrs")


def effective(answers: dict, config: Config) -> Config:
    """config with the default's answer for every site it leaves alone:
    the knobs the candidate runs with, so the default's tile, row reads,
    unrolling or nest tile read as what they are, not as nothing."""
    sites = {}
    for site, answer in answers.items():
        value = answer_value(site, answer)
        if value is not None:
            sites[site] = value
    sites.update(config.sites)
    return Config(tuple(sorted(sites.items())))


class ModelSearch:
    """draw(w) for each workload per batch, observe(w, config, ratio) for
    each measurement; `train()` between batches."""

    def __init__(self, graph, target, works, seed: int = 0, epsilon: float = EPSILON):
        self.graph, self.target, self.epsilon = graph, target, epsilon
        self.model = CostModel(seed)
        self.rng = random.Random(seed)
        self.nodes = {n.name: n for n in graph.nodes}
        self.joints = {w.key: JointSpace.of(w.space) for w in works}
        self.first = {w.key: first_tries(w.space) for w in works}
        self._features: dict[tuple[str, Config], tuple | None] = {}   # model rows
        self._lowered: dict[tuple[str, Config], tuple | None] = {}    # the kernel's own
        # per workload: the kernels measured (configs that lower to the same
        # kernel cost the same: one of them measured is all of them)
        self._code: dict[tuple[str, Config], object] = {}
        self._measured_code: dict[str, set] = {}
        self.rows: list[tuple] = []
        self.costs: list[float] = []
        self.measured: dict[str, list[tuple[float, Config]]] = {}

    def features(self, w, config: Config) -> tuple | None:
        """The model's input row of config for workload w (None: the
        lowering refuses the config)."""
        cached = self._features.get((w.key, config), ())
        if cached != ():
            return cached
        row = None
        own = self._lowered_features(w, config)
        base = self._lowered_features(w, DEFAULT) if config != DEFAULT else own
        if own is not None and base is not None:
            row = own + tuple(a - b for a, b in zip(own, base))
        self._features[(w.key, config)] = row
        return row

    def _lowered_features(self, w, config: Config) -> tuple | None:
        from aot.lower import lower_group
        key = (w.key, config)
        if key in self._lowered:
            return self._lowered[key]
        try:
            with applied(Schedules({w.key: config})):
                kernel = lower_group(self.graph, self.nodes[w.kernels[0]], self.target)
            self._code[(w.key, config)] = kernel.func
            out = features(kernel.func, effective(w.answers, config),
                           self.target.vector_registers)
        except AotError:
            out = None
        self._lowered[key] = out
        return out

    def observe(self, w, config: Config, ratio: float) -> None:
        if not ratio > 0 or not math.isfinite(ratio):
            return
        row = self.features(w, config)
        if row is None:
            return
        self.rows.append(row)
        self.costs.append(math.log2(ratio))
        self.measured.setdefault(w.key, []).append((ratio, config))
        self._measured_code.setdefault(w.key, set()).add(self._code.get((w.key, config)))

    def train(self) -> None:
        # regression, not ranking within workloads: the trees correct the
        # prior in its own unit (log2 of the cost over the default's)
        self.model.fit(self.rows, self.costs, prior=[r[PRIOR] for r in self.rows])

    def score(self, w, configs: list[Config]) -> list[float]:
        rows = [self.features(w, c) for c in configs]
        ok = [r for r in rows if r is not None]
        predicted = iter(self.model.predict(ok, [r[PRIOR] for r in ok]) if ok else [])
        # a config the lowering refuses ranks last
        return [float(next(predicted)) if r is not None else math.inf for r in rows]

    def is_new(self, w, config: Config) -> bool:
        """Neither measured nor lowered to a kernel measured already."""
        if config in w.tried or self.features(w, config) is None:
            return False
        return self._code.get((w.key, config)) not in self._measured_code.get(w.key, ())

    def draw(self, w) -> Config | None:
        """The workload's next candidate: a database seed first; while the
        model is untrained, its next algorithm alternative (a share
        FIRST_SHARE of the draws) or a random untried config; then the
        evolved population's best untried (or, with probability epsilon, a
        random untried one)."""
        seed = w.next_seed()
        if seed is not None:
            return seed
        joint = self.joints[w.key]
        if len(w.tried) >= joint.size:
            return None
        informed = [c for c in self.first[w.key] if self.is_new(w, c)]
        if not self.model.trained:
            if informed and self.rng.random() < FIRST_SHARE:
                return informed[0]
            return untried_draw(joint, lambda c: self.is_new(w, c), self.rng)
        elite = [c for _, c in sorted(self.measured.get(w.key, []),
                                      key=lambda rc: (rc[0], str(rc[1])))[:ELITE]]
        picks = evolve(joint, lambda cs: self.score(w, cs), [*elite, *informed],
                       lambda c: self.is_new(w, c), self.rng, epsilon=self.epsilon)
        return picks[0] if picks else None

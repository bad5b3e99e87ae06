"""Evolutionary search over whole configs of one workload (every site
together), ranked by a cost model (MetaSchedule's loop).

A workload's space (space.py's `space_of`) lists, per site, the legal
alternatives to its default. Its *joint* space takes one choice per site,
the default or one of those: each site's choices are legal on their own and
the sites are choices of different loops, so every combination is one the
lowering takes. The search keeps a population of joint configs, makes
children by mutation (one or two sites changed) and crossover (each site
from either parent), and keeps the ones the model ranks best; the best
untried are measured, with a share `epsilon` drawn at random instead
(exploration: the model only knows what was measured).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Sequence

from aot.lower.schedule.space import DEFAULT, Config

POPULATION = 24
GENERATIONS = 3
EPSILON = 0.2


@dataclass(frozen=True)
class JointSpace:
    """Per site, the choices other than its default (each a Config value:
    a knob tuple or a name), sorted by site."""
    sites: tuple[tuple[str, tuple], ...]

    @staticmethod
    def of(space: Sequence[Config]) -> "JointSpace":
        choices: dict[str, list] = {}
        for config in space:
            for site, value in config.sites:
                if value not in choices.setdefault(site, []):
                    choices[site].append(value)
        return JointSpace(tuple((s, tuple(v)) for s, v in sorted(choices.items())))

    @property
    def size(self) -> int:
        n = 1
        for _, values in self.sites:
            n *= len(values) + 1
        return n

    def holds(self, config: Config) -> bool:
        """Whether every site of config is one of this space's choices."""
        allowed = dict(self.sites)
        return all(site in allowed and value in allowed[site] for site, value in config.sites)

    def compose(self, picks: dict) -> Config:
        """The config of one choice per site (None: its default)."""
        return Config(tuple(sorted((s, v) for s, v in picks.items() if v is not None)))

    def picks(self, config: Config) -> dict:
        chosen = dict(config.sites)
        return {site: chosen.get(site) for site, _ in self.sites}

    def draw(self, rng: random.Random) -> Config:
        return self.compose({site: rng.choice((None, *values)) for site, values in self.sites})

    def mutate(self, config: Config, rng: random.Random) -> Config:
        """One or two sites changed to another of their choices."""
        picks = self.picks(config)
        if not self.sites:
            return config
        n = min(len(self.sites), rng.choice((1, 2)))
        for site, values in rng.sample(self.sites, n):
            others = [v for v in (None, *values) if v != picks[site]]
            picks[site] = rng.choice(others)
        return self.compose(picks)

    def crossover(self, a: Config, b: Config, rng: random.Random) -> Config:
        pa, pb = self.picks(a), self.picks(b)
        return self.compose({s: (pa if rng.random() < 0.5 else pb)[s] for s, _ in self.sites})


def evolve(joint: JointSpace, score: Callable[[list[Config]], list[float]],
           seeds: Sequence[Config], is_new: Callable[[Config], bool], rng: random.Random,
           count: int = 1, epsilon: float = EPSILON, population: int = POPULATION,
           generations: int = GENERATIONS) -> list[Config]:
    """Up to `count` new configs (`is_new`: not measured, nor the same
    code as a measured one) to measure next: the best ranked by `score`
    (lower is better) after evolving a population that starts from `seeds`
    (the best measured so far) and random draws; each pick is a random new
    config instead with probability `epsilon`."""
    pool = list(dict.fromkeys([*seeds, *(joint.draw(rng) for _ in range(population))]))
    for _ in range(generations):
        ranked = _ranked(pool, score)
        parents = ranked[:max(2, population // 2)]
        children = []
        for _ in range(population):
            if rng.random() < 0.5 and len(parents) > 1:
                a, b = rng.sample(parents, 2)
                child = joint.crossover(a, b, rng)
            else:
                child = joint.mutate(rng.choice(parents), rng)
            children.append(child)
        pool = list(dict.fromkeys([*parents, *children]))
    ranked = [c for c in _ranked(pool, score) if is_new(c)]
    out: list[Config] = []
    for _ in range(count):
        if rng.random() < epsilon or not ranked:
            fresh = untried_draw(joint, lambda c: is_new(c) and c not in out, rng)
            if fresh is not None:
                out.append(fresh)
                continue
        ranked = [c for c in ranked if c not in out]
        if ranked:
            out.append(ranked.pop(0))
    return out


def _ranked(pool: list[Config], score) -> list[Config]:
    scores = score(pool)
    # ties (an untrained model scores all alike) keep the pool's order: seeded, so deterministic
    order = sorted(range(len(pool)), key=lambda i: (scores[i], i))
    return [pool[i] for i in order]


def untried_draw(joint: JointSpace, is_new, rng: random.Random,
                 attempts: int = 64) -> Config | None:
    """A random config of the space that is_new accepts (None: none found
    in `attempts` draws)."""
    for _ in range(attempts):
        c = joint.draw(rng)
        if is_new(c):
            return c
    return None


__all__ = ["DEFAULT", "JointSpace", "evolve", "untried_draw"]

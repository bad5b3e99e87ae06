"""The cost model's parts (docs/tuning.md, "The cost model"): TIR features,
the gradient-boosted model, the evolutionary search over whole configs."""
from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from support import MODELS

KWS_INT8 = MODELS / "mlperf_kws_dscnn_int8.tflite"


@pytest.fixture(scope="module")
def kws():
    """KWS int8 for the A72 (qemu-aarch64): its workloads and their spaces."""
    import aot
    from aot.targets import get_board
    from aot.tune.search import workloads_of

    target = get_board("qemu-aarch64").target
    graph = aot.optimize(aot.load(KWS_INT8))
    return graph, target, workloads_of(graph, target)


def lowered_features(graph, target, w, config):
    from aot.lower import lower_group
    from aot.lower.schedule.space import Schedules, applied
    from aot.tune.features import features

    node = next(n for n in graph.nodes if n.name == w.kernels[0])
    with applied(Schedules({w.key: config})):
        func = lower_group(graph, node, target).func
    return features(func, config, target.vector_registers)


def test_features_are_deterministic_and_see_the_tile(kws):
    """Equal candidates give equal vectors; a bigger register tile changes
    the accumulators, their pressure and the loads per MAC."""
    from aot.lower.schedule.space import DEFAULT, Config
    from aot.tune.features import NAMES

    graph, target, works = kws
    conv = next(w for w in works if w.desc.startswith("tfl.conv2d 1x25x5x64 64x1x1x64"))
    small = Config.of({"tile/pixels": {"vectors": 1, "mr": 1, "max_accs": 2}})
    assert small in conv.space
    default = lowered_features(graph, target, conv, DEFAULT)
    assert len(default) == len(NAMES)
    assert default == lowered_features(graph, target, conv, DEFAULT)
    f = dict(zip(NAMES, lowered_features(graph, target, conv, small)))
    d = dict(zip(NAMES, default))
    assert d["vector_accs"] > f["vector_accs"] >= 1
    assert d["pressure"] > f["pressure"] > 0
    assert d["loads_per_mac"] < f["loads_per_mac"]
    assert d["dot_share"] > 0.5     # the A72's 4-way dot products
    assert f["knob_vectors"] == 1 and d["knob_vectors"] == 0


def test_the_model_ranks_a_synthetic_problem():
    """Trained on a cost that grows with one feature and falls with
    another, the model orders unseen points the same way."""
    from aot.tune.model import CostModel

    rng = np.random.default_rng(3)
    train = rng.uniform(0, 4, size=(80, 6))
    cost = 0.5 * train[:, 0] - 0.3 * np.maximum(train[:, 2] - 1, 0)
    model = CostModel(seed=0)
    model.fit(train.tolist(), cost.tolist())
    test = rng.uniform(0, 4, size=(40, 6))
    truth = 0.5 * test[:, 0] - 0.3 * np.maximum(test[:, 2] - 1, 0)
    predicted = model.predict(test.tolist())
    # Spearman's rank correlation
    rank = lambda x: np.argsort(np.argsort(x))    # noqa: E731
    assert np.corrcoef(rank(predicted), rank(truth))[0, 1] > 0.9
    again = CostModel(seed=0)
    again.fit(train.tolist(), cost.tolist())
    assert np.array_equal(again.predict(test.tolist()), predicted)


def test_without_the_extra_model_search_is_one_line(monkeypatch):
    import builtins

    from aot.errors import AotError
    from aot.tune import model

    real = builtins.__import__

    def no_xgboost(name, *args, **kwargs):
        if name == "xgboost":
            raise ImportError(name)
        return real(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_xgboost)
    with pytest.raises(AotError, match=r"aot\[tune\]"):
        model.CostModel()
    assert not model.available()


def test_evolution_is_seeded_and_stays_in_the_space(kws):
    """The joint space combines each site's own choices; mutation,
    crossover and the picks stay there, the same seed gives the same
    picks, and tried configs are not picked again."""
    from aot.tune.evolve import JointSpace, evolve

    _, _, works = kws
    conv = next(w for w in works if w.desc.startswith("tfl.conv2d 1x25x5x64 64x1x1x64"))
    joint = JointSpace.of(conv.space)
    assert joint.size > len(conv.space)      # sites combined, not one at a time
    assert all(joint.holds(c) for c in conv.space)

    def score(configs):     # a stand-in model: prefers fewer vectors, then pairs
        return [dict(dict(c.sites).get("tile/pixels", (("vectors", 4),))).get("vectors", 4)
                - (c.get("accumulator") == "pairs") for c in configs]

    def picks(seed, tried):
        return evolve(joint, score, [], lambda c: c not in tried, random.Random(seed),
                      count=5, epsilon=0.2)
    first = picks(1, set())
    assert first == picks(1, set()) and len(first) == 5 and len(set(first)) == 5
    assert all(joint.holds(c) for c in first)
    assert not set(first) & set(picks(1, set(first)))
    rng = random.Random(0)
    for _ in range(200):
        a, b = joint.draw(rng), joint.draw(rng)
        assert joint.holds(joint.mutate(a, rng)) and joint.holds(joint.crossover(a, b, rng))


def test_every_site_form_reaches_the_features():
    """A count (unrolling), the integer nests' tile and a scalar tile are
    features of the config, and a candidate that leaves a site alone reads
    the default's answer there."""
    from aot.lower.schedule.space import Config
    from aot.lower.schedule.tile_sizes import Tile
    from aot.tune.features import KNOB_NAMES, _config_features
    from aot.tune.guided import effective

    answers = {"unroll": 2, "nest_tile": (3, 4), "int8_rows": "staged",
               "tile/scalar_pixels": Tile(lanes=1, vectors=2, mr=2, max_accs=8)}
    alone = effective(answers, Config.of({}))
    assert dict(alone.sites) == {"unroll": 2, "nest_tile": (("channels", 4), ("rows", 3)),
                                 "int8_rows": "staged",
                                 "tile/scalar_pixels": (("max_accs", 8), ("mr", 2),
                                                        ("vectors", 2))}
    changed = effective(answers, Config.of({"unroll": 8, "nest_tile": {"rows": 2,
                                                                        "channels": 5}}))
    knobs = dict(zip(KNOB_NAMES, _config_features(changed)))
    assert (knobs["count"], knobs["rows"], knobs["channels"], knobs["vectors"]) == (8, 2, 5, 2)
    before = dict(zip(KNOB_NAMES, _config_features(alone)))
    assert (before["count"], before["rows"], before["channels"]) == (2, 3, 4)


def test_the_instruction_estimate_counts_a_vector_op_once_and_no_address():
    """out[4i..] = a[4i+1..] + b[4i..] over 8 trips: per trip two loads, an
    add and a store (4 lanes each: one instruction each; the index
    arithmetic none) and the loop's own step; unrolled, no loop step."""
    from aot.ir.tir import FLOAT32, Bin, Buffer, Const, For, ForKind, Load, PrimFunc, Store, Var
    from aot.lower.schedule.space import DEFAULT
    from aot.tune.features import LOOP_COST, NAMES, features, nests_of

    a, b, out = (Buffer(n, FLOAT32, (36,)) for n in ("a", "b", "out"))
    i = Var("i")
    at = Bin("*", i, Const(4))
    body = Store(out, at, Bin("+", Load(a, Bin("+", at, Const(1)), 4), Load(b, at, 4)))
    for kind, step in ((ForKind.SERIAL, LOOP_COST), (ForKind.UNROLLED, 0)):
        func = PrimFunc("k", (a, b, out), For(i, 8, body, kind))
        assert nests_of(func)[0].instrs == 8 * (4 + step)
        f = dict(zip(NAMES, features(func, DEFAULT, 16)))
        assert f["log_instrs"] == pytest.approx(np.log2(1 + 8 * (4 + step)))




def test_the_prior_ranks_the_untrained_model_and_the_trees_learn_its_error():
    """Untrained, the model's scores are the prior; trained on costs that
    are the prior plus an error carried by one feature, it ranks unseen
    points by both."""
    from aot.tune.model import CostModel

    rng = np.random.default_rng(5)
    model = CostModel(seed=0)
    prior = rng.uniform(-1, 1, size=30)
    assert np.array_equal(model.predict(np.zeros((30, 3)).tolist(), prior), prior)
    x = rng.uniform(0, 1, size=(120, 3))
    p = rng.uniform(-1, 1, size=120)
    cost = p - 0.8 * (x[:, 1] > 0.5)
    model.fit(x.tolist(), cost.tolist(), prior=p.tolist())
    tx, tp = rng.uniform(0, 1, size=(60, 3)), rng.uniform(-1, 1, size=60)
    truth = tp - 0.8 * (tx[:, 1] > 0.5)
    rank = lambda v: np.argsort(np.argsort(v))    # noqa: E731
    assert np.corrcoef(rank(model.predict(tx.tolist(), tp.tolist())), rank(truth))[0, 1] > 0.9
    # without the prior the same trees rank by the learned error alone
    assert np.corrcoef(rank(model.predict(tx.tolist())), rank(truth))[0, 1] < 0.8


def test_the_model_search_measures_algorithm_alternatives_first(kws):
    """Untrained, about half the workloads' candidates are their first
    algorithm alternative (space.first_tries, as the random search's), the
    others whole configs drawn from their joint space, the same for the
    same seed; trained, the untried alternatives are ranked with the
    evolved configs."""
    from aot.lower.schedule.space import DEFAULT, first_tries
    from aot.tune.guided import ModelSearch

    graph, target, works = kws
    works = [replace(w, tried=set(w.tried)) for w in works]     # the fixture's stay untouched
    informed = [w for w in works if first_tries(w.space)]
    assert len(informed) >= 2

    def untrained(seed):
        search = ModelSearch(graph, target, works, seed=seed)
        return search, [search.draw(w) for w in informed]
    firsts = []
    for seed in range(3):
        search, draws = untrained(seed)
        assert draws == untrained(seed)[1]
        firsts += [d == first_tries(w.space)[0] for w, d in zip(informed, draws)]
        assert all(search.joints[w.key].holds(d) for w, d in zip(informed, draws))
    assert any(firsts) and not all(firsts)
    for w, d in zip(informed, draws):
        search.observe(w, DEFAULT, 1.0)
        search.observe(w, d, 0.5 if d in first_tries(w.space) else 1.1)
        w.tried.add(d)
    search.train()
    assert search.model.trained
    w = informed[0]
    assert search.draw(w) not in w.tried

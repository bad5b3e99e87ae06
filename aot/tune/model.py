"""The learned cost model of `aot tune --search model`: gradient-boosted
trees (XGBoost) from a candidate's features (features.py) to its cost
relative to its workload's default, in log2 (0: as the default, -1: half).
With a prior per row (an estimate of that same cost: guided.py gives the
TIR's instruction estimate), the trees learn the prior's error (XGBoost's
base margin) and an untrained model ranks by the prior alone.

XGBoost is an optional extra (`pip install 'aot[tune]'`, the small
`xgboost-cpu` wheel: it carries its own OpenMP runtime). It is trained
from scratch on every measurement so far after each batch (a few hundred
rows: milliseconds), on one thread with a fixed seed and exact splits, so
the same measurements give the same model and the same ranking.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from aot.errors import AotError

EXTRA = "aot[tune]"
# Fewer measurements than this: the model's ranking is noise, the search draws at random.
MIN_ROWS = 4
_PARAMS = {"objective": "reg:squarederror", "max_depth": 4, "eta": 0.2, "subsample": 1.0,
           "min_child_weight": 1.0, "lambda": 1.0, "tree_method": "exact", "nthread": 1,
           "verbosity": 0}
ROUNDS = 60


def available() -> bool:
    """Whether the extra is installed."""
    try:
        import xgboost  # noqa: F401
    except ImportError:
        return False
    return True


def require() -> None:
    """Raises the one-line error naming the extra where it is missing."""
    _xgboost()


def _xgboost():
    try:
        import xgboost
    except ImportError:
        raise AotError(f"--search model needs XGBoost: pip install '{EXTRA}'") from None
    return xgboost


class CostModel:
    """fit(rows, costs) then predict(rows): lower is faster."""

    def __init__(self, seed: int = 0):
        self._xgb = _xgboost()
        self.seed = seed
        self._booster = None

    @property
    def trained(self) -> bool:
        return self._booster is not None

    def fit(self, rows: Sequence[Sequence[float]], costs: Sequence[float],
            prior: Sequence[float] | None = None) -> None:
        """Learns the rows' costs; with `prior` (a cost estimate per row),
        what the estimate gets wrong."""
        if len(rows) < MIN_ROWS or len(set(costs)) < 2:
            self._booster = None        # nothing to tell apart yet
            return
        x, y = np.asarray(rows, dtype=np.float64), np.asarray(costs, dtype=np.float64)
        data = self._xgb.DMatrix(x, label=y, base_margin=_prior(prior, len(rows)))
        self._booster = self._xgb.train({**_PARAMS, "seed": self.seed}, data,
                                        num_boost_round=ROUNDS)

    def predict(self, rows: Sequence[Sequence[float]],
                prior: Sequence[float] | None = None) -> np.ndarray:
        """Lower is faster; untrained, the prior (or 0: all alike)."""
        if not len(rows):
            return np.zeros(0)
        base = _prior(prior, len(rows))
        if self._booster is None:
            return base
        data = self._xgb.DMatrix(np.asarray(rows, dtype=np.float64), base_margin=base)
        return self._booster.predict(data)


def _prior(prior: Sequence[float] | None, n: int) -> np.ndarray:
    return np.zeros(n) if prior is None else np.asarray(prior, dtype=np.float64)

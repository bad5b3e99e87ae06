"""scikit-learn models converted by skl2onnx, built at test time from small
synthetic data with fixed seeds and cached in the temp directory by name.

Each builder returns the serialized ONNX model as skl2onnx writes it (no
ZipMap: options {id(model): {"zipmap": False}}, so probabilities are a
tensor). `path(name)` gives a cached file for the CLI; `model(name)` the
bytes; `features(name, rows)` inputs drawn like the training data.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

FEATURES = 6
CACHE = Path(tempfile.gettempdir()) / f"aot-sklearn-models-{os.getuid()}"


def _data(seed: int = 0, rows: int = 240) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(seed)
    x = rng.randn(rows, FEATURES).astype(np.float32)
    # three classes from two linear scores: trees need several splits
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64) + (x[:, 2] - x[:, 3] > 0.7)
    return x, y


def _convert(model, x: np.ndarray, **kw) -> bytes:
    """One row per call, as a device scores its sensor readings."""
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType
    options = {id(model): {"zipmap": False}} if hasattr(model, "predict_proba") else None
    return to_onnx(model, initial_types=[("X", FloatTensorType([1, x.shape[1]]))],
                   options=options, **kw).SerializeToString()


def random_forest() -> bytes:
    from sklearn.ensemble import RandomForestClassifier
    x, y = _data()
    m = RandomForestClassifier(n_estimators=12, max_depth=6, random_state=0).fit(x, y)
    return _convert(m, x)


def gradient_boosting_classifier() -> bytes:
    from sklearn.ensemble import GradientBoostingClassifier
    x, y = _data(1)
    m = GradientBoostingClassifier(n_estimators=10, max_depth=3, random_state=0)
    return _convert(m.fit(x, y > 0), x)      # two classes: one score column, LOGISTIC


def gradient_boosting_regressor() -> bytes:
    from sklearn.ensemble import GradientBoostingRegressor
    x, _ = _data(2)
    target = np.sin(x[:, 0]) + 0.3 * x[:, 1] * x[:, 2]
    m = GradientBoostingRegressor(n_estimators=20, max_depth=3, random_state=0)
    return _convert(m.fit(x, target), x)


def isolation_forest() -> bytes:
    from sklearn.ensemble import IsolationForest
    x, _ = _data(3)
    m = IsolationForest(n_estimators=8, max_samples=64, random_state=0).fit(x)
    return _convert(m, x, target_opset={"": 17, "ai.onnx.ml": 3})


BUILDERS: dict[str, Callable[[], bytes]] = {
    "random_forest": random_forest,
    "gradient_boosting_classifier": gradient_boosting_classifier,
    "gradient_boosting_regressor": gradient_boosting_regressor,
    "isolation_forest": isolation_forest,
}


def path(name: str) -> Path:
    """The model's file, built once per machine (versions of scikit-learn
    and skl2onnx in the name, so an upgrade rebuilds)."""
    import sklearn
    import skl2onnx
    f = CACHE / f"{name}-{sklearn.__version__}-{skl2onnx.__version__}.onnx"
    if not f.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = f.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(BUILDERS[name]())
        os.replace(tmp, f)
    return f


def model(name: str) -> bytes:
    return path(name).read_bytes()


def features(rows: int, seed: int = 7) -> np.ndarray:
    """Rows like the training data, some exactly on a split value is left to
    the caller (thresholds are float32 midpoints of training values)."""
    return np.random.RandomState(seed).randn(rows, FEATURES).astype(np.float32)

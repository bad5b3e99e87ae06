"""scikit-learn models converted by skl2onnx, as users deploy them: trained
at test time on small synthetic data with fixed seeds, converted with the
converter's defaults (ZipMap on the probabilities unless a model says
otherwise) and cached as .onnx files under pytest's temporary directory.

MODELS maps a name to (builder, zipmap); a builder takes the training data
(X float32 [n, 6], y int64 in {0, 1, 2}) and returns an unfitted estimator.
Other model families (tree ensembles) add their builders beside these.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Callable

import numpy as np

FEATURES = 6


def training_data(seed: int = 0, n: int = 150, classes: int = 3):
    """Three (or two) loosely separable classes of sensor-like features."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, FEATURES)).astype(np.float32)
    score = x[:, 0] + 0.5 * x[:, 1] - 0.3 * x[:, 3]
    y = (score > 0).astype(np.int64)
    if classes == 3:
        y += (x[:, 2] > 0.7).astype(np.int64)
    return x, y


def _linear_svc():
    from sklearn.svm import LinearSVC
    return LinearSVC(random_state=0)


def _rbf_svc():
    from sklearn.svm import SVC
    return SVC(kernel="rbf", probability=True, random_state=0)


def _logistic():
    from sklearn.linear_model import LogisticRegression
    return LogisticRegression(max_iter=500)


def _scaled_pca_logistic():
    from sklearn.decomposition import PCA
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    return make_pipeline(StandardScaler(), PCA(n_components=4, random_state=0),
                         LogisticRegression(max_iter=500))


# name -> (estimator builder, classes, zipmap)
MODELS: dict[str, tuple[Callable, int, bool]] = {
    "linear_svc": (_linear_svc, 3, True),
    "rbf_svc": (_rbf_svc, 3, True),
    "logistic": (_logistic, 2, False),
    "scaled_pca_logistic": (_scaled_pca_logistic, 3, True),
}


def build(name: str, folder: Path, batch: int = 1) -> Path:
    """The model `name` as an .onnx file in `folder` (built once per folder),
    with a static batch of `batch` rows, and beside it the input `aot verify`
    takes (<stem>.input.npy): rows from the training distribution, which
    land near the decision boundaries as uniform noise would not."""
    path = Path(folder) / f"{name}_b{batch}.onnx"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path.with_name(f"{path.stem}.input.npy"), sample_inputs(batch))
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType

    make, classes, zipmap = MODELS[name]
    x, y = training_data(classes=classes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # convergence and version notes
        model = make().fit(x, y)
        options = None if zipmap else {id(model): {"zipmap": False}}
        onx = to_onnx(model, initial_types=[("X", FloatTensorType([batch, FEATURES]))],
                      options=options, target_opset={"": 17, "ai.onnx.ml": 3})
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(onx.SerializeToString())
    tmp.replace(path)
    return path


def sample_inputs(batch: int = 1, seed: int = 1) -> np.ndarray:
    """Inputs from the training distribution (unlike uniform noise, they
    land near the decision boundaries too)."""
    return training_data(seed=seed, n=batch)[0]

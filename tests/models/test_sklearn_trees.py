"""scikit-learn tree ensembles converted by skl2onnx, through `aot verify`
against ONNX Runtime on one board of each class (the host, Linux on
qemu-aarch64, the Cortex-M4 mps2-an386 bare metal): labels equal,
probabilities and scores within 1e-4. The inputs hold a row with a NaN
feature and rows exactly on split thresholds. `aot analyze` reports the
random forest's flash and RAM on the MCU.

The isolation forest needs ai.onnx.ml's LabelEncoder besides its
TreeEnsembleRegressors (skl2onnx maps each leaf to its path length with
it), which aot/ops/ml.py provides.
"""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from aot.api import verify
from aot.frontend import load
from aot.ops import OPS
from aot.ops.trees import forest_of
from support import sklearn_trees

BOARDS = ("host", "qemu-aarch64", "mps2-an386")
MODELS = ("random_forest", "gradient_boosting_classifier", "gradient_boosting_regressor",
          "isolation_forest")
NEEDS = {"isolation_forest": "LabelEncoder"}


def _dataset(name: str, folder) -> str:
    """Six rows: one with a NaN, two with features on the first splits."""
    path = sklearn_trees.path(name)
    x = sklearn_trees.features(6)
    x[0, 0] = np.nan
    trees = [n for n in load(path).nodes if n.op.startswith("TreeEnsemble")]
    forest = forest_of(trees[0], "float32")
    for row, node in ((1, 0), (2, 1)):
        x[row, forest.feature[node]] = forest.threshold[node]
    out = folder / f"{name}.npz"
    np.savez(out, X=x[:, None, :])
    return str(out)


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("name", MODELS)
def test_verifies_against_onnxruntime(name, board, tmp_path):
    if name in NEEDS and NEEDS[name] not in OPS:
        pytest.skip(f"{name} needs the op {NEEDS[name]} (aot/ops/ml.py)")
    result = verify(sklearn_trees.path(name), board=board, dataset=_dataset(name, tmp_path))
    assert result.samples == 6 and result.reference == "onnxruntime"
    assert result.ok, result.outputs
    labels = [o for o in result.outputs if o.name == "label"]
    assert all(o.max_abs_err == 0 for o in labels)


def test_analyze_reports_flash_and_ram_on_the_mcu():
    out = subprocess.run([sys.executable, "-m", "aot", "analyze", "--json", "--board",
                          "mps2-an386", str(sklearn_trees.path("random_forest"))],
                         capture_output=True, text=True, check=True).stdout
    memory = json.loads(out)["memory"]
    print(f"random forest on mps2-an386: flash {memory['flash_bytes']} B, "
          f"RAM {memory['ram_bytes']} B")
    # the node arrays in flash, a row's scores in a few bytes of arena
    assert memory["flash_bytes"] > memory["weight_bytes"] > 0
    assert 0 < memory["ram_bytes"] < 256

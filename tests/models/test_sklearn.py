"""scikit-learn models converted by skl2onnx (tests/support/sklearn_models.py),
verified end to end against ONNX Runtime on one board of each class: the
host, a Linux arm64 board under qemu-user and a Cortex-M4 under
qemu-system; and what they cost in flash and RAM on the Cortex-M4."""
from __future__ import annotations

import pytest

from aot.analysis import analyze
from aot.api import verify
from support.sklearn_models import MODELS, build

BOARDS = ("host", "qemu-aarch64", "mps2-an386")
BATCH = 4


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("sklearn")


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_sklearn_model_verifies(name, board, folder, record_property):
    out = verify(build(name, folder, BATCH), board=board)
    assert out["reference"] == "onnxruntime" and out["inputs"] == "saved", out
    rows = {r["name"]: r for r in out["outputs"]}
    labels = [r for n, r in rows.items() if "label" in n]
    probabilities = [r for n, r in rows.items() if "label" not in n]
    assert len(labels) == len(probabilities) == 1, rows
    assert labels[0]["max_abs_err"] == 0, labels          # int64 labels, exactly
    assert probabilities[0]["max_abs_err"] <= 1e-5, probabilities
    record_property("summary", f"{name} on {board}: max probability error "
                    f"{probabilities[0]['max_abs_err']:.3g}")
    assert out["ok"] is True, out


def test_analyze_gives_flash_and_ram_of_an_svm_on_a_cortex_m(folder, record_property):
    report = analyze(build("rbf_svc", folder, 1), board="mps2-an386")
    mem = report["memory"]
    record_property("summary", f"rbf_svc on mps2-an386: flash {mem['flash_bytes']} B, "
                    f"RAM {mem['ram_bytes']} B")
    # the support vectors (6 features, float32) are flash; RAM is rows of scratch
    assert mem["weight_bytes"] > 6 * 4 * 10 and mem["flash_bytes"] > mem["weight_bytes"], mem
    assert 0 < mem["ram_bytes"] < 2048 and mem["code_bytes"] > 0, mem
    assert report["total_macs"] > 0 and report["layers"][0]["name"], report

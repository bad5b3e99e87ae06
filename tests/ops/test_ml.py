"""The ONNX-ML ops' numpy references (aot/ops/ml.py) against ONNX Runtime:
each op in the forms converters write, every post transform, every SVM
kernel, one and two classes. Labels and other integers exactly, scores
within float tolerance."""
from __future__ import annotations

import numpy as np
import pytest

import aot
from aot.errors import UnsupportedError
from support.ml_cases import CASES, inputs, model, onnxruntime_outputs


def _load(tmp_path, case, name="m"):
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(model(case).SerializeToString())
    return aot.load(path)


@pytest.mark.parametrize("name", sorted(CASES))
def test_reference_matches_onnxruntime(tmp_path, name):
    case = CASES[name]
    graph = _load(tmp_path, case)
    feeds = inputs(case)
    got = aot.interpret(graph, feeds)
    for out, want in zip(graph.outputs, onnxruntime_outputs(case, feeds)):
        have = got[out]
        assert have.shape == want.shape and have.dtype == want.dtype, (out, have, want)
        if have.dtype.kind in "iu":
            np.testing.assert_array_equal(have, want, err_msg=out)
        else:
            np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-6, err_msg=out)


@pytest.mark.parametrize("attrs,what", [
    ({"classlabels_strings": ("a", "b", "c")}, "string class labels"),
    ({"post_transform": "CUBE"}, "post_transform 'CUBE'"),
])
def test_what_aot_cannot_compute_is_refused_by_name(tmp_path, attrs, what):
    case = CASES["LinearClassifier-3-NONE"]
    base = {k: v for k, v in case.attrs.items() if k not in attrs and
            not (k == "classlabels_ints" and "classlabels_strings" in attrs)}
    bad = type(case)(case.op, {**base, **attrs}, case.inputs, case.outputs)
    with pytest.raises(UnsupportedError) as e:
        aot.interpret(_load(tmp_path, bad), inputs(bad))
    assert what in str(e.value) and "LinearClassifier node 'node'" in str(e.value)


def test_string_label_encoder_is_refused(tmp_path):
    case = type(CASES["LabelEncoder-int-to-float"])(
        "LabelEncoder", {"keys_strings": ("a", "b"), "values_int64s": (1, 2)},
        (((3,), "float32"),), ("int64",))
    with pytest.raises(UnsupportedError, match="string keys or values"):
        aot.interpret(_load(tmp_path, case), {"x0": np.zeros(3, np.float32)})

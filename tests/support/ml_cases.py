"""ONNX-ML (ai.onnx.ml) single-node models: each op with the attribute
forms converters write and ONNX Runtime's special cases (one and two
classes, every post transform, every SVM kernel), and inputs for them.

CASES maps a case name to a Case; `model(case)` is its ModelProto (the node
named "node", inputs x0.., outputs y0..), `inputs(case)` a dict of arrays.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h

ML = "ai.onnx.ml"
F, I64 = "float32", "int64"
_ELEM = {"float32": T.FLOAT, "int64": T.INT64, "int32": T.INT32, "float64": T.DOUBLE}
TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")


@dataclass(frozen=True)
class Case:
    op: str
    attrs: dict
    inputs: tuple                  # (shape, dtype) per input; an array is an initializer
    outputs: tuple = (F,)          # each output's element type; "zipmap" for ZipMap's
    data: Callable | None = None   # rng -> list of input arrays, else normal floats
    ml_opset: int = 3
    extra: dict = field(default_factory=dict)


def _w(rng, *shape, scale=1.0):
    return tuple(float(v) for v in (rng.normal(size=shape) * scale).astype(np.float32).ravel())


_R = np.random.default_rng(7)
_F = 5      # features


def _linear_classifier(classes: int, how: str, labels: int | None = None) -> Case:
    labels = classes if labels is None else labels
    return Case("LinearClassifier", {
        "coefficients": _w(_R, classes, _F), "intercepts": _w(_R, classes, scale=0.3),
        "classlabels_ints": tuple(range(10, 10 + labels)), "post_transform": how},
        (((6, _F), F),), (I64, F))


def _svc(classes: int, kernel: str, proba: bool, how: str = "NONE") -> Case:
    counts = (3, 2, 4)[:classes]
    v = sum(counts)
    pairs = classes * (classes - 1) // 2
    attrs = {"kernel_type": kernel, "kernel_params": (0.3, 0.5, 3.0),
             "vectors_per_class": counts, "support_vectors": _w(_R, v, _F),
             "coefficients": _w(_R, classes - 1, v), "rho": _w(_R, pairs, scale=0.2),
             "classlabels_ints": tuple(range(classes)), "post_transform": how}
    if proba:
        attrs.update(prob_a=_w(_R, pairs, scale=2.0), prob_b=_w(_R, pairs, scale=0.3))
    return Case("SVMClassifier", attrs, (((6, _F), F),), (I64, F))


def _one_hot_data(rng):
    return [rng.choice([1.0, 3.7, 5.0, -2.0, 8.0], size=(4, 3)).astype(np.float32)]


def _imputer_data(rng):
    x = rng.normal(size=(4, 3)).astype(np.float32)
    x[0, 1] = x[2, 0] = np.nan
    return [x]


def _label_data(rng):
    return [rng.integers(0, 6, size=(5,)).astype(np.int64)]


CASES: dict[str, Case] = {
    **{f"LinearClassifier-3-{how}": _linear_classifier(3, how) for how in TRANSFORMS},
    "LinearClassifier-2-LOGISTIC": _linear_classifier(2, "LOGISTIC"),
    "LinearClassifier-1-of-2-labels": _linear_classifier(1, "LOGISTIC", labels=2),
    "LinearClassifier-1-no-labels-PROBIT": Case(
        "LinearClassifier", {"coefficients": _w(_R, 1, _F), "intercepts": (0.1,),
                             "post_transform": "PROBIT"}, (((6, _F), F),), (I64, F),
        data=lambda rng: [rng.uniform(-0.05, 0.05, size=(6, _F)).astype(np.float32)]),
    "LinearClassifier-int-input-rank1": Case(
        "LinearClassifier", {"coefficients": _w(_R, 3, _F), "intercepts": (0.0, 0.5, -0.5),
                             "classlabels_ints": (4, 5, 6), "post_transform": "SOFTMAX"},
        (((_F,), I64),), (I64, F)),
    "LinearRegressor-3-SOFTMAX": Case(
        "LinearRegressor", {"coefficients": _w(_R, 3, _F), "intercepts": (0.1, 0.2, 0.3),
                            "targets": 3, "post_transform": "SOFTMAX"}, (((4, _F), F),)),
    "LinearRegressor-1": Case(
        "LinearRegressor", {"coefficients": _w(_R, 1, _F), "intercepts": (1.5,)},
        (((4, _F), F),)),
    **{f"SVMClassifier-3-{k}-proba": _svc(3, k, True) for k in ("LINEAR", "POLY", "RBF",
                                                               "SIGMOID")},
    "SVMClassifier-3-RBF-votes": _svc(3, "RBF", False),
    "SVMClassifier-3-RBF-votes-LOGISTIC": _svc(3, "RBF", False, "LOGISTIC"),
    "SVMClassifier-2-RBF-proba": _svc(2, "RBF", True),
    "SVMClassifier-2-POLY-votes": _svc(2, "POLY", False),
    "SVMClassifier-2-LINEAR-votes-LOGISTIC": _svc(2, "LINEAR", False, "LOGISTIC"),
    "SVMClassifier-liblinear-3": Case(
        "SVMClassifier", {"coefficients": _w(_R, 3, _F), "rho": (0.2,), "kernel_params": (0., 0., 0.),
                          "classlabels_ints": (1, 2, 3), "post_transform": "NONE"},
        (((6, _F), F),), (I64, F)),
    "SVMClassifier-liblinear-2": Case(
        "SVMClassifier", {"coefficients": _w(_R, 2, _F), "rho": (0.1,), "kernel_params": (0., 0., 0.),
                          "classlabels_ints": (0, 1)}, (((6, _F), F),), (I64, F)),
    "SVMRegressor-RBF": Case(
        "SVMRegressor", {"kernel_type": "RBF", "kernel_params": (0.2, 0.0, 3.0),
                         "n_supports": 4, "support_vectors": _w(_R, 4, _F),
                         "coefficients": _w(_R, 4), "rho": (0.3,)}, (((5, _F), F),)),
    "SVMRegressor-POLY-one-class": Case(
        "SVMRegressor", {"kernel_type": "POLY", "kernel_params": (0.5, 1.0, 2.0),
                         "n_supports": 3, "support_vectors": _w(_R, 3, _F),
                         "coefficients": _w(_R, 3), "rho": (-0.1,), "one_class": 1},
        (((5, _F), F),)),
    "SVMRegressor-liblinear": Case(
        "SVMRegressor", {"coefficients": _w(_R, _F), "rho": (0.7,), "kernel_params": (0., 0., 0.)},
        (((5, _F), F),)),
    **{f"Normalizer-{norm}": Case("Normalizer", {"norm": norm}, (((4, 6), F),))
       for norm in ("MAX", "L1", "L2")},
    "Normalizer-L2-int64": Case("Normalizer", {"norm": "L2"}, (((3, 4), I64),)),
    "Scaler-per-feature": Case("Scaler", {"offset": _w(_R, 4), "scale": _w(_R, 4)},
                               (((3, 4), F),)),
    "Scaler-one-value-int64": Case("Scaler", {"offset": (2.0,), "scale": (0.5,)},
                                   (((3, 4), I64),)),
    "Binarizer": Case("Binarizer", {"threshold": 0.25}, (((3, 4), F),)),
    "Binarizer-default": Case("Binarizer", {}, (((3, 4), F),)),
    "Imputer-nan-per-feature": Case(
        "Imputer", {"imputed_value_floats": (1.0, 2.0, 3.0),
                    "replaced_value_float": float("nan")}, (((4, 3), F),), data=_imputer_data),
    "Imputer-int64-value": Case(
        "Imputer", {"imputed_value_int64s": (99,), "replaced_value_int64": 2},
        (((5, 3), I64),), (I64,), data=lambda rng: [rng.integers(0, 4, (5, 3))]),
    "OneHotEncoder-float-repeated": Case(
        "OneHotEncoder", {"cats_int64s": (1, 3, 5, 3, 8)}, (((4, 3), F),), data=_one_hot_data),
    "OneHotEncoder-int64": Case(
        "OneHotEncoder", {"cats_int64s": (0, 2, 4)}, (((6,), I64),),
        data=lambda rng: [rng.integers(0, 5, (6,))]),
    "LabelEncoder-int-to-float": Case(
        "LabelEncoder", {"keys_int64s": (1, 2, 3, 2), "values_floats": (0.5, 1.5, 2.5, 9.0),
                         "default_float": -3.0}, (((5,), I64),), data=_label_data),
    "LabelEncoder-float-to-int": Case(
        "LabelEncoder", {"keys_floats": (0.5, 1.0), "values_int64s": (7, 8)},
        (((2, 3), F),), (I64,),
        data=lambda rng: [rng.choice([0.5, 1.0, 2.0], (2, 3)).astype(np.float32)]),
    "ArrayFeatureExtractor": Case(
        "ArrayFeatureExtractor", {}, (((3, 6), F), np.array([4, 0, 4, 2], np.int64))),
    "ArrayFeatureExtractor-rank1": Case(
        "ArrayFeatureExtractor", {}, (((6,), F), np.array([5, 1], np.int64))),
    "FeatureVectorizer": Case(
        "FeatureVectorizer", {"inputdimensions": (2, 3, 2)},
        (((3, 2), F), ((3, 4), F), ((3, 1), F))),
    "FeatureVectorizer-int64": Case(
        "FeatureVectorizer", {"inputdimensions": (3, 1)}, (((2, 3), I64), ((2, 1), I64))),
    "ZipMap": Case("ZipMap", {"classlabels_int64s": (3, 1, 2)}, (((4, 3), F),), ("zipmap",)),
}


def model(case: Case) -> onnx.ModelProto:
    names, vis, inits = [], [], []
    for k, spec in enumerate(case.inputs):
        if isinstance(spec, np.ndarray):
            names.append(f"c{k}")
            inits.append(onnx.numpy_helper.from_array(spec, f"c{k}"))
        else:
            names.append(f"x{k}")
            vis.append(h.make_tensor_value_info(f"x{k}", _ELEM[spec[1]], spec[0]))
    outs = []
    for k, kind in enumerate(case.outputs):
        if kind == "zipmap":
            outs.append(h.make_value_info(f"y{k}", h.make_sequence_type_proto(
                h.make_map_type_proto(T.INT64, h.make_tensor_type_proto(T.FLOAT, [])))))
        else:
            outs.append(h.make_tensor_value_info(f"y{k}", _ELEM[kind], None))
    node = h.make_node(case.op, names, [o.name for o in outs], name="node", domain=ML,
                       **case.attrs)
    graph = h.make_graph([node], case.op, vis, outs, inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17),
                                              h.make_opsetid(ML, case.ml_opset)])


def inputs(case: Case, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    specs = [s for s in case.inputs if not isinstance(s, np.ndarray)]
    arrays = case.data(rng) if case.data else [
        rng.normal(size=s).astype(d) if d.startswith("float") else
        rng.integers(-4, 5, size=s).astype(d) for s, d in specs]
    return {f"x{k}": np.asarray(a) for k, a in enumerate(arrays)}


def onnxruntime_outputs(case: Case, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """ONNX Runtime's outputs, a ZipMap's maps as the [N, labels] tensor."""
    import onnxruntime as ort

    sess = ort.InferenceSession(model(case).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    outs = sess.run(None, feeds)
    labels = case.attrs.get("classlabels_int64s", ())
    return [np.array([[r[k] for k in labels] for r in o], np.float32)
            if isinstance(o, list) else o for o in outs]

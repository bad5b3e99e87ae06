"""The ONNX-ML (`ai.onnx.ml`) linear models, SVMs and preprocessors that
scikit-learn converters write, computed as ONNX Runtime's CPU kernels
compute them: float32 throughout, the same order of operations where it
decides a result (a label, a tie), ONNX Runtime's special cases for one and
two classes (docs/ops.md "ONNX-ML ops").

Class labels are int64 (`classlabels_ints`); string labels, string keys and
map inputs are refused by name. ZipMap is the identity on its probability
tensor: aot has no sequences or maps, so the model's output is that tensor.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from aot.errors import UnsupportedError, node_label
from aot.ir.graph import Node, TensorType
from aot.ops.elementwise import arity
from aot.ops.registry import Call, Pattern, Sig, register

ML_DOMAIN = "ai.onnx.ml"
TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")
KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")
NUMERIC = ("float32", "float64", "int32", "int64")
F32 = np.float32


def ml_op(name: str, infer, pattern: Pattern = Pattern.OPAQUE, macs=None):
    """register() for an op of the ai.onnx.ml domain."""
    return register(name, infer=infer, pattern=pattern, macs=macs, domain=ML_DOMAIN)


def refuse(node: Node, what: str) -> UnsupportedError:
    return UnsupportedError(f"{node_label(node)}: {what} is not supported")


# ---- attributes ---------------------------------------------------------------------------

def floats(node: Node, name: str, required: bool = False) -> np.ndarray:
    value = node.attrs.get(name)
    if value is None and required:
        raise UnsupportedError(f"{node_label(node)}: missing the attribute '{name}'")
    return np.asarray(value if value is not None else (), F32).reshape(-1)


def ints(node: Node, name: str) -> np.ndarray:
    return np.asarray(node.attrs.get(name, ()), np.int64).reshape(-1)


def class_labels(node: Node) -> np.ndarray:
    """The int64 class labels; string labels are refused (aot has no strings)."""
    if node.attrs.get("classlabels_strings"):
        raise refuse(node, "string class labels (classlabels_strings)")
    return ints(node, "classlabels_ints")


def transform(node: Node) -> str:
    how = node.attrs.get("post_transform", "NONE")
    if how not in TRANSFORMS:
        raise refuse(node, f"post_transform {how!r}")
    return how


def rows_and_features(sig: Sig) -> tuple[int, int]:
    """(N, F) of an input [N, F] or [F] (one row), as ONNX Runtime reads it."""
    x = sig.in_types[0]
    if x.dtype not in NUMERIC:
        raise sig.fail(f"takes float, double, int32 or int64 input, got {x.dtype}")
    if len(x.shape) not in (1, 2):
        raise sig.fail(f"takes an input of rank 1 or 2, got shape {list(x.shape)}")
    return (1, x.shape[0]) if len(x.shape) == 1 else (x.shape[0], x.shape[1])


def as_rows(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).reshape(1, -1).astype(F32) if np.ndim(x) == 1 else \
        np.asarray(x).astype(F32)


def weights(sig: Sig, name: str, rows: int, features: int) -> np.ndarray:
    w = floats(sig.node, name, required=True)
    if rows < 1 or w.size != rows * features:
        raise sig.fail(f"'{name}' has {w.size} values, expected {rows} x {features} "
                       "(one row per target of the input's features)")
    return w.reshape(rows, features)


# ---- ONNX Runtime's score transforms (ml_common.h), in float32 ------------------------------

def logistic(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, F32)
    with np.errstate(over="ignore"):
        e = F32(1) / (F32(1) + np.exp(-np.abs(v)))
    return np.where(v < 0, F32(1) - e, e).astype(F32)


def probit(v: np.ndarray) -> np.ndarray:
    """sqrt(2) * erfinv(2v - 1) with ONNX Runtime's approximation of erfinv."""
    x = F32(2) * np.asarray(v, F32) - F32(1)
    sgn = np.where(x < 0, F32(-1), F32(1)).astype(F32)
    x = (F32(1) - x) * (F32(1) + x)
    with np.errstate(divide="ignore", invalid="ignore"):
        lg = np.log(x)
        a = F32(2) / (F32(np.pi) * F32(0.147)) + F32(0.5) * lg
        b = F32(1) / F32(0.147) * lg
        r = sgn * np.sqrt(-a + np.sqrt(a * a - b))
    return (F32(np.sqrt(2)) * r).astype(F32)


def _row_sum(v: np.ndarray) -> np.ndarray:
    return np.cumsum(v, axis=-1, dtype=F32)[..., -1:]       # in order, as the kernel adds


def softmax(v: np.ndarray, zero: bool = False) -> np.ndarray:
    v = np.asarray(v, F32)
    m = np.max(v, axis=-1, keepdims=True, initial=-np.finfo(F32).max)
    with np.errstate(over="ignore", under="ignore"):
        e = np.exp(v - m)
        if zero:     # SOFTMAX_ZERO leaves (near) zeros out of the sum, scaled by exp(-max)
            keep = (v > F32(1e-7)) | (v < F32(-1e-7))
            e = np.where(keep, e, v * np.exp(-m))
            return (e / _row_sum(np.where(keep, e, F32(0)))).astype(F32)
        return (e / _row_sum(e)).astype(F32)


def post_transform(scores: np.ndarray, how: str) -> np.ndarray:
    """Rows of two or more scores as ONNX Runtime transforms them."""
    if how == "LOGISTIC":
        return logistic(scores)
    if how == "PROBIT":
        return probit(scores)
    if how in ("SOFTMAX", "SOFTMAX_ZERO"):
        return softmax(scores, how == "SOFTMAX_ZERO")
    return np.asarray(scores, F32)


def single_score(scores: np.ndarray, how: str) -> np.ndarray:
    """Rows of one score: ONNX Runtime applies PROBIT only."""
    return probit(scores) if how == "PROBIT" else np.asarray(scores, F32)


def two_columns(s: np.ndarray, how: str, negate: bool) -> np.ndarray:
    """One score as two columns, as ONNX Runtime adds the second class:
    (logistic(-s), logistic(s)) under LOGISTIC, else (-s, s) when `negate`
    (an SVM's decision value under NONE) or (1 - s, s)."""
    if how == "LOGISTIC":
        return np.stack([logistic(-s), logistic(s)], 1)
    return np.stack([-s if negate else F32(1) - s, s], 1).astype(F32)


def first_argmax(scores: np.ndarray) -> np.ndarray:
    """The first position of the largest score per row (a strict > scan)."""
    return np.argmax(scores, axis=-1)


def dot_rows(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x [N, F] . w [T, F]^T, each sum in float32 in feature order."""
    return np.cumsum(x[:, None, :] * w[None, :, :], axis=-1, dtype=F32)[..., -1] \
        if x.shape[1] else np.zeros((x.shape[0], w.shape[0]), F32)


# ---- LinearClassifier / LinearRegressor --------------------------------------------------

def linear_classifier_shape(sig: Sig) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(coefficients [C, F], intercepts [C], labels, score columns)."""
    n, f = rows_and_features(sig)
    b = floats(sig.node, "intercepts", required=True)
    w = weights(sig, "coefficients", b.size, f)
    labels = class_labels(sig.node)
    c = b.size
    if c > 1 and labels.size != c:
        raise sig.fail(f"{c} score columns need {c} classlabels_ints, got {labels.size}")
    columns = 2 if c == 1 and labels.size == 2 else c
    if columns == 2 and c == 1 and transform(sig.node) == "PROBIT":
        raise refuse(sig.node, "PROBIT on one score with two labels (ONNX Runtime leaves the "
                     "second column unwritten)")
    return w, b, labels, columns


def _infer_linear_classifier(sig: Sig):
    transform(sig.node)
    n, _ = rows_and_features(sig)
    *_, columns = linear_classifier_shape(sig)
    return [TensorType((n,), "int64"), TensorType((n, columns), "float32")]


def _linear_macs(call: Call) -> int:
    x, out = call.in_types[0], call.out_types[-1]
    return out.shape[0] * x.shape[-1] * len(call.attrs.get("intercepts", ())
                                           or (call.attrs.get("targets", 1),))


@ml_op("LinearClassifier", arity(1, 1)(_infer_linear_classifier), macs=_linear_macs)
def _linear_classifier(call: Call, args):
    sig = Sig(call.node, call.in_types, (None,))
    w, b, labels, columns = linear_classifier_shape(sig)
    scores = dot_rows(as_rows(args[0]), w) + b
    how = transform(call.node)
    if w.shape[0] == 1:
        s = scores[:, 0]
        pos, neg = (labels[1], labels[0]) if labels.size == 2 else (1, 0)
        label = np.where(s > 0, pos, neg).astype(np.int64)
        out = two_columns(s, how, False) if columns == 2 else single_score(scores, how)
        return [label, out.astype(F32)]
    return [labels[first_argmax(scores)], post_transform(scores, how)]


def _infer_linear_regressor(sig: Sig):
    transform(sig.node)
    n, f = rows_and_features(sig)
    targets = int(sig.attrs.get("targets", 1))
    weights(sig, "coefficients", targets, f)
    return [TensorType((n, targets), "float32")]


@ml_op("LinearRegressor", arity(1, 1)(_infer_linear_regressor), macs=_linear_macs)
def _linear_regressor(call: Call, args):
    targets = call.out_types[0].shape[1]
    sig = Sig(call.node, call.in_types, (None,))
    w = weights(sig, "coefficients", targets, as_rows(args[0]).shape[1])
    b = floats(call.node, "intercepts")
    y = dot_rows(as_rows(args[0]), w)
    if b.size == targets:       # other lengths are ignored, as ONNX Runtime does
        y = y + b
    how = transform(call.node)
    return [post_transform(y, how) if targets > 1 else single_score(y, how)]


# ---- SVMClassifier / SVMRegressor ---------------------------------------------------------

def kernel_params(node: Node) -> tuple[str, float, float, float]:
    """(kernel, gamma, coef0, degree)."""
    kind = node.attrs.get("kernel_type", "LINEAR")
    if kind not in KERNELS:
        raise refuse(node, f"kernel_type {kind!r}")
    p = floats(node, "kernel_params")
    if p.size not in (0, 3):
        raise UnsupportedError(f"{node_label(node)}: kernel_params needs 3 values "
                               f"(gamma, coef0, degree), got {p.size}")
    gamma, coef0, degree = (float(v) for v in p) if p.size else (0.0, 0.0, 0.0)
    return kind, gamma, coef0, degree


def kernel_values(x: np.ndarray, sv: np.ndarray, kind: str, gamma: float, coef0: float,
                  degree: float) -> np.ndarray:
    """K[n, v] = kernel(x_n, sv_v) as ONNX Runtime's batched_kernel_dot."""
    if kind == "RBF":
        d = x[:, None, :] - sv[None, :, :]
        s = np.cumsum(d * d, axis=-1, dtype=F32)[..., -1]
        return np.exp(-F32(gamma) * s).astype(F32)
    k = dot_rows(x, sv)
    if kind == "LINEAR":
        return k
    k = F32(gamma) * k + F32(coef0)
    if kind == "SIGMOID":
        return np.tanh(k).astype(F32)
    if degree == 2:
        return (k * k).astype(F32)
    if degree == 3:
        return (k * k * k).astype(F32)
    return np.power(k, F32(degree)).astype(F32)


def svm_layout(sig: Sig):
    """What an SVMClassifier computes, checked against the input:
    (mode 'svc' | 'linear', labels, support vectors [V, F] or None,
    coefficients, vectors_per_class, rho, prob_a, prob_b, score columns)."""
    node = sig.node
    _, f = rows_and_features(sig)
    labels = class_labels(node)
    if labels.size < 1:
        raise sig.fail("needs classlabels_ints")
    c = labels.size
    counts = ints(node, "vectors_per_class")
    rho, coef = floats(node, "rho", True), floats(node, "coefficients", True)
    pa, pb = floats(node, "prob_a"), floats(node, "prob_b")
    if pa.size != pb.size:
        raise sig.fail(f"prob_a has {pa.size} values, prob_b {pb.size}")
    v = int(counts.sum())
    pairs = c * (c - 1) // 2
    if v > 0:
        if counts.size != c or c < 2:
            raise sig.fail(f"vectors_per_class has {counts.size} entries for {c} classes")
        sv = weights(sig, "support_vectors", v, f)
        if coef.size != (c - 1) * v or rho.size != pairs:
            raise sig.fail(f"{c} classes and {v} support vectors need {(c - 1) * v} "
                           f"coefficients and {pairs} rho, got {coef.size} and {rho.size}")
        if pa.size and pa.size != pairs:
            raise sig.fail(f"prob_a needs {pairs} values (one per pair of classes)")
        if not pa.size and c == 2 and transform(node) == "PROBIT":
            raise refuse(node, "PROBIT on a two-class SVM without probabilities (ONNX Runtime "
                         "leaves the second column unwritten)")
        columns = c if pa.size else pairs if c > 2 else 2
        return "svc", labels, sv, coef.reshape(c - 1, v), counts, rho, pa, pb, columns
    w = weights(sig, "coefficients", c, f)
    return "linear", labels, None, w, counts, rho, pa, pb, c


def _infer_svm_classifier(sig: Sig):
    transform(sig.node)
    kernel_params(sig.node)
    n, _ = rows_and_features(sig)
    columns = svm_layout(sig)[-1]
    return [TensorType((n,), "int64"), TensorType((n, columns), "float32")]


def _svm_macs(call: Call) -> int:
    x = call.in_types[0]
    sv = len(call.attrs.get("support_vectors", ())) or len(call.attrs.get("coefficients", ()))
    return call.out_types[0].shape[0] * (sv if x.shape[-1] else 0)


def pair_scores(kern: np.ndarray, coef: np.ndarray, counts: np.ndarray,
                rho: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One-vs-one decision values [N, pairs] (each a float64 sum of float32
    products, as ONNX Runtime adds them) and the votes [N, C]."""
    c = counts.size
    start = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int)
    n = kern.shape[0]
    scores, votes = [], np.zeros((n, c), np.int64)
    k = 0
    for i in range(c - 1):
        si = slice(start[i], start[i] + counts[i])
        for j in range(i + 1, c):
            sj = slice(start[j], start[j] + counts[j])
            prods = np.concatenate([(coef[j - 1, si] * kern[:, si]).astype(F32),
                                    (coef[i, sj] * kern[:, sj]).astype(F32)], axis=1)
            s = np.cumsum(prods.astype(np.float64), axis=1)[:, -1] if prods.shape[1] else \
                np.zeros(n)
            s = s + np.float64(rho[k])
            votes[np.arange(n), np.where(s > 0, i, j)] += 1
            scores.append(s.astype(F32))
            k += 1
    return np.stack(scores, 1), votes


def multiclass_probability(r: np.ndarray) -> np.ndarray:
    """Pairwise probabilities r [C, C] to class probabilities [C]: the
    iteration of Wu, Lin and Weng (libsvm) exactly as ONNX Runtime runs it."""
    c = r.shape[0]
    q = np.zeros((c, c), F32)
    p = np.full(c, F32(1) / F32(c), F32)
    for i in range(c):
        for j in range(c):
            if j < i:
                q[i, i] += r[j, i] * r[j, i]
                q[i, j] = q[j, i]
            elif j > i:
                q[i, i] += r[j, i] * r[j, i]
                q[i, j] = -r[j, i] * r[i, j]
    eps = F32(0.005) / F32(c)
    qp = np.zeros(c, F32)
    for _ in range(100):
        pqp = F32(0)
        for i in range(c):
            qp[i] = F32(0)
            for j in range(c):
                qp[i] += q[i, j] * p[j]
            pqp += p[i] * qp[i]
        if np.max(np.abs(qp - pqp), initial=F32(0)) < eps:
            break
        for i in range(c):
            diff = (-qp[i] + pqp) / q[i, i]
            p[i] += diff
            one = F32(1) + diff
            pqp = (pqp + diff * (diff * q[i, i] + F32(2) * qp[i])) / one / one
            for j in range(c):
                qp[j] = (qp[j] + diff * q[i, j]) / one
                p[j] /= one
    return p


def pair_probabilities(scores: np.ndarray, pa: np.ndarray, pb: np.ndarray,
                       c: int) -> np.ndarray:
    """r [C, C] of one row: Platt's sigmoid per pair, clipped to [1e-7, 1 - 1e-7]."""
    r = np.zeros((c, c), F32)
    k = 0
    for i in range(c - 1):
        for j in range(i + 1, c):
            v = F32(1) - logistic(scores[k] * pa[k] + pb[k])
            v = min(max(v, F32(1e-7)), F32(1) - F32(1e-7))
            r[i, j], r[j, i] = v, F32(1) - v
            k += 1
    return r


@ml_op("SVMClassifier", arity(1, 1)(_infer_svm_classifier), macs=_svm_macs)
def _svm_classifier(call: Call, args):
    sig = Sig(call.node, call.in_types, (None,))
    mode, labels, sv, coef, counts, rho, pa, pb, columns = svm_layout(sig)
    how = transform(call.node)
    x = as_rows(args[0])
    c = labels.size
    if mode == "linear":
        scores = dot_rows(x, coef) + rho[0]
        best = first_argmax(scores)
        label = labels[best]
        if c == 2 and not pa.size:
            label = _binary_linear_label(scores[np.arange(len(x)), best], coef, labels, label)
        return [label, post_transform(scores, how) if c > 1 else single_score(scores, how)]
    kern = kernel_values(x, sv, *kernel_params(call.node))
    scores, votes = pair_scores(kern, coef, counts, rho)
    label = labels[first_argmax(votes)]
    if pa.size:
        probs = np.stack([multiclass_probability(pair_probabilities(s, pa, pb, c))
                          for s in scores])
        return [label, post_transform(probs, how)]
    if c > 2:
        return [label, post_transform(scores, how)]
    return [label, two_columns(scores[:, 0], how, how == "NONE")]


def _binary_linear_label(best: np.ndarray, coef: np.ndarray, labels: np.ndarray,
                         label: np.ndarray) -> np.ndarray:
    """ONNX Runtime's two-class rule in liblinear mode: the second label when
    the best score passes 0.5 (all weights >= 0) or 0 (mixed weights)."""
    positive = bool(np.all(coef >= 0))
    second = best >= F32(0.5) if positive else best > 0
    return np.where(second, labels[1], label)


def _infer_svm_regressor(sig: Sig):
    kernel_params(sig.node)
    svm_regressor_layout(sig)
    n, _ = rows_and_features(sig)
    return [TensorType((n, 1), "float32")]


def svm_regressor_layout(sig: Sig) -> tuple[np.ndarray | None, np.ndarray, float]:
    """(support vectors [V, F] or None for liblinear mode, coefficients, rho[0])."""
    _, f = rows_and_features(sig)
    v = int(sig.attrs.get("n_supports", 0))
    coef, rho = floats(sig.node, "coefficients", True), floats(sig.node, "rho", True)
    if v > 0:
        sv = weights(sig, "support_vectors", v, f)
        if coef.size != v:
            raise sig.fail(f"{v} support vectors need {v} coefficients, got {coef.size}")
        return sv, coef, float(rho[0])
    return None, weights(sig, "coefficients", 1, f)[0], float(rho[0])


@ml_op("SVMRegressor", arity(1, 1)(_infer_svm_regressor), macs=_svm_macs)
def _svm_regressor(call: Call, args):
    sv, coef, rho = svm_regressor_layout(Sig(call.node, call.in_types, (None,)))
    x = as_rows(args[0])
    if sv is None:
        y = dot_rows(x, coef[None, :])[:, 0] + F32(rho)
    else:
        kern = kernel_values(x, sv, *kernel_params(call.node))
        y = dot_rows(kern, coef[None, :])[:, 0] + F32(rho)
    if call.attrs.get("one_class", 0):
        y = np.where(y > 0, F32(1), F32(-1))
    # post_transform is not applied: ONNX Runtime reads it and never uses it
    return [y.reshape(-1, 1).astype(F32)]


# ---- preprocessors ------------------------------------------------------------------------

def _rank2(sig: Sig, dtypes: Sequence[str] = NUMERIC) -> TensorType:
    x = sig.in_types[0]
    if x.dtype not in dtypes:
        raise sig.fail(f"takes {', '.join(dtypes)} input, got {x.dtype}")
    if len(x.shape) not in (1, 2):
        raise sig.fail(f"takes an input of rank 1 or 2, got shape {list(x.shape)}")
    return x


def _infer_normalizer(sig: Sig):
    if sig.attrs.get("norm", "MAX") not in ("MAX", "L1", "L2"):
        raise refuse(sig.node, f"norm {sig.attrs.get('norm')!r}")
    return [TensorType(_rank2(sig).shape, "float32")]


@ml_op("Normalizer", arity(1, 1)(_infer_normalizer), Pattern.REDUCE)
def _normalizer(call: Call, args):
    x = np.asarray(args[0])
    xs = x.reshape(1, -1) if x.ndim == 1 else x
    xf = xs.astype(F32)
    norm = call.attrs.get("norm", "MAX")
    if norm == "MAX":
        d = np.max(xf, axis=1, keepdims=True, initial=-np.finfo(F32).max)
        out = np.where(d != 0, xf / np.where(d != 0, d, F32(1)), xf)
    elif norm == "L1":
        d = _row_sum(np.abs(xs).astype(F32))
        out = np.where(d != 0, xf / np.where(d != 0, d, F32(1)), xf)
    else:
        sq = (xs * xs).astype(F32)
        d = _row_sum(sq)
        r = np.sqrt(sq / np.where(d != 0, d, F32(1)))
        out = np.where(d != 0, np.where(xs < 0, -r, r), xf)
    return [out.reshape(x.shape).astype(F32)]


def per_feature(sig_or_call, name: str, features: int) -> np.ndarray:
    """A per-feature attribute of `features` values or one value, broadcast."""
    v = floats(sig_or_call.node, name)
    if v.size not in (1, features):
        raise UnsupportedError(f"{node_label(sig_or_call.node)}: '{name}' needs 1 or "
                               f"{features} values (one per feature), got {v.size}")
    return np.broadcast_to(v, (features,))


def _infer_scaler(sig: Sig):
    x = _rank2(sig)
    f = x.shape[-1]
    scale, offset = floats(sig.node, "scale"), floats(sig.node, "offset")
    if scale.size != offset.size or scale.size not in (1, f):
        raise sig.fail(f"scale and offset need the same length, 1 or {f} (the features), got "
                       f"{scale.size} and {offset.size}")
    return [TensorType(x.shape, "float32")]


@ml_op("Scaler", arity(1, 1)(_infer_scaler), Pattern.ELEMWISE)
def _scaler(call: Call, args):
    f = call.in_types[0].shape[-1]
    x = args[0]
    scale, offset = per_feature(call, "scale", f), per_feature(call, "offset", f)
    if x.dtype == np.float64:    # computed in double, then rounded once
        return [((x - offset.astype(np.float64)) * scale.astype(np.float64)).astype(F32)]
    return [((x.astype(F32) - offset) * scale).astype(F32)]


def _infer_binarizer(sig: Sig):
    x = sig.in_types[0]
    if x.dtype != "float32":
        raise sig.fail(f"takes float input (ONNX Runtime's only kernel), got {x.dtype}")
    return [x]


BINARIZER_DEFAULT = 0.0


@ml_op("Binarizer", arity(1, 1)(_infer_binarizer), Pattern.ELEMWISE)
def _binarizer(call: Call, args):
    t = F32(call.attrs.get("threshold", BINARIZER_DEFAULT))
    return [np.where(args[0] > t, F32(1), F32(0))]


def imputer_values(sig_or_call) -> tuple[np.ndarray, float | int]:
    """(imputed values, one or one per feature; the value replaced)."""
    node = sig_or_call.node
    x = sig_or_call.in_types[0]
    fl, it = node.attrs.get("imputed_value_floats"), node.attrs.get("imputed_value_int64s")
    if bool(fl) == bool(it):
        raise UnsupportedError(f"{node_label(node)}: needs exactly one of imputed_value_floats "
                               "and imputed_value_int64s")
    if fl and x.dtype == "float32":
        return np.asarray(fl, F32), float(node.attrs.get("replaced_value_float", 0.0))
    if it and x.dtype == "int64":
        return np.asarray(it, np.int64), int(node.attrs.get("replaced_value_int64", 0))
    raise UnsupportedError(f"{node_label(node)}: {x.dtype} input with "
                           f"{'imputed_value_floats' if fl else 'imputed_value_int64s'}")


def _infer_imputer(sig: Sig):
    x = _rank2(sig, ("float32", "int64"))
    imputer_values(sig)
    return [x]


@ml_op("Imputer", arity(1, 1)(_infer_imputer), Pattern.ELEMWISE)
def _imputer(call: Call, args):
    x = args[0]
    values, replaced = imputer_values(call)
    f = x.shape[-1]
    # ONNX Runtime takes the first value unless there is one per feature
    fill = np.broadcast_to(values if values.size == f else values[:1], x.shape)
    hit = x == replaced
    if x.dtype.kind == "f" and np.isnan(replaced):
        hit = np.isnan(x)
    return [np.where(hit, fill, x).astype(x.dtype)]


def one_hot_categories(sig_or_call) -> np.ndarray:
    """cats_int64s where a repeated category matches only its last position
    (ONNX Runtime's map keeps the last index written)."""
    node = sig_or_call.node
    if node.attrs.get("cats_strings"):
        raise refuse(node, "string categories (cats_strings)")
    cats = ints(node, "cats_int64s")
    if not cats.size:
        raise UnsupportedError(f"{node_label(node)}: needs cats_int64s")
    if not node.attrs.get("zeros", 1):
        raise refuse(node, "zeros=0 (a run-time failure on an unknown category)")
    return cats


def one_hot_matches(cats: np.ndarray) -> np.ndarray:
    """Per category position, whether an input equal to it sets that position."""
    last = {int(v): k for k, v in enumerate(cats)}
    return np.array([last[int(v)] == k for k, v in enumerate(cats)])


def _infer_one_hot_encoder(sig: Sig):
    x = _rank2(sig)
    return [TensorType(x.shape + (one_hot_categories(sig).size,), "float32")]


def as_int64(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(x truncated to int64 as C converts, where that is defined): NaN,
    infinities and values int64 cannot hold match no category."""
    if x.dtype.kind != "f":
        return x.astype(np.int64), np.ones(x.shape, bool)
    with np.errstate(invalid="ignore"):
        ok = (x >= -2.0 ** 63) & (x < 2.0 ** 63)
    return np.trunc(np.where(ok, x, 0)).astype(np.int64), ok


@ml_op("OneHotEncoder", arity(1, 1)(_infer_one_hot_encoder), Pattern.INJECTIVE)
def _one_hot_encoder(call: Call, args):
    cats = one_hot_categories(call)
    key, ok = as_int64(np.asarray(args[0]))
    hit = ok[..., None] & (key[..., None] == cats) & one_hot_matches(cats)
    return [hit.astype(F32)]


def label_encoder_table(sig_or_call) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(keys, values, default) of a numeric LabelEncoder (opset 2+ attributes
    or opset 4 tensors); a repeated key keeps its first value, as ONNX
    Runtime's map."""
    node = sig_or_call.node
    a = node.attrs
    if any(k in a for k in ("keys_strings", "values_strings", "classes_strings")):
        raise refuse(node, "LabelEncoder with string keys or values")
    keys = a.get("keys_tensor", a.get("keys_int64s", a.get("keys_floats")))
    values = a.get("values_tensor", a.get("values_int64s", a.get("values_floats")))
    if keys is None or values is None:
        raise UnsupportedError(f"{node_label(node)}: needs numeric keys and values "
                               "(keys_int64s / keys_floats / keys_tensor and the values')")
    key_type = "int64" if "keys_int64s" in a else "float32" if "keys_floats" in a else \
        np.asarray(keys).dtype.name
    value_type = "int64" if "values_int64s" in a else "float32" if "values_floats" in a else \
        np.asarray(values).dtype.name
    keys = np.asarray(keys, key_type).reshape(-1)
    values = np.asarray(values, value_type).reshape(-1)
    if keys.size != values.size:
        raise UnsupportedError(f"{node_label(node)}: {keys.size} keys but {values.size} values")
    if value_type not in ("int64", "float32") or key_type not in ("int64", "float32"):
        raise refuse(node, f"LabelEncoder from {key_type} to {value_type}")
    default = a.get("default_tensor")
    if default is not None:
        default = np.asarray(default, value_type).reshape(-1)[0]
    elif value_type == "int64":
        default = np.int64(a.get("default_int64", -1))
    else:
        default = F32(a.get("default_float", -0.0))
    first = {}
    for k, key in enumerate(keys):
        first.setdefault(("nan",) if key != key else key.item(), k)
    keep = sorted(first.values())
    return keys[keep], values[keep], np.asarray(default, value_type)


def _infer_label_encoder(sig: Sig):
    keys, values, _ = label_encoder_table(sig)
    x = sig.in_types[0]
    if x.dtype != keys.dtype.name:
        raise sig.fail(f"{x.dtype} input for {keys.dtype.name} keys")
    return [TensorType(x.shape, values.dtype.name)]


@ml_op("LabelEncoder", arity(1, 1)(_infer_label_encoder), Pattern.ELEMWISE)
def _label_encoder(call: Call, args):
    keys, values, default = label_encoder_table(call)
    x = args[0]
    out = np.full(x.shape, default, values.dtype)
    for key, value in zip(keys[::-1], values[::-1]):     # the first key wins
        out = np.where((x == key) | ((x != x) & (key != key)), value, out)
    return [out]


def feature_indices(sig: Sig) -> np.ndarray:
    x = sig.in_types[0]
    idx = np.asarray(sig.const(1)).reshape(-1).astype(np.int64)
    if not idx.size:
        raise sig.fail("needs at least one index")
    bad = idx[(idx < 0) | (idx >= x.shape[-1])]
    if bad.size:
        raise sig.fail(f"index {int(bad[0])} is out of range for {x.shape[-1]} features")
    return idx


def _infer_array_feature_extractor(sig: Sig):
    x = sig.in_types[0]
    if not x.shape:
        raise sig.fail("takes an input of rank 1 or more")
    if sig.in_types[1].dtype != "int64":
        raise sig.fail(f"takes int64 indices, got {sig.in_types[1].dtype}")
    k = feature_indices(sig).size
    shape = (1, k) if len(x.shape) == 1 else x.shape[:-1] + (k,)
    return [TensorType(shape, x.dtype)]


@ml_op("ArrayFeatureExtractor", arity(2, 2)(_infer_array_feature_extractor), Pattern.INJECTIVE)
def _array_feature_extractor(call: Call, args):
    x, idx = args
    out = np.take(x, np.asarray(idx).reshape(-1), axis=-1)
    return [out.reshape(call.out_types[0].shape)]


def vectorizer_dims(sig: Sig) -> tuple[int, ...]:
    dims = tuple(int(d) for d in sig.attrs.get("inputdimensions", ()))
    if len(dims) != len(sig.node.inputs) or any(d < 0 for d in dims):
        raise sig.fail(f"inputdimensions {list(dims)} does not give one size per input "
                       f"({len(sig.node.inputs)} inputs)")
    return dims


def _infer_feature_vectorizer(sig: Sig):
    dims = vectorizer_dims(sig)
    batches = set()
    for t in sig.in_types:
        if t.dtype not in NUMERIC or not t.shape:
            raise sig.fail(f"takes numeric inputs of rank 1 or more, got {t}")
        batches.add(1 if len(t.shape) == 1 else t.shape[0])
    if len(batches) != 1:
        raise sig.fail(f"inputs with different batch sizes {sorted(batches)}")
    return [TensorType((batches.pop(), sum(dims)), "float32")]


@ml_op("FeatureVectorizer", arity(1)(_infer_feature_vectorizer), Pattern.INJECTIVE)
def _feature_vectorizer(call: Call, args):
    n, total = call.out_types[0].shape
    out = np.zeros((n, total), F32)
    at = 0
    for x, d in zip(args, call.attrs["inputdimensions"]):
        rows = np.asarray(x).reshape(n, -1)
        take = min(d, rows.shape[1])     # extra input columns are ignored, missing ones 0
        out[:, at:at + take] = rows[:, :take].astype(F32)
        at += d
    return [out]


def _infer_zipmap(sig: Sig):
    x = sig.in_types[0]
    labels = sig.attrs.get("classlabels_int64s")
    if sig.attrs.get("classlabels_strings"):
        raise refuse(sig.node, "ZipMap with string labels (classlabels_strings)")
    if x.dtype != "float32" or len(x.shape) != 2 or labels is None or \
            len(labels) != x.shape[1]:
        raise sig.fail(f"takes a float [N, {len(labels or ())}] probability tensor, got {x}")
    return [x]


@ml_op("ZipMap", arity(1, 1)(_infer_zipmap), Pattern.ELEMWISE)
def _zipmap(call: Call, args):
    # the sequence of {label: probability} maps, kept as the tensor it zips
    return [args[0]]

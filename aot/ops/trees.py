"""Tree ensembles of the ONNX-ML domain (ai.onnx.ml): TreeEnsembleClassifier
and TreeEnsembleRegressor (opsets 1-3, plain and *_as_tensor attributes) and
TreeEnsemble (opset 5), with ONNX Runtime's semantics.

Every form is read into one `Forest`: flat node arrays in which a child is a
node index, or `~leaf` for a leaf, and a leaf table of (target, weight)
votes. TreeEnsemble's BRANCH_MEMBER nodes become chains of BRANCH_EQ nodes,
one per member, as ONNX Runtime unrolls them. The reference walks every tree
for all rows at once; the compiled kernels (aot/lower/rules/trees.py) walk
the same arrays.

What ONNX Runtime does and the specification leaves open, followed here:
thresholds are compared in their own type (float32 attributes, or float64
*_as_tensor ones) against the input widened to it; a NaN feature takes the
true branch on a node with nodes_missing_value_tracks_true, else whatever
the comparison gives (false, but true for BRANCH_NEQ). Scores accumulate in
the thresholds' type, tree after tree. A regressor with one target takes
the first vote of each leaf and, of the post transforms, applies only
PROBIT. A classifier with two classes follows the binary rules of ONNX
Runtime's TreeAggregatorClassifier (`binary_scores`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from aot.errors import ModelError, UnsupportedError, node_label
from aot.ir.graph import Node, TensorType
from aot.ops.ml import ML_DOMAIN
from aot.ops.registry import Call, Sig, register

# Comparisons by mode name; BRANCH_MEMBER is unrolled into BRANCH_EQ.
COMPARE = {"BRANCH_LEQ": np.less_equal, "BRANCH_LT": np.less, "BRANCH_GTE": np.greater_equal,
           "BRANCH_GT": np.greater, "BRANCH_EQ": np.equal, "BRANCH_NEQ": np.not_equal}
MODES = tuple(COMPARE)
# TreeEnsemble (opset 5) writes modes, aggregates and transforms as numbers.
V5_MODES = (*MODES, "BRANCH_MEMBER")
V5_AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")
V5_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")
AGGREGATES = frozenset(V5_AGGREGATES)
TRANSFORMS = frozenset(V5_TRANSFORMS)
TREE_OPS = ("TreeEnsembleClassifier", "TreeEnsembleRegressor", "TreeEnsemble")


@dataclass(frozen=True)
class Classes:
    """A classifier's labels and how ONNX Runtime decides two classes."""
    labels: tuple[int, ...]
    binary: bool              # two classes, votes for one of them only
    all_positive: bool        # no negative vote


@dataclass(frozen=True, eq=False)
class Forest:
    """A tree ensemble as flat arrays. Node i (internal) compares feature[i]
    by MODES[mode[i]] with threshold[i]; true_next / false_next are node
    indices, or ~leaf (negative) for a leaf. Leaf l votes weight_value[k]
    for target weight_target[k], k in weight_start[l] : weight_start[l+1]."""
    feature: np.ndarray          # int64 [nodes]
    threshold: np.ndarray        # float32 or float64 [nodes]
    mode: np.ndarray             # int64 [nodes], index into MODES
    missing_true: np.ndarray     # bool [nodes]
    true_next: np.ndarray        # int64 [nodes]
    false_next: np.ndarray       # int64 [nodes]
    roots: np.ndarray            # int64 [trees], node index or ~leaf
    weight_start: np.ndarray     # int64 [leaves + 1]
    weight_target: np.ndarray    # int64 [votes]
    weight_value: np.ndarray     # threshold dtype [votes]
    n_targets: int
    aggregate: str
    transform: str
    base_values: np.ndarray      # threshold dtype
    classes: Classes | None = None

    @property
    def dtype(self) -> np.dtype:
        return self.weight_value.dtype

    @property
    def n_leaves(self) -> int:
        return len(self.weight_start) - 1

    @property
    def single(self) -> bool:
        """One target and no classes: ONNX Runtime's one-output path."""
        return self.n_targets == 1 and self.classes is None

    def leaf_votes(self, leaf: int) -> list[tuple[int, float]]:
        lo, hi = self.weight_start[leaf], self.weight_start[leaf + 1]
        votes = list(zip(self.weight_target[lo:hi].tolist(), self.weight_value[lo:hi].tolist()))
        return votes[:1] if self.single else votes

    def depth(self) -> int:
        """The most comparisons one walk makes (0 when every tree is a leaf)."""
        best, stack = 0, [(int(r), 0) for r in self.roots]
        while stack:
            node, d = stack.pop()
            if node < 0:
                best = max(best, d)
                continue
            stack += [(int(self.true_next[node]), d + 1), (int(self.false_next[node]), d + 1)]
        return best


# ---- reading the attributes ------------------------------------------------------------

def _fail(node: Node, msg: str) -> ModelError:
    return ModelError(f"{node_label(node)}: {msg}")


def _floats(node: Node, name: str, default=None) -> np.ndarray | None:
    """A float list attribute, or its *_as_tensor form (kept in its type)."""
    a = node.attrs
    plain, tensor = a.get(name), a.get(f"{name}_as_tensor")
    if plain is not None and tensor is not None:
        raise _fail(node, f"'{name}' is given both as floats and as a tensor")
    if tensor is not None:
        arr = np.asarray(tensor).reshape(-1)
        if arr.dtype.name not in ("float32", "float64"):
            raise UnsupportedError(f"{node_label(node)}: '{name}_as_tensor' of type "
                                   f"{arr.dtype.name} is not supported")
        return arr
    if plain is None:
        return default
    return np.asarray(plain, np.float32).reshape(-1)


def _ints(node: Node, name: str, n: int | None = None, default=None) -> np.ndarray:
    v = node.attrs.get(name, default)
    if v is None:
        raise _fail(node, f"missing the attribute '{name}'")
    arr = np.asarray(v, np.int64).reshape(-1)
    if n is not None and len(arr) != n:
        raise _fail(node, f"'{name}' has {len(arr)} entries, the nodes are {n}")
    return arr


def _choice(node: Node, name: str, allowed, default: str) -> str:
    v = node.attrs.get(name, default)
    if v not in allowed:
        raise UnsupportedError(f"{node_label(node)}: {name} {v!r} is not supported "
                               f"(one of {', '.join(sorted(allowed))})")
    return v


def _threshold_type(node: Node, x_dtype: str, *arrays) -> np.dtype:
    """ONNX Runtime's ThresholdType: float64 for a float64 input, else
    float32, which float64 *_as_tensor attributes cannot be read as."""
    if x_dtype == "float64":
        return np.dtype(np.float64)
    if any(a is not None and a.dtype == np.float64 for a in arrays):
        raise UnsupportedError(f"{node_label(node)}: float64 *_as_tensor attributes need a "
                               f"float64 input (as in ONNX Runtime), the input is {x_dtype}")
    return np.dtype(np.float32)


@dataclass
class _Build:
    """Nodes and leaves appended while the trees are read (mutable on purpose)."""
    feature: list
    threshold: list
    mode: list
    missing: list
    true_next: list
    false_next: list
    leaves: list      # per leaf: list of (target, weight)

    @classmethod
    def empty(cls) -> "_Build":
        return cls([], [], [], [], [], [], [])

    def node(self, feature: int, threshold: float, mode: int, missing: bool) -> int:
        self.feature.append(feature)
        self.threshold.append(threshold)
        self.mode.append(mode)
        self.missing.append(missing)
        self.true_next.append(0)
        self.false_next.append(0)
        return len(self.feature) - 1

    def leaf(self, votes: list) -> int:
        self.leaves.append(votes)
        return ~(len(self.leaves) - 1)

    def forest(self, roots, dtype, **kw) -> Forest:
        starts = np.cumsum([0] + [len(v) for v in self.leaves]).astype(np.int64)
        votes = [v for leaf in self.leaves for v in leaf]
        return Forest(
            feature=np.asarray(self.feature, np.int64), threshold=np.asarray(self.threshold, dtype),
            mode=np.asarray(self.mode, np.int64), missing_true=np.asarray(self.missing, bool),
            true_next=np.asarray(self.true_next, np.int64),
            false_next=np.asarray(self.false_next, np.int64),
            roots=np.asarray(roots, np.int64), weight_start=starts,
            weight_target=np.asarray([t for t, _ in votes], np.int64),
            weight_value=np.asarray([w for _, w in votes], dtype), **kw)


def _v3_forest(node: Node, x_dtype: str, prefix: str, n_targets: int,
               classes: Classes | None) -> Forest:
    """TreeEnsembleClassifier / Regressor: nodes by (tree id, node id)."""
    a = node.attrs
    modes = a.get("nodes_modes")
    if modes is None:
        raise _fail(node, "missing the attribute 'nodes_modes'")
    n = len(modes)
    bad = sorted({m for m in modes if m not in (*MODES, "LEAF")})
    if bad:
        raise UnsupportedError(f"{node_label(node)}: node mode {bad[0]!r} is not supported")
    trees, ids = _ints(node, "nodes_treeids", n), _ints(node, "nodes_nodeids", n)
    features = _ints(node, "nodes_featureids", n)
    t_ids, f_ids = _ints(node, "nodes_truenodeids", n), _ints(node, "nodes_falsenodeids", n)
    missing = _ints(node, "nodes_missing_value_tracks_true", None, ())
    values = _floats(node, "nodes_values")
    weights = _floats(node, f"{prefix}_weights")
    base = _floats(node, "base_values")
    dtype = _threshold_type(node, x_dtype, values, weights, base)
    if values is None or len(values) != n:
        raise _fail(node, f"'nodes_values' must give one threshold per node ({n})")
    w_trees, w_nodes = _ints(node, f"{prefix}_treeids"), _ints(node, f"{prefix}_nodeids")
    w_ids = _ints(node, f"{prefix}_ids")
    if weights is None or not len(weights) == len(w_trees) == len(w_nodes) == len(w_ids):
        raise _fail(node, f"the {prefix}_* attributes differ in length")
    if len(w_ids) and (w_ids.min() < 0 or w_ids.max() >= n_targets):
        raise _fail(node, f"a {prefix}_ids entry is outside 0..{n_targets - 1}")
    index = {}
    for i, key in enumerate(zip(trees.tolist(), ids.tolist())):
        if key in index:
            raise _fail(node, f"node {key[1]} of tree {key[0]} is listed twice")
        index[key] = i
    votes: dict[int, list] = {}
    # ONNX Runtime sorts the votes by (tree, node), then by their position
    for k in sorted(range(len(w_ids)), key=lambda k: (w_trees[k], w_nodes[k], k)):
        key = (int(w_trees[k]), int(w_nodes[k]))
        if key not in index:
            raise _fail(node, f"a weight names node {key[1]} of tree {key[0]}, which is not there")
        votes.setdefault(index[key], []).append((int(w_ids[k]), weights[k]))
    b = _Build.empty()
    placed: dict[int, int] = {}

    def place(i: int, tree: int) -> int:
        """Node i as a Forest node or leaf, its subtree placed after it (iterative)."""
        root = None
        stack = [(i, None, False)]
        while stack:
            j, parent, is_true = stack.pop()
            if j in placed:
                raise _fail(node, f"node {ids[j]} of tree {tree} is reached twice (not a tree)")
            if modes[j] == "LEAF":
                if j not in votes:
                    raise _fail(node, f"leaf {ids[j]} of tree {tree} has no weight")
                ref = b.leaf(votes[j])
            else:
                ref = b.node(int(features[j]), values[j], MODES.index(modes[j]),
                             j < len(missing) and missing[j] == 1)
                for child, flag in ((f_ids[j], False), (t_ids[j], True)):
                    key = (tree, int(child))
                    if key not in index or index[key] == j:
                        raise _fail(node, f"node {ids[j]} of tree {tree} points to node "
                                          f"{child}, which is not a child it can have")
                    stack.append((index[key], ref, flag))
            placed[j] = ref
            if parent is None:
                root = ref
            else:
                (b.true_next if is_true else b.false_next)[parent] = ref
        return root

    # ONNX Runtime's roots: the first node listed of each run of one tree id
    roots = [place(i, int(trees[i])) for i in range(n) if i == 0 or trees[i] != trees[i - 1]]
    base = np.zeros(0, dtype) if base is None else base.astype(dtype)
    return b.forest(roots, dtype, n_targets=n_targets,
                    aggregate=_choice(node, "aggregate_function", AGGREGATES, "SUM"),
                    transform=_choice(node, "post_transform", TRANSFORMS, "NONE"),
                    base_values=base, classes=classes)


def _v5_forest(node: Node, x_dtype: str) -> Forest:
    """TreeEnsemble (opset 5): node and leaf arrays, trees by their roots."""
    a = node.attrs
    splits = _floats(node, "nodes_splits")
    leaf_w = _floats(node, "leaf_weights")
    if splits is None or leaf_w is None:
        raise _fail(node, "needs the attributes 'nodes_splits' and 'leaf_weights'")
    dtype = _threshold_type(node, x_dtype, splits, leaf_w)
    n = len(splits)
    modes = _ints(node, "nodes_modes", n)
    if modes.min(initial=0) < 0 or modes.max(initial=0) >= len(V5_MODES):
        raise _fail(node, f"a node mode is outside 0..{len(V5_MODES) - 1}")
    features = _ints(node, "nodes_featureids", n)
    t_ids, f_ids = _ints(node, "nodes_truenodeids", n), _ints(node, "nodes_falsenodeids", n)
    t_leaf, f_leaf = _ints(node, "nodes_trueleafs", n), _ints(node, "nodes_falseleafs", n)
    missing = _ints(node, "nodes_missing_value_tracks_true", None, ())
    targets = _ints(node, "leaf_targetids", len(leaf_w))
    n_targets = int(a.get("n_targets", 0))
    if n_targets < 1 or (len(targets) and (targets.min() < 0 or targets.max() >= n_targets)):
        raise _fail(node, f"n_targets {n_targets} does not cover the leaf_targetids")
    members = _members(node, modes, dtype)
    b = _Build.empty()

    def leaf(j: int) -> int:
        if not 0 <= j < len(leaf_w):
            raise _fail(node, f"leaf index {j} is outside the {len(leaf_w)} leaves")
        return b.leaf([(int(targets[j]), leaf_w[j])])

    def place(root: int) -> int:
        if f_ids[root] == t_ids[root]:     # ONNX Runtime's test for a tree that is a leaf
            return leaf(root)
        first, stack, seen = None, [(root, ())], 0
        while stack:     # (node, the (parent, is_true) links to point at it)
            j, links = stack.pop()
            seen += 1
            if seen > n or not 0 <= j < n:
                raise _fail(node, f"the tree rooted at node {root} is not a tree of the nodes")
            chain = members.get(j, (splits[j],))
            refs = [b.node(int(features[j]), v, MODES.index("BRANCH_EQ") if j in members
                           else int(modes[j]), j < len(missing) and missing[j] == 1)
                    for v in chain]
            for r, nxt in zip(refs, refs[1:]):     # not this member: test the next one
                b.false_next[r] = nxt
            if t_leaf[j]:
                true = leaf(int(t_ids[j]))
                for r in refs:
                    b.true_next[r] = true
            else:
                stack.append((int(t_ids[j]), tuple((r, True) for r in refs)))
            if f_leaf[j]:
                b.false_next[refs[-1]] = leaf(int(f_ids[j]))
            else:
                stack.append((int(f_ids[j]), ((refs[-1], False),)))
            first = refs[0] if first is None else first
            for parent, is_true in links:
                (b.true_next if is_true else b.false_next)[parent] = refs[0]
        return first

    roots = [place(int(r)) for r in _ints(node, "tree_roots")]
    agg, post = int(a.get("aggregate_function", 1)), int(a.get("post_transform", 0))
    if not (0 <= agg < len(V5_AGGREGATES) and 0 <= post < len(V5_TRANSFORMS)):
        raise UnsupportedError(f"{node_label(node)}: aggregate_function {agg} or "
                               f"post_transform {post} is not supported")
    return b.forest(roots, dtype, n_targets=n_targets, aggregate=V5_AGGREGATES[agg],
                    transform=V5_TRANSFORMS[post], base_values=np.zeros(0, dtype))


def _members(node: Node, modes: np.ndarray, dtype) -> dict[int, tuple]:
    """BRANCH_MEMBER node -> its members, from membership_values (NaN-separated)."""
    index = [i for i, m in enumerate(modes) if V5_MODES[m] == "BRANCH_MEMBER"]
    if not index:
        return {}
    values = _floats(node, "membership_values")
    if values is None:
        raise _fail(node, "BRANCH_MEMBER nodes need the attribute 'membership_values'")
    sets, cur = [], []
    for v in values.astype(dtype):
        if np.isnan(v):
            sets.append(tuple(cur))
            cur = []
        else:
            cur.append(v)
    if cur:
        sets.append(tuple(cur))
    if len(sets) < len(index) or any(not s for s in sets[:len(index)]):
        raise _fail(node, "membership_values must give a non-empty set per BRANCH_MEMBER node")
    return dict(zip(index, sets))


def forest_of(node: Node, x_dtype: str) -> Forest:
    """The Forest of a tree-ensemble node reading an input of `x_dtype` (a
    ModelError or UnsupportedError naming the node when its attributes do
    not make one)."""
    if node.op == "TreeEnsemble":
        return _v5_forest(node, x_dtype)
    if node.op == "TreeEnsembleRegressor":
        n = int(node.attrs.get("n_targets", 1))
        if n < 1:
            raise _fail(node, f"n_targets {n} must be at least 1")
        return _v3_forest(node, x_dtype, "target", n, None)
    if node.attrs.get("classlabels_strings"):
        raise UnsupportedError(f"{node_label(node)}: string class labels are not supported "
                               "(aot has no string tensors; export int64 labels)")
    labels = tuple(int(v) for v in node.attrs.get("classlabels_int64s", ()))
    if len(labels) < 2:
        raise UnsupportedError(f"{node_label(node)}: a classifier needs two or more "
                               "classlabels_int64s")
    ids = _ints(node, "class_ids")
    weights = _floats(node, "class_weights", np.zeros(0, np.float32))
    classes = Classes(labels, len(labels) == 2 and len(set(ids.tolist())) == 1,
                      bool(np.all(weights >= 0)))
    forest = _v3_forest(node, x_dtype, "class", len(labels), classes)
    if classes.binary and forest.transform == "PROBIT":
        raise UnsupportedError(f"{node_label(node)}: PROBIT on a two-class classifier with "
                               "votes for one class (ONNX Runtime leaves its second score unset)")
    return forest


# ---- evaluation --------------------------------------------------------------------------

def leaves_reached(forest: Forest, x: np.ndarray) -> np.ndarray:
    """[rows, trees] the leaf each tree's walk ends at, for x [rows, features]."""
    xt = x.astype(forest.dtype)
    out = np.empty((x.shape[0], len(forest.roots)), np.int64)
    rows = np.arange(x.shape[0])
    for t, root in enumerate(forest.roots):
        at = np.full(x.shape[0], root, np.int64)
        while (live := at >= 0).any():
            i = at[live]
            v = xt[rows[live], forest.feature[i]]
            go = np.zeros(len(i), bool)
            for m, name in enumerate(MODES):
                sel = forest.mode[i] == m
                go[sel] = COMPARE[name](v[sel], forest.threshold[i][sel])
            go |= forest.missing_true[i] & np.isnan(v)
            at[live] = np.where(go, forest.true_next[i], forest.false_next[i])
        out[:, t] = ~at
    return out


def raw_scores(forest: Forest, leaves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(scores, has_score), each [rows, targets], before base values: the
    votes aggregated tree after tree in the thresholds' type."""
    rows, dt = leaves.shape[0], forest.dtype.type
    score = np.zeros((rows, forest.n_targets), forest.dtype)
    has = np.zeros((rows, forest.n_targets), bool)
    votes = [forest.leaf_votes(leaf) for leaf in range(forest.n_leaves)]
    for r in range(rows):
        for leaf in leaves[r]:
            for target, w in votes[leaf]:
                cur = score[r, target]
                if forest.aggregate in ("SUM", "AVERAGE"):
                    score[r, target] = dt(cur + dt(w))
                elif not has[r, target] or (w < cur if forest.aggregate == "MIN" else w > cur):
                    score[r, target] = w
                has[r, target] = True
    return score, has


F32 = np.float32


def logistic(v) -> np.float32:
    e = F32(1) / (F32(1) + np.exp(-np.abs(F32(v)), dtype=F32))
    return F32(1) - e if v < 0 else e


def probit(v) -> np.float32:
    """sqrt(2) * erfinv(2v - 1) with ONNX Runtime's approximation of erfinv, in float32."""
    x = F32(2) * F32(v) - F32(1)
    sgn = F32(-1) if x < 0 else F32(1)
    x = (F32(1) - x) * (F32(1) + x)
    lg = np.log(x, dtype=F32)
    a = F32(2) / (F32(np.pi) * F32(0.147)) + F32(0.5) * lg
    b = F32(1) / F32(0.147) * lg
    return F32(np.sqrt(F32(2))) * (sgn * np.sqrt(-a + np.sqrt(a * a - b, dtype=F32), dtype=F32))


def softmax(s: np.ndarray, zero: bool = False) -> np.ndarray:
    """ONNX Runtime's float32 softmax; `zero`: values within 1e-7 of 0 stay 0."""
    s = s.astype(F32)
    top = max(F32(-np.finfo(F32).max), s.max())
    keep = np.abs(s) > F32(1e-7) if zero else np.ones(s.shape, bool)
    e = np.where(keep, np.exp(s - top, dtype=F32), s * np.exp(-top, dtype=F32)).astype(F32)
    total = F32(0)
    for v, k in zip(e, keep):
        total = F32(total + v) if k else total
    return (e / total).astype(F32)


def transform(forest: Forest, scores: np.ndarray) -> np.ndarray:
    """write_scores for two or more scores: the post transform of one row."""
    t = forest.transform
    if t == "LOGISTIC":
        return np.array([logistic(v) for v in scores], F32)
    if t == "PROBIT":
        return np.array([probit(v) for v in scores], F32)
    if t in ("SOFTMAX", "SOFTMAX_ZERO"):
        return softmax(scores, zero=t == "SOFTMAX_ZERO")
    return scores.astype(F32)


def finish_targets(forest: Forest, score: np.ndarray, has: np.ndarray) -> np.ndarray:
    """A regressor's (or TreeEnsemble's) outputs of one row."""
    base, n_trees = forest.base_values, len(forest.roots)
    dt = forest.dtype.type
    if forest.single:
        origin = base[0] if len(base) == 1 else dt(0)
        s = score[0]
        if forest.aggregate == "AVERAGE":
            s = dt(s / dt(n_trees))
        s = dt(s + origin) if has[0] or forest.aggregate in ("SUM", "AVERAGE") else origin
        return np.array([probit(s) if forest.transform == "PROBIT" else s], F32)
    use_base = len(base) == forest.n_targets
    if forest.aggregate == "AVERAGE":
        score = (score / dt(n_trees)).astype(forest.dtype)
    if use_base:
        score = (score + base).astype(forest.dtype)
    return transform(forest, np.where(has, score, 0).astype(forest.dtype))


def binary_scores(forest: Forest, score: np.ndarray, has: np.ndarray) -> tuple[int, np.ndarray]:
    """(label, two scores) of a two-class row, as TreeAggregatorClassifier
    decides them: base values, the label from the second class's score (or
    the first's when only it voted), and a score vector built back from one
    score when only one class has a vote. A score whose class has no vote is
    written as 0, base value or not (ONNX Runtime's ScoreValue)."""
    base, c = forest.base_values, forest.classes
    s0, s1 = score
    h0, h1 = bool(has[0]), bool(has[1])
    extra = -1
    if len(base) == 2:
        if h1:
            s1 = base[1] + s0
            s0 = -s1
        else:
            s1, s0 = s1 + base[1], s0 + base[0]
    elif len(base) == 1:
        s0 = s0 + base[0]
    elif len(base) == 0:
        extra = 3
    two = h1 or len(base) > 1
    pos = s1 if two and h1 else (s0 if h0 else 0)
    if c.binary:
        cut = 0.5 if c.all_positive else 0.0
        win = pos > cut
        extra = (0 if win else 1) if c.all_positive else (2 if win else 3)
        label = c.labels[1] if win else c.labels[0]
    else:
        label = 1 if pos > 0 else 0
    v0, v1 = (s0 if h0 else 0), (s1 if h1 else 0)
    if two:
        return label, transform(forest, np.asarray([v0, v1], forest.dtype))
    s = F32(v0)
    if extra in (0, 1):
        return label, np.array([F32(1) - s, s], F32)
    if extra in (2, 3):
        if forest.transform == "LOGISTIC":
            return label, np.array([logistic(-s), logistic(s)], F32)
        return label, np.array([-s, s], F32)
    return label, np.array([s, 0], F32)    # ONNX Runtime writes the first score only


def finish_classes(forest: Forest, score: np.ndarray, has: np.ndarray) -> tuple[int, np.ndarray]:
    """(label, scores) of one classifier row."""
    if forest.n_targets == 2:
        return binary_scores(forest, score, has)
    score, has = score.copy(), has.copy()
    base = forest.base_values[:forest.n_targets]
    score[:len(base)] += base
    has[:len(base)] = True
    best = -1
    for k in range(forest.n_targets):
        if has[k] and (best < 0 or score[k] > score[best]):
            best = k
    return forest.classes.labels[max(best, 0)], transform(forest, np.where(has, score, 0))


def evaluate(forest: Forest, x: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(scores [rows, targets] float32, labels [rows] int64 or None)."""
    x2 = x.reshape(1, -1) if x.ndim == 1 else x
    score, has = raw_scores(forest, leaves_reached(forest, x2))
    if forest.classes is None:
        return np.stack([finish_targets(forest, s, h) for s, h in zip(score, has)]), None
    rows = [finish_classes(forest, s, h) for s, h in zip(score, has)]
    return (np.stack([r[1] for r in rows]).astype(F32),
            np.array([r[0] for r in rows], np.int64))


# ---- the op table -------------------------------------------------------------------------

def _rows(sig: Sig) -> tuple[int, int]:
    x = sig.in_types[0]
    if x is None or len(x.shape) not in (1, 2) or x.dtype not in ("float32", "float64"):
        raise sig.fail(f"takes one float32 or float64 input of rank 1 or 2, got {x}")
    return (1, x.shape[0]) if len(x.shape) == 1 else x.shape


def _check_features(sig: Sig, forest: Forest, features: int) -> None:
    if len(forest.feature) and forest.feature.max() >= features:
        raise sig.fail(f"a node reads feature {forest.feature.max()}, the input has {features}")
    if len(forest.feature) and forest.feature.min() < 0:
        raise sig.fail("a node reads a negative feature index")


def _infer(sig: Sig):
    rows, features = _rows(sig)
    forest = forest_of(sig.node, sig.in_types[0].dtype)
    _check_features(sig, forest, features)
    n = (rows,) if len(sig.in_types[0].shape) == 2 else (1,)
    if sig.node.op == "TreeEnsembleClassifier":
        return [TensorType(n, "int64"), TensorType((*n, forest.n_targets), "float32")]
    out = sig.in_types[0].dtype if sig.node.op == "TreeEnsemble" else "float32"
    return [TensorType((*n, forest.n_targets), out)]


def _ref(call: Call, args):
    forest = forest_of(call.node, call.in_types[0].dtype)
    scores, labels = evaluate(forest, np.asarray(args[0]))
    outs = [scores.astype(call.out_types[-1].dtype)]
    return [labels, *outs] if labels is not None else outs


for _op in TREE_OPS:
    register(_op, infer=_infer, domain=ML_DOMAIN)(_ref)


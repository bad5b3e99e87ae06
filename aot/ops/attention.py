"""Transformer and sequence-model ops (ONNX opsets 23-28): Attention,
RotaryEmbedding, SwiGLU, TensorScatter (the key/value cache update),
CausalConvWithState and LinearAttention (the recurrent state of
state-space and linear-attention models). Float32 only.

Attention is one op here, not a decomposition: its geometry (3-D inputs
split into heads, grouped-query heads, the key/value cache) and its masks
(boolean or additive `attn_mask` broadcast from the right and padded to the
cache length, `is_causal` aligned to the cache's end, the sliding window,
`nonpad_kv_seqlen`) are worked out once, in `Geometry` and `Options`, which
the reference below and the kernel rule (aot/lower/rules/attention.py) share.

Semantics are the ONNX specification's, with its reference's conventions
where the text is silent: a query row whose keys are all masked by the
masks gives zero probabilities (so Y = 0), `qk_matmul_output` modes 0 and 1
both expose the soft-capped scores, and the scale is applied as
sqrt(scale) to Q and to K.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from aot.errors import UnsupportedError, node_label
from aot.ir.graph import Node, TensorType
from aot.ops.registry import Call, Pattern, Sig, register

Q, K, V, MASK, PAST_KEY, PAST_VALUE, NONPAD = range(7)
# qk_matmul_output_mode: which intermediate the fourth output shows
QK_SCORES, QK_SOFTCAPPED, QK_BIASED, QK_SOFTMAX = range(4)
# TensorProto element types softmax_precision may name
_PRECISIONS = {1: "float32", 11: "float64"}


def _fail(node: Node, in_types, msg: str):
    return Sig(node, tuple(in_types), ()).fail(msg)


@dataclass(frozen=True)
class Geometry:
    """Attention's sizes; inputs seen as [batch, heads, sequence, head size]."""
    batch: int
    q_heads: int
    kv_heads: int
    q_len: int
    kv_len: int          # new keys and values (K, V)
    past_len: int        # cached ones before them (past_key, past_value)
    head: int            # Q and K head size
    v_head: int
    three_d: bool        # Q, K, V and Y are [batch, sequence, heads * head size]

    @property
    def total(self) -> int:
        """Keys attended to: the cache, then the new ones."""
        return self.past_len + self.kv_len

    @property
    def group(self) -> int:
        """Query heads per key/value head (grouped-query attention)."""
        return self.q_heads // self.kv_heads

    @property
    def y_shape(self) -> tuple[int, ...]:
        if self.three_d:
            return (self.batch, self.q_len, self.q_heads * self.v_head)
        return (self.batch, self.q_heads, self.q_len, self.v_head)

    @property
    def scores_shape(self) -> tuple[int, ...]:
        return (self.batch, self.q_heads, self.q_len, self.total)


@dataclass(frozen=True)
class Options:
    scale: float         # of Q K^T
    causal: bool
    softcap: float       # 0: none
    qk_mode: int
    left_window: int     # -1: unbounded
    right_window: int
    softmax_dtype: str


def _present(in_types, i: int) -> bool:
    return i < len(in_types) and in_types[i] is not None


def _split_heads(node, in_types, i: int, heads: int, what: str) -> tuple[int, int]:
    """(sequence length, head size) of 3-D input i holding `heads` heads."""
    shape = in_types[i].shape
    if heads < 1 or shape[2] % heads:
        raise _fail(node, in_types, f"{what} hidden size {shape[2]} is not a multiple of "
                    f"{what.split()[0].lower()}_num_heads {heads}")
    return shape[1], shape[2] // heads


def geometry(node: Node, in_types) -> Geometry:
    """The sizes of one Attention node, every input checked against them."""
    q, k, v = in_types[Q], in_types[K], in_types[V]
    ranks = {len(q.shape), len(k.shape), len(v.shape)}
    if len(ranks) != 1 or ranks.pop() not in (3, 4):
        raise _fail(node, in_types, f"Q, K and V must all be 3-D or all 4-D, got "
                    f"{list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
    three_d = len(q.shape) == 3
    if three_d:
        if "q_num_heads" not in node.attrs or "kv_num_heads" not in node.attrs:
            raise _fail(node, in_types, "3-D inputs need q_num_heads and kv_num_heads")
        hq, hkv = int(node.attrs["q_num_heads"]), int(node.attrs["kv_num_heads"])
        lq, d = _split_heads(node, in_types, Q, hq, "Q hidden")
        lk, dk = _split_heads(node, in_types, K, hkv, "KV hidden")
        lv, dv = _split_heads(node, in_types, V, hkv, "KV hidden")
    else:
        _, hq, lq, d = q.shape
        _, hkv, lk, dk = k.shape
        _, hv, lv, dv = v.shape
        if hv != hkv:
            raise _fail(node, in_types, f"K has {hkv} heads, V {hv}")
        for attr, n in (("q_num_heads", hq), ("kv_num_heads", hkv)):
            if attr in node.attrs and int(node.attrs[attr]) != n:
                raise _fail(node, in_types, f"{attr}={node.attrs[attr]} disagrees with the "
                            f"4-D inputs' {n} heads")
    batch = q.shape[0]
    if k.shape[0] != batch or v.shape[0] != batch:
        raise _fail(node, in_types, f"Q, K and V batch sizes differ: {q.shape[0]}, "
                    f"{k.shape[0]}, {v.shape[0]}")
    if dk != d:
        raise _fail(node, in_types, f"Q head size {d} differs from K's {dk}")
    if lv != lk:
        raise _fail(node, in_types, f"K has {lk} positions, V {lv}")
    if hkv < 1 or hq % hkv:
        raise _fail(node, in_types, f"{hq} query heads are not a multiple of {hkv} "
                    "key/value heads")
    past = 0
    if _present(in_types, PAST_KEY) != _present(in_types, PAST_VALUE):
        raise _fail(node, in_types, "past_key and past_value come together")
    if _present(in_types, PAST_KEY):
        pk, pv = in_types[PAST_KEY].shape, in_types[PAST_VALUE].shape
        past = pk[2] if len(pk) == 4 else -1
        if pk != (batch, hkv, past, d) or pv != (batch, hkv, past, dv):
            raise _fail(node, in_types, f"past_key {list(pk)} / past_value {list(pv)} must be "
                        f"[{batch}, {hkv}, past, {d}] / [{batch}, {hkv}, past, {dv}]")
        if _present(in_types, NONPAD):
            raise _fail(node, in_types, "nonpad_kv_seqlen cannot be combined with past_key")
    return Geometry(batch, hq, hkv, lq, lk, past, d, dv, three_d)


def options(node: Node, in_types, geo: Geometry) -> Options:
    a = node.attrs
    precision = a.get("softmax_precision")
    if precision is not None and int(precision) not in _PRECISIONS:
        raise UnsupportedError(f"{node_label(node)}: softmax_precision {precision} is not "
                               "supported (float32 and float64 are)")
    mode = int(a.get("qk_matmul_output_mode", 0))
    if mode not in range(4):
        raise _fail(node, in_types, f"qk_matmul_output_mode {mode} is not 0-3")
    left, right = int(a.get("left_window_size", -1)), int(a.get("right_window_size", -1))
    if left < -1 or right < -1:
        raise _fail(node, in_types, "window sizes must be -1 or non-negative")
    scale = a.get("scale")
    return Options(float(scale) if scale is not None else 1.0 / math.sqrt(geo.head),
                   bool(a.get("is_causal", 0)), float(a.get("softcap", 0.0)), mode, left, right,
                   _PRECISIONS[int(precision)] if precision is not None else in_types[Q].dtype)


def _check_mask(sig: Sig, geo: Geometry) -> None:
    m = sig.in_types[MASK]
    if m.dtype not in ("bool", sig.in_types[Q].dtype):
        raise sig.fail(f"attn_mask must be bool or {sig.in_types[Q].dtype}, got {m.dtype}")
    if not 1 <= len(m.shape) <= 4:
        raise sig.fail(f"attn_mask must have rank 1 to 4, got {list(m.shape)}")
    full = geo.scores_shape[4 - len(m.shape):]
    if m.shape[-1] > geo.total or any(d not in (1, f) for d, f in zip(m.shape[:-1], full)):
        raise sig.fail(f"attn_mask {list(m.shape)} does not broadcast to the scores "
                       f"{list(geo.scores_shape)}")


def _infer_attention(sig: Sig):
    n_in, n_out = len(sig.node.inputs), len(sig.node.outputs)
    if n_in < 3 or n_in > 7 or not all(sig.has(i) for i in (Q, K, V)):
        raise sig.fail(f"takes Q, K, V and up to 4 optional inputs, got {n_in}")
    if n_out > 4:
        raise sig.fail(f"has at most 4 outputs, got {n_out}")
    q = sig.in_types[Q]
    if q.dtype not in ("float32", "float16"):
        raise UnsupportedError(f"{node_label(sig.node)}: Attention on {q.dtype} is not "
                               "supported (float32 and float16 are)")
    for i, what in ((K, "K"), (V, "V"), (PAST_KEY, "past_key"), (PAST_VALUE, "past_value")):
        if sig.has(i) and sig.in_types[i].dtype != q.dtype:
            raise sig.fail(f"{what} is {sig.in_types[i].dtype}, Q {q.dtype}")
    geo = geometry(sig.node, sig.in_types)
    options(sig.node, sig.in_types, geo)
    if sig.has(MASK):
        _check_mask(sig, geo)
    if sig.has(NONPAD):
        t = sig.in_types[NONPAD]
        if t.dtype != "int64" or t.shape != (geo.batch,):
            raise sig.fail(f"nonpad_kv_seqlen must be int64[{geo.batch}], got {t}")
    types = [TensorType(geo.y_shape, q.dtype),
             TensorType((geo.batch, geo.kv_heads, geo.total, geo.head), q.dtype),
             TensorType((geo.batch, geo.kv_heads, geo.total, geo.v_head), q.dtype),
             TensorType(geo.scores_shape, q.dtype)]
    return types[:n_out]


def _macs(call: Call) -> int:
    geo = geometry(call.node, call.in_types)
    rows = geo.batch * geo.q_heads * geo.q_len * geo.total
    return rows * (geo.head + geo.v_head)


# ---- the reference --------------------------------------------------------------------

def _heads(x: np.ndarray, heads: int) -> np.ndarray:
    """[batch, seq, heads * size] -> [batch, heads, seq, size]."""
    b, s, hidden = x.shape
    return x.reshape(b, s, heads, hidden // heads).transpose(0, 2, 1, 3)


def allowed_keys(geo: Geometry, opts: Options, mask: np.ndarray | None,
                 nonpad: np.ndarray | None) -> np.ndarray:
    """Which keys each query may attend to, [batch or 1, heads or 1, q, keys]:
    the boolean mask, causality and the window (both aligned so the last
    query sits at the last valid key) and the valid-length padding."""
    i = np.arange(geo.q_len).reshape(-1, 1)
    j = np.arange(geo.total).reshape(1, -1)
    ok = np.ones((1, 1, geo.q_len, geo.total), bool)
    if mask is not None and mask.dtype == np.bool_:
        ok = ok & _padded_mask(mask, geo.total, False)
    if nonpad is not None:
        # where the query block starts: nonpad - q_len valid keys precede it
        offset = (nonpad.astype(np.int64) - geo.q_len).reshape(-1, 1, 1, 1)
        ok = ok & (j < nonpad.reshape(-1, 1, 1, 1))
    else:
        offset = geo.past_len
    diff = i + offset - j          # how far key j lies before the query
    if opts.causal:
        ok = ok & (diff >= 0)
    if opts.left_window >= 0:
        ok = ok & (diff <= opts.left_window)
    if opts.right_window >= 0:
        ok = ok & (-diff <= opts.right_window)
    return ok


def _padded_mask(mask: np.ndarray, total: int, fill) -> np.ndarray:
    """The mask as 4-D, its last axis filled up to `total` keys with `fill`."""
    m = mask.reshape((1,) * (4 - mask.ndim) + mask.shape)
    pad = total - m.shape[-1]
    if pad:
        m = np.concatenate([m, np.full(m.shape[:-1] + (pad,), fill, m.dtype)], axis=-1)
    return m


def _softmax(logits: np.ndarray) -> np.ndarray:
    """Row softmax; a row of -inf gives zeros (its max shifts by 0, its sum is 0)."""
    top = logits.max(axis=-1, keepdims=True)
    e = np.exp(logits - np.where(np.isneginf(top), 0, top))
    total = e.sum(axis=-1, keepdims=True)
    return e / np.where(total == 0, 1, total)


@register("Attention", infer=_infer_attention, pattern=Pattern.OPAQUE, macs=_macs)
def _attention(call: Call, args):
    args = list(args) + [None] * (7 - len(args))
    geo = geometry(call.node, call.in_types)
    opts = options(call.node, call.in_types, geo)
    q, k, v, mask = args[Q], args[K], args[V], args[MASK]
    if geo.three_d:
        q, k, v = _heads(q, geo.q_heads), _heads(k, geo.kv_heads), _heads(v, geo.kv_heads)
    if args[PAST_KEY] is not None:
        k = np.concatenate([args[PAST_KEY], k], axis=2)
        v = np.concatenate([args[PAST_VALUE], v], axis=2)
    present_k, present_v = k, v
    k, v = np.repeat(k, geo.group, axis=1), np.repeat(v, geo.group, axis=1)
    root = q.dtype.type(math.sqrt(opts.scale))
    scores = np.matmul(q * root, np.swapaxes(k * root, 2, 3))
    if opts.softcap > 0:
        scores = opts.softcap * np.tanh(scores / opts.softcap)
    ok = allowed_keys(geo, opts, mask, args[NONPAD])
    bias = np.zeros((), q.dtype)
    if mask is not None and mask.dtype != np.bool_:
        bias = _padded_mask(mask, geo.total, -np.inf)
    with np.errstate(invalid="ignore", over="ignore"):
        bias = np.where(ok, bias, q.dtype.type(-np.inf))
        logits = scores + bias
        shown = {QK_BIASED: logits, QK_SOFTMAX: None}.get(opts.qk_mode, scores)
        probs = _softmax(logits.astype(opts.softmax_dtype))
        # a query whose every key is masked attends to nothing: Y = 0
        probs = np.where(np.isneginf(bias.max(axis=-1, keepdims=True)), 0, probs)
    probs = probs.astype(q.dtype)
    y = np.matmul(probs, v)
    if geo.three_d:
        y = y.transpose(0, 2, 1, 3).reshape(geo.y_shape)
    shown = probs if shown is None else shown
    outs = [y, present_k, present_v, np.broadcast_to(shown, geo.scores_shape)]
    return [np.ascontiguousarray(o, dtype=q.dtype) for o in outs[:len(call.out_types)]]


# ---- RotaryEmbedding ------------------------------------------------------------------

X, COS, SIN, POSITIONS = range(4)


@dataclass(frozen=True)
class Rotary:
    """RotaryEmbedding's sizes; the input seen as [batch, heads, seq, head]."""
    batch: int
    heads: int
    seq: int
    head: int
    rotary: int          # leading elements of each head rotated (even)
    three_d: bool
    interleaved: bool    # pairs (2k, 2k+1) rather than (k, k + rotary/2)

    @property
    def half(self) -> int:
        return self.rotary // 2


def rotary_geometry(node: Node, in_types) -> Rotary:
    x = in_types[X]
    if len(x.shape) == 4:
        b, h, s, d = x.shape
        three_d = False
    elif len(x.shape) == 3:
        h = int(node.attrs.get("num_heads", 0))
        if h < 1 or x.shape[2] % h:
            raise _fail(node, in_types, f"a 3-D input {list(x.shape)} needs num_heads "
                        "dividing its hidden size")
        b, s, d = x.shape[0], x.shape[1], x.shape[2] // h
        three_d = True
    else:
        raise _fail(node, in_types, f"input must be 3-D or 4-D, got {list(x.shape)}")
    rotary = int(node.attrs.get("rotary_embedding_dim", 0)) or d
    if rotary % 2 or rotary > d:
        raise _fail(node, in_types, f"rotary_embedding_dim {rotary} must be even and at most "
                    f"the head size {d}")
    return Rotary(b, h, s, d, rotary, three_d, bool(node.attrs.get("interleaved", 0)))


def _infer_rotary(sig: Sig):
    n = len(sig.node.inputs)
    if n not in (3, 4) or not all(sig.has(i) for i in (X, COS, SIN)):
        raise sig.fail(f"takes input, cos_cache, sin_cache and optional position_ids, got {n}")
    x = sig.in_types[X]
    if x.dtype not in ("float32", "float16"):
        raise UnsupportedError(f"{node_label(sig.node)}: RotaryEmbedding on {x.dtype} is not "
                               "supported (float32 and float16 are)")
    geo = rotary_geometry(sig.node, sig.in_types)
    cos, sin = sig.in_types[COS], sig.in_types[SIN]
    if cos != sin or cos.dtype != x.dtype:
        raise sig.fail(f"cos_cache {cos} and sin_cache {sin} must match, of type {x.dtype}")
    if sig.has(POSITIONS):
        pos = sig.in_types[POSITIONS]
        if pos.dtype != "int64" or pos.shape != (geo.batch, geo.seq):
            raise sig.fail(f"position_ids must be int64[{geo.batch}, {geo.seq}], got {pos}")
        if len(cos.shape) != 2 or cos.shape[1] != geo.half:
            raise sig.fail(f"with position_ids the caches are [positions, {geo.half}], got "
                           f"{list(cos.shape)}")
        v = sig.values[POSITIONS] if POSITIONS < len(sig.values) else None
        if v is not None and v.size and (v.min() < -cos.shape[0] or v.max() >= cos.shape[0]):
            raise sig.fail(f"position_ids outside the caches' {cos.shape[0]} positions")
    elif cos.shape != (geo.batch, geo.seq, geo.half):
        raise sig.fail(f"without position_ids the caches are [{geo.batch}, {geo.seq}, "
                       f"{geo.half}], got {list(cos.shape)}")
    return [TensorType(x.shape, x.dtype)]


@register("RotaryEmbedding", infer=_infer_rotary, pattern=Pattern.OPAQUE)
def _rotary(call: Call, args):
    geo = rotary_geometry(call.node, call.in_types)
    x, cos, sin = args[X], args[COS], args[SIN]
    pos = args[POSITIONS] if len(args) > POSITIONS else None
    if pos is not None:
        if pos.size and (pos.min() < -cos.shape[0] or pos.max() >= cos.shape[0]):
            raise _fail(call.node, call.in_types,
                        f"position_ids outside the caches' {cos.shape[0]} positions")
        cos, sin = cos[pos], sin[pos]
    x4 = _heads(x, geo.heads) if geo.three_d else x
    cos, sin = cos[:, None], sin[:, None]             # [batch, 1, seq, half]
    rot = x4[..., :geo.rotary]
    if geo.interleaved:
        a, b = rot[..., 0::2], rot[..., 1::2]
    else:
        a, b = rot[..., :geo.half], rot[..., geo.half:]
    first, second = cos * a - sin * b, sin * a + cos * b
    out = x4.copy()
    if geo.interleaved:
        out[..., 0:geo.rotary:2], out[..., 1:geo.rotary:2] = first, second
    else:
        out[..., :geo.half], out[..., geo.half:geo.rotary] = first, second
    if geo.three_d:
        out = out.transpose(0, 2, 1, 3).reshape(x.shape)
    return [np.ascontiguousarray(out, dtype=x.dtype)]


# ---- SwiGLU ------------------------------------------------------------------------------

def _float_only(sig: Sig, i: int, op: str) -> TensorType:
    t = sig.in_types[i]
    if t.dtype not in ("float32", "float16"):
        raise UnsupportedError(f"{node_label(sig.node)}: {op} on {t.dtype} is not supported "
                               "(float32 and float16 are)")
    return t


def _infer_swiglu(sig: Sig):
    if len(sig.node.inputs) != 2 or not (sig.has(0) and sig.has(1)):
        raise sig.fail(f"takes 2 inputs, got {len(sig.node.inputs)}")
    a, b = _float_only(sig, 0, "SwiGLU"), _float_only(sig, 1, "SwiGLU")
    if a.shape != b.shape:
        raise sig.fail(f"inputs must have one shape (no broadcasting), got {list(a.shape)} and "
                       f"{list(b.shape)}")
    return [a]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (1 / (1 + np.exp(-x))).astype(x.dtype)


@register("SwiGLU", infer=_infer_swiglu, pattern=Pattern.ELEMWISE)
def _swiglu(call: Call, args):
    a, b = args
    alpha = a.dtype.type(call.attrs.get("alpha", 1.0))
    with np.errstate(over="ignore"):
        return [(a * _sigmoid(alpha * a) * b).astype(a.dtype)]


# ---- TensorScatter -----------------------------------------------------------------------

CACHE, UPDATE, WRITE_AT = range(3)
SCATTER_MODES = ("linear", "circular")


def scatter_axis(sig_or_call) -> int:
    rank = len(sig_or_call.in_types[CACHE].shape)
    axis = int(sig_or_call.attrs.get("axis", -2))
    if not -rank < axis < rank or axis % rank == 0:
        raise _fail(sig_or_call.node, sig_or_call.in_types,
                    f"axis {axis} must name a sequence axis after the batch axis (rank {rank})")
    return axis % rank


def _infer_tensor_scatter(sig: Sig):
    n = len(sig.node.inputs)
    if n not in (2, 3) or not (sig.has(CACHE) and sig.has(UPDATE)):
        raise sig.fail(f"takes past_cache, update and optional write_indices, got {n}")
    cache, update = sig.in_types[CACHE], sig.in_types[UPDATE]
    mode = sig.attrs.get("mode", "linear")
    if mode not in SCATTER_MODES:
        raise sig.fail(f"mode '{mode}' is not linear or circular")
    if update.dtype != cache.dtype or len(update.shape) != len(cache.shape):
        raise sig.fail(f"update {update} must have past_cache's type and rank ({cache})")
    axis = scatter_axis(sig)
    if any(u != c for a, (u, c) in enumerate(zip(update.shape, cache.shape)) if a != axis) \
            or update.shape[axis] > cache.shape[axis]:
        raise sig.fail(f"update {list(update.shape)} does not fit past_cache "
                       f"{list(cache.shape)} along axis {axis}")
    if sig.has(WRITE_AT):
        w = sig.in_types[WRITE_AT]
        if w.dtype != "int64" or w.shape != (cache.shape[0],):
            raise sig.fail(f"write_indices must be int64[{cache.shape[0]}], got {w}")
        v = sig.values[WRITE_AT] if WRITE_AT < len(sig.values) else None
        if v is not None and mode == "linear" and not _writes_fit(v, cache, update, axis):
            raise sig.fail("write_indices write past the end of the cache")
    return [cache]


def _writes_fit(w: np.ndarray, cache: TensorType, update: TensorType, axis: int) -> bool:
    """Linear mode: each batch's block lies inside the cache."""
    return bool(np.all((w >= 0) & (w + update.shape[axis] <= cache.shape[axis])))


@register("TensorScatter", infer=_infer_tensor_scatter, pattern=Pattern.INJECTIVE)
def _tensor_scatter(call: Call, args):
    cache, update = args[CACHE], args[UPDATE]
    w = args[WRITE_AT] if len(args) > WRITE_AT and args[WRITE_AT] is not None else \
        np.zeros(cache.shape[0], np.int64)
    axis = scatter_axis(call)
    circular = call.attrs.get("mode", "linear") == "circular"
    if not circular and not _writes_fit(w, call.in_types[CACHE], call.in_types[UPDATE], axis):
        raise _fail(call.node, call.in_types, "write_indices write past the end of the cache")
    out = cache.copy()
    steps = np.arange(update.shape[axis])
    for b in range(cache.shape[0]):
        at = (w[b] + steps) % cache.shape[axis] if circular else w[b] + steps
        np.moveaxis(out[b], axis - 1, 0)[at] = np.moveaxis(update[b], axis - 1, 0)
    return [out]


# ---- CausalConvWithState -----------------------------------------------------------------

CONV_X, CONV_W, CONV_BIAS, CONV_STATE = range(4)
CONV_ACTIVATIONS = ("none", "silu", "swish")


def _infer_causal_conv(sig: Sig):
    n = len(sig.node.inputs)
    if n not in (2, 3, 4) or not (sig.has(CONV_X) and sig.has(CONV_W)):
        raise sig.fail(f"takes input, weight and optional bias and past_state, got {n}")
    x, w = _float_only(sig, CONV_X, "CausalConvWithState"), sig.in_types[CONV_W]
    if sig.attrs.get("activation", "none") not in CONV_ACTIVATIONS:
        raise sig.fail(f"activation '{sig.attrs['activation']}' is not none, silu or swish")
    if len(x.shape) != 3:
        raise sig.fail(f"input must be [batch, channels, length], got {list(x.shape)}")
    b, c, _ = x.shape
    if len(w.shape) != 3 or w.shape[:2] != (c, 1) or w.shape[2] < 1 or w.dtype != x.dtype:
        raise sig.fail(f"weight must be {x.dtype}[{c}, 1, k] (depthwise), got {w}")
    k = w.shape[2]
    if sig.has(CONV_BIAS) and sig.in_types[CONV_BIAS] != TensorType((c,), x.dtype):
        raise sig.fail(f"bias must be {x.dtype}[{c}], got {sig.in_types[CONV_BIAS]}")
    state = TensorType((b, c, k - 1), x.dtype)
    if sig.has(CONV_STATE) and sig.in_types[CONV_STATE] != state:
        raise sig.fail(f"past_state must be {state}, got {sig.in_types[CONV_STATE]}")
    return [x, state]


@register("CausalConvWithState", infer=_infer_causal_conv, pattern=Pattern.OPAQUE)
def _causal_conv(call: Call, args):
    args = list(args) + [None] * (4 - len(args))
    x, w, bias, state = args
    k = w.shape[2]
    if state is None:
        state = np.zeros(x.shape[:2] + (k - 1,), x.dtype)
    padded = np.concatenate([state, x], axis=2)
    length = x.shape[2]
    windows = np.stack([padded[:, :, m:m + length] for m in range(k)], axis=-1)
    y = np.einsum("bctm,cm->bct", windows, w[:, 0])
    if bias is not None:
        y = y + bias[:, None]
    if call.attrs.get("activation", "none") != "none":
        with np.errstate(over="ignore"):
            y = y * _sigmoid(y)
    return [y.astype(x.dtype), np.ascontiguousarray(padded[:, :, length:])]


# ---- LinearAttention ---------------------------------------------------------------------

LQ, LK, LV, LSTATE, DECAY, BETA = range(6)
UPDATE_RULES = ("linear", "gated", "delta", "gated_delta")


@dataclass(frozen=True)
class Linear:
    """LinearAttention's sizes and form; inputs are [batch, time, heads * size]."""
    batch: int
    time: int
    q_heads: int
    kv_heads: int
    key: int             # head size of Q and K
    value: int
    gated: bool          # the state decays by exp(decay) each step
    delta: bool          # the delta rule: values corrected by what the state recalls
    decay_per_key: bool  # decay per key element (else one per head)
    beta_per_head: bool  # beta per head (else one for all)
    scale: float

    @property
    def group(self) -> int:
        return self.q_heads // self.kv_heads

    @property
    def state_shape(self) -> tuple[int, ...]:
        return (self.batch, self.kv_heads, self.key, self.value)


def linear_geometry(node: Node, in_types) -> Linear:
    def fail(msg):
        return _fail(node, in_types, msg)
    rule = node.attrs.get("update_rule", "gated_delta")
    if rule not in UPDATE_RULES:
        raise fail(f"update_rule '{rule}' is not one of {', '.join(UPDATE_RULES)}")
    hq, hkv = int(node.attrs.get("q_num_heads", 0)), int(node.attrs.get("kv_num_heads", 0))
    if hq < 1 or hkv < 1 or hq % hkv:
        raise fail(f"q_num_heads {hq} must be a positive multiple of kv_num_heads {hkv}")
    q, k, v = in_types[LQ], in_types[LK], in_types[LV]
    if any(len(t.shape) != 3 for t in (q, k, v)):
        raise fail("query, key and value must be [batch, time, heads * size]")
    b, t = q.shape[:2]
    if k.shape[:2] != (b, t) or v.shape[:2] != (b, t) or q.shape[2] % hq or v.shape[2] % hkv \
            or k.shape[2] * hq != q.shape[2] * hkv:
        raise fail(f"query {list(q.shape)}, key {list(k.shape)} and value {list(v.shape)} do "
                   f"not split into {hq} and {hkv} heads")
    dk, dv = q.shape[2] // hq, v.shape[2] // hkv
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    for i, what, needed in ((DECAY, "decay", gated), (BETA, "beta", delta)):
        if _present(in_types, i) != needed:
            raise fail(f"update_rule '{rule}' {'needs' if needed else 'takes no'} {what}")
    decay_per_key = gated and in_types[DECAY].shape == (b, t, hkv * dk)
    if gated and not decay_per_key and in_types[DECAY].shape != (b, t, hkv):
        raise fail(f"decay must be [{b}, {t}, {hkv}] or [{b}, {t}, {hkv * dk}], got "
                   f"{list(in_types[DECAY].shape)}")
    beta_per_head = delta and in_types[BETA].shape == (b, t, hkv)
    if delta and not beta_per_head and in_types[BETA].shape != (b, t, 1):
        raise fail(f"beta must be [{b}, {t}, {hkv}] or [{b}, {t}, 1], got "
                   f"{list(in_types[BETA].shape)}")
    scale = float(node.attrs.get("scale", 0.0)) or 1 / math.sqrt(dk)
    return Linear(b, t, hq, hkv, dk, dv, gated, delta, decay_per_key, beta_per_head, scale)


def _infer_linear_attention(sig: Sig):
    n = len(sig.node.inputs)
    if not 3 <= n <= 6 or not all(sig.has(i) for i in (LQ, LK, LV)):
        raise sig.fail(f"takes query, key, value and up to 3 optional inputs, got {n}")
    for i in range(n):
        if sig.has(i):
            _float_only(sig, i, "LinearAttention")
    geo = linear_geometry(sig.node, sig.in_types)
    # the state's type (S) is past_state's, else the query's
    dtype = sig.in_types[LQ].dtype
    state = TensorType(geo.state_shape, sig.in_types[LSTATE].dtype if sig.has(LSTATE) else dtype)
    if sig.has(LSTATE) and sig.in_types[LSTATE] != state:
        raise sig.fail(f"past_state must be {state}, got {sig.in_types[LSTATE]}")
    return [TensorType((geo.batch, geo.time, geo.q_heads * geo.value), dtype), state]


@register("LinearAttention", infer=_infer_linear_attention, pattern=Pattern.OPAQUE)
def _linear_attention(call: Call, args):
    args = list(args) + [None] * (6 - len(args))
    geo = linear_geometry(call.node, call.in_types)
    q, k, v = (_heads(args[LQ], geo.q_heads), _heads(args[LK], geo.kv_heads),
               _heads(args[LV], geo.kv_heads))
    state = (np.zeros(geo.state_shape, np.float32) if args[LSTATE] is None
             else args[LSTATE].astype(np.float32))
    out = np.zeros((geo.batch, geo.q_heads, geo.time, geo.value), np.float32)
    for t in range(geo.time):
        kt, vt = k[:, :, t], v[:, :, t]                     # [batch, kv heads, size]
        if geo.gated:
            d = args[DECAY][:, t].reshape(geo.batch, geo.kv_heads, -1)
            state = state * np.exp(d)[..., None]
        if geo.delta:
            recalled = np.einsum("bhkv,bhk->bhv", state, kt)
            beta = args[BETA][:, t].reshape(geo.batch, -1, 1)
            vt = beta * (vt - recalled)
        state = state + kt[..., :, None] * vt[..., None, :]
        reads = np.repeat(state, geo.group, axis=1)
        out[:, :, t] = geo.scale * np.einsum("bhk,bhkv->bhv", q[:, :, t], reads)
    y = out.transpose(0, 2, 1, 3).reshape(geo.batch, geo.time, -1)
    return [y.astype(np.float32), state.astype(np.float32)]

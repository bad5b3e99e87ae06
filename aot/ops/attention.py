"""Transformer ops (ONNX opsets 23-25): Attention and RotaryEmbedding.

Attention is one op here, not a decomposition: its geometry (3-D inputs
split into heads, grouped-query heads, the key/value cache) and its masks
(boolean or additive `attn_mask` broadcast from the right and padded to the
cache length, `is_causal` aligned to the cache's end, the sliding window,
`nonpad_kv_seqlen`) are worked out once, in `Geometry` and `Options`, which
the reference below and the kernel rule (aot/lower/attention.py) share.

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
    if q.dtype != "float32":
        raise UnsupportedError(f"{node_label(sig.node)}: Attention on {q.dtype} is not "
                               "supported (float32 is)")
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
    if x.dtype != "float32":
        raise UnsupportedError(f"{node_label(sig.node)}: RotaryEmbedding on {x.dtype} is not "
                               "supported (float32 is)")
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

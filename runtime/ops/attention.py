"""Attention kernels: Attention, RotaryEmbedding, LinearAttention, FlexAttention
and FusedAttention (the native fusion's form).

Grouped-query attention is computed without repeating K and V: the query
heads are viewed as (kv_num_heads, group) so that each K/V head broadcasts
over its contiguous group of query heads.
"""
import math

import numpy

from .activation import softmax as _softmax_kernel
from .registry import CUSTOM_DOMAIN, LATEST, dim, kernel

#: ONNX TensorProto element types a ``softmax_precision`` attribute may name.
_PRECISIONS = {1: numpy.float32, 10: numpy.float16, 11: numpy.float64}


def _split_heads(x, num_heads):
    """(batch, seq, heads * size) -> (batch, heads, seq, size)."""
    batch, seq, hidden = x.shape
    return x.reshape(batch, seq, num_heads, hidden // num_heads).transpose(0, 2, 1, 3)


def _merge_heads(x):
    """(batch, heads, seq, size) -> (batch, seq, heads * size)."""
    batch, heads, seq, size = x.shape
    return x.transpose(0, 2, 1, 3).reshape(batch, seq, heads * size)


def _grouped_matmul(xp, a, b):
    """``a @ b`` where ``a`` has q_num_heads and ``b`` kv_num_heads heads on axis 1."""
    batch, q_heads = a.shape[:2]
    kv_heads = b.shape[1]
    grouped = a.reshape((batch, kv_heads, q_heads // kv_heads) + a.shape[2:])
    out = xp.matmul(grouped, b[:, :, None])
    return out.reshape((batch, q_heads) + out.shape[3:])


def _scaled_scores(xp, Q, K, scale):
    """Q K^T * scale with both operands scaled by sqrt(scale) (as ONNX specifies,
    to keep the product in range)."""
    if scale is None:
        scale = 1.0 / math.sqrt(Q.shape[-1])
    root = Q.dtype.type(math.sqrt(scale))
    return _grouped_matmul(xp, Q * root, K.swapaxes(-1, -2) * root)


def _softmax(xp, x):
    e = xp.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@kernel('Attention', versions=(23, 24), recompute=False)
def attention(xp, Q, K, V, attn_mask=None, past_key=None, past_value=None,
              nonpad_kv_seqlen=None, *, is_causal=0, q_num_heads=None, kv_num_heads=None,
              qk_matmul_output_mode=0, scale=None, softcap=0.0, softmax_precision=None):
    dtype = Q.dtype
    three_d = Q.ndim == 3
    if three_d:
        Q = _split_heads(Q, q_num_heads)
        K = _split_heads(K, kv_num_heads)
        V = _split_heads(V, kv_num_heads)
    if past_key is not None:
        K = xp.concatenate([past_key, K], axis=2)
        V = xp.concatenate([past_value, V], axis=2)
    q_len, total = Q.shape[2], K.shape[2]
    past_len = 0 if past_key is None else past_key.shape[2]

    scores = _scaled_scores(xp, Q, K, scale)
    qk_outputs = [scores]
    if softcap:
        cap = dtype.type(softcap)
        scores = xp.tanh(scores / cap) * cap
    qk_outputs.append(scores)

    neg_inf = dtype.type(-numpy.inf)
    bias = None
    if attn_mask is not None:
        if attn_mask.dtype == numpy.bool_:
            attn_mask = xp.where(attn_mask, dtype.type(0), neg_inf)
        pad = total - attn_mask.shape[-1]
        if pad:  # a short mask is padded with -inf up to the total length
            widths = [(0, 0)] * (attn_mask.ndim - 1) + [(0, pad)]
            attn_mask = xp.pad(attn_mask, widths, constant_values=neg_inf)
        bias = attn_mask.astype(dtype, copy=False)
    if is_causal:
        # Query i sits at absolute position past_len + i.
        future = (xp.arange(q_len)[:, None] + past_len) < xp.arange(total)[None, :]
        causal = xp.where(future, neg_inf, dtype.type(0))
        bias = causal if bias is None else bias + causal
    if nonpad_kv_seqlen is not None:
        padding = xp.arange(total)[None, :] >= nonpad_kv_seqlen[:, None]
        padding = xp.where(padding, neg_inf, dtype.type(0))[:, None, None, :]
        bias = padding if bias is None else bias + padding
    if bias is not None:
        scores = scores + bias
    qk_outputs.append(scores)

    precision = _PRECISIONS.get(softmax_precision, dtype)
    probs = _softmax(xp, scores.astype(precision, copy=False)).astype(dtype, copy=False)
    qk_outputs.append(probs)

    Y = _grouped_matmul(xp, probs, V)
    if three_d:
        Y = _merge_heads(Y)
    return Y, K, V, qk_outputs[qk_matmul_output_mode]


@kernel('RotaryEmbedding', versions=(23, 23))
def rotary_embedding(xp, X, cos_cache, sin_cache, position_ids=None, *, interleaved=0,
                     num_heads=0, rotary_embedding_dim=0):
    shape = X.shape
    if X.ndim == 3:
        # (batch, seq, hidden) -> (batch, seq, heads, head): caches broadcast on axis 2.
        x = X.reshape(shape[0], shape[1], num_heads, -1)
        head_axis = 2
    else:
        # (batch, heads, seq, head): caches broadcast on axis 1.
        x = X
        head_axis = 1
    if position_ids is not None:
        cos_cache, sin_cache = cos_cache[position_ids], sin_cache[position_ids]
    cos = xp.expand_dims(cos_cache, head_axis)
    sin = xp.expand_dims(sin_cache, head_axis)
    dim = rotary_embedding_dim or x.shape[-1]
    rotate, keep = x[..., :dim], x[..., dim:]
    if interleaved:
        x1, x2 = rotate[..., 0::2], rotate[..., 1::2]
    else:
        x1, x2 = rotate[..., :dim // 2], rotate[..., dim // 2:]
    real = cos * x1 - sin * x2
    imag = sin * x1 + cos * x2
    if interleaved:
        rotated = xp.stack([real, imag], axis=-1).reshape(rotate.shape)
    else:
        rotated = xp.concatenate([real, imag], axis=-1)
    return xp.concatenate([rotated, keep], axis=-1).astype(X.dtype, copy=False).reshape(shape)


@kernel('LinearAttention', versions=(27, LATEST))
def linear_attention(xp, query, key, value, past_state=None, decay=None, beta=None, *,
                     q_num_heads, kv_num_heads, scale=0.0, update_rule='gated_delta',
                     chunk_size=64):
    """The recurrence runs token by token in float32 (the ONNX reference
    precision); ``chunk_size`` is a performance hint only."""
    if update_rule not in ('linear', 'gated', 'delta', 'gated_delta'):
        raise ValueError('LinearAttention: unknown update_rule %r' % update_rule)
    gated = update_rule in ('gated', 'gated_delta')
    delta = update_rule in ('delta', 'gated_delta')
    if gated and decay is None or delta and beta is None:
        raise ValueError('LinearAttention: update_rule %r needs the %s input'
                         % (update_rule, 'decay' if gated and decay is None else 'beta'))
    f32 = numpy.float32
    batch, seq = query.shape[:2]
    q = query.reshape(batch, seq, q_num_heads, -1).astype(f32)
    k = key.reshape(batch, seq, kv_num_heads, -1).astype(f32)
    v = value.reshape(batch, seq, kv_num_heads, -1).astype(f32)
    d_k, d_v = q.shape[-1], v.shape[-1]
    group = q_num_heads // kv_num_heads
    if gated:
        # Per-key-dimension (d_k) or per-head (1) decay, applied to state rows.
        decay = xp.exp(decay.reshape(batch, seq, kv_num_heads, -1).astype(f32))[..., None]
    if delta:
        beta = beta.reshape(batch, seq, -1, 1).astype(f32)
    if not scale:
        scale = 1.0 / math.sqrt(d_k)
    state = (xp.zeros((batch, kv_num_heads, d_k, d_v), dtype=f32) if past_state is None
             else past_state.astype(f32))
    outputs = []
    for t in range(seq):
        k_t = k[:, t]
        if gated:
            state = state * decay[:, t]
        if delta:
            retrieved = xp.matmul(k_t[:, :, None, :], state)[:, :, 0]
            write = beta[:, t] * (v[:, t] - retrieved)
        else:
            write = v[:, t]
        state = state + k_t[..., :, None] * write[..., None, :]
        q_t = q[:, t].reshape(batch, kv_num_heads, group, d_k)
        outputs.append(xp.matmul(q_t, state).reshape(batch, q_num_heads * d_v))
    out = xp.stack(outputs, axis=1) * f32(scale)
    return out.astype(query.dtype), state.astype(query.dtype)


@kernel('FlexAttention', domain='ai.onnx.preview')
def flex_attention(xp, Q, K, V, *, scale=None, softmax_precision=None, score_mod=None,
                   prob_mod=None):
    dtype = Q.dtype
    default = numpy.float64 if dtype == numpy.float64 else numpy.float32
    precision = _PRECISIONS.get(softmax_precision, default)
    scores = _scaled_scores(xp, Q, K, scale).astype(precision, copy=False)
    if score_mod is not None:
        scores = score_mod(scores)[0]
    probs = _softmax(xp, scores)
    if prob_mod is not None:
        probs = prob_mod(probs)[0]
    return _grouped_matmul(xp, probs, V.astype(precision, copy=False)).astype(dtype, copy=False)


# -- fused forms (org.chainer_compiler) --------------------------------------------------


def _fused_attention_types(inputs, attributes):
    """q's type with its last axis v's: (..., M, E) from q (..., M, D), kt
    (..., D, N) and v (..., N, E)."""
    q, v = inputs[0], inputs[2] if len(inputs) > 2 else None
    if q is None or q[1] is None or dim(v, len(q[1]) - 1) is None:
        return [None]
    return [(q[0], tuple(q[1][:-1]) + (dim(v, len(q[1]) - 1),))]


@kernel('FusedAttention', domain=CUSTOM_DOMAIN, outputs=('y',), types=_fused_attention_types,
        gradient=False, recompute=False, samples='per_sample')
def fused_attention(xp, q, kt, v, mask=None, *, scale=1.0):
    """``Softmax(scale * (q @ kt) + mask) @ v`` along the last axis: the
    nodes of an attention (MatMul, a Mul by a scalar, an Add of a mask,
    Softmax, MatMul) as the native backend's fusion makes them one
    instruction (runtime/native/fusion.py), whose kernel never stores the
    scores whole.  Here each step is the unfused node's kernel, so the
    values are those of the nodes."""
    scores = xp.matmul(q, kt)
    if scale != 1.0:
        scores = scores * scores.dtype.type(scale)
    if mask is not None:
        scores = scores + mask
    return xp.matmul(_softmax_kernel(xp, scores), v)

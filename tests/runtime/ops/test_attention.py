"""Tests for the attention kernels (Attention, RotaryEmbedding, LinearAttention,
FlexAttention), with onnx.reference as the oracle where it helps."""
import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from chainer_compiler.runtime.ops.attention import (
    attention,
    flex_attention,
    linear_attention,
    rotary_embedding,
)


def _reference(op, inputs, n_outputs, opset, **attrs):
    """Run a one-node ``op`` model on onnx.reference; ``inputs`` is a list (None = omitted)."""
    names = ['in%d' % i if x is not None else '' for i, x in enumerate(inputs)]
    outputs = ['out%d' % i for i in range(n_outputs)]
    graph = helper.make_graph(
        [helper.make_node(op, names, outputs, **attrs)], 'g',
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), None)
         for n, x in zip(names, inputs) if n],
        [helper.make_tensor_value_info(n, 0, None) for n in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', opset)])
    return ReferenceEvaluator(model).run(None, {n: x for n, x in zip(names, inputs) if n})


def _rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# -- Attention -----------------------------------------------------------------

def test_attention_gqa_with_past_causal_mask_and_softcap_matches_reference():
    rng = np.random.default_rng(0)
    Q, K, V = _rand(rng, 2, 6, 3, 4), _rand(rng, 2, 2, 3, 4), _rand(rng, 2, 2, 3, 5)
    mask = _rand(rng, 2, 1, 3, 7)
    past_k, past_v = _rand(rng, 2, 2, 4, 4), _rand(rng, 2, 2, 4, 5)
    attrs = dict(is_causal=1, softcap=2.0, qk_matmul_output_mode=2)
    got = attention(np, Q, K, V, mask, past_k, past_v, **attrs)
    expected = _reference('Attention', [Q, K, V, mask, past_k, past_v], 4, 23, **attrs)
    for g, e in zip(got, expected):
        assert g.dtype == np.float32 and g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def test_attention_3d_matches_4d_and_gqa_matches_repeated_heads():
    rng = np.random.default_rng(1)
    Q, K, V = _rand(rng, 2, 4, 3 * 8), _rand(rng, 2, 5, 8), _rand(rng, 2, 5, 6)
    Y3, present_k, present_v, _ = attention(np, Q, K, V, q_num_heads=3, kv_num_heads=1)
    assert Y3.shape == (2, 4, 3 * 6) and present_k.shape == (2, 1, 5, 8)

    def heads(x, n):
        return x.reshape(x.shape[0], x.shape[1], n, -1).transpose(0, 2, 1, 3)

    Y4 = attention(np, heads(Q, 3), heads(K, 1).repeat(3, axis=1), heads(V, 1).repeat(3, axis=1))[0]
    np.testing.assert_allclose(Y3, Y4.transpose(0, 2, 1, 3).reshape(2, 4, 18), rtol=1e-6)


def test_bool_mask_short_mask_and_nonpad_lengths_are_neg_inf_biases():
    rng = np.random.default_rng(2)
    Q, K, V = _rand(rng, 2, 2, 3, 4), _rand(rng, 2, 2, 5, 4), _rand(rng, 2, 2, 5, 4)
    keep = rng.random((3, 5)) < 0.7
    keep[:, 0] = True
    as_float = np.where(keep, 0, -np.inf).astype(np.float32)
    np.testing.assert_allclose(attention(np, Q, K, V, keep)[0],
                               attention(np, Q, K, V, as_float)[0], rtol=1e-6)
    # A mask shorter than the key length is padded with -inf.
    np.testing.assert_allclose(attention(np, Q, K, V, as_float[:, :3])[0],
                               attention(np, Q, K, V, np.pad(as_float[:, :3], [(0, 0), (0, 2)],
                                                             constant_values=-np.inf))[0])
    # nonpad_kv_seqlen masks the padding keys of each batch entry.
    lengths = np.array([5, 2], np.int64)
    by_length = attention(np, Q, K, V, None, None, None, lengths)[0]
    np.testing.assert_allclose(by_length[0], attention(np, Q, K, V)[0][0], rtol=1e-6)
    np.testing.assert_allclose(by_length[1], attention(np, Q[1:], K[1:, :, :2], V[1:, :, :2])[0][0],
                               rtol=1e-6)


def test_causal_mask_is_offset_by_the_past_length():
    rng = np.random.default_rng(3)
    Q, K, V = _rand(rng, 1, 1, 2, 4), _rand(rng, 1, 1, 2, 4), _rand(rng, 1, 1, 2, 4)
    past_k, past_v = _rand(rng, 1, 1, 3, 4), _rand(rng, 1, 1, 3, 4)
    Y, pk, pv, probs = attention(np, Q, K, V, None, past_k, past_v, is_causal=1,
                                 qk_matmul_output_mode=3)
    np.testing.assert_array_equal(pk, np.concatenate([past_k, K], axis=2))
    # Query 0 is at position 3: it sees keys 0..3 but not key 4.
    assert probs[0, 0, 0, 4] == 0 and probs[0, 0, 0, 3] > 0 and probs[0, 0, 1, 4] > 0
    np.testing.assert_allclose(probs.sum(-1), 1, rtol=1e-6)


def test_qk_matmul_output_modes_and_scale():
    rng = np.random.default_rng(4)
    Q, K, V = _rand(rng, 1, 2, 3, 4), _rand(rng, 1, 2, 3, 4), _rand(rng, 1, 2, 3, 4)
    mask = _rand(rng, 3, 3)
    outs = [attention(np, Q, K, V, mask, softcap=1.5, scale=0.3, qk_matmul_output_mode=m)[3]
            for m in range(4)]
    raw = Q @ K.swapaxes(-1, -2) * 0.3
    np.testing.assert_allclose(outs[0], raw, rtol=1e-5)
    np.testing.assert_allclose(outs[1], 1.5 * np.tanh(raw / 1.5), rtol=1e-5)
    np.testing.assert_allclose(outs[2], outs[1] + mask, rtol=1e-5)
    e = np.exp(outs[2] - outs[2].max(-1, keepdims=True))
    np.testing.assert_allclose(outs[3], e / e.sum(-1, keepdims=True), rtol=1e-5)


def test_float16_is_preserved_with_float32_softmax():
    rng = np.random.default_rng(5)
    Q, K, V = (_rand(rng, 1, 2, 3, 8, dtype=np.float16) for _ in range(3))
    Y, _, _, qk = attention(np, Q, K, V, softmax_precision=1, qk_matmul_output_mode=3)
    assert Y.dtype == qk.dtype == np.float16
    ref = attention(np, *(x.astype(np.float32) for x in (Q, K, V)))[0]
    np.testing.assert_allclose(Y, ref, atol=2e-3)


# -- RotaryEmbedding -------------------------------------------------------------

@pytest.mark.parametrize('interleaved', [0, 1])
@pytest.mark.parametrize('rotary_dim', [0, 4])
def test_rotary_embedding_matches_reference(interleaved, rotary_dim):
    rng = np.random.default_rng(6)
    X = _rand(rng, 2, 3, 2 * 8)  # 3-D input, 2 heads of size 8
    half = (rotary_dim or 8) // 2
    cos, sin = _rand(rng, 10, half), _rand(rng, 10, half)
    positions = rng.integers(0, 10, (2, 3)).astype(np.int64)
    attrs = dict(interleaved=interleaved, rotary_embedding_dim=rotary_dim, num_heads=2)
    got = rotary_embedding(np, X, cos, sin, positions, **attrs)
    expected = _reference('RotaryEmbedding', [X, cos, sin, positions], 1, 23, **attrs)[0]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    if rotary_dim:
        np.testing.assert_array_equal(got.reshape(2, 3, 2, 8)[..., 4:],
                                      X.reshape(2, 3, 2, 8)[..., 4:])


def test_rotary_embedding_4d_without_position_ids():
    rng = np.random.default_rng(7)
    X = _rand(rng, 2, 3, 4, 6)  # (batch, heads, seq, head)
    angles = rng.random((2, 4, 3)).astype(np.float32)
    got = rotary_embedding(np, X, np.cos(angles), np.sin(angles))
    # A rotation keeps the norm of every (x_i, x_{i+3}) pair.
    np.testing.assert_allclose(got[..., :3] ** 2 + got[..., 3:] ** 2,
                               X[..., :3] ** 2 + X[..., 3:] ** 2, rtol=1e-5)
    expected = _reference('RotaryEmbedding', [X, np.cos(angles), np.sin(angles)], 1, 23)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-6)


# -- LinearAttention -------------------------------------------------------------

@pytest.mark.parametrize('rule', ['linear', 'gated', 'delta', 'gated_delta'])
def test_linear_attention_matches_reference_with_gqa_and_past(rule):
    rng = np.random.default_rng(8)
    B, T, Hq, Hkv, dk, dv = 2, 3, 4, 2, 4, 3
    q, k, v = _rand(rng, B, T, Hq * dk), _rand(rng, B, T, Hkv * dk), _rand(rng, B, T, Hkv * dv)
    k = k / np.linalg.norm(k.reshape(B, T, Hkv, dk), axis=-1).repeat(dk, axis=-1)
    past = _rand(rng, B, Hkv, dk, dv)
    decay = -rng.random((B, T, Hkv)).astype(np.float32)  # per-head decay
    beta = rng.random((B, T, Hkv)).astype(np.float32)
    attrs = dict(q_num_heads=Hq, kv_num_heads=Hkv, update_rule=rule)
    gated, delta = rule.startswith('gated'), rule.endswith('delta')
    inputs = [q, k, v, past, decay if gated else None] + ([beta] if delta else [])
    got = linear_attention(np, *inputs, **attrs)
    expected = _reference('LinearAttention', inputs, 2, 27, **attrs)
    for g, e in zip(got, expected):
        assert g.dtype == np.float32 and g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


def test_linear_rule_is_causal_unnormalised_attention():
    rng = np.random.default_rng(9)
    q, k, v = _rand(rng, 1, 5, 4), _rand(rng, 1, 5, 4), _rand(rng, 1, 5, 2)
    out, state = linear_attention(np, q, k, v, q_num_heads=1, kv_num_heads=1,
                                  update_rule='linear', scale=0.5)
    scores = np.tril(q[0] @ k[0].T)
    np.testing.assert_allclose(out[0], 0.5 * scores @ v[0], rtol=1e-5)
    np.testing.assert_allclose(state[0, 0], k[0].T @ v[0], rtol=1e-5)


def test_linear_attention_float16_and_bad_rule():
    rng = np.random.default_rng(10)
    q, k, v = (_rand(rng, 1, 2, 8, dtype=np.float16) for _ in range(3))
    out, state = linear_attention(np, q, k, v, q_num_heads=2, kv_num_heads=2,
                                  update_rule='linear')
    assert out.dtype == state.dtype == np.float16 and state.shape == (1, 2, 4, 4)
    with pytest.raises(ValueError, match='update_rule'):
        linear_attention(np, q, k, v, q_num_heads=2, kv_num_heads=2, update_rule='lstm')
    with pytest.raises(ValueError, match='decay'):
        linear_attention(np, q, k, v, q_num_heads=2, kv_num_heads=2, update_rule='gated')


# -- FlexAttention ---------------------------------------------------------------

def test_flex_attention_score_mod_causal_equals_causal_attention():
    rng = np.random.default_rng(11)
    Q, K, V = _rand(rng, 1, 4, 3, 8), _rand(rng, 1, 2, 3, 8), _rand(rng, 1, 2, 3, 5)

    def causal(scores):
        return [np.where(np.tril(np.ones(scores.shape[-2:], bool)), scores, -np.inf)]

    got = flex_attention(np, Q, K, V, score_mod=causal)
    assert got.dtype == np.float32 and got.shape == (1, 4, 3, 5)
    np.testing.assert_allclose(got, attention(np, Q, K, V, is_causal=1)[0], rtol=1e-5)


def test_flex_attention_prob_mod_and_double_precision():
    rng = np.random.default_rng(12)
    Q, K, V = (_rand(rng, 1, 1, 2, 4, dtype=np.float64) for _ in range(3))
    seen = []

    def halve(probs):
        seen.append(probs.dtype)
        return [probs * 0.5]

    got = flex_attention(np, Q, K, V, prob_mod=halve, scale=0.7)
    assert seen == [np.float64] and got.dtype == np.float64
    np.testing.assert_allclose(got, 0.5 * attention(np, Q, K, V, scale=0.7)[0], rtol=1e-12)

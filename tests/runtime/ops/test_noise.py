"""Tests for the random kernels: Dropout, Bernoulli, RandomUniform/Normal(-Like)
and Multinomial."""
import numpy as np
import pytest

from chainer_compiler.runtime.ops import noise

_X = np.random.default_rng(0).standard_normal((3, 4, 5)).astype(np.float32)


# -- Dropout ----------------------------------------------------------------------

def test_dropout_inference_is_identity_with_a_full_bool_mask():
    assert noise.dropout(np, _X) is _X
    y, mask = noise.dropout(np, _X, np.array(0.7, np.float32), np.array(False), n_outputs=2)
    assert y is _X and mask.dtype == np.bool_ and mask.all() and mask.shape == _X.shape


def test_training_dropout_scales_kept_values_and_is_seeded():
    ratio, training = np.array(0.75, np.float32), np.array(True)
    y, mask = noise.dropout(np, _X, ratio, training, seed=0, n_outputs=2)
    # The seeded stream is RandomState(seed).uniform, as in onnx's test data.
    expected_mask = np.random.RandomState(0).uniform(0, 1, _X.shape) >= 0.75
    np.testing.assert_array_equal(mask, expected_mask)
    np.testing.assert_allclose(y, np.where(mask, _X * 4, 0), rtol=1e-6)
    assert y.dtype == np.float32 and mask.dtype == np.bool_
    again = noise.dropout(np, _X, ratio, training, seed=0, n_outputs=2)[1]
    np.testing.assert_array_equal(again, mask)


def test_training_dropout_without_seed_differs_between_runs():
    big = np.ones(4096, np.float32)
    a = noise.dropout(np, big, None, np.array(True))
    b = noise.dropout(np, big, None, np.array(True))
    assert not np.array_equal(a, b)
    assert set(np.unique(a)) <= {0.0, 2.0} and 0.4 < (a == 0).mean() < 0.6


def test_training_dropout_edge_ratios():
    y, mask = noise.dropout(np, _X, np.array(0.0, np.float32), np.array(True), n_outputs=2)
    np.testing.assert_array_equal(y, _X)
    assert mask.all()
    y, mask = noise.dropout(np, _X, np.array(1.0, np.float32), np.array(True), n_outputs=2)
    assert not y.any() and not mask.any() and np.isfinite(y).all()


def test_old_dropout_forms():
    # Opsets 1 and 6 train unless is_test; the mask has the data's type.
    y, mask = noise.dropout_v1(np, _X, ratio=0.5, n_outputs=2)
    assert mask.dtype == np.float32 and set(np.unique(y / np.where(mask, _X, 1))) <= {0, 2}
    assert noise.dropout_v1(np, _X, is_test=1) is _X
    # Opsets 7 to 11 are inference only: identity, mask of T (7) or bool (10).
    y, mask = noise.dropout_v7(np, _X, ratio=0.2, n_outputs=2)
    assert y is _X and mask.dtype == np.float32 and (mask == 1).all()
    y, mask = noise.dropout_v10(np, _X, ratio=0.2, n_outputs=2)
    assert y is _X and mask.dtype == np.bool_ and mask.all()


# -- sampling -------------------------------------------------------------------------

def test_bernoulli_probabilities_dtype_and_seed():
    p = np.array([0.0, 1.0, 0.0, 1.0], np.float64)
    np.testing.assert_array_equal(noise.bernoulli(np, p), [0, 1, 0, 1])
    assert noise.bernoulli(np, p).dtype == np.float64
    assert noise.bernoulli(np, p.astype(np.float32), dtype=np.dtype(np.int32)).dtype == np.int32
    half = np.full(4000, 0.3, np.float32)
    a, b = noise.bernoulli(np, half, seed=5.0), noise.bernoulli(np, half, seed=5.0)
    np.testing.assert_array_equal(a, b)
    assert 0.25 < a.mean() < 0.35


def test_random_uniform_shape_dtype_range_and_seed():
    r = noise.random_uniform(np, shape=[50, 40], low=-2.0, high=3.0, seed=1.0)
    assert r.shape == (50, 40) and r.dtype == np.float32
    assert r.min() >= -2 and r.max() < 3 and 0.2 < r.mean() < 0.8
    np.testing.assert_array_equal(r, noise.random_uniform(np, shape=[50, 40], low=-2.0,
                                                          high=3.0, seed=1.0))
    assert noise.random_uniform(np, shape=[2], dtype=np.dtype(np.float64)).dtype == np.float64


def test_random_like_ops_take_shape_and_dtype_from_the_input():
    x = np.zeros((100, 60), np.float16)
    u = noise.random_uniform_like(np, x)
    assert u.shape == x.shape and u.dtype == np.float16
    n = noise.random_normal_like(np, x, mean=5.0, scale=2.0, dtype=np.dtype(np.float64))
    assert n.dtype == np.float64 and abs(n.mean() - 5) < 0.2 and abs(n.std() - 2) < 0.2
    r = noise.random_normal(np, shape=[3000], mean=-1.0, scale=0.5)
    assert r.dtype == np.float32 and abs(r.mean() + 1) < 0.05 and abs(r.std() - 0.5) < 0.05


def test_multinomial_samples_follow_the_log_probabilities():
    with np.errstate(divide='ignore'):  # log(0) = -inf: a class never drawn
        logits = np.log(np.array([[0.1, 0.0, 0.6, 0.3], [0.0, 0.0, 0.0, 1.0]], np.float32))
    samples = noise.multinomial(np, logits, sample_size=20000, seed=3.0)
    assert samples.shape == (2, 20000) and samples.dtype == np.int32
    assert (samples[1] == 3).all()
    freq = np.bincount(samples[0], minlength=4) / 20000
    np.testing.assert_allclose(freq, [0.1, 0, 0.6, 0.3], atol=0.02)
    np.testing.assert_array_equal(samples,
                                  noise.multinomial(np, logits, sample_size=20000, seed=3.0))
    wide = noise.multinomial(np, logits, dtype=np.dtype(np.int64))
    assert wide.shape == (2, 1) and wide.dtype == np.int64


@pytest.mark.parametrize('seed', [None, -1.0, 2.0 ** 40])
def test_any_float_seed_is_accepted(seed):
    assert noise.random_uniform(np, shape=[3], seed=seed).shape == (3,)

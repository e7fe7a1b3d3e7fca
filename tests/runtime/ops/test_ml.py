"""Tests of the ai.onnx.ml kernels."""
import math

import numpy as np
import pytest

from chainer_compiler.runtime.ops.ml import (
    array_feature_extractor,
    binarizer,
    label_encoder,
    label_encoder_1,
    tree_ensemble,
)


def S(*values):
    a = np.empty(len(values), dtype=object)
    a[:] = values
    return a


def test_label_encoder_strings_to_ints_with_default():
    y = label_encoder(np, S('a', 'q', 'b').reshape(3, 1), keys_strings=['a', 'b'],
                      values_int64s=[5, 6], default_int64=-7)
    assert y.dtype == np.int64 and y.shape == (3, 1)
    np.testing.assert_array_equal(y[:, 0], [5, -7, 6])


def test_label_encoder_float_keys_nan_and_last_duplicate_wins():
    x = np.array([1.0, np.nan, 2.0, 3.0], np.float32)
    y = label_encoder(np, x, keys_floats=[1.0, np.nan, 2.0, 2.0],
                      values_strings=['a', 'n', 'b', 'c'])
    assert y.dtype == object
    assert list(y) == ['a', 'n', 'c', '_Unused']


def test_label_encoder_tensor_attributes_keep_value_dtype():
    y = label_encoder(np, np.array([3, 4], np.int64), keys_tensor=np.array([3], np.int64),
                      values_tensor=np.array([1.5], np.float64),
                      default_tensor=np.array([9.0], np.float64))
    assert y.dtype == np.float64
    np.testing.assert_array_equal(y, [1.5, 9.0])


def test_label_encoder_float_default_is_negative_zero():
    y = label_encoder(np, np.array([7], np.int64), keys_int64s=[1], values_floats=[2.0])
    assert y.dtype == np.float32 and y[0] == 0 and math.copysign(1, y[0]) < 0


def test_label_encoder_v1_both_directions():
    assert list(label_encoder_1(np, S('b', 'z'), classes_strings=['a', 'b'])) == [1, -1]
    y = label_encoder_1(np, np.array([0, 5], np.int64), classes_strings=['a', 'b'])
    assert list(y) == ['a', '_Unused']


def test_array_feature_extractor_takes_last_axis():
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    y = array_feature_extractor(np, x, np.array([3, 0], np.int64))
    np.testing.assert_array_equal(y, x[..., [3, 0]])


def test_binarizer_is_strict_and_keeps_dtype():
    y = binarizer(np, np.array([0.5, 1.0, 2.0], np.float64), threshold=1.0)
    assert y.dtype == np.float64
    np.testing.assert_array_equal(y, [0, 0, 1])


# Two trees over features [f0, f1]:
#   tree 0: f0 <= 1 ? leaf0 (target 0, +1) : (f1 in {2, 3} ? leaf1 (t1, +2) : leaf2 (t0, +4))
#   tree 1: f1 < 0 ? leaf3 (t1, +10) : leaf4 (t1, +20); NaN in f1 takes the true branch.
TREES = dict(
    tree_roots=[0, 2],
    nodes_modes=np.array([0, 6, 1], np.uint8),
    nodes_featureids=[0, 1, 1],
    nodes_splits=np.array([1.0, np.nan, 0.0], np.float32),
    membership_values=np.array([2.0, 3.0, np.nan], np.float32),
    nodes_truenodeids=[0, 1, 3], nodes_trueleafs=[1, 1, 1],
    nodes_falsenodeids=[1, 2, 4], nodes_falseleafs=[0, 1, 1],
    nodes_missing_value_tracks_true=[0, 0, 1],
    leaf_targetids=[0, 1, 0, 1, 1],
    leaf_weights=np.array([1.0, 2.0, 4.0, 10.0, 20.0], np.float32),
    n_targets=2,
)
X = np.array([[0.0, -1.0], [5.0, 3.0], [5.0, 7.0], [5.0, np.nan]], np.float32)


def test_tree_ensemble_sum():
    y = tree_ensemble(np, X, **TREES)
    assert y.dtype == np.float32 and y.shape == (4, 2)
    np.testing.assert_array_equal(y, [[1, 10], [0, 22], [4, 20], [4, 10]])


@pytest.mark.parametrize('aggregate,expected', [
    (0, [[0.5, 5], [0, 11], [2, 10], [2, 5]]),
    (2, [[1, 10], [0, 2], [4, 20], [4, 10]]),
    (3, [[1, 10], [0, 20], [4, 20], [4, 10]]),
])
def test_tree_ensemble_aggregates(aggregate, expected):
    y = tree_ensemble(np, X, aggregate_function=aggregate, **TREES)
    np.testing.assert_array_equal(y, expected)


def test_tree_ensemble_post_transforms():
    raw = tree_ensemble(np, X, **TREES).astype(np.float64)
    soft = tree_ensemble(np, X, post_transform=1, **TREES)
    e = np.exp(raw - raw.max(axis=1, keepdims=True))
    np.testing.assert_allclose(soft, e / e.sum(axis=1, keepdims=True), rtol=1e-6)
    logistic = tree_ensemble(np, X, post_transform=2, **TREES)
    np.testing.assert_allclose(logistic, 1 / (1 + np.exp(-raw)), rtol=1e-6)
    soft_zero = tree_ensemble(np, X, post_transform=3, **TREES)
    assert soft_zero[1, 0] == 0 and soft_zero[1, 1] == 1


def test_tree_ensemble_probit_inverts_normal_cdf():
    trees = dict(TREES, leaf_weights=np.array([0.025, 0.5, 0.9, 0.3, 0.999], np.float32))
    y = tree_ensemble(np, X[:1], post_transform=4, aggregate_function=3, **trees)
    cdf = 0.5 * (1 + np.vectorize(math.erf)(y.astype(np.float64) / math.sqrt(2)))
    np.testing.assert_allclose(cdf, [[0.025, 0.3]], rtol=1e-5)

"""Tests for NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss."""
import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from chainer_compiler.runtime.ops.loss import (
    negative_log_likelihood_loss,
    softmax_cross_entropy_loss,
)


def _reference(op, inputs, n_outputs, **attrs):
    names = ['in%d' % i if x is not None else '' for i, x in enumerate(inputs)]
    outputs = ['out%d' % i for i in range(n_outputs)]
    graph = helper.make_graph(
        [helper.make_node(op, names, outputs, **attrs)], 'g',
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in zip(names, inputs) if n],
        [helper.make_tensor_value_info(n, 0, None) for n in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 22)])
    return ReferenceEvaluator(model).run(None, {n: x for n, x in zip(names, inputs) if n})


# The doc's example: N, C, d1 = 2, 3, 2.
_INPUT = np.array([[[1.0, 2.0], [2.0, 2.0], [3.0, 2.0]],
                   [[0.0, 1.0], [2.0, 2.0], [1.0, 2.0]]], np.float32)
_TARGET = np.array([[2, 1], [0, 2]], np.int64)
_WEIGHT = np.array([0.2, 0.3, 0.1], np.float32)


def test_nll_documented_examples():
    none = negative_log_likelihood_loss(np, _INPUT, _TARGET, reduction='none')
    np.testing.assert_array_equal(none, [[-3, -2], [-0, -2]])
    assert none.dtype == np.float32
    total = negative_log_likelihood_loss(np, _INPUT, _TARGET, _WEIGHT, reduction='sum')
    np.testing.assert_allclose(total, -1.1, rtol=1e-6)
    mean = negative_log_likelihood_loss(np, _INPUT, _TARGET, _WEIGHT)
    np.testing.assert_allclose(mean, -1.1 / 0.7, rtol=1e-6)
    assert mean.dtype == np.float32 and mean.shape == ()


def test_nll_ignore_index_outside_the_classes_drops_samples_from_the_mean():
    target = np.array([[2, -1], [-1, 1]], np.int32)
    got = negative_log_likelihood_loss(np, _INPUT, target, _WEIGHT, ignore_index=-1)
    np.testing.assert_allclose(got, (-3 * 0.1 - 2 * 0.3) / 0.4, rtol=1e-6)
    unweighted = negative_log_likelihood_loss(np, _INPUT, target, ignore_index=-1)
    np.testing.assert_allclose(unweighted, (-3 - 2) / 2, rtol=1e-6)
    none = negative_log_likelihood_loss(np, _INPUT, target, ignore_index=-1, reduction='none')
    np.testing.assert_array_equal(none, [[-3, 0], [0, -2]])


@pytest.mark.parametrize('reduction', ['none', 'sum', 'mean'])
@pytest.mark.parametrize('weighted', [False, True])
@pytest.mark.parametrize('ignore_index', [None, 0, 10])
def test_nll_nd_matches_reference(reduction, weighted, ignore_index):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 3, 2)).astype(np.float32)
    target = rng.integers(0, 4, (2, 3, 2))
    weight = rng.random(4).astype(np.float32) if weighted else None
    attrs = {'reduction': reduction}
    if ignore_index is not None:
        attrs['ignore_index'] = ignore_index
    got = negative_log_likelihood_loss(np, x, target, weight, **attrs)
    expected = _reference('NegativeLogLikelihoodLoss', [x, target, weight], 1, **attrs)[0]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_nll_rejects_unknown_reduction():
    with pytest.raises(ValueError, match='reduction'):
        negative_log_likelihood_loss(np, _INPUT, _TARGET, reduction='max')


@pytest.mark.parametrize('reduction', ['none', 'sum', 'mean'])
def test_sce_matches_reference_with_log_prob(reduction):
    rng = np.random.default_rng(1)
    scores = (rng.standard_normal((3, 5, 4)) * 10).astype(np.float32)
    labels = rng.integers(0, 5, (3, 4))
    labels[0, 0] = -3
    weights = rng.random(5).astype(np.float32)
    attrs = dict(reduction=reduction, ignore_index=-3)
    loss, log_prob = softmax_cross_entropy_loss(np, scores, labels, weights, **attrs)
    expected = _reference('SoftmaxCrossEntropyLoss', [scores, labels, weights], 2, **attrs)
    np.testing.assert_allclose(loss, expected[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(log_prob, expected[1], rtol=1e-5, atol=1e-6)
    assert loss.dtype == log_prob.dtype == np.float32 and log_prob.shape == scores.shape


def test_sce_of_large_scores_is_finite():
    scores = np.array([[1e4, 0.0], [0.0, 1e4]], np.float32)
    loss = softmax_cross_entropy_loss(np, scores, np.array([1, 1]))[0]
    np.testing.assert_allclose(loss, 5e3, rtol=1e-6)

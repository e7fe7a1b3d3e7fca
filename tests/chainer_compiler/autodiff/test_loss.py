"""Gradient rules of the loss family against central differences."""
import numpy
import pytest
from onnx import helper

from chainer_compiler.autodiff.registry import rule_for

from .gradcheck import check_gradients, single_node_model
from .test_math import _translator_ops

CASES = [((4, 3), None), ((2, 3, 4), None), ((2, 3, 2, 2), None),
         ((4, 3), -1), ((4, 3), 1), ((2, 3, 4), 2)]


def _data(shape, ignore_index, seed=0):
    r = numpy.random.RandomState(seed)
    x = r.randn(*shape)
    labels = r.randint(0, shape[1], (shape[0],) + shape[2:]).astype(numpy.int64)
    if ignore_index is not None:
        labels.reshape(-1)[::3] = ignore_index
        labels.reshape(-1)[1] = 0  # some sample counts (else 'mean' is 0/0)
    return x, labels


def _attrs(reduction, ignore_index):
    attrs = {'reduction': reduction}
    if ignore_index is not None:
        attrs['ignore_index'] = ignore_index
    return attrs


@pytest.mark.parametrize('reduction', ['none', 'sum', 'mean'])
@pytest.mark.parametrize('shape,ignore_index', CASES)
@pytest.mark.parametrize('weighted', [False, True])
def test_softmax_cross_entropy(reduction, shape, ignore_index, weighted):
    x, labels = _data(shape, ignore_index)
    constants = {'labels': labels}
    if weighted:
        constants['weights'] = numpy.random.RandomState(1).uniform(0.5, 2, shape[1])
    for n_outputs in (1, 2):
        model = single_node_model('SoftmaxCrossEntropyLoss', {'x': x}, n_outputs=n_outputs,
                                  opset=13, constants=constants,
                                  **_attrs(reduction, ignore_index))
        programs = check_gradients(model, {'x': x})
        # The forward's log_prob is what the backward reads (not the scores).
        assert 'x' not in programs.retained


@pytest.mark.parametrize('reduction', ['none', 'sum', 'mean'])
@pytest.mark.parametrize('shape,ignore_index', CASES)
@pytest.mark.parametrize('weighted', [False, True])
def test_negative_log_likelihood(reduction, shape, ignore_index, weighted):
    x, labels = _data(shape, ignore_index)
    constants = {'target': labels}
    if weighted:
        constants['weight'] = numpy.random.RandomState(1).uniform(0.5, 2, shape[1])
    model = single_node_model('NegativeLogLikelihoodLoss', {'x': x}, opset=13,
                              constants=constants, **_attrs(reduction, ignore_index))
    programs = check_gradients(model, {'x': x})
    assert 'x' not in programs.retained  # only labels (and weights)


def test_softmax_cross_entropy_opset_12():
    x, labels = _data((4, 3), None)
    model = single_node_model('SoftmaxCrossEntropyLoss', {'x': x}, opset=12,
                              constants={'labels': labels})
    check_gradients(model, {'x': x})


def test_translator_ops_have_rules():
    for family in ('loss',):
        for op in _translator_ops(family):
            rule_for(helper.make_node(op, [], []))
    assert 'SoftmaxCrossEntropyLoss' in _translator_ops('loss')

"""Gradient rules of the activation family against central differences."""
import numpy
import pytest
from onnx import helper

from chainer_compiler.autodiff.registry import rule_for

from .gradcheck import check_gradients, single_node_model
from .test_math import _translator_ops


def _x(shape=(3, 4), seed=0, low=-2, high=2, avoid=()):
    """Uniform values kept 0.05 away from the kinks in ``avoid``."""
    x = numpy.random.RandomState(seed).uniform(low, high, shape)
    for kink in avoid:
        near = numpy.abs(x - kink) < 0.05
        x[near] = kink + 0.1
    return x


def _check(op, inputs, opset=17, constants=None, **attrs):
    model = single_node_model(op, inputs, opset=opset, constants=constants, **attrs)
    return check_gradients(model, inputs)


@pytest.mark.parametrize('opset', [6, 13])
def test_relu(opset):
    _check('Relu', {'x': _x(avoid=[0])}, opset=opset)


@pytest.mark.parametrize('alpha', [0.01, 0.3, -0.5])
@pytest.mark.parametrize('opset', [6, 16])
def test_leaky_relu(alpha, opset):
    _check('LeakyRelu', {'x': _x(avoid=[0])}, opset=opset, alpha=alpha)


@pytest.mark.parametrize('alpha', [1.0, 0.5, -0.3])
def test_elu(alpha):
    _check('Elu', {'x': _x(avoid=[0])}, alpha=alpha)
    _check('Elu', {'x': _x(avoid=[0])}, opset=6, alpha=alpha)


def test_selu():
    _check('Selu', {'x': _x(avoid=[0])})
    _check('Selu', {'x': _x(avoid=[0])}, alpha=1.2, gamma=0.8)


@pytest.mark.parametrize('alpha', [1.0, 0.5, 2.0])
def test_celu(alpha):
    _check('Celu', {'x': _x(avoid=[0])}, opset=12, alpha=alpha)


@pytest.mark.parametrize('alpha', [1.0, 0.3, -0.5])
def test_thresholded_relu(alpha):
    _check('ThresholdedRelu', {'x': _x(avoid=[alpha, 0])}, opset=10, alpha=alpha)


@pytest.mark.parametrize('x_shape,slope_shape', [((2, 3, 4), (3, 1)), ((2, 3, 4), (4,)),
                                                 ((2, 3), ()), ((2, 3, 4), (2, 3, 4)),
                                                 ((2, 3, 2, 2), (3, 1, 1))])
def test_prelu(x_shape, slope_shape):
    r = numpy.random.RandomState(1)
    _check('PRelu', {'x': _x(x_shape, avoid=[0]), 'slope': numpy.asarray(r.randn(*slope_shape))},
           opset=16)


def test_prelu_legacy_channel_slope():
    r = numpy.random.RandomState(1)
    _check('PRelu', {'x': _x((2, 3, 4), avoid=[0]), 'slope': r.randn(3)}, opset=6)


@pytest.mark.parametrize('op', ['Sigmoid', 'Tanh', 'Softplus', 'Softsign'])
@pytest.mark.parametrize('opset', [6, 13])
def test_smooth(op, opset):
    _check(op, {'x': _x(low=-3, high=3)}, opset=opset)


@pytest.mark.parametrize('attrs', [{}, {'alpha': 0.5, 'beta': 0.3}])
def test_hard_sigmoid(attrs):
    _check('HardSigmoid', {'x': _x(low=-4, high=4, avoid=[-2.5, 2.5, -1.6, 1.4])}, **attrs)


def test_hard_swish():
    _check('HardSwish', {'x': _x(low=-5, high=5, avoid=[-3, 3])}, opset=14)


def test_shrink():
    _check('Shrink', {'x': _x(avoid=[-0.5, 0.5])})
    _check('Shrink', {'x': _x(avoid=[-1, 1])}, lambd=1.0, bias=0.3)


def test_mish_and_swish():
    _check('Mish', {'x': _x()}, opset=18)
    _check('Swish', {'x': _x()}, opset=24)
    _check('Swish', {'x': _x()}, opset=24, alpha=0.7)


@pytest.mark.parametrize('approximate', ['none', 'tanh'])
def test_gelu(approximate):
    x = _x(low=-4, high=4)
    model = single_node_model('Gelu', {'x': x}, opset=20, approximate=approximate)
    # The exact form's erfc is a 1e-7 fit: difference quotients need a wide step.
    check_gradients(model, {'x': x}, eps=1e-3 if approximate == 'none' else 1e-6,
                    rtol=1e-4, atol=1e-5)


SOFTMAX_CASES = [((3, 4), 1, 11), ((3, 4), -1, 13), ((2, 3, 4), 1, 11), ((2, 3, 4), 1, 13),
                 ((2, 3, 4), 0, 13), ((2, 3, 4), 2, 12), ((2, 3, 4), -2, 18)]


@pytest.mark.parametrize('op', ['Softmax', 'LogSoftmax'])
@pytest.mark.parametrize('shape,axis,opset', SOFTMAX_CASES)
def test_softmax(op, shape, axis, opset):
    _check(op, {'x': _x(shape)}, opset=opset, axis=axis)


@pytest.mark.parametrize('op', ['Softmax', 'LogSoftmax'])
def test_softmax_default_axis(op):
    _check(op, {'x': _x((2, 3, 4))}, opset=11)
    _check(op, {'x': _x((2, 3, 4))}, opset=13)


def test_translator_ops_have_rules():
    ops = _translator_ops('activation')
    assert 'Relu' in ops
    for op in ops:
        rule_for(helper.make_node(op, [], []))
    assert rule_for(helper.make_node('Hardmax', [], [])) is None

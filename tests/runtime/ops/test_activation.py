"""Tests for the activation kernels, with onnx.reference as the oracle where
it helps."""
import math

import numpy as np
import onnxruntime
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from chainer_compiler.runtime.ops import activation as act
from chainer_compiler.runtime.ops import lookup


def _reference(op, inputs, opset, runtime='reference', **attrs):
    """Run a one-node model on onnx.reference, or on onnxruntime (which, unlike
    onnx.reference, implements the opset<=12 Softmax forms)."""
    names = ['in%d' % i for i in range(len(inputs))]
    graph = helper.make_graph(
        [helper.make_node(op, names, ['out'], **attrs)], 'g',
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in zip(names, inputs)],
        [helper.make_tensor_value_info('out', helper.np_dtype_to_tensor_dtype(inputs[0].dtype),
                                       None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', opset)])
    feeds = dict(zip(names, inputs))
    if runtime == 'reference':
        return ReferenceEvaluator(model).run(None, feeds)[0]
    model.ir_version = 7
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=['CPUExecutionProvider'])
    return session.run(None, feeds)[0]


_X = np.random.default_rng(0).standard_normal((3, 4, 5)).astype(np.float32) * 3

_ELEMENTWISE = [
    ('Relu', {}), ('LeakyRelu', {'alpha': 0.1}), ('ThresholdedRelu', {'alpha': 0.5}),
    ('Elu', {'alpha': 2.0}), ('Selu', {}), ('Selu', {'alpha': 2.0, 'gamma': 3.0}),
    ('Celu', {'alpha': 2.0}), ('Shrink', {'lambd': 1.5, 'bias': 0.5}), ('Sigmoid', {}),
    ('Tanh', {}), ('HardSigmoid', {'alpha': 0.5, 'beta': 0.6}), ('HardSwish', {}),
    ('Softplus', {}), ('Softsign', {}), ('Mish', {}), ('Swish', {'alpha': 0.7}),
    ('Gelu', {}), ('Gelu', {'approximate': 'tanh'}),
]


@pytest.mark.parametrize('op,attrs', _ELEMENTWISE, ids=lambda v: str(v))
def test_elementwise_matches_reference_and_keeps_float32(op, attrs):
    fn = lookup(op, version=24).fn
    got = fn(np, _X, **attrs)
    assert got.dtype == np.float32 and got.shape == _X.shape
    np.testing.assert_allclose(got, _reference(op, [_X], 24, **attrs), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('op', ['Relu', 'Elu', 'LeakyRelu', 'Sigmoid', 'Softplus', 'Gelu',
                                'HardSigmoid', 'Celu'])
def test_zero_dim_and_float16_inputs_keep_their_dtype(op):
    # NumPy would promote a 0-d float32 array times a Python float to float64.
    fn = lookup(op, version=24).fn
    assert fn(np, np.array(-0.5, np.float32)).dtype == np.float32
    assert fn(np, np.array([-1.5, 2.0], np.float16)).dtype == np.float16


def test_relu_and_shrink_accept_integers():
    x = np.array([-3, -1, 0, 2, 5], np.int32)
    assert act.relu(np, x).tolist() == [0, 0, 0, 2, 5]
    y = act.shrink(np, x, lambd=1.5, bias=1.5)  # attributes truncate to 1 like CastLike
    assert y.dtype == np.int32 and y.tolist() == [-2, 0, 0, 1, 4]


def test_sigmoid_softplus_mish_do_not_overflow():
    x = np.array([-1000, -50, 0, 50, 1000], np.float32)
    with np.errstate(over='raise', invalid='raise'):
        np.testing.assert_allclose(act.sigmoid(np, x), [0, 1.9287e-22, 0.5, 1, 1], rtol=1e-4)
        np.testing.assert_allclose(act.softplus(np, x), [0, 1.9287e-22, math.log(2), 50, 1000],
                                   rtol=1e-4)
        assert np.isfinite(act.mish(np, x)).all()


def test_gelu_exact_form_is_accurate_in_the_negative_tail():
    # 1 + erf(x / sqrt 2) is tiny for x << 0: the result must stay relatively exact.
    x = np.array([-12.0, -8.0, -5.0, -1.0, 0.0, 0.3, 4.0], np.float64)
    expected = [0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x]
    np.testing.assert_allclose(act.gelu(np, x), expected, rtol=2e-7, atol=0)
    with pytest.raises(ValueError, match='approximate'):
        act.gelu(np, x, approximate='fast')


def test_prelu_slope_broadcasts_per_channel():
    x = np.array([[[-2.0, 3.0]], [[-4.0, -1.0]]], np.float32)  # (2, 1, 2)
    slope = np.array([[0.5, 0.25]], np.float32)
    np.testing.assert_array_equal(act.prelu(np, x, slope), [[[-1.0, 3.0]], [[-2.0, -0.25]]])
    # Before opset 7 a 1-D slope is per channel (axis 1), not per last axis.
    x4 = -np.ones((2, 3, 2, 2), np.float32)
    y = act.prelu_v1(np, x4, np.array([1.0, 2.0, 3.0], np.float32))
    np.testing.assert_array_equal(y[1, :, 1, 0], [-1, -2, -3])


# -- the Softmax family ---------------------------------------------------------

@pytest.mark.parametrize('op', ['Softmax', 'LogSoftmax', 'Hardmax'])
@pytest.mark.parametrize('axis', [0, 1, 2, -1, -2])
@pytest.mark.parametrize('opset', [11, 13])
def test_softmax_family_both_axis_forms_match_reference(op, axis, opset):
    x = _X.copy()
    x[1, 2, :3] = 7.0  # ties: Hardmax picks the first maximum
    got = lookup(op, version=opset).fn(np, x, axis=axis)
    assert got.dtype == np.float32
    expected = _reference(op, [x], opset, runtime='onnxruntime', axis=axis)
    # LogSoftmax near 0 is x - max - log(sum): one float32 ulp (1.2e-7) of
    # the log term, where CuPy's exp and log may round unlike NumPy's.
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=2.5e-7)


def test_softmax_defaults_differ_between_forms():
    x = _X
    new = act.softmax(np, x)
    old = act.softmax_v1(np, x)
    np.testing.assert_allclose(new.sum(axis=-1), 1, rtol=1e-6)
    np.testing.assert_allclose(old.reshape(3, 20).sum(axis=1), 1, rtol=1e-6)
    assert not np.allclose(new, old)


def test_softmax_of_large_numbers_is_finite():
    x = np.array([[1000.0, 1001.0, 1002.0], [-1e30, 0.0, 1e30]], np.float32)
    s = act.softmax(np, x)
    ls = act.log_softmax(np, x)
    np.testing.assert_allclose(s[0], [0.09003057, 0.24472847, 0.66524096], rtol=1e-6)
    np.testing.assert_allclose(ls[0], np.log(s[0]), rtol=1e-6)
    np.testing.assert_array_equal(s[1], [0, 0, 1])


def test_hardmax_one_hot_first_maximum():
    x = np.array([[1, 3, 3, 0], [5, 5, 5, 5]], np.float64)
    np.testing.assert_array_equal(act.hardmax(np, x), [[0, 1, 0, 0], [1, 0, 0, 0]])
    assert act.hardmax(np, x).dtype == np.float64

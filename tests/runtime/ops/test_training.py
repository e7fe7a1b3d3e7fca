"""Tests for the ai.onnx.preview.training optimizer kernels (Adagrad, Adam, Momentum)."""
import math

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from chainer_compiler.runtime.ops.training import adagrad, adam, momentum

DOMAIN = 'ai.onnx.preview.training'


def _reference(op, R, T, tensors, n_outputs, **attrs):
    names = ['R', 'T'] + ['t%d' % i for i in range(len(tensors))]
    outputs = ['o%d' % i for i in range(n_outputs)]
    graph = helper.make_graph(
        [helper.make_node(op, names, outputs, domain=DOMAIN, **attrs)], 'g',
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), None)
         for n, x in zip(names, [R, T] + tensors)],
        [helper.make_tensor_value_info(n, 0, None) for n in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 18),
                                                    helper.make_opsetid(DOMAIN, 1)])
    return ReferenceEvaluator(model).run(None, dict(zip(names, [R, T] + tensors)))


def _tensors(rng, shapes, n_groups):
    """n_groups lists of float32 tensors, one per shape (values, gradients, states...)."""
    return [rng.random(shape).astype(np.float32) for _ in range(n_groups) for shape in shapes]


R = np.array(0.1, np.float32)


def _check(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == np.float32 and g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-7)


def test_adagrad_two_tensors_matches_reference():
    rng = np.random.default_rng(0)
    tensors = _tensors(rng, [(3,), (2, 2)], 3)
    attrs = dict(decay_factor=0.1, epsilon=1e-5, norm_coefficient=0.01)
    T = np.array(3, np.int64)
    _check(adagrad(np, R, T, *tensors, **attrs), _reference('Adagrad', R, T, tensors, 4, **attrs))


def test_adagrad_by_hand():
    X, G, H = (np.array([v], np.float32) for v in (1.0, 2.0, 5.0))
    X_new, H_new = adagrad(np, R, np.array(1, np.int64), X, G, H, decay_factor=1.0)
    assert H_new[0] == 9.0
    np.testing.assert_allclose(X_new, 1.0 - 0.05 * 2.0 / (3.0 + 1e-6), rtol=1e-6)


@pytest.mark.parametrize('step', [0, 4])
def test_adam_two_tensors_matches_reference(step):
    rng = np.random.default_rng(1)
    tensors = _tensors(rng, [(3,), (1, 2)], 4)
    attrs = dict(alpha=0.85, beta=0.95, epsilon=1e-3, norm_coefficient=0.01,
                 norm_coefficient_post=0.02)
    T = np.array(step, np.int64)
    _check(adam(np, R, T, *tensors, **attrs), _reference('Adam', R, T, tensors, 6, **attrs))


def test_adam_bias_correction_by_hand():
    X, G, V, H = (np.array([v], np.float32) for v in (1.0, 0.5, 0.0, 0.0))
    X_new, V_new, H_new = adam(np, R, np.array(1, np.int64), X, G, V, H, alpha=0.5, beta=0.75,
                               epsilon=0.0)
    assert V_new[0] == 0.25 and H_new[0] == 0.0625
    rate = 0.1 * math.sqrt(1 - 0.75) / (1 - 0.5)
    np.testing.assert_allclose(X_new, 1.0 - rate * 0.25 / 0.25, rtol=1e-6)


@pytest.mark.parametrize('mode', ['standard', 'nesterov'])
@pytest.mark.parametrize('step', [0, 2])
def test_momentum_two_tensors_matches_reference(mode, step):
    rng = np.random.default_rng(2)
    tensors = _tensors(rng, [(2,), (3, 1)], 3)
    attrs = dict(alpha=0.9, beta=0.3, mode=mode, norm_coefficient=0.01)
    T = np.array(step, np.int64)
    _check(momentum(np, R, T, *tensors, **attrs),
           _reference('Momentum', R, T, tensors, 4, **attrs))


def test_momentum_first_step_uses_the_full_gradient():
    X, G, V = (np.array([v], np.float32) for v in (1.0, 2.0, 3.0))
    X_new, V_new = momentum(np, R, np.array(0, np.int64), X, G, V, alpha=0.5, beta=0.1,
                            mode='standard', norm_coefficient=0.0)
    assert V_new[0] == 3.5  # 0.5 * 3 + 1 * 2: beta is ignored at T == 0
    np.testing.assert_allclose(X_new, 1.0 - 0.1 * 3.5, rtol=1e-6)


def test_bad_input_count_and_mode_are_rejected():
    x = np.ones(2, np.float32)
    with pytest.raises(ValueError, match='multiple of 4'):
        adam(np, R, np.array(1, np.int64), x, x, x)
    with pytest.raises(ValueError, match='mode'):
        momentum(np, R, np.array(1, np.int64), x, x, x, alpha=0.9, beta=0.1, mode='heavy',
                 norm_coefficient=0.0)

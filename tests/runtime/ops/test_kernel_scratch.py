"""What NumPy kernels hold beyond their inputs and outputs (issue 34): the
batch normalizations and MaxPool's gradient work in their results' arrays,
so their scratch is at most one array the size of X, and the kernels with
large temporaries declare them (OpRecord.scratch) for the memory model."""

import numpy as np
import pytest

from chainer_compiler.runtime.ops.activation import relu_grad
from chainer_compiler.runtime.ops.connection import conv, conv_grad_filter, conv_transpose
from chainer_compiler.runtime.ops.normalization import batch_normalization, batch_normalization_grad
from chainer_compiler.runtime.ops.pooling import max_pool, max_pool_grad
from chainer_compiler.runtime.ops.registry import CUSTOM_DOMAIN, operator_record
from chainer_compiler.runtime.ops.training import (
    UPDATE_BLOCK,
    adam_update,
    momentum_sgd_update,
    sgd_update,
)
from tests.conftest import TEST_BACKEND

from .test_connection_chunks import _peak

# tracemalloc counts NumPy's host arrays, and the expression test wants
# NumPy's own bits: under CHAINER_COMPILER_TEST_BACKEND=cupy the kernels
# allocate on the device and reduce in another order.
pytestmark = pytest.mark.skipif(TEST_BACKEND != 'numpy',
                                reason="measures NumPy's host allocations and exact results")
_RNG = np.random.default_rng(0)


# A ResNet-like activation, 4 MiB: a temporary of its size is plain in a peak.
_X = _RNG.standard_normal((32, 32, 32, 32)).astype(np.float32)
_GY = _RNG.standard_normal(_X.shape).astype(np.float32)
_ONES, _ZEROS = np.ones(32, np.float32), np.zeros(32, np.float32)
_POOL = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
_Y = max_pool(np, _X, **_POOL)
_GY_POOL = np.ones_like(_Y)


@pytest.mark.parametrize('name,call,arrays', [
    # gX and one array the size of X (was 4: xhat, centred and two products)
    ('BatchNormalizationGrad', lambda: batch_normalization_grad(np, _X, _ONES, _GY), 2),
    ('BatchNormalizationGrad, saved statistics',
     lambda: batch_normalization_grad(np, _X, _ONES, _GY, _ZEROS, _ONES), 2),
    # Y and the squares of the variance (was 3)
    ('BatchNormalization, training',
     lambda: batch_normalization(np, _X, _ONES, _ZEROS, _ZEROS, _ONES, training_mode=1), 2),
    # Y only (was 2)
    ('BatchNormalization, inference',
     lambda: batch_normalization(np, _X, _ONES, _ZEROS, _ZEROS, _ONES), 1),
    # gX and per-tap masks and products the size of Y, a quarter of X's
    # (was gX and a padded copy of X besides)
    ('MaxPoolGrad', lambda: max_pool_grad(np, _X, _Y, _GY_POOL, **_POOL), 1.5),
])
def test_kernel_holds_at_most_its_result_and_one_array_of_x(name, call, arrays):
    _, peak = _peak(call)
    assert peak < arrays * _X.nbytes + 2 ** 16, '%s held %.2f arrays the size of X' % (
        name, peak / _X.nbytes)


def test_batch_norm_grad_computes_the_expression_in_its_order():
    """In place, the same operations in the same order: the bits of the
    expression written out."""
    x, gy = _X[:4] * 3 + 1, _GY[:4]
    scale = _RNG.standard_normal(32).astype(np.float32)
    gx, g_scale, g_b = batch_normalization_grad(np, x, scale, gy, epsilon=1e-3)
    axes = (0, 2, 3)
    mean = x.mean(axis=axes, keepdims=True)
    centred = x - mean
    inv = 1 / np.sqrt((centred * centred).mean(axis=axes, keepdims=True) + np.float32(1e-3))
    xhat = centred * inv
    expected_b = gy.sum(axis=axes, keepdims=True)
    expected_scale = (gy * xhat).sum(axis=axes, keepdims=True)
    m = np.float32(x.size // 32)
    expected = (gy - expected_b / m - xhat * (expected_scale / m)) * (
        scale.reshape(-1, 1, 1) * inv)
    np.testing.assert_array_equal(gx, expected)
    np.testing.assert_array_equal(g_scale, expected_scale.reshape(-1))
    np.testing.assert_array_equal(g_b, expected_b.reshape(-1))


def _typed(a):
    return (a.dtype, a.shape)


_W3, _W1 = _RNG.standard_normal((32, 32, 3, 3)).astype(np.float32), \
    _RNG.standard_normal((64, 32, 1, 1)).astype(np.float32)
_PADS = dict(pads=[1, 1, 1, 1])


@pytest.mark.parametrize('op,domain,fn,args,attrs', [
    # the whole batch's columns, then in chunks of images
    ('Conv', '', conv, [_X[:4], _W3], _PADS),
    ('Conv', '', conv, [_X, _W3], _PADS),
    ('Conv', '', conv, [_X, _W1], dict(strides=[2, 2])),
    ('ConvTranspose', '', conv_transpose, [_X, _W3], _PADS),
    ('ConvGradFilter', CUSTOM_DOMAIN, conv_grad_filter, [_X, _GY],
     dict(kernel_shape=[3, 3], **_PADS)),
    ('BatchNormalization', '', batch_normalization, [_X, _ONES, _ZEROS, _ZEROS, _ONES],
     dict(training_mode=1)),
    ('BatchNormalizationGrad', CUSTOM_DOMAIN, batch_normalization_grad, [_X, _ONES, _GY], {}),
    ('BatchNormalizationGrad', CUSTOM_DOMAIN, batch_normalization_grad,
     [_X.astype(np.float16), _ONES, _GY.astype(np.float16)], {}),
    ('MaxPoolGrad', CUSTOM_DOMAIN, max_pool_grad, [_X, _Y, _GY_POOL],
     dict(kernel_shape=[3, 3], strides=[2, 2], **_PADS)),
    ('ReluGrad', CUSTOM_DOMAIN, relu_grad, [_X, _GY], {}),
    # a block of the parameter at a time, not a temporary of its size
    ('SGDUpdate', CUSTOM_DOMAIN, sgd_update, [_X.copy(), _GY, np.float32(0.1)], {}),
    ('MomentumSGDUpdate', CUSTOM_DOMAIN, momentum_sgd_update,
     [_X.copy(), _GY, np.zeros_like(_X), np.float32(0.1), np.float32(0.9)], {}),
    ('AdamUpdate', CUSTOM_DOMAIN, adam_update,
     [_X.copy(), _GY, np.zeros_like(_X), np.ones_like(_X)] +
     [np.float32(a) for a in (1e-3, 0.9, 0.999, 1e-8, 0.5, 1e-2)], {}),
])
def test_declared_scratch_is_what_the_kernel_holds(op, domain, fn, args, attrs):
    """OpRecord.scratch, which the memory model adds to the VM's count, is
    the kernel's peak beyond its inputs and outputs: at least that, at most
    the outputs' bytes more (a chunked kernel's first chunk runs before
    its result exists), to a few percent."""
    outputs, peak = _peak(lambda: fn(np, *args, **attrs))
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    # An in-place update returns its parameter: nothing made.
    made = sum(o.nbytes for o in outputs if not any(o is a for a in args))
    declared = operator_record(op, domain).scratch_bytes(
        [_typed(a) for a in args], [_typed(o) for o in outputs], attrs)
    slack = 0.05 * (peak - made) + 2 ** 17
    assert peak - made - slack <= declared <= peak + slack, (declared, peak - made)


def _update_formulas(param, grad, m, v, lr=0.1, momentum=0.9, alpha_t=1e-3, beta1=0.9,
                     beta2=0.999, eps=1e-8, eta=0.5, decay=1e-2):
    """The three updates written out over whole arrays: (SGD's param,
    momentum's param and v, Adam's param, m and v)."""
    sgd = param - lr * grad
    v_momentum = momentum * v - lr * grad
    m_adam = m + (1 - beta1) * (grad - m)
    v_adam = v + (1 - beta2) * (grad * grad - v)
    step = alpha_t / (np.sqrt(v_adam) + eps) * m_adam
    adam = param * (1 - eta * decay) - step * eta
    return sgd, param + v_momentum, v_momentum, adam, m_adam, v_adam


@pytest.mark.parametrize('dtype', [np.float16, np.float32, np.float64])
@pytest.mark.parametrize('layout', ['contiguous', 'transposed gradient'])
def test_updates_by_blocks_give_the_formulas_bits(dtype, layout):
    """Block by block (across block edges, a last partial block) or whole
    (a gradient that is a transposed view), each update gives the bits of
    its formula over the whole arrays."""
    shape = (3, UPDATE_BLOCK // 2 + 7)
    param, m = (_RNG.standard_normal(shape).astype(dtype) for _ in range(2))
    v = np.abs(_RNG.standard_normal(shape)).astype(dtype)
    grad = _RNG.standard_normal(shape).astype(dtype)
    if layout == 'transposed gradient':
        grad = np.ascontiguousarray(grad.T).T
    sgd, momentum, v_momentum, adam, m_adam, v_adam = _update_formulas(param, grad, m, v)
    p = param.copy()
    assert sgd_update(np, p, grad, 0.1) is p
    np.testing.assert_array_equal(p, sgd)
    p, v_out = param.copy(), v.copy()
    momentum_sgd_update(np, p, grad, v_out, 0.1, 0.9)
    np.testing.assert_array_equal(v_out, v_momentum)
    np.testing.assert_array_equal(p, momentum)
    p, m_out, v_out = param.copy(), m.copy(), v.copy()
    adam_update(np, p, grad, m_out, v_out, 1e-3, 0.9, 0.999, 1e-8, 0.5, 1e-2)
    np.testing.assert_array_equal(m_out, m_adam)
    np.testing.assert_array_equal(v_out, v_adam)
    np.testing.assert_array_equal(p, adam)


def test_an_update_holds_a_block_not_a_parameter():
    """A training step's peak carries an update's temporaries beside every
    weight it holds: a 4 MiB parameter's update holds about one block."""
    args = [_X.copy(), _GY, np.zeros_like(_X), np.ones_like(_X)]
    for call in (lambda: sgd_update(np, *args[:2], 0.1),
                 lambda: momentum_sgd_update(np, *args[:3], 0.1, 0.9),
                 lambda: adam_update(np, *args, 1e-3, 0.9, 0.999, 1e-8, 1.0, 0.0)):
        _, peak = _peak(call)
        assert peak < 1.2 * UPDATE_BLOCK * _X.itemsize < _X.nbytes / 16

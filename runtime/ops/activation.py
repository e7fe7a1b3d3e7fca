"""Activation kernels: element-wise non-linearities and the Softmax family.

Attribute constants are cast to the input's dtype before use (``_const``), so
float16/float32 inputs never get promoted to float64 by NumPy's handling of
Python floats and 0-d arrays.
"""
import math

import numpy

from . import cupy_kernels
from .opset_rules import softmax_axes
from .registry import LATEST, kernel, per_element


def _const(x, value):
    return x.dtype.type(value)


# -- rectifiers and friends ---------------------------------------------------

@kernel('Relu', cost=per_element(12),  # maximum with a scalar: 10 to 15 measured
        epilogue=True, samples='elementwise')
def relu(xp, x, *, consumed_inputs=None):
    return xp.maximum(x, _const(x, 0))


@kernel('LeakyRelu', epilogue=True, samples='elementwise')
def leaky_relu(xp, x, *, alpha=0.01, consumed_inputs=None):
    return xp.where(x >= 0, x, x * _const(x, alpha))


@kernel('PRelu', versions=(7, LATEST), samples='elementwise')
def prelu(xp, x, slope):
    # slope broadcasts unidirectionally to x (numpy-style broadcasting).
    return xp.where(x >= 0, x, x * slope.astype(x.dtype, copy=False))


@kernel('PRelu', versions=(1, 6))
def prelu_v1(xp, x, slope, *, consumed_inputs=None):
    # Before opset 7 a 1-D slope holds one value per channel (axis 1).
    if slope.ndim == 1 and slope.size > 1 and x.ndim > 2:
        slope = slope.reshape((-1,) + (1,) * (x.ndim - 2))
    return prelu(xp, x, slope)


@kernel('ThresholdedRelu', samples='elementwise')
def thresholded_relu(xp, x, *, alpha=1.0):
    return xp.where(x > _const(x, alpha), x, _const(x, 0))


@kernel('Elu', samples='elementwise')
def elu(xp, x, *, alpha=1.0, consumed_inputs=None):
    return xp.where(x > 0, x, _const(x, alpha) * xp.expm1(xp.minimum(x, _const(x, 0))))


@kernel('Selu', samples='elementwise')
def selu(xp, x, *, alpha=1.6732632423543772, gamma=1.0507009873554805, consumed_inputs=None):
    negative = _const(x, alpha) * xp.expm1(xp.minimum(x, _const(x, 0)))
    return _const(x, gamma) * xp.where(x > 0, x, negative)


@kernel('Celu', samples='elementwise')
def celu(xp, x, *, alpha=1.0):
    a = _const(x, alpha)
    return xp.maximum(x, _const(x, 0)) + xp.minimum(_const(x, 0), a * xp.expm1(x / a))


@kernel('Shrink', samples='elementwise')
def shrink(xp, x, *, bias=0.0, lambd=0.5):
    # Also defined for integer tensors: the attributes are cast like CastLike does.
    b, lam = _const(x, bias), _const(x, lambd)
    return xp.where(x < -lam, x + b, xp.where(x > lam, x - b, _const(x, 0)))


# -- sigmoids and smooth activations ------------------------------------------

def _sigmoid(xp, x):
    # exp of -|x| never overflows; mirror the result for negative inputs.
    e = xp.exp(-xp.abs(x))
    one = _const(x, 1)
    return xp.where(x >= 0, one / (one + e), e / (one + e))


def _softplus(xp, x):
    # log(1 + e^x) = max(x, 0) + log1p(e^-|x|): no overflow for large |x|.
    return xp.maximum(x, _const(x, 0)) + xp.log1p(xp.exp(-xp.abs(x)))


@kernel('Sigmoid', cost=per_element(200), epilogue=True,  # 170 to 250 measured
        samples='elementwise')
def sigmoid(xp, x, *, consumed_inputs=None):
    return _sigmoid(xp, x)


@kernel('Tanh', epilogue=True, samples='elementwise')
def tanh(xp, x, *, consumed_inputs=None):
    return xp.tanh(x)


@kernel('HardSigmoid', samples='elementwise')
def hard_sigmoid(xp, x, *, alpha=0.2, beta=0.5, consumed_inputs=None):
    return xp.clip(_const(x, alpha) * x + _const(x, beta), _const(x, 0), _const(x, 1))


@kernel('HardSwish', epilogue=True, samples='elementwise')
def hard_swish(xp, x):
    return x * xp.clip(x / _const(x, 6) + _const(x, 0.5), _const(x, 0), _const(x, 1))


@kernel('Softplus', samples='elementwise')
def softplus(xp, x):
    return _softplus(xp, x)


@kernel('Softsign', samples='elementwise')
def softsign(xp, x):
    return x / (_const(x, 1) + xp.abs(x))


@kernel('Mish', samples='elementwise')
def mish(xp, x):
    return x * xp.tanh(_softplus(xp, x))


@kernel('Swish', epilogue=True, samples='elementwise')
def swish(xp, x, *, alpha=1.0):
    # alpha 1 (SiLU, as the fusion writes it): no pass multiplying by 1, so
    # x * Sigmoid(x) fused costs what its two kernels do, less one array.
    return x * _sigmoid(xp, x if alpha == 1.0 else _const(x, alpha) * x)


def _erfc(xp, z):
    """erfc(z) for z >= 0, relative error below 1.2e-7 (the Chebyshev fit of
    Numerical Recipes, section 6.2), evaluated in float64."""
    t = 1.0 / (1.0 + 0.5 * z)
    poly = 0.17087277
    for c in (-0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806,
              0.09678418, 0.37409196, 1.00002368, -1.26551223):
        poly = c + t * poly
    return t * xp.exp(poly - z * z)


@kernel('Gelu', versions=(20, LATEST), epilogue=True, samples='elementwise')
def gelu(xp, x, *, approximate='none'):
    if approximate == 'tanh':
        inner = _const(x, math.sqrt(2 / math.pi)) * (x + _const(x, 0.044715) * x * x * x)
        return _const(x, 0.5) * x * (_const(x, 1) + xp.tanh(inner))
    if approximate != 'none':
        raise ValueError("Gelu: approximate must be 'none' or 'tanh', got %r" % (approximate,))
    # 1 + erf(x/sqrt 2) is erfc(-x/sqrt 2); going through erfc of |x| keeps the
    # relative accuracy where the result is tiny (large negative x).
    z = xp.abs(x.astype(xp.float64)) / math.sqrt(2)
    c = _erfc(xp, z)
    one_plus_erf = xp.where(x >= 0, 2.0 - c, c)
    return (0.5 * x * one_plus_erf).astype(x.dtype)


# -- the Softmax family ---------------------------------------------------------
# Which axes a node normalises over changed at version 13 (softmax_axes): one
# kernel for each side of the change, each asking the shared rule.

def _coerced(fn, xp, x, axis):
    """``fn(xp, x, axis)`` (normalising along one axis) over the axes the
    versions before 13 normalise over: ``x`` is coerced to 2-D at the first
    of them, as ONNX defines those versions."""
    axes = softmax_axes(12, x.ndim, axis)
    rows = math.prod(x.shape[:axes[0]]) if axes else 1
    return fn(xp, x.reshape(rows, -1), 1).reshape(x.shape)


def log_softmax_along(xp, x, axis):
    """log(softmax(x)) along ``axis``, stable for large inputs (shared with the
    loss family)."""
    shifted = x - x.max(axis=axis, keepdims=True)
    shifted -= xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))
    return shifted


def _softmax(xp, x, axis):
    e = x - x.max(axis=axis, keepdims=True)
    xp.exp(e, out=e)
    e /= e.sum(axis=axis, keepdims=True)
    return e


def _hardmax(xp, x, axis):
    # One-hot of the first maximum along axis.
    first = xp.expand_dims(xp.argmax(x, axis=axis), axis)
    positions = xp.arange(x.shape[axis]).reshape((-1,) + (1,) * (x.ndim - 1 - axis % x.ndim))
    return (positions == first).astype(x.dtype)


@kernel('Softmax', versions=(1, 12))
def softmax_v1(xp, x, *, axis=1):
    return _coerced(_softmax, xp, x, axis)


@kernel('Softmax', versions=(13, LATEST), samples='along_axis')
def softmax(xp, x, *, axis=-1):
    return _softmax(xp, x, *softmax_axes(13, x.ndim, axis))


@kernel('LogSoftmax', versions=(1, 12))
def log_softmax_v1(xp, x, *, axis=1):
    return _coerced(log_softmax_along, xp, x, axis)


@kernel('LogSoftmax', versions=(13, LATEST), samples='along_axis')
def log_softmax(xp, x, *, axis=-1):
    return log_softmax_along(xp, x, *softmax_axes(13, x.ndim, axis))


@kernel('Hardmax', versions=(1, 12), gradient=False)
def hardmax_v1(xp, x, *, axis=1):
    return _coerced(_hardmax, xp, x, axis)


@kernel('Hardmax', versions=(13, LATEST), samples='along_axis')
def hardmax(xp, x, *, axis=-1):
    return _hardmax(xp, x, *softmax_axes(13, x.ndim, axis))


# -- gradient kernels (org.chainer_compiler) ---------------------------------------------

from .registry import CUSTOM_DOMAIN, elements, like  # noqa: E402


def _mask_bytes(inputs, outputs, attributes):
    """The scratch of a comparison's mask: one byte per element of input 0."""
    return elements(inputs[0])


@kernel('ReluGrad', domain=CUSTOM_DOMAIN, outputs=('gx',), types=like(1), scratch=_mask_bytes)
def relu_grad(xp, y, gy):
    """Gradient of Relu from its output ``y``: ``gy`` where ``y > 0``, else 0
    (one instruction instead of Greater and Where)."""
    if xp is not numpy:
        gx = cupy_kernels.relu_grad(xp, y, gy)
        if gx is not None:
            return gx
    return xp.multiply(gy, y > _const(y, 0))


@kernel('GeluGrad', domain=CUSTOM_DOMAIN, outputs=('gx',), types=like(0))
def gelu_grad(xp, gy, x, *, approximate='none'):
    """Gradient of Gelu: ``gy * d gelu(x) / dx`` (the exact form through the
    same erfc as the forward kernel, or the tanh approximation's)."""
    if approximate == 'tanh':
        c, k = _const(x, math.sqrt(2 / math.pi)), _const(x, 0.044715)
        half, one = _const(x, 0.5), _const(x, 1)
        square = x * x
        t = xp.tanh(c * x * (one + k * square))
        slope = half * (one + t) + half * x * (one - t * t) * c * (one + _const(x, 3) * k * square)
        return (gy * slope).astype(x.dtype, copy=False)
    if approximate != 'none':
        raise ValueError("GeluGrad: approximate must be 'none' or 'tanh', got %r" % (approximate,))
    wide = x.astype(xp.float64)
    c = _erfc(xp, xp.abs(wide) / math.sqrt(2))
    cdf = 0.5 * xp.where(wide >= 0, 2.0 - c, c)
    density = xp.exp(-0.5 * wide * wide) / math.sqrt(2 * math.pi)
    return (gy * (cdf + wide * density)).astype(x.dtype, copy=False)

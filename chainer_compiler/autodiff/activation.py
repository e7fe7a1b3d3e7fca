"""Gradient rules for the activation family.

Rules read the output where it determines the derivative (Relu, Sigmoid,
Tanh, Elu/Selu/Celu with positive alpha, Softmax, LogSoftmax ...), else the
input.  At a kink the derivative of the branch the kernel takes is used
(LeakyRelu and PRelu take x at 0, Relu/Elu/Selu/Celu the other side).

Custom operator (org.chainer_compiler, kernel in runtime/ops/activation.py):
GeluGrad(gy, x; approximate) -> gx.
"""
import numpy
from onnx import helper

from ..runtime.ops.opset_rules import softmax_axes
from ..runtime.ops.registry import CUSTOM_DOMAIN
from .registry import gradient


def _scalar(b, value, like):
    return b.constant(numpy.asarray(value, dtype=b.dtype(like)), hint='c')


def _where(b, condition, a, c, like):
    """Where(condition, a, c); before opset 9 (no Where) the blend
    c + (a - c) mask."""
    if b.opset >= 9:
        return b.node('Where', [condition, a, c])
    mask = b.node('Cast', [condition], to=helper.np_dtype_to_tensor_dtype(b.dtype(like)))
    return b.node('Add', [c, b.node('Mul', [b.node('Sub', [a, c]), mask])])


def _gate(b, condition, gy, like):
    """gy where ``condition``, else 0."""
    if b.opset >= 9:
        return b.node('Where', [condition, gy, _scalar(b, 0, like)])
    mask = b.node('Cast', [condition], to=helper.np_dtype_to_tensor_dtype(b.dtype(like)))
    return b.node('Mul', [gy, mask])


def _ge(b, x, y):
    if b.opset >= 12:
        return b.node('GreaterOrEqual', [x, y])
    return b.node('Not', [b.node('Less', [x, y])])


@gradient('Relu')
def relu_grad(b, node, gys):
    gy, = gys
    return [b.node('ReluGrad', [node.output[0], gy], domain=CUSTOM_DOMAIN)]


@gradient('LeakyRelu')
def leaky_relu_grad(b, node, gys):
    # The kernel takes x where x >= 0; with alpha > 0, y >= 0 exactly there.
    gy, = gys
    alpha = b.attr(node, 'alpha')
    v = node.output[0] if alpha > 0 else node.input[0]
    slope = b.node('Mul', [gy, _scalar(b, alpha, v)])
    return [_where(b, _ge(b, v, _scalar(b, 0, v)), gy, slope, v)]


def _exponential_unit_grad(b, node, gy, scale, alpha):
    """Elu/Selu: y = scale x (x > 0), scale alpha (e^x - 1) (x <= 0); the
    derivative is scale, or y + scale alpha on the negative side."""
    if alpha > 0:
        y = node.output[0]
        positive = b.node('Greater', [y, _scalar(b, 0, y)])
        negative = b.node('Add', [y, _scalar(b, scale * alpha, y)])
    else:
        x = node.input[0]
        positive = b.node('Greater', [x, _scalar(b, 0, x)])
        negative = b.node('Mul', [b.node('Exp', [x]), _scalar(b, scale * alpha, x)])
    y = node.output[0]
    slope = _where(b, positive, _scalar(b, scale, y), negative, y)
    return b.node('Mul', [gy, slope])


@gradient('Elu')
def elu_grad(b, node, gys):
    return [_exponential_unit_grad(b, node, gys[0], 1.0, b.attr(node, 'alpha'))]


@gradient('Selu')
def selu_grad(b, node, gys):
    alpha = b.attr(node, 'alpha')
    gamma = b.attr(node, 'gamma')
    return [_exponential_unit_grad(b, node, gys[0], gamma, alpha)]


@gradient('Celu')
def celu_grad(b, node, gys):
    # y = max(0, x) + min(0, alpha (e^(x/alpha) - 1)): slope 1 for x > 0,
    # e^(x/alpha) = y/alpha + 1 for x <= 0.
    gy, = gys
    alpha = b.attr(node, 'alpha')
    y = node.output[0]
    positive = b.node('Greater', [y, _scalar(b, 0, y)])
    negative = b.node('Add', [b.node('Mul', [y, _scalar(b, 1 / alpha, y)]), _scalar(b, 1, y)])
    slope = _where(b, positive, _scalar(b, 1, y), negative, y)
    return [b.node('Mul', [gy, slope])]


@gradient('ThresholdedRelu')
def thresholded_relu_grad(b, node, gys):
    # y = x where x > alpha, else 0: with alpha >= 0, y > alpha exactly there.
    gy, = gys
    alpha = b.attr(node, 'alpha')
    v = node.output[0] if alpha >= 0 else node.input[0]
    return [_gate(b, b.node('Greater', [v, _scalar(b, alpha, v)]), gy, v)]


@gradient('PRelu')
def prelu_grad(b, node, gys):
    gy, = gys
    x, slope = node.input
    sx, ss = b.shape(x), b.shape(slope)
    nonnegative = _ge(b, x, _scalar(b, 0, x))
    aligned = ss
    if b.version(node) < 7 and len(ss) == 1 and ss[0] > 1 and len(sx) > 2:
        aligned = ss + (1,) * (len(sx) - 2)  # one slope per channel (axis 1)
        slope_b = b.reshape(slope, aligned)
    else:
        slope_b = slope
    gx = _where(b, nonnegative, gy, b.node('Mul', [gy, slope_b]), x)
    g_slope = _where(b, nonnegative, _scalar(b, 0, x), b.node('Mul', [gy, x]), x)
    g_slope = b.sum_to(g_slope, sx, aligned)
    if aligned != ss:
        g_slope = b.reshape(g_slope, ss)
    return [gx, g_slope]


@gradient('Sigmoid')
def sigmoid_grad(b, node, gys):
    # gy y (1 - y)
    y = node.output[0]
    slope = b.node('Mul', [y, b.node('Sub', [_scalar(b, 1, y), y])])
    return [b.node('Mul', [gys[0], slope])]


@gradient('Tanh')
def tanh_grad(b, node, gys):
    # gy (1 - y^2)
    y = node.output[0]
    slope = b.node('Sub', [_scalar(b, 1, y), b.node('Mul', [y, y])])
    return [b.node('Mul', [gys[0], slope])]


@gradient('HardSigmoid')
def hard_sigmoid_grad(b, node, gys):
    # alpha gy where 0 < y < 1.
    gy, = gys
    alpha = b.attr(node, 'alpha')
    y = node.output[0]
    inside = b.node('And', [b.node('Greater', [y, _scalar(b, 0, y)]),
                            b.node('Less', [y, _scalar(b, 1, y)])])
    return [_gate(b, inside, b.node('Mul', [gy, _scalar(b, alpha, y)]), y)]


@gradient('HardSwish')
def hard_swish_grad(b, node, gys):
    # y = x clip(x/6 + 1/2, 0, 1): slope 0 below -3, 1 above 3, x/3 + 1/2 between.
    gy, = gys
    x = node.input[0]
    middle = b.node('Add', [b.node('Mul', [x, _scalar(b, 1 / 3, x)]), _scalar(b, 0.5, x)])
    slope = _where(b, b.node('Greater', [x, _scalar(b, 3, x)]), _scalar(b, 1, x),
                   _where(b, b.node('Less', [x, _scalar(b, -3, x)]), _scalar(b, 0, x), middle, x),
                   x)
    return [b.node('Mul', [gy, slope])]


@gradient('Softplus')
def softplus_grad(b, node, gys):
    return [b.node('Mul', [gys[0], b.node('Sigmoid', [node.input[0]])])]


@gradient('Softsign')
def softsign_grad(b, node, gys):
    # gy / (1 + |x|)^2
    x = node.input[0]
    denominator = b.node('Add', [b.node('Abs', [x]), _scalar(b, 1, x)])
    return [b.node('Div', [gys[0], b.node('Mul', [denominator, denominator])])]


@gradient('Shrink')
def shrink_grad(b, node, gys):
    # Slope 1 where |x| > lambd, else 0.
    gy, = gys
    x = node.input[0]
    lambd = b.attr(node, 'lambd')
    outside = b.node('Greater', [b.node('Abs', [x]), _scalar(b, lambd, x)])
    return [_gate(b, outside, gy, x)]


@gradient('Swish')
def swish_grad(b, node, gys):
    # y = x s with s = sigmoid(alpha x): slope s + alpha y (1 - s).
    gy, = gys
    x, y = node.input[0], node.output[0]
    alpha = b.attr(node, 'alpha')
    ax = x if alpha == 1.0 else b.node('Mul', [x, _scalar(b, alpha, x)])
    s = b.node('Sigmoid', [ax])
    ay = y if alpha == 1.0 else b.node('Mul', [y, _scalar(b, alpha, y)])
    slope = b.node('Add', [s, b.node('Mul', [ay, b.node('Sub', [_scalar(b, 1, x), s])])])
    return [b.node('Mul', [gy, slope])]


@gradient('Mish')
def mish_grad(b, node, gys):
    # y = x tanh(sp(x)): slope t + x (1 - t^2) sigmoid(x), t = y / x recomputed.
    gy, = gys
    x = node.input[0]
    t = b.node('Tanh', [b.node('Softplus', [x])])
    one_minus = b.node('Sub', [_scalar(b, 1, x), b.node('Mul', [t, t])])
    tail = b.node('Mul', [b.node('Mul', [x, one_minus]), b.node('Sigmoid', [x])])
    return [b.node('Mul', [gy, b.node('Add', [t, tail])])]


@gradient('Gelu')
def gelu_grad(b, node, gys):
    approximate = b.attr(node, 'approximate')
    return [b.node('GeluGrad', [gys[0], node.input[0]], 1, domain=CUSTOM_DOMAIN,
                   approximate=None if approximate == 'none' else approximate)]


# -- the Softmax family -------------------------------------------------------

def _softmax_axes(b, node):
    """Axes Softmax/LogSoftmax ``node`` normalises over (softmax_axes)."""
    return list(softmax_axes(b.version(node), len(b.dims(node.input[0])),
                             b.attr(node, 'axis')))


@gradient('Softmax')
def softmax_grad(b, node, gys):
    # y (gy - sum(gy y))
    gy, = gys
    y = node.output[0]
    gy_y = b.node('Mul', [gy, y])
    total = b.reduce('ReduceSum', gy_y, _softmax_axes(b, node), keepdims=True)
    return [b.node('Sub', [gy_y, b.node('Mul', [y, total])])]


@gradient('LogSoftmax')
def log_softmax_grad(b, node, gys):
    # gy - exp(y) sum(gy)
    gy, = gys
    y = node.output[0]
    total = b.reduce('ReduceSum', gy, _softmax_axes(b, node), keepdims=True)
    return [b.node('Sub', [gy, b.node('Mul', [b.node('Exp', [y]), total])])]


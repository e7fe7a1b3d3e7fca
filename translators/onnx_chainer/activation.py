"""Converters for chainer.functions.activation.

``F.selu`` (``scale * elu``) and ``F.maxout`` (reshape + max) are not
FunctionNodes of their own: their pieces are converted where they belong.
"""
import numpy

from ...runtime.ops.opset_rules import softmax_axes
from .registry import converter  # noqa: F401


def _scalar(value, array):
    """A 0-d array of ``value`` in ``array``'s dtype."""
    return numpy.asarray(value, dtype=array.dtype)


def _broadcast_param(ctx, param, param_ndim, x_ndim):
    """A parameter shaped like ``x.shape[1:1 + param.ndim]`` (PReLU's W,
    Swish's beta) made broadcastable against ``x`` by trailing 1s."""
    trailing = list(range(param_ndim, x_ndim - 1))
    return ctx.unsqueeze(param, trailing) if trailing else param


@converter('ReLU')
def convert_relu(ctx, call):
    ctx.node('Relu', call.inputs, call.outputs)


@converter('ClippedReLU')
def convert_clipped_relu(ctx, call):
    """min(max(0, x), z)."""
    ctx.clip(call.inputs[0], 0, call.func.cap, call.input_arrays[0].dtype,
             out=call.outputs[0])


@converter('CReLU')
def convert_crelu(ctx, call):
    """(max(0, x), max(0, -x)) concatenated along ``axis``."""
    x, = call.inputs
    neg = ctx.node('Neg', [x])
    both = ctx.node('Concat', [x, neg], axis=call.func.axis)
    ctx.node('Relu', [both], call.outputs)


@converter('ELU')
def convert_elu(ctx, call):
    ctx.node('Elu', call.inputs, call.outputs, alpha=float(call.func.alpha))


@converter('HardSigmoid')
def convert_hard_sigmoid(ctx, call):
    """clip(0.2 x + 0.5, 0, 1): ONNX's defaults, stated explicitly."""
    ctx.node('HardSigmoid', call.inputs, call.outputs, alpha=0.2, beta=0.5)


@converter('LeakyReLU')
def convert_leaky_relu(ctx, call):
    ctx.node('LeakyRelu', call.inputs, call.outputs, alpha=float(call.func.slope))


@converter('PReLUFunction')
def convert_prelu(ctx, call):
    """W has the shape of ``x.shape[1:1 + W.ndim]``: chainer aligns it after
    the batch axis, ONNX broadcasts from the right, so trailing 1s are
    added when x has more axes."""
    x, W = call.inputs
    x_arr, W_arr = call.input_arrays
    slope = _broadcast_param(ctx, W, W_arr.ndim, x_arr.ndim)
    ctx.node('PRelu', [x, slope], call.outputs)


@converter('RReLU')
def convert_rrelu(ctx, call):
    """Randomized leaky ReLU.  Outside training the slope is the constant
    (lower + upper) / 2.  In a training-mode export a slope is drawn
    uniformly from [lower, upper) per element on every run, as
    ``F.rrelu`` does when no ``r`` is given (an ``r`` passed by the user
    cannot be told apart from a drawn one after the fact, and is not
    reproduced)."""
    func = call.func
    x, = call.inputs
    x_arr, = call.input_arrays
    if not call.train:
        ctx.node('LeakyRelu', [x], call.outputs,
                 alpha=float((func.lower + func.upper) / 2))
        return
    r = ctx.node('RandomUniformLike', [x], low=float(func.lower), high=float(func.upper))
    scaled = ctx.node('Mul', [x, r])
    negative = ctx.node('Less', [x, ctx.constant(_scalar(0, x_arr), hint='zero')])
    ctx.node('Where', [negative, scaled, x], call.outputs)


@converter('Sigmoid')
def convert_sigmoid(ctx, call):
    ctx.node('Sigmoid', call.inputs, call.outputs)


@converter('Tanh')
def convert_tanh(ctx, call):
    ctx.node('Tanh', call.inputs, call.outputs)


@converter('Softplus')
def convert_softplus(ctx, call):
    """log(1 + exp(beta x)) / beta.  (onnx-chainer dropped beta.)"""
    beta = call.func.beta
    x, = call.inputs
    x_arr, = call.input_arrays
    if beta == 1.0:
        ctx.node('Softplus', [x], call.outputs)
        return
    bx = ctx.node('Mul', [x, ctx.constant(_scalar(beta, x_arr), hint='beta')])
    y = ctx.node('Softplus', [bx])
    ctx.node('Mul', [y, ctx.constant(_scalar(call.func.beta_inv, x_arr), hint='beta_inv')],
             call.outputs)


@converter('Swish')
def convert_swish(ctx, call):
    """x * sigmoid(beta x), beta shaped like ``x.shape[1:1 + beta.ndim]``."""
    x, beta = call.inputs
    x_arr, beta_arr = call.input_arrays
    beta = _broadcast_param(ctx, beta, beta_arr.ndim, x_arr.ndim)
    gate = ctx.node('Sigmoid', [ctx.node('Mul', [x, beta])])
    ctx.node('Mul', [x, gate], call.outputs)


def _softmax(op, ctx, call):
    """Softmax/LogSoftmax along one axis.  Where ONNX's ``axis`` means more
    axes than that one (softmax_axes: before opset 13 the input is coerced
    to 2-D at ``axis``), it equals Chainer's only when the others are all of
    size 1; otherwise the axis is moved last and back."""
    shape = call.input_arrays[0].shape
    ndim = len(shape)
    axis = call.func.axis % ndim
    if all(shape[a] == 1 for a in softmax_axes(ctx.opset, ndim, axis) if a != axis):
        ctx.node(op, call.inputs, call.outputs, axis=axis)
        return
    perm = list(range(ndim))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    moved = ctx.node('Transpose', call.inputs, perm=perm)
    y = ctx.node(op, [moved], axis=ndim - 1)
    ctx.node('Transpose', [y], call.outputs, perm=perm)


@converter('Softmax')
def convert_softmax(ctx, call):
    _softmax('Softmax', ctx, call)


@converter('LogSoftmax')
def convert_log_softmax(ctx, call):
    _softmax('LogSoftmax', ctx, call)

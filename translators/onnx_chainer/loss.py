"""Converters for chainer.functions.loss (and F.accuracy)."""
import numpy
from onnx import TensorProto as onnx_types

from .registry import converter


def _scalar(ctx, value, dtype, hint='const'):
    return ctx.constant(numpy.asarray(value, dtype=dtype), hint=hint)


def _valid_mask(ctx, t, t_dtype, ignore_label):
    """Boolean ``t != ignore_label``."""
    return ctx.node('Not', [ctx.node('Equal', [t, _scalar(ctx, ignore_label, t_dtype, 'ignore')])])


def _divide_by_count(ctx, total, mask, dtype, normalize, batch, out):
    """total / max(count, 1): the number of valid elements (normalize) or
    the batch size."""
    if normalize:
        count = ctx.reduce('ReduceSum', ctx.node('Cast', [mask], to=_onnx_type(dtype)),
                           keepdims=False)
        count = ctx.node('Max', [count, _scalar(ctx, 1, dtype, 'one')])
    else:
        count = _scalar(ctx, max(batch, 1), dtype, 'count')
    return ctx.node('Div', [total, count], out)


def _onnx_type(dtype):
    from onnx import helper
    return helper.np_dtype_to_tensor_dtype(numpy.dtype(dtype))


def _log_softmax_axis1(ctx, x, ndim):
    """log softmax over axis 1 of an N-d array.  LogSoftmax before opset 13
    normalizes over all axes from ``axis`` on, so it is only used where
    axis 1 is the last axis."""
    if ctx.opset >= 13 or ndim == 2:
        return ctx.node('LogSoftmax', [x], axis=1)
    shifted = ctx.node('Sub', [x, ctx.reduce('ReduceMax', x, [1], keepdims=True)])
    log_sum = ctx.node('Log', [ctx.reduce('ReduceSum', ctx.node('Exp', [shifted]), [1],
                                          keepdims=True)])
    return ctx.node('Sub', [shifted, log_sum])


@converter('SoftmaxCrossEntropy')
def convert_softmax_cross_entropy(ctx, call):
    """Softmax cross entropy over axis 1 of N-d input, with ignore_label,
    class_weight, reduce='mean'/'no' and normalize (onnx-chainer handled
    2-D, mean, no weights only).

    Chainer's 'mean' divides the (class-weighted) sum by the number of
    non-ignored labels (normalize=True) or by the batch size, never by the
    sum of weights as ONNX's reduction='mean' does with weights, so the sum
    is divided here.  SoftmaxCrossEntropyLoss from opset 12; the primitive
    form (LogSoftmax, GatherElements) for opset 11."""
    func = call.func
    x, t = call.inputs
    xa, ta = call.input_arrays
    if ta.dtype.kind == 'f':
        _soft_target_cross_entropy(ctx, call)
        return
    dtype = xa.dtype
    weight = None
    if func.class_weight is not None:
        weight = ctx.constant(numpy.asarray(func.class_weight, dtype=dtype), hint='class_weight')
    mean = func.reduce == 'mean'
    per_element = None if mean else call.outputs
    mask = _valid_mask(ctx, t, ta.dtype, func.ignore_label)
    if ctx.opset >= 12:
        loss = ctx.node('SoftmaxCrossEntropyLoss', [x, t] + ([weight] if weight else []),
                        per_element or 1, reduction='sum' if mean else 'none',
                        ignore_index=int(func.ignore_label))
    else:
        log_y = _log_softmax_axis1(ctx, x, xa.ndim)
        safe_t = ctx.node('Where', [mask, t, _scalar(ctx, 0, ta.dtype, 'zero')])
        if ta.dtype != numpy.int64:
            safe_t = ctx.node('Cast', [safe_t], to=onnx_types.INT64)
        log_p = ctx.node('GatherElements', [log_y, ctx.unsqueeze(safe_t, [1])], axis=1)
        log_p = ctx.squeeze(log_p, [1])
        if weight is not None:
            log_p = ctx.node('Mul', [log_p, ctx.node('Gather', [weight, safe_t], axis=0)])
        log_p = ctx.node('Mul', [log_p, ctx.node('Cast', [mask], to=_onnx_type(dtype))])
        if mean:
            loss = ctx.node('Neg', [ctx.reduce('ReduceSum', log_p, keepdims=False)])
        else:
            loss = ctx.node('Neg', [log_p], per_element)
    if mean:
        _divide_by_count(ctx, loss, mask, dtype, func.normalize, xa.shape[0], call.outputs)


def _soft_target_cross_entropy(ctx, call):
    """Soft targets (t has x's shape): -sum_c t log y (or the KL
    divergence), averaged over all but the class axis for 'mean'."""
    func = call.func
    x, t = call.inputs
    xa = call.input_arrays[0]
    log_y = _log_softmax_axis1(ctx, x, xa.ndim)
    if func.soft_target_loss == 'kl-divergence':
        log_t = ctx.node('Log', [ctx.node('Add', [t, _scalar(ctx, func.eps, xa.dtype, 'eps')])])
        terms = ctx.node('Mul', [t, ctx.node('Sub', [log_t, log_y])])
    else:
        terms = ctx.node('Neg', [ctx.node('Mul', [t, log_y])])
    if func.reduce != 'mean':
        ctx.reduce('ReduceSum', terms, [1], keepdims=False, out=call.outputs[0])
        return
    total = ctx.reduce('ReduceSum', terms, keepdims=False)
    count = _scalar(ctx, xa.size // xa.shape[1], xa.dtype, 'count')
    ctx.node('Div', [total, count], call.outputs)


@converter('SigmoidCrossEntropy')
def convert_sigmoid_cross_entropy(ctx, call):
    """-(x (t - [x >= 0]) - log(1 + exp(-|x|))) where t != -1; 'mean'
    divides by the valid count (normalize) or the batch size."""
    func = call.func
    x, t = call.inputs
    xa, ta = call.input_arrays
    dtype = _onnx_type(xa.dtype)
    mask = _valid_mask(ctx, t, ta.dtype, func.ignore_label)
    positive = ctx.node('Cast', [ctx.node('Not', [ctx.node('Less', [
        x, _scalar(ctx, 0, xa.dtype, 'zero')])])], to=dtype)
    t_minus = ctx.node('Sub', [ctx.node('Cast', [t], to=dtype), positive])
    softplus = ctx.node('Softplus', [ctx.node('Neg', [ctx.node('Abs', [x])])])
    term = ctx.node('Sub', [ctx.node('Mul', [x, t_minus]), softplus])
    term = ctx.node('Mul', [term, ctx.node('Cast', [mask], to=dtype)])
    if func.reduce != 'mean':
        ctx.node('Neg', [term], call.outputs)
        return
    total = ctx.node('Neg', [ctx.reduce('ReduceSum', term, keepdims=False)])
    _divide_by_count(ctx, total, mask, xa.dtype, func.normalize, xa.shape[0], call.outputs)


def _difference(ctx, call):
    return ctx.node('Sub', call.inputs[:2])


@converter('MeanSquaredError')
def convert_mean_squared_error(ctx, call):
    diff = _difference(ctx, call)
    ctx.reduce('ReduceMean', ctx.node('Mul', [diff, diff]), keepdims=False, out=call.outputs[0])


@converter('MeanAbsoluteError')
def convert_mean_absolute_error(ctx, call):
    ctx.reduce('ReduceMean', ctx.node('Abs', [_difference(ctx, call)]), keepdims=False,
               out=call.outputs[0])


@converter('SquaredError')
def convert_squared_error(ctx, call):
    diff = _difference(ctx, call)
    ctx.node('Mul', [diff, diff], call.outputs)


@converter('AbsoluteError')
def convert_absolute_error(ctx, call):
    ctx.node('Abs', [_difference(ctx, call)], call.outputs)


@converter('HuberLoss')
def convert_huber_loss(ctx, call):
    """0.5 min(d^2, max(2 delta |d| - delta^2, delta^2)) as Chainer computes
    it; summed over axis 1 unless reduce='no'."""
    func = call.func
    dtype = call.input_arrays[0].dtype
    delta = dtype.type(func.delta)
    a = ctx.node('Abs', [_difference(ctx, call)])
    square = ctx.node('Mul', [a, a])
    linear = ctx.node('Sub', [ctx.node('Mul', [a, _scalar(ctx, 2 * delta, dtype, 'delta')]),
                              _scalar(ctx, delta * delta, dtype, 'delta2')])
    linear = ctx.node('Max', [linear, _scalar(ctx, delta * delta, dtype, 'delta2')])
    half = _scalar(ctx, 0.5, dtype, 'half')
    if func.reduce == 'no':
        ctx.node('Mul', [ctx.node('Min', [square, linear]), half], call.outputs)
        return
    y = ctx.node('Mul', [ctx.node('Min', [square, linear]), half])
    ctx.reduce('ReduceSum', y, [1], keepdims=False, out=call.outputs[0])


@converter('Accuracy')
def convert_accuracy(ctx, call):
    """F.accuracy: the share of argmax(y, axis=1) == t, counting only
    t != ignore_label (0 when none is left)."""
    func = call.func
    y, t = call.inputs
    ya, ta = call.input_arrays
    dtype = _onnx_type(ya.dtype)
    pred = ctx.node('ArgMax', [y], axis=1, keepdims=0)
    pred = ctx.reshape(pred, list(ta.shape))
    if ta.dtype != numpy.int64:
        pred = ctx.node('Cast', [pred], to=_onnx_type(ta.dtype))
    hit = ctx.node('Equal', [pred, t])
    if func.ignore_label is None:
        ctx.reduce('ReduceMean', ctx.node('Cast', [hit], to=dtype), keepdims=False,
                   out=call.outputs[0])
        return
    mask = _valid_mask(ctx, t, ta.dtype, func.ignore_label)
    hits = ctx.reduce('ReduceSum', ctx.node('Cast', [ctx.node('And', [hit, mask])], to=dtype),
                      keepdims=False)
    _divide_by_count(ctx, hits, mask, ya.dtype, True, 0, call.outputs)

"""Converters for chainer.functions.normalization.

Batch normalization
-------------------
``L.BatchNormalization`` calls ``F.fixed_batch_normalization`` (the running
averages ``avg_mean``/``avg_var`` are inputs, traced as the initializers
``<link path>/avg_mean`` and ``/avg_var``) outside training, and
``F.batch_normalization`` in training, which normalizes with the batch
statistics and updates the running averages in place.  Those are not inputs
of the FunctionNode: it holds them as ``running_mean``/``running_var``.  In a
training-mode export the tracer (tracing.UPDATED_IN_PLACE) makes them
initializers holding their values from before the trace, named by the
link's path (``<link path>/avg_mean``, ``/avg_var``), and the updated values
extra graph outputs ``<link path>/avg_mean_updated`` and ``/avg_var_updated``;
a link called twice updates them twice, the second call reading the first's
result.

Chainer updates ``avg = decay * avg + (1 - decay) * batch_stat`` (ONNX's
``momentum`` is ``decay``), using the *unbiased* batch variance (times
m / (m - 1), m values per channel) for ``avg_var``, where ONNX's
BatchNormalization uses the population variance; the variance output is
corrected (``GraphBuilder.batch_normalization_training``), so the running
statistics match Chainer's.  Layouts other than statistics per axis 1 use
reductions instead of the ONNX op.
"""
import numpy

from .registry import converter  # noqa: F401


def _scalar(value, dtype):
    return numpy.asarray(value, dtype=dtype)


def _broadcast_shape(x_shape, key_axis):
    """Shape of a per-key-axes parameter made to broadcast against x."""
    return [d if i in key_axis else 1 for i, d in enumerate(x_shape)]


def _as_broadcast(ctx, param, param_arr, x_shape, key_axis):
    shape = _broadcast_shape(x_shape, key_axis)
    if list(param_arr.shape) == shape[len(shape) - param_arr.ndim:] and \
            all(d == 1 for d in shape[:len(shape) - param_arr.ndim]):
        return param  # broadcasts from the right already
    return ctx.reshape(param, shape)


def _is_channel_layout(x_ndim, key_axis):
    """ONNX BatchNormalization's layout: statistics per axis 1."""
    return x_ndim >= 2 and tuple(key_axis) == (1,)


# -- BatchNormalization (batch statistics) -------------------------------------

@converter('BatchNormalization')
def convert_batch_normalization(ctx, call):
    """Normalization with the batch's statistics (``F.batch_normalization``);
    in a training-mode export with running averages, their update too."""
    func = call.func
    x_arr, gamma_arr = call.input_arrays[:2]
    axis, key_axis = tuple(func.axis), tuple(func.key_axis)
    channels = _is_channel_layout(x_arr.ndim, key_axis)
    if not call.state_inputs:
        # Only Y: the running averages (if any) are not part of an inference graph.
        if channels:
            dummy_mean = ctx.constant(numpy.zeros(gamma_arr.shape, gamma_arr.dtype), hint='mean')
            dummy_var = ctx.constant(numpy.ones(gamma_arr.shape, gamma_arr.dtype), hint='var')
            ctx.batch_normalization_training(call.inputs + [dummy_mean, dummy_var],
                                             [call.outputs[0], None, None], func.eps, func.decay)
        else:
            _batch_norm_primitives(ctx, call, axis, key_axis, x_arr.dtype, call.outputs[0])
        return
    mean_in, var_in = call.state_inputs
    mean_out, var_out = call.state_outputs
    count = x_arr.size // gamma_arr.size
    stat_dtype = numpy.asarray(func.running_var).dtype
    if channels:
        ctx.batch_normalization_training(call.inputs + [mean_in, var_in],
                                         [call.outputs[0], mean_out, var_out], func.eps,
                                         func.decay, unbiased_count=count,
                                         stat_dtype=stat_dtype)
        return
    mean, var = _batch_norm_primitives(ctx, call, axis, key_axis, x_arr.dtype, call.outputs[0])
    adjust = count / max(count - 1, 1)
    decay = float(func.decay)
    stat_shape = list(gamma_arr.shape)
    for stat, running, factor, out in ((mean, mean_in, 1.0, mean_out),
                                       (var, var_in, adjust, var_out)):
        old = ctx.node('Mul', [running, ctx.constant(_scalar(decay, stat_dtype), hint='decay')])
        new = ctx.node('Mul', [ctx.reshape(stat, stat_shape), ctx.constant(
            _scalar((1 - decay) * factor, stat_dtype), hint='rate')])
        ctx.node('Add', [old, new], [out])


def _batch_norm_primitives(ctx, call, axis, key_axis, dtype, out):
    """Y from the batch statistics over ``axis`` with reductions (any
    layout); returns the keepdims batch mean and (population) variance."""
    x, gamma, beta = call.inputs
    x_arr, gamma_arr, beta_arr = call.input_arrays
    mean = ctx.reduce('ReduceMean', x, axis, keepdims=True)
    centred = ctx.node('Sub', [x, mean])
    var = ctx.reduce('ReduceMean', ctx.node('Mul', [centred, centred]), axis, keepdims=True)
    std = ctx.node('Sqrt', [ctx.node('Add', [var, ctx.constant(_scalar(call.func.eps, dtype),
                                                               hint='eps')])])
    gamma_b = _as_broadcast(ctx, gamma, gamma_arr, x_arr.shape, key_axis)
    beta_b = _as_broadcast(ctx, beta, beta_arr, x_arr.shape, key_axis)
    scale = ctx.node('Div', [gamma_b, std])
    ctx.node('Add', [ctx.node('Mul', [centred, scale]), beta_b], [out])
    return mean, var


# -- FixedBatchNormalization ----------------------------------------------------

@converter('FixedBatchNormalization')
def convert_fixed_batch_normalization(ctx, call):
    """(x - mean) / sqrt(var + eps) * gamma + beta with given statistics."""
    func = call.func
    x_arr = call.input_arrays[0]
    key_axis = tuple(func.key_axis)
    if _is_channel_layout(x_arr.ndim, key_axis):
        ctx.node('BatchNormalization', call.inputs, call.outputs, epsilon=float(func.eps))
        return
    x, gamma, beta, mean, var = call.inputs
    shape = x_arr.shape
    gamma_arr, beta_arr, mean_arr, var_arr = call.input_arrays[1:]
    b = [_as_broadcast(ctx, n, a, shape, key_axis)
         for n, a in ((gamma, gamma_arr), (beta, beta_arr), (mean, mean_arr), (var, var_arr))]
    gamma_b, beta_b, mean_b, var_b = b
    std = ctx.node('Sqrt', [ctx.node('Add', [var_b, ctx.constant(
        _scalar(func.eps, var_arr.dtype), hint='eps')])])
    scale = ctx.node('Div', [gamma_b, std])
    centred = ctx.node('Sub', [x, mean_b])
    ctx.node('Add', [ctx.node('Mul', [centred, scale]), beta_b], call.outputs)


# -- per-sample normalizations -------------------------------------------------

def _per_channel(ctx, param, x_ndim):
    """A (C,) parameter shaped (C, 1, ...) against (N, C, D1, ...)."""
    trailing = list(range(1, x_ndim - 1))
    return ctx.unsqueeze(param, trailing) if trailing else param


@converter('GroupNormalization')
def convert_group_normalization(ctx, call):
    """Statistics per sample over each group of C / groups channels (and
    all spatial axes), then a per-channel gamma and beta.  From opset 21 ONNX
    GroupNormalization means exactly that (opset 18's took per-group scale
    and bias); before, the groups are made the channels of an
    InstanceNormalization."""
    func = call.func
    x, gamma, beta = call.inputs
    x_arr = call.input_arrays[0]
    if ctx.opset >= 21:
        ctx.node('GroupNormalization', [x, gamma, beta], call.outputs,
                 num_groups=int(func.groups), epsilon=float(func.eps))
        return
    groups = int(func.groups)
    dtype = x_arr.dtype
    grouped = ctx.reshape(x, [0, groups, -1])
    normed = ctx.node('InstanceNormalization', [
        grouped, ctx.constant(numpy.ones(groups, dtype), hint='ones'),
        ctx.constant(numpy.zeros(groups, dtype), hint='zeros')], epsilon=float(func.eps))
    normed = ctx.reshape(normed, [0] + list(x_arr.shape[1:]))
    scaled = ctx.node('Mul', [normed, _per_channel(ctx, gamma, x_arr.ndim)])
    ctx.node('Add', [scaled, _per_channel(ctx, beta, x_arr.ndim)], call.outputs)


@converter('LayerNormalization')
def convert_layer_normalization(ctx, call):
    """(x - mean) / sqrt(var + eps) * gamma + beta over axis 1 of a 2-D x:
    ONNX LayerNormalization from opset 17, reductions before."""
    func = call.func
    x, gamma, beta = call.inputs
    dtype = call.input_arrays[0].dtype
    if ctx.opset >= 17:
        ctx.node('LayerNormalization', [x, gamma, beta], call.outputs, axis=-1,
                 epsilon=float(func.eps))
        return
    mean = ctx.reduce('ReduceMean', x, [1], keepdims=True)
    centred = ctx.node('Sub', [x, mean])
    var = ctx.reduce('ReduceMean', ctx.node('Mul', [centred, centred]), [1], keepdims=True)
    std = ctx.node('Sqrt', [ctx.node('Add', [var, ctx.constant(_scalar(func.eps, dtype),
                                                               hint='eps')])])
    normed = ctx.node('Div', [centred, std])
    ctx.node('Add', [ctx.node('Mul', [normed, gamma]), beta], call.outputs)


@converter('NormalizeL2')
def convert_normalize_l2(ctx, call):
    """x / (sqrt(sum(x^2, axis)) + eps): eps is added to the norm, not under
    the square root.  (onnx-chainer's LpNormalization had no eps, so a zero
    vector gave NaN, and refused axis tuples.)"""
    func = call.func
    x, = call.inputs
    x_arr = call.input_arrays[0]
    axes = sorted(a % x_arr.ndim for a in func.axis)
    norm = ctx.reduce('ReduceL2', x, axes, keepdims=True)
    norm = ctx.node('Add', [norm, ctx.constant(_scalar(func.eps, x_arr.dtype), hint='eps')])
    ctx.node('Div', [x, norm], call.outputs)


@converter('LocalResponseNormalization')
def convert_local_response_normalization(ctx, call):
    """x / (k + alpha * sum over channels c - n//2 .. c + n//2 of x^2)^beta.

    ONNX LRN divides alpha by ``size`` and, for an even size, takes a window
    one channel narrower and lopsided; Chainer's window is always the 2 (n//2)
    + 1 channels centred on c.  So size = 2 (n//2) + 1 and alpha * size are
    passed (onnx-chainer passed size = n, wrong for even n).  onnxruntime's
    LRN takes 4-D input only: other ranks are reshaped around it."""
    func = call.func
    x, = call.inputs
    x_arr = call.input_arrays[0]
    size = 2 * (int(func.n) // 2) + 1
    attrs = dict(size=size, alpha=float(func.alpha) * size, beta=float(func.beta),
                 bias=float(func.k))
    if x_arr.ndim == 4:
        ctx.node('LRN', [x], call.outputs, **attrs)
        return
    y = ctx.node('LRN', [ctx.reshape(x, [0, 0, -1, 1])], **attrs)
    ctx.reshape(y, [0, 0] + list(x_arr.shape[2:]), out=call.outputs[0])


@converter('FixedDecorrelatedBatchNormalization')
def convert_fixed_decorrelated_batch_normalization(ctx, call):
    """Per group of C = c / groups channels: projection (C, C) times the
    centred values of those channels over batch and spatial axes."""
    x, mean, projection = call.inputs
    x_arr = call.input_arrays[0]
    groups = int(call.func.groups)
    b, c = x_arr.shape[:2]
    perm = [1, 0] + list(range(2, x_arr.ndim))
    channels_first = ctx.node('Transpose', [x], perm=perm)
    grouped = ctx.reshape(channels_first, [groups, c // groups, -1])
    centred = ctx.node('Sub', [grouped, ctx.unsqueeze(mean, [2])])
    projected = ctx.node('MatMul', [projection, centred])
    y = ctx.reshape(projected, [c, b] + list(x_arr.shape[2:]))
    ctx.node('Transpose', [y], call.outputs, perm=perm)

"""Normalization kernels: batch, layer, RMS, group, instance, LRN, Lp, MVN.

Statistics are computed in at least float32 (float16 inputs would lose too
much in the sums) and the normalised result is cast back to the input dtype.
Operators with a ``stash_type`` attribute compute in that precision, or in the
input's if it is wider (a float64 input is not degraded to float32); their
saved statistics are returned in the stash type itself.
"""
import numpy

from . import cupy_kernels
from .opset_rules import batch_norm_trains
from .registry import LATEST, elements, kernel, per_element

# ONNX TensorProto element types allowed for stash_type.
_STASH_DTYPES = {1: numpy.dtype(numpy.float32), 10: numpy.dtype(numpy.float16),
                 11: numpy.dtype(numpy.float64)}


def _stash_dtype(stash_type):
    try:
        return _STASH_DTYPES[stash_type]
    except KeyError:
        raise ValueError('stash_type %r is not supported (expected 1, 10 or 11)'
                         % (stash_type,)) from None


def _compute_dtype(x, stash=numpy.float32):
    return numpy.promote_types(x.dtype, stash)


def _moments(x, axes, dtype):
    """x - mean, the mean and the population variance over ``axes`` (kept
    dimensions), computed in ``dtype``."""
    xs = x.astype(dtype, copy=False)
    mean = xs.mean(axis=axes, keepdims=True)
    centred = xs - mean
    return centred, mean, (centred * centred).mean(axis=axes, keepdims=True)


def _standardize(xp, x, axes, epsilon, dtype):
    """(x - mean) / sqrt(var + epsilon) over ``axes``, computed in ``dtype``,
    with the mean and the inverse standard deviation."""
    centred, mean, var = _moments(x, axes, dtype)
    inv_std = 1 / xp.sqrt(var + dtype.type(epsilon))
    return centred * inv_std, mean, inv_std


def _per_channel(param, ndim):
    """Shape a per-channel parameter (C,) to broadcast against (N, C, D1, ...).

    A parameter with more dimensions (BatchNormalization's non-spatial form,
    shape (C, D1, ...)) already broadcasts."""
    if param.ndim == 1:
        return param.reshape((-1,) + (1,) * (ndim - 2))
    return param


def _trailing_axes(x, axis):
    return tuple(range(axis % x.ndim, x.ndim))


# -- BatchNormalization -------------------------------------------------------

def _channel_axes(x, spatial=1):
    """Axes BatchNormalization reduces: all but the channel axis (or only
    the batch axis for the pre-opset-9 ``spatial=0`` form)."""
    return (0,) + tuple(range(2, x.ndim)) if spatial else (0,)


def _batch_norm_inference(xp, x, scale, b, mean, var, epsilon):
    dtype = _compute_dtype(x)
    a = scale.astype(dtype) / xp.sqrt(var.astype(dtype) + dtype.type(epsilon))
    shift = b.astype(dtype) - mean.astype(dtype) * a
    y = x.astype(dtype, copy=False) * _per_channel(a, x.ndim)
    y += _per_channel(shift, x.ndim)
    return y.astype(x.dtype, copy=False)


# -- CuPy: BatchNormalization as raw kernels -----------------------------------
# Written against xp, a training BatchNormalization launches about twenty
# kernels on a GPU, each costing host time comparable to a pass over a small
# X; cupy_kernels does it in three launches, its gradient in two.

def _fused_bn(xp, x, *params, spatial=1):
    """X as (N, C, S) when cupy_kernels' BatchNormalization applies (CuPy,
    float32, per-channel statistics), else None."""
    if xp is numpy or spatial != 1 or x.ndim < 3 or x.dtype != numpy.float32 or any(
            p is not None and (p.dtype != numpy.float32 or p.ndim != 1) for p in params):
        return None
    return xp.ascontiguousarray(x).reshape(x.shape[0], x.shape[1], -1)


def _batch_norm_training(xp, x, scale, b, mean, var, epsilon, momentum, axes):
    """Normalise with the batch statistics; return Y, the updated running
    mean and variance, and the batch mean and (population) variance."""
    x3 = _fused_bn(xp, x, scale, b, mean, var, spatial=len(axes) > 1)
    if x3 is not None:
        y, *statistics = cupy_kernels.batch_norm_training(
            xp, x3, *(xp.ascontiguousarray(p) for p in (scale, b, mean, var)), epsilon,
            momentum)
        return (y.reshape(x.shape), *statistics)
    dtype = _compute_dtype(x)
    centred, batch_mean, batch_var = _moments(x, axes, dtype)
    # Y is made in centred's array, one operation at a time (the same ones
    # in the same order): no temporary the size of X (issue 34).
    y = centred
    y /= xp.sqrt(batch_var + dtype.type(epsilon))
    y *= _per_channel(scale.astype(dtype), x.ndim)
    y += _per_channel(b.astype(dtype), x.ndim)
    batch_mean = batch_mean.reshape(mean.shape)
    batch_var = batch_var.reshape(var.shape)
    m = dtype.type(momentum)
    running_mean = mean.astype(dtype) * m + batch_mean * (1 - m)
    running_var = var.astype(dtype) * m + batch_var * (1 - m)
    return (y.astype(x.dtype, copy=False), running_mean.astype(mean.dtype),
            running_var.astype(var.dtype),
            batch_mean.astype(mean.dtype), batch_var.astype(var.dtype))


#: Per element of Y, in the units of runtime/ops/registry.py's costs
#: (benchmarks/op_costs.py measured 45 to 75 training, 13 to 18 inference):
#: training takes the statistics' passes besides the normalisation's.
_TRAINING_COST, _INFERENCE_COST = per_element(50), per_element(15)


def _batch_norm_cost(inputs, outputs):
    """Training when the running averages are among the outputs."""
    return (_TRAINING_COST if len(outputs) > 1 else _INFERENCE_COST)(inputs, outputs)


def _arrays_of_x(same, wider):
    """The scratch rule "``same`` (X in the computing type), else
    ``wider`` arrays the size of X in the computing type": NumPy's batch
    normalizations work in their result's array (see the kernels)."""
    def scratch(inputs, outputs, attributes):
        size = elements(inputs[0])
        if size is None or inputs[0][0] is None:
            return None
        dtype = numpy.promote_types(inputs[0][0], numpy.float32)
        return (same if dtype == inputs[0][0] else wider) * size * dtype.itemsize
    return scratch


def _batch_norm_scratch(inputs, outputs, attributes):
    """Training (see _batch_norm_cost): the squares of the variance;
    float16 also its copy in float32 and the result before its rounding."""
    rule = _arrays_of_x(1, 3) if len(outputs) > 1 else _arrays_of_x(0, 2)
    return rule(inputs, outputs, attributes)


# Replayable in training too: the kernel is pure (the running averages are
# outputs), and a replay's recomputed averages are dead in the backward
# program, so only the forward program's update is stored.
@kernel('BatchNormalization', versions=(1, 13), cost=_batch_norm_cost,
        scratch=_batch_norm_scratch)
def batch_normalization_v1(xp, x, scale, b, mean, var, *, epsilon=1e-5, momentum=0.9,
                           is_test=0, spatial=1, consumed_inputs=None, n_outputs=1):
    """Before opset 14 the mode is implied (opset_rules.batch_norm_trains,
    asked for the newest version this kernel serves): five outputs (Y,
    mean, var, saved_mean, saved_var) mean training.  ``spatial=0`` keeps statistics
    per feature (C, D1, ...) instead of per channel."""
    if not batch_norm_trains(13, n_outputs, is_test=is_test):
        return _batch_norm_inference(xp, x, scale, b, mean, var, epsilon)
    return _batch_norm_training(xp, x, scale, b, mean, var, epsilon, momentum,
                                _channel_axes(x, spatial))


@kernel('BatchNormalization', versions=(14, LATEST))
def batch_normalization(xp, x, scale, b, input_mean, input_var, *, epsilon=1e-5,
                        momentum=0.9, training_mode=0):
    if not batch_norm_trains(14, training_mode=training_mode):
        return _batch_norm_inference(xp, x, scale, b, input_mean, input_var, epsilon)
    return _batch_norm_training(xp, x, scale, b, input_mean, input_var, epsilon, momentum,
                                _channel_axes(x))[:3]


# -- normalisation over trailing axes or groups -----------------------------

@kernel('LayerNormalization', versions=(17, LATEST), samples='along_axis')
def layer_normalization(xp, x, scale, b=None, *, axis=-1, epsilon=1e-5, stash_type=1):
    stash = _stash_dtype(stash_type)
    normalized, mean, inv_std = _standardize(xp, x, _trailing_axes(x, axis), epsilon,
                                             _compute_dtype(x, stash))
    y = normalized.astype(x.dtype) * scale
    if b is not None:
        y = y + b
    return y, mean.astype(stash, copy=False), inv_std.astype(stash, copy=False)


@kernel('RMSNormalization', versions=(23, LATEST))
def rms_normalization(xp, x, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    xs = x.astype(_compute_dtype(x, _stash_dtype(stash_type)), copy=False)
    mean_square = (xs * xs).mean(axis=_trailing_axes(x, axis), keepdims=True)
    normalized = xs / xp.sqrt(mean_square + xs.dtype.type(epsilon))
    # Y has the scale's type, which may differ from X's.
    return (normalized.astype(x.dtype) * scale).astype(scale.dtype, copy=False)


def _group_norm(xp, x, scale, bias, num_groups, epsilon, dtype):
    """GroupNormalization with per-channel scale and bias."""
    grouped = x.reshape(x.shape[0], num_groups, -1)
    normalized = _standardize(xp, grouped, 2, epsilon, dtype)[0]
    normalized = normalized.reshape(x.shape).astype(x.dtype)
    return normalized * _per_channel(scale, x.ndim) + _per_channel(bias, x.ndim)


@kernel('GroupNormalization', versions=(18, 20))
def group_normalization_v18(xp, x, scale, bias, *, num_groups, epsilon=1e-5):
    # Opset 18 gives scale and bias per group: spread them over the group's
    # channels.  Per-channel ones (as some exporters wrote them) pass as they are.
    if scale.shape[0] == num_groups:
        per_group = x.shape[1] // num_groups
        scale, bias = xp.repeat(scale, per_group), xp.repeat(bias, per_group)
    return _group_norm(xp, x, scale, bias, num_groups, epsilon, _compute_dtype(x))


@kernel('GroupNormalization', versions=(21, LATEST))
def group_normalization(xp, x, scale, bias, *, num_groups, epsilon=1e-5, stash_type=1):
    return _group_norm(xp, x, scale, bias, num_groups, epsilon,
                       _compute_dtype(x, _stash_dtype(stash_type)))


@kernel('InstanceNormalization', samples='per_sample')
def instance_normalization(xp, x, scale, b, *, epsilon=1e-5, consumed_inputs=None):
    dtype = _compute_dtype(x)
    normalized = _standardize(xp, x, tuple(range(2, x.ndim)), epsilon, dtype)[0]
    y = normalized * _per_channel(scale.astype(dtype), x.ndim) \
        + _per_channel(b.astype(dtype), x.ndim)
    return y.astype(x.dtype)


@kernel('MeanVarianceNormalization', versions=(9, LATEST))
def mean_variance_normalization(xp, x, *, axes=(0, 2, 3)):
    dtype = _compute_dtype(x)
    xs = x.astype(dtype, copy=False)
    axes = tuple(axes)
    centred = xs - xs.mean(axis=axes, keepdims=True)
    std = xp.sqrt((centred * centred).mean(axis=axes, keepdims=True))
    # ONNX adds epsilon (1e-9) to the standard deviation, not to the variance.
    return (centred / (std + dtype.type(1e-9))).astype(x.dtype)


# -- LRN and LpNormalization ------------------------------------------------------

@kernel('LRN', samples='per_sample')
def lrn(xp, x, *, size, alpha=1e-4, beta=0.75, bias=1.0):
    dtype = _compute_dtype(x)
    xs = x.astype(dtype, copy=False)
    channels = x.shape[1]
    # The window around channel c is [c - floor((size-1)/2), c + ceil((size-1)/2)];
    # zero padding on the channel axis lets every tap be one shifted slice.
    below = (size - 1) // 2
    pad = [(0, 0)] * x.ndim
    pad[1] = (below, size - 1 - below)
    squares = xp.pad(xs * xs, pad)
    square_sum = squares[:, :channels].copy()
    for k in range(1, size):
        square_sum += squares[:, k:k + channels]
    denominator = (dtype.type(bias) + dtype.type(alpha / size) * square_sum) ** dtype.type(beta)
    return (xs / denominator).astype(x.dtype)


@kernel('LpNormalization')
def lp_normalization(xp, x, *, axis=-1, p=2):
    if p == 1:
        norm = xp.abs(x).sum(axis=axis, keepdims=True)
    elif p == 2:
        norm = xp.sqrt((x * x).sum(axis=axis, keepdims=True))
    else:
        raise ValueError('LpNormalization: p must be 1 or 2, got %r' % (p,))
    # An all-zero slice has norm 0; dividing its zeros by 1 keeps them 0.
    return x / xp.where(norm == 0, x.dtype.type(1), norm)


# -- gradient kernels (custom domain) --------------------------------------------

from .registry import CUSTOM_DOMAIN, like  # noqa: E402


@kernel('BatchNormalizationGrad', domain=CUSTOM_DOMAIN,
        outputs=('gX', 'gscale', 'gB', 'gmean', 'gvar'), types=like(0, 1, 1, 3, 4),
        scratch=_arrays_of_x(1, 3))
def batch_normalization_grad(xp, x, scale, gy, mean=None, var=None, *, epsilon=1e-5,
                             training=1, spatial=1, n_outputs=3):
    """Gradients of BatchNormalization wrt X, scale and B (and, with five
    outputs, wrt the mean and variance inputs of the inference form).

    ``mean`` and ``var`` are the statistics the forward pass used; absent
    (training only), they are recomputed from X.  ``training=1``: the
    statistics are X's batch statistics, so X's gradient flows through them
    too."""
    dtype = _compute_dtype(x)
    axes = _channel_axes(x, spatial)
    x3 = _fused_bn(xp, x, scale, mean, var, spatial=spatial) if n_outputs <= 3 else None
    if x3 is not None and gy.dtype == numpy.float32:
        gx, g_scale, g_b = cupy_kernels.batch_norm_grad(
            xp, x3, xp.ascontiguousarray(scale), xp.ascontiguousarray(gy).reshape(x3.shape),
            *(None if p is None else xp.ascontiguousarray(p) for p in (mean, var)), epsilon,
            training)
        return gx.reshape(gy.shape), g_scale, g_b
    if mean is None:
        centred, batch_mean, batch_var = _moments(x, axes, dtype)
        inv = 1 / xp.sqrt(batch_var + dtype.type(epsilon))
    else:
        centred = x.astype(dtype, copy=False) - _per_channel(mean.astype(dtype), x.ndim)
        inv = 1 / xp.sqrt(_per_channel(var.astype(dtype), x.ndim) + dtype.type(epsilon))
    gys = gy.astype(dtype, copy=False)
    # Two arrays the size of X, one of them the result (issue 34): xhat is
    # made in centred's, the product with gy in the other, which then
    # becomes gX; the operations and their order are the expression's
    # (gys - g_b / m - xhat * (g_scale / m)) * a, so the bits are too.
    xhat = centred
    xhat *= inv
    g_b = gys.sum(axis=axes, keepdims=True)
    gx = xp.multiply(gys, xhat)
    g_scale = gx.sum(axis=axes, keepdims=True)
    a = _per_channel(scale.astype(dtype), x.ndim) * inv
    if training:
        m = dtype.type(x.size // g_b.size)
        xp.subtract(gys, g_b / m, out=gx)
        xhat *= g_scale / m
        gx -= xhat
        gx *= a
    else:
        xp.multiply(gys, a, out=gx)
    outs = [gx.astype(x.dtype, copy=False), g_scale.reshape(scale.shape).astype(scale.dtype),
            g_b.reshape(scale.shape).astype(scale.dtype)]
    if n_outputs > 3:
        g_mean = -g_b * a
        g_var = g_scale * a * inv * dtype.type(-0.5)
        outs += [g_mean.reshape(scale.shape).astype(scale.dtype),
                 g_var.reshape(scale.shape).astype(scale.dtype)]
    return tuple(outs[:max(n_outputs, 1)])


def _normalized_grad(xp, g, xhat, inv_std, axes):
    """Gradient wrt x of xhat = (x - mean(x)) * inv_std(x) over ``axes``,
    given the gradient ``g`` wrt xhat."""
    return (g - g.mean(axis=axes, keepdims=True)
            - xhat * (g * xhat).mean(axis=axes, keepdims=True)) * inv_std


def _sum_to(xp, a, shape):
    """Sum ``a`` down to the broadcastable ``shape``."""
    lead = a.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape)
                                      if d == 1 and a.shape[lead + i] != 1)
    return a.sum(axis=axes).reshape(shape) if axes else a.reshape(shape)


@kernel('LayerNormalizationGrad', domain=CUSTOM_DOMAIN, outputs=('gX', 'gscale'),
        types=like(0, 1))
def layer_normalization_grad(xp, x, scale, gy, mean=None, inv_std=None, *, axis=-1,
                             epsilon=1e-5):
    """Gradients of LayerNormalization wrt X and Scale (Scale's shape);
    ``mean`` and ``inv_std`` are its saved outputs, or recomputed."""
    axes = _trailing_axes(x, axis)
    dtype = _compute_dtype(x, mean.dtype if mean is not None else numpy.float32)
    if mean is None:
        centred, mean, var = _moments(x, axes, dtype)
        inv_std = 1 / xp.sqrt(var + dtype.type(epsilon))
    else:
        centred = x.astype(dtype, copy=False) - mean.astype(dtype, copy=False)
        inv_std = inv_std.astype(dtype, copy=False)
    xhat = centred * inv_std
    gys = gy.astype(dtype, copy=False)
    g_scale = _sum_to(xp, gys * xhat, scale.shape)
    gx = _normalized_grad(xp, gys * scale.astype(dtype, copy=False), xhat, inv_std, axes)
    return gx.astype(x.dtype, copy=False), g_scale.astype(scale.dtype, copy=False)


@kernel('GroupNormalizationGrad', domain=CUSTOM_DOMAIN, outputs=('gX', 'gscale', 'gbias'),
        types=like(0, 1, 1), attributes={'num_groups': 'int'})
def group_normalization_grad(xp, x, scale, gy, *, num_groups, epsilon=1e-5):
    """Gradients of GroupNormalization (and InstanceNormalization, one group
    per channel) wrt X, scale and bias; scale is per channel, or per group
    (opset 18) and then so are its and the bias's gradients."""
    n_batch, channels = x.shape[:2]
    dtype = _compute_dtype(x)
    centred, _, var = _moments(x.reshape(n_batch, num_groups, -1), 2, dtype)
    inv_std = 1 / xp.sqrt(var + dtype.type(epsilon))
    xhat = centred * inv_std
    gys = gy.astype(dtype, copy=False)
    per_group = scale.shape[0] != channels
    s = scale.astype(dtype)
    if per_group:
        s = xp.repeat(s, channels // num_groups)
    axes = _channel_axes(x)
    g_scale = (gys * xhat.reshape(x.shape)).sum(axis=axes)
    g_b = gys.sum(axis=axes)
    if per_group:
        g_scale = g_scale.reshape(num_groups, -1).sum(axis=1)
        g_b = g_b.reshape(num_groups, -1).sum(axis=1)
    g = (gys * _per_channel(s, x.ndim)).reshape(n_batch, num_groups, -1)
    gx = _normalized_grad(xp, g, xhat, inv_std, 2).reshape(x.shape)
    return (gx.astype(x.dtype, copy=False), g_scale.astype(scale.dtype, copy=False),
            g_b.astype(scale.dtype, copy=False))


@kernel('LRNGrad', domain=CUSTOM_DOMAIN, outputs=('gX',), types=like(0),
        attributes={'size': 'int'})
def lrn_grad(xp, x, gy, *, size, alpha=1e-4, beta=0.75, bias=1.0):
    """Gradient of LRN wrt X (attributes are LRN's)."""
    dtype = _compute_dtype(x)
    xs = x.astype(dtype, copy=False)
    channels = x.shape[1]
    below = (size - 1) // 2
    above = size - 1 - below

    def window_sum(v, front, back):
        pad = [(0, 0)] * x.ndim
        pad[1] = (front, back)
        padded = xp.pad(v, pad)
        total = padded[:, :channels].copy()
        for k in range(1, size):
            total += padded[:, k:k + channels]
        return total

    rate = dtype.type(alpha / size)
    denominator = dtype.type(bias) + rate * window_sum(xs * xs, below, above)
    factor = denominator ** dtype.type(-beta)
    gys = gy.astype(dtype, copy=False)
    t = gys * xs * factor / denominator
    # Channel i lies in the windows of channels i - above .. i + below.
    gx = gys * factor - dtype.type(2 * beta) * rate * xs * window_sum(t, above, below)
    return gx.astype(x.dtype, copy=False)

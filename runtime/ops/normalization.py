"""Normalization kernels: batch, layer, RMS, group, instance, LRN, Lp, MVN.

Statistics are computed in at least float32 (float16 inputs would lose too
much in the sums) and the normalised result is cast back to the input dtype.
Operators with a ``stash_type`` attribute compute in that precision, or in the
input's if it is wider (a float64 input is not degraded to float32); their
saved statistics are returned in the stash type itself.
"""
import numpy

from .registry import LATEST, kernel

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

def _batch_norm_inference(xp, x, scale, b, mean, var, epsilon):
    dtype = _compute_dtype(x)
    a = scale.astype(dtype) / xp.sqrt(var.astype(dtype) + dtype.type(epsilon))
    shift = b.astype(dtype) - mean.astype(dtype) * a
    y = x.astype(dtype, copy=False) * _per_channel(a, x.ndim) + _per_channel(shift, x.ndim)
    return y.astype(x.dtype, copy=False)


def _batch_norm_training(xp, x, scale, b, mean, var, epsilon, momentum, axes):
    """Normalise with the batch statistics; return Y, the updated running
    mean and variance, and the batch mean and (population) variance."""
    dtype = _compute_dtype(x)
    centred, batch_mean, batch_var = _moments(x, axes, dtype)
    y = centred / xp.sqrt(batch_var + dtype.type(epsilon)) \
        * _per_channel(scale.astype(dtype), x.ndim) + _per_channel(b.astype(dtype), x.ndim)
    batch_mean = batch_mean.reshape(mean.shape)
    batch_var = batch_var.reshape(var.shape)
    m = dtype.type(momentum)
    running_mean = mean.astype(dtype) * m + batch_mean * (1 - m)
    running_var = var.astype(dtype) * m + batch_var * (1 - m)
    return (y.astype(x.dtype), running_mean.astype(mean.dtype), running_var.astype(var.dtype),
            batch_mean.astype(mean.dtype), batch_var.astype(var.dtype))


@kernel('BatchNormalization', versions=(1, 13))
def batch_normalization_v1(xp, x, scale, b, mean, var, *, epsilon=1e-5, momentum=0.9,
                           is_test=0, spatial=1, consumed_inputs=None, n_outputs=1):
    """Before opset 14 the mode is implied: asking for the running statistics
    (five outputs: Y, mean, var, saved_mean, saved_var) means training, unless
    the opset-1/6 ``is_test`` attribute says otherwise.  ``spatial=0`` keeps
    statistics per feature (C, D1, ...) instead of per channel."""
    if n_outputs == 1 or is_test:
        return _batch_norm_inference(xp, x, scale, b, mean, var, epsilon)
    axes = (0,) + tuple(range(2, x.ndim)) if spatial else (0,)
    return _batch_norm_training(xp, x, scale, b, mean, var, epsilon, momentum, axes)


@kernel('BatchNormalization', versions=(14, LATEST))
def batch_normalization(xp, x, scale, b, input_mean, input_var, *, epsilon=1e-5,
                        momentum=0.9, training_mode=0):
    if not training_mode:
        return _batch_norm_inference(xp, x, scale, b, input_mean, input_var, epsilon)
    axes = (0,) + tuple(range(2, x.ndim))
    return _batch_norm_training(xp, x, scale, b, input_mean, input_var, epsilon, momentum,
                                axes)[:3]


# -- normalisation over trailing axes or groups -----------------------------

@kernel('LayerNormalization', versions=(17, LATEST))
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


@kernel('InstanceNormalization')
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

@kernel('LRN')
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

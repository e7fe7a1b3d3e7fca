"""Random kernels: Dropout, Bernoulli, RandomUniform/Normal(-Like), Multinomial.

Random numbers come from ``xp.random``.  A ``seed`` attribute makes a node
draw the same numbers on every run (a fresh ``RandomState(seed)`` per call;
with NumPy the streams match onnx's reference, e.g. Dropout masks); without
one the module's global generator is used, so every run differs.  Values are
drawn in float64 and cast, since NumPy's generators take no dtype.  A seeded
Dropout draws its mask with NumPy on every backend, so that a seed gives the
same mask on CuPy too (reproducible training runs rely on it).
"""
import numpy

from .registry import CUSTOM_DOMAIN, LATEST, kernel


def _generator(xp, seed):
    if seed is None:
        return xp.random
    # ONNX's seed is a float; RandomState wants an unsigned 32-bit integer.
    return xp.random.RandomState(int(seed) & 0xFFFFFFFF)


def _float_dtype(dtype, default=numpy.float32):
    return numpy.dtype(default if dtype is None else dtype)


# -- Dropout ----------------------------------------------------------------------

#: Dropout's ratio when no attribute or input gives one (ONNX's default):
#: the kernels' own, and what a pass that reads a ratio falls back to.
DROPOUT_RATIO = 0.5


def _dropout(xp, data, ratio, training, seed, n_outputs, mask_dtype):
    """Output (and, if asked for, the keep-mask) of Dropout.

    Outside training, or with ratio 0, the output is the input and the mask
    keeps everything; in training, kept values are scaled by 1 / (1 - ratio)."""
    if not training or ratio == 0:
        if n_outputs < 2:
            return data
        return data, xp.ones(data.shape, dtype=mask_dtype)
    if seed is None:
        keep = xp.random.uniform(0.0, 1.0, data.shape) >= ratio
    else:
        keep = xp.asarray(_generator(numpy, seed).uniform(0.0, 1.0, data.shape) >= ratio)
    scale = data.dtype.type(1 / (1 - ratio) if ratio < 1 else 0)
    output = xp.where(keep, data * scale, data.dtype.type(0))
    if n_outputs < 2:
        return output
    return output, keep.astype(mask_dtype, copy=False)


@kernel('Dropout', versions=(1, 6), recompute=False, random=True, view_of=0, samples='elementwise')
def dropout_v1(xp, data, *, ratio=DROPOUT_RATIO, is_test=0, consumed_inputs=None, n_outputs=1):
    # Opsets 1 and 6 train unless is_test is set; the mask has data's type.
    return _dropout(xp, data, ratio, not is_test, None, n_outputs, data.dtype)


@kernel('Dropout', versions=(7, 9))
def dropout_v7(xp, data, *, ratio=DROPOUT_RATIO, n_outputs=1):
    # Opsets 7 to 11 have no training mode: Dropout is the identity.
    return _dropout(xp, data, ratio, False, None, n_outputs, data.dtype)


@kernel('Dropout', versions=(10, 11))
def dropout_v10(xp, data, *, ratio=DROPOUT_RATIO, n_outputs=1):
    return _dropout(xp, data, ratio, False, None, n_outputs, numpy.bool_)


@kernel('Dropout', versions=(12, LATEST))
def dropout(xp, data, ratio=None, training_mode=None, *, seed=None, n_outputs=1):
    training = training_mode is not None and bool(training_mode)
    ratio = DROPOUT_RATIO if ratio is None else float(ratio)
    return _dropout(xp, data, ratio, training, seed, n_outputs, numpy.bool_)


# -- sampling -------------------------------------------------------------------------

@kernel('Bernoulli', versions=(15, LATEST), recompute=False, gradient=False, random=True)
def bernoulli(xp, input, *, dtype=None, seed=None):
    draws = _generator(xp, seed).uniform(0.0, 1.0, input.shape)
    return (draws < input).astype(input.dtype if dtype is None else dtype)


@kernel('RandomUniform', recompute=False, gradient=False, random=True)
def random_uniform(xp, *, shape, dtype=None, low=0.0, high=1.0, seed=None):
    draws = _generator(xp, seed).uniform(low, high, tuple(shape))
    return draws.astype(_float_dtype(dtype))


@kernel('RandomUniformLike', recompute=False, gradient=False, random=True)
def random_uniform_like(xp, input, *, dtype=None, low=0.0, high=1.0, seed=None):
    draws = _generator(xp, seed).uniform(low, high, input.shape)
    return draws.astype(_float_dtype(dtype, input.dtype))


@kernel('RandomNormal', recompute=False, gradient=False, random=True)
def random_normal(xp, *, shape, dtype=None, mean=0.0, scale=1.0, seed=None):
    draws = _generator(xp, seed).normal(mean, scale, tuple(shape))
    return draws.astype(_float_dtype(dtype))


@kernel('RandomNormalLike', recompute=False, gradient=False, random=True)
def random_normal_like(xp, input, *, dtype=None, mean=0.0, scale=1.0, seed=None):
    draws = _generator(xp, seed).normal(mean, scale, input.shape)
    return draws.astype(_float_dtype(dtype, input.dtype))


@kernel('Multinomial', versions=(7, LATEST), recompute=False, gradient=False,
        random=True)
def multinomial(xp, input, *, dtype=None, sample_size=1, seed=None):
    """``sample_size`` class indices per row of unnormalised log-probabilities
    (batch_size, class_size); int32 unless ``dtype`` says int64."""
    batch, classes = input.shape
    logits = input.astype(numpy.float64)
    cdf = xp.cumsum(xp.exp(logits - logits.max(axis=1, keepdims=True)), axis=1)
    cdf /= cdf[:, -1:]
    draws = _generator(xp, seed).uniform(0.0, 1.0, (batch, sample_size))
    # Row r's CDF shifted into (r, r + 1] makes all rows one sorted array, so a
    # single searchsorted samples every row: the first CDF entry above the draw.
    rows = xp.arange(batch)[:, None]
    index = xp.searchsorted((cdf + rows).ravel(), (draws + rows).ravel(), side='right')
    index = index.reshape(batch, sample_size) - rows * classes
    return xp.clip(index, 0, classes - 1).astype(numpy.int32 if dtype is None else dtype)


def _dropout_training_types(inputs, attributes):
    """DropoutTraining's type rule: y like x, and a boolean mask of x's shape."""
    x = inputs[0]
    return [x, None if x is None else ('bool', x[1])]


@kernel('DropoutTraining', domain=CUSTOM_DOMAIN, outputs=('y', 'mask'), random=True,
        types=_dropout_training_types)
def dropout_training(xp, x, *, ratio=DROPOUT_RATIO):
    """Chainer's training-mode dropout: y = x * mask / (1 - ratio), with
    mask ~ Bernoulli(1 - ratio); returns (y, mask) so the gradient reuses
    the mask."""
    mask = xp.random.rand(*x.shape) >= ratio
    scale = x.dtype.type(1.0 / (1.0 - ratio)) if ratio < 1 else x.dtype.type(0)
    return x * mask * scale, mask


# -- gradient kernels (org.chainer_compiler) ---------------------------------------------

from .registry import CUSTOM_DOMAIN, like  # noqa: E402


@kernel('DropoutGrad', domain=CUSTOM_DOMAIN, outputs=('gx',), types=like(0))
def dropout_grad(xp, gy, mask, ratio=None, training_mode=None):
    """Gradient of Dropout from its keep-``mask`` output (bool, or 0/1 in the
    data's type): ``gy * mask / (1 - ratio)`` in training mode, ``gy``
    otherwise.  ``ratio`` and ``training_mode`` as Dropout-12 takes them."""
    training = training_mode is not None and bool(training_mode)
    ratio = DROPOUT_RATIO if ratio is None else float(ratio)
    if not training or ratio == 0:
        return gy
    scale = gy.dtype.type(1 / (1 - ratio) if ratio < 1 else 0)
    return xp.where(mask.astype(bool, copy=False), gy * scale, gy.dtype.type(0))

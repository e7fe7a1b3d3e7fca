"""NumPy convolutions take the batch in chunks of images where their
columns would be large (issue 34): the scratch stays bounded and the
results are those of the whole batch at once."""
import tracemalloc

import numpy as np
import pytest

from chainer_compiler.runtime.ops import connection
from chainer_compiler.runtime.ops.connection import conv, conv_grad_filter, conv_transpose

_RNG = np.random.default_rng(0)


def _rand(*shape, dtype=np.float32):
    return _RNG.standard_normal(shape).astype(dtype)


def _peak(call):
    """(result, peak bytes NumPy allocated during ``call()``)."""
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# The plain CNN's layer (benchmarks/memory.py): 32 channels, 32x32, batch
# 32, a 3x3 kernel padded by one; an activation is 4 MiB, its columns 36.
_X, _W = _rand(32, 32, 32, 32), _rand(32, 32, 3, 3)
_PADS = dict(pads=[1, 1, 1, 1])


@pytest.mark.parametrize('op,call', [
    ('Conv', lambda: conv(np, _X, _W, **_PADS)),
    ('ConvTranspose', lambda: conv_transpose(np, _X, _W, **_PADS)),
    ('ConvGradFilter', lambda: conv_grad_filter(np, _X, _X, kernel_shape=[3, 3], **_PADS)),
])
def test_columns_of_a_large_batch_stay_within_the_bound(op, call):
    _, peak = _peak(call)
    # The result (one activation at most), the columns of a chunk (at most
    # 4 MiB) and a chunk's padded input and product; not nine activations.
    assert peak < 3 * _X.nbytes, '%s held %.1f MiB' % (op, peak / 2 ** 20)


_CASES = [
    # strided, padded, groups
    ((7, 4, 9, 8), (6, 2, 3, 3), dict(group=2, pads=[1, 0, 1, 2], strides=[2, 1])),
    # 1-D, dilated
    ((5, 3, 20), (4, 3, 3), dict(pads=[2, 2], dilations=[2])),
]


@pytest.mark.parametrize('x_shape,w_shape,attrs', _CASES)
def test_chunks_give_the_whole_batch_result(monkeypatch, x_shape, w_shape, attrs):
    x, w, b = _rand(*x_shape), _rand(*w_shape), _rand(w_shape[0])
    whole_y = conv(np, x, w, b, **attrs)
    whole_t = conv_transpose(np, whole_y, w, **attrs)
    kernel = dict(kernel_shape=list(w_shape[2:]), group=attrs.get('group', 1),
                  strides=attrs.get('strides'), dilations=attrs.get('dilations'),
                  pads=attrs['pads'])
    whole_gw = conv_grad_filter(np, x, whole_y, **kernel)
    # No bound but the result's size: every kernel takes several chunks.
    monkeypatch.setattr(connection, 'COLUMN_BYTES', 1)
    y = conv(np, x, w, b, **attrs)
    # Each image's GEMM is the one it had: the same bits.
    np.testing.assert_array_equal(y, whole_y)
    np.testing.assert_array_equal(conv_transpose(np, whole_y, w, **attrs), whole_t)
    # The filter gradient sums over chunks: the same to rounding.
    np.testing.assert_allclose(conv_grad_filter(np, x, whole_y, **kernel), whole_gw,
                               rtol=1e-5, atol=1e-4)


def test_chunked_filter_gradient_in_float16_rounds_once(monkeypatch):
    x, gy = _rand(6, 3, 8, 8, dtype=np.float16), _rand(6, 4, 8, 8, dtype=np.float16)
    kernel = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    wide = conv_grad_filter(np, x.astype(np.float32), gy.astype(np.float32), **kernel)
    monkeypatch.setattr(connection, 'COLUMN_BYTES', 1)
    got = conv_grad_filter(np, x, gy, **kernel)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), wide, rtol=1e-3, atol=1e-3)

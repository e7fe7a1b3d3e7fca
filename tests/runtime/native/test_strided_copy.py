"""ccn_array.c's row walk (ccn_strided_copy: Transpose, Slice, Split,
Expand...; ccn_where) on any ranges the thread pool may hand it: the
kernels built alone with a pool that cuts every loop into ranges of a
chosen length, called through ctypes on random transposes and broadcasts
against NumPy.  A range may start and end inside a row block or a plane,
where the walk carries between axes."""
import ctypes
import os
import shutil
import subprocess

import numpy
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chainer_compiler.runtime.native.render import KERNEL_DIR

CC = shutil.which('gcc') or shutil.which('clang')

#: A pool that runs each loop in ranges of ccn_test_range indices, in order.
_POOL = r'''
#include "ccn_threads.h"
long ccn_test_range = 1;
void ccn_parallel_for(long count, long work, ccn_task task, void *context)
{
    (void)work;
    for (long b = 0; b < count; b += ccn_test_range)
        task(context, b, b + ccn_test_range < count ? b + ccn_test_range : count);
}
'''

#: Element sizes each kernel copies its own way, and one it does not (2).
_DTYPES = ('uint8', 'int16', 'float32', 'float64', 'complex128')


@pytest.fixture(scope='module')
def kernels(tmp_path_factory):
    if CC is None:
        pytest.skip('no gcc or clang on PATH')
    folder = tmp_path_factory.mktemp('array')
    pool = folder / 'pool.c'
    pool.write_text(_POOL)
    lib = folder / 'libarray.so'
    subprocess.run([CC, '-O2', '-std=c99', '-fPIC', '-shared', '-I', KERNEL_DIR, str(pool),
                    os.path.join(KERNEL_DIR, 'ccn_array.c'), '-o', str(lib)], check=True)
    return ctypes.CDLL(str(lib))


def _longs(values):
    return (ctypes.c_long * len(values))(*values)


def _strides(a, shape):
    """``a``'s element strides broadcast to ``shape`` (0 along an axis it
    has as 1, or lacks)."""
    strides = [s // a.itemsize if d != 1 else 0 for s, d in zip(a.strides, a.shape)]
    return [0] * (len(shape) - a.ndim) + strides


def _pointer(a):
    return ctypes.c_void_p(a.ctypes.data)


_shapes = st.lists(st.integers(1, 5), min_size=1, max_size=5)


@pytest.mark.native_build
@given(shape=_shapes, data=st.data())
def test_strided_copy_is_numpy_transpose_on_any_ranges(kernels, shape, data):
    dtype = data.draw(st.sampled_from(_DTYPES))
    perm = data.draw(st.permutations(range(len(shape))))
    ctypes.c_long.in_dll(kernels, 'ccn_test_range').value = data.draw(st.integers(1, 40))
    x = numpy.arange(numpy.prod(shape)).astype(dtype).reshape(shape)
    want = x.transpose(perm)
    y = numpy.zeros(want.shape, dtype)
    kernels.ccn_strided_copy(ctypes.c_size_t(x.itemsize), len(shape), _longs(want.shape),
                             _pointer(x), _longs(_strides(want, want.shape)),
                             _pointer(y), _longs(_strides(y, y.shape)))
    numpy.testing.assert_array_equal(y, want)


@pytest.mark.native_build
@given(shape=_shapes, data=st.data())
def test_where_broadcasts_on_any_ranges(kernels, shape, data):
    dtype = data.draw(st.sampled_from(_DTYPES))
    ctypes.c_long.in_dll(kernels, 'ccn_test_range').value = data.draw(st.integers(1, 40))

    def operand(kind):
        # Each axis kept or broadcast (1), some leading axes dropped.
        lead = data.draw(st.integers(0, len(shape)))
        own = [d if data.draw(st.booleans()) else 1 for d in shape[lead:]]
        return numpy.arange(1, numpy.prod(own) + 1).astype(kind).reshape(own)
    # Arrays, not NumPy scalars (of 0-d operands), held for the call.
    c, x, y = numpy.asarray(operand('int64') % 3 == 0), operand(dtype), operand(dtype)
    y = numpy.asarray(-y if dtype != 'uint8' else y + 7)
    out = numpy.zeros(shape, dtype)
    kernels.ccn_where(ctypes.c_size_t(out.itemsize), len(shape), _longs(shape),
                      _pointer(c), _longs(_strides(c, shape)), _pointer(x),
                      _longs(_strides(x, shape)), _pointer(y), _longs(_strides(y, shape)),
                      _pointer(out))
    numpy.testing.assert_array_equal(out, numpy.broadcast_to(numpy.where(c, x, y), shape))

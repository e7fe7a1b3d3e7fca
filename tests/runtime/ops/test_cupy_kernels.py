"""The CuPy backend's raw CUDA kernels and direct cuBLAS calls
(runtime/ops/cupy_kernels.py).  How each cuBLAS call reads its operands is
checked here against a column-major reference on the host; the kernels
themselves run where CuPy and a GPU are (benchmarks/gpu/run_gpu_checks.py
runs this file and the whole runtime suite there on CuPy)."""
import re
import shutil
import subprocess

import numpy as np
import pytest

from chainer_compiler.runtime import cupy_unavailable_reason
from chainer_compiler.runtime.ops import connection, cupy_kernels
from chainer_compiler.runtime.ops import normalization as nz


def _column_major_gemm(plan, first, second):
    """What cublasSgemmStridedBatched computes (alpha 1, beta 0) from
    ``plan``, reading ``first`` and ``second`` as flat float32 memory from
    their first element, as cuBLAS reads device memory."""
    def element(array, op, lead, stride, batch, row, col):
        # Every operand here lies in one 4096-float buffer.
        base = np.ctypeslib.as_array(
            (np.ctypeslib.ctypes.c_float * 4096).from_address(array.ctypes.data))
        if op:  # read transposed: element (row, col) of op(X) is X[col, row]
            row, col = col, row
        return base[batch * stride + row + col * lead]

    out = np.empty(plan.shape, np.float32).reshape(plan.batch, plan.n, plan.m)
    for i in range(plan.batch):
        for r in range(plan.m):
            for c in range(plan.n):
                out[i, c, r] = sum(
                    element(first, plan.transa, plan.lda, plan.stride_a, i, r, t)
                    * element(second, plan.transb, plan.ldb, plan.stride_b, i, t, c)
                    for t in range(plan.k))
    return out.reshape(plan.shape)


def _operands():
    rng = np.random.default_rng(0)
    base = rng.standard_normal(4096).astype(np.float32)
    m = lambda *shape: base[:np.prod(shape)].reshape(shape)  # noqa: E731
    return {
        'both row-major': (m(3, 5), base[100:120].reshape(5, 4)),
        'weights broadcast over a batch (Conv)': (m(4, 6), m(3, 6, 5)),
        'transposed weights (ConvTranspose)': (m(6, 4).T, m(2, 6, 7)),
        'batched, transposed columns (ConvGradFilter)': (m(1, 3, 8), m(1, 5, 8).swapaxes(1, 2)),
        'rows with padding (a slice)': (m(4, 9)[:, :6], m(6, 3)),
        'batched on both sides': (m(2, 3, 4), base[500:540].reshape(2, 4, 5)),
    }


@pytest.mark.parametrize('case', list(_operands()))
def test_each_gemm_plan_computes_the_product(case):
    a, b = _operands()[case]
    plan = cupy_kernels.gemm_plan(a, b)
    assert plan is not None and plan.shape == np.matmul(a, b).shape
    np.testing.assert_allclose(_column_major_gemm(plan, b, a), np.matmul(a, b), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize('a_shape, b_shape, view', [
    ((3, 4), (5, 6), None),               # inner sizes differ
    ((2, 3, 4), (3, 4, 5), None),         # batch sizes differ
    ((2, 2, 3, 4), (4, 5), None),         # four dimensions
    ((3, 8), (4, 5), 'every other column'),  # no unit stride on either axis
])
def test_a_product_one_call_cannot_do_has_no_plan(a_shape, b_shape, view):
    a = np.ones(a_shape, np.float32)
    if view:
        a = a[:, ::2]
    assert cupy_kernels.gemm_plan(a, np.ones(b_shape, np.float32)) is None


def test_the_block_size_is_the_cuda_sources():
    source = cupy_kernels._SOURCE.read_text()
    assert int(re.search(r'#define CCN_BLOCK (\d+)', source).group(1)) == cupy_kernels._BLOCK


@pytest.mark.slow  # nvcc takes seconds
@pytest.mark.skipif(shutil.which('nvcc') is None, reason='no nvcc to compile the CUDA source')
def test_the_cuda_source_compiles_without_warnings(tmp_path):
    done = subprocess.run(['nvcc', '-c', '-std=c++11', '-Xcompiler', '-Wall', '-o',
                           str(tmp_path / 'k.o'), str(cupy_kernels._SOURCE)],
                          capture_output=True, text=True)
    assert done.returncode == 0 and 'warning' not in done.stderr, done.stderr


_NO_CUPY = cupy_unavailable_reason()
on_cupy = pytest.mark.skipif(_NO_CUPY is not None, reason='needs CuPy and a GPU: %s' % _NO_CUPY)


def _batch_norm_reference(x, scale, b, mean, var, gy, eps=1e-5, momentum=0.9):
    """BatchNormalization's training outputs and its gradients (with the
    batch statistics, and with them held fixed), in float64 on the host:
    the test suite's CuPy run moves NumPy kernel calls to the device, so the
    kernels cannot be their own reference there."""
    x, gy = x.astype(np.float64), gy.astype(np.float64)
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    batch_mean, batch_var = x.mean(axis=axes), x.var(axis=axes)
    inv = 1 / np.sqrt(batch_var + eps)
    xhat = (x - batch_mean.reshape(shape)) * inv.reshape(shape)
    y = xhat * scale.reshape(shape) + b.reshape(shape)
    forward = (y, mean * momentum + batch_mean * (1 - momentum),
               var * momentum + batch_var * (1 - momentum), batch_mean, batch_var)
    g_b, g_scale = gy.sum(axis=axes), (gy * xhat).sum(axis=axes)
    m = x.size // x.shape[1]
    a = (scale * inv).reshape(shape)
    training = (gy - (g_b / m).reshape(shape) - xhat * (g_scale / m).reshape(shape)) * a
    return forward, {1: (training, g_scale, g_b), 0: (gy * a, g_scale, g_b)}


@on_cupy
@pytest.mark.parametrize('shape', [(4, 3, 20, 21), (8, 16, 7, 7), (5, 2, 1, 1), (3, 4, 9)])
def test_raw_batch_norm_kernels_compute_batch_normalization(shape):
    import cupy
    rng = np.random.default_rng(0)
    x, gy = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    scale, b, mean, var = (rng.random(shape[1]).astype(np.float32) + 0.5 for _ in range(4))
    forward, gradients = _batch_norm_reference(x, scale, b, mean, var, gy)
    on_gpu = [cupy.asarray(a) for a in (x, scale, b, mean, var, gy)]
    got = nz.batch_normalization_v1(cupy, *on_gpu[:5], n_outputs=5)
    for want, have in zip(forward, got):
        np.testing.assert_allclose(cupy.asnumpy(have), want, rtol=1e-5, atol=1e-5)
    saved = got[3:]
    for statistics in ((), saved):  # recomputed from X, and the forward's
        for training in (1, 0):
            have = nz.batch_normalization_grad(cupy, on_gpu[0], on_gpu[1], on_gpu[5],
                                               *statistics, training=training)
            for want, value in zip(gradients[training], have):
                np.testing.assert_allclose(cupy.asnumpy(value), want, rtol=1e-4, atol=1e-4)


@on_cupy
@pytest.mark.parametrize('case', list(_operands()))
def test_cublas_products_equal_numpys(case):
    import cupy
    a, b = _operands()[case]
    got = cupy_kernels.matmul(cupy, cupy.asarray(a), cupy.asarray(b))
    np.testing.assert_allclose(cupy.asnumpy(got), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


@on_cupy
def test_raw_col2im_equals_the_sliced_sums():
    import cupy
    window = connection.window_geometry((9, 8), (3, 2), (2, 1), (1, 2), (1, 0, 2, 1))
    cols = np.random.default_rng(1).standard_normal(
        (2, 3) + window.kernel + window.out).astype(np.float32)
    expected = np.zeros((2, 3, 9, 8))
    for tap, src, dst in connection.tap_slices(window, (9, 8)):
        if src is not None:
            expected[dst] += cols[(slice(None), slice(None)) + tap][src]
    got = cupy_kernels.col2im_2d(cupy, cupy.asarray(cols), (9, 8), window)
    np.testing.assert_allclose(cupy.asnumpy(got), expected, rtol=1e-6, atol=1e-6)


@on_cupy
@pytest.mark.parametrize('stride, pad, dilation', [(1, 1, 1), (2, 3, 1), (2, 0, 2)])
def test_raw_im2col_gives_convolutions_columns(stride, pad, dilation):
    import cupy
    x = np.random.default_rng(2).standard_normal((2, 3, 11, 10)).astype(np.float32)
    window = connection.window_geometry((11, 10), (3, 4), (stride, stride),
                                        (dilation, dilation), (pad, pad, pad, pad))
    expected = connection.im2col(np, x, window, fill=-1.5)
    got = cupy_kernels.im2col_2d(cupy, cupy.asarray(x), window, fill=-1.5)
    np.testing.assert_array_equal(cupy.asnumpy(got), expected)
    batch_inner = cupy_kernels.im2col_2d(cupy, cupy.asarray(x), window, fill=-1.5,
                                         batch_inner=True)
    np.testing.assert_array_equal(cupy.asnumpy(batch_inner),
                                  np.moveaxis(expected, 0, 3))


@on_cupy
def test_raw_relu_grad_and_sgd_update_equal_the_xp_arithmetic():
    import cupy
    rng = np.random.default_rng(3)
    y, gy, param, grad = (rng.standard_normal(1000).astype(np.float32) for _ in range(4))
    gy[:10] = np.nan
    got = cupy_kernels.relu_grad(cupy, cupy.asarray(y), cupy.asarray(gy))
    np.testing.assert_array_equal(cupy.asnumpy(got), gy * (y > 0))
    on_gpu = cupy.asarray(param)
    assert cupy_kernels.sgd_update(cupy, on_gpu, cupy.asarray(grad), 0.1)
    np.testing.assert_array_equal(cupy.asnumpy(on_gpu), param - np.float32(0.1) * grad)

"""The CuPy backend's raw CUDA kernels and direct cuBLAS calls
(runtime/ops/cupy_kernels.py).  Without a GPU, the CUDA source is compiled
for the host (cuda_on_host.h) and each kernel runs one thread per block, and
how each cuBLAS call reads its operands is checked against a column-major
reference; on a GPU (benchmarks/gpu/run_gpu_checks.py runs the runtime's
tests on CuPy) the same tests run the kernels there."""
import contextlib
import ctypes
import pathlib
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


class _HostXp:
    """NumPy standing in for CuPy (``xp is not numpy``) in cupy_kernels'
    Python, whose kernel launches run the CUDA source compiled for the host."""

    def __getattr__(self, name):
        return getattr(np, name)


@contextlib.contextmanager
def _kernels_on_host(folder):
    """cupy_kernels with its CUDA source compiled by g++ (cuda_on_host.h):
    each launch runs every block in turn, one thread each."""
    library = folder / 'kernels.so'
    header = pathlib.Path(__file__).with_name('cuda_on_host.h')
    subprocess.run([shutil.which('g++'), '-x', 'c++', '-include', str(header), '-shared',
                    '-fPIC', '-O1', '-ffp-contract=off', '-o', str(library),
                    str(cupy_kernels._SOURCE)], check=True)
    lib = ctypes.CDLL(str(library))
    types = {np.dtype(np.int32): ctypes.c_int, np.dtype(np.float32): ctypes.c_float}

    def kernel(name):
        function = getattr(lib, name)

        def launch(grid, block, args):
            argv = [a.ctypes.data_as(ctypes.c_void_p) if isinstance(a, np.ndarray)
                    else types[a.dtype](a) for a in args]
            for b in range(grid[0]):
                lib.ccn_host_block(b, grid[0])
                function(*argv)
        return launch

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cupy_kernels, '_kernel', kernel)
        yield


_NO_CUPY = cupy_unavailable_reason()


@pytest.fixture(scope='module', params=['host', 'cupy'])
def device(request, tmp_path_factory):
    """(xp, to the device, to the host): the kernels compiled for the host
    (their index arithmetic, layouts and formulas), or on a GPU with CuPy
    (its threads, reductions and launches too)."""
    if request.param == 'cupy':
        if _NO_CUPY is not None:
            pytest.skip('needs CuPy and a GPU: %s' % _NO_CUPY)
        import cupy
        yield cupy, cupy.asarray, cupy.asnumpy
        return
    if shutil.which('g++') is None:
        pytest.skip('no g++ to compile the CUDA source for the host')
    with _kernels_on_host(tmp_path_factory.mktemp('cuda')):
        yield _HostXp(), np.asarray, np.asarray


@pytest.mark.parametrize('shape', [(4, 3, 5, 6), (8, 16, 7, 7), (3, 2, 1, 1), (2, 4, 9)])
def test_the_batch_norm_kernels_compute_batch_normalization(device, shape):
    xp, put, get = device
    rng = np.random.default_rng(0)
    x, gy = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    scale, b, mean, var = (rng.random(shape[1]).astype(np.float32) + 0.5 for _ in range(4))
    forward, gradients = _batch_norm_reference(x, scale, b, mean, var, gy)
    got = nz.batch_normalization_v1(xp, *map(put, (x, scale, b, mean, var)), n_outputs=5)
    for want, have in zip(forward, got):
        np.testing.assert_allclose(get(have), want, rtol=1e-5, atol=1e-5)
    for statistics in ((), got[3:]):  # recomputed from X, and the forward's
        for training in (1, 0):
            have = nz.batch_normalization_grad(xp, put(x), put(scale), put(gy), *statistics,
                                               training=training)
            for want, value in zip(gradients[training], have):
                np.testing.assert_allclose(get(value), want, rtol=1e-4, atol=1e-4)


def _window(stride, pad, dilation):
    return connection.window_geometry((11, 10), (3, 4), (stride, stride), (dilation, dilation),
                                      (pad, pad, pad, pad))


_WINDOWS = [(1, 1, 1), (2, 3, 1), (2, 0, 2)]


@pytest.mark.parametrize('stride, pad, dilation', _WINDOWS)
def test_the_im2col_kernel_gives_both_column_layouts(device, stride, pad, dilation):
    xp, put, get = device
    x = np.random.default_rng(2).standard_normal((2, 3, 11, 10)).astype(np.float32)
    window = _window(stride, pad, dilation)
    expected = connection.im2col(np, x, window, fill=-1.5)
    got = cupy_kernels.im2col_2d(xp, put(x), window, fill=-1.5)
    np.testing.assert_array_equal(get(got), expected)
    got = cupy_kernels.im2col_2d(xp, put(x), window, fill=-1.5, batch_inner=True)
    np.testing.assert_array_equal(get(got), np.moveaxis(expected, 0, 3))


@pytest.mark.parametrize('stride, pad, dilation', _WINDOWS)
def test_the_col2im_kernel_sums_every_tap(device, stride, pad, dilation):
    xp, put, get = device
    window = _window(stride, pad, dilation)
    cols = np.random.default_rng(1).standard_normal(
        (2, 3) + window.kernel + window.out).astype(np.float32)
    expected = np.zeros((2, 3, 11, 10), np.float32)  # the xp code's sums, tap by tap
    for tap, src, dst in connection.tap_slices(window, (11, 10)):
        if src is not None:
            expected[dst] += cols[(slice(None), slice(None)) + tap][src]
    got = cupy_kernels.col2im_2d(xp, put(cols), (11, 10), window)
    np.testing.assert_array_equal(get(got), expected)


def test_the_relu_grad_and_sgd_kernels_equal_the_xp_arithmetic(device):
    xp, put, get = device
    rng = np.random.default_rng(3)
    y, gy, param, grad = (rng.standard_normal(1000).astype(np.float32) for _ in range(4))
    gy[:10] = np.nan
    got = cupy_kernels.relu_grad(xp, put(y), put(gy))
    np.testing.assert_array_equal(get(got), gy * (y > 0))
    expected = param - np.float32(0.1) * grad
    param = put(param)
    assert cupy_kernels.sgd_update(xp, param, put(grad), 0.1)
    np.testing.assert_array_equal(get(param), expected)


@pytest.mark.parametrize('case', list(_operands()))
def test_cublas_products_equal_numpys(case):
    if _NO_CUPY is not None:
        pytest.skip('needs CuPy and a GPU: %s' % _NO_CUPY)
    import cupy
    a, b = _operands()[case]
    got = cupy_kernels.matmul(cupy, cupy.asarray(a), cupy.asarray(b))
    np.testing.assert_allclose(cupy.asnumpy(got), a.astype(np.float64) @ b, rtol=1e-5,
                               atol=1e-5)

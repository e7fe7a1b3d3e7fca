"""The CuPy backend's hot paths without CuPy's per-call dispatch.

On a GPU the compiled training step was host-bound: a CuPy reduction or
``matmul`` call costs tens of microseconds of host time before the GPU sees
it (about 85 µs for ``matmul``), and a BatchNormalization written against
``xp`` made about twenty calls.  Here the matrix products go to cuBLAS
directly and BatchNormalization, its gradient and 2-D col2im are raw CUDA
kernels (``cuda/ccn_cupy.cu``) of two or three launches each.  Each function
returns None when its fast path does not apply (another dtype, a layout
cuBLAS cannot read), and the caller takes the ``xp`` code.
"""
import pathlib
from collections import namedtuple

import numpy

_SOURCE = pathlib.Path(__file__).with_name('cuda') / 'ccn_cupy.cu'
#: Threads per block; the .cu file's CCN_BLOCK (its reductions' shared
#: arrays) must be the same.
_BLOCK = 512
#: Blocks of the element-wise kernels' grid-stride loops: enough to fill a
#: large GPU, few enough that each thread does several elements.
_MAX_GRID = 4096
_INT_MAX = 2 ** 31 - 1
#: The kernels index with 32-bit integers (64-bit division is several times
#: slower on a GPU); a grid-stride loop's last step must not overflow.
_MAX_ELEMENTS = _INT_MAX - _MAX_GRID * _BLOCK

#: The compiled kernels by name (RawModule.get_function costs microseconds
#: a call, and a training step launches hundreds).
_FUNCTIONS: dict = {}
_ONE, _ZERO = numpy.ones(1, numpy.float32), numpy.zeros(1, numpy.float32)


def _kernel(name):
    function = _FUNCTIONS.get(name)
    if function is None:
        if 'module' not in _FUNCTIONS:
            import cupy
            _FUNCTIONS['module'] = cupy.RawModule(code=_SOURCE.read_text(),
                                                  options=('-std=c++11',))
        function = _FUNCTIONS[name] = _FUNCTIONS['module'].get_function(name)
    return function


def _applies(xp, *arrays):
    return xp is not numpy and all(a.dtype == numpy.float32 and a.size <= _MAX_ELEMENTS
                                   for a in arrays)


# -- matrix products through cuBLAS ----------------------------------------------

def _operand(a):
    """(transpose, leading dimension, batch stride) of the last two axes of
    ``a`` as cuBLAS reads a column-major matrix, in elements, or None: a
    row-major matrix is its column-major transpose, read with 'N'."""
    item = a.itemsize
    rows, cols = a.shape[-2:]
    row_stride, col_stride = a.strides[-2] // item, a.strides[-1] // item
    if col_stride == 1 and row_stride >= max(1, cols):
        op, lead = 0, row_stride
    elif row_stride == 1 and col_stride >= max(1, rows):
        op, lead = 1, col_stride
    else:
        return None
    batch = a.strides[0] // item if a.ndim == 3 else 0
    if lead > _INT_MAX or batch < 0 or any(s % item for s in a.strides):
        return None
    return op, lead, batch


#: One cublasSgemmStridedBatched call: its arguments but the handle, the
#: pointers and alpha and beta, with the result's shape.
GemmPlan = namedtuple('GemmPlan', 'shape transa transb m n k lda stride_a ldb stride_b '
                                  'ldc stride_c batch')


def gemm_plan(a, b):
    """How cuBLAS computes ``a @ b`` (2 or 3 dimensions each, a batch of
    matrices on either side, a single matrix broadcast) into a new
    C-contiguous array, or None when one call cannot.  Row-major ``C = A @ B``
    is column-major ``C^T = B^T @ A^T``, so cuBLAS's first operand is ``b``."""
    if not 2 <= a.ndim <= 3 or not 2 <= b.ndim <= 3:
        return None
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batch = max(a.shape[0] if a.ndim == 3 else 1, b.shape[0] if b.ndim == 3 else 1)
    if b.shape[-2] != k or any(x.ndim == 3 and x.shape[0] != batch for x in (a, b)) \
            or 0 in (m, n, k, batch) or max(m, n, k, batch) > _INT_MAX:
        return None
    first, second = _operand(b), _operand(a)
    if first is None or second is None:
        return None
    shape = (batch, m, n) if max(a.ndim, b.ndim) == 3 else (m, n)
    return GemmPlan(shape, first[0], second[0], n, m, k, first[1], first[2], second[1],
                    second[2], n, m * n, batch)


def matmul(xp, a, b):
    """``a @ b`` for float32 CuPy arrays as one ``cublasSgemmStridedBatched``
    call (see gemm_plan); None where it does not apply."""
    plan = gemm_plan(a, b) if _applies(xp, a, b) else None
    if plan is None:
        return None
    from cupy.cuda import device
    from cupy_backends.cuda.libs import cublas
    out = xp.empty(plan.shape, numpy.float32)
    handle = device.get_cublas_handle()
    cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)
    cublas.sgemmStridedBatched(
        handle, plan.transa, plan.transb, plan.m, plan.n, plan.k, _ONE.ctypes.data,
        b.data.ptr, plan.lda, plan.stride_a, a.data.ptr, plan.ldb, plan.stride_b,
        _ZERO.ctypes.data, out.data.ptr, plan.ldc, plan.stride_c, plan.batch)
    return out


# -- BatchNormalization over (N, C, S) ---------------------------------------------

def _grid(total):
    return (min(_MAX_GRID, max(1, -(-total // _BLOCK))),)


def _per_channel_launch(name, x3, *args):
    n, c, s = x3.shape
    _kernel(name)((c,), (_BLOCK,), args[:-1] + (numpy.int32(n), numpy.int32(c), numpy.int32(s))
                  + args[-1])


def batch_norm_training(xp, x3, scale, b, mean, var, epsilon, momentum):
    """Y (N, C, S), the updated running mean and variance, the batch mean and
    the batch (population) variance of a training BatchNormalization."""
    c = x3.shape[1]
    batch_mean, batch_var, a, new_mean, new_var = (xp.empty(c, numpy.float32)
                                                   for _ in range(5))
    _per_channel_launch('ccn_bn_mean', x3, x3, batch_mean, ())
    _per_channel_launch('ccn_bn_statistics', x3, x3, batch_mean, scale, mean, var,
                        numpy.float32(epsilon), numpy.float32(momentum),
                        (batch_var, a, new_mean, new_var))
    y = xp.empty_like(x3)
    _elementwise('ccn_bn_normalize', x3, (x3, batch_mean, a, b, y))
    return y, new_mean, new_var, batch_mean, batch_var


def _elementwise(name, x3, args):
    n, c, s = x3.shape
    _kernel(name)(_grid(x3.size), (_BLOCK,), args + (numpy.int32(x3.size), numpy.int32(c),
                                                     numpy.int32(s)))


def batch_norm_grad(xp, x3, scale, gy3, mean, var, epsilon, training):
    """(gX, gscale, gB) of BatchNormalization; ``mean`` and ``var`` None
    means the batch's own, computed here."""
    c = x3.shape[1]
    if mean is None:
        mean, var, *scratch = (xp.empty(c, numpy.float32) for _ in range(5))
        _per_channel_launch('ccn_bn_mean', x3, x3, mean, ())
        # The running averages it also writes are not wanted: scratch.
        _per_channel_launch('ccn_bn_statistics', x3, x3, mean, scale, mean, mean,
                            numpy.float32(epsilon), numpy.float32(0), (var, *scratch))
    g_b, g_scale, inv, a, g_b_mean, g_scale_mean = (xp.empty(c, numpy.float32)
                                                    for _ in range(6))
    _per_channel_launch('ccn_bn_grad_sums', x3, gy3, x3, mean, var, scale,
                        numpy.float32(epsilon),
                        (g_b, g_scale, inv, a, g_b_mean, g_scale_mean))
    gx = xp.empty_like(x3)
    _elementwise('ccn_bn_grad_x', x3, (gy3, x3, mean, inv, a, g_b_mean, g_scale_mean,
                                       numpy.int32(1 if training else 0), gx))
    return gx, g_scale, g_b


# -- im2col and col2im ----------------------------------------------------------

def im2col_2d(xp, x, window, fill=0, batch_inner=False):
    """runtime/ops/connection.im2col for two spatial axes, materialised in
    one launch (no padded copy of X, no reshape copy): columns (N, C, KH, KW,
    OH, OW), or (C, KH, KW, N, OH, OW) with ``batch_inner``; None where it
    does not apply."""
    if not _applies(xp, x) or x.ndim != 4:
        return None
    n, c = x.shape[:2]
    lead = (c,) + tuple(window.kernel) + (n,) if batch_inner else (n, c) + tuple(window.kernel)
    cols = xp.empty(lead + tuple(window.out), numpy.float32)
    if cols.size > _MAX_ELEMENTS:
        return None
    positions = window.out[0] * window.out[1]
    # A block per row; its threads in whole warps along the positions.
    threads = min(_BLOCK, -(-positions // 32) * 32)
    geometry = (n, c) + x.shape[2:] + tuple(window.kernel) + tuple(window.out) \
        + tuple(window.strides) + tuple(window.dilations) + tuple(window.pads_begin)
    _kernel('ccn_im2col_2d')((cols.size // positions,), (threads,),
                             (xp.ascontiguousarray(x), cols)
                             + tuple(numpy.int32(v) for v in geometry)
                             + (numpy.float32(fill), numpy.int32(batch_inner)))
    return cols


def col2im_2d(xp, cols, image_shape, window):
    """runtime/ops/connection.col2im for two spatial axes in one launch:
    each image element gathers the taps that land on it."""
    if not _applies(xp, cols) or len(image_shape) != 2:
        return None
    cols = xp.ascontiguousarray(cols)
    n_batch, channels = cols.shape[:2]
    image = xp.empty((n_batch, channels) + tuple(image_shape), numpy.float32)
    geometry = (tuple(image_shape) + tuple(window.kernel) + tuple(cols.shape[-2:])
                + tuple(window.strides) + tuple(window.dilations) + tuple(window.pads_begin))
    _kernel('ccn_col2im_2d')(_grid(image.size), (_BLOCK,),
                             (cols, image, numpy.int32(image.size))
                             + tuple(numpy.int32(v) for v in geometry))
    return image


# -- element-wise ----------------------------------------------------------------

def _flat_launch(name, total, args):
    _kernel(name)(_grid(total), (_BLOCK,), args + (numpy.int32(total),))


def relu_grad(xp, y, gy):
    """ReluGrad in one launch; None where it does not apply."""
    if not _applies(xp, y, gy) or y.shape != gy.shape:
        return None
    gx = xp.empty(gy.shape, numpy.float32)
    _flat_launch('ccn_relu_grad', gx.size, (xp.ascontiguousarray(y),
                                            xp.ascontiguousarray(gy), gx))
    return gx


def sgd_update(xp, param, grad, lr):
    """SGDUpdate (``param -= lr * grad``) in place, in one launch; False
    where it does not apply (the caller updates with xp)."""
    if not _applies(xp, param, grad) or param.shape != grad.shape \
            or not param.flags.c_contiguous:
        return False
    _flat_launch('ccn_sgd_update', param.size, (param, xp.ascontiguousarray(grad),
                                                numpy.float32(lr)))
    return True

"""Ways to run a convolution's GEMMs and a training BatchNormalization on
one device, timed side by side.

The VM's Conv is im2col (one copy) and a matmul of the weights (M, C*K)
against each image's columns (N, C*K, O); ConvGradFilter is one GEMM over
(C*K, N*O) columns.  On a GPU the matmul's shape decides whether the BLAS
sees one large GEMM or N small ones, and whether the broadcast weights are
copied per image.  This measures, on ResNet-50's convolution shapes at one
batch, the kernel as it is against the alternatives, checks they agree, and
reports median milliseconds, so the faster form is chosen by measurement.
BatchNormalization (forward and gradient, training) is timed as the VM runs
it against the same arithmetic written operation by operation against xp.
"""
import functools
import math

import numpy

#: (name, C, M, kernel, stride, pad, spatial input size): ResNet-50's
#: convolutions at 224x224, one of each kind.
SHAPES = (
    ('conv1 7x7/2', 3, 64, 7, 2, 3, 224),
    ('1x1 64->64 @56', 64, 64, 1, 1, 0, 56),
    ('3x3 64->64 @56', 64, 64, 3, 1, 1, 56),
    ('1x1 256->128 @56', 256, 128, 1, 1, 0, 56),
    ('3x3/2 128->128 @56', 128, 128, 3, 2, 1, 56),
    ('1x1/2 512->1024 @28', 512, 1024, 1, 2, 0, 28),
    ('3x3 512->512 @7', 512, 512, 3, 1, 1, 7),
)


def variants(xp):
    """{name: conv(x, w, stride, pad) -> y} of the forms to compare."""
    from chainer_compiler.runtime.ops.connection import conv, im2col, window_geometry

    def vm_kernel(x, w, stride, pad):
        return conv(xp, x, w, strides=(stride,) * 2, pads=(pad,) * 4)

    def columns(x, w, stride, pad):
        window = window_geometry(x.shape[2:], w.shape[2:], (stride,) * 2, None, (pad,) * 4)
        cols = im2col(xp, x, window)
        return cols, window

    def two_d_weights(x, w, stride, pad):
        # (M, CK) @ (N, CK, O): the weights are not broadcast to 3-D first.
        cols, window = columns(x, w, stride, pad)
        cols = cols.reshape(x.shape[0], -1, math.prod(window.out))
        y = xp.matmul(w.reshape(w.shape[0], -1), cols)
        return y.reshape((x.shape[0], w.shape[0]) + window.out)

    def one_gemm(x, w, stride, pad):
        # One (M, CK) @ (CK, N*O) GEMM: columns copied batch-inner, the
        # result transposed back to (N, M, O).
        cols, window = columns(x, w, stride, pad)
        n, c = x.shape[:2]
        o = math.prod(window.out)
        cols = xp.ascontiguousarray(cols.transpose(1, 2, 3, 0, 4, 5)).reshape(-1, n * o)
        y = xp.matmul(w.reshape(w.shape[0], -1), cols).reshape(w.shape[0], n, o)
        return xp.ascontiguousarray(y.transpose(1, 0, 2)).reshape(
            (n, w.shape[0]) + window.out)

    def three_d_weights(x, w, stride, pad):
        # (1, M, CK) @ (N, 1, CK, O): the weights broadcast over the batch.
        cols, window = columns(x, w, stride, pad)
        cols = cols.reshape(x.shape[0], 1, -1, math.prod(window.out))
        y = xp.matmul(w.reshape(1, w.shape[0], -1), cols)
        return y.reshape((x.shape[0], w.shape[0]) + window.out)

    return {'vm kernel': vm_kernel, '2-D weights': two_d_weights,
            '3-D weights': three_d_weights, 'one GEMM': one_gemm}


def batch_norm_by_operations(xp, x, scale, b, gy, epsilon=1e-5):
    """Training BatchNormalization and its gradient, one xp operation at a time."""
    axes = (0, 2, 3)
    mean = x.mean(axis=axes, keepdims=True)
    centred = x - mean
    inv = 1 / xp.sqrt((centred * centred).mean(axis=axes, keepdims=True) + epsilon)
    xhat = centred * inv
    s, c = scale.reshape(1, -1, 1, 1), b.reshape(1, -1, 1, 1)
    y = xhat * s + c
    g_b = gy.sum(axis=axes, keepdims=True)
    g_scale = (gy * xhat).sum(axis=axes, keepdims=True)
    m = x.size // g_b.size
    gx = (gy - g_b / m - xhat * (g_scale / m)) * s * inv
    return y, gx, g_scale.reshape(-1), g_b.reshape(-1)


def batch_norm_vm(xp, x, scale, b, gy):
    from chainer_compiler.runtime.ops.normalization import (
        batch_normalization,
        batch_normalization_grad,
    )
    zeros, ones = xp.zeros_like(scale), xp.ones_like(scale)
    y = batch_normalization(xp, x, scale, b, zeros, ones, training_mode=1)[0]
    gx, g_scale, g_b = batch_normalization_grad(xp, x, scale, gy)
    return y, gx, g_scale, g_b


def measure_batch_norm(device, timed, batch=32, repeat=10):
    """Rows {shape, by operations: ms, vm kernel: ms, max diff} for
    ResNet-50's BatchNormalization shapes."""
    xp = device.xp
    rng = numpy.random.default_rng(1)
    rows = []
    for c, size in ((64, 112), (256, 56), (512, 28), (2048, 7)):
        x, gy = (device.put(rng.standard_normal((batch, c, size, size)).astype(numpy.float32))
                 for _ in range(2))
        scale, b = (device.put(rng.standard_normal(c).astype(numpy.float32)) for _ in range(2))
        row = {'shape': 'BN %d @%d' % (c, size)}
        expected = [device.get(v) for v in batch_norm_by_operations(xp, x, scale, b, gy)]
        got = [device.get(v) for v in batch_norm_vm(xp, x, scale, b, gy)]
        row['max diff'] = max(float(numpy.max(numpy.abs(e - g) / (1 + numpy.abs(e))))
                              for e, g in zip(expected, got))
        for label, fn in (('by operations', batch_norm_by_operations),
                          ('vm kernel', batch_norm_vm)):
            row[label] = timed(functools.partial(fn, xp, x, scale, b, gy), device.sync, 2,
                               repeat)['median_ms']
        rows.append(row)
    return rows


def measure(device, timed, batch=32, repeat=10, torch=None):
    """Rows {shape, variant: median ms, ..., agree: max difference} for
    every shape; ``timed`` is run_gpu_checks.timed.  With ``torch`` (CUDA),
    its cuDNN convolution on the same arrays is a column too."""
    xp = device.xp
    rng = numpy.random.default_rng(0)
    rows = []
    for name, c, m, k, stride, pad, size in SHAPES:
        x = device.put(rng.standard_normal((batch, c, size, size)).astype(numpy.float32))
        w = device.put(rng.standard_normal((m, c, k, k)).astype(numpy.float32) * 0.1)
        row = {'shape': name}
        reference = None
        for label, fn in variants(xp).items():
            y = fn(x, w, stride, pad)
            if reference is None:
                reference = device.get(y)
            else:
                row['%s max diff' % label] = float(numpy.max(numpy.abs(
                    device.get(y) - reference)))
            row[label] = timed(functools.partial(fn, x, w, stride, pad), device.sync, 2,
                               repeat)['median_ms']
        if torch is not None:
            xt, wt = torch.as_tensor(x, device='cuda'), torch.as_tensor(w, device='cuda')
            row['torch cuDNN'] = timed(functools.partial(
                torch.nn.functional.conv2d, xt, wt, stride=stride, padding=pad),
                torch.cuda.synchronize, 2, repeat)['median_ms']
        rows.append(row)
    return rows

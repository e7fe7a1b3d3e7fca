"""Convolution kernels (Chainer's ``connection`` family).

Convolution is computed by im2col: a strided *view* of the padded input holds
every receptive field, one reshape copies it into a matrix and one batched
matmul per group does the arithmetic.  ConvTranspose is the adjoint: a matmul
into columns, then col2im, a scatter-add done as one sliced ``+=`` per kernel
tap (no ``add.at``).  On NumPy, columns larger than COLUMN_BYTES and the
result are made a chunk of images at a time.  The window geometry,
``im2col`` and ``col2im`` are shared with the pooling family.
"""
import itertools
import math
from collections import namedtuple

import numpy

from . import cupy_kernels
from .registry import LATEST, elements, input_times_input, kernel, output_times_input

#: A sliding window over the spatial axes: every field is a tuple with one
#: entry per spatial axis.  Window position ``o`` and kernel tap ``k`` read
#: input coordinate ``o * stride + k * dilation - pad_begin``.
Window = namedtuple('Window', 'kernel strides dilations pads_begin pads_end out')


def window_geometry(in_shape, kernel_shape, strides=None, dilations=None, pads=None,
                    auto_pad='NOTSET', ceil_mode=0):
    """Resolve ONNX window attributes (as Conv and the pooling operators
    define them) for spatial input shape ``in_shape`` into a Window."""
    n = len(in_shape)
    kernel_shape = tuple(kernel_shape)
    strides = tuple(strides or (1,) * n)
    dilations = tuple(dilations or (1,) * n)
    begin, end, out = [], [], []
    for i in range(n):
        size, stride = in_shape[i], strides[i]
        extent = (kernel_shape[i] - 1) * dilations[i] + 1
        if auto_pad in ('SAME_UPPER', 'SAME_LOWER'):
            o = -(-size // stride)
            total = max(0, (o - 1) * stride + extent - size)
            b = total // 2 if auto_pad == 'SAME_UPPER' else total - total // 2
            e = total - b
        elif auto_pad == 'VALID':
            b = e = 0
            o = (size - extent) // stride + 1
        else:
            b, e = (pads[i], pads[i + n]) if pads else (0, 0)
            span = size + b + e - extent
            if ceil_mode:
                o = -(-span // stride) + 1
                # A window starting inside the end padding is dropped.
                if (o - 1) * stride >= size + b:
                    o -= 1
            else:
                o = span // stride + 1
        if o < 1:
            raise ValueError('window (kernel %s, dilations %s) does not fit the input %s'
                             % (list(kernel_shape), list(dilations), list(in_shape)))
        begin.append(b)
        end.append(e)
        out.append(o)
    return Window(kernel_shape, strides, dilations, tuple(begin), tuple(end), tuple(out))


def _pad_widths(window, spatial):
    """(before, after) per spatial axis: how much im2col pads an input of
    spatial shape ``spatial`` by for every window to fit."""
    widths = []
    for i, size in enumerate(spatial):
        reach = ((window.out[i] - 1) * window.strides[i]
                 + (window.kernel[i] - 1) * window.dilations[i] + 1)
        widths.append((window.pads_begin[i], max(0, reach - window.pads_begin[i] - size)))
    return widths


def im2col(xp, x, window, fill=0):
    """Every receptive field of ``x`` (N, C, *spatial) as a strided view of
    shape (N, C, *kernel, *out).  ``x`` is padded with ``fill`` first where the
    windows reach outside it (the only copy made)."""
    widths = _pad_widths(window, x.shape[2:])
    if any(b or e for b, e in widths):
        # xp.pad is general and slow (tens of microseconds): fill, then copy in.
        padded = xp.full(x.shape[:2] + tuple(size + b + e for size, (b, e) in
                                             zip(x.shape[2:], widths)), fill, dtype=x.dtype)
        padded[(Ellipsis,) + tuple(slice(b, b + size)
                                   for size, (b, _) in zip(x.shape[2:], widths))] = x
        x = padded
    spatial_strides = x.strides[2:]
    strides = (x.strides[:2]
               + tuple(s * d for s, d in zip(spatial_strides, window.dilations))
               + tuple(s * t for s, t in zip(spatial_strides, window.strides)))
    shape = x.shape[:2] + window.kernel + window.out
    if xp is numpy and x.flags.c_contiguous:
        # The ndarray constructor makes the same view as as_strided, several
        # times faster (as_strided goes through __array_interface__).
        return numpy.ndarray(shape, x.dtype, buffer=x, strides=strides)
    return xp.lib.stride_tricks.as_strided(x, shape=shape, strides=strides)


def col2im(xp, cols, image_shape, window):
    """Adjoint of im2col: sum ``cols`` (N, C, *kernel, *out) into an image
    (N, C, *image_shape); taps landing in the padding are dropped."""
    n = len(image_shape)
    blocks = cols.shape[2 + n:]
    if blocks == tuple(image_shape) and all(k == 1 for k in window.kernel) \
            and not any(window.pads_begin):
        # One tap covering the image (a 1x1 kernel, stride 1, no padding):
        # the columns are the image; no zeros to add them into.
        return cols.reshape(cols.shape[:2] + tuple(image_shape))
    image = cupy_kernels.col2im_2d(xp, cols, image_shape, window)
    if image is not None:
        return image
    image = xp.zeros(cols.shape[:2] + tuple(image_shape), dtype=cols.dtype)
    for tap in itertools.product(*(range(k) for k in window.kernel)):
        src, dst = [], []
        for i in range(n):
            stride = window.strides[i]
            first = tap[i] * window.dilations[i] - window.pads_begin[i]
            # Window positions o with 0 <= first + o * stride < image_shape[i].
            lo = max(0, -(first // stride))
            hi = min(blocks[i], -((first - image_shape[i]) // stride))
            if lo >= hi:
                break
            src.append(slice(lo, hi))
            dst.append(slice(first + lo * stride, first + (hi - 1) * stride + 1, stride))
        else:
            image[(Ellipsis,) + tuple(dst)] += cols[(slice(None), slice(None)) + tap + tuple(src)]
    return image


#: NumPy copies a convolution's receptive fields into columns (nine times
#: the input for a 3x3 kernel) that the VM neither counts nor plans; where
#: they would exceed this many bytes and the result's size, the batch is
#: taken a chunk of images at a time, so the scratch stays within the
#: larger of the two (issue 34).  Each image's GEMM is the one it had.
COLUMN_BYTES = 4 * 2 ** 20


def _images_per_chunk(xp, n_batch, image_bytes, result_bytes):
    """How many images at a time keep their columns (``image_bytes``
    each) within COLUMN_BYTES or ``result_bytes``: the whole batch on CuPy
    (its kernels and memory pool), or where they all fit."""
    if xp is not numpy or image_bytes * n_batch <= max(COLUMN_BYTES, result_bytes):
        return n_batch
    return max(1, max(COLUMN_BYTES, result_bytes) // image_bytes)


def _by_images(x, per, compute):
    """``compute(x)`` with x's batch taken ``per`` images at a time, the
    results written into one array."""
    if per >= len(x):
        return compute(x)
    first = compute(x[:per])
    y = numpy.empty((len(x),) + first.shape[1:], first.dtype)
    y[:per] = first
    for start in range(per, len(x), per):
        y[start:start + per] = compute(x[start:start + per])
    return y


def _typed(value):
    """A scratch rule's ``(dtype, shape)`` with both known, with the dtype's
    item size, else None."""
    if value is None or value[0] is None or elements(value) is None:
        return None
    return value[1], numpy.dtype(value[0]).itemsize


def _padded_bytes(shape, itemsize, window):
    """The bytes of im2col's padded copy of one image of x (N, C, *spatial),
    0 when it makes none."""
    widths = _pad_widths(window, shape[2:])
    if not any(b or e for b, e in widths):
        return 0
    return shape[1] * math.prod(s + b + e for s, (b, e) in zip(shape[2:], widths)) * itemsize


def _chunked_scratch(n_batch, per, columns, beside, product):
    """The scratch of a kernel taking ``per`` of ``n_batch`` images at a
    time (_by_images), with a chunk's ``columns``, what is ``beside`` them
    and its ``product`` (the result's share) in bytes per image: the first
    chunk runs before the result exists, the others beside it and the
    first chunk's product, kept until the result is made."""
    if per >= n_batch:
        return per * (columns + beside)
    chunk = columns + max(beside, product)
    return max(per * chunk - n_batch * product,
               per * product + min(per, n_batch - per) * chunk)


def _conv_chunks(xp, shape, itemsize, window, m):
    """(column bytes per image, images per chunk) of Conv on x of ``shape``
    with ``m`` output channels."""
    n_out = math.prod(window.out)
    # An unpadded 1x1 kernel at stride 1 reads x as it is: no columns.
    copies = (any(k != 1 for k in window.kernel) or any(s != 1 for s in window.strides)
              or any(window.pads_begin) or any(window.pads_end))
    image_bytes = shape[1] * math.prod(window.kernel) * n_out * itemsize if copies else 0
    return image_bytes, _images_per_chunk(xp, shape[0], image_bytes,
                                          shape[0] * m * n_out * itemsize)


def _conv_scratch(inputs, outputs, attributes):
    """Conv's columns, made from a padded copy of x (per chunk of images)."""
    x, w = _typed(inputs[0]), _typed(inputs[1]) if len(inputs) > 1 else None
    if x is None or w is None:
        return None
    (shape, itemsize), m = x, w[0][0]
    window = window_geometry(shape[2:], w[0][2:], attributes.get('strides'),
                             attributes.get('dilations'), attributes.get('pads'),
                             attributes.get('auto_pad', 'NOTSET'))
    columns, per = _conv_chunks(numpy, shape, itemsize, window, m)
    padded = _padded_bytes(shape, itemsize, window) if columns else 0
    return _chunked_scratch(shape[0], per, columns, padded,
                            m * math.prod(window.out) * itemsize)


def _transpose_chunks(xp, shape, itemsize, m, kernel_shape, out):
    """Images per chunk of ConvTranspose on x of ``shape`` with ``m``
    output channels and spatial output ``out``."""
    return _images_per_chunk(xp, shape[0],
                             m * math.prod(kernel_shape) * math.prod(shape[2:]) * itemsize,
                             shape[0] * m * math.prod(out) * itemsize)


def _conv_transpose_scratch(inputs, outputs, attributes):
    """ConvTranspose's columns (its GEMM's product) beside the image
    col2im adds them into, per chunk of images; a 1x1 kernel's columns are
    the image."""
    x, w = _typed(inputs[0]), _typed(inputs[1]) if len(inputs) > 1 else None
    if x is None or w is None:
        return None
    (shape, itemsize), kernel_shape = x, w[0][2:]
    n = len(kernel_shape)
    m = attributes.get('group', 1) * w[0][1]
    begin, _, out = conv_transpose_padding(
        shape[2:], kernel_shape, attributes.get('strides') or (1,) * n,
        attributes.get('dilations') or (1,) * n, attributes.get('output_padding'),
        attributes.get('output_shape'), attributes.get('auto_pad', 'NOTSET'),
        attributes.get('pads'))
    per = _transpose_chunks(numpy, shape, itemsize, m, kernel_shape, out)
    columns = m * math.prod(kernel_shape) * math.prod(shape[2:]) * itemsize
    if tuple(shape[2:]) == tuple(out) and all(k == 1 for k in kernel_shape) \
            and not any(begin):
        return _chunked_scratch(shape[0], per, 0, 0, columns)
    return _chunked_scratch(shape[0], per, columns, 0, m * math.prod(out) * itemsize)


def _add_bias(y, b):
    if b is not None:
        y += b.reshape((-1,) + (1,) * (y.ndim - 2))
    return y


def _matmul(xp, a, b):
    """xp.matmul, except that NumPy (which has no BLAS for half precision and
    crawls on it) multiplies float16 in float32 and rounds once, and CuPy's
    float32 products go to cuBLAS without CuPy's dispatch (cupy_kernels)."""
    if xp is numpy:
        if a.dtype == numpy.float16:
            return numpy.matmul(a.astype(numpy.float32),
                                b.astype(numpy.float32)).astype(a.dtype)
        return numpy.matmul(a, b)
    product = cupy_kernels.matmul(xp, a, b)
    return xp.matmul(a, b) if product is None else product


def _grouped_conv(xp, cols, w, group, out_shape):
    """Contract columns (N, C, K, O) with weights (M, C/group, *kernel)."""
    n_batch, channels = cols.shape[:2]
    m = w.shape[0]
    if group == 1:
        # (M, C*K) @ (N, C*K, O): CuPy runs 2-D weights as one strided-batched
        # GEMM, and 3-D ones broadcast over the batch 1.3 to 2 times slower
        # (benchmarks/gpu/kernel_variants.py, ResNet-50's shapes on an H200).
        y = _matmul(xp, w.reshape(m, -1), cols.reshape(n_batch, -1, cols.shape[-1]))
        return y.reshape((n_batch, m) + tuple(out_shape))
    w = w.reshape(group, m // group, -1)
    cols = cols.reshape(n_batch, group, (channels // group) * cols.shape[2], -1)
    y = _matmul(xp, w, cols)  # (N, group, M/group, O): one GEMM per batch and group
    return y.reshape((n_batch, m) + tuple(out_shape))


@kernel('Conv', cost=output_times_input(1, slice(1, None)),
        scratch=_conv_scratch, samples='per_sample')
def conv(xp, x, w, b=None, *, auto_pad='NOTSET', dilations=None, group=1,
         kernel_shape=None, pads=None, strides=None):
    window = window_geometry(x.shape[2:], w.shape[2:], strides, dilations, pads, auto_pad)

    def convolve(x):
        cols = None if xp is numpy else cupy_kernels.im2col_2d(xp, x, window)
        if cols is None:
            cols = im2col(xp, x, window)
        cols = cols.reshape(cols.shape[:2] + (-1, math.prod(window.out)))
        return _grouped_conv(xp, cols, w, group, window.out)

    per = _conv_chunks(xp, x.shape, x.itemsize, window, w.shape[0])[1]
    return _add_bias(_by_images(x, per, convolve), b)


def conv_transpose_padding(in_shape, kernel_shape, strides, dilations, output_padding=None,
                           output_shape=None, auto_pad='NOTSET', pads=None):
    """(crop at the start, crop at the end, output spatial shape) of a
    ConvTranspose: its full result cropped by pads, or to ``output_shape`` /
    the SAME size.  Shared with the gradient rule, which must agree."""
    n = len(in_shape)
    output_padding = output_padding or (0,) * n
    # Size of the full (uncropped) result along each axis.
    full = [strides[i] * (in_shape[i] - 1) + output_padding[i]
            + (kernel_shape[i] - 1) * dilations[i] + 1 for i in range(n)]
    if output_shape or auto_pad in ('SAME_UPPER', 'SAME_LOWER'):
        if output_shape:
            out = list(output_shape[-n:])
        else:
            out = [in_shape[i] * strides[i] for i in range(n)]
        total = [full[i] - out[i] for i in range(n)]
        # The odd pixel of padding goes at the end for SAME_UPPER, at the
        # start otherwise (also for an explicit output_shape).
        if auto_pad == 'SAME_UPPER':
            begin = [t // 2 for t in total]
        else:
            begin = [t - t // 2 for t in total]
        end = [t - p for t, p in zip(total, begin)]
    else:
        if not pads or auto_pad == 'VALID':
            pads = (0,) * (2 * n)
        begin, end = list(pads[:n]), list(pads[n:])
        out = [full[i] - begin[i] - end[i] for i in range(n)]
    return begin, end, out


@kernel('ConvTranspose', cost=input_times_input(0, 1, slice(1, None)),
        scratch=_conv_transpose_scratch, samples='per_sample')
def conv_transpose(xp, x, w, b=None, *, auto_pad='NOTSET', dilations=None, group=1,
                   kernel_shape=None, output_padding=None, output_shape=None, pads=None,
                   strides=None):
    n_batch, channels = x.shape[:2]
    in_shape = x.shape[2:]
    n = len(in_shape)
    kernel_shape = w.shape[2:]
    strides = tuple(strides or (1,) * n)
    dilations = tuple(dilations or (1,) * n)
    begin, end, out = conv_transpose_padding(in_shape, kernel_shape, strides, dilations,
                                             output_padding, output_shape, auto_pad, pads)
    m_per_group = w.shape[1]
    # Columns (N, group, M/group * K, H*W...): the transpose of Conv's GEMM.
    w_t = w.reshape(group, channels // group, -1).transpose(0, 2, 1)
    window = Window(tuple(kernel_shape), strides, dilations, tuple(begin), tuple(end),
                    tuple(in_shape))

    def convolve(x):
        n_batch = x.shape[0]
        if group == 1:  # 2-D weights: one strided-batched GEMM on CuPy (see _grouped_conv)
            cols = _matmul(xp, w_t[0], x.reshape(n_batch, channels, -1))
        else:
            cols = _matmul(xp, w_t, x.reshape(n_batch, group, channels // group, -1))
        cols = cols.reshape((n_batch, group * m_per_group) + tuple(kernel_shape)
                            + tuple(in_shape))
        return col2im(xp, cols, out, window)

    per = _transpose_chunks(xp, x.shape, x.itemsize, group * m_per_group, kernel_shape, out)
    return _add_bias(_by_images(x, per, convolve), b)


@kernel('Col2Im', versions=(18, LATEST))
def col2im_op(xp, x, image_shape, block_shape, *, dilations=None, pads=None, strides=None):
    image_shape = [int(v) for v in image_shape.tolist()]
    block_shape = [int(v) for v in block_shape.tolist()]
    window = window_geometry(image_shape, block_shape, strides, dilations, pads)
    n_batch = x.shape[0]
    channels = x.shape[1] // math.prod(block_shape)
    cols = x.reshape((n_batch, channels) + tuple(block_shape) + window.out)
    return col2im(xp, cols, image_shape, window)


def _deformable_columns(xp, x, window, offset, mask, offset_group):
    """Columns (N, C, K, O) sampled at the kernel taps moved by ``offset``,
    by multilinear interpolation with zeros outside the input."""
    n_batch, channels = x.shape[:2]
    in_shape = x.shape[2:]
    n = len(in_shape)
    taps = math.prod(window.kernel)
    n_out = math.prod(window.out)
    dtype = x.dtype
    # Sampling positions (N, offset_group, n, K, O) before the offsets.
    grids = numpy.meshgrid(*(numpy.arange(k) for k in window.kernel),
                           *(numpy.arange(o) for o in window.out), indexing='ij')
    base = numpy.stack([(grids[n + i] * window.strides[i] + grids[i] * window.dilations[i]
                         - window.pads_begin[i]).reshape(taps, n_out) for i in range(n)])
    offset = offset.reshape(n_batch, offset_group, taps, n, n_out).transpose(0, 1, 3, 2, 4)
    pos = xp.asarray(base, dtype=dtype) + offset
    low = xp.floor(pos)
    frac = pos - low
    low = low.astype(numpy.int64)
    flat_x = x.reshape(n_batch, offset_group, channels // offset_group, -1)
    batch_index = xp.arange(n_batch)[:, None, None, None]
    group_index = xp.arange(offset_group)[None, :, None, None]
    channel_index = xp.arange(channels // offset_group)[None, None, :, None]
    cols = 0
    for corner in itertools.product((0, 1), repeat=n):
        weight = 1
        flat = 0
        for i in range(n):
            index = low[:, :, i] + corner[i]
            inside = (index >= 0) & (index < in_shape[i])
            share = frac[:, :, i] if corner[i] else 1 - frac[:, :, i]
            weight = weight * xp.where(inside, share, 0)
            flat = flat * in_shape[i] + xp.clip(index, 0, in_shape[i] - 1)
        flat = flat.reshape(n_batch, offset_group, 1, -1)
        weight = weight.reshape(n_batch, offset_group, 1, -1).astype(dtype)
        cols = cols + flat_x[batch_index, group_index, channel_index, flat] * weight
    if mask is not None:
        cols = cols * mask.reshape(n_batch, offset_group, 1, -1)
    return cols.reshape(n_batch, channels, taps, n_out)


@kernel('DeformConv', versions=(19, LATEST))
def deform_conv(xp, x, w, offset, b=None, mask=None, *, dilations=None, group=1,
                kernel_shape=None, offset_group=1, pads=None, strides=None):
    window = window_geometry(x.shape[2:], w.shape[2:], strides, dilations, pads)
    cols = _deformable_columns(xp, x, window, offset, mask, offset_group)
    return _add_bias(_grouped_conv(xp, cols, w, group, window.out), b)


@kernel('CausalConvWithState', versions=(27, LATEST))
def causal_conv_with_state(xp, x, w, b=None, past_state=None, *, activation='none'):
    batch, channels, length = x.shape
    k = w.shape[-1]
    if past_state is None:
        past_state = xp.zeros((batch, channels, k - 1), dtype=x.dtype)
    padded = xp.concatenate([past_state.astype(x.dtype, copy=False), x], axis=2)
    # Depthwise and short: one multiply-add per tap beats im2col here.  The
    # sum is taken in at least single precision and rounded once, as Conv
    # does in the operator's function body.
    wide = numpy.promote_types(x.dtype, numpy.float32)
    taps = w[:, 0].astype(wide)[None, :, :, None]
    y = taps[:, :, 0] * padded[:, :, 0:length]
    for j in range(1, k):
        y += taps[:, :, j] * padded[:, :, j:j + length]
    y = _add_bias(y, b).astype(x.dtype, copy=False)
    if activation in ('silu', 'swish'):
        y = y.astype(wide)
        y = (y / (1 + xp.exp(-y))).astype(x.dtype, copy=False)
    elif activation != 'none':
        raise ValueError('CausalConvWithState: unknown activation %r' % activation)
    present = padded[:, :, padded.shape[2] - (k - 1):]
    return y, present


# -- gradient kernels (custom domain) -------------------------------------------

from .registry import CUSTOM_DOMAIN, dim  # noqa: E402


def tap_slices(window, image_shape):
    """For each kernel tap (row-major), the (tap, src, dst) slices that
    col2im adds: window positions ``src`` of that tap land on image
    coordinates ``dst``; ``src`` and ``dst`` are None when the tap falls
    entirely in the padding."""
    n = len(image_shape)
    for tap in itertools.product(*(range(k) for k in window.kernel)):
        src, dst = [], []
        for i in range(n):
            stride = window.strides[i]
            first = tap[i] * window.dilations[i] - window.pads_begin[i]
            lo = max(0, -(first // stride))
            hi = min(window.out[i], -((first - image_shape[i]) // stride))
            if lo >= hi:
                src = dst = None
                break
            src.append(slice(lo, hi))
            dst.append(slice(first + lo * stride, first + (hi - 1) * stride + 1, stride))
        if src is None:
            yield tap, None, None
        else:
            yield tap, (Ellipsis,) + tuple(src), (Ellipsis,) + tuple(dst)


def _grad_filter_window(kernel_shape, strides, dilations, pads, gy_shape):
    """ConvGradFilter's Window: explicit pads, gy's spatial shape."""
    n = len(kernel_shape)
    pads = tuple(pads or (0,) * (2 * n))
    return Window(tuple(kernel_shape), tuple(strides or (1,) * n),
                  tuple(dilations or (1,) * n), pads[:n], pads[n:], tuple(gy_shape[2:]))


def _grad_filter_columns(shape, itemsize, window):
    """The column bytes of one image of ConvGradFilter's x of ``shape``."""
    return shape[1] * math.prod(window.kernel) * math.prod(window.out) * itemsize


def _conv_grad_filter_scratch(inputs, outputs, attributes):
    """A chunk's columns, beside the padded copy of x they are made from,
    then beside the chunk's gy laid out for the GEMM."""
    x, gy = _typed(inputs[0]), _typed(inputs[1]) if len(inputs) > 1 else None
    if x is None or gy is None:
        return None
    (shape, itemsize), gy_shape = x, gy[0]
    window = _grad_filter_window(attributes['kernel_shape'], attributes.get('strides'),
                                 attributes.get('dilations'), attributes.get('pads'), gy_shape)
    columns = _grad_filter_columns(shape, itemsize, window)
    per = _images_per_chunk(numpy, shape[0], columns, 0)
    return per * (columns + max(_padded_bytes(shape, itemsize, window),
                                math.prod(gy_shape[1:]) * itemsize))


def _conv_grad_filter_types(inputs, attributes):
    """ConvGradFilter's type rule: (M, C / group, *kernel_shape) in x's
    type, M from gy (N, M, ...), C from x (N, C, ...)."""
    x, gy = inputs[:2]
    if x is None:
        return [None]
    c = dim(x, 1)
    return [(x[0], (dim(gy, 1), None if c is None else c // attributes['group'])
             + tuple(attributes['kernel_shape']))]


@kernel('ConvGradFilter', domain=CUSTOM_DOMAIN, outputs=('gW',), types=_conv_grad_filter_types,
        scratch=_conv_grad_filter_scratch,
        attributes=dict.fromkeys(('kernel_shape', 'strides', 'dilations', 'pads'), 'ints'))
def conv_grad_filter(xp, x, gy, *, kernel_shape, strides=None, dilations=None, pads=None,
                     group=1):
    """Gradient of Conv's weight: sum over the batch and the window positions
    of gy (N, M, *out) times the receptive fields of x (N, C, *in); returns
    (M, C / group, *kernel_shape).  ``pads`` are explicit (begin..., end...);
    the window positions are gy's spatial shape."""
    kernel_shape = tuple(kernel_shape)
    n = len(kernel_shape)
    window = _grad_filter_window(kernel_shape, strides, dilations, pads, gy.shape)
    n_batch, channels = x.shape[:2]
    m = gy.shape[1]

    def gradient(x, gy):
        # Columns (C, *K, N, *O), one copy: a single GEMM per group sums
        # over the batch and the window positions together.
        cols = None if xp is numpy else cupy_kernels.im2col_2d(xp, x, window, batch_inner=True)
        if cols is None:
            cols = im2col(xp, x, window)  # (N, C, *K, *O) view
            order = (1,) + tuple(range(2, 2 + n)) + (0,) + tuple(range(2 + n, 2 + 2 * n))
            cols = cols.transpose(order)
        cols = cols.reshape(group, (channels // group) * math.prod(kernel_shape), -1)
        gy = xp.moveaxis(gy, 1, 0).reshape(group, m // group, -1)
        return _matmul(xp, gy, cols.swapaxes(1, 2))

    per = _images_per_chunk(xp, n_batch, _grad_filter_columns(x.shape, x.itemsize, window), 0)
    if per >= n_batch:
        gw = gradient(x, gy)
    else:
        # The chunks' sums are added in at least single precision and
        # rounded once, as one GEMM over the batch would be.
        wide = numpy.promote_types(x.dtype, numpy.float32)
        gw = sum(gradient(x[i:i + per].astype(wide, copy=False),
                          gy[i:i + per].astype(wide, copy=False))
                 for i in range(0, n_batch, per)).astype(x.dtype, copy=False)
    return gw.reshape((m, channels // group) + kernel_shape)

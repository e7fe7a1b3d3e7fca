"""Pooling kernels (Chainer's ``pooling`` family).

Windowed pooling reduces the strided im2col view from the connection family
one kernel tap at a time, so no receptive field is ever copied.  RoI pooling computes the bin
boundaries or interpolation weights on the host from the (few) RoIs and does
the heavy part as array operations on the feature map.
"""
import itertools
import math

import numpy

from .connection import im2col, window_geometry
from .registry import LATEST, kernel, per_element


def _lowest(dtype):
    """The padding value that never wins a max."""
    if dtype.kind == 'f':
        return -numpy.inf
    return numpy.iinfo(dtype).min


def _taps(window):
    """Index tuples selecting each kernel tap of an im2col view, in row-major
    tap order.  Reducing tap by tap (K passes over output-sized arrays) is
    several times faster than reducing over the view's strided kernel axes."""
    return [(slice(None), slice(None)) + tap
            for tap in itertools.product(*(range(k) for k in window.kernel))]


def _reduce_taps(view, window, ufunc):
    taps = _taps(window)
    y = view[taps[0]].copy()
    for tap in taps[1:]:
        ufunc(y, view[tap], out=y)
    return y


# Pooling costs per input element (benchmarks/op_costs.py, units as in
# registry.py): the taps, which the time grows with, are attributes a cost
# rule does not see.  Measured: MaxPool 3x3 stride 2 45 to 80, AveragePool
# 2x2 stride 2 20 to 30, GlobalAveragePool 5 to 8.
@kernel('MaxPool', cost=per_element(50, of='inputs'), samples='per_sample')
def max_pool(xp, x, *, auto_pad='NOTSET', ceil_mode=0, dilations=None, kernel_shape=None,
             pads=None, storage_order=0, strides=None, n_outputs=1):
    in_shape = x.shape[2:]
    window = window_geometry(in_shape, kernel_shape, strides, dilations, pads, auto_pad,
                             ceil_mode)
    view = im2col(xp, x, window, fill=_lowest(x.dtype))
    if n_outputs < 2:
        return _reduce_taps(view, window, xp.maximum)
    y = _reduce_taps(view, window, xp.maximum)
    # Which tap holds the maximum; going backwards lets the first one win.
    taps = _taps(window)
    tap = xp.zeros(y.shape, dtype=numpy.int64)
    for t in reversed(range(1, len(taps))):
        xp.copyto(tap, t, where=view[taps[t]] == y)
    # Flatten the input coordinate of each maximum, row-major over the whole
    # tensor or column-major over the spatial axes for storage_order=1, as
    # (window start) + (tap offset) + (batch and channel offset).
    n = len(in_shape)
    if storage_order:
        axis_strides = [math.prod(in_shape[:i]) for i in range(n)]
    else:
        axis_strides = [math.prod(in_shape[i + 1:]) for i in range(n)]
    grids = numpy.meshgrid(*(numpy.arange(o) for o in window.out), indexing='ij')
    start = sum((grids[i] * window.strides[i] - window.pads_begin[i]) * axis_strides[i]
                for i in range(n))
    grids = numpy.meshgrid(*(numpy.arange(k) for k in window.kernel), indexing='ij')
    offset = sum(grids[i] * window.dilations[i] * axis_strides[i] for i in range(n))
    n_batch, channels = x.shape[:2]
    planes = xp.arange(n_batch * channels, dtype=numpy.int64) * math.prod(in_shape)
    index = xp.asarray(offset.reshape(-1), dtype=numpy.int64)[tap]
    index += xp.asarray(start, dtype=numpy.int64)
    index += planes.reshape((n_batch, channels) + (1,) * n)
    return y, index


def _window_counts(in_shape, window, count_include_pad):
    """How many taps of each window fall inside the input (or inside the
    explicit padding, with count_include_pad), shape (*out)."""
    counts = numpy.ones((), dtype=numpy.int64)
    for i, size in enumerate(in_shape):
        first = (numpy.arange(window.out[i])[:, None] * window.strides[i]
                 + numpy.arange(window.kernel[i])[None, :] * window.dilations[i]
                 - window.pads_begin[i])
        low, high = ((-window.pads_begin[i], size + window.pads_end[i])
                     if count_include_pad else (0, size))
        per_axis = ((first >= low) & (first < high)).sum(axis=1)
        counts = numpy.multiply.outer(counts, per_axis)
    return counts


@kernel('AveragePool', cost=per_element(25, of='inputs'), samples='per_sample')
def average_pool(xp, x, *, auto_pad='NOTSET', ceil_mode=0, count_include_pad=0,
                 dilations=None, kernel_shape=None, pads=None, strides=None):
    in_shape = x.shape[2:]
    window = window_geometry(in_shape, kernel_shape, strides, dilations, pads, auto_pad,
                             ceil_mode)
    total = _reduce_taps(im2col(xp, x, window), window, xp.add)
    counts = _window_counts(in_shape, window, count_include_pad)
    return total / xp.asarray(counts, dtype=x.dtype)


def _lp_root(xp, total, p, dtype):
    return (xp.sqrt(total) if p == 2 else total ** dtype.type(1.0 / p)).astype(dtype, copy=False)


def _abs_power(xp, x, p):
    return x * x if p == 2 else xp.abs(x) ** x.dtype.type(p)


@kernel('LpPool')
def lp_pool(xp, x, *, auto_pad='NOTSET', ceil_mode=0, dilations=None, kernel_shape=None,
            p=2, pads=None, strides=None):
    window = window_geometry(x.shape[2:], kernel_shape, strides, dilations, pads, auto_pad,
                             ceil_mode)
    total = _reduce_taps(im2col(xp, _abs_power(xp, x, p), window), window, xp.add)
    return _lp_root(xp, total, p, x.dtype)


def _spatial_axes(x):
    return tuple(range(2, x.ndim))


@kernel('GlobalAveragePool', cost=per_element(6, of='inputs'), samples='per_sample')
def global_average_pool(xp, x):
    return x.mean(axis=_spatial_axes(x), keepdims=True)


@kernel('GlobalMaxPool', samples='per_sample')
def global_max_pool(xp, x):
    return x.max(axis=_spatial_axes(x), keepdims=True)


@kernel('GlobalLpPool')
def global_lp_pool(xp, x, *, p=2):
    total = _abs_power(xp, x, p).sum(axis=_spatial_axes(x), keepdims=True)
    return _lp_root(xp, total, p, x.dtype)


@kernel('MaxUnpool', versions=(9, LATEST))
def max_unpool(xp, x, indices, output_shape=None, *, kernel_shape=None, pads=None,
               strides=None):
    n = len(kernel_shape)
    strides = strides or (1,) * n
    pads = pads or (0,) * (2 * n)
    default = x.shape[:2] + tuple(
        (x.shape[2 + i] - 1) * strides[i] + kernel_shape[i] - pads[i] - pads[i + n]
        for i in range(n))
    shape = default if output_shape is None else tuple(int(v) for v in output_shape.tolist())
    indices = indices.reshape(-1)
    if shape != default:
        # Indices address the default-sized output; keep each element at the
        # same coordinates in the requested shape.
        flat = xp.zeros_like(indices)
        for axis in range(n + 2):
            inner = math.prod(default[axis + 1:])
            flat = flat * shape[axis] + (indices // inner) % default[axis]
        indices = flat
    y = xp.zeros(math.prod(shape), dtype=x.dtype)
    y[indices] = x.reshape(-1)
    return y.reshape(shape)


def _round_half_away(v):
    return math.copysign(math.floor(abs(v) + 0.5), v)


def _bin_masks(start, size, n_bins, limit):
    """Boolean (n_bins, limit): which input rows fall in each MaxRoiPool bin
    of an RoI starting at ``start`` spanning ``size`` rows."""
    edges = numpy.arange(n_bins + 1) * (size / n_bins)
    low = numpy.clip(numpy.floor(edges[:-1]).astype(numpy.int64) + start, 0, limit)
    high = numpy.clip(numpy.ceil(edges[1:]).astype(numpy.int64) + start, 0, limit)
    rows = numpy.arange(limit)
    return (rows >= low[:, None]) & (rows < high[:, None])


@kernel('MaxRoiPool')
def max_roi_pool(xp, x, rois, *, pooled_shape=None, spatial_scale=1.0):
    height, width = x.shape[2:]
    pooled_h, pooled_w = pooled_shape
    lowest = _lowest(x.dtype)
    outs = []
    for batch, *corners in rois.tolist():
        x1, y1, x2, y2 = (int(_round_half_away(c * spatial_scale)) for c in corners)
        mask_h = xp.asarray(_bin_masks(y1, max(y2 - y1 + 1, 1), pooled_h, height))
        mask_w = xp.asarray(_bin_masks(x1, max(x2 - x1 + 1, 1), pooled_w, width))
        # Max is separable: reduce the rows of each bin, then its columns.
        image = x[int(batch)]
        rows = xp.where(mask_h[None, :, :, None], image[:, None], lowest).max(axis=2)
        y = xp.where(mask_w[None, None], rows[:, :, None], lowest).max(axis=3)
        empty = ~(mask_h.any(axis=1)[:, None] & mask_w.any(axis=1)[None, :])
        outs.append(xp.where(empty, 0, y).astype(x.dtype, copy=False))
    if not outs:
        return xp.zeros((0, x.shape[1], pooled_h, pooled_w), dtype=x.dtype)
    return xp.stack(outs)


def _roi_align_axis(start, size, n_bins, grid, limit):
    """Bilinear sampling along one axis of one RoI: for each bin and sample,
    the two neighbouring input indices and their weights (zero for samples
    outside the feature map), each (n_bins, grid, 2)."""
    bins = numpy.arange(n_bins)[:, None]
    samples = (numpy.arange(grid)[None, :] + 0.5) / grid
    pos = start + (bins + samples) * (size / n_bins)
    valid = (pos >= -1) & (pos <= limit)
    pos = numpy.maximum(pos, 0)
    low = numpy.floor(pos).astype(numpy.int64)
    edge = low >= limit - 1
    low = numpy.where(edge, limit - 1, low)
    high = numpy.where(edge, limit - 1, low + 1)
    frac = numpy.where(edge, 0, pos - low)
    index = numpy.stack([low, high], axis=-1)
    weight = numpy.stack([1 - frac, frac], axis=-1) * valid[..., None]
    return index, weight


@kernel('RoiAlign', versions=(16, LATEST))
def roi_align(xp, x, rois, batch_indices, *, coordinate_transformation_mode='half_pixel',
              mode='avg', output_height=1, output_width=1, sampling_ratio=0,
              spatial_scale=1.0):
    if mode not in ('avg', 'max'):
        raise ValueError('RoiAlign: unknown mode %r' % mode)
    n_rois = rois.shape[0]
    channels, height, width = x.shape[1:]
    shift = 0.5 if coordinate_transformation_mode == 'half_pixel' else 0.0
    outs = []
    for (x1, y1, x2, y2), batch in zip(rois.tolist(), batch_indices.tolist()):
        start_w, start_h = x1 * spatial_scale - shift, y1 * spatial_scale - shift
        size_w, size_h = x2 * spatial_scale - shift - start_w, y2 * spatial_scale - shift - start_h
        if not shift:  # the legacy mode makes every RoI at least one pixel
            size_w, size_h = max(size_w, 1.0), max(size_h, 1.0)
        grid_h = sampling_ratio or math.ceil(size_h / output_height)
        grid_w = sampling_ratio or math.ceil(size_w / output_width)
        index_h, weight_h = _roi_align_axis(start_h, size_h, output_height, grid_h, height)
        index_w, weight_w = _roi_align_axis(start_w, size_w, output_width, grid_w, width)
        image = x[int(batch)]
        if mode == 'avg':
            # Averaging bilinear samples is linear and separable: Ah @ X @ Aw^T.
            a_h = _interpolation_matrix(index_h, weight_h, height) / max(grid_h * grid_w, 1)
            a_w = _interpolation_matrix(index_w, weight_w, width)
            a_h = xp.asarray(a_h, dtype=x.dtype)
            a_w = xp.asarray(a_w.T, dtype=x.dtype)
            outs.append(xp.matmul(xp.matmul(a_h, image), a_w))
        elif not grid_h * grid_w:  # an empty RoI has no samples to take the max of
            outs.append(xp.zeros((channels, output_height, output_width), dtype=x.dtype))
        else:
            # Each sample contributes the largest of its four weighted
            # neighbours (the definition the reference backends implement).
            taps = image[:, xp.asarray(index_h)][..., xp.asarray(index_w)]
            weight = weight_h[:, :, :, None, None, None] * weight_w
            taps = taps * xp.asarray(weight, dtype=x.dtype)
            taps = taps.reshape(channels, output_height, 2 * grid_h, output_width, 2 * grid_w)
            outs.append(taps.max(axis=(2, 4)))
    if not n_rois:
        return xp.zeros((0, channels, output_height, output_width), dtype=x.dtype)
    return xp.stack(outs)


def _interpolation_matrix(index, weight, limit):
    """(n_bins, limit) matrix summing each bin's samples' interpolation weights."""
    matrix = numpy.zeros((index.shape[0], limit))
    numpy.add.at(matrix, (numpy.arange(index.shape[0])[:, None, None], index), weight)
    return matrix


@kernel('RoiAlign', versions=(10, 15))
def roi_align_10(xp, x, rois, batch_indices, *, mode='avg', output_height=1, output_width=1,
                 sampling_ratio=0, spatial_scale=1.0):
    """Opset 10 RoiAlign: no half-pixel shift of the input coordinates."""
    return roi_align(xp, x, rois, batch_indices,
                     coordinate_transformation_mode='output_half_pixel', mode=mode,
                     output_height=output_height, output_width=output_width,
                     sampling_ratio=sampling_ratio, spatial_scale=spatial_scale)


# -- gradient kernels (custom domain) -------------------------------------------

from .connection import col2im, tap_slices  # noqa: E402
from .registry import CUSTOM_DOMAIN, elements, like, shaped_by  # noqa: E402

#: The attributes of the pooling gradients that default to None.
_WINDOW_ATTRIBUTES = dict.fromkeys(('dilations', 'kernel_shape', 'pads', 'strides'), 'ints')


def _max_pool_grad_scratch(inputs, outputs, attributes):
    """Two masks (which taps hit, which were taken) and a product of gy,
    each the size of y."""
    size = elements(inputs[1])
    if size is None or inputs[2] is None or inputs[2][0] is None:
        return None
    return size * (2 + numpy.dtype(inputs[2][0]).itemsize)


@kernel('MaxPoolGrad', domain=CUSTOM_DOMAIN, outputs=('gx',), types=like(0),
        attributes=_WINDOW_ATTRIBUTES, scratch=_max_pool_grad_scratch)
def max_pool_grad(xp, x, y, gy, *, auto_pad='NOTSET', ceil_mode=0, dilations=None,
                  kernel_shape=None, pads=None, strides=None):
    """Gradient of MaxPool: each window's gy goes to the input element that
    is its maximum y, the first one (row-major over the taps) on ties, as
    Chainer does.  Attributes are MaxPool's."""
    window = window_geometry(x.shape[2:], kernel_shape, strides, dilations, pads, auto_pad,
                             ceil_mode)
    gx = xp.zeros_like(gy, shape=x.shape)
    zero = gy.dtype.type(0)
    taken = None
    # Each tap compares the elements of x it reads in place, with no padded
    # copy of x (issue 34); where it reads the padding, it hits where y is
    # the padding's value, as MaxPool's padded view would.
    for _, src, dst in tap_slices(window, x.shape[2:]):
        if src is not None and y[src].shape == y.shape:
            hit = x[dst] == y
        else:
            hit = y == _lowest(x.dtype)
            if src is not None:
                hit[src] = x[dst] == y[src]
        if taken is None:
            taken = hit
        else:
            hit &= ~taken
            taken |= hit
        if src is not None:
            gx[dst] += xp.where(hit[src], gy[src], zero)
    return gx


@kernel('AveragePoolGrad', domain=CUSTOM_DOMAIN, outputs=('gx',),
        types=shaped_by('input_shape'), attributes={**_WINDOW_ATTRIBUTES, 'input_shape': 'ints'})
def average_pool_grad(xp, gy, *, input_shape, auto_pad='NOTSET', ceil_mode=0,
                      count_include_pad=0, dilations=None, kernel_shape=None, pads=None,
                      strides=None):
    """Gradient of AveragePool over an input of shape ``input_shape``:
    gy / (window count) spread over every tap of its window.  Other
    attributes are AveragePool's."""
    in_shape = tuple(input_shape[2:])
    window = window_geometry(in_shape, kernel_shape, strides, dilations, pads, auto_pad,
                             ceil_mode)
    counts = _window_counts(in_shape, window, count_include_pad)
    share = gy / xp.asarray(counts, dtype=gy.dtype)
    n = len(in_shape)
    # Every tap reads the same share: a broadcast view, nothing copied.
    share = share.reshape(share.shape[:2] + (1,) * n + share.shape[2:])
    cols = xp.broadcast_to(share, share.shape[:2] + window.kernel + share.shape[2 + n:])
    return col2im(xp, cols, in_shape, window)


def _bin_bounds(start, size, n_bins, limit):
    """[low, high) input rows of each MaxRoiPool bin (as _bin_masks)."""
    edges = numpy.arange(n_bins + 1) * (size / n_bins)
    low = numpy.clip(numpy.floor(edges[:-1]).astype(numpy.int64) + start, 0, limit)
    high = numpy.clip(numpy.ceil(edges[1:]).astype(numpy.int64) + start, 0, limit)
    return low.tolist(), high.tolist()


@kernel('MaxRoiPoolGrad', domain=CUSTOM_DOMAIN, outputs=('gx',), types=like(0),
        attributes={'pooled_shape': 'ints'})
def max_roi_pool_grad(xp, x, rois, gy, *, pooled_shape=None, spatial_scale=1.0):
    """Gradient of MaxRoiPool wrt x: each bin's gy goes to its maximum (the
    first in row-major order on ties); empty bins pass nothing."""
    height, width = x.shape[2:]
    pooled_h, pooled_w = pooled_shape
    channels = x.shape[1]
    gx = xp.zeros_like(gy, shape=x.shape)
    chan = xp.arange(channels)
    for r, (batch, *corners) in enumerate(rois.tolist()):
        x1, y1, x2, y2 = (int(_round_half_away(c * spatial_scale)) for c in corners)
        low_h, high_h = _bin_bounds(y1, max(y2 - y1 + 1, 1), pooled_h, height)
        low_w, high_w = _bin_bounds(x1, max(x2 - x1 + 1, 1), pooled_w, width)
        image = x[int(batch)]
        target = gx[int(batch)]
        for ph in range(pooled_h):
            h0, h1 = low_h[ph], high_h[ph]
            if h0 >= h1:
                continue
            for pw in range(pooled_w):
                w0, w1 = low_w[pw], high_w[pw]
                if w0 >= w1:
                    continue
                region = image[:, h0:h1, w0:w1].reshape(channels, -1)
                flat = region.argmax(axis=1)
                target[chan, h0 + flat // (w1 - w0), w0 + flat % (w1 - w0)] += gy[r, :, ph, pw]
    return gx

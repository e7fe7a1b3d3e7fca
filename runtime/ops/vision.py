"""Vision kernels: GridSample, AffineGrid and NonMaxSuppression."""
import itertools

import numpy

from ..backend import to_numpy
from .registry import LATEST, kernel

# Keys' cubic convolution parameter used by GridSample (as in PyTorch).
_CUBIC_A = -0.75

_MODES = {'linear': 'linear', 'bilinear': 'linear', 'nearest': 'nearest',
          'cubic': 'cubic', 'bicubic': 'cubic'}


def _reflect(xp, c, lo, hi):
    """Fold coordinates ``c`` back into [lo, hi] by repeated reflection at the borders."""
    span = hi - lo
    if span <= 0:
        return xp.full_like(c, lo)
    t = xp.mod(c - lo, 2 * span)
    return lo + xp.where(t > span, 2 * span - t, t)


def _cubic_weights(xp, t):
    """Weights of taps floor(c) - 1 ... floor(c) + 2 for fractional part ``t``."""
    a = _CUBIC_A

    def near(d):  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _taps(xp, c, mode):
    """Integer tap positions and weights along one axis."""
    if mode == 'nearest':
        return [(c, xp.ones_like(c))]
    base = xp.floor(c)
    t = c - base
    if mode == 'linear':
        return [(base, 1 - t), (base + 1, t)]
    return [(base + k - 1, w) for k, w in enumerate(_cubic_weights(xp, t))]


@kernel('GridSample', versions=(16, LATEST))
def grid_sample(xp, X, grid, *, align_corners=0, mode='linear', padding_mode='zeros'):
    if mode not in _MODES:
        raise ValueError('GridSample: unknown mode %r' % mode)
    mode = _MODES[mode]
    if padding_mode not in ('zeros', 'border', 'reflection'):
        raise ValueError('GridSample: unknown padding_mode %r' % padding_mode)
    n, c = X.shape[:2]
    sizes = X.shape[2:]
    rank = len(sizes)
    out_spatial = grid.shape[1:-1]
    g = grid.astype(numpy.float64)
    per_axis = []  # for each spatial axis: list of (index, weight) taps
    for d, size in enumerate(sizes):
        # The grid's last dimension lists coordinates innermost axis first (x, y, z).
        u = g[..., rank - 1 - d]
        if align_corners:
            coord = (u + 1) / 2 * (size - 1)
            lo, hi = 0.0, size - 1.0
        else:
            coord = ((u + 1) * size - 1) / 2
            lo, hi = -0.5, size - 0.5
        if mode == 'nearest':
            coord = xp.rint(coord)  # halfway rounds to even
        # Coordinates outside the border range are moved in first ...
        outside = (coord < lo) | (coord > hi)
        if padding_mode == 'border':
            coord = xp.where(outside, xp.clip(coord, 0, size - 1), coord)
        elif padding_mode == 'reflection':
            coord = xp.where(outside, _reflect(xp, coord, lo, hi), coord)
        # ... then each tap that still falls outside is padded.
        taps = []
        for index, weight in _taps(xp, coord, mode):
            if padding_mode == 'zeros':
                weight = weight * ((index >= 0) & (index <= size - 1))
            elif padding_mode == 'reflection':
                index = _reflect(xp, index, lo, hi)
            index = xp.clip(index, 0, size - 1).astype(numpy.int64)
            taps.append((index, weight))
        per_axis.append(taps)
    strides = [int(numpy.prod(sizes[d + 1:])) for d in range(rank)]
    flat_x = X.reshape(n, c, -1)
    acc_dtype = numpy.result_type(X.dtype, numpy.float32)
    out = xp.zeros((n, c, int(numpy.prod(out_spatial))), dtype=acc_dtype)
    rows = xp.arange(n)[:, None, None]
    channels = xp.arange(c)[None, :, None]
    for combo in itertools.product(*per_axis):
        flat_index = sum(index * s for (index, _), s in zip(combo, strides))
        weight = 1.0
        for _, w in combo:
            weight = weight * w
        values = flat_x[rows, channels, flat_index.reshape(n, 1, -1)]
        out += values * weight.reshape(n, 1, -1).astype(acc_dtype)
    return out.reshape((n, c) + tuple(out_spatial)).astype(X.dtype)


@kernel('AffineGrid', versions=(20, LATEST))
def affine_grid(xp, theta, size, *, align_corners=0):
    spatial = [int(s) for s in size[2:]]
    axes = []
    for s in spatial:
        if align_corners:
            axes.append(xp.linspace(-1.0, 1.0, s) if s > 1 else xp.zeros(1))
        else:
            axes.append((2.0 * xp.arange(s) + 1) / s - 1)
    mesh = xp.meshgrid(*axes, indexing='ij')
    # Homogeneous base coordinates, innermost axis first: (x, y, [z,] 1).
    # NumPy 2's meshgrid returns a tuple, older ones (and CuPy) a list.
    base = xp.stack(list(mesh[::-1]) + [xp.ones_like(mesh[0])], axis=-1).astype(theta.dtype)
    flat = base.reshape(-1, len(spatial) + 1)
    grid = xp.matmul(flat[None], xp.swapaxes(theta, 1, 2))
    return grid.reshape([theta.shape[0]] + spatial + [len(spatial)])


def _corners(xp, boxes, center_point_box):
    """(y1, x1, y2, x2) with y1 <= y2 and x1 <= x2."""
    if center_point_box:
        xc, yc, w, h = (boxes[..., i] for i in range(4))
        return yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2
    a, b, c, d = (boxes[..., i] for i in range(4))
    return xp.minimum(a, c), xp.minimum(b, d), xp.maximum(a, c), xp.maximum(b, d)


def _iou_matrix(xp, boxes, center_point_box):
    y1, x1, y2, x2 = _corners(xp, boxes.astype(numpy.float64), center_point_box)
    area = (y2 - y1) * (x2 - x1)
    ih = xp.clip(xp.minimum(y2[:, None], y2[None]) - xp.maximum(y1[:, None], y1[None]), 0, None)
    iw = xp.clip(xp.minimum(x2[:, None], x2[None]) - xp.maximum(x1[:, None], x1[None]), 0, None)
    inter = ih * iw
    union = area[:, None] + area[None] - inter
    return xp.where(union > 0, inter / xp.where(union > 0, union, 1), 0.0)


@kernel('NonMaxSuppression', versions=(10, LATEST))
def non_max_suppression(xp, boxes, scores, max_output_boxes_per_class=None, iou_threshold=None,
                        score_threshold=None, *, center_point_box=0):
    limit = int(max_output_boxes_per_class.reshape(-1)[0]) \
        if max_output_boxes_per_class is not None and max_output_boxes_per_class.size else 0
    iou_limit = float(iou_threshold.reshape(-1)[0]) \
        if iou_threshold is not None and iou_threshold.size else 0.0
    selected = []
    if limit > 0:
        # The greedy selection is sequential; run it on the host.
        boxes_h, scores_h = to_numpy(boxes), to_numpy(scores)
        for b in range(boxes_h.shape[0]):
            iou = _iou_matrix(numpy, boxes_h[b], center_point_box)
            for cls in range(scores_h.shape[1]):
                s = scores_h[b, cls]
                order = numpy.argsort(-s, kind='stable')
                if score_threshold is not None and score_threshold.size:
                    # Boxes scoring at or below the threshold are dropped (as onnxruntime does).
                    order = order[s[order] > float(score_threshold.reshape(-1)[0])]
                alive = numpy.ones(order.shape[0], dtype=bool)
                picked = 0
                for k in range(order.shape[0]):
                    if not alive[k]:
                        continue
                    selected.append((b, cls, order[k]))
                    picked += 1
                    if picked == limit:
                        break
                    alive &= iou[order[k], order] <= iou_limit
    result = numpy.array(selected, dtype=numpy.int64).reshape(-1, 3)
    return xp.asarray(result)

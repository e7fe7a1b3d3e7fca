"""Converters for Chainer's RoI poolings: F.roi_pooling_2d (RoIs as
(image index, x_min, y_min, x_max, y_max) rows) and, with separate image
indices, F.roi_max_pooling_2d, F.roi_average_pooling_2d, F.roi_max_align_2d
and F.roi_average_align_2d, whose RoIs are (y_min, x_min, y_max, x_max).
Corners are in input coordinates, multiplied by ``spatial_scale``.

No standard operator reproduces these exactly, so each is composed of
elementwise ops, masks over the feature map and MatMul / ReduceMax:

- MaxRoiPool makes an RoI ``max - min + 1`` cells wide (Chainer: ``max -
  min``), fills empty bins with 0 (Chainer's max pooling: -inf), rounds
  ties away from zero (Chainer: to even) and has no onnxruntime kernel at
  opset 22+.
- RoiAlign's max mode takes, per sample, the largest of the four weighted
  neighbours instead of the interpolated value.  onnxruntime computes the
  RoI corners and sample positions in float32, where Chainer uses float64:
  a sample on the map's border can fall on its other side (the avg mode
  then differs by up to 0.7 on some RoIs of the tests), as can a grid size
  ``ceil(roi_height / outh)`` near an integer.  And RoiAlign has one
  sampling_ratio for both axes.

Coordinates are computed in float64 with Chainer's operation order, so bin
bounds and sample grids are exactly Chainer's.
"""
import numpy
from onnx import TensorProto as onnx_types
from onnx import helper

from .registry import converter

_F64 = numpy.float64


def _scaled_corners(ctx, call, round_to_cells):
    """(y_min, x_min, y_max, x_max), each (R, 1) float64: the RoIs times
    spatial_scale, rounded half to even (Python's round) for the poolings."""
    scale = ctx.constant(numpy.asarray(call.func.spatial_scale, dtype=_F64), hint='scale')
    rois = ctx.node('Mul', [ctx.node('Cast', [call.inputs[1]], to=onnx_types.DOUBLE), scale])
    if round_to_cells:
        rois = ctx.node('Round', [rois])
    corners = [ctx.fresh('roi') for _ in range(4)]
    ctx.split(rois, [1] * 4, 1, corners)
    return corners


def _scalar(ctx, value, hint):
    return ctx.constant(numpy.asarray(value, dtype=_F64), hint=hint)


def _tensor_type(dtype):
    return helper.np_dtype_to_tensor_dtype(numpy.dtype(dtype))


def _not_less(ctx, a, b):
    """a >= b, spelled with opset 11's operators (GreaterOrEqual is 12+)."""
    return ctx.node('Not', [ctx.node('Less', [a, b])])


def _images(ctx, call):
    """(R, C, H, W): the image of each RoI."""
    return ctx.node('Gather', [call.inputs[0], call.inputs[2]], axis=0)


def _pooling_bins(ctx, low, high, n_bins, limit, inclusive=False):
    """Chainer's _roi_pooling_slice for every RoI and bin of one axis:
    (mask (R, n_bins, limit) bool, bin length (R, n_bins) float64).
    ``inclusive``: the RoI spans ``high - low + 1`` cells (F.roi_pooling_2d)
    rather than ``high - low``."""
    one, zero = _scalar(ctx, 1, 'one'), _scalar(ctx, 0, 'zero')
    size = ctx.node('Sub', [high, low])
    if inclusive:
        size = ctx.node('Add', [size, one])
    size = ctx.node('Max', [size, one])
    stride = ctx.node('Div', [size, _scalar(ctx, n_bins, 'n_bins')])
    p = numpy.arange(n_bins, dtype=_F64).reshape(1, -1)
    lim = _scalar(ctx, limit, 'limit')

    def bound(rounding, index):
        edge = ctx.node(rounding, [ctx.node('Mul', [ctx.constant(index, hint='bin'), stride])])
        return ctx.node('Min', [ctx.node('Max', [ctx.node('Add', [edge, low]), zero]), lim])

    start, end = bound('Floor', p), bound('Ceil', p + 1)
    grid = ctx.constant(numpy.arange(limit, dtype=_F64).reshape(1, 1, -1), hint='grid')
    inside = ctx.node('And', [_not_less(ctx, grid, ctx.unsqueeze(start, [2])),
                              ctx.node('Less', [grid, ctx.unsqueeze(end, [2])])])
    length = ctx.node('Max', [ctx.node('Sub', [end, start]), zero])
    return inside, length


def _bilinear_sum(ctx, images, rows, cols, dtype):
    """rows @ images @ cols^T for rows (R, oh, H), cols (R, ow, W): the
    (R, C, oh, ow) sums of the images weighted by each bin's row and column
    weights, computed in ``dtype`` (the images' type)."""
    to = _tensor_type(dtype)
    rows = ctx.node('Cast', [ctx.unsqueeze(rows, [1])], to=to)
    cols = ctx.node('Cast', [ctx.node('Transpose', [ctx.unsqueeze(cols, [1])],
                                      perm=[0, 1, 3, 2])], to=to)
    return ctx.node('MatMul', [ctx.node('MatMul', [rows, images]), cols])


@converter('ROIMaxPooling2D', 'ROIAveragePooling2D')
def convert_roi_pooling_2d(ctx, call):
    """Bins with integer bounds: RoI corners rounded to cells, each bin
    ``[floor(p * size / n), ceil((p + 1) * size / n))`` shifted by the RoI
    start and clipped to the map.  Max: masked ReduceMax over columns, then
    rows (empty bins stay -inf, as in Chainer).  Average: mask sums by
    MatMul over the element count (empty bins give 0)."""
    func = call.func
    x = call.input_arrays[0]
    height, width = x.shape[2:]
    ymin, xmin, ymax, xmax = _scaled_corners(ctx, call, round_to_cells=True)
    mask_h, len_h = _pooling_bins(ctx, ymin, ymax, func.outh, height)
    mask_w, len_w = _pooling_bins(ctx, xmin, xmax, func.outw, width)
    images = _images(ctx, call)
    if type(func).__name__ == 'ROIAveragePooling2D':
        sums = _bilinear_sum(ctx, images, mask_h, mask_w, x.dtype)
        count = ctx.node('Mul', [ctx.unsqueeze(len_h, [1, 3]), ctx.unsqueeze(len_w, [1, 2])])
        count = ctx.node('Max', [count, _scalar(ctx, 1, 'one')])  # an empty bin sums to 0
        ctx.node('Div', [sums, ctx.node('Cast', [count], to=_tensor_type(x.dtype))],
                 call.outputs)
        return
    _masked_max(ctx, images, mask_h, mask_w, x.dtype, out=call.outputs[0])


def _masked_max(ctx, images, mask_h, mask_w, dtype, out=None):
    """The (R, C, oh, ow) max of each bin's cells of ``images`` (R, C, H, W):
    a masked ReduceMax over columns, then rows; -inf for an empty bin."""
    lowest = ctx.constant(numpy.asarray(-numpy.inf, dtype=dtype), hint='lowest')
    y = ctx.node('Where', [ctx.unsqueeze(mask_w, [1, 2]),                  # R 1 1 ow W
                           ctx.unsqueeze(images, [3]), lowest])            # R C H 1 W
    y = ctx.reduce('ReduceMax', y, [4], keepdims=False)                    # R C H ow
    y = ctx.node('Where', [ctx.unsqueeze(mask_h, [1, 4]),                  # R 1 oh H 1
                           ctx.unsqueeze(y, [2]), lowest])                 # R C 1 H ow
    return ctx.reduce('ReduceMax', y, [3], keepdims=False, out=out)        # R C oh ow


@converter('ROIPooling2D')
def convert_roi_pooling(ctx, call):
    """RoI max pooling with the image index in the RoI row.  onnxruntime's
    MaxRoiPool agrees with Chainer (also on negative inputs, and empty bins
    give 0) except where a scaled RoI corner is a tie: Chainer's NumPy code
    rounds it half to even (Python's round), MaxRoiPool half away from
    zero.  So the RoIs are scaled and rounded with ONNX Round (half to
    even) first and pooled with spatial_scale 1.  MaxRoiPool-22 has no
    onnxruntime kernel: from opset 22 the pooling is composed of the
    masked max above, with 0 for an empty bin."""
    func = call.func
    x = call.input_arrays[0]
    if ctx.opset < 22:
        scale = numpy.asarray([1] + [func.spatial_scale] * 4, dtype=call.input_arrays[1].dtype)
        rois = ctx.node('Round', [ctx.node('Mul', [call.inputs[1],
                                                   ctx.constant(scale, hint='scale')])])
        ctx.node('MaxRoiPool', [call.inputs[0], rois], call.outputs,
                 pooled_shape=[func.outh, func.outw], spatial_scale=1.0)
        return
    scale = numpy.asarray([1] + [func.spatial_scale] * 4, dtype=_F64)
    rois = ctx.node('Cast', [call.inputs[1]], to=onnx_types.DOUBLE)
    rois = ctx.node('Round', [ctx.node('Mul', [rois, ctx.constant(scale, hint='scale')])])
    index, xmin, ymin, xmax, ymax = [ctx.fresh('roi') for _ in range(5)]
    ctx.split(rois, [1] * 5, 1, [index, xmin, ymin, xmax, ymax])
    index = ctx.node('Cast', [ctx.squeeze(index, [1])], to=onnx_types.INT64)
    height, width = x.shape[2:]
    mask_h, len_h = _pooling_bins(ctx, ymin, ymax, func.outh, height, inclusive=True)
    mask_w, len_w = _pooling_bins(ctx, xmin, xmax, func.outw, width, inclusive=True)
    y = _masked_max(ctx, ctx.node('Gather', [call.inputs[0], index], axis=0),
                    mask_h, mask_w, x.dtype)
    area = ctx.node('Mul', [ctx.unsqueeze(len_h, [1, 3]), ctx.unsqueeze(len_w, [1, 2])])
    nonempty = ctx.node('Less', [_scalar(ctx, 0, 'zero'), area])
    ctx.node('Where', [nonempty, y, ctx.constant(numpy.zeros((), dtype=x.dtype), hint='zero')],
             call.outputs)


def _align_samples(ctx, start, end, n_bins, ratio, limit):
    """Chainer's sample points of one axis for every RoI: (weights
    (R, n_bins, G, limit) float64, the bilinear weight of each map cell for
    each bin and sample, zero for samples left out; valid (R, n_bins, G)
    bool; sample count per RoI, (R, 1) or (1, 1) float64).  With ``ratio`` None the
    count is ceil(roi size / n_bins) per RoI, and G their maximum."""
    one, zero = _scalar(ctx, 1, 'one'), _scalar(ctx, 0, 'zero')
    size = ctx.node('Max', [ctx.node('Sub', [end, start]), one])
    bin_size = ctx.node('Div', [size, _scalar(ctx, n_bins, 'n_bins')])
    if ratio is None:
        grid = ctx.node('Ceil', [bin_size])
        # Max with 1: an export without RoIs still gets a valid (empty) range.
        top = ctx.node('Max', [ctx.reduce('ReduceMax', grid, keepdims=False), one])
        samples = ctx.unsqueeze(ctx.node('Range', [zero, top, one]), [0, 1])
        in_grid = ctx.node('Less', [samples, ctx.unsqueeze(grid, [2])])
    else:
        grid = ctx.constant(numpy.full((1, 1), ratio, dtype=_F64), hint='ratio')
        samples = ctx.constant(numpy.arange(ratio, dtype=_F64).reshape(1, 1, -1), hint='samples')
        in_grid = None
    # start + p * bin + (i + .5) * bin / grid, in Chainer's order of operations
    start3, bin3 = ctx.unsqueeze(start, [2]), ctx.unsqueeze(bin_size, [2])
    grid3 = ctx.unsqueeze(grid, [2])
    p = ctx.constant(numpy.arange(n_bins, dtype=_F64).reshape(1, -1, 1), hint='bin')
    offset = ctx.node('Mul', [ctx.node('Add', [samples, _scalar(ctx, .5, 'half')]), bin3])
    pos = ctx.node('Add', [ctx.node('Add', [start3, ctx.node('Mul', [p, bin3])]),
                           ctx.node('Div', [offset, grid3])])                 # R n G
    lim = _scalar(ctx, limit, 'limit')
    valid = ctx.node('And', [_not_less(ctx, pos, _scalar(ctx, -1, 'minus_one')),
                             _not_less(ctx, lim, pos)])
    if in_grid is not None:
        valid = ctx.node('And', [valid, in_grid])
    # Chainer moves samples in [-1, 0) to 0 and in [limit - 1, limit] to
    # limit - 1; the weights of the cells are then the hat function.
    pos = ctx.node('Min', [ctx.node('Max', [pos, zero]), _scalar(ctx, limit - 1, 'last')])
    cells = ctx.constant(numpy.arange(limit, dtype=_F64).reshape(1, 1, 1, -1), hint='cells')
    distance = ctx.node('Abs', [ctx.node('Sub', [ctx.unsqueeze(pos, [3]), cells])])
    weights = ctx.node('Max', [ctx.node('Sub', [one, distance]), zero])
    weights = ctx.node('Mul', [weights, ctx.unsqueeze(
        ctx.node('Cast', [valid], to=onnx_types.DOUBLE), [3])])
    return weights, valid, grid


@converter('ROIMaxAlign2D', 'ROIAverageAlign2D')
def convert_roi_align_2d(ctx, call):
    """Bilinear samples on a grid in each bin (sampling_ratio per axis, or
    ceil(roi size / outsize) per RoI), computed in float64 as Chainer does.
    Average: the sum over the samples is separable, rows @ image @ cols^T,
    divided by the grid size (samples off the map count as 0).  Max: every
    sample's interpolated value by a broadcast MatMul, then ReduceMax over
    the samples of a bin (-inf where none lies on the map)."""
    func = call.func
    x = call.input_arrays[0]
    height, width = x.shape[2:]
    ratio_h, ratio_w = func.sampling_ratio
    ymin, xmin, ymax, xmax = _scaled_corners(ctx, call, round_to_cells=False)
    rows, valid_h, grid_h = _align_samples(ctx, ymin, ymax, func.outh, ratio_h, height)
    cols, valid_w, grid_w = _align_samples(ctx, xmin, xmax, func.outw, ratio_w, width)
    images = ctx.node('Cast', [_images(ctx, call)], to=onnx_types.DOUBLE)
    if type(func).__name__ == 'ROIAverageAlign2D':
        sums = _bilinear_sum(ctx, images, ctx.reduce('ReduceSum', rows, [2], keepdims=False),
                             ctx.reduce('ReduceSum', cols, [2], keepdims=False), _F64)
        count = ctx.unsqueeze(ctx.node('Mul', [grid_h, grid_w]), [2, 3])
        ctx.node('Cast', [ctx.node('Div', [sums, count])], call.outputs, to=_tensor_type(x.dtype))
        return
    # (R,1,oh,Gh,1,1,H) @ (R,C,1,1,1,H,W) -> (R,C,oh,Gh,1,1,W), then
    # @ (R,1,1,1,ow,W,Gw) -> (R,C,oh,Gh,ow,1,Gw): every sample's value.
    rows = ctx.unsqueeze(rows, [1, 4, 5])
    cols = ctx.node('Transpose', [ctx.unsqueeze(cols, [1, 2, 3])], perm=[0, 1, 2, 3, 4, 6, 5])
    values = ctx.node('MatMul', [ctx.node('MatMul', [rows, ctx.unsqueeze(images, [2, 3, 4])]),
                                 cols])
    valid = ctx.node('And', [ctx.unsqueeze(valid_h, [1, 4, 5, 6]),
                             ctx.unsqueeze(valid_w, [1, 2, 3, 5])])
    lowest = ctx.constant(numpy.asarray(-numpy.inf, dtype=_F64), hint='lowest')
    values = ctx.node('Where', [valid, values, lowest])
    best = ctx.reduce('ReduceMax', values, [3, 5, 6], keepdims=False)
    ctx.node('Cast', [best], call.outputs, to=_tensor_type(x.dtype))

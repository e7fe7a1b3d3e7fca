"""Gradient rules for the array family.

Where shapes are static, most rules are reshapes, transposes, splits and
sums decided at compile time, and scatters that have no good standard form
(adjoints of Slice, Gather*, non-constant Pad and Resize) are custom
operators of the org.chainer_compiler domain, registered in
runtime/ops/array.py, which take the static shape.  Where a shape is known
only at run time, reshapes, splits and sums read it from a Shape node, and
the adjoints of pure data movements scatter-add by ``_moved_back``.
"""
import numpy
from onnx import helper, numpy_helper

from ..onnx_graph import optional_input
from ..runtime.ops.registry import CUSTOM_DOMAIN
from .registry import GradientError, gradient


def _axis(axis, ndim):
    return axis + ndim if axis < 0 else axis



def _custom(b, op, inputs, **attrs):
    while inputs and not inputs[-1]:
        inputs = inputs[:-1]
    return b.node(op, inputs, 1, domain=CUSTOM_DOMAIN, **attrs)


def _static(b, name):
    """Whether forward value ``name``'s shape is known at compile time."""
    return not isinstance(b.shape_of(name), str)


def _moved_back(b, node, gy, x):
    """The gradient of data movement ``node`` for its input ``x`` whose
    shape is known only at run time: each element of ``node``'s output is
    a copy of one of ``x``'s, so ``node`` run on the flat positions of
    ``x``'s elements says where each element of ``gy`` came from, and
    ``gy`` is added there (ScatterElements, reduction 'add': opset 16)."""
    if b.opset < 16:
        raise GradientError('the gradient of %s for %s, whose shape is known only at run '
                            'time, needs opset 16' % (node.name or node.op_type, x))
    shape = b.shape_of(x)
    count = b.reduce('ReduceProd', shape, None, keepdims=False)
    flat = b.node('Range', [b.constant(numpy.array(0, numpy.int64)), count,
                            b.constant(numpy.array(1, numpy.int64))])
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    inputs = [b.node('Reshape', [flat, shape]) if i == x else i for i in node.input]
    sources = b.node(node.op_type, inputs, 1, domain=node.domain, **attrs)
    zeros = b.node('ConstantOfShape', [b.reshape(count, [1])],
                   value=numpy_helper.from_array(numpy.zeros((1,), b.dtype(x))))
    added = b.node('ScatterElements', [zeros, b.reshape(sources, [-1]), b.reshape(gy, [-1])],
                   axis=0, reduction='add')
    return b.node('Reshape', [added, shape])


# -- reshapes ----------------------------------------------------------------
@gradient('Reshape', 'Flatten', 'Squeeze', 'Unsqueeze')
def reshape_grad(b, node, gys):
    gy, = gys
    return [b.reshape_like(gy, node.input[0])] + [None] * (len(node.input) - 1)


@gradient('Transpose')
def transpose_grad(b, node, gys):
    gy, = gys
    ndim = len(b.dims(node.input[0]))
    perm = b.attr(node, 'perm') or list(range(ndim))[::-1]
    inverse = [0] * ndim
    for i, p in enumerate(perm):
        inverse[p] = i
    return [b.node('Transpose', [gy], 1, perm=inverse)]


# -- joining and splitting -------------------------------------------------
@gradient('Concat')
def concat_grad(b, node, gys):
    gy, = gys
    if len(node.input) == 1:
        return [gy]
    axis = _axis(b.attr(node, 'axis'), len(b.dims(node.output[0])))
    sizes = [b.dim_of(x, axis) for x in node.input]
    outputs = [b.fresh('concat_grad') for _ in sizes]
    if all(isinstance(s, int) for s in sizes):
        return b.split(gy, sizes, axis, outputs)
    if b.opset < 13:
        raise GradientError('the gradient of %s with sizes known only at run time needs '
                            'opset 13' % (node.name or node.op_type))
    split = b.node('Concat', [b.int64s([s]) if isinstance(s, int) else s for s in sizes],
                   axis=0)
    return b.node('Split', [gy, split], outputs, axis=axis)


@gradient('Split')
def split_grad(b, node, gys):
    x = node.input[0]
    axis = _axis(b.attr(node, 'axis'), len(b.dims(x)))
    pieces = []
    for y, gy in zip(node.output, gys):
        pieces.append(gy if gy is not None else b.zeros_like(y))
    gx = pieces[0] if len(pieces) == 1 else b.node('Concat', pieces, 1, axis=axis)
    return [gx] + [None] * (len(node.input) - 1)


# -- slicing and indexing --------------------------------------------------
@gradient('Slice')
def slice_grad(b, node, gys):
    gy, = gys
    x = node.input[0]
    if not _static(b, x):
        return [_moved_back(b, node, gy, x)] + [None] * (len(node.input) - 1)
    shape = list(b.shape(x))
    if b.version(node) < 10:  # starts, ends, axes as attributes
        starts, ends = b.attr(node, 'starts'), b.attr(node, 'ends')
        axes = b.attr(node, 'axes') or list(range(len(starts)))
        inputs = [gy, b.int64s(starts), b.int64s(ends), b.int64s(axes)]
        return [_custom(b, 'SliceGrad', inputs, shape=shape)]
    inputs = [gy] + [optional_input(node, i) for i in range(1, 5)]
    return [_custom(b, 'SliceGrad', inputs, shape=shape)] + [None] * (len(node.input) - 1)


@gradient('Gather')
def gather_grad(b, node, gys):
    gy, = gys
    data, indices = node.input
    if not _static(b, data):
        return [_moved_back(b, node, gy, data), None]
    shape = list(b.shape(data))
    axis = _axis(b.attr(node, 'axis'), len(shape))
    return [_custom(b, 'GatherGrad', [gy, indices], axis=axis, shape=shape), None]


@gradient('GatherElements')
def gather_elements_grad(b, node, gys):
    gy, = gys
    data, indices = node.input
    if not _static(b, data):
        return [_moved_back(b, node, gy, data), None]
    shape = list(b.shape(data))
    axis = _axis(b.attr(node, 'axis'), len(shape))
    return [_custom(b, 'GatherElementsGrad', [gy, indices], axis=axis, shape=shape), None]


@gradient('GatherND')
def gather_nd_grad(b, node, gys):
    gy, = gys
    data, indices = node.input
    if not _static(b, data):
        return [_moved_back(b, node, gy, data), None]
    return [_custom(b, 'GatherNDGrad', [gy, indices], shape=list(b.shape(data)),
                    batch_dims=b.attr(node, 'batch_dims')), None]


@gradient('Compress')
def compress_grad(b, node, gys):
    gy, = gys
    x, condition = node.input
    if not _static(b, x):
        return [_moved_back(b, node, gy, x), None]
    shape = list(b.shape(x))
    axis = b.attr(node, 'axis')
    selected = b.reshape(b.node('NonZero', [condition]), [-1])
    if axis is None:
        flat = _custom(b, 'GatherGrad', [gy, selected], axis=0,
                       shape=[int(numpy.prod(shape))])
        return [b.reshape_like(flat, x), None]
    return [_custom(b, 'GatherGrad', [gy, selected], axis=_axis(axis, len(shape)),
                    shape=shape), None]


@gradient('ScatterElements', 'Scatter', 'ScatterND')
def scatter_grad(b, node, gys):
    """Data: the upstream gradient with the overwritten positions zeroed
    (reduction 'none') or as is ('add'); updates: the gradient gathered."""
    gy, = gys
    data, indices, updates = node.input
    # Scatter (opsets 9 and 10) has no reduction: it overwrites.
    reduction = b.attr(node, 'reduction') or 'none'
    if reduction not in ('none', 'add'):
        raise GradientError('gradient of %s with reduction %r' % (node.op_type, reduction))
    nd = node.op_type == 'ScatterND'
    attrs = {} if nd else {'axis': b.attr(node, 'axis')}
    gathered = b.node('GatherND' if nd else 'GatherElements', [gy, indices], 1, **attrs)
    if reduction == 'add':
        return [gy, None, gathered]
    zeros = b.zeros_like(updates)
    scatter = node.op_type if node.op_type != 'Scatter' else 'ScatterElements'
    if scatter == 'ScatterElements' and b.opset < 11:
        scatter = 'Scatter'
    return [b.node(scatter, [gy, indices, zeros], 1, **attrs), None, gathered]


@gradient('TopK')
def top_k_grad(b, node, gys):
    gy = gys[0]
    x = node.input[0]
    shape = list(b.shape(x))
    axis = _axis(b.attr(node, 'axis'), len(shape))
    gx = _custom(b, 'GatherElementsGrad', [gy, node.output[1]], axis=axis, shape=shape)
    return [gx] + [None] * (len(node.input) - 1)


# -- broadcasting, tiling, padding -----------------------------------------
@gradient('Expand')
def expand_grad(b, node, gys):
    gy, = gys
    x = node.input[0]
    return [b.sum_to(gy, b.dims(node.output[0]), b.dims(x), like=x), None]


@gradient('Tile')
def tile_grad(b, node, gys):
    gy, = gys
    x = node.input[0]
    in_shape, out_shape = b.shape(x), b.shape(node.output[0])
    split_shape, axes = [], []
    for d, o in zip(in_shape, out_shape):
        repeats = o // d if d else 1
        if repeats != 1:
            axes.append(len(split_shape))
            split_shape.append(repeats)
        split_shape.append(d)
    gx = gy
    if axes:
        gx = b.reduce('ReduceSum', b.reshape(gy, split_shape), axes, keepdims=False)
    return [gx] + [None] * (len(node.input) - 1)


@gradient('Pad')
def pad_grad(b, node, gys):
    gy, = gys
    x = node.input[0]
    mode = b.attr(node, 'mode')
    rest = [None] * (len(node.input) - 1)
    if b.version(node) < 11:
        pads = b.attr(node, 'pads') or b.attr(node, 'paddings')  # Pad-1: paddings
        if mode == 'constant':
            attrs = {'pads': [-p for p in pads]} if b.opset >= 2 else {
                'paddings': [-p for p in pads]}
            return [b.node('Pad', [gy], 1, **attrs)] + rest
        return [_custom(b, 'PadGrad', [gy, b.int64s(pads)], mode=mode,
                        shape=list(b.shape(x)))] + rest
    pads, axes = node.input[1], optional_input(node, 3)
    if mode == 'constant':
        inputs = [gy, b.node('Neg', [pads])] + (['', axes] if axes else [])
        return [b.node('Pad', inputs, 1, mode='constant')] + rest
    if not _static(b, x):
        return [_moved_back(b, node, gy, x)] + rest
    return [_custom(b, 'PadGrad', [gy, pads, axes], mode=mode, shape=list(b.shape(x)))] + rest


@gradient('CenterCropPad')
def center_crop_pad_grad(b, node, gys):
    gy, = gys
    x = node.input[0]
    return [b.node('CenterCropPad', [gy, b.int64s(b.shape(x))], 1), None]


# -- selections ------------------------------------------------------------
@gradient('Where')
def where_grad(b, node, gys):
    gy, = gys
    condition, x, y = node.input
    out = b.dims(node.output[0])
    zero = b.constant(numpy.zeros((), b.dtype(node.output[0])), hint='zero')
    gx = b.node('Where', [condition, gy, zero])
    gy_ = b.node('Where', [condition, zero, gy])
    return [None, b.sum_to(gx, out, b.dims(x), like=x), b.sum_to(gy_, out, b.dims(y), like=y)]


@gradient('Trilu')
def trilu_grad(b, node, gys):
    gy, = gys
    inputs = [gy] + list(node.input[1:2])
    return [b.node('Trilu', inputs, 1, upper=b.attr(node, 'upper'))] + \
        [None] * (len(node.input) - 1)


@gradient('ReverseSequence')
def reverse_sequence_grad(b, node, gys):
    gy, = gys
    return [b.node('ReverseSequence', [gy, node.input[1]], 1,
                   batch_axis=b.attr(node, 'batch_axis'),
                   time_axis=b.attr(node, 'time_axis')), None]


# -- casts -----------------------------------------------------------------
def _cast_back(b, gy, x, grad_dtype):
    dtype = b.dtype(x)
    if dtype is None or dtype.kind != 'f':
        return None
    if dtype == grad_dtype:
        return gy
    to = helper.np_dtype_to_tensor_dtype(dtype)
    if b.opset < 6:
        to = helper.tensor_dtype_to_string(to).split('.')[-1]
    return b.node('Cast', [gy], 1, to=to)


@gradient('Cast')
def cast_grad(b, node, gys):
    gy, = gys
    return [_cast_back(b, gy, node.input[0], b.dtype(node.output[0]))]


@gradient('CastLike')
def cast_like_grad(b, node, gys):
    gy, = gys
    return [_cast_back(b, gy, node.input[0], b.dtype(node.output[0])), None]


# -- block rearrangements --------------------------------------------------
@gradient('DepthToSpace')
def depth_to_space_grad(b, node, gys):
    gy, = gys
    blocksize = b.attr(node, 'blocksize')
    if b.attr(node, 'mode') == 'DCR':
        return [b.node('SpaceToDepth', [gy], 1, blocksize=blocksize)]
    n, c, h, w = b.shape(node.input[0])
    blocks = b.reshape(gy, [n, c // blocksize ** 2, h, blocksize, w, blocksize])
    moved = b.node('Transpose', [blocks], 1, perm=[0, 1, 3, 5, 2, 4])
    return [b.reshape(moved, [n, c, h, w])]


@gradient('SpaceToDepth')
def space_to_depth_grad(b, node, gys):
    gy, = gys
    return [b.node('DepthToSpace', [gy], 1, blocksize=b.attr(node, 'blocksize'))]


# -- Resize and Upsample ---------------------------------------------------
_RESIZE_ATTRS = ('mode', 'coordinate_transformation_mode', 'nearest_mode', 'cubic_coeff_a',
                 'exclude_outside', 'extrapolation_value', 'antialias', 'axes',
                 'keep_aspect_ratio_policy')


@gradient('Resize', 'Upsample')
def resize_grad(b, node, gys):
    """ResizeGrad takes Resize-11's inputs (roi, scales, sizes) in place of
    X's; the older forms (scales only, asymmetric coordinates, legacy
    nearest rounding) become a scales input and ``legacy=1``."""
    gy, = gys
    x = node.input[0]
    shape = list(b.shape(x))
    rest = [None] * (len(node.input) - 1)
    if node.op_type == 'Resize' and b.version(node) >= 11:
        attrs = {name: b.attr(node, name) for name in _RESIZE_ATTRS}
        inputs = [gy] + [optional_input(node, i) for i in range(1, 4)]
        return [_custom(b, 'ResizeGrad', inputs, shape=shape, **attrs)] + rest
    mode = b.attr(node, 'mode')
    if len(node.input) > 1:
        scales = node.input[1]
    elif b.attr(node, 'scales') is not None:
        scales = b.constant(numpy.asarray(b.attr(node, 'scales'), numpy.float32), hint='scales')
    else:
        scales = b.constant(numpy.asarray([1, 1, b.attr(node, 'height_scale'),
                                           b.attr(node, 'width_scale')], numpy.float32),
                            hint='scales')
    return [_custom(b, 'ResizeGrad', [gy, '', scales], shape=shape, legacy=1,
                    mode=mode)] + rest

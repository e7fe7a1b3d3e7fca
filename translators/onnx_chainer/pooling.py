"""Converters for chainer.functions.pooling."""
import numpy
from chainer.utils import conv

from .registry import converter


def _geometry(func):
    """(ksize, stride, pad) tuples of a Pooling2D or _PoolingND function."""
    if hasattr(func, 'kh'):
        return (func.kh, func.kw), (func.sy, func.sx), (func.ph, func.pw)
    return tuple(func.ksize), tuple(func.stride), tuple(func.pad)


def _onnx_ceil_size(size, k, s, p):
    """The output size of an ONNX pool with ceil_mode=1 (a window that would
    start in the end padding is dropped, as onnxruntime does)."""
    out = -(-(size + 2 * p - k) // s) + 1
    if (out - 1) * s >= size + p:
        out -= 1
    return out


@converter('MaxPoolingND')  # F.max_pooling_2d is MaxPoolingND too
def convert_max_pooling(ctx, call):
    """MaxPool; ``cover_all=True`` (Chainer's default) pads each axis end
    with ``stride - 1`` more -inf, which is ONNX's ceil_mode where the
    output sizes agree, and an explicit -inf Pad otherwise."""
    func = call.func
    if func.return_indices:
        raise ValueError('%s: return_indices=True is not supported' % call.name)
    x = call.input_arrays[0]
    ksize, stride, pad = _geometry(func)
    attrs = dict(kernel_shape=list(ksize), strides=list(stride), pads=list(pad) * 2)
    if not func.cover_all:
        ctx.node('MaxPool', call.inputs, call.outputs, **attrs)
        return
    geometry = list(zip(x.shape[2:], ksize, stride, pad))
    chainer_out = [conv.get_conv_outsize(n, k, s, p, cover_all=True) for n, k, s, p in geometry]
    floor_out = [conv.get_conv_outsize(n, k, s, p) for n, k, s, p in geometry]
    if chainer_out == floor_out:
        ctx.node('MaxPool', call.inputs, call.outputs, **attrs)
        return
    ceil_out = [_onnx_ceil_size(n, k, s, p) for n, k, s, p in geometry]
    if chainer_out == ceil_out:
        ctx.node('MaxPool', call.inputs, call.outputs, ceil_mode=1, **attrs)
        return
    # Chainer's extra window on an axis either holds input data (ceil_mode
    # keeps it) or lies wholly in the end padding (onnxruntime's ceil_mode
    # drops it, onnx's shape inference does not).  So pad the first kind
    # explicitly, pool in floor mode, whose sizes every implementation
    # agrees on, and append the second kind as the -inf Chainer gives.
    extra_end = [s - 1 if c == o != f else 0
                 for c, o, f, s in zip(chainer_out, ceil_out, floor_out, stride)]
    dropped = [c - o for c, o in zip(chainer_out, ceil_out)]
    lowest = ctx.constant(numpy.asarray(-numpy.inf, dtype=x.dtype), hint='lowest')
    x_name = call.inputs[0]
    if any(extra_end):
        pads = ctx.int64s([0] * x.ndim + [0, 0] + extra_end)
        x_name = ctx.node('Pad', [x_name, pads, lowest], 1, mode='constant')
    y = ctx.node('MaxPool', [x_name], 1, **attrs)
    pads = ctx.int64s([0] * x.ndim + [0, 0] + dropped)
    ctx.node('Pad', [y, pads, lowest], call.outputs, mode='constant')


@converter('AveragePooling2D', 'AveragePoolingND')
def convert_average_pooling(ctx, call):
    """AveragePool.  Chainer divides by the full window (padding counted:
    count_include_pad=1) except average_pooling_nd with ``pad_value=None``,
    which averages over the input elements only (count_include_pad=0;
    onnx-chainer ignored pad_value)."""
    func = call.func
    ksize, stride, pad = _geometry(func)
    if func.cover_all:
        raise ValueError('%s: cover_all=True is not supported' % call.name)
    include_pad = getattr(func, 'pad_value', 0) is not None
    ctx.node('AveragePool', call.inputs, call.outputs, kernel_shape=list(ksize),
             strides=list(stride), pads=list(pad) * 2,
             count_include_pad=int(include_pad and any(pad)))


@converter('Unpooling2D', 'UnpoolingND')
def convert_unpooling(ctx, call):
    """Each input element copied over its ksize window, overlaps summed and
    cropped by pad/outsize (Chainer's tile + col2im): a depthwise
    ConvTranspose with a kernel of ones."""
    func = call.func
    x_name = call.inputs[0]
    x = call.input_arrays[0]
    ndim = x.ndim - 2
    ksize, stride, pad = _geometry(func)
    if hasattr(func, 'outh'):
        outsize = (func.outh, func.outw)
    else:
        outsize = func.outs if func.outs is not None else (None,) * ndim
    channels = x.shape[1]
    pads_end, output_padding = [], []
    for n, k, s, p, out in zip(x.shape[2:], ksize, stride, pad, outsize):
        if out is None:
            out = conv.get_deconv_outsize(n, k, s, p, cover_all=func.cover_all)
        extra = int(out) - conv.get_deconv_outsize(n, k, s, p)
        pads_end.append(p - min(extra, 0))
        output_padding.append(max(extra, 0))
    if any(o >= s for o, s in zip(output_padding, stride)):
        raise ValueError('%s: outsize %s is not supported' % (call.name, tuple(outsize)))
    ones = ctx.constant(numpy.ones((channels, 1) + tuple(ksize), dtype=x.dtype), hint='ones')
    ctx.node('ConvTranspose', [x_name, ones], call.outputs, kernel_shape=list(ksize),
             strides=list(stride), pads=list(pad) + pads_end, group=channels,
             output_padding=output_padding if any(output_padding) else None)

"""Converters for chainer.functions.connection."""
import numpy
from chainer.utils import conv

from .registry import converter


@converter('LinearFunction')
def convert_linear(ctx, call):
    """y = x W^T + b, with x flattened to 2-D as F.linear does.

    (``n_batch_axes`` is handled by F.linear itself with Reshape calls
    around a 2-D LinearFunction, so it needs nothing here.)"""
    x, W = call.inputs[:2]
    if call.input_arrays[0].ndim != 2:
        x = ctx.node('Flatten', [x], 1, axis=1)
    ctx.node('Gemm', [x, W] + call.inputs[2:], call.outputs, transB=1)


def _conv_geometry(func):
    """(stride, pad, dilate) tuples of a Convolution2DFunction/ConvolutionND
    or their deconvolution counterparts."""
    if hasattr(func, 'sy'):  # the 2-D classes keep one attribute per axis
        return (func.sy, func.sx), (func.ph, func.pw), (func.dy, func.dx)
    return tuple(func.stride), tuple(func.pad), tuple(func.dilate)


@converter('Convolution2DFunction', 'ConvolutionND')
def convert_convolution(ctx, call):
    """Conv with groups, stride, pad and dilation (which onnx-chainer drops).

    ``cover_all=True`` makes Chainer pad the end of each axis with
    ``stride - 1`` extra zeros (im2col); the same extra end padding gives
    ONNX the identical output."""
    func = call.func
    x, W = call.input_arrays[:2]
    stride, pad, dilate = _conv_geometry(func)
    pads_end = [p + (s - 1 if func.cover_all else 0) for p, s in zip(pad, stride)]
    ctx.node('Conv', call.inputs, call.outputs,
             kernel_shape=list(W.shape[2:]), strides=list(stride),
             pads=list(pad) + pads_end, dilations=list(dilate),
             group=int(func.groups))


@converter('Deconvolution2DFunction', 'DeconvolutionND')
def convert_deconvolution(ctx, call):
    """ConvTranspose with groups, stride, pad, dilation (dropped by
    onnx-chainer) and ``outsize``: Chainer's larger outsize keeps extra
    rows/columns at the end, which is ONNX's ``output_padding``."""
    func = call.func
    x, W = call.input_arrays[:2]
    ndim = x.ndim - 2
    stride, pad, dilate = _conv_geometry(func)
    if hasattr(func, 'sy'):
        outsize = (func.outh, func.outw)
    else:
        outsize = func.outs if func.outs is not None else (None,) * ndim
    kernel = W.shape[2:]
    output_padding = []
    for size, k, s, p, d, out in zip(x.shape[2:], kernel, stride, pad, dilate, outsize):
        default = conv.get_deconv_outsize(size, k, s, p, d=d)
        extra = 0 if out is None else int(out) - default
        if extra < 0 or (extra > 0 and extra >= max(s, d)):
            raise ValueError('%s: outsize %s cannot be expressed as ONNX output_padding'
                             % (call.name, tuple(outsize)))
        output_padding.append(extra)
    ctx.node('ConvTranspose', call.inputs, call.outputs,
             kernel_shape=list(kernel), strides=list(stride), pads=list(pad) * 2,
             dilations=list(dilate), group=int(func.groups),
             output_padding=output_padding if any(output_padding) else None)


@converter('EmbedIDFunction')
def convert_embed_id(ctx, call):
    """W[x]; rows for ``ignore_label`` are zero (onnx-chainer gathered the
    row the label happens to index, e.g. the last one for -1)."""
    x, W = call.inputs
    ignore = call.func.ignore_label
    if ignore is None:
        ctx.node('Gather', [W, x], call.outputs, axis=0)
        return
    x_dtype = call.input_arrays[0].dtype
    w_dtype = call.input_arrays[1].dtype
    is_ignored = ctx.node('Equal', [x, ctx.constant(numpy.asarray(ignore, dtype=x_dtype),
                                                    hint='ignore_label')])
    safe = ctx.node('Where', [is_ignored, ctx.constant(numpy.zeros((), dtype=x_dtype),
                                                       hint='zero'), x])
    rows = ctx.node('Gather', [W, safe], axis=0)
    mask = ctx.unsqueeze(is_ignored, [-1])
    ctx.node('Where', [mask, ctx.constant(numpy.zeros((), dtype=w_dtype), hint='zero'), rows],
             call.outputs)


@converter('BilinearFunction')
def convert_bilinear(ctx, call):
    """y = sum_jk e1_ij e2_ik W_jkl (+ e1 V1 + e2 V2 + b), with e1 and e2
    flattened to matrices as F.bilinear does."""
    e1, e2, W = call.inputs[:3]
    a1, a2, aw = call.input_arrays[:3]
    if a1.ndim != 2:
        e1 = ctx.node('Flatten', [e1], 1, axis=1)
    if a2.ndim != 2:
        e2 = ctx.node('Flatten', [e2], 1, axis=1)
    outer = ctx.node('Mul', [ctx.unsqueeze(e1, [2]), ctx.unsqueeze(e2, [1])])
    outer = ctx.node('Flatten', [outer], 1, axis=1)
    w = ctx.reshape(W, [aw.shape[0] * aw.shape[1], aw.shape[2]])
    if len(call.inputs) == 3:
        ctx.node('MatMul', [outer, w], call.outputs)
        return
    V1, V2, b = call.inputs[3:]
    y = ctx.node('MatMul', [outer, w])
    y = ctx.node('Add', [y, ctx.node('MatMul', [e1, V1])])
    y = ctx.node('Add', [y, ctx.node('MatMul', [e2, V2])])
    ctx.node('Add', [y, b], call.outputs)

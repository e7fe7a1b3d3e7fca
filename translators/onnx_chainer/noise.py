"""Converters for chainer.functions.noise.

``F.dropout`` and ``F.zoneout`` make a FunctionNode only in training mode
(otherwise they return their input), so an inference export normally never
sees them; should one appear anyway (a model forcing ``train`` inside its
forward), it is exported as the inference-time identity.

Masks are drawn afresh on every run of the ONNX graph, as Chainer does when
none is given.  A mask (or ``eps``) the user passed explicitly cannot be told
apart from a drawn one once the function has run, and is not reproduced.
"""
import numpy
from onnx import helper, numpy_helper

from .registry import converter  # noqa: F401


def _scalar(value, dtype):
    return numpy.asarray(value, dtype=dtype)


@converter('Dropout')
def convert_dropout(ctx, call):
    """Training-mode F.dropout: x * mask / (1 - ratio), mask ~ Bernoulli(1 -
    ratio): ONNX Dropout in training mode (opset >= 12)."""
    x, = call.inputs
    if ctx.opset < 12:
        raise ValueError('Dropout: a training-mode export needs opset 12 or newer '
                         '(opset %d has no training_mode input)' % ctx.opset)
    ctx.dropout(x, call.func.dropout_ratio, training=True, out=call.outputs[0])


@converter('InferenceDropout')
def convert_inference_dropout(ctx, call):
    """F.dropout outside training (recorded by recordable.py): an ONNX
    Dropout that is the identity here and keeps the ratio, so compile_onnx
    can make it random when it compiles the file for training."""
    ctx.dropout(call.inputs[0], call.func.dropout_ratio, training=False, out=call.outputs[0])


@converter('Zoneout')
def convert_zoneout(ctx, call):
    """Each element is h with probability ``ratio``, else x.  From opset 12
    the keep-mask of a training-mode Dropout picks them (onnxruntime has no
    RandomUniformLike kernel from opset 22); at 11 a uniform draw does."""
    h, x = call.inputs
    if not call.train:
        ctx.node('Identity', [x], call.outputs)
        return
    dtype = call.input_arrays[1].dtype
    ratio = call.func.zoneout_ratio
    if ctx.opset >= 12:
        _, keep_x = ctx.node('Dropout', _training_dropout_inputs(ctx, x, ratio), 2)
        ctx.node('Where', [keep_x, x, h], call.outputs)
        return
    u = ctx.node('RandomUniformLike', [x])
    keep_h = ctx.node('Less', [u, ctx.constant(_scalar(ratio, dtype), hint='ratio')])
    ctx.node('Where', [keep_h, h, x], call.outputs)


def _training_dropout_inputs(ctx, x, ratio):
    return [x, ctx.constant(numpy.float32(ratio), hint='ratio'),
            ctx.constant(numpy.bool_(True), hint='training_mode')]


@converter('Gaussian')
def convert_gaussian(ctx, call):
    """mean + exp(ln_var / 2) * eps, eps ~ N(0, 1) drawn on every run.
    ``F.gaussian`` samples in inference mode too."""
    mean, ln_var = call.inputs
    dtype = call.input_arrays[0].dtype
    eps = ctx.node('RandomNormalLike', [ln_var])
    std = ctx.node('Exp', [ctx.node('Mul', [ln_var, ctx.constant(_scalar(0.5, dtype),
                                                                 hint='half')])])
    ctx.node('Add', [mean, ctx.node('Mul', [std, eps])], call.outputs)


@converter('SimplifiedDropconnect')
def convert_simplified_dropconnect(ctx, call):
    """y = x (W * mask / (1 - ratio))^T + b.  With ``ratio`` 0 (what
    ``train=False`` sets) that is a plain Gemm; otherwise the mask is drawn
    per sample (``use_batchwise_mask``) or once for the batch."""
    func = call.func
    x, W = call.inputs[:2]
    x_arr, W_arr = call.input_arrays[:2]
    if x_arr.ndim != 2:
        x = ctx.node('Flatten', [x], 1, axis=1)
    if func.ratio == 0:
        ctx.node('Gemm', [x, W] + call.inputs[2:], call.outputs, transB=1)
        return
    dtype = numpy.dtype(W_arr.dtype)
    n_out, n_in = W_arr.shape
    if func.use_batchwise_mask:
        mask_shape = [x_arr.shape[0], n_out, n_in]
    else:
        mask_shape = [n_out, n_in]
    if ctx.opset >= 12:
        # A training-mode Dropout of ones is the scaled mask (and works in
        # onnxruntime from opset 22, where RandomUniform has no kernel).
        ones = ctx.node('ConstantOfShape', [ctx.int64s(mask_shape)],
                        value=numpy_helper.from_array(numpy.ones(1, dtype)))
        mask = ctx.node('Dropout', _training_dropout_inputs(ctx, ones, func.ratio))
    else:
        u = ctx.node('RandomUniform', [], dtype=helper.np_dtype_to_tensor_dtype(dtype),
                     shape=mask_shape)
        dropped = ctx.node('Less', [u, ctx.constant(_scalar(func.ratio, dtype),
                                                    hint='ratio')])
        mask = ctx.node('Where', [dropped, ctx.constant(_scalar(0, dtype), hint='zero'),
                                  ctx.constant(_scalar(1. / (1 - func.ratio), dtype),
                                               hint='scale')])
    masked_W = ctx.node('Mul', [W, mask])
    if func.use_batchwise_mask:
        # (N, out, in) @ (N, in, 1) -> (N, out, 1)
        y = ctx.node('MatMul', [masked_W, ctx.unsqueeze(x, [2])])
        out = call.outputs[0] if len(call.inputs) == 2 else None
        y = ctx.squeeze(y, [2], out=out)
        if len(call.inputs) == 3:
            ctx.node('Add', [y, call.inputs[2]], call.outputs)
    else:
        ctx.node('Gemm', [x, masked_W] + call.inputs[2:], call.outputs, transB=1)

"""Converters for chainer.functions.connection."""
from .registry import converter  # noqa: F401


@converter('LinearFunction')
def convert_linear(ctx, call):
    """y = x W^T + b, with x flattened to 2-D as F.linear does."""
    x, W = call.inputs[:2]
    if call.input_arrays[0].ndim != 2:
        x = ctx.node('Flatten', [x], 1, axis=1)
    ctx.node('Gemm', [x, W] + call.inputs[2:], call.outputs, transB=1)

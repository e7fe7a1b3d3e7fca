"""Converters for chainer.functions.activation."""
from .registry import converter  # noqa: F401


@converter('ReLU')
def convert_relu(ctx, call):
    ctx.node('Relu', call.inputs, call.outputs)

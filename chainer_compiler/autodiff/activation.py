"""Gradient rules for the activation family."""
import numpy

from .registry import gradient, no_gradient  # noqa: F401


@gradient('Relu')
def relu_grad(b, node, gys):
    gy, = gys
    y = node.output[0]
    zero = b.constant(numpy.zeros((), b.dtype(y)))
    return [b.node('Where', [b.node('Greater', [y, zero]), gy, zero])]

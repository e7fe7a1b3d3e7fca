"""Gradient rules for the pooling family.

MaxPool and AveragePool differentiate with custom kernels (``MaxPoolGrad``
routes each window's gradient to its first maximum, as Chainer does;
``AveragePoolGrad`` spreads it over the window, col2im-style); the global
poolings with a few standard nodes.
"""
import math

import numpy
from onnx import helper

from ..runtime.ops.registry import CUSTOM_DOMAIN
from .registry import gradient

_WINDOW_ATTRIBUTES = ('auto_pad', 'ceil_mode', 'dilations', 'kernel_shape', 'pads', 'strides')


def _window_attributes(b, node, extra=()):
    """The node's windowing attributes (those given), as keywords."""
    names = _WINDOW_ATTRIBUTES + tuple(extra)
    return {a.name: b.attr(node, a.name) for a in node.attribute if a.name in names}


@gradient('MaxPool')
def max_pool_grad(b, node, gys):
    gy = gys[0]
    if gy is None:  # only the (integer) Indices output is used
        return [None]
    x, y = node.input[0], node.output[0]
    return [b.node('MaxPoolGrad', [x, y, gy], 1, domain=CUSTOM_DOMAIN,
                   **_window_attributes(b, node))]


@gradient('AveragePool')
def average_pool_grad(b, node, gys):
    gy, = gys
    x = node.input[0]
    return [b.node('AveragePoolGrad', [gy], 1, domain=CUSTOM_DOMAIN,
                   input_shape=list(b.shape(x)),
                   **_window_attributes(b, node, ('count_include_pad',)))]


@gradient('GlobalAveragePool')
def global_average_pool_grad(b, node, gys):
    gy, = gys
    x = node.input[0]
    shape = b.shape(x)
    share = b.constant(numpy.asarray(1.0 / math.prod(shape[2:]), b.dtype(x)), hint='share')
    return [b.node('Expand', [b.node('Mul', [gy, share]), b.int64s(shape)])]


@gradient('GlobalMaxPool')
def global_max_pool_grad(b, node, gys):
    """gy goes to every element equal to the maximum (ties all receive it,
    as for F.max)."""
    gy, = gys
    x, y = node.input[0], node.output[0]
    zero = b.constant(numpy.zeros((), b.dtype(x)), hint='zero')
    return [b.node('Where', [b.node('Equal', [x, y]), gy, zero])]


@gradient('MaxRoiPool')
def max_roi_pool_grad(b, node, gys):
    gy, = gys
    x, rois = node.input
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return [b.node('MaxRoiPoolGrad', [x, rois, gy], 1, domain=CUSTOM_DOMAIN, **attrs), None]

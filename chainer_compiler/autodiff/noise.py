"""Gradient rules for the noise family.

Dropout's gradient is ``gy * mask / (1 - ratio)`` in training mode and
``gy`` otherwise.  From opset 12 whether the node trains, and its ratio, may
be run-time values, so training-mode gradients go through one custom node
(org.chainer_compiler, kernel in runtime/ops/noise.py):
DropoutGrad(gy, mask[, ratio[, training_mode]]) -> gx.  It reads the
forward's keep-mask output, which a node that leaves it out is given
(``forward_output``): a boolean is the cheapest thing to retain.

Random generators carry no gradient (their kernels declare ``gradient=False``).
"""
import numpy

from ..onnx_graph import optional_input
from ..runtime.ops.registry import CUSTOM_DOMAIN
from .loss import forward_output
from .registry import gradient


@gradient('Dropout')
def dropout_grad(b, node, gys):
    gy, = gys[:1]
    x = node.input[0]
    others = [None] * (len(node.input) - 1)
    version = b.version(node)
    if version >= 12:
        if not optional_input(node, 2):  # no training_mode: inference, the identity
            return [gy] + others
        mask = forward_output(b, node, 1, numpy.bool_, b.dims(x), 'mask')
        inputs = [gy, mask, optional_input(node, 1), node.input[2]]
    elif version >= 7 or b.attr(node, 'is_test'):  # no training mode: identity
        return [gy] + others
    else:  # opsets 1-6 train unless is_test; the mask has the data's type
        mask = forward_output(b, node, 1, b.dtype(x), b.dims(x), 'mask')
        ratio = b.constant(numpy.float32(b.attr(node, 'ratio')), hint='ratio')
        inputs = [gy, mask, ratio, b.constant(numpy.bool_(True), hint='training_mode')]
    return [b.node('DropoutGrad', inputs, 1, domain=CUSTOM_DOMAIN)] + others


@gradient('DropoutTraining', domain=CUSTOM_DOMAIN)
def dropout_training_grad(b, node, gys):
    """compile_onnx's training-mode dropout keeps its mask as output 1."""
    gy = gys[0]
    if gy is None:
        return [None]
    ratio = b.attr(node, 'ratio')
    inputs = [gy, node.output[1], b.constant(numpy.float32(ratio), hint='ratio'),
              b.constant(numpy.bool_(True), hint='training_mode')]
    return [b.node('DropoutGrad', inputs, 1, domain=CUSTOM_DOMAIN)]

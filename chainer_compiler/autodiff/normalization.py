"""Gradient rules for the normalization family.

The batch, layer, group and instance normalizations differentiate with one
custom kernel each (``BatchNormalizationGrad``, ``LayerNormalizationGrad``,
``GroupNormalizationGrad``): the standard backward of a standardisation,
one pass over the data, reading the statistics the forward pass saved where
it saved any and recomputing them from X otherwise.  LRN has ``LRNGrad``;
LpNormalization a handful of standard nodes.
"""
import numpy

from ..onnx_graph import optional_input
from ..runtime.ops.opset_rules import batch_norm_trains
from ..runtime.ops.registry import CUSTOM_DOMAIN
from .registry import GradientError, gradient


def _saved(b, names):
    """The forward's saved statistics ``names`` (mean, then inverse std or
    variance) when both are produced and typed, else [] (recomputed)."""
    names = list(names)
    if len(names) == 2 and all(n and b.value_types.get(n, (None, None))[1] is not None
                               for n in names):
        return names
    return []


# -- BatchNormalization -----------------------------------------------------------

@gradient('BatchNormalization')
def batch_normalization_grad(b, node, gys):
    """Training (batch statistics): gradients wrt X, scale and B, none
    for the running averages; reads the batch mean and variance where the
    node outputs them (before opset 14), recomputes them from X otherwise.
    Inference: wrt the given mean and variance too."""
    gy = gys[0]
    if gy is None:  # only the running statistics are used
        return [None] * len(node.input)
    x, scale, _, mean, var = node.input
    attrs = dict(domain=CUSTOM_DOMAIN, epsilon=float(b.attr(node, 'epsilon')),
                 spatial=b.attr(node, 'spatial'))
    if batch_norm_trains(b.version(node), len(node.output), b.attr(node, 'training_mode'),
                         b.attr(node, 'is_test')):
        inputs = [x, scale, gy] + _saved(b, node.output[3:5])
        gx, g_scale, g_b = b.node('BatchNormalizationGrad', inputs, 3, training=1, **attrs)
        return [gx, g_scale, g_b, None, None]
    return b.node('BatchNormalizationGrad', [x, scale, gy, mean, var], 5, training=0, **attrs)


# -- per-sample normalizations ------------------------------------------------------

@gradient('LayerNormalization')
def layer_normalization_grad(b, node, gys):
    gy = gys[0]
    if any(g is not None for g in gys[1:]):
        raise GradientError('LayerNormalization: gradients through the Mean/InvStdDev '
                            'outputs are not supported')
    x, scale = node.input[:2]
    inputs = [x, scale, gy]
    inputs += _saved(b, node.output[1:3])
    gx, g_scale = b.node('LayerNormalizationGrad', inputs, 2, domain=CUSTOM_DOMAIN,
                         axis=b.attr(node, 'axis'),
                         epsilon=float(b.attr(node, 'epsilon')))
    grads = [gx, g_scale]
    if optional_input(node, 2):
        bias = node.input[2]
        grads.append(b.sum_to(gy, b.dims(node.output[0]), b.dims(bias), like=bias))
    return grads + [None] * (len(node.input) - len(grads))


def _group_norm_grad(b, node, gy, num_groups):
    x, scale = node.input[:2]
    grads = b.node('GroupNormalizationGrad', [x, scale, gy], 3, domain=CUSTOM_DOMAIN,
                   num_groups=num_groups, epsilon=float(b.attr(node, 'epsilon')))
    return grads[:len(node.input)]


@gradient('GroupNormalization')
def group_normalization_grad(b, node, gys):
    return _group_norm_grad(b, node, gys[0], b.attr(node, 'num_groups'))


@gradient('InstanceNormalization')
def instance_normalization_grad(b, node, gys):
    return _group_norm_grad(b, node, gys[0], b.shape(node.input[0])[1])


# -- LRN and LpNormalization ----------------------------------------------------------

@gradient('LRN')
def lrn_grad(b, node, gys):
    gy, = gys
    attrs = {name: b.attr(node, name) for name in ('size', 'alpha', 'beta', 'bias')
             if b.attr(node, name) is not None}
    return [b.node('LRNGrad', [node.input[0], gy], 1, domain=CUSTOM_DOMAIN, **attrs)]


@gradient('LpNormalization')
def lp_normalization_grad(b, node, gys):
    """y = x / ||x||_p: gx = (gy - s * sum(gy * y)) / ||x||_p with s = y for
    p = 2 and sign(x) for p = 1 (a zero norm divides by 1, as forward)."""
    gy, = gys
    x, y = node.input[0], node.output[0]
    p = b.attr(node, 'p')
    axes = [b.attr(node, 'axis') % len(b.dims(x))]
    dtype = b.dtype(x)
    norm = b.reduce('ReduceL2' if p == 2 else 'ReduceL1', x, axes, keepdims=True)
    zero = b.constant(numpy.zeros((), dtype), hint='zero')
    one = b.constant(numpy.ones((), dtype), hint='one')
    norm = b.node('Where', [b.node('Equal', [norm, zero]), one, norm])
    direction = y if p == 2 else b.node('Sign', [x])
    along = b.reduce('ReduceSum', b.node('Mul', [gy, y]), axes, keepdims=True)
    return [b.node('Div', [b.node('Sub', [gy, b.node('Mul', [direction, along])]), norm])]

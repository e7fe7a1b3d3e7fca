"""Gradient rules for the normalization family.

The batch, layer, group and instance normalizations differentiate with one
custom kernel each (``BatchNormalizationGrad``, ``LayerNormalizationGrad``,
``GroupNormalizationGrad``): the standard backward of a standardisation,
one pass over the data, reading the statistics the forward pass saved where
it saved any and recomputing them from X otherwise.  LRN has ``LRNGrad``;
LpNormalization a handful of standard nodes.

This module also defines the ONNX schema of the custom training operator
``BatchNormalizationTraining`` (so that shape inference types its outputs).
"""
import atexit

import numpy
from onnx import defs, helper

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

def _batch_norm_training_mode(b, node):
    if b.opset >= 14:
        return bool(b.attr(node, 'training_mode', 0))
    # Before opset 14 asking for the running statistics means training
    # (unless the opset-1/6 is_test says otherwise), as the runtime kernel does.
    return len(node.output) > 1 and not b.attr(node, 'is_test', 0)


@gradient('BatchNormalization')
def batch_normalization_grad(b, node, gys):
    gy = gys[0]
    if gy is None:  # only the running statistics are used
        return [None] * len(node.input)
    x, scale, _, mean, var = node.input
    attrs = dict(domain=CUSTOM_DOMAIN, epsilon=float(b.attr(node, 'epsilon', 1e-5)),
                 spatial=b.attr(node, 'spatial', None))
    if _batch_norm_training_mode(b, node):
        inputs = [x, scale, gy]
        saved = _saved(b, node.output[3:5])
        if saved:
            # Opset < 14: the batch mean and variance are outputs; keep them.
            inputs += [saved[0], '', saved[1]]
        gx, g_scale, g_b = b.node('BatchNormalizationGrad', inputs, 3, training=1, **attrs)
        return [gx, g_scale, g_b, None, None]
    return b.node('BatchNormalizationGrad', [x, scale, gy, mean, '', var], 5, training=0,
                  **attrs)


@gradient('BatchNormalizationTraining', domain=CUSTOM_DOMAIN)
def batch_normalization_training_grad(b, node, gys):
    gy = gys[0]
    if gy is None:
        return [None] * len(node.input)
    x, scale = node.input[:2]
    inputs = [x, scale, gy]
    inputs += _saved(b, node.output[3:5])
    gx, g_scale, g_b = b.node('BatchNormalizationGrad', inputs, 3, domain=CUSTOM_DOMAIN,
                              epsilon=float(b.attr(node, 'epsilon', 1e-5)), training=1)
    return [gx, g_scale, g_b, None, None]


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
                         axis=b.attr(node, 'axis', -1),
                         epsilon=float(b.attr(node, 'epsilon', 1e-5)))
    grads = [gx, g_scale]
    if len(node.input) > 2 and node.input[2]:
        bias = node.input[2]
        grads.append(b.sum_to(gy, b.shape(node.output[0]), b.shape(bias)))
    return grads + [None] * (len(node.input) - len(grads))


def _group_norm_grad(b, node, gy, num_groups):
    x, scale = node.input[:2]
    grads = b.node('GroupNormalizationGrad', [x, scale, gy], 3, domain=CUSTOM_DOMAIN,
                   num_groups=num_groups, epsilon=float(b.attr(node, 'epsilon', 1e-5)))
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
    p = b.attr(node, 'p', 2)
    axes = [b.attr(node, 'axis', -1) % len(b.shape(x))]
    dtype = b.dtype(x)
    norm = b.reduce('ReduceL2' if p == 2 else 'ReduceL1', x, axes, keepdims=True)
    zero = b.constant(numpy.zeros((), dtype), hint='zero')
    one = b.constant(numpy.ones((), dtype), hint='one')
    norm = b.node('Where', [b.node('Equal', [norm, zero]), one, norm])
    direction = y if p == 2 else b.node('Sign', [x])
    along = b.reduce('ReduceSum', b.node('Mul', [gy, y]), axes, keepdims=True)
    return [b.node('Div', [b.node('Sub', [gy, b.node('Mul', [direction, along])]), norm])]


# -- the schema of BatchNormalizationTraining --------------------------------------

def _register_schemas():
    name = 'BatchNormalizationTraining'
    try:
        defs.get_schema(name, 1, CUSTOM_DOMAIN)
        return  # already registered (module reloaded)
    except defs.SchemaError:
        pass
    param = defs.OpSchema.FormalParameter
    schema = defs.OpSchema(
        name, CUSTOM_DOMAIN, 1,
        'Batch normalization with the batch statistics and Chainer\'s update of the '
        'running averages (unbiased variance).',
        inputs=[param('X', 'T'), param('scale', 'U'), param('B', 'U'),
                param('running_mean', 'U'), param('running_var', 'U')],
        outputs=[param('Y', 'T'), param('new_running_mean', 'U'),
                 param('new_running_var', 'U'), param('saved_mean', 'U'),
                 param('saved_inv_std', 'U')],
        type_constraints=[
            ('T', ['tensor(float16)', 'tensor(float)', 'tensor(double)', 'tensor(bfloat16)'],
             'X and Y'),
            ('U', ['tensor(float16)', 'tensor(float)', 'tensor(double)', 'tensor(bfloat16)'],
             'parameters and statistics')],
        attributes=[
            defs.OpSchema.Attribute('epsilon', helper.make_attribute('epsilon', 1e-5),
                                    'added to the variance'),
            defs.OpSchema.Attribute('momentum', helper.make_attribute('momentum', 0.9),
                                    'Chainer\'s decay')])

    def infer(ctx):
        def copy(out, inp):
            if out < ctx.get_num_outputs() and inp < ctx.get_num_inputs():
                ctx.set_output_type(out, ctx.get_input_type(inp))
        copy(0, 0)
        copy(1, 3)
        copy(2, 4)
        copy(3, 3)
        copy(4, 3)

    schema.set_type_and_shape_inference_function(infer)
    defs.register_schema(schema)
    # ONNX's registry would outlive the interpreter and release the Python
    # inference function after it is gone (a crash at exit): unregister first.
    atexit.register(defs.deregister_schema, name, 1, CUSTOM_DOMAIN)


_register_schemas()

"""Gradient rules of the normalization family, and BatchNormalization's
training form (to_training_mode) against Chainer."""
import numpy
import pytest

from chainer_compiler.autodiff import differentiable_ops
from chainer_compiler.frontend import load_onnx
from chainer_compiler.passes.training_mode import to_training_mode
from chainer_compiler.runtime import Executor
from chainer_compiler.training import compile_training

from .gradcheck import check_gradients, single_node_model
from .test_connection import translator_ops

FAMILY = 'normalization'


def test_translator_ops_covered():
    ops = differentiable_ops()
    known = set(ops['rules']) | set(ops['none'])
    missing = [op for op in translator_ops(FAMILY) if op not in known]
    assert not missing


def _rand(*shape, seed=0):
    return numpy.random.RandomState(seed).standard_normal(shape)


def _only_first_output(model):
    """Keep only Y as a graph output (the node keeps all its outputs)."""
    while len(model.graph.output) > 1:
        model.graph.output.pop()
    return model


def _bn_inputs(shape, seed=0):
    c = shape[1]
    rng = numpy.random.RandomState(seed)
    return {'x': rng.standard_normal(shape), 'scale': rng.standard_normal(c),
            'b': rng.standard_normal(c), 'mean': rng.standard_normal(c),
            'var': rng.uniform(0.5, 2.0, c)}


# -- BatchNormalization -----------------------------------------------------------

@pytest.mark.parametrize('shape', [(3, 4), (2, 3, 4), (2, 3, 2, 3)])
@pytest.mark.parametrize('opset', [9, 14, 15])
def test_batch_normalization_inference(shape, opset):
    inputs = _bn_inputs(shape)
    model = single_node_model('BatchNormalization', inputs, opset=opset, epsilon=1e-3)
    check_gradients(model, inputs)


def test_batch_normalization_inference_opset7_not_spatial():
    inputs = _bn_inputs((3, 2, 2))
    for k in ('scale', 'b', 'mean'):
        inputs[k] = _rand(2, 2, seed=len(k))
    inputs['var'] = numpy.random.RandomState(5).uniform(0.5, 2.0, (2, 2))
    model = single_node_model('BatchNormalization', inputs, opset=7, spatial=0)
    check_gradients(model, inputs)


@pytest.mark.parametrize('shape', [(4, 3), (3, 2, 4), (2, 3, 2, 3)])
def test_batch_normalization_training_opset14(shape):
    inputs = _bn_inputs(shape)
    constants = {k: inputs.pop(k) for k in ('mean', 'var')}
    model = _only_first_output(single_node_model(
        'BatchNormalization', inputs, n_outputs=3, opset=15, constants=constants,
        epsilon=1e-3, momentum=0.8, training_mode=1))
    check_gradients(model, inputs)


@pytest.mark.parametrize('opset', [9, 7])
def test_batch_normalization_training_five_outputs(opset):
    inputs = _bn_inputs((2, 3, 2, 3))
    constants = {k: inputs.pop(k) for k in ('mean', 'var')}
    model = _only_first_output(single_node_model(
        'BatchNormalization', inputs, n_outputs=5, opset=opset, constants=constants,
        epsilon=1e-3))
    # ONNX shape inference leaves the saved statistics untyped: the rule
    # recomputes them from X.
    check_gradients(model, inputs)


@pytest.mark.parametrize('opset', [9, 17])
@pytest.mark.parametrize('shape', [(5, 3), (4, 3, 2, 3)])
@pytest.mark.parametrize('decay', [0.9, 0.0])
def test_batch_normalization_training_matches_chainer(shape, decay, opset):
    """An inference BatchNormalization made a training one by
    to_training_mode (five outputs at opset 9, training_mode at 17): Y, the
    running averages and the compiled backward match L.BatchNormalization."""
    import chainer
    import chainer.links as L
    rng = numpy.random.RandomState(7)
    c = shape[1]
    x = rng.standard_normal(shape).astype(numpy.float32) * 2 + 1
    link = L.BatchNormalization(c, decay=decay, eps=2e-5)
    link.gamma.array[:] = rng.uniform(0.5, 1.5, c)
    link.beta.array[:] = rng.standard_normal(c)
    link.avg_mean[:] = rng.standard_normal(c)
    link.avg_var[:] = rng.uniform(0.5, 1.5, c)
    before = link.avg_mean.copy(), link.avg_var.copy()
    gamma, beta = link.gamma.array.copy(), link.beta.array.copy()
    xv = chainer.Variable(x)
    with chainer.using_config('train', True):
        y = link(xv)
    gy = rng.standard_normal(shape).astype(numpy.float32)
    link.cleargrads()
    y.grad = gy
    y.backward()

    model = load_onnx(single_node_model(
        'BatchNormalization', {'x': x, 'scale': gamma, 'b': beta}, opset=opset,
        constants={'mean': before[0], 'var': before[1]}, epsilon=2e-5), check=False)
    updates = to_training_mode(model, {'mean': decay})
    assert updates == [('mean/updated', 'mean'), ('var/updated', 'var')]
    assert [n.domain for n in model.graph.node] == [''] * len(model.graph.node)
    programs = compile_training(model, params=['mean', 'var'], wrt=['x', 'scale', 'b'],
                                state_outputs=[u for u, _ in updates], check=False)
    values = Executor(programs.forward, backend='numpy').run_positional(
        [x, gamma, beta, *before])
    outs = dict(zip([v.name for v in programs.forward.outputs], values))
    numpy.testing.assert_allclose(outs['y0'], y.array, rtol=1e-5, atol=1e-5)
    numpy.testing.assert_allclose(outs['mean/updated'], link.avg_mean, rtol=1e-5, atol=1e-6)
    numpy.testing.assert_allclose(outs['var/updated'], link.avg_var, rtol=1e-5, atol=1e-6)
    grads = dict(zip(programs.grads_for, Executor(programs.backward, backend='numpy')
                     .run_positional([gy] + [outs[r] for r in programs.retained])))
    numpy.testing.assert_allclose(grads['x'], xv.grad, rtol=1e-4, atol=1e-5)
    numpy.testing.assert_allclose(grads['scale'], link.gamma.grad, rtol=1e-4, atol=1e-5)
    numpy.testing.assert_allclose(grads['b'], link.beta.grad, rtol=1e-4, atol=1e-5)


def test_training_mode_leaves_a_training_batch_normalization_as_it_is():
    inputs = _bn_inputs((2, 3, 4))
    constants = {k: inputs.pop(k) for k in ('mean', 'var')}
    model = load_onnx(single_node_model('BatchNormalization', inputs, n_outputs=3, opset=15,
                                        constants=constants, training_mode=1), check=False)
    before = model.SerializeToString()
    assert to_training_mode(model) == []
    assert model.SerializeToString() == before


# -- LayerNormalization, GroupNormalization, InstanceNormalization -------------------

@pytest.mark.parametrize('shape,axis,scale_shape', [
    ((3, 4), -1, (4,)), ((2, 3, 4), -1, (4,)), ((2, 3, 4), 1, (3, 4)),
    ((2, 3, 4), -2, (1, 4)), ((2, 2, 3, 2), 2, (3, 2))])
@pytest.mark.parametrize('bias', [True, False])
@pytest.mark.parametrize('saved', [True, False])
def test_layer_normalization(shape, axis, scale_shape, bias, saved):
    inputs = {'x': _rand(*shape), 'scale': _rand(*scale_shape, seed=1)}
    if bias:
        inputs['b'] = _rand(*scale_shape, seed=2)
    model = single_node_model('LayerNormalization', inputs, n_outputs=3 if saved else 1,
                              axis=axis, epsilon=1e-3)
    check_gradients(_only_first_output(model), inputs)


@pytest.mark.parametrize('shape', [(2, 3, 4), (2, 3, 2, 3), (1, 2, 5)])
def test_instance_normalization(shape):
    c = shape[1]
    inputs = {'x': _rand(*shape), 'scale': _rand(c, seed=1), 'b': _rand(c, seed=2)}
    model = single_node_model('InstanceNormalization', inputs, epsilon=1e-3)
    check_gradients(model, inputs)


@pytest.mark.parametrize('shape,groups', [((2, 4, 3), 2), ((2, 6, 2, 2), 3), ((1, 4, 3), 1),
                                          ((2, 3, 2), 3)])
@pytest.mark.parametrize('opset', [18, 21])
def test_group_normalization(shape, groups, opset):
    c = shape[1] if opset >= 21 else groups
    inputs = {'x': _rand(*shape), 'scale': _rand(c, seed=1), 'b': _rand(c, seed=2)}
    model = single_node_model('GroupNormalization', inputs, opset=opset, num_groups=groups,
                              epsilon=1e-3)
    check_gradients(model, inputs)


# -- LRN and LpNormalization -----------------------------------------------------------

@pytest.mark.parametrize('size', [1, 2, 3, 4, 5])
def test_lrn(size):
    inputs = {'x': _rand(2, 5, 2, 3)}
    model = single_node_model('LRN', inputs, size=size, alpha=0.3, beta=0.75, bias=1.5)
    check_gradients(model, inputs)


def test_lrn_matches_chainer():
    import chainer
    import chainer.functions as F

    from chainer_compiler.runtime.ops.normalization import lrn_grad
    x = _rand(2, 7, 3, 2).astype(numpy.float32)
    gy = _rand(2, 7, 3, 2, seed=1).astype(numpy.float32)
    xv = chainer.Variable(x)
    y = F.local_response_normalization(xv, n=5, k=2, alpha=1e-2, beta=0.75)
    y.grad = gy
    y.backward()
    gx = lrn_grad(numpy, x, gy, size=5, alpha=1e-2 * 5, beta=0.75, bias=2.0)
    numpy.testing.assert_allclose(gx, xv.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('p', [1, 2])
@pytest.mark.parametrize('shape,axis', [((3, 4), -1), ((2, 3, 4), 1), ((2, 3, 4), 0)])
def test_lp_normalization(p, shape, axis):
    inputs = {'x': _rand(*shape)}
    check_gradients(single_node_model('LpNormalization', inputs, p=p, axis=axis), inputs)


@pytest.mark.parametrize('opset', [13, 18])
def test_lp_normalization_opsets(opset):
    inputs = {'x': _rand(2, 3)}
    check_gradients(single_node_model('LpNormalization', inputs, opset=opset, p=2, axis=1),
                    inputs)

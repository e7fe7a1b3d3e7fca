"""Gradient rules of the noise family."""
import numpy
import pytest
from onnx import TensorProto, helper

from chainer_compiler.autodiff.registry import rule_for
from chainer_compiler.runtime import Executor
from chainer_compiler.training import compile_training

from .gradcheck import check_gradients, single_node_model
from .test_math import _translator_ops


def _x(shape=(4, 5)):
    return numpy.random.RandomState(0).randn(*shape)


def _run(model, inputs, gy):
    """(forward values by name, gradients) for output gradient ``gy``."""
    programs = compile_training(model, check=False)
    forward = Executor(programs.forward, backend='numpy')
    outs = forward.run_positional([inputs[v.name] for v in programs.forward.inputs])
    by_name = dict(zip([v.name for v in programs.forward.outputs], outs))
    grads = Executor(programs.backward, backend='numpy').run_positional(
        [gy] + [by_name[r] for r in programs.retained])
    return by_name, grads, programs


@pytest.mark.parametrize('ratio', [0.0, 0.3, 0.5])
@pytest.mark.parametrize('n_outputs', [1, 2])
def test_dropout_training(ratio, n_outputs):
    # A seeded Dropout draws the same mask on every run: differences work.
    x = _x()
    model = single_node_model(
        'Dropout', {'x': x}, n_outputs=n_outputs, opset=13, seed=3.0,
        constants={'ratio': numpy.array(ratio, numpy.float32),
                   'training_mode': numpy.array(True)})
    programs = check_gradients(model, {'x': x})
    assert 'x' not in programs.retained


def test_dropout_gradient_is_masked_and_scaled():
    x = _x((50, 40))
    model = single_node_model('Dropout', {'x': x}, opset=13,
                              constants={'ratio': numpy.array(0.25, numpy.float32),
                                         'training_mode': numpy.array(True)})
    gy = numpy.random.RandomState(1).randn(*x.shape)
    values, (gx,), programs = _run(model, {'x': x}, gy)
    y = values['y0']
    kept = y != 0
    assert 0.6 < kept.mean() < 0.9
    numpy.testing.assert_allclose(gx, numpy.where(kept, gy / 0.75, 0))


def test_dropout_inference_is_identity():
    x = _x()
    # (A constant training_mode=False is only known to DropoutGrad, at run time.)
    for opset, constants in ((13, {'ratio': numpy.array(0.5, numpy.float32)}),
                             (13, {'ratio': numpy.array(0.5, numpy.float32),
                                   'training_mode': numpy.array(False)}),
                             (10, None), (7, None)):
        model = single_node_model('Dropout', {'x': x}, opset=opset, constants=constants)
        check_gradients(model, {'x': x})


def test_dropout_legacy_training():
    # Opset 6 trains unless is_test; no seed there: compare with the mask.
    x = _x((50, 40))
    gy = numpy.random.RandomState(1).randn(*x.shape)
    model = single_node_model('Dropout', {'x': x}, opset=6, ratio=0.2)
    values, (gx,), programs = _run(model, {'x': x}, gy)
    mask, = [values[r] for r in programs.retained]
    assert mask.dtype == x.dtype and 0.7 < mask.mean() < 0.9
    numpy.testing.assert_allclose(gx, gy * mask / 0.8)
    model = single_node_model('Dropout', {'x': x}, opset=6, ratio=0.2, is_test=1)
    check_gradients(model, {'x': x})


def test_random_like_has_no_gradient():
    x = _x((2, 3))
    nodes = [helper.make_node('RandomNormalLike', ['x'], ['n']),
             helper.make_node('Mul', ['x', 'n'], ['y'])]
    graph = helper.make_graph(
        nodes, 'g', [helper.make_tensor_value_info('x', TensorProto.DOUBLE, [2, 3])],
        [helper.make_tensor_value_info('y', TensorProto.DOUBLE, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)])
    gy = numpy.ones((2, 3))
    values, (gx,), _ = _run(model, {'x': x}, gy)
    numpy.testing.assert_array_equal(gx, values['n'])


def test_translator_ops_have_rules():
    ops = _translator_ops('noise')
    assert 'Dropout' in ops
    for op in ops:
        rule_for(helper.make_node(op, [], []))

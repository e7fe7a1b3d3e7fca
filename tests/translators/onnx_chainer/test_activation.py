"""Converters of chainer.functions.activation."""
import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import onnxruntime
import pytest

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime import Executor
from chainer_compiler.translators.onnx_chainer import export_model, supported_functions

from .helpers import FunctionModel, check_export, op_types


def _rand(*shape, seed=0, scale=1.0):
    return (numpy.random.RandomState(seed).uniform(-1, 1, shape) * scale).astype(numpy.float32)


def _needs(*names):
    missing = [n for n in names if n not in supported_functions()]
    return pytest.mark.skipif(bool(missing), reason='no converter yet for %s' % missing)


@pytest.mark.parametrize('fn,op', [
    (F.relu, 'Relu'),
    (F.sigmoid, 'Sigmoid'),
    (F.tanh, 'Tanh'),
    (F.hard_sigmoid, 'HardSigmoid'),
    (F.elu, 'Elu'),
    (lambda x: F.elu(x, alpha=0.3), 'Elu'),
    (F.leaky_relu, 'LeakyRelu'),
    (lambda x: F.leaky_relu(x, slope=-0.5), 'LeakyRelu'),
    (lambda x: F.clipped_relu(x, z=0.5), 'Clip'),
    (F.relu6, 'Clip'),
    (F.softplus, 'Softplus'),
])
def test_elementwise(fn, op):
    models = check_export(fn, _rand(2, 3, 4, scale=4))
    assert op_types(models[0]) == [op]


@pytest.mark.parametrize('beta', [2.0, 0.5, -1.5])
def test_softplus_respects_beta(beta):
    """onnx-chainer exported softplus(x, beta) as plain Softplus."""
    x = numpy.array([[-40.0, -3.0, -0.5, 0.0, 0.25, 2.0, 30.0]], dtype=numpy.float32)
    check_export(lambda v: F.softplus(v, beta=beta), x)


def test_softplus_large_inputs():
    x = numpy.array([-80.0, -20.0, 20.0, 80.0], dtype=numpy.float32)
    check_export(F.softplus, x)


@_needs('MulConstant')
def test_selu():
    check_export(F.selu, _rand(3, 4, scale=3))


@pytest.mark.parametrize('shape,axis', [((2, 6), 1), ((2, 6, 3), 1), ((2, 3, 4, 2), 1),
                                        ((2, 3, 4), -1), ((2, 3, 4), 0)])
def test_crelu(shape, axis):
    check_export(lambda x: F.crelu(x, axis=axis), _rand(*shape))


@pytest.mark.parametrize('x_shape,w_shape', [((2, 3), (3,)), ((2, 3, 4, 5), (3,)),
                                             ((2, 3, 4, 5), (3, 4)), ((2, 3, 4), (3, 4))])
def test_prelu(x_shape, w_shape):
    model = L.PReLU(shape=w_shape, init=0.25)
    model.W.array[...] = _rand(*w_shape, seed=1)
    models = check_export(model, _rand(*x_shape))
    assert models[0].graph.initializer[0].name == '/W'


@pytest.mark.parametrize('x_shape,beta_shape', [((2, 3), (3,)), ((2, 3, 4, 5), (3,)),
                                                ((2, 3, 4), (3, 4))])
def test_swish(x_shape, beta_shape):
    model = L.Swish(beta_shape)
    model.beta.array[...] = _rand(*beta_shape, seed=1, scale=2)
    check_export(model, _rand(*x_shape, scale=3))


@pytest.mark.parametrize('shape,axis', [
    ((3, 5), 1), ((3, 5), 0), ((2, 3, 4), 1), ((2, 3, 4), 2), ((2, 3, 4), -1),
    ((2, 3, 2, 2), 1), ((2, 3, 1, 1), 1), ((2, 3, 4), 0)])
@pytest.mark.parametrize('fn', [F.softmax, F.log_softmax])
def test_softmax_single_axis(fn, shape, axis):
    """Before opset 13 ONNX's softmax spans every axis from ``axis`` on;
    Chainer's only ``axis`` (e.g. the class axis of an (N, C, H, W) map)."""
    check_export(lambda x: fn(x, axis=axis), _rand(*shape, scale=3))


def test_softmax_trailing_axes_use_no_transpose_at_opset_11():
    models = check_export(lambda x: F.softmax(x, axis=1), _rand(2, 3, 4), opsets=(11, 13))
    assert op_types(models[0]) == ['Transpose', 'Softmax', 'Transpose']
    assert op_types(models[1]) == ['Softmax']


def test_rrelu_inference_uses_mean_slope():
    models = check_export(lambda x: F.rrelu(x, l=0.1, u=0.3), _rand(3, 4, scale=2))
    assert op_types(models[0]) == ['LeakyRelu']
    assert models[0].graph.node[0].attribute[0].f == pytest.approx(0.2)


@pytest.mark.parametrize('opset', [17, 26])
def test_rrelu_training_draws_slopes(opset):
    x = _rand(50, 40, scale=2)
    proto = export_model(FunctionModel(lambda v: F.rrelu(v, l=0.1, u=0.3)), x,
                         opset_version=opset, train=True)
    name = proto.graph.input[0].name
    outputs = [Executor(build_program(proto), backend='numpy').run({name: x})[
        proto.graph.output[0].name]]
    if opset <= 21:  # onnxruntime 1.31 has no RandomUniformLike kernel from opset 22
        session = onnxruntime.InferenceSession(proto.SerializeToString(),
                                               providers=['CPUExecutionProvider'])
        outputs += session.run(None, {name: x})
    for y in outputs:
        numpy.testing.assert_array_equal(y[x >= 0], x[x >= 0])
        ratio = y[x < 0] / x[x < 0]
        assert ratio.min() >= 0.1 - 1e-6 and ratio.max() <= 0.3 + 1e-6
        assert ratio.std() > 0.03  # really drawn, not a constant slope


@_needs('Reshape', 'Max')
def test_maxout():
    check_export(lambda x: F.maxout(x, 2), _rand(2, 6))


def test_relu_in_chain():
    class MLP(chainer.Chain):
        def __init__(self):
            super().__init__()
            with self.init_scope():
                self.l1 = L.Linear(4, 5)

        def forward(self, x):
            return F.sigmoid(F.relu(self.l1(x)))
    check_export(MLP(), _rand(2, 4))

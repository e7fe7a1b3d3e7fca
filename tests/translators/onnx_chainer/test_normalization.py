"""Converters of chainer.functions.normalization."""
import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import onnx
import onnxruntime
import pytest
from onnx import numpy_helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime import Executor
from chainer_compiler.translators.onnx_chainer import export_model

from .helpers import OPSETS, FunctionModel, check_export, op_types


def _rand(*shape, seed=0, low=-1, high=1):
    return numpy.random.RandomState(seed).uniform(low, high, shape).astype(numpy.float32)


class _ConvBN(chainer.Chain):
    def __init__(self, bn):
        super().__init__()
        with self.init_scope():
            self.conv = L.Convolution2D(3, 4, 3, pad=1)
            self.bn = bn

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class _Wrap(chainer.Chain):
    def __init__(self, bn):
        super().__init__()
        with self.init_scope():
            self.bn = bn

    def forward(self, x):
        return self.bn(x)


def _randomize_bn(bn, seed=1):
    shape = bn.avg_mean.shape
    bn.avg_mean[...] = _rand(*shape, seed=seed)
    bn.avg_var[...] = _rand(*shape, seed=seed + 1, low=0.5, high=2)
    if getattr(bn, 'gamma', None) is not None:
        bn.gamma.array[...] = _rand(*shape, seed=seed + 2, low=0.5, high=1.5)
    if getattr(bn, 'beta', None) is not None:
        bn.beta.array[...] = _rand(*shape, seed=seed + 3)
    return bn


def _initializer(model, name):
    for init in model.graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    raise KeyError(name)


# -- inference: FixedBatchNormalization -------------------------------------------

def test_batch_normalization_link_inference():
    model = _ConvBN(_randomize_bn(L.BatchNormalization(4)))
    models = check_export(model, _rand(2, 3, 5, 5))
    for proto in models:
        assert op_types(proto) == ['Conv', 'BatchNormalization', 'Relu']
        numpy.testing.assert_array_equal(_initializer(proto, '/bn/avg_mean'),
                                         model.bn.avg_mean)
        numpy.testing.assert_array_equal(_initializer(proto, '/bn/avg_var'),
                                         model.bn.avg_var)


@pytest.mark.parametrize('kwargs', [dict(), dict(eps=1e-3), dict(use_gamma=False),
                                    dict(use_beta=False)])
@pytest.mark.parametrize('x_shape', [(3, 4), (2, 4, 3), (2, 4, 3, 2), (2, 4, 2, 2, 2)])
def test_batch_normalization_inference_shapes(x_shape, kwargs):
    check_export(_Wrap(_randomize_bn(L.BatchNormalization(4, **kwargs))), _rand(*x_shape))


@pytest.mark.parametrize('size,axis,x_shape', [
    (3, (0, 1, 2), (2, 4, 5, 3)),       # channels last
    ((4, 3), None, (2, 4, 3)),          # statistics per (C, D)
    ((4, 3), None, (2, 4, 3, 2)),
    (5, (0, 1), (2, 3, 5)),             # statistics per last axis
])
def test_batch_normalization_other_layouts(size, axis, x_shape):
    bn = _randomize_bn(L.BatchNormalization(size, axis=axis))
    models = check_export(_Wrap(bn), _rand(*x_shape))
    assert 'BatchNormalization' not in op_types(models[0])


def test_fixed_batch_normalization_function():
    x, gamma, beta = _rand(2, 3, 4), _rand(3, seed=1), _rand(3, seed=2)
    mean, var = _rand(3, seed=3), _rand(3, seed=4, low=0.5, high=2)
    check_export(lambda v: F.fixed_batch_normalization(v, gamma, beta, mean, var, eps=1e-4), x)


# -- batch statistics: BatchNormalization ---------------------------------------------

@pytest.mark.parametrize('x_shape,axis,param_shape', [
    ((4, 3), None, (3,)), ((4, 3, 5), None, (3,)), ((2, 3, 4, 4), None, (3,)),
    ((2, 4, 3), None, (4, 3)), ((2, 3, 4, 5), (0, 1, 2), (5,)),
])
@pytest.mark.parametrize('train', [False, True])
def test_batch_normalization_function_uses_batch_statistics(x_shape, axis, param_shape, train):
    """F.batch_normalization without running averages (inference or not)."""
    gamma, beta = _rand(*param_shape, seed=1), _rand(*param_shape, seed=2)
    check_export(lambda v: F.batch_normalization(v, gamma, beta, eps=1e-4, axis=axis),
                 _rand(*x_shape, low=-2, high=3), train=train, rtol=1e-4, atol=1e-5)


# -- training mode: running averages as extra outputs ---------------------------------

def _run(proto, x):
    onnx.checker.check_model(proto)
    name = proto.graph.input[0].name
    session = onnxruntime.InferenceSession(proto.SerializeToString(),
                                           providers=['CPUExecutionProvider'])
    ort = dict(zip([o.name for o in proto.graph.output], session.run(None, {name: x})))
    vm = Executor(build_program(proto), backend='numpy').run({name: x})
    return {'onnxruntime': ort, 'VM': vm}


def _assert_training_outputs(proto, x, expected_y, bn):
    """On onnxruntime and the VM, ``proto`` (a training export of link
    ``/bn``) gives Y and the running averages Chainer's link ``bn`` holds."""
    assert [o.name for o in proto.graph.output] == [
        'output_0', '/bn/avg_mean_updated', '/bn/avg_var_updated']
    for runtime, out in _run(proto, x).items():
        numpy.testing.assert_allclose(out['output_0'], expected_y, rtol=1e-4, atol=1e-5,
                                      err_msg=runtime)
        numpy.testing.assert_allclose(out['/bn/avg_mean_updated'], bn.avg_mean,
                                      rtol=1e-5, atol=1e-6, err_msg=runtime)
        numpy.testing.assert_allclose(out['/bn/avg_var_updated'], bn.avg_var,
                                      rtol=1e-5, atol=1e-6, err_msg=runtime)


@pytest.mark.parametrize('opset', sorted(set(OPSETS) | {13, 14}))
@pytest.mark.parametrize('case', [
    dict(size=4, x_shape=(5, 4, 3, 3)),
    dict(size=4, x_shape=(6, 4), decay=0.7),
    dict(size=4, x_shape=(3, 4, 5), eps=1e-3),
    dict(size=3, axis=(0, 1, 2), x_shape=(2, 4, 5, 3)),   # channels last: reductions
    dict(size=(4, 3), x_shape=(5, 4, 3)),
])
def test_batch_normalization_training_updates_running_averages(case, opset):
    """Y and the updated avg_mean/avg_var match Chainer's exactly in meaning:
    decay as momentum, and the unbiased batch variance in avg_var."""
    case = dict(case)
    x = _rand(*case.pop('x_shape'), low=-2, high=3)
    bn = _randomize_bn(L.BatchNormalization(case.pop('size'), **case))
    model = _Wrap(bn)
    before_mean, before_var = bn.avg_mean.copy(), bn.avg_var.copy()
    with chainer.using_config('enable_backprop', False):
        expected_y = F.batch_normalization(x, bn.gamma, bn.beta, eps=bn.eps,
                                           axis=bn.axis).array

    proto = export_model(model, x, opset_version=opset, train=True)
    # The trace updated the link like a training step would; the file holds
    # the values from before it, exactly.
    assert not numpy.allclose(bn.avg_mean, before_mean)
    numpy.testing.assert_array_equal(_initializer(proto, '/bn/avg_mean'), before_mean)
    numpy.testing.assert_array_equal(_initializer(proto, '/bn/avg_var'), before_var)
    _assert_training_outputs(proto, x, expected_y, bn)


def test_batch_normalization_training_uses_onnx_op_in_channel_layout():
    bn = _randomize_bn(L.BatchNormalization(4))
    x = _rand(3, 4, 2, 2)
    proto13 = export_model(_Wrap(bn), x, opset_version=13, train=True)
    proto14 = export_model(_Wrap(bn), x, opset_version=14, train=True)
    assert op_types(proto13)[0] == op_types(proto14)[0] == 'BatchNormalization'
    assert len(proto13.graph.node[0].output) == 5
    assert [a.i for a in proto14.graph.node[0].attribute if a.name == 'training_mode'] == [1]


def test_batch_normalization_training_root_link_and_bare_function():
    bn = _randomize_bn(L.BatchNormalization(3))
    proto = export_model(bn, _rand(4, 3), train=True)
    assert [o.name for o in proto.graph.output][1:] == ['/avg_mean_updated', '/avg_var_updated']
    mean, var = _rand(3, seed=5), _rand(3, seed=6, low=1, high=2)
    fn = lambda v: F.batch_normalization(v, bn.gamma.array, bn.beta.array,  # noqa: E731
                                         running_mean=mean, running_var=var)
    x = _rand(4, 3, seed=7)
    proto = export_model(FunctionModel(fn), x, train=True)
    outputs = _run(proto, x)
    for out in outputs.values():
        updated = [out[o.name] for o in proto.graph.output[1:]]
        numpy.testing.assert_allclose(updated[0], mean, rtol=1e-5, atol=1e-6)
        numpy.testing.assert_allclose(updated[1], var, rtol=1e-5, atol=1e-6)


class _Twice(_Wrap):
    def forward(self, x):
        return self.bn(self.bn(x))


@pytest.mark.parametrize('opset', [13, 17])
@pytest.mark.parametrize('size,axis,x_shape', [(4, None, (3, 4)), (4, None, (2, 4, 3, 3)),
                                               (3, (0, 1), (2, 4, 3))])
def test_batch_normalization_link_called_twice_in_training(opset, size, axis, x_shape):
    """Both updates are exported, the second reading the first's result:
    Y and the running averages match Chainer's after its two updates."""
    x = _rand(*x_shape, low=-2, high=3)
    bn = _randomize_bn(L.BatchNormalization(size, axis=axis))
    twin = _Twice(bn.copy(mode='copy'))
    before_mean, before_var = bn.avg_mean.copy(), bn.avg_var.copy()
    with chainer.using_config('train', True):
        expected_y = twin(x).array
    proto = export_model(_Twice(bn), x, opset_version=opset, train=True)
    numpy.testing.assert_array_equal(_initializer(proto, '/bn/avg_mean'), before_mean)
    numpy.testing.assert_array_equal(_initializer(proto, '/bn/avg_var'), before_var)
    _assert_training_outputs(proto, x, expected_y, twin.bn)


def test_batch_normalization_link_called_twice_in_inference():
    check_export(_Twice(_randomize_bn(L.BatchNormalization(4))), _rand(3, 4))


# -- per-sample normalizations ---------------------------------------------------

@pytest.mark.parametrize('x_shape,groups', [((2, 6, 3, 4), 3), ((2, 6, 5), 2), ((3, 6), 3),
                                            ((2, 4, 2, 2, 3), 4), ((2, 4, 3, 3), 1)])
def test_group_normalization(x_shape, groups):
    link = L.GroupNormalization(groups, x_shape[1])
    link.gamma.array[...] = _rand(x_shape[1], seed=1)
    link.beta.array[...] = _rand(x_shape[1], seed=2)
    check_export(_Wrap(link), _rand(*x_shape, low=-2, high=3),
                 opsets=sorted(set(OPSETS) | {18, 21}), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('eps', [1e-5, 0.1])
def test_layer_normalization(eps):
    link = L.LayerNormalization(5, eps=eps)
    link.gamma.array[...] = _rand(5, seed=1)
    link.beta.array[...] = _rand(5, seed=2)
    models = check_export(_Wrap(link), _rand(3, 5, low=-2, high=3),
                          opsets=(11, 16, 17, 26), rtol=1e-4, atol=1e-5)
    assert 'LayerNormalization' not in op_types(models[1])
    assert op_types(models[2]) == ['LayerNormalization']


@pytest.mark.parametrize('x_shape,axis', [((3, 4), 1), ((2, 3, 4), 1), ((2, 3, 4), 2),
                                          ((2, 3, 4), (1, 2)), ((2, 3, 4, 2), (1, 3)),
                                          ((2, 3, 4), -1)])
def test_normalize(x_shape, axis):
    check_export(lambda v: F.normalize(v, axis=axis), _rand(*x_shape))


def test_normalize_adds_eps_to_the_norm():
    """onnx-chainer's LpNormalization ignored (and refused custom) eps."""
    x = _rand(3, 4) * 1e-2
    check_export(lambda v: F.normalize(v, eps=0.05), x)


def test_normalize_zero_vector_gives_zero_not_nan():
    x = numpy.zeros((2, 3), dtype=numpy.float32)
    x[1] = [3, 0, 4]
    check_export(F.normalize, x)


@pytest.mark.parametrize('x_shape', [(2, 7, 3, 3), (2, 7), (2, 7, 4), (1, 7, 2, 2, 2)])
@pytest.mark.parametrize('kwargs', [dict(), dict(n=3, k=1, alpha=0.5, beta=0.5)])
def test_local_response_normalization(x_shape, kwargs):
    check_export(lambda v: F.local_response_normalization(v, **kwargs),
                 _rand(*x_shape, low=-3, high=3))


@pytest.mark.parametrize('n', [2, 4, 6])
def test_local_response_normalization_even_n_window(n):
    """Chainer sums over the n + 1 channels c - n/2 .. c + n/2 for an even n;
    ONNX's size-n window is narrower and lopsided (onnx-chainer used it)."""
    check_export(lambda v: F.local_response_normalization(v, n=n, k=1, alpha=0.3),
                 _rand(2, 8, 2, 3, low=-3, high=3))


@pytest.mark.parametrize('x_shape,groups', [((5, 8), 2), ((3, 6, 2, 2), 3), ((2, 4, 3), 1)])
def test_decorrelated_batch_normalization_inference(x_shape, groups):
    link = L.DecorrelatedBatchNormalization(x_shape[1], groups=groups)
    C = x_shape[1] // groups
    link.avg_mean[...] = _rand(groups, C, seed=1)
    link.avg_projection[...] = _rand(groups, C, C, seed=2)
    models = check_export(_Wrap(link), _rand(*x_shape))
    names = {i.name for i in models[0].graph.initializer}
    assert {'/bn/avg_mean', '/bn/avg_projection'} <= names

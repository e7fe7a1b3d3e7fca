"""The C kernels of training programs, one op at a time against the NumPy
VM (and onnxruntime for the standard op): SoftmaxCrossEntropyLoss and
its gradient (ccn_loss.c), ReluGrad (ccn_activation.c) and the in-place
optimizer updates (ccn_training.c), and the emitted C API of a program
that updates its inputs."""
import numpy
import pytest
from onnx import helper

from chainer_compiler.frontend import build_program
from chainer_compiler.runtime.errors import RuntimeVMError
from chainer_compiler.runtime.executor import Executor
from chainer_compiler.runtime.native.emit_c import emit_c

from .helpers import ATOL, RTOL, Built, check_native, make_folder, make_model

F32, F64 = numpy.float32, numpy.float64
CUSTOM = 'org.chainer_compiler'


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv('CHAINER_COMPILER_CACHE', str(tmp_path / 'cache'))


def _custom_model(nodes, inputs, outputs):
    """make_model with this project's domain imported too."""
    model = make_model(nodes, inputs, outputs)
    model.opset_import.append(helper.make_opsetid(CUSTOM, 1))
    return model


def _labels(shape, classes, dtype, ignored=None, seed=0):
    rng = numpy.random.RandomState(seed)
    t = rng.randint(0, classes, shape).astype(dtype)
    if ignored is not None:
        t.reshape(-1)[::3] = ignored
    return t


#: (scores shape, label dtype, reduction, ignore_index, with weights)
LOSS_CASES = [
    ((6, 5), numpy.int32, 'mean', None, False),
    ((6, 5), numpy.int64, 'sum', -1, False),
    ((6, 5), numpy.int32, 'none', 2, True),
    ((4, 3, 2, 3), numpy.int64, 'mean', -100, True),
    ((4, 3, 5), numpy.int32, 'none', None, False),
]


@pytest.mark.parametrize('shape,label_dtype,reduction,ignore,weighted', LOSS_CASES)
def test_softmax_cross_entropy_loss(shape, label_dtype, reduction, ignore, weighted):
    n, c, rest = shape[0], shape[1], list(shape[2:])
    attrs = {'reduction': reduction}
    if ignore is not None:
        attrs['ignore_index'] = ignore
    inputs = [('x', F32, list(shape)), ('t', label_dtype, [n] + rest)]
    names = ['x', 't']
    if weighted:
        inputs.append(('w', F32, [c]))
        names.append('w')
    loss_shape = [n] + rest if reduction == 'none' else []
    model = make_model(
        [helper.make_node('SoftmaxCrossEntropyLoss', names, ['loss', 'log_prob'], **attrs)],
        inputs, [('loss', F32, loss_shape), ('log_prob', F32, list(shape))])
    x = numpy.random.RandomState(1).uniform(-3, 3, shape).astype(F32)
    values = [x, _labels([n] + rest, c, label_dtype, ignore)]
    if weighted:
        values.append(numpy.random.RandomState(2).uniform(0.5, 2, c).astype(F32))
    check_native(model, values)


@pytest.mark.parametrize('shape,label_dtype,reduction,ignore,weighted', LOSS_CASES)
def test_softmax_cross_entropy_loss_grad(shape, label_dtype, reduction, ignore, weighted):
    n, c, rest = shape[0], shape[1], list(shape[2:])
    attrs = {'reduction': reduction}
    if ignore is not None:
        attrs['ignore_index'] = ignore
    gy_shape = [n] + rest if reduction == 'none' else []
    inputs = [('gy', F32, gy_shape), ('log_prob', F32, list(shape)),
              ('t', label_dtype, [n] + rest)]
    if weighted:
        inputs.append(('w', F32, [c]))
    model = _custom_model(
        [helper.make_node('SoftmaxCrossEntropyLossGrad', [i[0] for i in inputs], ['gx'],
                          domain=CUSTOM, **attrs)],
        inputs, [('gx', F32, list(shape))])
    rng = numpy.random.RandomState(3)
    x = rng.uniform(-3, 3, shape).astype(F32)
    log_prob = x - numpy.log(numpy.exp(x).sum(axis=1, keepdims=True))
    values = [rng.uniform(0.5, 2, gy_shape).astype(F32), log_prob.astype(F32),
              _labels([n] + rest, c, label_dtype, ignore)]
    if weighted:
        values.append(rng.uniform(0.5, 2, c).astype(F32))
    check_native(model, values, onnxruntime_check=False)


def test_a_label_out_of_range_makes_the_run_fail():
    model = make_model([helper.make_node('SoftmaxCrossEntropyLoss', ['x', 't'], ['loss'],
                                         ignore_index=-1)],
                       [('x', F32, [3, 4]), ('t', numpy.int64, [3])], [('loss', F32, [])])
    run = Executor(build_program(model), backend='native')
    x = numpy.zeros((3, 4), F32)
    assert run.run_positional([x, numpy.array([0, -1, 3])])[0] == pytest.approx(numpy.log(4))
    for bad in (4, -2):
        with pytest.raises(RuntimeVMError, match='a class label out of range'):
            run.run_positional([x, numpy.array([0, bad, 3])])


def test_relu_grad():
    model = _custom_model([helper.make_node('ReluGrad', ['y', 'gy'], ['gx'], domain=CUSTOM)],
                          [('y', F32, [5, 7]), ('gy', F32, [5, 7])], [('gx', F32, [5, 7])])
    rng = numpy.random.RandomState(0)
    y = numpy.maximum(rng.uniform(-1, 1, (5, 7)), 0).astype(F32)
    got = check_native(model, [y, rng.uniform(-1, 1, (5, 7)).astype(F32)],
                       onnxruntime_check=False)
    assert (got[0][y == 0] == 0).all() and (got[0][y > 0] != 0).all()


#: op -> (state slots, hyperparameter names and values)
UPDATES = {
    'SGDUpdate': (0, {'lr': 0.1}),
    'MomentumSGDUpdate': (1, {'lr': 0.1, 'momentum': 0.9}),
    'AdamUpdate': (2, {'alpha_t': 0.003, 'beta1': 0.9, 'beta2': 0.999, 'eps': 1e-8,
                       'eta': 0.5, 'weight_decay_rate': 0.1}),
}


def _update_model(op, shape=(4, 6)):
    n_states, hyper = UPDATES[op]
    arrays = ['param', 'grad'] + ['state%d' % k for k in range(n_states)]
    return _custom_model(
        [helper.make_node(op, arrays + list(hyper), ['updated'], domain=CUSTOM)],
        [(a, F32, list(shape)) for a in arrays] + [(h, F64, []) for h in hyper],
        [('updated', F32, list(shape))])


def _update_inputs(op, shape=(4, 6)):
    n_states, hyper = UPDATES[op]
    rng = numpy.random.RandomState(0)
    arrays = [rng.uniform(-1, 1, shape).astype(F32) for _ in range(2)]
    arrays += [rng.uniform(0, 0.1, shape).astype(F32) for _ in range(n_states)]
    return arrays + [numpy.array(v, F64) for v in hyper.values()]


@pytest.mark.parametrize('op', sorted(UPDATES))
def test_optimizer_update_in_place(op):
    program = build_program(_update_model(op))
    native, numpy_vm = _update_inputs(op), _update_inputs(op)
    before = [a.copy() for a in native]
    n_arrays = 2 + UPDATES[op][0]
    for _ in range(2):  # the second step reads the states the first one wrote
        got = Executor(program, backend='native').run_positional(native)
        want = Executor(program, backend='numpy').run_positional(numpy_vm)
        assert got[0] is native[0]  # the parameter itself, no copy
    for k in range(n_arrays):
        numpy.testing.assert_allclose(native[k], numpy_vm[k], rtol=RTOL, atol=ATOL,
                                      err_msg='input %d' % k)
    numpy.testing.assert_array_equal(got[0], want[0])
    numpy.testing.assert_array_equal(native[1], before[1])  # the gradient is read only
    changed = [0] + list(range(2, n_arrays))
    assert all(not numpy.array_equal(native[k], before[k]) for k in changed)


def test_a_read_only_parameter_is_refused():
    program = build_program(_update_model('SGDUpdate'))
    values = _update_inputs('SGDUpdate')
    values[0].flags.writeable = False
    with pytest.raises(Exception, match="input 'param' is updated in place"):
        Executor(program, backend='native').run_positional(values)


def test_emitted_c_api_of_an_update(tmp_path):
    """The header declares the updated inputs writable, the run copies them
    to their outputs only when the caller passes other memory, and the
    command line executable writes the updated arrays."""
    program = build_program(_update_model('AdamUpdate'))
    result = emit_c(program, tmp_path / 'c', 'step')
    assert result.updated_inputs == [0, 2, 3] and result.in_place_outputs == {0: 0}
    header = (tmp_path / 'c' / 'step.h').read_text()
    assert 'float *in_0, const float *in_1, float *in_2, float *in_3, const double *in_4' \
        in header
    source = (tmp_path / 'c' / 'step.c').read_text()
    assert 'if ((const void *)out_0 != (const void *)in_0)' in source
    output = make_folder(tmp_path / 'c')
    assert 'warning' not in output
    built = Built(program, tmp_path / 'c', 'step', result, output)
    built.check_against_executor(_update_inputs('AdamUpdate'), tmp_path)


#: (x shape, weight kernel, M, attributes)
CONV_CASES = [
    ((2, 3, 7, 6), (3, 3), 4, {}),
    ((2, 4, 9, 8), (3, 2), 6, {'strides': [2, 1], 'pads': [1, 0, 1, 1], 'group': 2}),
    ((1, 2, 9, 9), (3, 3), 3, {'dilations': [2, 2], 'pads': [2, 1, 2, 1]}),
]


def _window_out(spatial, kernel, attrs, ceil_mode=0):
    """The output size of a 2-D window (ONNX's formula)."""
    strides, dilations = attrs.get('strides', [1, 1]), attrs.get('dilations', [1, 1])
    pads = attrs.get('pads', [0, 0, 0, 0])
    out = []
    for k, size in enumerate(spatial):
        span = size + pads[k] + pads[k + 2] - dilations[k] * (kernel[k] - 1) - 1
        out.append(-(-span // strides[k]) + 1 if ceil_mode else span // strides[k] + 1)
    return out


@pytest.mark.parametrize('shape,kernel,m,attrs', CONV_CASES)
def test_conv_grad_filter(shape, kernel, m, attrs):
    n, c = shape[:2]
    out = _window_out(shape[2:], kernel, attrs)
    group = attrs.get('group', 1)
    model = _custom_model(
        [helper.make_node('ConvGradFilter', ['x', 'gy'], ['gw'], domain=CUSTOM,
                          kernel_shape=list(kernel), **attrs)],
        [('x', F32, list(shape)), ('gy', F32, [n, m] + out)],
        [('gw', F32, [m, c // group] + list(kernel))])
    rng = numpy.random.RandomState(0)
    check_native(model, [rng.uniform(-1, 1, shape).astype(F32),
                         rng.uniform(-1, 1, [n, m] + out).astype(F32)], onnxruntime_check=False)


#: (x shape, MaxPool attributes)
POOL_CASES = [
    ((2, 3, 6, 6), {'kernel_shape': [2, 2], 'strides': [2, 2]}),
    ((1, 2, 7, 5), {'kernel_shape': [3, 3], 'strides': [2, 2], 'pads': [1, 1, 1, 1]}),
    ((1, 2, 7, 7), {'kernel_shape': [2, 2], 'strides': [2, 2], 'ceil_mode': 1}),
    ((1, 1, 8, 8), {'kernel_shape': [2, 3], 'dilations': [2, 1]}),
]


@pytest.mark.parametrize('shape,attrs', POOL_CASES)
def test_max_pool_grad(shape, attrs):
    """Through a MaxPool and its gradient in one graph, so that y is the
    forward's own maximum; x is quantized so that windows hold ties (the
    first tap takes the gradient)."""
    x = (numpy.random.RandomState(0).randint(0, 4, shape) / 4).astype(F32)
    y_shape = list(shape[:2]) + _window_out(shape[2:], attrs['kernel_shape'], attrs,
                                            attrs.get('ceil_mode', 0))
    model = _custom_model(
        [helper.make_node('MaxPool', ['x'], ['y'], **attrs),
         helper.make_node('MaxPoolGrad', ['x', 'y', 'gy'], ['gx'], domain=CUSTOM, **attrs)],
        [('x', F32, list(shape)), ('gy', F32, y_shape)],
        [('gx', F32, list(shape)), ('y', F32, y_shape)])
    gy = numpy.random.RandomState(1).uniform(-1, 1, y_shape).astype(F32)
    gx = check_native(model, [x, gy], onnxruntime_check=False)[0]
    numpy.testing.assert_allclose(gx.sum(), gy.sum(), rtol=1e-5)  # each window's gy lands once


def _bn_inputs(shape, seed=0):
    rng = numpy.random.RandomState(seed)
    c = shape[1]
    return [rng.uniform(-2, 2, shape).astype(F32), rng.uniform(0.5, 1.5, c).astype(F32),
            rng.uniform(-1, 1, c).astype(F32), rng.uniform(-1, 1, c).astype(F32),
            rng.uniform(0.5, 1.5, c).astype(F32)]


@pytest.mark.parametrize('opset,shape', [(15, (4, 3, 5, 2)), (9, (6, 2))])
def test_batch_normalization_training(opset, shape):
    """Batch statistics and running averages: from opset 14 Y and the
    running mean and variance; before, the batch's mean and variance too."""
    c = shape[1]
    attrs = {'epsilon': 1e-3, 'momentum': 0.8}
    outputs = [('y', F32, list(shape)), ('running_mean', F32, [c]), ('running_var', F32, [c])]
    if opset >= 14:
        attrs['training_mode'] = 1
    else:
        outputs += [('batch_mean', F32, [c]), ('batch_var', F32, [c])]
    model = make_model(
        [helper.make_node('BatchNormalization', ['x', 's', 'b', 'm', 'v'],
                          [o[0] for o in outputs], **attrs)],
        [('x', F32, list(shape))] + [(n, F32, [c]) for n in 'sbmv'], outputs, opset=opset)
    check_native(model, _bn_inputs(shape), onnxruntime_check=False)


@pytest.mark.parametrize('training,given,n_outputs', [(1, False, 3), (0, True, 5), (1, True, 3)])
def test_batch_normalization_grad(training, given, n_outputs):
    shape = (3, 4, 2, 3)
    x, scale, _, mean, var = _bn_inputs(shape)
    inputs = [('x', F32, list(shape)), ('scale', F32, [4]), ('gy', F32, list(shape))]
    values = [x, scale, numpy.random.RandomState(5).uniform(-1, 1, shape).astype(F32)]
    if given:
        inputs += [('mean', F32, [4]), ('var', F32, [4])]
        values += [mean, var]
    outputs = [('gx', F32, list(shape))] + [(n, F32, [4]) for n in
                                            ('gscale', 'gb', 'gmean', 'gvar')[:n_outputs - 1]]
    model = _custom_model(
        [helper.make_node('BatchNormalizationGrad', [i[0] for i in inputs],
                          [o[0] for o in outputs], domain=CUSTOM, epsilon=1e-3,
                          training=training)], inputs, outputs)
    check_native(model, values, onnxruntime_check=False)


#: (input shape, AveragePool attributes)
AVERAGE_POOL_CASES = [
    ((2, 3, 6, 6), {'kernel_shape': [2, 2], 'strides': [2, 2]}),
    ((1, 2, 7, 5), {'kernel_shape': [3, 3], 'strides': [2, 2], 'pads': [1, 1, 1, 1]}),
    ((1, 2, 7, 5), {'kernel_shape': [3, 3], 'strides': [2, 2], 'pads': [1, 1, 1, 1],
                    'count_include_pad': 1}),
    ((1, 2, 7, 7), {'kernel_shape': [2, 2], 'strides': [2, 2], 'ceil_mode': 1}),
]


@pytest.mark.parametrize('shape,attrs', AVERAGE_POOL_CASES)
def test_average_pool_grad(shape, attrs):
    y_shape = list(shape[:2]) + _window_out(shape[2:], attrs['kernel_shape'], attrs,
                                            attrs.get('ceil_mode', 0))
    model = _custom_model(
        [helper.make_node('AveragePoolGrad', ['gy'], ['gx'], domain=CUSTOM,
                          input_shape=list(shape), **attrs)],
        [('gy', F32, y_shape)], [('gx', F32, list(shape))])
    gy = numpy.random.RandomState(1).uniform(-1, 1, y_shape).astype(F32)
    check_native(model, [gy], onnxruntime_check=False)

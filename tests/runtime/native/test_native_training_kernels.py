"""The C kernels of training programs, one op at a time against the NumPy
VM (and onnxruntime for the standard op): SoftmaxCrossEntropyLoss and
its gradient (ccn_loss.c), ReluGrad (ccn_activation.c) and the in-place
optimizer updates (ccn_training.c), and the emitted C API of a program
that updates its inputs."""
import dataclasses
import functools
import platform

import numpy
import pytest
from onnx import helper, numpy_helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.errors import RuntimeVMError
from chainer_compiler.runtime.executor import Executor
from chainer_compiler.runtime.native.emit_c import _lowered, emit_c
from chainer_compiler.runtime.program import NO_REGISTER

from .helpers import ATOL, RTOL, Built, check_native, make_folder, make_model

F32, F64 = numpy.float32, numpy.float64
CUSTOM = 'org.chainer_compiler'


#: make_model with this project's domain imported too.
_custom_model = functools.partial(make_model, custom=True)


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


def _loss_attrs(reduction, ignore):
    """The attributes of a SoftmaxCrossEntropyLoss(Grad) node (ignore None: no
    ignore_index)."""
    return {'reduction': reduction} if ignore is None else {'reduction': reduction,
                                                            'ignore_index': ignore}


@pytest.mark.parametrize('shape,label_dtype,reduction,ignore,weighted', LOSS_CASES)
@pytest.mark.native_build
def test_softmax_cross_entropy_loss(shape, label_dtype, reduction, ignore, weighted):
    n, c, rest = shape[0], shape[1], list(shape[2:])
    attrs = _loss_attrs(reduction, ignore)
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


@pytest.mark.native_build
def test_softmax_cross_entropy_log_prob_alone():
    # A recompute replay (chen's in a training step) keeps only the
    # log-probabilities: its loss is no register, which the C took as
    # register -1 (and did not build).
    model = make_model(
        [helper.make_node('SoftmaxCrossEntropyLoss', ['x', 't'], ['loss', 'log_prob'])],
        [('x', F32, [6, 5]), ('t', numpy.int32, [6])], [('log_prob', F32, [6, 5])])
    program = build_program(model)
    (index, loss), = [(i, inst) for i, inst in enumerate(program.instructions)
                      if inst.op == 'SoftmaxCrossEntropyLoss']
    program.instructions[index] = dataclasses.replace(
        loss, outputs=(NO_REGISTER,) + loss.outputs[1:],
        frees=tuple(r for r in loss.frees if r != loss.outputs[0]))
    values = [numpy.random.RandomState(1).uniform(-3, 3, (6, 5)).astype(F32),
              _labels([6], 5, numpy.int32)]
    got, = Executor(program, backend='native').run_positional(list(values))
    want, = Executor(program, backend='numpy').run_positional(list(values))
    numpy.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize('shape,label_dtype,reduction,ignore,weighted', LOSS_CASES)
@pytest.mark.native_build
def test_softmax_cross_entropy_loss_grad(shape, label_dtype, reduction, ignore, weighted):
    n, c, rest = shape[0], shape[1], list(shape[2:])
    attrs = _loss_attrs(reduction, ignore)
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


@pytest.mark.native_build
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


@pytest.mark.native_build
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
@pytest.mark.native_build
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


@pytest.mark.native_build
def test_adam_flushes_subnormal_moments_and_keeps_the_parameters_bits():
    # A dead unit's moments decay through the subnormal floats, each touch of
    # one a microcode assist; the native update flushes them (x86), which
    # moves no parameter.
    program = build_program(_update_model('AdamUpdate'))
    native, numpy_vm = _update_inputs('AdamUpdate'), _update_inputs('AdamUpdate')
    for values in (native, numpy_vm):  # row 0: a dead unit (no gradient)
        values[1][0] = 0
        values[2][0, :3] = numpy.float32(1.25e-38)  # m: normal, subnormal after the update
        values[2][0, 3:] = numpy.float32(1e-40)  # m: subnormal
        values[3][0] = numpy.float32(1e-41)  # v: subnormal
    Executor(program, backend='native').run_positional(native)
    Executor(program, backend='numpy').run_positional(numpy_vm)
    numpy.testing.assert_array_equal(native[0], numpy_vm[0])  # the parameters, to the bit
    tiny = numpy.finfo(numpy.float32).tiny
    subnormal = (numpy_vm[2] != 0) & (abs(numpy_vm[2]) < tiny)
    assert subnormal[0].all() and not subnormal[1:].any()
    for k in (2, 3):
        numpy.testing.assert_array_equal(native[k][1:], numpy_vm[k][1:])
    if platform.machine().lower() in ('x86_64', 'amd64'):
        # A decrement that would be subnormal is 0: the moment stays where
        # it was; a subnormal moment is read as 0.
        numpy.testing.assert_array_equal(native[2][0], numpy.float32([1.25e-38] * 3 + [0] * 3))
        numpy.testing.assert_array_equal(native[3][0], 0)


@pytest.mark.native_build
def test_a_hyperparameter_array_is_read_at_every_call():
    # The training step passes the same 0-d arrays at every call and writes
    # new values into them: the library reads them in place, not a copy.
    program = build_program(_update_model('SGDUpdate'))
    param, grad, lr = _update_inputs('SGDUpdate')
    executor = Executor(program, backend='native')
    for rate in (0.1, 0.0, 0.5):
        lr[()] = rate
        want = param - numpy.float32(rate) * grad
        executor.run_positional([param, grad, lr])
        numpy.testing.assert_array_equal(param, want)
    executor.run_positional([param, grad, numpy.float64(0.25)])  # a scalar is copied in
    numpy.testing.assert_array_equal(param, want - numpy.float32(0.25) * grad)


@pytest.mark.native_build
def test_a_read_only_parameter_is_refused():
    program = build_program(_update_model('SGDUpdate'))
    values = _update_inputs('SGDUpdate')
    values[0].flags.writeable = False
    with pytest.raises(Exception, match="input 'param' is updated in place"):
        Executor(program, backend='native').run_positional(values)


@pytest.mark.native_build
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
    # 512 output pixels per image: the five images share products two by
    # two (GRAD_COLUMNS), the last one alone; few output channels make the
    # kernel multiply gy by the columns transposed, many (64) the columns
    # by gy transposed.
    ((5, 4, 16, 32), (3, 3), 4, {'pads': [1, 1, 1, 1], 'group': 2}),
    ((5, 2, 16, 32), (3, 3), 64, {'pads': [1, 1, 1, 1]}),
    # Full tiles either way (96 output channels, K = 288) and gw larger
    # than the columns (96 > 3 x 25 pixels): gy times the three images'
    # columns transposed, as a ResNet's last stage goes.
    ((3, 32, 5, 5), (3, 3), 96, {'pads': [1, 1, 1, 1]}),
    # Columns past CCN_GRAD_BLOCK_FLOATS (65536), built and multiplied by
    # blocks of channels, the last one short: 8 images of 128 pixels share
    # a product, blocks of 7 channels (then 2 images, 28), the columns by gy
    # transposed; and gy by the columns transposed in blocks of 227 and 29.
    # (Outputs under 16 wide: not Winograd's.)
    ((10, 40, 16, 8), (3, 3), 64, {'pads': [1, 1, 1, 1]}),
    ((2, 256, 4, 4), (3, 3), 320, {'pads': [1, 1, 1, 1]}),
]


def _grad_filter_model(cases):
    """One ConvGradFilter per (x shape, kernel, M, attributes) of
    ``cases``, x_i and gy_i into gw_i; and the output sizes of each."""
    nodes, inputs, outputs, outs = [], [], [], []
    for i, (shape, kernel, m, attrs) in enumerate(cases):
        out = _window_out(shape[2:], kernel, attrs)
        nodes.append(helper.make_node('ConvGradFilter', ['x%d' % i, 'gy%d' % i], ['gw%d' % i],
                                      domain=CUSTOM, kernel_shape=list(kernel), **attrs))
        inputs += [('x%d' % i, F32, list(shape)), ('gy%d' % i, F32, [shape[0], m] + out)]
        outputs.append(('gw%d' % i, F32, [m, shape[1] // attrs.get('group', 1)] + list(kernel)))
        outs.append(out)
    return _custom_model(nodes, inputs, outputs), outs


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
@pytest.mark.native_build
def test_conv_grad_filter(shape, kernel, m, attrs):
    n = shape[0]
    model, (out,) = _grad_filter_model([(shape, kernel, m, attrs)])
    rng = numpy.random.RandomState(0)
    # Each weight's gradient sums n * OH * OW products: float32 rounding
    # grows with that depth.
    depth = n * out[0] * out[1]
    check_native(model, [rng.uniform(-1, 1, shape).astype(F32),
                         rng.uniform(-1, 1, [n, m] + out).astype(F32)],
                 atol=ATOL * max(1, depth / 512), onnxruntime_check=False)


@pytest.mark.native_build
def test_conv_grad_filter_stores_gw_by_parts():
    """By columns, where gw^T is larger than a block of columns, each
    product's rows of it go into gw at once (the scratch holds a part):
    two batches of images whose second adds to gw (10 images of 128 pixels,
    blocks of 7 channels, 576 x 128 > 65536 floats), and one row at a time
    (64 output channels, 8 input channels of 2x2 pixels: 32 floats of
    columns, full tiles only by columns with AVX2 or AVX-512)."""
    cases = [((10, 64, 16, 8), (3, 3), 128, {'pads': [1, 1, 1, 1]}),
             ((1, 8, 2, 2), (1, 1), 64, {})]
    model, outs = _grad_filter_model(cases)
    rng = numpy.random.RandomState(0)
    inputs = []
    for (shape, _, m, _), out in zip(cases, outs):
        inputs += [rng.uniform(-1, 1, shape).astype(F32),
                   rng.uniform(-1, 1, [shape[0], m] + out).astype(F32)]
    # Depth 10 x 128 (as test_conv_grad_filter tolerates).
    check_native(model, inputs, atol=ATOL * 1280 / 512, onnxruntime_check=False)


def test_conv_grad_filter_scratch_is_not_the_whole_gradient():
    """ResNet-50's filter gradients at 64x64, batch 64, at the native
    training step's peaks (issue 34): a block of columns (65536 floats),
    the product's images' gy and at most a block more.  Stage 4's shortcut
    (1x1, stride 2, 1024 to 2048 channels, 256 pixels per product): 2.5
    MiB, was 10.5 with gw^T whole (8 MiB).  Stage 3's 256 to 1024 at 4x4:
    32 images' gy per product (GRAD_GY_FLOATS), 2.5 MiB, was 5.5 (64, and
    gw^T whole)."""
    model, _ = _grad_filter_model([((64, 1024, 4, 4), (1, 1), 2048, {'strides': [2, 2]}),
                                   ((64, 256, 4, 4), (1, 1), 1024, {})])
    lowered = _lowered(build_program(model), 'model')
    assert [s.scratch for s in lowered.steps if s is not None] == \
        [2 * 65536 + 256 * 2048, 2 * 65536 + 512 * 1024]


#: (x shape, MaxPool attributes)
POOL_CASES = [
    ((2, 3, 6, 6), {'kernel_shape': [2, 2], 'strides': [2, 2]}),
    ((1, 2, 7, 5), {'kernel_shape': [3, 3], 'strides': [2, 2], 'pads': [1, 1, 1, 1]}),
    ((1, 2, 7, 7), {'kernel_shape': [2, 2], 'strides': [2, 2], 'ceil_mode': 1}),
    ((1, 1, 8, 8), {'kernel_shape': [2, 3], 'dilations': [2, 1]}),
]


@pytest.mark.parametrize('shape,attrs', POOL_CASES)
@pytest.mark.native_build
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
@pytest.mark.native_build
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


@pytest.mark.native_build
def test_batch_statistics_of_a_channel_far_from_zero():
    """Integers in 1e7 +- 4 (exact in float32): the variance is 1e-13 of the
    squared mean, beyond even a double sum of squares, and the native
    kernel's one-pass moments still give it to float32's precision.  Y is
    not compared: at that mean, float32's x - mean keeps no digits."""
    shape = (4, 3, 5, 2)
    inputs = _bn_inputs(shape)
    inputs[0] = (1e7 + numpy.random.RandomState(7).randint(-4, 5, shape)).astype(F32)
    names = ('y', 'running_mean', 'running_var', 'batch_mean', 'batch_var')
    model = make_model(
        [helper.make_node('BatchNormalization', ['x', 's', 'b', 'm', 'v'], list(names))],
        [('x', F32, list(shape))] + [(n, F32, [3]) for n in 'sbmv'],
        [('y', F32, list(shape))] + [(n, F32, [3]) for n in names[1:]], opset=9)
    got = Executor(build_program(model), backend='native').run_positional(inputs)
    exact = inputs[0].astype(F64)
    numpy.testing.assert_allclose(got[3], exact.mean(axis=(0, 2, 3)), rtol=1e-7)
    numpy.testing.assert_allclose(got[4], exact.var(axis=(0, 2, 3)), rtol=1e-5)


@pytest.mark.parametrize('training,given,n_outputs', [(1, False, 3), (0, True, 5), (1, True, 3)])
@pytest.mark.native_build
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
@pytest.mark.native_build
def test_average_pool_grad(shape, attrs):
    y_shape = list(shape[:2]) + _window_out(shape[2:], attrs['kernel_shape'], attrs,
                                            attrs.get('ceil_mode', 0))
    model = _custom_model(
        [helper.make_node('AveragePoolGrad', ['gy'], ['gx'], domain=CUSTOM,
                          input_shape=list(shape), **attrs)],
        [('gy', F32, y_shape)], [('gx', F32, list(shape))])
    gy = numpy.random.RandomState(1).uniform(-1, 1, y_shape).astype(F32)
    check_native(model, [gy], onnxruntime_check=False)


#: forward op -> (gates, number of states)
RECURRENT = {'LSTM': (4, 2), 'GRU': (3, 1), 'RNN': (1, 1)}
#: (op, seq, batch, input, hidden, attributes, optional inputs given)
RECURRENT_GRAD_CASES = [
    ('LSTM', 3, 2, 4, 5, {}, ()),
    ('LSTM', 4, 3, 2, 3, {'direction': 'bidirectional'}, ('B', 'lens', 'h0', 'c0', 'P')),
    ('LSTM', 2, 3, 3, 4, {'direction': 'reverse', 'layout': 1, 'clip': 0.5}, ('B', 'lens')),
    ('GRU', 3, 2, 4, 5, {}, ('B',)),
    ('GRU', 4, 3, 2, 3, {'direction': 'bidirectional'}, ('B', 'lens', 'h0')),
    ('GRU', 3, 2, 3, 4, {'linear_before_reset': 1, 'direction': 'reverse', 'layout': 1},
     ('B', 'lens', 'h0')),
    ('GRU', 3, 2, 2, 3, {'direction': 'bidirectional', 'layout': 1, 'clip': 0.7},
     ('lens', 'h0')),
    ('RNN', 3, 2, 4, 5, {}, ()),
    ('RNN', 4, 3, 2, 3, {'direction': 'bidirectional', 'clip': 0.8}, ('B', 'lens', 'h0')),
]


def _recurrent_grad_case(op, T, B, n_in, H, attrs, given, upstream):
    """(model, values) of one ``op``Grad node fed with the forward's Y as
    the NumPy VM computes it, random upstream gradients (those of 'gY',
    'gY_h', 'gY_c' named in ``upstream``) and every result asked for."""
    gates, n_states = RECURRENT[op]
    D = 2 if attrs.get('direction') == 'bidirectional' else 1
    rng = numpy.random.RandomState(len(given) + T)
    x_shape = [B, T, n_in] if attrs.get('layout') else [T, B, n_in]
    states = [B, D, H] if attrs.get('layout') else [D, B, H]
    y_shape = [B, T, D, H] if attrs.get('layout') else [T, D, B, H]
    optional = {'B': (F32, [D, 2 * gates * H]), 'lens': (numpy.int32, [B]),
                'h0': (F32, states), 'c0': (F32, states), 'P': (F32, [D, 3 * H])}
    names = ['B', 'lens', 'h0'] + (['c0', 'P'] if op == 'LSTM' else [])
    inputs = [('X', F32, x_shape), ('W', F32, [D, gates * H, n_in]),
              ('R', F32, [D, gates * H, H])] + [(n,) + optional[n] for n in names if n in given]
    values = [rng.randint(0, T + 1, B).astype(numpy.int32) if i[0] == 'lens'
              else rng.uniform(-1, 1, i[2]).astype(F32) for i in inputs]
    node_inputs = [n if n in given else '' for n in ['X', 'W', 'R'] + names]
    node_inputs[:3] = ['X', 'W', 'R']
    forward = make_model([helper.make_node(op, node_inputs, ['Y'], hidden_size=H, **attrs)],
                         inputs, [('Y', F32, y_shape)], opset=14)
    y = Executor(build_program(forward)).run_positional(values)[0]
    grads = [('gY', y_shape), ('gY_h', states), ('gY_c', states)][:1 + n_states]
    inputs += [('Y', F32, y_shape)] + [(n, F32, s) for n, s in grads if n in upstream]
    values += [y] + [rng.uniform(-1, 1, s).astype(F32) for n, s in grads if n in upstream]
    node_inputs += ['Y'] + [n if n in upstream else '' for n, _ in grads]
    results = [('gX', x_shape), ('gW', [D, gates * H, n_in]), ('gR', [D, gates * H, H]),
               ('gB', [D, 2 * gates * H])] + [(n, states) for n in ('gh0', 'gc0')[:n_states]]
    if op == 'LSTM':
        results.append(('gP', [D, 3 * H]))
    model = _custom_model(
        [helper.make_node(op + 'Grad', node_inputs, [r[0] for r in results], domain=CUSTOM,
                          hidden_size=H, **attrs)],
        inputs, [(n, F32, s) for n, s in results])
    return model, values


@pytest.mark.parametrize('op,T,B,n_in,H,attrs,given', RECURRENT_GRAD_CASES)
@pytest.mark.parametrize('upstream', [('gY', 'gY_h', 'gY_c'), ('gY_h',)])
@pytest.mark.native_build
def test_recurrent_grad(op, T, B, n_in, H, attrs, given, upstream):
    model, values = _recurrent_grad_case(op, T, B, n_in, H, attrs, given, upstream)
    got = check_native(model, values, onnxruntime_check=False)
    assert any(numpy.abs(g).max() > 0 for g in got[:4])


#: (input shape, starts, ends, axes, steps)
SLICE_GRAD_CASES = [
    ((4, 6), [1, 0], [3, 6], [0, 1], [1, 2]),
    ((3, 5, 2), [4], [0], [1], [-2]),
    ((5, 3), [-2], [100], [0], None),
    ((3, 4), [2], [2], [1], None),
]


@pytest.mark.parametrize('shape,starts,ends,axes,steps', SLICE_GRAD_CASES)
@pytest.mark.native_build
def test_slice_grad(shape, starts, ends, axes, steps):
    sliced = numpy.zeros(shape)[tuple(
        slice(None) if k not in axes else
        slice(starts[axes.index(k)], ends[axes.index(k)], (steps or [1] * 4)[axes.index(k)])
        for k in range(len(shape)))].shape
    params = {'starts': starts, 'ends': ends, 'axes': axes}
    if steps is not None:
        params['steps'] = steps
    model = _custom_model(
        [helper.make_node('SliceGrad', ['gy'] + list(params), ['gx'], domain=CUSTOM,
                          shape=list(shape))],
        [('gy', F32, list(sliced))], [('gx', F32, list(shape))])
    model.graph.initializer.extend(helper.make_tensor(n, 7, [len(v)], v)
                                   for n, v in params.items())
    gy = numpy.random.RandomState(0).uniform(1, 2, sliced).astype(F32)
    got = check_native(model, [gy], onnxruntime_check=False)
    assert (got[0] != 0).sum() == gy.size


@pytest.mark.parametrize('shape,axis,indices', [
    ((5, 3), 0, [[0, 4], [4, -1]]),
    ((2, 4, 3), 1, [3, 0, 3]),
    ((3, 2), 1, [1]),
])
@pytest.mark.parametrize('index_dtype', [numpy.int32, numpy.int64])
@pytest.mark.native_build
def test_gather_grad(shape, axis, indices, index_dtype):
    indices = numpy.array(indices, index_dtype)
    gy_shape = list(shape[:axis]) + list(indices.shape) + list(shape[axis + 1:])
    model = _custom_model(
        [helper.make_node('GatherGrad', ['gy', 'i'], ['gx'], domain=CUSTOM, axis=axis,
                          shape=list(shape))],
        [('gy', F32, gy_shape), ('i', index_dtype, list(indices.shape))],
        [('gx', F32, list(shape))])
    gy = numpy.random.RandomState(0).uniform(-1, 1, gy_shape).astype(F32)
    check_native(model, [gy, indices], onnxruntime_check=False)


@pytest.mark.parametrize('op', sorted(RECURRENT))
@pytest.mark.native_build
def test_recurrent_grad_with_constant_weights(op):
    """W and R as initializers: transposed at emit time, not at run time."""
    model, values = _recurrent_grad_case(op, 3, 2, 4, 5, {'direction': 'bidirectional'},
                                         ('B',), ('gY', 'gY_h'))
    graph = model.graph
    graph.initializer.extend(numpy_helper.from_array(values[k], name)
                             for k, name in ((1, 'W'), (2, 'R')))
    inputs = [i for i in graph.input if i.name not in ('W', 'R')]
    del graph.input[:]
    graph.input.extend(inputs)
    check_native(model, values[:1] + values[3:], onnxruntime_check=False)

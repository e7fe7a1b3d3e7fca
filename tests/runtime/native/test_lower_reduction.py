"""Lowerings of the reduction family (ccn_reduction.c): Reduce* over any
set of axes, with the axes as an attribute or a constant input, ArgMax and
ArgMin."""
import numpy
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native import UnsupportedNativeOpsError
from chainer_compiler.runtime.native.emit_c import emit_c

from .helpers import check_native, make_model

F32, F64 = numpy.float32, numpy.float64
REDUCTIONS = ['ReduceSum', 'ReduceMean', 'ReduceMax', 'ReduceMin', 'ReduceProd', 'ReduceL1',
              'ReduceL2', 'ReduceLogSum', 'ReduceLogSumExp', 'ReduceSumSquare']
#: (axes, keepdims) of an input of shape (2, 3, 4): one axis, a negative
#: one, two apart (a strided reduction), all by default.
VARIANTS = [([1], 1), ([-1], 0), ([0, 2], 1), ([2, 0], 0), (None, 1), (None, 0)]


def _out_shape(shape, axes, keepdims):
    axes = range(len(shape)) if axes is None else [a % len(shape) for a in axes]
    return [1 if k in axes else d for k, d in enumerate(shape) if keepdims or k not in axes]


def _positive_input(dtype, shape=(2, 3, 4)):
    # Positive, so that ReduceLogSum is defined; near 1, so products stay tame.
    return numpy.random.RandomState(0).uniform(0.5, 1.5, shape).astype(dtype)


def _reductions_model(opset, dtype, as_input):
    """Every Reduce* in every VARIANT, the axes as attributes or constant
    inputs."""
    nodes, outputs, inits = [], [], {}
    for op in REDUCTIONS:
        for k, (axes, keepdims) in enumerate(VARIANTS):
            name = '%s_%d' % (op, k)
            inputs = ['x']
            attrs = {'keepdims': keepdims}
            if axes is not None and as_input:
                inits[name + '_axes'] = numpy.array(axes, numpy.int64)
                inputs.append(name + '_axes')
            elif axes is not None:
                attrs['axes'] = axes
            nodes.append(helper.make_node(op, inputs, [name], **attrs))
            outputs.append((name, dtype, _out_shape((2, 3, 4), axes, keepdims)))
    return make_model(nodes, [('x', dtype, [2, 3, 4])], outputs, inits, opset=opset)


@pytest.mark.native_build
def test_reductions_with_axes_attributes():
    # Opset 11: ReduceSum too takes its axes as an attribute.
    check_native(_reductions_model(11, F32, False), [_positive_input(F32)])


@pytest.mark.native_build
def test_reductions_with_axes_inputs():
    check_native(_reductions_model(18, F32, True), [_positive_input(F32)])


@pytest.mark.native_build
def test_reductions_of_float64():
    # onnxruntime lacks float64 kernels of several of them.
    check_native(_reductions_model(18, F64, True), [_positive_input(F64)],
                 onnxruntime_check=False)


@pytest.mark.native_build
def test_empty_axes_input_and_noop_with_empty_axes():
    x = _positive_input(F32)
    nodes = [helper.make_node('ReduceSum', ['x', 'none'], ['all'], keepdims=0),
             helper.make_node('ReduceSum', ['x'], ['absent'], keepdims=1),
             helper.make_node('ReduceSumSquare', ['x', 'none'], ['noop'],
                              noop_with_empty_axes=1),
             helper.make_node('ReduceMax', ['x'], ['noop_absent'], noop_with_empty_axes=1)]
    model = make_model(nodes, [('x', F32, [2, 3, 4])],
                       [('all', F32, []), ('absent', F32, [1, 1, 1]), ('noop', F32, [2, 3, 4]),
                        ('noop_absent', F32, [2, 3, 4])],
                       {'none': numpy.zeros(0, numpy.int64)}, opset=18)
    got = check_native(model, [x])
    numpy.testing.assert_allclose(got[2], x * x, rtol=1e-6)


@pytest.mark.native_build
def test_log_sum_exp_of_large_values_does_not_overflow():
    x = numpy.array([[1000, 1000], [-1000, -numpy.inf]], F32)
    model = make_model([helper.make_node('ReduceLogSumExp', ['x'], ['y'], axes=[1], keepdims=0)],
                       [('x', F32, [2, 2])], [('y', F32, [2])])
    got = check_native(model, [x])
    numpy.testing.assert_allclose(got[0], [1000 + numpy.log(2), -1000], rtol=1e-6)


@pytest.mark.native_build
def test_reduction_over_an_empty_axis_gives_the_identity():
    x = numpy.zeros((0, 3), F32)
    ops = ['ReduceSum', 'ReduceProd', 'ReduceMax', 'ReduceMin', 'ReduceSumSquare']
    model = make_model([helper.make_node(op, ['x'], [op], axes=[0], keepdims=0) for op in ops],
                       [('x', F32, [0, 3])], [(op, F32, [3]) for op in ops], opset=11)
    got = check_native(model, [x], onnxruntime_check=False)
    assert [g.tolist() for g in got] == [[0] * 3, [1] * 3, [-numpy.inf] * 3,
                                         [numpy.inf] * 3, [0] * 3]


def test_reduce_refuses_computed_axes():
    model = make_model([helper.make_node('ReduceSum', ['x', 'axes'], ['y'])],
                       [('x', F32, [2, 3]), ('axes', numpy.int64, [1])], [('y', F32, ['a', 'b'])])
    with pytest.raises(UnsupportedNativeOpsError, match='its axes must be a constant'):
        emit_c(build_program(model), '/nonexistent/never-written')


@pytest.mark.native_build
def test_arg_max_and_min():
    x = numpy.array([[[3, 1, 3, 0], [2, 2, 2, 2], [0, 5, 5, -1]],
                     [[1, 1, 0, 0], [7, 7, 6, 8], [4, 4, 4, 4]]], F32)
    nodes, outputs, feed = [], [], [x]
    variants = [(0, 1, 0), (1, 0, 0), (-1, 1, 1), (2, 0, 1), (-3, 0, 1)]
    for op in ('ArgMax', 'ArgMin'):
        for axis, keepdims, last in variants:
            name = '%s_%d_%d_%d' % (op, axis, keepdims, last)
            nodes.append(helper.make_node(op, ['x'], [name], axis=axis, keepdims=keepdims,
                                          select_last_index=last))
            shape = [1 if k == axis % 3 else d for k, d in enumerate(x.shape)
                     if keepdims or k != axis % 3]
            outputs.append((name, numpy.int64, shape))
    for dtype in (numpy.int64, numpy.int32, F64):
        name = 'ArgMax_' + numpy.dtype(dtype).name
        nodes.append(helper.make_node('ArgMax', [name + '_x'], [name], axis=1))
        outputs.append((name, numpy.int64, [2, 1, 4]))
        feed.append(x.astype(dtype))
    model = make_model(nodes, [('x', F32, [2, 3, 4])] + [
        ('ArgMax_%s_x' % numpy.dtype(d).name, d, [2, 3, 4])
        for d in (numpy.int64, numpy.int32, F64)], outputs)
    got = check_native(model, feed)
    # Ties: the first index, or the last with select_last_index.
    assert got[1][0].tolist() == [0, 2, 2, 1]
    assert got[2][0, :, 0].tolist() == [2, 3, 2]
    assert got[len(variants) + 3][0].tolist() == [3, 3, 3]


@pytest.mark.native_build
def test_arg_max_of_nan_is_the_nan():
    x = numpy.array([[1, numpy.nan, 5, numpy.nan]], F32)
    model = make_model([helper.make_node('ArgMax', ['x'], ['first'], axis=1),
                        helper.make_node('ArgMin', ['x'], ['last'], axis=1, select_last_index=1)],
                       [('x', F32, [1, 4])],
                       [('first', numpy.int64, [1, 1]), ('last', numpy.int64, [1, 1])])
    got = check_native(model, [x], onnxruntime_check=False)
    assert got[0].tolist() == [[1]] and got[1].tolist() == [[3]]

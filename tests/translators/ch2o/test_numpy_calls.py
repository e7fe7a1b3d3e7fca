"""ch2o's NumPy calls and tensor attributes and methods
(translators/ch2o/numpy_calls.py), run in onnxruntime and our VM against
NumPy."""
import numpy
import pytest

from chainer_compiler.translators.ch2o.numpy_calls import (
    TENSOR_METHODS,
    call_numpy,
    tensor_attribute,
    tensor_method,
)
from chainer_compiler.translators.ch2o.values import (
    Const,
    PyList,
    PyTuple,
    Tensor,
    TranslationError,
)
from chainer_compiler.translators.onnx_chainer.tracing import MAX_OPSET, MIN_OPSET

from .test_functions import SITE, assert_same, new_scope, run_both, sequence_input, tensor_input


def test_constant_arguments_are_folded():
    scope = new_scope()
    zeros = call_numpy(scope, 'zeros', [PyTuple((Const(2), Const(3)))], {}, SITE)
    steps = call_numpy(scope, 'arange', [Const(1), Const(7), Const(2)],
                       {'dtype': Const(numpy.float32)}, SITE)
    assert isinstance(zeros, Const) and zeros.value.shape == (2, 3)
    assert zeros.value.dtype == numpy.float64
    numpy.testing.assert_array_equal(steps.value, numpy.arange(1, 7, 2, dtype=numpy.float32))
    assert scope.nodes == []


@pytest.mark.parametrize('opset', [MIN_OPSET, MAX_OPSET])
def test_shape_and_filled_arrays_of_a_varying_size(opset):
    scope = new_scope(opset=opset)
    x = numpy.ones((2, 3), numpy.float32)
    xt = tensor_input(scope, 'x', x, (None, 3))
    shape = tensor_attribute(scope, xt, 'shape', SITE)
    n, three = shape.items
    assert isinstance(n, Tensor) and n.dtype == numpy.int64 and three.value == 3
    zeros = call_numpy(scope, 'zeros', [shape], {'dtype': Const(numpy.float32)}, SITE)
    ones = call_numpy(scope, 'ones', [PyTuple((n,))], {}, SITE)
    full = call_numpy(scope, 'full', [PyTuple((Const(2), n)), n], {}, SITE)
    size = tensor_attribute(scope, xt, 'size', SITE)
    assert zeros.shape == (None, 3) and ones.dtype == numpy.float64
    assert tensor_attribute(scope, xt, 'ndim', SITE).value == 2
    assert tensor_attribute(scope, xt, 'dtype', SITE).value == numpy.float32
    fed = numpy.ones((5, 3), numpy.float32)
    assert_same(run_both(scope, {xt: fed}, [n, zeros, ones, full, size]),
                [numpy.int64(5), numpy.zeros((5, 3), numpy.float32), numpy.ones(5),
                 numpy.full((2, 5), 5), numpy.int64(15)])


def test_arange_cumsum_and_concatenate():
    scope = new_scope()
    n = tensor_input(scope, 'n', numpy.int64(4))
    x = numpy.arange(6, dtype=numpy.int32).reshape(2, 3)
    xt = tensor_input(scope, 'x', x)
    steps = call_numpy(scope, 'arange', [n], {}, SITE)
    halves = call_numpy(scope, 'arange', [Const(0.5), n, Const(1.5)], {}, SITE)
    flat = call_numpy(scope, 'cumsum', [xt], {}, SITE)
    rows = call_numpy(scope, 'cumsum', [xt], {'axis': Const(1)}, SITE)
    joined = call_numpy(scope, 'concatenate', [PyList([xt, xt])], {'axis': Const(1)}, SITE)
    stacked = call_numpy(scope, 'array', [PyList([n, Const(2)])], {}, SITE)
    assert steps.shape == (None,) and joined.shape == (2, 6) and stacked.shape == (2,)
    assert_same(run_both(scope, {n: numpy.int64(6), xt: x},
                         [steps, halves, flat, rows, joined, stacked]),
                [numpy.arange(6), numpy.arange(0.5, 6, 1.5), numpy.cumsum(x),
                 numpy.cumsum(x, axis=1), numpy.concatenate([x, x], 1), numpy.array([6, 2])])


def test_concatenate_and_stack_of_a_sequence():
    scope = new_scope()
    xs = [numpy.full((2,), i, numpy.float32) for i in range(3)]
    seq = sequence_input(scope, 'xs', xs, (2,))
    joined = call_numpy(scope, 'concatenate', [seq], {}, SITE)
    stacked = call_numpy(scope, 'stack', [seq], {'axis': Const(1)}, SITE)
    fed = [numpy.full((2,), i, numpy.float32) for i in range(5)]
    assert_same(run_both(scope, {seq: fed}, [joined, stacked]),
                [numpy.concatenate(fed), numpy.stack(fed, 1)])


def test_transpose_astype_reshape_and_reductions():
    scope = new_scope()
    x = numpy.random.RandomState(0).randn(2, 3, 4).astype(numpy.float32)
    xt = tensor_input(scope, 'x', x, (None, 3, 4))
    t = tensor_attribute(scope, xt, 'T', SITE)
    perm = tensor_method(scope, xt, 'transpose', [Const(1), Const(0), Const(2)], {}, SITE)
    ints = tensor_method(scope, xt, 'astype', [Const(numpy.int32)], {}, SITE)
    flat = tensor_method(scope, xt, 'reshape', [Const(-1), Const(4)], {}, SITE)
    total = tensor_method(scope, ints, 'sum', [], {}, SITE)
    means = tensor_method(scope, xt, 'mean', [], {'axis': Const(1), 'keepdims': Const(True)},
                          SITE)
    best = tensor_method(scope, xt, 'argmax', [Const(2)], {}, SITE)
    assert t.shape == (4, 3, None) and perm.shape == (3, None, 4) and flat.shape == (None, 4)
    assert means.shape == (None, 1, 4) and total.dtype == numpy.int64
    fed = numpy.random.RandomState(1).randn(3, 3, 4).astype(numpy.float32) * 4
    i = fed.astype(numpy.int32)
    assert_same(run_both(scope, {xt: fed}, [t, perm, ints, flat, total, means, best]),
                [fed.T, fed.transpose(1, 0, 2), i, fed.reshape(-1, 4), i.sum(),
                 fed.mean(axis=1, keepdims=True), fed.argmax(2)])


def test_unsupported_calls_are_errors_naming_the_site():
    scope = new_scope()
    xt = tensor_input(scope, 'x', numpy.ones((2, 2), numpy.float32))
    with pytest.raises(TranslationError, match=r'^model\.py:7: np\.linalg_inv is not supported'):
        call_numpy(scope, 'linalg_inv', [xt], {}, SITE)
    with pytest.raises(TranslationError, match=r"^model\.py:7: '\.itemset\(\)' of a tensor"):
        tensor_method(scope, xt, 'itemset', [], {}, SITE)
    with pytest.raises(TranslationError, match=r"^model\.py:7: '\.strides' of a tensor"):
        tensor_attribute(scope, xt, 'strides', SITE)
    with pytest.raises(TranslationError, match=r'^model\.py:7: \.sum\(\): the argument must be '
                       r'known at export time, not a tensor'):
        tensor_method(scope, xt, 'sum', [xt], {}, SITE)


def test_every_tensor_method_is_a_method_of_ndarray():
    # The translator reads x.<name> as a method exactly when ndarray has
    # that method: a handler under another name could never be called.
    assert TENSOR_METHODS
    assert all(callable(getattr(numpy.ndarray, name, None)) for name in TENSOR_METHODS)


def test_full_of_a_length_read_at_run_time():
    scope = new_scope()
    x = numpy.ones((3, 2), numpy.float32)
    xt = tensor_input(scope, 'x', x, (None, 2))
    n = tensor_attribute(scope, xt, 'shape', SITE).items[0]
    filled = call_numpy(scope, 'full', [n, Const(0.25)], {'dtype': Const(numpy.float32)}, SITE)
    assert filled.shape == (None,)
    assert_same(run_both(scope, {xt: numpy.ones((5, 2), numpy.float32)}, [filled]),
                [numpy.full(5, 0.25, numpy.float32)])

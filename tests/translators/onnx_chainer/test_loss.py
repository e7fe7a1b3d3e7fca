"""Converters of chainer.functions.loss (and F.accuracy)."""
import chainer.functions as F
import numpy
import pytest

from .helpers import OPSETS, check_export, op_types


def _rand(*shape, seed=0, low=-1, high=1):
    return numpy.random.RandomState(seed).uniform(low, high, shape).astype(numpy.float32)


def _labels(shape, n_classes, seed=1, ignore=None, dtype=numpy.int32):
    rs = numpy.random.RandomState(seed)
    t = rs.randint(0, n_classes, shape).astype(dtype)
    if ignore is not None:
        t.ravel()[::3] = ignore
    return t


# -- softmax cross entropy --------------------------------------------------------
@pytest.mark.parametrize('x_shape', [(4, 3), (2, 3, 4), (2, 3, 2, 3)])
@pytest.mark.parametrize('reduce', ['mean', 'no'])
def test_softmax_cross_entropy_nd(x_shape, reduce):
    """N-d input with the class axis at 1 (onnx-chainer handled 2-D only)."""
    x = _rand(*x_shape)
    t = _labels((x_shape[0],) + x_shape[2:], x_shape[1])
    check_export(lambda x, t: F.softmax_cross_entropy(x, t, reduce=reduce), (x, t))


@pytest.mark.parametrize('ignore_label', [-1, 2])
@pytest.mark.parametrize('reduce', ['mean', 'no'])
def test_softmax_cross_entropy_respects_ignore_label(ignore_label, reduce):
    x = _rand(6, 4)
    t = _labels((6,), 4, ignore=ignore_label)
    fn = lambda x, t: F.softmax_cross_entropy(x, t, ignore_label=ignore_label,  # noqa: E731
                                              reduce=reduce)
    check_export(fn, (x, t))


@pytest.mark.parametrize('normalize', [True, False])
def test_softmax_cross_entropy_normalize(normalize):
    """normalize=True divides by the non-ignored count, False by the batch."""
    x = _rand(2, 3, 4)
    t = _labels((2, 4), 3, ignore=-1)
    fn = lambda x, t: F.softmax_cross_entropy(x, t, normalize=normalize)  # noqa: E731
    check_export(fn, (x, t))


@pytest.mark.parametrize('reduce', ['mean', 'no'])
@pytest.mark.parametrize('normalize', [True, False])
def test_softmax_cross_entropy_respects_class_weight(reduce, normalize):
    """Chainer's mean divides the weighted sum by the label count, not by
    the sum of weights as ONNX reduction='mean' would."""
    x = _rand(5, 3, 2)
    t = _labels((5, 2), 3, ignore=-1)
    w = numpy.array([0.5, 2.0, 1.5], dtype=numpy.float32)
    fn = lambda x, t: F.softmax_cross_entropy(x, t, class_weight=w, reduce=reduce,  # noqa: E731
                                              normalize=normalize)
    check_export(fn, (x, t))


def test_softmax_cross_entropy_all_ignored_is_zero():
    x = _rand(3, 4)
    t = numpy.full((3,), -1, dtype=numpy.int32)
    check_export(lambda x, t: F.softmax_cross_entropy(x, t), (x, t))


def test_softmax_cross_entropy_int64_labels():
    x = _rand(4, 3)
    t = _labels((4,), 3, dtype=numpy.int64)
    check_export(lambda x, t: F.softmax_cross_entropy(x, t), (x, t))


def test_softmax_cross_entropy_ops_per_opset():
    x, t = _rand(4, 3), _labels((4,), 3)
    models = check_export(lambda x, t: F.softmax_cross_entropy(x, t), (x, t))
    for opset, model in zip(OPSETS, models):
        assert ('SoftmaxCrossEntropyLoss' in op_types(model)) == (opset >= 12)


@pytest.mark.parametrize('loss', ['cross-entropy', 'kl-divergence'])
@pytest.mark.parametrize('reduce', ['mean', 'no'])
def test_softmax_cross_entropy_soft_target(loss, reduce):
    x = _rand(2, 3, 4)
    t = F.softmax(_rand(2, 3, 4, seed=3), axis=1).array
    fn = lambda x, t: F.softmax_cross_entropy(x, t, reduce=reduce,  # noqa: E731
                                              soft_target_loss=loss)
    check_export(fn, (x, t))


# -- sigmoid cross entropy ----------------------------------------------------------
@pytest.mark.parametrize('normalize', [True, False])
@pytest.mark.parametrize('reduce', ['mean', 'no'])
def test_sigmoid_cross_entropy(normalize, reduce):
    """Labels -1 are ignored; mean over valid labels or the batch size."""
    x = _rand(4, 3, low=-4, high=4)
    t = _labels((4, 3), 2, ignore=-1)
    fn = lambda x, t: F.sigmoid_cross_entropy(x, t, normalize=normalize,  # noqa: E731
                                              reduce=reduce)
    check_export(fn, (x, t))


# -- regression losses -------------------------------------------------------------
@pytest.mark.parametrize('fn', [F.mean_squared_error, F.mean_absolute_error,
                                F.squared_error, F.absolute_error],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize('shape', [(4,), (2, 3, 4)])
def test_regression_losses(fn, shape):
    check_export(fn, (_rand(*shape), _rand(*shape, seed=1)))


@pytest.mark.parametrize('reduce', ['sum_along_second_axis', 'no'])
@pytest.mark.parametrize('delta', [0.5, 1.0])
def test_huber_loss(reduce, delta):
    x0, x1 = _rand(3, 4, 2, low=-2, high=2), _rand(3, 4, 2, seed=1, low=-2, high=2)
    check_export(lambda a, b: F.huber_loss(a, b, delta, reduce=reduce), (x0, x1))


# -- accuracy -------------------------------------------------------------------------
@pytest.mark.parametrize('ignore_label', [None, -1, 1])
@pytest.mark.parametrize('x_shape', [(6, 4), (3, 4, 5)])
def test_accuracy(ignore_label, x_shape):
    x = _rand(*x_shape)
    t = _labels((x_shape[0],) + x_shape[2:], x_shape[1],
                ignore=ignore_label if ignore_label is not None else None)
    t.ravel()[1::2] = x.argmax(axis=1).ravel()[1::2]  # some hits
    check_export(lambda x, t: F.accuracy(x, t, ignore_label=ignore_label), (x, t))


def test_accuracy_all_ignored_is_zero():
    x = _rand(3, 4)
    t = numpy.full((3,), -1, dtype=numpy.int32)
    check_export(lambda x, t: F.accuracy(x, t, ignore_label=-1), (x, t))

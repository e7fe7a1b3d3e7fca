"""Converters of chainer.functions.pooling."""
import chainer.functions as F
import numpy
import pytest

from chainer_compiler.translators.onnx_chainer import export_model

from .helpers import OPSETS, FunctionModel, check_export, op_types


def _rand(*shape, seed=0, low=-1, high=1):
    return numpy.random.RandomState(seed).uniform(low, high, shape).astype(numpy.float32)


def _attr(model, name):
    for node in model.graph.node:
        for a in node.attribute:
            if a.name == name:
                return a.i if a.type == a.INT else list(a.ints)
    return None


# -- max pooling ----------------------------------------------------------------
MAX_2D_CASES = [
    # (input HxW, ksize, stride, pad, cover_all)
    ((6, 6), 2, None, 0, False),
    ((6, 6), 2, None, 0, True),
    ((7, 7), 2, None, 0, True),      # ceil mode adds a partial window
    ((7, 8), 3, 2, 1, True),
    ((7, 8), 3, 2, 1, False),
    ((5, 5), (3, 2), (2, 1), (1, 0), True),
    ((5, 5), 2, 2, 1, True),         # last window starts in the end padding: -inf
    ((9, 9), 3, 3, 1, True),
    ((5, 7), 2, 2, (1, 0), True),    # H: a window wholly in the padding; W: a partial one
]


@pytest.mark.parametrize('shape,ksize,stride,pad,cover_all', MAX_2D_CASES)
def test_max_pooling_2d(shape, ksize, stride, pad, cover_all):
    x = _rand(2, 3, *shape)
    fn = lambda x: F.max_pooling_2d(x, ksize, stride, pad, cover_all=cover_all)  # noqa: E731
    models = check_export(fn, x)
    assert 'MaxPool' in op_types(models[0])


def test_max_pooling_2d_cover_all_matches_chainer_shape():
    """cover_all=True (Chainer's default) is ceil mode, not floor mode."""
    x = _rand(1, 1, 7, 7)
    fn = lambda x: F.max_pooling_2d(x, 2)  # noqa: E731
    assert fn(x).shape == (1, 1, 4, 4)
    models = check_export(fn, x)
    assert _attr(models[0], 'ceil_mode') == 1


def test_max_pooling_2d_negative_input_with_padding():
    """Padding never wins a max, even when every input is negative."""
    x = _rand(1, 2, 5, 5, low=-3, high=-1)
    check_export(lambda x: F.max_pooling_2d(x, 3, 2, 1), x)


@pytest.mark.parametrize('ndim,ksize,stride,pad,cover_all', [
    (1, 2, None, 0, True),
    (1, 3, 2, 1, False),
    (3, 2, None, 0, True),
    (3, (2, 3, 2), (2, 2, 1), (1, 1, 0), True),
    (3, 3, 2, 1, False),
])
def test_max_pooling_nd(ndim, ksize, stride, pad, cover_all):
    x = _rand(2, 2, *(5,) * ndim)
    check_export(lambda x: F.max_pooling_nd(x, ksize, stride, pad, cover_all=cover_all), x)


def test_max_pooling_return_indices_is_rejected():
    fn = lambda x: F.max_pooling_2d(x, 2, return_indices=True)[0]  # noqa: E731
    with pytest.raises(ValueError, match='return_indices'):
        export_model(FunctionModel(fn), _rand(1, 1, 4, 4))


# -- average pooling ------------------------------------------------------------
@pytest.mark.parametrize('shape,ksize,stride,pad', [
    ((6, 6), 2, None, 0),
    ((7, 8), 3, 2, 1),
    ((5, 5), (3, 2), (2, 1), (1, 0)),
])
def test_average_pooling_2d_counts_padding(shape, ksize, stride, pad):
    x = _rand(2, 3, *shape)
    models = check_export(lambda x: F.average_pooling_2d(x, ksize, stride, pad), x)
    assert op_types(models[0]) == ['AveragePool']


@pytest.mark.parametrize('pad_value', [0, None])
@pytest.mark.parametrize('ndim,ksize,stride,pad', [
    (1, 3, 2, 1),
    (2, 3, 2, 1),
    (3, 2, 1, 1),
    (3, (3, 2, 2), (2, 1, 2), (1, 0, 1)),
])
def test_average_pooling_nd_respects_pad_value(ndim, ksize, stride, pad, pad_value):
    """pad_value=None averages over input elements only (onnx-chainer
    always counted the padding)."""
    x = _rand(2, 2, *(5,) * ndim)
    fn = lambda x: F.average_pooling_nd(x, ksize, stride, pad, pad_value=pad_value)  # noqa: E731
    check_export(fn, x)


def test_average_pooling_nd_pad_value_none_differs_from_zero():
    x = _rand(1, 1, 4, 4, low=1, high=2)
    a = F.average_pooling_nd(x, 3, 1, 1, pad_value=None).array
    b = F.average_pooling_nd(x, 3, 1, 1, pad_value=0).array
    assert not numpy.allclose(a, b)  # so the test above tells them apart


# -- unpooling ------------------------------------------------------------------
@pytest.mark.parametrize('ksize,stride,pad,outsize,cover_all', [
    (2, None, 0, None, True),
    (2, None, 0, None, False),
    (3, 2, 1, None, True),
    (3, 2, 1, None, False),
    (2, 2, 2, None, True),
    ((3, 2), (2, 1), (1, 0), None, False),
    (2, None, 0, (9, 9), False),
    (3, 2, 1, (8, 8), False),
    (3, 2, 1, (7, 7), True),
    (3, 2, 1, (6, 6), True),
])
def test_unpooling_2d(ksize, stride, pad, outsize, cover_all):
    x = _rand(2, 3, 4, 5 if outsize is None else 4)
    fn = lambda x: F.unpooling_2d(x, ksize, stride, pad, outsize=outsize,  # noqa: E731
                                  cover_all=cover_all)
    models = check_export(fn, x)
    assert op_types(models[0]) == ['ConvTranspose']


@pytest.mark.parametrize('ndim,ksize,stride,pad,cover_all', [
    (1, 2, None, 0, True),
    (3, 2, None, 0, True),
    (3, 3, 2, 1, False),
])
def test_unpooling_nd(ndim, ksize, stride, pad, cover_all):
    x = _rand(1, 2, *(3,) * ndim)
    check_export(lambda x: F.unpooling_nd(x, ksize, stride, pad, cover_all=cover_all), x)


# -- RoI pooling ----------------------------------------------------------------
ROIS = numpy.array([[0, 0, 0, 5, 5], [1, 1, 1, 3, 4], [0, 4, 4, 5, 5],
                    [1, 5, 5, 9, 9], [0, -2, 1, 3, 12]], dtype=numpy.float32)


@pytest.mark.parametrize('outh,outw,scale', [(3, 3, 1.0), (2, 4, 0.5), (1, 1, 0.6)])
def test_roi_pooling_2d(outh, outw, scale):
    x = _rand(2, 3, 6, 7)
    check_export(lambda x, r: F.roi_pooling_2d(x, r, outh, outw, scale), (x, ROIS))


def test_roi_pooling_2d_negative_inputs_and_empty_bins():
    """All-negative features: the max is the largest negative value and
    empty bins (RoI outside the map) give 0, as in Chainer."""
    x = _rand(2, 2, 6, 6, low=-3, high=-1)
    rois = numpy.array([[0, 0, 0, 5, 5], [1, 5, 5, 8, 8], [0, 7, 7, 9, 9]], numpy.float32)
    y = F.roi_pooling_2d(x, rois, 3, 3, 1.0).array
    assert (y[0] < 0).all() and (y[2] == 0).all()
    check_export(lambda x, r: F.roi_pooling_2d(x, r, 3, 3, 1.0), (x, rois))


def test_roi_pooling_2d_rounds_ties_half_to_even():
    """Chainer rounds scaled RoI corners with Python's round (2.5 -> 2);
    MaxRoiPool alone rounds half away from zero (2.5 -> 3)."""
    x = _rand(1, 2, 8, 10)
    rois = numpy.array([[0, 2.5, 1.5, 6.5, 5.5], [0, 5, 3, 21, 11], [0, 1, 0.5, 3, 4.5]],
                       numpy.float32)
    check_export(lambda x, r: F.roi_pooling_2d(x, r, 2, 3, 0.5), (x, rois))


def test_roi_pooling_2d_form_per_opset():
    """MaxRoiPool-22 has no onnxruntime kernel: composed from opset 22."""
    x = _rand(2, 2, 6, 7)
    models = check_export(lambda x, r: F.roi_pooling_2d(x, r, 2, 2, 1.0), (x, ROIS))
    for opset, model in zip(OPSETS, models):
        assert ('MaxRoiPool' in op_types(model)) == (opset < 22)

"""Converters of the RoI poolings with separate image indices
(F.roi_max_pooling_2d, F.roi_average_pooling_2d, F.roi_max_align_2d,
F.roi_average_align_2d), checked against Chainer in onnxruntime and the VM."""
import chainer.functions as F
import numpy
import pytest

from .helpers import check_export

#: Two images, negative and positive values (a max never hides behind 0).
X = numpy.random.RandomState(0).uniform(-2, 1, (2, 3, 6, 7)).astype(numpy.float32)

#: (y_min, x_min, y_max, x_max): the whole map, non-integer corners, RoIs
#: over the top-left and bottom-right borders, a degenerate point RoI, and
#: corners that scale to .5 ties.
ROIS = numpy.array([
    [0, 0, 6, 7],
    [1.3, 0.4, 4.7, 5.2],
    [-1.5, -2, 2.2, 3],
    [4, 5.5, 9, 9.5],
    [2.5, 2.5, 2.5, 2.5],
    [0.5, 1.5, 4.5, 6.5],
], numpy.float32)
ROI_INDICES = numpy.array([0, 1, 1, 0, 1, 0], numpy.int32)

ALL = [F.roi_max_pooling_2d, F.roi_average_pooling_2d, F.roi_max_align_2d,
       F.roi_average_align_2d]
ALIGN = [F.roi_max_align_2d, F.roi_average_align_2d]


def _check(function, *args, x=X, rois=ROIS, roi_indices=ROI_INDICES):
    models = check_export(lambda x, r, i: function(x, r, i, *args), (x, rois, roi_indices),
                          rtol=1e-6, atol=1e-6)
    for model in models:  # standard operators only: onnxruntime runs them all
        assert {node.domain for node in model.graph.node} <= {''}
    return function(x, rois, roi_indices, *args).array


@pytest.mark.parametrize('function', ALL, ids=lambda f: f.__name__)
@pytest.mark.parametrize('outsize,spatial_scale', [
    ((3, 4), 1.0),
    (2, 0.8),
    ((4, 3), 1.7),
])
def test_roi_functions(function, outsize, spatial_scale):
    _check(function, outsize, spatial_scale)


@pytest.mark.parametrize('function', ALIGN, ids=lambda f: f.__name__)
@pytest.mark.parametrize('sampling_ratio', [1, 3, (2, 1), (None, 2), (3, None)])
def test_roi_align_sampling_ratio(function, sampling_ratio):
    _check(function, (3, 2), 0.9, sampling_ratio)


@pytest.mark.parametrize('function', ALIGN, ids=lambda f: f.__name__)
def test_roi_align_adaptive_grid_differs_per_roi(function):
    """sampling_ratio None: each RoI samples a ceil(size / outsize) grid of
    its own (here 1 to 5 samples per bin)."""
    rois = numpy.array([[0, 0, 1, 1], [0, 0, 20, 12], [3, 1, 9, 24]], numpy.float32)
    _check(function, 2, 0.5, None, rois=rois, roi_indices=numpy.array([1, 0, 1], numpy.int32))


@pytest.mark.parametrize('function', ALIGN, ids=lambda f: f.__name__)
@pytest.mark.parametrize('spatial_scale,roi', [
    (1.2, [3.5, 4, 3.6, 6]),
    (0.3, [15, 12.6, 21, 18.5]),
    (0.1, [56.9, 28, 86.9, 51.5]),
])
def test_roi_align_float64_coordinates(function, spatial_scale, roi):
    """RoIs where onnxruntime's RoiAlign (float32 sample positions) differs
    from Chainer by up to 0.7: the export computes them in float64."""
    x = numpy.random.RandomState(1).uniform(-1, 1, (1, 2, 6, 6)).astype(numpy.float32)
    _check(function, 3, spatial_scale, rois=numpy.array([roi], numpy.float32), x=x,
           roi_indices=numpy.zeros(1, numpy.int32))


def test_roi_max_pooling_empty_bins_are_minus_infinity():
    """Bins clipped away by the border stay -inf in Chainer (not 0 as in
    MaxRoiPool); average pooling gives 0 there."""
    rois = numpy.array([[4, 5, 9, 9.5], [5.6, 6.6, 6.4, 7.4]], numpy.float32)
    indices = numpy.array([0, 1], numpy.int32)
    y = _check(F.roi_max_pooling_2d, (3, 4), 1.0, rois=rois, roi_indices=indices)
    assert numpy.isneginf(y).any() and numpy.isfinite(y).any()
    y = _check(F.roi_average_pooling_2d, (3, 4), 1.0, rois=rois, roi_indices=indices)
    assert (y == 0).any()


def test_roi_max_align_without_samples_on_the_map_is_minus_infinity():
    rois = numpy.array([[-9, -9, -3, -3], [0, 0, 6, 7]], numpy.float32)
    y = _check(F.roi_max_align_2d, 2, 1.0, 2, rois=rois, roi_indices=numpy.array([0, 1],
                                                                             numpy.int32))
    assert numpy.isneginf(y[0]).all() and numpy.isfinite(y[1]).all()


@pytest.mark.parametrize('function', [F.roi_max_pooling_2d, F.roi_average_pooling_2d],
                         ids=lambda f: f.__name__)
def test_roi_pooling_rounds_ties_half_to_even(function):
    """Corners 0.5, 1.5, 2.5 and 3.5 round to 0, 2, 2 and 4 (Python's
    round), which changes the bins of every RoI here."""
    rois = numpy.array([[0.5, 1.5, 2.5, 3.5], [2.5, 0.5, 3.5, 4.5]], numpy.float32)
    _check(function, (2, 3), 1.0, rois=rois, roi_indices=numpy.array([1, 0], numpy.int32))

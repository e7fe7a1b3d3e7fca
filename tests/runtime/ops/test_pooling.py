"""Tests for the pooling kernels, with onnxruntime as the oracle."""
import numpy as np
import onnx.defs
import pytest

from chainer_compiler.runtime.ops import lookup
from chainer_compiler.runtime.ops.pooling import (
    average_pool,
    global_average_pool,
    global_lp_pool,
    global_max_pool,
    lp_pool,
    max_pool,
    max_roi_pool,
    max_unpool,
    roi_align,
    roi_align_10,
)

from .test_connection import run_ort

_RNG = np.random.default_rng(1)


def _rand(*shape, dtype=np.float32):
    return _RNG.standard_normal(shape).astype(dtype)


def test_every_schema_version_of_every_pooling_op_has_a_kernel():
    ops = {'MaxPool', 'AveragePool', 'LpPool', 'GlobalAveragePool', 'GlobalMaxPool',
           'GlobalLpPool', 'MaxUnpool', 'MaxRoiPool', 'RoiAlign'}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain == '' and schema.name in ops:
            assert lookup(schema.name, version=schema.since_version).family == 'pooling'


_WINDOW_CASES = [
    ((2, 3, 9), dict(kernel_shape=[3], strides=[2], auto_pad='SAME_LOWER')),
    ((1, 2, 7, 8), dict(kernel_shape=[3, 2], strides=[2, 3], pads=[1, 0, 2, 1],
                        dilations=[2, 1], ceil_mode=1)),
    ((1, 2, 6, 6), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad='SAME_UPPER')),
    ((1, 1, 5, 4, 6), dict(kernel_shape=[2, 3, 2], strides=[2, 1, 3], pads=[1, 1, 0, 0, 1, 1])),
]


@pytest.mark.parametrize('shape,attrs', _WINDOW_CASES)
def test_max_pool_matches_onnxruntime(shape, attrs):
    x = _rand(*shape)
    np.testing.assert_array_equal(max_pool(np, x, **attrs), run_ort('MaxPool', [x], **attrs)[0])


@pytest.mark.parametrize('storage_order', [0, 1])
def test_max_pool_indices_match_onnxruntime(storage_order):
    x = _rand(2, 3, 7, 6)
    attrs = dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 1, 1, 0], dilations=[1, 2],
                 storage_order=storage_order)
    y, indices = max_pool(np, x, n_outputs=2, **attrs)
    expected_y, expected_indices = run_ort('MaxPool', [x], n_outputs=2, **attrs)
    np.testing.assert_array_equal(y, expected_y)
    assert indices.dtype == np.int64
    np.testing.assert_array_equal(indices, expected_indices)


def test_max_pool_keeps_integer_dtype_and_ignores_padding():
    x = -np.arange(16, dtype=np.int8).reshape(1, 1, 4, 4) - 100
    y = max_pool(np, x, kernel_shape=[2, 2], pads=[1, 1, 1, 1], strides=[2, 2])
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, [[[[-100, -101, -103], [-104, -105, -107],
                                        [-112, -113, -115]]]])


@pytest.mark.parametrize('count_include_pad', [0, 1])
@pytest.mark.parametrize('shape,attrs', _WINDOW_CASES)
def test_average_pool_matches_onnxruntime(shape, attrs, count_include_pad):
    x = _rand(*shape)
    expected = run_ort('AveragePool', [x], count_include_pad=count_include_pad, **attrs)[0]
    got = average_pool(np, x, count_include_pad=count_include_pad, **attrs)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('p', [1, 2, 3])
def test_lp_pool_matches_onnxruntime(p):
    x = _rand(1, 2, 7, 8)
    attrs = dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1], p=p)
    np.testing.assert_allclose(lp_pool(np, x, **attrs), run_ort('LpPool', [x], **attrs)[0],
                               rtol=1e-5, atol=1e-6)


def test_global_pools_reduce_every_spatial_axis():
    x = _rand(2, 3, 4, 5, 2, dtype=np.float16)
    wide = x.astype(np.float32)
    for fn, expected in [(global_average_pool, wide.mean(axis=(2, 3, 4))),
                         (global_max_pool, wide.max(axis=(2, 3, 4))),
                         (global_lp_pool, np.sqrt((wide ** 2).sum(axis=(2, 3, 4))))]:
        got = fn(np, x)
        assert got.dtype == np.float16 and got.shape == (2, 3, 1, 1, 1)
        np.testing.assert_allclose(got[..., 0, 0, 0], expected, rtol=2e-3, atol=2e-3)
    x = _rand(2, 3, 4, 5)
    np.testing.assert_allclose(global_lp_pool(np, x, p=3),
                               run_ort('GlobalLpPool', [x], opset=21, p=3)[0], rtol=1e-5)


def test_max_unpool_inverts_max_pool():
    x = np.abs(_rand(2, 3, 6, 8)) + 0.1  # positive, so the zeros it adds lose every max
    y, indices = max_pool(np, x, kernel_shape=[2, 2], strides=[2, 2], n_outputs=2)
    unpooled = max_unpool(np, y, indices, kernel_shape=[2, 2], strides=[2, 2])
    assert unpooled.shape == x.shape
    np.testing.assert_array_equal(unpooled[unpooled != 0], x[unpooled != 0])
    np.testing.assert_array_equal(max_pool(np, unpooled, kernel_shape=[2, 2], strides=[2, 2]), y)


def test_max_unpool_to_a_larger_output_shape_keeps_coordinates():
    x = np.array([[[[5., 6.], [7., 8.]]]], np.float32)
    indices = np.array([[[[5, 7], [13, 15]]]])  # row-major in the default 4x4 output
    got = max_unpool(np, x, indices, np.array([1, 1, 5, 5]), kernel_shape=[2, 2],
                     strides=[2, 2])
    expected = np.zeros((1, 1, 5, 5), np.float32)
    expected[0, 0, 1::2, 1::2] = x[0, 0]
    np.testing.assert_array_equal(got, expected)


def test_max_roi_pool_matches_onnxruntime():
    x = _rand(2, 3, 10, 12)
    rois = np.array([[0, 1.2, 0.5, 7.6, 8.4], [1, 0, 0, 11, 9], [1, 5, 6, 5, 6],
                     [0, 2.5, 3.5, 4.5, 4.5]], np.float32)
    attrs = dict(pooled_shape=[3, 4], spatial_scale=0.8)
    np.testing.assert_array_equal(max_roi_pool(np, x, rois, **attrs),
                                  run_ort('MaxRoiPool', [x, rois], opset=21, **attrs)[0])


_ROIS = np.array([[0.5, 1.0, 7.5, 6.0], [0, 0, 9, 9], [3.2, 4.1, 3.3, 4.2],
                  [-2, -1.5, 12, 11]], np.float32)
_BATCH = np.array([0, 1, 1, 0])


@pytest.mark.parametrize('mode', ['avg', 'max'])
@pytest.mark.parametrize('transform', ['half_pixel', 'output_half_pixel'])
@pytest.mark.parametrize('sampling_ratio', [0, 2])
def test_roi_align_matches_onnxruntime(mode, transform, sampling_ratio):
    x = _rand(2, 3, 9, 10)
    attrs = dict(mode=mode, coordinate_transformation_mode=transform, output_height=3,
                 output_width=2, sampling_ratio=sampling_ratio, spatial_scale=0.9)
    expected = run_ort('RoiAlign', [x, _ROIS, _BATCH], opset=21, **attrs)[0]
    np.testing.assert_allclose(roi_align(np, x, _ROIS, _BATCH, **attrs), expected,
                               rtol=1e-4, atol=1e-5)


def test_roi_align_10_has_no_half_pixel_shift():
    x = _rand(2, 3, 9, 10)
    np.testing.assert_array_equal(
        roi_align_10(np, x, _ROIS, _BATCH, output_height=2),
        roi_align(np, x, _ROIS, _BATCH, output_height=2,
                  coordinate_transformation_mode='output_half_pixel'))


def test_roi_align_without_rois_and_with_unknown_mode():
    x = _rand(1, 3, 4, 4)
    empty = roi_align(np, x, np.zeros((0, 4), np.float32), np.zeros(0, np.int64),
                      output_height=2, output_width=2)
    assert empty.shape == (0, 3, 2, 2) and empty.dtype == np.float32
    with pytest.raises(ValueError, match='median'):
        roi_align(np, x, _ROIS[:1], _BATCH[:1], mode='median')

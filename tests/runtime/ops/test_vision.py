"""Tests of the vision kernels (onnx.reference serves as the GridSample oracle)."""
import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from chainer_compiler.runtime.ops.vision import affine_grid, grid_sample, non_max_suppression


def _reference(op, inputs, **attrs):
    names = ['i%d' % k for k in range(len(inputs))]
    node = helper.make_node(op, names, ['y'], **attrs)
    def info(name):
        return helper.make_tensor_value_info(name, onnx.TensorProto.UNDEFINED, None)

    graph = helper.make_graph([node], 'g', [info(n) for n in names], [info('y')])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 22)])
    return ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))[0]


@pytest.mark.parametrize('mode', ['linear', 'nearest', 'cubic'])
@pytest.mark.parametrize('padding_mode', ['zeros', 'border', 'reflection'])
@pytest.mark.parametrize('align_corners', [0, 1])
def test_grid_sample_2d_matches_reference(mode, padding_mode, align_corners):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 2, 3, 4)).astype(np.float32)
    grid = rng.uniform(-2.5, 2.5, (2, 3, 2, 2)).astype(np.float32)
    y = grid_sample(np, x, grid, mode=mode, padding_mode=padding_mode,
                    align_corners=align_corners)
    assert y.dtype == np.float32 and y.shape == (2, 2, 3, 2)
    expected = _reference('GridSample', [x, grid], mode=mode, padding_mode=padding_mode,
                          align_corners=align_corners)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('mode', ['linear', 'nearest'])
def test_grid_sample_3d_matches_reference(mode):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 2, 2, 3, 4)).astype(np.float32)
    grid = rng.uniform(-1.2, 1.2, (1, 2, 2, 2, 3)).astype(np.float32)
    y = grid_sample(np, x, grid, mode=mode, padding_mode='border')
    expected = _reference('GridSample', [x, grid], mode=mode, padding_mode='border')
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_grid_sample_opset16_mode_names_and_identity_grid():
    x = np.arange(12, dtype=np.float64).reshape(1, 1, 3, 4)
    theta = np.array([[[1.0, 0, 0], [0, 1.0, 0]]])
    grid = affine_grid(np, theta, np.array([1, 1, 3, 4]), align_corners=1)
    for mode in ('bilinear', 'bicubic'):
        y = grid_sample(np, x, grid, mode=mode, align_corners=1)
        assert y.dtype == np.float64
        np.testing.assert_allclose(y, x, atol=1e-12)


def test_grid_sample_rejects_unknown_mode():
    with pytest.raises(ValueError):
        grid_sample(np, np.zeros((1, 1, 2, 2), np.float32), np.zeros((1, 1, 1, 2), np.float32),
                    mode='area')


@pytest.mark.parametrize('align_corners', [0, 1])
def test_affine_grid_3d_matches_reference(align_corners):
    theta = np.random.default_rng(2).standard_normal((2, 3, 4)).astype(np.float32)
    size = np.array([2, 1, 2, 3, 4], np.int64)
    y = affine_grid(np, theta, size, align_corners=align_corners)
    assert y.shape == (2, 2, 3, 4, 3) and y.dtype == np.float32
    expected = _reference('AffineGrid', [theta, size], align_corners=align_corners)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


BOXES = np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 10, 1, 11], [1, 1, 0, 0]]], np.float32)


def test_nms_suppresses_overlaps_and_keeps_order():
    scores = np.array([[[0.9, 0.8, 0.7, 0.95], [0.1, 0.2, 0.3, 0.4]]], np.float32)
    y = non_max_suppression(np, BOXES, scores, np.array([3]), np.array([0.5], np.float32))
    assert y.dtype == np.int64
    # Box 3 is box 0 with flipped corners: it wins class 0 and suppresses 0 and 1.
    np.testing.assert_array_equal(y, [[0, 0, 3], [0, 0, 2], [0, 1, 3], [0, 1, 2]])


def test_nms_score_threshold_and_output_limit():
    scores = np.array([[[0.9, 0.8, 0.5, 0.95]]], np.float32)
    y = non_max_suppression(np, BOXES, scores, np.array([1]), np.array([0.5], np.float32),
                            np.array([0.5], np.float32))
    np.testing.assert_array_equal(y, [[0, 0, 3]])
    y = non_max_suppression(np, BOXES, scores, np.array([5]), np.array([0.5], np.float32),
                            np.array([0.5], np.float32))
    np.testing.assert_array_equal(y, [[0, 0, 3]])  # box 2 (score == threshold) is dropped


def test_nms_center_point_format_and_default_max_outputs():
    boxes = np.array([[[0.5, 0.5, 1, 1], [0.5, 0.6, 1, 1]]], np.float32)
    scores = np.array([[[0.9, 0.8]]], np.float32)
    y = non_max_suppression(np, boxes, scores, np.array([2]), np.array([0.9], np.float32),
                            center_point_box=1)
    np.testing.assert_array_equal(y, [[0, 0, 0], [0, 0, 1]])
    assert non_max_suppression(np, boxes, scores).shape == (0, 3)

"""Tests of the quantization kernels."""
import ml_dtypes
import numpy as np
import pytest

from chainer_compiler.runtime.ops.quantization import (
    conv_integer,
    dequantize_linear,
    dynamic_quantize_linear,
    matmul_integer,
    qlinear_conv,
    qlinear_matmul,
    quantize_linear,
)


def test_quantize_rounds_half_to_even_and_saturates_uint8():
    x = np.array([0.5, 1.5, 2.5, -10.0, 1000.0], np.float32)
    y = quantize_linear(np, x, np.float32(1.0), np.uint8(0))
    assert y.dtype == np.uint8
    np.testing.assert_array_equal(y, [0, 2, 2, 0, 255])


def test_quantize_without_zero_point_defaults_to_uint8():
    y = quantize_linear(np, np.array([2.0, 4.0], np.float32), np.float32(2.0))
    assert y.dtype == np.uint8
    np.testing.assert_array_equal(y, [1, 2])


def test_quantize_per_axis_negative_axis_int8():
    x = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    y = quantize_linear(np, x, np.array([1.0, 2.0], np.float32), np.array([0, 10], np.int8),
                        axis=-1)
    np.testing.assert_array_equal(y, [[1, 11], [3, 12]])
    assert y.dtype == np.int8


def test_quantize_blocked_with_partial_last_block():
    x = np.arange(5, dtype=np.float32).reshape(1, 5) * 4
    scale = np.array([[1.0, 2.0]], np.float32)  # blocks of 3 along axis 1: [0:3], [3:5]
    y = quantize_linear(np, x, scale, np.zeros((1, 2), np.int16), axis=1, block_size=3)
    np.testing.assert_array_equal(y, [[0, 4, 8, 6, 8]])
    assert y.dtype == np.int16


def test_quantize_int4_saturates_to_its_range():
    zp = np.zeros((), ml_dtypes.int4)
    y = quantize_linear(np, np.array([-20.0, 3.4, 20.0], np.float32), np.float32(1.0), zp)
    assert y.dtype == np.dtype(ml_dtypes.int4)
    np.testing.assert_array_equal(y.astype(np.int8), [-8, 3, 7])


def test_quantize_output_dtype_attribute_uint4():
    y = quantize_linear(np, np.array([40.0], np.float32), np.float32(1.0),
                        output_dtype=np.dtype(ml_dtypes.uint4))
    assert y.dtype == np.dtype(ml_dtypes.uint4)
    assert int(y.astype(np.int32)[0]) == 15


@pytest.mark.parametrize('saturate,expected', [(1, 448.0), (0, np.nan)])
def test_quantize_float8_saturate_flag(saturate, expected):
    zp = np.zeros((), ml_dtypes.float8_e4m3fn)
    y = quantize_linear(np, np.array([1e6], np.float32), np.float32(1.0), zp, saturate=saturate)
    assert y.dtype == np.dtype(ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(y.astype(np.float32), [expected])


def test_dequantize_per_axis_and_output_dtype():
    x = np.array([[0, 10], [20, 30]], np.uint8)
    y = dequantize_linear(np, x, np.array([1.0, 0.5], np.float32), np.array([0, 10], np.uint8),
                          axis=1, output_dtype=np.dtype(np.float16))
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, [[0, 0], [20, 10]])


def test_dequantize_int32_without_zero_point_keeps_scale_dtype():
    y = dequantize_linear(np, np.array([-3, 100000], np.int32), np.float64(0.5))
    assert y.dtype == np.float64
    np.testing.assert_array_equal(y, [-1.5, 50000])


def test_dequantize_blocked_int4():
    x = np.array([[1, 2, 3, 4]], ml_dtypes.int4)
    scale = np.array([[1.0, 10.0]], np.float32)
    zp = np.array([[1, 0]], ml_dtypes.int4)
    y = dequantize_linear(np, x, scale, zp, axis=1, block_size=2)
    np.testing.assert_array_equal(y, [[0, 1, 30, 40]])


def test_dynamic_quantize_linear_includes_zero_in_range():
    x = np.array([1.0, 2.0, 5.1], np.float32)  # all positive: range is [0, 5.1]
    y, scale, zp = dynamic_quantize_linear(np, x)
    assert (y.dtype, scale.dtype, zp.dtype) == (np.uint8, np.float32, np.uint8)
    assert scale.shape == () and zp.shape == ()
    np.testing.assert_allclose(scale, 5.1 / 255, rtol=1e-6)
    assert zp == 0 and y[-1] == 255


def test_dynamic_quantize_linear_all_zero_input():
    y, scale, zp = dynamic_quantize_linear(np, np.zeros(3, np.float32))
    np.testing.assert_array_equal(y, [0, 0, 0])
    assert scale == 0 and zp == 0


def test_matmul_integer_per_row_and_column_zero_points():
    a = np.array([[1, 2], [3, 4]], np.uint8)
    b = np.array([[5, 6], [7, 8]], np.int8)
    y = matmul_integer(np, a, b, np.array([1, 2], np.uint8), np.array([5, 0], np.int8))
    assert y.dtype == np.int32
    expected = (a.astype(int) - [[1], [2]]) @ (b.astype(int) - [[5, 0]])
    np.testing.assert_array_equal(y, expected)


def test_matmul_integer_batched_without_zero_points():
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (2, 3, 4)).astype(np.int8)
    b = rng.integers(0, 256, (4, 5)).astype(np.uint8)
    np.testing.assert_array_equal(matmul_integer(np, a, b), a.astype(np.int64) @ b)


def test_qlinear_matmul_matches_float_computation():
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, (3, 4)).astype(np.uint8)
    b = rng.integers(0, 256, (4, 2)).astype(np.uint8)
    args = (a, np.float32(0.1), np.uint8(128), b, np.float32(0.05), np.uint8(100),
            np.float32(0.2), np.uint8(10))
    y = qlinear_matmul(np, *args)
    real = ((a - 128.0) * 0.1) @ ((b - 100.0) * 0.05)
    expected = np.clip(np.rint(real / 0.2) + 10, 0, 255)
    assert y.dtype == np.uint8
    np.testing.assert_array_equal(y, expected)


def _reference_conv(x, w, pad):
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    xp_ = np.pad(x, [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    out = np.zeros((n, m, h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1), np.int64)
    for i in range(out.shape[2]):
        for j in range(out.shape[3]):
            patch = xp_[:, :, i:i + kh, j:j + kw]
            out[:, :, i, j] = np.tensordot(patch, w, ([1, 2, 3], [1, 2, 3]))
    return out


def test_conv_integer_with_zero_points_and_padding():
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, (2, 3, 5, 4)).astype(np.uint8)
    w = rng.integers(0, 256, (4, 3, 3, 2)).astype(np.uint8)
    y = conv_integer(np, x, w, np.uint8(7), np.uint8(3), pads=[1, 1, 1, 1])
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, _reference_conv(x.astype(np.int64) - 7,
                                                     w.astype(np.int64) - 3, 1))


def test_conv_integer_groups_strides_and_same_upper():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 10, (1, 4, 5, 5)).astype(np.uint8)
    w = rng.integers(0, 10, (2, 2, 3, 3)).astype(np.uint8)
    y = conv_integer(np, x, w, group=2, strides=[2, 2], auto_pad='SAME_UPPER')
    assert y.shape == (1, 2, 3, 3)
    full = np.concatenate([_reference_conv(x[:, :2].astype(np.int64), w[:1].astype(np.int64), 1),
                           _reference_conv(x[:, 2:].astype(np.int64), w[1:].astype(np.int64), 1)],
                          axis=1)
    np.testing.assert_array_equal(y, full[:, :, ::2, ::2])


def test_qlinear_conv_per_channel_scale_and_bias():
    x = np.full((1, 1, 2, 2), 12, np.uint8)
    w = np.ones((2, 1, 1, 1), np.int8)
    y = qlinear_conv(np, x, np.float32(0.5), np.uint8(2), w, np.array([1.0, 2.0], np.float32),
                     np.array([0, 0], np.int8), np.float32(1.0), np.uint8(0),
                     np.array([4, 0], np.int32))
    # channel 0: (10 + 4) * 0.5 * 1 = 7; channel 1: 10 * 0.5 * 2 = 10
    assert y.dtype == np.uint8
    np.testing.assert_array_equal(y[0, :, 0, 0], [7, 10])

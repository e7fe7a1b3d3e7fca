"""Tests of the signal kernels."""
import numpy as np
import pytest

from chainer_compiler.runtime.ops.signal import (
    blackman_window,
    dft,
    dft_17,
    hamming_window,
    hann_window,
    mel_weight_matrix,
    stft,
)


def _complex(y):
    return y[..., 0] + 1j * y[..., 1]


def test_dft_real_input_default_axis_matches_fft():
    x = np.random.default_rng(0).standard_normal((2, 8, 1)).astype(np.float32)
    y = dft(np, x)
    assert y.dtype == np.float32 and y.shape == (2, 8, 2)
    np.testing.assert_allclose(_complex(y), np.fft.fft(x[..., 0], axis=1), rtol=1e-5, atol=1e-5)


def test_dft_opset17_axis_attribute_and_dft_length_padding():
    x = np.random.default_rng(1).standard_normal((3, 4, 1)).astype(np.float32)
    y = dft_17(np, x, np.int64(6), axis=1)
    assert y.shape == (3, 6, 2)
    np.testing.assert_allclose(_complex(y), np.fft.fft(x[..., 0], n=6, axis=1), rtol=1e-5,
                               atol=1e-5)


def test_dft_negative_axis_input_and_inverse_roundtrip():
    x = np.random.default_rng(2).standard_normal((2, 3, 5, 2)).astype(np.float64)
    forward = dft(np, x, None, np.int64(-3))
    back = dft(np, forward, None, np.int64(-3), inverse=1)
    assert back.dtype == np.float64
    np.testing.assert_allclose(back, x, atol=1e-12)


def test_dft_onesided_forward_and_inverse():
    x = np.random.default_rng(3).standard_normal((1, 10, 1)).astype(np.float32)
    spectrum = dft(np, x, None, np.int64(1), onesided=1)
    assert spectrum.shape == (1, 6, 2)
    signal = dft(np, spectrum, None, np.int64(1), onesided=1, inverse=1)
    assert signal.shape == (1, 10, 1)
    np.testing.assert_allclose(signal, x, atol=1e-5)


def test_dft_rejects_complex_component_axis():
    with pytest.raises(ValueError):
        dft(np, np.zeros((2, 4, 1), np.float32), None, np.int64(-1))


def test_stft_frames_window_and_onesided():
    signal = np.random.default_rng(4).standard_normal((2, 20, 1)).astype(np.float32)
    window = np.hanning(8).astype(np.float32)
    y = stft(np, signal, np.int64(4), window)
    assert y.shape == (2, 4, 5, 2) and y.dtype == np.float32
    frame = signal[1, 8:16, 0] * window
    np.testing.assert_allclose(_complex(y[1, 2]), np.fft.rfft(frame), rtol=1e-5, atol=1e-5)


def test_stft_two_sided_with_frame_length_only():
    signal = np.arange(12, dtype=np.float32).reshape(1, 12, 1)
    y = stft(np, signal, np.int64(6), None, np.int64(6), onesided=0)
    assert y.shape == (1, 2, 6, 2)
    np.testing.assert_allclose(_complex(y[0, 1]), np.fft.fft(np.arange(6, 12)), atol=1e-4)


def test_stft_needs_window_or_length():
    with pytest.raises(ValueError):
        stft(np, np.zeros((1, 8, 1), np.float32), np.int64(2))


@pytest.mark.parametrize('fn,reference', [
    (hann_window, np.hanning), (hamming_window, None), (blackman_window, np.blackman)])
def test_symmetric_windows(fn, reference):
    w = fn(np, np.int64(9), periodic=0)
    assert w.dtype == np.float32 and w.shape == (9,)
    if reference is not None:
        np.testing.assert_allclose(w, reference(9), atol=1e-6)
    np.testing.assert_allclose(w, w[::-1], atol=1e-6)


def test_hamming_uses_onnx_coefficients_and_periodic_length():
    w = hamming_window(np, np.int64(4), output_datatype=np.dtype(np.float64))
    assert w.dtype == np.float64
    n = np.arange(4)
    np.testing.assert_allclose(w, 25 / 46 - 21 / 46 * np.cos(2 * np.pi * n / 4))


def test_hann_periodic_is_symmetric_window_of_one_more_point():
    np.testing.assert_allclose(hann_window(np, np.int32(8)), np.hanning(9)[:8], atol=1e-6)


def test_mel_weight_matrix_shape_dtype_and_peaks():
    w = mel_weight_matrix(np, np.int32(8), np.int32(64), np.int32(16000), np.float32(0),
                          np.float32(8000), output_datatype=np.dtype(np.float64))
    assert w.shape == (33, 8) and w.dtype == np.float64
    np.testing.assert_allclose(w.max(axis=0), 1.0)
    assert (w >= 0).all() and (w <= 1).all()
    # Filters are ordered: peak bins never decrease.
    assert (np.diff(w.argmax(axis=0)) >= 0).all()

"""Signal-processing kernels: DFT, STFT, the window generators and
MelWeightMatrix.

ONNX carries complex tensors as real tensors with a trailing dimension of
size 2 (real, imaginary); a trailing size of 1 means a real signal.
"""
import math

import numpy

from .registry import LATEST, kernel


def _to_complex(x):
    """The signal held in ``x[..., 0:2]`` and whether it is real."""
    if x.shape[-1] == 1:
        return x[..., 0], True
    return x[..., 0] + 1j * x[..., 1], False


def _from_complex(xp, y, dtype):
    """Pack a (possibly complex) result back into ONNX's [..., 2] layout."""
    if xp.iscomplexobj(y):
        return xp.stack([y.real, y.imag], axis=-1).astype(dtype)
    return y[..., None].astype(dtype)


def _dft(xp, x, dft_length, axis, inverse, onesided):
    rank = x.ndim
    if not (-rank <= axis <= rank - 2) or axis == -1:
        raise ValueError('DFT axis %d is out of range for an input of rank %d' % (axis, rank))
    axis = axis + rank if axis < 0 else axis
    signal, is_real = _to_complex(x)
    n = int(dft_length) if dft_length is not None else None
    if onesided and inverse:
        # IRFFT: the default length restores an even-length real signal.
        y = xp.fft.irfft(signal, n=n, axis=axis)
    elif onesided:
        y = xp.fft.rfft(signal, n=n, axis=axis) if is_real else \
            _onesided(xp.fft.fft(signal, n=n, axis=axis), axis)
    elif inverse:
        y = xp.fft.ifft(signal, n=n, axis=axis)
    else:
        y = xp.fft.fft(signal, n=n, axis=axis)
    return _from_complex(xp, y, x.dtype)


def _onesided(y, axis):
    index = [slice(None)] * y.ndim
    index[axis] = slice(0, y.shape[axis] // 2 + 1)
    return y[tuple(index)]


@kernel('DFT', versions=(17, 19))
def dft_17(xp, input, dft_length=None, *, axis=1, inverse=0, onesided=0):
    return _dft(xp, input, dft_length, axis, inverse, onesided)


@kernel('DFT', versions=(20, LATEST))
def dft(xp, input, dft_length=None, axis=None, *, inverse=0, onesided=0):
    axis = -2 if axis is None else int(axis)
    return _dft(xp, input, dft_length, axis, inverse, onesided)


@kernel('STFT', versions=(17, LATEST))
def stft(xp, signal, frame_step, window=None, frame_length=None, *, onesided=1):
    step = int(frame_step)
    if frame_length is not None:
        length = int(frame_length)
    elif window is not None:
        length = window.shape[0]
    else:
        raise ValueError('STFT needs a window or a frame_length')
    n_frames = 1 + (signal.shape[1] - length) // step
    # Gather frames with one fancy index: (frames, length) sample positions.
    positions = (xp.arange(n_frames)[:, None] * step + xp.arange(length)[None, :])
    values, is_real = _to_complex(signal)
    frames = values[:, positions]  # batch, frames, length
    if window is not None:
        frames = frames * window
    if onesided and is_real:
        y = xp.fft.rfft(frames, axis=-1)
    else:
        y = xp.fft.fft(frames, axis=-1)
        if onesided:
            y = _onesided(y, -1)
    return _from_complex(xp, y, signal.dtype)


def _cosine_window(xp, size, periodic, dtype, coefficients):
    """sum_k (-1)^k a_k cos(2 pi k n / N) for n in [0, size), N = size (periodic) or size - 1."""
    size = int(size)
    denominator = max(size if periodic else size - 1, 1)
    phase = xp.arange(size, dtype=numpy.float64) * (2 * math.pi / denominator)
    window = xp.zeros(size, dtype=numpy.float64)
    for k, a in enumerate(coefficients):
        window += (-1) ** k * a * xp.cos(k * phase)
    return window.astype(dtype if dtype is not None else numpy.float32)


@kernel('HannWindow', versions=(17, LATEST))
def hann_window(xp, size, *, output_datatype=None, periodic=1):
    return _cosine_window(xp, size, periodic, output_datatype, (0.5, 0.5))


@kernel('HammingWindow', versions=(17, LATEST))
def hamming_window(xp, size, *, output_datatype=None, periodic=1):
    return _cosine_window(xp, size, periodic, output_datatype, (25 / 46, 21 / 46))


@kernel('BlackmanWindow', versions=(17, LATEST))
def blackman_window(xp, size, *, output_datatype=None, periodic=1):
    return _cosine_window(xp, size, periodic, output_datatype, (0.42, 0.5, 0.08))


@kernel('MelWeightMatrix', versions=(17, LATEST))
def mel_weight_matrix(xp, num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
                      upper_edge_hertz, *, output_datatype=None):
    n_mel, n_fft, rate = int(num_mel_bins), int(dft_length), int(sample_rate)

    def to_mel(hz):
        return 2595.0 * math.log10(1.0 + hz / 700.0)

    # n_mel + 2 band edges spaced by (high - low) / (n_mel + 2) mel: the
    # spacing ONNX's reference and onnxruntime use, so the last edge stops
    # one step short of upper_edge_hertz.
    low = to_mel(float(lower_edge_hertz))
    step = (to_mel(float(upper_edge_hertz)) - low) / (n_mel + 2)
    mels = low + step * xp.arange(n_mel + 2, dtype=numpy.float64)
    hertz = 700.0 * (10.0 ** (mels / 2595.0) - 1.0)
    edges = xp.floor((n_fft + 1) * hertz / rate).astype(numpy.int64)
    lower, center, upper = edges[:-2], edges[1:-1], edges[2:]
    j = xp.arange(n_fft // 2 + 1)[:, None]
    # Triangles peaking at 1 on the center bin; a degenerate rising edge is a
    # single 1 at the center.
    rise = xp.where(center == lower, 1.0, (j - lower) / xp.maximum(center - lower, 1))
    fall = (upper - j) / xp.maximum(upper - center, 1)
    weights = xp.where((j >= lower) & (j <= center), rise,
                       xp.where((j > center) & (j < upper), fall, 0.0))
    return weights.astype(output_datatype if output_datatype is not None else numpy.float32)

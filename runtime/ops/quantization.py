"""Quantization kernels: (De)QuantizeLinear, DynamicQuantizeLinear, the
QLinear* operators and the *Integer operators.

Exotic element types (int4, uint4, int2, float8 variants, float4) arrive as
ml_dtypes dtypes on the arrays or on the ``output_dtype`` attribute; they are
recognised by dtype name so that the runtime needs no import of ml_dtypes.
Integer arithmetic is carried out in float64, which is exact for every
product and sum of 8/16-bit operands these operators see and lets matmul and
the float Conv kernel (connection family) do the work.
"""
import re

import numpy

from .connection import conv
from .registry import LATEST, host_dtype, kernel

# Largest finite value of the float8/float4 types (saturation bound).
_FLOAT_MAX = {
    'float8_e4m3fn': 448.0,
    'float8_e4m3fnuz': 240.0,
    'float8_e5m2': 57344.0,
    'float8_e5m2fnuz': 57344.0,
    'float4_e2m1fn': 6.0,
}

# TensorProto element types the ``precision`` attribute of QuantizeLinear may name.
_PRECISION_DTYPES = {1: numpy.float32, 10: numpy.float16, 11: numpy.float64}


def _int_range(dtype):
    """(min, max) of an integer dtype given by name (int8 ... int2, uint4)."""
    m = re.fullmatch(r'(u?)int(\d+)', numpy.dtype(dtype).name)
    if m is None:
        return None
    bits = int(m.group(2))
    if m.group(1):
        return 0, 2 ** bits - 1
    return -2 ** (bits - 1), 2 ** (bits - 1) - 1


def _as_float(xp, a, dtype=numpy.float64):
    """Values of ``a`` (any numeric or ml_dtypes type) as floats."""
    return xp.asarray(a).astype(dtype)


def _normalize_axis(axis, ndim):
    return axis + ndim if axis < 0 else axis


def _broadcastable(xp, param, shape, axis, block_size):
    """Reshape a scale/zero-point for elementwise use against ``shape``:
    per-tensor (scalar), per-axis (1-D along ``axis``) or blocked (same rank,
    each entry repeated ``block_size`` times along ``axis``)."""
    if param.ndim == 0 or (param.size == 1 and block_size == 0):
        return param.reshape(())
    axis = _normalize_axis(axis, len(shape))
    if block_size > 0:
        rep = xp.repeat(param, block_size, axis=axis)
        index = [slice(None)] * len(shape)
        index[axis] = slice(0, shape[axis])
        return rep[tuple(index)]
    if param.ndim != 1 or param.shape[0] != shape[axis]:
        raise ValueError('per-axis scale of shape %s does not match axis %d of input shape %s'
                         % (param.shape, axis, shape))
    target = [1] * len(shape)
    target[axis] = shape[axis]
    return param.reshape(target)


def _saturate_cast(xp, values, dtype, saturate=1):
    """Cast float ``values`` to ``dtype``: integers are rounded half-to-even
    and clipped; float8/float4 are clipped to the largest finite value when
    ``saturate`` (NaN stays NaN), otherwise left to the cast's overflow rule."""
    dtype = numpy.dtype(dtype)
    bounds = _int_range(dtype)
    if bounds is not None:
        return xp.clip(xp.rint(values), bounds[0], bounds[1]).astype(dtype)
    bound = _FLOAT_MAX.get(dtype.name)
    if bound is not None and saturate:
        values = xp.clip(values, -bound, bound)
    return values.astype(dtype)


def _quantize(xp, x, scale, zero_point, dtype, *, axis=1, block_size=0, saturate=1,
              compute_dtype=None):
    compute_dtype = compute_dtype or scale.dtype
    scale = _broadcastable(xp, scale.astype(compute_dtype), x.shape, axis, block_size)
    y = xp.asarray(x).astype(compute_dtype) / scale
    if _int_range(dtype) is not None:
        # Round before adding the zero point, as the operator defines it.
        y = xp.rint(y).astype(numpy.float64)
    if zero_point is not None:
        y = y + _broadcastable(xp, _as_float(xp, zero_point), x.shape, axis, block_size)
    return _saturate_cast(xp, y, dtype, saturate)


@kernel('QuantizeLinear', versions=(10, LATEST), host_only=host_dtype('output_dtype'))
def quantize_linear(xp, x, y_scale, y_zero_point=None, *, axis=1, block_size=0,
                    output_dtype=None, saturate=1, precision=0):
    if output_dtype is not None:
        dtype = output_dtype
    elif y_zero_point is not None:
        dtype = y_zero_point.dtype
    else:
        dtype = numpy.uint8
    if precision:
        if precision not in _PRECISION_DTYPES:
            raise ValueError('QuantizeLinear: precision=%d is not supported (float16, float32 '
                             'and float64 are)' % precision)
        compute = numpy.dtype(_PRECISION_DTYPES[precision])
    else:
        compute = y_scale.dtype
    return _quantize(xp, x, y_scale, y_zero_point, dtype, axis=axis, block_size=block_size,
                     saturate=saturate, compute_dtype=compute)


@kernel('DequantizeLinear', versions=(10, LATEST))
def dequantize_linear(xp, x, x_scale, x_zero_point=None, *, axis=1, block_size=0,
                      output_dtype=None):
    dtype = numpy.dtype(output_dtype) if output_dtype is not None else x_scale.dtype
    diff = _as_float(xp, x)
    if x_zero_point is not None:
        diff = diff - _broadcastable(xp, _as_float(xp, x_zero_point), x.shape, axis, block_size)
    scale = _broadcastable(xp, x_scale.astype(dtype), x.shape, axis, block_size)
    return diff.astype(dtype) * scale


@kernel('DynamicQuantizeLinear', versions=(11, LATEST))
def dynamic_quantize_linear(xp, x):
    # The range always includes 0 so that 0 is exactly representable.
    x = x.astype(numpy.float32)
    lo = xp.minimum(x.min(), 0) if x.size else xp.zeros((), numpy.float32)
    hi = xp.maximum(x.max(), 0) if x.size else xp.zeros((), numpy.float32)
    scale = ((hi - lo) / numpy.float32(255)).astype(numpy.float32)
    safe = xp.where(scale == 0, numpy.float32(1), scale)
    zero_point = _saturate_cast(xp, -lo / safe, numpy.uint8)
    y = _quantize(xp, x, safe, zero_point, numpy.uint8)
    return y, scale.reshape(()), zero_point.reshape(())


def _centered(xp, a, zero_point, shape, axis):
    """``a - zero_point`` in float64, the zero point per-tensor or along ``axis``."""
    a = _as_float(xp, a)
    if zero_point is None:
        return a
    return a - _broadcastable(xp, _as_float(xp, zero_point), shape, axis, 0)


def _matmul_integer(xp, a, a_zero_point, b, b_zero_point):
    """(a - a_zp) @ (b - b_zp) in float64; a's zero point may be per row
    (axis -2 of a), b's per column (axis -1 of b)."""
    a = _centered(xp, a, a_zero_point, a.shape, a.ndim - 2 if a.ndim > 1 else 0)
    b = _centered(xp, b, b_zero_point, b.shape, b.ndim - 1)
    return xp.matmul(a, b)


@kernel('MatMulInteger', versions=(10, LATEST))
def matmul_integer(xp, a, b, a_zero_point=None, b_zero_point=None):
    return _matmul_integer(xp, a, a_zero_point, b, b_zero_point).astype(numpy.int32)


@kernel('QLinearMatMul', versions=(10, LATEST))
def qlinear_matmul(xp, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale,
                   y_zero_point):
    acc = _matmul_integer(xp, a, a_zero_point, b, b_zero_point)
    a_s = _broadcastable(xp, _as_float(xp, a_scale), a.shape, a.ndim - 2 if a.ndim > 1 else 0, 0)
    b_s = _broadcastable(xp, _as_float(xp, b_scale), b.shape, b.ndim - 1, 0)
    real = acc * a_s * b_s
    return _quantize(xp, real, xp.asarray(y_scale), y_zero_point, y_zero_point.dtype,
                     axis=-1, compute_dtype=numpy.float64)


@kernel('ConvInteger', versions=(10, LATEST))
def conv_integer(xp, x, w, x_zero_point=None, w_zero_point=None, *, auto_pad='NOTSET',
                 dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    xc = _centered(xp, x, x_zero_point, x.shape, 1)
    wc = _centered(xp, w, w_zero_point, w.shape, 0)
    y = conv(xp, xc, wc, auto_pad=auto_pad, dilations=dilations, group=group,
             kernel_shape=kernel_shape, pads=pads, strides=strides)
    return y.astype(numpy.int32)


@kernel('QLinearConv', versions=(10, LATEST))
def qlinear_conv(xp, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
                 y_zero_point, B=None, *, auto_pad='NOTSET', dilations=None, group=1,
                 kernel_shape=None, pads=None, strides=None):
    xc = _centered(xp, x, x_zero_point, x.shape, 1)
    wc = _centered(xp, w, w_zero_point, w.shape, 0)
    acc = conv(xp, xc, wc, auto_pad=auto_pad, dilations=dilations, group=group,
               kernel_shape=kernel_shape, pads=pads, strides=strides)
    out_shape = (1, acc.shape[1]) + (1,) * (acc.ndim - 2)
    if B is not None:
        acc = acc + _as_float(xp, B).reshape(out_shape)
    w_s = _as_float(xp, w_scale)
    if w_s.size > 1:
        w_s = w_s.reshape(out_shape)
    real = acc * _as_float(xp, x_scale).reshape(()) * w_s
    return _quantize(xp, real, xp.asarray(y_scale), y_zero_point, y_zero_point.dtype,
                     compute_dtype=numpy.float64)

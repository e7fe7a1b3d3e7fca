"""Array kernels: shape manipulation, indexing, data movement and casts.

Shape-like inputs (``shape``, ``axes``, ``pads``, ``starts``...) are small
integer tensors; they are read on the host with ``.tolist()``, which works for
NumPy and CuPy alike.  String tensors are NumPy object arrays and stay NumPy.
"""
import math

import numpy

from .opset_rules import axes_input_since
from .registry import LATEST, host_dtype, kernel, per_element

_INT64 = numpy.int64


# -- helpers ---------------------------------------------------------------
def _ints(values):
    """A shape-like tensor (or list, or None) as a list of Python ints."""
    if values is None:
        return None
    if hasattr(values, 'tolist'):
        values = values.tolist()
    if not isinstance(values, list):
        values = [values]
    return [int(v) for v in values]


def _scalar(value):
    """A one-element tensor as a Python scalar."""
    return value.reshape(()).tolist() if hasattr(value, 'reshape') else value


def _axis(axis, ndim):
    return axis + ndim if axis < 0 else axis


def _module(xp, *arrays):
    """The array module for ``arrays``: NumPy when any holds strings."""
    return numpy if any(a.dtype == object for a in arrays) else xp


def _on(xp, array):
    """``array`` on the backend; string (object) arrays stay NumPy."""
    array = numpy.asarray(array)
    return _module(xp, array).asarray(array)


def _shape_tensor(xp, dims):
    return xp.asarray(numpy.asarray(dims, dtype=_INT64))


def _wrap_indices(xp, indices, dim):
    """ONNX indices may be negative (counted from the end); one below -dim
    stays as it is, out of range, for the indexing to refuse (wrapped, -dim-1
    would read the last element)."""
    return xp.where((indices < 0) & (indices >= -dim), indices + dim, indices)


# -- constants and shapes --------------------------------------------------

#: The cost of what the VM does without copying (a view or the array
#: itself): nothing (Reshape, Flatten: 0.1 to 0.3 units per element measured,
#: benchmarks/op_costs.py; runtime/ops/registry.py tells the units).
NO_COPY = per_element(0)


@kernel('Identity', cost=NO_COPY, view_of=0, samples='elementwise')
def identity(xp, x):
    return x


@kernel('Constant', gradient=False, host_only=lambda a: host_dtype('value')(a) or any(
    name in a for name in ('value_string', 'value_strings')))
def constant(xp, *, value=None, value_float=None, value_floats=None, value_int=None,
             value_ints=None, value_string=None, value_strings=None):
    if value is not None:
        return _on(xp, value)
    if value_float is not None:
        return _on(xp, numpy.float32(value_float))
    if value_floats is not None:
        return _on(xp, numpy.asarray(value_floats, dtype=numpy.float32))
    if value_int is not None:
        return _on(xp, _INT64(value_int))
    if value_ints is not None:
        return _on(xp, numpy.asarray(value_ints, dtype=_INT64))
    if value_string is not None:
        return numpy.asarray(value_string, dtype=object)
    if value_strings is not None:
        return numpy.asarray(value_strings, dtype=object)
    raise ValueError('Constant needs one of the value attributes')


@kernel('ConstantOfShape', versions=(9, LATEST), gradient=False, host_only=host_dtype('value'))
def constant_of_shape(xp, shape, *, value=None):
    if value is None:
        value = numpy.zeros((), dtype=numpy.float32)
    value = numpy.asarray(value)
    return xp.full(_ints(shape), _scalar(value), dtype=value.dtype)


@kernel('Shape', gradient=False)
def shape(xp, x, *, start=0, end=None):
    return _shape_tensor(xp, x.shape[start:end])


@kernel('Size', gradient=False)
def size(xp, x):
    return _shape_tensor(xp, x.size)


def _reshape(x, dims, allowzero):
    dims = list(dims)
    if not allowzero:
        dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    return x.reshape(dims)


@kernel('Reshape', versions=(1, 4), cost=NO_COPY, view_of=0)
def reshape_v1(xp, data, *, shape=(), consumed_inputs=None):
    return _reshape(data, shape, 0)


@kernel('Reshape', versions=(5, LATEST), samples='per_sample', shape_input=1)
def reshape(xp, data, shape, *, allowzero=0):
    return _reshape(data, _ints(shape), allowzero)


@kernel('Flatten', cost=NO_COPY, view_of=0, samples='per_sample')
def flatten(xp, x, *, axis=1):
    axis = _axis(axis, x.ndim)
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


@kernel('Transpose')
def transpose(xp, x, *, perm=None):
    return xp.transpose(x, perm)


def _squeeze(xp, x, axes):
    if axes is None:
        return x.reshape([d for d in x.shape if d != 1])
    axes = {_axis(a, x.ndim) for a in axes}
    if any(x.shape[a] != 1 for a in axes):
        raise ValueError('Squeeze: axes %s of shape %s are not all 1' % (sorted(axes), x.shape))
    return x.reshape([d for i, d in enumerate(x.shape) if i not in axes])


def _unsqueeze(xp, x, axes):
    ndim = x.ndim + len(axes)
    axes = {_axis(a, ndim) for a in axes}
    dims = iter(x.shape)
    return x.reshape([1 if i in axes else next(dims) for i in range(ndim)])


# One kernel for the axes attribute, one for the axes input (axes_input_since).
@kernel('Squeeze', versions=(1, axes_input_since('Squeeze') - 1), cost=NO_COPY,
        view_of=0)
def squeeze_v1(xp, data, *, axes=None):
    return _squeeze(xp, data, axes)


@kernel('Squeeze', versions=(axes_input_since('Squeeze'), LATEST), samples='per_sample')
def squeeze(xp, data, axes=None):
    return _squeeze(xp, data, _ints(axes))


@kernel('Unsqueeze', versions=(1, axes_input_since('Unsqueeze') - 1), cost=NO_COPY,
        view_of=0)
def unsqueeze_v1(xp, data, *, axes):
    return _unsqueeze(xp, data, axes)


@kernel('Unsqueeze', versions=(axes_input_since('Unsqueeze'), LATEST), samples='per_sample')
def unsqueeze(xp, data, axes):
    return _unsqueeze(xp, data, _ints(axes))


@kernel('Concat', samples='along_axis')
def concat(xp, *inputs, axis=1):
    return _module(xp, *inputs).concatenate(inputs, axis=axis)


# -- Split -----------------------------------------------------------------
def _split(x, axis, sizes, n):
    """Split along ``axis`` into ``sizes`` or into ``n`` parts of
    ceil(dim / n) elements (the last one possibly shorter)."""
    axis = _axis(axis, x.ndim)
    dim = x.shape[axis]
    if sizes is None:
        chunk = -(-dim // n)
        sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(n)]
    if sum(sizes) != dim:
        raise ValueError('Split: sizes %s do not add up to %d' % (sizes, dim))
    index = [slice(None)] * x.ndim
    parts, begin = [], 0
    for s in sizes:
        index[axis] = slice(begin, begin + s)
        parts.append(x[tuple(index)])
        begin += s
    return tuple(parts)


@kernel('Split', versions=(1, 1))
def split_v1(xp, x, split_input=None, *, axis=0, split=None, n_outputs):
    sizes = _ints(split_input) if split_input is not None else split
    return _split(x, axis, sizes, n_outputs)


@kernel('Split', versions=(2, 12))
def split_v2(xp, x, *, axis=0, split=None, n_outputs):
    return _split(x, axis, split, n_outputs)


@kernel('Split', versions=(13, 17))
def split_v13(xp, x, split=None, *, axis=0, n_outputs):
    return _split(x, axis, _ints(split), n_outputs)


@kernel('Split', versions=(18, LATEST), samples='along_axis')
def split(xp, x, split=None, *, axis=0, num_outputs=None, n_outputs):
    return _split(x, axis, _ints(split), num_outputs or n_outputs)


# -- Slice -----------------------------------------------------------------
def _slice(x, starts, ends, axes, steps):
    if axes is None:
        axes = range(len(starts))
    if steps is None:
        steps = [1] * len(starts)
    index = [slice(None)] * x.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = _axis(axis, x.ndim)
        dim = x.shape[axis]
        if step == 0:
            raise ValueError('Slice: step cannot be 0')
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            # Python reads an end of -1 as "the last element"; ONNX means
            # "one before the first", which Python spells None.
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
            end = None if end < 0 else end
        index[axis] = slice(start, end, step)
    return x[tuple(index)]


@kernel('Slice', versions=(1, 9))
def slice_v1(xp, data, *, starts, ends, axes=None):
    return _slice(data, starts, ends, axes, None)


@kernel('Slice', versions=(10, LATEST))
def slice_(xp, data, starts, ends, axes=None, steps=None):
    return _slice(data, _ints(starts), _ints(ends), _ints(axes), _ints(steps))


# -- gathers and scatters --------------------------------------------------
@kernel('Gather')
def gather(xp, data, indices, *, axis=0):
    axis = _axis(axis, data.ndim)
    module = _module(xp, data)
    indices = _wrap_indices(module, indices, data.shape[axis])
    return module.take(data, indices, axis=axis)


@kernel('GatherElements', versions=(11, LATEST))
def gather_elements(xp, data, indices, *, axis=0):
    axis = _axis(axis, data.ndim)
    return xp.take_along_axis(data, _wrap_indices(xp, indices, data.shape[axis]), axis=axis)


@kernel('GatherND', versions=(11, LATEST))
def gather_nd(xp, data, indices, *, batch_dims=0):
    batch_shape = data.shape[:batch_dims]
    depth = indices.shape[-1]
    n_batch = math.prod(batch_shape)
    flat_data = data.reshape((n_batch,) + data.shape[batch_dims:])
    flat_idx = indices.reshape(n_batch, -1, depth)
    dims = xp.asarray(numpy.asarray(data.shape[batch_dims:batch_dims + depth], dtype=_INT64))
    flat_idx = _wrap_indices(xp, flat_idx, dims)
    batch = xp.arange(n_batch)[:, None]
    gathered = flat_data[(batch,) + tuple(flat_idx[..., i] for i in range(depth))]
    return gathered.reshape(indices.shape[:-1] + data.shape[batch_dims + depth:])


_REDUCTIONS = {'add': 'add', 'mul': 'multiply', 'max': 'maximum', 'min': 'minimum'}


def _multiplying(attributes):
    # CuPy has no multiply.at (a product over duplicate targets): such nodes
    # run on the host, a rare operator on small data.
    return attributes.get('reduction') == 'mul'


def _scatter(xp, data, index, updates, reduction):
    """Copy of ``data`` with ``updates`` written (or reduced) at ``index``."""
    out = data.copy()
    if reduction == 'none':
        out[index] = updates
    else:
        getattr(xp, _REDUCTIONS[reduction]).at(out, index, updates)
    return out


@kernel('ScatterElements', versions=(11, LATEST), host_only=_multiplying)
def scatter_elements(xp, data, indices, updates, *, axis=0, reduction='none'):
    axis = _axis(axis, data.ndim)
    indices = _wrap_indices(xp, indices, data.shape[axis])
    # An open grid: element i of each axis, except ``indices`` along ``axis``.
    index = [xp.arange(n).reshape((n,) + (1,) * (indices.ndim - i - 1))
             for i, n in enumerate(indices.shape)]
    index[axis] = indices
    return _scatter(xp, data, tuple(index), updates, reduction)


@kernel('Scatter', versions=(9, LATEST))
def scatter(xp, data, indices, updates, *, axis=0):
    return scatter_elements(xp, data, indices, updates, axis=axis)


@kernel('ScatterND', versions=(11, LATEST), host_only=_multiplying)
def scatter_nd(xp, data, indices, updates, *, reduction='none'):
    depth = indices.shape[-1]
    dims = xp.asarray(numpy.asarray(data.shape[:depth], dtype=_INT64))
    indices = _wrap_indices(xp, indices, dims)
    index = tuple(indices[..., i] for i in range(depth))
    return _scatter(xp, data, index, updates, reduction)


@kernel('TensorScatter', versions=(24, LATEST))
def tensor_scatter(xp, past_cache, update, write_indices=None, *, mode='linear', axis=-2):
    axis = _axis(axis, past_cache.ndim)
    batch, max_len, seq_len = past_cache.shape[0], past_cache.shape[axis], update.shape[axis]
    if write_indices is None:
        write_indices = xp.zeros(batch, dtype=_INT64)
    positions = write_indices.reshape(-1, 1).astype(_INT64) + xp.arange(seq_len)
    if mode == 'circular':
        positions = positions % max_len
    out = past_cache.copy()
    # Batch first, sequence second; the view writes through to ``out``.
    view = xp.moveaxis(out, axis, 1)
    view[xp.arange(batch)[:, None], positions] = xp.moveaxis(update, axis, 1)
    return out


# -- padding, broadcasting, tiling -----------------------------------------
_PAD_MODES = {'constant': 'constant', 'reflect': 'reflect', 'edge': 'edge', 'wrap': 'wrap'}


def _pad(xp, x, pads, mode, value):
    """``pads`` = [begin_0, ..., begin_n, end_0, ..., end_n]; negative pads crop."""
    ndim = x.ndim
    begins, ends = pads[:ndim], pads[ndim:]
    crop = tuple(slice(max(-b, 0), x.shape[i] - max(-e, 0))
                 for i, (b, e) in enumerate(zip(begins, ends)))
    x = x[crop]
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(begins, ends)]
    if not any(b or e for b, e in widths):
        return x
    module = _module(xp, x)
    if mode == 'constant':
        return module.pad(x, widths, mode='constant', constant_values=value)
    return module.pad(x, widths, mode=_PAD_MODES[mode])


@kernel('Pad', versions=(1, 1))
def pad_v1(xp, data, *, paddings, mode='constant', value=0.0):
    return _pad(xp, data, paddings, mode, value)


@kernel('Pad', versions=(2, 10))
def pad_v2(xp, data, *, pads, mode='constant', value=0.0):
    return _pad(xp, data, pads, mode, value)


@kernel('Pad', versions=(11, LATEST))
def pad(xp, data, pads, constant_value=None, axes=None, *, mode='constant'):
    pads = _ints(pads)
    if axes is not None:
        axes = [_axis(a, data.ndim) for a in _ints(axes)]
        full = [0] * (2 * data.ndim)
        for i, a in enumerate(axes):
            full[a], full[a + data.ndim] = pads[i], pads[i + len(axes)]
        pads = full
    value = 0 if constant_value is None else _scalar(constant_value)
    return _pad(xp, data, pads, mode, value)


@kernel('Expand', versions=(8, LATEST), samples='per_sample', shape_input=1)
def expand(xp, x, shape):
    target = numpy.broadcast_shapes(x.shape, tuple(_ints(shape)))
    return _module(xp, x).broadcast_to(x, target).copy()


@kernel('Tile', versions=(1, 5))
def tile_v1(xp, x, tiles, axis):
    reps = [1] * x.ndim
    reps[_axis(_scalar(axis), x.ndim)] = _scalar(tiles)
    return _module(xp, x).tile(x, reps)


@kernel('Tile', versions=(6, LATEST), samples='per_sample', shape_input=1)
def tile(xp, x, repeats):
    return _module(xp, x).tile(x, _ints(repeats))


@kernel('Where', versions=(9, LATEST), samples='elementwise')
def where(xp, condition, x, y):
    return _module(xp, x, y).where(condition, x, y)


@kernel('CenterCropPad', versions=(18, LATEST))
def center_crop_pad(xp, input_data, shape, *, axes=None):
    ndim = input_data.ndim
    axes = range(ndim) if axes is None else [_axis(a, ndim) for a in axes]
    pads = [0] * (2 * ndim)
    for axis, target in zip(axes, _ints(shape)):
        diff = target - input_data.shape[axis]
        # Crops start rounded down; an odd pad puts the extra element last.
        begin = diff // 2 if diff >= 0 else -((-diff) // 2)
        pads[axis], pads[axis + ndim] = begin, diff - begin
    return _pad(xp, input_data, pads, 'constant', 0)


# -- casts -----------------------------------------------------------------
_CAST_V1_TYPES = {
    'FLOAT': numpy.float32, 'DOUBLE': numpy.float64, 'FLOAT16': numpy.float16,
    'INT8': numpy.int8, 'INT16': numpy.int16, 'INT32': numpy.int32, 'INT64': numpy.int64,
    'UINT8': numpy.uint8, 'UINT16': numpy.uint16, 'UINT32': numpy.uint32,
    'UINT64': numpy.uint64, 'BOOL': numpy.bool_, 'STRING': object,
}


def _float8_max(dtype):
    """Largest finite value of a float8 dtype, found by decoding all 256
    bit patterns (the runtime cannot import ml_dtypes for its finfo)."""
    values = numpy.arange(256, dtype=numpy.uint8).view(dtype).astype(numpy.float32)
    return float(numpy.nanmax(numpy.where(numpy.isfinite(values), values, numpy.nan)))


def _to_e8m0(x, saturate, round_mode):
    """float -> float8_e8m0fnu (a bare biased exponent) with ONNX rounding."""
    bits = numpy.asarray(x, dtype=numpy.float32).view(numpy.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(numpy.int32)
    mantissa = bits & 0x7FFFFF
    special = exponent == 0xFF
    if round_mode == 'up':
        exponent += mantissa != 0
    elif round_mode == 'nearest':
        exponent += mantissa >= 0x400000
    overflow = (exponent > 254) | (special & (mantissa == 0))
    exponent = numpy.where(overflow, 254 if saturate else 255, exponent)
    exponent = numpy.where(special & (mantissa != 0), 255, exponent)
    return exponent.astype(numpy.uint8)


def _cast(xp, x, to, saturate=1, round_mode='up'):
    if to is None:
        raise ValueError('Cast: the target type has no NumPy dtype')
    to = numpy.dtype(to)
    if x.dtype == to:
        return x
    if (to.isbuiltin == 1 and x.dtype.isbuiltin == 1
            and to.kind in 'biuf' and x.dtype.kind in 'biuf'):
        return x.astype(to)  # plain NumPy numbers (ml_dtypes' floats are user-defined: 2)
    if to.kind == 'O':
        return numpy.asarray(x).astype(str).astype(object)
    if x.dtype == object:
        try:
            return numpy.asarray(x.astype(to))
        except ValueError:  # "100.5" -> int: through float, as ONNX allows
            return x.astype(numpy.float64).astype(to)
    if to.name == 'float8_e8m0fnu':
        return _to_e8m0(x, saturate, round_mode).view(to)
    if to.name.startswith('float8') and saturate and x.dtype.itemsize > 1:
        limit = _float8_max(to)
        x = x.astype(numpy.float32)
        x = xp.where(xp.isnan(x), x, xp.clip(x, -limit, limit))
    return x.astype(to)


@kernel('Cast', versions=(1, 5), view_of=0, samples='elementwise')
def cast_v1(xp, input, *, to):
    return _cast(xp, input, _CAST_V1_TYPES[to])


@kernel('Cast', versions=(6, LATEST), host_only=host_dtype('to'))
def cast(xp, input, *, to, saturate=1, round_mode='up'):
    return _cast(xp, input, to, saturate, round_mode)


@kernel('CastLike', versions=(15, LATEST), view_of=0, samples='elementwise')
def cast_like(xp, input, target_type, *, saturate=1, round_mode='up'):
    return _cast(xp, input, target_type.dtype, saturate, round_mode)


@kernel('BitCast', versions=(26, LATEST), gradient=False, host_only=host_dtype('to'))
def bit_cast(xp, input, *, to):
    return input.view(to)


# -- generators ------------------------------------------------------------
@kernel('Range', versions=(11, LATEST), gradient=False)
def range_(xp, start, limit, delta, *, stash_type=1):
    dtype = start.dtype
    start, limit, delta = _scalar(start), _scalar(limit), _scalar(delta)
    if dtype.kind in 'iu':
        count = max(-(-(limit - start) // delta), 0)
        return xp.arange(count, dtype=dtype) * dtype.type(delta) + dtype.type(start)
    count = max(math.ceil((limit - start) / delta), 0)
    # Half-precision types accumulate in float32 when stash_type is FLOAT (1).
    work = numpy.dtype(numpy.float32 if dtype.itemsize == 2 and stash_type == 1 else dtype)
    steps = xp.arange(count, dtype=work) * work.type(delta) + work.type(start)
    return steps.astype(dtype)


@kernel('EyeLike', versions=(9, LATEST), gradient=False, host_only=host_dtype('dtype'))
def eye_like(xp, input, *, dtype=None, k=0):
    rows, cols = input.shape
    return xp.eye(rows, cols, k, dtype=input.dtype if dtype is None else dtype)


@kernel('OneHot', versions=(9, LATEST), gradient=False)
def one_hot(xp, indices, depth, values, *, axis=-1):
    depth = int(_scalar(depth))
    axis = _axis(axis, indices.ndim + 1)
    indices = indices.astype(_INT64)
    indices = xp.expand_dims(xp.where(indices < 0, indices + depth, indices), axis)
    positions = xp.arange(depth).reshape((depth,) + (1,) * (indices.ndim - axis - 1))
    return xp.where(indices == positions, values[1], values[0])


@kernel('Trilu', versions=(14, LATEST))
def trilu(xp, input, k=None, *, upper=1):
    k = 0 if k is None else int(_scalar(k))
    return xp.triu(input, k) if upper else xp.tril(input, k)


# -- block rearrangements --------------------------------------------------
@kernel('DepthToSpace')
def depth_to_space(xp, input, *, blocksize, mode='DCR'):
    n, c, h, w = input.shape
    b = blocksize
    if mode == 'DCR':
        y = input.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = input.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


@kernel('SpaceToDepth')
def space_to_depth(xp, input, *, blocksize):
    n, c, h, w = input.shape
    b = blocksize
    y = input.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


# -- selections ------------------------------------------------------------
@kernel('Compress', versions=(9, LATEST))
def compress(xp, input, condition, *, axis=None):
    if axis is None:
        input, axis = input.reshape(-1), 0
    selected = xp.nonzero(condition.reshape(-1))[0]
    return xp.take(input, selected, axis=axis)


@kernel('NonZero', versions=(9, LATEST), gradient=False)
def non_zero(xp, x):
    if x.ndim == 0:
        return xp.zeros((0, int(bool(x))), dtype=_INT64)
    return xp.stack(xp.nonzero(x)).astype(_INT64).reshape(x.ndim, -1)


@kernel('Unique', versions=(11, LATEST), gradient=False)
def unique(xp, x, *, axis=None, sorted=1):
    module = _module(xp, x)
    data = x.reshape(-1) if axis is None else x
    axis = 0 if axis is None else _axis(axis, x.ndim)
    y, first, inverse, counts = module.unique(
        data, return_index=True, return_inverse=True, return_counts=True, axis=axis)
    inverse = inverse.reshape(-1)
    if not sorted:
        # Reorder from ascending to order of first occurrence.
        order = module.argsort(first, kind='stable')
        rank = module.argsort(order)
        y, first, counts, inverse = module.take(y, order, axis=axis), first[order], \
            counts[order], rank[inverse]
    return y, first.astype(_INT64), inverse.astype(_INT64), counts.astype(_INT64)


def _top_k(xp, x, k, axis, largest):
    axis = _axis(axis, x.ndim)
    n = x.shape[axis]
    if largest:
        # Stable ascending sort of the reversed axis, read backwards, gives
        # descending values with ties in ascending index order.
        order = xp.flip(xp.argsort(xp.flip(x, axis), axis=axis, kind='stable'), axis)
        order = (n - 1) - order
    else:
        order = xp.argsort(x, axis=axis, kind='stable')
    order = order[(slice(None),) * axis + (slice(0, k),)]
    return xp.take_along_axis(x, order, axis=axis), order.astype(_INT64)


@kernel('TopK', versions=(1, 9))
def top_k_v1(xp, x, *, k, axis=-1):
    return _top_k(xp, x, k, axis, True)


@kernel('TopK', versions=(10, LATEST))
def top_k(xp, x, k, *, axis=-1, largest=1, sorted=1):
    return _top_k(xp, x, int(_scalar(k)), axis, largest)


@kernel('ReverseSequence', versions=(10, LATEST))
def reverse_sequence(xp, input, sequence_lens, *, batch_axis=1, time_axis=0):
    steps, batch = input.shape[time_axis], input.shape[batch_axis]
    t = xp.arange(steps)[:, None]
    lens = sequence_lens.astype(_INT64)[None, :]
    source = xp.where(t < lens, lens - 1 - t, t)  # (time, batch)
    if batch_axis < time_axis:
        source = source.T
    shape = [1] * input.ndim
    shape[time_axis], shape[batch_axis] = steps, batch
    source = xp.broadcast_to(source.reshape(shape), input.shape)
    return xp.take_along_axis(input, source, axis=time_axis)


# -- Resize and Upsample ---------------------------------------------------
# Every Resize mode is separable: the output is computed one axis at a time,
# each axis through a gather (nearest) or a small (in, out) weight matrix.

def _source_coordinates(transform, out_len, in_len, scale, roi):
    """Where output positions 0..out_len-1 fall in the input (float64)."""
    x = numpy.arange(out_len, dtype=numpy.float64)
    if transform in ('half_pixel', 'pytorch_half_pixel'):
        if transform == 'pytorch_half_pixel' and out_len <= 1:
            return numpy.zeros_like(x)
        return (x + 0.5) / scale - 0.5
    if transform == 'half_pixel_symmetric':
        adjustment = out_len / (in_len * scale)
        return in_len / 2 * (1 - adjustment) + (x + 0.5) / scale - 0.5
    if transform == 'align_corners':
        # The spec's length_resized is in_len * scale, fractional with scales.
        resized = in_len * scale
        return x * (in_len - 1) / (resized - 1) if resized > 1 else numpy.zeros_like(x)
    if transform == 'asymmetric':
        return x / scale
    if transform == 'tf_half_pixel_for_nn':
        return (x + 0.5) / scale
    if transform == 'tf_crop_and_resize':
        start, end = roi
        if out_len > 1:
            return start * (in_len - 1) + x * (end - start) * (in_len - 1) / (out_len - 1)
        return numpy.full_like(x, 0.5 * (start + end) * (in_len - 1))
    raise ValueError('Resize: unknown coordinate_transformation_mode %r' % transform)


def _nearest_indices(coords, nearest_mode, in_len):
    if nearest_mode == 'round_prefer_floor':
        index = numpy.ceil(coords - 0.5)
    elif nearest_mode == 'round_prefer_ceil':
        index = numpy.floor(coords + 0.5)
    elif nearest_mode == 'floor':
        index = numpy.floor(coords)
    elif nearest_mode == 'ceil':
        index = numpy.ceil(coords)
    else:
        raise ValueError('Resize: unknown nearest_mode %r' % nearest_mode)
    return numpy.clip(index, 0, in_len - 1).astype(_INT64)


def _cubic_kernel(a):
    def weight(t):
        t = numpy.abs(t)
        near = ((a + 2) * t - (a + 3)) * t * t + 1
        far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
        return numpy.where(t <= 1, near, numpy.where(t < 2, far, 0.0))
    return weight


def _interpolation_matrix(coords, in_len, scale, mode, cubic_coeff_a, exclude_outside,
                          antialias):
    """(in_len, out_len) matrix of linear or cubic interpolation weights."""
    if mode == 'linear':
        radius, kernel_fn = 1, lambda t: numpy.maximum(0.0, 1 - numpy.abs(t))
    else:
        radius, kernel_fn = 2, _cubic_kernel(cubic_coeff_a)
    # Antialiasing stretches the filter by 1/scale when downscaling.
    stretch = 1.0 / scale if antialias and scale < 1 else 1.0
    support = radius * stretch
    taps = numpy.arange(-math.ceil(support), math.ceil(support) + 2)
    base = numpy.floor(coords)[:, None]
    positions = base + taps  # (out, taps)
    weights = kernel_fn((positions - coords[:, None]) / stretch)
    if exclude_outside:
        inside = (positions >= 0) & (positions <= in_len - 1)
        weights = numpy.where(inside, weights, 0.0)
    total = weights.sum(axis=1, keepdims=True)
    weights = weights / numpy.where(total == 0, 1, total)
    matrix = numpy.zeros((in_len, len(coords)))
    columns = numpy.broadcast_to(numpy.arange(len(coords))[:, None], positions.shape)
    # Taps outside the input read the edge element.
    rows = numpy.clip(positions, 0, in_len - 1).astype(_INT64)
    numpy.add.at(matrix, (rows, columns), weights)
    return matrix


def resize_axes(in_shape, out_shape, scales, roi, mode, transform, nearest_mode,
                cubic_coeff_a=-0.75, exclude_outside=0, antialias=0):
    """Resize one axis at a time: for each axis it changes, in order,
    (axis, source, out_of_range): ``source`` the input index each output
    reads (mode 'nearest') or the (in_len, out_len) matrix the axis is
    multiplied by; ``out_of_range`` (tf_crop_and_resize only, else None) the
    outputs whose source lies outside the input.  The VM's kernel and the
    native lowering's tables both come from here."""
    for axis, (in_len, out_len, scale) in enumerate(zip(in_shape, out_shape, scales)):
        if in_len == out_len and scale == 1 and transform != 'tf_crop_and_resize':
            continue
        coords = _source_coordinates(transform, out_len, in_len, scale,
                                     roi[axis] if roi is not None else None)
        if mode == 'nearest':
            rounding = nearest_mode(scale) if callable(nearest_mode) else nearest_mode
            source = _nearest_indices(coords, rounding, in_len)
        else:
            source = _interpolation_matrix(coords, in_len, scale, mode, cubic_coeff_a,
                                           exclude_outside, antialias)
        yield axis, source, ((coords < 0) | (coords > in_len - 1)
                             if transform == 'tf_crop_and_resize' else None)


def _resize(xp, x, out_shape, scales, *, mode='nearest', transform='half_pixel',
            nearest_mode='round_prefer_floor', cubic_coeff_a=-0.75, exclude_outside=0,
            extrapolation_value=0.0, antialias=0, roi=None):
    """Resize ``x`` to ``out_shape``; ``scales[d]`` is what the coordinate
    transform divides by and ``roi[d]`` the (start, end) crop of axis d."""
    is_float = x.dtype.kind == 'f' or x.dtype.itemsize == 2 and x.dtype.kind == 'V'
    work = x.dtype if x.dtype.kind == 'f' and x.dtype.itemsize >= 4 else numpy.float32
    y = x if mode == 'nearest' else x.astype(work)
    outside = None
    for axis, source, out_of_range in resize_axes(
            x.shape, out_shape, scales, roi, mode, transform, nearest_mode, cubic_coeff_a,
            exclude_outside, antialias):
        if mode == 'nearest':
            y = xp.take(y, xp.asarray(source), axis=axis)
        else:
            moved = xp.moveaxis(y, axis, -1)
            y = xp.moveaxis(xp.matmul(moved, xp.asarray(source, dtype=work)), -1, axis)
        if out_of_range is not None:
            shape = [1] * x.ndim
            shape[axis] = len(out_of_range)
            mask = xp.asarray(out_of_range.reshape(shape))
            outside = mask if outside is None else outside | mask
    if outside is not None:
        y = xp.where(outside, xp.asarray(extrapolation_value, dtype=y.dtype), y)
    if mode != 'nearest' and not is_float:
        info = numpy.iinfo(x.dtype) if x.dtype.kind in 'iu' else None
        y = xp.rint(y)
        if info is not None:
            y = xp.clip(y, info.min, info.max)
    return y.astype(x.dtype)


def _legacy_nearest_rounding(scale):
    # Upsample and Resize-10 read the floor when enlarging, the ceiling when
    # shrinking (onnxruntime's behaviour; the old specs say nothing).
    return 'floor' if scale >= 1 else 'ceil'


def _resize_by_scales(xp, x, scales, mode):
    """Upsample and Resize-10: asymmetric coordinates, output floor(in * scale)."""
    out_shape = [int(math.floor(d * s)) for d, s in zip(x.shape, scales)]
    mode = 'linear' if mode in ('linear', 'bilinear') else mode
    return _resize(xp, x, out_shape, scales, mode=mode, transform='asymmetric',
                   nearest_mode=_legacy_nearest_rounding)


@kernel('Upsample', versions=(1, 6))
def upsample_v1(xp, X, *, height_scale, width_scale, mode='nearest'):
    return _resize_by_scales(xp, X, [1.0, 1.0, height_scale, width_scale], mode)


@kernel('Upsample', versions=(7, 8))
def upsample_v7(xp, X, *, scales, mode='nearest'):
    return _resize_by_scales(xp, X, scales, mode)


@kernel('Upsample', versions=(9, LATEST))
def upsample(xp, X, scales, *, mode='nearest'):
    return _resize_by_scales(xp, X, scales.tolist(), mode)


@kernel('Resize', versions=(10, 10))
def resize_v10(xp, X, scales, *, mode='nearest'):
    return _resize_by_scales(xp, X, scales.tolist(), mode)


@kernel('Resize', versions=(11, LATEST))
def resize(xp, X, roi=None, scales=None, sizes=None, *, mode='nearest',
           coordinate_transformation_mode='half_pixel', nearest_mode='round_prefer_floor',
           cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0, antialias=0,
           axes=None, keep_aspect_ratio_policy='stretch'):
    out_shape, all_scales, all_roi = resize_plan(X.shape, roi, scales, sizes, axes,
                                                 keep_aspect_ratio_policy,
                                                 coordinate_transformation_mode)
    return _resize(xp, X, out_shape, all_scales, mode=mode,
                   transform=coordinate_transformation_mode, nearest_mode=nearest_mode,
                   cubic_coeff_a=cubic_coeff_a, exclude_outside=exclude_outside,
                   extrapolation_value=extrapolation_value, antialias=antialias, roi=all_roi)


# -- gradient kernels (org.chainer_compiler) -----------------------------------
# Adjoints of the data movements above that standard operators express badly:
# each allocates the input-shaped gradient once and adds the upstream gradient
# into it.  ``shape`` is the static shape of the forward input.
from .registry import CUSTOM_DOMAIN, shaped_by  # noqa: E402

#: The OpRecord facts of the adjoints: one output of gy's type and ``shape``.
_ADJOINT = dict(domain=CUSTOM_DOMAIN, outputs=('gx',), types=shaped_by('shape'))


def _add_along(xp, out, axis, index, values):
    """out[..., index[j], ...] += values[..., j, ...] along ``axis``
    (repeated indices accumulate); ``out`` is updated in place."""
    xp.add.at(xp.moveaxis(out, axis, 0), index, xp.moveaxis(values, axis, 0))


@kernel('SliceGrad', **_ADJOINT, attributes={'shape': 'ints'})
def slice_grad(xp, gy, starts, ends, axes=None, steps=None, *, shape):
    """Zeros of ``shape`` with ``gy`` written where Slice read."""
    out = xp.zeros(shape, dtype=gy.dtype)
    _slice(out, _ints(starts), _ints(ends), _ints(axes), _ints(steps))[...] = gy
    return out


@kernel('GatherGrad', **_ADJOINT, attributes={'axis': 'int', 'shape': 'ints'})
def gather_grad(xp, gy, indices, *, axis, shape):
    """Adjoint of Gather(axis): scatter-add ``gy`` into zeros of ``shape``."""
    dim = shape[axis]
    indices = _wrap_indices(xp, indices, dim).reshape(-1)
    if dim <= _DENSE_GATHER_GRAD_LIMIT:
        # Short axes (images, heads ...): a 0/1 matrix product beats a
        # scatter-add by far; (dim, K) @ (pre, K, post) -> (pre, dim, post).
        pre = math.prod(shape[:axis])
        one_hot = (indices[None, :] == xp.arange(dim)[:, None]).astype(gy.dtype)
        out = xp.matmul(one_hot, gy.reshape(pre, indices.size, -1))
        return out.reshape(shape)
    out = xp.zeros(shape, dtype=gy.dtype)
    values = gy.reshape(tuple(shape[:axis]) + (indices.size,) + tuple(shape[axis + 1:]))
    _add_along(xp, out, axis, indices, values)
    return out


#: Gather axes up to this long get their gradient by a one-hot matmul.
_DENSE_GATHER_GRAD_LIMIT = 256


@kernel('GatherElementsGrad', **_ADJOINT, attributes={'axis': 'int', 'shape': 'ints'})
def gather_elements_grad(xp, gy, indices, *, axis, shape):
    """Adjoint of GatherElements(axis) (and of TopK's values)."""
    out = xp.zeros(shape, dtype=gy.dtype)
    indices = _wrap_indices(xp, indices, shape[axis])
    index = [xp.arange(n).reshape((n,) + (1,) * (indices.ndim - i - 1))
             for i, n in enumerate(indices.shape)]
    index[axis] = indices
    xp.add.at(out, tuple(index), gy)
    return out


@kernel('GatherNDGrad', **_ADJOINT, attributes={'shape': 'ints'})
def gather_nd_grad(xp, gy, indices, *, shape, batch_dims=0):
    """Adjoint of GatherND(batch_dims)."""
    shape = tuple(shape)
    depth = indices.shape[-1]
    n_batch = math.prod(shape[:batch_dims])
    out = xp.zeros((n_batch,) + shape[batch_dims:], dtype=gy.dtype)
    flat_idx = indices.reshape(n_batch, -1, depth)
    dims = xp.asarray(numpy.asarray(shape[batch_dims:batch_dims + depth], dtype=_INT64))
    flat_idx = _wrap_indices(xp, flat_idx, dims)
    values = gy.reshape((n_batch, flat_idx.shape[1]) + shape[batch_dims + depth:])
    batch = xp.arange(n_batch)[:, None]
    xp.add.at(out, (batch,) + tuple(flat_idx[..., i] for i in range(depth)), values)
    return out.reshape(shape)


@kernel('PadGrad', **_ADJOINT, attributes={'mode': 'string', 'shape': 'ints'})
def pad_grad(xp, gy, pads, axes=None, *, mode, shape):
    """Adjoint of Pad in edge, reflect or wrap mode (Pad-11's inputs; the
    older attribute forms pass their pads as a tensor)."""
    ndim = len(shape)
    pads = _ints(pads)
    if axes is not None:
        axes = [_axis(a, ndim) for a in _ints(axes)]
        full = [0] * (2 * ndim)
        for i, a in enumerate(axes):
            full[a], full[a + ndim] = pads[i], pads[i + len(axes)]
        pads = full
    begins, ends = pads[:ndim], pads[ndim:]
    g = gy
    # The forward pads axis after axis (later axes pad the padded corners),
    # so the adjoint folds the last axis first.
    for axis in reversed(range(ndim)):
        before, after = max(begins[axis], 0), max(ends[axis], 0)
        if not before and not after:
            continue
        length = g.shape[axis] - before - after
        source = numpy.pad(numpy.arange(length), (before, after), mode=_PAD_MODES[mode])
        index = [slice(None)] * ndim
        index[axis] = slice(before, before + length)
        folded = g[tuple(index)].copy()
        for part in (slice(0, before), slice(before + length, before + length + after)):
            if part.stop > part.start:
                index[axis] = part
                _add_along(xp, folded, axis, xp.asarray(source[part]), g[tuple(index)])
        g = folded
    if any(p < 0 for p in pads):
        out = xp.zeros(shape, dtype=gy.dtype)
        out[tuple(slice(max(-b, 0), shape[i] - max(-e, 0))
                  for i, (b, e) in enumerate(zip(begins, ends)))] = g
        g = out
    return g


#: Above this many (in, out) entries a nearest ResizeGrad axis scatter-adds.
_DENSE_RESIZE_GRAD_LIMIT = 1 << 22


def resize_plan(in_shape, roi, scales, sizes, axes, keep_aspect_ratio_policy, transform):
    """The output shape, per-axis scales and rois of Resize-11+ (as the
    resize kernel reads them; the native lowering too)."""
    ndim = len(in_shape)
    axes = list(range(ndim)) if axes is None else [_axis(a, ndim) for a in axes]
    axis_in = [in_shape[a] for a in axes]
    if sizes is not None and sizes.size:
        sizes = _ints(sizes)
        ratios = [s / d for s, d in zip(sizes, axis_in)]
        if keep_aspect_ratio_policy == 'stretch':
            axis_scales, axis_sizes = ratios, sizes
        else:
            common = (min if keep_aspect_ratio_policy == 'not_larger' else max)(ratios)
            axis_scales = [common] * len(axes)
            axis_sizes = [int(math.floor(common * d + 0.5)) for d in axis_in]
    else:
        axis_scales = [float(s) for s in scales.tolist()]
        # The spec also multiplies by the roi extent; onnxruntime and the ONNX
        # reference do not, and models are made for them.
        axis_sizes = [int(math.floor(d * s)) for d, s in zip(axis_in, axis_scales)]
    out_shape, all_scales = list(in_shape), [1.0] * ndim
    for a, size_, scale in zip(axes, axis_sizes, axis_scales):
        out_shape[a], all_scales[a] = size_, scale
    all_roi = None
    if transform == 'tf_crop_and_resize':
        all_roi = [(0.0, 1.0)] * ndim
        if roi is not None and roi.size:
            roi_list, n = roi.tolist(), len(axes)
            for i, a in enumerate(axes):
                all_roi[a] = (roi_list[i], roi_list[i + n])
    return out_shape, all_scales, all_roi


@kernel('ResizeGrad', **_ADJOINT, attributes={'shape': 'ints', 'axes': 'ints'})
def resize_grad(xp, gy, roi=None, scales=None, sizes=None, *, shape, legacy=0,
                mode='nearest', coordinate_transformation_mode='half_pixel',
                nearest_mode='round_prefer_floor', cubic_coeff_a=-0.75, exclude_outside=0,
                extrapolation_value=0.0, antialias=0, axes=None,
                keep_aspect_ratio_policy='stretch'):
    """Adjoint of Resize (and Upsample / Resize-10 when ``legacy``): Resize
    is separable and linear, so each axis's gather or interpolation matrix
    is transposed in turn; positions tf_crop_and_resize extrapolates get no
    gradient.  Inputs are Resize-11's with ``gy`` in place of X."""
    transform = coordinate_transformation_mode
    if legacy:
        all_scales, all_roi = [float(s) for s in scales.tolist()], None
        transform, nearest_mode = 'asymmetric', _legacy_nearest_rounding
        mode = 'linear' if mode in ('linear', 'bilinear') else mode
    else:
        _, all_scales, all_roi = resize_plan(shape, roi, scales, sizes, axes,
                                             keep_aspect_ratio_policy, transform)
    resized = list(resize_axes(shape, gy.shape, all_scales, all_roi, mode, transform,
                               nearest_mode, cubic_coeff_a, exclude_outside, antialias))
    g, outside = gy, None
    for axis, _, out_of_range in resized:
        if out_of_range is not None:
            view = [1] * gy.ndim
            view[axis] = len(out_of_range)
            mask = xp.asarray(out_of_range.reshape(view))
            outside = mask if outside is None else outside | mask
    if outside is not None:
        g = xp.where(outside, xp.zeros((), dtype=gy.dtype), g)
    for axis, source, _ in resized:
        in_len, out_len = shape[axis], gy.shape[axis]
        if mode == 'nearest':
            if in_len * out_len > _DENSE_RESIZE_GRAD_LIMIT:
                out_shape = list(g.shape)
                out_shape[axis] = in_len
                out = xp.zeros(out_shape, dtype=g.dtype)
                _add_along(xp, out, axis, xp.asarray(source), g)
                g = out
                continue
            # A 0/1 matrix: one matmul beats a scatter-add by far.
            matrix = numpy.zeros((in_len, out_len))
            matrix[source, numpy.arange(out_len)] = 1
        else:
            matrix = source
        moved = xp.moveaxis(g, axis, -1)
        g = xp.moveaxis(xp.matmul(moved, xp.asarray(matrix.T, dtype=g.dtype)), -1, axis)
    return xp.ascontiguousarray(g)

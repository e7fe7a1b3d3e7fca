"""Converters for chainer.functions.array.

Shapes, axes and index arrays are static at export time, so each converter
resolves NumPy's semantics (negative axes, broadcasting of pad widths,
``split`` pieces, advanced indexing layout) here in Python and emits the
smallest standard ONNX form.
"""
import weakref

import chainer
import numpy
from onnx import helper, numpy_helper

from .registry import converter

_INT64_MAX = numpy.iinfo(numpy.int64).max


def _host(array):
    """A NumPy array from a NumPy/CuPy/ChainerX array, list or scalar."""
    if isinstance(array, chainer.Variable):
        array = array.array
    if isinstance(array, chainer.get_array_types()):
        return chainer.backend.CpuDevice().send(array)
    return numpy.asarray(array)


def _dummy(shape, dtype=numpy.float32):
    """A zero-strided array of ``shape``: NumPy shape rules at no memory cost."""
    return numpy.broadcast_to(numpy.zeros((), dtype=dtype), tuple(shape))


def _perm_of(shape_op, ndim):
    """The Transpose permutation a NumPy axis-moving function performs."""
    out = shape_op(_dummy(range(1, ndim + 1)))
    return [d - 1 for d in out.shape]


def _empty(ctx, shape, dtype, out=None):
    """A zero-sized value of ``shape``: it does not depend on any input."""
    value = numpy_helper.from_array(numpy.zeros(1, dtype=dtype), 'value')
    return ctx.node('ConstantOfShape', [ctx.int64s(shape)], [out] if out else 1, value=value)


def _reshape(ctx, x, in_shape, shape, out=None, dtype=None):
    """Reshape to a fully known ``shape``.  A zero-sized one needs
    allowzero (opset >= 14) unless its zeros copy the input's dims; else,
    given ``dtype``, it is made as the empty constant it is."""
    shape = [int(d) for d in shape]
    if 0 in shape:
        if ctx.opset >= 14:
            return ctx.node('Reshape', [x, ctx.int64s(shape)], [out] if out else 1, allowzero=1)
        if any(d == 0 and (i >= len(in_shape) or in_shape[i] != 0)
               for i, d in enumerate(shape)):
            if dtype is None:
                raise ValueError('Reshape: a zero-sized target shape %s from %s needs opset '
                                 '14 or newer' % (tuple(shape), tuple(in_shape)))
            return _empty(ctx, shape, dtype, out=out)
    return ctx.reshape(x, shape, out=out)


def _transpose(ctx, x, perm, out=None):
    return ctx.node('Transpose', [x], [out] if out else 1, perm=[int(p) for p in perm])


def _identity(ctx, x, out):
    return ctx.node('Identity', [x], [out])


# -- dtype, copies ---------------------------------------------------------
@converter('Cast')
def convert_cast(ctx, call):
    to = helper.np_dtype_to_tensor_dtype(numpy.dtype(call.func.type))
    ctx.node('Cast', call.inputs, call.outputs, to=to)


@converter('Copy')
def convert_copy(ctx, call):
    # Device transfer: the value itself is unchanged.
    _identity(ctx, call.inputs[0], call.outputs[0])


# -- joining ---------------------------------------------------------------
@converter('Concat')
def convert_concat(ctx, call):
    ndim = call.input_arrays[0].ndim
    axis = call.func.axis % ndim
    stacked = _transposed_whole(ctx, call, axis)
    if stacked is not None:  # (.., B, n, ..) -> (.., B*n, ..): copied dims, then the rest
        rest = call.input_arrays[0].shape[axis + 1:]
        ctx.reshape(stacked, [0] * axis + [-1] + list(rest), out=call.outputs[0])
        return
    ctx.node('Concat', call.inputs, call.outputs, axis=axis)


@converter('Stack')
def convert_stack(ctx, call):
    axis = call.func.axis % (call.input_arrays[0].ndim + 1)
    stacked = _transposed_whole(ctx, call, axis)
    if stacked is not None:
        _identity(ctx, stacked, call.outputs[0])
        return
    parts = [ctx.unsqueeze(x, [axis]) for x in call.inputs]
    ctx.node('Concat', parts, call.outputs, axis=axis)


def _stack_like(ctx, call, min_ndim, promote, axis_for):
    """hstack/vstack/dstack: promote each input to ``min_ndim`` dims the
    way NumPy's atleast_Nd does, then Concat."""
    parts = []
    ndim = None
    for name, array in zip(call.inputs, call.input_arrays):
        shape = promote(array.shape) if array.ndim < min_ndim else array.shape
        ndim = len(shape)
        parts.append(name if tuple(shape) == array.shape
                     else _reshape(ctx, name, array.shape, shape, dtype=array.dtype))
    ctx.node('Concat', parts, call.outputs, axis=axis_for(ndim))


@converter('Hstack')
def convert_hstack(ctx, call):
    _stack_like(ctx, call, 1, lambda s: (1,), lambda nd: 0 if nd == 1 else 1)


@converter('Vstack')
def convert_vstack(ctx, call):
    _stack_like(ctx, call, 2, lambda s: (1,) + tuple(s) if len(s) == 1 else (1, 1),
                lambda nd: 0)


@converter('Dstack')
def convert_dstack(ctx, call):
    def promote(s):
        return {0: (1, 1, 1), 1: (1,) + tuple(s) + (1,), 2: tuple(s) + (1,)}[len(s)]
    _stack_like(ctx, call, 3, promote, lambda nd: 2)


# -- splitting ---------------------------------------------------------------
def _pieces(ctx, x, axis, bounds, outputs):
    """Write ``x[..., start:stop, ...]`` (along ``axis``) to each output; one
    Split when the pieces tile the axis, else a Slice each."""
    sizes = [stop - start for start, stop in bounds]
    tiles = all(s > 0 for s in sizes) and all(
        bounds[i][1] == bounds[i + 1][0] for i in range(len(bounds) - 1))
    if tiles and len(bounds) > 1:
        ctx.split(x, sizes, axis, outputs)
        return
    for (start, stop), out in zip(bounds, outputs):
        ctx.slice(x, [start], [max(stop, start)], [axis], out=out)


@converter('SplitAxis')
def convert_split_axis(ctx, call):
    func, x = call.func, call.input_arrays[0]
    axis = func.axis % x.ndim
    dim = x.shape[axis]
    ios = func.indices_or_sections
    if func.indices is not None:
        div = [0] + [int(i) for i in ios] + [dim]
        bounds = []
        for a, b in zip(div[:-1], div[1:]):
            start, stop, _ = slice(a, b).indices(dim)
            bounds.append((start, max(stop, start)))
    else:
        step = dim // int(ios)
        bounds = [(i * step, (i + 1) * step) for i in range(int(ios))]
    _pieces(ctx, call.inputs[0], axis, bounds, call.outputs)


@converter('Separate')
def convert_separate(ctx, call):
    axis = call.func.axis % call.input_arrays[0].ndim
    for i, out in enumerate(call.outputs):
        ctx.node('Gather', [call.inputs[0], ctx.constant(numpy.int64(i), hint='index')],
                 [out], axis=axis)


@converter('TransposeSequence')
def convert_transpose_sequence(ctx, call):
    """out[t] = stack of xs[i][t] for every sequence longer than t: one
    Gather per output from the concatenation of all sequences.  Of
    sequences of one length, the outputs are made only if read one by one:
    a stack or concat of all of them reads the sequences whole
    (:func:`_transposed_whole`), with no node per output."""
    lengths = [a.shape[0] for a in call.input_arrays]
    offsets = numpy.concatenate([[0], numpy.cumsum(lengths)[:-1]]).astype(numpy.int64)

    def emit():
        whole = (call.inputs[0] if len(call.inputs) == 1
                 else ctx.node('Concat', call.inputs, 1, axis=0))
        for t, out in enumerate(call.outputs):
            rows = [offsets[i] + t for i, n in enumerate(lengths) if n > t]
            ctx.node('Gather', [whole, ctx.constant(numpy.asarray(rows, numpy.int64),
                                                    hint='rows')], [out], axis=0)
    if len(set(lengths)) != 1:
        emit()
        return
    ctx.defer(list(call.outputs), emit)
    _TRANSPOSED.setdefault(ctx, {})[tuple(call.outputs)] = (
        list(call.inputs), call.input_arrays[0].shape[1:])


#: ctx -> {the outputs of a TransposeSequence of sequences of one length:
#: (its input names, their rows' shape)}, for :func:`_transposed_whole`.
_TRANSPOSED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: ctx -> {names of values: the one they are the slices of, on axis 0}.
_SLICES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def note_slices(ctx, parts, whole):
    """Record that ``parts`` are, in order, ``whole``'s slices on axis 0
    (``whole[t]``), so a stack of them reads ``whole`` itself."""
    _SLICES.setdefault(ctx, {})[tuple(parts)] = whole


def _transposed_whole(ctx, call, axis):
    """When ``call`` reads, in order, all the outputs of one
    TransposeSequence of T sequences of one length B (L.NStep*'s ``ys`` of
    rows of one tensor), the name of those outputs stacked on ``axis`` as
    F.stack would (read from the T sequences, so no node or constant per
    output and the file takes any B); else None."""
    found = _TRANSPOSED.get(ctx, {}).get(tuple(call.inputs))
    if found is None or 0 in found[1]:  # a Reshape's 0 would copy, not mean 0
        return None
    steps, rest = found
    ndim = len(rest) + 2
    whole = _SLICES.get(ctx, {}).get(tuple(steps)) or ctx.node(
        'Concat', [ctx.unsqueeze(x, [0]) for x in steps], axis=0)  # (T, B, *rest)
    perm = _perm_of(lambda a: numpy.moveaxis(a, 1, axis), ndim)
    return whole if perm == list(range(ndim)) else _transpose(ctx, whole, perm)


# -- shape changes -----------------------------------------------------------
@converter('Reshape')
def convert_reshape(ctx, call):
    x = call.input_arrays[0]
    _reshape(ctx, call.inputs[0], x.shape, _dummy(x.shape).reshape(call.func.shape).shape,
             out=call.outputs[0], dtype=x.dtype)


@converter('ExpandDims')
def convert_expand_dims(ctx, call):
    axis = call.func.axis % (call.input_arrays[0].ndim + 1)
    ctx.unsqueeze(call.inputs[0], [axis], out=call.outputs[0])


@converter('Squeeze')
def convert_squeeze(ctx, call):
    shape = call.input_arrays[0].shape
    if call.func.axis is None:
        axes = [i for i, d in enumerate(shape) if d == 1]
    else:
        axes = sorted(a % len(shape) for a in call.func.axis)
    if not axes:
        _identity(ctx, call.inputs[0], call.outputs[0])
    else:
        ctx.squeeze(call.inputs[0], axes, out=call.outputs[0])


@converter('BroadcastTo')
def convert_broadcast_to(ctx, call):
    ctx.node('Expand', [call.inputs[0], ctx.int64s(call.func._shape)], call.outputs)


@converter('Broadcast')
def convert_broadcast(ctx, call):
    shape = numpy.broadcast_shapes(*[a.shape for a in call.input_arrays])
    target = ctx.int64s(shape)
    for name, out in zip(call.inputs, call.outputs):
        ctx.node('Expand', [name, target], [out])


@converter('Tile')
def convert_tile(ctx, call):
    x, reps = call.input_arrays[0], list(call.func.reps)
    name = call.inputs[0]
    if len(reps) > x.ndim:   # NumPy promotes x with leading 1-dims
        shape = (1,) * (len(reps) - x.ndim) + x.shape
        name = _reshape(ctx, name, x.shape, shape, dtype=x.dtype)
    reps = [1] * (x.ndim - len(reps)) + reps
    ctx.node('Tile', [name, ctx.int64s(reps)], call.outputs)


@converter('Repeat')
def convert_repeat(ctx, call):
    """numpy.repeat as one Gather of arange(n) repeated (scalar or
    per-element repeats alike)."""
    x, func = call.input_arrays[0], call.func
    name = call.inputs[0]
    if func.axis is None:
        if x.ndim != 1:
            name = ctx.reshape(name, [-1])
        axis, dim = 0, x.size
    else:
        axis = func.axis % x.ndim
        dim = x.shape[axis]
    repeats = func.repeats[0] if len(func.repeats) == 1 else list(func.repeats)
    indices = numpy.repeat(numpy.arange(dim, dtype=numpy.int64), repeats)
    ctx.node('Gather', [name, ctx.constant(indices, hint='repeat')], call.outputs, axis=axis)


# -- axis permutations ------------------------------------------------------
@converter('Transpose')
def convert_transpose(ctx, call):
    ndim = call.input_arrays[0].ndim
    perm = _perm_of(lambda a: numpy.transpose(a, call.func.axes), ndim)
    _transpose(ctx, call.inputs[0], perm, out=call.outputs[0])


@converter('Swapaxes')
def convert_swapaxes(ctx, call):
    ndim = call.input_arrays[0].ndim
    perm = _perm_of(lambda a: numpy.swapaxes(a, call.func.axis1, call.func.axis2), ndim)
    _transpose(ctx, call.inputs[0], perm, out=call.outputs[0])


@converter('Moveaxis')
def convert_moveaxis(ctx, call):
    ndim = call.input_arrays[0].ndim
    perm = _perm_of(lambda a: numpy.moveaxis(a, call.func.source, call.func.destination),
                    ndim)
    _transpose(ctx, call.inputs[0], perm, out=call.outputs[0])


@converter('Rollaxis')
def convert_rollaxis(ctx, call):
    ndim = call.input_arrays[0].ndim
    perm = _perm_of(lambda a: numpy.rollaxis(a, call.func.axis, call.func.start), ndim)
    _transpose(ctx, call.inputs[0], perm, out=call.outputs[0])


@converter('Permutate')
def convert_permutate(ctx, call):
    func = call.func
    indices = _host(func.indices).astype(numpy.int64)
    if func.inv:
        indices = numpy.argsort(indices).astype(numpy.int64)
    # Chainer indexes x[(slice(None),) * axis + (indices,)]: a negative axis
    # permutes axis 0 there, and the export reproduces what Chainer computes.
    axis = max(int(func.axis), 0)
    if len(indices) == call.input_arrays[0].shape[axis] and \
            (indices == numpy.arange(len(indices))).all():
        # L.NStep* keeps equal-length sequences in order: no constant of the
        # batch's size, so the file takes any batch (dynamic_axes).
        _identity(ctx, call.inputs[0], call.outputs[0])
        return
    ctx.node('Gather', [call.inputs[0], ctx.constant(indices, hint='perm')], call.outputs,
             axis=axis)


@converter('Flip', 'FlipLR', 'FlipUD')
def convert_flip(ctx, call):
    x = call.input_arrays[0]
    axis = {'FlipUD': 0, 'FlipLR': 1}.get(call.name)
    if axis is None:
        axis = call.func.axis % x.ndim
    ctx.slice(call.inputs[0], [-1], [-_INT64_MAX], [axis], [-1], out=call.outputs[0])


@converter('Depth2Space')
def convert_depth2space(ctx, call):
    # Chainer's layout is ONNX's DCR (the default mode).
    ctx.node('DepthToSpace', call.inputs, call.outputs, blocksize=int(call.func.r))


@converter('Space2Depth')
def convert_space2depth(ctx, call):
    ctx.node('SpaceToDepth', call.inputs, call.outputs, blocksize=int(call.func.r))


# -- selection ---------------------------------------------------------------
@converter('Where')
def convert_where(ctx, call):
    condition = ctx.constant(_host(call.func.condition).astype(numpy.bool_), hint='condition')
    ctx.node('Where', [condition] + list(call.inputs), call.outputs)


@converter('SelectItem')
def convert_select_item(ctx, call):
    """y[i] = x[i, t[i]]: GatherElements on axis 1, then drop that axis."""
    x, t = call.inputs
    picked = ctx.node('GatherElements', [x, ctx.unsqueeze(t, [1])], 1, axis=1)
    ctx.squeeze(picked, [1], out=call.outputs[0])


def _normalize_index(slices, ndim):
    """GetItem's index as a list with one entry per dimension of the input
    once None dims are inserted: ints, slices, int64 arrays (bool masks
    expanded to their nonzero() arrays) and None; Ellipsis expanded."""
    entries = []
    for s in slices:
        if s is None or s is Ellipsis or isinstance(s, slice):
            entries.append(s)
        elif isinstance(s, (bool, numpy.bool_)):
            raise ValueError('GetItem: a boolean scalar index is not supported')
        elif isinstance(s, (int, numpy.integer)):
            entries.append(int(s))
        else:
            array = _host(s)
            if array.dtype == numpy.bool_:
                if array.ndim == 0:
                    raise ValueError('GetItem: a boolean scalar index is not supported')
                entries.extend(numpy.asarray(i, numpy.int64) for i in array.nonzero())
            elif array.dtype.kind in 'iu' and array.ndim == 0:
                entries.append(int(array))  # NumPy reads a 0-d array as an int
            elif array.dtype.kind in 'iu' or array.size == 0:
                entries.append(array.astype(numpy.int64))
            else:
                raise ValueError('GetItem: index of type %s is not supported' % type(s))
    consumed = sum(1 for e in entries if e is not None and e is not Ellipsis)
    if any(e is Ellipsis for e in entries):
        i = next(i for i, e in enumerate(entries) if e is Ellipsis)
        entries[i:i + 1] = [slice(None)] * (ndim - consumed)
        entries = [slice(None) if e is Ellipsis else e for e in entries]
    else:
        entries += [slice(None)] * (ndim - consumed)
    return entries


def _slice_spec(entries, shape):
    """(starts, ends, axes, steps) of the non-trivial slices in ``entries``
    (entry i addressing dim i of ``shape``)."""
    starts, ends, axes, steps = [], [], [], []
    for axis, (e, dim) in enumerate(zip(entries, shape)):
        if isinstance(e, int):
            start = e + dim if e < 0 else e
            e = slice(start, start + 1, 1)
        if not isinstance(e, slice):
            continue
        start, stop, step = e.indices(dim)
        if step > 0:
            stop = max(stop, start)
            if (start, stop, step) == (0, dim, 1):
                continue
        elif stop < 0:
            stop = -_INT64_MAX  # "before the first element"
        starts.append(start)
        ends.append(stop)
        axes.append(axis)
        steps.append(step)
    return starts, ends, axes, steps


def _apply_slices(ctx, x, entries, shape, out=None):
    """Slice ``x``; returns ``x`` itself (``out`` unwritten) when every
    slice takes its dim whole."""
    starts, ends, axes, steps = _slice_spec(entries, shape)
    if not axes:
        return x
    return ctx.slice(x, starts, ends, axes, steps if any(s != 1 for s in steps) else None,
                     out=out)


@converter('GetItem')
def convert_get_item(ctx, call):
    """Every NumPy index form: basic indices become one Slice (negative
    steps included) and a Reshape; integer/boolean arrays a Gather on the
    (merged) indexed dims, with NumPy's placement of the indexed dims."""
    x = call.input_arrays[0]
    name, out = call.inputs[0], call.outputs[0]
    host_index = tuple(s if s is None or s is Ellipsis or isinstance(s, (slice, int))
                       else _host(s) for s in call.func.slices)
    result_shape = _dummy(x.shape, x.dtype)[host_index].shape
    if 0 in result_shape:
        _empty(ctx, result_shape, x.dtype, out=out)
        return
    entries = _normalize_index(call.func.slices, x.ndim)
    advanced = [i for i, e in enumerate(entries) if isinstance(e, numpy.ndarray)]

    if not advanced:
        on_x = [e for e in entries if e is not None]
        reshape = len(on_x) != len(entries) or any(isinstance(e, int) for e in on_x)
        y = _apply_slices(ctx, name, on_x, x.shape, out=None if reshape else out)
        if reshape:
            sliced = _dummy(x.shape)[tuple(slice(e, e + 1 or None) if isinstance(e, int) else e
                                           for e in on_x)].shape
            _reshape(ctx, y, sliced, result_shape, out=out)
        elif y == name:
            _identity(ctx, name, out)
        return

    # Insert the None dims: each becomes a size-1 dim taken whole.
    shape, it = [], iter(x.shape)
    for e in entries:
        shape.append(1 if e is None else next(it))
    entries = [slice(None) if e is None else e for e in entries]

    # Advanced indexing: ints count as 0-d index arrays.
    entries = [numpy.asarray(e, numpy.int64) if isinstance(e, int) else e for e in entries]
    advanced = [i for i, e in enumerate(entries) if isinstance(e, numpy.ndarray)]
    if len(shape) != x.ndim:
        name = _reshape(ctx, name, x.shape, shape)
    y = _apply_slices(ctx, name, entries, shape)
    shape = list(_dummy(shape)[tuple(e if isinstance(e, slice) else slice(None)
                                     for e in entries)].shape)
    arrays = numpy.broadcast_arrays(*[entries[i] for i in advanced])
    dims = [shape[i] for i in advanced]
    for a, dim in zip(arrays, dims):
        if a.size and (a.min() < -dim or a.max() >= dim):
            raise ValueError('GetItem: index out of bounds for a dim of size %d' % dim)
    arrays = [numpy.where(a < 0, a + dim, a) for a, dim in zip(arrays, dims)]
    adjacent = advanced == list(range(advanced[0], advanced[0] + len(advanced)))
    if not adjacent:
        # NumPy puts the indexed dims first: move the indexed axes there.
        perm = advanced + [i for i in range(len(shape)) if i not in advanced]
        y = _transpose(ctx, y, perm)
        shape = [shape[p] for p in perm]
        advanced = list(range(len(advanced)))
    first = advanced[0]
    if len(advanced) > 1:
        merged = shape[:first] + [int(numpy.prod(dims))] + shape[first + len(advanced):]
        y = _reshape(ctx, y, shape, merged)
        flat = numpy.ravel_multi_index(arrays, dims) if arrays[0].size else arrays[0]
    else:
        flat = arrays[0]
    ctx.node('Gather', [y, ctx.constant(numpy.asarray(flat, numpy.int64), hint='index')],
             [out], axis=first)


# -- padding -----------------------------------------------------------------
def _pad_pairs(value, ndim, what):
    try:
        return numpy.broadcast_to(numpy.asarray(value), (ndim, 2))
    except ValueError:
        raise ValueError('Pad: %s %r does not fit an input of %d dims'
                         % (what, value, ndim)) from None


@converter('Pad')
def convert_pad(ctx, call):
    """numpy.pad: constant (one or per-side values), edge and reflect map to
    Pad; wrap too at opset >= 19; symmetric (and older wrap) are built per
    axis from reversed Slices and Concat, as NumPy pads axis by axis."""
    func, x = call.func, call.input_arrays[0]
    ndim = x.ndim
    widths = _pad_pairs(func.pad_width, ndim, 'pad_width').astype(numpy.int64)
    mode = func.mode
    keywords = dict(func.keywords)
    if mode not in ('constant', 'edge', 'reflect', 'symmetric', 'wrap'):
        raise ValueError("Pad: mode '%s' is not supported (constant, edge, reflect, "
                         "symmetric and wrap are)" % mode)
    values = None
    if mode == 'constant':
        values = _pad_pairs(keywords.pop('constant_values', 0), ndim, 'constant_values')
    if keywords.pop('reflect_type', 'even') != 'even':
        raise ValueError("Pad: reflect_type='odd' is not supported")
    if keywords:
        raise ValueError('Pad: keyword(s) %s not supported in mode %s'
                         % (', '.join(sorted(keywords)), mode))
    if (widths < 0).any():
        raise ValueError('Pad: negative pad_width')
    limit = {'reflect': 1, 'symmetric': 0, 'wrap': 0}.get(mode)
    if limit is not None:
        for (b, a), dim in zip(widths, x.shape):
            if max(b, a) > dim - limit:
                raise ValueError("Pad: mode '%s' pads of %d exceed what one reflection of "
                                 "a dim of size %d gives" % (mode, max(b, a), dim))
    name, out = call.inputs[0], call.outputs[0]
    pads = ctx.int64s(list(widths[:, 0]) + list(widths[:, 1]))
    if mode in ('edge', 'reflect') or (mode == 'wrap' and ctx.opset >= 19):
        ctx.node('Pad', [name, pads], [out], mode=mode)
        return
    if mode == 'constant' and (values == values.flat[0]).all():
        value = ctx.constant(numpy.asarray(values.flat[0], dtype=x.dtype), hint='pad_value')
        ctx.node('Pad', [name, pads, value], [out], mode='constant')
        return
    # Axis by axis, as numpy.pad does (later axes pad the padded corners).
    shape = list(x.shape)
    active = [i for i in range(ndim) if widths[i].any()]
    if not active:
        _identity(ctx, name, out)
        return
    for axis in active:
        before, after = (int(w) for w in widths[axis])
        dim = shape[axis]
        parts = []
        if mode == 'constant':
            lo, hi = values[axis]
            for width, value in ((before, lo), (after, hi)):
                block = list(shape)
                block[axis] = width
                parts.append(ctx.constant(numpy.full(block, value, dtype=x.dtype),
                                          hint='pad_block') if width else None)
        elif mode == 'wrap':
            parts = [ctx.slice(name, [dim - before], [dim], [axis]) if before else None,
                     ctx.slice(name, [0], [after], [axis]) if after else None]
        else:  # symmetric: the edge rows reversed, the edge itself included
            parts = [ctx.slice(name, [before - 1], [-_INT64_MAX], [axis], [-1])
                     if before else None,
                     ctx.slice(name, [dim - 1], [dim - after - 1 if after < dim else -_INT64_MAX],
                               [axis], [-1]) if after else None]
        pieces = [p for p in (parts[0], name, parts[1]) if p is not None]
        shape[axis] = dim + before + after
        name = ctx.node('Concat', pieces, [out] if axis == active[-1] else 1, axis=axis)


@converter('PadSequence')
def convert_pad_sequence(ctx, call):
    """Pad each sequence to the common length with ``padding``, stack."""
    func, arrays = call.func, call.input_arrays
    length = max(len(a) for a in arrays) if func.length is None else int(func.length)
    stacked = _transposed_whole(ctx, call, 0) if length == len(arrays[0]) else None
    if stacked is not None:  # sequences of one length: no padding
        _identity(ctx, stacked, call.outputs[0])
        return
    shape = (len(arrays), length) + arrays[0].shape[1:]
    if 0 in shape:
        _empty(ctx, shape, arrays[0].dtype, out=call.outputs[0])
        return
    value = ctx.constant(numpy.asarray(func.padding, dtype=arrays[0].dtype), hint='padding')
    single = len(arrays) == 1
    rows = []
    for name, a in zip(call.inputs, arrays):
        if len(a) < length:
            pads = [0] * a.ndim + [length - len(a)] + [0] * (a.ndim - 1)
            name = ctx.node('Pad', [name, ctx.int64s(pads), value], 1, mode='constant')
        rows.append(ctx.unsqueeze(name, [0], out=call.outputs[0] if single else None))
    if not single:
        ctx.node('Concat', rows, call.outputs, axis=0)


# -- resizing ----------------------------------------------------------------
@converter('ResizeImages')
def convert_resize_images(ctx, call):
    """Bilinear: Resize 'linear' with align_corners or half_pixel (Chainer
    clamps source coordinates at 0, as half_pixel does).  Nearest: Chainer
    takes floor(i * in / out); it is emitted as two exact Gathers, since
    Resize's float scale can round such integers down."""
    func, x = call.func, call.input_arrays[0]
    n, c, h, w = x.shape
    out_h, out_w = int(func.out_H), int(func.out_W)
    if func.mode == 'nearest':
        # Chainer's own float64 arithmetic, so that its rounding is kept too.
        rows = numpy.minimum(numpy.floor(numpy.arange(out_h, dtype=numpy.float64) * (h / out_h)),
                             h - 1).astype(numpy.int64)
        cols = numpy.minimum(numpy.floor(numpy.arange(out_w, dtype=numpy.float64) * (w / out_w)),
                             w - 1).astype(numpy.int64)
        y = ctx.node('Gather', [call.inputs[0], ctx.constant(rows, hint='rows')], 1, axis=2)
        ctx.node('Gather', [y, ctx.constant(cols, hint='cols')], call.outputs, axis=3)
        return
    sizes = ctx.int64s([n, c, out_h, out_w])
    if ctx.opset >= 13:
        inputs = [call.inputs[0], '', '', sizes]
    else:
        empty = ctx.constant(numpy.zeros(0, numpy.float32), hint='empty')
        inputs = [call.inputs[0], empty, empty, sizes]
    transform = 'align_corners' if func.align_corners else 'half_pixel'
    ctx.node('Resize', inputs, call.outputs, mode='linear',
             coordinate_transformation_mode=transform)

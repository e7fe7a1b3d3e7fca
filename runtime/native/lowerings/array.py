"""Data movement as calls into ccn_array.c, one kernel per access pattern
whatever the dtype (the kernels count bytes per element):

- views (Reshape, Flatten, Identity, Dropout, Squeeze, Unsqueeze, a Cast to
  the same dtype) share their input's memory, or copy it when the result is
  a program output;
- strided copies: Transpose, Slice, Split, Concat, Expand;
- copies through per-axis index tables: Pad (every mode) and Tile;
- Gather, GatherND, Where and Cast have kernels of their own.

Shape-like operands (axes, starts, pads, repeats, a target shape) must be
constants: the C code is written for static shapes.
"""
import math
from typing import Literal

import numpy

from ...ops.array import _CAST_V1_TYPES, _legacy_nearest_rounding, resize_axes, resize_plan
from ...ops.opset_rules import node_axes
from ...ops.registry import operator_record
from ...program import NO_REGISTER
from ..cformat import C_TYPES, CStruct, clist, cliteral
from ..lowering import ANY_DTYPE, Refuse, Step, at, lowers
from .math import broadcast_strides

INDEX_DTYPES = ('int32', 'int64')


# -- helpers ---------------------------------------------------------------
def checked_axis(axis: int, rank: int) -> int:
    """``axis`` counted from 0, refused outside [-rank, rank)."""
    if not -rank <= axis < rank:
        raise Refuse('axis %d is out of range for rank %d' % (axis, rank))
    return axis % rank


def const_ints(em, inst, k: int, what: str) -> list[int] | None:
    """Input ``k`` as a list of ints (None when absent), refused unless it
    is a constant."""
    if not em.has(inst, k):
        return None
    value = em.const(inst.inputs[k])
    if value is None:
        raise Refuse('its %s must be a constant' % what)
    return [int(v) for v in value.reshape(-1)]


def dtype_itemsize(dtype: str) -> int:
    """Bytes per element of ``dtype``: all the movement kernels need."""
    return numpy.dtype(dtype).itemsize


def c_strides(shape) -> list[int]:
    """Element strides of a C-order array of ``shape``."""
    return [math.prod(shape[k + 1:]) for k in range(len(shape))]


def coalesce(shape, strides: list[list[int]]):
    """``shape`` and the stride lists with size-1 axes dropped and adjacent
    axes merged wherever every operand steps through them as through one
    axis, so the kernels loop over as few axes as possible (rank >= 1)."""
    merged: list[tuple[int, list[int]]] = []
    for k, d in enumerate(shape):
        if d == 1:
            continue
        inner = [s[k] for s in strides]
        if merged and all(o == i * d for o, i in zip(merged[-1][1], inner)):
            merged[-1] = (merged[-1][0] * d, inner)
        else:
            merged.append((d, inner))
    merged = merged or [(1, [0] * len(strides))]
    return [d for d, _ in merged], [[s[j] for _, s in merged] for j in range(len(strides))]


def _strided_copy(elem: int, shape, x: str, x_strides, y: str, y_strides) -> list[str]:
    """C lines copying the index space ``shape`` from x to y, each side
    addressed through its own element strides."""
    if math.prod(shape) == 0:
        return ['/* empty: nothing to copy */']
    dims, (xs, ys) = coalesce(shape, [list(x_strides), list(y_strides)])
    return ['{',
            '    static const long shape[] = %s, xs[] = %s, ys[] = %s;'
            % (clist(dims), clist(xs), clist(ys)),
            '    ccn_strided_copy(%d, %d, shape, %s, xs, %s, ys);' % (elem, len(dims), x, y),
            '}']


def _copy_step(em, inst, out, x_strides, offset=0) -> Step:
    """Output 0 (shape ``out``, C order) read from input 0 at element
    ``offset`` through ``x_strides``."""
    elem = dtype_itemsize(em.dtype(inst, 0))

    def render(ref, scratch):
        return _strided_copy(elem, out, at(ref(inst.inputs[0]), offset), x_strides,
                             ref(inst.outputs[0]), c_strides(out))
    return Step('array', [tuple(out)], render)


# -- views -----------------------------------------------------------------
@lowers('Reshape', 'Flatten', 'Identity')
def reshape_like(em, inst) -> Step:
    sx = em.shape(inst, 0, ANY_DTYPE)
    a = inst.attrs
    if inst.op == 'Reshape':
        out = _reshape_target(em, inst, sx)
    elif inst.op == 'Flatten':
        axis = int(a.get('axis', 1))
        if not -len(sx) <= axis <= len(sx):
            raise Refuse('axis %d is out of range for rank %d' % (axis, len(sx)))
        axis = axis + len(sx) if axis < 0 else axis
        out = (math.prod(sx[:axis]), math.prod(sx[axis:]))
    else:
        out = sx
    return view(em, inst, out)


def view(em, inst, out, same_order: bool = False) -> Step:
    """Output 0 is input 0's data under the shape ``out``: it shares the
    input's memory when the operator's record allows (view_of), or when
    ``same_order`` says the elements keep their order (a Transpose moving
    only axes of size 1), unless it is a program output, which must land in
    the caller's buffer."""
    record = operator_record(inst.op, inst.domain)
    alias = (same_order or record is not None and record.view_of == 0) and \
        not em.is_output(inst.outputs[0])
    nbytes = em.nbytes(inst.inputs[0])

    def render(ref, scratch):
        if alias:
            return ['/* no copy: %%%d shares the memory of %%%d */'
                    % (inst.outputs[0], inst.inputs[0])]
        return ['ccn_copy(%d, %s, %s);' % (nbytes, ref(inst.inputs[0]), ref(inst.outputs[0]))]
    return Step('array', [out] + [None] * (len(inst.outputs) - 1), render, alias=alias)


def _reshape_target(em, inst, sx):
    if inst.version < 5:
        target = [int(d) for d in inst.attrs['shape']]
    else:
        r = inst.inputs[1] if len(inst.inputs) > 1 else NO_REGISTER
        if em.const(r) is None:
            raise Refuse('the target shape must be a constant')
        target = [int(d) for d in em.const(r).reshape(-1)]
    allowzero = int(inst.attrs.get('allowzero', 0))
    dims = [sx[i] if d == 0 and not allowzero and i < len(sx) else d
            for i, d in enumerate(target)]
    if dims.count(-1) > 1 or any(d < -1 for d in dims):
        raise Refuse('bad target shape %s' % target)
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        if known == 0 or math.prod(sx) % known:
            raise Refuse('cannot reshape %s to %s' % (list(sx), target))
        dims[dims.index(-1)] = math.prod(sx) // known
    if math.prod(dims) != math.prod(sx):
        raise Refuse('cannot reshape %s to %s' % (list(sx), target))
    return tuple(dims)


def given_axes(em, inst) -> list[int] | None:
    """The ``axes`` of Squeeze, Unsqueeze or a Reduce* operator
    (opset_rules.node_axes), refused when given as an input that is not a
    constant; None when absent."""
    return node_axes(inst.op, inst.version, inst.attrs,
                     lambda: const_ints(em, inst, 1, 'axes'))


@lowers('Squeeze')
def squeeze(em, inst) -> Step:
    sx = em.shape(inst, 0, ANY_DTYPE)
    axes = given_axes(em, inst)
    if axes is None:
        drop = {k for k, d in enumerate(sx) if d == 1}
    else:
        drop = {checked_axis(a, len(sx)) for a in axes}
        if any(sx[k] != 1 for k in drop):
            raise Refuse('axes %s of shape %s are not all of size 1' % (axes, list(sx)))
    return view(em, inst, tuple(d for k, d in enumerate(sx) if k not in drop))


@lowers('Unsqueeze')
def unsqueeze(em, inst) -> Step:
    sx = em.shape(inst, 0, ANY_DTYPE)
    axes = given_axes(em, inst)
    if axes is None:
        raise Refuse('Unsqueeze needs axes')
    rank = len(sx) + len(axes)
    new = {checked_axis(a, rank) for a in axes}
    if len(new) != len(axes):
        raise Refuse('axes %s repeat an axis' % axes)
    dims = iter(sx)
    return view(em, inst, tuple(1 if k in new else next(dims) for k in range(rank)))


# -- strided copies --------------------------------------------------------
@lowers('Transpose')
def transpose(em, inst) -> Step:
    sx = em.shape(inst, 0, ANY_DTYPE)
    perm = [int(p) for p in inst.attrs.get('perm') or range(len(sx) - 1, -1, -1)]
    if sorted(perm) != list(range(len(sx))):
        raise Refuse('perm %s is not a permutation of the %d axes' % (perm, len(sx)))
    out = tuple(sx[p] for p in perm)
    if sorted(p for p in perm if sx[p] != 1) == [p for p in perm if sx[p] != 1]:
        return view(em, inst, out, same_order=True)
    xs = c_strides(sx)
    # Channel shuffle's Reshape -> Transpose -> Reshape: two views around one
    # copy, whose contiguous runs (H * W elements) coalesce moves whole.
    return _copy_step(em, inst, out, [xs[p] for p in perm])


def slice_ranges(sx, starts, ends, axes, steps) -> list[range]:
    """The index range Slice takes along each axis of ``sx`` (ONNX clamps
    starts and ends exactly as Python's slice.indices does)."""
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise Refuse('starts, ends, axes and steps differ in length')
    ranges = [range(d) for d in sx]
    seen = set()
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = checked_axis(axis, len(sx))
        if axis in seen or step == 0:
            raise Refuse('axis %d sliced twice' % axis if axis in seen else 'a step is 0')
        seen.add(axis)
        ranges[axis] = range(*slice(start, end, step).indices(sx[axis]))
    return ranges


@lowers('Slice')
def slice_(em, inst) -> Step:
    sx = em.shape(inst, 0, ANY_DTYPE)
    if inst.version < 10:
        a = inst.attrs
        ranges = slice_ranges(sx, list(a.get('starts', ())), list(a.get('ends', ())),
                               a.get('axes'), None)
    else:
        ranges = slice_ranges(sx, const_ints(em, inst, 1, 'starts') or [],
                               const_ints(em, inst, 2, 'ends') or [],
                               const_ints(em, inst, 3, 'axes'),
                               const_ints(em, inst, 4, 'steps'))
    xs = c_strides(sx)
    out = tuple(len(r) for r in ranges)
    offset = sum(r.start * s for r, s in zip(ranges, xs)) if math.prod(out) else 0
    return _copy_step(em, inst, out, [r.step * s for r, s in zip(ranges, xs)], offset)


def _split_sizes(em, inst, dim: int) -> list[int]:
    """The sizes of Split's parts along its axis of length ``dim``: given
    (attribute before opset 13, input 1 in opset 1 and from 13), or else
    len(outputs) (num_outputs from 18) parts of ceil(dim / n), the last
    one shorter."""
    a = inst.attrs
    if inst.version >= 13 or (inst.version == 1 and em.has(inst, 1)):
        sizes = const_ints(em, inst, 1, 'split sizes')
    else:
        sizes = None if a.get('split') is None else [int(s) for s in a['split']]
    n = len(inst.outputs)
    if sizes is None:
        if int(a.get('num_outputs', n)) != n:
            raise Refuse('num_outputs %d but %d outputs' % (a['num_outputs'], n))
        chunk = -(-dim // n)
        sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(n)]
    if len(sizes) != n or sum(sizes) != dim or min(sizes) < 0:
        raise Refuse('split sizes %s do not cut %d into %d parts' % (sizes, dim, n))
    return sizes


@lowers('Split')
def split(em, inst) -> Step:
    sx = em.shape(inst, 0, ANY_DTYPE)
    axis = checked_axis(int(inst.attrs['axis']), len(sx))
    sizes = _split_sizes(em, inst, sx[axis])
    elem, xs = dtype_itemsize(em.dtype(inst, 0)), c_strides(sx)
    shapes = [sx[:axis] + (s,) + sx[axis + 1:] for s in sizes]
    begins = [sum(sizes[:k]) for k in range(len(sizes))]

    def render(ref, scratch):
        lines = []
        for r, shape, begin in zip(inst.outputs, shapes, begins):
            if r != NO_REGISTER:
                lines += _strided_copy(elem, shape, at(ref(inst.inputs[0]), begin * xs[axis]),
                                       xs, ref(r), c_strides(shape))
        return lines
    return Step('array', list(shapes), render)


@lowers('Concat')
def concat(em, inst) -> Step:
    shapes = [em.shape(inst, k, ANY_DTYPE) for k in range(len(inst.inputs))]
    dtypes = {em.dtype(inst, k) for k in range(len(inst.inputs))}
    if len(dtypes) != 1:
        raise Refuse('its inputs mix dtypes %s' % sorted(dtypes))
    rank = len(shapes[0])
    axis = checked_axis(int(inst.attrs['axis']), rank)
    if any(len(s) != rank or s[:axis] + s[axis + 1:] != shapes[0][:axis] + shapes[0][axis + 1:]
           for s in shapes):
        raise Refuse('shapes %s differ off axis %d' % ([list(s) for s in shapes], axis))
    out = shapes[0][:axis] + (sum(s[axis] for s in shapes),) + shapes[0][axis + 1:]
    elem, ys = dtype_itemsize(dtypes.pop()), c_strides(out)
    offsets = [sum(s[axis] for s in shapes[:k]) * ys[axis] for k in range(len(shapes))]
    # With one block per outer index (batch 1, or axis 0) each input is one
    # contiguous block of the output, which its producer may write itself.
    parts = tuple((k, offsets[k]) for k, s in enumerate(shapes)
                  if math.prod(out[:axis]) == 1 and math.prod(s))

    def render(ref, scratch):
        lines = []
        for r, shape, offset in zip(inst.inputs, shapes, offsets):
            target = at(ref(inst.outputs[0]), offset)
            if ref(r) == target:  # the planner put it there (Step.parts)
                lines.append('/* %%%d is already in place */' % r)
            else:
                lines += _strided_copy(elem, shape, ref(r), c_strides(shape), target, ys)
        return lines
    return Step('array', [out], render, parts=parts)


@lowers('Expand')
def expand(em, inst) -> Step:
    sx = em.shape(inst, 0, ANY_DTYPE)
    target = const_ints(em, inst, 1, 'target shape')
    try:
        out = tuple(numpy.broadcast_shapes(sx, tuple(target or ())))
    except ValueError:
        raise Refuse('shape %s does not expand to %s' % (list(sx), target)) from None
    return _copy_step(em, inst, out, broadcast_strides(sx, out))


# -- copies through index tables -------------------------------------------
def _table_copy_step(em, inst, out, tables, fill=None) -> Step:
    """Output 0 (``out``) gathered from input 0 through one index table per
    axis (-1: the element ``fill``, a C expression of a pointer to it)."""
    sx = em.shape(inst, 0, ANY_DTYPE)
    elem = dtype_itemsize(em.dtype(inst, 0))
    if not out:  # a 0-d array: one element on one axis
        out, sx, tables = (1,), (1,), [[0]]
    flat = [int(i) for table in tables for i in table]

    def render(ref, scratch):
        if math.prod(out) == 0:
            return ['/* empty: nothing to copy */']
        return ['{',
                '    static const long shape[] = %s, xs[] = %s;' % (clist(out),
                                                                    clist(c_strides(sx))),
                '    static const long tables[] = %s;' % clist(flat),
                '    ccn_table_copy(%d, %d, shape, tables, %s, xs, %s, %s);'
                % (elem, len(out), ref(inst.inputs[0]), fill(ref) if fill else 'NULL',
                   ref(inst.outputs[0])),
                '}']
    return Step('array', [tuple(out)], render)


@lowers('Tile')
def tile(em, inst) -> Step:
    sx = em.shape(inst, 0, ANY_DTYPE)
    if inst.version >= 6:
        repeats = const_ints(em, inst, 1, 'repeats') or []
    else:
        tiles, axis = const_ints(em, inst, 1, 'tiles'), const_ints(em, inst, 2, 'axis')
        if not tiles or not axis:
            raise Refuse('Tile needs tiles and axis')
        repeats = [1] * len(sx)
        repeats[checked_axis(axis[0], len(sx))] = tiles[0]
    if len(repeats) != len(sx) or min(repeats, default=0) < 0:
        raise Refuse('repeats %s do not fit rank %d' % (repeats, len(sx)))
    out = tuple(d * r for d, r in zip(sx, repeats))
    return _table_copy_step(em, inst, out, [numpy.arange(n) % max(d, 1)
                                            for n, d in zip(out, sx)])


#: The modes of a Pad other than 'constant', each numpy.pad's mode of its name.
_TABLE_PAD_MODES: dict[str, Literal['reflect', 'edge', 'wrap']] = {
    'reflect': 'reflect', 'edge': 'edge', 'wrap': 'wrap'}


def _pads(em, inst, rank: int) -> list[int]:
    """Pad's [begin_0, ..., begin_n, end_0, ..., end_n]: attribute
    ``paddings`` (opset 1), ``pads`` (2 to 10), input 1 from 11, spread over
    the axes of input 3 (from 18) when given."""
    if inst.version < 11:
        pads = [int(p) for p in inst.attrs.get('paddings' if inst.version < 2 else 'pads', ())]
    else:
        pads = const_ints(em, inst, 1, 'pads') or []
    axes = const_ints(em, inst, 3, 'axes') if inst.version >= 18 else None
    if axes is None:
        axes = list(range(rank))
    if len(pads) != 2 * len(axes):
        raise Refuse('%d pads for %d axes' % (len(pads), len(axes)))
    full = [0] * (2 * rank)
    for k, a in enumerate(axes):
        axis = checked_axis(a, rank)
        full[axis], full[axis + rank] = pads[k], pads[k + len(axes)]
    return full


@lowers('Pad')
def pad(em, inst) -> Step:
    sx = em.shape(inst, 0, ANY_DTYPE)
    mode = inst.attrs['mode']
    if mode != 'constant' and mode not in _TABLE_PAD_MODES:
        raise Refuse('mode %r is not supported' % mode)
    pads = _pads(em, inst, len(sx))
    tables = [_pad_table(d, begin, end, mode) for d, begin, end in zip(sx, pads, pads[len(sx):])]
    fill = _pad_value(em, inst, em.dtype(inst, 0)) if mode == 'constant' else None
    return _table_copy_step(em, inst, tuple(len(t) for t in tables), tables, fill)


def _pad_table(d: int, begin: int, end: int, mode: str):
    """Source index of each output element along an axis of ``d`` padded
    by ``begin`` and ``end`` (-1: the constant)."""
    # Negative pads crop; what is left is then padded.
    kept = numpy.arange(max(-begin, 0), d - max(-end, 0))
    width = (max(begin, 0), max(end, 0))
    if mode == 'constant':
        return numpy.pad(kept, width, mode='constant', constant_values=-1)
    # Like onnxruntime, refuse to reflect further than the axis reaches.
    if any(width) and (len(kept) == 0 or (mode == 'reflect' and max(width) >= len(kept))):
        raise Refuse('%s padding by %s of an axis of %d' % (mode, width, len(kept)))
    return numpy.pad(kept, width, mode=_TABLE_PAD_MODES[mode])


def _pad_value(em, inst, dtype: str):
    """The fill of a constant Pad as (ref -> C pointer expression): input 2
    from opset 11 (any value of the data's dtype), else the attribute
    ``value`` (default 0) as a compound literal."""
    if inst.version >= 11 and em.has(inst, 2):
        if em.dtype(inst, 2) != dtype:
            raise Refuse('constant_value is %s, the data %s' % (em.dtype(inst, 2), dtype))
        return lambda ref: ref(inst.inputs[2])
    literal = cliteral(float(inst.attrs.get('value', 0.0)), dtype)
    return lambda ref: '(const %s[]){%s}' % (C_TYPES[dtype], literal)


# -- kernels of their own --------------------------------------------------
@lowers('Gather')
def gather(em, inst) -> Step:
    sx = em.shape(inst, 0, ANY_DTYPE)
    si = em.shape(inst, 1, INDEX_DTYPES)
    axis = checked_axis(int(inst.attrs['axis']), len(sx))
    dim, n = sx[axis], math.prod(si)
    indices = em.const(inst.inputs[1])
    if indices is not None and ((indices < -dim) | (indices >= dim)).any():
        raise Refuse('indices out of range for an axis of %d' % dim)
    if dim == 0 and n:
        raise Refuse('it gathers from an empty axis')
    elem = dtype_itemsize(em.dtype(inst, 0))
    index_bytes = dtype_itemsize(em.dtype(inst, 1))
    out = sx[:axis] + tuple(si) + sx[axis + 1:]

    def render(ref, scratch):
        return ['if (ccn_gather(%d, %d, %d, %d, %s, %d, %s, %d, %s))'
                % (elem, math.prod(sx[:axis]), dim, math.prod(sx[axis + 1:]),
                   ref(inst.inputs[0]), n, ref(inst.inputs[1]), index_bytes,
                   ref(inst.outputs[0])),
                '    return CCN_FAILED;']
    # numpy.take's IndexError, less the index (the message is static).
    return Step('array', [out], render, error='IndexError: an index is out of bounds for '
                'axis %d with size %d' % (axis, dim))


@lowers('GatherND')
def gather_nd(em, inst) -> Step:
    sx = em.shape(inst, 0, ANY_DTYPE)
    si = em.shape(inst, 1, INDEX_DTYPES)
    b = int(inst.attrs.get('batch_dims', 0))
    depth = si[-1] if si else 0
    if not 0 <= b < min(len(sx), len(si)) or not 1 <= depth <= len(sx) - b \
            or tuple(si[:b]) != tuple(sx[:b]):
        raise Refuse('indices of shape %s do not index data of shape %s with batch_dims %d'
                     % (list(si), list(sx), b))
    dims = sx[b:b + depth]
    if 0 in dims and math.prod(si):
        raise Refuse('it gathers from an empty axis')
    out = tuple(si[:-1]) + tuple(sx[b + depth:])
    elem, index_bytes = dtype_itemsize(em.dtype(inst, 0)), dtype_itemsize(em.dtype(inst, 1))

    def render(ref, scratch):
        return ['{',
                '    static const long dims[] = %s;' % clist(dims),
                '    if (ccn_gather_nd(%d, %d, %d, dims, %d, %s, %d, %s, %d, %s))'
                % (elem, math.prod(sx[:b]), depth, math.prod(sx[b + depth:]),
                   ref(inst.inputs[0]), math.prod(si[b:-1]), ref(inst.inputs[1]),
                   index_bytes, ref(inst.outputs[0])),
                '        return CCN_FAILED;',
                '}']
    return Step('array', [out], render, error='IndexError: an index is out of bounds for '
                'the data of GatherND, of shape %s' % list(sx))


# -- Resize ------------------------------------------------------------------
#: mode -> the NumPy kernel's own (Resize-10 also calls linear bilinear).
_RESIZE_MODES = {'nearest': 'nearest', 'linear': 'linear', 'bilinear': 'linear',
                 'cubic': 'cubic'}


def _resize_operands(em, inst, sx):
    """(output shape, per-axis scales, per-axis rois, the options of
    resize_tables) of a Resize whose scales, sizes and roi are constants, as
    the NumPy kernels read them."""
    a = inst.attrs
    mode = _RESIZE_MODES.get(a.get('mode', 'nearest'))
    if mode is None or inst.version >= 11 and a.get('mode') == 'bilinear':
        raise Refuse('mode %r is not one of nearest, linear, cubic' % a.get('mode'))
    if inst.version < 11:  # asymmetric coordinates, output floor(in * scale)
        scales = const_floats(em, inst, 1, 'scales')
        if scales is None or len(scales) != len(sx):
            raise Refuse('it needs one scale per axis of its input, got %s' % scales)
        return ([int(math.floor(d * f)) for d, f in zip(sx, scales)], scales, None,
                dict(mode=mode, transform='asymmetric', nearest_mode=_legacy_nearest_rounding))
    roi, scales, sizes = (const_floats(em, inst, k, what)
                          for k, what in ((1, 'roi'), (2, 'scales'), (3, 'sizes')))
    transform = a.get('coordinate_transformation_mode', 'half_pixel')
    try:
        roi_a, scales_a, sizes_a = (None if v is None else numpy.array(v)
                                    for v in (roi, scales, sizes))
        out, all_scales, all_roi = resize_plan(
            sx, roi_a, scales_a, sizes_a, a.get('axes'),
            a.get('keep_aspect_ratio_policy', 'stretch'), transform)
    except (ValueError, IndexError, TypeError, AttributeError, ZeroDivisionError) as e:
        raise Refuse('its scales, sizes or axes do not fit its input %s (%s)'
                     % (list(sx), e)) from None
    return out, all_scales, all_roi, dict(
        mode=mode, transform=transform,
        nearest_mode=a.get('nearest_mode', 'round_prefer_floor'),
        cubic_coeff_a=float(a.get('cubic_coeff_a', -0.75)),
        exclude_outside=int(a.get('exclude_outside', 0)), antialias=int(a.get('antialias', 0)))


def const_floats(em, inst, k: int, what: str) -> list[float] | None:
    """Input ``k`` as a list of floats (None when absent or empty), refused
    unless it is a constant."""
    if not em.has(inst, k):
        return None
    value = em.const(inst.inputs[k])
    if value is None:
        raise Refuse('its %s must be a constant (computed before the model runs)' % what)
    return [float(v) for v in value.reshape(-1)] or None


def resize_tables(in_shape, out_shape, scales, roi, mode, transform, nearest_mode,
                  cubic_coeff_a=-0.75, exclude_outside=0, antialias=0):
    """(axis, index, weight, outside) for each axis Resize changes, in the
    NumPy kernel's order and from its own helpers: index and weight are
    [out_len, taps] (int32, float32), outside a bool [out_len] or None."""
    tables = []
    for axis, source, outside in resize_axes(in_shape, out_shape, scales, roi, mode, transform,
                                             nearest_mode, cubic_coeff_a, exclude_outside,
                                             antialias):
        if mode == 'nearest':
            index = source[:, None]
            weight = numpy.ones(index.shape)
        else:
            matrix = source.T
            taps = max(1, int((matrix != 0).sum(axis=1).max(initial=0)))
            # Each output's non-zero weights first (zero weights pad the rows).
            index = numpy.argsort(matrix == 0, axis=1, kind='stable')[:, :taps]
            weight = numpy.take_along_axis(matrix, index, axis=1)
        tables.append((axis, index.astype(numpy.int32), weight.astype(numpy.float32), outside))
    return tables


@lowers('Resize')
def resize(em, inst) -> Step:
    sx = em.shape(inst, 0)
    out, scales, roi, options = _resize_operands(em, inst, sx)
    if any(d < 0 for d in out) or 0 in sx and math.prod(out):
        raise Refuse('it resizes %s to %s' % (list(sx), out))
    try:
        tables = resize_tables(sx, out, scales, roi, **options)
    except ValueError as e:  # an unknown coordinate transformation or nearest mode
        raise Refuse(str(e)) from None
    fill = float(inst.attrs.get('extrapolation_value', 0.0))
    if [t[0] for t in tables] == [len(sx) - 2, len(sx) - 1] and tables[0][3] is None \
            and tables[1][3] is None:
        return _resize_2d(em, inst, sx, out, tables)
    # Each pass resizes one more axis: its result's size, the last one's in y.
    shapes, shape = [], list(sx)
    for axis, *_ in tables:
        shape[axis] = out[axis]
        shapes.append(math.prod(shape))
    buffers = min(2, max(len(tables) - 1, 0))
    half = max(shapes[:-1], default=0)
    names = [(em.constant_array('resize%d_%d_i' % (inst.outputs[0], axis), index),
              em.constant_array('resize%d_%d_w' % (inst.outputs[0], axis), weight),
              'NULL' if outside is None else
              em.constant_array('resize%d_%d_o' % (inst.outputs[0], axis), outside))
             for axis, index, weight, outside in tables]

    def render(ref, scratch):
        x, y = ref(inst.inputs[0]), ref(inst.outputs[0])
        if not tables:
            return ['ccn_copy(%d, %s, %s);' % (4 * math.prod(sx), x, y)]
        lines, shape, source = [], list(sx), x
        for k, ((axis, index, _, _), (i, w, o)) in enumerate(zip(tables, names)):
            target = y if k == len(tables) - 1 else '%s + %d' % (scratch, half * (k % 2))
            lines.append('ccn_resize_axis(%d, %d, %d, %d, %d, %s, %s, %s, %s, %s, %s);' % (
                math.prod(shape[:axis]), shape[axis], out[axis], math.prod(shape[axis + 1:]),
                index.shape[1], i, w, o, cliteral(fill, 'float32'), source, target))
            shape[axis], source = out[axis], target
        return lines
    return Step('array', [tuple(out)], render, scratch=half * buffers)


#: ccn_resize_2d's sizes (ccn_array.h).
RESIZE_2D_GEOMETRY = CStruct('ccn_resize_2d_geometry', (
    'outer', 'in_h', 'in_w', 'out_h', 'out_w', 'taps_h', 'taps_w', 'columns_first'))


def _resize_2d(em, inst, sx, out, tables) -> Step:
    """Resize of the last two axes (an image's height and width) as one
    ccn_resize_2d: plane by plane, each plane's intermediate in cache,
    the passes in the order of less work (a gather of the columns costs
    about two multiply-adds of a whole-row tap)."""
    (_, index_h, weight_h, _), (_, index_w, weight_w, _) = tables
    (in_h, in_w), (out_h, out_w) = sx[-2:], out[-2:]
    taps_h, taps_w = index_h.shape[1], index_w.shape[1]
    columns_first = (2 * in_h * out_w * taps_w + out_h * out_w * taps_h
                     < out_h * in_w * taps_h + 2 * out_h * out_w * taps_w)
    outer = math.prod(sx[:-2])
    mid = outer * (in_h * out_w if columns_first else out_h * in_w)
    geometry = RESIZE_2D_GEOMETRY.literal(outer=outer, in_h=in_h, in_w=in_w, out_h=out_h,
                                          out_w=out_w, taps_h=taps_h, taps_w=taps_w,
                                          columns_first=columns_first)
    h, w = ([em.constant_array('resize%d_%d_%s' % (inst.outputs[0], axis, kind), table)
             for kind, table in (('i', index), ('w', weight))]
            for axis, index, weight in ((len(sx) - 2, index_h, weight_h),
                                        (len(sx) - 1, index_w, weight_w)))

    def render(ref, scratch):
        if math.prod(out) == 0:
            return ['/* empty: nothing to resize */']
        return ['ccn_resize_2d(%s,' % geometry,
                '              %s, %s, %s, %s, %s, %s, %s);' % (
                    *h, *w, ref(inst.inputs[0]), ref(inst.outputs[0]), scratch)]
    return Step('array', [tuple(out)], render, scratch=mid)


@lowers('Where')
def where(em, inst) -> Step:
    sc = em.shape(inst, 0, ('bool',))
    sx, sy = em.shape(inst, 1, ANY_DTYPE), em.shape(inst, 2, ANY_DTYPE)
    dtype = em.dtype(inst, 1)
    if em.dtype(inst, 2) != dtype:
        raise Refuse('x is %s but y %s' % (dtype, em.dtype(inst, 2)))
    try:
        out = tuple(numpy.broadcast_shapes(sc, sx, sy))
    except ValueError:
        raise Refuse('shapes %s, %s and %s do not broadcast'
                     % (list(sc), list(sx), list(sy))) from None
    dims, (cs, xs, ys, _) = coalesce(out, [broadcast_strides(s, out)
                                            for s in (sc, sx, sy, out)])

    def render(ref, scratch):
        if math.prod(out) == 0:
            return ['/* empty: nothing to select */']
        return ['{',
                '    static const long shape[] = %s, cs[] = %s, xs[] = %s, ys[] = %s;'
                % (clist(dims), clist(cs), clist(xs), clist(ys)),
                '    ccn_where(%d, %d, shape, %s, cs, %s, xs, %s, ys, %s);'
                % (dtype_itemsize(dtype), len(dims), *(ref(r) for r in inst.inputs),
                   ref(inst.outputs[0])),
                '}']
    return Step('array', [out], render, dtypes=[dtype])


@lowers('Cast', 'CastLike')
def cast(em, inst) -> Step:
    sx = em.shape(inst, 0, ANY_DTYPE)
    source = em.dtype(inst, 0)
    if inst.op == 'CastLike':
        target = em.dtype(inst, 1)
    else:
        to = inst.attrs.get('to')
        to = _CAST_V1_TYPES.get(to.decode() if isinstance(to, bytes) else to, to) \
            if inst.version < 6 else to
        target = numpy.dtype(to).name if to is not None else None
    if target not in C_TYPES:
        raise Refuse('the target dtype %s is not one of %s' % (target, ', '.join(C_TYPES)))
    if target == source:
        return view(em, inst, sx)

    def render(ref, scratch):
        return ['ccn_cast_%s_%s(%d, %s, %s);' % (source, target, math.prod(sx),
                                                 ref(inst.inputs[0]), ref(inst.outputs[0]))]
    return Step('array', [sx], render, dtypes=[target])

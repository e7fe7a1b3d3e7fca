"""``x[key]`` on a tensor: NumPy's basic indexing (ints, slices, None,
Ellipsis), with run-time ints and slice bounds, and one integer index array
(Gather)."""
import numpy
from onnx import TensorProto, helper

from .control_flow import SequenceSpec, value_info
from .operators import cast
from .values import Const, PyTuple, Sequence, Tensor, TranslationError, Value

_INT64_MAX = numpy.iinfo(numpy.int64).max
_INT64_MIN = numpy.iinfo(numpy.int64).min


class SliceValue(Value):
    """``lower:upper:step`` with a bound known only at run time (each part
    a Value or None)."""
    kind = 'a slice'

    def __init__(self, lower, upper, step):
        self.lower, self.upper, self.step = lower, upper, step

    def example(self):
        return slice(*[None if p is None else _example(p)
                       for p in (self.lower, self.upper, self.step)])


def _example(value):
    return int(value.example) if isinstance(value, Tensor) else value.value


def _items(key):
    return list(key.items) if isinstance(key, PyTuple) else [key]


def _example_key(item):
    if isinstance(item, SliceValue):
        return item.example()
    if isinstance(item, Tensor):
        return item.example
    return item.value


def index_tensor(scope, tensor, key, site):
    """``tensor[key]``."""
    items = _items(key)
    for item in items:
        if not isinstance(item, (Const, Tensor, SliceValue)):
            raise TranslationError(site, 'a tensor index must be an int, a slice, None, '
                                   '... or an integer tensor, not %s' % item.kind)
        if isinstance(item, Const) and not (item.value is None or item.value is Ellipsis or
                                            isinstance(item.value, (int, slice, numpy.integer))):
            raise TranslationError(site, 'unsupported tensor index %r' % (item.value,))
    ellipses = [i for i, it in enumerate(items) if isinstance(it, Const) and it.value is Ellipsis]
    if len(ellipses) > 1:
        raise TranslationError(site, 'an index can only have a single ellipsis')
    consumed = sum(1 for it in items if not (isinstance(it, Const) and it.value in (None,)) and
                   not (isinstance(it, Const) and it.value is Ellipsis))
    if consumed > tensor.ndim:
        raise TranslationError(site, 'too many indices (%d) for a tensor of rank %d'
                               % (consumed, tensor.ndim))
    if ellipses:
        k = ellipses[0]
        items = items[:k] + [Const(slice(None))] * (tensor.ndim - consumed) + items[k + 1:]
    arrays = [it for it in items if isinstance(it, Tensor) and it.example.ndim > 0]
    if len(arrays) > 1:
        raise TranslationError(site, 'more than one integer index array is not supported')
    with numpy.errstate(all='ignore'):
        example = tensor.example[tuple(_example_key(it) for it in items)]
    shape = list(tensor.shape)
    value, axis = tensor, 0
    out_shape = []
    for item in items:
        if isinstance(item, Const) and item.value is None:
            value = Tensor(scope.unsqueeze(value.name, [axis]),
                           numpy.expand_dims(value.example, axis))
            out_shape.append(1)
            axis += 1
            continue
        size = shape.pop(0)
        if isinstance(item, Const) and isinstance(item.value, slice):
            if item.value == slice(None):
                out_shape.append(size)
                axis += 1
                continue
            value = _slice(scope, value, axis, [_part(scope, p, site) if p is not None
                                                else None for p in
                                                (item.value.start, item.value.stop,
                                                 item.value.step)])
            out_shape.append(len(range(*item.value.indices(size))) if size is not None
                             else None)
            axis += 1
        elif isinstance(item, SliceValue):
            value = _slice(scope, value, axis, [None if p is None else
                                                cast(scope, scope.as_tensor(p, site), numpy.int64)
                                                for p in (item.lower, item.upper, item.step)])
            out_shape.append(None)
            axis += 1
        else:  # an int or an integer tensor: Gather
            index = scope.as_tensor(item, site, 'an index')
            if index.dtype.kind not in 'iu':
                raise TranslationError(site, 'a tensor index must be an integer, not %s'
                                       % index.dtype)
            index = cast(scope, index, numpy.int64)
            value = scope.emit('Gather', [value, index], value.example, axis=axis)
            out_shape.extend(index.shape)
            axis += index.ndim
    out_shape.extend(shape)
    return Tensor(value.name, example, tuple(out_shape) if len(out_shape) == example.ndim
                  else None)


def _part(scope, value, site):
    return scope.const_tensor(numpy.int64(value))


def _slice(scope, value, axis, parts):
    """Slice ``value`` along ``axis``; ``parts`` are int64 Tensors or None."""
    start, stop, step = parts
    negative = step is not None and isinstance(step, Tensor) and int(step.example) < 0
    if start is None:
        start = scope.const_tensor(numpy.int64(_INT64_MAX if negative else 0))
    if stop is None:
        stop = scope.const_tensor(numpy.int64(_INT64_MIN if negative else _INT64_MAX))
    if step is None:
        step = scope.const_tensor(numpy.int64(1))
    one_d = [scope.unsqueeze(p.name, [0]) for p in (start, stop, step)]
    axes = scope.int64s([axis])
    return scope.emit('Slice', [value.name, one_d[0], one_d[1], axes, one_d[2]], value.example)


# -- slicing a sequence -----------------------------------------------------------
def slice_sequence(scope, seq, key, site):
    """``seq[start:stop:step]`` of a Sequence (a list whose length only the
    run knows), ``key`` a constant slice or a SliceValue: the bounds are
    normalized at run time as Python's ``slice.indices`` does (negative
    indices count from the end, out-of-range ones clamp), then a Loop
    copies the kept elements into a new sequence (SequenceAt and
    SequenceInsert, whose gradients exist, so lists of float tensors train
    through it)."""
    parts = [key.value.start, key.value.stop, key.value.step] if isinstance(key, Const) else \
        [key.lower, key.upper, key.step]
    parts = [None if p is None or (isinstance(p, Const) and p.value is None) else
             cast(scope, scope.as_tensor(p if isinstance(p, Value) else Const(p), site,
                                         'a slice bound'), numpy.int64) for p in parts]
    start, stop, step = parts
    if step is None:
        step = scope.const_tensor(numpy.int64(1))
    elif not step.example:
        raise TranslationError(site, 'slice step cannot be zero')
    n = scope.emit('SequenceLength', [seq.name], numpy.int64(len(seq.examples)))
    # Python's slice.indices(n): bounds clamp to [0, n] going forward and to
    # [-1, n - 1] going backward, where the defaults are the two ends.
    backward = scope.emit('Less', [step, _int64(scope, 0)], step.example < 0)
    low = _pick(scope, backward, _int64(scope, -1), _int64(scope, 0))
    high = scope.emit('Add', [n, low], n.example + low.example)
    first = _pick(scope, backward, high, low) if start is None else \
        _clamp(scope, start, n, low, high)
    last = _pick(scope, backward, low, high) if stop is None else \
        _clamp(scope, stop, n, low, high)
    sign = _pick(scope, backward, _int64(scope, -1), _int64(scope, 1))
    count = _span(scope, first, last, step, sign)
    return _copy_elements(scope, seq, first, step, count, slice(
        *[None if p is None else int(p.example) for p in (start, stop, parts[2])]))


def _int64(scope, value):
    return scope.const_tensor(numpy.int64(value))


def _pick(scope, cond, if_true, if_false):
    """Where(``cond``, ``if_true``, ``if_false``) of a 0-d bool."""
    return scope.emit('Where', [cond, if_true, if_false],
                      if_true.example if cond.example else if_false.example)


def _clamp(scope, bound, n, low, high):
    """A slice bound made non-negative (``bound + n`` when below zero), then
    clamped to [low, high]."""
    negative = scope.emit('Less', [bound, _int64(scope, 0)], bound.example < 0)
    value = _pick(scope, negative, scope.emit('Add', [bound, n], bound.example + n.example),
                  bound)
    value = scope.emit('Max', [value, low], numpy.maximum(value.example, low.example))
    return scope.emit('Min', [value, high], numpy.minimum(value.example, high.example))


def _span(scope, first, last, step, sign):
    """How many of first, first + step, ... lie before ``last``:
    max(0, ceil((last - first) / step)).  Both multiplied by the step's
    ``sign`` (1 or -1) are non-negative where the count is positive, so the
    truncating Div floors there: the count is (distance + stride - 1) //
    stride."""
    def emit(op, a, b, example):
        return scope.emit(op, [a, b], example)
    distance = emit('Mul', emit('Sub', last, first, last.example - first.example), sign,
                    (last.example - first.example) * sign.example)
    stride = emit('Mul', step, sign, step.example * sign.example)
    top = emit('Add', distance, emit('Sub', stride, _int64(scope, 1), stride.example - 1),
               distance.example + stride.example - 1)
    count = emit('Div', top, stride, numpy.int64(int(top.example / stride.example)))
    return emit('Max', count, _int64(scope, 0), numpy.maximum(count.example, 0))


def _copy_elements(scope, seq, first, step, count, example_slice):
    """A Loop of ``count`` iterations appending ``seq[first + i * step]`` to
    a sequence that starts empty."""
    spec = SequenceSpec(seq.dtype, seq.element_shape)
    body = scope.child()
    i, cond, acc = body.fresh('i'), body.fresh('cond'), body.fresh('kept')
    index = body.node('Add', [first.name, body.node('Mul', [i, step.name])])
    element = body.node('SequenceAt', [seq.name, index])
    kept = body.node('SequenceInsert', [acc, element])
    cond_out = body.node('Identity', [cond])
    scalar = [helper.make_tensor_value_info(name, elem, []) for name, elem in
              ((i, TensorProto.INT64), (cond, TensorProto.BOOL))]
    graph = helper.make_graph(
        body.nodes, scope.fresh('slice_body'), scalar + [value_info(acc, spec)],
        [helper.make_tensor_value_info(cond_out, TensorProto.BOOL, []), value_info(kept, spec)],
        value_info=body.value_infos)
    empty = scope.node('SequenceEmpty', [], dtype=helper.np_dtype_to_tensor_dtype(seq.dtype))
    name = scope.node('Loop', [count.name, '', empty], body=graph)
    return Sequence(name, seq.dtype, seq.element_shape, list(seq.examples)[example_slice])

"""``x[key]`` on a tensor: NumPy's basic indexing (ints, slices, None,
Ellipsis), with run-time ints and slice bounds, and one integer index array
(Gather)."""
import numpy

from .operators import cast
from .values import Const, PyTuple, Tensor, TranslationError, Value

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

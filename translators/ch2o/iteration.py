"""Iterating in translated code: the items of an iterable known at export
time (a loop over them unrolls), or a trip count and an item getter for
one whose length is only known at run time (an ONNX Loop)."""
import ast
import itertools

import chainer
import numpy

from . import limits
from .control_flow import elements, to_sequence
from .operators import binary, cast
from .values import Const, PyDict, PyList, PyTuple, Sequence, Tensor, TranslationError, Value


class RangeValue(Value):
    """``range(start, stop, step)`` with a bound known only at run time."""
    kind = 'a range'

    def __init__(self, start, stop, step):
        self.start, self.stop, self.step = start, stop, step


class ZipValue(Value):
    """``zip(...)`` or ``enumerate(...)`` (a zip with a counting range)."""
    kind = 'a zip'

    def __init__(self, iterables):
        self.iterables = iterables


def wrap(scope, obj):
    """A Python object met during translation as a Value: Chainer Variables
    and Parameters become tensors (parameters as the model's initializers),
    anything else a constant."""
    if isinstance(obj, chainer.Variable):
        param = scope.param(obj.array)
        return param if param is not None else scope.const_tensor(obj.array)
    if isinstance(obj, numpy.ndarray):
        param = scope.param(obj)
        if param is not None:
            return param
    return Const(obj)


def static_items(scope, iterable, site):
    """The items of ``iterable`` when their number is known at export time
    (a list, tuple, dict, constant, ChainList, tensor of static first axis,
    zip of those), else None."""
    if isinstance(iterable, (PyList, PyTuple)):
        return list(iterable.items)
    if isinstance(iterable, PyDict):
        return [Const(k) for k in iterable.items]
    if isinstance(iterable, Const):
        try:
            values = list(itertools.islice(iterable.value, limits.MAX_UNROLLED_ITERATIONS + 1))
        except TypeError:
            raise TranslationError(site, '%s is not iterable'
                                   % type(iterable.value).__name__) from None
        limits.check_static_length(len(values), site)
        return [wrap(scope, v) for v in values]
    if isinstance(iterable, Tensor):
        if not iterable.ndim:
            raise TranslationError(site, 'iteration over a 0-d tensor')
        if iterable.shape[0] is None:
            return None
        limits.check_static_length(iterable.shape[0], site)
        return [tensor_item(scope, iterable, Const(k)) for k in range(iterable.shape[0])]
    if isinstance(iterable, ZipValue):
        columns = [static_items(scope, it, site) for it in iterable.iterables]
        if any(c is None for c in columns):
            return None
        return [PyTuple(tuple(row)) for row in zip(*columns)]
    return None


def items_of(scope, value, site, count=None):
    """The items of ``value`` as a list (unpacking, ``+=`` on lists); a
    sequence's first ``count`` when given."""
    items = static_items(scope, value, site)
    if items is None and isinstance(value, Sequence) and count is not None:
        return [sequence_item(scope, value, Const(i), site) for i in range(count)]
    if items is None:
        raise TranslationError(site, 'cannot unpack %s whose length is only known at run time'
                               % value.kind)
    return items


def dynamic_iteration(scope, iterable, site):
    """(trip count Tensor, ``getter(scope, iteration Tensor) -> item``) of
    an iterable whose length is known only at run time; the getter makes
    the item in the body's scope."""
    if isinstance(iterable, RangeValue):
        start, step = iterable.start, iterable.step
        if not isinstance(step, Const) or not isinstance(step.value, int) or not step.value:
            raise TranslationError(site, 'range(): the step must be a non-zero constant')
        span = binary(scope, ast.Sub(), iterable.stop, start, site)
        span = binary(scope, ast.Add(), span, Const(step.value - 1 if step.value > 0 else
                                                    step.value + 1), site)
        trip = cast(scope, scope.as_tensor(binary(scope, ast.FloorDiv(), span, step, site),
                                           site), numpy.int64)
        trip = scope.emit('Max', [trip, scope.const_tensor(numpy.int64(0))],
                          numpy.maximum(trip.example, 0))

        def range_item(body, i):
            return binary(body, ast.Add(), start, binary(body, ast.Mult(), i, step, site), site)
        return trip, range_item
    if isinstance(iterable, Sequence):
        trip = scope.emit('SequenceLength', [iterable.name], numpy.int64(len(iterable.examples)))
        return trip, lambda body, i: sequence_item(body, iterable, i, site)
    if isinstance(iterable, Tensor):
        return first_dim(scope, iterable), lambda body, i: tensor_item(body, iterable, i)
    if isinstance(iterable, ZipValue):
        parts = []
        for it in iterable.iterables:
            items = static_items(scope, it, site)
            if items is not None:
                parts.append((Const(len(items)), _static_getter(it, items, site)))
            else:
                parts.append(dynamic_iteration(scope, it, site))
        trip = None
        for count, _ in parts:
            count = cast(scope, scope.as_tensor(count, site), numpy.int64)
            trip = count if trip is None else scope.emit(
                'Min', [trip, count], numpy.minimum(trip.example, count.example))
        return trip, lambda body, i: PyTuple(tuple(get(body, i) for _, get in parts))
    raise TranslationError(site, 'iteration over %s is not supported' % iterable.kind)


def first_dim(scope, tensor):
    """The run-time size of ``tensor``'s first axis, a 0-d int64 Tensor."""
    shape = scope.emit('Shape', [tensor], numpy.array(tensor.example.shape))
    return scope.emit('Gather', [shape, scope.const_tensor(numpy.int64(0))],
                      numpy.int64(tensor.example.shape[0]), axis=0)


def _static_getter(iterable, items, site):
    """An item getter by run-time index for an iterable of known items."""
    def get(scope, i):
        if isinstance(iterable, Tensor):
            return tensor_item(scope, iterable, i)
        dtype = elements(PyList(items))[0]
        if dtype in (None, 'mixed'):
            raise TranslationError(site, 'zip() of a run-time-length iterable with a list '
                                   'needs a list of tensors of one dtype')
        return sequence_item(scope, to_sequence(scope, PyList(items), dtype, site), i, site)
    return get


def sequence_item(scope, seq, index, site):
    """``seq[index]``, a Tensor."""
    index = cast(scope, scope.as_tensor(index, site, 'a list index'), numpy.int64)
    examples = seq.examples
    k = int(index.example) if examples else 0
    example = examples[k] if examples and -len(examples) <= k < len(examples) else \
        numpy.zeros([1 if d is None else d for d in (seq.element_shape or ())], seq.dtype)
    name = scope.node('SequenceAt', [seq.name, index.name])
    return Tensor(name, example, seq.element_shape if seq.element_shape is not None and
                  len(seq.element_shape) == numpy.ndim(example) else None)


def tensor_item(scope, tensor, index):
    """``tensor[index]`` along the first axis (iteration)."""
    i = index.value if isinstance(index, Const) else None
    idx = scope.const_tensor(numpy.int64(i)) if i is not None else cast(scope, index, numpy.int64)
    k = i if i is not None else int(idx.example)
    example = tensor.example[k] if tensor.example.shape[0] > k else \
        numpy.zeros(tensor.example.shape[1:], tensor.dtype)
    return Tensor(scope.node('Gather', [tensor.name, idx.name], axis=0), example,
                  tensor.shape[1:])


def range_sequence(scope, value, site):
    """A run-time range as a sequence of 0-d int64 tensors."""
    ints = [cast(scope, scope.as_tensor(v, site), numpy.int64)
            for v in (value.start, value.stop, value.step)]
    example = numpy.arange(*[int(t.example) for t in ints], dtype=numpy.int64)
    r = scope.emit('Range', ints, example)
    name = scope.node('SplitToSequence', [r.name], axis=0, keepdims=0)
    return Sequence(name, numpy.dtype(numpy.int64), (), list(example))

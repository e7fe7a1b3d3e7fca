"""ONNX If and Loop nodes from translated Python branches and loop bodies.

Both come down to one problem: a Python name may be bound to different
values on different paths (the two branches of an ``if``, the value before
a loop and after one more iteration), and the graph needs one value for it
afterwards.  ``merge`` finds a ``Spec`` that covers both: a constant when
both paths agree on it, a tensor of one dtype (axes whose sizes differ
become None), a sequence when lists differ in length, tuples and lists of
those item by item.  ``flatten`` turns a path's value into the ONNX values
the spec needs (in that path's graph), ``unflatten`` rebuilds a Value from
the node's outputs.
"""
from dataclasses import dataclass

import numpy
from onnx import helper

from .operators import cast
from .values import (
    Const,
    PyDict,
    PyList,
    PyTuple,
    Sequence,
    Tensor,
    TranslationError,
    constant_value,
    is_constant,
)


class Undefined:
    """A name bound on some paths only: using it afterwards is an error."""

    kind = 'a name bound on some paths only'


# -- specs ------------------------------------------------------------------
class ConstSpec:
    """A value both paths agree on, known at export time."""

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return isinstance(other, ConstSpec) and _same_constant(self.value, other.value)

    def __hash__(self):
        return id(type(self))


@dataclass(frozen=True)
class TensorSpec:
    dtype: numpy.dtype
    shape: tuple


@dataclass(frozen=True)
class SequenceSpec:
    dtype: numpy.dtype
    shape: tuple


@dataclass(frozen=True)
class ItemsSpec:
    container: type  # PyList, PyTuple or PyDict
    keys: tuple      # dict keys; range(n) for lists and tuples
    items: tuple


def _same_constant(a, b):
    if a is b:
        return True
    if isinstance(a, numpy.ndarray) or isinstance(b, numpy.ndarray):
        return False
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


def _merge_shapes(a, b):
    if a is None or b is None or len(a) != len(b):
        return None
    return tuple(x if x == y else None for x, y in zip(a, b))


def _tensor_like(value):
    return isinstance(value, Tensor) or (
        isinstance(value, Const) and isinstance(value.value, (bool, int, float, numpy.generic,
                                                              numpy.ndarray)))


def _tensor_type(value):
    if isinstance(value, Tensor):
        return value.dtype, value.shape
    array = numpy.asarray(value.value)
    if isinstance(value.value, float):
        array = array.astype(numpy.float32)
    return array.dtype, array.shape


def _elements(value):
    """(dtype, element shape) of a list or sequence; (None, None) for an
    empty list."""
    if isinstance(value, Sequence):
        return value.dtype, value.element_shape
    dtype, shape = None, 'unset'
    for item in value.items:
        if not _tensor_like(item):
            return 'mixed', None
        d, s = _tensor_type(item)
        if dtype is not None and d != dtype:
            return 'mixed', None
        dtype = d
        shape = s if shape == 'unset' else _merge_shapes(shape, s)
    return dtype, (None if shape == 'unset' else shape)


def spec_of(value):
    """The spec of one value on its own."""
    if isinstance(value, Const):
        return ConstSpec(value.value)
    if isinstance(value, Tensor):
        return TensorSpec(value.dtype, value.shape)
    if isinstance(value, Sequence):
        return SequenceSpec(value.dtype, value.element_shape)
    if isinstance(value, (PyList, PyTuple)):
        return ItemsSpec(type(value), tuple(range(len(value.items))),
                         tuple(spec_of(v) for v in value.items))
    if isinstance(value, PyDict):
        keys = tuple(value.items)
        return ItemsSpec(PyDict, keys, tuple(spec_of(value.items[k]) for k in keys))
    raise TypeError(value)


def merge(a, b, site, name):
    """A Spec covering value ``a`` and value ``b`` of Python name ``name``."""
    if isinstance(a, Const) and isinstance(b, Const) and _same_constant(a.value, b.value):
        return ConstSpec(a.value)
    if _tensor_like(a) and _tensor_like(b):
        (da, sa), (db, sb) = _tensor_type(a), _tensor_type(b)
        if da != db:
            # a Python number takes the tensor's dtype (h = 0; h = h + x)
            if isinstance(a, Const) and not isinstance(b, Const):
                da = db
            elif isinstance(b, Const) and not isinstance(a, Const):
                db = da
            else:
                raise TranslationError(site, "'%s' is %s on one path and %s on another"
                                       % (name, da, db))
        return TensorSpec(numpy.dtype(da), _merge_shapes(sa, sb))
    if isinstance(a, PyTuple) and isinstance(b, PyTuple) or \
            isinstance(a, PyList) and isinstance(b, PyList) and len(a.items) == len(b.items):
        if len(a.items) != len(b.items):
            raise TranslationError(site, "'%s' is a tuple of %d items on one path and of %d "
                                   "on another" % (name, len(a.items), len(b.items)))
        return ItemsSpec(type(a), tuple(range(len(a.items))), tuple(
            merge(x, y, site, '%s[%d]' % (name, i))
            for i, (x, y) in enumerate(zip(a.items, b.items))))
    if isinstance(a, PyDict) and isinstance(b, PyDict):
        if set(a.items) != set(b.items):
            raise TranslationError(site, "'%s' has different keys on different paths" % name)
        keys = tuple(a.items)
        return ItemsSpec(PyDict, keys, tuple(merge(a.items[k], b.items[k], site,
                                                   '%s[%r]' % (name, k)) for k in keys))
    if isinstance(a, (PyList, Sequence)) and isinstance(b, (PyList, Sequence)):
        (da, sa), (db, sb) = _elements(a), _elements(b)
        if 'mixed' in (da, db):
            raise TranslationError(site, "'%s' is a list whose length differs between paths; "
                                   "such a list becomes an ONNX sequence, whose items must "
                                   "all be tensors of one dtype" % name)
        dtype = da if da is not None else db
        if dtype is None:
            raise TranslationError(site, "'%s': cannot tell the dtype of an empty list" % name)
        if da is not None and db is not None and da != db:
            raise TranslationError(site, "'%s' holds %s on one path and %s on another"
                                   % (name, da, db))
        shape = sb if sa is None else (sa if sb is None else _merge_shapes(sa, sb))
        return SequenceSpec(numpy.dtype(dtype), shape)
    raise TranslationError(site, "'%s' is %s on one path and %s on another; ch2o needs one "
                           "kind of value after the %s" % (name, a.kind, b.kind,
                                                          'branches or loop'))


def value_info(name, spec):
    """The ValueInfoProto of a graph input or output of ``spec``."""
    dims = None if spec.shape is None else list(spec.shape)
    elem = helper.np_dtype_to_tensor_dtype(spec.dtype)
    if isinstance(spec, TensorSpec):
        return helper.make_tensor_value_info(name, elem, dims)
    return helper.make_value_info(
        name, helper.make_sequence_type_proto(helper.make_tensor_type_proto(elem, dims)))


def leaves(spec):
    """The tensor and sequence specs in ``spec``, in flattening order."""
    if isinstance(spec, ItemsSpec):
        return [leaf for item in spec.items for leaf in leaves(item)]
    if isinstance(spec, ConstSpec):
        return []
    return [spec]


def flatten(scope, value, spec, site, own=True):
    """The ONNX names holding ``value`` as ``spec`` asks, made in ``scope``;
    ``own``: give every name a node in ``scope`` (graph outputs of a body
    must be made in it)."""
    if isinstance(spec, ConstSpec):
        return []
    if isinstance(spec, ItemsSpec):
        items = value.items
        values = [items[k] for k in spec.keys]
        return [n for v, s in zip(values, spec.items) for n in flatten(scope, v, s, site, own)]
    if isinstance(spec, TensorSpec):
        if isinstance(value, Const):
            t = scope.const_tensor(numpy.asarray(value.value, spec.dtype))
            made = False  # an initializer: no node of ``scope`` makes it
        else:
            t = cast(scope, value, spec.dtype)
            made = t is not value
        if own and not made:
            t = scope.emit('Identity', [t], t.example)
        return [t.name]
    # a sequence
    if isinstance(value, Sequence):
        if own:
            return [scope.node('Identity', [value.name])]
        return [value.name]
    return [to_sequence(scope, value, spec.dtype, site).name]


def to_sequence(scope, value, dtype, site):
    """A PyList (or Sequence) as a Sequence of ``dtype`` tensors."""
    if isinstance(value, Sequence):
        return value
    tensors = [cast(scope, scope.as_tensor(v, site, 'a list item'), dtype) for v in value.items]
    if not tensors:
        name = scope.node('SequenceEmpty', [], dtype=helper.np_dtype_to_tensor_dtype(dtype))
        return Sequence(name, numpy.dtype(dtype), None, [])
    shape = tensors[0].shape
    for t in tensors[1:]:
        shape = _merge_shapes(shape, t.shape)
    name = scope.node('SequenceConstruct', [t.name for t in tensors])
    return Sequence(name, numpy.dtype(dtype), shape, [t.example for t in tensors])


def unflatten(spec, names, example):
    """The Value ``spec`` describes, from the iterator ``names``;
    ``example`` is a value of the path the export-time run takes."""
    if isinstance(spec, ConstSpec):
        return Const(spec.value)
    if isinstance(spec, ItemsSpec):
        if isinstance(example, (PyList, PyTuple, PyDict)):
            examples = [example.items[k] for k in spec.keys]
        else:
            examples = [None] * len(spec.keys)
        items = [unflatten(s, names, e) for s, e in zip(spec.items, examples)]
        if spec.container is PyDict:
            return PyDict(dict(zip(spec.keys, items)))
        return spec.container(items if spec.container is PyList else tuple(items))
    name = next(names)
    if isinstance(spec, TensorSpec):
        ex = _tensor_example(example, spec)
        return Tensor(name, ex, _fit_shape(spec.shape, ex))
    examples = _sequence_examples(example, spec)
    return Sequence(name, spec.dtype, spec.shape, examples)


def _tensor_example(example, spec):
    if isinstance(example, Tensor):
        return example.example.astype(spec.dtype)
    if isinstance(example, Const):
        return numpy.asarray(example.value, spec.dtype)
    return numpy.zeros([1 if d is None else d for d in spec.shape], spec.dtype)


def _fit_shape(shape, example):
    if shape is None or len(shape) != example.ndim:
        return tuple(None for _ in example.shape)
    return shape


def _sequence_examples(example, spec):
    if isinstance(example, Sequence):
        return list(example.examples)
    if isinstance(example, PyList):
        return [_tensor_example(v, TensorSpec(spec.dtype, ())) for v in example.items]
    return []


def placeholder(scope, spec):
    """A value of ``spec`` for a path where the name is unbound (what a loop
    starts from for a name its body binds first; what a branch that does not
    return gives as the return value)."""
    if isinstance(spec, ConstSpec):
        return Const(spec.value)
    if isinstance(spec, ItemsSpec):
        items = [placeholder(scope, s) for s in spec.items]
        if spec.container is PyDict:
            return PyDict(dict(zip(spec.keys, items)))
        return spec.container(items if spec.container is PyList else tuple(items))
    if isinstance(spec, TensorSpec):
        return scope.const_tensor(numpy.zeros([1 if d is None else d for d in spec.shape],
                                              spec.dtype))
    name = scope.node('SequenceEmpty', [], dtype=helper.np_dtype_to_tensor_dtype(spec.dtype))
    return Sequence(name, spec.dtype, spec.shape, [])


def unchanged(a, b):
    """Whether values ``a`` and ``b`` are the same binding (a name a branch
    or loop body did not touch)."""
    if a is b:
        return True
    if isinstance(a, Const) and isinstance(b, Const):
        return _same_constant(a.value, b.value)
    if type(a) is not type(b) or not isinstance(a, (PyList, PyTuple, PyDict)):
        return False
    if isinstance(a, PyDict):
        return a.items.keys() == b.items.keys() and all(
            unchanged(a.items[k], b.items[k]) for k in a.items)
    return len(a.items) == len(b.items) and all(
        unchanged(x, y) for x, y in zip(a.items, b.items))


__all__ = ['ConstSpec', 'ItemsSpec', 'SequenceSpec', 'TensorSpec', 'Undefined', 'constant_value',
           'flatten', 'is_constant', 'leaves', 'merge', 'placeholder', 'spec_of', 'to_sequence',
           'unchanged', 'unflatten', 'value_info']

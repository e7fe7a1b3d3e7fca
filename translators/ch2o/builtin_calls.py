"""Python's builtins (``range``, ``len``, ``zip`` ...) and the few Chainer
functions ch2o answers itself, in translated code, as one table:
``BUILTINS[fn](call)`` is the Value of ``fn(*call.args, **call.kwargs)``.
``Call`` is also what a value's methods receive (``values.Value.call_method``)."""
import ast
from dataclasses import dataclass
from typing import Any, Callable

import chainer
import numpy

from . import limits
from .iteration import (
    RangeValue,
    ZipValue,
    dynamic_iteration,
    first_dim,
    items_of,
    range_sequence,
    static_items,
)
from .operators import binary, cast
from .values import (
    Const,
    PyDict,
    PyList,
    PyObject,
    PyTuple,
    Sequence,
    Tensor,
    TranslationError,
    constant_value,
)


@dataclass
class Call:
    """One call in translated code, as a builtin or a value's method gets it:
    the Values ``args`` and ``kwargs``, the ``scope`` (graph) it translates
    into, its ``site`` (file and line), ``label``, how messages name the
    callee, and for a method, ``rebind``, which binds the name the method
    was called on (None when it was called on anything but a name)."""
    scope: Any
    args: list
    kwargs: dict
    site: str
    label: str = ''
    rebind: Callable | None = None

    def error(self, message):
        return TranslationError(self.site, message)

    def unsupported(self):
        return self.error('%s(...) is not supported' % self.label)

    def positional(self, low, high=None):
        """The arguments, when they are ``low`` to ``high`` (default: just
        ``low``) positional ones."""
        high = low if high is None else high
        if self.kwargs or not low <= len(self.args) <= high:
            raise self.unsupported()
        return list(self.args)

    def constants(self, low, high=None):
        """The Python values of ``low`` to ``high`` positional arguments
        known at export time."""
        args = self.positional(low, high)
        if not all(isinstance(a, Const) for a in args):
            raise self.unsupported()
        return [a.value for a in args]

    def items(self, value):
        """The items of ``value`` as a list."""
        return items_of(self.scope, value, self.site)

    def tensor(self, value, what, dtype):
        """``value`` as a Tensor of ``dtype`` (``what`` names it in errors)."""
        return cast(self.scope, self.scope.as_tensor(value, self.site, what), dtype)

    def rebind_target(self, value):
        """Bind the name the method was called on to ``value``."""
        if self.rebind is None:
            raise self.error('append to a run-time-length list must name it directly '
                             '(xs.append(...))')
        self.rebind(value)


def _range(call):
    args = call.args
    if call.kwargs or not 1 <= len(args) <= 3:
        raise call.error('range() takes 1 to 3 positional arguments')
    if all(isinstance(a, Const) for a in args):
        try:
            values = range(*[a.value for a in args])
        except (TypeError, ValueError) as e:
            raise call.error('range(): %s' % e) from None
        # the length of a slice: a huge range's own len() overflows
        limits.check_static_length(len(values[:limits.MAX_UNROLLED_ITERATIONS + 1]), call.site)
        return PyList([Const(i) for i in values])
    start, stop, step = ([Const(0)] + args + [Const(1)])[:3] if len(args) == 1 else (
        args + [Const(1)])[:3]
    return RangeValue(start, stop, step)


def _len(call):
    value, = call.args
    scope = call.scope
    if isinstance(value, (PyList, PyTuple, PyDict)):
        return Const(len(value.items))
    if isinstance(value, Const):
        return Const(len(value.value))
    if isinstance(value, Sequence):
        return scope.emit('SequenceLength', [value.name], numpy.int64(len(value.examples)))
    if isinstance(value, Tensor):
        if value.shape and value.shape[0] is not None:
            return Const(value.shape[0])
        return first_dim(scope, value)
    if isinstance(value, RangeValue):
        trip, _ = dynamic_iteration(scope, value, call.site)
        return trip
    raise call.error('len() of %s' % value.kind)


def _zip(call):
    static = [static_items(call.scope, a, call.site) for a in call.args]
    if all(s is not None for s in static):
        return PyList([PyTuple(tuple(row)) for row in zip(*static)])
    return ZipValue(list(call.args))


def _enumerate(call):
    value = call.args[0]
    start = call.args[1] if len(call.args) > 1 else call.kwargs.get('start', Const(0))
    items = static_items(call.scope, value, call.site)
    if items is not None and isinstance(start, Const):
        return PyList([PyTuple((Const(start.value + i), v)) for i, v in enumerate(items)])
    count = RangeValue(start, Const(2 ** 62), Const(1))
    return ZipValue([count, value])


def _list(call):
    if not call.args:
        return PyList([])
    value = call.args[0]
    items = static_items(call.scope, value, call.site)
    if items is not None:
        return PyList(list(items))
    if isinstance(value, Sequence):
        return value
    if isinstance(value, RangeValue):
        return range_sequence(call.scope, value, call.site)
    raise call.error('list() of %s' % value.kind)


def _tuple(call):
    items = static_items(call.scope, call.args[0], call.site) if call.args else []
    if items is None:
        raise call.error('tuple() of a value whose length is only known at run time; use '
                         'list()')
    return PyTuple(tuple(items))


def _scalar_cast(dtype, python_type):
    def convert(call):
        value, = call.args
        if isinstance(value, Const):
            return Const(python_type(value.value))
        return cast(call.scope, call.scope.as_tensor(value, call.site), dtype)
    return convert


def _min_max(op, python_fn):
    def reduce(call):
        scope = call.scope
        values = call.args if len(call.args) > 1 else call.items(call.args[0])
        if all(isinstance(v, Const) for v in values):
            return Const(python_fn(v.value for v in values))
        tensors = [scope.as_tensor(v, call.site) for v in values]
        dtype = numpy.result_type(*[t.example for t in tensors])
        tensors = [cast(scope, t, dtype) for t in tensors]
        example = python_fn(t.example for t in tensors) if len(tensors) > 1 else \
            tensors[0].example
        fn = numpy.minimum if op == 'Min' else numpy.maximum
        for t in tensors[1:]:
            example = fn(example, t.example)
        return scope.emit(op, tensors, example)
    return reduce


def _abs(call):
    value, = call.args
    if isinstance(value, Const):
        return Const(abs(value.value))
    t = call.scope.as_tensor(value, call.site)
    return call.scope.emit('Abs', [t], numpy.abs(t.example))


def _sum(call):
    total = call.args[1] if len(call.args) > 1 else Const(0)
    for item in call.items(call.args[0]):
        total = binary(call.scope, ast.Add(), total, item, call.site)
    return total


#: The Python classes a translated value stands for (``isinstance``).
_CLASSES = {Tensor: (chainer.Variable, numpy.ndarray), PyList: (list,), PyTuple: (tuple,),
            PyDict: (dict,), Sequence: (list,)}


def _isinstance(call):
    value, classes = call.args
    if isinstance(value, Const):
        return Const(isinstance(value.value, constant_value(classes)))
    wanted = constant_value(classes)
    wanted = wanted if isinstance(wanted, tuple) else (wanted,)
    if isinstance(value, PyObject):
        return Const(issubclass(value.cls, wanted))
    return Const(any(issubclass(k, wanted) for k in _CLASSES.get(type(value), ())))


def _dropped(call):
    """``print``, ``chainer.report``: for the user and the Trainer, not the graph."""
    return Const(None)


def _first_argument(call):
    """``chainer.Variable(x)``, ``chainer.as_variable(x)``: a tensor is one."""
    return call.args[0]


def call_at_export_time(fn, call):
    """The constant ``fn(...)`` of arguments known at export time."""
    return Const(fn(*[constant_value(a) for a in call.args],
                    **{k: constant_value(v) for k, v in call.kwargs.items()}))


def _at_export_time(fn):
    """``chainer.using_config(...)`` and friends: a context manager made at
    export time (``with`` enters it while translating its body)."""
    return lambda call: call_at_export_time(fn, call)


#: fn -> handler(call) giving the Value of ``fn(...)`` in translated code.
BUILTINS = {
    range: _range, len: _len, zip: _zip, enumerate: _enumerate, list: _list, tuple: _tuple,
    int: _scalar_cast(numpy.int64, int), float: _scalar_cast(numpy.float32, float),
    bool: _scalar_cast(numpy.bool_, bool), min: _min_max('Min', min),
    max: _min_max('Max', max), abs: _abs, sum: _sum, isinstance: _isinstance,
    print: _dropped, chainer.report: _dropped, chainer.reporter.report: _dropped,
    chainer.Variable: _first_argument, chainer.as_variable: _first_argument,
    **{fn: _at_export_time(fn) for fn in (chainer.using_config, chainer.no_backprop_mode,
                                          chainer.force_backprop_mode)},
}

"""What a Python expression stands for while ch2o translates ``forward``.

A name in the translated code is bound to one of these:

- ``Tensor``: an ONNX tensor value of the graph being built;
- ``Sequence``: an ONNX sequence of tensors (a list whose length is only
  known at run time);
- ``Const``: a Python object known at export time (an int written in the
  source, a link, a function, ``None``, a string, a constant array ...);
- ``PyList``, ``PyTuple``, ``PyDict``: Python containers of known length
  whose items are any of these;
- ``MaybeNone``: None on some run-time paths and a tensor on others (a
  state that is None before a loop and set by its first iteration).

Every Tensor carries an ``example``: the value it takes (or, inside a loop
or a branch, may take) when ``forward`` runs on the arguments given to
``export``.  Examples give the Chainer functions something to run on, so
that their recorded FunctionNodes can go through the tracing translator's
converters.  They never decide what the graph computes.  ``shape`` is the
static knowledge: an int per axis whose size is the same on every run,
None for an axis whose size may vary (a loop-carried value that grows).
"""
import contextlib
import contextvars
from dataclasses import dataclass, field
from typing import Any

import numpy


class TranslationError(Exception):
    """The source of ``forward`` uses something ch2o cannot translate.

    The message names the user's file and line, the construct and what is
    wrong with it: ``model.py:12: 'yield': generators are not supported``.
    """

    def __init__(self, site, message):
        super().__init__('%s: %s' % (site, message) if site else message)
        self.site = site


class Value:
    """Base class of everything a translated expression evaluates to.

    A value owns its Python methods: ``xs.append(x)`` in translated code
    runs ``PyList.method_append`` with the call's arguments."""

    #: How messages name the kind of value ('a tensor', 'a list' ...).
    kind = 'a value'

    def call_method(self, name, call):
        """``self.<name>(...)``, the arguments in ``call`` (a
        ``builtin_calls.Call``): the method ``method_<name>``."""
        method = getattr(self, 'method_' + name, None)
        if method is None:
            raise call.unsupported()
        return method(call)


#: name -> the Tensor or Sequence of that ONNX name, for every one made while
#: a translation records them (``recording``): evaluating a Loop node on
#: the examples needs the examples of the outer values its body reads.
_RECORDED: contextvars.ContextVar[dict | None] = contextvars.ContextVar('ch2o_values',
                                                                       default=None)


@contextlib.contextmanager
def recording(values):
    """Record every Tensor and Sequence made in this block into ``values``
    (a dict by ONNX name)."""
    token = _RECORDED.set(values)
    try:
        yield values
    finally:
        _RECORDED.reset(token)


def recorded(name):
    """The recorded Tensor or Sequence named ``name``, or None."""
    values = _RECORDED.get()
    return None if values is None else values.get(name)


def _record(value):
    values = _RECORDED.get()
    if values is not None:
        values[value.name] = value


@dataclass(eq=False)
class Tensor(Value):
    """An ONNX tensor named ``name`` in the graph being built."""
    name: str
    example: numpy.ndarray
    shape: tuple = None  # type: ignore[assignment]  # filled from the example

    kind = 'a tensor'

    def __post_init__(self):
        self.example = numpy.asarray(self.example)
        if self.shape is None:
            self.shape = tuple(self.example.shape)
        self.shape = tuple(self.shape)
        if len(self.shape) != self.example.ndim:
            raise ValueError('Tensor %s: shape %s does not match its example of rank %d'
                             % (self.name, self.shape, self.example.ndim))
        _record(self)

    @property
    def dtype(self):
        return self.example.dtype

    @property
    def ndim(self):
        return len(self.shape)

    def call_method(self, name, call):
        """NumPy's ndarray methods (``x.reshape(...)``, ``x.sum()`` ...)."""
        from .numpy_calls import tensor_method  # built on this module's values
        return tensor_method(call.scope, self, name, call.args, call.kwargs, call.site)


@dataclass(eq=False)
class Sequence(Value):
    """An ONNX sequence of tensors named ``name``.

    ``examples`` are the tensors it holds on the export-time run, as far as
    they are known (inside a loop body, a sequence it builds holds the
    first iteration's element; after the loop, all of them); ``dtype`` and
    ``element_shape`` (None per axis whose size varies between elements or
    runs) describe every element."""
    name: str
    dtype: numpy.dtype
    element_shape: tuple | None
    examples: list = field(default_factory=list)

    kind = 'a sequence'

    def __post_init__(self):
        _record(self)

    def method_append(self, call):
        """An ONNX sequence is a value: appending makes a new one, which the
        list's name is bound to."""
        item, = call.positional(1)
        item = call.tensor(item, 'the appended item', self.dtype)
        name = call.scope.node('SequenceInsert', [self.name, item.name])
        call.rebind_target(Sequence(name, self.dtype, merge_shapes(self.element_shape, item.shape),
                                    list(self.examples) + [item.example]))
        return Const(None)


@dataclass(eq=False)
class Const(Value):
    """A Python object known at export time."""
    value: Any

    kind = 'a constant'


@dataclass(eq=False)
class PyList(Value):
    """A Python list of known length (``append`` grows it at export time)."""
    items: list

    kind = 'a list'

    def method_append(self, call):
        item, = call.positional(1)
        self.items.append(item)
        return Const(None)

    def method_extend(self, call):
        other, = call.positional(1)
        self.items.extend(call.items(other))
        return Const(None)

    def method_pop(self, call):
        index = call.constants(0, 1)
        try:
            return self.items.pop(*index)
        except (IndexError, TypeError) as e:
            raise call.error(str(e)) from None

    def method_insert(self, call):
        index, item = call.positional(2)
        if not isinstance(index, Const):
            raise call.unsupported()
        self.items.insert(index.value, item)
        return Const(None)

    def method_reverse(self, call):
        call.positional(0)
        self.items.reverse()
        return Const(None)


@dataclass(eq=False)
class PyTuple(Value):
    """A Python tuple of known length."""
    items: tuple

    kind = 'a tuple'


@dataclass(eq=False)
class PyDict(Value):
    """A Python dict whose keys are constants."""
    items: dict

    kind = 'a dict'

    def method_keys(self, call):
        return PyList([Const(k) for k in self.items])

    def method_values(self, call):
        return PyList(list(self.items.values()))

    def method_items(self, call):
        return PyList([PyTuple((Const(k), v)) for k, v in self.items.items()])

    def method_get(self, call):
        args = call.positional(1, 2)
        if not isinstance(args[0], Const):
            raise call.unsupported()
        return self.items.get(args[0].value, args[1] if len(args) > 1 else Const(None))


@dataclass(eq=False)
class MaybeNone(Value):
    """A value that is None on some run-time paths and a tensor on others.

    ``is_set`` is a 0-d bool Tensor (False where the value is None) and
    ``tensor`` the value where it is set, of the type the other paths give
    it (zeros where it is None).  ``x is None`` becomes ``Not(is_set)``;
    arithmetic uses ``tensor`` (Python would fail on None there); a
    Chainer function called with it runs in an If on ``is_set``, once
    with the tensor and once with None, since Chainer treats a None
    argument (an LSTM state, say) differently from zeros.

    Why not ONNX Optional: a pair of plain tensors goes through If and
    Loop, our VM and our autodiff as they are (gradients flow into
    ``tensor``; ``is_set`` is a bool and needs none), where Optional,
    OptionalHasElement and OptionalGetElement would each need a kernel,
    gradient rules and support in every pass that follows values."""
    is_set: Tensor
    tensor: Tensor

    kind = 'a tensor or None'


class PyObject(Value):
    """An instance of a plain Python class (not a Link) constructed in
    translated code: its methods are inlined with ``self`` bound to it, and
    its attributes are Values.  ``scope`` is where it was made: the
    attributes live on the object, not among the names that If and Loop
    merge across paths, so setting one from the body of a branch or loop
    the object was made outside of is refused."""
    kind = 'an object'

    def __init__(self, cls, scope):
        self.cls, self.scope, self.attrs = cls, scope, {}


def merge_shapes(a, b):
    """The shape covering shapes ``a`` and ``b``: None per axis whose size
    differs; None when the ranks differ (or either is None)."""
    if a is None or b is None or len(a) != len(b):
        return None
    return tuple(x if x == y else None for x, y in zip(a, b))


def is_constant(value):
    """Whether ``value`` (a Value) is known at export time, containers
    included."""
    if isinstance(value, Const):
        return True
    if isinstance(value, (PyList, PyTuple)):
        return all(is_constant(v) for v in value.items)
    if isinstance(value, PyDict):
        return all(is_constant(v) for v in value.items.values())
    return False


def constant_value(value):
    """The Python object a constant ``value`` stands for (lists, tuples and
    dicts rebuilt)."""
    if isinstance(value, Const):
        return value.value
    if isinstance(value, PyList):
        return [constant_value(v) for v in value.items]
    if isinstance(value, PyTuple):
        return tuple(constant_value(v) for v in value.items)
    if isinstance(value, PyDict):
        return {k: constant_value(v) for k, v in value.items.items()}
    raise TypeError('%s is not known at export time' % value.kind)


def example_of(value):
    """The export-time Python value of ``value``: arrays for tensors, lists
    of arrays for sequences, containers rebuilt."""
    if isinstance(value, Tensor):
        return value.example
    if isinstance(value, Sequence):
        return list(value.examples)
    if isinstance(value, (PyList, PyTuple)):
        items = [example_of(v) for v in value.items]
        return items if isinstance(value, PyList) else tuple(items)
    if isinstance(value, PyDict):
        return {k: example_of(v) for k, v in value.items.items()}
    if isinstance(value, MaybeNone):
        return value.tensor.example if bool(value.is_set.example) else None
    return value.value

"""What a Python expression stands for while ch2o translates ``forward``.

A name in the translated code is bound to one of these:

- ``Tensor``: an ONNX tensor value of the graph being built;
- ``Sequence``: an ONNX sequence of tensors (a list whose length is only
  known at run time);
- ``Const``: a Python object known at export time (an int written in the
  source, a link, a function, ``None``, a string, a constant array ...);
- ``PyList``, ``PyTuple``, ``PyDict``: Python containers of known length
  whose items are any of these.

Every Tensor carries an ``example``: the value it takes (or, inside a loop
or a branch, may take) when ``forward`` runs on the arguments given to
``export``.  Examples give the Chainer functions something to run on, so
that their recorded FunctionNodes can go through the tracing translator's
converters.  They never decide what the graph computes.  ``shape`` is the
static knowledge: an int per axis whose size is the same on every run,
None for an axis whose size may vary (a loop-carried value that grows).
"""
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
    """Base class of everything a translated expression evaluates to."""

    #: How messages name the kind of value ('a tensor', 'a list' ...).
    kind = 'a value'


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

    @property
    def dtype(self):
        return self.example.dtype

    @property
    def ndim(self):
        return len(self.shape)


@dataclass(eq=False)
class Sequence(Value):
    """An ONNX sequence of tensors named ``name``.

    ``examples`` are the tensors it holds on the export-time run, as far as
    they are known (a sequence built in a loop holds the first iteration's
    element); ``dtype`` and ``element_shape`` (None per axis whose size
    varies between elements or runs) describe every element."""
    name: str
    dtype: numpy.dtype
    element_shape: tuple | None
    examples: list = field(default_factory=list)

    kind = 'a sequence'


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
    return value.value

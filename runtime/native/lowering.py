"""How one Program instruction becomes C: the interface between the
emitter (emit_c.py) and the per-family lowerings (lowerings/).

A lowering is a function ``(emitter, instruction) -> Step`` registered for
one or more ONNX operators with ``@lowers``.  It reads static shapes,
dtypes and constants through the emitter (``em.shape``, ``em.dtype``,
``em.const``), raises Refuse with a reason when the kernels cannot run the
instruction, and returns a Step whose ``render`` writes the C lines once
the arena is planned.

A rendering writes C from numbers (through cformat), its own words and
``ref``, never from text of the Program: a string attribute is looked up in
the lowering's own table and the table's entry is written; names stay out
(emit_c.py puts the input and output names in tables, as cformat.cstring
literals).  tests/runtime/native/test_emit_c_injection.py checks that names
and string attributes change nothing in the C outside string literals.
"""
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..ops.connection import window_geometry
from .cformat import Shape

#: (C expression of a register's pointer, C expression of the scratch) -> lines
Render = Callable[[Callable[[int], str], str], list[str]]
#: Input dtypes a float kernel accepts (the default of ``em.shape``).
FLOAT32 = ('float32',)
#: Every dtype the C backend stores (cformat.C_TYPES).
ANY_DTYPE = ('float32', 'float64', 'int64', 'int32', 'bool')


class Refuse(Exception):
    """One instruction the kernels cannot run; the message says why."""


class Unknown(Exception):
    """An input's shape is unknown because an earlier instruction was
    refused: not a problem of this instruction, which is left out."""


@dataclass
class Step:
    """How one instruction becomes C.  ``shapes`` has one entry per output
    (None for an optional output left uncomputed); ``dtypes`` likewise (None:
    every output has input 0's dtype); ``alias`` means output 0 shares input
    0's memory; ``in_place`` lists the inputs whose memory output 0 may take
    when they are read for the last time here (the kernel reads each element
    before it writes the same one); ``scratch`` is in floats; ``family``
    names the kernel file (ccn_<family>.c) and ``also`` any other family the
    rendering calls.  A kernel that can refuse its inputs at run time
    returns nonzero then: its lines ``return CCN_FAILED;`` (the run's status
    for this instruction, which the emitter defines), and ``error`` says
    what went wrong, as the NumPy VM's exception would ("IndexError: ...")."""
    family: str
    shapes: list[Shape | None]
    render: Render
    scratch: int = 0
    alias: bool = False
    also: tuple[str, ...] = ()
    dtypes: list[str | None] | None = None
    in_place: tuple[int, ...] = ()
    error: str = ''


#: ONNX operator (default domain) or 'domain::op' -> its lowering.
LOWERINGS: dict[str, Callable[[Any, Any], Step]] = {}


def lowers(*ops: str):
    """Register the decorated function as the lowering of ``ops``."""
    def register(fn):
        for op in ops:
            assert op not in LOWERINGS, 'two lowerings for %s' % op
            LOWERINGS[op] = fn
        return fn
    return register


def window(attrs, spatial, kernel, ceil_mode=0):
    """window_geometry of a Conv or pool, a bad attribute refused."""
    try:
        return window_geometry(spatial, kernel, attrs.get('strides'), attrs.get('dilations'),
                               attrs.get('pads'), attrs.get('auto_pad', 'NOTSET'), ceil_mode)
    except (ValueError, IndexError, TypeError) as e:
        raise Refuse(str(e)) from None

"""C literals and types for the emitted code: one place that decides how a
value, a string, a shape or a dtype is written in C.

Text from a model or Program file (names, string attributes) reaches the
emitted C only through ``cstring``, as an escaped string literal; comments
and identifiers are built from numbers and the emitter's own words.
"""
import math
import re
from dataclasses import dataclass

import numpy

Shape = tuple[int, ...]

#: NumPy dtype name -> C element type, for the dtypes the C backend handles.
C_TYPES = {'float32': 'float', 'float64': 'double', 'int64': 'int64_t', 'int32': 'int32_t',
           'bool': 'uint8_t'}
#: NumPy dtype name -> the .npy descr it is saved with on a little-endian machine.
NPY_DESCR = {'float32': '<f4', 'float64': '<f8', 'int64': '<i8', 'int32': '<i4',
             'bool': '|b1'}


def cfloat(value: float) -> str:
    """An exact float32 C literal."""
    v = float(numpy.float32(value))
    if math.isnan(v):
        return 'NAN'
    if math.isinf(v):
        return 'INFINITY' if v > 0 else '-INFINITY'
    text = '%.9g' % v
    if '.' not in text and 'e' not in text:
        text += '.0'
    return text + 'f'


def cliteral(value, dtype: str) -> str:
    """An exact C literal of ``value`` as an element of ``dtype``."""
    if dtype == 'float32':
        return cfloat(value)
    if dtype == 'float64':
        v = float(value)
        if math.isnan(v):
            return 'NAN'
        if math.isinf(v):
            return 'INFINITY' if v > 0 else '-INFINITY'
        return repr(v)  # shortest text that reads back exactly
    if dtype == 'int64':
        v = int(value)
        # -2**63 has no literal: its magnitude overflows before the minus.
        return '(-INT64_C(9223372036854775807) - 1)' if v == -2**63 else 'INT64_C(%d)' % v
    return str(int(value))


def cstring(text: str) -> str:
    """``text`` as a C string literal: printable ASCII as itself except
    ``"``, ``\\`` and ``?`` (no trigraph can form), every other byte of its
    UTF-8 as a three-digit octal escape (no newline, no line splice).  The
    one way text from a model enters the emitted C."""
    out = []
    # surrogatepass: a Program file's JSON may hold lone surrogates.
    for byte in text.encode('utf-8', 'surrogatepass'):
        ch = chr(byte)
        if ch in '"\\?':  # '?' avoids trigraphs
            out.append('\\' + ch)
        elif 32 <= byte < 127:
            out.append(ch)
        else:
            out.append('\\%03o' % byte)
    return '"%s"' % ''.join(out)


def shape_text(dtype: str, shape: Shape) -> str:
    """``float32[2, 3]``."""
    return '%s[%s]' % (dtype, ', '.join(str(d) for d in shape))


def clist(values) -> str:
    """A C initializer list of integers; C has no empty arrays, so () gives {0}."""
    return '{%s}' % (', '.join(str(int(v)) for v in values) or '0')


#: A value a CStruct field may hold besides numbers: a C name of the
#: kernels' own (an enum, NULL), never text from a model.
_C_NAME = re.compile(r'[A-Za-z_][A-Za-z0-9_]*\Z')


@dataclass(frozen=True)
class CStruct:
    """A struct a kernel takes its geometry or plan in (``ccn_conv_geometry``
    of ccn_connection.h, ...), with its fields as the header declares them
    (tests/runtime/native/test_kernel_contract.py compares the two).  The
    generated code fills it by name, so a misspelt field does not compile
    and two values cannot trade places."""
    ctype: str
    fields: tuple[str, ...]

    def literal(self, **values) -> str:
        """``&(const ctype){.field = value, ...}``: a pointer to a compound
        literal with every field given (none left to a silent zero).  An
        int is written as itself, a float as an exact float32 literal, a
        tuple of ints as an array's initializer, a string must be a C name
        of the kernels (an enum)."""
        if set(values) != set(self.fields):
            raise ValueError('%s needs fields %s, got %s'
                             % (self.ctype, sorted(self.fields), sorted(values)))
        return '&(const %s){%s}' % (self.ctype, ', '.join(
            '.%s = %s' % (name, _field(values[name])) for name in self.fields))


def _field(value) -> str:
    if isinstance(value, str):
        if not _C_NAME.match(value):
            raise ValueError('%r is not a C name' % value)
        return value
    if isinstance(value, float):
        return cfloat(value)
    if isinstance(value, tuple):
        return clist(value)
    return '%d' % int(value)

"""Checking run-time values against a Program's declared inputs and outputs.

Tensors must be arrays of the declared dtype and shape: fixed dimensions
match, a symbolic dimension takes one size across the inputs (and outputs
that name it must have that size), an unknown one (None) any size.  Values
of other kinds (sequences, optionals, unknown) are not checked.
"""
import numpy

from .errors import InputValidationError, OutputValidationError


def validate_inputs(declared, values, program_name='main'):
    """Check input ``values`` against the ValueInfos ``declared``; raise
    InputValidationError naming the program, the input and the problem.
    Returns {symbol: (size, input name)} for validate_outputs."""
    symbols: dict[str, tuple] = {}
    for info, value in zip(declared, values):
        problem = _tensor_problem(info, value, symbols, bind=True)
        if problem:
            raise InputValidationError("program %s: input '%s' %s"
                                       % (program_name, info.name, problem))
    return symbols


def scalars_as_arrays(declared, values, program_name='main'):
    """``values`` with the Python and NumPy scalars given for 0-d tensor
    inputs as 0-d arrays of the declared dtype: a ch2o model exported with
    ``5`` or ``numpy.int32(5)`` is called with them again.  A scalar the
    dtype cannot hold (a float for an integer, an int out of range, a bool
    for a number) is an InputValidationError; other values pass as they are."""
    values = list(values)
    for i, (info, value) in enumerate(zip(declared, values)):
        if info.kind != 'tensor' or info.dtype is None or info.shape is None \
                or len(info.shape) or not isinstance(value, (bool, int, float, numpy.generic)):
            continue
        dtype = numpy.dtype(info.dtype)
        if not _holds(dtype, value):
            raise InputValidationError("program %s: input '%s' is %r, which %s cannot hold"
                                       % (program_name, info.name, value, dtype.name))
        values[i] = numpy.asarray(value, dtype=dtype)
    return values


def _holds(dtype, value):
    """Whether 0-d ``dtype`` holds the scalar ``value`` without changing its kind."""
    if isinstance(value, (bool, numpy.bool_)):
        return dtype.kind == 'b'
    if isinstance(value, (int, numpy.integer)):
        try:  # exactly: no wrapping, no rounding
            return dtype.kind in 'iuf' and numpy.asarray(value).astype(dtype).item() == value
        except (OverflowError, TypeError, ValueError):
            return False
    return isinstance(value, (float, numpy.floating)) and dtype.kind == 'f'


def validate_outputs(declared, values, symbols, program_name='main'):
    """Check output ``values`` against the ValueInfos ``declared`` and the
    ``symbols`` validate_inputs returned; raise OutputValidationError naming
    the program, the output and the problem."""
    for info, value in zip(declared, values):
        problem = _tensor_problem(info, value, symbols, bind=False)
        if problem:
            raise OutputValidationError("program %s: output '%s' %s"
                                        % (program_name, info.name, problem))


def _tensor_problem(info, value, symbols, bind):
    """What is wrong with ``value`` as the tensor ``info`` declares, or None.
    Symbolic sizes are looked up in ``symbols``; with ``bind``, first seen
    ones are added to it."""
    if info.kind != 'tensor':
        return None
    shape = getattr(value, 'shape', None)
    dtype = getattr(value, 'dtype', None)
    if shape is None or dtype is None:
        return 'must be %s, got %s' % (_describe_tensor(info),
                                       'None' if value is None else type(value).__name__)
    if info.dtype is not None and numpy.dtype(dtype).name != info.dtype:
        return 'has dtype %s, expected %s' % (numpy.dtype(dtype).name, info.dtype)
    if info.shape is None:
        return None
    expected = tuple('?' if d is None else d for d in info.shape)
    if len(shape) != len(info.shape):
        return 'has shape %s, expected %s' % (tuple(shape), expected)
    for axis, (want, got) in enumerate(zip(info.shape, shape)):
        if isinstance(want, int) and want != got:
            return 'has shape %s, expected %s (axis %d)' % (tuple(shape), expected, axis)
        if isinstance(want, str):
            if bind:
                symbols.setdefault(want, (got, info.name))
            size, source = symbols.get(want, (got, None))
            if size != got:
                return "has %s=%d on axis %d, but input '%s' has %s=%d" % (
                    want, got, axis, source, want, size)
    return None


def _describe_tensor(info):
    """'an array of float32 [N, 3]': what a tensor ValueInfo asks for."""
    text = 'an array'
    if info.dtype is not None:
        text += ' of ' + info.dtype
    if info.shape is not None:
        text += ' [%s]' % ', '.join('?' if d is None else str(d) for d in info.shape)
    return text

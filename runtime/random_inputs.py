"""Random values for a Program's declared inputs (for runs and benchmarks)."""
import math

import numpy

from .errors import InputValidationError
from .profiling import describe_value, time_runs

#: The size a symbolic or unknown dimension takes.
SYMBOLIC_DIM_SIZE = 1
#: The most elements one random input may have: numpy draws them as 8-byte
#: values before the cast, so this bounds that temporary at 2 GiB.
MAX_ELEMENTS = 2 ** 28


def random_inputs(program, rng):
    """{input name: random array} of each input's declared dtype and shape;
    symbolic or unknown dimensions take SYMBOLIC_DIM_SIZE.  Floats are
    standard normal, integers uniform in [0, 10), booleans fair coin flips.
    Raises InputValidationError naming an input that has no declared tensor
    type, a negative dimension or more than MAX_ELEMENTS elements."""
    inputs = {}
    for info in program.inputs:
        if info.kind != 'tensor' or info.dtype is None or info.shape is None:
            raise InputValidationError("input '%s' has no declared tensor type and shape; "
                                       "random inputs need one" % info.name)
        shape = _concrete_shape(info)
        dtype = numpy.dtype(info.dtype)
        if dtype.kind == 'f':
            value = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in 'iu':
            value = rng.randint(0, 10, size=shape).astype(dtype)
        elif dtype.kind == 'b':
            value = rng.randint(0, 2, size=shape).astype(bool)
        else:
            raise InputValidationError("input '%s': cannot make random values of dtype %s"
                                       % (info.name, dtype))
        inputs[info.name] = value
    return inputs


def _concrete_shape(info):
    """The declared shape of input ``info``, symbolic dimensions sized."""
    shape = tuple(d if isinstance(d, int) else SYMBOLIC_DIM_SIZE for d in info.shape)
    if any(d < 0 for d in shape):
        raise InputValidationError("input '%s' declares a negative dimension: shape %s"
                                   % (info.name, list(info.shape)))
    size = math.prod(shape)
    if size > MAX_ELEMENTS:
        raise InputValidationError("input '%s' of shape %s has %d elements; random inputs "
                                   "are limited to %d" % (info.name, list(info.shape), size,
                                                          MAX_ELEMENTS))
    return shape


def run_on_random_inputs(executor, seed=0, iterations=1, write=print):
    """Run ``executor`` on random inputs and write one line per output (and
    the timing line when ``iterations`` > 1)."""
    inputs = random_inputs(executor.program, numpy.random.RandomState(seed))
    outputs, timing = time_runs(executor, inputs, iterations)
    for name, value in outputs.items():
        write('output %s: %s' % (name, describe_value(value)))
    if timing:
        write(timing)
    return outputs

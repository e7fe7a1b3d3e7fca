"""Random values for a Program's declared inputs (for runs and benchmarks)."""
import numpy

from .profiling import describe_value, time_runs

from .errors import InputValidationError


def random_inputs(program, rng):
    """{input name: random array} of each input's declared dtype and shape;
    symbolic or unknown dimensions take size 1.  Floats are standard normal,
    integers uniform in [0, 10), booleans fair coin flips."""
    inputs = {}
    for info in program.inputs:
        if info.kind != 'tensor' or info.dtype is None or info.shape is None:
            raise InputValidationError("input '%s' has no declared tensor type and shape; "
                                       "random inputs need one" % info.name)
        shape = tuple(d if isinstance(d, int) else 1 for d in info.shape)
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

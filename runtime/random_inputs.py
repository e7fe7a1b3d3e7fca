"""A Program's inputs for command-line runs and benchmarks: random values
of the declared types, or arrays from .npz/.npy files; and the outputs
written to an .npz file."""
import math
import types
import zipfile

import numpy

from .backend import to_numpy
from .errors import InputValidationError, ProgramFormatError
from .files import atomic_write
from .profiling import describe_value, time_runs
from .serialization import _check_inflation, _npy_header
from .signatures import validate_inputs

#: The size a symbolic or unknown dimension takes.
SYMBOLIC_DIM_SIZE = 1
#: The most elements one random input may have: numpy draws them as 8-byte
#: values before the cast, so this bounds that temporary at 2 GiB.
MAX_ELEMENTS = 2 ** 28


def random_inputs(program, rng, symbolic_dims=None):
    """{input name: random array} of each input's declared dtype and shape;
    a symbolic dimension takes its size in ``symbolic_dims`` ({symbol:
    size}), others and unknown dimensions SYMBOLIC_DIM_SIZE.  Floats are
    standard normal, integers uniform in [0, 10), booleans fair coin flips.
    Raises InputValidationError naming an input that has no declared tensor
    type, a negative dimension or more than MAX_ELEMENTS elements, or a
    symbol of ``symbolic_dims`` that no input has."""
    symbolic_dims = symbolic_dims or {}
    symbols = {d for info in program.inputs for d in info.shape or () if isinstance(d, str)}
    unknown = sorted(set(symbolic_dims) - symbols)
    if unknown:
        raise InputValidationError('no input has the symbolic dimension %s (the inputs have: %s)'
                                   % (', '.join(unknown), ', '.join(sorted(symbols)) or 'none'))
    inputs = {}
    for info in program.inputs:
        if info.kind != 'tensor' or info.dtype is None or info.shape is None:
            raise InputValidationError("input '%s' has no declared tensor type and shape; "
                                       "random inputs need one" % info.name)
        shape = _concrete_shape(info, symbolic_dims)
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


def parse_symbolic_dims(text):
    """{symbol: size} from 'name=value,...' (sizes are integers >= 0);
    ValueError saying what is wrong otherwise."""
    sizes = {}
    for item in text.split(','):
        name, equals, value = item.partition('=')
        name = name.strip()
        try:
            size = int(value) if equals and name else -1
        except ValueError:
            size = -1
        if size < 0:
            raise ValueError('expected name=size with a size >= 0, got %r' % item)
        if name in sizes:
            raise ValueError('%s is given twice' % name)
        sizes[name] = size
    return sizes


def _concrete_shape(info, symbolic_dims):
    """The declared shape of input ``info``, symbolic dimensions sized."""
    shape = tuple(d if isinstance(d, int) else symbolic_dims.get(d, SYMBOLIC_DIM_SIZE)
                  for d in info.shape)
    if any(d < 0 for d in shape):
        raise InputValidationError("input '%s' declares a negative dimension: shape %s"
                                   % (info.name, list(info.shape)))
    size = math.prod(shape)
    if size > MAX_ELEMENTS:
        raise InputValidationError("input '%s' of shape %s has %d elements; random inputs "
                                   "are limited to %d" % (info.name, list(shape), size,
                                                          MAX_ELEMENTS))
    return shape


def load_inputs(program, paths):
    """{input name: array} from ``paths``: one .npz file whose keys are the
    input names, or one .npy file per input in declaration order.  Files
    load without pickles; each array's dtype and shape (from its header,
    before its data is read) must be what the program declares, and an
    .npz must name every input and nothing else (limits as for Program
    files: serialization.py).  Raises InputValidationError naming the file
    and the input otherwise."""
    for info in program.inputs:
        if info.kind != 'tensor':
            raise InputValidationError("input '%s' is a %s; input files hold tensors only"
                                       % (info.name, info.kind))
    names = [info.name for info in program.inputs]
    if len(paths) == 1 and paths[0].endswith('.npz'):
        return _load_npz(program, paths[0])
    if not all(path.endswith('.npy') for path in paths):
        raise InputValidationError('input files are one .npz or one .npy per input, got %s'
                                   % ' '.join(paths))
    if len(paths) != len(names):
        raise InputValidationError('the program takes %d inputs (%s), got %d .npy files'
                                   % (len(names), ', '.join(names), len(paths)))
    inputs = {}
    for name, path in zip(names, paths):
        try:
            array = numpy.load(path, mmap_mode='r', allow_pickle=False)  # header only
        except (OSError, ValueError, EOFError) as e:
            raise InputValidationError("%s (input '%s') is not a readable .npy file: %s"
                                       % (path, name, e)) from None
        inputs[name] = array
    _check_types(program, inputs, ' '.join(paths))
    return {name: numpy.array(array) for name, array in inputs.items()}


def _load_npz(program, path):
    names = [info.name for info in program.inputs]
    try:
        with numpy.load(path, allow_pickle=False) as archive:
            problems = ['no array for input %r' % n for n in names if n not in archive.files]
            problems += ['%r is not an input' % k for k in archive.files if k not in names]
            if problems:
                raise InputValidationError("%s: %s (the program's inputs: %s)"
                                           % (path, '; '.join(problems), ', '.join(names)))
            _check_inflation(archive, path)
            headers = {n: _npy_header(archive, path, n, "input '%s'" % n) for n in names}
            _check_types(program, {n: types.SimpleNamespace(shape=shape, dtype=dtype)
                                   for n, (shape, dtype) in headers.items()}, path)
            return {n: archive[n] for n in names}
    except (InputValidationError, ProgramFormatError):
        raise
    except FileNotFoundError:
        raise InputValidationError('input file %s does not exist' % path) from None
    except Exception as e:  # a damaged zip fails in many ways (see load_program)
        raise InputValidationError('%s is damaged or not an .npz file: %s: %s'
                                   % (path, type(e).__name__, e)) from e


def _check_types(program, values, source):
    """validate_inputs on {name: value with shape and dtype}, naming ``source``."""
    try:
        validate_inputs(program.inputs, [values[info.name] for info in program.inputs],
                        program.name)
    except InputValidationError as e:
        raise InputValidationError('%s: %s' % (source, e)) from None


def check_storable_outputs(program):
    """Refuse, before a run, outputs an .npz cannot hold (sequences,
    optionals): InputValidationError naming them."""
    others = ['%s (a %s)' % (v.name, v.kind) for v in program.outputs if v.kind != 'tensor']
    if others:
        raise InputValidationError('output files hold tensors only; the program also returns '
                                   + ', '.join(others))


def save_outputs(outputs, path):
    """Write {name: array} to the .npz ``path`` (numpy.load reads it back by
    name), whole or not at all."""
    with atomic_write(path) as f, zipfile.ZipFile(f, 'w') as archive:
        for name, value in outputs.items():
            with archive.open(name + '.npy', 'w', force_zip64=True) as member:
                numpy.lib.format.write_array(member, numpy.asarray(to_numpy(value)),
                                             allow_pickle=False)


def run_on_files(program, make_executor, args):
    """What both command lines' run does: inputs from ``args.inputs`` (-i)
    or random ones (``args.seed``, ``args.symbolic_dims``), checked before
    ``make_executor()`` builds anything; ``args.iterations`` runs; outputs
    written to ``args.outputs`` (-o) when given.  Returns the outputs."""
    if args.outputs:
        check_storable_outputs(program)
    if args.inputs:
        inputs = load_inputs(program, args.inputs)
    else:
        inputs = random_inputs(program, numpy.random.RandomState(args.seed), args.symbolic_dims)
    outputs = run_on_inputs(make_executor(), inputs, args.iterations)
    if args.outputs:
        save_outputs(outputs, args.outputs)
    return outputs


def run_on_inputs(executor, inputs, iterations=1, write=print):
    """Run ``executor`` on ``inputs`` and write one line per output (and the
    timing line when ``iterations`` > 1); return the outputs."""
    outputs, timing = time_runs(executor, inputs, iterations)
    for name, value in outputs.items():
        write('output %s: %s' % (name, describe_value(value)))
    if timing:
        write(timing)
    return outputs

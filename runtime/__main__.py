"""Run a saved Program with NumPy alone (and a C compiler when there is one):

    python -m chainer_compiler.runtime PROGRAM.npz [-i IN.npz | -i X.npy ...]
        [-o OUT.npz] [--symbolic-dims NAME=SIZE,...] [--iterations N] [--seed S] [--trace]
        [--backend auto|numpy|native|cupy] [--threads N]

Runs on the arrays of ``-i`` (an .npz keyed by input name, or one .npy per
input in declaration order), else on random inputs of the declared shapes
(symbolic dimensions sized by ``--symbolic-dims``, else 1); prints each
output's dtype and shape and with ``-o`` writes the outputs to an .npz.
The backend is by default 'auto': the Program compiled to C when a C
compiler is present and covers it, else NumPy (``-v`` says which and why).
Proves a compiled model needs neither Chainer nor ONNX where it is shipped.
Exit status 0 on success; 2 on any error, reported as one line on stderr
(with ``--debug``, as a traceback); with no arguments, the help on stderr
and status 2; 141 (silently) when stdout's reader exits early.
"""
import argparse
import importlib.metadata
import logging
import os
import sys

from .backend import BACKENDS
from .errors import RuntimeVMError
from .executor import Executor
from .files import end_on_closed_stdout, same_file
from .logs import configure_logging
from .random_inputs import parse_symbolic_dims, run_on_files
from .serialization import load_program

NAME = 'chainer_compiler.runtime'
EXIT_ERROR = 2
#: numpy's RandomState takes seeds in [0, 2**32 - 1].
MAX_SEED = 2**32 - 1


def main(argv=None):
    """Run the command line ``argv`` (default: sys.argv[1:]); return the
    exit status.  Bad arguments exit with status 2 through argparse."""
    argv = sys.argv[1:] if argv is None else argv
    parser = _parser()
    if not argv:
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    args = parser.parse_args(argv)
    if args.inputs and args.symbolic_dims:
        parser.error('--symbolic-dims sizes random inputs; with -i the arrays give the sizes')
    configure_logging(args.verbose)
    try:
        _check_paths(args)
        program = load_program(args.program)
        # NAME, not __name__: run with -m, this module is __main__.
        logging.getLogger(NAME).info('loaded program %s (%d instructions) from %s',
                                     program.name, len(program.instructions), args.program)
        run_on_files(program, lambda: Executor(program, backend=args.backend,
                                               trace=args.trace, threads=args.threads), args)
        print('modules loaded: chainer=%s onnx=%s'
              % ('chainer' in sys.modules, 'onnx' in sys.modules))
        sys.stdout.flush()  # a closed pipe raises here, not at exit
    except BrokenPipeError:
        return end_on_closed_stdout()
    except Exception as e:
        if args.debug:
            raise
        print('%s: error: %s' % (NAME, _describe(e, args.program)), file=sys.stderr)
        return EXIT_ERROR
    return 0


def _version():
    """The installed distribution's version (the runtime imports nothing from
    the compiler, chainer_compiler.__version__ included); a source tree run
    without installing has none, and must still run."""
    try:
        return importlib.metadata.version('chainer-compiler')
    except importlib.metadata.PackageNotFoundError:
        return 'unknown (not installed)'


def _parser():
    parser = argparse.ArgumentParser(prog='python -m ' + NAME,
                                     description=__doc__.split('\n\n')[0])
    parser.add_argument('program', help='a Program file written by chainer-compiler --save')
    parser.add_argument('-i', '--inputs', nargs='+', metavar='FILE',
                        help='input arrays: an .npz whose keys are the input names, or one '
                             '.npy per input in declaration order (default: random inputs)')
    parser.add_argument('-o', '--outputs', metavar='FILE.npz',
                        help='write the outputs to this .npz, keyed by output name')
    parser.add_argument('--symbolic-dims', type=_symbolic_dims, metavar='NAME=SIZE,...',
                        help='sizes of symbolic input dimensions for random inputs (default 1)')
    parser.add_argument('--iterations', type=_int_in(1, None), default=1,
                        help='runs to time after a warm-up run (default 1: the warm-up only)')
    parser.add_argument('--seed', type=_int_in(0, MAX_SEED), default=0,
                        help='seed of the random inputs, 0 to 2**32 - 1 (default 0)')
    parser.add_argument('--trace', action='store_true',
                        help='print each instruction, its shapes and time to stderr')
    parser.add_argument('--backend', choices=BACKENDS, default='auto',
                        help='auto (default): native when a C compiler is present and it '
                             'covers every operator, else numpy; native: compiled to C '
                             '(static shapes); cupy: the GPU')
    parser.add_argument('--threads', type=_int_in(1, None), default=None,
                        help='threads of the native backend, at most 256 (default: '
                             '$CHAINER_COMPILER_THREADS, else one per CPU this process may use)')
    parser.add_argument('--debug', action='store_true',
                        help='show the traceback of an error')
    parser.add_argument('--version', action='version', version='%(prog)s ' + _version())
    parser.add_argument('-v', '--verbose', action='count', default=0,
                        help='say what is being done on stderr (-vv: the details)')
    return parser


def _symbolic_dims(text):
    try:
        return parse_symbolic_dims(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _check_paths(args):
    """Refuse, before anything runs, an output file that is a folder or one
    of the files read."""
    if not args.outputs:
        return
    if os.path.isdir(args.outputs):
        raise RuntimeVMError('-o %s is a directory' % args.outputs)
    for path in [args.program] + (args.inputs or []):
        if same_file(args.outputs, path):
            raise RuntimeVMError('-o %s would overwrite the input %s' % (args.outputs, path))


def _int_in(low, high):
    """An argparse type: an int from ``low`` to ``high`` (None: no bound)."""
    def convert(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError('expected an integer %s, got %r' % (
                '>= %d' % low if high is None else 'from %d to %d' % (low, high), text))
        return value
    return convert


def _describe(error, path):
    """``error`` as one line naming the Program file; errors the VM raises on
    purpose say what is wrong, others need their type name as well."""
    text = str(error) if isinstance(error, RuntimeVMError) else '%s: %s' % (
        type(error).__name__, error)
    text = '; '.join(line.strip() for line in text.splitlines() if line.strip())
    return text if path in text else '%s: %s' % (path, text)


if __name__ == '__main__':
    sys.exit(main())

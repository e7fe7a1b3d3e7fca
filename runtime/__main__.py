"""Run a saved Program with NumPy alone:

    python -m chainer_compiler.runtime PROGRAM.npz [--iterations N] [--seed S] [--trace]

Feeds random inputs of the declared shapes and prints the outputs; proves a
compiled model needs neither Chainer nor ONNX where it is shipped.  Exit
status 0 on success; 2 on any error, reported as one line on stderr (with
``--debug``, as a traceback).
"""
import argparse
import sys

from .errors import RuntimeVMError
from .executor import Executor
from .random_inputs import run_on_random_inputs
from .serialization import load_program

NAME = 'chainer_compiler.runtime'
EXIT_ERROR = 2
#: numpy's RandomState takes seeds in [0, 2**32 - 1].
MAX_SEED = 2**32 - 1


def main(argv=None):
    """Run the command line ``argv`` (default: sys.argv[1:]); return the
    exit status.  Bad arguments exit with status 2 through argparse."""
    args = _parser().parse_args(argv)
    try:
        program = load_program(args.program)
        executor = Executor(program, backend='numpy', trace=args.trace)
        run_on_random_inputs(executor, args.seed, args.iterations)
    except Exception as e:
        if args.debug:
            raise
        print('%s: error: %s' % (NAME, _describe(e, args.program)), file=sys.stderr)
        return EXIT_ERROR
    print('modules loaded: chainer=%s onnx=%s' % ('chainer' in sys.modules, 'onnx' in sys.modules))
    return 0


def _parser():
    parser = argparse.ArgumentParser(prog='python -m ' + NAME,
                                     description=__doc__.split('\n\n')[0])
    parser.add_argument('program', help='a Program file written by chainer-compiler --save')
    parser.add_argument('--iterations', type=_int_in(1, None), default=1,
                        help='runs to time after a warm-up run (default 1: the warm-up only)')
    parser.add_argument('--seed', type=_int_in(0, MAX_SEED), default=0,
                        help='seed of the random inputs, 0 to 2**32 - 1 (default 0)')
    parser.add_argument('--trace', action='store_true',
                        help='print each instruction, its shapes and time to stderr')
    parser.add_argument('--debug', action='store_true',
                        help='show the traceback of an error')
    return parser


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

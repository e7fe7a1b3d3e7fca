"""Run a saved Program with NumPy alone:

    python -m chainer_compiler.runtime PROGRAM.npz [--iterations N] [--trace]

Feeds random inputs of the declared shapes and prints the outputs; proves a
compiled model needs neither Chainer nor ONNX where it is shipped.
"""
import argparse
import sys

from .executor import Executor
from .random_inputs import run_on_random_inputs
from .serialization import load_program


def main(argv=None):
    parser = argparse.ArgumentParser(prog='python -m chainer_compiler.runtime',
                                     description=__doc__.split('\n\n')[0])
    parser.add_argument('program', help='a Program file written by chainer-compiler --save')
    parser.add_argument('--iterations', type=int, default=1)
    parser.add_argument('--trace', action='store_true')
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args(argv)
    program = load_program(args.program)
    executor = Executor(program, backend='numpy', trace=args.trace)
    run_on_random_inputs(executor, args.seed, args.iterations)
    print('modules loaded: chainer=%s onnx=%s' % ('chainer' in sys.modules, 'onnx' in sys.modules))
    return 0


if __name__ == '__main__':
    sys.exit(main())

"""The ``chainer-compiler`` command line.

  chainer-compiler run --test DIR        run an ONNX test directory, compare outputs
  chainer-compiler run --onnx FILE       compile and run with random inputs
  chainer-compiler run --program FILE    run a saved Program with random inputs
  chainer-compiler conformance           run ONNX's node conformance tests
"""
import argparse
import json
import sys

from .runtime.backend import BackendUnavailableError
from .runtime.errors import RuntimeVMError
from .runtime.executor import Executor
from .runtime.profiling import Tracer
from .runtime.random_inputs import run_on_random_inputs
from .runtime.serialization import load_program, save_program

EXIT_MISMATCH = 1
EXIT_ERROR = 2


def main(argv=None):
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except (RuntimeVMError, BackendUnavailableError, FileNotFoundError) as e:
        print('chainer-compiler: error: %s' % e, file=sys.stderr)
        return EXIT_ERROR
    except Exception as e:
        from .frontend import InvalidModelError, UnsupportedOperatorsError
        if isinstance(e, (InvalidModelError, UnsupportedOperatorsError)):
            print('chainer-compiler: error: %s' % e, file=sys.stderr)
            return EXIT_ERROR
        raise


def _parser():
    parser = argparse.ArgumentParser(prog='chainer-compiler', description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest='command', required=True)

    run = sub.add_parser('run', help='compile and run an ONNX model or test directory')
    source = run.add_mutually_exclusive_group(required=True)
    source.add_argument('--test', metavar='DIR',
                        help='ONNX test directory: model.onnx and test_data_set_*/')
    source.add_argument('--onnx', metavar='FILE', help='ONNX model, run on random inputs')
    source.add_argument('--program', metavar='FILE', help='saved Program, run on random inputs')
    run.add_argument('--rtol', type=float, default=None, help='relative tolerance (--test)')
    run.add_argument('--atol', type=float, default=None, help='absolute tolerance (--test)')
    run.add_argument('--iterations', type=int, default=1,
                     help='timed runs; prints mean and best milliseconds')
    run.add_argument('--backend', choices=['numpy', 'cupy'], default=None,
                     help='default: cupy when CuPy and a GPU are present, else numpy')
    run.add_argument('--trace', action='store_true',
                     help='print op, shapes and time of every instruction')
    run.add_argument('--chrome-tracing', metavar='FILE',
                     help='write a Chrome tracing JSON profile')
    run.add_argument('--check-nans', action='store_true',
                     help='fail at the first instruction producing NaN or Inf')
    run.add_argument('--dump', action='store_true', help='print the compiled Program')
    run.add_argument('--save', metavar='FILE', help='write the compiled Program to FILE')
    run.add_argument('--seed', type=int, default=0, help='seed of the random inputs')
    run.set_defaults(handler=_run)

    conf = sub.add_parser('conformance', help="run ONNX's node conformance tests")
    conf.add_argument('-k', dest='pattern', metavar='PATTERN',
                      help='only tests whose name matches this regular expression')
    conf.add_argument('--json', action='store_true',
                      help='print JSON with every test status and reason')
    conf.add_argument('--backend', choices=['numpy', 'cupy'], default=None,
                      help='default: cupy when CuPy and a GPU are present, else numpy')
    conf.add_argument('-v', '--verbose', action='store_true',
                      help='print each test as it finishes')
    conf.set_defaults(handler=_conformance)
    return parser


def _run(args):
    tracer = None
    if args.trace or args.chrome_tracing:
        tracer = Tracer(stream=sys.stderr if args.trace else None)
    options = dict(backend=args.backend, check_nans=args.check_nans, tracer=tracer)
    try:
        if args.test:
            return _run_test(args, options)
        if args.program:
            program = load_program(args.program)
        else:
            from .frontend import build_program
            program = build_program(args.onnx)
        _report_program(program, args)
        executor = Executor(program, **options)
        run_on_random_inputs(executor, args.seed, args.iterations)
        return 0
    finally:
        if tracer is not None and args.chrome_tracing:
            tracer.write_chrome_tracing(args.chrome_tracing)
            print('wrote Chrome tracing profile to %s' % args.chrome_tracing)


def _run_test(args, options):
    from .conformance import run_test_dir
    from .frontend import build_program
    from .onnx_test_data import DEFAULT_ATOL, DEFAULT_RTOL
    if args.dump or args.save:
        import os
        _report_program(build_program(os.path.join(args.test, 'model.onnx')), args)
    result = run_test_dir(args.test,
                          rtol=DEFAULT_RTOL if args.rtol is None else args.rtol,
                          atol=DEFAULT_ATOL if args.atol is None else args.atol, **options)
    if result.status == 'passed':
        print('%s: OK' % result.name)
        return 0
    print('%s: %s: %s' % (result.name, result.status.upper(), result.reason), file=sys.stderr)
    return EXIT_MISMATCH if result.status == 'failed' else EXIT_ERROR


def _report_program(program, args):
    if args.dump:
        print(program.dump())
    if args.save:
        save_program(program, args.save)
        print('saved Program to %s' % args.save)


def _conformance(args):
    from .conformance import run_conformance, summarize

    def progress(result):
        if args.verbose:
            print('%-60s %s %s' % (result.name, result.status, result.reason), file=sys.stderr)

    results = run_conformance(args.pattern, backend=args.backend, progress=progress)
    totals, families = summarize(results)
    if args.json:
        json.dump({'totals': totals, 'families': families,
                   'tests': [{'name': r.name, 'status': r.status, 'family': r.family,
                              'reason': r.reason} for r in results]}, sys.stdout, indent=1)
        print()
    else:
        print('%-16s %7s %7s %12s' % ('family', 'passed', 'failed', 'unsupported'))
        for name, c in families.items():
            print('%-16s %7d %7d %12d' % (name, c['passed'], c['failed'], c['unsupported']))
        print('%d passed, %d failed, %d unsupported of %d node tests'
              % (totals['passed'], totals['failed'], totals['unsupported'], totals['total']))
    return 0

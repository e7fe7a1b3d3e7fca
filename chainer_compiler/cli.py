"""The ``chainer-compiler`` command line.

  chainer-compiler run --test DIR        run an ONNX test directory, compare outputs
  chainer-compiler run --onnx FILE       compile and run (on random inputs, or
                                         -i IN.npz; -o OUT.npz writes the outputs)
  chainer-compiler run --program FILE    run a saved Program (the same inputs)
  chainer-compiler conformance           run ONNX's node conformance tests
  chainer-compiler emit-c FILE -o DIR    write C sources and a Makefile (no Python
                                         needed to build or run them)

Exit status: 0 success, 1 mismatching outputs (--test) or a failed
conformance test, 2 any error, which is reported as one line on stderr
(``chainer-compiler --debug ...`` shows its traceback before that line), and
a bare ``chainer-compiler``, which prints this help on stderr; 141, silently,
when the reader of stdout exits early (``... --dump | head``).
"""
import argparse
import json
import math
import os
import sys
import traceback

from . import MissingExtraError, __version__, _missing_extra
from .errors import InvalidModelError, InvalidTestDataError, UnsupportedOperatorsError
from .runtime.backend import BACKENDS
from .runtime.errors import RuntimeVMError
from .runtime.executor import Executor
from .runtime.files import end_on_closed_stdout, same_file
from .runtime.logs import configure_logging
from .runtime.profiling import Tracer
from .runtime.random_inputs import parse_symbolic_dims, run_on_files
from .runtime.serialization import load_program, save_program

EXIT_MISMATCH = 1
EXIT_ERROR = 2


class CommandLineError(Exception):
    """A bad argument or combination of arguments; the message names them."""


def main(argv=None):
    """Run the command line ``argv`` (default: sys.argv[1:]); return the
    exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv:  # a usage error, but one whose answer is the whole help
        _parser().print_help(sys.stderr)
        return EXIT_ERROR
    try:
        args = _parser().parse_args(argv)
    except CommandLineError as e:
        return _report_error(str(e))
    configure_logging(args.verbose)
    try:
        status = args.handler(args)
        sys.stdout.flush()  # a closed pipe raises here, not at exit
        return status
    except BrokenPipeError:
        return end_on_closed_stdout()
    except Exception as e:
        if args.debug:
            # The traceback, then the usual line: still an error, status 2.
            traceback.print_exc()
        return _report_error(_describe(e, args))


def _report_error(message):
    """Write ``message`` as one error line on stderr; return EXIT_ERROR."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    # A multi-line message is a header ending in ':' and one item a line.
    print('chainer-compiler: error: %s' % '; '.join(lines).replace(':;', ':'), file=sys.stderr)
    return EXIT_ERROR


def _describe(error, args):
    """The message of an error of the project's own types (which name the
    file, operator or argument); for any other, its type and the input
    that raised it as well."""
    if isinstance(error, ModuleNotFoundError):
        # run --onnx/--test, emit-c MODEL.onnx and conformance need ONNX.
        error = _missing_extra(error, 'chainer-compiler ' + args.command, 'onnx') or error
    known = (CommandLineError, InvalidModelError, UnsupportedOperatorsError,
             InvalidTestDataError, RuntimeVMError, OSError, MissingExtraError)
    if isinstance(error, known):
        return str(error)
    text = type(error).__name__ + (': %s' % error if str(error) else '')
    source = _source(args)
    return text + (' (running %s %s)' % source if source else '')


def _source(args):
    """(option, path) of what the command reads; () for conformance."""
    for option in ('test', 'onnx', 'program'):
        if getattr(args, option, None):
            return ('--' + option, getattr(args, option))
    if getattr(args, 'model', None):
        return ('emit-c', args.model)
    return ()


class _Parser(argparse.ArgumentParser):
    """Raises CommandLineError instead of printing the usage and exiting,
    so that a bad argument is reported like every other error."""

    def error(self, message):
        raise CommandLineError(message)


def _bounded(parse, low, high, expected):
    """An argparse type: ``parse(text)`` within [low, high]; ``expected``
    describes the allowed values in the error."""
    def convert(text):
        try:
            value = parse(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:  # NaN fails this too
            raise argparse.ArgumentTypeError('expected %s, got %r' % (expected, text))
        return value
    return convert


#: -v and -vv, of every command.
VERBOSE_HELP = ('say what is being done and how long it takes on stderr (-vv: the details; '
                'conformance: each test as it finishes)')


def _symbolic_dims(text):
    """An argparse type: --symbolic-dims' {name: size}."""
    try:
        return parse_symbolic_dims(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _parser():
    """The argument parser; every command sets ``handler``."""
    parser = _Parser(prog='chainer-compiler', description=__doc__,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--debug', action='store_true',
                        help='on an error, show the traceback as well')
    parser.add_argument('--version', action='version', version='%(prog)s ' + __version__)
    parser.add_argument('-v', '--verbose', action='count', default=0, help=VERBOSE_HELP)
    # -v also after the command; SUPPRESS: a command without it keeps the count before it.
    verbose = argparse.ArgumentParser(add_help=False)
    verbose.add_argument('-v', '--verbose', action='count', default=argparse.SUPPRESS,
                         help=VERBOSE_HELP)
    sub = parser.add_subparsers(dest='command', required=True)

    run = sub.add_parser('run', parents=[verbose],
                         help='compile and run an ONNX model or test directory')
    source = run.add_mutually_exclusive_group(required=True)
    source.add_argument('--test', metavar='DIR',
                        help='ONNX test directory: model.onnx and test_data_set_*/ holding '
                             'input_<N>.pb and output_<N>.pb for graph input and output N')
    source.add_argument('--onnx', metavar='FILE', help='ONNX model, run on random inputs')
    source.add_argument('--program', metavar='FILE', help='saved Program, run on random inputs')
    tolerance = _bounded(float, 0, math.inf, 'a number >= 0')
    run.add_argument('-i', '--inputs', nargs='+', metavar='FILE',
                     help='input arrays (--onnx, --program): an .npz whose keys are the input '
                          'names, or one .npy per input in declaration order; default: random '
                          'inputs')
    run.add_argument('-o', '--outputs', metavar='FILE.npz',
                     help='write the outputs to this .npz, keyed by output name (--onnx, '
                          '--program)')
    run.add_argument('--symbolic-dims', type=_symbolic_dims, metavar='NAME=SIZE,...',
                     help='sizes of symbolic input dimensions for random inputs (default 1)')
    run.add_argument('--rtol', type=tolerance, default=None, help='relative tolerance (--test)')
    run.add_argument('--atol', type=tolerance, default=None, help='absolute tolerance (--test)')
    run.add_argument('--iterations', type=_bounded(int, 1, math.inf, 'an integer >= 1'),
                     default=1, help='timed runs; prints mean, median and best milliseconds')
    run.add_argument('--backend', choices=BACKENDS, default='auto',
                     help='auto (default): native when a C compiler is present and it covers '
                          'every operator, else numpy (never cupy; -v says which and why); '
                          'native: the model compiled to C with the local C compiler (static '
                          'shapes; cached, see docs/native.md); cupy: the GPU')
    run.add_argument('--threads', type=_bounded(int, 1, math.inf, 'an integer >= 1'),
                     default=None, help='threads of the native backend, at most 256 (default: '
                     '$CHAINER_COMPILER_THREADS, else one per CPU this process may use)')
    run.add_argument('--trace', action='store_true',
                     help='print op, shapes and time of every instruction')
    run.add_argument('--chrome-tracing', metavar='FILE',
                     help='write a Chrome tracing JSON profile')
    run.add_argument('--check-nans', action='store_true',
                     help='fail at the first instruction producing NaN or Inf')
    run.add_argument('--dump', action='store_true', help='print the compiled Program')
    run.add_argument('--save', metavar='FILE', help='write the compiled Program to FILE')
    # numpy's RandomState takes seeds in [0, 2**32 - 1].
    run.add_argument('--seed', type=_bounded(int, 0, 2**32 - 1, 'an integer in [0, 2**32 - 1]'),
                     default=0, help='seed of the random inputs')
    run.set_defaults(handler=_run)

    conf = sub.add_parser('conformance', parents=[verbose],
                          help="run ONNX's node conformance tests")
    conf.add_argument('-k', dest='pattern', metavar='PATTERN',
                      help='only tests whose name matches this regular expression')
    conf.add_argument('--json', action='store_true',
                      help='print JSON with every test status and reason')
    conf.add_argument('--backend', choices=['numpy', 'cupy', 'native'], default=None,
                      help='default: cupy when CuPy and a GPU are present, else numpy; '
                           'native: each test compiled to C (ops the C backend refuses '
                           'count as unsupported, a compiler error as a failure)')
    conf.add_argument('-j', '--jobs', type=_bounded(int, 1, 1024, 'an integer in [1, 1024]'),
                      default=1, help='run the tests in this many processes')
    conf.set_defaults(handler=_conformance)

    emit = sub.add_parser('emit-c', parents=[verbose],
                          help='write a model as C sources with a Makefile')
    emit.add_argument('model', metavar='FILE',
                      help='ONNX model (.onnx) or saved Program (.npz), static shapes only '
                           '(--symbolic-dims fixes those of an ONNX model, --max bounds its '
                           'batch)')
    emit.add_argument('-o', dest='output', metavar='DIR', required=True,
                      help='folder for NAME.h, NAME.c, NAME_weights.c, kernels, main.c, '
                           'Makefile (`make -C DIR` builds DIR/NAME and DIR/libNAME.so)')
    emit.add_argument('--name', default='model', help='model name, a C identifier')
    emit.add_argument('--weights', choices=['auto', 'embed', 'file'], default='auto',
                      help='embed: the weights as C literals in NAME_weights.c, one stateless '
                           'NAME_run; file: NAME_weights.bin, loaded by NAME_create (much '
                           'faster to compile for large models); auto (default): embed up to '
                           '1 MiB of weights, else file')
    emit.add_argument('--symbolic-dims', type=_symbolic_dims, metavar='NAME=SIZE,...',
                      help="an ONNX model's symbolic dimensions: the C is for these sizes")
    emit.add_argument('--max', type=_symbolic_dims, metavar='NAME=VALUE',
                      help='an ONNX model\'s symbolic batch (the first axis of every input and '
                           'output): the C takes 1 to VALUE samples (NAME_run_n), running them '
                           'in chunks of 1, 2, 4... up to 64 samples, each size a program of its '
                           'own; refused unless no instruction mixes the samples')
    emit.set_defaults(handler=_emit_c)
    return parser


def _emit_c(args):
    """``chainer-compiler emit-c``: write the C sources; 0 on success.  The
    time of each phase goes to stderr."""
    import time

    from .runtime.native import emit_c
    from .runtime.native.emit_c import check_model_name
    check_model_name(args.name)  # before the work of loading the model
    start = time.perf_counter()
    max_batch = None
    if args.model.endswith('.npz'):
        if args.symbolic_dims or args.max:
            raise CommandLineError('--symbolic-dims and --max size the symbolic dimensions of '
                                   'an ONNX model; %s is a saved Program' % args.model)
        program = load_program(args.model)
    else:
        program, max_batch = _emit_c_programs(args)
    load = time.perf_counter() - start
    result = emit_c(program, args.output, args.name, weights=args.weights, keep=[args.model],
                    max_batch=max_batch)
    weights = ('weights embedded as C literals' if result.weights is None else
               'weights %d bytes in %s_weights.bin' % (result.weights.nbytes, args.name))
    removed = '' if not result.removed else '; removed %d files of the earlier emit-c (%s)' % (
        len(result.removed), ', '.join(result.removed))
    print('wrote %d files to %s; arena %d bytes (intermediates without reuse: %d bytes); %s%s; '
          'build with: make -C %s' % (len(result.files), args.output, result.arena_bytes,
                                      result.intermediate_bytes, weights, removed, args.output))
    print('emit-c: %s' % ', '.join('%s %.2f s' % phase for phase in
                                   [('load', load)] + result.phases), file=sys.stderr)
    return 0


def _emit_c_programs(args):
    """The Program emit-c writes for an ONNX model, sized by --symbolic-dims,
    and with --max the batch's MaxBatch (the Program is then one sample's)."""
    from .pipeline import build_program
    from .runtime.native.batched import MAX_BATCH_LIMIT, PROBE_SIZES, MaxBatch, bucket_sizes
    sizes = dict(args.symbolic_dims or {})
    if args.max and len(args.max) != 1:
        raise CommandLineError('--max takes one symbol (the batch), got %s' % ', '.join(args.max))
    symbol = next(iter(args.max or {}), None)
    if symbol is not None and not 1 <= args.max[symbol] <= MAX_BATCH_LIMIT:
        raise CommandLineError('--max %s=%d: the maximum must be 1 to %d'
                               % (symbol, args.max[symbol], MAX_BATCH_LIMIT))
    if symbol in sizes:
        raise CommandLineError('%s is given by both --symbolic-dims and --max' % symbol)
    if not sizes and symbol is None:
        return build_program(args.model), None
    from .exporting import with_sizes
    from .frontend import load_onnx
    proto = load_onnx(args.model)

    def program(extra):
        try:
            return build_program(with_sizes(proto, {**sizes, **extra}, args.model))
        except ValueError as e:  # a symbol no input has
            raise CommandLineError(str(e)) from e
    if symbol is None:
        return program({}), None
    programs = {size: program({symbol: size})
                for size in sorted({1, *PROBE_SIZES, *bucket_sizes(args.max[symbol])})}
    return programs[1], MaxBatch(symbol, args.max[symbol],
                                 tuple((size, programs[size]) for size in PROBE_SIZES),
                                 tuple((size, programs[size])
                                       for size in bucket_sizes(args.max[symbol])))


def _check_output_paths(args):
    """Refuse, before anything runs, an output file that is a folder, lies
    in a missing folder, is one of the inputs or is the other output."""
    outputs = [(option, path) for option, path in
               (('--save', args.save), ('--chrome-tracing', args.chrome_tracing),
                ('--outputs', args.outputs)) if path]
    for option, path in outputs:
        if os.path.isdir(path):
            raise CommandLineError('%s %s is a directory' % (option, path))
        if not os.path.isdir(os.path.dirname(path) or os.curdir):
            raise CommandLineError('%s %s: its directory does not exist' % (option, path))
        for in_option, in_path in _input_files(args):
            if same_file(path, in_path):
                raise CommandLineError('%s %s would overwrite the input %s (%s)'
                                       % (option, path, in_path, in_option))
    for i, (option, path) in enumerate(outputs):
        for other in outputs[i + 1:]:
            if same_file(path, other[1]):
                raise CommandLineError('%s %s and %s %s are the same file'
                                       % ((option, path) + other))


def _input_files(args):
    """(option, path) of every file the run reads: the model or Program and
    the --inputs, or every file in the --test folder."""
    if not args.test:
        return [_source(args)] + [('--inputs', path) for path in args.inputs or ()]
    return [('--test', os.path.join(folder, name))
            for folder, _, names in os.walk(args.test) for name in names]


def _run(args):
    """``chainer-compiler run``: the exit status."""
    _check_run_options(args)
    _check_output_paths(args)
    tracer = None
    if args.trace or args.chrome_tracing:
        tracer = Tracer(stream=sys.stderr if args.trace else None)
    options = dict(backend=args.backend, check_nans=args.check_nans, tracer=tracer,
                   threads=args.threads)
    try:
        if args.test:
            return _run_test(args, options)
        if args.program:
            program = load_program(args.program)
        else:
            from .pipeline import build_program
            program = build_program(args.onnx)
        _report_program(program, args)
        run_on_files(program, lambda: Executor(program, **options), args)
        if args.outputs:
            print('wrote the outputs to %s' % args.outputs)
        return 0
    finally:
        if tracer is not None and args.chrome_tracing:
            tracer.write_chrome_tracing(args.chrome_tracing)
            print('wrote Chrome tracing profile to %s' % args.chrome_tracing)


def _check_run_options(args):
    """Refuse options that do not apply together."""
    if args.test:
        given = [o for o, v in (('--inputs', args.inputs), ('--outputs', args.outputs),
                                ('--symbolic-dims', args.symbolic_dims)) if v]
        if given:
            raise CommandLineError('%s: --test runs the test directory\'s own data'
                                   % ', '.join(given))
    elif args.inputs and args.symbolic_dims:
        raise CommandLineError('--symbolic-dims sizes random inputs; with --inputs the '
                               'arrays give the sizes')


def _run_test(args, options):
    """Run the --test folder: 0 when every output matches, EXIT_MISMATCH
    (the first mismatch on stderr) when one does not, EXIT_ERROR when the
    VM has no kernel for some operator."""
    from .conformance import run_test_dir
    from .onnx_test_data import DEFAULT_ATOL, DEFAULT_RTOL
    from .pipeline import build_program
    if args.dump or args.save:
        _report_program(build_program(os.path.join(args.test, 'model.onnx')), args)
    result = run_test_dir(args.test,
                          rtol=DEFAULT_RTOL if args.rtol is None else args.rtol,
                          atol=DEFAULT_ATOL if args.atol is None else args.atol, **options)
    if result.status == 'passed':
        print('%s: OK' % result.name)
        return 0
    if result.status == 'unsupported':
        return _report_error('%s: %s' % (result.name, result.reason))
    print('%s: FAILED: %s' % (result.name, result.reason), file=sys.stderr)
    return EXIT_MISMATCH


def _report_program(program, args):
    """Print the Program (--dump) and write it (--save)."""
    if args.dump:
        print(program.dump())
    if args.save:
        save_program(program, args.save)
        print('saved Program to %s' % args.save)


#: Without --verbose or a progress bar, conformance prints running totals
#: every this many tests.
PROGRESS_EVERY = 100


def _progress_bar(total, unit):
    """A tqdm progress bar on stderr counting to ``total`` when stderr is a
    terminal and tqdm (optional) is installed; else None: logs, CI and
    tests get plain lines."""
    if not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit=unit, file=sys.stderr, dynamic_ncols=True)


def _conformance(args):
    """``chainer-compiler conformance``: print the totals; 0, or
    EXIT_MISMATCH when a test failed (a wrong result or an error, not an
    unsupported operator).  A pattern matching no test is an error.  On
    stderr: a progress bar on a terminal; each test as it finishes
    (--verbose); without either, running totals every PROGRESS_EVERY tests."""
    from .conformance import node_test_names, run_conformance, summarize
    total = len(node_test_names(args.pattern))
    if not total:
        raise CommandLineError('-k %s matches no node test' % args.pattern)
    done = {'passed': 0, 'failed': 0, 'unsupported': 0}
    bar = _progress_bar(total, 'test')

    def progress(result):
        done[result.status] += 1
        count = sum(done.values())
        if bar is not None:
            bar.set_postfix(done, refresh=False)
            bar.update()
        if args.verbose:
            line = '%-60s %s %s' % (result.name, result.status, result.reason)
            if bar is None:
                print(line, file=sys.stderr)
            else:
                bar.write(line, file=sys.stderr)
        elif bar is None and count % PROGRESS_EVERY == 0:
            print('[%d/%d] %d passed, %d failed, %d unsupported'
                  % (count, total, done['passed'], done['failed'], done['unsupported']),
                  file=sys.stderr, flush=True)

    try:
        results = run_conformance(args.pattern, backend=args.backend, progress=progress,
                                  jobs=args.jobs)
    finally:
        if bar is not None:
            bar.close()
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
    return EXIT_MISMATCH if totals['failed'] else 0

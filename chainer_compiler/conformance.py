"""Running ONNX test directories through the VM, and the conformance suite
(every node test shipped in the onnx wheel)."""
import contextlib
import functools
import logging
import multiprocessing
import os
import re
import signal
from dataclasses import dataclass

import onnx

from .errors import UnsupportedOperatorsError
from .onnx_graph import all_nodes, opset_versions, schema_version
from .onnx_test_data import DEFAULT_ATOL, DEFAULT_RTOL, load_test_cases, mismatch
from .pipeline import build_program
from .runtime.executor import Executor
from .runtime.native.emit_c import NativeEmitError
from .runtime.ops.registry import has_kernel, lookup

#: A node test that runs longer than this is reported as failed.
TEST_TIMEOUT_S = 60

_log = logging.getLogger(__name__)


@dataclass
class TestResult:
    name: str
    status: str  # 'passed', 'failed' or 'unsupported'
    reason: str = ''
    family: str = ''


def node_tests_dir():
    """Where the node conformance tests are: ``$CHAINER_COMPILER_NODE_TESTS``
    when set (the onnx wheels after 1.22 no longer ship them), else the onnx
    wheel's own folder."""
    return os.environ.get('CHAINER_COMPILER_NODE_TESTS') or os.path.join(
        os.path.dirname(onnx.__file__), 'backend', 'test', 'data', 'node')


def run_test_dir(test_dir, backend=None, rtol=DEFAULT_RTOL, atol=DEFAULT_ATOL,
                 **executor_options):
    """Compile ``test_dir``/model.onnx, run every test_data_set_* and compare.

    Returns a TestResult; the reason of a failure names the data set and the
    mismatching output.  A model the VM has no kernel for, or (backend
    'native') one the C emitter refuses, is 'unsupported'; a C compiler
    failure is a failure like any other exception.
    """
    name = os.path.basename(os.path.normpath(test_dir))
    model_path, cases = load_test_cases(test_dir)
    try:
        program = build_program(model_path)
        executor = Executor(program, backend=backend, **executor_options)
    except (UnsupportedOperatorsError, NativeEmitError) as e:
        # NativeEmitError covers UnsupportedNativeOpsError: ops without a
        # lowering, dtypes or dynamic shapes that C cannot take.
        return TestResult(name, 'unsupported', str(e))
    for case_dir, inputs, expected in cases:
        actual = executor.run(inputs)
        for output_name, value in expected:
            problem = mismatch(output_name, value, actual[output_name], rtol, atol)
            if problem:
                return TestResult(name, 'failed', '%s: %s' % (os.path.basename(case_dir), problem))
    return TestResult(name, 'passed')


def run_conformance(pattern=None, backend=None, progress=None, jobs=1):
    """Run every node test whose name matches the regular expression
    ``pattern`` (all when None); return a list of TestResults sorted by
    name.  ``progress(result)`` is called as each test finishes.  With
    ``jobs`` > 1 the tests run in that many worker processes (worth it for
    backend 'native', where each test compiles a C library)."""
    names = node_test_names(pattern)
    _log.info('running %d node tests from %s (backend %s, %d jobs)', len(names),
              node_tests_dir(), backend or 'default', jobs)
    run = functools.partial(run_node_test, backend=backend)
    if jobs <= 1 or len(names) <= 1:
        return [_reported(run(name), progress) for name in names]
    # spawn, not fork: a forked worker would inherit the locks of the
    # parent's threads (BLAS thread pools, for one) in whatever state they were.
    with multiprocessing.get_context('spawn').Pool(min(jobs, len(names))) as pool:
        results = [_reported(r, progress) for r in pool.imap_unordered(run, names)]
    return sorted(results, key=lambda r: r.name)


def _reported(result, progress):
    """``result``, after passing it to ``progress`` when there is one."""
    _log.debug('%s: %s %s', result.name, result.status, result.reason)
    if progress:
        progress(result)
    return result


def node_test_names(pattern=None):
    """The names of the node tests matching the regular expression
    ``pattern`` (all when None), sorted."""
    return sorted(n for n in os.listdir(node_tests_dir()) if not pattern or re.search(pattern, n))


def run_node_test(name, backend=None):
    """Run the node test ``name`` under the time limit; any exception is a
    failure whose reason names it."""
    root = node_tests_dir()
    try:
        with _time_limit(TEST_TIMEOUT_S):
            result = run_test_dir(os.path.join(root, name), backend=backend)
    except Exception as e:  # one broken test must not stop the suite
        result = TestResult(name, 'failed', '%s: %s' % (type(e).__name__, e))
    result.reason = _shorten(result.reason)
    result.family = family_of_test(root, name)
    return result


def summarize(results):
    """{'passed': n, 'failed': n, 'unsupported': n, 'total': n} and the same
    counts per operator family."""
    totals = {'passed': 0, 'failed': 0, 'unsupported': 0}
    families: dict[str, dict[str, int]] = {}
    for r in results:
        totals[r.status] += 1
        fam = families.setdefault(r.family, {'passed': 0, 'failed': 0, 'unsupported': 0})
        fam[r.status] += 1
    totals['total'] = len(results)
    return totals, dict(sorted(families.items()))


def family_of_test(root, name):
    """The kernel family of the operator a node test is about, or
    'no kernel' when the VM has no kernel for it."""
    model_ops = _model_ops(os.path.join(root, name))
    twin = re.sub(r'_expanded(_ver\d+)?$', '', name)
    if twin != name and os.path.isdir(os.path.join(root, twin)):
        model_ops = _model_ops(os.path.join(root, twin))
    key = name[len('test_'):].replace('_', '').lower()
    candidates = [op for op in model_ops if key.startswith(op[1].lower())]
    if not candidates:
        candidates = model_ops
    if not candidates:
        return 'none'
    domain, op, version = max(candidates, key=lambda c: len(c[1]))
    if not has_kernel(op, domain, version):
        return 'no kernel'
    return lookup(op, domain, version).family


def _model_ops(test_dir):
    model = onnx.load(os.path.join(test_dir, 'model.onnx'), load_external_data=False)
    opsets = opset_versions(model)
    return sorted({(n.domain, n.op_type, schema_version(n, opsets))
                   for n in all_nodes(model.graph)})


def _shorten(text, limit=400):
    text = ' '.join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + '...'


@contextlib.contextmanager
def _time_limit(seconds):
    def expire(signum, frame):
        raise TimeoutError('test ran longer than %d s' % seconds)

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)

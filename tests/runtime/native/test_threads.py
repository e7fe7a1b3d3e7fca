"""The native backend's thread pool (kernels/ccn_threads.c) and its thread
count: from the machine (affinity, cgroup quota), $CHAINER_COMPILER_THREADS,
Executor(threads=...) and the executable's --threads."""
import os
import re
import shutil
import subprocess

import numpy
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.errors import ConfigurationError
from chainer_compiler.runtime.executor import Executor
from chainer_compiler.runtime.native import emit_c, library
from chainer_compiler.runtime.native.render import KERNEL_DIR
from tests.runtime.native.helpers import ATOL, CLEAN_ENV, RTOL, make_folder, make_model

CC = shutil.which('gcc') or shutil.which('clang')
CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'threads_check.c')
#: The exit status of a run that a sanitizer stopped.
SANITIZER_EXIT = 86


def _build_check(folder, flags):
    """threads_check.c and the pool built with ``flags``; the program's path."""
    exe = os.path.join(folder, 'threads_check')
    done = subprocess.run([CC, '-std=c99', '-Wall', '-Wextra', '-Werror', '-pthread', *flags,
                           '-I', KERNEL_DIR, CHECK, os.path.join(KERNEL_DIR, 'ccn_threads.c'),
                           '-o', exe], capture_output=True, text=True)
    if done.returncode != 0:
        return None, done.stderr
    return exe, ''


@pytest.mark.native_build
@pytest.mark.skipif(CC is None, reason='no gcc or clang on PATH')
@pytest.mark.parametrize('flags', [['-O2'], ['-O2', '-DCCN_THREADS=0']], ids=['pool', 'serial'])
def test_pool_runs_every_index_once_on_1_to_8_threads(tmp_path, flags):
    """Counts from 0 to 100003 (more chunks than threads), 2000 short loops
    in a row, nested loops, two callers at once, workers taking part, and a
    worker stalled in a loop holding up one piece of it, not its chunk (the
    caller takes the rest: fails on the pool before work stealing).  With a
    grain (ccn_parallel_for_grain), no range is shorter than it and there are
    at most count / grain (fails on a pool that cuts every loop alike)."""
    exe, error = _build_check(tmp_path, flags)
    assert exe, error
    done = subprocess.run([exe], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, 'ok'), done.stdout + done.stderr


@pytest.mark.sanitize
@pytest.mark.skipif(CC is None, reason='no gcc or clang on PATH')
@pytest.mark.parametrize('sanitizer', ['thread', 'address,undefined'])
def test_pool_is_sanitizer_clean(tmp_path, sanitizer):
    exe, error = _build_check(tmp_path, ['-O1', '-g', '-fsanitize=' + sanitizer,
                                         '-fno-sanitize-recover=all'])
    if exe is None:
        pytest.skip('%s cannot build with -fsanitize=%s: %s' % (CC, sanitizer, error.strip()))
    env = {'TSAN_OPTIONS': 'halt_on_error=1:exitcode=%d' % SANITIZER_EXIT,
           'ASAN_OPTIONS': 'exitcode=%d' % SANITIZER_EXIT,
           'UBSAN_OPTIONS': 'print_stacktrace=1:exitcode=%d' % SANITIZER_EXIT, **CLEAN_ENV}
    done = subprocess.run([exe], capture_output=True, text=True, timeout=300, env=env)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and 'Sanitizer' not in output, output[-6000:]


# -- the thread count ----------------------------------------------------------------

def test_the_variable_sets_the_count_and_the_argument_wins(monkeypatch):
    monkeypatch.setenv('CHAINER_COMPILER_THREADS', '3')
    assert library.native_threads() == 3
    assert library.native_threads(2) == 2
    monkeypatch.setenv('CHAINER_COMPILER_THREADS', '')
    assert library.native_threads() == library.machine_threads()


@pytest.mark.parametrize('text', ['0', '257', '-1', 'two', '1.5', '2 3', '9' * 5000])
def test_a_bad_variable_is_refused_naming_it(monkeypatch, text):
    monkeypatch.setenv('CHAINER_COMPILER_THREADS', text)
    with pytest.raises(ConfigurationError, match=r'^\$CHAINER_COMPILER_THREADS is .*1 to 256'):
        library.native_threads()


def _tiny_program():
    return build_program(make_model([helper.make_node('Relu', ['x'], ['y'])],
                                    [('x', numpy.float32, [2, 3])],
                                    [('y', numpy.float32, [2, 3])]))


@pytest.mark.parametrize('threads', [0, 257, 1.5, True, '2'])
def test_a_bad_argument_is_refused_before_anything_is_built(monkeypatch, threads):
    def no_build(*args, **kwargs):
        raise AssertionError('built a library for a refused thread count')
    monkeypatch.setattr(library, 'load_library', no_build)
    for backend in ('native', 'auto'):  # auto refuses it whichever backend it picks
        with pytest.raises(ConfigurationError, match=re.escape('threads=%r' % (threads,))):
            Executor(_tiny_program(), backend=backend, threads=threads)


def test_the_machine_count_follows_affinity_and_the_cgroup_quota(monkeypatch, tmp_path):
    monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: {0, 1, 2, 3}, raising=False)
    cpu_max = tmp_path / 'cpu.max'
    monkeypatch.setattr(library, 'CGROUP_CPU_MAX', str(cpu_max))
    for text, want in (('max 100000\n', 4), ('150000 100000\n', 2), ('20000 100000\n', 1),
                       ('800000 100000\n', 4), ('garbage\n', 4)):
        cpu_max.write_text(text)
        assert library.machine_threads() == want, text
    cpu_max.unlink()  # no cgroup v2
    assert library.machine_threads() == 4


@pytest.mark.native_build
@pytest.mark.skipif(CC is None or not os.path.exists('/proc/self'), reason='needs gcc, Linux')
def test_the_c_default_count_follows_the_cgroup_quota_as_python_does(monkeypatch, tmp_path):
    """The emitted C's default (ccn_threads.c's machine_threads) takes the
    quota as library.machine_threads does: before, a container limited to
    one CPU's time started a worker per CPU of the host."""
    cpu_max = tmp_path / 'cpu.max'
    (tmp_path / 'count.c').write_text('#include <stdio.h>\n#include "ccn_threads.h"\n'
                                      'int main(void) { printf("%d\\n", ccn_get_threads()); }\n')
    exe = tmp_path / 'count'
    subprocess.run([CC, '-std=c99', '-pthread', '-I', KERNEL_DIR,
                    '-DCCN_CGROUP_CPU_MAX="%s"' % cpu_max, str(tmp_path / 'count.c'),
                    os.path.join(KERNEL_DIR, 'ccn_threads.c'), '-o', str(exe)], check=True)
    monkeypatch.setattr(library, 'CGROUP_CPU_MAX', str(cpu_max))
    for text in ('max 100000\n', '150000 100000\n', '20000 100000\n', '800000 100000\n',
                 'garbage\n', '100000\n', '-5 100000\n', None):
        if text is None:
            cpu_max.unlink()
        else:
            cpu_max.write_text(text)
        done = subprocess.run([str(exe)], capture_output=True, text=True, check=True)
        assert int(done.stdout) == library.machine_threads(), text


# -- through the kernels ---------------------------------------------------------------

def _parallel_model():
    """Kernels whose loops are large enough for the pool: a Winograd and an
    im2col convolution, pooling, the GEMM by rows and a Gemm at batch 1
    (ccn_gemm_bt's dot products); a transposition, broadcasting arithmetic
    and comparison, Where, a transposed convolution (col2im), Gather, Cast
    and Resize."""
    rng = numpy.random.RandomState(0)

    def r(*shape):  # values near 1 through the layers
        scale = numpy.prod(shape[1:]) ** -0.5 if len(shape) > 1 else 1.0
        return (rng.uniform(-1, 1, shape) * scale).astype(numpy.float32)
    node = helper.make_node
    return make_model(
        [node('Conv', ['x', 'w1', 'b1'], ['c1'], pads=[1, 1, 1, 1]),
         node('Relu', ['c1'], ['r1']),
         node('Conv', ['r1', 'w2'], ['c2'], strides=[2, 2], pads=[2, 2, 2, 2]),
         node('MaxPool', ['c2'], ['p'], kernel_shape=[2, 2], strides=[2, 2]),
         node('Flatten', ['p'], ['f']),
         node('Gemm', ['f', 'w3'], ['y']),
         node('ReduceMean', ['f'], ['m'], axes=[0], keepdims=1),
         node('Gemm', ['m', 'w4'], ['z']),
         node('Transpose', ['u'], ['t'], perm=[0, 2, 3, 1]),
         node('Add', ['u', 'ub'], ['s']),
         node('Greater', ['s', 'zero'], ['g']),
         node('Where', ['g', 's', 'u'], ['wh']),
         node('ConvTranspose', ['v', 'wt'], ['ct'], strides=[2, 2]),
         node('Gather', ['u', 'idx'], ['ug'], axis=1),
         node('Cast', ['u'], ['uc'], to=11),
         node('Resize', ['u', '', 'scales'], ['ur'], mode='linear')],
        [('x', numpy.float32, [2, 16, 32, 32]), ('u', numpy.float32, [4, 64, 32, 32]),
         ('v', numpy.float32, [1, 64, 16, 16])],
        [('y', numpy.float32, [2, 512]), ('z', numpy.float32, [1, 1024]),
         ('t', numpy.float32, [4, 32, 32, 64]), ('wh', numpy.float32, [4, 64, 32, 32]),
         ('ct', numpy.float32, [1, 32, 33, 33]), ('ug', numpy.float32, [4, 64, 32, 32]),
         ('uc', numpy.float64, [4, 64, 32, 32]), ('ur', numpy.float32, [4, 64, 64, 64])],
        {'w1': r(32, 16, 3, 3), 'b1': r(32), 'w2': r(32, 32, 5, 5), 'w3': r(2048, 512),
         'w4': r(2048, 1024), 'ub': r(64, 1, 1), 'zero': numpy.float32(0),
         'wt': r(64, 32, 3, 3), 'idx': rng.permutation(64).astype(numpy.int64),
         'scales': numpy.array([1, 1, 2, 2], numpy.float32)})


@pytest.mark.native_build
def test_results_are_the_same_on_1_to_8_threads():
    program = build_program(_parallel_model())
    rng = numpy.random.RandomState(1)
    inputs = [rng.uniform(-1, 1, shape).astype(numpy.float32)
              for shape in ((2, 16, 32, 32), (4, 64, 32, 32), (1, 64, 16, 16))]
    want = Executor(program, backend='numpy').run_positional(inputs)
    first = None
    for threads in range(1, 9):
        got = Executor(program, backend='native', threads=threads).run_positional(inputs)
        for v, g, w in zip(program.outputs, got, want):
            numpy.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=v.name)
        # Each element is computed the same way however the loops are split.
        first = first or got
        for g, f in zip(got, first):
            numpy.testing.assert_array_equal(g, f)


@pytest.mark.native_build
def test_the_executable_takes_threads_from_its_option_or_the_variable(tmp_path):
    program = _tiny_program()
    emit_c(program, tmp_path / 'c', 'tiny')
    make_folder(tmp_path / 'c')
    numpy.save(tmp_path / 'x.npy', numpy.arange(-3, 3, dtype=numpy.float32).reshape(2, 3))

    def run(*args, variable=None):
        env = dict(CLEAN_ENV, **({} if variable is None else
                                 {'CHAINER_COMPILER_THREADS': variable}))
        return subprocess.run([str(tmp_path / 'c' / 'tiny'), '-o', str(tmp_path / 'out'),
                               *args, str(tmp_path / 'x.npy')],
                              capture_output=True, text=True, env=env, timeout=60)
    for args, variable in ((['--threads', '2'], None), ([], '3'), (['--threads', '1'], 'x')):
        done = run(*args, variable=variable)
        assert done.returncode == 0, done.stderr
    for args, variable, named in ((['--threads', '0'], None, '--threads'),
                                  (['--threads', '257'], None, '--threads'),
                                  ([], 'many', '$CHAINER_COMPILER_THREADS'),
                                  ([], '0', '$CHAINER_COMPILER_THREADS')):
        done = run(*args, variable=variable)
        assert done.returncode == 2 and named in done.stderr, (args, variable, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and '1 to 256' in done.stderr


def test_the_thread_limit_is_the_same_in_python_and_c():
    def define(path, name):
        with open(os.path.join(KERNEL_DIR, path)) as f:
            return int(re.search(r'#define %s (\d+)' % name, f.read()).group(1))
    assert library.MAX_THREADS == define('ccn_threads.h', 'CCN_MAX_THREADS') == \
        define('main.c.in', 'MAX_THREADS')

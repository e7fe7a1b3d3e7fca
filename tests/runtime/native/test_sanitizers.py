"""The C under AddressSanitizer and UndefinedBehaviorSanitizer
(``-fsanitize=address,undefined -fno-sanitize-recover=all``): emitted
models built with those flags through their own Makefile and run on normal
and hostile ``.npy`` and weights files, and a selection of the native
kernel tests run in a child Python whose libraries are built with them.
Any out-of-bounds access, use after free, leak (executables) or undefined
behaviour ends the run with a report, which fails the test.

Marked ``sanitize``: `make test` runs it (about a minute and a half on two
cores), `make test-fast` does not, `make test-sanitize` runs only it."""
import functools
import os
import shutil
import subprocess
import sys

import numpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.executor import Executor
from chainer_compiler.runtime.native import emit_c
from tests.runtime.native.helpers import ATOL, RTOL, make_folder, make_model, sanitize
from tests.runtime.native.test_emit_c import _kernels_graph

CC = shutil.which('gcc') or shutil.which('clang')
#: What the sanitized C is built with (besides each build's own flags).
SANITIZE = ['-O1', '-g', '-fno-omit-frame-pointer', '-fsanitize=address,undefined',
            '-fno-sanitize-recover=all']
#: The exit status of a run that a sanitizer stopped.
SANITIZER_EXIT = 86
SANITIZER_ENV = {'ASAN_OPTIONS': 'exitcode=%d' % SANITIZER_EXIT,
                 'UBSAN_OPTIONS': 'print_stacktrace=1:exitcode=%d' % SANITIZER_EXIT}


def _compiler_file(name):
    """The path of the compiler's runtime file ``name`` (just ``name`` when
    it has none)."""
    return subprocess.run([CC, '-print-file-name=%s' % name], capture_output=True,
                          text=True).stdout.strip()


@functools.lru_cache(maxsize=None)
def _unavailable():
    """Why sanitized C cannot be built and run here, or None."""
    if CC is None or shutil.which('make') is None:
        return 'no gcc or clang, or no make, on PATH'
    if not os.path.isabs(_compiler_file('libasan.so')):
        return '%s has no libasan.so' % CC
    probe = subprocess.run([CC, *SANITIZE, '-x', 'c', '-', '-o', os.devnull],
                           input='int main(void) { return 0; }\n', capture_output=True, text=True)
    if probe.returncode != 0:
        return '%s cannot build with %s: %s' % (CC, ' '.join(SANITIZE), probe.stderr.strip())
    return None


pytestmark = [pytest.mark.sanitize,
              pytest.mark.skipif(_unavailable() is not None, reason=str(_unavailable()))]


def _checked(done):
    """``done`` (a CompletedProcess), asserted free of sanitizer reports."""
    output = done.stdout + done.stderr
    assert done.returncode != SANITIZER_EXIT and 'Sanitizer' not in output and \
        'runtime error:' not in output, output[-6000:]
    return done


class Sanitized:
    """An emitted model built with SANITIZE through its Makefile."""

    def __init__(self, program, folder, weights='embed'):
        self.program, self.folder = program, folder
        self.result = emit_c(program, folder, 'model', weights=weights)
        make_folder(folder, 'CC=%s' % CC,
                    'CFLAGS=-std=c99 -fno-math-errno -Wall -Wextra ' + ' '.join(SANITIZE))

    def run(self, args, cwd):
        return _checked(subprocess.run(
            [str(self.folder / 'model')] + [str(a) for a in args], cwd=cwd, timeout=120,
            env={'PATH': '/usr/bin:/bin', **SANITIZER_ENV}, capture_output=True, text=True))

    def check(self, inputs, tmp):
        """Run on ``inputs`` and compare with the NumPy Executor."""
        paths = []
        for k, x in enumerate(inputs):
            paths.append(tmp / ('in_%d.npy' % k))
            numpy.save(paths[-1], x)
        done = self.run(['-o', tmp / 'out'] + paths, tmp)
        assert done.returncode == 0, done.stderr
        for v, want in zip(self.program.outputs, Executor(self.program).run_positional(inputs)):
            got = numpy.load(tmp / 'out' / (sanitize(v.name) + '.npy'))
            numpy.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=v.name)


def _mlp():
    rng = numpy.random.RandomState(0)
    return make_model(
        [helper.make_node('Gemm', ['x', 'W0', 'b0'], ['h']), helper.make_node('Relu', ['h'], ['a']),
         helper.make_node('Gemm', ['a', 'W1', 'b1'], ['y'])],
        [('x', numpy.float32, [3, 13])], [('y', numpy.float32, [3, 10])],
        {'W0': rng.uniform(-1, 1, (13, 37)).astype(numpy.float32),
         'b0': rng.uniform(-1, 1, 37).astype(numpy.float32),
         'W1': rng.uniform(-1, 1, (37, 10)).astype(numpy.float32),
         'b1': rng.uniform(-1, 1, 10).astype(numpy.float32)})


@pytest.fixture(scope='module')
def models(tmp_path_factory):
    """The MLP with its weights in a file, and the graph that uses every
    kernel family of the inference path with awkward shapes."""
    tmp = tmp_path_factory.mktemp('sanitized')
    mlp = Sanitized(build_program(_mlp()), tmp / 'mlp', weights='file')
    mlp.x = numpy.random.RandomState(1).uniform(-1, 1, (3, 13)).astype(numpy.float32)
    graph, inputs = _kernels_graph()
    kernels = Sanitized(build_program(graph), tmp / 'kernels')
    kernels.inputs = inputs
    return mlp, kernels


def test_models_run_clean(models, tmp_path):
    mlp, kernels = models
    mlp.check([mlp.x], tmp_path)
    kernels.check(kernels.inputs, tmp_path)


def _npy(text, version=1, length=None, data=b''):
    """A .npy file whose header is ``text`` (padded as NumPy pads it)."""
    text = text.encode('latin1') if isinstance(text, str) else text
    size = 2 if version == 1 else 4
    pad = -(10 + len(text) + 1) % 64 if version == 1 else 0
    text += b' ' * pad + b'\n'
    length = len(text) if length is None else length
    return (b'\x93NUMPY' + bytes([version, 0]) + length.to_bytes(size, 'little') + text + data)


GOOD = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 13), }"
#: Headers that must be refused; each is a .npy file's whole header.
BAD_HEADERS = {
    'shape-negative': GOOD.replace('(3, 13)', '(-3, 13)'),
    'shape-huge': GOOD.replace('(3, 13)', '(3, 18446744073709551617)'),
    'shape-overflow': GOOD.replace('(3, 13)', '(4294967296, 4294967296, 4294967296)'),
    'shape-rank-40': GOOD.replace('(3, 13)', '(%s)' % ', '.join(['1'] * 40)),
    'shape-unclosed': GOOD.replace('(3, 13)', '(3, 13'),
    'shape-nested': GOOD.replace('(3, 13)', '((3,), 13)'),
    'descr-unclosed': "{'descr': '<f4, 'fortran_order': False, 'shape': (3, 13), }",
    'descr-long': GOOD.replace('<f4', '<' + 'f' * 300),
    'key-long': "{'%s': 1, }" % ('k' * 1000),
    'not-a-dict': '[1, 2, 3]',
    'empty-dict': '{}',
    'no-close': GOOD[:-1],
    'repeated-key': GOOD.replace('}', "'shape': (3, 13), }"),
    'empty': '',
}


def _hostile_npys():
    """(name, bytes) of .npy files that the MLP's executable must refuse."""
    x = numpy.zeros((3, 13), numpy.float32)
    good = _npy(GOOD, data=x.tobytes())
    cases = [(name, _npy(text, data=x.tobytes())) for name, text in BAD_HEADERS.items()]
    # Every cut through the magic, the length and the header, and the data.
    header_end = good.index(b'\n') + 1
    cases += [('prefix-%d' % n, good[:n]) for n in range(0, header_end + 1, 3)]
    cases += [('data-short', good[:-1]), ('nul-in-header', good[:20] + b'\0' + good[21:]),
              ('length-max-v1', good[:8] + b'\xff\xff' + good[10:]),
              ('length-max-v2', _npy(GOOD, version=2, length=0xFFFFFFFF, data=x.tobytes())),
              ('length-short', good[:8] + (20).to_bytes(2, 'little') + good[10:]),
              ('version-9', good[:6] + b'\x09' + good[7:])]
    return cases


def test_hostile_npy_inputs_are_refused_cleanly(models, tmp_path):
    mlp = models[0]
    for name, data in _hostile_npys():
        path = tmp_path / ('%s.npy' % name)
        path.write_bytes(data)
        done = mlp.run([path], tmp_path)
        assert done.returncode == 2, (name, done.stdout, done.stderr)
        assert str(path) in done.stderr and len(done.stderr.strip().splitlines()) == 1, \
            (name, done.stderr)


def _spliced(text):
    """Headers made of ``text`` with a few random bytes put in anywhere."""
    return st.tuples(st.integers(0, len(text)), st.binary(max_size=8)).map(
        lambda cut: text[:cut[0]] + cut[1].decode('latin1') + text[cut[0]:])


@settings(max_examples=200)
@given(text=st.one_of(st.binary(max_size=300),
                      st.sampled_from([GOOD] + sorted(BAD_HEADERS.values())).flatmap(_spliced)))
def test_npy_headers_of_random_bytes_never_trip_a_sanitizer(models, tmp_path_factory, text):
    """Any bytes in place of the header's text: accepted or refused, never
    an access out of bounds."""
    mlp = models[0]
    tmp = tmp_path_factory.mktemp('npy')
    path = tmp / 'x.npy'
    path.write_bytes(_npy(text, data=mlp.x.tobytes()))
    done = mlp.run([path], tmp)
    assert done.returncode in (0, 2), (text, done.stdout, done.stderr)


def test_hostile_weights_files_are_refused_cleanly(models, tmp_path):
    mlp = models[0]
    numpy.save(tmp_path / 'x.npy', mlp.x)
    own = (mlp.folder / 'model_weights.bin').read_bytes()
    cases = [('prefix-%d' % n, own[:n]) for n in (0, 7, 8, 16, 24, 31, 32, 33)]
    cases += [('short', own[:-1]), ('long', own + b'\0'),
              ('size-huge', own[:16] + (2**63).to_bytes(8, 'little') + own[24:]),
              ('size-small', own[:16] + (4).to_bytes(8, 'little') + own[24:]),
              ('fingerprint', own[:8] + bytes([own[8] ^ 1]) + own[9:])]
    for name, data in cases:
        path = tmp_path / ('%s.bin' % name)
        path.write_bytes(data)
        done = mlp.run(['--weights', path, 'x.npy'], tmp_path)
        assert done.returncode == 2, (name, done.stdout, done.stderr)
        assert str(path) in done.stderr and len(done.stderr.strip().splitlines()) == 1, \
            (name, done.stderr)


#: The native kernel tests run sanitized: the inference lowerings whole, and
#: of the training kernels one case of each family's gradient.
KERNEL_TESTS = [
    'tests/runtime/native/test_lower_array.py', 'tests/runtime/native/test_lower_connection.py',
    'tests/runtime/native/test_lower_normalization.py',
    'tests/runtime/native/test_lower_deconvolution.py',
    'tests/runtime/native/test_lower_winograd.py', 'tests/runtime/native/test_lower_depthwise.py',
    'tests/runtime/native/test_native_training_kernels.py',
    'tests/runtime/native/test_conv_direct.py::test_direct_convolutions_match_the_vm',
    'tests/runtime/native/test_lower_pooling.py::'
    'test_max_pool_rows_then_columns_and_global_average_lanes',
    '-k', 'not test_native_training_kernels or test_optimizer_update_in_place or '
          'test_a_label_out_of_range or test_slice_grad or test_gather_grad',
]

#: The child: sanitized libraries need the ASan runtime loaded first
#: (LD_PRELOAD), but not in the compilers this process runs.
CHILD = r'''
import os, sys
os.environ.pop('LD_PRELOAD')
from chainer_compiler.runtime.native import library
library.CFLAGS = library.CFLAGS + tuple(sys.argv[1].split())
import pytest
sys.exit(pytest.main(['-q', '-s', '-p', 'no:cacheprovider', '-x'] + sys.argv[2:]))
'''


def test_native_kernel_tests_pass_sanitized(tmp_path):
    # libstdc++ too: ASan finds the real __cxa_throw at start-up only, and
    # onnx's C++ extension throws (caught) exceptions.
    preload = ' '.join(_compiler_file(n) for n in ('libasan.so', 'libstdc++.so.6'))
    env = dict(os.environ, LD_PRELOAD=preload, CHAINER_COMPILER_CACHE=str(tmp_path / 'cache'),
               **SANITIZER_ENV)
    # Python's own allocations are never freed at exit: no leak check here.
    env['ASAN_OPTIONS'] += ':detect_leaks=0'
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    done = _checked(subprocess.run([sys.executable, '-c', CHILD, ' '.join(SANITIZE)] +
                                   KERNEL_TESTS, cwd=root, env=env, capture_output=True,
                                   text=True, timeout=900))
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    assert ' passed' in done.stdout

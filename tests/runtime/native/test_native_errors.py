"""Run-time errors of the native backend and the emitted executable: a
kernel that refuses its inputs (Gather's index out of range) is a status
that Python raises as the VM's KernelError and the executable reports in one
line; casts of NaN and out-of-range floats to integers are defined; the
arena is checked against the machine's memory before it is allocated; the
executable refuses output files that collide or overwrite an input, a .npy
header it cannot parse key by key, and a number of iterations out of range.
One library and one executable are built for the whole module."""
import os
import platform
import resource
import shutil
import subprocess

import numpy
import pytest
from onnx import TensorProto, helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.errors import KernelError
from chainer_compiler.runtime.executor import Executor
from chainer_compiler.runtime.native import emit_c
from chainer_compiler.runtime.native.library import NativeRun
from chainer_compiler.runtime.native.render import KERNEL_DIR, output_file_names
from tests.runtime.native.helpers import CLEAN_ENV, make_folder, make_model

CC = shutil.which('cc') or shutil.which('gcc')
pytestmark = [pytest.mark.skipif(CC is None or shutil.which('make') is None,
                                 reason='no C compiler (cc/gcc) or make on PATH'),
              # The VM's casts of FLOATS (NumPy warns of NaN).
              pytest.mark.filterwarnings('ignore:invalid value encountered in cast')]

INT32_MIN, INT64_MIN = -2**31, -2**63
#: Floats whose conversion to an integer C leaves undefined, and two it defines.
FLOATS = numpy.array([numpy.nan, numpy.inf, -numpy.inf, 3e9, -3e9, 2.5, -2.5, 1e20],
                     numpy.float32)
#: What the native casts give for FLOATS: the type's minimum where C is undefined.
AS_INT32 = [INT32_MIN] * 5 + [2, -2, INT32_MIN]
AS_INT64 = [INT64_MIN] * 3 + [3000000000, -3000000000, 2, -2, INT64_MIN]
#: The outputs' names: three different names, one file name ignoring case.
OUTPUTS = ('a/b', 'a_b', 'A_B')


def _program():
    """Gather (indices an input) and two Casts of floats to integers."""
    return build_program(make_model(
        [helper.make_node('Gather', ['x', 'idx'], ['a/b'], axis=0, name='pick'),
         helper.make_node('Cast', ['f'], ['a_b'], to=TensorProto.INT32),
         helper.make_node('Cast', ['f'], ['A_B'], to=TensorProto.INT64)],
        [('x', numpy.float32, [4, 3]), ('idx', numpy.int64, [2]),
         ('f', numpy.float32, [len(FLOATS)])],
        [('a/b', numpy.float32, [2, 3]), ('a_b', numpy.int32, [len(FLOATS)]),
         ('A_B', numpy.int64, [len(FLOATS)])]))


def _inputs(indices):
    return [numpy.arange(12, dtype=numpy.float32).reshape(4, 3),
            numpy.array(indices, dtype=numpy.int64), FLOATS]


@pytest.fixture(scope='module')
def native():
    return Executor(_program(), backend='native')


@pytest.fixture(scope='module')
def exe(tmp_path_factory):
    """The executable of the same program, and a folder with good inputs."""
    folder = tmp_path_factory.mktemp('exe')
    emit_c(_program(), folder / 'c', 'errs')
    make_folder(folder / 'c')
    for name, value in zip(('x', 'idx', 'f'), _inputs([-1, 2])):
        numpy.save(folder / (name + '.npy'), value)
    return folder


def _run(exe, *args, cwd=None):
    return subprocess.run([str(exe / 'c' / 'errs')] + [str(a) for a in args], env=CLEAN_ENV,
                          cwd=cwd or exe, capture_output=True, text=True, timeout=60)


def _inputs_of(exe):
    return [exe / 'x.npy', exe / 'idx.npy', exe / 'f.npy']


def _assert_refused(done, *texts):
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    for text in texts:
        assert text in done.stderr


# -- Gather out of range ----------------------------------------------------------

@pytest.mark.parametrize('indices', [[4, 0], [0, -5]])
@pytest.mark.native_build
def test_gather_out_of_range_raises_the_vms_kernel_error(native, indices):
    """Before: the C wrote zeros where the VM raised IndexError."""
    with pytest.raises(KernelError) as vm:
        Executor(_program()).run_positional(_inputs(indices))
    with pytest.raises(KernelError) as got:
        native.run_positional(_inputs(indices))
    # The same instruction, inputs and exception type; the VM also says which index.
    same = "instruction 0 (Gather, node 'pick') failed on inputs (float32[4, 3], int64[2]): " \
        'IndexError: '
    assert str(vm.value).startswith(same) and str(got.value).startswith(same)
    assert str(got.value).endswith('out of bounds for axis 0 with size 4')


@pytest.mark.native_build
def test_gather_in_range_and_negative_indices_match_the_vm(native):
    want = Executor(_program()).run_positional(_inputs([-1, 3]))[0]
    numpy.testing.assert_array_equal(native.run_positional(_inputs([-1, 3]))[0], want)


@pytest.mark.native_build
def test_gather_out_of_range_in_the_executable_is_one_line_and_writes_nothing(exe, tmp_path):
    numpy.save(tmp_path / 'bad.npy', numpy.array([0, 4]))
    done = _run(exe, '-o', tmp_path / 'out', exe / 'x.npy', tmp_path / 'bad.npy', exe / 'f.npy')
    _assert_refused(done, "instruction 0 (Gather, node 'pick') failed on inputs",
                    'out of bounds for axis 0 with size 4')
    assert not (tmp_path / 'out').exists()


# -- casts of NaN and out-of-range floats --------------------------------------------

@pytest.mark.native_build
def test_float_to_integer_casts_are_defined_as_numpy_on_x86(native, exe, tmp_path):
    """Before: undefined behaviour in C (UBSan: 'nan is outside the range of
    representable values'); now the integer type's minimum, in Python and in
    the executable."""
    got = native.run_positional(_inputs([0, 1]))
    assert got[1].tolist() == AS_INT32 and got[2].tolist() == AS_INT64
    done = _run(exe, '-o', tmp_path, *_inputs_of(exe))
    assert done.returncode == 0, done.stderr
    assert numpy.load(tmp_path / 'a_b-1.npy').tolist() == AS_INT32
    if platform.machine() in ('x86_64', 'AMD64'):  # NumPy's own result is the CPU's
        want = Executor(_program()).run_positional(_inputs([0, 1]))
        assert want[1].tolist() == AS_INT32 and want[2].tolist() == AS_INT64


UBSAN_DRIVER = r"""
#include <math.h>
#include <stdio.h>
#include "ccn_array.h"
int main(void)
{
    const float f[] = {NAN, INFINITY, -INFINITY, 3e9f, -3e9f, 2.5f, -2.5f, 1e20f};
    const double d[] = {NAN, INFINITY, -INFINITY, 3e9, -3e9, 2.5, -2.5, 1e20};
    int32_t i32[8], j32[8];
    int64_t i64[8], j64[8];
    ccn_cast_float32_int32(8, f, i32);
    ccn_cast_float64_int32(8, d, j32);
    ccn_cast_float32_int64(8, f, i64);
    ccn_cast_float64_int64(8, d, j64);
    for (int i = 0; i < 8; i++)
        printf("%ld %ld %lld %lld\n", (long)i32[i], (long)j32[i], (long long)i64[i],
               (long long)j64[i]);
    return 0;
}
"""


@pytest.mark.sanitize  # builds the array kernels under UBSan (seconds)
def test_float_to_integer_casts_have_no_undefined_behaviour(tmp_path):
    """The kernels under UBSan's float-cast-overflow check, which aborted on
    the first NaN before."""
    (tmp_path / 'driver.c').write_text(UBSAN_DRIVER)
    flags = ['-std=c99', '-O2', '-fsanitize=undefined,float-cast-overflow',
             '-fno-sanitize-recover=all']
    if subprocess.run([CC] + flags + ['-x', 'c', '-', '-o', str(tmp_path / 'probe')],
                      input='int main(void) { return 0; }', text=True,
                      capture_output=True).returncode != 0:
        pytest.skip('the C compiler cannot build with -fsanitize=undefined')
    # The casts run their loop on the kernels' thread pool.
    subprocess.run([CC] + flags + ['-pthread', '-I', KERNEL_DIR, str(tmp_path / 'driver.c'),
                                   os.path.join(KERNEL_DIR, 'ccn_array.c'),
                                   os.path.join(KERNEL_DIR, 'ccn_threads.c'), '-o',
                                   str(tmp_path / 'driver')], check=True)
    done = subprocess.run([str(tmp_path / 'driver')], capture_output=True, text=True)
    assert done.returncode == 0 and 'runtime error' not in done.stderr, done.stderr
    rows = [[int(v) for v in line.split()] for line in done.stdout.splitlines()]
    assert [r[0] for r in rows] == AS_INT32 and [r[1] for r in rows] == AS_INT32
    assert [r[2] for r in rows] == AS_INT64 and [r[3] for r in rows] == AS_INT64


# -- the arena ----------------------------------------------------------------------

def _huge_program():
    """A 4 TiB intermediate value."""
    return build_program(make_model(
        [helper.make_node('Expand', ['x', 'shape'], ['big']),
         helper.make_node('ReduceSum', ['big'], ['y'], keepdims=0)],
        [('x', numpy.float32, [1, 1])], [('y', numpy.float32, [])],
        {'shape': numpy.array([2**20, 2**20], dtype=numpy.int64)}))


@pytest.mark.native_build
def test_an_arena_larger_than_memory_is_a_kernel_error_naming_its_size(native):
    """Before: numpy.empty's bare MemoryError.  (``native``: the module's
    cache of kernel objects.)"""
    with pytest.raises(KernelError, match=r'program main: the native arena of %d bytes '
                       r'\(4\.1e\+03 GiB\) cannot be allocated' % 2**42):
        NativeRun(_huge_program())


@pytest.mark.native_build
def test_an_arena_the_executable_cannot_allocate_is_named(tmp_path):
    """Before: 'out of memory' (weights in a file: the arena is malloc'ed)."""
    emit_c(_huge_program(), tmp_path / 'c', 'huge', weights='file')
    make_folder(tmp_path / 'c')
    numpy.save(tmp_path / 'x.npy', numpy.ones((1, 1), numpy.float32))
    # 4 GiB of address space: malloc fails even where memory is overcommitted.
    done = subprocess.run([str(tmp_path / 'c' / 'huge'), str(tmp_path / 'x.npy')],
                          env=CLEAN_ENV, cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS,
                                                                (2**32, 2**32)))
    _assert_refused(done, 'out of memory: model huge needs an arena of %d bytes' % 2**42)


# -- output files -------------------------------------------------------------------

@pytest.mark.native_build
def test_outputs_whose_file_names_collide_get_files_of_their_own(exe, tmp_path):
    """Before: a_b.npy was written three times, the last output winning."""
    files = output_file_names(list(OUTPUTS))
    assert files == ['a_b.npy', 'a_b-1.npy', 'A_B-2.npy']
    done = _run(exe, '-o', tmp_path, *_inputs_of(exe))
    assert done.returncode == 0, done.stderr
    want = Executor(_program()).run_positional(_inputs([-1, 2]))
    for file, w in zip(files, want):
        numpy.testing.assert_array_equal(numpy.load(tmp_path / file), w)
    assert 'OUTDIR/a_b.npy OUTDIR/a_b-1.npy OUTDIR/A_B-2.npy' in _run(exe, '--help').stderr


def test_file_names_are_unique_ignoring_case_and_bounded():
    names = ['y', 'Y', 'y-1', 'y', 'x' * 1000, 'é/..']
    files = output_file_names(names)
    assert files[:4] == ['y.npy', 'Y-1.npy', 'y-1-1.npy', 'y-2.npy']
    assert len({f.lower() for f in files}) == len(files)
    assert len(files[4]) <= 200 and files[5] == '__...npy'


@pytest.mark.parametrize('link', ['same', 'symbolic', 'hard'])
@pytest.mark.native_build
def test_an_output_file_that_is_an_input_is_refused_before_running(exe, tmp_path, link):
    """Before: the input file was overwritten with the output."""
    x = tmp_path / 'in' / 'a_b.npy'  # the file of output 'a/b' in -o in
    x.parent.mkdir()
    shutil.copy(exe / 'x.npy', x)
    inputs = [exe / 'idx.npy', exe / 'f.npy']
    target = x
    if link != 'same':
        target = tmp_path / 'out' / 'a_b.npy'
        target.parent.mkdir()
        (os.symlink if link == 'symbolic' else os.link)(x, target)
    before = x.read_bytes()
    done = _run(exe, '-o', target.parent, x, *inputs)
    _assert_refused(done, "output 'a/b' would overwrite the input file %s" % x)
    assert x.read_bytes() == before
    assert not (target.parent / 'a_b-1.npy').exists()


# -- .npy headers --------------------------------------------------------------------

def _npy(path, header: str, data: numpy.ndarray):
    """A version 1.0 .npy file with ``header`` as its dict, as given."""
    text = header.encode('latin-1') + b'\n'
    path.write_bytes(b'\x93NUMPY\x01\x00' + len(text).to_bytes(2, 'little') + text
                     + data.tobytes())


@pytest.mark.parametrize('header, error', [
    # Before: 'shape' was the first text "'shape'", here inside another entry:
    # the 12 numbers were read as the (4, 3) input.
    ("{'descr': '<f4', 'fortran_order': False, 'note': \"'shape': (4, 3)\", 'shape': (12,)}",
     'unknown or repeated key'),
    ("{'descr': \"<f4', 'shape': (4, 3), '\", 'fortran_order': False, 'shape': (12,)}",
     "dtype '<f4', 'shape': (4, 3), '' is not float32"),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (12,), 'shape': (4, 3)}",
     'unknown or repeated key'),
    ("{'descr': '<f4', 'fortran_order': False}", 'no shape'),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (4, -3)}", 'shape'),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3)} junk", 'text after the dict'),
    ("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4, 3)}", 'not a plain dtype'),
])
@pytest.mark.native_build
def test_npy_headers_are_parsed_key_by_key(exe, tmp_path, header, error):
    path = tmp_path / 'x.npy'
    _npy(path, header, numpy.zeros(12, numpy.float32))
    _assert_refused(_run(exe, '-o', tmp_path, path, exe / 'idx.npy', exe / 'f.npy'),
                    str(path), error)


@pytest.mark.native_build
def test_npy_headers_in_any_key_order_and_quoting_are_read(exe, tmp_path):
    path = tmp_path / 'x.npy'
    x = numpy.arange(12, dtype=numpy.float32)
    _npy(path, '{ "shape" : ( 4 , 3 ) , "fortran_order":False,"descr":"<f4" }', x)
    done = _run(exe, '-o', tmp_path, path, exe / 'idx.npy', exe / 'f.npy')
    assert done.returncode == 0, done.stderr
    numpy.testing.assert_array_equal(numpy.load(tmp_path / 'a_b.npy'), x.reshape(4, 3)[[3, 2]])


# -- --iterations -------------------------------------------------------------------

@pytest.mark.parametrize('count', ['99999999999999999999', '1000000001', '0', '-1', '',
                                   '2x', ' '])
@pytest.mark.native_build
def test_iterations_out_of_range_are_refused(exe, count):
    """Before: strtol's overflow (LONG_MAX runs) and '' (no digits) passed."""
    _assert_refused(_run(exe, '--iterations', count, *_inputs_of(exe)),
                    '--iterations: expected an integer from 1 to 1000000000')

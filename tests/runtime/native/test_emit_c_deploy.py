"""emit-c for deployment: the weights' default by size, the phases it
reports, its manifest (a re-emitted folder keeps no stale file), model-
prefixed symbols (two models in one program, statically and dynamically),
and per-instruction profiling (the executable's --profile, the native
backend's tracer).  The C builds are in one module fixture, marked slow."""
import importlib
import json
import logging
import os
import shutil
import subprocess

import numpy
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from chainer_compiler.cli import main as cli_main
from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.executor import Executor
from chainer_compiler.runtime.native import NativeEmitError, emit_c
from chainer_compiler.runtime.native.emit_c import MANIFEST
from chainer_compiler.runtime.native.library import find_compiler
from chainer_compiler.runtime.native.render import KERNEL_DIR, prefix_kernel_symbols
from chainer_compiler.runtime.profiling import Tracer
from chainer_compiler.runtime.serialization import save_program
from tests.runtime.native.helpers import CLEAN_ENV

CC = shutil.which('cc') or shutil.which('gcc')
needs_cc = pytest.mark.skipif(CC is None or shutil.which('make') is None or
                              shutil.which('nm') is None,
                              reason='no C compiler (cc/gcc), make or nm on PATH')
X = numpy.arange(-3, 3, dtype=numpy.float32).reshape(2, 3)


def _model(tmp, op, constant, name='m'):
    """y = Relu(op(x, constant)) for x of shape (2, 3), as a Program."""
    c = numpy.asarray(constant, dtype=numpy.float32)
    graph = helper.make_graph(
        [helper.make_node(op, ['x', 'c'], ['t']), helper.make_node('Relu', ['t'], ['y'])], 'g',
        [helper.make_tensor_value_info('x', TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(c, 'c')])
    path = os.path.join(str(tmp), '%s.onnx' % name)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)]), path)
    return build_program(path)


# -- the weights' default, phases --------------------------------------------------

def test_weights_default_by_size_and_explicit_choices_kept(tmp_path, monkeypatch, caplog):
    """Before: embedded whatever the size (ResNet-50: a 394 MB weights.c);
    now 'auto' writes NAME_weights.bin above EMBED_MAX_BYTES, and says so."""
    program = _model(tmp_path, 'Add', numpy.ones(3))  # 12 bytes of constants
    assert emit_c(program, tmp_path / 'small').weights_mode == 'embed'
    module = importlib.import_module('chainer_compiler.runtime.native.emit_c')
    monkeypatch.setattr(module, 'EMBED_MAX_BYTES', 8)
    with caplog.at_level(logging.INFO, logger='chainer_compiler.emit_c'):
        big = emit_c(program, tmp_path / 'big', 'big')
    assert big.weights_mode == 'file' and (tmp_path / 'big' / 'big_weights.bin').exists()
    assert 'above EMBED_MAX_BYTES' in caplog.text and 'weights=file' in caplog.text
    assert [name for name, _ in big.phases] == ['lower', 'plan', 'render', 'write']
    assert all(seconds >= 0 for _, seconds in big.phases)
    assert emit_c(program, tmp_path / 'e', weights='embed').weights_mode == 'embed'
    assert emit_c(program, tmp_path / 'f', weights='file').weights_mode == 'file'
    with pytest.raises(NativeEmitError, match='weights=.*expected one of auto, embed, file'):
        emit_c(program, tmp_path / 'x', weights='inline')


def test_cli_prints_the_time_of_each_phase(tmp_path, capsys):
    program = _model(tmp_path, 'Add', numpy.ones(3))
    save_program(program, tmp_path / 'm.npz')
    assert cli_main(['emit-c', str(tmp_path / 'm.npz'), '-o', str(tmp_path / 'c')]) == 0
    out, err = capsys.readouterr()
    assert 'weights embedded as C literals' in out
    assert all(' %s ' % phase in err for phase in ('load', 'lower', 'plan', 'render', 'write'))
    assert err.startswith('emit-c: load ') and err.rstrip().endswith(' s')


_ALIGNMENT_DRIVER = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "ccn_weights.h"

int main(int argc, char **argv)
{
    char error[256] = "";
    void *block, *p;
    (void)argc;
    for (uint64_t n = 0; n < 200; n += 13) {
        if (!(p = ccn_alloc_lines(n, &block)) || (uintptr_t)p % 64 != 0)
            return 1;
        free(block);
    }
    p = ccn_load_weights(argv[1], UINT64_C(7), UINT64_C(24), &block, error, sizeof error);
    printf("%d %d %s\n", p != NULL && (uintptr_t)p % 64 == 0, p != NULL && ((float *)p)[5] == 5.0f,
           error);
    free(block);
    p = ccn_load_weights(argv[2], UINT64_C(7), UINT64_C(24), &block, error, sizeof error);
    printf("%d %d %s\n", p != NULL, block != NULL, error);
    return 0;
}
"""


@needs_cc
@pytest.mark.native_build
def test_emitted_models_put_arena_and_weights_at_a_cache_line(tmp_path):
    """NAME_create's arena and weights start at 64-byte lines (the kernels'
    vectors sit at 64-byte offsets: from malloc's 16-byte start each of them
    straddled two lines), and a truncated weights file still frees its block."""
    header = b'CCNWGHT1' + (7).to_bytes(8, 'little') + (24).to_bytes(8, 'little') + bytes(8)
    data = numpy.arange(6, dtype=numpy.float32).tobytes()
    (tmp_path / 'w.bin').write_bytes(header + data)
    (tmp_path / 'short.bin').write_bytes(header + data[:-4])
    (tmp_path / 'driver.c').write_text(_ALIGNMENT_DRIVER)
    exe = str(tmp_path / 'driver')
    subprocess.run(find_compiler() + ['-std=c99', '-fsanitize=address,undefined', '-I',
                                      KERNEL_DIR, str(tmp_path / 'driver.c'),
                                      os.path.join(KERNEL_DIR, 'ccn_weights.c'), '-o', exe],
                   check=True)
    done = subprocess.run([exe, str(tmp_path / 'w.bin'), str(tmp_path / 'short.bin')],
                          capture_output=True, text=True, check=True)
    loaded, truncated = done.stdout.splitlines()
    assert loaded == '1 1 '  # at a line, and the sixth float read back
    assert truncated.startswith('0 0 ') and 'truncated or too long' in truncated


# -- the manifest ------------------------------------------------------------------

def test_re_emitting_removes_only_the_earlier_emits_unchanged_files(tmp_path, caplog):
    """Before: emitting model b where model a was left a.c, a.h,
    a_weights.c, ccn_weights.c... beside b's; now they go, while a file of the user's and a
    generated file the user changed stay."""
    program = _model(tmp_path, 'Add', numpy.ones(3))
    folder = tmp_path / 'c'
    emit_c(program, folder, 'a', weights='file')
    (folder / 'notes.txt').write_text('mine')
    (folder / 'a.h').write_text('/* edited */')
    with caplog.at_level(logging.WARNING, logger='chainer_compiler.emit_c'):
        result = emit_c(program, folder, 'b')
    assert sorted(result.removed) == ['a.c', 'a_weights.bin', 'a_weights.c', 'ccn_weights.c']
    left = sorted(os.listdir(folder))
    assert 'notes.txt' in left and 'a.h' in left and 'b.c' in left
    assert not any(n.startswith('a') and n != 'a.h' for n in left)
    assert 'kept' in caplog.text and 'a.h' in caplog.text
    listed = (folder / MANIFEST).read_text().splitlines()[1:]
    assert sorted(line.split('  ')[1] for line in listed) == sorted(
        os.path.basename(f) for f in result.files)


@pytest.mark.parametrize('line', ['0' * 64 + '  ../outside.txt', '0' * 64 + '  /etc/passwd',
                                  'not a manifest line', '0' * 64 + '  ' + MANIFEST])
def test_a_damaged_manifest_is_refused_before_anything_is_written(tmp_path, line):
    """A manifest is untrusted: an entry outside the folder is never removed."""
    program = _model(tmp_path, 'Add', numpy.ones(3))
    folder = tmp_path / 'c'
    emit_c(program, folder, 'a')
    manifest = (folder / MANIFEST).read_text().splitlines()
    (folder / MANIFEST).write_text('\n'.join(manifest + [line]) + '\n')
    (tmp_path / 'outside.txt').write_text('keep')
    before = {n: (folder / n).read_bytes() for n in os.listdir(folder)}
    with pytest.raises(NativeEmitError, match='%s is damaged \\(line %d\\)'
                       % (MANIFEST, len(manifest) + 1)):
        emit_c(program, folder, 'b')
    assert {n: (folder / n).read_bytes() for n in os.listdir(folder)} == before
    assert (tmp_path / 'outside.txt').read_text() == 'keep'


# -- symbol prefixes ---------------------------------------------------------------

def test_kernel_symbols_are_prefixed_outside_strings_and_comments():
    text = ('#include "ccn_math.h"\nvoid ccn_cast_##A(void); /* ccn_x */ // ccn_y\n'
            'const char *s = "ccn_z", c = \'c\'; xccn_w(); ccn_gemm(1);')
    assert prefix_kernel_symbols(text, 'net') == (
        '#include "ccn_math.h"\nvoid net_ccn_cast_##A(void); /* ccn_x */ // ccn_y\n'
        'const char *s = "ccn_z", c = \'c\'; xccn_w(); net_ccn_gemm(1);')


DRIVER = r"""
#include <stdio.h>
#include "alpha.h"
#include "beta.h"
int main(void)
{
    float x[6] = {-3, -2, -1, 0, 1, 2}, a[6], b[6];
    if (alpha_run(x, a) || beta_run(x, b))
        return 1;
    for (int i = 0; i < 6; i++)
        printf("%.9g %.9g\n", a[i], b[i]);
    return 0;
}
"""


@pytest.fixture(scope='module')
def two_models(tmp_path_factory):
    """alpha (x + c, built with PROFILE=1) and beta (x * c) emitted into
    two folders and built: executables, shared and static libraries."""
    tmp = tmp_path_factory.mktemp('two')
    programs = {'alpha': _model(tmp, 'Add', [1, -2, 3], 'alpha'),
                'beta': _model(tmp, 'Mul', [2, 0.5, -1], 'beta')}
    for name, program in programs.items():
        emit_c(program, tmp / name, name)
        done = subprocess.run(['make', '-C', str(tmp / name)] +
                              (['PROFILE=1'] if name == 'alpha' else []),
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    numpy.save(tmp / 'x.npy', X)
    return tmp, programs


def _symbols(*argv):
    out = subprocess.run(['nm', *argv], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if len(line.split()) == 3}


@pytest.mark.slow
@needs_cc
def test_two_models_link_into_one_program_statically_and_dynamically(two_models):
    """Before: both folders' objects defined ccn_binary_float32... (the
    link failed) and each shared library exported every kernel; now every
    external symbol starts with the model's name and the shared libraries
    export only NAME.h's API."""
    tmp, programs = two_models
    for name in programs:
        exported = _symbols('-D', '--defined-only', str(tmp / name / ('lib%s.so' % name)))
        assert exported == {name + s for s in ('_run', '_run_arena', '_run_v', '_inputs',
                                               '_outputs', '_status_message', '_profile',
                                               '_profile_events', '_set_threads',
                                               '_set_most_threads')}
        static = _symbols('-g', '--defined-only', str(tmp / name / ('lib%s.a' % name)))
        assert static and all(s.startswith(name + '_') for s in static), static
    (tmp / 'driver.c').write_text(DRIVER)
    common = [CC, '-std=c99', '-pthread', '-I', str(tmp / 'alpha'), '-I', str(tmp / 'beta'),
              str(tmp / 'driver.c')]
    links = {'static': [str(tmp / 'alpha' / 'libalpha.a'), str(tmp / 'beta' / 'libbeta.a')],
             'shared': ['-L', str(tmp / 'alpha'), '-L', str(tmp / 'beta'), '-lalpha', '-lbeta',
                        '-Wl,-rpath,%s:%s' % (tmp / 'alpha', tmp / 'beta')]}
    want = [Executor(programs[n]).run_positional([X])[0].reshape(-1) for n in ('alpha', 'beta')]
    for kind, libraries in links.items():
        exe = str(tmp / ('driver_' + kind))
        subprocess.run(common + libraries + ['-lm', '-o', exe], check=True)
        out = subprocess.run([exe], capture_output=True, text=True, env=CLEAN_ENV, check=True)
        got = numpy.array([line.split() for line in out.stdout.splitlines()], numpy.float32)
        numpy.testing.assert_array_equal(got.T, want, err_msg=kind)


# -- profiling ---------------------------------------------------------------------

@pytest.mark.slow
@needs_cc
def test_executable_profile_writes_one_event_per_instruction_and_run(two_models):
    tmp, programs = two_models
    trace = tmp / 'alpha.json'
    done = subprocess.run([str(tmp / 'alpha' / 'alpha'), '--profile', str(trace),
                           '--iterations', '3', '-o', str(tmp / 'out'), str(tmp / 'x.npy')],
                          capture_output=True, text=True, env=CLEAN_ENV)
    assert done.returncode == 0, done.stderr
    events = json.loads(trace.read_text())['traceEvents']
    program = programs['alpha']
    assert [e['name'] for e in events] == [i.qualified_op for i in program.instructions] * 3
    assert [e['args']['index'] for e in events] == [0, 1] * 3
    assert events[0]['args']['inputs'] == ['float32[2, 3]', 'float32[3]']
    assert all(e['ph'] == 'X' and 0 <= e['dur'] < 1e6 for e in events)
    assert all(a['ts'] + a['dur'] <= b['ts'] + 1e-3 for a, b in zip(events, events[1:]))


@pytest.mark.slow
@needs_cc
def test_executable_without_profiling_refuses_profile(two_models):
    tmp, _ = two_models
    done = subprocess.run([str(tmp / 'beta' / 'beta'), '--profile', str(tmp / 'b.json'),
                           str(tmp / 'x.npy')], capture_output=True, text=True, env=CLEAN_ENV)
    assert done.returncode == 2 and 'make PROFILE=1' in done.stderr
    assert not (tmp / 'b.json').exists()


@pytest.mark.slow
@needs_cc
def test_native_backend_traces_each_instruction(tmp_path):
    """Before: Executor(backend='native', tracer=...) and `run --backend
    native --chrome-tracing` raised BackendUnavailableError; now each call
    records one event per instruction, in the VM's Chrome-trace format."""
    program = _model(tmp_path, 'Add', [1, -2, 3])
    tracer = Tracer()
    executor = Executor(program, backend='native', tracer=tracer)
    for _ in range(2):
        got = executor.run_positional([X])
    numpy.testing.assert_array_equal(got[0], Executor(program).run_positional([X])[0])
    events = list(tracer.events)
    vm = Tracer()
    Executor(program, backend='numpy', tracer=vm).run_positional([X])
    assert [e['name'] for e in events] == [e['name'] for e in vm.events] * 2
    assert [e['args'] for e in events[:2]] == [e['args'] for e in vm.events]
    assert all(e['ph'] == 'X' and e['cat'] == program.name and 0 <= e['dur'] < 1e6
               for e in events)
    # The command line: `run --backend native --chrome-tracing` (the same
    # library, from the cache).
    save_program(program, tmp_path / 'm.npz')
    path = tmp_path / 'trace.json'
    assert cli_main(['run', '--program', str(tmp_path / 'm.npz'), '--backend', 'native',
                     '--chrome-tracing', str(path)]) == 0
    assert [e['name'] for e in json.loads(path.read_text())['traceEvents']] == ['Add', 'Relu']


@pytest.mark.slow
@needs_cc
def test_native_trace_names_the_instructions_native_fusion_leaves(tmp_path):
    """Before: the native run's events were named by instruction index in
    the caller's Program, so once fusion took Relu into the Gemm, the Add
    after it was recorded as 'Relu'; now each event names the instruction
    that ran."""
    graph = helper.make_graph(
        [helper.make_node('Gemm', ['x', 'w'], ['t']), helper.make_node('Relu', ['t'], ['r']),
         helper.make_node('Add', ['r', 'c'], ['y'])], 'g',
        [helper.make_tensor_value_info('x', TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(numpy.eye(3, dtype=numpy.float32), 'w'),
         numpy_helper.from_array(numpy.ones(3, dtype=numpy.float32), 'c')])
    path = tmp_path / 'fused.onnx'
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)]), path)
    tracer = Tracer()
    Executor(build_program(str(path)), backend='native', tracer=tracer).run_positional([X])
    names = [e['name'] for e in tracer.events]
    assert names[-1] == 'Add' and 'Relu' not in names and len(names) == 2, names

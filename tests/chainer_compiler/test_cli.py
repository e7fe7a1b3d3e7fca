import errno
import gc
import io
import json
import os
import re
import shutil
import subprocess
import sys

import numpy
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from chainer_compiler import pipeline
from chainer_compiler.cli import main
from chainer_compiler.conformance import node_tests_dir
from chainer_compiler.runtime import files, load_program, save_program
from chainer_compiler.runtime.errors import InputValidationError
from chainer_compiler.runtime.program import Instruction, Program, ValueInfo
from chainer_compiler.runtime.random_inputs import SYMBOLIC_DIM_SIZE, random_inputs
from tests.chainer_compiler.test_onnx_test_data import external_tensor, write_test_dir
from tests.conftest import make_model

RELU_TEST = os.path.join(node_tests_dir(), 'test_relu')


def test_run_test_passes_on_good_data(capsys):
    assert main(['run', '--test', RELU_TEST, '--backend', 'numpy']) == 0
    assert 'test_relu: OK' in capsys.readouterr().out


def test_run_test_fails_on_broken_data_and_names_the_output(tmp_path, capsys):
    broken = tmp_path / 'test_relu'
    shutil.copytree(RELU_TEST, broken)
    path = broken / 'test_data_set_0' / 'output_0.pb'
    expected = numpy_helper.to_array(onnx.load_tensor(str(path)))
    onnx.save_tensor(numpy_helper.from_array(expected + 1, 'y'), str(path))
    assert main(['run', '--test', str(broken), '--backend', 'numpy']) == 1
    err = capsys.readouterr().err
    assert "FAILED" in err and "output 'y'" in err and 'test_data_set_0' in err


def test_run_test_tolerances_are_honoured(tmp_path):
    nudged = tmp_path / 'test_relu'
    shutil.copytree(RELU_TEST, nudged)
    path = nudged / 'test_data_set_0' / 'output_0.pb'
    expected = numpy_helper.to_array(onnx.load_tensor(str(path)))
    onnx.save_tensor(numpy_helper.from_array(expected + 1e-3, 'y'), str(path))
    assert main(['run', '--test', str(nudged), '--backend', 'numpy']) == 1
    assert main(['run', '--test', str(nudged), '--atol', '1e-2', '--backend', 'numpy']) == 0


def test_run_test_missing_directory_is_an_error(tmp_path, capsys):
    assert main(['run', '--test', str(tmp_path / 'none')]) == 2
    assert 'has no model.onnx' in capsys.readouterr().err


def test_run_onnx_with_all_options(tmp_path, capsys):
    trace = tmp_path / 'trace.json'
    saved = tmp_path / 'prog.npz'
    model = os.path.join(node_tests_dir(), 'test_conv_with_strides_padding', 'model.onnx')
    assert main(['run', '--onnx', model, '--iterations', '3', '--trace', '--check-nans',
                 '--chrome-tracing', str(trace), '--dump', '--save', str(saved)]) == 0
    captured = capsys.readouterr()
    assert 'program main' in captured.out and 'Conv(' in captured.out
    assert re.search(r'3 iterations: mean [0-9.]+ ms, median [0-9.]+ ms, best [0-9.]+ ms',
                     captured.out)
    assert 'output y: float32[1, 1, 4, 3]' in captured.out
    assert 'Conv' in captured.err  # the trace
    assert json.loads(trace.read_text())['traceEvents']
    assert load_program(str(saved)).instructions[0].op == 'Conv'
    assert main(['run', '--program', str(saved), '--backend', 'numpy']) == 0


def test_cupy_backend_without_gpu_is_a_clear_error(capsys):
    from chainer_compiler.runtime import cupy_unavailable_reason
    if cupy_unavailable_reason() is None:
        pytest.skip('CuPy is usable here')
    assert main(['run', '--test', RELU_TEST, '--backend', 'cupy']) == 2
    assert 'backend cupy is unavailable' in capsys.readouterr().err


def test_conformance_json_reports_each_test(capsys):
    assert main(['conformance', '--json', '-k', '^test_(relu|abs)$']) == 0
    report = json.loads(capsys.readouterr().out)
    assert report['totals'] == {'passed': 2, 'failed': 0, 'unsupported': 0, 'total': 2}
    assert {t['name'] for t in report['tests']} == {'test_relu', 'test_abs'}
    assert all(t['family'] in ('activation', 'math') for t in report['tests'])


def test_conformance_exits_with_status_2_when_nothing_matches(capsys):
    assert main(['conformance', '-k', 'no_such_test']) == 2  # was 0: "0 passed ... of 0"
    assert '-k no_such_test matches no node test' in error_line(capsys)


def test_conformance_exits_with_status_1_when_a_test_fails(monkeypatch, capsys):
    from chainer_compiler import conformance

    def run_test_dir(test_dir, **kwargs):
        return conformance.TestResult(os.path.basename(test_dir), 'failed', 'wrong value')

    monkeypatch.setattr(conformance, 'run_test_dir', run_test_dir)
    assert main(['conformance', '-k', '^test_relu$']) == 1  # was 0
    assert '0 passed, 1 failed, 0 unsupported of 1 node tests' in capsys.readouterr().out


@pytest.mark.parametrize('argv', [['run', '--program', 'PROGRAM', '--dump', '--backend', 'numpy'],
                                  ['conformance', '-k', '^test_relu$']])
def test_a_closed_stdout_ends_the_command_quietly(tmp_path, argv):
    """``chainer-compiler ... | head``: head exits, the next write fails."""
    argv = [a.replace('PROGRAM', _relu_program(tmp_path)) for a in argv]
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first write
    try:
        done = subprocess.run([sys.executable, '-m', 'chainer_compiler'] + argv, stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, '')  # was 2, "Broken pipe"


def error_line(capsys):
    """The error a failed command wrote: exactly one line on stderr."""
    err = capsys.readouterr().err
    assert err.startswith('chainer-compiler: error: ') and err.count('\n') == 1, err
    return err


def relu_copy(tmp_path, edit):
    """A copy of ONNX's test_relu folder, its test_data_set_0 changed by
    ``edit(folder)``."""
    copy = tmp_path / 'test_relu'
    shutil.copytree(RELU_TEST, copy)
    edit(copy / 'test_data_set_0')
    return copy


@pytest.mark.parametrize('edit, named', [
    (lambda d: (d / 'output_0.pb').unlink(), 'output_0.pb is missing'),
    (lambda d: (d / 'output_0.pb').rename(d / 'output_5.pb'), 'output_5.pb'),
    (lambda d: (d / 'input_0.pb').rename(d / 'input_10.pb'), 'input_10.pb'),
    (lambda d: (d / 'input_0.pb').rename(d / 'input0.pb'), 'input0.pb'),
    (lambda d: (d / 'input_0.pb').write_bytes(b'\xff' * 16), 'input_0.pb'),
    (lambda d: (d / 'output_0.pb').write_bytes(b''), 'output_0.pb'),
    (lambda d: (d.parent / 'model.onnx').write_bytes(b'\xff' * 16), 'model.onnx'),
], ids=['no-output-file', 'renumbered-output', 'renumbered-input', 'misnamed', 'garbage',
        'empty', 'garbage-model'])
def test_run_test_refuses_data_that_does_not_match_the_model(tmp_path, capsys, edit, named):
    assert main(['run', '--test', str(relu_copy(tmp_path, edit))]) == 2
    assert named in error_line(capsys)


def test_run_test_never_reads_external_data_from_the_working_directory(
        tmp_path, capsys, monkeypatch):
    def externalize_input(folder):
        x = numpy_helper.to_array(onnx.load_tensor(str(folder / 'input_0.pb')))
        (tmp_path / 'secret.txt').write_bytes(x.tobytes())  # the old code read this and passed
        onnx.save_tensor(external_tensor(x, 'secret.txt'), str(folder / 'input_0.pb'))

    test_dir = relu_copy(tmp_path, externalize_input)
    monkeypatch.chdir(tmp_path)
    assert main(['run', '--test', str(test_dir)]) == 2
    assert 'input_0.pb' in error_line(capsys)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """tmp_path as the working directory, holding a model m.onnx, a
    symbolic and a hard link to it, its Program p.npz, the test folder t
    and an empty folder d."""
    monkeypatch.chdir(tmp_path)
    shutil.copytree(RELU_TEST, 't')
    shutil.copy(os.path.join('t', 'model.onnx'), 'm.onnx')
    os.symlink('m.onnx', 'link.onnx')
    os.link('m.onnx', 'hard.onnx')
    save_program(pipeline.build_program('m.onnx'), 'p.npz')
    numpy.savez('in.npz', x=numpy.zeros((3, 4, 5), numpy.float32))
    os.mkdir('d')
    return tmp_path


def _contents(root):
    """{path: bytes} of every file under ``root``."""
    return {path: path.read_bytes() for path in root.rglob('*') if path.is_file()}


@pytest.mark.parametrize('argv, named', [
    (['--onnx', 'm.onnx', '--save', './m.onnx'], ['--save ./m.onnx', 'm.onnx (--onnx)']),
    (['--onnx', 'm.onnx', '--chrome-tracing', 'm.onnx'], ['--chrome-tracing m.onnx', '--onnx']),
    (['--onnx', 'link.onnx', '--save', 'm.onnx'], ['--save m.onnx', 'link.onnx (--onnx)']),
    (['--onnx', 'm.onnx', '--save', 'hard.onnx'], ['--save hard.onnx', 'm.onnx (--onnx)']),
    (['--program', 'p.npz', '--save', 'p.npz'], ['--save p.npz', 'p.npz (--program)']),
    (['--test', 't', '--save', 't/model.onnx'], ['--save t/model.onnx', '(--test)']),
    (['--test', 't', '--chrome-tracing', 't/test_data_set_0/output_0.pb'],
     ['--chrome-tracing t/test_data_set_0/output_0.pb', '(--test)']),
    (['--onnx', 'm.onnx', '--save', 'out', '--chrome-tracing', './out'],
     ['--save out', '--chrome-tracing ./out', 'same file']),
    (['--onnx', 'm.onnx', '--save', 'd'], ['--save d is a directory']),
    (['--program', 'p.npz', '-i', 'in.npz', '-o', 'in.npz'],
     ['--outputs in.npz', 'in.npz (--inputs)']),
    (['--program', 'p.npz', '-o', 'p.npz'], ['--outputs p.npz', 'p.npz (--program)']),
    (['--program', 'p.npz', '-o', 'out', '--save', 'out'], ['--outputs out', 'same file']),
    (['--onnx', 'm.onnx', '--chrome-tracing', 'no/such/dir/t.json'],
     ['--chrome-tracing no/such/dir/t.json', 'does not exist']),
])
def test_run_refuses_output_paths_that_would_overwrite_an_input(workdir, capsys, argv, named):
    before = _contents(workdir)
    assert main(['run'] + argv) == 2
    line = error_line(capsys)
    assert all(text in line for text in named), line
    assert _contents(workdir) == before


@pytest.mark.parametrize('argv, named', [
    (['--iterations', '0'], '--iterations'),  # ran once, silently
    (['--iterations', 'many'], '--iterations'),
    (['--seed', '-1'], '--seed'),  # numpy refused it with a traceback
    (['--seed', str(2 ** 32)], '--seed'),
    (['--rtol', '-0.1'], '--rtol'),
    (['--atol', 'nan'], '--atol'),
])
def test_bad_numbers_are_one_line_errors(capsys, argv, named):
    assert main(['run', '--test', RELU_TEST] + argv) == 2
    assert named in error_line(capsys)


def test_a_bare_command_prints_the_help_with_status_2(capsys):
    assert main([]) == 2  # a usage error, as argparse has it, answered with the help
    out, err = capsys.readouterr()
    assert out == '' and err.startswith('usage: chainer-compiler') and 'emit-c' in err


def test_a_missing_subcommand_after_options_is_a_one_line_error(capsys):
    assert main(['--debug']) == 2
    assert 'command' in error_line(capsys)


def _relu_program(tmp_path, shape=('n', 3)):
    """A Program y = Relu(x), x float32 of ``shape``, saved in tmp_path."""
    path = str(tmp_path / 'relu.npz')
    save_program(Program([Instruction('Relu', (0,), (1,), version=14)],
                         [ValueInfo('x', 0, dtype='float32', shape=shape)],
                         [ValueInfo('y', 1)], num_registers=2), path)
    return path


X = numpy.array([[-1, 2, -3], [4, -5, 6]], numpy.float32)


@pytest.mark.parametrize('files', ['npz', 'npy'])
def test_run_reads_input_files_and_writes_the_outputs(tmp_path, capsys, files):
    if files == 'npz':
        numpy.savez(tmp_path / 'in.npz', x=X)
    else:
        numpy.save(tmp_path / 'in.npy', X)
    out = tmp_path / 'out.npz'
    assert main(['run', '--program', _relu_program(tmp_path), '-i', str(tmp_path / ('in.' + files)),
                 '-o', str(out)]) == 0
    assert 'output y: float32[2, 3]' in capsys.readouterr().out
    with numpy.load(out, allow_pickle=False) as written:
        assert written.files == ['y']
        numpy.testing.assert_array_equal(written['y'], numpy.maximum(X, 0))


@pytest.mark.parametrize('arrays, named', [
    ({}, "no array for input 'x'"),
    ({'x': X, 'z': X}, "'z' is not an input"),
    ({'x': X.astype(numpy.float64)}, "input 'x' has dtype float64, expected float32"),
    ({'x': X[0]}, "input 'x' has shape (3,), expected ('n', 3)"),
    ({'x': numpy.array([[{}, 1, 2]], object)}, "input 'x' has dtype object"),
], ids=['missing', 'unknown', 'dtype', 'shape', 'pickled-object'])
def test_run_refuses_input_files_that_do_not_fit_the_program(tmp_path, capsys, arrays, named):
    numpy.savez(tmp_path / 'in.npz', **arrays)
    assert main(['run', '--program', _relu_program(tmp_path), '-i', str(tmp_path / 'in.npz'),
                 '-o', str(tmp_path / 'out.npz')]) == 2
    assert named in error_line(capsys)
    assert not (tmp_path / 'out.npz').exists()


def test_run_sizes_symbolic_dimensions_of_random_inputs(tmp_path, capsys):
    program = _relu_program(tmp_path)
    assert main(['run', '--program', program, '--symbolic-dims', 'n=7']) == 0
    assert 'output y: float32[7, 3]' in capsys.readouterr().out
    assert main(['run', '--program', program, '--symbolic-dims', 'batch=7']) == 2
    assert 'no input has the symbolic dimension batch (the inputs have: n)' in error_line(capsys)


@pytest.mark.parametrize('argv, named', [
    (['--symbolic-dims', 'n'], '--symbolic-dims'),
    (['--symbolic-dims', 'n=-1'], '--symbolic-dims'),
    (['--symbolic-dims', 'n=2', '-i', 'in.npz'], 'with --inputs'),
    (['-i', 'a.npz', 'b.npz'], 'one .npz or one .npy per input'),
])
def test_bad_input_options_are_one_line_errors(tmp_path, capsys, argv, named):
    assert main(['run', '--program', _relu_program(tmp_path)] + argv) == 2
    assert named in error_line(capsys)


def test_test_directories_refuse_input_and_output_files(capsys):
    assert main(['run', '--test', RELU_TEST, '-o', 'out.npz']) == 2
    assert "--outputs: --test runs the test directory's own data" in error_line(capsys)


def _onnx_file(tmp_path, model):
    """Save ``model`` as tmp_path/m.onnx; return the path."""
    path = str(tmp_path / 'm.onnx')
    onnx.save(model, path)
    return path


@pytest.mark.parametrize('option', ['--onnx', '--test'])
def test_unsupported_operators_are_reported_on_one_line(tmp_path, capsys, option):
    model = make_model([helper.make_node('Foo', ['x'], ['y'], domain='com.example', name='f1'),
                        helper.make_node('Bar', ['y'], ['z'], domain='com.example', name='b1')],
                       [('x', TensorProto.FLOAT, [2])], [('z', TensorProto.FLOAT, [2])])
    model.opset_import.append(helper.make_opsetid('com.example', 1))
    x = numpy.zeros(2, numpy.float32)
    write_test_dir(tmp_path, {'input_0.pb': x, 'output_0.pb': x}, model)
    source = tmp_path if option == '--test' else tmp_path / 'model.onnx'
    assert main(['run', option, str(source)]) == 2
    line = error_line(capsys)
    assert 'com.example::Foo' in line and 'com.example::Bar' in line


def test_an_initializer_shorter_than_its_dims_is_a_one_line_error(tmp_path, capsys):
    model = make_model([helper.make_node('Add', ['x', 'b'], ['y'])],
                       [('x', TensorProto.FLOAT, [2])], [('y', TensorProto.FLOAT, [2])])
    model.graph.initializer.append(
        TensorProto(name='b', data_type=TensorProto.FLOAT, dims=[2], raw_data=b'\0' * 4))
    path = _onnx_file(tmp_path, model)
    assert main(['run', '--onnx', path]) == 2
    assert path in error_line(capsys)


@pytest.mark.parametrize('shape', [[-3, 2], [2 ** 20, 2 ** 20]], ids=['negative', 'huge'])
def test_random_inputs_of_a_bad_declared_shape_are_a_one_line_error(tmp_path, capsys, shape):
    model = make_model([helper.make_node('Relu', ['x'], ['y'])],
                       [('x', TensorProto.FLOAT, shape)], [('y', TensorProto.FLOAT, shape)])
    assert main(['run', '--onnx', _onnx_file(tmp_path, model)]) == 2
    error_line(capsys)


@pytest.mark.parametrize('shape, problem', [
    ((-1, 2), 'negative dimension'),
    (('n', 2 ** 20, 2 ** 20), 'random inputs are limited'),
])
def test_random_inputs_refuse_negative_and_huge_shapes(shape, problem):
    program = Program([], [ValueInfo('x', 0, dtype='float32', shape=shape)], [])
    with pytest.raises(InputValidationError, match="input 'x'.*%s" % problem):
        random_inputs(program, numpy.random.RandomState(0))


def test_symbolic_dimensions_of_random_inputs_take_the_documented_size():
    program = Program([], [ValueInfo('x', 0, dtype='int64', shape=('n', None, 3))], [])
    x = random_inputs(program, numpy.random.RandomState(0))['x']
    assert x.shape == (SYMBOLIC_DIM_SIZE, SYMBOLIC_DIM_SIZE, 3) and x.dtype == numpy.int64


@pytest.fixture
def failing_compiler(monkeypatch):
    """build_program raising MemoryError, as onnx's shape inference does
    when it meets std::bad_alloc."""

    def build_program(*args, **kwargs):
        raise MemoryError('std::bad_alloc')

    monkeypatch.setattr(pipeline, 'build_program', build_program)


def test_an_unexpected_error_is_one_line_naming_its_type_and_input(failing_compiler, capsys):
    assert main(['run', '--onnx', 'some.onnx']) == 2
    line = error_line(capsys)
    assert 'MemoryError: std::bad_alloc' in line and '--onnx some.onnx' in line


def test_debug_shows_the_traceback_and_still_exits_with_status_2(failing_compiler, capsys):
    assert main(['--debug', 'run', '--onnx', 'some.onnx']) == 2
    err = capsys.readouterr().err
    assert err.startswith('Traceback (most recent call last):')
    assert err.splitlines()[-1].startswith('chainer-compiler: error: MemoryError: std::bad_alloc')


class _FullDisk(io.FileIO):
    """A file on a full disk: every write fails with ENOSPC."""

    def write(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_save_onto_a_full_disk_is_one_line_and_leaves_no_file(tmp_path, capsys, monkeypatch,
                                                              mlp_model):
    model = _onnx_file(tmp_path, mlp_model)
    monkeypatch.setattr(files, 'open', lambda fd, mode, encoding: io.BufferedWriter(
        _FullDisk(fd, 'w')), raising=False)
    # numpy.savez left its ZipFile open on the error; collected later, it
    # printed "Exception ignored ... Traceback" after the error line.
    unraisable = []
    monkeypatch.setattr(sys, 'unraisablehook', unraisable.append)
    assert main(['run', '--onnx', model, '--save', str(tmp_path / 'p.npz')]) == 2
    gc.collect()
    assert unraisable == []
    assert 'cannot write Program file' in error_line(capsys)
    assert os.listdir(tmp_path) == ['m.onnx']


def test_debug_is_documented_in_the_help(capsys):
    with pytest.raises(SystemExit) as raised:
        main(['--help'])
    assert raised.value.code == 0
    assert '--debug' in capsys.readouterr().out


@pytest.mark.parametrize('argv', [['--seed', '-1'], ['--save', os.curdir]])
def test_the_installed_command_exits_with_status_2(argv):
    command = os.path.join(os.path.dirname(sys.executable), 'chainer-compiler')
    if not os.path.exists(command):
        pytest.skip('chainer-compiler is not installed next to %s' % sys.executable)
    done = subprocess.run([command, 'run', '--test', RELU_TEST] + argv,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith('chainer-compiler: error: ')
    assert done.stderr.count('\n') == 1, done.stderr

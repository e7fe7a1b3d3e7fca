"""``python -m chainer_compiler.runtime``: every error is one line and status 2."""
import os
import re
import subprocess
import sys

import numpy
import pytest

from chainer_compiler.runtime import (
    Instruction,
    Program,
    ProgramFormatError,
    ValueInfo,
    save_program,
)
from chainer_compiler.runtime.__main__ import main


def _save(tmp_path, program):
    path = str(tmp_path / 'p.npz')
    save_program(program, path)
    return path


def _relu(output_register=1, input_info=None):
    if input_info is None:
        input_info = ValueInfo('x', 0, 'tensor', 'float32', (2, 3))
    return Program(instructions=[Instruction('Relu', (0,), (1,), version=14)],
                   inputs=[input_info], outputs=[ValueInfo('y', output_register)],
                   num_registers=2)


def _one_error_line(capsys):
    err = capsys.readouterr().err
    assert err.count('\n') == 1, err
    return err


def test_runs_a_program(tmp_path, capsys):
    assert main([_save(tmp_path, _relu()), '--iterations', '2', '--seed', '7',
                 '--backend', 'numpy']) == 0
    assert 'output y: float32[2, 3]' in capsys.readouterr().out


def test_an_output_register_out_of_range_is_an_error_not_none(tmp_path, capsys):
    path = _save(tmp_path, _relu(output_register=99))
    assert main([path]) == 2  # was 0, printing "output y: none"
    assert _one_error_line(capsys) == (
        "chainer_compiler.runtime: error: %s: output 'y' uses register 99, but the program "
        "has 2 registers\n" % path)


@pytest.mark.parametrize('name, message', [
    ('missing.npz', 'Program file .*missing.npz does not exist'),
    ('empty.npz', '.*empty.npz is damaged or not a Program file: EOFError'),
])
def test_an_unreadable_file_is_one_line(tmp_path, capsys, name, message):
    (tmp_path / 'empty.npz').write_bytes(b'')
    assert main([str(tmp_path / name)]) == 2
    assert re.match('chainer_compiler.runtime: error: ' + message, _one_error_line(capsys))


def test_a_run_time_error_names_the_file(tmp_path, capsys):
    path = _save(tmp_path, _relu(input_info=ValueInfo('x', 0)))
    assert main([path]) == 2
    assert _one_error_line(capsys).startswith(
        "chainer_compiler.runtime: error: %s: input 'x' has no declared tensor type" % path)


def test_debug_shows_the_traceback(tmp_path):
    with pytest.raises(ProgramFormatError, match='register 99'):
        main([_save(tmp_path, _relu(output_register=99)), '--debug'])


@pytest.mark.parametrize('args, message', [
    (['--iterations', '0'], "argument --iterations: expected an integer >= 1, got '0'"),
    (['--iterations', '-3'], "argument --iterations: expected an integer >= 1, got '-3'"),
    (['--iterations', 'many'], "argument --iterations: expected an integer >= 1, got 'many'"),
    (['--seed', '-1'], r"argument --seed: expected an integer from 0 to 4294967295, got '-1'"),
    (['--seed', str(2**32)], 'argument --seed: expected an integer from 0 to 4294967295'),
])
def test_bad_arguments_exit_with_status_2(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as e:
        main([_save(tmp_path, _relu())] + args)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def _symbolic_relu(tmp_path):
    return _save(tmp_path, _relu(input_info=ValueInfo('x', 0, 'tensor', 'float32', ('n', 3))))


def test_reads_inputs_and_writes_outputs(tmp_path, capsys):
    x = numpy.array([[-1, 2, -3]], numpy.float32)
    numpy.save(tmp_path / 'x.npy', x)
    out = str(tmp_path / 'out.npz')
    assert main([_symbolic_relu(tmp_path), '-i', str(tmp_path / 'x.npy'), '-o', out]) == 0
    assert 'output y: float32[1, 3]' in capsys.readouterr().out
    with numpy.load(out, allow_pickle=False) as written:
        numpy.testing.assert_array_equal(written['y'], numpy.maximum(x, 0))


def test_symbolic_dims_size_random_inputs(tmp_path, capsys):
    assert main([_symbolic_relu(tmp_path), '--symbolic-dims', 'n=5']) == 0
    assert 'output y: float32[5, 3]' in capsys.readouterr().out


@pytest.mark.parametrize('make, argv, message', [
    (lambda d: numpy.savez(d / 'in.npz', y=numpy.zeros((1, 3), numpy.float32)),
     ['-i', 'in.npz'], r"in.npz: no array for input 'x'; 'y' is not an input"),
    (lambda d: numpy.savez(d / 'in.npz', x=numpy.zeros((1, 3), numpy.float32)),
     ['-i', 'in.npz', '-o', 'in.npz'], '-o .*in.npz would overwrite the input'),
    (lambda d: (d / 'in.npy').write_bytes(b'not numpy'),
     ['-i', 'in.npy'], r"in.npy \(input 'x'\) is not a readable .npy file"),
], ids=['names', 'overwrite', 'garbage'])
def test_bad_input_files_are_one_line(tmp_path, capsys, make, argv, message):
    make(tmp_path)
    argv = [str(tmp_path / a) if a.endswith(('.npz', '.npy')) else a for a in argv]
    before = sorted(os.listdir(tmp_path))
    assert main([_symbolic_relu(tmp_path)] + argv) == 2
    assert re.search(message, _one_error_line(capsys))
    assert sorted(os.listdir(tmp_path)) == sorted(before + ['p.npz'])


def test_no_arguments_print_the_help_with_status_2(capsys):
    assert main([]) == 2
    out, err = capsys.readouterr()
    assert out == '' and err.startswith('usage: python -m chainer_compiler.runtime')
    assert '--inputs' in err


def test_a_closed_stdout_ends_quietly(tmp_path):
    read, write = os.pipe()
    os.close(read)  # as after `| head` exits
    try:
        # numpy: the native backend would compile C in the child, seconds
        # that test nothing about the pipe.
        done = subprocess.run([sys.executable, '-m', 'chainer_compiler.runtime',
                               _save(tmp_path, _relu()), '--backend', 'numpy'], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, '')


def test_a_source_tree_without_package_metadata_still_runs(tmp_path, monkeypatch, capsys):
    # As on a machine that runs the checkout from PYTHONPATH: no installed
    # distribution to read the version from.
    import importlib.metadata

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)
    monkeypatch.setattr(importlib.metadata, 'version', not_installed)
    with pytest.raises(SystemExit) as stopped:
        main(['--version'])
    assert stopped.value.code == 0
    assert 'unknown (not installed)' in capsys.readouterr().out

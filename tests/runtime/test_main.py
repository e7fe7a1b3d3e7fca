"""``python -m chainer_compiler.runtime``: every error is one line and status 2."""
import re

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
    assert main([_save(tmp_path, _relu()), '--iterations', '2', '--seed', '7']) == 0
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

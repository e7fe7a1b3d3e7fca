"""backend='auto': native when a C compiler is present and every instruction
has a native lowering (asked of the OpRecords, without building C), else the
NumPy VM, with one INFO line saying which and why; a native build that fails
falls back to NumPy with a WARNING.  The native package is imported only
when a native backend is used."""
import logging
import os
import subprocess
import sys

import numpy
import pytest
from onnx import TensorProto, helper

from chainer_compiler.cli import main as cli_main
from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime import (
    Executor,
    Instruction,
    Program,
    ValueInfo,
    get_array_module,
    save_program,
)
from chainer_compiler.runtime.__main__ import main as runtime_main
from chainer_compiler.runtime.backend import BackendUnavailableError
from chainer_compiler.runtime.errors import NativeBuildError
from chainer_compiler.runtime.native.auto import choose_backend
from chainer_compiler.runtime.native.library import find_compiler
from tests.conftest import make_model

X = numpy.random.RandomState(0).standard_normal((2, 3)).astype(numpy.float32)
LOGGER = 'chainer_compiler.runtime.executor'


def _compiler():
    try:
        return os.path.basename(find_compiler()[0])
    except NativeBuildError as e:
        pytest.skip(str(e))


def _auto_lines(caplog):
    return [(r.levelname, r.getMessage()) for r in caplog.records
            if r.name == LOGGER and 'backend auto' in r.getMessage()]


@pytest.fixture
def no_compiler(monkeypatch, tmp_path):
    monkeypatch.setenv('CC', str(tmp_path / 'missing-cc'))


def test_auto_chooses_native_for_an_mlp_when_a_compiler_is_present(mlp_model):
    compiler = _compiler()
    assert choose_backend(build_program(mlp_model)) == (
        'native', '%s found, all 2 instructions lowered' % compiler)


def test_shape_arithmetic_counts_as_lowered_it_is_evaluated_at_emit_time():
    compiler = _compiler()
    # Shape has no lowering: native folds it (and the Slice and Concat on it).
    model = make_model(
        [helper.make_node('Shape', ['x'], ['s']),
         helper.make_node('Slice', ['s', 'start', 'end'], ['head']),
         helper.make_node('Concat', ['head', 'rest'], ['target'], axis=0),
         helper.make_node('Reshape', ['x', 'target'], ['y'])],
        [('x', TensorProto.FLOAT, [2, 3, 4])], [('y', TensorProto.FLOAT, [2, 12])],
        [('start', numpy.array([0])), ('end', numpy.array([1])), ('rest', numpy.array([-1]))])
    assert choose_backend(build_program(model)) == (
        'native', '%s found, all 4 instructions lowered' % compiler)


def test_auto_chooses_numpy_naming_every_operator_without_a_lowering_once():
    _compiler()
    model = make_model(
        [helper.make_node('Det', ['x'], ['d']),
         helper.make_node('Hardmax', ['x'], ['h']),
         helper.make_node('Det', ['h'], ['e']),
         helper.make_node('Add', ['d', 'e'], ['y'])],
        [('x', TensorProto.FLOAT, [2, 3, 3])], [('y', TensorProto.FLOAT, [2])])
    program = build_program(model)
    assert choose_backend(program) == ('numpy', 'no native lowering for Det, Hardmax')


def test_auto_runs_numpy_when_cc_names_a_missing_compiler(mlp_model, no_compiler, caplog):
    program = build_program(mlp_model)
    with caplog.at_level(logging.INFO, LOGGER):
        executor = Executor(program, backend='auto')
    assert executor.backend == 'numpy' and executor._native is None
    assert _auto_lines(caplog) == [('INFO', 'backend auto: numpy (no C compiler: $CC is not an '
                                            'executable, or none of cc, gcc, clang is on PATH)')]
    want = Executor(program, backend='numpy').run({'x': X})['y']
    numpy.testing.assert_array_equal(executor.run({'x': X})['y'], want)


@pytest.mark.parametrize('option', ['check_nans', 'track_memory'])
def test_auto_runs_numpy_for_the_vms_instruments(mlp_model, option, caplog):
    with caplog.at_level(logging.INFO, LOGGER):
        executor = Executor(build_program(mlp_model), backend='auto', **{option: True})
    assert executor.backend == 'numpy'
    assert _auto_lines(caplog) == [('INFO', 'backend auto: numpy (%s needs the VM)' % option)]


def test_auto_runs_numpy_for_a_symbolic_input_shape(caplog):
    _compiler()
    model = make_model([helper.make_node('Relu', ['x'], ['y'])],
                       [('x', TensorProto.FLOAT, ['n', 3])], [('y', TensorProto.FLOAT, ['n', 3])])
    with caplog.at_level(logging.INFO, LOGGER):
        executor = Executor(build_program(model), backend='auto')
    assert executor.backend == 'numpy'
    assert _auto_lines(caplog) == [('INFO', "backend auto: numpy (input 'x' is not a tensor of "
                                            'static shape and a C dtype)')]


def test_a_programs_input_name_stays_on_the_log_line():
    _compiler()
    program = Program(instructions=[Instruction('Relu', (0,), (1,), version=14)],
                      inputs=[ValueInfo('x\nforged', 0, 'tensor', 'float32', ('n', 3))],
                      outputs=[ValueInfo('y', 1)], num_registers=2)
    backend, why = choose_backend(program)
    assert backend == 'numpy' and '\n' not in why and "'x\\nforged'" in why


def test_a_failing_native_build_falls_back_to_numpy_with_a_warning(mlp_model, monkeypatch,
                                                                   caplog):
    # An executable that is no C compiler: auto chooses native, the build fails.
    monkeypatch.setenv('CC', '/bin/false')
    program = build_program(mlp_model)
    with caplog.at_level(logging.INFO, LOGGER):
        executor = Executor(program, backend='auto')
    assert executor.backend == 'numpy'
    (info, line), (warning, message) = _auto_lines(caplog)
    assert (info, line) == ('INFO', 'backend auto: native (false found, all 2 instructions '
                                    'lowered)')
    assert warning == 'WARNING' and message.startswith(
        'backend auto: native failed, running on numpy instead: the C compiler failed')
    assert '\n' not in message
    numpy.testing.assert_array_equal(executor.run({'x': X})['y'],
                                     Executor(program, backend='numpy').run({'x': X})['y'])


def test_explicit_backends_keep_their_meaning(mlp_model, no_compiler, caplog):
    program = build_program(mlp_model)
    with caplog.at_level(logging.INFO, LOGGER):
        assert Executor(program, backend='numpy').backend == 'numpy'
        with pytest.raises(NativeBuildError, match="backend 'native' needs a C compiler"):
            Executor(program, backend='native')  # an error, not a fallback
    assert _auto_lines(caplog) == []
    assert get_array_module('auto') is numpy
    with pytest.raises(BackendUnavailableError, match="'auto', 'numpy', 'native', 'cupy'"):
        Executor(program, backend='fast')


@pytest.mark.native_build
def test_auto_runs_an_mlp_natively(mlp_model, caplog):
    compiler = _compiler()
    program = build_program(mlp_model)
    with caplog.at_level(logging.INFO, LOGGER):
        executor = Executor(program, backend='auto')
    assert executor.backend == 'native' and executor._native is not None
    assert _auto_lines(caplog) == [
        ('INFO', 'backend auto: native (%s found, all 2 instructions lowered)' % compiler)]
    numpy.testing.assert_allclose(executor.run({'x': X})['y'],
                                  Executor(program, backend='numpy').run({'x': X})['y'],
                                  rtol=1e-5, atol=1e-6)


@pytest.fixture
def saved_mlp(tmp_path, mlp_model):
    path = str(tmp_path / 'mlp.npz')
    save_program(build_program(mlp_model), path)
    return path


@pytest.mark.parametrize('argv', [[], ['--backend', 'auto']], ids=['default', 'explicit'])
def test_the_command_lines_run_auto_by_default(saved_mlp, no_compiler, argv, capsys):
    line = 'backend auto: numpy (no C compiler'
    assert cli_main(['run', '--program', saved_mlp, '-v'] + argv) == 0
    captured = capsys.readouterr()
    assert line in captured.err and 'output y: float32[2, 4]' in captured.out
    assert runtime_main([saved_mlp, '-v'] + argv) == 0
    captured = capsys.readouterr()
    assert line in captured.err and 'output y: float32[2, 4]' in captured.out


@pytest.mark.native_build
def test_the_command_line_runs_natively_by_default(saved_mlp, capsys):
    _compiler()
    assert cli_main(['run', '--program', saved_mlp, '-v']) == 0
    captured = capsys.readouterr()
    assert 'backend auto: native (' in captured.err
    assert 'output y: float32[2, 4]' in captured.out


def test_the_runtime_imports_the_native_backend_only_when_it_is_used(saved_mlp):
    script = (
        'import sys, numpy\n'
        'import chainer_compiler, chainer_compiler.cli\n'
        'from chainer_compiler.runtime import Executor, load_program\n'
        'program = load_program(sys.argv[1])\n'
        'Executor(program, backend="numpy").run({"x": numpy.ones((2, 3), numpy.float32)})\n'
        'print(sorted(m for m in sys.modules if m.startswith("chainer_compiler.runtime.native")))\n'
        'Executor(program, backend="auto")\n'
        'print("chainer_compiler.runtime.native.lowering" in sys.modules)\n')
    env = dict(os.environ, CC='/nonexistent/cc')  # auto asks, and builds nothing
    done = subprocess.run([sys.executable, '-c', script, saved_mlp], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split('\n')[:2] == ['[]', 'True']

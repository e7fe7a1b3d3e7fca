"""What the package says while it works: the ``chainer_compiler`` logger is
quiet in library use, the command lines' -v/-vv print it on stderr, and
conformance shows a progress bar on a terminal only."""
import io
import logging
import subprocess
import sys

import pytest

from chainer_compiler.cli import main as cli_main
from chainer_compiler.runtime import Instruction, Program, ValueInfo, save_program
from chainer_compiler.runtime.__main__ import main as runtime_main
from chainer_compiler.runtime.logs import configure_logging


@pytest.fixture(autouse=True)
def _unconfigured():
    """Each test starts, and leaves the next, with logging as a library user has it."""
    configure_logging(0)
    yield
    configure_logging(0)


def test_library_use_prints_nothing():
    # A fresh interpreter: pytest's own handlers would hide the last-resort
    # handler that prints warnings of a logger without handlers.
    code = ('import logging, chainer_compiler.runtime\n'
            "logging.getLogger('chainer_compiler.runtime.native.library').warning('building')\n")
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          check=True)
    assert done.stderr == ''


@pytest.mark.parametrize('verbosity, shown', [
    (0, []), (1, ['info', 'warning']), (2, ['debug', 'info', 'warning'])])
def test_verbosity_sets_what_reaches_stderr(capsys, verbosity, shown):
    configure_logging(verbosity)
    logger = logging.getLogger('chainer_compiler.recompute')
    for level in ('debug', 'info', 'warning'):
        getattr(logger, level)(level)
    err = capsys.readouterr().err
    printed = [line.rpartition(': ')[2] for line in err.splitlines()
               if line.startswith('chainer_compiler.recompute: ')]
    assert printed == shown


def test_configuring_again_replaces_the_handler(capsys):
    configure_logging(1)
    configure_logging(1)
    logging.getLogger('chainer_compiler').info('once')
    assert capsys.readouterr().err.count('once') == 1


def _relu_program(tmp_path):
    program = Program(instructions=[Instruction('Relu', (0,), (1,), version=14)],
                      inputs=[ValueInfo('x', 0, 'tensor', 'float32', (2, 3))],
                      outputs=[ValueInfo('y', 1)], num_registers=2)
    path = str(tmp_path / 'relu.npz')
    save_program(program, path)
    return path


def test_the_runtime_command_line_says_what_it_loads_with_v(tmp_path, capsys):
    path = _relu_program(tmp_path)
    assert runtime_main([path, '--backend', 'numpy']) == 0
    assert 'chainer_compiler' not in capsys.readouterr().err
    assert runtime_main(['-v', path, '--backend', 'numpy']) == 0
    assert ('chainer_compiler.runtime: loaded program main (1 instructions) from %s' % path
            in capsys.readouterr().err)


@pytest.mark.parametrize('argv', [['-v', 'conformance'], ['conformance', '-v']],
                         ids=['before-the-command', 'after-the-command'])
def test_the_cli_logs_with_v_before_or_after_the_command(capsys, argv):
    assert cli_main(argv + ['-k', '^test_relu$']) == 0
    err = capsys.readouterr().err
    assert 'chainer_compiler.conformance: running 1 node tests' in err
    assert 'chainer_compiler.conformance: test_relu' not in err  # a -vv detail


def test_the_cli_is_quiet_without_v(capsys):
    assert cli_main(['conformance', '-k', '^test_relu$']) == 0
    assert 'chainer_compiler.' not in capsys.readouterr().err


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_conformance_shows_a_progress_bar_on_a_terminal_only(monkeypatch, capsys):
    pytest.importorskip('tqdm')
    assert cli_main(['conformance', '-k', '^test_(relu|abs)$']) == 0
    assert '2/2' not in capsys.readouterr().err  # not a terminal: no bar
    terminal = _Terminal()
    monkeypatch.setattr(sys, 'stderr', terminal)
    assert cli_main(['conformance', '-k', '^test_(relu|abs)$']) == 0
    assert '2/2' in terminal.getvalue() and 'passed=2' in terminal.getvalue()

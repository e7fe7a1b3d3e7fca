"""The package's face: dir() shows the public API, a feature of a tier that
is not installed names its extra, every entry point has --version, and the
API reference builds from the docstrings without a warning."""
import importlib.metadata
import os
import subprocess
import sys

import pytest

import chainer_compiler

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _python(code, *args):
    """Run ``code`` in a fresh interpreter; its CompletedProcess."""
    return subprocess.run([sys.executable, '-c', code, *args], capture_output=True, text=True)


def test_dir_lists_the_public_api_and_each_name_resolves():
    names = dir(chainer_compiler)
    for name in ('compile_onnx', 'build_program', 'export', 'runtime', 'MissingExtraError',
                 '__version__'):
        assert name in names
    assert set(chainer_compiler.__all__) <= set(names)
    assert 'importlib' not in names
    for name in chainer_compiler.__all__:
        assert getattr(chainer_compiler, name) is not None, name


@pytest.mark.parametrize('blocked, name, extra', [
    ('chainer', 'compile_onnx', 'chainer'),
    ('chainer', 'TrainingStepUpdater', 'chainer'),
    ('onnx', 'build_program', 'onnx'),
])
def test_a_feature_whose_tier_is_missing_names_the_extra(blocked, name, extra):
    # None in sys.modules: `import <blocked>` fails as if it were not installed.
    out = _python('import sys; sys.modules[%r] = None\n'
                  'import chainer_compiler\n'
                  'try:\n'
                  '    getattr(chainer_compiler, %r)\n'
                  'except ModuleNotFoundError as e:\n'
                  '    print(type(e).__name__, e)\n' % (blocked, name))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith('MissingExtraError chainer_compiler.%s needs' % name)
    assert 'install chainer-compiler[%s]' % extra in out.stdout


def test_the_runtime_and_errors_need_no_extra():
    out = _python("import sys; sys.modules['onnx'] = sys.modules['chainer'] = None\n"
                  'import chainer_compiler as c\n'
                  'print(c.runtime.load_program.__name__, c.InvalidModelError.__name__)')
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ['load_program', 'InvalidModelError']


def test_cli_run_onnx_without_onnx_is_one_line_naming_the_extra(tmp_path):
    model = tmp_path / 'm.onnx'
    model.write_bytes(b'')
    out = _python("import sys; sys.modules['onnx'] = None\n"
                  'from chainer_compiler.cli import main\n'
                  "sys.exit(main(['run', '--onnx', sys.argv[1]]))", str(model))
    assert out.returncode == 2
    assert out.stderr.count('\n') == 1
    assert "needs the 'onnx' extra" in out.stderr
    assert 'install chainer-compiler[onnx]' in out.stderr


@pytest.mark.parametrize('command', [
    [os.path.join(os.path.dirname(sys.executable), 'chainer-compiler')],
    [sys.executable, '-m', 'chainer_compiler'],
    [sys.executable, '-m', 'chainer_compiler.runtime'],
])
def test_every_entry_point_prints_the_package_version(command):
    out = subprocess.run(command + ['--version'], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == chainer_compiler.__version__
    # One version: setup.py reads it from chainer_compiler/__init__.py.
    assert importlib.metadata.version('chainer-compiler') == chainer_compiler.__version__


@pytest.mark.slow
def test_the_api_reference_builds_without_a_warning(tmp_path):
    out = subprocess.run([sys.executable, os.path.join(ROOT, 'docs', 'build_api.py'),
                          str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    page = (tmp_path / 'chainer_compiler.html').read_text()
    for name in ('compile_onnx', 'build_program', 'MissingExtraError'):
        assert name in page
    assert (tmp_path / 'chainer_compiler' / 'runtime.html').is_file()

"""The three install tiers of README's Set-up, each installed from this
checkout into a fresh virtual environment exactly as documented (PyPI
supplies the dependencies):

- ``pip install PATH``: NumPy (the newest, 2.x) and nothing else; the
  runtime, ``run --program``, ``emit-c PROGRAM`` and the native backend work,
  and the runtime's own tests pass under that NumPy (with ONNX, which they
  use as their oracle, in the [onnx] tier's environment);
- ``pip install 'PATH[onnx]'``: ONNX files compile and run, Chainer absent;
- ``pip install 'PATH[chainer]'``: everything, by the documented way
  around Chainer 7.8.1's sdist (setuptools<74 first, no build isolation).

The environments are made without pip (``venv --without-pip``) and this
interpreter's pip installs into them (``pip --python``): the same install,
without seconds of ensurepip per tier.  Commands run outside the checkout,
so the installed package is what they import.
"""
import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

import chainer_compiler
from chainer_compiler import build_program
from chainer_compiler.runtime import save_program

pytestmark = [pytest.mark.slow, pytest.mark.install]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: What the test dependencies are pinned to (requirements.txt).
TEST_TOOLS = ('pytest', 'hypothesis', 'onnxruntime')


class Venv:
    """A fresh virtual environment in ``path`` and commands run in it."""

    def __init__(self, path, interpreter=sys.executable):
        self.path = path
        subprocess.run([interpreter, '-m', 'venv', '--without-pip', str(path)], check=True)
        self.python = str(path / 'bin' / 'python')

    def pip_install(self, *args):
        out = subprocess.run([sys.executable, '-m', 'pip', '--python', self.python, 'install',
                              '--quiet', *args], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-3000:]

    def run(self, *command, cwd=None):
        """``command`` (a script in the environment's bin/, or 'python')
        run from a folder outside the checkout; the CompletedProcess."""
        program = self.python if command[0] == 'python' else str(self.path / 'bin' / command[0])
        return subprocess.run([program, *command[1:]], capture_output=True, text=True,
                              cwd=cwd or self.path)

    def distributions(self):
        """{name: version} of everything installed."""
        out = self.run('python', '-c', 'import importlib.metadata as m, json; print(json.dumps('
                       '{d.metadata["Name"].lower(): d.version for d in m.distributions()}))')
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)


@pytest.fixture(scope='module')
def source(tmp_path_factory):
    """The checkout without its build products and environments: setuptools
    builds in the source tree's build/ and keeps files of earlier builds
    there (a module renamed since would be installed twice)."""
    copy = tmp_path_factory.mktemp('source') / 'chainer-compiler'
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(
        'build', 'dist', '.venv*', '.git', 'result', '__pycache__', '*.egg-info',
        '.pytest_cache', '.mypy_cache', '.ruff_cache', '.hypothesis'))
    return str(copy)


def _pins(names):
    """requirements.txt's pinned lines for ``names``."""
    with open(os.path.join(ROOT, 'requirements.txt')) as f:
        lines = [line.strip() for line in f]
    return [line for line in lines if line.split('==')[0] in names]


@pytest.fixture(scope='module')
def base(tmp_path_factory, source):
    venv = Venv(tmp_path_factory.mktemp('base') / 'venv')
    venv.pip_install(source)
    return venv


@pytest.fixture(scope='module')
def with_onnx(tmp_path_factory, source):
    venv = Venv(tmp_path_factory.mktemp('onnx') / 'venv')
    venv.pip_install(source + '[onnx]')
    return venv


@pytest.fixture(scope='module')
def with_chainer(tmp_path_factory, source):
    venv = Venv(tmp_path_factory.mktemp('chainer') / 'venv')
    venv.pip_install('setuptools<74', 'wheel')
    venv.pip_install('--no-build-isolation', source + '[chainer]')
    return venv


@pytest.fixture
def mlp_files(tmp_path, mlp_model):
    """(model.onnx, program.npz) of conftest's MLP, compiled here."""
    onnx_path, program_path = str(tmp_path / 'mlp.onnx'), str(tmp_path / 'mlp.npz')
    with open(onnx_path, 'wb') as f:
        f.write(mlp_model.SerializeToString())
    save_program(build_program(mlp_model), program_path)
    return onnx_path, program_path


def _ok(out):
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_base_tier_is_numpy_2_alone(base):
    installed = base.distributions()
    assert set(installed) == {'chainer-compiler', 'numpy'}
    assert int(installed['numpy'].split('.')[0]) >= 2


def test_the_base_tier_runs_and_emits_a_saved_program(base, mlp_files, tmp_path):
    _, program = mlp_files
    assert 'modules loaded: chainer=False onnx=False' in _ok(
        base.run('python', '-m', 'chainer_compiler.runtime', program))
    assert 'output y: float32[2, 4]' in _ok(base.run('chainer-compiler', 'run', '--program',
                                                     program))
    _ok(base.run('chainer-compiler', 'run', '--program', program, '--backend', 'native'))
    _ok(base.run('chainer-compiler', 'emit-c', program, '-o', str(tmp_path / 'c'),
                 '--name', 'mlp'))
    assert (tmp_path / 'c' / 'mlp.c').is_file() and (tmp_path / 'c' / 'Makefile').is_file()


def test_the_base_tier_names_the_extra_a_feature_needs(base, mlp_files):
    onnx_path, _ = mlp_files
    out = base.run('chainer-compiler', 'run', '--onnx', onnx_path)
    assert out.returncode == 2
    assert 'install chainer-compiler[onnx]' in out.stderr
    out = base.run('python', '-c', 'import chainer_compiler; chainer_compiler.compile_onnx')
    assert 'MissingExtraError' in out.stderr
    assert 'install chainer-compiler[chainer]' in out.stderr


def _interpreter(version):
    """A working ``python<version>`` here (pyenv's or the system's), or None."""
    candidates = sorted(glob.glob(os.path.expanduser(
        '~/.pyenv/versions/%s.*/bin/python%s' % (version, version))))
    candidates += [c for c in (shutil.which('python' + version),) if c]
    for candidate in candidates:
        if subprocess.run([candidate, '-c', 'pass'], capture_output=True).returncode == 0:
            return candidate
    return None


@pytest.mark.parametrize('version', ['3.12', '3.13'])
def test_the_base_tier_runs_a_saved_program_on_newer_pythons(version, source, mlp_files,
                                                              tmp_path):
    interpreter = _interpreter(version)
    if interpreter is None:
        pytest.skip('no Python %s on this machine' % version)
    venv = Venv(tmp_path / 'venv', interpreter)
    venv.pip_install(source)
    assert set(venv.distributions()) == {'chainer-compiler', 'numpy'}
    _, program = mlp_files
    assert 'modules loaded: chainer=False onnx=False' in _ok(
        venv.run('python', '-m', 'chainer_compiler.runtime', program))
    _ok(venv.run('chainer-compiler', 'run', '--program', program, '--backend', 'native'))


def test_every_entry_point_prints_the_version(base):
    for command in (['chainer-compiler'], ['python', '-m', 'chainer_compiler'],
                    ['python', '-m', 'chainer_compiler.runtime']):
        assert _ok(base.run(*command, '--version')).split()[-1] == chainer_compiler.__version__


def test_the_onnx_tier_compiles_onnx_files_without_chainer(with_onnx, mlp_files, tmp_path):
    installed = with_onnx.distributions()
    assert 'onnx' in installed and 'chainer' not in installed
    onnx_path, _ = mlp_files
    assert 'output y: float32[2, 4]' in _ok(with_onnx.run('chainer-compiler', 'run', '--onnx',
                                                          onnx_path))
    _ok(with_onnx.run('chainer-compiler', 'emit-c', onnx_path, '-o', str(tmp_path / 'c')))
    out = with_onnx.run('python', '-c', 'import chainer_compiler; chainer_compiler.compile_onnx')
    assert 'install chainer-compiler[chainer]' in out.stderr


def test_the_runtime_tests_pass_under_numpy_2(with_onnx, tmp_path):
    with_onnx.pip_install(*_pins(TEST_TOOLS))
    assert int(with_onnx.distributions()['numpy'].split('.')[0]) >= 2
    # A copy of the tests, so that `chainer_compiler` is the installed one.
    shutil.copytree(os.path.join(ROOT, 'tests'), tmp_path / 'tests',
                    ignore=shutil.ignore_patterns('__pycache__'))
    shutil.copy(os.path.join(ROOT, 'pyproject.toml'), tmp_path)
    out = with_onnx.run(
        'python', '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-m', 'not slow',
        'tests/runtime',
        # The C backend's tests build with gcc (the base tier runs it once);
        # the line budget reads the checkout; the RNN tests compare with Chainer.
        '--ignore=tests/runtime/native', '--ignore=tests/runtime/test_line_budget.py',
        '--ignore=tests/runtime/ops/test_rnn.py', cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-5000:]


def test_the_chainer_tier_installs_everything(with_chainer):
    installed = with_chainer.distributions()
    assert {'chainer', 'onnx', 'onnxruntime'} <= set(installed)
    assert installed['numpy'].startswith('1.')  # Chainer 7.8.1 needs NumPy 1.x
    _ok(with_chainer.run('python', '-c', 'import chainer, chainer_compiler as c\n'
                         'for name in c.__all__: getattr(c, name)'))


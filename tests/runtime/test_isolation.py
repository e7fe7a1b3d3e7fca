"""runtime/ must stay shippable with NumPy alone."""
import ast
import os
import subprocess
import sys

import chainer_compiler.runtime as runtime
from chainer_compiler import build_program
from chainer_compiler.runtime import save_program

# cupy_backends ships inside CuPy's wheel: its cuBLAS binding.
ALLOWED_THIRD_PARTY = {'numpy', 'cupy', 'cupyx', 'cupy_backends'}


def _imported_modules(path):
    tree = ast.parse(open(path).read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split('.')[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            yield node.module.split('.')[0]


def test_runtime_imports_only_stdlib_numpy_and_cupy():
    root = os.path.dirname(runtime.__file__)
    offenders = []
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith('.py'):
                path = os.path.join(folder, name)
                for module in _imported_modules(path):
                    if module not in sys.stdlib_module_names and module not in ALLOWED_THIRD_PARTY:
                        offenders.append('%s imports %s' % (os.path.relpath(path, root), module))
    assert offenders == []


def test_saved_program_runs_in_a_process_without_chainer_or_onnx(tmp_path, mlp_model):
    path = str(tmp_path / 'mlp.npz')
    save_program(build_program(mlp_model), path)
    script = (
        'import sys, numpy\n'
        'from chainer_compiler.runtime import Executor, load_program\n'
        'p = load_program(sys.argv[1])\n'
        'y = Executor(p, backend="numpy").run({"x": numpy.ones((2, 3), numpy.float32)})["y"]\n'
        'assert y.shape == (2, 4), y.shape\n'
        'bad = sorted(m for m in sys.modules\n'
        '             if m.split(".")[0] in ("chainer", "onnx", "onnxruntime"))\n'
        'print("LOADED", bad)\n')
    out = subprocess.run([sys.executable, '-c', script, path], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert 'LOADED []' in out.stdout


def test_runtime_main_runs_a_saved_program(tmp_path, mlp_model):
    path = str(tmp_path / 'mlp.npz')
    save_program(build_program(mlp_model), path)
    out = subprocess.run([sys.executable, '-m', 'chainer_compiler.runtime', path,
                          '--iterations', '3', '--backend', 'numpy'], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    assert 'output y: float32[2, 4]' in out.stdout
    assert '3 iterations: mean' in out.stdout
    assert 'chainer=False onnx=False' in out.stdout

"""The MNIST example end to end with the ch2o translator: export in one
process, compile and train in another, as the seed document's workflow."""
import os
import subprocess
import sys

import numpy
import pytest

from chainer_compiler import compile_onnx

#: These tests check the bridge, not the backend: the NumPy VM, where the
#: default ('auto') would build C for each model.
ON_THE_VM = {'backend': 'numpy'}

EXAMPLE = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'examples', 'mnist')


def _run(*args):
    return subprocess.run([sys.executable, os.path.join(EXAMPLE, 'train_mnist.py')] + list(args),
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_mnist_example_exports_and_trains_with_ch2o(tmp_path):
    onnx_file = str(tmp_path / 'mlp.onnx')
    exported = _run('--export', onnx_file, '--translator', 'ch2o', '--unit', '32',
                    '--batchsize', '50')
    assert exported.returncode == 0, exported.stderr
    trained = _run('--compile', onnx_file, '--translator', 'ch2o', '--unit', '32',
                   '--batchsize', '50', '--epoch', '1', '--out', str(tmp_path / 'out'))
    assert trained.returncode == 0, trained.stderr
    log = (tmp_path / 'out' / 'log').read_text()
    assert '"validation/main/accuracy"' in log


def test_mnist_model_compiled_from_ch2o_matches_chainer(tmp_path):
    sys.path.insert(0, EXAMPLE)
    try:
        import train_mnist
    finally:
        sys.path.remove(EXAMPLE)
    import chainer

    from chainer_compiler import export
    mlp = train_mnist.MLP(16, 10)
    x = numpy.random.RandomState(0).uniform(0, 1, (4, 784)).astype(numpy.float32)
    path = export(mlp, [x], str(tmp_path / 'mlp.onnx'), translator='ch2o')
    compiled = compile_onnx(mlp, path, 'ch2o', runtime_kwargs=ON_THE_VM)
    with chainer.using_config('train', False):
        numpy.testing.assert_allclose(compiled(x).array, mlp(x).array, rtol=1e-5, atol=1e-6)

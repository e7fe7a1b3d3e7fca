"""compile_onnx and compile_training_step run on backend 'auto' unless told
otherwise ('cupy' for a model on the GPU); an explicit backend is kept.
The tests point $CC at a missing compiler, so auto chooses NumPy and
nothing is built (tests/runtime/test_backend_auto.py covers the choice)."""
import logging
import types

import chainer
import chainer.links as L
import numpy
import pytest

import chainer_compiler
from chainer_compiler.compiled_model import default_backend_of
from tests.models import MLP

LOGGER = 'chainer_compiler.runtime.executor'
NO_COMPILER = ('backend auto: numpy (no C compiler: $CC is not an executable, or none of cc, '
               'gcc, clang is on PATH)')


@pytest.fixture(autouse=True)
def no_compiler(monkeypatch, tmp_path):
    monkeypatch.setenv('CC', str(tmp_path / 'missing-cc'))


def _auto_lines(caplog):
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and r.getMessage().startswith('backend auto')]


def _classifier_and_batch():
    x = numpy.random.RandomState(0).uniform(-1, 1, (4, 5)).astype(numpy.float32)
    t = numpy.array([0, 1, 2, 1], numpy.int32)
    model = L.Classifier(MLP(6, 3))
    model(x, t)  # sizes the lazily sized links
    return model, x, t


def test_compile_onnx_runs_auto_by_default(tmp_path, caplog):
    model, x, t = _classifier_and_batch()
    path = chainer_compiler.export(model.predictor, [x], str(tmp_path / 'm.onnx'))
    with caplog.at_level(logging.INFO, LOGGER):
        compiled = chainer_compiler.compile_onnx(model.predictor, path)
        compiled(x)
    assert compiled.runtime_kwargs['backend'] == 'auto'
    lines = _auto_lines(caplog)
    assert lines and set(lines) == {NO_COMPILER}  # one line per program


def test_compile_training_step_runs_auto_by_default(caplog):
    model, x, t = _classifier_and_batch()
    optimizer = chainer.optimizers.SGD()
    optimizer.setup(model)
    with caplog.at_level(logging.INFO, LOGGER):
        step = chainer_compiler.compile_training_step(model, optimizer, (x, t))
        step(x, t)
    assert _auto_lines(caplog) == [NO_COMPILER]


def test_an_explicit_backend_is_kept(tmp_path, caplog):
    model, x, t = _classifier_and_batch()
    path = chainer_compiler.export(model.predictor, [x], str(tmp_path / 'm.onnx'))
    optimizer = chainer.optimizers.SGD()
    optimizer.setup(model)
    with caplog.at_level(logging.INFO, LOGGER):
        compiled = chainer_compiler.compile_onnx(model.predictor, path,
                                                 runtime_kwargs={'backend': 'numpy'})
        compiled(x)
        chainer_compiler.compile_training_step(model, optimizer, (x, t),
                                               runtime_kwargs={'backend': 'numpy'})(x, t)
    assert _auto_lines(caplog) == []


def test_a_model_on_the_gpu_runs_on_cupy_by_default():
    # The model's arrays decide: auto runs on the host, where a GPU model's are not.
    assert default_backend_of(types.SimpleNamespace(xp=numpy)) == 'auto'
    assert default_backend_of(types.SimpleNamespace(xp=types.ModuleType('cupy'))) == 'cupy'

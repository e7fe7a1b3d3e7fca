"""Whole models trained through compile_onnx.

The compiled backward must equal Chainer's own backward (float32), and
training must reach the same accuracy as plain Chainer.
"""
import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainer_compiler
from tests.models import MLP, LeNet5

#: These tests check the bridge, not the backend: the NumPy VM, where the
#: default ('auto') would build C for each model.
ON_THE_VM = {'backend': 'numpy'}


def _first(outputs):
    return outputs['prob'] if isinstance(outputs, dict) else outputs


def _as_float64(model):
    """Cast parameters and running averages to float64, in place."""
    for param in model.params():
        param.array = param.array.astype(numpy.float64)
    for link in model.links():
        for name in link._persistent:
            value = getattr(link, name)
            if isinstance(value, numpy.ndarray) and value.dtype.kind == 'f':
                setattr(link, name, value.astype(numpy.float64))
    return model


def _plain_and_compiled(make_model, x, tmp_path):
    plain = make_model()
    with chainer.using_config('train', False):
        plain(x)
    path = chainer_compiler.export(plain, [x], str(tmp_path / 'model.onnx'))
    twin = make_model()
    with chainer.using_config('train', False):
        twin(x)
    twin.copyparams(plain)  # parameters and running averages
    if x.dtype == numpy.float64:
        _as_float64(twin)
    return plain, chainer_compiler.compile_onnx(twin, path, 'onnx_chainer',
                                                runtime_kwargs=ON_THE_VM)


def check_backward_matches_chainer(make_model, x, tmp_path, rtol=1e-4):
    """Parameter gradients of the compiled model equal Chainer's.  For
    float64 ``x`` both models run in float64."""
    if x.dtype == numpy.float64:
        make_float32 = make_model

        def make_model():
            return _as_float64(make_float32())
    plain, compiled = _plain_and_compiled(make_model, x, tmp_path)
    upstream = None
    for model in (plain, compiled):
        model.cleargrads()
        # Same seed, same dropout masks: the compiled dropout draws from
        # NumPy's generator exactly as Chainer's does (VGG16 has two).
        numpy.random.seed(2)
        y = _first(model(x))
        if upstream is None:
            upstream = numpy.random.RandomState(1).standard_normal(y.shape).astype(y.dtype)
        F.sum(y * upstream).backward()
    # Absolute slack scales with the model's largest gradient: some true
    # gradients are zero (a bias followed by BatchNormalization), and both
    # sides then hold only float32 rounding noise.
    scale = max(float(numpy.abs(p.grad).max()) for _, p in plain.namedparams())
    for (name, p), (_, q) in zip(sorted(plain.namedparams()), sorted(compiled.namedparams())):
        numpy.testing.assert_allclose(q.grad, p.grad, rtol=rtol, atol=rtol * scale,
                                      err_msg=name)


def _images(shape, seed=0):
    return numpy.random.RandomState(seed).uniform(-1, 1, shape).astype(numpy.float32)


def test_lenet5_with_batch_normalization_backward_matches_chainer(tmp_path):
    check_backward_matches_chainer(lambda: LeNet5(batch_norm=True), _images((4, 1, 28, 28)),
                                   tmp_path)


# ResNet-50 and VGG16 run in float64: with random weights, float32 rounding
# alone moves their first layers' gradients by ~1e-3 relative to the largest
# one (Chainer float32 against Chainer float64, measured), far above rtol
# 1e-4, so only float64 can tell a wrong gradient rule from rounding.

@pytest.mark.slow
def test_resnet50_backward_matches_chainer(tmp_path):
    check_backward_matches_chainer(lambda: L.ResNet50Layers(pretrained_model=None),
                                   _images((2, 3, 224, 224)).astype(numpy.float64), tmp_path)


@pytest.mark.slow
def test_vgg16_backward_matches_chainer(tmp_path):
    check_backward_matches_chainer(lambda: L.VGG16Layers(pretrained_model=None),
                                   _images((1, 3, 224, 224)).astype(numpy.float64), tmp_path)


def _train(model, train, test, batchsize, iterations, seed=0):
    """Train with Adam for ``iterations`` (fixed data order from ``seed``);
    return the validation accuracy."""
    numpy.random.seed(seed)
    classifier = L.Classifier(model)
    optimizer = chainer.optimizers.Adam()
    optimizer.setup(classifier)
    iterator = chainer.iterators.SerialIterator(train, batchsize, shuffle=True)
    for _ in range(iterations):
        x, t = chainer.dataset.concat_examples(iterator.next())
        optimizer.update(classifier, x, t)
    correct = 0
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        for start in range(0, len(test), batchsize):
            x, t = chainer.dataset.concat_examples(test[start:start + batchsize])
            correct += int((model(x).array.argmax(axis=1) == t).sum())
    return correct / len(test)


@pytest.mark.slow
def test_mnist_mlp_trains_like_chainer(tmp_path):
    train, test = chainer_compiler.get_mnist()
    # One epoch (same data order, same initial parameters): both reached
    # 0.9602 here, in half the CPU time of two (80 s of make test's).
    batchsize, epochs = 100, 1
    x = numpy.zeros((batchsize, 784), numpy.float32)
    plain, compiled = _plain_and_compiled(MLP, x, tmp_path)
    iterations = epochs * len(train) // batchsize
    plain_accuracy = _train(plain, train, test, batchsize, iterations)
    compiled_accuracy = _train(compiled, train, test, batchsize, iterations)
    print('validation accuracy after %d epochs: chainer %.4f, compiled %.4f'
          % (epochs, plain_accuracy, compiled_accuracy))
    assert compiled_accuracy >= 0.95
    assert abs(compiled_accuracy - plain_accuracy) <= 0.005


@pytest.mark.slow
def test_lenet5_trains_on_mnist_compiled(tmp_path):
    train, test = chainer_compiler.get_mnist(ndim=3)
    batchsize = 32
    x = numpy.zeros((batchsize, 1, 28, 28), numpy.float32)
    _, compiled = _plain_and_compiled(lambda: LeNet5(batch_norm=True), x, tmp_path)
    accuracy = _train(compiled, train, test[:992], batchsize, iterations=300)
    assert accuracy >= 0.9

"""Whole models: export, then onnxruntime and the VM must reproduce Chainer.

Random weights, no downloads.  The large image models run at the default
opset only, to keep the suite fast; the converters they use are checked at
every tested opset in the per-family tests.
"""
import chainer.links as L
import numpy
import pytest

from chainer_compiler.translators.onnx_chainer.tracing import DEFAULT_OPSET
from tests.models import MLP, LeNet5
from tests.translators.onnx_chainer.helpers import check_export


def _image(shape, seed=0):
    return numpy.random.RandomState(seed).uniform(-1, 1, shape).astype(numpy.float32)


def _seeded(make, seed=0):
    """``make()``'s model with its random initial weights (Chainer draws
    them from NumPy's global generator) the same at every run: unseeded, a
    rare draw put ResNet-50's rounding just past the tolerance."""
    state = numpy.random.get_state()
    numpy.random.seed(seed)
    try:
        return make()
    finally:
        numpy.random.set_state(state)


def test_mlp():
    check_export(MLP(n_units=32), _image((4, 784)))


def test_lenet5():
    check_export(LeNet5(), _image((2, 1, 28, 28)))


@pytest.mark.slow
def test_vgg16():
    model = _seeded(lambda: L.VGG16Layers(pretrained_model=None))
    check_export(model, _image((1, 3, 224, 224)), opsets=(DEFAULT_OPSET,),
                 rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_resnet50():
    model = _seeded(lambda: L.ResNet50Layers(pretrained_model=None))
    check_export(model, _image((1, 3, 224, 224)), opsets=(DEFAULT_OPSET,),
                 rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_googlenet():
    model = _seeded(lambda: L.GoogLeNet(pretrained_model=None))
    check_export(model, _image((1, 3, 224, 224)), opsets=(DEFAULT_OPSET,),
                 rtol=1e-4, atol=1e-6)

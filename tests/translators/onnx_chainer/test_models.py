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


def test_mlp():
    check_export(MLP(n_units=32), _image((4, 784)))


def test_lenet5():
    check_export(LeNet5(), _image((2, 1, 28, 28)))


@pytest.mark.slow
def test_vgg16():
    model = L.VGG16Layers(pretrained_model=None)
    check_export(model, _image((1, 3, 224, 224)), opsets=(DEFAULT_OPSET,),
                 rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_resnet50():
    model = L.ResNet50Layers(pretrained_model=None)
    check_export(model, _image((1, 3, 224, 224)), opsets=(DEFAULT_OPSET,),
                 rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_googlenet():
    model = L.GoogLeNet(pretrained_model=None)
    check_export(model, _image((1, 3, 224, 224)), opsets=(DEFAULT_OPSET,),
                 rtol=1e-4, atol=1e-6)

"""Whole models: export, then onnxruntime and the VM must reproduce Chainer.

Random weights, no downloads.  The large image models run at the default
opset only, to keep the suite fast; the converters they use are checked at
every tested opset in the per-family tests.
"""
import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

from chainer_compiler.translators.onnx_chainer.tracing import DEFAULT_OPSET
from tests.translators.onnx_chainer.helpers import check_export


class MLP(chainer.Chain):
    def __init__(self, n_units=32, n_out=10):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(None, n_units)
            self.l2 = L.Linear(None, n_units)
            self.l3 = L.Linear(None, n_out)

    def forward(self, x):
        return self.l3(F.relu(self.l2(F.relu(self.l1(x)))))


class LeNet5(chainer.Chain):
    def __init__(self, n_out=10):
        super().__init__()
        with self.init_scope():
            self.conv1 = L.Convolution2D(1, 6, 5, pad=2)
            self.conv2 = L.Convolution2D(6, 16, 5)
            self.fc3 = L.Linear(16 * 5 * 5, 120)
            self.fc4 = L.Linear(120, 84)
            self.fc5 = L.Linear(84, n_out)

    def forward(self, x):
        h = F.max_pooling_2d(F.sigmoid(self.conv1(x)), 2, 2)
        h = F.max_pooling_2d(F.sigmoid(self.conv2(h)), 2, 2)
        h = F.sigmoid(self.fc3(h))
        h = F.sigmoid(self.fc4(h))
        return self.fc5(h)


def _image(shape, seed=0):
    return numpy.random.RandomState(seed).uniform(-1, 1, shape).astype(numpy.float32)


def test_mlp():
    check_export(MLP(), _image((4, 784)))


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

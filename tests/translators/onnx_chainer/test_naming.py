"""The naming contract between the exporter and compile_onnx."""
import chainer
import chainer.links as L
import numpy
import pytest

from chainer_compiler.compiled_model import bind_initializers
from chainer_compiler.translators.onnx_chainer import export_model
from chainer_compiler.translators.onnx_chainer.naming import array_name, named_arrays


class _Block(chainer.Chain):
    def __init__(self, in_channels):
        super().__init__()
        with self.init_scope():
            self.conv = L.Convolution2D(in_channels, 3, 3, pad=1)
            self.bn = L.BatchNormalization(3)

    def forward(self, x):
        return self.bn(self.conv(x))


class _Net(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.blocks = chainer.ChainList(_Block(2), _Block(3))
            self.scale = chainer.Parameter(numpy.ones(3, numpy.float32))
            self.head = L.Linear(None, 2)  # not initialized until called

    def forward(self, x):
        h = self.blocks[1](self.blocks[0](x)) * self.scale[None, :, None, None]
        return self.head(h)


@pytest.mark.parametrize('path,attribute,name', [
    ('/', 'W', '/W'), ('/l1', 'W', '/l1/W'),
    ('/predictor/bn', 'avg_mean', '/predictor/bn/avg_mean')])
def test_array_name_joins_the_link_path_and_the_attribute(path, attribute, name):
    assert array_name(path, attribute) == name


def test_parameters_are_named_as_chainer_names_them():
    model = _Net()
    named = named_arrays(model)
    params = [(a.name, a.value) for a in named if a.is_parameter]
    assert params == list(model.namedparams(include_uninit=True))
    assert '/head/W' in dict(params)  # not initialized, named all the same


def test_persistent_arrays_are_named_like_parameters_and_scalars_are_left_out():
    model = _Net()
    persistents = {a.name: a for a in named_arrays(model) if not a.is_parameter}
    assert sorted(persistents) == ['/blocks/%d/bn/%s' % (i, n) for i in (0, 1)
                                   for n in ('avg_mean', 'avg_var')]
    entry = persistents['/blocks/1/bn/avg_var']
    assert entry.link is model.blocks[1].bn and entry.attribute == 'avg_var'
    assert entry.value is model.blocks[1].bn.avg_var  # 'N' (a Python int) has no name


def test_a_root_links_own_arrays_start_with_one_slash():
    bn = L.BatchNormalization(3)
    assert [a.name for a in named_arrays(bn)] == ['/beta', '/gamma', '/avg_mean', '/avg_var']


def test_the_exporter_and_compile_onnx_use_the_same_names():
    model = _Net()
    x = numpy.random.RandomState(0).uniform(-1, 1, (2, 2, 4, 4)).astype(numpy.float32)
    proto = export_model(model, x)
    names = {a.name for a in named_arrays(model)}
    assert {init.name for init in proto.graph.initializer if init.name.startswith('/')} == names
    binding = bind_initializers(proto.graph, model, 'the export')
    assert sorted(binding.param_names) == sorted(n for n, _ in model.namedparams())
    assert all(binding.param_of[n] is p for n, p in model.namedparams())
    assert sorted(binding.state_names) == sorted(
        a.name for a in named_arrays(model) if not a.is_parameter)

"""chainer_compiler.export and the tracing walker: names, argument forms,
errors, hooks."""
import os

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import onnx
import pytest

import chainer_compiler
from chainer_compiler.translators.onnx_chainer import UnsupportedFunctionError, export_model
from tests.translators.onnx_chainer.helpers import check_export, op_types

X = numpy.arange(6, dtype=numpy.float32).reshape(2, 3) / 6


class Classifier(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.predictor = chainer.Sequential(L.Linear(3, 4), F.relu)
            self.unused = L.Linear(2, 2)

    def forward(self, x):
        return self.predictor(x)


def test_export_writes_a_checked_file_and_returns_its_name(tmp_path):
    model = chainer.Sequential(L.Linear(3, 4))
    path = str(tmp_path / 'm.onnx')
    assert chainer_compiler.export(model, [X], path) == path
    onnx.checker.check_model(onnx.load(path))


def test_export_without_filename_writes_a_temporary_file():
    path = chainer_compiler.export(chainer.Sequential(L.Linear(3, 4)), X)
    try:
        assert os.path.exists(path) and path.endswith('.onnx')
    finally:
        os.remove(path)


def test_parameters_are_named_by_link_path_and_unused_links_reported():
    with pytest.warns(UserWarning, match='/unused/W'):
        model = export_model(Classifier(), X)
    names = {t.name for t in model.graph.initializer}
    assert {'/predictor/0/W', '/predictor/0/b'} <= names
    assert [v.name for v in model.graph.input] == ['input_0']
    assert [v.name for v in model.graph.output] == ['output_0']


def test_batch_normalization_running_averages_keep_their_names():
    class Net(chainer.Chain):
        def __init__(self):
            super().__init__()
            with self.init_scope():
                self.bn = L.BatchNormalization(3)

        def forward(self, x):
            return self.bn(x)

    net = Net()
    net.bn.avg_mean[:] = [0.5, -1, 2]
    net.bn.avg_var[:] = [1, 2, 0.5]
    model = export_model(net, X)
    assert {'/bn/avg_mean', '/bn/avg_var', '/bn/gamma', '/bn/beta'} <= {
        t.name for t in model.graph.initializer}


def test_dict_inputs_and_dict_outputs_with_custom_names():
    def fn(a, b):
        return {'sum': a + b, 'prod': a * b}

    models = check_export(fn, {'a': X, 'b': X + 1}, input_names=['a', 'b'],
                          output_names=['sum', 'prod'])
    assert [v.name for v in models[0].graph.input] == ['a', 'b']
    assert [v.name for v in models[0].graph.output] == ['sum', 'prod']


def test_tuple_outputs_and_an_output_that_is_an_input():
    models = check_export(lambda x: (F.relu(x), x), X)
    assert 'Identity' in op_types(models[0])


def test_wrong_number_of_names_is_a_clear_error():
    with pytest.raises(ValueError, match='input_names has 2 name.* 1 input'):
        export_model(chainer.Sequential(F.relu), X, input_names=['a', 'b'])


@pytest.mark.parametrize('opset', [10, 27])
def test_unsupported_opset_is_a_clear_error(opset):
    with pytest.raises(ValueError, match='choose 11 to 26'):
        export_model(chainer.Sequential(F.relu), X, opset_version=opset)


@pytest.mark.parametrize('opset', [11, 17, 26])
def test_ir_version_is_one_onnxruntime_accepts(opset):
    model = export_model(chainer.Sequential(F.relu), X, opset_version=opset)
    assert model.ir_version <= 13
    assert model.opset_import[0].version == opset


def test_unsupported_function_names_itself_and_the_calling_line():
    class Unconvertible(chainer.FunctionNode):
        def forward(self, inputs):
            return inputs[0] * 2,

    def model(x):
        return Unconvertible().apply((x,))[0]  # the line the error must name

    with pytest.raises(UnsupportedFunctionError) as info:
        export_model(chainer.Sequential(model), X)
    message = str(info.value)
    assert 'Unconvertible' in message
    assert 'test_export.py:%d' % (model.__code__.co_firstlineno + 1) in message


def test_external_converters_extend_the_registry():
    class Double(chainer.FunctionNode):
        def forward(self, inputs):
            return inputs[0] * 2,

    def convert_double(ctx, call):
        ctx.node('Add', [call.inputs[0], call.inputs[0]], call.outputs)

    check_export(lambda x: Double().apply((x,))[0], X,
                 external_converters={'Double': convert_double})


def test_ch2o_translator_is_a_clear_error_until_it_exists():
    with pytest.raises(ValueError, match="translator 'ch2o'.*not available yet"):
        chainer_compiler.export(chainer.Sequential(F.relu), X, translator='ch2o')

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
from chainer_compiler.exporting import recorded_translator
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


@pytest.mark.parametrize('opset', [None, 13])
def test_export_records_producer_translator_and_opset(tmp_path, opset):
    path = chainer_compiler.export(chainer.Sequential(L.Linear(3, 4)), [X],
                                   str(tmp_path / 'm.onnx'), opset_version=opset)
    model = onnx.load(path)
    assert (model.producer_name, model.producer_version) == (
        'chainer-compiler', chainer_compiler.__version__)
    assert {p.key: p.value for p in model.metadata_props} == {
        'chainer_compiler.translator': 'onnx_chainer',
        'chainer_compiler.opset': str(opset or 17)}


def test_the_trace_leaves_no_graph_on_a_model_that_keeps_its_outputs():
    """L.Classifier keeps its loss, y and accuracy: with the trace's graph they
    would hold every activation of the example batch for the model's life."""
    model = L.Classifier(chainer.Sequential(L.Linear(3, 4), F.relu, L.Linear(4, 2)))
    export_model(model, (X, numpy.array([0, 1], numpy.int32)), reported=True)
    assert model.loss.creator is None and model.y.creator is None
    assert model.accuracy.creator is None


def test_export_without_filename_writes_a_temporary_file():
    path = chainer_compiler.export(chainer.Sequential(L.Linear(3, 4)), X)
    try:
        assert os.path.exists(path) and path.endswith('.onnx')
    finally:
        os.remove(path)


def test_parameters_are_named_by_link_path_and_unused_links_reported():
    with pytest.warns(UserWarning, match='not used by the exported graph: /unused/W'):
        model = export_model(Classifier(), X)
    names = {t.name for t in model.graph.initializer}
    # Unused ones too: the file holds the whole model, as compile_onnx requires.
    assert {'/predictor/0/W', '/predictor/0/b', '/unused/W', '/unused/b'} <= names
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
    names = {t.name for t in model.graph.initializer}
    assert {'/bn/avg_mean', '/bn/avg_var', '/bn/gamma', '/bn/beta'} <= names
    assert '/bn/N' not in names  # a Python int, not an array


def test_parameters_never_initialized_are_named_in_a_warning():
    class Lazy(chainer.Chain):
        def __init__(self):
            super().__init__()
            with self.init_scope():
                self.used = L.Linear(3, 4)
                self.never = L.Linear(None, 2)

        def forward(self, x):
            return self.used(x)

    with pytest.warns(UserWarning) as record:
        model = export_model(Lazy(), X)
    assert [str(w.message) for w in record] == [
        'parameters not used by the exported graph: /never/b (in the file all the same)',
        'parameters never initialized are not in the file (compile_onnx refuses it for this '
        'model): /never/W']
    assert '/never/b' in {t.name for t in model.graph.initializer}


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


class _TwoInTwoOut(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l = L.Linear(3, 3)
            self.bn = L.BatchNormalization(3)

    def forward(self, a, b):
        return self.bn(self.l(a)), a + b


@pytest.mark.parametrize('names, message', [
    ({'input_names': ['a']}, 'input_names has 1 name.* 2 inputs'),
    ({'input_names': ['/l/W', 'b']}, "input_names: '/l/W' is already the name of a parameter"),
    ({'input_names': ['a', '/bn/avg_mean']},
     "input_names: '/bn/avg_mean' is already the name of a persistent value"),
    ({'input_names': ['a', 'a']}, "input_names: 'a' is already the name of an input"),
    ({'input_names': ['a', '']}, "input_names: '' is not a name"),
    ({'input_names': ['a', 3]}, 'input_names: 3 is not a name'),
    ({'output_names': ['y', 'y']}, "output_names: 'y' is already the name of an output"),
    ({'output_names': ['y', 'input_0']}, "output_names: 'input_0' is already the name of an "
     'input'),
    ({'output_names': ['/l/b', 'z']}, "output_names: '/l/b' is already the name of a "
     'parameter'),
    ({'input_names': ['output_1', 'b']}, "output_names: 'output_1' is already the name of an "
     'input'),
], ids=['count', 'parameter', 'persistent', 'twice', 'empty', 'not-a-string', 'output-twice',
        'output-is-an-input', 'output-is-a-parameter', 'default-output-is-an-input'])
def test_bad_names_are_refused_before_anything_is_written(tmp_path, names, message):
    path = tmp_path / 'm.onnx'
    path.write_bytes(b'previous')
    with pytest.raises(ValueError, match=message):
        chainer_compiler.export(_TwoInTwoOut(), [X, X], str(path), **names)
    assert path.read_bytes() == b'previous'
    assert os.listdir(tmp_path) == ['m.onnx']


def test_export_replaces_the_file_in_one_step(tmp_path):
    path, old_name = tmp_path / 'm.onnx', tmp_path / 'old.onnx'
    path.write_bytes(b'previous')
    os.link(path, old_name)  # a reader holding the old file keeps it whole
    chainer_compiler.export(chainer.Sequential(L.Linear(3, 4)), [X], str(path))
    assert old_name.read_bytes() == b'previous'
    onnx.checker.check_model(onnx.load(str(path)))
    assert sorted(os.listdir(tmp_path)) == ['m.onnx', 'old.onnx']  # no temporary file left


def test_a_failed_export_leaves_the_file_as_it_was(tmp_path):
    class Unconvertible(chainer.FunctionNode):
        def forward(self, inputs):
            return inputs[0] * 2,

    path = tmp_path / 'm.onnx'
    path.write_bytes(b'previous')
    with pytest.raises(UnsupportedFunctionError):
        chainer_compiler.export(chainer.Sequential(lambda x: Unconvertible().apply((x,))[0]),
                                [X], str(path))
    assert path.read_bytes() == b'previous'
    assert os.listdir(tmp_path) == ['m.onnx']


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


def test_ch2o_export_records_its_translator_and_refuses_tracing_options(tmp_path):
    path = chainer_compiler.export(chainer.Sequential(F.relu), X, str(tmp_path / 'm.onnx'),
                                   translator='ch2o')
    assert recorded_translator(onnx.load(path)) == 'ch2o'
    with pytest.raises(ValueError, match="translator 'ch2o' exports inference forms"):
        chainer_compiler.export(chainer.Sequential(F.relu), X, translator='ch2o', train=True)
    with pytest.raises(ValueError, match="positional arguments as a list or tuple, not a dict"):
        chainer_compiler.export(chainer.Sequential(F.relu), {'x': X}, translator='ch2o')

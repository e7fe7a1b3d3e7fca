"""Shapes that change at run time (issue 33): export with symbolic
dimensions, compile_onnx and compile_training_step at any batch size."""
import chainer
import chainer.functions as F
import numpy
import onnx
import pytest

import chainer_compiler
from tests.models import MLP, LeNet5


def _initialized(model, x):
    numpy.random.seed(0)
    with chainer.using_config('train', False):
        model(x)
    return model


def _images(batch, seed=0):
    return numpy.random.RandomState(seed).uniform(-1, 1, (batch, 1, 28, 28)).astype('f')


def _dims(value):
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


# -- export ------------------------------------------------------------------
@pytest.mark.parametrize('dynamic_axes', ['batch', {'input_0': {0: 'batch'},
                                                    'output_0': {0: 'batch'}}])
def test_export_with_a_dynamic_batch_runs_in_onnxruntime_at_other_batches(tmp_path,
                                                                          dynamic_axes):
    ort = pytest.importorskip('onnxruntime')
    # LeNet's Linear reshapes (8, 16, 5, 5) to (8, 400): the file must say (-1, 400).
    model = _initialized(LeNet5(batch_norm=True), _images(8))
    path = chainer_compiler.export(model, [_images(8)], str(tmp_path / 'm.onnx'),
                                   dynamic_axes=dynamic_axes)
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    assert _dims(proto.graph.input[0]) == ['batch', 1, 28, 28]
    assert _dims(proto.graph.output[0]) == ['batch', 10]
    assert all(d.dim_value for v in proto.graph.input[1:] for d in v.type.tensor_type.shape.dim)
    session = ort.InferenceSession(path)
    for batch in (1, 5, 13):
        x = _images(batch, seed=batch)
        with chainer.using_config('train', False):
            expected = model(x).array
        numpy.testing.assert_allclose(session.run(None, {'input_0': x})[0], expected,
                                      rtol=1e-4, atol=1e-5)


def test_torch_style_axis_lists_name_the_axes_and_outputs_follow_the_inputs(tmp_path):
    model = _initialized(MLP(6, 3), numpy.zeros((4, 5), 'f'))
    path = chainer_compiler.export(model, [numpy.zeros((4, 5), 'f')], str(tmp_path / 'm.onnx'),
                                   dynamic_axes={'input_0': [0]})
    proto = onnx.load(path)
    assert _dims(proto.graph.input[0]) == ['input_0_dynamic_axes_1', 5]
    # Not named, but it changes with input_0's axis 0: it takes its symbol.
    assert _dims(proto.graph.output[0]) == ['input_0_dynamic_axes_1', 3]


class _DividesByBatch(chainer.Chain):
    def forward(self, x):
        return F.sum(x, axis=0) / x.shape[0]


@pytest.mark.parametrize('model, dynamic_axes, message', [
    (_DividesByBatch(), 'batch', 'constant computed from the symbolic sizes'),
    (MLP(6, 3), {'input_9': {0: 'n'}}, "names 'input_9', which is no tensor input"),
    (MLP(6, 3), {'input_0': {2: 'n'}}, 'axis 2 is not an axis of a rank-2 value'),
    (MLP(6, 3), {'input_0': {0: 'n m'}}, 'is not a dimension name'),
    (MLP(6, 3), ['batch'], "dynamic_axes is a dict"),
])
def test_what_cannot_be_symbolic_is_refused_naming_it(tmp_path, model, dynamic_axes, message):
    x = numpy.ones((4, 5), 'f')
    _initialized(model, x)
    path = tmp_path / 'm.onnx'
    with pytest.raises(ValueError, match=message):
        chainer_compiler.export(model, [x], str(path), dynamic_axes=dynamic_axes)
    assert not path.exists()

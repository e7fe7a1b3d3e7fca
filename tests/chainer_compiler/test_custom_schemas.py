"""The ONNX schemas of this project's operators, generated from their
kernels' records: every output of every custom node of a real compiled
training graph gets its type and shape from shape inference."""
import chainer
import chainer.links as L
import numpy
import onnx
import pytest
from onnx import defs, shape_inference

import chainer_compiler
from chainer_compiler.custom_schemas import register_schemas
from chainer_compiler.runtime.ops import CUSTOM_DOMAIN, registered_kernels
from tests.models import MLP, LeNet5

#: These tests check the bridge, not the backend: the NumPy VM, where the
#: default ('auto') would build C for each model.
ON_THE_VM = {'backend': 'numpy'}


def test_every_custom_kernel_has_a_schema():
    register_schemas()
    kernels = {s.op for s in registered_kernels() if s.domain == CUSTOM_DOMAIN}
    schemas = {s.name for s in defs.get_all_schemas() if s.domain == CUSTOM_DOMAIN}
    assert kernels == schemas


def _step_graph(tmp_path, predictor, shape, optimizer):
    """The ONNX graph of a compiled training step (forward, backward and
    the optimizer's in-place updates)."""
    x = numpy.random.RandomState(0).rand(4, *shape).astype(numpy.float32)
    t = numpy.zeros(4, numpy.int32)
    with chainer.using_config('train', False):
        predictor(x)  # initialize lazily sized links
    model = L.Classifier(predictor)
    optimizer.setup(model)
    path = str(tmp_path / 'step.onnx')
    chainer_compiler.compile_training_step(model, optimizer, (x, t), dump_onnx=path,
                                           runtime_kwargs=ON_THE_VM)
    return onnx.load(path)


@pytest.mark.parametrize('predictor, shape, optimizer', [
    (lambda: MLP(16, 10), (784,), chainer.optimizers.Adam),
    (LeNet5, (1, 28, 28), chainer.optimizers.MomentumSGD),
    (LeNet5, (1, 28, 28), chainer.optimizers.SGD),
], ids=['mlp-adam', 'lenet5-momentum', 'lenet5-sgd'])
def test_shape_inference_types_every_custom_output(tmp_path, predictor, shape, optimizer):
    model = _step_graph(tmp_path, predictor(), shape, optimizer())
    onnx.checker.check_model(model, full_check=True)  # the nodes fit their schemas
    custom = [n for n in model.graph.node if n.domain == CUSTOM_DOMAIN]
    assert {'ReluGrad', 'SoftmaxCrossEntropyLossGrad'} <= {n.op_type for n in custom}
    made = {o for n in custom for o in n.output if o}
    expected = {v.name: v.type for v in model.graph.output if v.name in made}
    # Forget what the compiler wrote about them: inference alone must tell.
    kept = [v for v in model.graph.value_info if v.name not in made]
    del model.graph.value_info[:]
    model.graph.value_info.extend(kept)
    for v in model.graph.output:
        if v.name in made:
            v.ClearField('type')
    inferred = shape_inference.infer_shapes(model, strict_mode=True).graph
    types = {v.name: v.type for v in list(inferred.value_info) + list(inferred.output)}
    for node in custom:
        for name in filter(None, node.output):
            t = types[name].tensor_type
            assert t.elem_type, (node.op_type, name)
            assert all(d.HasField('dim_value') for d in t.shape.dim), (node.op_type, name)
    for name, declared in expected.items():  # the updated parameters
        assert types[name] == declared, name


def test_a_custom_node_missing_an_attribute_is_named():
    register_schemas()
    node = onnx.helper.make_node('ConvGradFilter', ['x', 'gy'], ['gw'], domain=CUSTOM_DOMAIN,
                                 name='bad')
    graph = onnx.helper.make_graph(
        [node], 'g', [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [1, 1, 3, 3])
                      for n in ('x', 'gy')],
        [onnx.helper.make_tensor_value_info('gw', onnx.TensorProto.FLOAT, None)])
    model = onnx.helper.make_model(graph, opset_imports=[
        onnx.helper.make_opsetid('', 17), onnx.helper.make_opsetid(CUSTOM_DOMAIN, 1)])
    with pytest.raises(shape_inference.InferenceError, match="ConvGradFilter.*type rule failed: "
                                                             "KeyError: 'kernel_shape'"):
        shape_inference.infer_shapes(model)

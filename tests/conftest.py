"""Shared fixtures: tiny ONNX models built with onnx.helper."""
import numpy
import pytest
from onnx import TensorProto, helper, numpy_helper


def make_model(nodes, inputs, outputs, initializers=(), opset=17, name='test'):
    """A checked ModelProto from nodes and (name, elem_type, shape) tuples."""
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(numpy.asarray(v), k) for k, v in initializers])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', opset)])
    model.ir_version = 8
    return model


@pytest.fixture
def mlp_model():
    """x[2,3] -> MatMul W[3,4] -> Add b -> Relu -> y[2,4]."""
    rng = numpy.random.RandomState(0)
    return make_model(
        [helper.make_node('MatMul', ['x', 'W'], ['h'], name='matmul'),
         helper.make_node('Add', ['h', 'b'], ['z'], name='add'),
         helper.make_node('Relu', ['z'], ['y'], name='relu')],
        [('x', TensorProto.FLOAT, [2, 3])], [('y', TensorProto.FLOAT, [2, 4])],
        [('W', rng.standard_normal((3, 4)).astype(numpy.float32)),
         ('b', rng.standard_normal(4).astype(numpy.float32))])

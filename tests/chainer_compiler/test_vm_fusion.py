"""VM fusion: fewer instructions, same results."""
import numpy
from onnx import TensorProto, helper, numpy_helper

from chainer_compiler.passes.vm_fusion import fuse_for_vm
from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.executor import Executor


def _model(nodes, outputs, initializers=()):
    graph = helper.make_graph(
        nodes, 'g', [helper.make_tensor_value_info('x', TensorProto.FLOAT, [4, 3])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, [4, None]) for o in outputs],
        [numpy_helper.from_array(a, n) for n, a in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)])


def _weights():
    rng = numpy.random.RandomState(0)
    return [('w', rng.randn(5, 3).astype(numpy.float32)),
            ('b', rng.randn(5).astype(numpy.float32))]


def _ops(program):
    return [inst.op for inst in program.instructions]


def _run(program, x):
    return Executor(program, backend='numpy').run({'x': x})


def test_gemm_then_relu_becomes_one_fused_gemm():
    nodes = [helper.make_node('Gemm', ['x', 'w', 'b'], ['h'], transB=1),
             helper.make_node('Relu', ['h'], ['y'])]
    program = build_program(_model(nodes, ['y'], _weights()))
    assert _ops(program) == ['FusedGemm']
    x = numpy.random.RandomState(1).randn(4, 3).astype(numpy.float32)
    w, b = (a for _, a in _weights())
    numpy.testing.assert_allclose(_run(program, x)['y'], numpy.maximum(x @ w.T + b, 0),
                                  rtol=1e-6)


def test_a_product_read_elsewhere_is_not_fused():
    nodes = [helper.make_node('Gemm', ['x', 'w', 'b'], ['h'], transB=1),
             helper.make_node('Relu', ['h'], ['y'])]
    program = build_program(_model(nodes, ['y', 'h'], _weights()))
    assert _ops(program) == ['Gemm', 'Relu']


def test_identities_disappear_but_outputs_keep_their_names():
    nodes = [helper.make_node('Neg', ['x'], ['n']),
             helper.make_node('Identity', ['n'], ['inner']),
             helper.make_node('Exp', ['inner'], ['e']),
             helper.make_node('Identity', ['e'], ['y']),
             helper.make_node('Identity', ['x'], ['same_as_input'])]
    model = _model(nodes, ['y', 'same_as_input'])
    program = build_program(model)
    # The Identity of a graph input must stay: the output is a new name for it.
    assert _ops(program) == ['Neg', 'Exp', 'Identity']
    x = numpy.random.RandomState(2).randn(4, 3).astype(numpy.float32)
    result = _run(program, x)
    numpy.testing.assert_allclose(result['y'], numpy.exp(-x), rtol=1e-6)
    numpy.testing.assert_array_equal(result['same_as_input'], x)


def test_graphs_with_bodies_are_left_alone():
    body = helper.make_graph(
        [helper.make_node('Identity', ['x'], ['out'])], 'then',
        [], [helper.make_tensor_value_info('out', TensorProto.FLOAT, None)])
    graph = helper.make_graph(
        [helper.make_node('Identity', ['c'], ['c2']),
         helper.make_node('If', ['c2'], ['y'], then_branch=body, else_branch=body)],
        'g', [helper.make_tensor_value_info('c', TensorProto.BOOL, []),
              helper.make_tensor_value_info('x', TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, None)])
    fuse_for_vm(graph)
    assert [n.op_type for n in graph.node] == ['Identity', 'If']

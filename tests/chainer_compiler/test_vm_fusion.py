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


def test_chains_of_identities_to_an_output_keep_it_written():
    nodes = [helper.make_node('Neg', ['x'], ['n']),
             helper.make_node('Identity', ['n'], ['a']),
             helper.make_node('Identity', ['a'], ['y']),
             helper.make_node('Identity', ['x'], ['b']),
             helper.make_node('Identity', ['b'], ['same_as_input'])]
    program = build_program(_model(nodes, ['y', 'same_as_input']))
    assert _ops(program) == ['Neg', 'Identity']
    x = numpy.random.RandomState(5).randn(4, 3).astype(numpy.float32)
    result = _run(program, x)
    numpy.testing.assert_array_equal(result['y'], -x)
    numpy.testing.assert_array_equal(result['same_as_input'], x)


def _loop_model(body_reads_product=False):
    """x -> relu(x W^T + b) = r, s = Identity(r); then two iterations of
    v <- relu(v W2^T + b2) + s from v = r.  The Loop body reads s, and
    with ``body_reads_product`` the outer product h too, by name."""
    f32 = TensorProto.FLOAT
    body = helper.make_graph(
        [helper.make_node('Gemm', ['v', 'w2', 'b2'], ['g'], transB=1),
         helper.make_node('Relu', ['g'], ['a']),
         helper.make_node('Add', ['a', 'h' if body_reads_product else 's'], ['t']),
         helper.make_node('Identity', ['cond'], ['cond_out']),
         helper.make_node('Identity', ['t'], ['v_out'])],
        'body', [helper.make_tensor_value_info('i', TensorProto.INT64, []),
                 helper.make_tensor_value_info('cond', TensorProto.BOOL, []),
                 helper.make_tensor_value_info('v', f32, [4, 5])],
        [helper.make_tensor_value_info('cond_out', TensorProto.BOOL, []),
         helper.make_tensor_value_info('v_out', f32, [4, 5])])
    rng = numpy.random.RandomState(3)
    weights = _weights() + [('w2', rng.randn(5, 5).astype(numpy.float32)),
                            ('b2', rng.randn(5).astype(numpy.float32)),
                            ('trips', numpy.array(2, numpy.int64))]
    nodes = [helper.make_node('Gemm', ['x', 'w', 'b'], ['h'], transB=1),
             helper.make_node('Relu', ['h'], ['r']),
             helper.make_node('Identity', ['r'], ['s']),
             helper.make_node('Loop', ['trips', '', 'r'], ['y'], body=body)]
    return _model(nodes, ['y'], weights), dict(weights)


def test_a_model_with_a_loop_is_fused_outside_and_inside_the_loop():
    model, weights = _loop_model()
    program = build_program(model)
    # The Identity the body reads by name stays; the body's own fuse.
    assert _ops(program) == ['FusedGemm', 'Identity', 'Loop']
    body = program.instructions[-1].attrs['body']
    assert _ops(body) == ['FusedGemm', 'Add', 'Identity']  # the condition's pass-through
    x = numpy.random.RandomState(4).randn(4, 3).astype(numpy.float32)
    v = s = numpy.maximum(x @ weights['w'].T + weights['b'], 0)
    for _ in range(2):
        v = numpy.maximum(v @ weights['w2'].T + weights['b2'], 0) + s
    numpy.testing.assert_allclose(_run(program, x)['y'], v, rtol=1e-5)


def test_a_product_a_body_reads_is_not_fused():
    model, _ = _loop_model(body_reads_product=True)
    program = build_program(model)
    assert _ops(program)[:2] == ['Gemm', 'Relu']
    assert _ops(program.instructions[-1].attrs['body']) == ['FusedGemm', 'Add', 'Identity']


def test_an_identity_in_an_if_branch_passing_an_outer_value_stays():
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
    # The If reads c itself; a branch's output is a new name for x.
    assert [(n.op_type, list(n.input)) for n in graph.node] == [('If', ['c'])]
    for attr in graph.node[0].attribute:
        assert [n.op_type for n in attr.g.node] == ['Identity']

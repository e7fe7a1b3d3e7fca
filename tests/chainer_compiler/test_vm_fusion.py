"""VM fusion: fewer instructions, same results."""
import numpy
from onnx import TensorProto, helper, numpy_helper

from chainer_compiler.passes.vm_fusion import remove_identities
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
    remove_identities(graph)
    # The If reads c itself; a branch's output is a new name for x.
    assert [(n.op_type, list(n.input)) for n in graph.node] == [('If', ['c'])]
    for attr in graph.node[0].attribute:
        assert [n.op_type for n in attr.g.node] == ['Identity']


# -- the rules shared with the native backend (runtime/native/fusion.py) --------

F32 = numpy.float32
CUSTOM = 'org.chainer_compiler'


def _written_out_gelu(form):
    """GELU as BERT ('erf') or GPT-2 ('tanh') exports it, from x [4, 3]."""
    node, const = helper.make_node, numpy_helper.from_array
    if form == 'erf':
        nodes = [node('Div', ['x', 'sqrt2'], ['d']), node('Erf', ['d'], ['e']),
                 node('Add', ['e', 'one'], ['p']), node('Mul', ['x', 'p'], ['m']),
                 node('Mul', ['m', 'half'], ['y'])]
        consts = {'sqrt2': 1.4142135, 'one': 1.0, 'half': 0.5}
    else:
        nodes = [node('Pow', ['x', 'three'], ['c']), node('Mul', ['c', 'k'], ['ck']),
                 node('Add', ['x', 'ck'], ['s']), node('Mul', ['s', 'r'], ['sr']),
                 node('Tanh', ['sr'], ['t']), node('Add', ['t', 'one'], ['p']),
                 node('Mul', ['x', 'p'], ['m']), node('Mul', ['m', 'half'], ['y'])]
        consts = {'three': 3.0, 'k': 0.044715, 'r': 0.7978846, 'one': 1.0, 'half': 0.5}
    model = _model(nodes, ['y'])
    model.graph.initializer.extend(const(numpy.array(v, F32), n) for n, v in consts.items())
    return model


def _unfused(model, x):
    return _run(build_program(model, fuse=False), x)


def test_a_written_out_tanh_gelu_becomes_one_gelu_on_the_vm():
    # GELU_FORMS: the VM fuses GPT-2's tanh form; BERT's erf form stays as
    # written (the VM's exact Gelu is slower than those nodes), which the
    # native backend fuses.
    from chainer_compiler.runtime.native.fusion import fuse
    x = numpy.random.RandomState(6).randn(4, 3).astype(F32) * 3
    model = _written_out_gelu('tanh')
    program = build_program(model)
    assert _ops(program) == ['Gelu']
    assert program.instructions[0].attrs['approximate'] == 'tanh'
    numpy.testing.assert_allclose(_run(program, x)['y'], _unfused(model, x)['y'],
                                  rtol=1e-5, atol=1e-6)
    bert = build_program(_written_out_gelu('erf'))
    assert _ops(bert) == ['Div', 'Erf', 'Add', 'Mul', 'Mul']
    assert _ops(fuse(bert, 'native')) == ['Gelu']


def test_silu_becomes_one_swish_on_the_vm():
    nodes = [helper.make_node('Sigmoid', ['x'], ['s']), helper.make_node('Mul', ['x', 's'], ['y'])]
    model = _model(nodes, ['y'])
    program = build_program(model)
    assert _ops(program) == ['Swish']
    x = numpy.random.RandomState(7).randn(4, 3).astype(F32) * 5
    numpy.testing.assert_allclose(_run(program, x)['y'], _unfused(model, x)['y'], rtol=1e-6)


def test_a_linear_layers_bias_becomes_the_matmuls_third_input_on_the_vm():
    rng = numpy.random.RandomState(8)
    nodes = [helper.make_node('MatMul', ['x', 'w'], ['m']),
             helper.make_node('Add', ['m', 'b'], ['y'])]
    model = _model(nodes, ['y'], [('w', rng.randn(3, 5).astype(F32)),
                                  ('b', rng.randn(5).astype(F32))])
    program = build_program(model)
    assert _ops(program) == ['MatMul'] and len(program.instructions[0].inputs) == 3
    x = rng.randn(4, 3).astype(F32)
    numpy.testing.assert_array_equal(_run(program, x)['y'], _unfused(model, x)['y'])


def test_batch_norm_folded_on_the_vm_holds_only_the_folded_weights():
    from chainer_compiler.memory_model import program_peak
    model = _rule_cases()['fold_batch_norm']
    unfused, fused = build_program(model, fuse=False), build_program(model)
    assert _ops(fused) == ['Conv'] and len(fused.constants) == 2  # weight and bias
    assert program_peak(fused)[0] < program_peak(unfused)[0]
    x = numpy.random.RandomState(10).randn(1, 4, 5, 5).astype(F32)
    numpy.testing.assert_allclose(*(Executor(p, backend='numpy').run({'x': x})['y']
                                    for p in (fused, unfused)), rtol=1e-5, atol=1e-5)


def _rule_cases():
    """fusion_rules.RULES' rule -> a model only that rule fuses."""
    from tests.runtime.native.helpers import make_model
    node, rng = helper.make_node, numpy.random.RandomState(9)
    vec, bn = [4], ['s', 'b', 'm', 'v']
    bn_params = {n: rng.uniform(1, 2, vec).astype(F32) for n in bn}
    image = [('x', F32, [1, 4, 5, 5])]
    conv_w = {'w': rng.randn(4, 4, 3, 3).astype(F32)}
    sgd = [('W', F32, [5, 7]), ('gy', F32, [8, 5]), ('a', F32, [8, 7]), ('lr', F32, [])]
    models = {
        'fold_batch_norm': make_model(
            [node('Conv', ['x', 'w'], ['c'], pads=[1] * 4), node('BatchNormalization',
                                                                 ['c'] + bn, ['y'])],
            image, [('y', F32, [1, 4, 5, 5])], {**conv_w, **bn_params}),
        'pool_first': make_model(
            [node('Conv', ['x', 'k'], ['c']),
             node('AveragePool', ['c'], ['y'], kernel_shape=[2, 2], strides=[2, 2])],
            image, [('y', F32, [1, 4, 2, 2])], {'k': rng.randn(4, 4, 1, 1).astype(F32)}),
        'fuse_residual': make_model(
            [node('Conv', ['x', 'w'], ['c'], pads=[1] * 4), node('Add', ['c', 'x'], ['y'])],
            image, [('y', F32, [1, 4, 5, 5])], conv_w),
        'fuse_bias': make_model(
            [node('MatMul', ['x', 'w'], ['m']), node('Add', ['m', 'b'], ['y'])],
            [('x', F32, [2, 3])], [('y', F32, [2, 4])],
            {'w': rng.randn(3, 4).astype(F32), 'b': rng.randn(4).astype(F32)}),
        'fuse_activation': make_model(
            [node('Gemm', ['x', 'w'], ['h']), node('Relu', ['h'], ['y'])],
            [('x', F32, [2, 3])], [('y', F32, [2, 4])], {'w': rng.randn(3, 4).astype(F32)}),
        'fuse_swish': make_model(
            [node('Sigmoid', ['x'], ['s']), node('Mul', ['x', 's'], ['y'])],
            [('x', F32, [2, 3])], [('y', F32, [2, 3])]),
        'fuse_gelu': _written_out_gelu('tanh'),
        'fuse_attention': make_model(
            [node('MatMul', ['q', 'kt'], ['s']), node('Softmax', ['s'], ['p']),
             node('MatMul', ['p', 'v'], ['y'])],
            [('q', F32, [2, 3]), ('kt', F32, [3, 4]), ('v', F32, [4, 5])], [('y', F32, [2, 5])]),
        'fuse_sgd_update': make_model(
            [node('Gemm', ['gy', 'a'], ['gW'], transA=1),
             node('SGDUpdate', ['W', 'gW', 'lr'], ['new_W'], domain=CUSTOM)],
            sgd, [('new_W', F32, [5, 7])], custom=True),
        'share_batch_statistics': make_model(
            [node('BatchNormalization', ['x'] + bn, ['y', 'rm', 'rv'], training_mode=1),
             node('BatchNormalizationGrad', ['x', 's', 'gy'], ['gx', 'gs', 'gb'],
                  domain=CUSTOM)],
            image + [('gy', F32, [1, 4, 5, 5])] + [(n, F32, vec) for n in bn],
            [('y', F32, [1, 4, 5, 5]), ('rm', F32, vec), ('rv', F32, vec),
             ('gx', F32, [1, 4, 5, 5]), ('gs', F32, vec), ('gb', F32, vec)],
            custom=True, opset=15),
    }
    return models


def test_every_backend_applies_the_rules_the_one_table_gives_it():
    # Both backends run the one fuser over Programs; RULES alone decides
    # which of its rules each applies, and the VM's pipeline asks the same.
    from chainer_compiler.runtime.native import fusion
    from chainer_compiler.runtime.ops.fusion_rules import BACKENDS, RULES
    cases = _rule_cases()
    assert set(cases) == set(RULES)
    for rule, model in cases.items():
        program = build_program(model, fuse=False)
        for backend in BACKENDS:
            fused = fusion.fuse(program, backend)
            assert (fused is not program) == (backend in RULES[rule]), (rule, backend)
        assert _ops(build_program(model)) == _ops(fusion.fuse(program, 'vm')), rule

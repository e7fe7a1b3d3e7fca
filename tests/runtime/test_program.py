import numpy
from onnx import TensorProto, helper

from chainer_compiler import build_program
from chainer_compiler.runtime import NO_REGISTER, Executor
from chainer_compiler.runtime.program import RegisterType
from chainer_compiler.training import compile_training
from tests.conftest import make_model


def test_dump_lists_inputs_constants_instructions_frees_and_outputs(mlp_model):
    text = build_program(mlp_model).dump()
    assert 'input  %0 = x float32[2, 3]' in text
    assert 'const' in text and 'float32[3, 4]' in text
    assert 'MatMul(' in text and 'Relu(' in text
    assert 'free' in text
    assert 'output y' in text
    assert '# relu' in text


def test_each_register_is_freed_after_its_last_use(mlp_model):
    program = build_program(mlp_model)
    last_use = {}
    for i, inst in enumerate(program.instructions):
        for r in inst.inputs:
            last_use[r] = i
    keep = set(program.constants) | {v.register for v in program.outputs}
    for i, inst in enumerate(program.instructions):
        for r in inst.frees:
            assert last_use.get(r, i) == i
            assert r not in keep
    freed = {r for inst in program.instructions for r in inst.frees}
    assert set(last_use) - keep <= freed


def test_outputs_survive_and_run_matches_numpy(mlp_model):
    program = build_program(mlp_model)
    x = numpy.arange(6, dtype=numpy.float32).reshape(2, 3)
    W = next(v for v in program.constants.values() if v.shape == (3, 4))
    b = next(v for v in program.constants.values() if v.shape == (4,))
    y = Executor(program).run({'x': x})['y']
    numpy.testing.assert_allclose(y, numpy.maximum(x @ W + b, 0), rtol=1e-6)
    assert NO_REGISTER not in [v.register for v in program.outputs]


def _types_by_name(program):
    return {program.register_name(r): t for r, t in program.types.items()}


def test_every_register_carries_the_type_inference_gives_it():
    # A symbolic batch, an identifier, survives; 'N + 1' is no identifier,
    # so that dimension is unknown.
    model = make_model(
        [helper.make_node('MatMul', ['x', 'W'], ['h']), helper.make_node('Relu', ['h'], ['y']),
         helper.make_node('Shape', ['z'], ['s'])],
        [('x', TensorProto.FLOAT, ['N', 3]), ('z', TensorProto.INT64, ['N + 1'])],
        [('y', TensorProto.FLOAT, ['N', 4]), ('s', TensorProto.INT64, [1])],
        [('W', numpy.ones((3, 4), numpy.float32))])
    program = build_program(model)
    assert set(program.types) == set(range(program.num_registers))
    assert _types_by_name(program) == {
        'x': RegisterType('tensor', 'float32', ('N', 3)),
        'W': RegisterType('tensor', 'float32', (3, 4)),
        'h': RegisterType('tensor', 'float32', ('N', 4)),
        'y': RegisterType('tensor', 'float32', ('N', 4)),
        'z': RegisterType('tensor', 'int64', (None,)),
        's': RegisterType('tensor', 'int64', (1,))}


def test_a_loop_body_types_its_registers_and_the_outer_values_it_captures():
    body = helper.make_graph(
        [helper.make_node('Add', ['c_in', 'W'], ['c_out']),
         helper.make_node('Identity', ['cond'], ['cond_out'])], 'body',
        [helper.make_tensor_value_info('i', TensorProto.INT64, []),
         helper.make_tensor_value_info('cond', TensorProto.BOOL, []),
         helper.make_tensor_value_info('c_in', TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info('cond_out', TensorProto.BOOL, []),
         helper.make_tensor_value_info('c_out', TensorProto.FLOAT, [3, 4])])
    model = make_model([helper.make_node('Loop', ['n', '', 'c0'], ['c'], body=body)],
                       [('n', TensorProto.INT64, []), ('c0', TensorProto.FLOAT, [3, 4])],
                       [('c', TensorProto.FLOAT, [3, 4])],
                       [('W', numpy.ones((3, 4), numpy.float32))])
    (_, _, sub), = build_program(model).subprograms()
    assert set(sub.types) == set(range(sub.num_registers))
    assert _types_by_name(sub)['W'] == RegisterType('tensor', 'float32', (3, 4))
    assert _types_by_name(sub)['c_out'] == RegisterType('tensor', 'float32', (3, 4))


def test_training_programs_type_every_register(mlp_model):
    programs = compile_training(mlp_model, params=['W', 'b'])
    for program in (programs.forward, programs.backward):
        assert set(program.types) == set(range(program.num_registers)), program.name
    assert _types_by_name(programs.backward)['grad/W'] == \
        RegisterType('tensor', 'float32', (3, 4))


def test_a_pool_whose_windows_onnx_miscounts_leaves_its_types_unknown_not_wrong():
    # ONNX's inference counts a last window starting in the end padding
    # (height 3); AveragePool's definition and the kernels drop it (2).
    model = make_model(
        [helper.make_node('AveragePool', ['x'], ['p'], kernel_shape=[2, 3], strides=[2, 2],
                          pads=[0, 1, 1, 1], ceil_mode=1),
         helper.make_node('Relu', ['p'], ['y'])],
        [('x', TensorProto.FLOAT, [1, 1, 4, 6])], [('y', TensorProto.FLOAT, ['n', 'c', 'h', 'w'])])
    program = build_program(model)
    types = _types_by_name(program)
    assert 'p' not in types
    assert types['y'] == RegisterType('tensor', 'float32', ('n', 'c', 'h', 'w'))
    y = Executor(program).run({'x': numpy.ones((1, 1, 4, 6), numpy.float32)})['y']
    assert y.shape == (1, 1, 2, 4)

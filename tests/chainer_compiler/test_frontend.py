import numpy
import onnx
import pytest
from onnx import TensorProto, helper

from chainer_compiler import InvalidModelError, UnsupportedOperatorsError, build_program
from chainer_compiler.runtime import Executor
from tests.conftest import make_model


def test_missing_file_names_it(tmp_path):
    with pytest.raises(InvalidModelError, match='nope.onnx does not exist'):
        build_program(str(tmp_path / 'nope.onnx'))


def test_garbage_file_names_it(tmp_path):
    path = tmp_path / 'junk.onnx'
    path.write_bytes(b'\xff\x00not a protobuf' * 10)
    with pytest.raises(InvalidModelError, match='junk.onnx is not a readable ONNX model'):
        build_program(str(path))


def test_checker_failures_are_reported():
    model = make_model([helper.make_node('Relu', ['x'], ['y'])],
                       [('x', TensorProto.FLOAT, [2])], [('y', TensorProto.FLOAT, [2])])
    model.graph.node[0].input[0] = 'undefined_value'
    with pytest.raises(InvalidModelError, match='fails onnx.checker'):
        build_program(model)


def test_every_unsupported_operator_is_listed_with_its_node():
    nodes = [helper.make_node('Relu', ['x'], ['a'], name='ok'),
             helper.make_node('FancyOp', ['a'], ['b'], name='first', domain='my.domain'),
             helper.make_node('OtherOp', ['b'], ['y'], name='second', domain='my.domain')]
    model = make_model(nodes, [('x', TensorProto.FLOAT, [2])], [('y', TensorProto.FLOAT, [2])])
    model.opset_import.append(helper.make_opsetid('my.domain', 1))
    with pytest.raises(UnsupportedOperatorsError) as info:
        build_program(model, check=False)
    message = str(info.value)
    assert '2 node(s)' in message
    assert 'my.domain::FancyOp (opset version 1) in node(s) first' in message
    assert 'my.domain::OtherOp (opset version 1) in node(s) second' in message
    assert 'Relu' not in message


def test_opset_newer_than_onnx_knows_is_refused():
    model = make_model([helper.make_node('Relu', ['x'], ['y'])],
                       [('x', TensorProto.FLOAT, [2])], [('y', TensorProto.FLOAT, [2])],
                       opset=onnx.defs.onnx_opset_version() + 1)
    with pytest.raises(InvalidModelError, match='knows opsets up to'):
        build_program(model, check=False)


@pytest.mark.parametrize('opset', range(11, onnx.defs.onnx_opset_version() + 1))
def test_every_opset_from_11_compiles_and_runs(opset):
    axes = helper.make_tensor('axes', TensorProto.INT64, [1], [1])
    if opset < 13:
        reduce = helper.make_node('ReduceSum', ['h'], ['y'], axes=[1], keepdims=0)
        extra = []
    else:
        reduce = helper.make_node('ReduceSum', ['h', 'axes'], ['y'], keepdims=0)
        extra = [helper.make_node('Constant', [], ['axes'], value=axes)]
    model = make_model(extra + [helper.make_node('Softmax', ['x'], ['h'], axis=1), reduce],
                       [('x', TensorProto.FLOAT, [2, 3])], [('y', TensorProto.FLOAT, [2])],
                       opset=opset)
    y = Executor(build_program(model)).run({'x': numpy.ones((2, 3), numpy.float32)})['y']
    numpy.testing.assert_allclose(y, [1.0, 1.0], rtol=1e-6)


def test_constants_are_folded_and_dead_code_removed():
    nodes = [helper.make_node('Constant', [], ['two'], value_float=2.0),
             helper.make_node('Mul', ['two', 'two'], ['four']),
             helper.make_node('Mul', ['x', 'four'], ['y'], name='live'),
             helper.make_node('Exp', ['x'], ['unused'], name='dead')]
    model = make_model(nodes, [('x', TensorProto.FLOAT, [2])], [('y', TensorProto.FLOAT, [2])])
    program = build_program(model)
    assert [i.name for i in program.instructions] == ['live']
    assert Executor(program).run({'x': numpy.ones(2, numpy.float32)})['y'].tolist() == [4, 4]
    assert len(build_program(model, fold=False).instructions) == 3  # dead Exp still removed


def test_operators_without_kernel_expand_to_their_function_body(monkeypatch):
    # Pretend the VM lacks a Selu kernel: ONNX defines Selu as a function of
    # simpler operators, which the compiler must expand instead of failing.
    from chainer_compiler.runtime.ops import registry
    real = registry.has_kernel
    monkeypatch.setattr('chainer_compiler.passes.expand_functions.has_kernel',
                        lambda op, domain='', version=registry.LATEST:
                        op != 'Selu' and real(op, domain, version))
    # (ONNX gives Selu a function body from opset 18 on.)
    model = make_model([helper.make_node('Selu', ['x'], ['y'])],
                       [('x', TensorProto.FLOAT, [3])], [('y', TensorProto.FLOAT, [3])], opset=18)
    program = build_program(model)
    assert 'Selu' not in {i.op for i in program.instructions}
    x = numpy.array([-1.0, 0.0, 2.0], numpy.float32)
    alpha, gamma = 1.67326319217681884765625, 1.05070102214813232421875
    expected = numpy.where(x > 0, gamma * x, gamma * alpha * (numpy.exp(x) - 1))
    numpy.testing.assert_allclose(Executor(program).run({'x': x})['y'], expected, rtol=1e-6)


def test_loop_body_captures_outer_values():
    body = helper.make_graph(
        [helper.make_node('Add', ['v_in', 'step'], ['v_out']),
         helper.make_node('Identity', ['cond_in'], ['cond_out'])],
        'body',
        [helper.make_tensor_value_info('i', TensorProto.INT64, []),
         helper.make_tensor_value_info('cond_in', TensorProto.BOOL, []),
         helper.make_tensor_value_info('v_in', TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info('cond_out', TensorProto.BOOL, []),
         helper.make_tensor_value_info('v_out', TensorProto.FLOAT, [2])])
    model = make_model(
        [helper.make_node('Loop', ['n', '', 'v0'], ['v'], body=body)],
        [('n', TensorProto.INT64, []), ('v0', TensorProto.FLOAT, [2]),
         ('step', TensorProto.FLOAT, [2])], [('v', TensorProto.FLOAT, [2])])
    program = build_program(model)
    assert program.instructions[0].captures  # 'step' comes from the outer graph
    out = Executor(program).run({'n': numpy.array(3, numpy.int64),
                                 'v0': numpy.zeros(2, numpy.float32),
                                 'step': numpy.array([1, 2], numpy.float32)})['v']
    assert out.tolist() == [3, 6]

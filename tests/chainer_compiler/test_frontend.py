import numpy
import onnx
import pytest
from onnx import TensorProto, helper

from chainer_compiler import InvalidModelError, UnsupportedOperatorsError, build_program, load_onnx
from chainer_compiler.onnx_graph import tensor_signature
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


@pytest.mark.parametrize('check', [True, False])
def test_names_that_are_not_utf8_are_an_invalid_model(check):
    # Found by tests/test_fuzz.py: protobuf hands such a name over as bytes,
    # and the checker's message quoting it cannot be decoded.
    model = make_model([helper.make_node('Relu', ['x'], ['yy'])],
                       [('x', TensorProto.FLOAT, [2])], [('yy', TensorProto.FLOAT, [2])])
    blob = model.SerializeToString().replace(b'yy', b'\xcb\x07')
    with pytest.raises(InvalidModelError,
                       match=r"onnx.NodeProto.output b'\\xcb\\x07' is not UTF-8"):
        build_program(blob, check=check)


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


# -- hostile and malformed input --------------------------------------------
HUGE = 2 * 10 ** 8  # elements: 1.6 GB of int64 if anything materialised them


def _shape_bomb(op):
    """A ~150-byte model whose `op` makes a 1-D tensor of HUGE elements from
    a one-element constant, feeding an Add."""
    def const(name, value):
        return helper.make_node('Constant', [], [name], value=helper.make_tensor(
            name, TensorProto.INT64, [len(value)] if isinstance(value, list) else [], value
            if isinstance(value, list) else [value]))
    make = {
        'ConstantOfShape': [const('shape', [HUGE]),
                            helper.make_node('ConstantOfShape', ['shape'], ['big'])],
        'Expand': [const('shape', [HUGE]), const('one', [1]),
                   helper.make_node('Expand', ['one', 'shape'], ['big'])],
        'Range': [const('start', 0), const('limit', HUGE), const('delta', 1),
                  helper.make_node('Range', ['start', 'limit', 'delta'], ['big'])],
    }[op]
    elem = TensorProto.FLOAT if op == 'ConstantOfShape' else TensorProto.INT64
    return make_model(make + [helper.make_node('Add', ['big', 'x'], ['y'])],
                      [('x', elem, [1])], [('y', elem, [None])])


@pytest.mark.parametrize('op', ['ConstantOfShape', 'Expand', 'Range'])
def test_compile_memory_is_bounded_by_the_file_not_its_values(op):
    from tests.conftest import address_space_limit
    model = _shape_bomb(op)
    assert model.ByteSize() < 300
    with address_space_limit(512 << 20):
        program = build_program(model)
    # Too large to fold: computed at run time, where an allocation that
    # cannot succeed is an error naming the instruction.
    assert op in [i.op for i in program.instructions]


def test_small_shape_arithmetic_is_still_propagated():
    # Reshape's output shape is known only through the value of Shape(x).
    nodes = [helper.make_node('Shape', ['x'], ['s']),
             helper.make_node('Reshape', ['x', 's'], ['r']),
             helper.make_node('Relu', ['r'], ['y'])]
    model = make_model(nodes, [('x', TensorProto.FLOAT, [2, 3])],
                       [('y', TensorProto.FLOAT, [None, None])])
    inferred = {v.name: v for v in load_onnx(model).graph.value_info}
    assert tensor_signature(inferred['r'].type) == ('float32', (2, 3))


def test_shape_inference_never_reads_the_weights(monkeypatch):
    # ONNX's inference serialises every model it is given: the weights
    # would cost seconds a call on a large model.  A small initializer (a
    # Reshape's shape) is still read; the weights come back untouched.
    from onnx import numpy_helper, shape_inference
    weights = numpy.arange(4096, dtype=numpy.float32).reshape(64, 64)
    nodes = [helper.make_node('MatMul', ['x', 'w'], ['m']),
             helper.make_node('Reshape', ['m', 'shape'], ['r']),
             helper.make_node('Relu', ['r'], ['y'])]
    model = make_model(nodes, [('x', TensorProto.FLOAT, [2, 64])],
                       [('y', TensorProto.FLOAT, [None, None])],
                       [('w', weights), ('shape', numpy.array([8, 16], numpy.int64))])
    seen = []
    real = shape_inference.infer_shapes

    def recording(m, *args, **kwargs):
        seen.append({t.name for t in m.graph.initializer})
        return real(m, *args, **kwargs)
    monkeypatch.setattr(shape_inference, 'infer_shapes', recording)
    loaded = load_onnx(model)
    assert seen and all(names == {'shape'} for names in seen)
    inferred = {v.name: v for v in loaded.graph.value_info}
    assert tensor_signature(inferred['r'].type) == ('float32', (8, 16))
    assert tensor_signature(loaded.graph.output[0].type) == ('float32', (8, 16))
    [w] = [t for t in loaded.graph.initializer if t.name == 'w']
    numpy.testing.assert_array_equal(numpy_helper.to_array(w), weights)
    assert [i.name for i in loaded.graph.input] == ['x']


@pytest.mark.parametrize('model, message', [
    (b'\xff\x00garbage', 'the bytes given are not an ONNX model'),
    ([1.0, 2.0], 'expected an ONNX file path, bytes or an onnx.ModelProto, got list'),
    (None, 'got NoneType'),
])
def test_what_is_not_a_model_is_an_invalid_model(model, message):
    with pytest.raises(InvalidModelError, match=message):
        build_program(model)


def _with_external_weight(location):
    model = make_model([helper.make_node('Add', ['x', 'W'], ['y'])],
                       [('x', TensorProto.FLOAT, [2])], [('y', TensorProto.FLOAT, [2])],
                       [('W', numpy.ones(2, numpy.float32))])
    weight = model.graph.initializer[0]
    weight.ClearField('raw_data')
    weight.data_location = TensorProto.EXTERNAL
    entry = weight.external_data.add()
    entry.key, entry.value = 'location', location
    return model


@pytest.mark.parametrize('check', [True, False])
def test_external_data_of_an_in_memory_model_is_never_read(tmp_path, monkeypatch, check):
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'secret.bin').write_bytes(numpy.ones(2, numpy.float32).tobytes())
    with pytest.raises(InvalidModelError, match="'W' keeps its data in an external file"):
        build_program(_with_external_weight('secret.bin'), check=check)


@pytest.mark.parametrize('location', ['../secret.bin', 'link.bin', '/etc/hostname'])
@pytest.mark.parametrize('check', [True, False])
def test_external_data_outside_the_model_folder_is_refused(tmp_path, location, check):
    (tmp_path / 'secret.bin').write_bytes(numpy.ones(2, numpy.float32).tobytes())
    folder = tmp_path / 'model'
    folder.mkdir()
    (folder / 'link.bin').symlink_to(tmp_path / 'secret.bin')
    onnx.save(_with_external_weight(location), str(folder / 'model.onnx'))
    with pytest.raises(InvalidModelError, match='model.onnx is not a readable ONNX model'):
        build_program(str(folder / 'model.onnx'), check=check)


@pytest.mark.parametrize('check', [True, False])
def test_initializer_data_shorter_than_its_dims_is_refused(check):
    model = make_model([helper.make_node('Add', ['x', 'W'], ['y'])],
                       [('x', TensorProto.FLOAT, [4])], [('y', TensorProto.FLOAT, [4])],
                       [('W', numpy.ones(4, numpy.float32))])
    model.graph.initializer[0].raw_data = numpy.ones(3, numpy.float32).tobytes()
    with pytest.raises(InvalidModelError, match=r"initializer 'W' \(dims \[4\]\)"):
        build_program(model, check=check)


@pytest.mark.parametrize('declared, message', [
    ((TensorProto.INT32, [7, 7]), "output 'y' is declared int32 but computed as float32"),
    ((TensorProto.FLOAT, [7, 64]),
     r"output 'y' is declared with shape \[7, 64\] but computed with shape \[2, 64\]"),
    ((TensorProto.FLOAT, [2, 64, 1]), r'declared with shape \[2, 64, 1\]'),
])
def test_declared_outputs_must_agree_with_the_graph(declared, message):
    model = make_model([helper.make_node('Relu', ['x'], ['y'])],
                       [('x', TensorProto.FLOAT, [2, 64])], [('y',) + declared])
    with pytest.raises(InvalidModelError, match=message):
        build_program(model)


def test_declared_outputs_may_be_less_specific_than_the_graph():
    model = make_model([helper.make_node('Relu', ['x'], ['y'])],
                       [('x', TensorProto.FLOAT, ['N', 64])],
                       [('y', TensorProto.FLOAT, ['N', None])])
    program = build_program(model)
    assert program.outputs[0].shape == ('N', 64)  # inference fills in what is left open


def _nested_functions(levels, calls=2):
    """A model whose local function f<k> calls f<k-1> ``calls`` times (f0
    is one Relu): inlined, it has calls^(levels-1) nodes."""
    opsets = [helper.make_opsetid('', 17), helper.make_opsetid('local', 1)]
    functions = [helper.make_function('local', 'f0', ['x'], ['y'],
                                      [helper.make_node('Relu', ['x'], ['y'])], opsets)]
    for k in range(1, levels):
        names = ['x'] + ['t%d' % i for i in range(calls - 1)] + ['y']
        functions.append(helper.make_function('local', 'f%d' % k, ['x'], ['y'], [
            helper.make_node('f%d' % (k - 1), [a], [b], domain='local')
            for a, b in zip(names, names[1:])], opsets))
    graph = helper.make_graph(
        [helper.make_node('f%d' % (levels - 1), ['x'], ['y'], domain='local')], 'g',
        [helper.make_tensor_value_info('x', TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, [2])])
    return helper.make_model(graph, functions=functions, opset_imports=opsets)


def test_inlining_is_bounded_by_the_file_before_it_starts():
    # 1.5 KB; inlined it was 262,144 nodes (15 s, 600 MB), one level more 104 s.
    model = _nested_functions(19)
    assert model.ByteSize() < 1600
    with pytest.raises(InvalidModelError, match=(
            r"more than 10000 nodes \(100 per node of the file, which has 38\); "
            r"function 'local::f14' alone expands to 16384")):
        load_onnx(model)
    # check=False skips onnx.checker, not this bound; 400 nodes allow 40,000.
    with pytest.raises(InvalidModelError, match="'local::f16' alone expands to 65536"):
        load_onnx(_nested_functions(200), check=False)


@pytest.mark.slow
def test_functions_called_many_times_still_inline():
    # A function of 100 nodes called at 100 places: 10,000 nodes from 200.
    model = _nested_functions(3, calls=100)
    assert len(load_onnx(model).graph.node) == 10_000
    numpy.testing.assert_array_equal(
        Executor(build_program(model)).run({'x': numpy.array([-1, 2], numpy.float32)})['y'],
        [0, 2])


def test_a_function_calling_itself_is_refused_before_inlining():
    opsets = [helper.make_opsetid('', 17), helper.make_opsetid('local', 1)]
    f = helper.make_function('local', 'f', ['x'], ['y'],
                             [helper.make_node('f', ['x'], ['y'], domain='local')], opsets)
    graph = helper.make_graph(
        [helper.make_node('f', ['x'], ['y'], domain='local')], 'g',
        [helper.make_tensor_value_info('x', TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, functions=[f], opset_imports=opsets)
    with pytest.raises(InvalidModelError, match="'local::f' calls 'local::f'"):
        load_onnx(model, check=False)

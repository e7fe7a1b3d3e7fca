"""Gradient rules on values whose shapes are known only at run time.

Each graph declares its inputs with symbolic dimensions (strings), as ch2o
exports run-time lengths; the rules then take their run-time forms (Shape
nodes, run-time axes, scatter-adds), checked against central differences.
Also the training forms of Loop bodies ch2o exports: their types (inferred
with the outer constants they read) and their Dropouts.
"""
import numpy
import pytest
from onnx import TensorProto, helper, numpy_helper

from chainer_compiler.autodiff import GradientError
from chainer_compiler.onnx_graph import value_types
from chainer_compiler.passes.training_mode import to_training_mode
from chainer_compiler.passes.type_inference import infer_with_outer_constants
from chainer_compiler.runtime import Executor
from chainer_compiler.shapes import infer_shapes
from chainer_compiler.training import compile_inference

from .test_sequence_gradients import check_gradients, i64, rand, sequence, tensor

D = TensorProto.DOUBLE


def symbolic_model(nodes, inputs, constants=None, outputs=('y',), opset=17):
    """A model of ``nodes`` over ``inputs`` ({name: dims}, a dimension a
    str when known only at run time; float64) with ``constants`` ({name:
    array}) as initializers."""
    graph = helper.make_graph(
        nodes, 'dynamic', [tensor(k, list(dims)) for k, dims in inputs.items()],
        [tensor(o) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in (constants or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', opset)])
    model.ir_version = 8
    return model


def backward_ops(programs):
    return {n.op_type for n in programs.backward_onnx.graph.node}


def check_node(op, dims, values, constants=None, node_inputs=None, **attrs):
    """One ``op`` node over inputs of symbolic ``dims`` ({name: dims}), its
    gradients for every input checked at ``values`` ({name: array});
    returns the training programs."""
    names = node_inputs or list(dims) + list(constants or {})
    model = symbolic_model([helper.make_node(op, names, ['y'], **attrs)], dims, constants)
    return check_gradients(model, values, list(dims))


# -- undoing broadcasts (BackwardBuilder.sum_to) ------------------------------
def test_add_broadcast_decided_at_run_time():
    # 'm' may be 1 or 'n': only the run-time shape of b tells whether its
    # rows were broadcast.
    programs = check_node('Add', {'a': ['n', 'k'], 'b': ['m', 'k']},
                          {'a': rand(3, 2), 'b': rand(1, 2)})
    assert 'Compress' in backward_ops(programs)
    check_node('Add', {'a': ['n', 'k'], 'b': ['m', 'k']}, {'a': rand(3, 2), 'b': rand(3, 2)})


def test_mul_broadcast_decided_statically():
    # A static 1 is broadcast, a leading axis summed away, a dimension
    # equal by name is not broadcast: no run-time decision.
    model = symbolic_model([helper.make_node('Mul', ['a', 'b'], ['t']),
                            helper.make_node('Add', ['t', 'c'], ['y'])],
                           {'a': ['n', 'k', 3], 'b': [1, 3], 'c': ['n', 'k', 3]})
    programs = check_gradients(model, {'a': rand(2, 4, 3), 'b': rand(1, 3),
                                       'c': rand(2, 4, 3)}, ['a', 'b', 'c'])
    assert 'Compress' not in backward_ops(programs)


def test_expand_from_run_time_shape():
    model = symbolic_model([helper.make_node('Shape', ['r'], ['s']),
                            helper.make_node('Expand', ['x', 's'], ['e']),
                            helper.make_node('Mul', ['e', 'r'], ['y'])],
                           {'x': [1, 'k'], 'r': ['n', 'k']})
    check_gradients(model, {'x': rand(1, 3), 'r': rand(4, 3)}, ['x', 'r'])


def test_where():
    model = symbolic_model([helper.make_node('Greater', ['a', 'b'], ['c']),
                            helper.make_node('Where', ['c', 'a', 'b'], ['y'])],
                           {'a': ['n', 'k'], 'b': ['m', 'k']})
    check_gradients(model, {'a': rand(3, 2), 'b': rand(1, 2)}, ['a', 'b'])


def test_gemm_bias():
    check_node('Gemm', {'a': ['n', 3], 'w': [3, 2], 'c': [2]},
               {'a': rand(4, 3), 'w': rand(3, 2), 'c': rand(2)})


@pytest.mark.parametrize('a,w,values', [
    (['b', 'n', 3], [3, 2], (rand(2, 4, 3), rand(3, 2))),  # one Gemm over the rows
    (['b', 'n', 'k'], ['k', 2], (rand(2, 4, 3), rand(3, 2))),
    (['b', 'n', 3], ['c', 3, 2], (rand(2, 4, 3), rand(1, 3, 2))),  # broadcast batch
    (['k'], ['b', 'k', 2], (rand(3), rand(2, 3, 2))),
    (['b', 'n', 'k'], ['k'], (rand(2, 4, 3), rand(3))),
])
def test_matmul(a, w, values):
    check_node('MatMul', {'a': a, 'w': w}, dict(zip('aw', values)))


def test_layer_norm_bias():
    check_node('LayerNormalization', {'x': ['n', 3], 's': [3], 'c': [3]},
               {'x': rand(4, 3), 's': rand(3), 'c': rand(3)})


# -- reshapes, joins and splits -------------------------------------------------
@pytest.mark.parametrize('op,attrs,constants', [
    ('Flatten', {'axis': 1}, None),
    ('Reshape', {}, {'s': i64([-1])}),
    ('Unsqueeze', {}, {'axes': i64([1])}),
])
def test_reshapes(op, attrs, constants):
    programs = check_node(op, {'x': ['n', 2, 3]}, {'x': rand(4, 2, 3)}, constants, **attrs)
    assert 'Shape' in backward_ops(programs)


def test_concat_sizes_at_run_time():
    programs = check_node('Concat', {'a': ['n', 2], 'b': ['m', 2]},
                          {'a': rand(3, 2), 'b': rand(2, 2)}, axis=0)
    assert 'Split' in backward_ops(programs)


def test_split_and_concat_again():
    model = symbolic_model([helper.make_node('Split', ['x', 'sizes'], ['p', 'q'], axis=1),
                            helper.make_node('Mul', ['p', 'q'], ['y'])],
                           {'x': ['n', 4]}, {'sizes': i64([2, 2])})
    check_gradients(model, {'x': rand(3, 4)}, ['x'])


# -- data movements (scatter-added back at run time) ------------------------
def test_slice():
    programs = check_node('Slice', {'x': ['n', 'k']}, {'x': rand(5, 4)},
                          {'starts': i64([1, 0]), 'ends': i64([4, 3]),
                           'axes': i64([0, 1]), 'steps': i64([2, 1])})
    assert 'ScatterElements' in backward_ops(programs)


def test_gather_repeated_indices():
    check_node('Gather', {'x': ['n', 3]}, {'x': rand(4, 3)}, {'i': i64([2, 0, 2])}, axis=0)


def test_gather_elements():
    check_node('GatherElements', {'x': [2, 'n']}, {'x': rand(2, 3)},
               {'i': i64([[0, 2, 2], [1, 1, 0]])}, axis=1)


def test_gather_nd():
    check_node('GatherND', {'x': ['n', 3]}, {'x': rand(4, 3)}, {'i': i64([[1, 2], [3, 0]])})


def test_compress():
    check_node('Compress', {'x': ['n', 3]}, {'x': rand(4, 3)},
               {'c': numpy.array([True, False, True])}, axis=1)


@pytest.mark.parametrize('mode', ['constant', 'edge', 'reflect'])
def test_pad(mode):
    check_node('Pad', {'x': ['n', 3]}, {'x': rand(4, 3)}, {'pads': i64([1, 2, 2, 1])},
               mode=mode)


# -- reductions ------------------------------------------------------------------
@pytest.mark.parametrize('op', ['ReduceSum', 'ReduceMean', 'ReduceMax', 'ReduceL2'])
def test_reductions(op):
    model = symbolic_model([helper.make_node(op, ['x', 'axes'], ['y'], keepdims=0)],
                           {'x': ['n', 3, 'k']}, {'axes': i64([0, 2])}, opset=18)
    check_gradients(model, {'x': rand(2, 3, 4)}, ['x'])


# -- convolution -----------------------------------------------------------------
@pytest.mark.parametrize('strides,pads', [([1, 1], [0, 0, 0, 0]), ([1, 1], [0, 1, 2, 1]),
                                          ([2, 2], [1, 0, 0, 1])])
def test_conv_run_time_image_size(strides, pads):
    # With strides 2, the last input row and column are never reached: the
    # input gradient is padded back to the run-time size.
    check_node('Conv', {'x': ['b', 2, 'h', 'w'], 'w': [3, 2, 2, 2], 'bias': [3]},
               {'x': rand(1, 2, 5, 4), 'w': rand(3, 2, 2, 2), 'bias': rand(3)},
               strides=strides, pads=pads)


# -- what needs a rank ----------------------------------------------------------
def test_unknown_rank_is_named():
    model = symbolic_model([helper.make_node('Flatten', ['x'], ['y'])], {'x': ['n', 3]})
    model.graph.input[0].type.tensor_type.ClearField('shape')
    with pytest.raises(GradientError, match=r'rank of x \(read by Flatten y\) is unknown'):
        check_gradients(model, {'x': rand(2, 3)}, ['x'])


def test_elements_of_one_sequence_differ_in_size():
    # Inference gives both elements the sequence's dimension name; the
    # backward program, which retains both, must not take them as equal.
    model = symbolic_model(
        [helper.make_node('SequenceAt', ['s', 'zero'], ['a']),
         helper.make_node('SequenceAt', ['s', 'one'], ['c']),
         helper.make_node('Mul', ['a', 'a'], ['a2']),
         helper.make_node('Mul', ['c', 'c'], ['c2']),
         helper.make_node('Concat', ['a2', 'c2'], ['y'], axis=0)],
        {}, {'zero': i64(0), 'one': i64(1)})
    model.graph.input.append(sequence('s', ['n']))
    check_gradients(model, {'s': [rand(1), rand(3)]}, ['s'])


# -- types inside Loop bodies ------------------------------------------------------
def _loop_model():
    """A Loop whose body unsqueezes by an outer constant (inference knows
    the body's ranks only with it) and carries a value of run-time length."""
    body = helper.make_graph(
        [helper.make_node('Unsqueeze', ['w', 'axes'], ['u']),
         helper.make_node('Mul', ['h', 'u'], ['h2']),
         helper.make_node('Identity', ['cond'], ['cond_out'])],
        'body', [tensor('i', [], TensorProto.INT64), tensor('cond', [], TensorProto.BOOL),
                 tensor('h', ['n', 3])],
        [tensor('cond_out', [], TensorProto.BOOL), tensor('h2', ['m', 3])])
    trips = numpy.array(2, numpy.int64)
    loop = helper.make_node('Loop', ['trips', '', 'x'], ['y'], body=body)
    model = symbolic_model([loop], {'x': ['n', 3], 'w': [3]},
                           {'trips': trips, 'axes': i64([0])})
    return model


def test_loop_body_sees_outer_constants():
    model = _loop_model()
    inferred = infer_with_outer_constants(model, infer_shapes)
    body = inferred.graph.node[0].attribute[0].g
    assert value_types(body)['u'][1] == (1, 3)
    assert [t.name for t in body.initializer] == []  # the copies are gone


def test_loop_over_run_time_lengths():
    check_gradients(_loop_model(), {'x': rand(4, 3), 'w': rand(3)}, ['x', 'w'])


# -- Dropout in a Loop body under training --------------------------------------
def _dropout_loop(ratio):
    """A Loop of one iteration whose body drops out the outer ``x``."""
    body = helper.make_graph(
        [helper.make_node('Dropout', ['x', 'ratio'], ['d']),
         helper.make_node('Identity', ['cond'], ['cond_out'])],
        'body', [tensor('i', [], TensorProto.INT64), tensor('cond', [], TensorProto.BOOL)],
        [tensor('cond_out', [], TensorProto.BOOL), tensor('d', ['n'])])
    loop = helper.make_node('Loop', ['trips', ''], ['y'], body=body)
    return symbolic_model([loop], {'x': ['n']},
                          {'trips': numpy.array(1, numpy.int64), 'ratio': numpy.array(ratio)})


def test_dropout_in_loop_body_becomes_random():
    model = _dropout_loop(0.5)
    to_training_mode(model)
    body = model.graph.node[0].attribute[0].g
    assert [n.op_type for n in body.node] == ['DropoutTraining', 'Identity']
    y, = Executor(compile_inference(model, check=False), backend='numpy').run_positional(
        [numpy.ones(400)])
    assert set(numpy.unique(y)) == {0.0, 2.0}  # dropped, or scaled by 1 / (1 - 0.5)


def test_dropout_of_ratio_zero_in_loop_body_stays():
    model = _dropout_loop(0.0)
    to_training_mode(model)
    assert [n.op_type for n in model.graph.node[0].attribute[0].g.node] == \
        ['Dropout', 'Identity']

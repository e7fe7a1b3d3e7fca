"""Gradient rules of the sequence family, checked against central
differences; inputs and outputs may be sequences (Python lists of arrays)."""
import numpy
import pytest
from onnx import TensorProto, helper, numpy_helper

from chainer_compiler.autodiff import differentiable_ops
from chainer_compiler.runtime import Executor
from chainer_compiler.training import compile_training

RNG = numpy.random.RandomState(0)
D = TensorProto.DOUBLE


def rand(*shape):
    return RNG.standard_normal(shape)


def tensor(name, shape=None, elem=D):
    return helper.make_tensor_value_info(name, elem, shape)


def sequence(name, shape=None, elem=D):
    return helper.make_tensor_sequence_value_info(name, elem, shape)


def info_of(name, value):
    """A graph input ValueInfo for ``value``: a list is a sequence of
    float64, whose element shape is declared when all elements share it."""
    if isinstance(value, list):
        shapes = {e.shape for e in value}
        return sequence(name, list(shapes.pop()) if len(shapes) == 1 else None)
    return tensor(name, list(value.shape), helper.np_dtype_to_tensor_dtype(value.dtype))


def model_of(nodes, inputs, outputs, constants=None, opset=17):
    """A model of ``nodes`` over ``inputs`` ({name: array or list});
    ``outputs`` are ValueInfos, ``constants`` ({name: array}) initializers."""
    graph = helper.make_graph(nodes, 'test', [info_of(k, v) for k, v in inputs.items()],
                              outputs, [numpy_helper.from_array(v, k)
                                        for k, v in (constants or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', opset)])
    model.ir_version = 8
    return model


def _elements(value):
    return value if isinstance(value, list) else [value]


def check_gradients(model, inputs, wrt, eps=1e-6, rtol=1e-5, atol=1e-6):
    """Compile ``model`` for training; compare the gradients of
    sum(outputs * random upstream) for ``wrt`` (tensors or sequences, whose
    gradients are lists) with central differences.  Returns the programs."""
    programs = compile_training(model, wrt=wrt, check=False)
    forward = Executor(programs.forward, backend='numpy')
    backward = Executor(programs.backward, backend='numpy')
    rng = numpy.random.RandomState(1)
    names = [v.name for v in programs.forward.inputs]

    def run(values):
        return dict(zip([v.name for v in programs.forward.outputs],
                        forward.run_positional([values[n] for n in names])))

    outs = run(inputs)
    upstream = {n: [rng.standard_normal(e.shape) for e in _elements(outs[n])]
                for n in programs.outputs}

    def objective(values):
        result = run(values)
        return sum(float(numpy.sum(e * u)) for n in programs.outputs
                   for e, u in zip(_elements(result[n]), upstream[n]))

    seeds = [upstream[n] if isinstance(outs[n], list) else upstream[n][0]
             for n in programs.grad_of_outputs]
    grads = dict(zip(programs.grads_for, backward.run_positional(
        seeds + [outs[r] for r in programs.retained])))
    assert sorted(grads) == sorted(wrt)
    for name in wrt:
        value = inputs[name]
        assert isinstance(grads[name], list) == isinstance(value, list), name
        for k, (x, grad) in enumerate(zip(_elements(value), _elements(grads[name]))):
            numeric = numpy.zeros_like(x)
            for index in numpy.ndindex(x.shape):
                for sign in (1, -1):
                    bumped = x.copy()
                    bumped[index] += sign * eps
                    shifted = list(value) if isinstance(value, list) else bumped
                    if isinstance(value, list):
                        shifted[k] = bumped
                    numeric[index] += sign * objective(dict(inputs, **{name: shifted})) / (2 * eps)
            numpy.testing.assert_allclose(grad, numeric, rtol=rtol, atol=atol,
                                          err_msg='gradient of %s[%d]' % (name, k))
        assert len(_elements(grads[name])) == len(_elements(value))
    return programs


def i64(value):
    return numpy.asarray(value, numpy.int64)


def seq_of(*shapes):
    return [rand(*s) for s in shapes]


def test_sequence_construct():
    inputs = {'a': rand(2, 3), 'b': rand(4), 'c': rand(2, 3)}
    model = model_of([helper.make_node('SequenceConstruct', ['a', 'b', 'c'], ['s'])],
                     inputs, [sequence('s')])
    check_gradients(model, inputs, ['a', 'b', 'c'])


@pytest.mark.parametrize('position', [None, 0, 1, 3, -1, -3])
def test_sequence_insert(position):
    inputs = {'s': seq_of((2,), (3,), (1,)), 't': rand(5)}
    constants = {} if position is None else {'p': i64(position)}
    model = model_of([helper.make_node('SequenceInsert', ['s', 't'] + list(constants), ['y'])],
                     inputs, [sequence('y')], constants)
    check_gradients(model, inputs, ['s', 't'])


def test_sequence_empty_then_inserts():
    inputs = {'a': rand(2), 'b': rand(3)}
    model = model_of([helper.make_node('SequenceEmpty', [], ['e'], dtype=D),
                      helper.make_node('SequenceInsert', ['e', 'a'], ['s1']),
                      helper.make_node('SequenceInsert', ['s1', 'b', 'zero'], ['s2'])],
                     inputs, [sequence('s2')], {'zero': i64(0)})
    check_gradients(model, inputs, ['a', 'b'])


@pytest.mark.parametrize('position', [0, 2, -1, -3])
def test_sequence_at(position):
    inputs = {'s': seq_of((2, 2), (3,), (1, 4))}
    model = model_of([helper.make_node('SequenceAt', ['s', 'p'], ['y'])],
                     inputs, [tensor('y')], {'p': i64(position)})
    check_gradients(model, inputs, ['s'])


def test_gradients_of_a_sequence_read_twice_add_up():
    # Two reads of element 1 and one of element 0: the element-wise sum.
    inputs = {'s': seq_of((3,), (3,))}
    model = model_of([helper.make_node('SequenceAt', ['s', 'one'], ['a']),
                      helper.make_node('SequenceAt', ['s', 'minus_one'], ['b']),
                      helper.make_node('SequenceAt', ['s', 'zero'], ['c']),
                      helper.make_node('Mul', ['a', 'b'], ['ab']),
                      helper.make_node('Add', ['ab', 'c'], ['y'])],
                     inputs, [tensor('y')],
                     {'one': i64(1), 'minus_one': i64(-1), 'zero': i64(0)})
    check_gradients(model, inputs, ['s'])


@pytest.mark.parametrize('position', [None, 0, 1, -1, -3])
def test_sequence_erase(position):
    inputs = {'s': seq_of((2,), (3,), (4,))}
    constants = {} if position is None else {'p': i64(position)}
    model = model_of([helper.make_node('SequenceErase', ['s'] + list(constants), ['y'])],
                     inputs, [sequence('y')], constants)
    check_gradients(model, inputs, ['s'])


@pytest.mark.parametrize('axis, shapes', [
    (0, [(1, 3), (2, 3), (3, 3)]), (1, [(2, 1), (2, 2), (2, 3)]), (-1, [(2, 2), (2, 1)])])
def test_concat_from_sequence(axis, shapes):
    inputs = {'s': seq_of(*shapes)}
    model = model_of([helper.make_node('ConcatFromSequence', ['s'], ['y'], axis=axis)],
                     inputs, [tensor('y')])
    check_gradients(model, inputs, ['s'])


@pytest.mark.parametrize('axis', [0, 1, 2, -1, -3])
def test_concat_from_sequence_new_axis(axis):
    inputs = {'s': seq_of((2, 3), (2, 3), (2, 3), (2, 3))}
    model = model_of([helper.make_node('ConcatFromSequence', ['s'], ['y'], axis=axis,
                                       new_axis=1)], inputs, [tensor('y')])
    check_gradients(model, inputs, ['s'])


@pytest.mark.parametrize('split, axis, keepdims', [
    (None, 0, 1), (None, 1, 0), (None, -1, 0), (2, 1, 1), ([1, 3], 1, 1), ([2, 1, 1], -2, 1)])
def test_split_to_sequence(split, axis, keepdims):
    inputs = {'x': rand(4, 4, 2)}
    constants = {} if split is None else {'split': i64(split)}
    model = model_of([helper.make_node('SplitToSequence', ['x'] + list(constants), ['s'],
                                       axis=axis, keepdims=keepdims)],
                     inputs, [sequence('s')], constants)
    check_gradients(model, inputs, ['x'])


def test_sequence_length_and_empty_have_no_gradient():
    assert {'SequenceLength', 'SequenceEmpty'} <= set(differentiable_ops()['none'])
    # A length scaling a value: the gradient flows through the value only.
    inputs = {'s': seq_of((2,), (2,), (2,))}
    model = model_of([helper.make_node('SequenceLength', ['s'], ['n']),
                      helper.make_node('Cast', ['n'], ['nf'], to=D),
                      helper.make_node('SequenceAt', ['s', 'one'], ['c']),
                      helper.make_node('Mul', ['c', 'nf'], ['y'])],
                     inputs, [tensor('y')], {'one': i64(1)})
    check_gradients(model, inputs, ['s'])

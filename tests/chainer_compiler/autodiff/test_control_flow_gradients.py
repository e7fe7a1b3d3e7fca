"""Gradient rules of Loop and If, checked against central differences:
carried values, scan outputs, outer-scope values read by bodies and
branches, static, dynamic and condition-ended trip counts, lists."""
import numpy
import pytest
from onnx import TensorProto, helper

from chainer_compiler.autodiff import GradientError

from .test_sequence_gradients import check_gradients, i64, model_of, rand, sequence, tensor

D, I64, BOOL = TensorProto.DOUBLE, TensorProto.INT64, TensorProto.BOOL


def body_graph(nodes, carried, outputs, name='body'):
    """A Loop body: iteration number 'i', condition 'c_in', then the
    ``carried`` ValueInfos; outputs 'c_out' then ``outputs``."""
    return helper.make_graph(nodes, name, [tensor('i', [], I64), tensor('c_in', [], BOOL)]
                             + carried, [tensor('c_out', [], BOOL)] + outputs)


def rnn_body(extra_nodes=(), cond='c_in'):
    """h_out = tanh(h_in W + b); also emits the scan output s = h_out * h_out;
    the condition output is ``cond`` (made by ``extra_nodes``, or c_in)."""
    return body_graph(
        [helper.make_node('MatMul', ['h_in', 'W'], ['hw']),
         helper.make_node('Add', ['hw', 'b'], ['z']),
         helper.make_node('Tanh', ['z'], ['h_out']),
         helper.make_node('Mul', ['h_out', 'h_out'], ['s'])] + list(extra_nodes)
        + [helper.make_node('Identity', [cond], ['c_out'])],
        [tensor('h_in', [2, 3])], [tensor('h_out', [2, 3]), tensor('s', [2, 3])])


def rnn_inputs(**more):
    return dict({'h0': rand(2, 3), 'W': rand(3, 3) * 0.6, 'b': rand(3)}, **more)


@pytest.mark.parametrize('trips', [0, 1, 4])
def test_loop_dynamic_trip_count(trips):
    inputs = rnn_inputs(T=i64(trips))
    model = model_of([helper.make_node('Loop', ['T', '', 'h0'], ['h', 'hs'], body=rnn_body())],
                     inputs, [tensor('h', [2, 3]), tensor('hs')])
    check_gradients(model, inputs, ['h0', 'W', 'b'])


def test_loop_static_trip_count_and_only_the_scan_output_used():
    inputs = rnn_inputs()
    model = model_of([helper.make_node('Loop', ['T', 'yes', 'h0'], ['h', 'hs'], body=rnn_body())],
                     inputs, [tensor('hs')], {'T': i64(3), 'yes': numpy.asarray(True)})
    check_gradients(model, inputs, ['h0', 'W', 'b'])


def test_loop_ended_by_its_condition():
    # Runs while i + 1 < limit (no trip count): limit - 1 iterations, at least one.
    body = rnn_body([helper.make_node('Add', ['i', 'one'], ['next']),
                     helper.make_node('Less', ['next', 'limit'], ['go'])], cond='go')
    inputs = rnn_inputs(limit=i64(4))
    model = model_of([helper.make_node('Loop', ['', 'yes', 'h0'], ['h', 'hs'], body=body)],
                     inputs, [tensor('h', [2, 3]), tensor('hs')],
                     {'one': i64(1), 'yes': numpy.asarray(True)})
    programs = check_gradients(model, inputs, ['h0', 'W', 'b'])
    assert any(n.op_type == 'Loop' for n in programs.backward_onnx.graph.node)


def test_loop_reading_its_iteration_number_and_an_int_carried_value():
    # h_out = tanh(h_in * W[k]) with k an int64 counter carried beside h.
    body = body_graph(
        [helper.make_node('Identity', ['c_in'], ['c_out']),
         helper.make_node('Gather', ['W', 'k_in'], ['row'], axis=0),
         helper.make_node('Cast', ['i'], ['fi'], to=D),
         helper.make_node('Mul', ['h_in', 'row'], ['hr']),
         helper.make_node('Add', ['hr', 'fi'], ['z']),
         helper.make_node('Tanh', ['z'], ['h_out']),
         helper.make_node('Add', ['k_in', 'one'], ['k_out'])],
        [tensor('h_in', [3]), tensor('k_in', [], I64)],
        [tensor('h_out', [3]), tensor('k_out', [], I64)])
    inputs = {'h0': rand(3), 'W': rand(4, 3), 'T': i64(3)}
    model = model_of([helper.make_node('Loop', ['T', '', 'h0', 'k0'], ['h', 'k'], body=body)],
                     inputs, [tensor('h', [3])], {'one': i64(1), 'k0': i64(1)})
    check_gradients(model, inputs, ['h0', 'W'])


def test_loop_appending_to_a_list():
    # ys = []; for t in range(T): h = tanh(h W + b); ys.append(h)  ->  stack(ys)
    body = rnn_body([helper.make_node('SequenceInsert', ['ys_in', 'h_out'], ['ys_out'])])
    body.input.append(sequence('ys_in', [2, 3]))
    body.output.insert(2, sequence('ys_out', [2, 3]))
    inputs = rnn_inputs(T=i64(3))
    model = model_of([helper.make_node('SequenceEmpty', [], ['ys0'], dtype=D),
                      helper.make_node('Loop', ['T', '', 'h0', 'ys0'], ['h', 'ys', 'hs'],
                                       body=body),
                      helper.make_node('ConcatFromSequence', ['ys'], ['y'], axis=0, new_axis=1)],
                     inputs, [tensor('y')])
    check_gradients(model, inputs, ['h0', 'W', 'b'])


def test_loop_over_the_elements_of_an_outer_list():
    # for x in xs: h = tanh(h W + x)  (the body reads xs[i] from the outer scope)
    body = body_graph(
        [helper.make_node('Identity', ['c_in'], ['c_out']),
         helper.make_node('SequenceAt', ['xs', 'i'], ['x']),
         helper.make_node('MatMul', ['h_in', 'W'], ['hw']),
         helper.make_node('Add', ['hw', 'x'], ['z']),
         helper.make_node('Tanh', ['z'], ['h_out'])],
        [tensor('h_in', [2, 3])], [tensor('h_out', [2, 3])])
    inputs = {'xs': [rand(2, 3) for _ in range(3)], 'h0': rand(2, 3), 'W': rand(3, 3) * 0.6}
    model = model_of([helper.make_node('SequenceLength', ['xs'], ['n']),
                      helper.make_node('Loop', ['n', '', 'h0'], ['h'], body=body)],
                     inputs, [tensor('h', [2, 3])])
    check_gradients(model, inputs, ['xs', 'h0', 'W'])


def test_nested_loops():
    inner = body_graph(
        [helper.make_node('Identity', ['c_in2'], ['c_out2']),
         helper.make_node('MatMul', ['g_in', 'W'], ['gw']),
         helper.make_node('Tanh', ['gw'], ['g_out'])],
        [tensor('g_in', [3])], [tensor('g_out', [3])], name='inner')
    inner.input[0].name, inner.input[1].name, inner.output[0].name = 'j', 'c_in2', 'c_out2'
    outer = body_graph(
        [helper.make_node('Identity', ['c_in'], ['c_out']),
         helper.make_node('Loop', ['two', '', 'h_in'], ['g'], body=inner),
         helper.make_node('Add', ['g', 'h_in'], ['h_out'])],
        [tensor('h_in', [3])], [tensor('h_out', [3])], name='outer')
    inputs = {'h0': rand(3), 'W': rand(3, 3) * 0.6, 'T': i64(2)}
    model = model_of([helper.make_node('Loop', ['T', '', 'h0'], ['h'], body=outer)],
                     inputs, [tensor('h', [3])], {'two': i64(2)})
    check_gradients(model, inputs, ['h0', 'W'])


def test_loop_whose_backward_would_redraw_random_numbers_is_refused():
    # h_out = dropout(tanh(h_in W + b)): recomputing it would draw a new mask.
    body = body_graph(
        [helper.make_node('MatMul', ['h_in', 'W'], ['hw']),
         helper.make_node('Tanh', ['hw'], ['t']),
         helper.make_node('Dropout', ['t', 'ratio', 'train'], ['h_out']),
         helper.make_node('Identity', ['c_in'], ['c_out'])],
        [tensor('h_in', [2, 3])], [tensor('h_out', [2, 3])])
    inputs = rnn_inputs(T=i64(2))
    del inputs['b']
    model = model_of([helper.make_node('Loop', ['T', '', 'h0'], ['h'], body=body)],
                     inputs, [tensor('h', [2, 3])],
                     {'ratio': numpy.asarray(0.5), 'train': numpy.asarray(True)})
    with pytest.raises(GradientError, match=r'Loop node h: .*random numbers \(Dropout\)'):
        check_gradients(model, inputs, ['W'])


def test_if_whose_backward_would_redraw_random_numbers_is_refused():
    then_branch = helper.make_graph(
        [helper.make_node('RandomNormalLike', ['x'], ['noise']),
         helper.make_node('Mul', ['x', 'noise'], ['t'])], 'then', [], [tensor('t', [3])])
    else_branch = helper.make_graph([helper.make_node('Neg', ['x'], ['e'])], 'else', [],
                                    [tensor('e', [3])])
    inputs = {'p': numpy.asarray(True), 'x': rand(3)}
    model = model_of([helper.make_node('If', ['p'], ['y'], then_branch=then_branch,
                                       else_branch=else_branch)], inputs, [tensor('y', [3])])
    with pytest.raises(GradientError, match=r'If node y: .*random numbers \(RandomNormalLike\)'):
        check_gradients(model, inputs, ['x'])


def if_model(inputs):
    """y = If(p, then: tanh(x W), else: x * s) (both read outer values)."""
    then_branch = helper.make_graph(
        [helper.make_node('MatMul', ['x', 'W'], ['xw']), helper.make_node('Tanh', ['xw'], ['t'])],
        'then', [], [tensor('t', [2, 3])])
    else_branch = helper.make_graph([helper.make_node('Mul', ['x', 's'], ['e'])],
                                    'else', [], [tensor('e', [2, 3])])
    return model_of([helper.make_node('If', ['p'], ['y'], then_branch=then_branch,
                                      else_branch=else_branch)],
                    inputs, [tensor('y', [2, 3])])


@pytest.mark.parametrize('taken', [True, False])
def test_if_both_branches(taken):
    inputs = {'p': numpy.asarray(taken), 'x': rand(2, 3), 'W': rand(3, 3), 's': rand(2, 3)}
    programs = check_gradients(if_model(inputs), inputs, ['x', 'W', 's'])
    assert [n.op_type for n in programs.backward_onnx.graph.node].count('If') == 1


def test_if_inside_a_loop():
    # h = h W if i is even else -h, three times.
    then_branch = helper.make_graph([helper.make_node('MatMul', ['h_in', 'W'], ['t'])], 'then',
                                    [], [tensor('t', [3])])
    else_branch = helper.make_graph([helper.make_node('Neg', ['h_in'], ['e'])], 'else',
                                    [], [tensor('e', [3])])
    body = body_graph(
        [helper.make_node('Identity', ['c_in'], ['c_out']),
         helper.make_node('Mod', ['i', 'two'], ['r']),
         helper.make_node('Equal', ['r', 'zero'], ['even']),
         helper.make_node('If', ['even'], ['h_out'], then_branch=then_branch,
                          else_branch=else_branch)],
        [tensor('h_in', [3])], [tensor('h_out', [3])])
    inputs = {'h0': rand(3), 'W': rand(3, 3), 'T': i64(3)}
    model = model_of([helper.make_node('Loop', ['T', '', 'h0'], ['h'], body=body)],
                     inputs, [tensor('h', [3])], {'two': i64(2), 'zero': i64(0)})
    check_gradients(model, inputs, ['h0', 'W'])


@pytest.mark.parametrize('taken', [True, False])
def test_if_with_a_branch_passing_an_outer_value_through(taken):
    # y, z = If(p, then: (x W, x), else: (x, 3 x)): outputs that are outer values as they are.
    then_branch = helper.make_graph([helper.make_node('MatMul', ['x', 'W'], ['xw'])], 'then', [],
                                    [tensor('xw', [2, 3]), tensor('x', [2, 3])])
    else_branch = helper.make_graph([helper.make_node('Mul', ['x', 'three'], ['x3'])], 'else',
                                    [], [tensor('x', [2, 3]), tensor('x3', [2, 3])])
    inputs = {'p': numpy.asarray(taken), 'x': rand(2, 3), 'W': rand(3, 3)}
    model = model_of([helper.make_node('If', ['p'], ['y', 'z'], then_branch=then_branch,
                                       else_branch=else_branch)],
                     inputs, [tensor('y', [2, 3]), tensor('z', [2, 3])],
                     {'three': numpy.asarray(3.0)})
    check_gradients(model, inputs, ['x', 'W'])

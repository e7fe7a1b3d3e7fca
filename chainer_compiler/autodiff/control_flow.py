"""Gradient rules for the control-flow family: Loop and If.

Both differentiate their sub-graphs with ``differentiate`` itself, and
both give gradients to the outer-scope values their sub-graphs read (a
recurrent cell's weights, read by a Loop body), after those of their
listed inputs (onnx_graph.implicit_inputs).

Loop
----
*Forward* (``save_loop_states``, a forward rewrite): the Loop also
carries the number of iterations run, T, and for each carried tensor a
sequence of its value at the start of every iteration (SequenceInsert, so
the shape may change from one iteration to the next).  Both become outputs
of the Loop, which the forward program retains.

*Backward*: a Loop of T iterations running the forward ones in reverse
(iteration i undoes forward iteration j = T - 1 - i).  Its body

* recomputes, from the saved carried values, the iteration number j and the
  outer-scope values, the values of the forward body its backward reads
  (the forward body's nodes that make them are replayed);
* runs the forward body's backward, fed with the gradients of the carried
  values (loop-carried by the backward Loop, starting from the gradients of
  the Loop's final values) and slice j of each scan output's gradient;
* hands the carried values' gradients to the iteration before, and adds the
  outer-scope values' gradients to accumulators (also loop-carried).

After the last backward iteration the carried gradients are those of the
initial values.  The trip count and the condition have no gradient.

Because the body is recomputed, a random operator in it (whose draw would
differ) is refused with a GradientError.  Carried sequences (a list
appended to in the loop) are not saved, as ONNX has no sequences of
sequences: their gradients flow, but a body whose backward needs a carried
sequence's value is refused.

If
--
The backward is an If on the same (retained) condition.  Each of its
branches is the backward of the forward branch (replaying the branch's
nodes whose values that backward reads) and gives the gradients of every
outer-scope value either branch reads; a value the taken branch does not
reach gets zeros.
"""
from dataclasses import dataclass, field

import numpy
import onnx
from onnx import helper, numpy_helper

from ..onnx_graph import SequenceType, all_nodes, implicit_inputs, reads, subgraphs, value_info
from ..runtime.ops.registry import draws_random
from .generate import differentiate, make_graph
from .registry import GradientError, forward_rewrite, gradient

_INT64 = numpy.dtype(numpy.int64)
_BOOL = numpy.dtype(bool)
_SCALAR_INT = (_INT64, ())
_SCALAR_BOOL = (_BOOL, ())


@dataclass
class LoopNote:
    """What ``save_loop_states`` did to a Loop: ``body`` is its original
    body, ``n_carried`` its number of carried values, ``count`` the output
    holding T, ``saved`` {carried index: output holding the sequence of that
    value at the start of each iteration}."""
    body: onnx.GraphProto
    n_carried: int
    count: str
    saved: dict = field(default_factory=dict)

    @property
    def n_added(self):
        """How many inputs and outputs the rewrite added after the carried ones."""
        return 1 + len(self.saved)


def _graph_attribute(node, name):
    for a in node.attribute:
        if a.name == name:
            return a.g
    raise GradientError('%s node %s has no attribute %s' % (node.op_type, node.name, name))


def _copy(graph):
    result = onnx.GraphProto()
    result.CopyFrom(graph)
    return result


def _refuse_random(owner, nodes):
    """GradientError when ``nodes`` (to be recomputed in backward) draw random numbers."""
    drawn = sorted({n.op_type for n in nodes if draws_random(n.op_type, n.domain)})
    if drawn:
        raise GradientError(
            'cannot differentiate %s node %s: its backward recomputes the sub-graph, which '
            'draws random numbers (%s), and the draw would differ; move the random operator '
            'out of the loop or branch' % (owner.op_type, owner.name or owner.output[0],
                                           ', '.join(drawn)))


@forward_rewrite('Loop')
def save_loop_states(graph, node, types):
    """Make ``node`` also carry its iteration count and, per carried tensor,
    the sequence of its values at the start of each iteration (see the
    module docstring); returns the LoopNote."""
    body = _graph_attribute(node, 'body')
    n = len(node.input) - 2
    prefix = node.output[0] + '/saved'
    note = LoopNote(_copy(body), n, prefix + '/count')
    carried = [v.name for v in body.input[2:]]
    one = numpy_helper.from_array(numpy.ones((), numpy.int64), prefix + '/one')
    body.initializer.append(one)
    new_inputs, new_outputs, body_nodes = [prefix + '/count_init'], [note.count], []
    count_in, count_out = prefix + '/count_in', prefix + '/count_out'
    body_inputs = [value_info(count_in, _SCALAR_INT)]
    body_outputs = [value_info(count_out, _SCALAR_INT)]
    # After iteration i, i + 1 iterations have run.
    body_nodes.append(helper.make_node('Add', [body.input[0].name, one.name], [count_out]))
    graph.initializer.append(numpy_helper.from_array(numpy.zeros((), numpy.int64),
                                                     new_inputs[0]))
    types[note.count] = _SCALAR_INT
    empties = []
    for k in range(n):
        entry = types.get(node.input[2 + k])
        if entry is None or isinstance(entry, SequenceType) or entry[0] is None:
            continue
        name = '%s/%d' % (prefix, k)
        note.saved[k] = name
        seq_type = SequenceType(entry[0], None)
        empties.append(helper.make_node('SequenceEmpty', [], [name + '/init'],
                                        dtype=helper.np_dtype_to_tensor_dtype(entry[0])))
        new_inputs.append(name + '/init')
        new_outputs.append(name)
        body_inputs.append(value_info(name + '/in', seq_type))
        body_outputs.append(value_info(name + '/out', seq_type))
        body_nodes.append(helper.make_node('SequenceInsert', [name + '/in', carried[k]],
                                           [name + '/out']))
        types[name] = seq_type
    # The added values are carried ones: after the original carried values,
    # before the scan outputs.
    node.input.extend(new_inputs)
    for i, name in enumerate(new_outputs):
        node.output.insert(n + i, name)
    body.input.extend(body_inputs)
    body.node.extend(body_nodes)
    for i, info in enumerate(body_outputs):
        body.output.insert(1 + n + i, info)
    index = next(i for i, other in enumerate(graph.node) if other.output[:1] == node.output[:1])
    for empty in reversed(empties):
        graph.node.insert(index, empty)
    return note


def _is_float(entry):
    return entry is not None and entry[0] is not None and numpy.dtype(entry[0]).kind == 'f'


def _replay(nodes, needed):
    """The ``nodes`` (in order) that make ``needed`` values, with the nodes
    making their inputs; and every value those read."""
    needed, kept = set(needed), []
    for node in reversed(nodes):
        if any(o in needed for o in node.output):
            kept.append(node)
            needed.update(reads(node))
    kept.reverse()
    return kept, needed


def _backward_subgraph(owner, sb, mark, forward, backward, name, inputs, outputs):
    """The GraphProto of a backward sub-graph: ``sb``'s nodes before
    ``mark`` (binding the forward sub-graph's inputs), the nodes of
    ``forward`` whose values the rest reads (replayed), ``backward``'s
    nodes, then ``sb``'s other nodes."""
    tail = sb.nodes[mark:]
    made = {o for n in backward.nodes + tail for o in n.output}
    reads_after = {r for n in backward.nodes + tail for r in reads(n)} - made
    replay, needed = _replay(list(forward.node), reads_after)
    _refuse_random(owner, _with_nested(replay))
    constants = {t.name for t in backward.initializers}
    initializers = [t for t in forward.initializer if t.name in needed and t.name not in constants]
    sb.nodes[:] = sb.nodes[:mark] + replay + backward.nodes + tail
    sb.initializers.extend(backward.initializers + initializers)
    return make_graph(sb, name, inputs, outputs), needed


def _with_nested(nodes):
    """``nodes`` and the nodes of their sub-graphs."""
    for node in nodes:
        yield node
        for g in subgraphs(node):
            yield from all_nodes(g)


@gradient('Loop')
def loop_grad(b, node, gys):
    note = b.notes[node.output[0]]
    body, n = _copy(note.body), note.n_carried
    scans = list(range(n + note.n_added, len(node.output)))
    outer = implicit_inputs(node)
    wrt_outer = [x for x in outer if x in b.requires]
    carried = [k for k in range(n) if _is_float(b.value_types.get(node.output[k]))]
    v_in = [v.name for v in body.input[2:]]
    v_out = [v.name for v in body.output[1:1 + n]]
    s_out = [v.name for v in body.output[1 + n:]]
    body_grad = differentiate(
        body, b.opset, [v_in[k] for k in carried] + wrt_outer,
        [v_out[k] for k in carried] + [s_out[s - scans[0]] for s in scans if gys[s] is not None],
        outer=b)
    types = body_grad.value_types

    sb = b.sub_builder(types)
    it, cond = sb.fresh('loop_grad/i'), sb.fresh('loop_grad/cond')
    g_carried = {k: sb.fresh('loop_grad/g') for k in carried}
    g_outer = {p: sb.fresh('loop_grad/acc') for p in wrt_outer}
    # Backward iteration i undoes forward iteration j = T - 1 - i.
    j = sb.node('Sub', [sb.node('Sub', [note.count, sb.constant(1, numpy.int64)]), it])
    sb.node('Identity', [j], [body.input[0].name])
    sb.node('Identity', [cond], [body.input[1].name])  # the forward ran only while true
    for k, saved in note.saved.items():
        sb.node('SequenceAt', [saved, j], [v_in[k]])
    for grad, forward_output in body_grad.grad_inputs:
        if forward_output in v_out:
            sb.node('Identity', [g_carried[v_out.index(forward_output)]], [grad])
        else:
            scan_grad = gys[scans[s_out.index(forward_output)]]
            sb.node('Gather', [scan_grad, j], [grad], axis=0)
    mark = len(sb.nodes)
    results = [sb.node('Identity', [cond])]
    for k in carried:
        g = body_grad.grad_outputs.get(v_in[k])
        if g is None:
            if isinstance(types.get(v_in[k]), SequenceType):
                raise GradientError('cannot differentiate Loop node %s: carried list %s does '
                                    'not reach its outputs' % (node.name or node.output[0],
                                                               v_in[k]))
            g = sb.zeros_like(v_in[k])
        results.append(sb.node('Identity', [g]))
    for p in wrt_outer:
        g = body_grad.grad_outputs.get(p)
        results.append(sb.node('Identity', [g_outer[p]]) if g is None
                       else sb.add_gradients(p, g_outer[p], g))
    carried_types = [types.get(v_in[k]) for k in carried] + [types.get(p) for p in wrt_outer]
    graph, needed = _backward_subgraph(
        node, sb, mark, body, body_grad, 'loop_grad_body',
        [(it, _SCALAR_INT), (cond, _SCALAR_BOOL)]
        + list(zip(list(g_carried.values()) + list(g_outer.values()), carried_types)),
        list(zip(results, [_SCALAR_BOOL] + carried_types)))
    unsaved = [v_in[k] for k in range(n) if k not in note.saved and v_in[k] in needed]
    if unsaved:
        raise GradientError('cannot differentiate Loop node %s: its backward reads the carried '
                            'value(s) %s, which are not saved per iteration (lists, or values '
                            'of unknown type)' % (node.name or node.output[0], ', '.join(unsaved)))

    initial = [gys[k] if gys[k] is not None else b.zeros_like(node.output[k]) for k in carried]
    initial += [b.zeros_like(p) for p in wrt_outer]
    true = b.constant(numpy.asarray(True), hint='true')
    outputs = [b.fresh('loop_grad') for _ in initial]
    b.node('Loop', [note.count, true] + initial, outputs, body=graph)
    carried_grads = dict(zip(carried, outputs))
    outer_grads = dict(zip(wrt_outer, outputs[len(carried):]))
    # The trip count and the condition, then the carried values, then what
    # the forward rewrite added, then the outer-scope values.
    return ([None, None] + [carried_grads.get(k) for k in range(n)]
            + [None] * note.n_added + [outer_grads.get(p) for p in outer])


@gradient('If')
def if_grad(b, node, gys):
    outer = implicit_inputs(node)
    wrt = [x for x in outer if x in b.requires]
    if not wrt:
        return [None] * (1 + len(outer))
    branches = {}
    for attr in ('then_branch', 'else_branch'):
        branch = _copy(_graph_attribute(node, attr))
        names = [o.name for o in branch.output]
        grads = differentiate(branch, b.opset, wrt,
                              [o for o, g in zip(names, gys) if g is not None], outer=b)
        sb = b.sub_builder(grads.value_types)
        for grad, forward_output in grads.grad_inputs:
            sb.node('Identity', [gys[names.index(forward_output)]], [grad])
        mark = len(sb.nodes)
        results = [sb.node('Identity', [grads.grad_outputs.get(p) or sb.zeros_like(p)])
                   for p in wrt]
        branches[attr], _ = _backward_subgraph(
            node, sb, mark, branch, grads, attr + '_grad', [],
            [(r, b.value_types.get(p)) for r, p in zip(results, wrt)])
    outputs = [b.fresh('if_grad') for _ in wrt]
    b.node('If', [node.input[0]], outputs, **branches)
    by_name = dict(zip(wrt, outputs))
    return [None] + [by_name.get(p) for p in outer]

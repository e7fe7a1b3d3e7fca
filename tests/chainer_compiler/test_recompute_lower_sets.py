"""'gt' over the general lower sets of a branching forward graph
(recompute/lower_sets.py, issue 34): where they beat the prefixes of three
topological orders, that they are the prefixes on a chain, that every set
is closed under inputs and gt never ends worse with them; and that replays
placed right before their first read hold less than replays at the start
of a segment."""
import bisect
import importlib

import numpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from chainer_compiler import recompute
from chainer_compiler.autodiff import generate
from chainer_compiler.onnx_graph import reads
from chainer_compiler.pipeline import CompilerOptions
from chainer_compiler.recompute import lower_sets
from chainer_compiler.recompute.nested import nested_order
from chainer_compiler.recompute.ordered import order_of, ordered_plan
from chainer_compiler.recompute.segments import equal_cuts, keep_for_cuts, segment_costs
from chainer_compiler.runtime import Executor
from chainer_compiler.training import compile_training

#: gt.py (the package exports its policy function under the same name).
GT = importlib.import_module('chainer_compiler.recompute.gt')

#: Rows of the input: the activations outweigh the weights.
BATCH = 64


def _dag(layers, width=4):
    """A model of ``layers``: each (inputs, width) is Tanh of the sum of
    its inputs (indices of earlier layers, -1 the input ``x`` of ``width``
    columns) each times a weight of ``width`` columns; the loss ``y`` sums
    the last layer.  Returns (model, the weights' names)."""
    nodes, weights, widths = [], [], []
    rng = numpy.random.RandomState(0)
    for k, (inputs, columns) in enumerate(layers):
        terms = []
        for j, i in enumerate(inputs):
            name = 'W%d_%d' % (k, j)
            rows = width if i < 0 else widths[i]
            weights.append(numpy_helper.from_array(
                rng.randn(rows, columns).astype(numpy.float32) / rows, name))
            terms.append('m%d_%d' % (k, j))
            nodes.append(helper.make_node('MatMul', ['x' if i < 0 else 't%d' % i, name],
                                          [terms[-1]]))
        while len(terms) > 1:
            nodes.append(helper.make_node('Add', terms[:2], [terms[0] + '+']))
            terms[:2] = [terms[0] + '+']
        nodes.append(helper.make_node('Tanh', terms, ['t%d' % k]))
        widths.append(columns)
    nodes.append(helper.make_node('ReduceSum', ['t%d' % (len(layers) - 1)], ['y'], keepdims=1))
    info = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, 'dag', [info('x', TensorProto.FLOAT, [BATCH, width])],
                              [info('y', TensorProto.FLOAT, [1, 1])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 13)])
    model.ir_version = 8
    return model, [w.name for w in weights]


def _problem(model, params, **options):
    """The recompute.Problem compile_training makes of ``model`` under 'gt'
    with compiler ``options``."""
    problems = []
    saved = recompute.POLICIES['gt']
    recompute.POLICIES['gt'] = lambda problem: problems.append(problem)
    try:
        compile_training(model, params=params,
                         options=CompilerOptions(computation_order='gt', **options))
    finally:
        recompute.POLICIES['gt'] = saved
    return problems[0]


def _gt(problem, families=None):
    """gt's Plan for ``problem`` (None: no change) over ``families``, a
    slice of _families' list (default: every one)."""
    return _as_plan(problem, _gt_choice(problem, families))


def _as_plan(problem, choice):
    """gt's ``choice`` (None, values to keep, or a Plan) as a Plan or None."""
    return choice if choice is None or isinstance(choice, recompute.Plan) else \
        problem.plan(choice)


def _gt_choice(problem, families=None):
    """What gt returns for ``problem`` over ``families`` (as for _gt): the
    families' own plans, unrefined (gt._refine), chosen on the VM's count:
    these models' weights, held by the process (Problem.process_peak), put
    every plan's peak at backward's end, beside every gradient."""
    every = GT._families(problem)
    chosen = every if families is None else every[families]
    saved, refine, live_at_peak = GT._families, GT.REFINE_PLANS, type(problem).live_at_peak
    GT._families, GT.REFINE_PLANS = (lambda _: chosen), 0
    problem.live_at_peak = lambda plan, held=False: live_at_peak(problem, plan)
    try:
        return GT.gt(problem)
    finally:
        GT._families, GT.REFINE_PLANS = saved, refine
        del problem.live_at_peak


def _orders(problem):
    """The slice of _families that holds the prefixes of the orders."""
    return slice(len(recompute.segments.topological_orders(problem.forward)))


def _peak_and_work(problem, plan):
    plan = problem.unchanged if plan is None else plan
    return problem.peak(plan), problem.work(plan)


#: Three branches from x, joined: A wide then narrow, B wide, C wide.
BRANCHES = [([-1], 256), ([0], 4), ([-1], 256), ([-1], 256), ([1, 2, 3], 256)]


def _differentiated(problem):
    return [out for _, out in problem.backward.grad_inputs]


def _nodes_making(problem, names):
    return {k for k, node in enumerate(problem.forward.nodes) if node.output[0] in names}


def test_lower_sets_beat_the_prefixes_of_three_orders_where_three_branches_meet():
    # The least peak recomputes A's and B's values and keeps C's: its chain
    # passes through A and B finished and multiplied into the join while C
    # has not started, a lower set that no prefix of the forward order, of
    # the earliest or of the latest is (each runs C's product before the
    # join's).  (875556 bytes, holding A's narrow product, when backward
    # ran the rules in reverse forward order: autodiff.generate._rule_order
    # and _defer_weight_gradients.)
    problem = _problem(*_dag(BRANCHES))
    prefixes = _gt(problem, _orders(problem))
    both = _gt(problem)
    assert _peak_and_work(problem, None)[0] == 1005568
    assert _peak_and_work(problem, prefixes) == (940032, pytest.approx(108134.4))
    assert _peak_and_work(problem, both) == (873472, pytest.approx(243763.2))
    assert 't3' in both.retained and not {'m1_0', 't1', 't2'} & set(both.retained)
    sets = lower_sets.lower_sets(problem.forward, problem.size, _differentiated(problem))
    a_and_b = _nodes_making(problem, {'m0_0', 't0', 'm1_0', 't1', 'm2_0', 't2', 'm4_0', 'm4_1'})
    assert frozenset(a_and_b) in sets
    orders = recompute.segments.topological_orders(problem.forward)
    assert len(orders) == 3
    assert all(set(order[:len(a_and_b)]) != a_and_b for order in orders)


def test_on_a_chain_the_lower_sets_are_the_prefixes_and_plan_alike():
    problem = _problem(*_dag([([-1], 64)] + [([k], 64) for k in range(7)]))
    forward = problem.forward
    n = len(forward.nodes)
    # Every prefix but the one ending before the loss, whose 4 bytes are
    # light: it is made with the last Tanh.
    sets = lower_sets.lower_sets(forward, problem.size, _differentiated(problem))
    cuts = [c for c in range(n + 1) if c != n - 1]
    assert sets == [frozenset(range(c)) for c in cuts]
    by_sets = lower_sets.set_costs(forward, sets, problem.size, problem.node_work)
    by_cuts = segment_costs(forward, problem.size, problem.node_work)
    upper = numpy.triu(numpy.ones((len(cuts), len(cuts)), dtype=bool), 1)
    for name in ('kept', 'working', 'work'):
        expected = getattr(by_cuts, name)[numpy.ix_(cuts, cuts)][upper]
        # One side sums a segment's work, the other differences prefix
        # sums: an empty segment may come out as 1e-10 rather than 0.
        numpy.testing.assert_allclose(getattr(by_sets, name)[upper], expected,
                                      atol=1e-12 * numpy.abs(expected).max(), err_msg=name)
    cuts = equal_cuts(n)
    assert lower_sets.keep_for_sets(forward, [sets[c] for c in cuts]) == keep_for_cuts(forward,
                                                                                      cuts)
    # One order (the three coincide), then the lower sets: the same plan.
    assert _orders(problem) == slice(1)
    prefixes, by_lower_sets = _gt(problem, slice(0, 1)), _gt(problem, slice(1, 2))
    assert prefixes.replayed and prefixes.retained == by_lower_sets.retained
    assert _peak_and_work(problem, prefixes) == _peak_and_work(problem, by_lower_sets)


def test_a_graph_of_too_many_lower_sets_keeps_to_the_orders(monkeypatch, caplog):
    problem = _problem(*_dag(BRANCHES))
    # At least as many as the graph has nodes (15) are enumerated.
    monkeypatch.setattr(lower_sets, 'MIN_LOWER_SETS', 10)
    with caplog.at_level('INFO', logger=lower_sets.__name__):
        assert lower_sets.lower_sets(problem.forward, problem.size,
                                     _differentiated(problem)) is None
        assert len(GT._families(problem)) == _orders(problem).stop
        assert _peak_and_work(problem, _gt(problem))[0] == 940032  # the prefixes' plan
    assert 'more than 15 lower sets of the 15 forward nodes: the prefixes' in caplog.text


def _gradients(model, params, order, **options):
    """{weight: gradient} of one step of ``model`` (a _dag) on the VM, under
    computation_order ``order`` with compiler ``options``."""
    programs = compile_training(model, params=params, options=CompilerOptions(
        computation_order=order, **options))
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    values['x'] = numpy.random.RandomState(1).randn(BATCH, 4).astype(numpy.float32)
    forward = Executor(programs.forward, backend='numpy')
    outputs = dict(zip([v.name for v in programs.forward.outputs],
                       forward.run_positional([values[v.name]
                                               for v in programs.forward.inputs])))
    upstream = [numpy.ones_like(outputs[name]) for name in programs.grad_of_outputs]
    backward = Executor(programs.backward, backend='numpy')
    grads = backward.run_positional(upstream + [outputs.get(r, values.get(r))
                                                for r in programs.retained])
    return dict(zip(programs.grads_for, grads))


def test_the_lower_sets_plan_gives_the_same_gradients():
    model, params = _dag(BRANCHES)
    expected = _gradients(model, params, None)
    got = _gradients(model, params, 'gt')
    assert set(got) == set(expected)
    for name, grad in expected.items():
        numpy.testing.assert_array_equal(got[name], grad, err_msg=name)


def test_backward_differentiates_the_shrinking_branch_first_and_gt_peaks_lower(monkeypatch):
    """autodiff.generate._rule_order finishes C's branch (its gradient
    ends at the input, which needs none) before the join's other products
    make theirs, and _defer_weight_gradients runs a weight's gradient
    where its input is next read: gt's plan peaks lower than with the
    rules in reverse forward order, with the same gradients; nested orders
    (nested.py) follow backward's order."""
    model, params = _dag(BRANCHES)

    def planned():
        problem = _problem(model, params)
        return problem.process_peak(_as_plan(problem, GT.gt(problem))), problem
    peak, problem = planned()
    order = [problem.forward.nodes[k].output[0] for k in problem.backward.order]
    assert order.index('m3_0') < order.index('m4_0+')
    with monkeypatch.context() as reverse:
        reverse.setattr(generate, '_rule_order', lambda nodes, *_: reversed(range(len(nodes))))
        reverse.setattr(generate, '_defer_weight_gradients', lambda *_: None)
        before, _ = planned()
        expected = _gradients(model, params, None)
    assert peak < 0.96 * before  # 1284132 bytes, 1403940 before
    monkeypatch.setitem(recompute.POLICIES, 'custom', lambda problem: ordered_plan(
        problem.forward, problem.backward,
        nested_order(problem.forward, problem.backward, (2, 2)), problem.joined))
    for order, options in (('gt', {}), ('custom', {'retain': []})):
        got = _gradients(model, params, order, **options)
        for name, grad in expected.items():
            numpy.testing.assert_allclose(got[name], grad, rtol=1e-6, err_msg=name)


@st.composite
def _layers(draw):
    """A random small DAG of _dag layers; the last reads every layer no
    other reads, so that all lead to the loss."""
    layers = []
    for k in range(draw(st.integers(2, 7))):
        inputs = draw(st.lists(st.integers(-1, k - 1), min_size=1, max_size=2, unique=True))
        layers.append((inputs, draw(st.sampled_from([4, 16, 64]))))
    read = {i for inputs, _ in layers for i in inputs}
    inputs, width = layers[-1]
    layers[-1] = (inputs + [k for k in range(len(layers) - 1) if k not in read and
                            k not in inputs], width)
    return layers


# A tenth of the profile's count (10 under make test, 3 under test-fast): each
# example plans a graph with every policy.
@settings(max_examples=max(3, settings.default.max_examples // 10), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(_layers(), st.sampled_from([None, 0.6, 0.8]))
def test_every_lower_set_is_closed_and_gt_never_ends_worse_with_them(layers, budget):
    problem = _problem(*_dag(layers), memory_budget=budget)
    forward = problem.forward
    sets = lower_sets.lower_sets(forward, problem.size, _differentiated(problem)) or []
    assert not sets or (sets[0], sets[-1]) == (frozenset(), frozenset(range(len(forward.nodes))))
    for chosen in sets:
        for k in chosen:
            assert {forward.producer[v] for v in reads(forward.nodes[k])
                    if v in forward.producer} <= chosen
    choices = {}
    for families in (_orders(problem), None):
        try:
            choices[families is None] = _gt_choice(problem, families)
        except GT.BudgetError:
            choices[families is None] = GT.BudgetError
    prefixes, both = choices[False], choices[True]
    if prefixes is GT.BudgetError:
        return
    assert both is not GT.BudgetError  # what fits with the prefixes fits with both
    (peak_prefixes, work_prefixes), (peak, work) = [
        _peak_and_work(problem, _as_plan(problem, choice)) for choice in (prefixes, both)]
    if budget is None:
        assert peak <= peak_prefixes
    else:
        assert peak <= problem.budget()
        if not isinstance(prefixes, recompute.Plan):  # not nested: one extra forward at most
            assert work <= work_prefixes


def _replays_at_segment_starts(steps, cuts):
    """The explicit order ``steps`` with the replays of each segment of the
    forward order cut at ``cuts`` moved to just before the segment's first
    gradient: where a policy replaying at the start of a segment would put
    them."""
    def segment(k):
        return bisect.bisect_right(cuts, k)
    head = next(i for i, (kind, _) in enumerate(steps) if kind != 'forget')
    replays = {}
    for kind, k in steps[head:]:
        if kind == 'forward':
            replays.setdefault(segment(k), []).append((kind, k))
    moved = steps[:head]
    for kind, k in steps[head:]:
        if kind == 'backward':
            moved += replays.pop(segment(k), [])
        if kind != 'forward':
            moved.append((kind, k))
    assert not replays
    return moved


def test_replays_before_their_first_read_hold_less_than_at_a_segments_start(monkeypatch):
    # replay.plan replays a value right before the first backward node that
    # reads it (inside the gradient reading it).  Two branches of three
    # layers, joined, then two layers; cut at the join: backward runs the
    # second branch's gradients, then the first's.  Replayed at the start
    # of the segment, the first branch's values would wait through the
    # second's gradients.
    model, params = _dag([([-1], 256), ([0], 256), ([1], 256),
                          ([-1], 256), ([3], 256), ([4], 256),
                          ([2, 5], 64), ([6], 64), ([7], 64)])
    problem = _problem(model, params)
    forward = problem.forward
    cuts = [min(_nodes_making(problem, {'m6_0', 'm6_1'}))]
    first_read = problem.plan(keep_for_cuts(forward, cuts))

    def at_start(problem):
        steps = order_of(problem.backward, problem.forward, first_read)
        return ordered_plan(problem.forward, problem.backward,
                            _replays_at_segment_starts(steps, cuts))
    assert sorted(at_start(problem).replayed) == sorted(first_read.replayed)
    # (1614900 and 1811508 when backward ran the rules in reverse forward
    # order: autodiff.generate._rule_order and _defer_weight_gradients.)
    assert problem.peak(first_read) == 1565748
    assert problem.peak(at_start(problem)) == 1762356  # + the first branch's 3 values
    monkeypatch.setitem(recompute.POLICIES, 'custom', at_start)
    expected = _gradients(model, params, None)
    for order, options in (('chen', {}), ('custom', {'retain': []})):
        got = _gradients(model, params, order, **options)
        for name, grad in expected.items():
            numpy.testing.assert_array_equal(got[name], grad, err_msg='%s %s' % (order, name))


@pytest.mark.parametrize('limit', [0, 2])
def test_gt_refines_at_most_refine_plans(monkeypatch, limit):
    """The refinement's planning is bounded, whatever the graph: at most
    REFINE_PLANS plans predicted beyond the families' (the chain has more
    values live where it peaks than that)."""
    problem = _problem(*_dag([([-1], 64)] + [([k], 64) for k in range(7)]))
    monkeypatch.setattr(GT, 'REFINE_PLANS', limit)
    candidates = {None: (problem.process_peak(problem.unchanged), 0)}
    best = GT._refine(problem, candidates, None)
    assert len(candidates) - 1 == limit
    assert candidates[best] <= candidates[None]

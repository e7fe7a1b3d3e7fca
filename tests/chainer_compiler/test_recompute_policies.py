"""The recompute policies (chainer_compiler/recompute/): every policy trains
to the same gradients as retaining everything, keeps Dropout's masks and
updates BatchNormalization's running averages once, and chen and gt lower
the peak the VM measures."""
import collections
import functools
import importlib.util
import os
import re

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import onnx
import pytest
from onnx import TensorProto, helper

import chainer_compiler
from chainer_compiler import recompute
from chainer_compiler.pipeline import CompilerOptions
from chainer_compiler.recompute.nested import nested_order
from chainer_compiler.recompute.ordered import ordered_plan
from chainer_compiler.recompute.replay import forward_facts
from chainer_compiler.training import compile_training
from tests.chainer_compiler.autodiff import gradcheck

#: These tests check the bridge, not the backend: the NumPy VM, where the
#: default ('auto') would build C for each model.
ON_THE_VM = {'backend': 'numpy'}

#: gt.py (the package exports its policy function under the same name).
GT_MODULE = importlib.import_module('chainer_compiler.recompute.gt')
SEGMENTS_MODULE = importlib.import_module('chainer_compiler.recompute.segments')

POLICIES = [('chen', {}), ('gt', {}), ('dummy', {}), ('gt', {'memory_budget': 0.9}),
            ('chen', {'chen_segments': 3})]


class DeepMLP(chainer.ChainList):
    def __init__(self, depth=24, width=16):
        super().__init__(*[L.Linear(width, width) for _ in range(depth)])

    def forward(self, x):
        for layer in self:
            x = F.relu(layer(x))
        return x


class SmallCNN(chainer.Chain):
    """conv-BN-ReLU blocks at one resolution, then a fully connected layer."""

    def __init__(self, depth=4, channels=4):
        super().__init__()
        with self.init_scope():
            self.convs = chainer.ChainList(*[L.Convolution2D(channels, channels, 3, 1, 1,
                                                             nobias=True) for _ in range(depth)])
            self.bns = chainer.ChainList(*[L.BatchNormalization(channels) for _ in range(depth)])
            self.fc = L.Linear(channels * 36, 5)

    def forward(self, x):
        for conv, bn in zip(self.convs, self.bns):
            x = F.relu(bn(conv(x)))
        return self.fc(x)


class DropoutNet(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(12, 16)
            self.l2 = L.Linear(16, 16)
            self.l3 = L.Linear(16, 4)

    def forward(self, x):
        h = F.dropout(F.relu(self.l1(x)), 0.5)
        h = F.dropout(F.tanh(self.l2(h)), 0.3)
        return self.l3(h)


def _data(model):
    rng = numpy.random.RandomState(1)
    if isinstance(model, SmallCNN):
        return rng.randn(3, 4, 6, 6).astype(numpy.float32), rng.randint(0, 5, 3).astype('i')
    if isinstance(model, DeepMLP):  # a large batch: activations outweigh the weights
        width = model[0].W.shape[1]
        return rng.randn(64, width).astype(numpy.float32), rng.randint(0, width, 64).astype('i')
    return rng.randn(64, 12).astype(numpy.float32), rng.randint(0, 4, 64).astype('i')


@functools.lru_cache(maxsize=None)
def _exported(kind, tmp):
    model = {'mlp': DeepMLP, 'cnn': SmallCNN, 'dropout': DropoutNet}[kind]()
    x, _ = _data(model)
    with chainer.using_config('train', False):
        path = chainer_compiler.export(model, [x], '%s/%s.onnx' % (tmp, kind))
    return model, path


def _step(kind, tmp, policy=None, **kwargs):
    """One training step of a fresh copy of the ``kind`` model compiled with
    computation_order ``policy``: (compiled model, {param path: grad},
    {path: persistent})."""
    base, path = _exported(kind, tmp)
    model = type(base)()
    model.copyparams(base)
    _copy_persistents(model, base)
    compiled = chainer_compiler.compile_onnx(model, path, computation_order=policy,
                                             compiler_kwargs=kwargs,
                                             runtime_kwargs={'track_memory': True})
    x, t = _data(base)
    numpy.random.seed(7)  # Dropout draws the same masks in every run
    model.cleargrads()
    F.softmax_cross_entropy(compiled(x), t).backward()
    grads = {name: p.grad.copy() for name, p in model.namedparams()}
    states = {name: numpy.array(v) for name, v in _persistents(model)}
    return compiled, grads, states


def _persistents(link):
    for sub in link.links():
        for name in sub._persistent:
            value = getattr(sub, name)
            if isinstance(value, numpy.ndarray):
                yield '%s/%s' % (id(sub), name), value


def _copy_persistents(model, base):
    for mine, theirs in zip(model.links(), base.links()):
        for name in mine._persistent:
            value = getattr(theirs, name)
            if isinstance(value, numpy.ndarray):
                getattr(mine, name)[...] = value


@pytest.fixture(scope='module')
def tmp(tmp_path_factory):
    return str(tmp_path_factory.mktemp('recompute'))


@pytest.mark.parametrize('kind', ['mlp', 'cnn', 'dropout'])
@pytest.mark.parametrize('order,kwargs', POLICIES)
def test_every_policy_gives_the_gradients_of_retaining_everything(tmp, kind, order, kwargs):
    _, expected, _ = _step(kind, tmp)
    _, grads, _ = _step(kind, tmp, order, **kwargs)
    for name, grad in expected.items():
        assert numpy.isfinite(grad).all()
        numpy.testing.assert_allclose(grads[name], grad, rtol=1e-6, atol=1e-7, err_msg=name)


@pytest.mark.parametrize('order', ['chen', 'gt', 'dummy'])
def test_running_averages_are_updated_once(tmp, order):
    base, _ = _exported('cnn', tmp)
    chainer_model = SmallCNN()
    chainer_model.copyparams(base)
    _copy_persistents(chainer_model, base)
    x, _ = _data(base)
    chainer_model(x)  # Chainer's own step updates each average once
    expected = [numpy.array(v) for _, v in _persistents(chainer_model)]
    _, _, states = _step('cnn', tmp, order)
    for got, want in zip(states.values(), expected):
        numpy.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_dropout_masks_are_retained_never_redrawn(tmp):
    compiled, _, _ = _step('dropout', tmp, 'dummy')
    programs = compiled._training_states()[0].programs
    assert any(name.endswith('/mask') for name in programs.retained)
    assert 'DropoutTraining' not in {i.op for i in programs.backward.instructions}


def test_chen_and_gt_lower_the_measured_peak(tmp):
    peaks = {order: _step('mlp', tmp, order)[0].peak_bytes() for order in (None, 'chen', 'gt')}
    assert peaks['gt'] < 0.75 * peaks[None]
    assert peaks['chen'] < 0.75 * peaks[None]
    cnn = {order: _step('cnn', tmp, order)[0].peak_bytes() for order in (None, 'chen', 'gt')}
    assert cnn['gt'] < cnn[None] and cnn['chen'] < cnn[None]


def test_gt_fits_the_peak_chen_reaches(tmp):
    chen = _step('mlp', tmp, 'chen')[0]
    budget = chen.predicted_peak_bytes()
    gt = _step('mlp', tmp, 'gt', memory_budget=budget)[0]
    assert gt.predicted_peak_bytes() <= budget
    assert gt.peak_bytes() <= chen.peak_bytes()


def test_gt_bisects_the_limits_around_a_budget(tmp, monkeypatch):
    # The sweep's plans step over 80% of the peak; the bisected limits find
    # one that fits closer to it and so replays less.
    budget = int(0.8 * _step('mlp', tmp)[0].predicted_peak_bytes())
    plans = {}
    for bisections in (0, GT_MODULE.BUDGET_BISECTIONS):
        monkeypatch.setattr(GT_MODULE, 'BUDGET_BISECTIONS', bisections)
        compiled = _step('mlp', tmp, 'gt', memory_budget=budget)[0]
        backward = compiled._training_states()[0].programs.backward
        plans[bisections] = (compiled.predicted_peak_bytes(), len(backward.instructions))
    (swept_peak, swept_length), (peak, length) = plans.values()
    assert swept_peak < peak <= budget
    assert length < swept_length


def _side_branch(first):
    """x -> Relu -> Relu -> Add, with a Neg of x as the Add's other input:
    the first node (``first``) or the third."""
    main = [helper.make_node('Relu', ['x'], ['a']), helper.make_node('Relu', ['a'], ['b'])]
    side = [helper.make_node('Neg', ['x'], ['s'])]
    nodes = (side + main if first else main + side) + [helper.make_node('Add', ['b', 's'], ['y'])]
    value = helper.make_tensor_value_info
    return forward_facts(helper.make_graph(nodes, 'g', [value('x', TensorProto.FLOAT, [2])],
                                           [value('y', TensorProto.FLOAT, [2])]))


@pytest.mark.parametrize('first, other', [(False, [0, 2, 1, 3]), (True, [1, 0, 2, 3])])
def test_gt_takes_the_prefixes_of_other_topological_orders(first, other):
    # A side branch last goes as early as its input allows; one first, as
    # late as its reader allows (level with the second Relu).
    forward = _side_branch(first)
    assert SEGMENTS_MODULE.topological_orders(forward) == [[0, 1, 2, 3], other]
    view = SEGMENTS_MODULE.reordered(forward, other)
    assert [n.op_type for n in view.nodes] == [forward.nodes[k].op_type for k in other]
    assert all(view.nodes[view.producer[name]].output[0] == name for name in view.producer)


@pytest.mark.slow
def test_gt_replays_less_at_chen_budget_with_the_other_orders(tmp_path, monkeypatch):
    # ResNet's projection blocks put the shortcut last in the forward order;
    # the cuts of the order that puts it first replay less within chen's peak.
    models = _load_benchmark_models()
    x = numpy.random.RandomState(0).randn(4, 3, 32, 32).astype(numpy.float32)
    t = numpy.arange(4, dtype=numpy.int32)
    base = models.ResNet50(width=16, blocks=(1, 1, 1, 1))
    with chainer.using_config('train', False):
        path = chainer_compiler.export(base, [x], str(tmp_path / 'resnet.onnx'))
    chosen = {}

    def recorded(problem):
        keep = GT_MODULE.gt(problem)
        chosen[len(chosen)] = problem.work(problem.plan(keep))
        return keep
    monkeypatch.setitem(recompute.POLICIES, 'gt', recorded)

    def step(order, **kwargs):
        model = models.ResNet50(width=16, blocks=(1, 1, 1, 1))
        model.copyparams(base)
        compiled = chainer_compiler.compile_onnx(model, path, computation_order=order,
                                                 compiler_kwargs=kwargs, runtime_kwargs=ON_THE_VM)
        F.softmax_cross_entropy(compiled(x), t).backward()
        return compiled.predicted_peak_bytes()
    # The orders, not the kernels' scratch (4 MiB of columns at every size
    # this test takes): the budget is chen's VM count, what gt plans on without it.
    monkeypatch.setattr(recompute.Problem, '_scratch', lambda self, node, copies: 0)
    budget = step('chen')
    assert step('gt', memory_budget=budget) <= budget
    own_order = GT_MODULE.topological_orders
    monkeypatch.setattr(GT_MODULE, 'topological_orders', lambda forward: own_order(forward)[:1])
    assert step('gt', memory_budget=budget) <= budget
    assert chosen[0] < 0.9 * chosen[1]


def test_gt_finds_segmentations_of_more_segments_than_work_buckets():
    # A chain of nearly free boundaries whose segments need as many working
    # bytes as they have nodes: under a limit of 1.5 only one-node segments
    # fit, three times as many as the dynamic program counts work in.  Each
    # costs at least one bucket, so the count must saturate, not overflow.
    n = 3 * GT_MODULE.WORK_BUCKETS
    i, j = numpy.meshgrid(numpy.arange(n + 1), numpy.arange(n + 1), indexing='ij')
    length = numpy.maximum(j - i, 0).astype(float)
    costs = SEGMENTS_MODULE.Costs(kept=numpy.where(j > i, 1e-3, 0.0), working=length,
                                  work=length)
    every_node = tuple(range(1, n))
    assert GT_MODULE._cheapest_cuts(costs, 1.5, buckets=1) == every_node
    assert GT_MODULE._cheapest_cuts(costs, 1.5) == every_node
    assert GT_MODULE._cheapest_cuts(costs, 0.5) is None


@pytest.mark.slow
def test_gt_recomputes_more_than_once_where_one_extra_forward_does_not_fit(tmp):
    one_level = _step('mlp', tmp, 'gt')[0].predicted_peak_bytes()  # gt's least such peak
    with pytest.raises(ValueError, match=r'reaches for this model: (\d+) bytes') as error:
        _step('mlp', tmp, 'gt', memory_budget=1000)
    smallest = int(re.search(r'(\d+) bytes$', str(error.value)).group(1))
    assert smallest < one_level
    budget = (smallest + one_level) // 2
    compiled, grads, _ = _step('mlp', tmp, 'gt', memory_budget=budget)
    assert compiled.peak_bytes() == compiled.predicted_peak_bytes() <= budget
    for name, grad in _step('mlp', tmp)[1].items():
        numpy.testing.assert_array_equal(grads[name], grad)
    backward = compiled._training_states()[0].programs.backward
    replays = collections.Counter(i.name for i in backward.instructions
                                  if i.name.endswith('/recomputed'))
    assert max(replays.values()) >= 2


def test_a_budget_below_the_smallest_peak_states_it(tmp):
    with pytest.raises(ValueError, match=r"memory_budget 1000 bytes is below the smallest "
                                         r"peak computation_order 'gt' reaches .*: \d+ bytes"):
        _step('mlp', tmp, 'gt', memory_budget=1000)


def test_custom_retains_the_named_values(tmp):
    model, path = _exported('mlp', tmp)
    none = _step('mlp', tmp)[0]
    retained = none._training_states()[0].programs.retained
    activations = [r for r in retained if not r.startswith('/')]
    keep = activations[::4]
    compiled, grads, _ = _step('mlp', tmp, 'custom', retain=keep)
    programs = compiled._training_states()[0].programs
    # Parameters ('/0/W') are kept whatever the policy; the activations kept are those named.
    assert {r for r in programs.retained if not r.startswith('/')} <= set(keep)
    expected = _step('mlp', tmp)[1]
    for name, grad in expected.items():
        numpy.testing.assert_allclose(grads[name], grad, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="retain names no forward value: nothing"):
        _step('mlp', tmp, 'custom', retain=['nothing'])


def _chain(tmp):
    """The forward node names of the 'mlp' model (a chain of Gemm and Relu,
    48 nodes), their outputs and the graph's input."""
    graph = onnx.load(_exported('mlp', tmp)[1]).graph
    return [n.name for n in graph.node], [n.output[0] for n in graph.node], graph.input[0].name


def _two_level_order(names, outputs, segment=16, half=8):
    """An order keeping the output of every ``segment``-th node; backward
    replays each segment's first ``half`` nodes, keeps only the last of
    their outputs, replays the rest and runs their gradients, then replays
    the first half again for theirs: those nodes run three times.  With
    ``half=0`` each segment is replayed once, whole."""
    n = len(names)
    checkpoints = set(range(segment - 1, n, segment))
    order = [('forget', outputs[k]) for k in range(n) if k not in checkpoints]
    for start in reversed(range(0, n, segment)):
        middle, end = start + half, min(start + segment, n)
        order += [('forward', names[k]) for k in range(start, middle)]
        order += [('forget', outputs[k]) for k in range(start, middle - 1)]
        order += [('forward', names[k]) for k in range(middle, end - 1)]
        order += [('backward', names[k]) for k in reversed(range(middle, end))]
        order += [('forward', names[k]) for k in range(start, middle - 1)]
        order += [('backward', names[k]) for k in reversed(range(start, middle))]
    return order


def _replays(compiled):
    """{instruction name: count} of the replays in the backward program."""
    backward = compiled._training_states()[0].programs.backward
    return collections.Counter(i.name for i in backward.instructions
                               if i.name.endswith('/recomputed'))


@pytest.mark.parametrize('kind, policy, kwargs', [
    ('cnn', None, {}), ('cnn', 'gt', {}), ('cnn', 'chen', {}), ('cnn', 'dummy', {}),
    ('mlp', 'gt', {'memory_budget': 0.5})])  # nested: values recomputed twice
def test_a_policys_order_runs_again_as_an_explicit_order(tmp, kind, policy, kwargs):
    # computation_order_steps() is what a user edits and passes back: as it
    # is, it runs the same replays and gets the same gradients.
    compiled, grads, _ = _step(kind, tmp, policy, **kwargs)
    steps = compiled.computation_order_steps()
    again, again_grads, _ = _step(kind, tmp, 'custom', order=steps)
    for name, grad in grads.items():
        numpy.testing.assert_array_equal(again_grads[name], grad, err_msg=name)
    assert _replays(again) == _replays(compiled)
    assert again.peak_bytes() == again.predicted_peak_bytes()
    assert again.computation_order_steps() == steps
    if policy is None:
        assert {kind for kind, _ in steps} == {'backward'}
        assert again.peak_bytes() == compiled.peak_bytes()
    if kwargs:
        assert max(_replays(again).values()) >= 2


def test_an_explicit_order_recomputes_values_twice(tmp):
    names, outputs, x = _chain(tmp)
    order = _two_level_order(names, outputs)
    compiled, grads, _ = _step('mlp', tmp, 'custom', order=order)
    expected_peak = _step('mlp', tmp)[0].peak_bytes()
    for name, grad in _step('mlp', tmp)[1].items():
        numpy.testing.assert_array_equal(grads[name], grad)  # the same operations
    programs = compiled._training_states()[0].programs
    replays = collections.Counter(i.name.split('/')[0] for i in programs.backward.instructions
                                  if i.name.endswith('/recomputed'))
    # Per segment of 16 nodes (8 Gemm-Relu pairs, each replay one fused
    # instruction): the first half's 4 pairs, the second half's 4 for its
    # gradients (its Relu is the checkpoint), then the first half's 4 again.
    assert sum(replays.values()) == 3 * (4 + 4 + 4)
    assert replays[names[0]] == 2 and replays[names[8]] == 1 and names[15] not in replays
    one_level = _step('mlp', tmp, 'custom', order=_two_level_order(names, outputs, half=0))[0]
    assert (compiled.peak_bytes() == compiled.predicted_peak_bytes()
            < one_level.peak_bytes() < expected_peak)
    # Nothing retained but the checkpoints, the parameters and the input.
    assert {r for r in programs.retained if not r.startswith('/')} <= {
        outputs[15], outputs[31], outputs[47], x}


@pytest.mark.parametrize('steps,message', [
    (lambda names, outputs: [('forget', outputs[0]), ('forward', names[1])],
     r"step 1 \('forward', '.*'\): node 1 \(Relu.*\) reads '.*', which is not held here: "
     r"recompute it first, with \('forward', 0\)"),
    (lambda names, outputs: [('backward', names[46])],
     r"step 0 .*: the backward graph runs the gradient of node 47 \(Gemm|Relu.*\): "
     r"\('backward', 47\) next"),
    # Node 41 is a Relu: node 42's gradient (a Gemm's) reads its output.
    (lambda names, outputs: [('forget', outputs[41])] + [('backward', k)
                                                         for k in range(47, -1, -1)],
     r"step 6 \('backward', 42\): the gradient of node 42 \(Gemm.*\) reads '.*', which is "
     r"not held here: recompute it first, with \('forward', 41\)"),
    (lambda names, outputs: [('backward', 47), ('forget', outputs[41]), ('forget', outputs[41])],
     r"step 2 .*: '.*' is not held here"),
    (lambda names, outputs: [('backward', 'nothing')],
     "step 0 .*: no forward node is named 'nothing'"),
    (lambda names, outputs: [('backward', 48)], 'step 0 .*: the forward graph has nodes 0 to 47'),
    (lambda names, outputs: [('forget', 'input_0')], "step 0 .*: 'input_0' is always kept"),
    (lambda names, outputs: [('forget', outputs[47])], 'step 0 .*: .* is always kept'),
    (lambda names, outputs: [('backward', 47)], r"step 1: the order ends before "
                                                 r"\('backward', 46\), the gradient of node 46 "
                                                 r"\(Gemm.*\); the backward steps missing are "
                                                 r"those of nodes 46, 45, .*, 27, \.\.\.$"),
], ids=['replay-reads-forgotten', 'backward-out-of-order', 'read-forgotten', 'forget-twice',
        'unknown-node', 'node-index-range', 'forget-input', 'forget-output', 'ends-early'])
def test_an_explicit_order_that_cannot_run_names_the_step(tmp, steps, message):
    order = steps(*_chain(tmp)[:2])
    with pytest.raises(ValueError, match="computation_order 'custom', order " + message):
        _step('mlp', tmp, 'custom', order=order)


@pytest.mark.parametrize('kwargs,message', [
    ({'computation_order': 'chen', 'memory_budget': 100},
     "'memory_budget' applies to computation_order 'gt' only, not to 'chen'"),
    ({'memory_budget': 0.5}, "'memory_budget' applies to computation_order 'gt' only, "
                             "not to None"),
    ({'computation_order': 'gt', 'chen_segments': 3}, "'chen_segments' applies to .*'chen'"),
    ({'computation_order': 'chen', 'retain': ['a']}, "'retain' applies to .*'custom'"),
    ({'computation_order': 'custom'}, "'custom' needs one of the compiler options 'retain' "
                                      "\\(.*\\) and 'order'"),
    ({'computation_order': 'custom', 'retain': ['a'], 'order': []}, 'not both'),
    ({'computation_order': 'custom', 'order': [('recompute', 'a')]},
     r"step 0 is \('recompute', 'a'\), not a \(kind, target\) pair"),
    ({'computation_order': 'custom', 'order': [('forget', 3)]}, 'names 3: a value name'),
    ({'computation_order': 'custom', 'order': 'forget x'}, 'list of .* steps'),
    ({'computation_order': 'gt', 'memory_budget': 1.5}, 'fraction'),
    ({'computation_order': 'gt', 'memory_budget': -3}, 'positive int'),
    ({'computation_order': 'chen', 'chen_segments': 0}, 'positive int'),
    ({'computation_order': 'recompute'}, "unknown computation_order 'recompute'"),
])
def test_misapplied_options_are_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CompilerOptions.from_kwargs(kwargs)


def test_every_policy_is_documented_and_listed():
    assert set(recompute.POLICIES) == {None, 'chen', 'gt', 'custom', 'dummy'}
    assert all(fn.__doc__ for fn in recompute.POLICIES.values())


# -- central differences through 'dummy' -------------------------------------

def _chain_model(opset):
    """x -> Tanh -> Mul(w) -> Sigmoid -> Conv(k) -> BatchNormalization
    (training: its opset-14 form, or five outputs before) -> Relu -> MaxPool
    -> Softplus -> Mul(x): every value backward reads is recomputed under
    'dummy'."""
    def info(name, shape):
        return helper.make_tensor_value_info(name, TensorProto.DOUBLE, shape)

    nodes = [helper.make_node('Tanh', ['x'], ['a']),
             helper.make_node('Mul', ['a', 'w'], ['b']),
             helper.make_node('Sigmoid', ['b'], ['c']),
             helper.make_node('Conv', ['c', 'k'], ['d'], pads=[1, 1, 1, 1]),
             helper.make_node('BatchNormalization', ['d', 'scale', 'bias', 'mean', 'var'],
                              ['e', 'mean_out', 'var_out'], training_mode=1) if opset >= 14 else
             helper.make_node('BatchNormalization', ['d', 'scale', 'bias', 'mean', 'var'],
                              ['e', 'mean_out', 'var_out', 'saved_mean', 'saved_var']),
             helper.make_node('Relu', ['e'], ['f']),
             helper.make_node('MaxPool', ['f'], ['g'], kernel_shape=[2, 2]),
             helper.make_node('Softplus', ['g'], ['h']),
             helper.make_node('Mul', ['h', 'h'], ['y'])]
    inputs = [info('x', [2, 2, 4, 4]), info('w', [2, 2, 4, 4]), info('k', [2, 2, 3, 3]),
              info('scale', [2]), info('bias', [2]), info('mean', [2]), info('var', [2])]
    graph = helper.make_graph(nodes, 'chain', inputs, [info('y', None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', opset)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize('opset', [13, 17])
def test_central_differences_through_dummy(monkeypatch, opset):
    monkeypatch.setattr(gradcheck, 'compile_training',
                        functools.partial(compile_training, computation_order='dummy'))
    rng = numpy.random.RandomState(0)
    shapes = {'x': (2, 2, 4, 4), 'w': (2, 2, 4, 4), 'k': (2, 2, 3, 3), 'scale': (2,),
              'bias': (2,), 'mean': (2,), 'var': (2,)}
    inputs = {n: rng.uniform(0.5, 1.5, s) for n, s in shapes.items()}
    programs = gradcheck.check_gradients(_chain_model(opset), inputs,
                                         wrt=['x', 'w', 'k', 'scale', 'bias'])
    replayed = {i.op for i in programs.backward.instructions}
    assert {'Tanh', 'Sigmoid', 'Conv', 'BatchNormalization', 'Relu'} <= replayed


# -- the one-program training step ------------------------------------------

def _trained_step(policy, **kwargs):
    """Two SGD steps of a deep MLP classifier compiled as one training step
    program with computation_order ``policy`` and compiler options
    ``kwargs``: (its parameters by path, the VM's peak, the step's
    computation_order_steps())."""
    numpy.random.seed(0)  # the same initial weights every time
    base = DeepMLP()
    x, t = _data(base)
    model = L.Classifier(DeepMLP())
    model.predictor.copyparams(base)
    optimizer = chainer.optimizers.SGD(lr=0.1)
    optimizer.setup(model)
    step = chainer_compiler.compile_training_step(
        model, optimizer, (x, t), runtime_kwargs={'track_memory': True},
        computation_order=policy, compiler_kwargs=kwargs)
    for _ in range(2):
        step(x, t)
    return ({name: p.array.copy() for name, p in model.namedparams()}, step.executor.peak_bytes,
            step.computation_order_steps())


@pytest.mark.parametrize('order,kwargs', POLICIES)
def test_the_training_step_takes_the_policies(order, kwargs):
    expected, unchanged, _ = _trained_step(None)
    params, peak, _ = _trained_step(order, **kwargs)
    for name, value in expected.items():
        numpy.testing.assert_allclose(params[name], value, rtol=1e-6, atol=1e-7, err_msg=name)
    if order in ('gt', 'chen'):
        assert peak < unchanged


def test_the_training_step_runs_an_explicit_order(monkeypatch):
    # The classifier's forward graph is the MLP's 48 nodes, then the loss's;
    # its backward runs the loss's gradients first.  The order, made from
    # the graph at compile time, is the two-level one of the MLP part.
    def two_level(problem):
        mlp = range(48)
        order = _two_level_order(list(mlp), [problem.forward.nodes[k].output[0] for k in mlp])
        loss = [k for k in dict.fromkeys(problem.backward.origins) if k is not None and k >= 48]
        forgets = next(i for i, (kind, _) in enumerate(order) if kind != 'forget')
        order[forgets:forgets] = [('backward', k) for k in loss]
        assert problem.joined
        return recompute.ordered.ordered_plan(problem.forward, problem.backward, order,
                                              problem.joined)
    expected, unchanged, _ = _trained_step(None)
    monkeypatch.setitem(recompute.POLICIES, 'custom', two_level)
    params, peak, _ = _trained_step('custom', retain=[])
    for name, value in expected.items():
        numpy.testing.assert_allclose(params[name], value, rtol=1e-6, atol=1e-7, err_msg=name)
    assert peak < unchanged


def test_the_training_steps_order_runs_again_as_an_explicit_order():
    expected, peak, steps = _trained_step('gt')
    params, again, again_steps = _trained_step('custom', order=steps)
    for name, value in expected.items():
        numpy.testing.assert_array_equal(params[name], value, err_msg=name)
    assert again_steps == steps
    assert any(kind == 'forward' for kind, _ in steps)


class _Stages(chainer.Chain):
    """Three stages of three 3x3 convolutions, each stage at half the
    resolution and four times the channels of the one before, then two
    fully connected layers: the first stages' activations outweigh their
    weights, the last's weights their activations (ResNet's shape)."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.convs = chainer.ChainList(*[
                L.Convolution2D(None, width, 3, 2 if k in (3, 6) else 1, 1)
                for k, width in enumerate((4, 4, 4, 16, 16, 16, 64, 64, 64))])
            self.fc = L.Linear(None, 128)
            self.out = L.Linear(128, 10)

    def forward(self, x):
        for conv in self.convs:
            x = F.relu(conv(x))
        return self.out(F.relu(self.fc(x)))


def _stages_step(policy, planned=None):
    """Two momentum SGD steps of a _Stages classifier at batch 16 compiled
    as one training step under ``policy``: its parameters by path.
    ``planned``: a policy run in gt's place (recompute.POLICIES)."""
    rng = numpy.random.RandomState(0)
    x, t = rng.randn(16, 3, 16, 16).astype(numpy.float32), rng.randint(0, 10, 16).astype('i')
    numpy.random.seed(0)
    model = L.Classifier(_Stages())
    model(x, t)
    optimizer = chainer.optimizers.MomentumSGD(lr=0.01)
    optimizer.setup(model)
    saved = recompute.POLICIES['gt']
    recompute.POLICIES['gt'] = planned or saved
    try:
        step = chainer_compiler.compile_training_step(model, optimizer, (x, t),
                                                      runtime_kwargs=ON_THE_VM,
                                                      computation_order=policy)
    finally:
        recompute.POLICIES['gt'] = saved
    for _ in range(2):
        step(x, t)
    return {name: p.array.copy() for name, p in model.namedparams()}


@pytest.mark.slow  # 3 s: two compilations, gt planned twice
def test_gt_plans_a_training_step_on_the_process_peak(monkeypatch):
    """gt minimises the peak of the joined step as the process holds it
    (the parameters held, each update where it runs: Problem.process_peak),
    refining its best plan value by value (gt._refine), below the plan of
    least VM count it chose before, which kept early checkpoints through
    the last stage's gradients and updates; the step trains as retaining
    everything does."""
    peaks = {}

    def planned(problem):
        chosen = GT_MODULE.gt(problem)
        with monkeypatch.context() as before:  # the VM's count, unrefined
            before.setattr(GT_MODULE, 'REFINE_PLANS', 0)
            count = type(problem).live_at_peak
            before.setattr(problem, 'live_at_peak', lambda plan, held=False: count(problem, plan))
            old = GT_MODULE.gt(problem)
        for name, keep in (('gt', chosen), ('before', old)):
            peaks[name] = problem.process_peak(problem.plan(keep))
        return chosen
    expected = _stages_step(None)
    params = _stages_step('gt', planned)
    assert peaks['gt'] < 0.97 * peaks['before'], peaks
    for name, value in expected.items():
        numpy.testing.assert_allclose(params[name], value, rtol=1e-6, atol=1e-7, err_msg=name)


# -- the benchmark models (benchmarks/models.py), shrunk -----------------------

def _load_benchmark_models():
    """benchmarks/models.py, loaded by path: the benchmark scripts are not a
    package."""
    path = os.path.join(os.path.dirname(__file__), '..', '..', 'benchmarks', 'models.py')
    spec = importlib.util.spec_from_file_location('benchmark_models', path)
    models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(models)
    return models


def _benchmark_models():
    """{name: (make the model, an input batch)} of the memory benchmark's
    models at test sizes."""
    models = _load_benchmark_models()
    rng = numpy.random.RandomState(0)
    images = rng.randn(2, 3, 32, 32).astype(numpy.float32)
    return {
        'resnet50': (lambda: models.ResNet50(width=4, blocks=(1, 1, 1, 1)), images),
        'vgg16': (lambda: models.VGG16(width=4, fc_width=16, image_size=32), images),
        'lstm': (lambda: models.LSTMClassifier(n_in=3, hidden=5), rng.randn(2, 4, 3)
                 .astype(numpy.float32)),
        'mlp100': (lambda: models.deep_mlp(100, n_in=8, width=8), rng.randn(4, 8)
                   .astype(numpy.float32)),
        'dropout': (lambda: models.DropoutMLP(n_in=8, hidden=8), rng.randn(4, 8)
                    .astype(numpy.float32)),
    }


# resnet50 and mlp100 take seconds each: slow.
@pytest.mark.parametrize('name', [pytest.param('resnet50', marks=pytest.mark.slow), 'vgg16',
                                  'lstm', pytest.param('mlp100', marks=pytest.mark.slow),
                                  'dropout'])
def test_benchmark_models_get_the_same_gradients_under_every_policy(tmp_path, monkeypatch, name):
    # 'custom' runs the nested order of three levels of three (what gt
    # falls back on under a tight budget), made from the graph.
    monkeypatch.setitem(recompute.POLICIES, 'custom', lambda problem: ordered_plan(
        problem.forward, problem.backward,
        nested_order(problem.forward, problem.backward, (3, 3, 3)), problem.joined))
    make, x = _benchmark_models()[name]
    t = numpy.arange(len(x), dtype=numpy.int32) % 5
    numpy.random.seed(0)
    base = make()
    with chainer.using_config('train', False):
        path = chainer_compiler.export(base, [x], str(tmp_path / 'model.onnx'))
    grads = {}
    # A budget of the whole peak fits any model; tighter ones not these small ones.
    for order, kwargs in [(None, {}), ('chen', {}), ('gt', {}), ('dummy', {}),
                          ('gt', {'memory_budget': 1.0}), ('custom', {'retain': []})]:
        model = make()
        model.copyparams(base)
        compiled = chainer_compiler.compile_onnx(model, path, computation_order=order,
                                                 compiler_kwargs=kwargs, runtime_kwargs=ON_THE_VM)
        model.cleargrads()
        numpy.random.seed(7)  # the same Dropout masks
        F.softmax_cross_entropy(compiled(x), t).backward()
        grads[order, str(kwargs)] = {n: p.grad.copy() for n, p in model.namedparams()}
    expected = grads[None, '{}']
    for key, got in grads.items():
        for param, grad in expected.items():
            numpy.testing.assert_allclose(got[param], grad, rtol=1e-6, atol=1e-7,
                                          err_msg='%s %s' % (key, param))


@pytest.mark.slow
def test_the_deep_plain_cnn_meets_the_peak_targets(tmp_path):
    """The benchmark's deep plain CNN, shrunk: gt within half of the peak
    without recompute, chen within 60%, as measured by the VM."""
    models = _load_benchmark_models()
    x = numpy.random.RandomState(0).randn(4, 3, 16, 16).astype(numpy.float32)
    t = numpy.arange(4, dtype=numpy.int32)
    base = models.DeepPlainCNN(depth=16, channels=8)
    with chainer.using_config('train', False):
        path = chainer_compiler.export(base, [x], str(tmp_path / 'cnn.onnx'))
    peaks = {}
    for order in (None, 'chen', 'gt'):
        model = models.DeepPlainCNN(depth=16, channels=8)
        model.copyparams(base)
        compiled = chainer_compiler.compile_onnx(model, path, computation_order=order,
                                                 runtime_kwargs={'track_memory': True})
        F.softmax_cross_entropy(compiled(x), t).backward()
        peaks[order] = compiled.peak_bytes()
    assert peaks['gt'] <= 0.5 * peaks[None]
    assert peaks['chen'] <= 0.6 * peaks[None]

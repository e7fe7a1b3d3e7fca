"""Concat written in place by its producers, and channel shuffle's
Transpose (runtime/native/plan.py, lowerings/array.py).

At batch 1 each input of a Concat along the channels is one contiguous
block of its output: the planner lets the input's producer write it there
(ArenaPlan.placed) when nothing else needs the value, and the Concat copies
nothing for it.  The property test replays random plans in Python, byte by
byte at the planned offsets, against the NumPy VM, without building C; the
built models check the C itself.  The planner gives each value one buffer,
so a Program writing a register twice (or writing an input) is refused.
"""
import dataclasses

import numpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.executor import Executor
from chainer_compiler.runtime.native import NativeEmitError, emit_c
from chainer_compiler.runtime.native.emit_c import NATIVE_BACKEND, NativeCompilation
from chainer_compiler.runtime.native.plan import plan
from chainer_compiler.runtime.native.render import render

from .helpers import check_native, make_model


def _lowered(model):
    """The Lowered of ``model`` (NATIVE_BACKEND's stages up to the plan)."""
    c = NativeCompilation(build_program(model), 'm', 'embed', '/nonexistent/not-written')
    for stage, passes in NATIVE_BACKEND:
        if stage == 'plan':
            break
        for run_pass in passes:
            run_pass(c)
    return c.lowered


def _register(lowered, name):
    p = lowered.program
    for v in p.inputs + p.outputs:
        if v.name == name:
            return v.register
    return next(r for r, n in p.register_names.items() if n == name)


def _placed_names(lowered, arena):
    """{name of a value written into a Concat's output: the output's name}."""
    names = lowered.program.register_names
    return {names.get(r): names.get(container) for r, (container, _) in arena.placed.items()}


# -- a replay of the plan in Python ---------------------------------------------
_UNARY = {'Neg': numpy.negative, 'Abs': numpy.abs, 'Relu': lambda x: numpy.maximum(x, 0)}


def _replay(lowered, arena, inputs):
    """Run ``lowered``'s element-wise ops and Concats with every value at
    the place ``arena`` gives it (the C's memory, as bytes): what the C
    computes, a clobbered value included."""
    p = lowered.program
    spaces = {'arena': numpy.zeros(arena.arena_bytes, numpy.uint8)}
    spaces.update({('out', k): numpy.zeros(lowered.nbytes(v.register), numpy.uint8)
                   for k, v in enumerate(p.outputs)})
    spaces.update({('in', k): numpy.frombuffer(numpy.ascontiguousarray(x).tobytes(),
                                               numpy.uint8).copy()
                   for k, x in enumerate(inputs)})
    spaces.update({('const', r): a.view(numpy.uint8).reshape(-1)
                   for r, a in lowered.consts.items()})

    def where(r):
        root = arena.alias_of.get(r, r)
        if root in arena.placed:
            container, offset = arena.placed[root]
            space, start = where(container)
            return space, start + offset * numpy.dtype(lowered.dtypes[r]).itemsize
        if root in lowered.input_of:
            return ('in', lowered.input_of[root]), 0
        if root in lowered.consts:
            return ('const', root), 0
        if root in arena.output_of:
            return ('out', arena.output_of[root]), 0
        return 'arena', arena.offsets[root]

    def read(r):
        space, start = where(r)
        data = spaces[space][start:start + lowered.nbytes(r)]
        return data.view(lowered.dtypes[r]).reshape(lowered.shapes[r]).copy()

    def write(r, value):
        space, start = where(r)
        spaces[space][start:start + lowered.nbytes(r)] = \
            numpy.ascontiguousarray(value, lowered.dtypes[r]).view(numpy.uint8).reshape(-1)

    for inst, step in zip(p.instructions, lowered.steps):
        if step is None or step.alias:
            continue
        xs = [read(r) for r in inst.inputs]
        if inst.op == 'Concat':
            y = numpy.concatenate(xs, axis=inst.attrs['axis'])
        elif inst.op == 'Transpose':
            y = numpy.transpose(xs[0], inst.attrs['perm'])
        elif inst.op == 'Add':
            y = xs[0] + xs[1]
        else:
            y = _UNARY[inst.op](xs[0])
        write(inst.outputs[0], y)
    for k, r in arena.final_copies:
        spaces[('out', k)][:] = spaces[where(r)[0]][where(r)[1]:][:lowered.nbytes(r)]
    return [spaces[('out', k)].view(lowered.dtypes[v.register]).reshape(
        lowered.shapes[v.register]) for k, v in enumerate(p.outputs)]


@st.composite
def _concat_graphs(draw):
    """A random graph of element-wise ops and channel Concats over values of
    shape (batch, channels, 3), with some intermediate values as outputs."""
    batch = draw(st.sampled_from([1, 1, 2]))
    channels = {'x': 2}
    nodes = []
    for k in range(draw(st.integers(2, 12))):
        name, names = 'v%d' % k, sorted(channels)
        kind = draw(st.sampled_from(['unary', 'add', 'concat', 'concat', 'layer', 'layer']))
        concats = [n for n in nodes if n.op_type == 'Concat']
        if kind == 'layer':
            # DenseNet's: a feature made from the last Concat (by an
            # element-wise op, which may write over it, then copies, which
            # do not, as a Conv), then the Concat of that one's parts and
            # the new feature.
            source, parts = (concats[-1].output[0], list(concats[-1].input)) if concats \
                else ('x', [])
            nodes += [helper.make_node(draw(st.sampled_from(sorted(_UNARY))), [source],
                                       [name + 'a']),
                      helper.make_node('Transpose', [name + 'a'], [name + 't'], perm=[0, 2, 1]),
                      helper.make_node('Transpose', [name + 't'], [name + 'b'], perm=[0, 2, 1])]
            channels[name + 'a'] = channels[name + 'b'] = channels[source]
            parts.append(name + 'b')
        elif kind == 'concat':
            parts = draw(st.lists(st.sampled_from(names), min_size=1, max_size=3))
        if kind in ('concat', 'layer'):
            if sum(channels[n] for n in parts) > 24:
                continue
            nodes.append(helper.make_node('Concat', parts, [name], axis=1))
            channels[name] = sum(channels[n] for n in parts)
        elif kind == 'add':
            a = draw(st.sampled_from(names))
            b = draw(st.sampled_from([n for n in names if channels[n] == channels[a]]))
            nodes.append(helper.make_node('Add', [a, b], [name]))
            channels[name] = channels[a]
        else:
            # Of the input often: a new buffer, live while others are.
            a = draw(st.sampled_from(names + ['x'] * len(names)))
            nodes.append(helper.make_node(draw(st.sampled_from(sorted(_UNARY))), [a], [name]))
            channels[name] = channels[a]
    produced = [n.output[0] for n in nodes if n.output[0] in channels] or ['x']
    outputs = sorted({produced[-1]} | set(draw(st.lists(st.sampled_from(produced),
                                                        max_size=2))))
    model = make_model(nodes, [('x', 'float32', (batch, 2, 3))],
                       [(n, 'float32', (batch, channels[n], 3)) for n in outputs])
    return model, batch


# 150 in the default profile; scaled with it (tests/conftest.py).
@settings(max_examples=settings.default.max_examples * 3 // 2, deadline=None)
@given(_concat_graphs())
def test_planned_memory_computes_what_the_vm_computes(case):
    model, batch = case
    lowered = _lowered(model)
    arena = plan(lowered)
    x = numpy.random.RandomState(0).uniform(-1, 1, (batch, 2, 3)).astype(numpy.float32)
    want = Executor(lowered.program).run_positional([x])
    for got, w in zip(_replay(lowered, arena, [x]), want):
        numpy.testing.assert_array_equal(got, w)
    if batch == 2:  # Channels of one sample are not one block of the output.
        assert not arena.placed


# -- DenseNet- and Inception-style blocks, built --------------------------------
def _dense_block():
    """Two DenseNet layers each Concat(input, Relu(Conv(input))) (nested),
    then three as torchvision writes them (layer k: Conv(Relu(BN(Concat of
    the block's input and every layer's output before k)))), and an
    Inception-style Concat of two branches that is the model's output."""
    rng = numpy.random.RandomState(0)
    node = helper.make_node
    nodes = [node('Conv', ['x', 'w1'], ['a1'], pads=[1, 1, 1, 1]),
             node('Relu', ['a1'], ['r1']),
             node('Concat', ['x', 'r1'], ['c1'], axis=1),
             node('Conv', ['c1', 'w2'], ['a2'], pads=[1, 1, 1, 1]),
             node('Relu', ['a2'], ['r2']),
             node('Concat', ['c1', 'r2'], ['c2'], axis=1),
             node('MaxPool', ['c2'], ['t0'], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    features, weights = ['t0'], {}
    for k in range(1, 4):
        channels = 10 + 3 * (k - 1)
        if k > 1:
            nodes.append(node('Concat', list(features), ['d%d' % k], axis=1))
        nodes += [node('BatchNormalization', [features[-1] if k == 1 else 'd%d' % k] + [
                      'n%d%s' % (k, p) for p in 'sbmv'], ['n%d' % k]),
                  node('Relu', ['n%d' % k], ['p%d' % k]),
                  node('Conv', ['p%d' % k, 'v%d' % k], ['f%d' % k], pads=[1, 1, 1, 1])]
        weights.update({'v%d' % k: rng.randn(3, channels, 3, 3),
                        'n%ds' % k: rng.uniform(0.5, 1.5, channels),
                        'n%db' % k: rng.randn(channels), 'n%dm' % k: rng.randn(channels),
                        'n%dv' % k: rng.uniform(0.5, 1.5, channels)})
        features.append('f%d' % k)
    nodes += [node('Concat', features, ['d4'], axis=1),
              node('Conv', ['d4', 'w3'], ['b1']),
              node('MaxPool', ['d4'], ['b2'], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
              node('Concat', ['b1', 'b2'], ['y'], axis=1)]
    weights.update({'w1': rng.randn(3, 4, 3, 3), 'w2': rng.randn(3, 7, 3, 3),
                    'w3': rng.randn(5, 19, 1, 1)})
    model = make_model(nodes, [('x', 'float32', (1, 4, 6, 6))],
                       [('y', 'float32', (1, 24, 6, 6))],
                       {k: w.astype(numpy.float32) for k, w in weights.items()})
    return model, [rng.uniform(-1, 1, (1, 4, 6, 6)).astype(numpy.float32)]


def test_dense_block_concats_copy_only_the_graph_input():
    model, _ = _dense_block()
    lowered = _lowered(model)
    arena = plan(lowered)
    # Every part but x, an input of the program, lies in its Concat's output:
    # c1 in c2 (nested), the torchvision layers' features in the block's
    # last Concat d4, and the layers' Concats d2 and d3 are its first
    # blocks (read by their BatchNormalizations, which write elsewhere);
    # the branches lie in the program's output buffer.
    assert _placed_names(lowered, arena) == {
        'r1': 'c1', 'c1': 'c2', 'r2': 'c2', 't0': 'd4', 'f1': 'd4', 'f2': 'd4', 'f3': 'd4',
        'd2': 'd4', 'd3': 'd4', 'b1': 'y', 'b2': 'y'}
    text = render(lowered, arena, 'embed').texts['m.c']
    assert text.count('ccn_strided_copy') == 1  # x into c1
    # c2's buffer holds everything from the first Conv on: one buffer, no copy.
    c2 = _register(lowered, 'c2')
    assert [b for b in arena.buffers if b.key == c2][0].start == 0


@pytest.mark.native_build
def test_dense_block_equals_the_vm_and_onnxruntime():
    check_native(*_dense_block())


def _not_placed():
    """Concats whose parts cannot all be written in place: batch 2, a part
    read again after the Concat, one value twice, a constant, a program
    output, a part written in place after its Concat (e by Neg)."""
    nodes = [helper.make_node('Neg', ['x'], ['n']),
             helper.make_node('Abs', ['x'], ['a']),
             helper.make_node('Concat', ['n', 'a', 'k'], ['c'], axis=1),  # a read below
             helper.make_node('Add', ['a', 'a'], ['s']),
             helper.make_node('Relu', ['s'], ['r']),
             helper.make_node('Concat', ['r', 'r', 'c'], ['d'], axis=1),  # r twice
             helper.make_node('Neg', ['d'], ['o']),
             helper.make_node('Concat', ['o', 'd'], ['y'], axis=1),  # o is an output
             helper.make_node('Relu', ['z'], ['zr']),
             helper.make_node('Concat', ['zr', 'z'], ['zy'], axis=1),  # batch 2
             helper.make_node('Abs', ['x'], ['e']),
             helper.make_node('Concat', ['x', 'e'], ['f'], axis=1),
             helper.make_node('Neg', ['e'], ['g']),  # in place: e's last use
             helper.make_node('Relu', ['g'], ['h'])]
    k = numpy.arange(6, dtype=numpy.float32).reshape(1, 2, 3)
    model = make_model(nodes, [('x', 'float32', (1, 2, 3)), ('z', 'float32', (2, 2, 3))],
                       [('y', 'float32', (1, 20, 3)), ('o', 'float32', (1, 10, 3)),
                        ('zy', 'float32', (2, 4, 3)), ('f', 'float32', (1, 4, 3)),
                        ('h', 'float32', (1, 2, 3))], {'k': k})
    rng = numpy.random.RandomState(1)
    return model, [rng.uniform(-1, 1, s).astype(numpy.float32) for s in ((1, 2, 3), (2, 2, 3))]


def _check_replay(model, inputs):
    """The plan of ``model`` replayed in Python equals the NumPy VM."""
    lowered = _lowered(model)
    want = Executor(lowered.program).run_positional(inputs)
    for got, w in zip(_replay(lowered, plan(lowered), inputs), want):
        numpy.testing.assert_array_equal(got, w)
    return lowered


def test_a_part_holds_its_block_from_its_producer_on():
    """p is written into c's buffer at instruction 0: no value live in
    between (q, m) may take that memory."""
    nodes = [helper.make_node('Neg', ['x'], ['p']),
             helper.make_node('Abs', ['x'], ['q']),
             helper.make_node('Neg', ['q'], ['m']),
             helper.make_node('Relu', ['q'], ['r']),
             helper.make_node('Add', ['m', 'r'], ['t']),
             helper.make_node('Concat', ['p', 't'], ['c'], axis=1),
             helper.make_node('Relu', ['c'], ['y'])]
    model = make_model(nodes, [('x', 'float32', (1, 2, 3))], [('y', 'float32', (1, 4, 3))])
    x = numpy.random.RandomState(3).uniform(-1, 1, (1, 2, 3)).astype(numpy.float32)
    lowered = _check_replay(model, [x])
    assert set(_placed_names(lowered, plan(lowered))) == {'p', 'm'}  # m: t's memory


def test_parts_needed_elsewhere_are_copied():
    model, inputs = _not_placed()
    lowered = _check_replay(model, inputs)
    # n: read only by its Concat; not a, read by Add later, whose memory (r,
    # after Add and Relu in place) d reads twice: it lies in d's last block
    # of r; c is read only by d, d by y; not o (an output) nor zr (batch 2).
    assert _placed_names(lowered, plan(lowered)) == {'n': 'c', 'a': 'd', 'c': 'd', 'd': 'y'}


def test_a_prefix_read_after_its_container_is_copied():
    """p's parts begin c's, but p is read after c's last read, when c's
    memory may hold other values: p keeps a buffer of its own."""
    node = helper.make_node
    nodes = [node('Neg', ['x'], ['a']), node('Abs', ['x'], ['b']),
             node('Concat', ['a'], ['p'], axis=1),
             node('Concat', ['a', 'b'], ['c'], axis=1),
             node('Transpose', ['c'], ['ct'], perm=[0, 2, 1]),  # c's last read
             node('Transpose', ['ct'], ['u'], perm=[0, 2, 1]),
             node('Neg', ['p'], ['w']),
             node('Concat', ['w', 'w'], ['ww'], axis=1),
             node('Add', ['u', 'ww'], ['y'])]
    model = make_model(nodes, [('x', 'float32', (1, 2, 3))], [('y', 'float32', (1, 4, 3))])
    x = numpy.random.RandomState(4).uniform(-1, 1, (1, 2, 3)).astype(numpy.float32)
    lowered = _check_replay(model, [x])
    assert _placed_names(lowered, plan(lowered)) == {'a': 'c', 'b': 'c', 'w': 'ww'}


@pytest.mark.native_build
def test_parts_needed_elsewhere_equal_the_vm():
    check_native(*_not_placed())


# -- channel shuffle ------------------------------------------------------------
def _shuffle_block(batch=1, groups=2):
    """ShuffleNet V2's unit: split the channels, a 1x1 Conv on one half,
    Concat, then Reshape -> Transpose -> Reshape (channel shuffle); and a
    Transpose that moves only axes of size 1."""
    c, hw = 8, 5
    rng = numpy.random.RandomState(2)
    nodes = [helper.make_node('Split', ['x'], ['x1', 'x2'], axis=1),
             helper.make_node('Conv', ['x2', 'w'], ['b']),
             helper.make_node('Relu', ['b'], ['br']),
             helper.make_node('Concat', ['x1', 'br'], ['c'], axis=1),
             helper.make_node('Reshape', ['c', 'g'], ['cg']),
             helper.make_node('Transpose', ['cg'], ['t'], perm=[0, 2, 1, 3, 4]),
             helper.make_node('Reshape', ['t', 's'], ['shuffled']),
             helper.make_node('Transpose', ['shuffled'], ['u'], perm=[1, 0, 2, 3]),
             helper.make_node('Relu', ['u'], ['y'])]
    inits = {'w': rng.randn(c // 2, c // 2, 1, 1).astype(numpy.float32),
             'g': numpy.array([batch, groups, c // groups, hw, hw]),
             's': numpy.array([batch, c, hw, hw])}
    model = make_model(nodes, [('x', 'float32', (batch, c, hw, hw))],
                       [('y', 'float32', (c, batch, hw, hw))], inits)
    return model, [rng.uniform(-1, 1, (batch, c, hw, hw)).astype(numpy.float32)]


def test_channel_shuffle_is_one_copy_and_a_unit_transpose_a_view():
    lowered = _lowered(_shuffle_block()[0])
    arena = plan(lowered)
    assert _placed_names(lowered, arena) == {'x1': 'c', 'br': 'c'}  # Split and Conv write c
    text = render(lowered, arena, 'embed').texts['m.c']
    # Split's two parts and the shuffle: the Concat and the unit Transpose copy nothing.
    assert text.count('ccn_strided_copy') == 3
    u, shuffled = _register(lowered, 'u'), _register(lowered, 'shuffled')
    assert arena.alias_of[u] == arena.alias_of[shuffled]


@pytest.mark.native_build
@pytest.mark.parametrize('batch, groups', [(1, 2), (2, 4)])
def test_channel_shuffle_equals_the_vm(batch, groups):
    check_native(*_shuffle_block(batch, groups))


# -- one buffer per value ---------------------------------------------------------
@pytest.mark.parametrize('case', ['twice', 'input'])
def test_a_program_writing_a_register_twice_or_an_input_is_refused(tmp_path, case):
    """Validation allows a hand-made Program to write a register again; the
    planner sizes one buffer per register, so Concat's 512 bytes would run
    past the 256 planned for the later Neg (a heap overflow before), and an
    input is the caller's array."""
    model = make_model([helper.make_node('Concat', ['x', 'x'], ['a'], axis=1),
                        helper.make_node('Abs', ['a'], ['s']),
                        helper.make_node('Neg', ['x'], ['b']),
                        helper.make_node('Add', ['b', 'b'], ['y'])],
                       [('x', 'float32', (1, 64))],
                       [('y', 'float32', (1, 64)), ('s', 'float32', (1, 128))])
    program = build_program(model)
    concat, _, neg, add = program.instructions
    target = concat.outputs[0] if case == 'twice' else program.inputs[0].register
    program = dataclasses.replace(program, types={}, instructions=[
        concat, _, dataclasses.replace(neg, outputs=(target,), frees=()),
        dataclasses.replace(add, inputs=(target, target), frees=(target,))])
    with pytest.raises(NativeEmitError, match=r"instruction 2 \(Neg, node 'Neg_2'\) writes "
                       'register %%%d, which %s' % (target, 'instruction 0 wrote'
                                                    if case == 'twice' else 'is a program input')):
        emit_c(program, tmp_path / 'c')
    assert not (tmp_path / 'c').exists()

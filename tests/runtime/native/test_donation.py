"""Buffer donation (issue 34): a training backward's native library keeps
values in the memory of retained values after their last read, so its
arena is smaller, and overwrites an input only when the caller handed
over the only reference to it (run_positional(consume=True))."""
import itertools

import chainer
import chainer.functions as F
import chainer.links as L
import hypothesis
import hypothesis.strategies as st
import numpy
import pytest

import chainer_compiler
from chainer_compiler.runtime import Executor
from chainer_compiler.runtime.errors import ConfigurationError
from chainer_compiler.runtime.native import library
from chainer_compiler.runtime.native.arena import ALIGNMENT, Buffer
from chainer_compiler.runtime.native.emit_c import emit_c
from chainer_compiler.runtime.native.plan import _donate
from chainer_compiler.training import compile_training

from .test_native_training import MLP


@pytest.fixture(scope='module')
def programs(tmp_path_factory):
    numpy.random.seed(0)
    # Wide hidden layers: the retained activations are most of what the
    # backward holds.
    model, x = MLP((20, 64, 64, 64, 5)), numpy.random.uniform(-1, 1, (8, 20)).astype(numpy.float32)
    path = str(tmp_path_factory.mktemp('donation') / 'mlp.onnx')
    chainer_compiler.export(model, [x], path)
    return compile_training(path, wrt=None), x


def _backward_inputs(programs, x, seed=1):
    """The backward's inputs (a gradient of each output, the retained
    values) after the NumPy forward on ``x``."""
    by_name = dict(zip([v.name for v in programs.forward.outputs],
                       Executor(programs.forward, backend='numpy').run_positional([x])))
    rng = numpy.random.RandomState(seed)
    grads = {n: rng.standard_normal(by_name[n].shape).astype(numpy.float32)
             for n in programs.grad_of_outputs}
    return [grads[n] for n in programs.grad_of_outputs] + [by_name[r] for r in programs.retained]


def test_donation_shrinks_the_arena_and_never_touches_kept_inputs(programs, tmp_path):
    """plan(donate=True) puts intermediates in retained values read for
    the last time: the MLP backward's arena halves; the gradient of the
    output (read to the end) and no updated input are donated."""
    programs, _ = programs
    every = range(len(programs.backward.inputs))
    plain = emit_c(programs.backward, tmp_path / 'plain', weights='file')
    donated = emit_c(programs.backward, tmp_path / 'donated', weights='file', donate=every)
    assert plain.donated_inputs == []
    assert donated.donated_inputs and 0 not in donated.donated_inputs
    assert donated.arena_bytes <= plain.arena_bytes // 2
    text = (tmp_path / 'donated' / 'model.c').read_text()
    assert '(unsigned char *)in_%d + ' % donated.donated_inputs[0] in text


def test_only_an_array_the_list_alone_holds_is_given_up():
    """_given_up: the library may overwrite values[k] only when nothing
    else can see it: no other name, no view, no second place in the list,
    its own writable memory."""
    assert library._given_up([numpy.zeros(3)], 0)
    held = numpy.zeros(3)
    assert not library._given_up([held], 0)
    twice = [numpy.zeros(3)] * 2
    assert not library._given_up(twice, 0)
    base = numpy.zeros(3)
    values, view = [base], base[1:]
    del base
    assert not library._given_up(values, 0) and view.base is values[0]
    assert not library._given_up([numpy.zeros(3)[1:]], 0)
    read_only = numpy.zeros(3)
    read_only.flags.writeable = False
    values = [read_only]
    del read_only
    assert not library._given_up(values, 0)


@pytest.mark.native_build
def test_donating_backward_matches_numpy_and_keeps_held_arrays(programs, monkeypatch):
    """The native backward with donate_inputs gives the NumPy VM's
    gradients whether it overwrites its inputs (consume, only reference),
    copies them (plain run; consume of arrays the caller still holds) and
    leaves every array the caller holds unchanged."""
    programs, x = programs
    want = Executor(programs.backward, backend='numpy').run_positional(
        _backward_inputs(programs, x))
    native = Executor(programs.backward, backend='native',
                      donate_inputs=range(len(programs.backward.inputs)))
    assert native._native.donated
    given_up = []
    real = library._given_up

    def spy(values, k):  # holds the list, not the array: the count is the same
        given_up.append(real(values, k))
        return given_up[-1]

    monkeypatch.setattr(library, '_given_up', spy)
    # Handed over: the list holds the only reference; nothing is copied.
    got = native.run_positional(_backward_inputs(programs, x), consume=True)
    assert given_up and all(given_up)
    for g, w in zip(got, want):
        numpy.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    # Kept by the caller: a plain run, and a consuming one of held arrays.
    for consume in (False, True):
        held = _backward_inputs(programs, x)
        before = [a.copy() for a in held]
        given_up.clear()
        got = native.run_positional(list(held), consume=consume)
        assert not any(given_up)
        for a, b in zip(held, before):
            numpy.testing.assert_array_equal(a, b)
        for g, w in zip(got, want):
            numpy.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@hypothesis.given(st.lists(st.tuples(st.integers(1, 300), st.integers(-1, 8)), max_size=4),
                  st.lists(st.tuples(st.integers(1, 300), st.integers(0, 9), st.integers(0, 4)),
                           max_size=12))
def test_donated_buffers_fit_their_input_after_its_last_read(regions, requests):
    """_donate places a buffer only in an input read for the last time
    before the buffer's first write, inside the input's bytes, and apart
    from every buffer placed there that is live at the same time."""
    regions = [(k, size, last) for k, (size, last) in enumerate(regions)]
    buffers = [Buffer(i, n, start, start + span) for i, (n, start, span) in enumerate(requests)]
    placed = _donate(regions, buffers)
    sizes = {k: (size, last) for k, size, last in regions}
    for buf, k, offset in placed:
        assert offset % ALIGNMENT == 0 and offset + buf.nbytes <= sizes[k][0]
        assert sizes[k][1] < buf.start
    for (a, ka, oa), (b, kb, ob) in itertools.combinations(placed, 2):
        if ka == kb and a.start <= b.end and b.start <= a.end:
            assert oa + a.nbytes <= ob or ob + b.nbytes <= oa


class SigmoidNet(chainer.Chain):
    """Its backward retains the output y, which the caller holds, and is
    given the gradient of y, which Chainer holds."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(32, 64)
            self.l2 = L.Linear(64, 64)

    def forward(self, x):
        return F.sigmoid(self.l2(F.relu(self.l1(x))))


@pytest.mark.native_build
def test_bridge_backward_never_overwrites_what_chainer_or_the_user_holds(tmp_path):
    """compile_onnx's native backward is offered the retained values
    only, not the gradient Chainer (and here the caller) holds; y, which
    the caller holds, stays as it was; the gradients are the NumPy VM's."""
    numpy.random.seed(0)
    model = SigmoidNet()
    x = numpy.random.uniform(-1, 1, (8, 32)).astype(numpy.float32)
    gy = numpy.random.standard_normal((8, 64)).astype(numpy.float32)
    path = chainer_compiler.export(model, [x], str(tmp_path / 'sigmoid.onnx'))
    grads = {}
    for backend in ('numpy', 'native'):
        compiled = chainer_compiler.compile_onnx(model, path,
                                                 runtime_kwargs={'backend': backend})
        model.cleargrads()
        y = compiled(x)
        if backend == 'native':
            assert 0 not in y.creator_node.state.backward._native.donated
        before = y.array.copy(), gy.copy()
        y.grad = gy
        y.backward()
        numpy.testing.assert_array_equal(y.array, before[0])
        numpy.testing.assert_array_equal(gy, before[1])
        grads[backend] = [p.grad.copy() for p in model.params()]
    for got, want in zip(grads['native'], grads['numpy']):
        numpy.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_donate_inputs_are_positions_of_inputs(programs):
    """A position that is not an input's is refused before anything is
    built, naming the option and the range."""
    programs, _ = programs
    n = len(programs.backward.inputs)
    for bad in ([n], [-1], ['0']):
        with pytest.raises(ConfigurationError, match='donate_inputs=.*0 to %d' % (n - 1)):
            Executor(programs.backward, backend='numpy', donate_inputs=bad)

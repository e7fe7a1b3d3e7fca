"""The Chainer bridge holds what the compiled plan says: the values forward
retains for backward are the backward program's to free at their last
read, not the FunctionNode's until the graph is dropped."""
import gc
import weakref

import chainer
import chainer.functions as F
import pytest

import chainer_compiler
from chainer_compiler.errors import BackwardReleasedError
from tests.chainer_compiler.test_recompute_policies import DeepMLP, _data


@pytest.fixture(scope='module')
def exported(tmp_path_factory):
    model = DeepMLP(depth=6)
    x, t = _data(model)
    with chainer.using_config('train', False):
        path = chainer_compiler.export(model, [x], str(tmp_path_factory.mktemp('live') / 'm.onnx'))
    return model, path, x, t


def _forward(exported, order, backend='numpy'):
    """(the loss Variable, the compiled step's FunctionNode, its output)."""
    model, path, x, t = exported
    compiled = chainer_compiler.compile_onnx(model, path, computation_order=order,
                                             runtime_kwargs={'backend': backend})
    model.cleargrads()
    y = compiled(x)
    return F.softmax_cross_entropy(y, t), y.creator_node, y


@pytest.mark.parametrize('order', [None, 'gt'])
def test_retained_values_die_with_backward_while_the_graph_lives(exported, order):
    loss, step, y = _forward(exported, order)
    # The input, the parameters and the output are held outside the VM.
    model, _, x, _ = exported
    elsewhere = {id(p.array) for p in model.params()} | {id(x), id(y.array)}
    retained = [weakref.ref(v) for v in step.retained if id(v) not in elsewhere]
    assert retained
    loss.backward()
    gc.collect()
    # The loss, its graph and the step are still referenced here: only the
    # backward program held the retained values, and it freed them.
    assert step.retained is None
    assert [r for r in retained if r() is not None] == []


def test_a_second_backward_is_a_clear_error(exported):
    loss = _forward(exported, 'gt')[0]
    loss.backward()
    # (Chainer takes the parameters' gradients before it calls a node's
    # backward, so what they hold after the error is Chainer's doing.)
    with pytest.raises(BackwardReleasedError, match='ran backward already.*forward pass again'):
        loss.backward()


@pytest.mark.native_build
def test_native_backward_holds_less_with_recompute_and_frees_what_it_read(exported):
    """On the native backend, backward holds its arena and the retained
    values: fewer retained values under gt outweigh the replays its arena
    makes room for; and once backward has run, none of them is held."""
    held = {}
    for order in (None, 'gt'):
        loss, step, y = _forward(exported, order, backend='native')
        elsewhere = {id(p.array) for p in exported[0].params()} | {id(exported[2]), id(y.array)}
        mine = [v for v in step.retained if id(v) not in elsewhere]
        held[order] = step.state.backward._native.arena_bytes + sum(v.nbytes for v in mine)
        retained = [weakref.ref(v) for v in mine]
        del mine
        loss.backward()
        gc.collect()
        assert [r for r in retained if r() is not None] == []
    assert held['gt'] < held[None]

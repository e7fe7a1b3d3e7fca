"""Gradient rules of the rnn family (LSTM, GRU, RNN) against central
differences, and a folded L.NStepBiLSTM compiled for training against
Chainer's own backward."""
import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import chainer_compiler
from chainer_compiler.autodiff.registry import rule_for

from .gradcheck import check_gradients
from .test_math import _translator_ops

#: These tests check the bridge, not the backend: the NumPy VM, where the
#: default ('auto') would build C for each model.
ON_THE_VM = {'backend': 'numpy'}

GATES = {'LSTM': 4, 'GRU': 3, 'RNN': 1}
STATES = {'LSTM': ('initial_h', 'initial_c'), 'GRU': ('initial_h',), 'RNN': ('initial_h',)}


def _model(op, inputs, constants, node_inputs, outputs, attrs, opset=17):
    """One ``op`` node; ``outputs`` are its output names ('' = left out),
    the non-empty ones are the graph outputs."""
    node = helper.make_node(op, node_inputs, outputs, **attrs)
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(k, TensorProto.DOUBLE, v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs if o],
        [numpy_helper.from_array(v, k) for k, v in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', opset)])
    model.ir_version = 8
    return model


def _check(op, *, direction='forward', seq=3, batch=2, hidden=2, input_size=2, lens=None,
           states=True, use=None, bias=True, peephole=False, layout=0, seed=0, **attrs):
    """check_gradients for one ``op`` node.  ``use``: which of Y, Y_h, Y_c
    are outputs (default all); ``lens``: sequence_lens (a constant)."""
    rng = numpy.random.RandomState(seed)
    D = 2 if direction == 'bidirectional' else 1
    G = GATES[op] * hidden

    def rand(*shape, scale=1.0):
        return rng.uniform(-scale, scale, shape)

    x_shape = (batch, seq, input_size) if layout else (seq, batch, input_size)
    s_shape = (batch, D, hidden) if layout else (D, batch, hidden)
    inputs = {'X': rand(*x_shape), 'W': rand(D, G, input_size), 'R': rand(D, G, hidden)}
    if bias:
        inputs['B'] = rand(D, 2 * G, scale=0.5)
    constants = {}
    if lens is not None:
        constants['sequence_lens'] = numpy.array(lens, numpy.int32)
    names = ['X', 'W', 'R', 'B' if bias else '', 'sequence_lens' if lens is not None else '']
    if states:
        for s in STATES[op]:
            inputs[s] = rand(*s_shape)
        names += list(STATES[op])
    if peephole:
        if not states:
            names += [''] * len(STATES[op])
        inputs['P'] = rand(D, 3 * hidden, scale=0.5)
        names.append('P')
    while names and not names[-1]:
        names.pop()
    n_out = 1 + len(STATES[op])
    use = range(n_out) if use is None else use
    outputs = ['y%d' % i if i in use else '' for i in range(n_out)]
    while not outputs[-1]:
        outputs.pop()
    attrs.update(hidden_size=hidden, direction=direction, layout=layout)
    model = _model(op, inputs, constants, names, outputs, attrs)
    return check_gradients(model, inputs)


DIRECTIONS = ['forward', 'reverse', 'bidirectional']


@pytest.mark.parametrize('direction', DIRECTIONS)
@pytest.mark.parametrize('lens', [None, [3, 1]])
def test_lstm(direction, lens):
    _check('LSTM', direction=direction, lens=lens)


@pytest.mark.parametrize('direction', DIRECTIONS)
@pytest.mark.parametrize('lens', [None, [2, 3]])
def test_gru_linear_before_reset(direction, lens):
    _check('GRU', direction=direction, lens=lens, linear_before_reset=1)


@pytest.mark.parametrize('direction', ['forward', 'bidirectional'])
def test_gru(direction):
    _check('GRU', direction=direction, lens=[3, 2])


@pytest.mark.parametrize('direction', DIRECTIONS)
@pytest.mark.parametrize('activation', ['Tanh', 'Relu'])
def test_rnn(direction, activation):
    D = 2 if direction == 'bidirectional' else 1
    _check('RNN', direction=direction, lens=[1, 3], activations=[activation] * D, seed=3)


@pytest.mark.parametrize('use', [(0,), (1,), (2,), (1, 2), (0, 2)])
def test_lstm_some_outputs(use):
    _check('LSTM', direction='bidirectional', lens=[2, 3], use=use)


@pytest.mark.parametrize('op', ['GRU', 'RNN'])
@pytest.mark.parametrize('use', [(0,), (1,)])
def test_some_outputs(op, use):
    attrs = {'linear_before_reset': 1} if op == 'GRU' else {}
    _check(op, direction='bidirectional', lens=[3, 1], use=use, **attrs)


def test_larger_unequal_lengths():
    _check('LSTM', direction='bidirectional', seq=4, batch=3, hidden=3, input_size=3,
           lens=[4, 1, 3])


@pytest.mark.parametrize('op', ['LSTM', 'GRU', 'RNN'])
def test_no_initial_state_no_bias(op):
    _check(op, direction='bidirectional', states=False, bias=False, lens=[2, 3])


def test_lstm_peepholes_clip_layout():
    _check('LSTM', direction='bidirectional', peephole=True, lens=[3, 2], clip=1.5)
    _check('LSTM', layout=1, lens=[2, 3])
    _check('LSTM', input_forget=1, lens=[3, 2])


def test_other_activations():
    _check('RNN', activations=['Softsign'], lens=[3, 2])
    _check('GRU', activations=['HardSigmoid', 'Affine'], activation_alpha=[0.3, 0.7],
           activation_beta=[0.4, 0.1], lens=[3, 2])


def test_translator_ops_have_rules():
    ops = _translator_ops('rnn')
    assert {'LSTM', 'GRU', 'RNN'} <= set(ops)
    for op in ops:
        rule_for(helper.make_node(op, [], []))


# -- end to end: L.NStepBiLSTM (and the GRU / RNN links) --------------------------------

class BiRNN(chainer.Chain):
    def __init__(self, link='NStepBiLSTM'):
        super().__init__()
        self.link = link
        with self.init_scope():
            self.rnn = getattr(L, link)(2, 3, 4, 0.0)

    def forward(self, *xs):
        if 'LSTM' in self.link:
            hy, cy, ys = self.rnn(None, None, list(xs))
            last = F.concat([hy[-1], hy[-2], cy[0]], axis=1)
        else:
            hy, ys = self.rnn(None, list(xs))
            last = F.concat([hy[-1], hy[-2]], axis=1)
        return last, F.concat(ys, axis=0)


def _loss(outputs, weights):
    last, ys = outputs
    return F.sum(last * weights[0]) + F.sum(ys * weights[1]) + F.sum(F.tanh(ys) ** 2)


@pytest.mark.parametrize('link,op,n_params', [
    ('NStepBiLSTM', 'LSTM', 16), ('NStepBiGRU', 'GRU', 12), ('NStepBiRNNReLU', 'RNN', 4)])
def test_nstep_link_matches_chainer(tmp_path, link, op, n_params):
    """A 2-layer bidirectional link exported folded (default export), its
    parameter gradients from the compiled backward against Chainer's."""
    rng = numpy.random.RandomState(0)
    xs = [rng.uniform(-1, 1, (n, 3)).astype(numpy.float32) for n in (4, 2, 3)]
    model = BiRNN(link)
    path = chainer_compiler.export(model, xs, str(tmp_path / 'rnn.onnx'))
    nodes = [n for n in onnx.load(path).graph.node if n.op_type == op]
    assert len(nodes) == 2 and all(n.input[4] for n in nodes)  # folded, sequence_lens
    twin = BiRNN(link)
    twin.copyparams(model)
    compiled = chainer_compiler.compile_onnx(twin, path, runtime_kwargs=ON_THE_VM)
    with chainer.using_config('train', False):
        outputs = model(*xs)
    weights = [rng.standard_normal(o.shape).astype(numpy.float32) for o in outputs]
    for m in (model, compiled):
        m.cleargrads()
        _loss(m(*xs), weights).backward()
    pairs = list(zip(sorted(model.namedparams()), sorted(compiled.namedparams())))
    assert len(pairs) == 2 * 2 * n_params
    for (name, p), (other, q) in pairs:
        assert name == other and numpy.isfinite(p.grad).all()
        numpy.testing.assert_allclose(q.grad, p.grad, rtol=1e-4, atol=1e-5, err_msg=name)

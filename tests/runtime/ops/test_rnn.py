"""Tests for the rnn kernels (RNN, GRU, LSTM), with onnxruntime as the oracle."""
import os

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from chainer_compiler.conformance import node_tests_dir
from chainer_compiler.runtime.ops.rnn import gru, lstm, rnn

KERNELS = {'RNN': rnn, 'GRU': gru, 'LSTM': lstm}
N_GATES = {'RNN': 1, 'GRU': 3, 'LSTM': 4}
N_OUTPUTS = {'RNN': 2, 'GRU': 2, 'LSTM': 3}
INPUT_NAMES = ['X', 'W', 'R', 'B', 'sequence_lens', 'initial_h', 'initial_c', 'P']


def _onnxruntime(op, inputs, attrs):
    """Run a one-node ``op`` model on onnxruntime; ``inputs`` maps name -> array or None."""
    names = [n if inputs.get(n) is not None else '' for n in INPUT_NAMES[:len(inputs)]]
    outputs = ['Y', 'Y_h', 'Y_c'][:N_OUTPUTS[op]]
    node = helper.make_node(op, names, outputs, **attrs)
    graph = helper.make_graph(
        [node], 'g',
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(inputs[n].dtype), None)
         for n in names if n],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 22)])
    model.ir_version = 10  # opset 22's; a newer onnx writes one older onnxruntimes refuse
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=['CPUExecutionProvider'])
    return session.run(None, {n: inputs[n] for n in names if n})


def _inputs(op, rng, *, seq=4, batch=3, size=2, hidden=5, directions=1, lens=None,
            initial=False, peepholes=False, layout=0):
    g = N_GATES[op]

    def rand(*shape):
        return rng.uniform(-1, 1, shape).astype(np.float32)

    x_shape = (batch, seq, size) if layout else (seq, batch, size)
    state_shape = (batch, directions, hidden) if layout else (directions, batch, hidden)
    inputs = {'X': rand(*x_shape), 'W': rand(directions, g * hidden, size),
              'R': rand(directions, g * hidden, hidden), 'B': rand(directions, 2 * g * hidden),
              'sequence_lens': None if lens is None else np.array(lens, np.int32),
              'initial_h': rand(*state_shape) if initial else None}
    if op == 'LSTM':
        inputs['initial_c'] = rand(*state_shape) if initial else None
        inputs['P'] = rand(directions, 3 * hidden) if peepholes else None
    while inputs and next(reversed(inputs.values())) is None:
        inputs.popitem()  # trailing omitted inputs are not passed at all
    return inputs


def _check(op, inputs, **attrs):
    expected = _onnxruntime(op, inputs, attrs)
    got = KERNELS[op](np, *inputs.values(), **attrs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == np.float32 and g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('op', ['RNN', 'GRU', 'LSTM'])
@pytest.mark.parametrize('direction', ['forward', 'reverse', 'bidirectional'])
def test_directions_with_sequence_lens_and_initial_state(op, direction):
    rng = np.random.default_rng(0)
    directions = 2 if direction == 'bidirectional' else 1
    inputs = _inputs(op, rng, directions=directions, lens=[4, 2, 1], initial=True,
                     peepholes=True)
    _check(op, inputs, hidden_size=5, direction=direction)


def test_padded_steps_emit_zeros_and_keep_the_last_valid_state():
    rng = np.random.default_rng(1)
    inputs = _inputs('GRU', rng, lens=[4, 2, 3])
    Y, Y_h = gru(np, *inputs.values(), hidden_size=5)
    assert np.all(Y[2:, 0, 1] == 0) and np.all(Y[3:, 0, 2] == 0)
    np.testing.assert_array_equal(Y_h[0, 1], Y[1, 0, 1])
    np.testing.assert_array_equal(Y_h[0, 0], Y[3, 0, 0])


@pytest.mark.parametrize('op', ['RNN', 'GRU', 'LSTM'])
def test_layout_1_is_batch_major(op):
    rng = np.random.default_rng(2)
    inputs = _inputs(op, rng, directions=2, initial=True, layout=1)
    batch_major = KERNELS[op](np, *inputs.values(), hidden_size=5, direction='bidirectional',
                              layout=1)
    time_major = dict(inputs, X=inputs['X'].transpose(1, 0, 2),
                      initial_h=inputs['initial_h'].transpose(1, 0, 2))
    if op == 'LSTM':
        time_major['initial_c'] = inputs['initial_c'].transpose(1, 0, 2)
    reference = KERNELS[op](np, *time_major.values(), hidden_size=5, direction='bidirectional')
    # Equal up to rounding: cuBLAS may pick other kernels for the two layouts.
    np.testing.assert_allclose(batch_major[0], reference[0].transpose(2, 0, 1, 3),
                               rtol=1e-5, atol=1e-6)
    for got, ref in zip(batch_major[1:], reference[1:]):
        np.testing.assert_allclose(got, ref.transpose(1, 0, 2), rtol=1e-5, atol=1e-6)


def test_lstm_activations_with_alpha_beta_and_clip():
    rng = np.random.default_rng(3)
    inputs = _inputs('LSTM', rng, directions=2, initial=True)
    # alpha/beta are consumed in order by the activations that take them.
    _check('LSTM', inputs, hidden_size=5, direction='bidirectional', clip=0.5,
           activations=['HardSigmoid', 'LeakyRelu', 'ScaledTanh',
                        'Sigmoid', 'Affine', 'Elu'],
           activation_alpha=[0.3, 0.05, 1.5, 0.7, 0.9], activation_beta=[0.4, 0.8, 0.2])


@pytest.mark.parametrize('activation', ['Relu', 'Tanh', 'Sigmoid', 'Softsign', 'Softplus'])
def test_rnn_single_activations(activation):
    rng = np.random.default_rng(4)
    _check('RNN', _inputs('RNN', rng), hidden_size=5, activations=[activation])


def test_thresholded_relu_alpha():
    rng = np.random.default_rng(4)
    _check('RNN', _inputs('RNN', rng), hidden_size=5, activations=['ThresholdedRelu'],
           activation_alpha=[0.5])


def test_gru_linear_before_reset():
    rng = np.random.default_rng(5)
    inputs = _inputs('GRU', rng, lens=[3, 4, 1], initial=True)
    _check('GRU', inputs, hidden_size=5, linear_before_reset=1)


def test_lstm_input_forget_couples_gates():
    rng = np.random.default_rng(6)
    _check('LSTM', _inputs('LSTM', rng, initial=True), hidden_size=5, input_forget=1)


def test_missing_bias_and_float64_are_kept():
    rng = np.random.default_rng(7)
    X = rng.standard_normal((3, 2, 4))
    W = rng.standard_normal((1, 8, 4))
    R = rng.standard_normal((1, 8, 2))
    Y, Y_h = rnn(np, X, W[:, :2], R[:, :2, :], hidden_size=2)
    assert Y.dtype == Y_h.dtype == np.float64 and Y.shape == (3, 1, 2, 2)
    np.testing.assert_allclose(Y[0, 0], np.tanh(X[0] @ W[0, :2].T))


def test_unknown_activation_is_rejected():
    rng = np.random.default_rng(8)
    with pytest.raises(ValueError, match='Swish'):
        rnn(np, *_inputs('RNN', rng).values(), hidden_size=5, activations=['Swish'])


def test_conformance_peephole_case():
    """The ONNX test_lstm_with_peepholes data, run directly."""
    base = os.path.join(node_tests_dir(), 'test_lstm_with_peepholes', 'test_data_set_0')
    if not os.path.exists(os.path.join(base, 'input_0.pb')):
        pytest.skip("this onnx installation has no node test data")
    load = [numpy_helper.to_array(onnx.load_tensor(os.path.join(base, 'input_%d.pb' % i)))
            for i in range(8)]
    expected = numpy_helper.to_array(onnx.load_tensor(os.path.join(base, 'output_0.pb')))
    _, Y_h, _ = lstm(np, *load, hidden_size=3)
    np.testing.assert_allclose(Y_h, expected, rtol=1e-5)


def test_one_directions_activations_serve_both_directions():
    rng = np.random.default_rng(9)
    inputs = _inputs('RNN', rng, directions=2)
    once = rnn(np, *inputs.values(), hidden_size=5, direction='bidirectional',
               activations=['Relu'])
    twice = rnn(np, *inputs.values(), hidden_size=5, direction='bidirectional',
                activations=['Relu', 'Relu'])
    default = rnn(np, *inputs.values(), hidden_size=5, direction='bidirectional')
    np.testing.assert_array_equal(once[0], twice[0])
    assert not np.allclose(once[0], default[0])

"""RNN, GRU and LSTM lowered to C: every direction, optional inputs and
outputs, layouts, GRU's linear_before_reset, clip, run-time weights and
sequence lengths, against the NumPy VM and onnxruntime."""
import chainer
import numpy
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native import UnsupportedNativeOpsError, emit_c
from chainer_compiler.translators.onnx_chainer import export_model, rnn
from tests.runtime.native.helpers import check_native, make_model
from tests.translators.onnx_chainer.test_models_sequence import BiLSTMClassifier, _sequences

GATES = {'RNN': 1, 'GRU': 3, 'LSTM': 4}
# Inputs in ONNX order after X, W, R.
OPTIONAL = ('B', 'sequence_lens', 'initial_h', 'initial_c', 'P')


def _arrays(op, D, T, B, n_in, H, layout, seed):
    """Random X, W, R, B, sequence_lens, initial_h, initial_c, P; those of
    layout 1 are those of layout 0 (same seed) made batch-major."""
    rng = numpy.random.RandomState(seed)
    G = GATES[op]

    def r(*shape):
        return rng.uniform(-1, 1, shape).astype(numpy.float32)
    lens = numpy.array([T, 1, T - 1, 2][:B], dtype=numpy.int32) if T >= 2 else \
        numpy.full(B, T, dtype=numpy.int32)
    arrays = {'X': r(T, B, n_in), 'W': r(D, G * H, n_in), 'R': r(D, G * H, H), 'B': r(D, 2 * G * H),
              'sequence_lens': lens, 'initial_h': r(D, B, H), 'initial_c': r(D, B, H),
              'P': r(D, 3 * H)}
    if layout:
        for key in ('X', 'initial_h', 'initial_c'):
            arrays[key] = numpy.ascontiguousarray(arrays[key].transpose(1, 0, 2))
    return arrays


def _recurrent_model(op, variants, T=4, B=3, n_in=5, H=4, layout=0, opset=13,
                     runtime=('X', 'initial_h', 'initial_c'), seed=0):
    """One graph with a node per variant: (direction, optional inputs used,
    outputs used, extra attributes).  Inputs named in ``runtime`` are graph
    inputs, the others initializers.  Returns (model, input arrays)."""
    nodes, inputs, outputs, inits, feeds = [], [], [], {}, []
    for n, (direction, used, outs, attrs) in enumerate(variants):
        D = 2 if direction == 'bidirectional' else 1
        arrays = _arrays(op, D, T, B, n_in, H, layout, seed + n)
        names = []
        for key in ('X', 'W', 'R') + OPTIONAL[:3 if op != 'LSTM' else 5]:
            if key not in ('X', 'W', 'R') and key not in used:
                names.append('')
                continue
            name = '%s%d' % (key, n)
            names.append(name)
            if key in runtime:
                inputs.append((name, arrays[key].dtype, arrays[key].shape))
                feeds.append(arrays[key])
            else:
                inits[name] = arrays[key]
        while names[-1] == '':
            names.pop()
        out_names = ['%s%d' % (o, n) if o in outs else ''
                     for o in ('Y', 'Y_h', 'Y_c')[:3 if op == 'LSTM' else 2]]
        while out_names[-1] == '':
            out_names.pop()
        if layout:
            attrs = dict(attrs, layout=layout)
        nodes.append(helper.make_node(op, names, out_names, direction=direction,
                                      hidden_size=H, **attrs))
        states = (B, D, H) if layout else (D, B, H)
        shapes = ((B, T, D, H) if layout else (T, D, B, H), states, states)
        outputs += [(o, numpy.float32, shape) for o, shape in zip(out_names, shapes) if o]
    return make_model(nodes, inputs, outputs, inits, opset=opset), feeds


ALL = ('B', 'sequence_lens', 'initial_h', 'initial_c', 'P')
DIRECTIONS = ('forward', 'reverse', 'bidirectional')


@pytest.mark.parametrize('op', ['RNN', 'GRU', 'LSTM'])
@pytest.mark.native_build
def test_every_direction_every_input_and_output(op):
    variants = [(d, ALL, ('Y', 'Y_h', 'Y_c'), {}) for d in DIRECTIONS]
    check_native(*_recurrent_model(op, variants))


@pytest.mark.parametrize('op', ['RNN', 'GRU', 'LSTM'])
@pytest.mark.native_build
def test_no_optional_input_and_output_subsets(op):
    """No B, no lengths, no initial state; Y alone, Y_h alone, Y_c alone."""
    variants = [('forward', (), ('Y',), {}), ('bidirectional', (), ('Y_h',), {}),
                ('reverse', ('initial_h',), ('Y_c',) if op == 'LSTM' else ('Y_h',), {})]
    check_native(*_recurrent_model(op, variants))


@pytest.mark.parametrize('lbr', [0, 1])
@pytest.mark.native_build
def test_gru_linear_before_reset_and_clip(lbr):
    variants = [(d, ALL, ('Y', 'Y_h'), dict(linear_before_reset=lbr, clip=0.5))
                for d in ('forward', 'bidirectional')]
    variants.append(('reverse', ('B', 'sequence_lens'), ('Y', 'Y_h'),
                     dict(linear_before_reset=lbr)))
    check_native(*_recurrent_model('GRU', variants))


@pytest.mark.native_build
def test_lstm_clip_peepholes_and_activations_spelled_out():
    """Peepholes without initial state; the default activations listed per
    direction are accepted."""
    acts = dict(activations=['Sigmoid', 'Tanh', 'Tanh'] * 2)
    variants = [('bidirectional', ('B', 'P'), ('Y', 'Y_h', 'Y_c'), dict(clip=0.3)),
                ('reverse', ('sequence_lens', 'P'), ('Y', 'Y_c'), {}),
                ('bidirectional', ALL, ('Y',), acts)]
    check_native(*_recurrent_model('LSTM', variants))


@pytest.mark.parametrize('op', ['RNN', 'GRU', 'LSTM'])
@pytest.mark.native_build
def test_layout_1(op):
    """Batch-major X, Y and states (opset 14).  onnxruntime has no layout 1:
    the results must be those of layout 0 (checked against it) transposed."""
    variants = [(d, ALL, ('Y', 'Y_h', 'Y_c'), {}) for d in ('reverse', 'bidirectional')]
    sizes = dict(opset=14, B=2, T=3)
    batch_major = check_native(*_recurrent_model(op, variants, layout=1, **sizes),
                               onnxruntime_check=False)
    time_major = check_native(*_recurrent_model(op, variants, **sizes))
    for got, want in zip(batch_major, time_major):
        perm = (2, 0, 1, 3) if want.ndim == 4 else (1, 0, 2)
        numpy.testing.assert_array_equal(got, want.transpose(perm))


@pytest.mark.parametrize('op', ['GRU', 'LSTM'])
@pytest.mark.native_build
def test_run_time_weights_bias_and_lengths(op):
    """W and R transposed at run time; B and sequence_lens read at run time."""
    variants = [('bidirectional', ALL, ('Y', 'Y_h', 'Y_c'), {})]
    runtime = ('X', 'W', 'R', 'B', 'sequence_lens', 'initial_h', 'initial_c', 'P')
    model, feeds = _recurrent_model(op, variants, runtime=runtime, T=5, B=4)
    check_native(model, feeds)
    feeds[4] = numpy.array([3, 5, 1, 2], dtype=numpy.int32)  # other lengths, same library
    check_native(model, feeds)
    # A zero length: the VM keeps the initial state as Y_h (onnxruntime
    # gives zeros there), Y is all zero.
    feeds[4] = numpy.array([3, 0, 5, 2], dtype=numpy.int32)
    got = check_native(model, feeds, onnxruntime_check=False)
    assert not got[0][:, :, 1].any()
    numpy.testing.assert_array_equal(got[1][:, 1], feeds[5][:, 1])


@pytest.mark.native_build
def test_single_step_unit_sizes():
    """seq 1, batch 1, input 1, hidden 1."""
    variants = [('bidirectional', ALL, ('Y', 'Y_h', 'Y_c'), {})]
    check_native(*_recurrent_model('LSTM', variants, T=1, B=1, n_in=1, H=1))


@pytest.mark.native_build
def test_empty_sequence():
    """seq 0: Y is empty and the final states are the initial ones (as in
    the VM; onnxruntime gives zeros)."""
    variants = [('bidirectional', ('B', 'initial_h', 'initial_c'), ('Y', 'Y_h', 'Y_c'), {})]
    model, feeds = _recurrent_model('LSTM', variants, T=0)
    y, yh, yc = check_native(model, feeds, onnxruntime_check=False)
    assert y.shape == (0, 2, 3, 4)
    numpy.testing.assert_array_equal(yh, feeds[1])
    numpy.testing.assert_array_equal(yc, feeds[2])


@pytest.mark.parametrize('op, attrs, reason', [
    ('LSTM', dict(activations=['Relu', 'Tanh', 'Tanh']), 'activations'),
    ('GRU', dict(activations=['Sigmoid', 'Tanh', 'Sigmoid', 'Relu']), 'activations'),
    ('LSTM', dict(input_forget=1), 'input_forget=1'),
    ('RNN', dict(clip=-1.0), 'negative'),
])
def test_refusals(op, attrs, reason, tmp_path):
    direction = 'bidirectional' if len(attrs.get('activations', ())) == 4 else 'forward'
    model, _ = _recurrent_model(op, [(direction, (), ('Y',), attrs)])
    with pytest.raises(UnsupportedNativeOpsError, match=reason):
        emit_c(build_program(model), tmp_path)


@pytest.mark.native_build
def test_exported_bilstm_classifier():
    """Chainer's NStepBiLSTM text classifier exported as ONNX LSTM nodes
    (two bidirectional layers, variable lengths) runs natively."""
    model = BiLSTMClassifier()
    xs = _sequences((5, 2, 7, 3))
    with chainer.using_config('train', False), rnn.n_step_as_single_calls():
        proto = export_model(model, xs)
    assert [n.op_type for n in proto.graph.node].count('LSTM') == 2
    check_native(proto, xs, rtol=1e-4, atol=1e-5)

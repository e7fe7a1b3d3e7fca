"""Whole models through ch2o, after the original chainer-compiler's ch2o
"model" cases: MLP, AlexNet, ResNet and GoogLeNet with their losses, an
LSTM over time steps, the stateless LSTM cell, seq2seq, and EspNet's BLSTM
and VGG2L encoders, dot and location attention, decoder and end-to-end
model (the models are in ``tests/translators/ch2o/models``).

Every model's forward is exported and run in onnxruntime and in the VM at
the default opset and the newest, against Chainer's own forward; the
sequence models also run on batches of other lengths than the export's,
which a traced graph would have baked in.  Gradients through
``compile_onnx`` are compared with Chainer's for the models the original
trained through (its ``backprop`` cases) and for the classifiers with
losses.  Deep models are compared at rtol 1e-4: float32 rounding adds up
over their layers.
"""
import chainer
import numpy
import pytest

from tests.translators.ch2o.helpers import check_ch2o, check_ch2o_gradients
from tests.translators.ch2o.models import cnn, espnet, rnn

DEEP = dict(rtol=1e-4, atol=1e-5)


def _uniform(shape, seed=0):
    return numpy.random.RandomState(seed).uniform(-1, 1, shape).astype(numpy.float32)


def _labels(n, n_class, seed=1):
    return numpy.random.RandomState(seed).randint(0, n_class, size=n).astype(numpy.int32)


def _frames(lengths, dim, seed=2):
    """Utterances: one (length, dim) float32 array per length."""
    rng = numpy.random.RandomState(seed)
    return [rng.uniform(-1, 1, (n, dim)).astype(numpy.float32) for n in lengths]


def _label_sequences(lengths, n_vocab, seed=3):
    """Sentences: one int32 array of ``n`` ids below ``n_vocab`` per length."""
    rng = numpy.random.RandomState(seed)
    return [rng.randint(0, n_vocab, size=n).astype(numpy.int32) for n in lengths]


def _ilens(lengths):
    return numpy.array(lengths, numpy.int64)


def _mask(lengths, width):
    """(batch, width) float32: 1.0 at (b, t) while sequence b has a step t."""
    steps = numpy.arange(width)
    return (steps[None, :] < numpy.array(lengths)[:, None]).astype(numpy.float32)


def _seeded(make):
    """``make()`` with NumPy's generator seeded: initializers draw from it."""
    numpy.random.seed(0)
    return make()


# The sequence models run on the export's lengths and on these, of another
# longest length and another order.
OTHER_LENGTHS = [(2, 5, 1), (1, 1, 1)]


def _masked_lstm_args(lengths, n_units=4, width=5):
    """The mask is an array argument, of one shape on every run: ``width``
    steps, of which the loop reads as many as the longest sequence has."""
    batch = len(lengths)
    return [_frames(lengths, n_units), _uniform((batch, n_units), 4),
            _uniform((batch, n_units), 5), _mask(lengths, width)]


def _seq2seq_args(source_lengths, target_lengths):
    return [_label_sequences(source_lengths, 8), _label_sequences(target_lengths, 6, seed=4)]


def _utterances(lengths, dim):
    return [_frames(lengths, dim), _ilens(lengths)]


def _decoder_args(lengths, target_lengths, eprojs=3, odim=7):
    # Ids below odim - 1: the last id is SOS/EOS.
    return [_frames(lengths, eprojs), _label_sequences(target_lengths, odim - 1)]


def _e2e_args(lengths, target_lengths, idim=6, odim=7):
    return _utterances(lengths, idim) + [_label_sequences(target_lengths, odim - 1)]


def _decoder(aconv_chans=None, aconv_filts=None):
    odim = 7
    return espnet.Decoder(3, odim, 2, 4, odim - 1, odim - 1, 5, aconv_chans, aconv_filts)


# name -> (model factory, export arguments, other arguments to run on)
FORWARD = {
    'mlp': (cnn.MLP, lambda: [_uniform((3, 12)), _labels(3, 5)], lambda: []),
    'alexnet': (cnn.AlexNet, lambda: [_uniform((2, 3, 32, 32)), _labels(2, 10)], lambda: []),
    'resnet': (cnn.ResNet, lambda: [_uniform((2, 3, 32, 32)), _labels(2, 10)], lambda: []),
    'googlenet': (cnn.GoogLeNet, lambda: [_uniform((2, 3, 32, 32)), _labels(2, 10)],
                  lambda: []),
    'lstm': (lambda: rnn.MaskedLSTM(4), lambda: _masked_lstm_args((4, 2, 3)),
             lambda: [_masked_lstm_args(n) for n in OTHER_LENGTHS]),
    'stateless_lstm': (lambda: rnn.StatelessLSTM(7, 4),
                       lambda: [_uniform((3, 4), 1), _uniform((3, 4), 2), _uniform((3, 7), 3)],
                       lambda: [[_uniform((3, 4), 4), _uniform((3, 4), 5), _uniform((3, 7), 6)]]),
    'stateless_lstm_no_state': (lambda: rnn.StatelessLSTM(7, 4),
                                lambda: [None, None, _uniform((3, 7), 3)],
                                lambda: [[None, None, _uniform((3, 7), 6)]]),
    'seq2seq': (lambda: rnn.Seq2seq(2, 8, 6, 4), lambda: _seq2seq_args((3, 5, 2), (4, 1, 3)),
                lambda: [_seq2seq_args(n, n[::-1]) for n in OTHER_LENGTHS]),
    'espnet_blstm': (lambda: espnet.BLSTM(5, 2, 3, 7), lambda: _utterances((4, 2, 3), 5),
                     lambda: [_utterances(n, 5) for n in OTHER_LENGTHS]),
    'espnet_vgg2l': (espnet.VGG2L, lambda: _utterances((4, 2, 3), 5),
                     lambda: [_utterances(n, 5) for n in OTHER_LENGTHS]),
    'espnet_attdot': (lambda: espnet.AttDot(3, 4, 5), lambda: [_frames((4, 2, 3), 3), None, None],
                      lambda: [[_frames(n, 3), None, None] for n in OTHER_LENGTHS]),
    'espnet_attloc': (lambda: espnet.AttLoc(3, 4, 5, 3, 2),
                      lambda: [_frames((4, 2, 3), 3), None, None],
                      lambda: [[_frames(n, 3), None, None] for n in OTHER_LENGTHS]),
    'espnet_decoder_attdot': (_decoder, lambda: _decoder_args((4, 2, 3), (3, 4, 1)),
                              lambda: [_decoder_args(n, n[::-1]) for n in OTHER_LENGTHS]),
    'espnet_decoder_attloc': (lambda: _decoder(3, 2), lambda: _decoder_args((4, 2, 3), (3, 4, 1)),
                              lambda: [_decoder_args(n, n[::-1]) for n in OTHER_LENGTHS]),
    'espnet_e2e': (lambda: espnet.E2E(6, 7), lambda: _e2e_args((6, 4, 5), (3, 2, 4)),
                   lambda: [_e2e_args((3, 7, 2), (2, 5, 1)), _e2e_args((1, 2, 1), (1, 1, 1))]),
}

# Models whose time loop runs over a length known only at run time: their
# graphs must hold a Loop (an unrolled one would fit one length only).
RUNTIME_LOOPS = {'lstm', 'espnet_decoder_attdot', 'espnet_decoder_attloc', 'espnet_e2e'}
# Models without control flow that depends on their inputs.
STRAIGHT = {'mlp', 'alexnet', 'resnet', 'googlenet', 'stateless_lstm',
            'stateless_lstm_no_state'}


def op_types(graph):
    """Every node's op_type in ``graph`` and in its subgraphs (Loop, If)."""
    types = set()
    for node in graph.node:
        types.add(node.op_type)
        for attr in node.attribute:
            for sub in list(attr.graphs) + ([attr.g] if attr.HasField('g') else []):
                types |= op_types(sub)
    return types


#: The largest models: seconds each, run by `make test` (marked slow); the
#: smaller ones of each family (lstm, espnet_attdot...) keep make test-fast's cover.
LARGE = ('espnet_e2e', 'espnet_decoder_attdot', 'espnet_decoder_attloc', 'espnet_vgg2l',
         'espnet_attloc', 'espnet_blstm', 'seq2seq', 'googlenet', 'resnet')


def _sized(names):
    return [pytest.param(n, marks=pytest.mark.slow) if n in LARGE else n for n in names]


@pytest.mark.parametrize('name', _sized(FORWARD))
def test_forward(name):
    make, args, run_args = FORWARD[name]
    model = _seeded(make)
    protos = check_ch2o(model, args(), run_args=run_args(), **DEEP)
    types = op_types(protos[0].graph)
    if name in RUNTIME_LOOPS:
        assert 'Loop' in types, 'the time loop was unrolled: %s' % sorted(types)
    if name in STRAIGHT:
        assert not {'Loop', 'If'} & types, 'control flow in a straight model: %s' % sorted(types)


def test_stateless_lstm_is_chainers():
    """The rewritten StatelessLSTM computes what Chainer's own does, with
    and without states (the original checked its edit the same way)."""
    model = _seeded(lambda: rnn.StatelessLSTM(7, 4))
    c, h, x = _uniform((3, 4), 1), _uniform((3, 4), 2), _uniform((3, 7), 3)
    for state in ((c, h), (None, None)):
        ours = model(*state, x)
        theirs = chainer.links.StatelessLSTM.forward(model, *state, x)
        for a, b in zip(ours, theirs):
            numpy.testing.assert_allclose(a.array, b.array, rtol=1e-6, atol=1e-6)


# Gradient cases: dropout ratios are 0 there, since Chainer and the compiled
# model draw their masks independently.
GRADIENTS = {
    'mlp': (cnn.MLP, FORWARD['mlp'][1]),
    'alexnet': (lambda: cnn.AlexNet(dropout=0.0), FORWARD['alexnet'][1]),
    'resnet': (cnn.ResNet, FORWARD['resnet'][1]),
    'googlenet': (lambda: cnn.GoogLeNet(dropout=0.0), FORWARD['googlenet'][1]),
    'lstm': FORWARD['lstm'][:2],
    'stateless_lstm': (lambda: rnn.StatelessLSTMProduct(7, 4), FORWARD['stateless_lstm'][1]),
    'seq2seq': (lambda: rnn.Seq2seq(2, 8, 6, 4, dropout=0.0), FORWARD['seq2seq'][1]),
    'espnet_blstm': (lambda: espnet.PaddedBLSTM(5, 2, 3, 7), FORWARD['espnet_blstm'][1]),
    'espnet_vgg2l': (espnet.PaddedVGG2L, FORWARD['espnet_vgg2l'][1]),
    'espnet_attdot': (lambda: espnet.AttDot(3, 4, 5),
                      lambda: [_frames((4, 2, 3), 3), _uniform((3, 4)), None]),
    'espnet_decoder_attdot': FORWARD['espnet_decoder_attdot'][:2],
    'espnet_decoder_attloc': FORWARD['espnet_decoder_attloc'][:2],
    'espnet_e2e': (lambda: espnet.E2E(6, 7, nobias=True), FORWARD['espnet_e2e'][1]),
}


#: Chainer's own float32 error on ResNet's '/bn1/gamma' gradient is 3.3e-5
#: (ours 4.3e-6), both measured against a float64 run: above DEEP's atol.
GRADIENT_TOLERANCE = {'resnet': dict(rtol=1e-4, atol=1e-4)}


@pytest.mark.parametrize('name', _sized(GRADIENTS))
def test_gradients(name, tmp_path):
    make, args = GRADIENTS[name]
    check_ch2o_gradients(_seeded(make), args(), tmp_path, **GRADIENT_TOLERANCE.get(name, DEEP))

"""Sequence models: export, then onnxruntime and the VM must reproduce Chainer.

Random weights, no downloads.  These are deeper than the per-family tests
(a two-layer bidirectional LSTM; attention, layer normalization and a
feed-forward block), so float32 rounding accumulates over more operations:
they are compared with rtol = atol = 1e-4 instead of 1e-5.
"""
import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

from chainer_compiler.translators.onnx_chainer import rnn
from chainer_compiler.translators.onnx_chainer.tracing import DEFAULT_OPSET
from tests.translators.onnx_chainer.helpers import check_export, op_types

TOLERANCE = dict(rtol=1e-4, atol=1e-4)  # deeper models, see the module docstring


class BiLSTMClassifier(chainer.Chain):
    """EmbedID -> NStepBiLSTM -> last forward and backward hidden states of
    the top layer, concatenated -> Linear, as in Chainer's text
    classification example."""

    def __init__(self, n_vocab=20, n_units=8, n_layers=2, n_class=3):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(n_vocab, n_units)
            self.encoder = L.NStepBiLSTM(n_layers, n_units, n_units, dropout=0.2)
            self.output = L.Linear(2 * n_units, n_class)

    def forward(self, *xs):
        sections = numpy.cumsum([len(x) for x in xs[:-1]])
        exs = F.split_axis(self.embed(F.concat(xs, axis=0)), sections, axis=0)
        hy, _, _ = self.encoder(None, None, exs)
        last = F.concat([hy[-2], hy[-1]], axis=1)
        return self.output(last)


def _sequences(lengths, n_vocab=20, seed=0):
    rng = numpy.random.RandomState(seed)
    return tuple(rng.randint(0, n_vocab, size=n).astype(numpy.int32) for n in lengths)


@pytest.mark.parametrize('form', ['folded', 'unrolled'])
def test_bilstm_sequence_classifier(form):
    model = BiLSTMClassifier()
    xs = _sequences((5, 2, 7, 3))  # variable lengths, not sorted
    if form == 'folded':
        with rnn.n_step_as_single_calls():
            models = check_export(model, xs, **TOLERANCE)
    else:  # ~300 primitive nodes: the default opset only, to keep the suite fast
        with rnn.n_step_unrolled():
            models = check_export(model, xs, opsets=(DEFAULT_OPSET,), **TOLERANCE)
    assert ('LSTM' in op_types(models[0])) == (form == 'folded')


class TransformerEncoderBlock(chainer.Chain):
    """Post-norm Transformer encoder block written with chainer.functions:
    multi-head self-attention (matmul, softmax, reshape, transpose) with a
    key padding mask, residual + layer normalization, position-wise
    feed-forward with ReLU, residual + layer normalization."""

    def __init__(self, d_model=16, n_heads=4, d_ff=32):
        super().__init__()
        self.n_heads = n_heads
        with self.init_scope():
            self.query = L.Linear(d_model, d_model)
            self.key = L.Linear(d_model, d_model)
            self.value = L.Linear(d_model, d_model)
            self.attn_out = L.Linear(d_model, d_model)
            self.norm1 = L.LayerNormalization(d_model)
            self.ff1 = L.Linear(d_model, d_ff)
            self.ff2 = L.Linear(d_ff, d_model)
            self.norm2 = L.LayerNormalization(d_model)

    def _heads(self, h, batch, length):
        d_head = h.shape[1] // self.n_heads
        h = F.reshape(h, (batch, length, self.n_heads, d_head))
        return F.transpose(h, (0, 2, 1, 3))  # (B, heads, T, d_head)

    def forward(self, x, mask):
        batch, length, d_model = x.shape
        flat = F.reshape(x, (batch * length, d_model))
        q = self._heads(self.query(flat), batch, length)
        k = self._heads(self.key(flat), batch, length)
        v = self._heads(self.value(flat), batch, length)
        scores = F.matmul(q, k, transb=True) * (1.0 / numpy.sqrt(d_model // self.n_heads))
        # mask (B, T): 1 for real tokens, 0 for padding -> -1e4 on padded keys
        bias = F.broadcast_to(F.reshape((mask - 1.0) * 1e4, (batch, 1, 1, length)),
                              scores.shape)
        attn = F.softmax(scores + bias, axis=3)
        context = F.matmul(attn, v)                                  # (B, heads, T, d_head)
        context = F.reshape(F.transpose(context, (0, 2, 1, 3)), (batch * length, d_model))
        h = self.norm1(flat + self.attn_out(context))
        h = self.norm2(h + self.ff2(F.relu(self.ff1(h))))
        return F.reshape(h, (batch, length, d_model))


def test_transformer_encoder_block():
    rng = numpy.random.RandomState(0)
    x = rng.uniform(-1, 1, (2, 5, 16)).astype(numpy.float32)
    mask = numpy.ones((2, 5), numpy.float32)
    mask[1, 3:] = 0  # the second sequence is 3 tokens long
    models = check_export(TransformerEncoderBlock(), (x, mask), **TOLERANCE)
    types = op_types(models[0])
    assert 'Softmax' in types and 'MatMul' in types

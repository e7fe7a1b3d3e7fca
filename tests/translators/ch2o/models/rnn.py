"""Recurrent models: an LSTM written out over time steps, Chainer's
stateless LSTM cell rewritten with plain functions, and the seq2seq
translation model of Chainer's examples (NStepLSTM encoder and decoder).
"""
import chainer
import chainer.functions as F
import chainer.links as L
import numpy


class MaskedLSTM(chainer.Chain):
    """One LSTM layer over a padded batch, one Python loop iteration per
    time step.  ``mask[b, t]`` is 1 while sequence ``b`` still has a step
    ``t``; after its end the state is carried over unchanged, so the
    result is each sequence's state at its own last step."""

    def __init__(self, n_units):
        super().__init__()
        with self.init_scope():
            self.gates = L.Linear(2 * n_units, 4 * n_units)
        self.n_units = n_units

    def forward(self, xs, h, c, mask):
        n = self.n_units
        inputs = F.pad_sequence(xs)
        for time in range(inputs.shape[1]):
            x = inputs[:, time]
            gate = self.gates(F.concat((x, h), axis=1))
            i = F.sigmoid(gate[:, 0:n])
            o = F.sigmoid(gate[:, n:n * 2])
            f = F.sigmoid(gate[:, n * 2:n * 3])
            a = F.tanh(gate[:, n * 3:n * 4])
            new_c = f * c + i * a
            new_h = o * F.tanh(new_c)
            keep = F.broadcast_to(F.expand_dims(mask[:, time], axis=1), h.shape)
            h = new_h * keep + h * (1.0 - keep)
            c = new_c * keep + c * (1.0 - keep)
        return h


def split_gates(x):
    """The four gate inputs of Chainer's LSTM layout, where they are
    interleaved unit by unit: (B, 4n) -> four (B, n)."""
    r = F.reshape(x, (len(x), x.shape[1] // 4, 4) + x.shape[2:])
    a, i, f, o = F.separate(r, axis=2)
    return a, i, f, o


def lstm_step(c_prev, x):
    """One LSTM update from the previous cell state and the gate inputs:
    returns the new cell state and output."""
    a, i, f, o = split_gates(x)
    c = F.tanh(a) * F.sigmoid(i) + F.sigmoid(f) * c_prev
    h = F.sigmoid(o) * F.tanh(c)
    return c, h


class StatelessLSTM(L.StatelessLSTM):
    """``L.StatelessLSTM`` with its ``forward`` written in the Python ch2o
    translates: ``None`` for a missing state, the update in plain functions
    instead of ``F.lstm``.  It computes what Chainer's own does (a test
    checks it)."""

    def forward(self, c, h, x):
        lstm_in = self.upward(x)
        if h is not None:
            lstm_in += self.lateral(h)
        if c is None:
            c = chainer.Variable(self.xp.zeros((x.shape[0], self.state_size),
                                               dtype=numpy.float32))
        return lstm_step(c, lstm_in)


class StatelessLSTMProduct(chainer.Chain):
    """A StatelessLSTM whose two results are multiplied into one output, to
    train through."""

    def __init__(self, in_size, out_size):
        super().__init__()
        with self.init_scope():
            self.cell = StatelessLSTM(in_size, out_size)

    def forward(self, c, h, x):
        c, h = self.cell(c, h, x)
        return c * h


EOS = 1


def embed_sequences(embed, xs):
    """Embed every sequence of ``xs`` with one EmbedID call on their
    concatenation, then cut the result back into sequences."""
    lengths = [len(x) for x in xs]
    sections = numpy.cumsum(lengths[:-1])
    return F.split_axis(embed(F.concat(xs, axis=0)), sections, 0)


class Seq2seq(chainer.Chain):
    """Encoder-decoder over word ids: the source is read reversed by an
    NStepLSTM whose final states start an NStepLSTM decoder fed with the
    target after EOS; the loss is the cross entropy of the next word
    summed over all words and averaged over the batch."""

    def __init__(self, n_layers, n_source_vocab, n_target_vocab, n_units, dropout=0.1):
        super().__init__()
        with self.init_scope():
            self.embed_x = L.EmbedID(n_source_vocab, n_units)
            self.embed_y = L.EmbedID(n_target_vocab, n_units)
            self.encoder = L.NStepLSTM(n_layers, n_units, n_units, dropout)
            self.decoder = L.NStepLSTM(n_layers, n_units, n_units, dropout)
            self.W = L.Linear(n_units, n_target_vocab)

    def forward(self, xs, ys):
        xs = [x[::-1] for x in xs]
        eos = self.xp.array([EOS], numpy.int32)
        ys_in = [F.concat([eos, y], axis=0) for y in ys]
        ys_out = [F.concat([y, eos], axis=0) for y in ys]

        exs = embed_sequences(self.embed_x, xs)
        eys = embed_sequences(self.embed_y, ys_in)
        batch = len(xs)
        # None: the encoder starts from zero states.
        hx, cx, _ = self.encoder(None, None, exs)
        _, _, os = self.decoder(hx, cx, eys)

        # One product and one loss over all the words of the batch at once.
        concat_os = F.concat(os, axis=0)
        concat_ys_out = F.concat(ys_out, axis=0)
        loss = F.sum(F.softmax_cross_entropy(self.W(concat_os), concat_ys_out,
                                             reduce='no')) / batch
        return loss

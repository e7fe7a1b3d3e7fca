"""Blocks of EspNet's attention-based speech recogniser (its Chainer
``e2e_asr``): the BLSTM and VGG-like encoders, dot-product and
location-aware attention, the attention decoder with its loss, and the
whole encoder-decoder.

Utterances come as lists of (frames, features) arrays of different
lengths with their lengths ``ilens``; label sequences as lists of int32
arrays.  The attention modules compute the padded encoder states on every
call where EspNet caches them on the module between decoder steps: the
results are the same, without state kept on ``self`` across calls.
"""
import chainer
import chainer.functions as F
import chainer.links as L
import numpy

from tests.translators.ch2o.models.rnn import StatelessLSTM


class BLSTM(chainer.Chain):
    """A bidirectional NStepLSTM over the utterances, a Linear on every
    frame of all of them at once, and tanh; returns the utterances (a tuple
    of arrays) and their lengths."""

    def __init__(self, idim, elayers, cdim, hdim, dropout=0.0):
        super().__init__()
        with self.init_scope():
            self.nblstm = L.NStepBiLSTM(elayers, idim, cdim, dropout)
            self.l_last = L.Linear(cdim * 2, hdim)

    def forward(self, xs, ilens):
        _, _, ys = self.nblstm(None, None, xs)
        ys = self.l_last(F.vstack(ys))  # all frames of all utterances x hdim
        xs = F.split_axis(ys, numpy.cumsum(ilens[:-1]), axis=0)
        xs = F.split_axis(F.tanh(F.vstack(xs)), numpy.cumsum(ilens[:-1]), axis=0)
        return xs, ilens


class PaddedBLSTM(chainer.Chain):
    """BLSTM's utterances padded into one array, to train through."""

    def __init__(self, *args):
        super().__init__()
        with self.init_scope():
            self.blstm = BLSTM(*args)

    def forward(self, xs, ilens):
        xs, ilens = self.blstm(xs, ilens)
        return F.pad_sequence(xs)


class VGG2L(chainer.Chain):
    """Two VGG blocks (two 3x3 convolutions and a 2x2 max pooling each) over
    the padded (utterance, channel, frame, feature) batch; frames are
    halved twice, and each utterance is cut back to its new length."""

    def __init__(self, in_channel=1, channels=(4, 8), nobias=False):
        super().__init__()
        c1, c2 = channels
        with self.init_scope():
            self.conv1_1 = L.Convolution2D(in_channel, c1, 3, stride=1, pad=1, nobias=nobias)
            self.conv1_2 = L.Convolution2D(c1, c1, 3, stride=1, pad=1)
            self.conv2_1 = L.Convolution2D(c1, c2, 3, stride=1, pad=1)
            self.conv2_2 = L.Convolution2D(c2, c2, 3, stride=1, pad=1)
        self.in_channel = in_channel

    def forward(self, xs, ilens):
        xs = F.pad_sequence(xs)  # utterance x frame x feature
        xs = F.swapaxes(F.reshape(xs, (xs.shape[0], xs.shape[1], self.in_channel,
                                       xs.shape[2] // self.in_channel)), 1, 2)

        xs = F.relu(self.conv1_1(xs))
        xs = F.relu(self.conv1_2(xs))
        xs = F.max_pooling_2d(xs, 2, stride=2)
        xs = F.relu(self.conv2_1(xs))
        xs = F.relu(self.conv2_2(xs))
        xs = F.max_pooling_2d(xs, 2, stride=2)

        # Each pooling halves the frames, rounding up (it covers them all).
        ilens = (ilens + 1) // 2
        ilens = (ilens + 1) // 2

        xs = F.swapaxes(xs, 1, 2)
        xs = F.reshape(xs, (xs.shape[0], xs.shape[1], xs.shape[2] * xs.shape[3]))
        xs = [xs[i, :ilens[i], :] for i in range(len(ilens))]
        return xs, ilens


class PaddedVGG2L(chainer.Chain):
    """VGG2L's utterances padded into one array, to train through."""

    def __init__(self, in_channel=1):
        super().__init__()
        with self.init_scope():
            self.vgg = VGG2L(in_channel, nobias=True)

    def forward(self, xs, ilens):
        xs, ilens = self.vgg(xs, ilens)
        return F.pad_sequence(xs)


def vgg2l_output_size(idim, in_channel=1, out_channel=8):
    """The features per frame VGG2L gives for ``idim`` input features."""
    size = idim // in_channel
    size = -(-size // 2)  # each pooling rounds up
    size = -(-size // 2)
    return size * out_channel


def linear_tensor(linear, x):
    """``linear`` applied to the last axis of ``x`` (of any rank)."""
    y = linear(F.reshape(x, (-1, x.shape[-1])))
    return F.reshape(y, x.shape[:-1] + (-1,))


class AttDot(chainer.Chain):
    """Dot-product attention: the decoder state and every encoder frame are
    projected (tanh) to ``att_dim``; their products, scaled and soft-maxed
    over frames, weight the sum of the encoder frames."""

    def __init__(self, eprojs, dunits, att_dim):
        super().__init__()
        with self.init_scope():
            self.mlp_enc = L.Linear(eprojs, att_dim)
            self.mlp_dec = L.Linear(dunits, att_dim)
        self.dunits = dunits

    def forward(self, enc_hs, dec_z, att_prev):
        scaling = 2.0
        batch = len(enc_hs)
        enc_h = F.pad_sequence(enc_hs)  # utterance x frame x eprojs
        pre_compute_enc_h = F.tanh(linear_tensor(self.mlp_enc, enc_h))

        if dec_z is None:
            dec_z = chainer.Variable(self.xp.zeros((batch, self.dunits), dtype=numpy.float32))
        else:
            dec_z = F.reshape(dec_z, (batch, self.dunits))

        u = F.broadcast_to(F.expand_dims(F.tanh(self.mlp_dec(dec_z)), 1),
                           pre_compute_enc_h.shape)
        e = F.sum(pre_compute_enc_h * u, axis=2)  # utterance x frame
        w = F.softmax(scaling * e)
        c = F.sum(enc_h * F.broadcast_to(F.expand_dims(w, 2), enc_h.shape), axis=1)
        return c, w


class AttLoc(chainer.Chain):
    """Location-aware attention: the previous attention weights (uniform
    over each utterance's frames at the first step) are convolved along
    frames, and that, the projected encoder frames and the projected
    decoder state are added, passed through tanh and scored by a vector."""

    def __init__(self, eprojs, dunits, att_dim, aconv_chans, aconv_filts):
        super().__init__()
        with self.init_scope():
            self.mlp_enc = L.Linear(eprojs, att_dim)
            self.mlp_dec = L.Linear(dunits, att_dim, nobias=True)
            self.mlp_att = L.Linear(aconv_chans, att_dim, nobias=True)
            self.loc_conv = L.Convolution2D(1, aconv_chans, ksize=(1, 2 * aconv_filts + 1),
                                            pad=(0, aconv_filts))
            self.gvec = L.Linear(att_dim, 1)
        self.dunits = dunits

    def forward(self, enc_hs, dec_z, att_prev):
        scaling = 2.0
        batch = len(enc_hs)
        enc_h = F.pad_sequence(enc_hs)  # utterance x frame x eprojs
        h_length = enc_h.shape[1]
        pre_compute_enc_h = self.mlp_enc(enc_h, n_batch_axes=2)

        if dec_z is None:
            dec_z = chainer.Variable(self.xp.zeros((batch, self.dunits), dtype=numpy.float32))
        else:
            dec_z = F.reshape(dec_z, (batch, self.dunits))

        if att_prev is None:
            att_prev = [self.xp.full(hh.shape[0], 1.0 / hh.shape[0], dtype=numpy.float32)
                        for hh in enc_hs]
            att_prev = [chainer.Variable(att) for att in att_prev]
            att_prev = F.pad_sequence(att_prev)

        # utterance x 1 x 1 x frame -> utterance x chans x 1 x frame
        att_conv = self.loc_conv(F.reshape(att_prev, (batch, 1, 1, h_length)))
        att_conv = F.swapaxes(F.squeeze(att_conv, axis=2), 1, 2)  # utterance x frame x chans
        att_conv = self.mlp_att(att_conv, n_batch_axes=2)

        dec_z_tiled = F.broadcast_to(F.expand_dims(self.mlp_dec(dec_z), 1),
                                     pre_compute_enc_h.shape)
        e = F.squeeze(self.gvec(F.tanh(att_conv + pre_compute_enc_h + dec_z_tiled),
                                n_batch_axes=2), axis=2)
        w = F.softmax(scaling * e)
        c = F.sum(enc_h * F.broadcast_to(F.expand_dims(w, 2), enc_h.shape), axis=1)
        return c, w


def _mean_length(xs):
    """The mean length of the arrays of ``xs``, by a Python loop."""
    total = 0
    for x in xs:
        total += len(x)
    return total / len(xs)


def _flatten(x):
    return F.reshape(x, (x.size,))


class Decoder(chainer.Chain):
    """The attention decoder with its loss: the targets get SOS in front
    (inputs) and EOS behind (outputs); at every output step the attention
    reads the encoder states given the first layer's state, and two
    stateless LSTM layers take the embedded previous label and the
    attention's context.  The loss is the cross entropy of all steps
    (padding ignored), scaled by the mean target length as EspNet does."""

    def __init__(self, eprojs, odim, dlayers, dunits, sos, eos, att_dim,
                 aconv_chans=None, aconv_filts=None):
        super().__init__()
        assert dlayers <= 2, 'the layers are written out: at most two'
        with self.init_scope():
            self.embed = L.EmbedID(odim, dunits)
            self.lstm0 = StatelessLSTM(dunits + eprojs, dunits)
            self.lstm1 = StatelessLSTM(dunits, dunits)
            self.output = L.Linear(dunits, odim)
            if aconv_chans is None:
                self.att = AttDot(eprojs, dunits, att_dim)
            else:
                self.att = AttLoc(eprojs, dunits, att_dim, aconv_chans, aconv_filts)
        self.loss = None
        self.dlayers = dlayers
        self.dunits = dunits
        self.sos = sos
        self.eos = eos

    def forward(self, hs, ys):
        self.loss = None
        eos = self.xp.array([self.eos], 'i')
        sos = self.xp.array([self.sos], 'i')
        ys_in = [F.concat([sos, y], axis=0) for y in ys]
        ys_out = [F.concat([y, eos], axis=0) for y in ys]

        pad_ys_in = F.pad_sequence(ys_in, padding=self.eos)
        pad_ys_out = F.pad_sequence(ys_out, padding=-1)  # -1: ignored by the loss
        batch = pad_ys_out.shape[0]
        olength = pad_ys_out.shape[1]

        # Cell and hidden states per layer: None until the first step.
        c_list = [None]
        z_list = [None]
        for _ in range(1, self.dlayers):
            c_list.append(None)
            z_list.append(None)
        att_w = None
        z_all = []

        eys = self.embed(pad_ys_in)
        eys = F.separate(eys, axis=1)  # one utterance x dunits array per step

        for i in range(olength):
            att_c, att_w = self.att(hs, z_list[0], att_w)
            ey = F.hstack((eys[i], att_c))
            c_list_new = []
            z_list_new = []
            c_new, z_new = self.lstm0(c_list[0], z_list[0], ey)
            c_list_new.append(c_new)
            z_list_new.append(z_new)
            if self.dlayers > 1:
                c_new, z_new = self.lstm1(c_list[1], z_list[1], z_list_new[-1])
                c_list_new.append(c_new)
                z_list_new.append(z_new)
            c_list = c_list_new
            z_list = z_list_new
            z_all.append(z_list[-1])

        z_all = F.reshape(F.stack(z_all, axis=1), (batch * olength, self.dunits))
        y_all = self.output(z_all)
        self.loss = F.softmax_cross_entropy(y_all, _flatten(pad_ys_out))
        self.loss *= _mean_length(ys_in) - 1
        return self.loss


class Encoder(chainer.Chain):
    """EspNet's 'vggblstm' encoder: VGG2L, then a BLSTM on its output."""

    def __init__(self, idim, elayers, eunits, eprojs, in_channel=1, nobias=False):
        super().__init__()
        with self.init_scope():
            self.enc1 = VGG2L(in_channel, nobias=nobias)
            self.enc2 = BLSTM(vgg2l_output_size(idim, in_channel), elayers, eunits, eprojs)

    def forward(self, xs, ilens):
        xs, ilens = self.enc1(xs, ilens)
        xs, ilens = self.enc2(xs, ilens)
        return xs, ilens


class E2E(chainer.Chain):
    """The whole recogniser: the encoder, then the decoder's loss on the
    encoded utterances; the last label id is both SOS and EOS."""

    def __init__(self, idim, odim, elayers=2, eunits=3, eprojs=3, dlayers=2, dunits=4,
                 att_dim=5, aconv_chans=3, aconv_filts=2, nobias=False):
        super().__init__()
        self.sos = odim - 1
        self.eos = odim - 1
        with self.init_scope():
            self.enc = Encoder(idim, elayers, eunits, eprojs, nobias=nobias)
            self.dec = Decoder(eprojs, odim, dlayers, dunits, self.sos, self.eos, att_dim,
                               aconv_chans, aconv_filts)

    def forward(self, xs, ilens, ys):
        hs, ilens = self.enc(xs, ilens)
        return self.dec(hs, ys)

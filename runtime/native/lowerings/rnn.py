"""RNN, GRU and LSTM (ONNX one-layer recurrences) and their gradients
LSTMGrad, GRUGrad and RNNGrad (custom domain) as calls into
ccn_rnn.c, which multiplies through ccn_gemm.c.

W and R go to the kernel transposed (so the inner loop of each product is
contiguous): made at emit time when they are constants, else transposed
into scratch at run time.  A constant R of the forward node goes packed
in ccn_gemm.h's strips, which each step's product then reads without
packing them again (in one sequential pass at a batch of a few rows).
sequence_lens is read at run time, constant or not.  Only the default
activations are supported.
"""
import numpy

from ...ops.registry import CUSTOM_DOMAIN
from ...program import NO_REGISTER
from ..cformat import Shape, cfloat
from ..gemm_layout import STRIP_COLS, pack_panels
from ..lowering import Refuse, Step, lowers

#: op -> (C cell constant, number of gates, default activations of one direction)
_CELLS = {'RNN': ('CCN_CELL_RNN', 1, ('tanh',)),
          'GRU': ('CCN_CELL_GRU', 3, ('sigmoid', 'tanh')),
          'LSTM': ('CCN_CELL_LSTM', 4, ('sigmoid', 'tanh', 'tanh'))}
_DIRECTIONS = {'forward': 1, 'reverse': 1, 'bidirectional': 2}
#: op -> its number of inputs (the gradient's inputs continue after them)
_N_INPUTS = {'RNN': 6, 'GRU': 6, 'LSTM': 8}


@lowers(*_CELLS)
def recurrent(em, inst) -> Step:
    rec = _Recurrence(em, inst, inst.op, strips=True)
    # The kernel's own scratch (see ccn_rnn.h), then W^T and R^T when
    # they are transposed at run time.
    scratch = rec.place_weights((rec.T * rec.B + rec.B + 1) * rec.GH + 3 * rec.B * rec.H)
    present = [k < len(inst.outputs) and inst.outputs[k] != NO_REGISTER for k in range(3)]

    def render(ref, s):
        def out(k):
            return ref(inst.outputs[k]) if present[k] else 'NULL'
        lines, fields = rec.fields(ref, s)
        fields += [('y', out(0)), ('yh', out(1)), ('yc', out(2))]
        return (lines + ['ccn_rnn(&(const ccn_rnn_call){']
                + ['    .%s = %s,' % f for f in fields] + ['}, %s);' % s])

    shapes: list[Shape | None] = [shape if present[k] else None
                                  for k, shape in enumerate([rec.y, rec.states, rec.states])]
    return Step('rnn', shapes[:len(inst.outputs)], render, scratch=scratch,
                also=('gemm',))


@lowers(*(CUSTOM_DOMAIN + '::%sGrad' % op for op in _CELLS))
def recurrent_grad(em, inst) -> Step:
    """LSTMGrad, GRUGrad and RNNGrad (chainer_compiler/autodiff/rnn.py):
    the forward's inputs, then Y, gY, gY_h (and gY_c); results gX, gW, gR,
    gB, g_initial_h (and g_initial_c, gP)."""
    op = inst.op.removesuffix('Grad')
    rec = _Recurrence(em, inst, op)
    n_in = _N_INPUTS[op]
    if not em.has(inst, n_in):
        raise Refuse('the forward output Y is not given')
    upstream = [rec.y, rec.y] + [rec.states] * (2 if op == 'LSTM' else 1)
    for k, shape in enumerate(upstream, n_in):
        if em.has(inst, k) and em.shape(inst, k) != shape:
            raise Refuse('input %d has shape %s, expected %s'
                         % (k, list(em.shape(inst, k)), list(shape)))
    rows = rec.T * rec.B
    scratch = rec.place_weights(4 * rows * (rec.GH + rec.H) + rec.B * (rec.GH + 3 * rec.H))
    results = ['gx', 'gw', 'gr', 'gb', 'gh0'] + (['gc0', 'gpeep'] if op == 'LSTM' else [])
    sizes = [em.shape(inst, 0), em.shape(inst, 1), em.shape(inst, 2), (rec.D, 2 * rec.GH),
             rec.states, rec.states, (rec.D, 3 * rec.H)]
    present = [k < len(inst.outputs) and inst.outputs[k] != NO_REGISTER
               for k in range(len(results))]

    def render(ref, s):
        def ptr(k):
            return ref(inst.inputs[k]) if em.has(inst, k) else 'NULL'
        lines, fields = rec.fields(ref, s)
        grad = [('w', ptr(1)), ('r', ptr(2)), ('y', ptr(n_in)), ('gy', ptr(n_in + 1)),
                ('gyh', ptr(n_in + 2)), ('gyc', ptr(n_in + 3) if op == 'LSTM' else 'NULL')]
        grad += [(name, ref(inst.outputs[k]) if present[k] else 'NULL')
                 for k, name in enumerate(results)]
        return (lines + ['ccn_rnn_grad(&(const ccn_rnn_grad_call){', '    .fwd = {']
                + ['        .%s = %s,' % f for f in fields] + ['    },']
                + ['    .%s = %s,' % f for f in grad] + ['}, %s);' % s])

    shapes: list[Shape | None] = [sizes[k] if present[k] else None
                                  for k in range(len(inst.outputs))]
    return Step('rnn', shapes, render, scratch=scratch, also=('gemm',))


class _Recurrence:
    """What a recurrence and its gradient share: the checked attributes
    and shapes of forward op ``op``'s inputs (the first inputs of
    ``inst``), and the layouts of W^T and R^T for the kernel (``strips``:
    a constant R^T in strips, which only the forward kernel reads)."""

    def __init__(self, em, inst, op, strips=False):
        self.em, self.inst, self.op = em, inst, op
        a = inst.attrs
        self.cell, gates, default_acts = _CELLS[op]
        self.direction = a['direction']
        if self.direction not in _DIRECTIONS:
            raise Refuse('unknown direction %r' % self.direction)
        D = self.D = _DIRECTIONS[self.direction]
        layout = self.layout = int(a['layout'])
        if layout not in (0, 1):
            raise Refuse('layout %d is not 0 or 1' % layout)
        _check_attributes(a, D, default_acts)
        T, B, _, H = self.T, self.B, self.n_in, self.H = _check_inputs(
            em, inst, D, gates, layout, _N_INPUTS[op])
        self.GH = gates * H
        self.states = (B, D, H) if layout else (D, B, H)
        self.y = (B, T, D, H) if layout else (T, D, B, H)
        self.rt_strips = strips and em.const(inst.inputs[2]) is not None
        self.weights = [_weight_layout(em, inst, 1, [(0, self.GH)], D, 'rnn_wt'),
                        _weight_layout(em, inst, 2, _r_blocks(gates, H), D,
                                       'gru_rt' if op == 'GRU' else 'rnn_rt', self.rt_strips)]
        self.runtime_at: dict[int, int] = {}

    def place_weights(self, scratch):
        """Scratch floats in all: ``scratch`` for the kernel, then W^T and
        R^T when they are transposed at run time."""
        for k, (name, _) in zip((1, 2), self.weights):
            if name is None:
                self.runtime_at[k] = scratch
                scratch += self.em.nbytes(self.inst.inputs[k]) // 4
        return scratch

    def fields(self, ref, s):
        """(lines transposing W and R at run time, the ccn_rnn_call fields
        but its outputs)."""
        em, inst, a = self.em, self.inst, self.inst.attrs

        def ptr(k):
            return ref(inst.inputs[k]) if em.has(inst, k) else 'NULL'
        lines, names = [], []
        for k, (name, moves) in zip((1, 2), self.weights):
            if name is None:
                for src, rows, cols, dst in moves:
                    lines.append('ccn_transpose(%d, %d, %s + %d, %s + %d);' % (
                        rows, cols, ref(inst.inputs[k]), src, s, self.runtime_at[k] + dst))
                name = '%s + %d' % (s, self.runtime_at[k])
            names.append(name)
        lstm = self.op == 'LSTM'
        return lines, [
            ('cell', self.cell), ('seq', self.T), ('batch', self.B), ('input', self.n_in),
            ('hidden', self.H), ('directions', self.D),
            ('reverse', int(self.direction == 'reverse')), ('batch_major', self.layout),
            ('linear_before_reset', int(a.get('linear_before_reset', 0))),
            ('clip', cfloat(a['clip']) if a.get('clip') is not None else 'INFINITY'),
            ('x', ptr(0)), ('wt', names[0]), ('rt', names[1]),
            ('rt_strips', int(self.rt_strips)), ('bias', ptr(3)),
            ('lens', ptr(4)), ('h0', ptr(5)), ('c0', ptr(6) if lstm else 'NULL'),
            ('peep', ptr(7) if lstm else 'NULL')]


def _check_attributes(a, D, default_acts):
    """Refuse what the kernel does not do: other activations, input_forget
    and a negative clip.  Activation alphas and betas are ignored: the
    default activations take none."""
    acts = tuple(str(n).lower() for n in a.get('activations') or default_acts)
    if acts not in (default_acts, default_acts * D):
        raise Refuse('activations %s are not supported; only the default %s'
                     % (list(a['activations']), [n.capitalize() for n in default_acts]))
    if int(a.get('input_forget', 0)):
        raise Refuse('input_forget=1 is not supported')
    if a.get('clip') is not None and not float(a['clip']) >= 0:
        raise Refuse('clip %s is negative' % a['clip'])


def _check_inputs(em, inst, D, gates, layout, n_inputs):
    """(seq, batch, input size, hidden size), each of the ``n_inputs``
    inputs' shape checked."""
    sx, sw, sr = em.shape(inst, 0), em.shape(inst, 1), em.shape(inst, 2)
    if len(sx) != 3 or len(sr) != 3:
        raise Refuse('X and R must be 3-D, got %s and %s' % (list(sx), list(sr)))
    T, B, n_in = (sx[1], sx[0], sx[2]) if layout else sx
    H = sr[2]
    GH = gates * H
    if sw != (D, GH, n_in) or sr != (D, GH, H):
        raise Refuse('W %s and R %s do not fit X %s, %d direction(s) and %d gates '
                     '(expected %s and %s)' % (list(sw), list(sr), list(sx), D, gates,
                                               [D, GH, n_in], [D, GH, H]))
    if inst.attrs.get('hidden_size') is not None and int(inst.attrs['hidden_size']) != H:
        raise Refuse("hidden_size %d differs from R's %d" % (int(inst.attrs['hidden_size']), H))
    states = (B, D, H) if layout else (D, B, H)
    # B, sequence_lens, initial_h, initial_c, P
    expected = {3: (D, 2 * GH), 4: (B,), 5: states, 6: states, 7: (D, 3 * H)}
    for k, shape in expected.items():
        if k >= n_inputs:
            continue
        dtypes = ('int32',) if k == 4 else ('float32',)
        if em.has(inst, k) and em.shape(inst, k, dtypes) != shape:
            raise Refuse('input %d has shape %s, expected %s'
                         % (k, list(em.shape(inst, k, dtypes)), list(shape)))
    return T, B, n_in, H


def _r_blocks(gates, H):
    """Row blocks of R transposed one by one: GRU's (z, r) block apart from
    its h block, since the h product waits for r."""
    return [(0, 2 * H), (2 * H, 3 * H)] if gates == 3 else [(0, gates * H)]


def _weight_layout(em, inst, k, blocks, D, tag, strips=False):
    """(C name, None) of input ``k`` (D, G*H, n) transposed block by block
    per direction (``strips``: each block's transpose in strips) when it is
    a constant, else (None, moves): the (source offset, rows, columns,
    destination offset) of each run-time ccn_transpose into scratch, in the
    same order."""
    _, GH, n = em.shape(inst, k)
    w = em.const(inst.inputs[k])
    if w is not None:
        w = numpy.asarray(w, numpy.float32)
        parts = [pack_panels(w[d, r0:r1], STRIP_COLS) if strips else w[d, r0:r1].T.ravel()
                 for d in range(D) for r0, r1 in blocks]
        return em.constant_array('%s%s%d' % (tag, '_strips' if strips else '', inst.inputs[k]),
                                 numpy.concatenate(parts)), None
    moves, dst = [], 0
    for d in range(D):
        for r0, r1 in blocks:
            moves.append(((d * GH + r0) * n, r1 - r0, n, dst))
            dst += (r1 - r0) * n
    return None, moves

"""RNN, GRU and LSTM (ONNX one-layer recurrences) as calls into
ccn_recurrent.c, which multiplies through ccn_connection.c's ccn_gemm.

W and R go to the kernel transposed (so the inner loop of each product is
contiguous): made at emit time when they are constants, else transposed
into scratch at run time.  sequence_lens is read at run time, constant or
not.  Only the default activations are supported.
"""
import numpy

from ...program import NO_REGISTER
from ..cformat import Shape, cfloat
from ..lowering import Refuse, Step, lowers

#: op -> (C cell constant, number of gates, default activations of one direction)
_CELLS = {'RNN': ('CCN_CELL_RNN', 1, ('tanh',)),
          'GRU': ('CCN_CELL_GRU', 3, ('sigmoid', 'tanh')),
          'LSTM': ('CCN_CELL_LSTM', 4, ('sigmoid', 'tanh', 'tanh'))}
_DIRECTIONS = {'forward': 1, 'reverse': 1, 'bidirectional': 2}


@lowers(*_CELLS)
def recurrent(em, inst) -> Step:
    a = inst.attrs
    cell, gates, default_acts = _CELLS[inst.op]
    direction = a.get('direction', 'forward')
    if direction not in _DIRECTIONS:
        raise Refuse('unknown direction %r' % direction)
    D = _DIRECTIONS[direction]
    layout = int(a.get('layout', 0))
    if layout not in (0, 1):
        raise Refuse('layout %d is not 0 or 1' % layout)
    _check_attributes(a, D, default_acts)
    T, B, n_in, H = _check_inputs(em, inst, D, gates, layout)
    GH = gates * H
    weights = [_weight_layout(em, inst, 1, [(0, GH)], D, 'rnn_wt'),
               _weight_layout(em, inst, 2, _r_blocks(gates, H), D,
                              'gru_rt' if inst.op == 'GRU' else 'rnn_rt')]
    # The kernel's own scratch (see ccn_recurrent.h), then W^T and R^T when
    # they are transposed at run time.
    scratch = T * B * GH + B * GH + 3 * B * H
    runtime_at = {}
    for k, (name, _) in zip((1, 2), weights):
        if name is None:
            runtime_at[k] = scratch
            scratch += em.nbytes(inst.inputs[k]) // 4
    present = [k < len(inst.outputs) and inst.outputs[k] != NO_REGISTER for k in range(3)]

    def render(ref, s):
        def ptr(k):
            return ref(inst.inputs[k]) if em.has(inst, k) else 'NULL'

        def out(k):
            return ref(inst.outputs[k]) if present[k] else 'NULL'
        lines, names = [], []
        for k, (name, moves) in zip((1, 2), weights):
            if name is None:
                for src, rows, cols, dst in moves:
                    lines.append('ccn_transpose(%d, %d, %s + %d, %s + %d);' % (
                        rows, cols, ref(inst.inputs[k]), src, s, runtime_at[k] + dst))
                name = '%s + %d' % (s, runtime_at[k])
            names.append(name)
        fields = [('cell', cell), ('seq', T), ('batch', B), ('input', n_in), ('hidden', H),
                  ('directions', D), ('reverse', int(direction == 'reverse')),
                  ('batch_major', layout),
                  ('linear_before_reset', int(a.get('linear_before_reset', 0))),
                  ('clip', cfloat(a['clip']) if a.get('clip') is not None else 'INFINITY'),
                  ('x', ptr(0)), ('wt', names[0]), ('rt', names[1]), ('bias', ptr(3)),
                  ('lens', ptr(4)), ('h0', ptr(5)), ('c0', ptr(6)), ('peep', ptr(7)),
                  ('y', out(0)), ('yh', out(1)), ('yc', out(2))]
        return (lines + ['ccn_recurrent(&(const ccn_rnn_call){']
                + ['    .%s = %s,' % f for f in fields] + ['}, %s);' % s])

    states = (B, D, H) if layout else (D, B, H)
    y = (B, T, D, H) if layout else (T, D, B, H)
    shapes: list[Shape | None] = [shape if present[k] else None
                                  for k, shape in enumerate([y, states, states])]
    return Step('recurrent', shapes[:len(inst.outputs)], render, scratch=scratch,
                also=('connection',))


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


def _check_inputs(em, inst, D, gates, layout):
    """(seq, batch, input size, hidden size), every input's shape checked."""
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
        dtypes = ('int32',) if k == 4 else ('float32',)
        if em.has(inst, k) and em.shape(inst, k, dtypes) != shape:
            raise Refuse('input %d has shape %s, expected %s'
                         % (k, list(em.shape(inst, k, dtypes)), list(shape)))
    return T, B, n_in, H


def _r_blocks(gates, H):
    """Row blocks of R transposed one by one: GRU's (z, r) block apart from
    its h block, since the h product waits for r."""
    return [(0, 2 * H), (2 * H, 3 * H)] if gates == 3 else [(0, gates * H)]


def _weight_layout(em, inst, k, blocks, D, tag):
    """(C name, None) of input ``k`` (D, G*H, n) transposed block by block
    per direction when it is a constant, else (None, moves): the
    (source offset, rows, columns, destination offset) of each run-time
    ccn_transpose into scratch, in the same order."""
    _, GH, n = em.shape(inst, k)
    w = em.const(inst.inputs[k])
    if w is not None:
        parts = [w[d, r0:r1].T.ravel() for d in range(D) for r0, r1 in blocks]
        return em.constant_array('%s%d' % (tag, inst.inputs[k]), numpy.concatenate(parts)), None
    moves, dst = [], 0
    for d in range(D):
        for r0, r1 in blocks:
            moves.append(((d * GH + r0) * n, r1 - r0, n, dst))
            dst += (r1 - r0) * n
    return None, moves

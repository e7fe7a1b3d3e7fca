"""Converters for chainer.functions.rnn.

Two ways a recurrent network reaches ONNX:

* Decomposed (always works): on CPU ``F.n_step_lstm`` and friends run as a
  loop of primitive FunctionNodes (LinearFunction, Add, SplitAxis, Concat,
  Stack, Reshape, Sigmoid, Tanh, ... from the other families) around the cell
  functions converted here: ``LSTM`` (``F.lstm``) and ``SLSTM`` (``F.slstm``);
  ``TreeLSTM`` (``F.tree_lstm``) too.  On GPU Chainer calls cuDNN instead
  (old-style Functions with no converter): only the folded form exports.

* Folded: inside :func:`n_step_as_single_calls` the three base functions
  ``n_step_lstm_base``, ``n_step_gru_base`` and ``n_step_rnn_base`` (which
  every ``F.n_step_*``, ``F.n_step_bi*`` and ``L.NStep*`` goes through) are
  replaced by a wrapper that records ONE FunctionNode, :class:`NStepRNN`,
  converted to one ONNX LSTM / GRU / RNN node per layer.  Chainer's
  per-gate weight matrices stay the link's parameters (``/lstm/0/w0`` ...);
  they are reordered into ONNX's gate order by Concat/Reshape nodes.
  Variable-length sequences become a padded (T, B, I) tensor plus
  ``sequence_lens``.  Sequences that are, in order, the rows of one tensor
  (``F.separate(x, axis=0)``; ``L.NStep*`` keeps rows of one length in
  order) are read from that tensor itself and a state
  ``L.NStep*`` makes for ``hx=None`` is left out (ONNX's zero state): no
  node or constant per row, so the file takes any batch (``dynamic_axes``).
  Cases the fold does not cover fall back to the original function, i.e.
  the decomposed form.
"""
import contextlib
import functools

import chainer
import chainerx
import numpy
from chainer.functions.rnn import n_step_gru as _gru_module
from chainer.functions.rnn import n_step_lstm as _lstm_module
from chainer.functions.rnn import n_step_rnn as _rnn_module
from chainer.links.rnn import n_step_rnn as _link_module

from .array import note_slices
from .registry import converter

# ---------------------------------------------------------------------------
# Cell functions (decomposed form)
# ---------------------------------------------------------------------------

def _lstm_gates(ctx, x, units):
    """Chainer's LSTM input ``x`` (B, 4H, *rest) interleaves the gates per
    unit: x[:, 4*j + k] is gate k (a, i, f, o) of unit j.  Returns the four
    gate tensors shaped (B, H, 1, R), R = prod(rest) (1 if none)."""
    xr = ctx.reshape(x, [0, units, 4, -1])
    return ctx.split(xr, [1, 1, 1, 1], 2, [ctx.fresh('lstm_gate') for _ in range(4)])


def _cell_layout(ctx, c, units):
    return ctx.reshape(c, [0, units, 1, -1])


def _restore(ctx, value, shape, out):
    """Reshape (B, H, 1, R) back to (B, H, *rest) (batch dimension kept)."""
    return ctx.reshape(value, [0] + list(shape[1:]), out=out)


@converter('LSTM')
def convert_lstm(ctx, call):
    """F.lstm(c_prev, x) -> (c, h): a = tanh, i/f/o = sigmoid, c = a*i + f*c,
    h = o * tanh(c).  Rows of c_prev beyond x's batch pass through."""
    c_prev, x = call.inputs
    c_arr, x_arr = call.input_arrays
    c_out, h_out = call.outputs
    units = c_arr.shape[1]
    batch, c_batch = x_arr.shape[0], c_arr.shape[0]
    if c_batch > batch:
        c_prev, c_rest = ctx.split(c_prev, [batch, c_batch - batch], 0,
                                   [ctx.fresh('c_head'), ctx.fresh('c_rest')])
    a, i, f, o = _lstm_gates(ctx, x, units)
    a = ctx.node('Tanh', [a])
    i, f, o = (ctx.node('Sigmoid', [g]) for g in (i, f, o))
    c4 = _cell_layout(ctx, c_prev, units)
    c_new = ctx.node('Add', [ctx.node('Mul', [a, i]), ctx.node('Mul', [f, c4])])
    h = ctx.node('Mul', [o, ctx.node('Tanh', [c_new])])
    _restore(ctx, h, x_arr.shape[:1] + c_arr.shape[1:], h_out)
    if c_batch > batch:
        c_head = _restore(ctx, c_new, c_arr.shape, None)
        ctx.node('Concat', [c_head, c_rest], [c_out], axis=0)
    else:
        _restore(ctx, c_new, c_arr.shape, c_out)


@converter('SLSTM')
def convert_slstm(ctx, call):
    """F.slstm(c1, c2, x1, x2) -> (c, h): c = a1*i1 + a2*i2 + f1*c1 + f2*c2,
    h = sigmoid(o1 + o2) * tanh(c)."""
    c1, c2, x1, x2 = call.inputs
    c_arr = call.input_arrays[0]
    c_out, h_out = call.outputs
    units = c_arr.shape[1]
    a1, i1, f1, o1 = _lstm_gates(ctx, x1, units)
    a2, i2, f2, o2 = _lstm_gates(ctx, x2, units)
    terms = []
    for a, i, f, c in ((a1, i1, f1, c1), (a2, i2, f2, c2)):
        terms.append(ctx.node('Mul', [ctx.node('Tanh', [a]), ctx.node('Sigmoid', [i])]))
        terms.append(ctx.node('Mul', [ctx.node('Sigmoid', [f]), _cell_layout(ctx, c, units)]))
    c_new = ctx.node('Sum', terms)
    o = ctx.node('Sigmoid', [ctx.node('Add', [o1, o2])])
    h = ctx.node('Mul', [o, ctx.node('Tanh', [c_new])])
    _restore(ctx, c_new, c_arr.shape, c_out)
    _restore(ctx, h, c_arr.shape, h_out)


@converter('TreeLSTM')
def convert_tree_lstm(ctx, call):
    """F.tree_lstm(c1, ..., cN, x) -> (c, h).  Unlike F.lstm the gates are
    contiguous blocks of x's axis 1: a, i, o, f1 ... fN.
    (TreeLSTM is an old-style chainer.Function: the hook sees it wrapped in
    a FunctionAdapter, whose ``function`` is the TreeLSTM.)"""
    cs, x = call.inputs[:-1], call.inputs[-1]
    units = call.input_arrays[0].shape[1]
    n = len(cs)
    gates = ctx.split(x, [units] * (3 + n), 1, [ctx.fresh('tree_gate') for _ in range(3 + n)])
    a, i, o, fs = gates[0], gates[1], gates[2], gates[3:]
    terms = [ctx.node('Mul', [ctx.node('Tanh', [a]), ctx.node('Sigmoid', [i])])]
    terms += [ctx.node('Mul', [ctx.node('Sigmoid', [f]), c]) for f, c in zip(fs, cs)]
    c_out, h_out = call.outputs
    c_new = ctx.node('Sum', terms, [c_out])
    ctx.node('Mul', [ctx.node('Sigmoid', [o]), ctx.node('Tanh', [c_new])], [h_out])


# ---------------------------------------------------------------------------
# Folded n_step_* (one FunctionNode per call)
# ---------------------------------------------------------------------------

#: kind -> (weights per direction, ONNX op)
_KINDS = {'lstm': (8, 'LSTM'), 'gru': (6, 'GRU'), 'rnn_tanh': (2, 'RNN'),
          'rnn_relu': (2, 'RNN')}

# Chainer's per-gate matrices in ONNX's gate order.  LSTM: chainer feeds
# F.lstm's gates (a, i, f, o) from (w2, w0, w1, w3) / (w6, w4, w5, w7), i.e.
# i=w0, f=w1, c=w2, o=w3; ONNX wants i, o, f, c.  GRU: chainer r=w0, z=w1,
# h=w2 (recurrent w3, w4, w5, applied before the reset gate); ONNX wants
# z, r, h with linear_before_reset=1.
_W_ORDER = {'lstm': ([0, 3, 1, 2], [4, 7, 5, 6]), 'gru': ([1, 0, 2], [4, 3, 5]),
            'rnn_tanh': ([0], [1]), 'rnn_relu': ([0], [1])}


class NStepRNN(chainer.FunctionNode):
    """One whole ``n_step_*`` call recorded as a single FunctionNode (only
    while exporting, see :func:`n_step_as_single_calls`).

    Inputs: the given states hx[, cx], ws (flattened layer-major, direction,
    weight), bs (same), then xs (time-major batches, non-increasing sizes)
    or, when ``layout`` is 'batch' or 'time', the one (B, T, I) or (T, B, I)
    tensor whose rows are the sequences (all T long).  ``zero_states``: per
    state, the zero array the link made for it (``hx=None``; no input, as
    ONNX leaves a zero state out) or None (an input).
    Outputs: hy, [cy,] ys[0], ..., ys[T-1].  The forward pass runs the
    original Chainer function, so the results are Chainer's own.
    """

    def __init__(self, kind, original, n_layers, dropout_ratio, directions, activation,
                 zero_states, layout=None):
        self.kind = kind
        self.original = original
        self.n_layers = n_layers
        self.dropout_ratio = dropout_ratio
        self.directions = directions
        self.activation = activation
        self.n_weights = _KINDS[kind][0]
        self.zero_states = zero_states
        self.layout = layout

    def split_inputs(self, inputs):
        """(states, ws, bs, xs) of the node's inputs; a zero state is None."""
        n = self.n_layers * self.directions
        k = self.n_weights
        states, pos = [], 0
        for zero in self.zero_states:
            states.append(None if zero is not None else inputs[pos])
            pos += zero is None
        ws = [list(inputs[pos + i * k:pos + (i + 1) * k]) for i in range(n)]
        pos += n * k
        bs = [list(inputs[pos + i * k:pos + (i + 1) * k]) for i in range(n)]
        pos += n * k
        return states, ws, bs, list(inputs[pos:])

    def call_original(self, states, ws, bs, xs):
        states = [z if s is None else s for s, z in zip(states, self.zero_states)]
        if self.layout == 'batch':
            xs = [xs[0][:, t] for t in range(xs[0].shape[1])]
        elif self.layout == 'time':
            xs = list(xs[0])
        bi = self.directions == 2
        if self.kind == 'lstm':
            return self.original(self.n_layers, self.dropout_ratio, states[0], states[1],
                                 ws, bs, xs, use_bi_direction=bi)
        if self.kind == 'gru':
            return self.original(self.n_layers, self.dropout_ratio, states[0], ws, bs, xs,
                                 use_bi_direction=bi)
        return self.original(self.n_layers, self.dropout_ratio, states[0], ws, bs, xs,
                             self.activation, use_bi_direction=bi)

    def forward(self, inputs):
        with chainer.no_backprop_mode():
            result = self.call_original(*self.split_inputs(inputs))
        *states, ys = result
        return tuple(_array(s) for s in states) + tuple(_array(y) for y in ys)

    def backward(self, indexes, grad_outputs):
        raise RuntimeError(
            'NStepRNN is recorded only while exporting; it has no backward pass')


_CHAINERX_ARRAY = getattr(chainerx, 'ndarray', ())


def _array(v):
    return v.array if isinstance(v, chainer.Variable) else v


def _foldable(states, xs):
    """Whether the fold reproduces the call: float32 arrays, not ChainerX,
    no zero-length sequence (every row of hx is used), batch sizes
    non-increasing (as F.transpose_sequence makes them)."""
    if _active['unrolled'] or not xs or any(s is None for s in states):
        return False
    arrays = [_array(s) for s in states] + [_array(x) for x in xs]
    if any(isinstance(a, _CHAINERX_ARRAY) or a.dtype != numpy.float32 for a in arrays):
        return False
    sizes = [len(x) for x in xs]
    if any(b > a for a, b in zip(sizes, sizes[1:])):
        return False
    return all(_array(s).ndim == 3 and _array(s).shape[1] == sizes[0] for s in states)


def _fold(kind, original, n_layers, dropout_ratio, states, ws, bs, xs, use_bi_direction,
          activation=None):
    directions = 2 if use_bi_direction else 1
    zeros = [_array(s) if id(s) in _link_zeros else None for s in states]
    x, layout = _rows_source(xs)
    node = NStepRNN(kind, original, n_layers, dropout_ratio, directions, activation, zeros,
                    layout)
    inputs = [s for s, z in zip(states, zeros) if z is None]
    inputs += [w for ws_i in ws for w in ws_i] + [b for bs_i in bs for b in bs_i]
    outputs = node.apply(inputs + (list(xs) if layout is None else [x]))
    n_states = len(states)
    return tuple(outputs[:n_states]) + (tuple(outputs[n_states:]),)


def _rows_source(xs):
    """(x, layout) when the time-major batches ``xs`` are, in order, the
    rows of one tensor x, so the graph can read x itself with no node per
    row: 'batch' when x is (B, T, I) and ``xs`` come from
    ``F.transpose_sequence(F.separate(x, axis=0))`` (what ``L.NStep*`` makes
    of a batch of one sequence per row, rows kept in order), 'time' when x
    is (T, B, I) and ``xs`` is ``F.separate(x, axis=0)``.  (None, None)
    otherwise (sequences of other lengths or origins)."""
    rows = _separated(xs)
    if rows is not None:
        return rows, 'time'
    transpose = _creator(xs[0])
    if type(transpose).__name__ != 'TransposeSequence' or not _outputs_in_order(transpose, xs):
        return None, None
    x = _separated([node.get_variable() for node in transpose.inputs])
    return (x, 'batch') if x is not None else (None, None)


def _separated(values):
    """The Variable x of which ``values`` are ``F.separate(x, axis=0)``, in
    order, x of rank 3; else None."""
    separate = _creator(values[0])
    if type(separate).__name__ != 'Separate' or len(separate.inputs[0].shape) != 3 or \
            separate.axis % 3 != 0 or not _outputs_in_order(separate, values) or \
            any(v.array is None for v in values):
        return None
    x = separate.inputs[0].get_variable()
    if x.array is None:  # x's Variable is gone and its node keeps no data: the rows have it
        rows = [v.array for v in values]
        x.array = chainer.backend.get_array_module(rows[0]).stack(rows)
    return x


def _creator(value):
    return value.creator_node if isinstance(value, chainer.Variable) else None


def _outputs_in_order(func, values):
    """Whether ``values`` (Variables) are all of ``func``'s outputs, in order."""
    return len(func.outputs) == len(values) and all(
        isinstance(v, chainer.Variable) and ref() is v.node
        for ref, v in zip(func.outputs, values))


def _wrap_lstm(original):
    @functools.wraps(original)
    def n_step_lstm_base(n_layers, dropout_ratio, hx, cx, ws, bs, xs, use_bi_direction,
                         **kwargs):
        if kwargs or not _foldable([hx, cx], xs):
            return original(n_layers, dropout_ratio, hx, cx, ws, bs, xs, use_bi_direction,
                            **kwargs)
        return _fold('lstm', original, n_layers, dropout_ratio, [hx, cx], ws, bs, xs,
                     use_bi_direction)
    return n_step_lstm_base


def _wrap_gru(original):
    @functools.wraps(original)
    def n_step_gru_base(n_layers, dropout_ratio, hx, ws, bs, xs, use_bi_direction, **kwargs):
        if kwargs or not _foldable([hx], xs):
            return original(n_layers, dropout_ratio, hx, ws, bs, xs, use_bi_direction,
                            **kwargs)
        return _fold('gru', original, n_layers, dropout_ratio, [hx], ws, bs, xs,
                     use_bi_direction)
    return n_step_gru_base


def _wrap_rnn(original):
    @functools.wraps(original)
    def n_step_rnn_base(n_layers, dropout_ratio, hx, ws, bs, xs, activation,
                        use_bi_direction, **kwargs):
        if kwargs or activation not in ('tanh', 'relu') or \
                not _foldable([hx], xs):
            return original(n_layers, dropout_ratio, hx, ws, bs, xs, activation,
                            use_bi_direction, **kwargs)
        return _fold('rnn_' + activation, original, n_layers, dropout_ratio, [hx], ws, bs,
                     xs, use_bi_direction, activation)
    return n_step_rnn_base


def _wrap_init_hx(original):
    @functools.wraps(original)
    def init_hx(self, xs):
        hx = original(self, xs)
        _link_zeros[id(hx)] = hx  # kept alive: the id stays its own
        return hx
    return init_hx


def _wrap_argsort(original):
    @functools.wraps(original)
    def argsort_list_descent(xs):
        # The link sorts its sequences by length with NumPy's unstable
        # argsort, which reorders equal lengths (over 64 of them), and undoes
        # that order on every output.  Rows of one length are independent
        # and already sorted: kept in order (what a stable sort gives), the
        # fold reads x itself and the given hx passes through.
        if len({len(x) for x in xs}) == 1:
            return numpy.arange(len(xs), dtype=numpy.int32)
        return original(xs)
    return argsort_list_descent


_PATCHES = ((_lstm_module, 'n_step_lstm_base', _wrap_lstm),
            (_gru_module, 'n_step_gru_base', _wrap_gru),
            (_rnn_module, 'n_step_rnn_base', _wrap_rnn),
            (_link_module.NStepRNNBase, 'init_hx', _wrap_init_hx),
            (_link_module, 'argsort_list_descent', _wrap_argsort))

_active = {'folding': 0, 'unrolled': 0}

#: id -> the zero states ``L.NStep*`` made for ``hx=None`` while folding:
#: left out of the graph (ONNX's zero state), so no constant of the batch's
#: size is recorded for them.
_link_zeros: dict = {}


@contextlib.contextmanager
def n_step_as_single_calls():
    """While active, every F.n_step_{lstm,bilstm,gru,bigru,rnn,birnn} call
    (and so every L.NStep* link) records one :class:`NStepRNN` FunctionNode
    instead of its unrolled primitives.  Re-entrant.  Patches module
    globals of chainer.functions.rnn, ``NStepRNNBase.init_hx`` and the
    link's sort of equal lengths (kept in order): not thread-safe, meant to
    wrap one export."""
    if _active['folding']:
        _active['folding'] += 1
        try:
            yield
        finally:
            _active['folding'] -= 1
        return
    saved = [(module, name, getattr(module, name)) for module, name, _ in _PATCHES]
    _active['folding'] = 1
    try:
        for module, name, wrap in _PATCHES:
            setattr(module, name, wrap(getattr(module, name)))
        yield
    finally:
        _active['folding'] = 0
        _link_zeros.clear()
        for module, name, original in saved:
            setattr(module, name, original)


@contextlib.contextmanager
def n_step_unrolled():
    """Inside it, n_step_* calls are recorded unrolled (primitive
    FunctionNodes) even within :func:`n_step_as_single_calls`."""
    _active['unrolled'] += 1
    try:
        yield
    finally:
        _active['unrolled'] -= 1


@converter('NStepRNN')
def convert_n_step_rnn(ctx, call):
    func = call.func
    kind, D, L = func.kind, func.directions, func.n_layers
    (states, ws, bs, xs) = func.split_inputs(call.inputs)
    (_, w_arrays, _, x_arrays) = func.split_inputs(call.input_arrays)
    H = w_arrays[0][0].shape[0]  # every kind's first input weight is (H, I)
    n_states = len(states)
    out_states, out_ys = call.outputs[:n_states], call.outputs[n_states:]
    if func.layout is None:
        sizes = [len(x) for x in x_arrays]
        in_size = x_arrays[0].shape[1]
        x, lens = _padded(ctx, xs, x_arrays, sizes)
    else:
        # One tensor whose rows are the sequences, all T long: ONNX's
        # (T, B, I) with no node or constant per row, so any batch size.
        T, B, in_size = x_arrays[0].shape
        if func.layout == 'batch':
            T, B = B, T
        sizes = [B] * T
        x = xs[0] if func.layout == 'time' else _transpose(ctx, xs[0], [1, 0, 2])
        lens = ''
    T, B = len(sizes), sizes[0]

    # Initial states per layer: (D, B, H) slices of (L*D, B, H); '' for zeros.
    def per_layer(state, hint):
        if state is None or L == 1:
            return [state or ''] * L
        return ctx.split(state, [D] * L, 0, [ctx.fresh(hint) for _ in range(L)])
    init = [per_layer(s, h) for s, h in zip(states, ('initial_h', 'initial_c'))]

    def next_input(y):
        x = _layer_output(ctx, y, [T, B, D * H], D)
        if call.train and func.dropout_ratio > 0:
            x = ctx.dropout(x, func.dropout_ratio, True)
        return x
    y, _ = stack_layers(ctx, kind, x, ws, bs, lens, init, H, D, in_size, next_input,
                        list(out_states))

    valid = numpy.concatenate([t * B + numpy.arange(s) for t, s in enumerate(sizes)])
    if len(valid) == T * B:
        # ys[t] = step t, directions concatenated: split on time, so no
        # constant holds the batch size (a Reshape target may).  Made only if
        # read step by step: a stack of the link's ys reads Y itself.
        if T == 1:
            _layer_output(ctx, y, [B, D * H], D, out=out_ys[0])
            return
        whole = _layer_output(ctx, y, [T, B, D * H], D)
        note_slices(ctx, out_ys, whole)

        def emit():
            steps = ctx.split(whole, [1] * T, 0, [ctx.fresh('step') for _ in range(T)])
            for step, out in zip(steps, out_ys):
                ctx.squeeze(step, [0], out=out)
        ctx.defer(list(out_ys), emit)
        return
    # ys[t] = the first sizes[t] rows of step t (T > 1: a shorter sequence).
    flat = ctx.node('Gather', [_layer_output(ctx, y, [T * B, D * H], D),
                               ctx.constant(valid.astype(numpy.int64), hint='valid')], axis=0)
    ctx.split(flat, sizes, 0, out_ys)


def _padded(ctx, xs, x_arrays, sizes):
    """The padded time-major input (T, B, I) of packed batches ``xs``
    (gathered, padding positions read an appended zero row) and its
    sequence_lens ('' when every sequence is T long)."""
    T, B = len(sizes), sizes[0]
    offsets = numpy.cumsum([0] + sizes)
    index = numpy.full((T, B), offsets[-1], numpy.int64)
    for t, s in enumerate(sizes):
        index[t, :s] = offsets[t] + numpy.arange(s)
    zero = ctx.constant(numpy.zeros((1,) + x_arrays[0].shape[1:], x_arrays[0].dtype),
                        hint='pad_row')
    packed = ctx.node('Concat', list(xs) + [zero], axis=0)
    x = ctx.node('Gather', [packed, ctx.constant(index, hint='pad_index')], axis=0)
    seq_lens = numpy.array([sum(1 for s in sizes if s > b) for b in range(B)], numpy.int32)
    return x, '' if (seq_lens == T).all() else ctx.constant(seq_lens, hint='sequence_lens')


def _transpose(ctx, x, perm):
    return ctx.node('Transpose', [x], perm=perm)


def stack_layers(ctx, kind, x, ws, bs, lens, initial, hidden, directions, in_size, next_input,
                 state_outputs=None):
    """One ONNX LSTM / GRU / RNN node per layer, stacked as Chainer's
    ``n_step_*`` stacks its layers.

    ``x``: the first layer's padded time-major input (T, B, in_size);
    ``ws``/``bs``: per cell (layer-major, then direction) the names of
    Chainer's per-gate weights and biases; ``lens``: sequence_lens ('' if
    every sequence is T long); ``initial``: per state (h, then c), each
    layer's initial (D, B, H) state name ('' for zeros); ``next_input(y)``:
    a layer's input from the Y (T, D, B, H) of the layer below.
    ``state_outputs``: the names of the final states (L*D, B, H), or None
    for fresh names.  Returns (the last layer's Y, the final states'
    names)."""
    op = _KINDS[kind][1]
    D, H = directions, hidden
    n_layers = len(ws) // D
    w_order, r_order = _W_ORDER[kind]
    attrs = {'hidden_size': H, 'direction': 'bidirectional' if D == 2 else 'forward'}
    if kind == 'gru':
        attrs['linear_before_reset'] = 1
    elif kind == 'rnn_relu':
        attrs['activations'] = ['Relu'] * D
    if state_outputs is None:
        state_outputs = [ctx.fresh(op + '_state') for _ in initial]
    final: list = [[] for _ in initial]
    y = None
    for layer in range(n_layers):
        cells = range(layer * D, (layer + 1) * D)
        rows = len(w_order) * H
        width = in_size if layer == 0 else D * H
        W = _gate_matrix(ctx, [ws[c][k] for c in cells for k in w_order], [D, rows, width])
        R = _gate_matrix(ctx, [ws[c][k] for c in cells for k in r_order], [D, rows, H])
        Bias = _gate_matrix(ctx, [bs[c][k] for c in cells for k in w_order + r_order],
                            [D, 2 * rows])
        if layer > 0:
            x = next_input(y)
        inputs = [x, W, R, Bias, lens] + [s[layer] for s in initial]
        while inputs[-1] == '':  # optional inputs left out at the end
            inputs.pop()
        outs = list(state_outputs) if n_layers == 1 else [ctx.fresh(op + '_state')
                                                          for _ in initial]
        y = ctx.node(op, inputs, [ctx.fresh(op + '_Y')] + outs, **attrs)[0]
        for i, name in enumerate(outs):
            final[i].append(name)
    if n_layers > 1:
        for names, out in zip(final, state_outputs):
            ctx.node('Concat', names, [out], axis=0)
    return y, list(state_outputs)


def _gate_matrix(ctx, pieces, shape):
    """Concat the per-gate parameters (in ONNX order) and shape them as
    ONNX wants them (directions first)."""
    joined = pieces[0] if len(pieces) == 1 else ctx.node('Concat', pieces, axis=0)
    return ctx.reshape(joined, shape)


def _layer_output(ctx, y, shape, directions, out=None):
    """ONNX Y (T, D, B, H) -> (.., D*H) with the directions side by side as
    Chainer concatenates them."""
    if directions == 2:
        y = _transpose(ctx, y, [0, 2, 1, 3])
    return ctx.reshape(y, shape, out=out)

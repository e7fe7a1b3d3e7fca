"""Chainer functions and links called on a run-time-length sequence.

A ``values.Sequence`` is an ONNX sequence whose length (and whose
elements' lengths) only the run knows, so the tracing translator's
converters, which read sizes off the example arrays, cannot translate a
call on it.  These converters emit sequence ops whose sizes are computed
at run time:

- ``F.stack`` / ``F.concat`` (and ``np.stack`` / ``np.concatenate``):
  ConcatFromSequence;
- ``F.separate`` of an axis whose size varies: SplitToSequence;
- ``F.pad_sequence``: one Loop reads the elements' lengths, then a Gather
  from the packed elements (plus one padding row) builds the batch;
- ``F.transpose_sequence`` and the NStep links (``L.NStepLSTM`` ...): the
  padded batch, and the rows wanted picked with Compress and cut back into
  a sequence with SplitToSequence.  The links run ONNX LSTM/GRU/RNN with
  ``sequence_lens``, laid out by the tracing translator's rnn helpers.
"""
import inspect

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
from onnx import helper

from ..onnx_chainer import rnn
from .operators import cast
from .values import (
    Const,
    PyList,
    PyTuple,
    Sequence,
    Tensor,
    TranslationError,
    Value,
    constant_value,
    example_of,
    is_constant,
)


def element_examples(seq):
    """Example elements of ``seq``: those known, else one element of its
    element shape (unknown axes of size 1), so that a result still gets an
    example."""
    if seq.examples:
        return [numpy.asarray(e) for e in seq.examples]
    if seq.element_shape is None:
        return []
    shape = tuple(1 if d is None else d for d in seq.element_shape)
    return [numpy.zeros(shape, seq.dtype)]


def _rank(seq, site, label):
    if seq.element_shape is None:
        raise TranslationError(site, '%s: the rank of the elements of the sequence is not '
                               'known at export time' % label)
    return len(seq.element_shape)


# ---------------------------------------------------------------------------
# Joining and splitting
# ---------------------------------------------------------------------------


def stack_sequence(scope, seq, axis, site, label='F.stack'):
    """The elements of ``seq`` stacked along a new ``axis``."""
    examples = element_examples(seq)
    rank = _rank(seq, site, label)
    axis = axis % (rank + 1)
    example = numpy.stack(examples, axis) if examples else numpy.zeros((0,), seq.dtype)
    result = scope.emit('ConcatFromSequence', [seq.name], example, axis=axis, new_axis=1)
    shape = list(seq.element_shape)
    shape.insert(axis, None)
    result.shape = tuple(shape)
    return result


def concat_sequence(scope, seq, axis, site, label='F.concat'):
    """The elements of ``seq`` joined along ``axis``."""
    examples = element_examples(seq)
    rank = _rank(seq, site, label)
    axis = axis % rank
    example = numpy.concatenate(examples, axis) if examples else numpy.zeros((0,), seq.dtype)
    result = scope.emit('ConcatFromSequence', [seq.name], example, axis=axis)
    shape = list(seq.element_shape)
    shape[axis] = None
    result.shape = tuple(shape)
    return result


def split_at(scope, x, indices, axis):
    """``F.split_axis(x, indices, axis)`` with ``indices`` a 1-D integer
    Tensor: the pieces between consecutive indices, as a sequence."""
    axis %= x.ndim
    indices = cast(scope, indices, numpy.int64)
    shape = scope.node('Shape', [x.name])
    end = scope.node('Gather', [shape, scope.int64s([axis])], axis=0)
    stops = scope.node('Concat', [indices.name, end], axis=0)
    starts = scope.node('Concat', [scope.int64s([0]), indices.name], axis=0)
    sizes = scope.node('Sub', [stops, starts])
    name = scope.node('SplitToSequence', [x.name, sizes], axis=axis)
    examples = numpy.split(x.example, indices.example, axis)
    element_shape = x.shape[:axis] + (None,) + x.shape[axis + 1:]
    return Sequence(name, x.dtype, element_shape, examples)


def separate(scope, x, axis):
    """``F.separate(x, axis)`` where ``x.shape[axis]`` varies: the slices
    as a sequence."""
    axis %= x.ndim
    name = scope.node('SplitToSequence', [x.name], 1, axis=axis, keepdims=0)
    examples = [numpy.take(x.example, i, axis) for i in range(x.example.shape[axis])]
    return Sequence(name, x.dtype, x.shape[:axis] + x.shape[axis + 1:], examples)


# ---------------------------------------------------------------------------
# Padding
# ---------------------------------------------------------------------------


def lengths(scope, seq):
    """The first-axis sizes of ``seq``'s elements: a (n,) int64 Tensor from
    a Loop whose scan output is each element's length."""
    body = scope.child()
    i, cond = body.fresh('i'), body.fresh('cond')
    element = body.node('SequenceAt', [seq.name, i])
    size = body.node('Gather', [body.node('Shape', [element]), body.int64s([0])], axis=0)
    length = body.squeeze(size, [0])
    cond_out = body.node('Identity', [cond])
    graph = helper.make_graph(
        body.nodes, scope.fresh('lengths_body'),
        [_scalar_info(i, numpy.int64), _scalar_info(cond, numpy.bool_)],
        [_scalar_info(cond_out, numpy.bool_), _scalar_info(length, numpy.int64)])
    count = scope.node('SequenceLength', [seq.name])
    example = numpy.asarray([len(e) for e in element_examples(seq)], numpy.int64)
    result = scope.emit('Loop', [count, ''], example, body=graph)
    result.shape = (None,)
    return result


def _scalar_info(name, dtype):
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(
        numpy.dtype(dtype)), [])


def pad(scope, seq, length, padding, site, label='F.pad_sequence'):
    """``F.pad_sequence(seq, length, padding)`` as ``(padded, lengths,
    mask)``: the (n, T, ...) batch, the (n,) lengths and the (n, T) bool
    mask of the rows that hold data.  T is ``length`` when given, else the
    longest element's length."""
    rank = _rank(seq, site, label)
    if rank == 0:
        raise TranslationError(site, '%s: the elements must have at least one axis' % label)
    examples = element_examples(seq)
    sizes = lengths(scope, seq)
    packed = scope.node('ConcatFromSequence', [seq.name], 1, axis=0)
    # One row of padding after the packed rows: padding positions read it.
    value = scope.constant(numpy.asarray(padding, seq.dtype), hint='padding')
    pads = scope.int64s([0] * rank + [1] + [0] * (rank - 1))
    padded_rows = scope.node('Pad', [packed, pads, value], mode='constant')
    if length is None:
        steps = scope.reduce('ReduceMax', sizes.name, None, keepdims=False)
    else:
        steps = scope.constant(numpy.int64(length), hint='length')
    zero, one = scope.constant(numpy.int64(0), hint='zero'), scope.constant(numpy.int64(1),
                                                                           hint='one')
    t = scope.unsqueeze(scope.node('Range', [zero, steps, one]), [0])            # (1, T)
    column = scope.unsqueeze(sizes.name, [1])                                     # (n, 1)
    mask = scope.node('Less', [t, column])                                        # (n, T)
    offsets = scope.unsqueeze(scope.node('CumSum', [sizes.name, zero], exclusive=1), [1])
    total = scope.reduce('ReduceSum', sizes.name, None, keepdims=False)
    index = scope.node('Where', [mask, scope.node('Add', [offsets, t]), total])
    example = F.pad_sequence(examples, length, padding).array
    padded = scope.emit('Gather', [padded_rows, index], example, axis=0)
    padded.shape = (None, None if length is None else length) + tuple(seq.element_shape[1:])
    mask_example = numpy.arange(example.shape[1])[None, :] < sizes.example[:, None]
    return padded, sizes, Tensor(mask, mask_example, (None, padded.shape[1]))


def _rows_as_sequence(scope, table, mask, counts, examples):
    """The rows of ``table`` (a, b, ...) where ``mask`` (a, b) holds, cut
    into a sequence of ``counts`` (a,) rows each."""
    rest = scope.slice(scope.node('Shape', [table.name]), [2], [table.ndim], [0])
    flat_shape = scope.node('Concat', [scope.int64s([-1]), rest], axis=0)
    flat = scope.node('Reshape', [table.name, flat_shape])
    flat_mask = scope.reshape(mask.name, [-1])
    rows = scope.node('Compress', [flat, flat_mask], axis=0)
    name = scope.node('SplitToSequence', [rows, counts.name], axis=0)
    return Sequence(name, table.dtype, (None,) + tuple(table.shape[2:]), examples)


def transpose_sequence(scope, seq, site):
    """``F.transpose_sequence`` of a sequence whose elements are sorted by
    non-increasing length: element t of the result stacks row t of every
    element longer than t."""
    label = 'F.transpose_sequence'
    padded, _, mask = pad(scope, seq, None, 0, site, label)
    perm = list(range(padded.ndim))
    perm[0], perm[1] = 1, 0
    by_time = Tensor(scope.node('Transpose', [padded.name], perm=perm),
                     padded.example.transpose(perm),
                     tuple(padded.shape[p] for p in perm))
    mask_t = Tensor(scope.node('Transpose', [mask.name], perm=[1, 0]), mask.example.T)
    counts = scope.reduce('ReduceSum', cast(scope, mask_t, numpy.int64).name, [1],
                          keepdims=False)
    examples = [y.array for y in F.transpose_sequence(element_examples(seq))]
    return _rows_as_sequence(scope, by_time, mask_t, Tensor(counts, mask.example.sum(0)),
                             examples)


# ---------------------------------------------------------------------------
# NStep links
# ---------------------------------------------------------------------------


N_STEP_LINKS = (L.NStepLSTM, L.NStepBiLSTM, L.NStepGRU, L.NStepBiGRU, L.NStepRNNTanh,
                L.NStepRNNReLU, L.NStepBiRNNTanh, L.NStepBiRNNReLU)


def initial_states(link, arguments):
    """hx (and cx for an LSTM) among an NStep link's bound arguments."""
    return [arguments[n] for n in (['hx', 'cx'] if _link_kind(link) == 'lstm' else ['hx'])]


def _link_kind(link):
    """rnn's kind of an NStep link ('lstm', 'gru', 'rnn_tanh', 'rnn_relu')."""
    if isinstance(link, (L.NStepLSTM, L.NStepBiLSTM)):
        return 'lstm'
    if isinstance(link, (L.NStepGRU, L.NStepBiGRU)):
        return 'gru'
    if isinstance(link, (L.NStepRNNReLU, L.NStepBiRNNReLU)):
        return 'rnn_relu'
    return 'rnn_tanh'


def n_step_link(scope, link, states, xs, site):
    """An NStep link called on a sequence ``xs`` of (T_i, in_size) arrays.
    ``states``: hx (and cx for an LSTM), each a Tensor or Const(None)
    (zeros).  Returns (hy, [cy,] ys) like the link: ys a Sequence of
    (T_i, D*H)."""
    label = 'L.%s' % type(link).__name__
    outputs = _call_link_on_examples(link, states, xs, site, label)
    return _stacked_rnn(scope, _link_kind(link), link.direction, link.dropout, states, link.ws,
                        link.bs, xs, False, outputs, site, label)


#: F.n_step_* -> (rnn's kind, without the activation of an RNN; directions)
N_STEP_FUNCTIONS = {F.n_step_lstm: ('lstm', 1), F.n_step_bilstm: ('lstm', 2),
                    F.n_step_gru: ('gru', 1), F.n_step_bigru: ('gru', 2),
                    F.n_step_rnn: ('rnn', 1), F.n_step_birnn: ('rnn', 2)}


def n_step_function(scope, fn, label, args, kwargs, arguments, site):
    """``F.n_step_*(n_layers, dropout_ratio, hx, [cx,] ws, bs, xs)`` on a
    time-major sequence ``xs``: the links' layers, with the weights and
    states given."""
    kind, D = N_STEP_FUNCTIONS[fn]
    n_layers, dropout_ratio = _static(arguments, ['n_layers', 'dropout_ratio'], site, label)
    if kind == 'rnn':
        activation, = _static(arguments, ['activation'], site, label)
        if activation not in ('tanh', 'relu'):
            raise TranslationError(site, "%s: activation %r is not 'tanh' or 'relu'"
                                   % (label, activation))
        kind = 'rnn_' + activation
    ws, bs = (_cells(arguments[n], site, label, n) for n in ('ws', 'bs'))
    if len(ws) != n_layers * D or len(bs) != n_layers * D:
        raise TranslationError(site, '%s: ws and bs need %d cells each (n_layers * directions)'
                               % (label, n_layers * D))
    states = [arguments[n] for n in (['hx', 'cx'] if kind == 'lstm' else ['hx'])]
    outputs = _call_on_examples(fn, args, kwargs, site, label)
    return _stacked_rnn(scope, kind, D, dropout_ratio, states, ws, bs,
                        _sequence_argument(arguments, 'xs', site, label), True, outputs, site,
                        label)


def _cells(value, site, label, name):
    """Per-cell lists of weights from ``ws``/``bs``: a constant list of lists
    (a link's ``ws``), or a list of lists written in the source."""
    if isinstance(value, Const) and isinstance(value.value, (list, tuple)):
        return [list(cell) for cell in value.value]
    if isinstance(value, (PyList, PyTuple)):
        return [list(c.value) if isinstance(c, Const) else list(c.items) for c in value.items]
    raise TranslationError(site, '%s: argument %r must be a list of lists of weights, not %s'
                           % (label, name, value.kind))


def _call_on_examples(fn, args, kwargs, site, label):
    """Chainer's own results of an ``n_step_*`` function on the examples:
    hy, [cy,] and the list ys."""
    def example(value):
        return element_examples(value) if isinstance(value, Sequence) else example_of(value)
    try:
        with chainer.using_config('train', False), chainer.no_backprop_mode():
            *hs, ys = fn(*[example(a) for a in args],
                         **{k: example(v) for k, v in kwargs.items()})
    except Exception as e:  # noqa: BLE001  (Chainer's own checks: any error)
        raise TranslationError(site, '%s: %s' % (label, e)) from None
    return [h.array for h in hs] + [[y.array for y in ys]]


def _stacked_rnn(scope, kind, directions, dropout_ratio, states, ws, bs, xs, time_major,
                 outputs, site, label):
    """The ONNX layers of an ``n_step_*`` call on the sequence ``xs``:
    batch-major (the links: xs[i] is sequence i, (T_i, I)) or time-major
    (the functions: xs[t] is step t of the sequences still running,
    (B_t, I), B_t non-increasing).  ``ws``/``bs``: per cell, the weights
    and biases (parameters, arrays or Tensors); ``outputs``: Chainer's own
    results on the examples, hy, [cy,] ys.  Returns (hy, [cy,] ys), ys a
    Sequence laid out as xs.

    Chainer drops out the input of every layer but the first in training:
    that is an inference-mode Dropout here, as ``F.dropout``'s is in a ch2o
    export, which compile_onnx makes random when it compiles for training."""
    D, H = directions, outputs[0].shape[2]
    n_layers = len(ws) // D
    padded, sizes, mask = pad(scope, xs, None, 0, site, label)
    int32 = helper.np_dtype_to_tensor_dtype(numpy.dtype(numpy.int32))
    if time_major:  # padded is (T, B, I); sequence b runs while B_t > b
        x = padded.name
        lens = scope.reduce('ReduceSum', scope.node('Cast', [mask.name], to=int32), [0],
                            keepdims=False)
    else:  # padded is (n, T, I)
        x = scope.node('Transpose', [padded.name], perm=[1, 0, 2])
        lens = scope.node('Cast', [sizes.name], to=int32)
    initial = [_per_layer(scope, s, D, n_layers, site, label) for s in states]
    w_names = [[_weight(scope, w) for w in cell] for cell in ws]
    b_names = [[_weight(scope, b) for b in cell] for cell in bs]
    in_size = _weight_array(ws[0][0]).shape[1]

    def next_input(y):
        x = _time_major(scope, y, D, H)
        return scope.dropout(x, dropout_ratio, training=False) if dropout_ratio else x
    y, final = rnn.stack_layers(scope, kind, x, w_names, b_names, lens, initial, H, D, in_size,
                                next_input)
    results = []
    for name, example in zip(final, outputs[:-1]):
        results.append(Tensor(name, example, (n_layers * D, None, H)))
    table = _time_major(scope, y, D, H)                                         # (T, n, D*H)
    if not time_major:
        table = scope.node('Transpose', [table], perm=[1, 0, 2])
    table = Tensor(table, F.pad_sequence(outputs[-1]).array, (None, None, D * H))
    results.append(_rows_as_sequence(scope, table, mask, sizes, outputs[-1]))
    return PyTuple(tuple(results))


def n_step_link_on_list(scope, link, states, xs, site):
    """An NStep link called on a list of tensors whose lengths vary at run
    time: as on a sequence of them, with ys cut back into a list."""
    items = list(xs.items)
    shapes = [t.shape for t in items]
    element_shape = tuple(d if all(s[a] == d for s in shapes) else None
                          for a, d in enumerate(shapes[0]))
    name = scope.node('SequenceConstruct', [t.name for t in items])
    seq = Sequence(name, items[0].dtype, element_shape, [t.example for t in items])
    *hs, ys = n_step_link(scope, link, states, seq, site).items
    parts = []
    for i, example in enumerate(ys.examples):
        at = scope.node('SequenceAt', [ys.name, scope.constant(numpy.int64(i), hint='index')])
        parts.append(Tensor(at, example, ys.element_shape))
    return PyTuple(tuple(hs) + (PyList(parts),))


def _time_major(scope, y, directions, hidden):
    """ONNX's Y (T, D, n, H) as (T, n, D*H), directions side by side as
    Chainer joins them (with rnn's helper, whose static-size Reshape a
    0, meaning "this axis's size", makes size-independent)."""
    if directions == 1:
        return scope.squeeze(y, [1])
    return rnn._layer_output(scope, y, [0, 0, directions * hidden], directions)


def _weight_array(weight):
    """The (example) array of a weight: a Tensor, a Const, a parameter or
    an array."""
    if isinstance(weight, Tensor):
        return weight.example
    if isinstance(weight, Const):
        weight = weight.value
    return weight.array if isinstance(weight, chainer.Variable) else numpy.asarray(weight)


def _weight(scope, weight):
    """The name of a weight: a Tensor's own; a parameter's initializer, or
    a constant when the parameter (or array) is not part of the model."""
    if isinstance(weight, Tensor):
        return weight.name
    array = _weight_array(weight)
    tensor = scope.param(array)
    return (tensor or scope.const_tensor(array)).name


def _per_layer(scope, state, directions, n_layers, site, label):
    """The initial-state input of each layer: '' (zeros) for None, else the
    layer's (D, n, H) slice of the (L*D, n, H) tensor."""
    if isinstance(state, Const) and state.value is None:
        return [''] * n_layers
    if not isinstance(state, Tensor):
        raise TranslationError(site, '%s: an initial state must be a tensor or None, not %s'
                               % (label, state.kind))
    if n_layers == 1:
        return [state.name]
    return scope.split(state.name, [directions] * n_layers, 0,
                       [scope.fresh('initial_state') for _ in range(n_layers)])


def _call_link_on_examples(link, states, xs, site, label):
    """The link's own results on the examples: hy, [cy,] and the list ys."""
    args = [None if isinstance(s, Const) else s.example for s in states]
    try:
        with chainer.using_config('train', False), chainer.no_backprop_mode():
            *hs, ys = link(*args, element_examples(xs))
    except Exception as e:  # noqa: BLE001  (Chainer's own checks: any error)
        raise TranslationError(site, '%s: %s' % (label, e)) from None
    return [h.array for h in hs] + [[y.array for y in ys]]


# ---------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------


def bind_arguments(fn, args, kwargs, site, label):
    """The arguments of ``fn`` by parameter name, defaults included."""
    target = fn.forward if isinstance(fn, chainer.Link) else fn
    try:
        bound = inspect.signature(target).bind(*args, **kwargs)
    except TypeError as e:
        raise TranslationError(site, '%s: %s' % (label, e)) from None
    bound.apply_defaults()
    return {k: v if isinstance(v, Value) else Const(v) for k, v in bound.arguments.items()}


def _static(arguments, names, site, label):
    values = []
    for name in names:
        value = arguments[name]
        if not is_constant(value):
            raise TranslationError(site, '%s: argument %r must be known at export time, not %s'
                                   % (label, name, value.kind))
        values.append(constant_value(value))
    return values


def call_on_sequence(scope, fn, label, args, kwargs, site):
    """``fn(*args, **kwargs)`` where an argument is a Sequence."""
    arguments = bind_arguments(fn, args, kwargs, site, label)
    if fn is F.stack or fn is F.concat:
        axis, = _static(arguments, ['axis'], site, label)
        join = stack_sequence if fn is F.stack else concat_sequence
        return join(scope, _sequence_argument(arguments, 'xs', site, label), axis, site, label)
    if fn is F.vstack or fn is F.hstack:
        xs = _sequence_argument(arguments, 'xs', site, label)
        if _rank(xs, site, label) == 1:  # 1-D elements: vstack stacks them as rows
            join = stack_sequence if fn is F.vstack else concat_sequence
            return join(scope, xs, 0, site, label)
        return concat_sequence(scope, xs, 0 if fn is F.vstack else 1, site, label)
    if fn is F.split_axis and isinstance(arguments['x'], Tensor):
        # Indices given as a run-time list of ints.
        indices = stack_sequence(scope, _sequence_argument(arguments, 'indices_or_sections', site,
                                                           label), 0, site, label)
        axis, = _static(arguments, ['axis'], site, label)
        return split_at(scope, arguments['x'], indices, axis)
    if fn is F.pad_sequence:
        length, padding = _static(arguments, ['length', 'padding'], site, label)
        return pad(scope, _sequence_argument(arguments, 'xs', site, label), length, padding,
                   site)[0]
    if fn is F.transpose_sequence:
        return transpose_sequence(scope, _sequence_argument(arguments, 'xs', site, label), site)
    if isinstance(fn, N_STEP_LINKS):
        return n_step_link(scope, fn, initial_states(fn, arguments),
                           _sequence_argument(arguments, 'xs', site, label), site)
    if any(fn is f for f in N_STEP_FUNCTIONS):
        return n_step_function(scope, fn, label, args, kwargs, arguments, site)
    which = [k for k, v in arguments.items() if isinstance(v, Sequence)]
    raise TranslationError(site, '%s cannot take a sequence (a list whose length is known only '
                           'at run time) as argument %r; supported on sequences: F.stack, '
                           'F.concat, F.vstack, F.hstack, F.split_axis (indices), F.pad_sequence, '
                           'F.transpose_sequence, the NStep links and F.n_step_*'
                           % (label, which[0] if which else '?'))


def _sequence_argument(arguments, name, site, label):
    value = arguments[name]
    if not isinstance(value, Sequence):
        raise TranslationError(site, '%s: argument %r must be the sequence, not %s'
                               % (label, name, value.kind))
    return value

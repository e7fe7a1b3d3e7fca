"""Converters of chainer.functions.rnn: the LSTM / S-LSTM cells, and whole
n_step_* calls folded into ONNX LSTM / GRU / RNN nodes.

The n_step_* links are checked twice: folded (inside
``rnn.n_step_as_single_calls()``: one NStepRNN FunctionNode per call, one
ONNX LSTM/GRU/RNN node per layer) and unrolled (Chainer's CPU loop of
primitive FunctionNodes: LinearFunction, LSTM, SplitAxis, Concat, Stack,
TransposeSequence, Permutate ... from the other families).
"""
import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import onnx
import onnxruntime
import pytest

import chainer_compiler
from chainer_compiler.translators.onnx_chainer import export_model, rnn
from tests.translators.onnx_chainer.helpers import FunctionModel, check_export, op_types


def _rand(*shape, seed=0):
    return numpy.random.RandomState(seed).uniform(-1, 1, shape).astype(numpy.float32)


# -- cells ---------------------------------------------------------------------

@pytest.mark.parametrize('c_shape,x_shape', [
    ((3, 4), (3, 16)),          # plain
    ((3, 4), (2, 16)),          # c has more rows than x: the rest passes through
    ((2, 3, 2), (2, 12, 2)),    # trailing dimensions
])
def test_lstm_cell(c_shape, x_shape):
    check_export(lambda c, x: F.lstm(c, x), (_rand(*c_shape), _rand(*x_shape, seed=1)))


def test_lstm_cell_gates_are_interleaved_per_unit():
    # x[:, 4*j + k] is gate k (a, i, f, o) of unit j, not x[:, k*H + j]:
    # only the interleaved reading matches with distinct gate values.
    c = _rand(2, 3)
    x = numpy.zeros((2, 12), numpy.float32)
    x[:, 0::4] = 2.0    # a
    x[:, 1::4] = 5.0    # i
    x[:, 2::4] = -5.0   # f
    x[:, 3::4] = 0.5    # o
    check_export(lambda c, x: F.lstm(c, x), (c, x))


def test_lstm_link():
    class Model(chainer.Chain):
        def __init__(self):
            super().__init__()
            with self.init_scope():
                self.lstm = L.LSTM(3, 4)

        def forward(self, x1, x2):
            self.lstm.reset_state()
            return self.lstm(x2) + self.lstm(x1)

    check_export(Model(), (_rand(2, 3), _rand(2, 3, seed=1)))


@pytest.mark.parametrize('shape', [(3, 4), (2, 3, 2)])
def test_slstm_cell(shape):
    c_shape = shape
    x_shape = (shape[0], 4 * shape[1]) + shape[2:]
    check_export(lambda c1, c2, x1, x2: F.slstm(c1, c2, x1, x2),
                 (_rand(*c_shape), _rand(*c_shape, seed=1), _rand(*x_shape, seed=2),
                  _rand(*x_shape, seed=3)))


# -- n_step_* links ----------------------------------------------------------------

LINKS = {
    'NStepLSTM': ('LSTM', 1), 'NStepBiLSTM': ('LSTM', 2),
    'NStepGRU': ('GRU', 1), 'NStepBiGRU': ('GRU', 2),
    'NStepRNNTanh': ('RNN', 1), 'NStepRNNReLU': ('RNN', 1),
    'NStepBiRNNTanh': ('RNN', 2), 'NStepBiRNNReLU': ('RNN', 2),
}

#: The plain RNNs but one, whose export is the LSTM's and GRU's path with
#: another activation or direction: make test runs them, make test-fast not.
SLOW_LINKS = ('NStepRNNReLU', 'NStepBiRNNTanh', 'NStepBiRNNReLU')


def _links():
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_LINKS else n
            for n in sorted(LINKS)]


LENGTHS = {
    'sorted': (4, 3, 3, 1),
    'unsorted': (2, 4, 1, 3),
    'equal': (3, 3, 3),
    'one_step': (1, 1),
}


class Sequences(chainer.Chain):
    """An L.NStep* link on a list of variable-length sequences, returning
    hy, [cy,] ys[0], ys[1], ... as one flat tuple."""

    def __init__(self, name, n_layers=2, in_size=3, out_size=4, dropout=0.0,
                 with_state=False):
        super().__init__()
        self.with_state = with_state
        self.n_layers, self.out_size = n_layers, out_size
        with self.init_scope():
            self.rnn = getattr(L, name)(n_layers, in_size, out_size, dropout)
        self.is_lstm = 'LSTM' in name
        self.directions = 2 if 'Bi' in name else 1

    def forward(self, *args):
        if self.with_state:
            n = 2 if self.is_lstm else 1
            states, xs = list(args[:n]), list(args[n:])
        else:
            states, xs = [None] * (2 if self.is_lstm else 1), list(args)
        *finals, ys = self.rnn(*states, xs)
        return tuple(finals) + tuple(ys)

    def inputs(self, lengths, in_size=3, batch_states=None):
        xs = [_rand(n, in_size, seed=i) for i, n in enumerate(lengths)]
        if not self.with_state:
            return tuple(xs)
        shape = (self.n_layers * self.directions, len(lengths), self.out_size)
        states = [_rand(*shape, seed=10 + i) for i in range(2 if self.is_lstm else 1)]
        return tuple(states) + tuple(xs)


@pytest.mark.parametrize('lengths', sorted(LENGTHS))
@pytest.mark.parametrize('name', _links())
def test_n_step_link_folded(name, lengths):
    model = Sequences(name)
    with rnn.n_step_as_single_calls():
        models = check_export(model, model.inputs(LENGTHS[lengths]))
    op, directions = LINKS[name]
    types = op_types(models[0])
    assert types.count(op) == 2  # one per layer
    node = [n for n in models[0].graph.node if n.op_type == op][0]
    attrs = {a.name: a for a in node.attribute}
    assert attrs['direction'].s == (b'bidirectional' if directions == 2 else b'forward')
    if op == 'GRU':
        assert attrs['linear_before_reset'].i == 1
    if 'ReLU' in name:
        assert [s.decode() for s in attrs['activations'].strings] == ['Relu'] * directions
    has_lens = len(set(LENGTHS[lengths])) > 1
    # Trailing optional inputs are left out (hx=None: zero initial states).
    assert (len(node.input) > 4 and node.input[4] != '') == has_lens


@pytest.mark.parametrize('name', _links())
def test_n_step_link_folded_with_initial_state(name):
    model = Sequences(name, with_state=True)
    with rnn.n_step_as_single_calls():
        check_export(model, model.inputs(LENGTHS['unsorted']))


@pytest.mark.parametrize('name', _links())
def test_n_step_link_unrolled(name):
    model = Sequences(name, with_state=True)
    with rnn.n_step_unrolled():
        models = check_export(model, model.inputs(LENGTHS['unsorted']), opsets=(17,))
    assert 'NStepRNN' not in op_types(models[0])
    assert LINKS[name][0] not in op_types(models[0])


def test_n_step_parameters_keep_link_paths():
    # The gate reordering is done by ONNX nodes on the link's parameters,
    # which stay initializers named by link path.
    model = Sequences('NStepBiLSTM', n_layers=1)
    with rnn.n_step_as_single_calls():
        proto = export_model(model, model.inputs((3, 2)))
    names = {i.name for i in proto.graph.initializer}
    for cell in range(2):
        for k in range(8):
            assert '/rnn/%d/w%d' % (cell, k) in names
            assert '/rnn/%d/b%d' % (cell, k) in names


def test_n_step_float64_falls_back_to_unrolled():
    # The fold covers float32 only; other dtypes export the unrolled loop.
    model = Sequences('NStepGRU', n_layers=1)
    for param in model.params():
        param.array = param.array.astype(numpy.float64)
    xs = tuple(x.astype(numpy.float64) for x in model.inputs((3, 2)))
    with rnn.n_step_as_single_calls():
        models = check_export(model, xs, opsets=(17,))
    assert 'GRU' not in op_types(models[0])


@pytest.mark.gpu
@pytest.mark.skipif(not chainer.backends.cuda.available, reason='needs CuPy and a CUDA device')
def test_n_step_link_folded_on_gpu_exports_cudnn_call():
    # On GPU Chainer runs cuDNN (old-style Functions no converter handles);
    # folded, the call exports as on CPU.
    from chainer.backends import cuda
    model = Sequences('NStepBiLSTM')
    xs = model.inputs(LENGTHS['unsorted'])
    with chainer.using_config('train', False):
        expected = [o.array for o in model(*xs)]
    model.to_gpu()
    with rnn.n_step_as_single_calls():
        proto = export_model(model, [cuda.to_gpu(x) for x in xs])
    session = onnxruntime.InferenceSession(proto.SerializeToString(),
                                           providers=['CPUExecutionProvider'])
    actual = session.run(None, {i.name: x for i, x in zip(proto.graph.input, xs)})
    for e, a in zip(expected, actual):
        numpy.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4)  # cuDNN vs CPU


def test_n_step_dropout_is_identity_in_test_mode():
    model = Sequences('NStepLSTM', n_layers=3, dropout=0.5)
    with rnn.n_step_as_single_calls():
        check_export(model, model.inputs(LENGTHS['sorted']))


def test_n_step_training_mode():
    # dropout 0: deterministic, compared; dropout > 0: one training-mode
    # Dropout between consecutive layers (random, so only its presence).
    model = Sequences('NStepBiLSTM')
    with rnn.n_step_as_single_calls():
        check_export(model, model.inputs((3, 1, 2)), train=True, opsets=(12, 17))
    model = Sequences('NStepLSTM', n_layers=3, dropout=0.3)
    with rnn.n_step_as_single_calls():
        proto = export_model(model, model.inputs((3, 1, 2)), train=True)
    assert op_types(proto).count('Dropout') == 2


def test_n_step_as_single_calls_is_reentrant_and_restores():
    from chainer.functions.rnn import n_step_lstm
    original = n_step_lstm.n_step_lstm_base
    model = Sequences('NStepGRU', n_layers=1)
    with rnn.n_step_as_single_calls():
        with rnn.n_step_as_single_calls():
            proto = export_model(model, model.inputs((2, 1)))
        assert n_step_lstm.n_step_lstm_base is not original
    assert n_step_lstm.n_step_lstm_base is original
    assert op_types(proto).count('GRU') == 1


# -- one sequence per row of one tensor: a file for every batch size ------------------

class Rows(chainer.Chain):
    """An L.NStep* link reading one sequence per row of a (batch, time,
    features) tensor through F.separate (benchmarks/models.py's classifier
    does so); returns hy[, cy], and with ``read_ys`` the per-row ys too."""

    def __init__(self, name, read_ys=False):
        super().__init__()
        with self.init_scope():
            self.rnn = getattr(L, name)(2, 3, 4, 0.0)
        self.n_states = 2 if 'LSTM' in name else 1
        self.read_ys = read_ys

    def forward(self, x, *states):
        # Separating F.tanh(x): its Variable is gone when the link runs.
        rows = list(F.separate(F.tanh(x), axis=0))
        *finals, ys = self.rnn(*(states or [None] * self.n_states), rows)
        return tuple(finals) + (tuple(ys) if self.read_ys else ())


def _export_for_every_batch(tmp_path, model, inputs, dynamic_axes):
    """Export ``model`` on ``inputs(8)`` with ``dynamic_axes``; assert the
    file checks, has no node per row (no Gather) and gives Chainer's
    outputs in onnxruntime at batches 1, 5 and 13."""
    path = chainer_compiler.export(model, inputs(8), str(tmp_path / 'm.onnx'),
                                   dynamic_axes=dynamic_axes)
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    assert 'Gather' not in op_types(proto)
    session = onnxruntime.InferenceSession(path, providers=['CPUExecutionProvider'])
    for batch in (1, 5, 13):
        feeds = inputs(batch)
        with chainer.using_config('train', False):
            expected = model(*feeds)
        actual = session.run(None, {v.name: f for v, f in zip(proto.graph.input, feeds)})
        for e, a in zip(expected, actual):
            numpy.testing.assert_allclose(a, e.array, rtol=1e-5, atol=1e-5,
                                          err_msg='batch %d' % batch)


@pytest.mark.parametrize('with_state', [False, True], ids=['zero_state', 'with_state'])
@pytest.mark.parametrize('name', _links())
def test_n_step_link_over_the_rows_of_a_tensor_exports_for_every_batch(tmp_path, name,
                                                                       with_state):
    """The recurrent nodes read the tensor itself (transposed to time
    major); a zero initial state is left out and a given one passes through
    (its permutation is the identity): no constant holds the batch size."""
    model = Rows(name)
    n_states = model.n_states if with_state else 0
    shape = (2 * LINKS[name][1], 4)

    def inputs(batch):
        return [_rand(batch, 5, 3, seed=batch)] + [
            _rand(shape[0], batch, shape[1], seed=batch + i + 1) for i in range(n_states)]
    axes = {'input_0': {0: 'batch'}}
    axes.update({'input_%d' % (i + 1): {1: 'batch'} for i in range(n_states)})
    _export_for_every_batch(tmp_path, model, inputs, axes)


@pytest.mark.parametrize('name', ['NStepBiLSTM', 'NStepGRU'])
def test_n_step_link_over_the_rows_of_a_tensor_gives_its_ys_per_row(name):
    """ys stays a list of one sequence per row: exported for the traced batch."""
    with rnn.n_step_as_single_calls():
        check_export(Rows(name, read_ys=True), [_rand(3, 5, 3)])


class RowsReadWhole(Rows):
    """Rows whose per-row ``ys`` are read only through ``read`` (one call
    on all of them, in order)."""

    def __init__(self, name, read):
        super().__init__(name)
        self.read = read

    def forward(self, x):
        *finals, ys = self.rnn(*[None] * self.n_states, list(F.separate(x, axis=0)))
        return tuple(finals) + (self.read(ys),)


#: how ys is read whole -> the read's axis of batch * time (a concat's), if any
READS = {
    'stack': (F.stack, None),
    'stack_axis1': (lambda ys: F.stack(ys, axis=1), None),
    'concat': (lambda ys: F.concat(ys, axis=0), 0),
    'concat_axis1': (lambda ys: F.concat(ys, axis=1), 1),
    'pad_sequence': (F.pad_sequence, None),
}


@pytest.mark.parametrize('read', sorted(READS))
def test_n_step_link_ys_read_whole_exports_for_every_batch(tmp_path, read):
    """A stack/concat/pad_sequence of all of ys, in order, reads the
    recurrence's steps whole: no node per row, any batch."""
    fn, merged = READS[read]
    # Both directions' outputs side by side, and one direction.
    model = RowsReadWhole('NStepBiLSTM' if 'axis1' in read else 'NStepGRU', fn)
    axes = {'input_0': {0: 'batch'}}
    if merged is not None:
        axes['output_%d' % model.n_states] = {merged: 'batch_time'}
    _export_for_every_batch(tmp_path, model, lambda batch: [_rand(batch, 5, 3, seed=batch)],
                            axes)


def test_n_step_link_ys_read_by_row_is_refused_symbolic(tmp_path):
    """One row of ys read on its own keeps a node per row: dynamic_axes is
    refused naming a node (the batch it was traced at still exports)."""
    model = RowsReadWhole('NStepGRU', lambda ys: ys[0] + F.stack(ys)[0])
    with pytest.raises(ValueError, match=r"dynamic_axes: node \d+ '\w+' .* depend on them"):
        chainer_compiler.export(model, [_rand(8, 5, 3)], str(tmp_path / 'm.onnx'),
                                dynamic_axes={'input_0': {0: 'batch'}})
    with rnn.n_step_as_single_calls():
        check_export(model, [_rand(8, 5, 3)])


def test_n_step_link_over_rows_out_of_order_keeps_a_node_per_row():
    """Rows not in x's order (here reversed) are no pure sort of equal
    lengths: the recurrence reads them row by row (a Gather), as Chainer."""
    class Reversed(Rows):
        def forward(self, x):
            hy, _, _ = self.rnn(None, None, list(F.separate(x, axis=0))[::-1])
            return hy

    from chainer.links.rnn import n_step_rnn
    original = n_step_rnn.argsort_list_descent
    with rnn.n_step_as_single_calls():
        models = check_export(Reversed('NStepLSTM'), [_rand(70, 5, 3)], opsets=(17,))
    assert 'Gather' in op_types(models[0])
    assert n_step_rnn.argsort_list_descent is original  # the link's own sort again


def test_n_step_function_over_the_rows_of_a_time_major_tensor_exports_for_every_batch(
        tmp_path):
    """F.n_step_* on F.separate(x, axis=0) of a (time, batch, features) x:
    the recurrent node reads x; ys, one tensor per step, stacked again."""
    ws, bs = _weights('gru', 2, 2, 3, 4)

    def run(x, hx):
        hy, ys = F.n_step_bigru(2, 0.0, hx, ws, bs, list(F.separate(x, axis=0)))
        return hy, F.stack(ys)

    def inputs(batch):
        return [_rand(5, batch, 3, seed=batch), _rand(4, batch, 4, seed=batch + 1)]
    _export_for_every_batch(tmp_path, FunctionModel(run), inputs,
                            {'input_0': {1: 'batch'}, 'input_1': {1: 'batch'}})


# -- F.n_step_* called directly (time-major batches) ---------------------------------

def _weights(kind, n_layers, directions, in_size, hidden, seed=0):
    n = {'lstm': 8, 'gru': 6, 'rnn': 2}[kind]
    rng = numpy.random.RandomState(seed)
    ws, bs = [], []
    for cell in range(n_layers * directions):
        width = in_size if cell < directions else directions * hidden
        ws.append([rng.uniform(-1, 1, (hidden, width if k < n // 2 else hidden))
                   .astype(numpy.float32) for k in range(n)])
        bs.append([rng.uniform(-1, 1, hidden).astype(numpy.float32) for _ in range(n)])
    return ws, bs


@pytest.mark.parametrize('function,activation', [
    ('n_step_lstm', None), ('n_step_bilstm', None), ('n_step_gru', None),
    ('n_step_bigru', None), ('n_step_rnn', 'tanh'), ('n_step_rnn', 'relu'),
    ('n_step_birnn', 'tanh'), ('n_step_birnn', 'relu')])
def test_n_step_function(function, activation):
    kind = 'lstm' if 'lstm' in function else 'gru' if 'gru' in function else 'rnn'
    directions = 2 if '_bi' in function else 1
    n_layers, in_size, hidden = 2, 3, 4
    ws, bs = _weights(kind, n_layers, directions, in_size, hidden)
    fn = getattr(F, function)
    extra = {'activation': activation} if activation else {}

    def run(hx, cx, *xs):
        if kind == 'lstm':
            hy, cy, ys = fn(n_layers, 0.0, hx, cx, ws, bs, list(xs))
            return (hy, cy) + tuple(ys)
        hy, ys = fn(n_layers, 0.0, hx, ws, bs, list(xs), **extra)
        return (hy,) + tuple(ys)

    state = (n_layers * directions, 3, hidden)
    xs = tuple(_rand(b, in_size, seed=b) for b in (3, 3, 2, 1))
    with rnn.n_step_as_single_calls():
        check_export(run, (_rand(*state), _rand(*state, seed=1)) + xs)


# (Chainer's own type check of TreeLSTM rejects most trailing-dimension shapes.)
@pytest.mark.parametrize('n_ary,shape', [(1, (2, 3)), (2, (2, 3)), (3, (4, 2))])
def test_tree_lstm_cell(n_ary, shape):
    # TreeLSTM is an old-style chainer.Function: until the tracer looks
    # through FunctionAdapter, it is reachable as an external converter.
    x_shape = (shape[0], (3 + n_ary) * shape[1]) + shape[2:]
    cs = tuple(_rand(*shape, seed=i) for i in range(n_ary))
    check_export(lambda *args: F.tree_lstm(*args), cs + (_rand(*x_shape, seed=9),),
                 external_converters={'FunctionAdapter': rnn.convert_tree_lstm})

"""Shapes that change at run time (issue 33): export with symbolic
dimensions, compile_onnx and compile_training_step at any batch size."""
import copy

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import onnx
import pytest

import chainer_compiler
from benchmarks import models as bench_models
from tests.models import MLP, LeNet5


def _initialized(model, x):
    numpy.random.seed(0)
    with chainer.using_config('train', False):
        model(x)
    return model


def _images(batch, seed=0):
    return numpy.random.RandomState(seed).uniform(-1, 1, (batch, 1, 28, 28)).astype('f')


def _dims(value):
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


# -- export ------------------------------------------------------------------
@pytest.mark.parametrize('dynamic_axes', ['batch', {'input_0': {0: 'batch'},
                                                    'output_0': {0: 'batch'}}])
def test_export_with_a_dynamic_batch_runs_in_onnxruntime_at_other_batches(tmp_path,
                                                                          dynamic_axes):
    ort = pytest.importorskip('onnxruntime')
    # LeNet's Linear reshapes (8, 16, 5, 5) to (8, 400): the file must say (-1, 400).
    model = _initialized(LeNet5(batch_norm=True), _images(8))
    path = chainer_compiler.export(model, [_images(8)], str(tmp_path / 'm.onnx'),
                                   dynamic_axes=dynamic_axes)
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    assert _dims(proto.graph.input[0]) == ['batch', 1, 28, 28]
    assert _dims(proto.graph.output[0]) == ['batch', 10]
    assert all(d.dim_value for v in proto.graph.input[1:] for d in v.type.tensor_type.shape.dim)
    session = ort.InferenceSession(path)
    for batch in (1, 5, 13):
        x = _images(batch, seed=batch)
        with chainer.using_config('train', False):
            expected = model(x).array
        numpy.testing.assert_allclose(session.run(None, {'input_0': x})[0], expected,
                                      rtol=1e-4, atol=1e-5)


def test_torch_style_axis_lists_name_the_axes_and_outputs_follow_the_inputs(tmp_path):
    model = _initialized(MLP(6, 3), numpy.zeros((4, 5), 'f'))
    path = chainer_compiler.export(model, [numpy.zeros((4, 5), 'f')], str(tmp_path / 'm.onnx'),
                                   dynamic_axes={'input_0': [0]})
    proto = onnx.load(path)
    assert _dims(proto.graph.input[0]) == ['input_0_dynamic_axes_1', 5]
    # Not named, but it changes with input_0's axis 0: it takes its symbol.
    assert _dims(proto.graph.output[0]) == ['input_0_dynamic_axes_1', 3]


class _DividesByBatch(chainer.Chain):
    def forward(self, x):
        return F.sum(x, axis=0) / x.shape[0]


@pytest.mark.parametrize('model, dynamic_axes, message', [
    (_DividesByBatch(), 'batch', 'constant computed from the symbolic sizes'),
    (MLP(6, 3), {'input_9': {0: 'n'}}, "names 'input_9', which is no tensor input"),
    (MLP(6, 3), {'input_0': {2: 'n'}}, 'axis 2 is not an axis of a rank-2 value'),
    (MLP(6, 3), {'input_0': {0: 'n m'}}, 'is not a dimension name'),
    (MLP(6, 3), ['batch'], "dynamic_axes is a dict"),
])
def test_what_cannot_be_symbolic_is_refused_naming_it(tmp_path, model, dynamic_axes, message):
    x = numpy.ones((4, 5), 'f')
    _initialized(model, x)
    path = tmp_path / 'm.onnx'
    with pytest.raises(ValueError, match=message):
        chainer_compiler.export(model, [x], str(path), dynamic_axes=dynamic_axes)
    assert not path.exists()


def test_a_refused_training_mode_export_updates_the_running_averages_once(tmp_path):
    """train=True: BatchNormalization's unbiased variance factor m/(m-1) is
    computed from the batch, so it is refused; the second trace leaves the
    running averages as one export does."""
    x = _images(4)
    once = _initialized(LeNet5(batch_norm=True), x)
    twice = copy.deepcopy(once)
    chainer_compiler.export(once, [x], str(tmp_path / 'a.onnx'), train=True)
    with pytest.raises(ValueError, match=r"node 'Mul_\d+' \(Mul\) input 1 is a constant "
                                         'computed from the symbolic sizes'):
        chainer_compiler.export(twice, [x], str(tmp_path / 'b.onnx'), train=True,
                                dynamic_axes='batch')
    numpy.testing.assert_array_equal(twice.bn1.avg_mean, once.bn1.avg_mean)
    numpy.testing.assert_array_equal(twice.bn2.avg_var, once.bn2.avg_var)


class TransformerBlock(chainer.Chain):
    """A Transformer encoder block over (batch, time, width): one attention
    head (batched MatMul, Softmax), residual and LayerNormalization, a ReLU
    MLP, residual and LayerNormalization; the mean over time classifies."""

    def __init__(self, width=8, n_out=10):
        super().__init__()
        with self.init_scope():
            self.qkv = L.Linear(width, 3 * width)
            self.proj = L.Linear(width, width)
            self.norm1 = L.LayerNormalization(width)
            self.mlp1 = L.Linear(width, 2 * width)
            self.mlp2 = L.Linear(2 * width, width)
            self.norm2 = L.LayerNormalization(width)
            self.out = L.Linear(width, n_out)

    def forward(self, x):
        n, t, d = x.shape
        rows = F.reshape(x, (n * t, d))
        q, k, v = (F.reshape(part, (n, t, d))
                   for part in F.split_axis(self.qkv(rows), 3, axis=1))
        attention = F.softmax(F.matmul(q, k, transb=True) / numpy.sqrt(d), axis=2)
        mixed = F.reshape(F.matmul(attention, v), (n * t, d))
        h = self.norm1(rows + self.proj(mixed))
        h = self.norm2(h + self.mlp2(F.relu(self.mlp1(h))))
        return self.out(F.mean(F.reshape(h, (n, t, d)), axis=1))


# -- compile_onnx --------------------------------------------------------------
def _labels(batch, seed=0):
    return numpy.random.RandomState(seed).randint(0, 10, batch).astype(numpy.int32)


@pytest.mark.parametrize('backend', ['numpy', pytest.param(
    'native', marks=[pytest.mark.slow, pytest.mark.native_build])])
@pytest.mark.parametrize('make_model, shape', [
    (lambda: MLP(32, 10), (12,)),
    (lambda: LeNet5(batch_norm=True), (1, 28, 28)),
    (TransformerBlock, (6, 8)),
    # One sequence per row: the ONNX LSTM reads the (batch, time, features) input itself.
    (lambda: bench_models.LSTMClassifier(n_in=4, hidden=5), (3, 4)),
], ids=['mlp', 'lenet5', 'transformer', 'nstep_lstm'])
def test_compile_onnx_trains_and_infers_at_every_batch_size_as_chainer(tmp_path, make_model,
                                                                       shape, backend):
    """Exported once at batch 8, compiled once: batches 1, 5, 8 and 13 (a
    partial last batch needs no padding) give Chainer's outputs, gradients
    and running averages."""
    x8 = numpy.zeros((8,) + shape, 'f')
    plain = _initialized(make_model(), x8)
    path = chainer_compiler.export(plain, [x8], str(tmp_path / 'm.onnx'), dynamic_axes='batch')
    twin = copy.deepcopy(plain)
    compiled = chainer_compiler.compile_onnx(twin, path,
                                             runtime_kwargs={'backend': backend})
    for batch in (1, 5, 8, 13):
        x = numpy.random.RandomState(batch).uniform(-1, 1, (batch,) + shape).astype('f')
        t = _labels(batch, seed=batch)
        for model in (plain, compiled):
            model.cleargrads()
            F.softmax_cross_entropy(model(x), t).backward()
        for (name, p), (_, q) in zip(sorted(plain.namedparams()),
                                     sorted(compiled.namedparams())):
            numpy.testing.assert_allclose(q.grad, p.grad, rtol=1e-4, atol=1e-5,
                                          err_msg='%s at batch %d' % (name, batch))
        for (name, link), (_, other) in zip(plain.namedlinks(), twin.namedlinks()):
            for attr in ('avg_mean', 'avg_var'):
                if hasattr(link, attr):
                    numpy.testing.assert_allclose(getattr(other, attr), getattr(link, attr),
                                                  rtol=1e-5, atol=1e-6, err_msg=name + attr)
        with chainer.using_config('train', False):
            numpy.testing.assert_allclose(compiled(x).array, plain(x).array,
                                          rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_a_transformer_block_infers_natively_at_every_batch_size(tmp_path):
    """The symbolic file's inference program, compiled per batch size as
    compile_onnx does (exporting.with_sizes), runs in C as Chainer."""
    from chainer_compiler.exporting import with_sizes
    from chainer_compiler.pipeline import build_program
    from chainer_compiler.runtime.executor import Executor
    x8 = numpy.zeros((8, 6, 8), 'f')
    plain = _initialized(TransformerBlock(), x8)
    path = chainer_compiler.export(plain, [x8], str(tmp_path / 'm.onnx'), dynamic_axes='batch')
    for batch in (5, 13):
        x = numpy.random.RandomState(batch).uniform(-1, 1, (batch, 6, 8)).astype('f')
        program = build_program(with_sizes(onnx.load(path), {'batch': batch}))
        with chainer.using_config('train', False):
            expected = plain(x).array
        (y,) = Executor(program, backend='native').run([x]).values()
        numpy.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5,
                                      err_msg='batch %d' % batch)


def test_new_signatures_compile_once_and_the_cache_is_bounded(tmp_path, monkeypatch):
    from chainer_compiler import compiled_model
    monkeypatch.setattr(compiled_model, 'SIGNATURE_CACHE_SIZE', 2)
    plain = _initialized(MLP(8, 3), numpy.zeros((4, 5), 'f'))
    path = chainer_compiler.export(plain, [numpy.zeros((4, 5), 'f')], str(tmp_path / 'm.onnx'),
                                   dynamic_axes='batch')
    compiled = chainer_compiler.compile_onnx(plain, path, runtime_kwargs={'backend': 'numpy'})
    compiles = []
    real = compiled_model.Executor
    monkeypatch.setattr(compiled_model, 'Executor',
                        lambda program, **kw: compiles.append(program.inputs[0].shape)
                        or real(program, **kw))
    with chainer.using_config('train', False):
        for batch in (4, 3, 3, 4, 2, 4, 3):
            assert compiled(numpy.ones((batch, 5), 'f')).shape == (batch, 3)
    # Batch 4 was compiled by compile_onnx; 3 and 2 once each, 3 again after 2 evicted it.
    assert compiles == [(3, 5), (2, 5), (3, 5)]
    assert list(compiled._signatures) == [(('batch', 4),), (('batch', 3),)]


class _TwoInputs(chainer.Chain):
    def forward(self, x, y):
        return x + y


def test_inputs_naming_one_dimension_must_agree_and_the_error_names_it(tmp_path):
    from chainer_compiler.runtime.errors import InputValidationError
    x = numpy.ones((4, 3), 'f')
    path = chainer_compiler.export(_TwoInputs(), [x, x], str(tmp_path / 'm.onnx'),
                                   dynamic_axes='batch')
    compiled = chainer_compiler.compile_onnx(_TwoInputs(), path,
                                             runtime_kwargs={'backend': 'numpy'})
    with chainer.using_config('train', False):
        assert compiled(numpy.ones((6, 3), 'f'), numpy.ones((6, 3), 'f')).shape == (6, 3)
        with pytest.raises(InputValidationError, match="input_1' has batch=5 on axis 0, but "
                                                       "input 'input_0' has batch=6"):
            compiled(numpy.ones((6, 3), 'f'), numpy.ones((5, 3), 'f'))


def test_a_file_of_fixed_shapes_names_dynamic_axes_for_another_batch(tmp_path):
    from chainer_compiler.runtime.errors import InputValidationError
    plain = _initialized(MLP(8, 3), numpy.zeros((4, 5), 'f'))
    path = chainer_compiler.export(plain, [numpy.zeros((4, 5), 'f')], str(tmp_path / 'm.onnx'))
    compiled = chainer_compiler.compile_onnx(plain, path, runtime_kwargs={'backend': 'numpy'})
    with chainer.using_config('train', False), \
            pytest.raises(InputValidationError, match="dynamic_axes='batch'.*FixedBatchDataset"):
        compiled(numpy.ones((3, 5), 'f'))


# -- compile_training_step -----------------------------------------------------
@pytest.mark.parametrize('backend', ['numpy', pytest.param('native', marks=pytest.mark.slow)])
@pytest.mark.parametrize('make_model, shape, make_optimizer', [
    (lambda: MLP(32, 10), (12,), chainer.optimizers.Adam),
    # Adam is ill-conditioned on the biases before BatchNormalization, whose
    # gradients are rounding noise: MomentumSGD (also with a state).
    (lambda: LeNet5(batch_norm=True), (1, 28, 28),
     lambda: chainer.optimizers.MomentumSGD(lr=0.01)),
    # The key's bias has a zero gradient (softmax ignores a shift shared by
    # all keys): rounding noise that Adam would scale up.
    (TransformerBlock, (6, 8), lambda: chainer.optimizers.MomentumSGD(lr=0.01)),
    # One sequence per batch row, through F.separate.
    (lambda: bench_models.LSTMClassifier(n_in=4, hidden=5), (3, 4), chainer.optimizers.Adam),
], ids=['mlp', 'lenet5', 'transformer', 'nstep_lstm'])
def test_training_step_updates_as_chainer_at_every_batch_size(make_model, shape, make_optimizer,
                                                              backend):
    """Compiled on a batch of 8, the step takes 1, 5, 8 and 13 (and 5 again:
    the optimizer's state carries over between signatures, never made anew)."""
    x8 = numpy.zeros((8,) + shape, 'f')
    plain = L.Classifier(_initialized(make_model(), x8))
    twin = copy.deepcopy(plain)
    plain_opt, twin_opt = make_optimizer(), make_optimizer()
    plain_opt.setup(plain)
    twin_opt.setup(twin)
    step = chainer_compiler.compile_training_step(twin, twin_opt, (x8, _labels(8)),
                                                  runtime_kwargs={'backend': backend})
    for batch in (1, 5, 8, 13, 5):
        x = numpy.random.RandomState(batch).uniform(-1, 1, (batch,) + shape).astype('f')
        t = _labels(batch, seed=batch)
        plain_opt.update(plain, x, t)
        numpy.testing.assert_allclose(step(x, t), plain.loss.array, rtol=1e-5,
                                      err_msg='batch %d' % batch)
    for (name, p), (_, q) in zip(sorted(plain.namedparams()), sorted(twin.namedparams())):
        numpy.testing.assert_allclose(q.array, p.array, rtol=1e-4, atol=2e-5, err_msg=name)
        for slot, value in p.update_rule.state.items():
            numpy.testing.assert_allclose(q.update_rule.state[slot], value, rtol=1e-4,
                                          atol=1e-6, err_msg='%s %s' % (name, slot))
    for (name, link), (_, other) in zip(plain.namedlinks(), twin.namedlinks()):
        for attr in ('avg_mean', 'avg_var'):
            if hasattr(link, attr):
                numpy.testing.assert_allclose(getattr(other, attr), getattr(link, attr),
                                              rtol=1e-5, atol=1e-6, err_msg=name + attr)
    assert twin_opt.t == plain_opt.t


class _ClassifierGivenStates(bench_models.LSTMClassifier):
    """The classifier given its initial states (hx, cx) as inputs."""

    def forward(self, x, hx, cx):
        hy, _, _ = self.lstm(hx, cx, list(F.separate(x, axis=0)))
        return self.fc(hy[-1])


@pytest.mark.parametrize('given_states', [False, True], ids=['hx_none', 'hx_given'])
@pytest.mark.parametrize('traced', [8, 65, 128])
def test_the_nstep_lstm_classifier_exports_for_every_batch(tmp_path, traced, given_states):
    """NStepLSTM reads one sequence per row of x through F.separate: the
    ONNX LSTM reads x itself, with no node per row, so one file runs at
    every batch size.  Over 64 rows the link's unstable sort by length
    would reorder the equal lengths: the export keeps them in order."""
    ort = pytest.importorskip('onnxruntime')
    model = (_ClassifierGivenStates if given_states else bench_models.LSTMClassifier)(
        n_in=4, hidden=5)

    def inputs(batch):
        rng = numpy.random.RandomState(batch)
        x = rng.uniform(-1, 1, (batch, 3, 4)).astype('f')
        states = [rng.uniform(-1, 1, (2, batch, 5)).astype('f') for _ in range(2)]
        return [x] + (states if given_states else [])
    axes = {'input_0': {0: 'batch'}, 'output_0': {0: 'batch'}}
    if given_states:
        axes.update({'input_1': {1: 'batch'}, 'input_2': {1: 'batch'}})
    path = chainer_compiler.export(model, inputs(traced), str(tmp_path / 'm.onnx'),
                                   dynamic_axes=axes)
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    types = [n.op_type for n in proto.graph.node]
    assert types.count('LSTM') == 2 and 'Gather' not in types  # one per layer, none per row
    assert _dims(proto.graph.input[0]) == ['batch', 3, 4]
    assert _dims(proto.graph.output[0]) == ['batch', 10]
    session = ort.InferenceSession(path)
    compiled = chainer_compiler.compile_onnx(copy.deepcopy(model), path,
                                             runtime_kwargs={'backend': 'numpy'})
    for batch in (1, 5, 13):
        feeds = inputs(batch)
        with chainer.using_config('train', False):
            expected = model(*feeds).array
            numpy.testing.assert_allclose(compiled(*feeds).array, expected,
                                          rtol=1e-4, atol=1e-5)
        actual = session.run(None, {v.name: f for v, f in zip(proto.graph.input, feeds)})[0]
        numpy.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


class _RowsOfTwoLengths(chainer.Chain):
    """An NStepLSTM over rows of alternating lengths: a list the graph
    holds row by row."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.lstm = L.NStepLSTM(1, 4, 5, 0.0)

    def forward(self, x):
        rows = [row[:3 - i % 2] for i, row in enumerate(F.separate(x, axis=0))]
        hy, _, _ = self.lstm(None, None, rows)
        return hy[-1]


def test_sequences_of_several_lengths_cannot_be_exported_symbolic(tmp_path):
    """Sequences of other lengths stay a list, row by row: the graph has a
    node per row and a file cannot hold every batch (compile_training_step
    traces each new batch instead)."""
    with pytest.raises(ValueError, match=r"dynamic_axes: node \d+ '\w+' .* the model's "
                                         'control flow or attributes depend on them'):
        chainer_compiler.export(_RowsOfTwoLengths(), [numpy.zeros((8, 3, 4), 'f')],
                                str(tmp_path / 'm.onnx'), dynamic_axes='batch')


def test_training_step_refuses_a_batch_whose_inputs_disagree_naming_the_dimension():
    from chainer_compiler.runtime.errors import InputValidationError
    model = L.Classifier(MLP(8, 3))
    optimizer = chainer.optimizers.SGD()
    optimizer.setup(model)
    step = chainer_compiler.compile_training_step(
        model, optimizer, (numpy.zeros((4, 5), 'f'), numpy.zeros(4, 'i')),
        runtime_kwargs={'backend': 'numpy'})
    before = [p.array.copy() for p in model.params()]
    with pytest.raises(InputValidationError, match="has batch=3 on axis 0, but input "
                                                   "'input_0' has batch=6"):
        step(numpy.ones((6, 5), 'f'), numpy.zeros(3, 'i'))
    with pytest.raises(InputValidationError, match=r"shape \(6, 4\), expected \('batch', 5\)"):
        step(numpy.ones((6, 4), 'f'), numpy.zeros(6, 'i'))
    assert optimizer.t == 0
    assert all((p.array == b).all() for p, b in zip(model.params(), before))


# -- emit-c --------------------------------------------------------------------
def _foreign_symbolic_model(path):
    """A file as other exporters write it: batch and sequence symbolic,
    reshaped through Shape -> Gather -> Concat -> Reshape."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node('Shape', ['x'], ['shape']),
             helper.make_node('Gather', ['shape', 'zero'], ['n'], axis=0),
             helper.make_node('Concat', ['n', 'minus_one'], ['target'], axis=0),
             helper.make_node('Reshape', ['x', 'target'], ['flat']),
             helper.make_node('Relu', ['flat'], ['y'])]
    graph = helper.make_graph(
        nodes, 'foreign',
        [helper.make_tensor_value_info('x', TensorProto.FLOAT, ['batch', 'seq', 4])],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, ['batch', None])],
        [helper.make_tensor('zero', TensorProto.INT64, [1], [0]),
         helper.make_tensor('minus_one', TensorProto.INT64, [1], [-1])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)]), path)
    return path


def test_emit_c_sizes_symbolic_dimensions_with_symbolic_dims(tmp_path, capsys):
    from chainer_compiler.cli import main
    path = _foreign_symbolic_model(str(tmp_path / 'foreign.onnx'))
    for batch, seq in ((2, 3), (5, 7)):
        out = tmp_path / ('c%d' % batch)
        assert main(['emit-c', path, '-o', str(out),
                     '--symbolic-dims', 'batch=%d,seq=%d' % (batch, seq)]) == 0
        header = (out / 'model.h').read_text()
        assert '#define MODEL_INPUT_0_SHAPE {%d, %d, 4}' % (batch, seq) in header
        assert '#define MODEL_OUTPUT_0_SHAPE {%d, %d}' % (batch, 4 * seq) in header
    capsys.readouterr()
    assert main(['emit-c', path, '-o', str(tmp_path / 'x'), '--symbolic-dims', 'time=3']) == 2
    assert 'no input has the symbolic dimension time (the inputs have: batch, seq)' \
        in capsys.readouterr().err
    assert main(['emit-c', path, '-o', str(tmp_path / 'y')]) == 2
    assert 'emit-c --symbolic-dims NAME=SIZE' in capsys.readouterr().err
    assert not (tmp_path / 'x').exists() and not (tmp_path / 'y').exists()


def test_compile_onnx_runs_a_foreign_file_of_symbolic_batch_and_sequence(tmp_path):
    path = _foreign_symbolic_model(str(tmp_path / 'foreign.onnx'))
    compiled = chainer_compiler.compile_onnx(chainer.Chain(), path,
                                             runtime_kwargs={'backend': 'numpy'})
    assert not compiled._signatures  # the file does not say its sizes: compiled when used
    with chainer.using_config('train', False):
        for shape in ((2, 3, 4), (5, 7, 4), (2, 3, 4)):
            x = numpy.random.RandomState(0).uniform(-1, 1, shape).astype('f')
            numpy.testing.assert_array_equal(compiled(x).array,
                                             numpy.maximum(x, 0).reshape(shape[0], -1))
    assert len(compiled._signatures) == 2

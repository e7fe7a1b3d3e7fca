"""emit-c --max NAME=VALUE (issue 33): C that takes 1 to VALUE samples of a
symbolic batch, refused for a model whose samples are not independent."""
import ctypes
import os
import re
import shutil
import subprocess
import sys

import chainer
import numpy
import onnx
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import chainer_compiler
from chainer_compiler.cli import main
from chainer_compiler.exporting import with_sizes
from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.executor import Executor
from chainer_compiler.runtime.native.batched import (
    MAX_BATCH_LIMIT,
    PROBE_SIZES,
    MaxBatch,
    NotSeparableError,
    bucket_sizes,
    check_separable,
)
from chainer_compiler.runtime.native.emit_c import emit_c
from chainer_compiler.runtime.native.errors import NativeEmitError, UnsupportedNativeOpsError
from chainer_compiler.runtime.native.fusion import fuse
from chainer_compiler.runtime.native.lower import lower
from chainer_compiler.runtime.native.lowering import with_defaults
from tests.models import LeNet5
from tests.runtime.native.helpers import make_folder


def _exported(tmp_path, model, sample_shape):
    x = numpy.zeros((8,) + sample_shape, 'f')
    numpy.random.seed(0)
    with chainer.using_config('train', False):
        model(x)
    return chainer_compiler.export(model, [x], str(tmp_path / 'm.onnx'), dynamic_axes='batch')


def _vm(path, x):
    """The NumPy VM's output for ``x``, compiled at its batch size."""
    program = build_program(with_sizes(onnx.load(path), {'batch': len(x)}))
    return next(iter(Executor(program).run([x]).values()))


def _graph_model(path, nodes, inputs, initializers=(), output=('batch', 4)):
    graph = helper.make_graph(
        nodes, 'g', [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, output)], list(initializers))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)]), path)
    return path


_X = [('x', ['batch', 4])]
_INT = helper.make_tensor


@pytest.mark.parametrize('nodes, inputs, initializers, message', [
    ([helper.make_node('ReduceMean', ['x'], ['r'], axes=[0], keepdims=0),
      helper.make_node('Add', ['x', 'r'], ['y'])], _X, (),
     # (one "instruction": the old message doubled it)
     "independent: instruction 0 \\(ReduceMean, node 'ReduceMean_0'\\): output 0 has shape "
     '\\[4\\] at batch=2 and \\[4\\] at batch=3: every value computed at run time needs one '
     'axis of size batch'),
    ([helper.make_node('Softmax', ['x'], ['y'], axis=0)], _X, (),
     'Softmax.* works along the batch axis'),
    ([helper.make_node('Slice', ['x', 's', 'e', 'a', 'st'], ['y'])], _X,
     [_INT('s', TensorProto.INT64, [1], [-1]), _INT('e', TensorProto.INT64, [1], [-2 ** 62]),
      _INT('a', TensorProto.INT64, [1], [0]), _INT('st', TensorProto.INT64, [1], [-1])],
     'Slice.* slices the batch axis'),
    # x * N: one sample alone would multiply by 1.
    ([helper.make_node('Shape', ['x'], ['shape'], end=1),
      helper.make_node('Cast', ['shape'], ['n'], to=TensorProto.FLOAT),
      helper.make_node('Mul', ['x', 'n'], ['y'])], _X, (),
     'Mul.* reads input 1, which is computed from the batch size batch'),
    ([helper.make_node('Add', ['x', 'z'], ['y'])], _X + [('z', [4])], (),
     "input 1 \\('z'\\) has shape \\[4\\]"),
])
def test_a_model_whose_samples_mix_is_refused_naming_the_instruction(tmp_path, capsys, nodes,
                                                                     inputs, initializers,
                                                                     message):
    path = _graph_model(str(tmp_path / 'm.onnx'), nodes, inputs, initializers)
    assert main(['emit-c', path, '-o', str(tmp_path / 'out'), '--max', 'batch=8']) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert 'emit-c --max batch=8: the samples of a batch are not independent' in err
    assert re.search(message, err), err
    assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('extra, message', [
    (['--max', 'batch=0'], '--max batch=0: the maximum must be 1 to 1048576'),
    (['--max', 'batch=4,seq=2'], '--max takes one symbol (the batch), got batch, seq'),
    (['--max', 'batch=4', '--symbolic-dims', 'batch=2'],
     'batch is given by both --symbolic-dims and --max'),
    (['--max', 'time=4'], 'no input has the symbolic dimension time'),
])
def test_bad_max_options_are_refused_before_any_work(tmp_path, capsys, extra, message):
    path = _graph_model(str(tmp_path / 'm.onnx'), [helper.make_node('Relu', ['x'], ['y'])], _X)
    assert main(['emit-c', path, '-o', str(tmp_path / 'out')] + extra) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / 'out').exists()


def test_a_cnn_with_batch_normalization_is_emitted_for_one_sample(tmp_path):
    """Convolutions, inference BatchNormalization, pooling and the
    Shape -> Reshape of the exported Linear keep the samples apart."""
    path = _exported(tmp_path, LeNet5(batch_norm=True), (1, 28, 28))
    assert main(['emit-c', path, '-o', str(tmp_path / 'out'), '--max', 'batch=16']) == 0
    header = (tmp_path / 'out' / 'model.h').read_text()
    assert '#define MODEL_INPUT_0_SHAPE {1, 1, 28, 28}' in header
    assert '#define MODEL_MAX_BATCH 16' in header
    assert '#define MODEL_BATCH_SYMBOL "batch"' in header
    assert 'int model_run_n(long n, const float *in_0, float *out_0);' in header


@pytest.mark.slow
@pytest.mark.skipif(shutil.which('make') is None or
                    not (shutil.which('cc') or shutil.which('gcc')),
                    reason='no C compiler or make on PATH')
def test_executable_and_library_take_any_batch_up_to_the_maximum(tmp_path):
    """One build of the Transformer block (T rows per sample inside): the
    executable and NAME_run_n at batches 1, 3 (2 + 1), 12 (8 + 4) and 13
    (the bucket of the maximum) equal the NumPy VM at those sizes; 14 is
    refused (status 2, the library's MODEL_STATUS_BATCH) with nothing
    written."""
    from tests.test_dynamic_shapes import TransformerBlock
    path = _exported(tmp_path, TransformerBlock(), (6, 8))
    out = tmp_path / 'out'
    assert main(['emit-c', path, '-o', str(out), '--max', 'batch=13',
                 '--weights', 'file']) == 0
    assert '#define MODEL_BATCH_SIZES {1, 2, 4, 8, 13}' in (out / 'model.h').read_text()
    make_folder(out)
    for batch in (1, 3, 12, 13):
        x = numpy.random.RandomState(batch).uniform(-1, 1, (batch, 6, 8)).astype('f')
        numpy.save(tmp_path / 'x.npy', x)
        subprocess.run([str(out / 'model'), '-o', str(tmp_path / 'res'),
                        str(tmp_path / 'x.npy')], check=True)
        (result,) = os.listdir(tmp_path / 'res')
        numpy.testing.assert_allclose(numpy.load(tmp_path / 'res' / result), _vm(path, x),
                                      rtol=1e-5, atol=1e-6, err_msg='batch %d' % batch)
    numpy.save(tmp_path / 'x14.npy', numpy.zeros((14, 6, 8), 'f'))
    done = subprocess.run([str(out / 'model'), '-o', str(tmp_path / 'r14'),
                           str(tmp_path / 'x14.npy')], capture_output=True, text=True)
    assert done.returncode == 2
    assert 'shape (14, 6, 8) does not match input \'input_0\' of shape (1, 6, 8) with axis 0 ' \
        '(the batch) of 1 to 13' in done.stderr
    assert not (tmp_path / 'r14').exists()

    lib = ctypes.CDLL(str(out / 'libmodel.so'))
    lib.model_create.restype = ctypes.c_void_p
    lib.model_status_message.restype = ctypes.c_char_p
    error = ctypes.create_string_buffer(300)
    model = lib.model_create(str(out / 'model_weights.bin').encode(), error, 300)
    assert model, error.value
    x = numpy.random.RandomState(7).uniform(-1, 1, (7, 6, 8)).astype('f')
    y = numpy.full((14, 10), 42, 'f')

    def run_n(n):
        return lib.model_run_n(ctypes.c_void_p(model), ctypes.c_long(n),
                               x.ctypes.data_as(ctypes.c_void_p),
                               y.ctypes.data_as(ctypes.c_void_p))
    assert run_n(7) == 0
    numpy.testing.assert_allclose(y[:7], _vm(path, x), rtol=1e-5, atol=1e-6)
    assert (y[7:] == 42).all()
    for n in (0, 14):
        status = run_n(n)
        assert status == int(re.search(r'#define MODEL_STATUS_BATCH (\d+)',
                                       (out / 'model.h').read_text()).group(1))
        assert lib.model_status_message(status) == \
            b'a count of samples out of range: 1 to 13'
    lib.model_destroy(ctypes.c_void_p(model))


@pytest.mark.parametrize('maximum, sizes', [
    (1, ()), (2, (2,)), (13, (2, 4, 8, 13)), (32, (2, 4, 8, 16, 32)),
    (63, (2, 4, 8, 16, 32, 63)), (100, (2, 4, 8, 16, 32, 64)),
    (MAX_BATCH_LIMIT, (2, 4, 8, 16, 32, 64))])
def test_the_buckets_are_at_most_six_powers_of_two_and_the_maximum(maximum, sizes):
    assert bucket_sizes(maximum) == sizes


def _bias_relu(path):
    return _graph_model(path, [helper.make_node('Add', ['x', 'b'], ['t']),
                               helper.make_node('Relu', ['t'], ['y'])], _X,
                        [helper.make_tensor('b', TensorProto.FLOAT, [4], [1, 2, 3, 4])])


def test_the_buckets_share_the_weights_and_one_arena(tmp_path):
    """--max batch=5: a run function per bucket (2, 4, 5) reading the one
    copy of the bias, on NAME_run_n's arena sized for the largest; the
    chunks the largest bucket that fits first."""
    path = _bias_relu(str(tmp_path / 'm.onnx'))
    assert main(['emit-c', path, '-o', str(tmp_path / 'out'), '--max', 'batch=5']) == 0
    header = (tmp_path / 'out' / 'model.h').read_text()
    source = (tmp_path / 'out' / 'model.c').read_text()
    assert '#define MODEL_BATCH_SIZES {1, 2, 4, 5}' in header
    arena = int(re.search(r'#define MODEL_BATCH_ARENA_BYTES (\d+)UL', header).group(1))
    assert arena >= 5 * 4 * 4  # the sum of 5 samples
    # 64 bytes more, to start the arena at a line (the kernels' vector width).
    assert 'static double batch_arena[%d];' % (-(-arena // 8) + 8) in source
    assert 'arena = (unsigned char *)batch_arena + (64 - (uintptr_t)batch_arena % 64) % 64;' \
        in source
    assert (tmp_path / 'out' / 'model_weights.c').read_text().count('] = {') == 1
    assert 'model_w1_b' not in source and source.count('model_w1, b_strides') == 4
    for size in (2, 4, 5):
        assert 'static int model_run_b%d(void *arena_memory, const float *in_0, float *out_0)' \
            % size in source
    assert 'c = n - k >= 5 ? 5 : n - k >= 4 ? 4 : n - k >= 2 ? 2 : 1;' in source
    assert 'status = model_run_b5(arena, in_0 + k * 4, out_0 + k * 4);' in source


def test_a_bucket_whose_arena_is_too_large_is_left_out(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules['chainer_compiler.runtime.native.emit_c'],
                        'BUCKET_ARENA_LIMIT', 0)
    path = _bias_relu(str(tmp_path / 'm.onnx'))
    assert main(['emit-c', path, '-o', str(tmp_path / 'out'), '--max', 'batch=5']) == 0
    assert '#define MODEL_BATCH_SIZES {1}' in (tmp_path / 'out' / 'model.h').read_text()
    assert 'model_run_b' not in (tmp_path / 'out' / 'model.c').read_text()


def test_a_bucket_not_of_its_size_is_refused_before_writing(tmp_path):
    """NAME_run_n addresses a bucket's samples by the one-sample shapes: a
    bucket program of another size is refused, nothing written."""
    proto = onnx.load(_bias_relu(str(tmp_path / 'm.onnx')))
    program = {n: build_program(with_sizes(proto, {'batch': n})) for n in (1, 2, 3)}
    max_batch = MaxBatch('batch', 4, tuple((n, program[n]) for n in PROBE_SIZES),
                         ((2, program[3]),))
    with pytest.raises(NativeEmitError, match='emit-c --max batch=4: the model for 2 samples '
                       'is not the one for one sample run on each'):
        emit_c(program[1], str(tmp_path / 'out'), max_batch=max_batch)
    assert not (tmp_path / 'out').exists()


def test_a_transformer_block_folding_time_into_rows_keeps_its_samples_apart(tmp_path):
    """The block reshapes (N, T, D) to (N * T, D) for its Linear layers:
    T rows per sample, still one block each; attention is a batched MatMul,
    softmax and LayerNormalization work along the last axis."""
    from tests.test_dynamic_shapes import TransformerBlock
    path = _exported(tmp_path, TransformerBlock(), (6, 8))
    assert main(['emit-c', path, '-o', str(tmp_path / 'out'), '--max', 'batch=4']) == 0
    assert '#define MODEL_INPUT_0_SHAPE {1, 6, 8}' in (tmp_path / 'out' / 'model.h').read_text()


def _lstm_nodes(x, outputs=('Y', 'Y_h')):
    """An ONNX LSTM (layout 0: X is (T, batch, 4), hidden 5) over ``x``
    and its weights."""
    rng = numpy.random.RandomState(3)
    weights = [helper.make_tensor(name, TensorProto.FLOAT, shape,
                                  rng.uniform(-0.5, 0.5, shape).astype('f').ravel())
               for name, shape in (('W', (1, 20, 4)), ('R', (1, 20, 5)), ('B', (1, 40)))]
    node = helper.make_node('LSTM', [x, 'W', 'R', 'B'], list(outputs), hidden_size=5)
    return node, weights


def _time_major_model(path):
    """x (3, batch, 4) -> LSTM -> Y (3, 1, batch, 5) and its last state
    transposed to (batch, 1, 5): the batch on axes 1, 2 and 0."""
    lstm, weights = _lstm_nodes('x')
    graph = helper.make_graph(
        [lstm, helper.make_node('Transpose', ['Y_h'], ['h'], perm=[1, 0, 2])], 'g',
        [helper.make_tensor_value_info('x', TensorProto.FLOAT, [3, 'batch', 4])],
        [helper.make_tensor_value_info('Y', TensorProto.FLOAT, [3, 1, 'batch', 5]),
         helper.make_tensor_value_info('h', TensorProto.FLOAT, ['batch', 1, 5])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)]), path)
    return path


_TIME_MAJOR = [('x', [3, 'batch', 4])]


@pytest.mark.parametrize('nodes, inputs, initializers, output, message', [
    # (3, N, 4) to (3 * N, 4): the samples' rows interleave.
    ([helper.make_node('Reshape', ['x', 's'], ['r']),
      helper.make_node('Reshape', ['r', 't'], ['y'])], _TIME_MAJOR,
     [_INT('s', TensorProto.INT64, [2], [-1, 4]), _INT('t', TensorProto.INT64, [3], [3, -1, 4])],
     [3, 'batch', 4], "instruction 0 \\(Reshape.* folds the batch axis into the axes before it"),
    ([helper.make_node('Softmax', ['x'], ['y'], axis=1)], _TIME_MAJOR, (), [3, 'batch', 4],
     'Softmax.* works along the batch axis'),
    ([helper.make_node('LayerNormalization', ['x', 'g'], ['y'], axis=1)], _TIME_MAJOR,
     [helper.make_tensor('g', TensorProto.FLOAT, [1], [1.0])], [3, 'batch', 4],
     'LayerNormalization.* normalizes over the batch axis'),
    # A batch-first X read as time-major: the recurrence runs across samples.
    ([_lstm_nodes('x', ['Y'])[0], helper.make_node('Reshape', ['Y', 's'], ['y'])],
     [('x', ['batch', 3, 4])],
     _lstm_nodes('x')[1] + [_INT('s', TensorProto.INT64, [2], [-1, 15])], ['batch', 15],
     "instruction 0 \\(LSTM.* has the batch on axis 0 of input 0, where it works across samples"),
    # (N, 4) to (2 N, 4) is x twice, not each sample's row twice: the old
    # check took it for 2 rows per sample.
    ([helper.make_node('Tile', ['x', 'r'], ['t']), helper.make_node('Reshape', ['t', 's'], ['y'])],
     _X, [_INT('r', TensorProto.INT64, [2], [2, 1]), _INT('s', TensorProto.INT64, [2], [-1, 8])],
     ['batch', 8], 'Tile.* repeats the batch axis'),
])
def test_a_batch_on_another_axis_is_followed_and_mixing_refused(tmp_path, capsys, nodes, inputs,
                                                                initializers, output, message):
    path = _graph_model(str(tmp_path / 'm.onnx'), nodes, inputs, initializers, output)
    assert main(['emit-c', path, '-o', str(tmp_path / 'out'), '--max', 'batch=8']) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert re.search(message, err), err
    assert not (tmp_path / 'out').exists()


def test_a_time_major_model_takes_its_inputs_and_outputs_in_their_layout(tmp_path):
    """The batch on axis 1 of x, 2 of Y (copied per sample) and 0 of the
    transposed state (no copy): the header says where."""
    path = _time_major_model(str(tmp_path / 'm.onnx'))
    assert main(['emit-c', path, '-o', str(tmp_path / 'out'), '--max', 'batch=16']) == 0
    header = (tmp_path / 'out' / 'model.h').read_text()
    assert '#define MODEL_INPUT_0_SHAPE {3, 1, 4}' in header
    assert '#define MODEL_INPUT_BATCH_AXES {1}' in header
    assert '#define MODEL_OUTPUT_BATCH_AXES {2, 0}' in header
    source = (tmp_path / 'out' / 'model.c').read_text()
    assert 'memcpy(in_0_k + o * c * 4, in_0 + (o * n + k) * 4, (size_t)c * 16);' in source
    assert 'memcpy(out_0 + (o * n + k) * 5, out_0_k + o * c * 5, (size_t)c * 20);' in source
    assert 'out_1 + k * 5' in source


@pytest.mark.native_build
@pytest.mark.slow
@pytest.mark.skipif(shutil.which('make') is None or
                    not (shutil.which('cc') or shutil.which('gcc')),
                    reason='no C compiler or make on PATH')
@pytest.mark.parametrize('model, shape, axis', [
    ('classifier', (3, 4), 0),  # Transpose to (T, N, I), two LSTMs, a Linear
    ('time_major', (3, 4), 1),
])
def test_recurrent_models_run_any_batch_up_to_the_maximum(tmp_path, model, shape, axis):
    """The NStepLSTM classifier and a time-major LSTM emitted with --max
    batch=16: the executable at batches 1, 5 and 13 equals the NumPy VM."""
    if model == 'classifier':
        from benchmarks import models as bench_models
        path = _exported(tmp_path, bench_models.LSTMClassifier(n_in=4, hidden=5), shape)
    else:
        path = _time_major_model(str(tmp_path / 'm.onnx'))
    out = tmp_path / 'out'
    assert main(['emit-c', path, '-o', str(out), '--max', 'batch=16']) == 0
    make_folder(out)
    for batch in (1, 5, 13):
        x = numpy.random.RandomState(batch).uniform(
            -1, 1, shape[:axis] + (batch,) + shape[axis:]).astype('f')
        numpy.save(tmp_path / 'x.npy', x)
        res = tmp_path / ('res%d' % batch)
        subprocess.run([str(out / 'model'), '-o', str(res), str(tmp_path / 'x.npy')],
                       check=True)
        program = build_program(with_sizes(onnx.load(path), {'batch': batch}))
        expected = Executor(program).run([x])
        for name, value in expected.items():
            (result,) = [f for f in os.listdir(res) if f.startswith(name)]
            numpy.testing.assert_allclose(numpy.load(res / result), value, rtol=1e-5,
                                          atol=1e-6, err_msg='%s at batch %d' % (name, batch))


_OPS = st.one_of(
    st.permutations(range(3)).map(lambda perm: ('Transpose', {'perm': perm})),
    st.integers(0, 2).map(lambda axis: ('Softmax', {'axis': axis})),
    st.integers(0, 2).map(lambda axis: ('ReduceSum', {'keepdims': 1, 'axes': [axis]})),
    st.integers(0, 2).map(lambda axis: ('Concat', {'axis': axis})),
    # Shapes that fit some chains: (3, N, 4) to (1, 3 N, 4) interleaves the
    # samples, to (3, 4 N, 1) keeps them apart, and (3 N, 4) to (N, 3, 4)...
    st.sampled_from([[1, -1, 4], [3, -1, 4], [0, -1, 12], [-1, 3, 4], [0, -1, 1]]).map(
        lambda shape: ('Reshape', {'shape': shape})),
    st.just(('Relu', {})))


@settings(max_examples=settings.default.max_examples * 2 // 5)  # 40 under make test
@given(st.integers(0, 2), st.lists(_OPS, min_size=1, max_size=3))
def test_what_the_proof_accepts_equals_the_model_run_one_sample_at_a_time(axis, ops):
    """Chains of transposes, softmaxes, sums, concatenations and reshapes
    over x (3 x 4 with the batch inserted at ``axis``): whenever
    check_separable accepts one, the NumPy VM run on each sample alone and
    on the whole batch of 4 agree, on the batch axes it reported."""
    dims = [3, 4]
    dims.insert(axis, 'batch')
    nodes, value, inits = [], 'x', []
    for k, (op, attrs) in enumerate(ops):
        out = 'v%d' % k
        if op == 'Concat':
            nodes.append(helper.make_node(op, [value, value], [out], **attrs))
        elif op == 'ReduceSum':
            inits.append(_INT('a%d' % k, TensorProto.INT64, [1], attrs['axes']))
            nodes.append(helper.make_node(op, [value, 'a%d' % k], [out], keepdims=1))
        elif op == 'Reshape':
            inits.append(_INT('s%d' % k, TensorProto.INT64, [3], attrs['shape']))
            nodes.append(helper.make_node(op, [value, 's%d' % k], [out]))
        else:
            nodes.append(helper.make_node(op, [value], [out], **attrs))
        value = out
    nodes.append(helper.make_node('Identity', [value], ['y']))
    graph = helper.make_graph(
        nodes, 'g', [helper.make_tensor_value_info('x', TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, [None] * 3)], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)])

    def program(batch):
        return build_program(with_sizes(proto, {'batch': batch}))
    try:
        probes = [(size, lower(fuse(with_defaults(program(size))), 'model'))
                  for size in PROBE_SIZES]
    except (ValueError, UnsupportedNativeOpsError):  # a reshape that does not fit
        assume(False)
    try:
        (in_axis,), (out_axis,) = check_separable(probes, 'batch')
    except NotSeparableError:
        return
    x = numpy.random.RandomState(0).uniform(-1, 1, [4 if d == 'batch' else d for d in dims])
    x = x.astype('f')
    whole = next(iter(Executor(program(4)).run([x]).values()))
    one = Executor(program(1))
    apart = numpy.concatenate([next(iter(one.run([x.take([k], in_axis)]).values()))
                               for k in range(4)], out_axis)
    numpy.testing.assert_allclose(apart, whole, rtol=1e-5, atol=1e-6)

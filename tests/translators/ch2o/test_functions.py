"""ch2o's bridge to Chainer functions and links (translators/ch2o/functions.py
and sequence_functions.py): each call is translated into a Scope, made a
model and run in onnxruntime and in our VM, against Chainer's own result."""
import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import onnx
import onnxruntime
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime import Executor
from chainer_compiler.translators.ch2o.functions import call_chainer
from chainer_compiler.translators.ch2o.scope import Scope, Translation
from chainer_compiler.translators.ch2o.values import (
    Const,
    PyList,
    PyTuple,
    Sequence,
    Tensor,
    TranslationError,
)
from chainer_compiler.translators.onnx_chainer.tracing import DEFAULT_OPSET, MAX_OPSET, MIN_OPSET

SITE = 'model.py:7'


def new_scope(model=None, opset=DEFAULT_OPSET):
    return Scope(Translation(opset, model))


def tensor_input(scope, name, array, shape=None):
    """A graph input ``name`` holding ``array`` (``shape``: its static shape,
    None for axes that vary)."""
    scope.reserve(name)
    return Tensor(name, numpy.asarray(array), shape)


def sequence_input(scope, name, arrays, element_shape):
    scope.reserve(name)
    return Sequence(name, arrays[0].dtype, element_shape, list(arrays))


def _info(value):
    if isinstance(value, Sequence):
        elem = helper.np_dtype_to_tensor_dtype(numpy.dtype(value.dtype))
        return helper.make_tensor_sequence_value_info(value.name, elem, value.element_shape)
    elem = helper.np_dtype_to_tensor_dtype(value.dtype)
    return helper.make_tensor_value_info(value.name, elem, list(value.shape))


def run_both(scope, inputs, outputs):
    """Make a model of ``scope`` with graph inputs ``inputs`` (Tensor or
    Sequence -> the value fed) and graph ``outputs``; run it in onnxruntime
    and in the VM; return both results (lists of arrays or lists of arrays)."""
    outs = []
    for value in outputs:
        if value.name in {v.name for v in inputs}:
            value = Tensor(scope.node('Identity', [value.name], 1), value.example, value.shape)
        outs.append(value)
    graph = helper.make_graph(scope.nodes, 'ch2o_test', [_info(v) for v in inputs],
                              [_info(v) for v in outs], scope.initializers)
    opset = helper.make_opsetid('', scope.opset)
    model = helper.make_model(graph, opset_imports=[opset])
    model.ir_version = helper.find_min_ir_version_for([opset])
    onnx.checker.check_model(model, full_check=True)
    feeds = {v.name: feed if isinstance(feed, list) else numpy.asarray(feed)
             for v, feed in inputs.items()}
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=['CPUExecutionProvider'])
    ort = session.run(None, feeds)
    vm = Executor(build_program(model), backend='numpy').run(feeds)
    return ort, [vm[v.name] for v in outs]


def assert_same(results, expected, rtol=1e-5, atol=1e-5):
    """Both runtimes' results equal ``expected`` (arrays or lists of them)."""
    for runtime, actual in zip(('onnxruntime', 'VM'), results):
        assert len(actual) == len(expected), runtime
        for a, e in zip(actual, expected):
            if isinstance(e, list):
                assert len(a) == len(e), runtime
                for ai, ei in zip(a, e):
                    numpy.testing.assert_allclose(numpy.asarray(ai), ei, rtol=rtol, atol=atol,
                                                  err_msg=runtime)
            else:
                numpy.testing.assert_allclose(numpy.asarray(a), e, rtol=rtol, atol=atol,
                                              err_msg=runtime)


def _array(chainer_value):
    return chainer_value.array if isinstance(chainer_value, chainer.Variable) else chainer_value


def test_relu():
    scope = new_scope()
    x = numpy.random.RandomState(0).randn(3, 4).astype(numpy.float32)
    xt = tensor_input(scope, 'x', x)
    y = call_chainer(scope, F.relu, [xt], {}, SITE)
    assert isinstance(y, Tensor) and y.shape == (3, 4)
    assert_same(run_both(scope, {xt: x}, [y]), [F.relu(x).array])


class Owner(chainer.Chain):
    """Owns the links under test, so their parameters get link-path names."""

    def __init__(self, **links):
        super().__init__()
        with self.init_scope():
            for name, link in links.items():
                setattr(self, name, link)


def _initializer_names(scope):
    return {init.name for init in scope.initializers}


@pytest.mark.parametrize('opset', [MIN_OPSET, DEFAULT_OPSET, MAX_OPSET])
def test_linear_link_and_function_use_named_parameters(opset):
    model = Owner(l1=L.Linear(4, 3))
    scope = new_scope(model, opset)
    x = numpy.random.RandomState(1).randn(2, 4).astype(numpy.float32)
    xt = tensor_input(scope, 'x', x)
    y = call_chainer(scope, model.l1, [xt], {}, SITE)
    z = call_chainer(scope, F.linear, [y, Const(model.l1.W[:, :3].T.array)], {'b': Const(None)},
                     SITE)
    w = call_chainer(scope, F.linear, [xt, Const(model.l1.W), Const(model.l1.b)], {}, SITE)
    assert {'/l1/W', '/l1/b'} <= _initializer_names(scope)
    expected = model.l1(x).array
    assert_same(run_both(scope, {xt: x}, [y, z, w]),
                [expected, F.linear(expected, model.l1.W[:, :3].T.array).array, expected])


def test_convolution_and_batch_normalization_links():
    rng = numpy.random.RandomState(2)
    model = Owner(conv=L.Convolution2D(2, 3, 3, pad=1), bn=L.BatchNormalization(3))
    model.bn.avg_mean[:] = rng.randn(3)
    model.bn.avg_var[:] = rng.rand(3) + 0.5
    model.bn.gamma.array[:] = rng.randn(3)
    scope = new_scope(model)
    x = rng.randn(2, 2, 5, 5).astype(numpy.float32)
    xt = tensor_input(scope, 'x', x)
    h = call_chainer(scope, model.conv, [xt], {}, SITE)
    y = call_chainer(scope, model.bn, [h], {}, SITE)
    assert {'/conv/W', '/conv/b', '/bn/gamma', '/bn/beta', '/bn/avg_mean',
            '/bn/avg_var'} <= _initializer_names(scope)
    with chainer.using_config('train', False):
        expected = model.bn(model.conv(x)).array
    assert_same(run_both(scope, {xt: x}, [y]), [expected], rtol=1e-4)


def test_softmax_cross_entropy_with_ignore_label():
    rng = numpy.random.RandomState(3)
    scope = new_scope()
    x = rng.randn(5, 4).astype(numpy.float32)
    t = numpy.array([1, -1, 3, 0, -1], numpy.int32)
    xt, tt = tensor_input(scope, 'x', x), tensor_input(scope, 't', t)
    loss = call_chainer(scope, F.softmax_cross_entropy, [xt, tt], {'ignore_label': Const(-1)},
                        SITE)
    assert loss.shape == ()
    assert_same(run_both(scope, {xt: x, tt: t}, [loss]),
                [F.softmax_cross_entropy(x, t, ignore_label=-1).array])


def test_split_axis_gives_a_tuple():
    scope = new_scope()
    x = numpy.arange(24, dtype=numpy.float32).reshape(4, 6)
    xt = tensor_input(scope, 'x', x)
    parts = call_chainer(scope, F.split_axis, [xt, Const(3)], {'axis': Const(1)}, SITE)
    assert isinstance(parts, PyTuple) and [p.shape for p in parts.items] == [(4, 2)] * 3
    assert_same(run_both(scope, {xt: x}, list(parts.items)),
                [p.array for p in F.split_axis(x, 3, axis=1)])


def test_stack_and_concat_of_a_list():
    scope = new_scope()
    a, b = numpy.ones((2, 3), numpy.float32), numpy.arange(6, dtype=numpy.float32).reshape(2, 3)
    at, bt = tensor_input(scope, 'a', a), tensor_input(scope, 'b', b)
    stacked = call_chainer(scope, F.stack, [PyList([at, bt])], {'axis': Const(1)}, SITE)
    joined = call_chainer(scope, F.concat, [PyTuple((at, bt))], {}, SITE)
    assert stacked.shape == (2, 2, 3) and joined.shape == (2, 6)
    assert_same(run_both(scope, {at: a, bt: b}, [stacked, joined]),
                [F.stack([a, b], 1).array, F.concat((a, b)).array])


def _sequences(lengths, width, seed):
    rng = numpy.random.RandomState(seed)
    return [rng.randn(n, width).astype(numpy.float32) for n in lengths]


def test_stack_and_concat_of_a_sequence_follow_its_run_time_length():
    scope = new_scope()
    xs = _sequences([2, 2], 3, 4)
    seq = sequence_input(scope, 'xs', xs, (2, 3))
    stacked = call_chainer(scope, F.stack, [seq], {'axis': Const(1)}, SITE)
    joined = call_chainer(scope, F.concat, [seq], {'axis': Const(0)}, SITE)
    assert stacked.shape == (2, None, 3) and joined.shape == (None, 3)
    fed = _sequences([2, 2, 2], 3, 5)  # longer than the example
    assert_same(run_both(scope, {seq: fed}, [stacked, joined]),
                [F.stack(fed, 1).array, F.concat(fed, 0).array])


def test_pad_sequence_of_a_sequence():
    scope = new_scope()
    seq = sequence_input(scope, 'xs', _sequences([3, 1], 2, 6), (None, 2))
    padded = call_chainer(scope, F.pad_sequence, [seq], {'padding': Const(-1.0)}, SITE)
    fixed = call_chainer(scope, F.pad_sequence, [seq, Const(6)], {}, SITE)
    assert padded.shape == (None, None, 2) and fixed.shape == (None, 6, 2)
    fed = _sequences([2, 5, 1], 2, 7)
    assert_same(run_both(scope, {seq: fed}, [padded, fixed]),
                [F.pad_sequence(fed, padding=-1.0).array, F.pad_sequence(fed, 6).array])


def test_separate_along_a_varying_axis_gives_a_sequence():
    scope = new_scope()
    x = numpy.arange(6, dtype=numpy.float32).reshape(3, 2)
    xt = tensor_input(scope, 'x', x, (None, 2))
    rows = call_chainer(scope, F.separate, [xt], {}, SITE)
    cols = call_chainer(scope, F.separate, [xt, Const(1)], {}, SITE)
    assert isinstance(rows, Sequence) and rows.element_shape == (2,)
    assert isinstance(cols, PyTuple) and cols.items[0].shape == (None,)
    fed = numpy.arange(10, dtype=numpy.float32).reshape(5, 2)
    assert_same(run_both(scope, {xt: fed}, [rows] + list(cols.items)),
                [[r.array for r in F.separate(fed)]] + [c.array for c in F.separate(fed, 1)])


def test_transpose_sequence_of_a_sequence():
    scope = new_scope()
    seq = sequence_input(scope, 'xs', _sequences([3, 2], 2, 8), (None, 2))
    out = call_chainer(scope, F.transpose_sequence, [seq], {}, SITE)
    fed = _sequences([4, 4, 2, 1], 2, 9)
    assert_same(run_both(scope, {seq: fed}, [out]),
                [[y.array for y in F.transpose_sequence(fed)]])


def _n_step_expected(link, hx, xs, cx=None):
    with chainer.using_config('train', False):
        out = link(hx, cx, xs) if cx is not None or isinstance(link, L.NStepLSTM) or \
            isinstance(link, L.NStepBiLSTM) else link(hx, xs)
    *states, ys = out
    return [s.array for s in states] + [[y.array for y in ys]]


def test_n_step_lstm_on_a_list():
    model = Owner(lstm=L.NStepLSTM(1, 3, 4, 0.0))
    scope = new_scope(model)
    xs = _sequences([3, 2], 3, 10)
    xts = [tensor_input(scope, 'x%d' % i, x) for i, x in enumerate(xs)]
    hy, cy, ys = call_chainer(scope, model.lstm, [Const(None), Const(None), PyList(xts)], {},
                              SITE).items
    assert isinstance(ys, PyTuple) or isinstance(ys, PyList)
    assert '/lstm/0/w0' in _initializer_names(scope)
    results = run_both(scope, dict(zip(xts, xs)), [hy, cy] + list(ys.items))
    hy_e, cy_e, ys_e = _n_step_expected(model.lstm, None, xs, None)
    assert_same(results, [hy_e, cy_e] + ys_e)


@pytest.mark.parametrize('opset', [MIN_OPSET, DEFAULT_OPSET, MAX_OPSET])
@pytest.mark.parametrize('make, with_cell', [
    (lambda: L.NStepLSTM(1, 3, 4, 0.0), True),
    (lambda: L.NStepBiLSTM(2, 3, 4, 0.0), True),
    (lambda: L.NStepGRU(2, 3, 4, 0.0), False),
    (lambda: L.NStepBiRNNReLU(1, 3, 4, 0.0), False),
])
def test_n_step_links_on_a_sequence_of_varying_lengths(opset, make, with_cell):
    model = Owner(rnn=make())
    scope = new_scope(model, opset)
    rng = numpy.random.RandomState(11)
    seq = sequence_input(scope, 'xs', _sequences([2, 4], 3, 12), (None, 3))
    states = [Const(None), Const(None)] if with_cell else [Const(None)]
    out = call_chainer(scope, model.rnn, states + [seq], {}, SITE).items
    assert isinstance(out[-1], Sequence)
    fed = _sequences([3, 5, 1], 3, 13)
    expected = _n_step_expected(model.rnn, None, fed, None)
    assert_same(run_both(scope, {seq: fed}, list(out)), expected, rtol=1e-4)
    # Given initial states: read per layer from the inputs.
    scope = new_scope(model, opset)
    seq = sequence_input(scope, 'xs', _sequences([2, 4], 3, 12), (None, 3))
    shape = (model.rnn.n_layers * model.rnn.direction, 2, 4)
    h = rng.randn(*shape).astype(numpy.float32)
    hs = [tensor_input(scope, 'h%d' % i, h * (i + 1), (shape[0], None, 4))
          for i in range(len(states))]
    out = call_chainer(scope, model.rnn, hs + [seq], {}, SITE).items
    fed = _sequences([3, 5, 1], 3, 14)
    h3 = rng.randn(shape[0], 3, 4).astype(numpy.float32)
    feeds = {t: h3 * (i + 1) for i, t in enumerate(hs)}
    feeds[seq] = fed
    expected = _n_step_expected(model.rnn, h3, fed, 2 * h3 if with_cell else None)
    assert_same(run_both(scope, feeds, list(out)), expected, rtol=1e-4)


def _batch_size(scope, tensor):
    """``tensor.shape[0]`` as the core translates it (a 0-d int64 tensor
    when the axis varies)."""
    from chainer_compiler.translators.ch2o.numpy_calls import tensor_attribute
    return tensor_attribute(scope, tensor, 'shape', SITE).items[0]


def test_reshape_to_a_shape_read_at_run_time():
    scope = new_scope()
    x = numpy.arange(12, dtype=numpy.float32).reshape(2, 6)
    xt = tensor_input(scope, 'x', x, (None, 6))
    n = _batch_size(scope, xt)
    assert isinstance(n, Tensor) and n.shape == ()
    y = call_chainer(scope, F.reshape, [xt, PyTuple((n, Const(3), Const(2)))], {}, SITE)
    z = call_chainer(scope, F.reshape, [xt], {'shape': PyTuple((Const(-1), Const(3)))}, SITE)
    assert y.shape == (None, 3, 2) and z.shape == (None, 3)
    fed = numpy.arange(30, dtype=numpy.float32).reshape(5, 6)
    assert_same(run_both(scope, {xt: fed}, [y, z]),
                [fed.reshape(5, 3, 2), fed.reshape(-1, 3)])


def test_varying_axes_pass_through_size_independent_conversions():
    model = Owner(l1=L.Linear(3, 2))
    scope = new_scope(model)
    x = numpy.random.RandomState(15).randn(2, 3).astype(numpy.float32)
    t = numpy.array([1, 0], numpy.int32)
    xt, tt = tensor_input(scope, 'x', x, (None, 3)), tensor_input(scope, 't', t, (None,))
    h = call_chainer(scope, F.relu, [xt], {}, SITE)
    y = call_chainer(scope, model.l1, [h], {}, SITE)
    s = call_chainer(scope, F.sum, [y], {'axis': Const(0)}, SITE)
    assert h.shape == (None, 3) and y.shape == (None, 2) and s.shape == (2,)
    fed = numpy.random.RandomState(16).randn(4, 3).astype(numpy.float32)
    expected = model.l1(F.relu(fed))
    assert_same(run_both(scope, {xt: fed, tt: t}, [h, y, s]),
                [F.relu(fed).array, expected.array, F.sum(expected, axis=0).array])


def test_a_conversion_that_bakes_a_varying_size_is_an_error():
    scope = new_scope()
    x = numpy.zeros((4, 3), numpy.float32)
    xt = tensor_input(scope, 'x', x, (None, 3))
    with pytest.raises(TranslationError) as e:
        call_chainer(scope, F.split_axis, [xt, Const(2)], {'axis': Const(0)}, SITE)
    assert str(e.value) == ('model.py:7: F.split_axis: its ONNX form depends on the size of '
                            'axis 0 of x, which varies at run time')


def test_a_tensor_where_chainer_needs_a_number_is_an_error():
    scope = new_scope()
    x = numpy.zeros((4, 3), numpy.float32)
    xt = tensor_input(scope, 'x', x)
    n = tensor_input(scope, 'n', numpy.int64(2))
    with pytest.raises(TranslationError, match=r"^model\.py:7: F\.split_axis: "
                       r"indices_or_sections holds a tensor \(a value known only at run time\)"):
        call_chainer(scope, F.split_axis, [xt, n], {'axis': Const(0)}, SITE)
    with pytest.raises(TranslationError, match=r"^model\.py:7: F\.sum: axis holds a tensor"):
        call_chainer(scope, F.sum, [xt], {'axis': n}, SITE)


def test_unsupported_functions_and_arguments_are_errors_naming_the_site():
    scope = new_scope()
    x = numpy.ones((2, 3), numpy.float32)
    xt = tensor_input(scope, 'x', x)
    with pytest.raises(TranslationError, match=r'^model\.py:7: F\.cumprod is not supported: no '
                       r'converter for the Chainer function Cumprod'):
        call_chainer(scope, F.cumprod, [xt], {}, SITE)
    seq = sequence_input(scope, 'xs', [x], (None, 3))
    with pytest.raises(TranslationError, match=r"^model\.py:7: F\.relu cannot take a sequence "
                       r"\(a list whose length is known only at run time\) as argument 'x'"):
        call_chainer(scope, F.relu, [seq], {}, SITE)
    with pytest.raises(TranslationError, match=r'^model\.py:7: F\.concat: '):
        call_chainer(scope, F.concat, [PyList([xt, tensor_input(scope, 'y', x[:, :, None])])],
                     {}, SITE)


def test_linear_over_varying_batch_axes():
    model = Owner(l1=L.Linear(4, 3), l2=L.Linear(6, 2))
    scope = new_scope(model)
    rng = numpy.random.RandomState(17)
    x = rng.randn(3, 2, 4).astype(numpy.float32)
    xt = tensor_input(scope, 'x', x, (None, None, 4))
    both = call_chainer(scope, model.l1, [xt], {'n_batch_axes': Const(2)}, SITE)
    flat = call_chainer(scope, model.l2, [both], {}, SITE)  # (B, T, 3) flattened to (B, T*3)
    assert both.shape == (None, None, 3) and flat.shape == (None, 2)
    fed = rng.randn(5, 2, 4).astype(numpy.float32)  # T must stay 2 for l2's input size
    expected = model.l1(fed, n_batch_axes=2)
    assert_same(run_both(scope, {xt: fed}, [both, flat]),
                [expected.array, model.l2(expected).array])


def test_broadcast_to_and_split_at_run_time_values():
    from chainer_compiler.translators.ch2o.numpy_calls import call_numpy, tensor_attribute
    scope = new_scope()
    x = numpy.arange(3, dtype=numpy.float32).reshape(1, 3)
    lengths = numpy.array([2, 1, 3], numpy.int64)
    xt, lt = tensor_input(scope, 'x', x), tensor_input(scope, 'lengths', lengths)
    total = call_numpy(scope, 'sum', [lt], {}, SITE)
    wide = call_chainer(scope, F.broadcast_to, [xt, PyTuple((total, Const(3)))], {}, SITE)
    cuts = call_numpy(scope, 'cumsum', [lt], {}, SITE)
    cuts = call_chainer(scope, F.get_item, [cuts, Const(slice(None, -1))], {}, SITE)
    pieces = call_chainer(scope, F.split_axis, [wide, cuts], {'axis': Const(0)}, SITE)
    assert wide.shape == (None, 3) and isinstance(pieces, Sequence)
    assert tensor_attribute(scope, wide, 'shape', SITE).items[1].value == 3
    fed = numpy.array([1, 4, 2], numpy.int64)
    wide_e = numpy.broadcast_to(x, (7, 3))
    assert_same(run_both(scope, {xt: x, lt: fed}, [wide, pieces]),
                [wide_e, [wide_e[:1], wide_e[1:5], wide_e[5:]]])


def test_vstack_of_a_sequence():
    scope = new_scope()
    seq = sequence_input(scope, 'xs', _sequences([2, 3], 2, 18), (None, 2))
    rows = sequence_input(scope, 'vs', [numpy.ones(3, numpy.float32)], (3,))
    joined = call_chainer(scope, F.vstack, [seq], {}, SITE)
    stacked = call_chainer(scope, F.vstack, [rows], {}, SITE)
    fed = _sequences([1, 4, 2], 2, 19)
    vs = [numpy.full(3, i, numpy.float32) for i in range(4)]
    assert_same(run_both(scope, {seq: fed, rows: vs}, [joined, stacked]),
                [F.vstack(fed).array, F.vstack(vs).array])


def test_reshapes_chainer_records_follow_varying_sizes():
    scope = new_scope()
    x = numpy.arange(12, dtype=numpy.float32).reshape(2, 3, 2)
    xt = tensor_input(scope, 'x', x, (None, 3, 2))
    flat = call_chainer(scope, F.flatten, [xt], {}, SITE)
    assert flat.shape == (None,)
    fed = numpy.arange(24, dtype=numpy.float32).reshape(4, 3, 2)
    assert_same(run_both(scope, {xt: fed}, [flat]), [fed.reshape(-1)])


def test_n_step_link_on_a_list_of_varying_lengths():
    model = Owner(rnn=L.NStepBiLSTM(1, 3, 4, 0.0))
    scope = new_scope(model)
    xs = _sequences([3, 2], 3, 20)
    xts = [tensor_input(scope, 'x%d' % i, x, (None, 3)) for i, x in enumerate(xs)]
    hy, cy, ys = call_chainer(scope, model.rnn, [Const(None), Const(None), PyList(xts)], {},
                              SITE).items
    assert isinstance(ys, PyList) and [y.shape for y in ys.items] == [(None, 8)] * 2
    fed = _sequences([1, 4], 3, 21)
    hy_e, cy_e, ys_e = _n_step_expected(model.rnn, None, fed, None)
    assert_same(run_both(scope, dict(zip(xts, fed)), [hy, cy] + list(ys.items)),
                [hy_e, cy_e] + ys_e, rtol=1e-4)

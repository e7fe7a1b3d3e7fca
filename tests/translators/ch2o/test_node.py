"""The original chainer-compiler's ch2o "node" test cases, ported: one
Chainer function, link or NumPy call per case, written in ``forward``'s
source, translated by ch2o and compared with Chainer's own forward in
onnxruntime and the VM.  Where the original checked gradients, ours are
checked with compile_onnx.  List arguments are ONNX sequences, so those
cases also run the one file on lists of other lengths (``run_args``).
"""
import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

from .helpers import check_ch2o, check_ch2o_gradients


def _rand(*shape, seed=0, low=-1.0, high=1.0):
    return numpy.random.RandomState(seed).uniform(low, high, shape).astype(numpy.float32)


def _sequence(lengths, *rest, seed=0):
    """A list of float32 arrays of the given first-axis lengths."""
    return [_rand(n, *rest, seed=seed + i) for i, n in enumerate(lengths)]


# -- arithmetic, activations and other one-input functions ----------------------------
class AddMul(chainer.Chain):
    def forward(self, x, y):
        return (0.5 * 0.2) + 0.3 * x + y


class Identity(chainer.Chain):
    def forward(self, x):
        return x


class MakeVariable(chainer.Chain):
    def forward(self, x):
        return chainer.Variable(x)


class Relu(chainer.Chain):
    def forward(self, x):
        return F.relu(x)


class LeakyRelu(chainer.Chain):
    def forward(self, x):
        return F.leaky_relu(x)


class LeakyReluSlope(chainer.Chain):
    def forward(self, x):
        return F.leaky_relu(x, slope=0.1)


class Sigmoid(chainer.Chain):
    def forward(self, x):
        return F.sigmoid(x)


class Tanh(chainer.Chain):
    def forward(self, x):
        return F.tanh(x)


class Ceil(chainer.Chain):
    def forward(self, x):
        return numpy.ceil(x)


class Dropout(chainer.Chain):
    def forward(self, x):
        return F.dropout(x)


class Softmax(chainer.Chain):
    def forward(self, x):
        return F.softmax(x)


class SoftmaxAxis(chainer.Chain):
    def forward(self, x):
        return F.softmax(x, axis=2)


class LocalResponseNormalization(chainer.Chain):
    def forward(self, x):
        return F.local_response_normalization(x)


@pytest.mark.parametrize('cls', [Identity, Relu, LeakyRelu, LeakyReluSlope, Sigmoid, Tanh, Ceil,
                                 Dropout, Softmax, SoftmaxAxis, LocalResponseNormalization],
                         ids=lambda c: c.__name__)
def test_one_input(cls):
    x = _rand(2, 7, 3, 4, low=-5, high=5)
    check_ch2o(cls(), [x])


def test_local_response_normalization_2d():
    # The original case's input: a matrix, channels on its second axis.
    check_ch2o(LocalResponseNormalization(), [_rand(2, 7)])


def test_add_mul():
    check_ch2o(AddMul(), [_rand(3, 5), _rand(3, 5, seed=1)])


def test_variable():
    check_ch2o(MakeVariable(), [numpy.array(42)])


# -- reductions ----------------------------------------------------------------------
class Sum(chainer.Chain):
    def forward(self, x):
        return F.sum(x, axis=1)


class SumKeepdims(chainer.Chain):
    def forward(self, x):
        return F.sum(x, axis=0, keepdims=True)


class SumTupleAxis(chainer.Chain):
    def forward(self, x):
        return F.sum(x, axis=(1, 2))


class SumAll(chainer.Chain):
    def forward(self, x):
        return F.sum(x)


class Mean(chainer.Chain):
    def forward(self, x):
        return F.mean(x, axis=1)


class MeanKeepdims(chainer.Chain):
    def forward(self, x):
        return F.mean(x, axis=0, keepdims=True)


class MeanTupleAxis(chainer.Chain):
    def forward(self, x):
        return F.mean(x, axis=(1, 2))


class MeanAll(chainer.Chain):
    def forward(self, x):
        return F.mean(x)


class MaxMin(chainer.Chain):
    def forward(self, x):
        return F.max(x, axis=1), F.min(x, axis=(0, 2), keepdims=True), F.max(x), F.min(x)


@pytest.mark.parametrize('cls', [Sum, SumKeepdims, SumTupleAxis, SumAll, Mean, MeanKeepdims,
                                 MeanTupleAxis, MeanAll, MaxMin], ids=lambda c: c.__name__)
def test_reduction(cls):
    check_ch2o(cls(), [_rand(3, 5, 4)])


class LinearThenSum(chainer.Chain):
    """The reduction's axes come from constant attributes of the model."""

    def __init__(self, axis, keepdims):
        super().__init__()
        self.axis = axis
        self.keepdims = keepdims
        with self.init_scope():
            self.l = L.Linear(None, 5)

    def forward(self, x):
        x = self.l(x)
        x = F.reshape(x, (3, 2, 5))
        return F.sum(x, axis=self.axis, keepdims=self.keepdims)


@pytest.mark.parametrize('keepdims', [False, True])
@pytest.mark.parametrize('axis', [0, 1, 2, (0, 2), (1, 2), None], ids=str)
def test_sum_backprop(axis, keepdims, tmp_path):
    model = LinearThenSum(axis, keepdims)
    x = _rand(6, 2, 3)
    check_ch2o(model, [x])
    check_ch2o_gradients(model, [x], tmp_path)


# -- links --------------------------------------------------------------------------
class TwoLinears(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(None, 3)
            self.l2 = L.Linear(7, nobias=True)

    def forward(self, x):
        return self.l1(x), self.l2(x)


class OneLinear(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(None, 3)

    def forward(self, x):
        return self.l1(x)


class Convolution(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.c = L.Convolution2D(None, 6, (5, 7), stride=(2, 3))

    def forward(self, x):
        return self.c(x)


class BatchNorm(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.bn = L.BatchNormalization(3)
        # Statistics and scales away from 0 and 1, so that the running
        # statistics test mode uses are really read.
        self.bn.avg_mean[...] = _rand(3, seed=1)
        self.bn.avg_var[...] = _rand(3, seed=2, low=0.5, high=2)
        self.bn.gamma.array[...] = _rand(3, seed=3)
        self.bn.beta.array[...] = _rand(3, seed=4)

    def forward(self, x):
        return self.bn(x)


class Embed(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.e = L.EmbedID(7, 3)

    def forward(self, x):
        return self.e(x)


def test_linear():
    check_ch2o(TwoLinears(), [_rand(5, 7)])


def test_linear_backprop(tmp_path):
    model, x = OneLinear(), _rand(5, 7)
    check_ch2o(model, [x])
    check_ch2o_gradients(model, [x], tmp_path)


@pytest.mark.parametrize('cls,shape', [(Convolution, (2, 4, 15, 17)), (BatchNorm, (2, 3, 5, 5))],
                         ids=lambda c: getattr(c, '__name__', None))
def test_convolution_and_batch_normalization(cls, shape, tmp_path):
    model, x = cls(), _rand(*shape)
    check_ch2o(model, [x], rtol=1e-4, atol=1e-5)
    check_ch2o_gradients(model, [x], tmp_path, rtol=1e-4, atol=1e-5)


def test_embed_id_backprop(tmp_path):
    model, ids = Embed(), numpy.array([3, 0, 6, 3, 1])
    check_ch2o(model, [ids])
    check_ch2o_gradients(model, [ids], tmp_path)


# -- recurrent links over a list of sequences ------------------------------------------
class NStepLSTM(chainer.Chain):
    def __init__(self, dropout=0.1):
        super().__init__()
        with self.init_scope():
            self.rnn = L.NStepLSTM(2, 4, 3, dropout)

    def forward(self, xs):
        hy, cy, ys = self.rnn(None, None, xs)
        return hy, cy, ys


class NStepBiLSTM(chainer.Chain):
    def __init__(self, dropout=0.1):
        super().__init__()
        with self.init_scope():
            self.rnn = L.NStepBiLSTM(2, 4, 3, dropout)

    def forward(self, xs):
        hy, cy, ys = self.rnn(None, None, xs)
        return hy, cy, ys


class NStepGRU(chainer.Chain):
    def __init__(self, dropout=0.0):
        super().__init__()
        with self.init_scope():
            self.rnn = L.NStepGRU(1, 4, 3, dropout)

    def forward(self, xs):
        hy, ys = self.rnn(None, xs)
        return hy, ys


@pytest.mark.parametrize('cls', [NStepLSTM, NStepBiLSTM, NStepGRU], ids=lambda c: c.__name__)
def test_n_step_rnn(cls):
    # A batch is a list: the file runs on other batch sizes and lengths.
    check_ch2o(cls(), [_sequence([2, 5, 3], 4)], rtol=1e-4, atol=1e-5,
               run_args=[(_sequence([4, 1], 4, seed=5),)])


@pytest.mark.parametrize('cls', [NStepLSTM, NStepBiLSTM, NStepGRU], ids=lambda c: c.__name__)
def test_n_step_rnn_backprop(cls, tmp_path):
    # Without dropout between layers: Chainer and the compiled model draw
    # their masks independently, so only a deterministic step compares.
    check_ch2o_gradients(cls(dropout=0.0), [_sequence([2, 5, 3], 4)], tmp_path,
                         rtol=1e-4, atol=1e-5)


class NStepLSTMFunction(chainer.Chain):
    """F.n_step_lstm called directly, on a link's weights and given states."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.rnn = L.NStepLSTM(1, 4, 3, 0.0)

    def forward(self, hx, cx, xs):
        return F.n_step_lstm(1, 0.0, hx, cx, self.rnn.ws, self.rnn.bs, xs)


class NStepLSTMFunctionOnSteps(NStepLSTMFunction):
    """The same on a list written in the source: its length is known."""

    def forward(self, hx, cx, x0, x1):
        return F.n_step_lstm(1, 0.0, hx, cx, self.rnn.ws, self.rnn.bs, [x0, x1])


class NStepBiGRUFunction(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.rnn = L.NStepBiGRU(1, 4, 3, 0.0)

    def forward(self, hx, xs):
        return F.n_step_bigru(1, 0.0, hx, self.rnn.ws, self.rnn.bs, xs)


class TransposeSequence(chainer.Chain):
    def forward(self, xs):
        return list(F.transpose_sequence(xs))


def test_n_step_lstm_function():
    h, c = _rand(1, 2, 3, seed=1), _rand(1, 2, 3, seed=2)
    # The function takes the batch time-major: one array per time step, of
    # the batch entries still running.  The states fix the batch size; the
    # number of steps and who runs them vary between runs.
    xs = [_rand(2, 4), _rand(1, 4, seed=1), _rand(1, 4, seed=2)]
    check_ch2o(NStepLSTMFunction(), [h, c, xs], rtol=1e-4, atol=1e-5,
               run_args=[(h, c, [_rand(2, 4, seed=3), _rand(2, 4, seed=4)])])


def test_n_step_lstm_function_on_steps():
    h, c = _rand(1, 2, 3, seed=1), _rand(1, 2, 3, seed=2)
    check_ch2o(NStepLSTMFunctionOnSteps(), [h, c, _rand(2, 4), _rand(1, 4, seed=1)],
               rtol=1e-4, atol=1e-5)


def test_n_step_bigru_function():
    h = _rand(2, 2, 3, seed=1)
    xs = [_rand(2, 4), _rand(2, 4, seed=1), _rand(1, 4, seed=2)]
    check_ch2o(NStepBiGRUFunction(), [h, xs], rtol=1e-4, atol=1e-5,
               run_args=[(h, [_rand(2, 4, seed=3)])])


def test_transpose_sequence():
    check_ch2o(TransposeSequence(), [_sequence([4, 2, 2], 3)],
               run_args=[(_sequence([3, 1], 3, seed=4),)])


# -- shapes and array manipulation -------------------------------------------------------
class BroadcastTo(chainer.Chain):
    def forward(self, x):
        return F.broadcast_to(x, (2, 6, 4, 3))


class LinearThenBroadcast(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(None, 5)

    def forward(self, x):
        x = self.l1(x)
        x = F.reshape(x, (6, 5, 1))
        return F.broadcast_to(x, (2, 6, 5, 3))


class ExpandDims(chainer.Chain):
    def forward(self, x):
        return F.expand_dims(x, axis=1), F.expand_dims(x, 1)


class Reshape(chainer.Chain):
    def forward(self, x, p):
        return F.reshape(x, (24, 12)), F.reshape(x, (6, -1, 12)), F.reshape(x, (-1, p))


class Squeeze(chainer.Chain):
    def forward(self, x):
        return F.squeeze(x, 1)


class SqueezeAxes(chainer.Chain):
    def forward(self, x):
        return F.squeeze(x, axis=(1, 3))


class SwapAxes(chainer.Chain):
    def forward(self, x):
        return F.swapaxes(x, 1, 3), F.swapaxes(x, 0, 1)


class Transpose(chainer.Chain):
    def forward(self, x):
        return F.transpose(x), F.transpose(x, (1, 3, 0, 2))


def test_broadcast_to():
    check_ch2o(BroadcastTo(), [_rand(6, 4, 1)])


def test_broadcast_to_backprop(tmp_path):
    model, x = LinearThenBroadcast(), _rand(6, 3)
    check_ch2o(model, [x])
    check_ch2o_gradients(model, [x], tmp_path)


def test_reshape():
    x = _rand(12, 6, 4)
    # The last shape has a run-time entry: another p, another shape.
    check_ch2o(Reshape(), [x, 3], run_args=[(x, 8)])


@pytest.mark.parametrize('cls,shape', [
    (ExpandDims, (6, 4)), (Squeeze, (3, 1, 4, 1, 5)), (SqueezeAxes, (3, 1, 4, 1, 5)),
    (SwapAxes, (6, 4, 2, 7)), (Transpose, (6, 4, 2, 7)),
], ids=lambda c: getattr(c, '__name__', None))
def test_axes(cls, shape):
    check_ch2o(cls(), [_rand(*shape)])


# -- joining and splitting ------------------------------------------------------------------
class ConcatTuple(chainer.Chain):
    def forward(self, x, y):
        return F.concat((x, y))


class ConcatList(chainer.Chain):
    def forward(self, x, y):
        return F.concat([x, y])


class HstackPair(chainer.Chain):
    def forward(self, x, y):
        return F.hstack((x, y))


class HstackList(chainer.Chain):
    def forward(self, xs):
        return F.hstack(xs)


class VstackPair(chainer.Chain):
    def forward(self, x, y):
        return F.vstack((x, y))


class VstackList(chainer.Chain):
    def forward(self, xs):
        return F.vstack(xs)


class Stack(chainer.Chain):
    def forward(self, x, y):
        return F.stack((x, y))


class StackAxis0(chainer.Chain):
    def forward(self, x, y):
        return F.stack((x, y), axis=0)


class StackAxis1(chainer.Chain):
    def forward(self, x, y):
        return F.stack((x, y), axis=1)


class StackAxis2(chainer.Chain):
    def forward(self, x, y):
        return F.stack((x, y), axis=2)


@pytest.mark.parametrize('cls,second', [
    (ConcatTuple, (5, 3, 2)), (ConcatList, (5, 3, 2)), (HstackPair, (5, 3, 2)),
    (VstackPair, (4, 4, 2)), (Stack, (5, 4, 2)), (StackAxis0, (5, 4, 2)),
    (StackAxis1, (5, 4, 2)), (StackAxis2, (5, 4, 2)),
], ids=lambda c: getattr(c, '__name__', None))
def test_join_pair(cls, second):
    check_ch2o(cls(), [_rand(5, 4, 2), _rand(*second, seed=1)])


def test_hstack_list():
    xs = [_rand(5, 3, 2), _rand(5, 4, 2, seed=1)]
    check_ch2o(HstackList(), [xs], run_args=[(xs + [_rand(5, 1, 2, seed=2)],), (xs[:1],)])


def test_vstack_list():
    xs = [_rand(7, 4, 2), _rand(5, 4, 2, seed=1)]
    check_ch2o(VstackList(), [xs], run_args=[(xs + [_rand(1, 4, 2, seed=2)],), (xs[:1],)])


class Separate(chainer.Chain):
    def forward(self, x):
        return list(F.separate(x))


class SeparateAxis0(chainer.Chain):
    def forward(self, x):
        return list(F.separate(x, axis=0))


class SeparateAxis1(chainer.Chain):
    def forward(self, x):
        return list(F.separate(x, axis=1))


class SeparateAxis2(chainer.Chain):
    def forward(self, x):
        return list(F.separate(x, axis=2))


@pytest.mark.parametrize('cls', [Separate, SeparateAxis0, SeparateAxis1, SeparateAxis2],
                         ids=lambda c: c.__name__)
def test_separate(cls, tmp_path):
    check_ch2o(cls(), [_rand(2, 3, 4)])
    check_ch2o_gradients(cls(), [_rand(2, 3, 4)], tmp_path)


class SplitAtIndices(chainer.Chain):
    def forward(self, x, indices):
        return [y for y in F.split_axis(x, indices, axis=0)]


class SplitAtIndicesAxis1(chainer.Chain):
    def forward(self, x, indices):
        return [y for y in F.split_axis(x, indices, axis=1)]


class SplitSections(chainer.Chain):
    def forward(self, x):
        return [y for y in F.split_axis(x, 2, 0)]


class SplitSectionsAxis1(chainer.Chain):
    def forward(self, x):
        return [y for y in F.split_axis(x, 2, axis=1)]


@pytest.mark.parametrize('cls', [SplitAtIndices, SplitAtIndicesAxis1], ids=lambda c: c.__name__)
def test_split_axis_indices(cls, tmp_path):
    x = _rand(10, 12)
    # The split points are a list of ints, so a run-time sequence: other
    # points, and another number of pieces, from the same file.
    check_ch2o(cls(), [x, [1, 3, 4, 7]], run_args=[(x, [2, 9]), (x, [5])])
    check_ch2o_gradients(cls(), [x, [1, 3, 4, 7]], tmp_path)


@pytest.mark.parametrize('cls', [SplitSections, SplitSectionsAxis1], ids=lambda c: c.__name__)
def test_split_axis_sections(cls, tmp_path):
    check_ch2o(cls(), [_rand(10, 12)])
    check_ch2o_gradients(cls(), [_rand(10, 12)], tmp_path)


# -- padding sequences ---------------------------------------------------------------
class PadSequence(chainer.Chain):
    def forward(self, xs):
        return F.pad_sequence(xs)


class PadSequenceLength(chainer.Chain):
    def forward(self, xs):
        return F.pad_sequence(xs, length=20)


class PadSequencePadding(chainer.Chain):
    def forward(self, xs):
        return F.pad_sequence(xs, padding=-1)


@pytest.mark.parametrize('cls', [PadSequence, PadSequenceLength, PadSequencePadding],
                         ids=lambda c: c.__name__)
def test_pad_sequence(cls):
    check_ch2o(cls(), [_sequence([3, 0, 8, 2, 5])],
               run_args=[(_sequence([4, 9], seed=7),), (_sequence([1], seed=9),)])


# -- pooling and resizing -------------------------------------------------------------
class AveragePool(chainer.Chain):
    def forward(self, x):
        return F.average_pooling_2d(x, (1, 3), stride=(1, 4))


class AveragePoolPad(chainer.Chain):
    def forward(self, x):
        return F.average_pooling_2d(x, (3, 4), stride=1, pad=(2, 3))


class MaxPool(chainer.Chain):
    def forward(self, x):
        return F.max_pooling_2d(x, (1, 3), stride=(1, 4))


class MaxPoolPad(chainer.Chain):
    def forward(self, x):
        return F.max_pooling_2d(x, (1, 3), stride=(1, 4), pad=(0, 1))


class MaxPoolNoStride(chainer.Chain):
    def forward(self, x):
        return F.max_pooling_2d(x, (3, 4))


class Unpooling(chainer.Chain):
    def forward(self, x):
        return F.unpooling_2d(x, 2, cover_all=False)


class Unpooling3x4(chainer.Chain):
    def forward(self, x):
        return F.unpooling_2d(x, (3, 4), cover_all=False)


class ResizeImages(chainer.Chain):
    def forward(self, x):
        return F.resize_images(x, (9, 13))


@pytest.mark.parametrize('cls', [AveragePool, AveragePoolPad, MaxPool, MaxPoolPad,
                                 MaxPoolNoStride, Unpooling, Unpooling3x4],
                         ids=lambda c: c.__name__)
def test_pooling(cls):
    check_ch2o(cls(), [_rand(2, 3, 10, 13)], rtol=1e-4, atol=1e-5)


def test_resize_images(monkeypatch):
    # Chainer 7.8.1's resize_images uses numpy.float, gone in NumPy >= 1.24.
    monkeypatch.setattr(numpy, 'float', float, raising=False)
    check_ch2o(ResizeImages(), [_rand(1, 2, 5, 7)], rtol=1e-4, atol=1e-5)


def test_unpooling_larger():
    # The original's 'large' case, the largest input of an FPN, scaled down.
    check_ch2o(Unpooling(), [_rand(1, 32, 20, 20)])


ROI_INPUT = numpy.arange(2 * 3 * 5 * 5, dtype=numpy.float32).reshape(2, 3, 5, 5)
ROIS = numpy.array([[0, 1, 3, 4], [1, 0.3, 4, 2.6]], numpy.float32)


class ROIMaxPooling(chainer.Chain):
    def forward(self, x, rois, roi_indices):
        return F.roi_max_pooling_2d(x, rois, roi_indices, 7, 1.2)


class ROIAveragePooling(chainer.Chain):
    def forward(self, x, rois, roi_indices):
        return F.roi_average_pooling_2d(x, rois, roi_indices, 7, 1.2)


class ROIMaxAlign(chainer.Chain):
    def forward(self, x, rois, roi_indices):
        return F.roi_max_align_2d(x, rois, roi_indices, 7, 1.2, 2)


class ROIAverageAlign(chainer.Chain):
    def forward(self, x, rois, roi_indices):
        return F.roi_average_align_2d(x, rois, roi_indices, 7, 1.2, 3)


@pytest.mark.parametrize('cls', [
    pytest.param(ROIMaxPooling, id='max_pool'),
    pytest.param(ROIAveragePooling, id='avg_pool'),
    pytest.param(ROIMaxAlign, id='max_align'),
    pytest.param(ROIAverageAlign, id='avg_align'),
])
def test_roi(cls):
    check_ch2o(cls(), [ROI_INPUT, ROIS, numpy.array([0, 1], numpy.int32)], rtol=1e-4, atol=1e-4)


class ROIPooling(chainer.Chain):
    def forward(self, x, rois):
        return F.roi_pooling_2d(x, rois, 7, 7, 1.2)


def test_roi_pooling_2d():
    # This older form takes each region's image index as its first column.
    rois = numpy.concatenate([numpy.array([[0], [1]], numpy.float32), ROIS], axis=1)
    check_ch2o(ROIPooling(), [ROI_INPUT, rois], rtol=1e-4, atol=1e-4)


# -- products and losses ------------------------------------------------------------------
class Matmul(chainer.Chain):
    def forward(self, x, y):
        return F.matmul(x, y)


class SoftmaxCrossEntropy(chainer.Chain):
    def forward(self, x, t):
        return F.softmax_cross_entropy(x, t)


class SoftmaxCrossEntropyIgnore(chainer.Chain):
    def forward(self, x, t):
        return F.softmax_cross_entropy(x, t, ignore_label=1)


def test_matmul():
    check_ch2o(Matmul(), [_rand(5, 7), _rand(7, 4, seed=1)])


@pytest.mark.parametrize('cls', [SoftmaxCrossEntropy, SoftmaxCrossEntropyIgnore],
                         ids=lambda c: c.__name__)
def test_softmax_cross_entropy(cls, tmp_path):
    args = [_rand(4, 3), numpy.array([2, 1, 0, 1], numpy.int32)]
    check_ch2o(cls(), args)
    check_ch2o_gradients(cls(), args, tmp_path)


# -- lengths, sizes, shapes ----------------------------------------------------------
class Len(chainer.Chain):
    def forward(self, x):
        return len(x)


class Size(chainer.Chain):
    def forward(self, x):
        return x.size


class ShapeList(chainer.Chain):
    def forward(self, x):
        return list(x.shape)


class ShapeConcat(chainer.Chain):
    def forward(self, x):
        return numpy.array(x.shape + (42,))


@pytest.mark.parametrize('cls', [Len, Size, ShapeList, ShapeConcat], ids=lambda c: c.__name__)
def test_shape_queries(cls):
    check_ch2o(cls(), [_rand(3, 5, 4)])


def test_len_of_list():
    items = [numpy.array(v, numpy.float32) for v in (3, 5, 4)]
    check_ch2o(Len(), [items], run_args=[(items[:1],), (items * 2,)])


# -- NumPy calls -----------------------------------------------------------------------
class NpArray(chainer.Chain):
    def forward(self):
        return numpy.array([4.0, 2.0, 3.0], dtype=numpy.float32)


class NpArrayCast(chainer.Chain):
    def forward(self):
        return numpy.array([4.0, 2.0, 3.0], dtype=numpy.int32)


class NpFull(chainer.Chain):
    def forward(self):
        return numpy.full((3, 4), 42)


class NpFullDtype(chainer.Chain):
    def forward(self):
        return numpy.full((3, 4), 42, dtype=numpy.float32)


class NpZeros(chainer.Chain):
    def forward(self):
        return numpy.zeros((3, 4), dtype=numpy.float32)


@pytest.mark.parametrize('cls', [NpArray, NpArrayCast, NpFull, NpFullDtype, NpZeros],
                         ids=lambda c: c.__name__)
def test_numpy_constant(cls):
    check_ch2o(cls(), [])


class Cumsum(chainer.Chain):
    def forward(self, ps):
        return numpy.cumsum(ps)


def test_cumsum():
    check_ch2o(Cumsum(), [[3, 1, 4, 1, 5, 9, 2]], run_args=[([2, 7],)])


class NumpyOnTensors(chainer.Chain):
    """The xp calls the issue names, on inputs: ones, arange with a
    run-time length, concatenate, astype and .T."""

    def forward(self, x, y, n):
        ones = numpy.ones((2, 3), dtype=numpy.float32)
        joined = numpy.concatenate((x, y), axis=1)
        return x + ones, numpy.arange(n), joined.T, x.astype(numpy.int32)


def test_numpy_on_tensors():
    x, y = _rand(2, 3, high=5), _rand(2, 4, seed=1)
    check_ch2o(NumpyOnTensors(), [x, y, 4], run_args=[(x, y, 1)])


# -- configuration -----------------------------------------------------------------------
class ConfigDependent(chainer.Chain):
    """Dropout reads chainer.config.train; so does the model itself."""

    def forward(self, x):
        with chainer.using_config('train', False):
            y = F.dropout(x, 0.5)
        if chainer.config.train:
            y = y * 2
        return y + F.dropout(x)


def test_config():
    check_ch2o(ConfigDependent(), [_rand(3, 4)])

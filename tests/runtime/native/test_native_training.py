"""compile_training_step with backend 'native': the whole step (forward,
loss, backward, optimizer update) as one call into C, updating the model's
parameter arrays and the optimizer's state arrays where they lie; and
compile_onnx's forward and backward programs run natively.

Each case trains copies of one model three steps through the native step,
the NumPy step and Chainer itself, and compares every parameter and
optimizer state."""
import copy

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainer_compiler
from benchmarks import models as bench_models
from chainer_compiler import compile_training_step
from chainer_compiler.runtime.errors import InputValidationError, RuntimeVMError
from chainer_compiler.runtime.native import UnsupportedNativeOpsError

#: Adam divides each gradient by its running root mean square, so a
#: gradient near 0 that differs in its last bits moves its weight by a
#: few 1e-6 (alpha 1e-3 times a relative error); the NumPy step and Chainer
#: differ by as much.
RTOL, ATOL = 1e-4, 1e-5
STEPS = 3
OPTIMIZERS = {
    'sgd': lambda: chainer.optimizers.SGD(lr=0.1),
    'momentum': lambda: chainer.optimizers.MomentumSGD(lr=0.1),
    'adam': chainer.optimizers.Adam,
    'adamw': lambda: chainer.optimizers.AdamW(weight_decay_rate=0.1),
}


class MLP(chainer.Chain):
    def __init__(self, sizes=(20, 16, 16, 5)):
        super().__init__()
        with self.init_scope():
            self.layers = chainer.ChainList(*[L.Linear(a, b)
                                              for a, b in zip(sizes, sizes[1:])])

    def forward(self, x):
        for layer in self.layers[:-1]:
            x = F.relu(layer(x))
        return self.layers[-1](x)


def _model_and_batches(seed=0, ignored=False):
    """An initialized L.Classifier (accuracy on) and STEPS + 3 batches; with
    ``ignored``, some labels are Chainer's ignore_label -1."""
    rng = numpy.random.RandomState(seed)
    numpy.random.seed(seed)
    model = L.Classifier(MLP())
    batches = []
    for _ in range(STEPS + 3):
        x = rng.uniform(-1, 1, (8, 20)).astype(numpy.float32)
        t = rng.randint(0, 5, 8).astype(numpy.int32)
        if ignored:
            t[rng.rand(8) < 0.3] = -1
        batches.append((x, t))
    model(*batches[0])  # initializes nothing lazily, but checks the shapes
    return model, batches


def _native_step(optimizer='sgd'):
    """_model_and_batches' model and batches, ``optimizer`` set up on the
    model, and the model's training step compiled for the native backend."""
    model, batches = _model_and_batches()
    opt = OPTIMIZERS[optimizer]()
    opt.setup(model)
    step = compile_training_step(model, opt, batches[0], runtime_kwargs={'backend': 'native'})
    return model, batches, opt, step


def _trained(model, optimizer_name, batches, backend):
    """(model, optimizer, step or None) after training a copy of ``model``
    on ``batches`` with ``backend`` ('native', 'numpy', or 'chainer' for
    optimizer.update)."""
    model = copy.deepcopy(model)
    optimizer = OPTIMIZERS[optimizer_name]()
    optimizer.setup(model)
    step = None
    if backend != 'chainer':
        step = compile_training_step(model, optimizer, batches[0],
                                     runtime_kwargs={'backend': backend})
    for x, t in batches:
        if step is None:
            optimizer.update(model, x, t)
        else:
            step(x, t)
    return model, optimizer, step


def _state(model, optimizer):
    """Every parameter, optimizer state and persistent array (the running
    statistics of BatchNormalization) by name, and the counters."""
    arrays = {}
    for name, param in model.namedparams():
        arrays[name] = param.array
        for slot, value in param.update_rule.state.items():
            arrays['%s/%s' % (name, slot)] = value
    for path, link in model.namedlinks():
        for name in ('avg_mean', 'avg_var'):
            if hasattr(link, name):
                arrays['%s/%s' % (path, name)] = getattr(link, name)
    counters = [optimizer.t] + [p.update_rule.t for p in model.params()]
    return arrays, counters


def _assert_same(got, want, what):
    (g, gt), (w, wt) = got, want
    assert sorted(g) == sorted(w)
    assert gt == wt, what
    for name in w:
        numpy.testing.assert_allclose(g[name], w[name], rtol=RTOL, atol=ATOL,
                                      err_msg='%s: %s' % (what, name))


def _classifier_and_batches(predictor, x_shape, n_class):
    """L.Classifier(predictor()) built under NumPy seed 0 (its initializers
    draw from it) and STEPS batches of inputs uniform in [-1, 1) of
    ``x_shape`` and labels below ``n_class``."""
    rng = numpy.random.RandomState(0)
    numpy.random.seed(0)
    model = L.Classifier(predictor())
    batches = [(rng.uniform(-1, 1, x_shape).astype(numpy.float32),
                rng.randint(0, n_class, x_shape[0]).astype(numpy.int32)) for _ in range(STEPS)]
    return model, batches


def _assert_native_matches(model, optimizer, batches, what):
    """Train copies of ``model`` on ``batches`` natively, on the NumPy
    backend and in Chainer; assert the three end states agree.  Returns the
    native state."""
    native = _state(*_trained(model, optimizer, batches, 'native')[:2])
    _assert_same(native, _state(*_trained(model, optimizer, batches, 'numpy')[:2]),
                 '%s native vs numpy backend' % what)
    _assert_same(native, _state(*_trained(model, optimizer, batches, 'chainer')[:2]),
                 '%s native vs Chainer' % what)
    return native


@pytest.mark.parametrize('optimizer', sorted(OPTIMIZERS))
@pytest.mark.native_build
def test_steps_match_numpy_backend_and_chainer(optimizer):
    model, batches = _model_and_batches(ignored=optimizer == 'sgd')
    batches = batches[:STEPS]
    native = _trained(model, optimizer, batches, 'native')
    reference = _state(*native[:2])
    assert native[1].t == STEPS
    _assert_same(reference, _state(*_trained(model, optimizer, batches, 'numpy')[:2]),
                 'native vs numpy backend')
    _assert_same(reference, _state(*_trained(model, optimizer, batches, 'chainer')[:2]),
                 'native vs Chainer')
    # The step trained something: the parameters moved from their start.
    moved = [not numpy.allclose(p.array, q.array) for p, q in
             zip(native[0].params(), model.params())]
    assert all(moved)


@pytest.mark.parametrize('optimizer', ['momentum', 'adam'])
@pytest.mark.native_build
def test_arrays_are_updated_where_they_lie(optimizer):
    model, batches, opt, step = _native_step(optimizer)
    arrays, _ = _state(model, opt)
    before = {name: (id(a), a.ctypes.data, a.copy()) for name, a in arrays.items()}
    loss = step(*batches[0])
    after, _ = _state(model, opt)
    for name, (identity, address, old) in before.items():
        assert id(after[name]) == identity and after[name].ctypes.data == address, name
        assert not numpy.array_equal(after[name], old), name  # updated in place
    assert loss.shape == () and numpy.isfinite(loss)


@pytest.mark.native_build
def test_reports_loss_and_accuracy():
    model, batches = _model_and_batches()
    observed = []
    for backend in ('native', 'numpy'):
        m = copy.deepcopy(model)
        opt = OPTIMIZERS['sgd']()
        opt.setup(m)
        step = compile_training_step(m, opt, batches[0], runtime_kwargs={'backend': backend})
        reporter = chainer.Reporter()
        reporter.add_observer('main', m)
        observation = {}
        with reporter.scope(observation):
            step(*batches[1])
        observed.append({k: float(v) for k, v in observation.items()})
    assert sorted(observed[0]) == ['main/accuracy', 'main/loss']
    for key in observed[1]:
        numpy.testing.assert_allclose(observed[0][key], observed[1][key], rtol=RTOL)


@pytest.mark.parametrize('first,then', [('native', 'numpy'), ('numpy', 'native')])
@pytest.mark.native_build
def test_snapshot_resumes_on_the_other_backend(tmp_path, first, then):
    """A snapshot (save_npz of model and optimizer) after two steps on one
    backend, resumed for two more on the other, ends where four steps on
    the NumPy backend alone end."""
    model, batches = _model_and_batches()
    straight = _state(*_trained(model, 'adam', batches[:4], 'numpy')[:2])
    half, half_opt, _ = _trained(model, 'adam', batches[:2], first)
    chainer.serializers.save_npz(str(tmp_path / 'model.npz'), half)
    chainer.serializers.save_npz(str(tmp_path / 'optimizer.npz'), half_opt)
    resumed = copy.deepcopy(model)
    optimizer = OPTIMIZERS['adam']()
    optimizer.setup(resumed)
    step = compile_training_step(resumed, optimizer, batches[0],
                                 runtime_kwargs={'backend': then})
    chainer.serializers.load_npz(str(tmp_path / 'model.npz'), resumed)
    chainer.serializers.load_npz(str(tmp_path / 'optimizer.npz'), optimizer)
    assert optimizer.t == 2
    for x, t in batches[2:4]:
        step(x, t)
    _assert_same(_state(resumed, optimizer), straight, '%s then %s' % (first, then))


def test_unsupported_op_names_the_op_and_the_backend():
    class WithCumSum(chainer.Chain):
        def __init__(self):
            super().__init__()
            with self.init_scope():
                self.l1 = L.Linear(20, 5)

        def forward(self, x):
            return self.l1(F.cumsum(x, axis=1))

    model = L.Classifier(WithCumSum())
    optimizer = chainer.optimizers.SGD()
    optimizer.setup(model)
    x, t = _model_and_batches()[1][0]
    with pytest.raises(UnsupportedNativeOpsError) as info:
        compile_training_step(model, optimizer, (x, t), runtime_kwargs={'backend': 'native'})
    message = str(info.value)
    assert "backend 'native'" in message
    assert 'no C kernel for operator CumSum' in message


@pytest.mark.native_build
def test_a_parameter_that_cannot_be_updated_in_place_is_refused():
    model, batches, _, step = _native_step()
    step(*batches[0])
    weight = model.predictor.layers[0].W
    weight.array = numpy.asfortranarray(weight.array)  # same values, another layout
    before = weight.array.copy()
    with pytest.raises(InputValidationError, match="updated in place by the native library"):
        step(*batches[1])
    numpy.testing.assert_array_equal(weight.array, before)


@pytest.mark.native_build
def test_a_label_out_of_range_is_an_error():
    model, batches, _, step = _native_step()
    x, t = batches[0]
    t = t.copy()
    t[3] = 5  # five classes: 0..4
    before = model.predictor.layers[0].W.array.copy()
    with pytest.raises(RuntimeVMError, match='a class label out of range'):
        step(x, t)
    # The loss comes before any update: the parameters are untouched.
    numpy.testing.assert_array_equal(model.predictor.layers[0].W.array, before)


def _compile_onnx_trained(model, batches, backend, tmp_path):
    """A copy of ``model`` compiled with compile_onnx on ``backend`` (None:
    plain Chainer) and trained by Chainer's Adam on ``batches``."""
    model = copy.deepcopy(model)
    predictor = model.predictor
    if backend is not None:
        path = str(tmp_path / 'mlp.onnx')
        chainer_compiler.export(predictor, [batches[0][0]], path)
        predictor = chainer_compiler.compile_onnx(predictor, path,
                                                  runtime_kwargs={'backend': backend})
    classifier = L.Classifier(predictor)
    optimizer = OPTIMIZERS['adam']()
    optimizer.setup(classifier)
    for x, t in batches:
        optimizer.update(classifier, x, t)
    return classifier, optimizer


@pytest.mark.native_build
def test_compile_onnx_trains_natively(tmp_path):
    """compile_onnx's forward and backward programs run natively; Chainer's
    loss and optimizer train the model's own parameters."""
    model, batches = _model_and_batches()
    batches = batches[:STEPS]
    native = _state(*_compile_onnx_trained(model, batches, 'native', tmp_path))
    _assert_same(native, _state(*_compile_onnx_trained(model, batches, 'numpy', tmp_path)),
                 'compile_onnx native vs numpy')
    _assert_same(native, _state(*_compile_onnx_trained(model, batches, None, tmp_path)),
                 'compile_onnx native vs Chainer')


class LeNet(chainer.Chain):
    """LeNet-5's layers, small: convolutions (one padded), max pooling (one
    overlapping, with a stride), Linear layers."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.conv1 = L.Convolution2D(1, 3, 3)
            self.conv2 = L.Convolution2D(3, 4, 3, pad=1)
            self.fc = L.Linear(None, 5)

    def forward(self, x):
        h = F.max_pooling_2d(F.relu(self.conv1(x)), 2)
        h = F.max_pooling_2d(F.relu(self.conv2(h)), 3, stride=2)
        return self.fc(h)


@pytest.mark.parametrize('optimizer', ['momentum', 'adam'])
@pytest.mark.native_build
def test_lenet_steps_match_numpy_backend_and_chainer(optimizer):
    model, batches = _classifier_and_batches(LeNet, (4, 1, 12, 12), 5)
    model(*batches[0])  # initializes fc
    _assert_native_matches(model, optimizer, batches, 'LeNet')


class SmallResNet(chainer.Chain):
    """The ResNet-18-style CNN's pieces, small: convolutions with
    BatchNormalization (training mode: batch statistics, running averages
    updated), a residual sum, average pooling."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.conv1 = L.Convolution2D(2, 4, 3, pad=1, nobias=True)
            self.bn1 = L.BatchNormalization(4)
            self.conv2 = L.Convolution2D(4, 4, 3, pad=1, nobias=True)
            self.bn2 = L.BatchNormalization(4)
            self.fc = L.Linear(None, 5)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(h + self.bn2(self.conv2(h)))
        return self.fc(F.average_pooling_2d(h, 3, stride=2, pad=1))


@pytest.mark.parametrize('optimizer', ['sgd', 'adam'])
@pytest.mark.native_build
def test_batch_normalization_steps_match_numpy_backend_and_chainer(optimizer):
    model, batches = _classifier_and_batches(SmallResNet, (4, 2, 8, 8), 5)
    model(*batches[0])  # initializes fc
    native = _assert_native_matches(model, optimizer, batches, 'BatchNormalization')
    assert '/predictor/bn1/avg_mean' in native[0]


@pytest.mark.native_build
def test_a_bad_batch_after_good_ones_is_still_refused():
    # The step checks a batch signature once; a batch of another shape or
    # dtype after many good steps is checked, and refused before anything
    # changes.
    model, batches = _model_and_batches()
    model, optimizer, step = _trained(model, 'adam', batches[:2], 'native')
    before = copy.deepcopy(_state(model, optimizer))
    x, t = batches[2]
    with pytest.raises(InputValidationError, match=r"\(8, 10\), expected \('batch', 20\)"):
        step(x[:, :10], t)
    with pytest.raises(InputValidationError, match="has batch=8 on axis 0, but input "
                                                   "'input_0' has batch=4"):
        step(x[:4], t)
    with pytest.raises(InputValidationError, match='dtype float64'):
        step(x.astype(numpy.float64), t)
    with pytest.raises(InputValidationError, match='must be an array.*got list'):
        step(x.tolist(), t)
    arrays, counters = _state(model, optimizer)
    assert counters == before[1]
    for name, value in before[0].items():
        numpy.testing.assert_array_equal(arrays[name], value, err_msg=name)
    step(x, t)  # the good signature again
    assert optimizer.t == 3


class DropoutMLP(chainer.Chain):
    """An MLP with Dropout between its layers (two ratios)."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(20, 16)
            self.l2 = L.Linear(16, 16)
            self.l3 = L.Linear(16, 5)

    def forward(self, x):
        h = F.dropout(F.relu(self.l1(x)), 0.3)
        h = F.dropout(F.relu(self.l2(h)), 0.5)
        return self.l3(h)


def _dropout_trained(model, batches, backend, seed):
    """(state, losses, the generator's next draw) after training a copy of
    ``model`` with SGD from NumPy seed ``seed``: compiled on ``backend``, or
    by optimizer.update for 'chainer' (Chainer's dropout draws its mask from
    the same global generator)."""
    model = copy.deepcopy(model)
    optimizer = OPTIMIZERS['sgd']()
    optimizer.setup(model)
    step = None
    if backend != 'chainer':
        step = compile_training_step(model, optimizer, batches[0],
                                     runtime_kwargs={'backend': backend})
    numpy.random.seed(seed)
    losses = []
    for x, t in batches:
        if step is None:
            optimizer.update(model, x, t)
            losses.append(float(model.loss.array))
        else:
            losses.append(float(step(x, t)))
    return _state(model, optimizer), losses, numpy.random.rand()


@pytest.mark.native_build
def test_dropout_masks_are_the_numpy_vms():
    """The native step takes its Dropout masks' uniform numbers from NumPy's
    global generator, as the VM does: from one seed, the same masks, the
    same training, and the generator left where the VM leaves it."""
    model, batches = _classifier_and_batches(DropoutMLP, (8, 20), 5)
    native, native_losses, native_next = _dropout_trained(model, batches, 'native', 7)
    for other in ('numpy', 'chainer'):
        state, losses, next_draw = _dropout_trained(model, batches, other, 7)
        _assert_same(native, state, 'Dropout native vs %s' % other)
        numpy.testing.assert_allclose(native_losses, losses, rtol=RTOL)
        assert native_next == next_draw  # as many numbers drawn
    # The masks do depend on the seed (the test would see a wrong draw).
    _, other_losses, _ = _dropout_trained(model, batches, 'native', 8)
    assert not numpy.allclose(native_losses, other_losses, rtol=RTOL)


@pytest.mark.native_build
def test_compile_onnx_trains_with_dropout_natively(tmp_path):
    """compile_onnx's forward program draws the masks natively and keeps
    them for its native backward program."""
    model, batches = _classifier_and_batches(DropoutMLP, (8, 20), 5)
    states = {}
    for backend in ('native', 'numpy', None):
        numpy.random.seed(3)
        states[backend] = _state(*_compile_onnx_trained(model, batches, backend, tmp_path))
    _assert_same(states['native'], states['numpy'], 'compile_onnx Dropout native vs numpy')
    _assert_same(states['native'], states[None], 'compile_onnx Dropout native vs Chainer')


class LSTMClassifier(chainer.Chain):
    """benchmarks/models.py's NStepLSTM classifier, small: two layers over
    one sequence per batch row (F.separate: Gather), then a Linear layer on
    the last layer's final hidden state (hy[-1]: Gather again)."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.lstm = L.NStepLSTM(2, 4, 5, 0.0)
            self.fc = L.Linear(5, 3)

    def forward(self, x):
        hy, _, _ = self.lstm(None, None, list(F.separate(x, axis=0)))
        return self.fc(hy[-1])


@pytest.mark.native_build
def test_nstep_lstm_steps_match_numpy_backend_and_chainer():
    """Three Adam steps: LSTMGrad, SliceGrad and GatherGrad in C."""
    model, batches = _classifier_and_batches(LSTMClassifier, (3, 4, 4), 3)
    _assert_native_matches(model, 'adam', batches, 'NStepLSTM')


class LayerNormMLP(chainer.Chain):
    """A Transformer block's normalizations, small: LayerNormalization of a
    Linear layer's output and of a residual sum."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.fc1 = L.Linear(6, 8)
            self.norm1 = L.LayerNormalization(8)
            self.fc2 = L.Linear(8, 8)
            self.norm2 = L.LayerNormalization(8)
            self.out = L.Linear(8, 3)

    def forward(self, x):
        h = self.norm1(self.fc1(x))
        return self.out(self.norm2(h + F.relu(self.fc2(h))))


@pytest.mark.native_build
def test_layer_normalization_steps_match_numpy_backend_and_chainer():
    """Three Adam steps: LayerNormalizationGrad in C."""
    model, batches = _classifier_and_batches(LayerNormMLP, (5, 6), 3)
    _assert_native_matches(model, 'adam', batches, 'LayerNormalization')


@pytest.mark.parametrize('make', [
    # Narrow, one bottleneck block per stage; 64x64 inputs keep the last
    # stage's BatchNormalization over more than a couple of values (at 32x32
    # and batch 2 it normalizes 2 values, and the two backends' float32
    # rounding then differs by 4e-4 after one step; here by 1e-7).
    lambda: bench_models.ResNet50(width=8, blocks=(1, 1, 1, 1)),
    lambda: bench_models.VGG16(width=8, fc_width=32, image_size=64),
], ids=['resnet50', 'vgg16'])
@pytest.mark.native_build
def test_model_test_networks_match_numpy_backend_and_chainer(make):
    """The benchmark's ResNet-50 (bottlenecks, strided 1x1 convolutions,
    max and global average pooling) and VGG16, shrunk: MomentumSGD steps."""
    rng = numpy.random.RandomState(1)
    numpy.random.seed(0)
    model = L.Classifier(make())
    batches = [(rng.rand(4, 3, 64, 64).astype(numpy.float32),
                rng.randint(0, 10, 4).astype(numpy.int32)) for _ in range(2)]
    model(*batches[0])
    _assert_native_matches(model, 'momentum', batches, type(model.predictor).__name__)

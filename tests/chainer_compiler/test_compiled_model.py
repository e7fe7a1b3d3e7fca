"""compile_onnx / compile: the compiled Chain trains like the Chainer model."""
import os
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import onnx
import pytest

import chainer_compiler
from chainer_compiler.runtime import InputValidationError, NonFiniteError
from chainer_compiler.runtime.backend import BackendUnavailableError

#: These tests check the bridge, not the backend: the NumPy VM, where the
#: default ('auto') would build C for each model.
ON_THE_VM = {'backend': 'numpy'}

X = numpy.random.RandomState(0).uniform(-1, 1, (4, 6)).astype(numpy.float32)
T = numpy.array([0, 1, 2, 1], numpy.int32)


class Net(chainer.Chain):
    def __init__(self, dropout=0.0):
        super().__init__()
        self.dropout = dropout
        with self.init_scope():
            self.l1 = L.Linear(None, 5)
            self.bn = L.BatchNormalization(5)
            self.l2 = L.Linear(None, 3)

    def forward(self, x):
        return self.l2(F.dropout(F.relu(self.bn(self.l1(x))), self.dropout))


def _exported(tmp_path, model=None, x=X):
    model = model or Net()
    with chainer.using_config('train', False):
        model(x)  # initialize the lazily shaped parameters
    return model, chainer_compiler.export(model, [x], str(tmp_path / 'net.onnx'))


def _twin(model, fresh):
    with chainer.using_config('train', False):
        fresh(X)
    fresh.copyparams(model)
    for name in ('avg_mean', 'avg_var'):
        getattr(fresh.bn, name)[...] = getattr(model.bn, name)
    return fresh


def test_gradients_and_running_averages_match_chainer(tmp_path):
    model, path = _exported(tmp_path)
    compiled = chainer_compiler.compile_onnx(_twin(model, Net()), path, 'onnx_chainer',
                                             runtime_kwargs=ON_THE_VM)
    for m in (model, compiled):
        m.cleargrads()
        F.softmax_cross_entropy(m(X), T).backward()
    for (name, p), (_, q) in zip(sorted(model.namedparams()), sorted(compiled.namedparams())):
        numpy.testing.assert_allclose(q.grad, p.grad, rtol=1e-4, atol=1e-6, err_msg=name)
    numpy.testing.assert_allclose(compiled.bn.avg_mean, model.bn.avg_mean, rtol=1e-5, atol=1e-7)
    numpy.testing.assert_allclose(compiled.bn.avg_var, model.bn.avg_var, rtol=1e-5, atol=1e-7)


class _BatchNormTwice(Net):
    def forward(self, x):
        return self.l2(self.bn(F.relu(self.bn(self.l1(x)))))


def test_a_batch_normalization_link_called_twice_trains_as_in_chainer(tmp_path):
    """Both calls update the running averages, the second from the first's result."""
    model, path = _exported(tmp_path, _BatchNormTwice())
    compiled = chainer_compiler.compile_onnx(_twin(model, _BatchNormTwice()), path,
                                             'onnx_chainer', runtime_kwargs=ON_THE_VM)
    for m in (model, compiled):
        m.cleargrads()
        F.softmax_cross_entropy(m(X), T).backward()
    for (name, p), (_, q) in zip(sorted(model.namedparams()), sorted(compiled.namedparams())):
        numpy.testing.assert_allclose(q.grad, p.grad, rtol=1e-4, atol=1e-6, err_msg=name)
    numpy.testing.assert_allclose(compiled.bn.avg_mean, model.bn.avg_mean, rtol=1e-5, atol=1e-7)
    numpy.testing.assert_allclose(compiled.bn.avg_var, model.bn.avg_var, rtol=1e-5, atol=1e-7)


def test_evaluation_runs_the_inference_program(tmp_path):
    model, path = _exported(tmp_path)
    compiled = chainer_compiler.compile_onnx(_twin(model, Net()), path, 'onnx_chainer',
                                             runtime_kwargs=ON_THE_VM)
    with chainer.using_config('train', False):
        y = compiled(X)
        numpy.testing.assert_allclose(y.array, model(X).array, rtol=1e-5, atol=1e-6)
    assert y.creator is None  # no backward bookkeeping


def test_parameters_are_the_models_own_under_the_same_paths(tmp_path):
    model, path = _exported(tmp_path)
    fresh = _twin(model, Net())
    compiled = chainer_compiler.compile_onnx(fresh, path, 'onnx_chainer', runtime_kwargs=ON_THE_VM)
    assert sorted(n for n, _ in compiled.namedparams()) == sorted(n for n, _ in fresh.namedparams())
    assert all(p is q for (_, p), (_, q) in zip(sorted(compiled.namedparams()),
                                              sorted(fresh.namedparams())))
    optimizer = chainer.optimizers.MomentumSGD(0.1)
    optimizer.setup(L.Classifier(compiled))
    optimizer.add_hook(chainer.optimizer_hooks.WeightDecay(1e-4))
    optimizer.add_hook(chainer.optimizer_hooks.GradientClipping(1.0))
    before = fresh.l1.W.array.copy()
    optimizer.update(optimizer.target, X, T)
    assert not numpy.array_equal(before, fresh.l1.W.array)
    # Serialized compiled and plain models are interchangeable.
    saved = str(tmp_path / 'compiled.npz')
    chainer.serializers.save_npz(saved, compiled)
    plain = Net()
    with chainer.using_config('train', False):
        plain(X)
    chainer.serializers.load_npz(saved, plain)
    numpy.testing.assert_array_equal(plain.l1.W.array, fresh.l1.W.array)
    numpy.testing.assert_array_equal(plain.bn.avg_mean, fresh.bn.avg_mean)


def test_uninitialized_parameters_take_the_files_shapes(tmp_path):
    _, path = _exported(tmp_path)
    fresh = Net()
    assert fresh.l1.W.array is None
    compiled = chainer_compiler.compile_onnx(fresh, path, 'onnx_chainer', runtime_kwargs=ON_THE_VM)
    assert fresh.l1.W.shape == (5, 6)
    compiled(X)


def test_dropout_is_random_in_training_and_off_in_evaluation(tmp_path):
    model, path = _exported(tmp_path, Net(dropout=0.5))
    compiled = chainer_compiler.compile_onnx(_twin(model, Net(dropout=0.5)), path, 'onnx_chainer',
                                             runtime_kwargs=ON_THE_VM)
    with chainer.using_config('train', False):
        numpy.testing.assert_allclose(compiled(X).array, model(X).array, rtol=1e-5, atol=1e-6)
    # Two draws agree on the ~10 values ReLU passes one time in ~2**10: compare several.
    first, *others = (compiled(X).array for _ in range(6))
    assert any(not numpy.allclose(first, other) for other in others)


def test_recompute_policy_gives_the_same_gradients(tmp_path):
    model, path = _exported(tmp_path)
    grads = []
    for order in (None, 'gt'):
        compiled = chainer_compiler.compile_onnx(_twin(model, Net()), path, 'onnx_chainer',
                                                 computation_order=order, runtime_kwargs=ON_THE_VM)
        F.softmax_cross_entropy(compiled(X), T).backward()
        grads.append(compiled.l1.W.grad)
    numpy.testing.assert_allclose(grads[1], grads[0], rtol=1e-5, atol=1e-7)


def test_unknown_recompute_policy_is_a_clear_error(tmp_path):
    model, path = _exported(tmp_path)
    with pytest.raises(ValueError, match="unknown computation_order 'fastest'"):
        chainer_compiler.compile_onnx(_twin(model, Net()), path, 'onnx_chainer',
                                      computation_order='fastest', runtime_kwargs=ON_THE_VM)


def test_wrong_batch_size_names_fixed_batch_dataset(tmp_path):
    model, path = _exported(tmp_path)
    compiled = chainer_compiler.compile_onnx(_twin(model, Net()), path, 'onnx_chainer',
                                             runtime_kwargs=ON_THE_VM)
    with pytest.raises(InputValidationError, match='batch size 3.*batch size 4.*FixedBatchDataset'):
        compiled(X[:3])


@pytest.mark.parametrize('train', [True, False])
def test_inputs_are_checked_again_after_an_accepted_batch(tmp_path, train):
    # A signature once accepted is not checked again; another one still is.
    model, path = _exported(tmp_path)
    compiled = chainer_compiler.compile_onnx(_twin(model, Net()), path, 'onnx_chainer',
                                             runtime_kwargs=ON_THE_VM)
    with chainer.using_config('train', train):
        compiled(X)
        compiled(X)
        with pytest.raises(InputValidationError, match='batch size 3.*FixedBatchDataset'):
            compiled(X[:3])
        with pytest.raises(InputValidationError, match='float64'):
            compiled(X.astype(numpy.float64))


def test_wrong_input_count_and_dtype_are_clear_errors(tmp_path):
    model, path = _exported(tmp_path)
    compiled = chainer_compiler.compile_onnx(_twin(model, Net()), path, 'onnx_chainer',
                                             runtime_kwargs=ON_THE_VM)
    with pytest.raises(TypeError, match='takes 1 input'):
        compiled(X, X)
    with pytest.raises(InputValidationError, match='dtype float64, expected float32'):
        with chainer.using_config('train', False):
            compiled(X.astype(numpy.float64))


@pytest.mark.parametrize('train', [True, False], ids=['training', 'evaluation'])
def test_refused_calls_change_nothing(tmp_path, train):
    model, path = _exported(tmp_path)
    compiled = chainer_compiler.compile_onnx(_twin(model, Net()), path, 'onnx_chainer',
                                             runtime_kwargs=ON_THE_VM)
    before = {name: numpy.copy(value) for name, value in _state(compiled)}
    with chainer.using_config('train', train):
        for bad in (X.tolist(), None, 1.0, X.astype(numpy.float64), X[:3], X[:, :4],
                    chainer.Variable(X.astype(numpy.float64))):
            with pytest.raises(InputValidationError, match="input '?input_0'? "):
                compiled(bad)
    for name, value in _state(compiled):
        numpy.testing.assert_array_equal(value, before[name], err_msg=name)


def _state(model):
    """Every parameter and persistent array of ``model``, by path."""
    arrays = [(name, p.array) for name, p in model.namedparams()]
    return arrays + [('%s/%s' % (path, name), getattr(link, name))
                     for path, link in model.namedlinks() for name in link._persistent]


def test_a_file_that_does_not_match_the_model_is_refused(tmp_path):
    _, path = _exported(tmp_path)

    class Wider(chainer.Chain):
        def __init__(self):
            super().__init__()
            with self.init_scope():
                self.l1 = L.Linear(6, 5)
                self.bn = L.BatchNormalization(5)
                self.l2 = L.Linear(5, 7)

    with pytest.raises(chainer_compiler.ModelMismatchError, match=r'/l2/W.*\(3, 5\).*\(7, 5\)'):
        chainer_compiler.compile_onnx(Wider(), path, 'onnx_chainer', runtime_kwargs=ON_THE_VM)

    class Renamed(chainer.Chain):
        def __init__(self):
            super().__init__()
            with self.init_scope():
                self.other = L.Linear(6, 3)

    with pytest.raises(chainer_compiler.ModelMismatchError, match='/l1/W: the model has no such'):
        chainer_compiler.compile_onnx(Renamed(), path, 'onnx_chainer', runtime_kwargs=ON_THE_VM)


class _FirstLayer(chainer.Chain):
    """Net's first layer alone: its file lacks /bn/* and /l2/*."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(None, 5)

    def forward(self, x):
        return self.l1(x)


class _NoParameters(chainer.Chain):
    def forward(self, x):
        return F.relu(x)


@pytest.mark.parametrize('exported, missing', [
    (_FirstLayer, ['/bn/avg_mean', '/bn/avg_var', '/bn/beta', '/bn/gamma', '/l2/W', '/l2/b']),
    (_NoParameters, ['/bn/avg_mean', '/bn/avg_var', '/bn/beta', '/bn/gamma',
                     '/l1/W', '/l1/b', '/l2/W', '/l2/b']),
], ids=['first-layer-only', 'no-parameters'])
def test_a_file_lacking_the_models_parameters_is_refused(tmp_path, exported, missing):
    _, path = _exported(tmp_path, exported())
    fresh = Net()
    with pytest.raises(chainer_compiler.ModelMismatchError) as info:
        chainer_compiler.compile_onnx(fresh, path, 'onnx_chainer', runtime_kwargs=ON_THE_VM)
    lines = str(info.value).splitlines()
    assert lines[0] == '%s does not match the model Net:' % path
    # Each parameter and persistent array, not BatchNormalization's counter N.
    assert lines[1:] == ['  %s: missing in the file' % name for name in missing]
    assert fresh.l1.W.array is None  # refused before anything was initialized


def test_every_mismatch_is_listed_in_one_error(tmp_path):
    _, path = _exported(tmp_path)

    class Other(chainer.Chain):
        def __init__(self):
            super().__init__()
            with self.init_scope():
                self.l1 = L.Linear(6, 5)
                self.bn = L.BatchNormalization(5)
                self.l3 = L.Linear(5, 3)  # where the file has l2
                self.bn.add_persistent('extra', numpy.zeros(2, numpy.float32))
                self.l1.W.array = self.l1.W.array.astype(numpy.float64)

    with pytest.raises(chainer_compiler.ModelMismatchError) as info:
        chainer_compiler.compile_onnx(Other(), path, 'onnx_chainer', runtime_kwargs=ON_THE_VM)
    assert str(info.value).splitlines()[1:] == [
        '  /bn/extra: missing in the file',
        '  /l1/W: the file has float32 (5, 6), the model float64 (5, 6)',
        '  /l2/W: the model has no such parameter',
        '  /l2/b: the model has no such parameter',
        '  /l3/W: missing in the file',
        '  /l3/b: missing in the file']


def test_unused_parameters_travel_in_the_file(tmp_path):
    class WithUnused(Net):
        def __init__(self):
            super().__init__()
            with self.init_scope():
                self.unused = L.Linear(2, 2)

    with pytest.warns(UserWarning, match='not used by the exported graph: /unused/W'):
        _, path = _exported(tmp_path, WithUnused())
    fresh = WithUnused()
    compiled = chainer_compiler.compile_onnx(fresh, path, 'onnx_chainer', runtime_kwargs=ON_THE_VM)
    fresh.cleargrads()
    F.sum(compiled(X)).backward()
    assert fresh.l1.W.grad is not None and fresh.unused.W.grad is None  # as Chainer leaves it


def test_a_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(chainer_compiler.InvalidModelError, match='nope.onnx does not exist'):
        chainer_compiler.compile_onnx(Net(), str(tmp_path / 'nope.onnx'), 'onnx_chainer',
                                      runtime_kwargs=ON_THE_VM)


def test_a_file_from_another_translator_is_refused_naming_both(tmp_path):
    model, path = _exported(tmp_path)
    with pytest.raises(ValueError, match="net.onnx was exported by translator 'onnx_chainer'"
                                         ".*used_translator='ch2o'"):
        chainer_compiler.compile_onnx(_twin(model, Net()), path, 'ch2o', runtime_kwargs=ON_THE_VM)
    with pytest.raises(ValueError, match="unknown translator 'tf2onnx'"):
        chainer_compiler.compile_onnx(_twin(model, Net()), path, 'tf2onnx',
                                      runtime_kwargs=ON_THE_VM)


def test_a_file_that_records_no_translator_is_accepted(tmp_path):
    model, path = _exported(tmp_path)
    proto = onnx.load(path)
    del proto.metadata_props[:]  # as another tool would write it
    onnx.save(proto, path)
    compiled = chainer_compiler.compile_onnx(_twin(model, Net()), path, 'ch2o',
                                             runtime_kwargs=ON_THE_VM)
    with chainer.using_config('train', False):
        numpy.testing.assert_allclose(compiled(X).array, model(X).array, rtol=1e-5, atol=1e-6)


def test_dump_onnx_writes_forward_and_backward_graphs(tmp_path, capsys):
    model, path = _exported(tmp_path)
    compiled = chainer_compiler.compile_onnx(_twin(model, Net()), path, 'onnx_chainer',
                                             dump_onnx=True, runtime_kwargs=ON_THE_VM)
    compiled(X)
    for part in ('forward', 'backward'):
        dumped = onnx.load(str(tmp_path / ('net.%s.onnx' % part)))
        assert len(dumped.graph.node) > 0
    assert 'backward graph' in capsys.readouterr().out


def test_runtime_kwargs_reach_the_vm(tmp_path):
    class Logs(chainer.Chain):
        def forward(self, x):
            return F.log(x)

    path = chainer_compiler.export(Logs(), [X], str(tmp_path / 'log.onnx'))
    compiled = chainer_compiler.compile_onnx(Logs(), path, 'onnx_chainer',
                                             runtime_kwargs={'check_nans': True})
    with numpy.errstate(invalid='ignore'), pytest.raises(NonFiniteError, match='Log'):
        compiled(X)


@pytest.mark.parametrize('runtime_kwargs, error, message', [
    ({'backend': 'bogus'}, BackendUnavailableError, "unknown backend 'bogus'"),
    ({'check_nan': True}, TypeError, 'unknown runtime_kwargs check_nan'),
])
def test_bad_runtime_kwargs_are_refused_by_the_call(tmp_path, runtime_kwargs, error, message):
    model, path = _exported(tmp_path)
    with pytest.raises(error, match=message):
        chainer_compiler.compile_onnx(_twin(model, Net()), path, 'onnx_chainer',
                                      runtime_kwargs=runtime_kwargs)


def test_compile_exports_and_compiles_in_one_call():
    model = Net()
    with chainer.using_config('train', False):
        model(X)
    compiled = chainer_compiler.compile(model, [X], runtime_kwargs=ON_THE_VM)
    F.softmax_cross_entropy(compiled(X), T).backward()
    assert model.l1.W.grad is not None


def test_fixed_batch_dataset_pads_with_ignored_labels():
    data = chainer.datasets.TupleDataset(numpy.arange(10, dtype=numpy.float32).reshape(5, 2),
                                         numpy.arange(5, dtype=numpy.int32))
    padded = chainer_compiler.FixedBatchDataset(data, 4)
    assert len(padded) == 8
    assert padded[4][1] == 4 and padded[7][1] == -1
    numpy.testing.assert_array_equal(padded[7][0], data[0][0])
    logits = numpy.random.RandomState(0).standard_normal((8, 5)).astype(numpy.float32)
    labels = numpy.array([padded[i][1] for i in range(8)], numpy.int32)
    loss = F.softmax_cross_entropy(logits, labels)
    expected = F.softmax_cross_entropy(logits[:5], labels[:5])
    assert float(loss.array) == pytest.approx(float(expected.array))


def test_allocators_say_once_that_they_have_nothing_to_do_without_cupy():
    from chainer_compiler.runtime import cupy_unavailable_reason
    if cupy_unavailable_reason() is None:
        pytest.skip('CuPy is usable here')
    with pytest.warns(UserWarning, match='use_unified_memory_allocator has nothing to do'):
        assert chainer_compiler.use_unified_memory_allocator() is False
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        assert chainer_compiler.use_unified_memory_allocator() is False  # said once


@pytest.mark.slow  # decompresses all 70000 images (seconds)
def test_get_mnist_loads_offline_like_chainer():
    train, test = chainer_compiler.get_mnist()
    assert (len(train), len(test)) == (60000, 10000)
    x, t = train[0]
    assert x.shape == (784,) and x.dtype == numpy.float32 and t.dtype == numpy.int32
    assert 0 <= x.min() and x.max() <= 1


def test_mnist_pickle_loader_refuses_anything_but_arrays(tmp_path):
    import gzip
    import pickle
    path = str(tmp_path / 'evil.pkl.gz')
    with gzip.open(path, 'wb') as f:
        pickle.dump(os.system, f)
    from chainer_compiler.datasets import load_array_pickle
    with pytest.raises(pickle.UnpicklingError, match='refusing to load'):
        load_array_pickle(path)


def test_peak_bytes_are_reported_when_tracked(tmp_path):
    model, path = _exported(tmp_path)
    compiled = chainer_compiler.compile_onnx(_twin(model, Net()), path, 'onnx_chainer',
                                             runtime_kwargs={'track_memory': True})
    F.sum(compiled(X)).backward()
    assert compiled.peak_bytes() >= X.nbytes


def test_trainer_snapshots_resume_a_compiled_model(tmp_path):
    model, path = _exported(tmp_path)
    data = chainer.datasets.TupleDataset(numpy.tile(X, (2, 1)), numpy.tile(T, 2))

    def trainer_for(out):
        compiled = chainer_compiler.compile_onnx(_twin(model, Net()), path, 'onnx_chainer',
                                                 runtime_kwargs=ON_THE_VM)
        optimizer = chainer.optimizers.Adam()
        optimizer.setup(L.Classifier(compiled))
        iterator = chainer.iterators.SerialIterator(data, 4, shuffle=False)
        updater = chainer.training.updaters.StandardUpdater(iterator, optimizer)
        trainer = chainer.training.Trainer(updater, (2, 'iteration'), out=out)
        trainer.extend(chainer.training.extensions.snapshot(), trigger=(2, 'iteration'))
        return trainer, compiled

    trainer, trained = trainer_for(str(tmp_path / 'a'))
    trainer.run()
    resumed_trainer, resumed = trainer_for(str(tmp_path / 'b'))
    chainer.serializers.load_npz(str(tmp_path / 'a' / 'snapshot_iter_2'), resumed_trainer)
    assert resumed_trainer.updater.iteration == 2
    numpy.testing.assert_array_equal(resumed.l1.W.array, trained.l1.W.array)
    numpy.testing.assert_array_equal(resumed.bn.avg_mean, trained.bn.avg_mean)


def _count_compiles(monkeypatch):
    """{'training': n, 'inference': n}: the programs compiled from now on."""
    from chainer_compiler import compiled_model, training
    counts = {'training': 0, 'inference': 0}

    def counting(kind, compile_programs):
        def wrapper(*args, **kwargs):
            counts[kind] += 1
            return compile_programs(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(compiled_model, 'compile_training',
                        counting('training', compiled_model.compile_training))
    monkeypatch.setattr(training, 'compile_inference',
                        counting('inference', training.compile_inference))
    return counts


def test_compile_onnx_compiles_at_the_call_and_batches_do_not(tmp_path, monkeypatch):
    model, path = _exported(tmp_path)
    counts = _count_compiles(monkeypatch)
    compiled = chainer_compiler.compile_onnx(_twin(model, Net()), path, 'onnx_chainer',
                                             runtime_kwargs=ON_THE_VM)
    assert counts == {'training': 1, 'inference': 1}
    F.softmax_cross_entropy(compiled(X), T).backward()
    with chainer.using_config('train', False):
        compiled(X)
    assert counts == {'training': 1, 'inference': 1}


def test_compile_onnx_logs_what_it_compiles(tmp_path, caplog):
    model, path = _exported(tmp_path)
    with caplog.at_level('INFO', logger='chainer_compiler'):
        chainer_compiler.compile_onnx(_twin(model, Net()), path, 'onnx_chainer',
                                      computation_order='gt', runtime_kwargs=ON_THE_VM)
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith('compiled the training programs of %s in ' % path)
               for m in messages), messages
    assert any(m.startswith("planned computation_order 'gt' in ") for m in messages), messages


def test_a_budget_below_the_least_peak_is_refused_by_the_call(tmp_path):
    model, path = _exported(tmp_path)
    fresh = _twin(model, Net())
    before = {name: numpy.copy(value) for name, value in _state(fresh)}
    with pytest.raises(ValueError, match="memory_budget 64 bytes is below the smallest peak "
                                         "computation_order 'gt' reaches"):
        chainer_compiler.compile_onnx(fresh, path, 'onnx_chainer', computation_order='gt',
                                      compiler_kwargs={'memory_budget': 64},
                                      runtime_kwargs=ON_THE_VM)
    for name, value in _state(fresh):
        numpy.testing.assert_array_equal(value, before[name], err_msg=name)

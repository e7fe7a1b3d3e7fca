"""compile_onnx(..., pack_parameters=True): the optimizer sees one flat
Parameter, trains as Chainer does, and the model keeps its own arrays,
paths and snapshots."""
import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainer_compiler
from chainer_compiler.parameter_pack import ParameterPack

#: These tests check the bridge, not the backend: the NumPy VM, where the
#: default ('auto') would build C for each model.
ON_THE_VM = {'backend': 'numpy'}

X = numpy.random.RandomState(0).uniform(-1, 1, (4, 6)).astype(numpy.float32)
T = numpy.array([0, 1, 2, 1], numpy.int32)


class Net(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            # No bias before BatchNormalization: its gradient would be zero
            # but for rounding, which Adam's steps of about alpha magnify.
            self.l1 = L.Linear(6, 5, nobias=True)
            self.bn = L.BatchNormalization(5)
            self.l2 = L.Linear(5, 3)

    def forward(self, x):
        return self.l2(F.relu(self.bn(self.l1(x))))


def _model_and_file(tmp_path):
    numpy.random.seed(1)
    model = Net()
    path = chainer_compiler.export(model, [X], str(tmp_path / 'net.onnx'))
    return model, path


def _packed(model, path, backend='numpy'):
    return chainer_compiler.compile_onnx(model.copy(mode='copy'), path,
                                         runtime_kwargs={'backend': backend},
                                         pack_parameters=True)


def _train(classifier, steps=3):
    opt = chainer.optimizers.Adam(alpha=0.01)
    opt.setup(classifier)
    opt.add_hook(chainer.optimizer_hooks.WeightDecay(1e-3))
    for _ in range(steps):
        opt.update(classifier, X, T)
    return opt


@pytest.mark.parametrize('backend', ['numpy',
                                     pytest.param('native', marks=pytest.mark.native_build)])
def test_packed_training_matches_chainer(tmp_path, backend):
    model, path = _model_and_file(tmp_path)
    compiled = _packed(model, path, backend)
    assert [name for name, _ in compiled.namedparams()] == ['/packed_parameters']
    _train(L.Classifier(model))
    opt = _train(L.Classifier(compiled))
    assert opt.t == 3
    packed_model = compiled._model
    for (name, p), (_, q) in zip(sorted(model.namedparams()), sorted(packed_model.namedparams())):
        numpy.testing.assert_allclose(q.array, p.array, rtol=1e-4, atol=1e-6, err_msg=name)
    for name in ('avg_mean', 'avg_var'):
        numpy.testing.assert_allclose(getattr(packed_model.bn, name), getattr(model.bn, name),
                                      rtol=1e-5, atol=1e-7)


def test_model_parameters_are_views_of_the_packed_one(tmp_path):
    model, path = _model_and_file(tmp_path)
    before = {name: p.array.copy() for name, p in model.namedparams()}
    compiled = chainer_compiler.compile_onnx(model, path, pack_parameters=True,
                                             runtime_kwargs=ON_THE_VM)
    flat = compiled.packed_parameters.array
    assert flat.size == sum(a.size for a in before.values())
    for name, p in model.namedparams():
        numpy.testing.assert_array_equal(p.array, before[name], err_msg=name)
        assert numpy.shares_memory(p.array, flat), name
    flat[...] = 0.5
    assert (model.l1.W.array == 0.5).all()
    loss = F.sum(compiled(X))
    loss.backward()
    assert compiled.packed_parameters.grad.shape == flat.shape
    # l2's bias gradient is the batch size for the sum of the outputs.
    numpy.testing.assert_allclose(compiled.packed_parameters.grad[-3:], len(X))


def test_evaluation_uses_the_packed_arrays(tmp_path):
    model, path = _model_and_file(tmp_path)
    compiled = _packed(model, path)
    with chainer.using_config('train', False):
        numpy.testing.assert_allclose(compiled(X).array, model(X).array, rtol=1e-5, atol=1e-6)


def test_snapshots_keep_the_models_paths_both_ways(tmp_path):
    model, path = _model_and_file(tmp_path)
    compiled = _packed(model, path)
    _train(L.Classifier(compiled), steps=1)
    chainer.serializers.save_npz(str(tmp_path / 'packed.npz'), compiled)
    chainer.serializers.save_npz(str(tmp_path / 'plain.npz'), model)
    with numpy.load(str(tmp_path / 'packed.npz')) as packed, \
            numpy.load(str(tmp_path / 'plain.npz')) as plain:
        assert sorted(packed.files) == sorted(plain.files)
    # The packed snapshot resumes a plain model ...
    plain = Net()
    chainer.serializers.load_npz(str(tmp_path / 'packed.npz'), plain)
    for (name, p), (_, q) in zip(sorted(compiled._model.namedparams()),
                                 sorted(plain.namedparams())):
        numpy.testing.assert_array_equal(q.array, p.array, err_msg=name)
    # ... and a plain snapshot loads into the packed array in place.
    flat = compiled.packed_parameters.array
    chainer.serializers.load_npz(str(tmp_path / 'plain.npz'), compiled)
    assert compiled.packed_parameters.array is flat
    numpy.testing.assert_array_equal(compiled._model.l1.W.array, model.l1.W.array)
    assert numpy.shares_memory(compiled._model.l1.W.array, flat)


def test_parameters_of_mixed_dtypes_are_refused_naming_them():
    params = {'/a': chainer.Parameter(numpy.zeros(3, numpy.float32)),
              '/b': chainer.Parameter(numpy.zeros(2, numpy.float64))}
    with pytest.raises(ValueError, match='one floating dtype, got float32, float64'):
        ParameterPack(params)
    assert params['/a'].array.dtype == numpy.float32  # nothing was changed


def test_nothing_to_pack_and_gpu_arrays_are_refused(tmp_path):
    with pytest.raises(ValueError, match='no parameters to pack'):
        ParameterPack({})
    model, path = _model_and_file(tmp_path)
    with pytest.raises(ValueError, match='numpy or native backend, not cupy'):
        chainer_compiler.compile_onnx(model, path, runtime_kwargs={'backend': 'cupy'},
                                      pack_parameters=True)
    assert not any(numpy.shares_memory(p.array, q.array)
                   for p in model.params() for q in model.params() if p is not q)


def test_a_missing_gradient_packs_as_zeros():
    pack = ParameterPack({'/a': chainer.Parameter(numpy.ones((2, 2), numpy.float32)),
                          '/b': chainer.Parameter(numpy.ones(3, numpy.float32))})
    flat = pack.gather({'/a': numpy.full((2, 2), 2, numpy.float32)})
    numpy.testing.assert_array_equal(flat, [2, 2, 2, 2, 0, 0, 0])
    flat = pack.gather({'/a': numpy.full((2, 2), 2, numpy.float32),
                        '/b': numpy.arange(3, dtype=numpy.float32)})
    numpy.testing.assert_array_equal(flat, [2, 2, 2, 2, 0, 1, 2])

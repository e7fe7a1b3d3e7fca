"""Converters of chainer.functions.noise."""
import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import onnx
import onnxruntime
import pytest
from onnx import numpy_helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime import Executor
from chainer_compiler.translators.onnx_chainer import export_model

from .helpers import OPSETS, FunctionModel, check_export, op_types


def _rand(*shape, seed=0):
    return numpy.random.RandomState(seed).uniform(-1, 1, shape).astype(numpy.float32)


# onnxruntime 1.31 has no kernel for RandomUniform(Like)/RandomNormal(Like)
# from opset 22 (their bfloat16 revision); only our VM runs those there.
ORT_HAS_RANDOM_UNTIL = 21


def _run_both(proto, feeds, onnxruntime_too=True):
    """Outputs of onnxruntime and of the VM (random ops: no Chainer
    reference to compare with)."""
    onnx.checker.check_model(proto)
    names = [v.name for v in proto.graph.input]
    results = []
    if onnxruntime_too:
        session = onnxruntime.InferenceSession(proto.SerializeToString(),
                                               providers=['CPUExecutionProvider'])
        results.append(session.run(None, dict(zip(names, feeds))))
    vm = Executor(build_program(proto), backend='numpy').run(dict(zip(names, feeds)))
    results.append([vm[v.name] for v in proto.graph.output])
    return results


class _DropoutMLP(chainer.Chain):
    def __init__(self, ratio=0.5):
        super().__init__()
        self.ratio = ratio
        with self.init_scope():
            self.l1 = L.Linear(6, 5)

    def forward(self, x):
        return F.relu(F.dropout(self.l1(x), self.ratio))


def test_dropout_inference_export_keeps_an_identity_dropout_with_its_ratio():
    # Chainer records nothing for F.dropout outside training; the export keeps
    # an ONNX Dropout (the identity here) so compile_onnx can train with it.
    models = check_export(_DropoutMLP(), _rand(3, 6))
    for model in models:
        assert op_types(model) == ['Gemm', 'Dropout', 'Relu']
        dropout = model.graph.node[1]
        ratio = next((a.f for a in dropout.attribute if a.name == 'ratio'), None)
        if ratio is None:  # opset >= 12: the ratio is an input
            ratio = float(numpy_helper.to_array(
                next(t for t in model.graph.initializer if t.name == dropout.input[1])))
        assert ratio == pytest.approx(0.5)


@pytest.mark.parametrize('opset', [op for op in OPSETS if op >= 12] + [12])
@pytest.mark.parametrize('ratio', [0.0, 0.3, 0.75])
def test_dropout_training(opset, ratio):
    x = numpy.abs(_rand(40, 50)) + 0.5
    proto = export_model(FunctionModel(lambda v: F.dropout(v, ratio)), x,
                         opset_version=opset, train=True)
    assert op_types(proto) == ['Dropout']
    for y, in _run_both(proto, [x]):
        kept = y != 0
        numpy.testing.assert_allclose(y[kept], x[kept] / (1 - ratio), rtol=1e-6)
        assert abs(1 - kept.mean() - ratio) < 0.06


def test_dropout_training_needs_opset_12():
    with pytest.raises(ValueError, match='Dropout.*opset 12'):
        export_model(FunctionModel(lambda v: F.dropout(v, 0.5)), _rand(3, 4),
                     opset_version=11, train=True)


def test_zoneout_inference_is_x():
    h, x = _rand(3, 4, seed=1), _rand(3, 4, seed=2)
    models = check_export(lambda a, b: F.zoneout(a, b, 0.5) * 1, (h, x))
    assert 'RandomUniformLike' not in op_types(models[0])


@pytest.mark.parametrize('opset', OPSETS)
def test_zoneout_training(opset):
    h, x = _rand(40, 50, seed=1), _rand(40, 50, seed=2)
    proto = export_model(FunctionModel(lambda a, b: F.zoneout(a, b, 0.3)), (h, x),
                         opset_version=opset, train=True)
    for y, in _run_both(proto, [h, x]):
        from_h = y == h
        assert numpy.all(from_h | (y == x))
        assert abs(from_h.mean() - 0.3) < 0.06


def test_gaussian_with_tiny_variance_is_its_mean():
    mean = _rand(3, 4)
    ln_var = numpy.full((3, 4), -80, dtype=numpy.float32)
    check_export(F.gaussian, (mean, ln_var), opsets=[op for op in OPSETS if op <= 21])
    check_export(F.gaussian, (mean, ln_var), opsets=[op for op in OPSETS if op > 21],
                 runtimes=('vm',))


@pytest.mark.parametrize('opset', OPSETS)
def test_gaussian_samples(opset):
    mean = numpy.full((200, 100), 2.0, dtype=numpy.float32)
    ln_var = numpy.full((200, 100), numpy.log(0.25), dtype=numpy.float32)
    proto = export_model(FunctionModel(F.gaussian), (mean, ln_var), opset_version=opset)
    for y, in _run_both(proto, [mean, ln_var], onnxruntime_too=opset <= ORT_HAS_RANDOM_UNTIL):
        # 20,000 draws: the mean's standard error is 0.0035 and the standard
        # deviation's 0.0025; four of them bound a correct sampler.
        assert abs(y.mean() - 2.0) < 0.015
        assert abs(y.std() - 0.5) < 0.01


@pytest.mark.parametrize('bias', [True, False])
def test_simplified_dropconnect_without_training(bias):
    model = L.SimplifiedDropconnect(6, 4, ratio=0.5, nobias=not bias)
    models = check_export(lambda x: model(x, train=False), _rand(3, 6))
    assert op_types(models[0]) == ['Gemm']


@pytest.mark.parametrize('opset', OPSETS)
@pytest.mark.parametrize('batchwise', [True, False])
@pytest.mark.parametrize('bias', [True, False])
def test_simplified_dropconnect_training(opset, batchwise, bias):
    """Every output is a sum over kept connections: with all-ones x and W
    (and b = 0), y counts the kept ones scaled by 1 / (1 - ratio)."""
    n_in, ratio = 400, 0.25
    model = L.SimplifiedDropconnect(n_in, 3, ratio=ratio, initialW=1.0, nobias=not bias)
    x = numpy.ones((5, n_in), dtype=numpy.float32)
    proto = export_model(
        FunctionModel(lambda v: model(v, train=True, use_batchwise_mask=batchwise)), x,
        opset_version=opset, train=True)
    for y, in _run_both(proto, [x]):
        assert y.shape == (5, 3)
        kept = y * (1 - ratio)
        numpy.testing.assert_allclose(kept, numpy.round(kept), atol=1e-3)
        assert numpy.all(numpy.abs(kept / n_in - (1 - ratio)) < 0.1)
        if not batchwise:
            numpy.testing.assert_allclose(y, numpy.broadcast_to(y[:1], y.shape), rtol=1e-6)


def test_dropout_imported_by_name_is_recorded_too():
    # Chainer's own VGG16 does `from chainer.functions.noise.dropout import
    # dropout`; an export that only patched chainer.functions.dropout would
    # drop it silently and training through compile_onnx would lose dropout.
    from chainer.functions.noise.dropout import dropout

    model = export_model(FunctionModel(lambda v: F.relu(dropout(v, 0.3))), _rand(3, 6))
    assert op_types(model) == ['Dropout', 'Relu']
    # After the export the original function is back: real dropout in training.
    with chainer.using_config('train', True):
        assert type(dropout(_rand(3, 6), 0.3).creator).__name__ == 'Dropout'

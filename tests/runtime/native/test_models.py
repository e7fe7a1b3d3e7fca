"""The project's model tests and the benchmark models (benchmarks/models.py)
through the native backend: each model is exported for inference, then run
(a) through Executor(backend='native') and (b) as the emitted C built with
`make` and run with no Python in its environment (weights embedded as C
literals, or in a weights file for models of over a million weights), and
compared with the NumPy VM and onnxruntime.

Random weights, no downloads.  Tolerances are rtol 1e-4, atol 1e-5 for
every model: the C kernels accumulate in float32 in another order than
NumPy and onnxruntime, and these are deep enough for that to show at 1e-5
relative, not at 1e-4.  The 224x224 image models are marked slow.
"""
import functools
import shutil
from contextlib import nullcontext

import chainer
import chainer.links as L
import numpy
import onnxruntime
import pytest

from benchmarks import models as bench_models
from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.executor import Executor
from chainer_compiler.runtime.native import emit_c
from chainer_compiler.translators.onnx_chainer import rnn
from chainer_compiler.translators.onnx_chainer.tracing import export_model
from tests.models import MLP, LeNet5
from tests.runtime.native.helpers import Built, make_folder, sanitize
from tests.translators.onnx_chainer.test_models_sequence import (
    BiLSTMClassifier,
    TransformerEncoderBlock,
)

CC = shutil.which('cc') or shutil.which('gcc')
pytestmark = pytest.mark.skipif(CC is None or shutil.which('make') is None,
                                reason='no C compiler (cc/gcc) or make on PATH')
RTOL, ATOL = 1e-4, 1e-5
#: Models with more weights than this are emitted with a weights file.
EMBED_AT_MOST = 1_000_000


def _uniform(shape, seed=0):
    return numpy.random.RandomState(seed).uniform(-1, 1, shape).astype(numpy.float32)


def _mlp():
    return MLP(n_units=64), (_uniform((4, 784)),)


def _lenet5(batch_norm):
    """LeNet5; with batch_norm, its statistics and affine parameters are
    random (the initial ones would make BatchNormalization an identity)."""
    model = LeNet5(batch_norm=batch_norm)
    if batch_norm:
        rng = numpy.random.RandomState(1)
        ranges = {'avg_mean': (-0.5, 0.5), 'avg_var': (0.5, 2.0),
                  'gamma': (0.5, 1.5), 'beta': (-0.5, 0.5)}
        for bn in (model.bn1, model.bn2):
            for attr, (low, high) in ranges.items():
                value = getattr(bn, attr)
                array = getattr(value, 'array', value)  # gamma and beta are Parameters
                array[...] = rng.uniform(low, high, array.shape)
    return model, (_uniform((2, 1, 28, 28)),)


def _bilstm():
    """Sequences of different, unsorted lengths (an int32 array each)."""
    rng = numpy.random.RandomState(0)
    xs = tuple(rng.randint(0, 20, size=n).astype(numpy.int32) for n in (5, 2, 7, 3))
    return BiLSTMClassifier(), xs


def _transformer():
    """The second sequence is 3 of 5 tokens long (mask 0 on padding)."""
    mask = numpy.ones((2, 5), numpy.float32)
    mask[1, 3:] = 0
    return TransformerEncoderBlock(), (_uniform((2, 5, 16)), mask)


def _benchmark_model(make, shape):
    """A model of `make bench` (benchmarks/models.py) at batch 2."""
    return lambda: (make(), (_uniform((2,) + shape),))


def _image_model(link):
    return lambda: (link(pretrained_model=None), (_uniform((1, 3, 224, 224)),))


#: name -> a function returning (Chainer model, inputs); weights are drawn
#: from numpy's global generator, seeded before each call.
MODELS = {
    'mlp': _mlp,
    'lenet5': lambda: _lenet5(batch_norm=False),
    'lenet5_bn': lambda: _lenet5(batch_norm=True),
    'bilstm': _bilstm,
    'transformer': _transformer,
    'bench_mlp_wide': _benchmark_model(lambda: bench_models.MLP([784, 1000, 1000, 10]), (784,)),
    'bench_mlp_small': _benchmark_model(lambda: bench_models.MLP([784, 100, 100, 10]), (784,)),
    'bench_mlp_deep': _benchmark_model(lambda: bench_models.MLP([784] + [32] * 9 + [10]),
                                       (784,)),
    'bench_lenet5': _benchmark_model(bench_models.LeNet5, (1, 28, 28)),
    'bench_resnet18': _benchmark_model(lambda: bench_models.ResNet18Style(64), (3, 32, 32)),
    'vgg16': _image_model(L.VGG16Layers),
    'resnet50': _image_model(L.ResNet50Layers),
    'googlenet': _image_model(L.GoogLeNet),
}
SLOW = ('vgg16', 'resnet50', 'googlenet')
CASES = [pytest.param(name, marks=[pytest.mark.slow] if name in SLOW else [])
         for name in MODELS]


class Exported:
    """A model exported for inference: the ONNX model, its Program, the
    inputs, and the outputs of the references (runtime name, outputs)."""

    def __init__(self, name):
        numpy.random.seed(0)
        model, self.inputs = MODELS[name]()
        # The BiLSTM exports its NStepBiLSTM as LSTM nodes (the folded form).
        folding = rnn.n_step_as_single_calls() if name == 'bilstm' else nullcontext()
        with folding, chainer.using_config('train', False):
            self.onnx = export_model(model, self.inputs, train=False)
        self.program = build_program(self.onnx)
        session = onnxruntime.InferenceSession(self.onnx.SerializeToString(),
                                               providers=['CPUExecutionProvider'])
        feed = {i.name: x for i, x in zip(session.get_inputs(), self.inputs)}
        self.references = [
            ('numpy VM', Executor(self.program, backend='numpy').run_positional(self.inputs)),
            ('onnxruntime', session.run(None, feed))]

    def check(self, got, what):
        """Assert ``got`` (outputs in Program order) equals every
        reference's outputs in dtype, shape and value."""
        for runtime, outputs in self.references:
            assert len(got) == len(outputs)
            for v, g, w in zip(self.program.outputs, got, outputs):
                w = numpy.asarray(w)
                assert (g.dtype, g.shape) == (w.dtype, w.shape), (what, runtime, v.name)
                numpy.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL,
                                              err_msg='%s: %s vs %s' % (what, v.name, runtime))


@functools.lru_cache(maxsize=None)
def _exported(name):
    """Each model is exported and its references computed once per run."""
    return Exported(name)


@pytest.mark.parametrize('name', CASES)
@pytest.mark.native_build
def test_native_executor_matches_the_references(name):
    model = _exported(name)
    got = Executor(model.program, backend='native').run_positional(model.inputs)
    model.check(got, "Executor(backend='native')")


@pytest.mark.parametrize('name', CASES)
@pytest.mark.native_build
def test_built_executable_matches_the_references(name, tmp_path):
    model = _exported(name)
    folder = tmp_path / 'c'
    # Large models' weights (up to 138M floats) as C literals take the
    # compiler long (11M: over a minute); the weights file is the mode for them.
    large = sum(v.size for v in model.program.constants.values()) > EMBED_AT_MOST
    result = emit_c(model.program, folder, 'model', weights='file' if large else 'embed')
    built = Built(model.program, str(folder), 'model', result, make_folder(folder))
    assert 'warning' not in built.make_output
    paths = []
    for k, x in enumerate(model.inputs):
        paths.append(tmp_path / ('in_%d.npy' % k))
        numpy.save(paths[-1], x)
    out = tmp_path / 'out'
    done = built.run(['-o', out] + paths)
    assert done.returncode == 0, done.stderr
    got = [numpy.load(out / (sanitize(v.name) + '.npy')) for v in model.program.outputs]
    model.check(got, 'the built executable')


def test_the_bilstm_is_exported_folded():
    # The folded form is the one the native backend must run: ONNX LSTM
    # nodes, not ~300 unrolled primitives.
    assert 'LSTM' in [n.op_type for n in _exported('bilstm').onnx.graph.node]

"""The native memory model (memory_model.native_process_peak) predicts what
a process training on the native backend holds at its peak, as tracemalloc
sees it: NumPy reports every array to it, the pool's arena and the
libraries' weights blocks among them."""
import tracemalloc

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainer_compiler
from chainer_compiler import memory_model
from chainer_compiler.runtime.native.arena_pool import POOL, release_arenas
from tests.chainer_compiler.test_memory_model import _ConvNet

pytestmark = pytest.mark.native_build

#: The tracemalloc domain NumPy reports its arrays' data in (NPY_TRACE_DOMAIN).
NUMPY_DOMAIN = 389047


def _traced_peak(make_step):
    """(what ``make_step()`` returns, the peak bytes NumPy holds during the
    second call of the step it returns first): traced from before it is
    made, so that the arena and the weights blocks count; the Python
    objects compiling leaves are taken out."""
    release_arenas()  # an earlier test's idle buffer would serve untraced
    tracemalloc.start()
    try:
        made = make_step()
        made[0]()
        arrays = sum(trace.size for trace in tracemalloc.take_snapshot().traces
                     if trace.domain == NUMPY_DOMAIN)
        objects = tracemalloc.get_traced_memory()[0] - arrays
        tracemalloc.reset_peak()
        made[0]()
        return made, tracemalloc.get_traced_memory()[1] - objects
    finally:
        tracemalloc.stop()


@pytest.fixture(scope='module')
def convnet(tmp_path_factory):
    """(a _ConvNet, its ONNX file, a batch x, t) at 512 KiB activations."""
    rng = numpy.random.RandomState(0)
    x, t = rng.randn(32, 3, 16, 16).astype(numpy.float32), rng.randint(0, 5, 32).astype('i')
    numpy.random.seed(0)
    model = _ConvNet()
    model(x)
    path = chainer_compiler.export(model, [x], str(tmp_path_factory.mktemp('native') / 'c.onnx'))
    return model, path, x, t


def _runs(compiled):
    """Every NativeRun of a compile_onnx model (the Executors' own)."""
    return [e._native for s in compiled._signatures.values() for e in s.executors()]


@pytest.mark.parametrize('order', [None, 'gt'])
def test_compile_onnx_on_native_holds_what_the_model_predicts(convnet, order):
    """Forward, Chainer's loss, backward (the retained values donated) and a
    momentum update: within 2% of the real peak."""
    model, path, x, t = convnet
    model = model.copy(mode='copy')

    def make():
        compiled = chainer_compiler.compile_onnx(model, path, computation_order=order,
                                                 runtime_kwargs={'backend': 'native'})
        optimizer = chainer.optimizers.MomentumSGD()
        optimizer.setup(compiled)

        def step():
            compiled.cleargrads()
            loss = F.softmax_cross_entropy(compiled(x), t)
            loss.backward()
            optimizer.update()
        return step, compiled
    (_, compiled), real = _traced_peak(make)
    state = compiled._training_states()[0]
    predicted = memory_model.compiled_native_peak(
        state.programs, state.forward._native, state.backward._native, _runs(compiled))
    # One velocity per parameter (the optimizer's state, which the programs
    # do not see); the batch and the parameters were allocated before tracing.
    params = sum(p.array.nbytes for p in compiled.params())
    predicted += params
    real += x.nbytes + params
    assert abs(predicted / real - 1) < 0.02, (predicted, real)


def test_training_holds_the_training_arenas_not_the_inference_one(convnet):
    """compile_onnx builds the inference program too, whose arena (every
    activation inside it) is the largest: before, building it sized the
    buffer the pool keeps, so every training step held it; now only calls
    size the buffers."""
    model, path, x, t = convnet
    release_arenas()
    compiled = chainer_compiler.compile_onnx(model.copy(mode='copy'), path,
                                             runtime_kwargs={'backend': 'native'})
    F.softmax_cross_entropy(compiled(x), t).backward()
    state = compiled._training_states()[0]
    training = max(state.forward._native.arena_bytes, state.backward._native.arena_bytes)
    inference = next(iter(compiled._signatures.values())).inference._native.arena_bytes
    assert inference > training
    assert POOL.idle_bytes() == [training]
    with chainer.using_config('train', False):
        compiled(x)
    assert POOL.idle_bytes() == [inference]  # an evaluation needs its own


def test_the_backward_is_given_only_what_no_one_else_holds(convnet):
    """compile_onnx's backward overwrites the retained values after their
    last read; before, the parameters were offered too (here /fc/W), which
    the model keeps, so every call copied them first (33 MiB a step on
    ResNet-50)."""
    model, path, x, t = convnet
    compiled = chainer_compiler.compile_onnx(model.copy(mode='copy'), path,
                                             runtime_kwargs={'backend': 'native'})
    state = compiled._training_states()[0]
    kept = {v.name for v in state.programs.forward.inputs} | set(state.programs.outputs)
    donated = [state.programs.backward.inputs[k].name for k in state.backward._native.donated]
    assert donated and not kept.intersection(donated), donated


def test_compile_training_step_on_native_holds_what_the_model_predicts(convnet):
    """The one program of compile_training_step: its inputs (batch,
    parameters, momentum), outputs and the arena."""
    model, _, x, t = convnet

    def make():
        classifier = L.Classifier(model.copy(mode='copy'))
        optimizer = chainer.optimizers.MomentumSGD()
        optimizer.setup(classifier)
        step = chainer_compiler.compile_training_step(classifier, optimizer, (x, t),
                                                      runtime_kwargs={'backend': 'native'})
        return (lambda: step(x, t)), step
    (_, step), real = _traced_peak(make)
    run = step.executor._native
    predicted = memory_model.native_process_peak([(step.program, run)], [run])
    assert abs(predicted / (real + x.nbytes + t.nbytes) - 1) < 0.02, (predicted, real)

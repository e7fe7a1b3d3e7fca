"""compile_training_step: forward, backward and the optimizer update in one
VM program, training the Chainer model's own arrays exactly as Chainer
would."""
import copy
import dataclasses
import gc
import os
import tracemalloc

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import onnx
import pytest
from chainer import training
from chainer.training import extensions

import chainer_compiler
from chainer_compiler.runtime import Instruction, ProgramFormatError
from chainer_compiler.runtime.backend import BackendUnavailableError
from chainer_compiler.runtime.errors import InputValidationError, RuntimeVMError
from chainer_compiler.runtime.ops.registry import lookup
from chainer_compiler.runtime.validation import validate_program
from tests.models import MLP, LeNet5

#: These tests check the bridge, not the backend: the NumPy VM, where the
#: default ('auto') would build C for each model.
ON_THE_VM = {'backend': 'numpy'}
#: The tracemalloc domain NumPy reports its arrays' data in (NPY_TRACE_DOMAIN).
NUMPY_TRACE_DOMAIN = 389047

OPTIMIZERS = [
    lambda: chainer.optimizers.SGD(lr=0.1),
    lambda: chainer.optimizers.MomentumSGD(lr=0.05, momentum=0.8),
    lambda: chainer.optimizers.Adam(),
    lambda: chainer.optimizers.AdamW(alpha=0.01, weight_decay_rate=0.1),
]


def _batch(shape, batch=8, seed=0):
    rng = numpy.random.RandomState(seed)
    x = rng.uniform(-1, 1, (batch,) + shape).astype(numpy.float32)
    t = rng.randint(0, 10, batch).astype(numpy.int32)
    return x, t


def _twins(predictor, x, make_optimizer):
    """Two identical Classifiers with their own optimizers.

    The lazily sized links draw their weights from numpy's global generator;
    seeding it keeps the comparison reproducible (Adam's step is ill-conditioned
    where a gradient is near its eps, so some draws sit closer to the tolerance
    than others)."""
    numpy.random.seed(0)
    with chainer.using_config('train', False):
        predictor(x)  # initialize lazily sized links
    plain = L.Classifier(predictor)
    compiled = copy.deepcopy(plain)
    plain_opt, compiled_opt = make_optimizer(), make_optimizer()
    plain_opt.setup(plain)
    compiled_opt.setup(compiled)
    return plain, plain_opt, compiled, compiled_opt


def _assert_same_training_state(plain, plain_opt, compiled, compiled_opt):
    for (name, p), (_, q) in zip(sorted(plain.namedparams()), sorted(compiled.namedparams())):
        numpy.testing.assert_allclose(q.array, p.array, rtol=1e-5, atol=2e-5, err_msg=name)
        for slot, value in p.update_rule.state.items():
            numpy.testing.assert_allclose(q.update_rule.state[slot], value, rtol=1e-5,
                                          atol=1e-6, err_msg='%s %s' % (name, slot))
        assert q.update_rule.t == p.update_rule.t
    assert compiled_opt.t == plain_opt.t


@pytest.mark.parametrize('make_optimizer', OPTIMIZERS, ids=['sgd', 'momentum', 'adam', 'adamw'])
def test_steps_match_chainer(make_optimizer):
    x, t = _batch((784,))
    plain, plain_opt, compiled, compiled_opt = _twins(MLP(32, 10), x, make_optimizer)
    arrays = [p.array for _, p in sorted(compiled.namedparams())]
    step = chainer_compiler.compile_training_step(compiled, compiled_opt, (x, t),
                                                  runtime_kwargs=ON_THE_VM)
    for i in range(3):
        xi, ti = _batch((784,), seed=i)
        plain_opt.update(plain, xi, ti)
        loss = step(xi, ti)
        numpy.testing.assert_allclose(loss, plain.loss.array, rtol=1e-5)
    _assert_same_training_state(plain, plain_opt, compiled, compiled_opt)
    # Updated in place: the model's own arrays (what serializers save) changed.
    assert all(a is p.array for a, (_, p) in zip(arrays, sorted(compiled.namedparams())))


def test_batch_normalization_statistics_and_conv_match_chainer():
    x, t = _batch((1, 28, 28), batch=4)
    make = lambda: chainer.optimizers.MomentumSGD(lr=0.01)  # noqa: E731
    plain, plain_opt, compiled, compiled_opt = _twins(LeNet5(batch_norm=True), x, make)
    step = chainer_compiler.compile_training_step(compiled, compiled_opt, (x, t),
                                                  runtime_kwargs=ON_THE_VM)
    for _ in range(2):
        plain_opt.update(plain, x, t)
        step(x, t)
    _assert_same_training_state(plain, plain_opt, compiled, compiled_opt)
    for name in ('avg_mean', 'avg_var'):
        numpy.testing.assert_allclose(getattr(compiled.predictor.bn1, name),
                                      getattr(plain.predictor.bn1, name), rtol=1e-5, atol=1e-6)


def _compiled_classifier(x, t, optimizer, n_out=10):
    """A small Classifier, its optimizer and its compiled training step."""
    model = L.Classifier(MLP(16, n_out))
    optimizer.setup(model)
    return model, chainer_compiler.compile_training_step(model, optimizer, (x, t),
                                                         runtime_kwargs=ON_THE_VM)


def test_reports_what_the_classifier_reports():
    x, t = _batch((784,))
    model, step = _compiled_classifier(x, t, chainer.optimizers.SGD())
    with chainer.using_config('train', False):
        expected_accuracy = float(F.accuracy(model.predictor(x), t).array)  # before the update
    reporter = chainer.Reporter()
    reporter.add_observer('main', model)
    observation = {}
    with reporter.scope(observation):
        loss = step(x, t)
    assert sorted(observation) == ['main/accuracy', 'main/loss']
    assert float(observation['main/loss']) == pytest.approx(float(loss))
    assert float(observation['main/accuracy']) == pytest.approx(expected_accuracy)


def test_trainer_with_the_updater_logs_and_learns(tmp_path):
    rng = numpy.random.RandomState(1)
    x = rng.uniform(-1, 1, (64, 20)).astype(numpy.float32)
    t = (x[:, 0] > 0).astype(numpy.int32)  # learnable from one feature
    optimizer = chainer.optimizers.Adam(alpha=0.01)
    model, step = _compiled_classifier(x[:16], t[:16], optimizer, n_out=2)
    iterator = chainer.iterators.SerialIterator(chainer.datasets.TupleDataset(x, t), 16)
    updater = chainer_compiler.TrainingStepUpdater(iterator, step)
    trainer = training.Trainer(updater, (20, 'epoch'), out=str(tmp_path))
    log = extensions.LogReport()
    trainer.extend(log)
    trainer.run()
    assert optimizer.t == 80 and updater.epoch == 20
    assert log.log[-1]['main/loss'] < log.log[0]['main/loss']
    assert log.log[-1]['main/accuracy'] > 0.9
    chainer.serializers.save_npz(str(tmp_path / 'model.npz'), model)
    saved = numpy.load(str(tmp_path / 'model.npz'))
    numpy.testing.assert_array_equal(saved['predictor/l1/W'], model.predictor.l1.W.array)


def test_dump_onnx_writes_the_steps_graph(tmp_path):
    x, t = _batch((784,))
    path = tmp_path / 'step.onnx'
    model = L.Classifier(MLP(16, 10))
    optimizer = chainer.optimizers.SGD()
    optimizer.setup(model)
    chainer_compiler.compile_training_step(model, optimizer, (x, t), dump_onnx=path,
                                           runtime_kwargs=ON_THE_VM)
    assert 'SGDUpdate' in {node.op_type for node in onnx.load(str(path)).graph.node}
    assert os.listdir(tmp_path) == ['step.onnx']  # written whole, no temporary file left


def test_a_wrong_sample_shape_is_a_clear_error():
    x, t = _batch((784,))
    _, step = _compiled_classifier(x, t, chainer.optimizers.SGD())
    with pytest.raises(InputValidationError,
                       match=r"input_0.*\(8, 700\).*expected \('batch', 784\)"):
        step(x[:, :700], t)


def test_refused_calls_change_no_state():
    x, t = _batch((784,))
    refused, refused_opt, clean, clean_opt = _twins(MLP(16, 10), x, chainer.optimizers.Adam)
    step = chainer_compiler.compile_training_step(refused, refused_opt, (x, t),
                                                  runtime_kwargs=ON_THE_VM)
    clean_step = chainer_compiler.compile_training_step(clean, clean_opt, (x, t),
                                                        runtime_kwargs=ON_THE_VM)
    bad_calls = [((x[:4], t), InputValidationError, "input_1' has batch=8 on axis 0, but "
                                                    "input 'input_0' has batch=4"),
                 ((x.astype(numpy.float64), t), InputValidationError, 'dtype float64'),
                 ((x,), TypeError, 'takes 2 input'),
                 ((x.tolist(), t), InputValidationError, 'must be an array.*got list'),
                 ((x, None), InputValidationError, "'input_1' must be an array.*got None")]
    for inputs, error, message in bad_calls:
        with pytest.raises(error, match=message):
            step(*inputs)
    _assert_identical(refused, refused_opt, clean, clean_opt)
    assert refused_opt.t == 0
    step(x, t)
    clean_step(x, t)
    _assert_identical(refused, refused_opt, clean, clean_opt)  # bit for bit
    assert refused_opt.t == 1


@pytest.mark.parametrize('backend', ['numpy', pytest.param('native', marks=pytest.mark.slow)])
def test_a_batch_the_program_refuses_changes_no_state(backend):
    x, t = _batch((784,))
    refused, refused_opt, clean, clean_opt = _twins(MLP(16, 10), x, chainer.optimizers.Adam)
    steps = [chainer_compiler.compile_training_step(
        model, opt, (x, t), runtime_kwargs={'backend': backend})
        for model, opt in ((refused, refused_opt), (clean, clean_opt))]
    for step in steps:
        step(x, t)
    bad = t.copy()
    bad[3] = 10  # of 10 classes
    with pytest.raises(RuntimeVMError, match='out of'):
        steps[0](x, bad)
    _assert_identical(refused, refused_opt, clean, clean_opt)
    assert refused_opt.t == 1
    for step in steps:
        step(x, t)
    _assert_identical(refused, refused_opt, clean, clean_opt)  # Adam's alpha_t included
    # The arrays are untouched because the loss, which checks the labels,
    # runs before the first in-place update.
    instructions = steps[0].program.instructions
    updates = [i for i, inst in enumerate(instructions)
               if lookup(inst.op, inst.domain, inst.version).record.updated_inputs]
    assert [inst.op for inst in instructions].index('SoftmaxCrossEntropyLoss') < min(updates)


def _assert_identical(model, optimizer, other, other_optimizer):
    """Parameters, update-rule states and step counts exactly equal."""
    for (name, p), (_, q) in zip(sorted(model.namedparams()), sorted(other.namedparams())):
        numpy.testing.assert_array_equal(p.array, q.array, err_msg=name)
        for slot, value in p.update_rule.state.items():
            numpy.testing.assert_array_equal(value, q.update_rule.state[slot],
                                             err_msg='%s %s' % (name, slot))
        assert p.update_rule.t == q.update_rule.t, name
    assert optimizer.t == other_optimizer.t


class _SignRule(chainer.optimizers.sgd.SGDRule):
    def update_core_cpu(self, param):
        param.array -= self.hyperparam.lr * numpy.sign(param.grad)


class _SignSGD(chainer.optimizers.SGD):
    def create_update_rule(self):
        return _SignRule(self.hyperparam)


class _MyAdam(chainer.optimizers.Adam):
    pass


@pytest.mark.parametrize('optimizer_class, message', [
    (chainer.optimizers.AdaGrad, 'AdaGrad is not supported: the compiled step implements SGD, '
     'MomentumSGD, Adam, AdamW only; use compile_onnx'),
    (chainer.optimizers.AMSGrad, 'amsgrad is not supported; use compile_onnx'),
    (_SignSGD, "_SignSGD is not supported: it subclasses SGD and may change its update, but "
     "the compiled step implements SGD's own update only; use compile_onnx"),
    (_MyAdam, '_MyAdam is not supported: it subclasses Adam'),
], ids=['adagrad', 'amsgrad', 'sgd-subclass', 'adam-subclass'])
def test_unsupported_optimizers_are_named(optimizer_class, message):
    x, t = _batch((784,))
    model = L.Classifier(MLP(16, 10))
    optimizer = optimizer_class()
    optimizer.setup(model)
    with pytest.raises(NotImplementedError, match=message):
        chainer_compiler.compile_training_step(model, optimizer, (x, t), runtime_kwargs=ON_THE_VM)


def test_an_update_rule_of_another_class_is_refused():
    x, t = _batch((784,))
    model = L.Classifier(MLP(16, 10))
    optimizer = chainer.optimizers.SGD()
    optimizer.setup(model)
    model.predictor.l2.W.update_rule = _SignRule(optimizer.hyperparam)
    with pytest.raises(NotImplementedError,
                       match='parameter /predictor/l2/W is updated by _SignRule, but the '
                             'compiled step implements SGDRule only; use compile_onnx'):
        chainer_compiler.compile_training_step(model, optimizer, (x, t), runtime_kwargs=ON_THE_VM)


def test_optimizer_hooks_and_foreign_optimizers_are_refused():
    x, t = _batch((784,))
    model = L.Classifier(MLP(16, 10))
    optimizer = chainer.optimizers.SGD()
    optimizer.setup(model)
    optimizer.add_hook(chainer.optimizer_hooks.WeightDecay(1e-4))
    with pytest.raises(NotImplementedError, match='WeightDecay'):
        chainer_compiler.compile_training_step(model, optimizer, (x, t), runtime_kwargs=ON_THE_VM)
    other = chainer.optimizers.SGD()
    other.setup(L.Classifier(MLP(16, 10)))
    with pytest.raises(ValueError, match='not set up on this model'):
        chainer_compiler.compile_training_step(model, other, (x, t), runtime_kwargs=ON_THE_VM)


def test_frozen_links_are_not_updated():
    x, t = _batch((784,))
    model = L.Classifier(MLP(16, 10))
    optimizer = chainer.optimizers.SGD(lr=0.5)
    optimizer.setup(model)
    model.predictor.l1.disable_update()
    step = chainer_compiler.compile_training_step(model, optimizer, (x, t),
                                                  runtime_kwargs=ON_THE_VM)
    frozen = model.predictor.l1.W.array.copy()
    before = model.predictor.l3.W.array.copy()
    step(x, t)
    numpy.testing.assert_array_equal(model.predictor.l1.W.array, frozen)
    assert not numpy.array_equal(model.predictor.l3.W.array, before)


@pytest.mark.filterwarnings('ignore:parameters not used by the exported graph')
def test_a_link_the_forward_never_uses_is_left_alone():
    class WithSpare(MLP):
        def __init__(self):
            super().__init__(16, 10)
            with self.init_scope():
                self.spare = L.Linear(None, 3)  # never called: never initialized

    x, t = _batch((784,))
    model = L.Classifier(WithSpare())
    optimizer = chainer.optimizers.SGD()
    optimizer.setup(model)
    with pytest.warns(UserWarning, match='never initialized .*: /predictor/spare/W'):
        step = chainer_compiler.compile_training_step(model, optimizer, (x, t),
                                                      runtime_kwargs=ON_THE_VM)
    step(x, t)
    assert model.predictor.spare.W.array is None


def test_the_step_reads_no_parameter_after_its_in_place_update():
    x, t = _batch((784,))
    model = L.Classifier(MLP(16, 10))
    optimizer = chainer.optimizers.Adam()
    optimizer.setup(model)
    program = chainer_compiler.compile_training_step(model, optimizer, (x, t),
                                                     runtime_kwargs=ON_THE_VM).program
    validate_program(program, 'the step')  # the Executor it built did so too
    # A program that still reads a parameter after its update is refused.
    index, update = next((i, inst) for i, inst in enumerate(program.instructions)
                         if inst.op == 'AdamUpdate')
    param = update.inputs[0]
    program.instructions[index] = dataclasses.replace(
        update, frees=tuple(r for r in update.frees if r != param))
    program.instructions.insert(index + 1, Instruction(
        'Identity', (param,), (program.num_registers,), name='late'))
    program.num_registers += 1
    with pytest.raises(ProgramFormatError, match=(
            r"^the step: instruction %d \(Identity, node 'late'.*\) reads register %d after "
            r"instruction %d \(org.chainer_compiler::AdamUpdate.*\) updated it in place$"
            % (index + 1, param, index))):
        validate_program(program, 'the step')


def test_peak_bytes_are_reported_when_tracked():
    x, t = _batch((784,))
    model = L.Classifier(MLP(16, 10))
    optimizer = chainer.optimizers.Adam()
    optimizer.setup(model)
    step = chainer_compiler.compile_training_step(model, optimizer, (x, t),
                                                  runtime_kwargs={'track_memory': True})
    step(x, t)
    # The batch, the parameters and Adam's two state arrays per parameter
    # are inputs of the one program, live from its start.
    held = x.nbytes + t.nbytes + 3 * sum(p.array.nbytes for p in model.params())
    assert step.peak_bytes() > held
    untracked = _compiled_classifier(x, t, chainer.optimizers.SGD())[1]
    untracked(x, t)
    assert untracked.peak_bytes() == 0


@pytest.mark.parametrize('kwargs, error, message', [
    ({'runtime_kwargs': {'backend': 'bogus'}}, BackendUnavailableError,
     "unknown backend 'bogus'"),
    ({'runtime_kwargs': {'check_nan': True}}, TypeError, 'unknown runtime_kwargs check_nan'),
    ({'runtime_kwargs': {'backend': 'native', 'track_memory': True}}, BackendUnavailableError,
     "backend 'native' does not support track_memory"),
    ({'computation_order': 'fastest'}, ValueError, "unknown computation_order 'fastest'"),
    ({'computation_order': 'gt', 'compiler_kwargs': {'memory_budget': 1000}}, ValueError,
     'memory_budget 1000 bytes is below the smallest peak'),
], ids=['backend', 'runtime-option', 'native-instrumented', 'policy', 'budget'])
def test_bad_arguments_are_refused_by_the_call_before_anything_changes(kwargs, error, message):
    x, t = _batch((784,))
    model = L.Classifier(MLP(16, 10))
    optimizer = chainer.optimizers.Adam()
    optimizer.setup(model)
    with pytest.raises(error, match=message):
        chainer_compiler.compile_training_step(model, optimizer, (x, t), **kwargs)
    # Chainer makes the update rules' states lazily: still not made.
    assert all(p.update_rule.state is None for p in model.params())
    assert optimizer.t == 0


class _DeepMLP(chainer.ChainList):
    """``depth`` Linear layers of ``width`` with ReLU between them."""

    def __init__(self, depth=8, width=64):
        super().__init__(*[L.Linear(width, width) for _ in range(depth)])

    def forward(self, x):
        for link in self[:-1]:
            x = F.relu(link(x))
        return self[-1](x)


@pytest.mark.parametrize('order', [None, 'gt'])
def test_each_update_runs_once_its_gradient_is_made(order):
    # A deep MLP at batch 2: its gradients (as large as its parameters)
    # dwarf its activations.  Were every update at the step's end, every
    # gradient would be live there at once; applied as each is made, about
    # one layer's is.  gt's replays read parameters too: the updates come
    # after them, or the results would differ from Chainer's.
    x, t = _batch((64,), batch=2)
    plain, plain_opt, compiled, compiled_opt = _twins(
        _DeepMLP(), x, lambda: chainer.optimizers.MomentumSGD(lr=0.05))
    step = chainer_compiler.compile_training_step(
        compiled, compiled_opt, (x, t), computation_order=order,
        runtime_kwargs={**ON_THE_VM, 'track_memory': True})
    for i in range(3):
        xi, ti = _batch((64,), batch=2, seed=i)
        plain_opt.update(plain, xi, ti)
        step(xi, ti)
    _assert_same_training_state(plain, plain_opt, compiled, compiled_opt)
    grad_bytes = sum(p.array.nbytes for p in compiled.params())
    # The batch, the parameters and their momentum are inputs, live throughout.
    held = x.nbytes + t.nbytes + 2 * grad_bytes
    assert step.peak_bytes() - held < grad_bytes / 4


def test_compiling_leaves_the_model_its_parameters_and_the_optimizer_state_only():
    # Chainer gave each parameter a gradient array the step never reads, and
    # the Classifier kept the trace's y, loss and accuracy (y: the example
    # batch's 64 x 256 outputs): both held for the model's life, before.
    x, t = _batch((32,), batch=64)
    tracemalloc.start()
    try:
        model = L.Classifier(MLP(64, 256))
        optimizer = chainer.optimizers.MomentumSGD()
        optimizer.setup(model)
        chainer_compiler.compile_training_step(model, optimizer, (x, t),
                                               runtime_kwargs=ON_THE_VM)
        gc.collect()
        held = sum(trace.size for trace in tracemalloc.take_snapshot().traces
                   if trace.domain == NUMPY_TRACE_DOMAIN)
    finally:
        tracemalloc.stop()
    assert model.y is model.loss is model.accuracy is None
    assert all(p.grad is None for p in model.params())
    params = sum(p.array.nbytes for p in model.params())
    # The parameters and their momentum (and the step's few hyperparameters).
    assert 2 * params <= held < 2 * params + 1024

"""compile_training_step: a whole training iteration of a Chainer model —
forward, loss, backward and the optimizer's update — as one VM program.

The model (typically an ``L.Classifier``) is traced once on example inputs;
its loss, and every value it reports with ``chainer.report``, become graph
outputs.  The optimizer's update rule becomes one in-place operator per
parameter, so the Chainer model's own parameter arrays and the optimizer's
own state arrays are the ones trained: serializers, snapshots and
``optimizer.t`` stay as Chainer keeps them.
"""
import os

import chainer
import chainer.optimizers
import numpy
import onnx
from chainer.dataset import convert
from chainer.training.updaters import StandardUpdater

from .compiled_model import bind_initializers
from .frontend import load_onnx
from .passes.training_mode import to_training_mode
from .runtime.executor import Executor
from .training import OptimizerUpdate, compile_step_program
from .translators.onnx_chainer import export_model

#: Chainer optimizer -> the in-place operator, state slots and hyperparameters.
_UPDATES = {
    chainer.optimizers.SGD: OptimizerUpdate('SGDUpdate', (), ('lr',)),
    chainer.optimizers.MomentumSGD: OptimizerUpdate(
        'MomentumSGDUpdate', ('v',), ('lr', 'momentum')),
    chainer.optimizers.Adam: OptimizerUpdate(
        'AdamUpdate', ('m', 'v'),
        ('alpha_t', 'beta1', 'beta2', 'eps', 'eta', 'weight_decay_rate')),
}


def compile_training_step(model, optimizer, inputs, runtime_kwargs=None, dump_onnx=None):
    """Compile ``optimizer.update(model, *inputs)`` into one VM program.

    ``model`` is the optimizer's target and its forward returns the scalar
    loss (``L.Classifier(predictor)`` does); ``inputs`` are example inputs
    (a tuple of arrays, e.g. ``(x, t)``) fixing the shapes, batch size
    included.  ``optimizer`` is ``chainer.optimizers.SGD``, ``MomentumSGD``
    or ``Adam``/``AdamW`` (set up on ``model``, without hooks).  Returns a
    TrainingStep: call it with a batch to train on it.
    ``runtime_kwargs`` go to the VM's Executor; ``dump_onnx`` is a path to
    write the compiled step's ONNX graph to.
    """
    return TrainingStep(model, optimizer, inputs, runtime_kwargs or {}, dump_onnx)


class TrainingStep:
    """A compiled training iteration (see compile_training_step).

    ``step(x, t)`` runs forward, backward and the update on the batch,
    updates ``optimizer.t`` and the model's parameters and running
    statistics in place, reports what the model reports (``main/loss`` ...)
    to the active ``chainer.Reporter``, and returns the loss as a 0-d array.
    Parameter gradients (``param.grad``) are not stored: they live only
    inside the program.
    """

    def __init__(self, model, optimizer, inputs, runtime_kwargs, dump_onnx=None):
        if optimizer.target is not model:
            raise ValueError('compile_training_step: the optimizer is not set up on this model '
                             '(call optimizer.setup(model) first)')
        self.model = model
        self.optimizer = optimizer
        self._update = _update_for(optimizer)
        inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
        self._n_inputs = len(inputs)
        proto = load_onnx(export_model(model, inputs, reported=True), check=False)
        binding = bind_initializers(proto.graph, model, type(model).__name__)
        decays = {name: getattr(binding.persistents[name][0], 'decay', 0.9)
                  for name in binding.state_names}
        state_updates = to_training_mode(proto, decays)
        self._params = [binding.param_of[n] for n in binding.param_names]
        self._persistent_slots = [binding.persistents[n] for n in binding.state_names]
        wrt = [n for n in binding.param_names if _trainable(binding.param_of[n])]
        compiled = compile_step_program(
            proto, loss=proto.graph.output[0].name,
            params=binding.param_names + binding.state_names, wrt=wrt,
            update=self._update, check=False)
        if dump_onnx:
            onnx.save(compiled.onnx, os.fspath(dump_onnx))
        self.program = compiled.program
        self._rules = [binding.param_of[n].update_rule for n in compiled.updated]
        for name, rule in zip(compiled.updated, self._rules):
            rule._init_states(binding.param_of[name])  # Chainer's own lazy initialization
        outputs = [v.name for v in self.program.outputs]
        self._state_positions = [
            (outputs.index(updated), binding.persistents[initializer])
            for updated, initializer in state_updates]
        self._reports = _report_targets(model, outputs)
        options = dict(runtime_kwargs)
        options.setdefault('backend', 'cupy' if model.xp is not numpy else 'numpy')
        self.executor = Executor(self.program, **options)

    def __call__(self, *inputs):
        if len(inputs) != self._n_inputs:
            raise TypeError('the training step of %s takes %d input(s), got %d'
                            % (type(self.model).__name__, self._n_inputs, len(inputs)))
        optimizer = self.optimizer
        optimizer.t += 1
        for rule in self._rules:
            rule.t += 1
        values = [x.array if isinstance(x, chainer.Variable) else x for x in inputs]
        values += [p.array for p in self._params]
        values += [getattr(link, attr) for link, attr in self._persistent_slots]
        values += [rule.state[slot] for rule in self._rules for slot in self._update.slots]
        values += [numpy.float64(_hyperparameter(optimizer, name))
                   for name in self._update.hyperparams]
        results = self.executor.run_positional(values)
        for position, (link, attr) in self._state_positions:
            getattr(link, attr)[...] = results[position]
        for position, observer, key in self._reports:
            chainer.report({key: results[position]}, observer)
        return results[0]


class TrainingStepUpdater(StandardUpdater):
    """A StandardUpdater whose update is a compiled TrainingStep: use it in
    a Trainer where you would use StandardUpdater (the iterator and
    converter work the same way)."""

    def __init__(self, iterator, training_step, converter=convert.concat_examples,
                 device=None, **kwargs):
        super().__init__(iterator, training_step.optimizer, converter=converter,
                         device=device, **kwargs)
        self.training_step = training_step

    def update_core(self):
        iterator = self._iterators['main']
        # The same conversion StandardUpdater.update_core applies.
        in_arrays = convert._call_converter(self.converter, iterator.next(), self.input_device)
        if isinstance(in_arrays, dict):
            raise TypeError('TrainingStepUpdater: the converter returned a dict; the compiled '
                            'step takes its inputs in order (use a converter returning a tuple)')
        if not isinstance(in_arrays, tuple):
            in_arrays = (in_arrays,)
        self.training_step(*in_arrays)
        if self.auto_new_epoch and iterator.is_new_epoch:
            self._optimizers['main'].new_epoch(auto=True)


def _update_for(optimizer):
    for cls in type(optimizer).__mro__:
        if cls in _UPDATES:
            break
    else:
        raise NotImplementedError(
            'compile_training_step: %s is not supported (supported: %s); use compile_onnx, '
            'which keeps the optimizer in Chainer' % (
                type(optimizer).__name__, ', '.join(c.__name__ for c in _UPDATES)))
    hp = optimizer.hyperparam
    variants = [v for v in ('amsgrad', 'adabound') if getattr(hp, v, False)]
    if variants:
        raise NotImplementedError('compile_training_step: Adam with %s is not supported'
                                  % ' and '.join(variants))
    hooks = _hook_names(optimizer)
    for _, param in optimizer.target.namedparams():
        if param.update_rule is not None:
            hooks += _hook_names(param.update_rule)
            if param.update_rule.hyperparam.get_dict() != hp.get_dict():
                raise NotImplementedError(
                    'compile_training_step: parameter %s has its own hyperparameters; '
                    'the compiled step uses the optimizer\'s for every parameter' % param.name)
    if hooks:
        raise NotImplementedError(
            'compile_training_step: optimizer hooks are not compiled (%s); use compile_onnx, '
            'which keeps the optimizer in Chainer' % ', '.join(sorted(set(hooks))))
    if getattr(optimizer, '_loss_scale', None) is not None:
        raise NotImplementedError('compile_training_step: loss scaling is not supported')
    return _UPDATES[cls]


def _hook_names(hookable_owner):
    hookable = hookable_owner._hookable
    return list(hookable._pre_update_hooks) + list(hookable._post_update_hooks)


def _trainable(param):
    rule = param.update_rule
    return rule is not None and rule.enabled and param.dtype.kind == 'f'


def _hyperparameter(optimizer, name):
    if name == 'alpha_t':
        return optimizer.alpha_t  # Adam's bias-corrected step size at optimizer.t
    return getattr(optimizer.hyperparam, name)


def _report_targets(model, outputs):
    """[(output position, observer link, key)] for each reported output
    (named 'main/<link path>/<key>' by the exporter)."""
    observers = {'main': model}
    observers.update(('main' + path, link) for path, link in model.namedlinks(skipself=True))
    targets = []
    for position, name in enumerate(outputs):
        prefix, _, key = name.rpartition('/')
        if prefix in observers and key:
            targets.append((position, observers[prefix], key))
    return targets

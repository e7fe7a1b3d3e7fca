"""compile_training_step: a whole training iteration of a Chainer model —
forward, loss, backward and the optimizer's update — as one VM program.

The model (typically an ``L.Classifier``) is traced once on example inputs;
its loss, and every value it reports with ``chainer.report``, become graph
outputs.  The optimizer's update rule becomes one in-place operator per
parameter, so the Chainer model's own parameter arrays and the optimizer's
own state arrays are the ones trained: serializers, snapshots and
``optimizer.t`` stay as Chainer keeps them.
"""
import contextlib
import logging
import time
from dataclasses import dataclass

import chainer
import chainer.optimizers
import numpy
from chainer.dataset import convert
from chainer.training.updaters import StandardUpdater

from .compiled_model import (
    SignatureCache,
    _check_runtime_kwargs,
    bind_initializers,
    default_backend_of,
)
from .exporting import write_onnx
from .frontend import load_onnx
from .pipeline import CompilerOptions
from .runtime.executor import Executor
from .runtime.program import ValueInfo
from .runtime.signatures import validate_inputs
from .training import OptimizerUpdate, compile_step_program
from .translators.onnx_chainer import export_model

_ADAM = OptimizerUpdate('AdamUpdate', ('m', 'v'),
                        ('alpha_t', 'beta1', 'beta2', 'eps', 'eta', 'weight_decay_rate'))

#: The optimizers the compiled step implements, by exact class: the class of
#: the update rule each parameter must have, and the in-place operator,
#: state slots and hyperparameters.  Subclasses are not listed: they may
#: change the update, which the compiled step would silently ignore.
_UPDATES = {
    chainer.optimizers.SGD: (chainer.optimizers.sgd.SGDRule,
                             OptimizerUpdate('SGDUpdate', (), ('lr',))),
    chainer.optimizers.MomentumSGD: (chainer.optimizers.momentum_sgd.MomentumSGDRule,
                                     OptimizerUpdate('MomentumSGDUpdate', ('v',),
                                                     ('lr', 'momentum'))),
    chainer.optimizers.Adam: (chainer.optimizers.adam.AdamRule, _ADAM),
    chainer.optimizers.AdamW: (chainer.optimizers.adam.AdamRule, _ADAM),
}

#: How every refusal ends.
_USE_COMPILE_ONNX = 'use compile_onnx, which keeps the optimizer in Chainer'

_log = logging.getLogger(__name__)


def compile_training_step(model, optimizer, inputs, runtime_kwargs=None, dump_onnx=None,
                          computation_order=None, compiler_kwargs=None):
    """Compile ``optimizer.update(model, *inputs)`` into one VM program.

    ``model`` is the optimizer's target and its forward returns the scalar
    loss (``L.Classifier(predictor)`` does); ``inputs`` are example inputs
    (a tuple of arrays, e.g. ``(x, t)``) fixing the shapes, batch size
    included.  ``optimizer`` is ``chainer.optimizers.SGD``, ``MomentumSGD``
    or ``Adam``/``AdamW`` (set up on ``model``, without hooks), of exactly
    that class with Chainer's own update rules: a subclass may change the
    update, so it is refused (NotImplementedError), as is anything else the
    compiled step would not reproduce; ``compile_onnx`` trains those.
    Returns a TrainingStep: call it with a batch to train on it.
    ``runtime_kwargs`` go to the VM's Executor (the backend by default
    'auto', 'cupy' for a model on the GPU: compile_onnx's); ``dump_onnx`` is a path to
    write the compiled step's ONNX graph to.  ``computation_order`` and
    ``compiler_kwargs`` are compile_onnx's: the recompute policy and the
    compiler options (pipeline.CompilerOptions); in the one program, the
    values a policy does not keep die after their last forward read and are
    recomputed in the backward half.
    Everything is checked and compiled by this call: a bad option, backend
    or ``memory_budget`` is refused here, before anything changes.
    """
    _check_runtime_kwargs(runtime_kwargs or {})
    options = CompilerOptions.from_kwargs(compiler_kwargs, computation_order=computation_order)
    return TrainingStep(model, optimizer, inputs, runtime_kwargs or {}, dump_onnx, options)


class TrainingStep:
    """A compiled training iteration (see compile_training_step).

    ``step(x, t)`` runs forward, backward and the update on the batch,
    updates ``optimizer.t`` and the model's parameters and running
    statistics in place, reports what the model reports (``main/loss`` ...)
    to the active ``chainer.Reporter``, and returns the loss as a 0-d array.
    Parameter gradients (``param.grad``) are not stored: they live only
    inside the program (compiling clears the ones Chainer made, and puts
    back the attributes the trace's forward set, L.Classifier's ``y``,
    ``loss`` and ``accuracy``, so the model holds no example batch's
    arrays).  A batch of the wrong count, type, dtype or shape is refused
    (TypeError, InputValidationError) before anything changes; one the
    program refuses (a class label out of range: KernelError, or
    RuntimeVMError from the native backend) leaves every state as it was.

    Batches of any size are taken: axis 0 of the example inputs that share
    the first one's is the batch (every such input must agree on it, the
    other dimensions are the example's).  A batch of shapes not seen yet
    traces the model again on zeros of those shapes and compiles a step for
    them (one compile; native: one C build, or a build cache hit), kept in
    an LRU cache of compiled_model.SIGNATURE_CACHE_SIZE signatures, so a
    partial last batch needs no padding.
    """

    def __init__(self, model, optimizer, inputs, runtime_kwargs, dump_onnx=None, options=None):
        if optimizer.target is not model:
            raise ValueError('compile_training_step: the optimizer is not set up on this model '
                             '(call optimizer.setup(model) first)')
        self.model = model
        self.optimizer = optimizer
        self._update = _update_for(optimizer)
        inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
        self._n_inputs = len(inputs)
        self._options = options
        runtime_kwargs = dict(runtime_kwargs)
        runtime_kwargs.setdefault('backend', default_backend_of(model))
        self._runtime_kwargs = runtime_kwargs
        #: The batch signature ((shape, dtype) per input) -> its _CompiledStep,
        #: least recently used first.
        self._steps = SignatureCache()
        first = self._compile(inputs, dump_onnx)
        self._steps[_signature_of(inputs)] = first
        #: The data inputs as the step takes them: the example's, axis 0 the
        #: symbol 'batch' where it is the first input's batch.
        self._declared = _batch_inputs(first.executor.program.inputs[:self._n_inputs])
        self._array_type = model.xp.ndarray
        #: The hyperparameters, written here at every call and passed as
        #: 0-d views of this buffer: the same arrays at every call, which
        #: the native backend reads in place without a conversion each.
        #: (CuPy would copy such arrays to the device: it takes scalars.)
        hyperparams = numpy.zeros(len(self._update.hyperparams))
        self._hyperparams = hyperparams
        self._hyperparam_views = None if first.executor.backend == 'cupy' else \
            [hyperparams[k, ...] for k in range(len(hyperparams))]

    def _compile(self, inputs, dump_onnx=None):
        """The _CompiledStep of the model traced on ``inputs``; the update
        rules' states are made (once) after its Executor, so that one the
        backend refuses (native with track_memory) leaves the optimizer as
        it was."""
        model = self.model
        _log.info('compiling the training step of %s for %s', type(model).__name__,
                  _describe(inputs))
        start = time.perf_counter()
        with _keeping_attributes(model):
            traced = load_onnx(export_model(model, inputs, reported=True), check=False)
        binding = bind_initializers(traced.graph, model, 'the trace of %s' % type(model).__name__,
                                    traced=True)
        proto, state_updates = binding.training_copy(traced)
        wrt = [n for n in binding.param_names if _trainable(binding.param_of[n])]
        compiled = compile_step_program(
            proto, loss=proto.graph.output[0].name,
            params=binding.inputs, wrt=wrt,
            update=self._update, check=False, options=self._options)
        if dump_onnx:
            write_onnx(compiled.onnx, dump_onnx)
        executor = Executor(compiled.program, **self._runtime_kwargs)
        rules = [binding.param_of[n].update_rule for n in compiled.updated]
        for name, rule in zip(compiled.updated, rules):
            if rule.state is None:  # Chainer's own lazy initialization, once
                rule._init_states(binding.param_of[name])
        outputs = [v.name for v in compiled.program.outputs]
        step = _CompiledStep(
            executor=executor, order=compiled.order, rules=rules,
            params=[binding.param_of[n] for n in binding.param_names],
            persistent_slots=[binding.persistents[n] for n in binding.state_names],
            state_positions=[(outputs.index(updated), binding.persistents[initializer])
                             for updated, initializer in state_updates],
            reports=_report_targets(model, outputs))
        # Chainer gives every initialized parameter a gradient array, which
        # the step never reads (its gradients live in its program); as
        # optimizer.update(lossfun) does, clear them, once compiling is done.
        model.cleargrads()
        _log.info('compiled the training step of %s in %.1f s', type(model).__name__,
                  time.perf_counter() - start)
        return step

    @property
    def _current(self):
        """The _CompiledStep used last (the example's before any step)."""
        return next(reversed(self._steps.values()))

    @property
    def program(self):
        """The Program of the batch signature used last."""
        return self._current.executor.program

    @property
    def executor(self):
        """The VM Executor of the batch signature used last."""
        return self._current.executor

    def computation_order_steps(self):
        """The recompute order the step runs (for the batch signature used
        last), as the list of steps that compiler option 'order' takes
        (CompiledModel.computation_order_steps)."""
        return list(self._current.order)

    def peak_bytes(self):
        """The most bytes the VM held at once over the steps run so far
        (pass ``runtime_kwargs={'track_memory': True}``; else 0): the live
        registers of the step's one program, from its inputs (the batch,
        parameters, running averages, the optimizer's state) and constants
        to each value's last read, as CompiledModel.peak_bytes counts; the
        most of the batch signatures compiled so far."""
        return max(step.executor.peak_bytes for step in self._steps.values())

    def __call__(self, *inputs):
        if len(inputs) != self._n_inputs:
            raise TypeError('the training step of %s takes %d input(s), got %d'
                            % (type(self.model).__name__, self._n_inputs, len(inputs)))
        values = [x.array if isinstance(x, chainer.Variable) else x for x in inputs]
        step = self._step_for(values)
        optimizer = self.optimizer
        values += [p.array for p in step.params]
        values += [getattr(link, attr) for link, attr in step.persistent_slots]
        values += [rule.state[slot] for rule in step.rules for slot in self._update.slots]
        counters = [optimizer, *step.rules]
        counts = [c.t for c in counters]
        for c in counters:
            c.t += 1  # Adam's alpha_t is that of the new t
        try:
            hyperparams = [_hyperparameter(optimizer, name) for name in self._update.hyperparams]
            if self._hyperparam_views is None:
                values += [numpy.float64(h) for h in hyperparams]
            else:
                self._hyperparams[:] = hyperparams
                values += self._hyperparam_views
            results = step.executor.run_positional(values)
        except BaseException:
            # What the batch makes fail (a label out of range ...) fails in
            # the forward half, before the first in-place update
            # (test_a_batch_the_program_refuses_changes_no_state): the step
            # counts are then all that changed.
            for c, t in zip(counters, counts):
                c.t = t
            raise
        for position, (link, attr) in step.state_positions:
            getattr(link, attr)[...] = results[position]
        for position, observer, key in step.reports:
            chainer.report({key: results[position]}, observer)
        return results[0]

    def _step_for(self, values):
        """The _CompiledStep for the batch ``values``, compiled for a new
        signature; the batch is checked before anything changes, so a
        refused call leaves optimizer.t, the update rules and the arrays as
        they were.  A training loop feeds the same shapes every step: as the
        VM does for its inputs, a signature (the arrays' shapes and dtypes)
        is checked once, and later batches of that signature are not checked
        again.  The other inputs are the model's and the optimizer's own
        arrays, bound at compile time and checked by the VM."""
        array_type = self._array_type
        # Only plain arrays are remembered: another type that passed once
        # may carry another shape next time.
        if all(type(v) is array_type for v in values):
            # (An array's shape is a tuple and its dtype a numpy.dtype:
            # _signature_of's conversions are not needed.)
            signature = tuple([(v.shape, v.dtype) for v in values])
            if signature in self._steps:
                return self._steps.use(signature)
        validate_inputs(self._declared, values, 'training_step')
        signature = _signature_of(values)
        xp = self.model.xp
        return self._steps.use(signature, lambda: self._compile(
            [xp.zeros(shape, dtype) for shape, dtype in signature]))


@contextlib.contextmanager
def _keeping_attributes(model):
    """Put back, on leaving, every Variable attribute that ``model``'s links
    were given meanwhile: a trace runs the forward on the example batch, and
    a link may keep what it made (L.Classifier's ``y``, ``loss`` and
    ``accuracy``) for the model's life.  Parameters are not touched."""
    before = [(link, dict(vars(link))) for link in model.links()]
    try:
        yield
    finally:
        for link, attributes in before:
            for name, value in list(vars(link).items()):
                if (isinstance(value, chainer.Variable)
                        and not isinstance(value, chainer.Parameter)
                        and attributes.get(name) is not value):
                    if name in attributes:
                        setattr(link, name, attributes[name])
                    else:
                        delattr(link, name)


@dataclass
class _CompiledStep:
    """The step compiled for one batch signature: its Executor and
    recompute order, the update rules, Parameters and persistent arrays it
    takes (in its inputs' order), the outputs that update running averages
    and the reported ones."""
    executor: object
    order: list
    rules: list
    params: list
    persistent_slots: list
    state_positions: list
    reports: list


def _signature_of(values):
    """((shape, dtype) of each array of ``values``)."""
    return tuple((tuple(v.shape), numpy.dtype(v.dtype)) for v in values)


def _describe(values):
    return ', '.join('%s %s' % (numpy.dtype(v.dtype).name, tuple(v.shape)) for v in values)


def _batch_inputs(declared):
    """The ValueInfos ``declared`` with axis 0 the symbol 'batch' where its
    size is the first input's: the other dimensions stay the example's."""
    batch = next((info.shape[0] for info in declared if info.shape), None)
    return [ValueInfo(info.name, info.register, info.kind, info.dtype,
                      ('batch',) + tuple(info.shape[1:])
                      if info.shape and info.shape[0] == batch else info.shape)
            for info in declared]


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
    """The OptimizerUpdate compiling ``optimizer``'s update; raises
    NotImplementedError saying why when the compiled step cannot do exactly
    what ``optimizer.update`` would."""
    rule_class, update = _implementation(optimizer)
    hooks = _hook_names(optimizer)
    for name, param in optimizer.target.namedparams():
        if param.update_rule is not None:
            _check_rule(name, param.update_rule, rule_class, optimizer.hyperparam)
            hooks += _hook_names(param.update_rule)
    if hooks:
        raise NotImplementedError(
            'compile_training_step: optimizer hooks are not compiled (%s); %s'
            % (', '.join(sorted(set(hooks))), _USE_COMPILE_ONNX))
    if getattr(optimizer, '_loss_scale', None) is not None:
        raise NotImplementedError('compile_training_step: loss scaling is not supported; %s'
                                  % _USE_COMPILE_ONNX)
    return update


def _implementation(optimizer):
    """(update rule class, OptimizerUpdate) for an optimizer of exactly a
    class in _UPDATES, in a variant the compiled step implements."""
    variants = [v for v in ('amsgrad', 'adabound') if getattr(optimizer.hyperparam, v, False)]
    if variants:
        raise NotImplementedError('compile_training_step: Adam with %s is not supported; %s'
                                  % (' and '.join(variants), _USE_COMPILE_ONNX))
    cls = type(optimizer)
    if cls in _UPDATES:
        return _UPDATES[cls]
    base = next((c for c in cls.__mro__ if c in _UPDATES), None)
    if base is None:
        why = 'the compiled step implements %s only' % ', '.join(c.__name__ for c in _UPDATES)
    else:
        why = ("it subclasses %s and may change its update, but the compiled step implements "
               "%s's own update only" % (base.__name__, base.__name__))
    raise NotImplementedError('compile_training_step: %s is not supported: %s; %s'
                              % (cls.__name__, why, _USE_COMPILE_ONNX))


def _check_rule(name, rule, rule_class, hyperparam):
    """Refuse an update rule the compiled step would not reproduce: another
    class (a subclass may override the update) or its own hyperparameters."""
    if type(rule) is not rule_class:
        raise NotImplementedError(
            'compile_training_step: parameter %s is updated by %s, but the compiled step '
            'implements %s only; %s' % (name, type(rule).__name__, rule_class.__name__,
                                        _USE_COMPILE_ONNX))
    if rule.hyperparam.get_dict() != hyperparam.get_dict():
        raise NotImplementedError(
            'compile_training_step: parameter %s has its own hyperparameters; the compiled '
            "step uses the optimizer's for every parameter; %s" % (name, _USE_COMPILE_ONNX))


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

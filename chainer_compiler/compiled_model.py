"""compile_onnx: an exported ONNX file becomes a chainer.Chain whose forward
and backward run compiled Programs on the VM.

The compiled Chain adopts the model's own links and Parameters, so
optimizers, hooks, serializers and Trainer snapshots see the same
parameters under the same paths as the plain model.
"""
import inspect
import logging
import os
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import chainer
import numpy
import onnx

from .autodiff.registry import GradientError
from .errors import BackwardReleasedError, ModelMismatchError
from .exporting import (
    TRACED_SIZES_KEY,
    TRANSLATORS,
    export,
    recorded_translator,
    with_sizes,
    write_onnx,
)
from .frontend import load_onnx
from .memory_model import compiled_peak_parts, compiled_process_peak, compiled_training_peak
from .onnx_graph import numpy_dtype, tensor_signature, value_kind
from .parameter_pack import ParameterPack
from .passes.training_mode import to_training_mode
from .pipeline import CompilerOptions
from .runtime.backend import get_array_module
from .runtime.errors import InputValidationError
from .runtime.executor import Executor
from .runtime.program import NO_REGISTER, ValueInfo
from .runtime.signatures import scalars_as_arrays, validate_inputs
from .training import compile_training
from .translators.onnx_chainer.naming import named_arrays

_log = logging.getLogger(__name__)

#: How many signatures (sizes of the symbolic dimensions) a compiled model
#: keeps programs for; the least recently used one is dropped beyond it, and
#: compiled again (native: built again, or taken from the build cache) when
#: it comes back.
SIGNATURE_CACHE_SIZE = 8


class SignatureCache(OrderedDict):
    """What was compiled for each signature, least recently used first,
    at most SIGNATURE_CACHE_SIZE of them."""

    def use(self, key, make=None, dropped=None):
        """The value of ``key`` (made by ``make()`` when missing), now the
        most recently used; the least recently used value beyond the size
        goes to ``dropped``."""
        value = self.get(key)
        if value is None:
            value = self[key] = make()
            if len(self) > SIGNATURE_CACHE_SIZE:
                evicted = self.popitem(last=False)[1]
                if dropped is not None:
                    dropped(evicted)
        self.move_to_end(key)
        return value


def compile_onnx(model, onnx_file, used_translator='onnx_chainer', dump_onnx=False,
                 computation_order=None, compiler_kwargs=None, runtime_kwargs=None,
                 pack_parameters=False):
    """Compile ``onnx_file`` (exported from ``model``) into a chainer.Chain.

    The returned Chain runs the compiled forward program, and its backward
    the compiled backward program, under ``chainer.config.train``; otherwise
    an inference program.  It uses ``model``'s own Parameters (parameters
    not initialized yet are initialized from the file's shapes).  The file
    must hold each of the model's parameters and persistent arrays, by link
    path, with its dtype and shape, and no other parameter: otherwise
    ModelMismatchError lists every difference.  Inputs of the wrong count,
    type, dtype or shape are refused before anything runs or changes.
    ``used_translator`` names the translator that exported the file; a
    file that records another one (``export`` records it) is refused with
    ValueError, a file that records none (written by another tool) is
    accepted.  ``dump_onnx`` writes the forward and backward graphs next to
    the file.  ``computation_order`` is the recompute policy (None, 'chen',
    'gt', 'custom', 'dummy'; README, "Recompute policies").
    ``compiler_kwargs`` are compiler options (pipeline.CompilerOptions:
    ``computation_order``, ``memory_budget``, ``chen_segments``,
    ``retain``, ``order``, ``fold_constants``; docs/pipeline.md); an unknown one is a
    TypeError naming it, one that does not fit the policy a ValueError.
    ``runtime_kwargs`` go to the VM's Executor (trace, check_nans, backend):
    an unknown name is a TypeError naming it, an unknown or unavailable
    backend a BackendUnavailableError, both raised by this call.  The
    backend is by default 'auto' (default_backend_of: native when a C
    compiler is present and covers the program, else NumPy), 'cupy' for a
    model on the GPU.
    An input the file declares as a sequence (a list argument exported by
    the ch2o translator) is a list or tuple of arrays or Variables, and a
    sequence output comes back as a list of Variables; under
    ``chainer.config.train`` gradients flow through both, element by
    element.
    ``backend='native'`` runs the programs compiled to C, the forward and
    backward ones too; a program with an operator the C kernels lack is
    refused (UnsupportedNativeOpsError naming it).
    The inference and training programs are compiled by this call, from
    the file's shapes, so what compiling refuses (a ``memory_budget`` below
    the least peak 'gt' finds, an operator the backend lacks) is raised
    here and the first batch runs at once; only a model lacking a gradient
    rule, which can still infer, fails at its first training batch, and
    inputs that need gradients (Variables) get programs on first use.
    ``pack_parameters=True`` makes the model's Parameters views into one
    flat Parameter (``packed_parameters``), the only one the Chain exposes,
    so that an optimizer updates one array a step instead of one per
    Parameter (parameter_pack.py; NumPy parameters of one floating dtype).
    The model's own serializers and snapshots are unchanged; the
    optimizer's state and hooks are those of the flat Parameter, which
    also takes the gradients (the model's Parameters' ``grad`` are not set).
    """
    if used_translator not in TRANSLATORS:
        raise ValueError('unknown translator %r: choose one of %s'
                         % (used_translator, TRANSLATORS))
    return CompiledModel(model, onnx_file, used_translator=used_translator, dump_onnx=dump_onnx,
                         computation_order=computation_order,
                         compiler_kwargs=compiler_kwargs or {},
                         runtime_kwargs=runtime_kwargs or {}, pack_parameters=pack_parameters)


def compile(model, inputs, translator='onnx_chainer', **kwargs):  # noqa: A001 (public API name)
    """Export ``model`` on ``inputs`` to a temporary ONNX file and compile it."""
    path = export(model, inputs, translator=translator)
    try:
        return compile_onnx(model, path, translator, **kwargs)
    finally:
        os.remove(path)


class CompiledModel(chainer.Chain):
    """A Chain running ``model``'s compiled Programs (see compile_onnx)."""

    def __init__(self, model, onnx_file, dump_onnx=False, computation_order=None,
                 compiler_kwargs=None, runtime_kwargs=None, used_translator=None,
                 pack_parameters=False):
        super().__init__()
        # Before anything changes: a bad option fails here, not at the first batch.
        if pack_parameters and (runtime_kwargs or {}).get('backend') == 'cupy':
            raise ValueError('pack_parameters packs NumPy arrays: use the numpy or native '
                             'backend, not cupy')
        _check_runtime_kwargs(runtime_kwargs or {})
        if not pack_parameters:
            self._adopt(model)
        self._model = model
        self.onnx_file = onnx_file
        # Checked now: a misspelt option fails here, not at the first batch.
        self.compiler_options = CompilerOptions.from_kwargs(
            compiler_kwargs, computation_order=computation_order)
        self.runtime_kwargs = dict(runtime_kwargs or {})
        self.runtime_kwargs.setdefault('backend', default_backend_of(model))
        self.dump_onnx = dump_onnx
        self._proto = load_onnx(onnx_file)
        recorded = recorded_translator(self._proto)
        if used_translator is not None and recorded not in (None, used_translator):
            raise ValueError("%s was exported by translator '%s', but compile_onnx was told "
                             "used_translator='%s'" % (onnx_file, recorded, used_translator))
        self._bind_parameters(model)
        #: The sizes of the symbolic dimensions (a sorted tuple of (symbol,
        #: size)) -> their _Signature, least recently used first.
        self._signatures = SignatureCache()
        #: (the input signature, its sizes) last accepted (_sizes_of).
        self._last_signature = None
        self._compile_now()
        #: The ParameterPack whose flat Parameter stands for the model's
        #: (pack_parameters), else None.
        self._pack = None
        if pack_parameters:
            self._pack = ParameterPack({n: self._param_of[n] for n in self._param_names})
            with self.init_scope():
                self.packed_parameters = self._pack.parameter

    # -- wiring the model's parameters -------------------------------------------
    def _adopt(self, model):
        with self.init_scope():
            for name, child in _direct_children(model):
                setattr(self, name, child)
            for name in getattr(model, '_params', ()):
                setattr(self, name, getattr(model, name))
        for name in getattr(model, '_persistent', ()):
            self.add_persistent(name, getattr(model, name))

    def serialize(self, serializer):
        """With packed parameters, the model's own: its Parameters are views
        into the packed one, so snapshots keep the model's paths."""
        if self._pack is None:
            super().serialize(serializer)
        else:
            self._model.serialize(serializer)

    def _bind_parameters(self, model):
        binding = self._binding = bind_initializers(self._proto.graph, model, self.onnx_file)
        self._param_names, self._state_names = binding.param_names, binding.state_names
        self._param_of, self._persistents = binding.param_of, binding.persistents
        graph = self._proto.graph
        self._inputs = [v for v in graph.input
                        if v.name not in {t.name for t in graph.initializer}]
        #: The data inputs as the file declares them, symbolic dimensions included.
        self._declared = [ValueInfo(v.name, NO_REGISTER, value_kind(v.type),
                                    *tensor_signature(v.type)) for v in self._inputs]
        #: id of a program -> the input signature last accepted for it
        #: (_check_inputs).
        self._accepted = {}

    # -- programs ----------------------------------------------------------------
    def _compile_now(self):
        """Compile the inference and training programs now, from the file's
        shapes (a file exported with dynamic_axes: for the sizes it was
        traced at): what compiling refuses (a memory_budget below the least
        peak, an operator the backend lacks) is raised by compile_onnx, not
        by the first batch, which then runs at once.  A model without a
        gradient rule for some operator still serves inference: its
        GradientError comes with the first training batch.  Data inputs
        that need gradients get their training programs on first use."""
        sizes = self._traced_sizes()
        if sizes is None:
            _log.debug('%s has symbolic dimensions of unknown sizes: its programs are compiled '
                       'at the first batch', self.onnx_file)
            return
        self._inference_executor(sizes)
        try:
            self._training_programs(sizes, ())
        except GradientError as e:
            _log.debug('%s: no training programs until the first training batch: %s',
                       self.onnx_file, e)

    def _traced_sizes(self):
        """The sizes the file's symbolic dimensions had when ``export``
        traced it (() for a file without any), or None when it does not say."""
        symbols = {d for info in self._declared for d in info.shape or () if isinstance(d, str)}
        if not symbols:
            return ()
        text = next((p.value for p in self._proto.metadata_props
                     if p.key == TRACED_SIZES_KEY), '')
        try:
            sizes = {k: int(v) for k, v in (item.split('=') for item in text.split(','))}
        except ValueError:
            return None
        # The file is untrusted: sizes it merely claims are not compiled for.
        if set(sizes) != symbols or not all(0 < n <= MAX_TRACED_SIZE for n in sizes.values()):
            return None
        return tuple(sorted(sizes.items()))

    def _signature(self, sizes):
        """The _Signature of ``sizes``, made most recently used; the least
        recently used one is dropped beyond SIGNATURE_CACHE_SIZE."""
        def forget(dropped):
            for executor in dropped.executors():
                self._accepted.pop(id(executor.program), None)
        return self._signatures.use(sizes, _Signature, forget)

    def _proto_for(self, sizes):
        """The file's model with its symbolic dimensions set to ``sizes``:
        programs are compiled for one concrete signature."""
        return with_sizes(self._proto, dict(sizes), self.onnx_file) if sizes else self._proto

    def _training_programs(self, sizes, inputs_needing_grad):
        """Forward/backward executors for the symbolic ``sizes``, compiled on
        first use for each set of data inputs that need a gradient (usually
        none: data comes as arrays)."""
        key = tuple(inputs_needing_grad)
        training = self._signature(sizes).training
        if key not in training:
            _log.info('compiling the training programs of %s%s', self.onnx_file,
                      _describe_sizes(sizes))
            start = time.perf_counter()
            proto, updates = self._binding.training_copy(self._proto_for(sizes))
            wrt = list(key) + self._param_names
            programs = compile_training(proto, params=self._binding.inputs,
                                        wrt=wrt, state_outputs=[u for u, _ in updates],
                                        options=self.compiler_options, check=False)
            if self.dump_onnx:
                self._dump(programs)
            options = dict(self.runtime_kwargs)
            training[key] = _TrainingState(
                programs, Executor(programs.forward, **options),
                # Backward is handed the retained values, which follow the
                # outputs' gradients (consume): on the native backend it may
                # reuse their memory after their last read.  Chainer keeps
                # the gradients, and the model its parameters, the data and
                # the outputs: donated, they would be copied at every call.
                Executor(programs.backward, donate_inputs=_donated(programs), **options),
                updates)
            _log.info('compiled the training programs of %s%s in %.1f s', self.onnx_file,
                      _describe_sizes(sizes), time.perf_counter() - start)
        return training[key]

    def _inference_executor(self, sizes):
        """The inference executor for the symbolic ``sizes``, compiled on first use."""
        signature = self._signature(sizes)
        if signature.inference is None:
            from .training import compile_inference
            _log.info('compiling the inference program of %s%s', self.onnx_file,
                      _describe_sizes(sizes))
            start = time.perf_counter()
            program = compile_inference(self._proto_for(sizes), params=self._binding.inputs,
                                        options=self.compiler_options)
            signature.inference = Executor(program, **self.runtime_kwargs)
            _log.info('compiled the inference program of %s%s in %.1f s', self.onnx_file,
                      _describe_sizes(sizes), time.perf_counter() - start)
        return signature.inference

    def _training_states(self):
        return [state for signature in self._signatures.values()
                for state in signature.training.values()]

    def peak_bytes(self):
        """The most bytes the VM held at once in any of this model's
        programs (pass ``runtime_kwargs={'track_memory': True}``; the VM
        counts its own arrays, on NumPy and CuPy alike).

        What counts: the bytes of the live registers of the running program
        (its constants and inputs, parameters included, from the start; each
        value from the instruction making it to the one freeing it).  A
        training step runs two programs: the values retained for backward
        count in the forward program as outputs until it ends, and in the
        backward program as inputs until their last read; the step's peak
        is the larger of the two programs'.  Arrays held outside the
        running program do not count: the outputs Chainer holds, the
        parameters' gradients after backward, and the retained values after
        backward's last read of them (the step's FunctionNode references
        them until its backward returns)."""
        return max((e.peak_bytes for signature in self._signatures.values()
                    for e in signature.executors()), default=0)

    def predicted_peak_bytes(self):
        """The memory model's prediction of peak_bytes for the training
        programs compiled so far (memory_model.py: static shapes, the same
        frees), comparable with peak_bytes() after training steps."""
        return max((compiled_training_peak(state.programs)
                    for state in self._training_states()), default=0)

    def predicted_peak_parts(self):
        """What the predicted peak is made of, in bytes (memory_model.
        compiled_peak_parts: the program that peaks, and its parameters,
        gradients, retained values and other values at that moment)."""
        parts = [compiled_peak_parts(state.programs) for state in self._training_states()]
        return max(parts, key=lambda p: p['total'], default=None)

    def predicted_process_peak_bytes(self):
        """The memory model's prediction of what the process holds at the
        peak of a training step on NumPy, the optimizer's state aside
        (memory_model.compiled_process_peak: the parameters and inputs
        throughout, and the kernels' temporaries)."""
        return max((compiled_process_peak(state.programs)
                    for state in self._training_states()), default=0)

    def computation_order_steps(self):
        """The recompute order the training programs compiled so far run
        (the first, where inputs needing gradients made several), as the
        list of steps that compiler option 'order' takes with
        computation_order 'custom': a policy's order to read, edit and pass
        back.  Forward nodes are named by their index in the compiled
        forward graph.  None when the model has no training programs (a
        model lacking a gradient rule)."""
        state = next(iter(self._training_states()), None)
        return None if state is None else list(state.programs.order)

    def _dump(self, programs):
        base = os.path.splitext(self.onnx_file)[0]
        for suffix, model in (('forward', programs.forward_onnx),
                              ('backward', programs.backward_onnx)):
            path = '%s.%s.onnx' % (base, suffix)
            write_onnx(model, path)
            print('chainer_compiler: wrote the %s graph to %s' % (suffix, path))

    # -- running -------------------------------------------------------------------
    def forward(self, *args):
        if len(args) != len(self._inputs):
            raise TypeError('%s takes %d input(s) (%s), got %d' % (
                type(self._model).__name__, len(self._inputs),
                ', '.join(v.name for v in self._inputs), len(args)))
        args = scalars_as_arrays(self._declared, args, self.onnx_file)
        values = [_array_of(x) for x in args]
        sizes = self._sizes_of(values)
        states = [self._state_array(n) for n in self._state_names]
        if chainer.config.train:
            state = self._training_programs(
                sizes, [info.name for x, info in zip(args, self._inputs)
                 if any(isinstance(e, chainer.Variable) and e.requires_grad
                        and e.dtype.kind == 'f' for e in _elements(x))])
            self._check_inputs(values, state.forward.program)
            # Arrays go to apply() as they are: Chainer wraps them itself.
            # Sequences (lists) go element by element, so that each element
            # gets its gradient.
            params = [self._param_of[n] for n in self._param_names] if self._pack is None \
                else [self._pack.parameter]
            flat, layout = _flatten(list(args) + params)
            step = _CompiledStep(self, state, states, layout, self._pack)
            outputs = _unflatten(step.apply(flat), step.output_layout)
        else:
            executor = self._inference_executor(sizes)
            self._check_inputs(values, executor.program)
            params = [self._param_of[n].array for n in self._param_names]
            results = executor.run_positional(values + params + states)
            outputs = [[chainer.Variable(e, requires_grad=False) for e in r]
                       if isinstance(r, list) else chainer.Variable(r, requires_grad=False)
                       for r in results]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _sizes_of(self, values):
        """The sizes of the file's symbolic dimensions in input ``values``,
        which are refused (InputValidationError naming the input, and the
        dimension) unless they are what the file declares: fixed dimensions
        match, each symbol has one size.  A batch size other than that of a
        file with fixed shapes gets its own message, naming the remedies."""
        signature = _signature_of(values)
        if self._last_signature is not None and self._last_signature[0] == signature:
            return self._last_signature[1]
        for x, info in zip(values, self._declared):
            dims = info.shape or ()
            shape = getattr(x, 'shape', None)
            if shape is not None and len(dims) == len(shape) and dims \
                    and isinstance(dims[0], int) and shape[0] != dims[0] \
                    and dims[1:] == tuple(shape[1:]):
                raise InputValidationError(
                    "input '%s' has batch size %d, but %s was exported with batch size %d; "
                    "a file of fixed shapes compiles for its batch size: export it with "
                    "dynamic_axes='batch' to take any, or wrap the dataset in "
                    "chainer_compiler.FixedBatchDataset(dataset, %d)"
                    % (info.name, shape[0], self.onnx_file, dims[0], dims[0]))
        symbols = validate_inputs(self._declared, values, self.onnx_file)
        sizes = tuple(sorted((symbol, size) for symbol, (size, _) in symbols.items()))
        if None not in signature:
            self._last_signature = (signature, sizes)
        return sizes

    def _check_inputs(self, values, program):
        """Refuse inputs ``program`` cannot take before anything runs (and
        changes running averages).  A training loop feeds the same shapes
        every step: NumPy arrays of a signature (shapes and dtypes) already
        accepted for ``program`` are not checked again."""
        signature = _signature_of(values)
        if self._accepted.get(id(program)) == signature:
            return
        validate_inputs(program.inputs[:len(values)], values, program.name)
        if None not in signature:
            self._accepted[id(program)] = signature

    def _state_array(self, name):
        link, attr = self._persistents[name]
        return getattr(link, attr)

    def _store_state(self, name, value):
        link, attr = self._persistents[name]
        target = getattr(link, attr)
        target[...] = value


def default_backend_of(model):
    """The backend the bridges run ``model`` on when runtime_kwargs name
    none: 'cupy' when its arrays live on the GPU, else 'auto' (which never
    chooses CuPy: the caller's arrays are on the host)."""
    return 'cupy' if model.xp is not numpy else 'auto'


#: The largest size compile_onnx compiles for when a file says its symbolic
#: dimensions were traced at it (the file is untrusted): larger ones wait
#: for a batch of that size.
MAX_TRACED_SIZE = 1 << 16


@dataclass
class _Signature:
    """The programs compiled for one signature (sizes of the symbolic
    dimensions): the inference executor, and the _TrainingState of each set
    of inputs needing gradients."""
    inference: object = None
    training: dict = field(default_factory=dict)

    def executors(self):
        executors = [e for state in self.training.values() for e in (state.forward,
                                                                      state.backward)]
        return executors + ([self.inference] if self.inference is not None else [])


def _signature_of(values):
    """The shapes and dtypes of input ``values``, None for what is not a
    NumPy array (a type that passed once may carry another shape next time)."""
    return tuple((v.shape, v.dtype) if type(v) is numpy.ndarray else None for v in values)


def _describe_sizes(sizes):
    return ' for %s' % ', '.join('%s=%d' % item for item in sizes) if sizes else ''


def _check_runtime_kwargs(kwargs):
    """Refuse now what the Executor would refuse when the first program is
    built: a name it does not take, a backend that is unknown or missing."""
    accepted = set(inspect.signature(Executor).parameters) - {'program'}
    unknown = sorted(set(kwargs) - accepted)
    if unknown:
        raise TypeError('unknown runtime_kwargs %s: the VM takes %s'
                        % (', '.join(unknown), ', '.join(sorted(accepted))))
    if kwargs.get('backend') is not None:
        get_array_module(kwargs['backend'])


def _elements(value):
    """The arrays or Variables of an input: a sequence's elements, or itself."""
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _array_of(value):
    """The array of an input, a list of arrays for a sequence (ONNX sequences
    are Python lists in the VM)."""
    if isinstance(value, (list, tuple)):
        return [_array_of(e) for e in value]
    return value.array if isinstance(value, chainer.Variable) else value


def _flatten(values):
    """(the tensors of ``values``, sequences' elements in their place;
    layout: per value, None for a tensor or the length of a sequence)."""
    flat, layout = [], []
    for value in values:
        is_sequence = isinstance(value, (list, tuple))
        layout.append(len(value) if is_sequence else None)
        flat.extend(_elements(value))
    return flat, layout


def _unflatten(flat, layout):
    """Undo _flatten: sequences become lists again."""
    values, at = [], 0
    for length in layout:
        values.append(flat[at] if length is None else list(flat[at:at + length]))
        at += 1 if length is None else length
    return values


def _donated(programs):
    """The positions of the backward inputs of training.TrainingPrograms
    ``programs`` that the bridge gives up: the retained values that no one
    else holds (not a forward input, not a model output)."""
    kept = {v.name for v in programs.forward.inputs} | set(programs.outputs)
    return [k for k in range(len(programs.grad_of_outputs), len(programs.backward.inputs))
            if programs.backward.inputs[k].name not in kept]


class _TrainingState:
    def __init__(self, programs, forward, backward, updates):
        self.programs = programs
        self.forward = forward
        self.backward = backward
        self.updates = updates
        #: Names of the forward program's outputs and inputs, in order.
        self.output_names = [v.name for v in programs.forward.outputs]
        self.input_names = [v.name for v in programs.forward.inputs]


class _CompiledStep(chainer.FunctionNode):
    """One FunctionNode for the whole compiled forward; its backward runs
    the compiled backward program."""

    def __init__(self, compiled, state, states, layout, pack):
        self.compiled = compiled
        self.state = state
        self.states = states
        #: _flatten's layout of the inputs and, after forward, of the outputs.
        self.layout = layout
        self.output_layout = None
        #: The ParameterPack whose flat array is the last input, or None.
        self.pack = pack

    def forward(self, inputs):
        programs = self.state.programs
        values = _unflatten(list(inputs), self.layout)
        if self.pack is not None:  # the program takes the parameters one by one
            values = values[:-1] + self.pack.views
        results = self.state.forward.run_positional(values + list(self.states))
        by_name = dict(zip(self.state.output_names, results))
        for updated, initializer in self.state.updates:
            self.compiled._store_state(initializer, by_name[updated])
        self.retained = [by_name[r] for r in programs.retained]
        flat, self.output_layout = _flatten([by_name[n] for n in programs.outputs])
        return tuple(flat)

    def backward(self, indexes, grad_outputs):
        programs = self.state.programs
        xp = self.state.backward.xp
        # An output the loss does not depend on gets zeros.
        flat = [xp.zeros(out().shape, out().dtype) if g is None else g.array
                for g, out in zip(grad_outputs, self.outputs)]
        grads_by_output = dict(zip(programs.outputs, _unflatten(flat, self.output_layout)))
        if self.retained is None:
            raise BackwardReleasedError(
                'the compiled step of %s ran backward already, and its values retained for '
                'backward were freed as it read them: run the forward pass again before '
                'another backward' % type(self.compiled._model).__name__)
        values = [grads_by_output[name] for name in programs.grad_of_outputs]
        # The backward program owns the retained values from here (consume):
        # each is freed at its last read, not when this step is collected.
        values += self.retained
        self.retained = None
        grads = dict(zip(programs.grads_for,
                         self.state.backward.run_positional(values, consume=True)))
        input_names = self.state.input_names
        # Which input (and element of a sequence input) each flat input is.
        positions = [(i, None if length is None else k)
                     for i, length in enumerate(self.layout)
                     for k in range(1 if length is None else length)]
        result = []
        for index in indexes:
            if self.pack is not None and index == len(positions) - 1:
                result.append(chainer.Variable._init_unchecked(self.pack.gather(grads)))
                continue
            i, k = positions[index]
            g = grads.get(input_names[i])
            if g is not None and k is not None:
                g = g[k]
            # Chainer's own unvalidated constructor: the arrays are ours.
            result.append(None if g is None else chainer.Variable._init_unchecked(g))
        return tuple(result)


@dataclass
class InitializerBinding:
    """Which initializers of an exported graph are the model's Parameters
    (``param_names``, ``param_of``: name -> Parameter) and which its
    persistent arrays (``state_names``; ``persistents``: name -> (link,
    attribute))."""
    param_names: list
    param_of: dict
    state_names: list
    persistents: dict

    @property
    def inputs(self):
        """The bound initializers, which compiled programs take as inputs:
        the Parameters, then the persistent arrays."""
        return self.param_names + self.state_names

    def training_copy(self, proto):
        """The training-mode form of ``proto`` (a copy; passes.training_mode:
        BatchNormalization updates the bound running averages with its
        link's decay, Dropout draws), and its [(updated value, running-average
        initializer)]: both bridges compile for training from this."""
        copy = onnx.ModelProto()
        copy.CopyFrom(proto)
        decays = {name: getattr(self.persistents[name][0], 'decay', 0.9)
                  for name in self.state_names}
        return copy, to_training_mode(copy, decays)


def bind_initializers(graph, model, source, traced=False):
    """Match the initializers of ``graph`` to ``model``'s Parameters and
    persistent arrays by the exporter's names for them (``/l1/W``,
    ``/bn/avg_mean``: translators/onnx_chainer/naming.py).

    The graph must hold every Parameter and persistent array of the model
    (persistent values that are not arrays, such as BatchNormalization's
    ``N``, are never exported), and every initializer named by a path (the
    exporter's names start with '/') must be one of them, with the model's
    dtype and shape.  Otherwise ModelMismatchError lists each problem
    (``source`` names the graph's file) and nothing is changed; if all
    match, Parameters not initialized yet take the graph's shapes.
    ``traced``: the graph is a trace of ``model`` itself, which lacks just
    the Parameters its forward never initialized (Chainer's optimizers skip
    them too), so those are not required.
    """
    named = named_arrays(model)
    params = {a.name: a.value for a in named if a.is_parameter}
    persistents = {a.name: (a.link, a.attribute) for a in named if not a.is_parameter}
    arrays = {a.name: a.value.array if a.is_parameter else a.value for a in named}
    problems = _mismatches(graph.initializer, arrays, traced)
    if problems:
        raise ModelMismatchError('%s does not match the model %s:\n  %s' % (
            source, type(model).__name__, '\n  '.join(problems)))
    binding = InitializerBinding([], {}, [], persistents)
    for init in graph.initializer:
        if init.name in params:
            param = params[init.name]
            if param.array is None:
                param.initialize(tuple(init.dims))
            binding.param_names.append(init.name)
            binding.param_of[init.name] = param
        elif init.name in persistents:
            binding.state_names.append(init.name)
    return binding


def _mismatches(initializers, arrays, traced):
    """One line per mismatch, sorted, between a graph's ``initializers``
    and a model's ``arrays`` (path -> array; None for a Parameter not
    initialized yet, which takes any shape)."""
    by_name = {init.name: init for init in initializers}
    problems = ['%s: missing in the file' % name for name, array in arrays.items()
                if name not in by_name and not (traced and array is None)]
    for name, init in by_name.items():
        if name not in arrays:
            if name.startswith('/'):  # a link path: the exporter's name for a parameter
                problems.append('%s: the model has no such parameter' % name)
        elif arrays[name] is not None:
            in_file = (str(numpy_dtype(init.data_type)), tuple(init.dims))
            in_model = (str(arrays[name].dtype), tuple(arrays[name].shape))
            if in_file != in_model:
                problems.append('%s: the file has %s %s, the model %s %s'
                                % ((name,) + in_file + in_model))
    return sorted(problems)


def _direct_children(model):
    if isinstance(model, chainer.ChainList):
        return [(str(i), child) for i, child in enumerate(model)]
    if isinstance(model, chainer.Chain):
        return [(name, getattr(model, name)) for name in sorted(model._children)]
    return []

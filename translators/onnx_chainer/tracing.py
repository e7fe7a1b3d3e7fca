"""Run a Chainer model once and translate the FunctionNodes it recorded.

A FunctionHook records every function call in execution order (which is a
topological order), the arrays it received and the line of user code that
made it.  Functions that no output depends on are skipped; each remaining
one goes through its converter.
"""
import contextlib
import os
import sys
import warnings
from dataclasses import dataclass, field

import chainer
import numpy

from ...onnx_builder import GraphBuilder, value_info
from . import registry, rnn
from .naming import named_arrays
from .recordable import recordable_functions

DEFAULT_OPSET = 17
MIN_OPSET = 11
MAX_OPSET = 26  # the newest both onnx 1.22 and onnxruntime 1.31 accept

#: FunctionNode attributes holding arrays the function updates in place
#: (F.batch_normalization's running averages).  The recorder copies each
#: such array before its first update, so the exported graph starts from
#: the values the model had before the trace; a later call in the same
#: trace reads the value the graph computed for the earlier one.
UPDATED_IN_PLACE = ('running_mean', 'running_var')


class UnsupportedFunctionError(Exception):
    """The model calls Chainer functions no converter handles."""


@dataclass
class FunctionCall:
    """One recorded call, as a converter sees it."""
    func: object          # the chainer FunctionNode
    inputs: list          # ONNX names of its inputs
    outputs: list         # ONNX names its outputs must get
    input_arrays: tuple   # the arrays it was called with (NumPy)
    call_site: str        # 'file:line' of the user code that called it
    train: bool           # exported in training mode
    # Training mode: for each array the function updates in place (in
    # UPDATED_IN_PLACE order), the ONNX name of its value before the call
    # and the name its updated value must get.  Empty otherwise.
    state_inputs: list = field(default_factory=list)
    state_outputs: list = field(default_factory=list)

    @property
    def name(self):
        return type(self.func).__name__


class Recorder(chainer.FunctionHook):
    """Records every FunctionNode applied while it is active, with its
    input arrays and the user's call site (ch2o reuses it per call)."""
    name = 'chainer_compiler_export'

    def __init__(self):
        self.calls = []
        self.before = {}  # id(array) -> its value before the trace updated it

    def forward_preprocess(self, function, in_data):
        for _, array in _updated_in_place(function):
            if id(array) not in self.before:
                self.before[id(array)] = _to_numpy(array).copy()
        self.calls.append((function, tuple(in_data), _user_call_site()))


def _updated_in_place(function):
    """[(attribute, array)] of the arrays ``function`` updates in place."""
    return [(attr, getattr(function, attr)) for attr in UPDATED_IN_PLACE
            if getattr(function, attr, None) is not None]


_INTERNAL_DIRS = tuple(os.path.dirname(m.__file__) + os.sep for m in (chainer,)) + (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
    os.path.dirname(os.__file__) + os.sep)


def _user_call_site():
    frame = sys._getframe(2)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not filename.startswith(_INTERNAL_DIRS):
            return '%s:%d' % (frame.f_code.co_filename, frame.f_lineno)
        frame = frame.f_back
    return '<unknown>'


def _to_numpy(array):
    return chainer.backend.CpuDevice().send(array)


def _as_variable(x):
    return x if isinstance(x, chainer.Variable) else chainer.Variable(x)


def export_model(model, inputs, opset_version=None, input_names=None, output_names=None,
                 train=False, external_converters=None, fold_rnn=True, reported=False):
    """Trace ``model`` on ``inputs`` and return the ONNX ModelProto.

    ``inputs``: an array or Variable, a tuple/list (``model(*inputs)``) or
    a dict (``model(**inputs)``).  Parameters are named by link path
    (``/l1/W``), persistent arrays too (``/bn/avg_mean``); every initialized
    parameter and persistent array is an initializer, used by the graph or
    not, so the file holds the model's whole state (``compile_onnx`` checks
    it against the model it compiles for).  ``input_names`` and
    ``output_names`` must be distinct non-empty strings, none a parameter's
    name (ValueError otherwise).  ``fold_rnn``
    exports each ``F.n_step_*`` call (``L.NStepLSTM`` ...) as ONNX
    LSTM/GRU/RNN nodes instead of the unrolled cell functions.
    ``reported``: also output the values the model reports with
    ``chainer.report``, after its own outputs, named by their keys as a
    Trainer would see them (``main/accuracy``; the model observes as
    ``main``, its links as ``main/<path>``).
    """
    opset = DEFAULT_OPSET if opset_version is None else int(opset_version)
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise ValueError('opset_version %d is not supported: choose %d to %d'
                         % (opset, MIN_OPSET, MAX_OPSET))
    if isinstance(inputs, dict):
        variables = {k: _as_variable(v) for k, v in inputs.items()}
        ordered = list(variables.values())
        call = lambda: model(**variables)  # noqa: E731
    else:
        if not isinstance(inputs, (list, tuple)):
            inputs = (inputs,)
        ordered = [_as_variable(v) for v in inputs]
        call = lambda: model(*ordered)  # noqa: E731
    state_names = {a.name: 'a parameter' if a.is_parameter else 'a persistent value'
                   for a in named_arrays(model)}
    in_names = _names(input_names, len(ordered), 'input', 'input_names', state_names)

    recorder = Recorder()
    observation = {}
    with recording(recorder, train, fold_rnn), _reporting(model, observation):
        result = call()
    if isinstance(result, dict):
        result = list(result.values())
    elif not isinstance(result, (list, tuple)):
        result = [result]
    results = [r if isinstance(r, chainer.Variable) else chainer.Variable(r) for r in result]
    taken = {**state_names, **{name: 'an input' for name in in_names}}
    out_names = _names(output_names, len(results), 'output', 'output_names', taken)
    if reported:
        for key, value in sorted(observation.items()):
            results.append(value if isinstance(value, chainer.Variable)
                           else chainer.Variable(numpy.asarray(value)))
            out_names.append(key)

    ctx = GraphBuilder(opset)
    names = {}  # id(VariableNode) -> ONNX name
    for var, name in zip(ordered, in_names):
        names[id(var.node)] = ctx.reserve(name)
    for name in out_names:
        ctx.reserve(name)
    arrays = named_arrays(model)
    params = {id(a.value.node): (a.name, a.value) for a in arrays
              if a.is_parameter and a.value.array is not None}
    needed = needed_functions(results)
    state = _State(ctx, {id(a.value): a.name for a in arrays if not a.is_parameter},
                   recorder.before, [f for f, _, _ in recorder.calls if id(f) in needed])
    wanted_outputs = {id(r.node): n for r, n in zip(results, out_names)
                      if r.creator_node is not None and id(r.node) not in names}
    unsupported = []

    def input_name(node, array):
        key = id(node)
        if key in names:
            return names[key]
        if key in params:
            pname, p = params[key]
            names[key] = ctx.initializer(pname, _to_numpy(p.array))
        elif state.is_state(array):
            names[key] = state.value(array)
        else:
            names[key] = ctx.constant(_to_numpy(array).copy(), hint='const')
        return names[key]

    for func, in_data, site in recorder.calls:
        if id(func) not in needed:
            continue
        target = converter_target(func)
        fn = registry.lookup(type(target).__name__, external_converters)
        if fn is None:
            unsupported.append('%s (called at %s)' % (type(target).__name__, site))
            continue
        ins = [input_name(n, a) for n, a in zip(func.inputs, in_data)]
        outs = []
        for ref in func.outputs:
            node = ref()
            key = id(node) if node is not None else None
            if key in wanted_outputs:
                names[key] = wanted_outputs.pop(key)
            elif key is not None:
                names[key] = ctx.fresh(type(func).__name__)
            outs.append(names[key] if key is not None else ctx.fresh('unused'))
        call = FunctionCall(target, ins, outs, tuple(_to_numpy(a) for a in in_data), site, train)
        if train:
            call.state_inputs, call.state_outputs = state.update(func)
        fn(ctx, call)
    if unsupported:
        raise UnsupportedFunctionError(
            'no converter for %d Chainer function call(s):\n  %s\n(add one with '
            'external_converters={name: fn})' % (len(unsupported), '\n  '.join(unsupported)))

    # Outputs that are inputs or parameters themselves, or returned twice.
    graph_outputs = []
    for var, name in zip(results, out_names):
        source = names.get(id(var.node))
        if source is None:
            source = input_name(var.node, var.array)
        if source != name:
            ctx.node('Identity', [source], [name])
        graph_outputs.append(value_info(name, _to_numpy(var.array)))
    graph_outputs.extend(value_info(name, _to_numpy(array)) for name, array in ctx.extra_outputs)

    _add_unused_state(ctx, arrays, state)
    graph_inputs = [value_info(n, _to_numpy(v.array)) for v, n in zip(ordered, in_names)]
    # The trace's graph holds every activation of the example batch, and the
    # model may keep its outputs (L.Classifier's loss, y, accuracy): cut it,
    # so they do not live as long as the model does.
    for var in results:
        var.unchain_backward()
    return ctx.make_model(type(model).__name__, graph_inputs, graph_outputs)


@contextlib.contextmanager
def recording(recorder, train=False, fold_rnn=True):
    """Run Chainer code so that ``recorder`` sees every function it calls
    as the converters expect them: in ``train`` mode, with a graph, the
    piecewise-constant functions and inference dropout recordable, and
    ``F.n_step_*`` folded into one NStepRNN call unless ``fold_rnn`` is
    False."""
    folding = rnn.n_step_as_single_calls() if fold_rnn else rnn.n_step_unrolled()
    with chainer.using_config('train', train), chainer.using_config('enable_backprop', True), \
            recordable_functions(), folding, recorder:
        yield


def converter_target(func):
    """The object a converter is looked up by and receives: old-style
    chainer.Function objects arrive wrapped in a FunctionAdapter."""
    if isinstance(func, chainer.function.FunctionAdapter):
        return getattr(func, '_function', func)
    return func


@contextlib.contextmanager
def _reporting(model, observation):
    """Collect what ``model`` reports, graph and all, into ``observation``
    under the keys a Trainer's reporter would use."""
    reporter = chainer.Reporter()
    if isinstance(model, chainer.Link):
        reporter.add_observer('main', model)
        reporter.add_observers('main', model.namedlinks(skipself=True))
    with reporter.scope(observation), chainer.using_config('keep_graph_on_report', True):
        yield


def _names(given, count, prefix, argument, taken):
    """The graph's ``count`` input or output names: ``given`` (checked) or
    ``<prefix>_0``...  ``taken`` maps names already in use to what uses them
    ('a parameter'): a clash would give two values one ONNX name."""
    names = ['%s_%d' % (prefix, i) for i in range(count)] if given is None else (
        [given] if isinstance(given, str) else list(given))
    if len(names) != count:
        raise ValueError('%s has %d name(s) but there are %d %ss'
                         % (argument, len(names), count, prefix))
    taken = dict(taken)
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError('%s: %r is not a name (names are non-empty strings)'
                             % (argument, name))
        if name in taken:
            raise ValueError("%s: '%s' is already the name of %s" % (argument, name, taken[name]))
        taken[name] = 'an ' + prefix
    return names


class _State:
    """The graph's values of the model's persistent arrays and of the
    arrays a training-mode trace updates in place (running averages).

    Each starts as an initializer holding its value from before the trace,
    named by its path (``/bn/avg_mean``) when it is one of the model's
    persistent arrays.  Each update by a call gives it a new value; the last
    one, named ``<name>_updated``, is a graph output.  So a link called
    twice exports both updates, the second reading the first's result, as
    Chainer computed them."""

    def __init__(self, ctx, persistents, before, calls):
        self.ctx = ctx
        self.persistents = persistents  # id(array) -> ONNX name
        self.before = before            # id(array) -> value before the trace updated it
        self.names = {}                 # id(array) -> its initializer's name
        self.current = {}               # id(array) -> the name of its latest value
        self.last_update = {id(array): func for func in calls
                            for _, array in _updated_in_place(func)}

    def is_state(self, array):
        """Whether ``array`` is a persistent array or was updated in place."""
        return id(array) in self.persistents or id(array) in self.current

    def initial(self, array):
        """``array``'s value before the trace (NumPy)."""
        before = self.before.get(id(array))
        return _to_numpy(array) if before is None else before

    def value(self, array, hint='state'):
        """The name of ``array``'s current value in the graph."""
        key = id(array)
        if key not in self.current:
            name = self.persistents.get(key) or self.ctx.fresh(hint)
            self.names[key] = self.current[key] = self.ctx.initializer(
                name, self.initial(array))
        return self.current[key]

    def update(self, func):
        """For the arrays ``func`` updates in place: the names of their
        values before the call, and the names their new values get."""
        inputs, outputs = [], []
        for attr, array in _updated_in_place(func):
            inputs.append(self.value(array, attr))
            key = id(array)
            updated = self.names[key] + '_updated'
            if self.last_update[key] is func:
                self.current[key] = self.ctx.reserve(updated)
                self.ctx.add_output(updated, self.initial(array))
            else:
                self.current[key] = self.ctx.fresh(updated)
            outputs.append(self.current[key])
        return inputs, outputs


def _add_unused_state(ctx, arrays, state):
    """Add the parameters and persistent arrays (``arrays``, NamedArrays)
    the graph does not use as initializers too, warning with their names:
    the file then holds every array of the model, which is what
    ``compile_onnx`` checks a file against.  A parameter never initialized
    has no array to add."""
    values = [(a.name, a.value.array if a.is_parameter else state.initial(a.value))
              for a in arrays]
    written = {init.name for init in ctx.initializers}
    unused = [(name, array) for name, array in values if name not in written]
    kept = [name for name, array in unused if array is not None]
    if kept:
        warnings.warn('parameters not used by the exported graph: %s (in the file all the same)'
                      % ', '.join(kept), stacklevel=2)
    uninitialized = [name for name, array in unused if array is None]
    if uninitialized:
        warnings.warn('parameters never initialized are not in the file (compile_onnx refuses '
                      'it for this model): %s' % ', '.join(uninitialized), stacklevel=2)
    for name, array in unused:
        if array is not None:
            ctx.initializer(name, _to_numpy(array))


def needed_functions(results):
    """ids of FunctionNodes some output depends on."""
    needed, stack = set(), [r.node for r in results]
    seen = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        creator = node.creator_node
        if creator is not None and id(creator) not in needed:
            needed.add(id(creator))
            stack.extend(creator.inputs)
    return needed


__all__ = ['DEFAULT_OPSET', 'FunctionCall', 'MAX_OPSET', 'MIN_OPSET', 'Recorder',
           'UnsupportedFunctionError', 'converter_target', 'export_model', 'needed_functions',
           'recording']

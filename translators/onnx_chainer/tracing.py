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
from dataclasses import dataclass

import chainer
import numpy

from . import registry, rnn
from .recordable import recordable_functions
from ...onnx_builder import GraphBuilder, value_info

DEFAULT_OPSET = 17
MIN_OPSET = 11
MAX_OPSET = 26  # the newest both onnx 1.22 and onnxruntime 1.31 accept


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

    @property
    def name(self):
        return type(self.func).__name__


class _Recorder(chainer.FunctionHook):
    name = 'chainer_compiler_export'

    def __init__(self):
        self.calls = []

    def forward_preprocess(self, function, in_data):
        self.calls.append((function, tuple(in_data), _user_call_site()))


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
    state_names = {name: 'a parameter' for name, _ in model.namedparams(include_uninit=True)}
    state_names.update((name, 'a persistent value') for name, _, _ in named_persistents(model))
    in_names = _names(input_names, len(ordered), 'input', 'input_names', state_names)

    recorder = _Recorder()
    folding = rnn.n_step_as_single_calls() if fold_rnn else rnn.n_step_unrolled()
    observation = {}
    with chainer.using_config('train', train), chainer.using_config('enable_backprop', True), \
            recordable_functions(), folding, recorder, _reporting(model, observation):
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
    params = {id(p.node): (name, p) for name, p in model.namedparams() if p.array is not None}
    persistents = {id(getattr(link, attr)): name
                   for name, link, attr in named_persistents(model)}
    needed = _needed_functions(results)
    wanted_outputs = {id(r.node): n for r, n in zip(results, out_names)
                      if r.creator_node is not None and id(r.node) not in names}
    persistent_names, unsupported = set(), []

    def input_name(node, array):
        key = id(node)
        if key in names:
            return names[key]
        if key in params:
            pname, p = params[key]
            names[key] = ctx.initializer(pname, _to_numpy(p.array))
        elif id(array) in persistents:
            # A link called twice passes the same running averages twice.
            name = persistents[id(array)]
            if name not in persistent_names:
                persistent_names.add(ctx.initializer(name, _to_numpy(array)))
            names[key] = name
        else:
            names[key] = ctx.constant(_to_numpy(array).copy(), hint='const')
        return names[key]

    for func, in_data, site in recorder.calls:
        if id(func) not in needed:
            continue
        # Old-style chainer.Function objects arrive wrapped in a FunctionAdapter.
        target = getattr(func, '_function', func) if isinstance(
            func, chainer.function.FunctionAdapter) else func
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
        fn(ctx, FunctionCall(target, ins, outs, tuple(_to_numpy(a) for a in in_data), site, train))
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

    _add_unused_state(ctx, model)
    graph_inputs = [value_info(n, _to_numpy(v.array)) for v, n in zip(ordered, in_names)]
    return ctx.make_model(type(model).__name__, graph_inputs, graph_outputs)


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


def named_persistents(model):
    """[('/link/path/name', link, attribute)] for the persistent arrays of
    ``model`` and its links (``/bn/avg_mean``), named like parameters.
    Persistent values that are not arrays (BatchNormalization's counter
    ``N``, Python scalars) are not listed: an ONNX initializer is a tensor,
    and no converter reads them."""
    return [('%s/%s' % (path if path != '/' else '', name), link, name)
            for path, link in model.namedlinks() for name in sorted(link._persistent)
            if isinstance(getattr(link, name, None), chainer.get_array_types())]


def _add_unused_state(ctx, model):
    """Add the parameters and persistent arrays the graph does not use as
    initializers too, warning with their names: the file then holds every
    array of the model, which is what ``compile_onnx`` checks a file
    against.  A parameter never initialized has no array to add."""
    state = [(name, p.array) for name, p in model.namedparams(include_uninit=True)]
    state += [(name, getattr(link, attr)) for name, link, attr in named_persistents(model)]
    written = {init.name for init in ctx.initializers}
    unused = [(name, array) for name, array in state if name not in written]
    kept = [name for name, array in unused if array is not None]
    if kept:
        warnings.warn('parameters not used by the exported graph: %s (in the file all the same)'
                      % ', '.join(kept))
    uninitialized = [name for name, array in unused if array is None]
    if uninitialized:
        warnings.warn('parameters never initialized are not in the file (compile_onnx refuses '
                      'it for this model): %s' % ', '.join(uninitialized))
    for name, array in unused:
        if array is not None:
            ctx.initializer(name, _to_numpy(array))


def _needed_functions(results):
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


__all__ = ['DEFAULT_OPSET', 'FunctionCall', 'MAX_OPSET', 'MIN_OPSET',
           'UnsupportedFunctionError', 'export_model', 'named_persistents']

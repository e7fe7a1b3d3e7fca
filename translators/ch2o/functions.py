"""Calls to ``chainer.functions`` and to the links of ``chainer.links``.

ch2o does not convert Chainer functions itself: it calls the function on
Variables holding the arguments' examples, under the tracing translator's
recorder, and hands every FunctionNode the result depends on to the tracing
translator's converter, with the Tensors' names as its inputs.  So every
function the tracer supports works here too.  Model parameters and
persistent arrays become the initializers named by link path, other arrays
constants.

Converters read sizes off the example arrays and may bake them into the
graph (a Reshape target, pads).  When an argument has an axis whose size
varies at run time (None in ``Tensor.shape``), the call is converted again
on examples with that axis twice as long: if the two ONNX forms differ, the
conversion is only right for the export-time size and the call is an
error; otherwise the result's axes whose size changed get None.

The exceptions, converted by ch2o itself because their sizes are read at
run time: calls on a Sequence (sequence_functions); ``F.reshape`` and
``F.broadcast_to`` to shapes holding run-time values (``x.shape[0]``);
``F.reshape`` of, ``F.separate`` along, ``F.linear``/``L.Linear`` over
(more than 2 axes) and NStep links on lists of tensors with varying axes;
``F.split_axis`` at indices held by a tensor.  And the Reshapes Chainer
records inside other functions, when sizes vary, keep the leading axes
they copy and infer one (``x.reshape(len(x), -1)`` in F.linear).
"""
import inspect

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
from onnx import numpy_helper

from ..onnx_chainer import registry, tracing
from . import numpy_calls, sequence_functions
from .scope import Scope, Translation
from .values import (
    Const,
    PyDict,
    PyList,
    PyTuple,
    Sequence,
    Tensor,
    TranslationError,
    example_of,
    is_constant,
)


def call_chainer(scope, fn, args, kwargs, site):
    """``fn(*args, **kwargs)`` where ``fn`` is a function of
    chainer.functions or a link of chainer.links, ``args``/``kwargs``
    Values; returns the result as a Value (a Tensor, or a PyTuple/PyList of
    them as Chainer returns them)."""
    label = function_label(fn)
    values = list(args) + list(kwargs.values())
    if any(_contains(v, Sequence) for v in values):
        return sequence_functions.call_on_sequence(scope, fn, label, args, kwargs, site)
    special = _dynamic_form(scope, fn, label, args, kwargs, site)
    if special is not None:
        return special
    conversion = _Conversion(scope, fn, label, args, kwargs, site)
    result, form = conversion.run()
    varying = [(i, t, axis) for i, t in enumerate(conversion.tensors)
               for axis, d in enumerate(t.shape) if d is None]
    if varying:
        _check_size_independence(scope, fn, label, args, kwargs, site, result, form, varying,
                                 conversion.argument_names)
    return result


def function_label(fn):
    """How messages name ``fn``: ``F.relu``, ``L.Linear``."""
    if isinstance(fn, chainer.Link):
        return 'L.%s' % type(fn).__name__
    module = getattr(fn, '__module__', '') or ''
    name = getattr(fn, '__name__', type(fn).__name__)
    return 'F.%s' % name if module.startswith('chainer.functions') else name


def _leaves(value):
    """The Values inside ``value``'s containers (``value`` itself if it is
    not a container)."""
    if isinstance(value, (PyList, PyTuple)):
        return [leaf for v in value.items for leaf in _leaves(v)]
    if isinstance(value, PyDict):
        return [leaf for v in value.items.values() for leaf in _leaves(v)]
    return [value]


def _contains(value, kind):
    return any(isinstance(leaf, kind) for leaf in _leaves(value))


def _value_tensors(value):
    return [leaf for leaf in _leaves(value) if isinstance(leaf, Tensor)]


def _tensor_argument(tensor, args, kwargs, argument_names):
    """The name of the argument that holds ``tensor``."""
    for name, value in zip(argument_names, list(args) + list(kwargs.values())):
        if any(leaf is tensor for leaf in _leaves(value)):
            return name
    return 'an argument'


def _argument_names(fn, args, kwargs):
    """A name per positional argument then per keyword argument: the
    parameter's name where the signature tells it."""
    target = fn.forward if isinstance(fn, chainer.Link) else fn
    names = ['argument %d' % (i + 1) for i in range(len(args))] + list(kwargs)
    try:
        parameters = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return names
    for i in range(len(args)):
        if i < len(parameters) and parameters[i].kind in (
                inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            names[i] = parameters[i].name
    return names


# ---------------------------------------------------------------------------
# Calls whose ONNX form ch2o builds itself
# ---------------------------------------------------------------------------


def _dynamic_form(scope, fn, label, args, kwargs, site):
    """The result of the calls whose sizes ch2o reads at run time itself, or
    None for every other call (and for these when nothing varies)."""
    if isinstance(fn, L.Linear):
        handler = _linear_link
    elif isinstance(fn, sequence_functions.N_STEP_LINKS):
        handler = _n_step_link
    elif isinstance(fn, chainer.Link):
        handler = None
    else:
        handler = _DYNAMIC.get(fn)
    if handler is None:
        return None
    arguments = sequence_functions.bind_arguments(fn, args, kwargs, site, label)
    return handler(scope, fn, label, arguments, site)


def _reshape(scope, fn, label, arguments, site):
    """F.reshape of a tensor with varying axes, or to a shape holding run-time
    values: one ONNX Reshape reading the shape at run time."""
    x, shape = arguments['x'], arguments['shape']
    if isinstance(x, Tensor) and (None in x.shape or not is_constant(shape)):
        return numpy_calls.reshape(scope, x, shape, site, label)
    return None


def _broadcast_to(scope, fn, label, arguments, site):
    """F.broadcast_to to a shape holding run-time values: ONNX Expand."""
    x, shape = arguments['x'], arguments['shape']
    if not isinstance(x, Tensor) or is_constant(shape):
        return None
    target, dims = numpy_calls.shape_vector(scope, shape, site, '%s: the shape' % label)
    sizes = tuple(int(d) for d in numpy.asarray(example_of(shape)).reshape(-1))
    result = scope.emit('Expand', [x, target], numpy.broadcast_to(x.example, sizes).copy())
    result.shape = dims
    return result


def _separate(scope, fn, label, arguments, site):
    """F.separate along an axis whose size varies: a Sequence."""
    x, axis = arguments['x'], _static_int(arguments['axis'], 'axis', site, label)
    if isinstance(x, Tensor) and x.shape[axis % x.ndim] is None:
        return sequence_functions.separate(scope, x, axis)
    return None


def _split_axis(scope, fn, label, arguments, site):
    """F.split_axis at indices held by a 1-D tensor: a Sequence."""
    x, indices = arguments['x'], arguments['indices_or_sections']
    if not isinstance(x, Tensor) or not isinstance(indices, Tensor) or indices.ndim != 1:
        return None
    axis = _static_int(arguments['axis'], 'axis', site, label)
    return sequence_functions.split_at(scope, x, indices, axis)


def _n_step_link(scope, link, label, arguments, site):
    """An NStep link on a list of tensors whose lengths vary: the folded
    converter bakes them, sequence_functions reads them at run time."""
    xs = arguments['xs']
    if isinstance(xs, (PyList, PyTuple)) and xs.items and all(
            isinstance(t, Tensor) for t in xs.items) and any(None in t.shape for t in xs.items):
        return sequence_functions.n_step_link_on_list(
            scope, link, sequence_functions.initial_states(link, arguments), xs, site)
    return None


def _static_int(value, what, site, label):
    if not isinstance(value, Const) or not isinstance(value.value, int):
        raise TranslationError(site, '%s: %s must be an int known at export time, not %s'
                               % (label, what, value.kind))
    return value.value


def _linear(scope, fn, label, arguments, site):
    """F.linear of a tensor of more than 2 axes some of which vary: Chainer
    reshapes to 2-D and back by sizes it bakes, ch2o multiplies directly
    (MatMul broadcasts over the batch axes)."""
    x = arguments['x']
    if not isinstance(x, Tensor) or None not in x.shape or x.ndim <= 2:
        return None
    n_batch_axes = _static_int(arguments['n_batch_axes'], 'n_batch_axes', site, label)
    W = scope.as_tensor(arguments['W'], site, '%s: W' % label)
    b = arguments['b']
    b = None if isinstance(b, Const) and b.value is None else scope.as_tensor(b, site,
                                                                               '%s: b' % label)
    try:
        example = F.linear(x.example, W.example, None if b is None else b.example,
                           n_batch_axes=n_batch_axes).array
    except Exception as e:  # noqa: BLE001  (anything Chainer raises is the user's error)
        raise TranslationError(site, '%s: %s: %s' % (label, type(e).__name__, e)) from None
    return _batched_product(scope, x, W, b, n_batch_axes, example)


def _linear_link(scope, link, label, arguments, site):
    """L.Linear: as F.linear with the link's parameters."""
    x = arguments['x']
    if not isinstance(x, Tensor) or None not in x.shape or x.ndim <= 2:
        return None
    n_batch_axes = _static_int(arguments['n_batch_axes'], 'n_batch_axes', site, label)
    try:
        with chainer.using_config('train', False), chainer.no_backprop_mode():
            example = link(x.example, n_batch_axes=n_batch_axes).array  # initializes W
    except Exception as e:  # noqa: BLE001  (anything Chainer raises is the user's error)
        raise TranslationError(site, '%s: %s: %s' % (label, type(e).__name__, e)) from None
    W = scope.as_tensor(Const(link.W), site, '%s: W' % label)
    b = None if link.b is None else scope.as_tensor(Const(link.b), site, '%s: b' % label)
    return _batched_product(scope, x, W, b, n_batch_axes, example)


def _batched_product(scope, x, W, b, n_batch_axes, example):
    """x W^T + b over the last axes of ``x`` after its first
    ``n_batch_axes`` (flattened together when there are several)."""
    if x.ndim > n_batch_axes + 1:
        flat = scope.node('Reshape', [x.name, scope.int64s([0] * n_batch_axes + [-1])])
    else:
        flat = x.name
    weight = scope.node('Transpose', [W.name], perm=[1, 0])
    y = scope.node('MatMul', [flat, weight])
    result = scope.emit('Add', [y, b], example) if b is not None else \
        Tensor(y, example)
    result.shape = tuple(x.shape[:n_batch_axes]) + (W.shape[0],)
    return result


_DYNAMIC = {F.reshape: _reshape, F.broadcast_to: _broadcast_to, F.separate: _separate,
            F.split_axis: _split_axis, F.linear: _linear}


# ---------------------------------------------------------------------------
# Calls converted by the tracing translator's converters
# ---------------------------------------------------------------------------


class _Conversion:
    """One call of ``fn`` on the arguments' examples, and its conversion
    into ``scope``.  ``vary``: (index of a Tensor in ``tensors``, axis) pairs
    whose example is made longer along that axis."""

    def __init__(self, scope, fn, label, args, kwargs, site, vary=()):
        self.scope, self.fn, self.label, self.site = scope, fn, label, site
        self.args, self.kwargs = args, kwargs
        self.vary = set(vary)
        self.argument_names = _argument_names(fn, args, kwargs)
        self.names = {}       # id(VariableNode) -> ONNX name
        self.inputs = {}      # id(VariableNode) -> the argument Tensor
        self.tensors = []     # argument Tensors, in the order met
        self.variables = {}   # id(Tensor) -> its Variable
        self.numbers = []     # argument names holding a tensor where a number may be meant

    def run(self):
        """Convert the call; return its result (a Value) and the ONNX form
        it got (see _form)."""
        scope = self.scope
        chainer_args = [self._chainer_value(v, n, False)
                        for v, n in zip(self.args, self.argument_names)]
        chainer_kwargs = {k: self._chainer_value(v, k, False) for k, v in self.kwargs.items()}
        first_node, first_init = len(scope.nodes), len(scope.initializers)
        recorder = tracing.Recorder()
        try:
            with tracing.recording(recorder):
                out = self.fn(*chainer_args, **chainer_kwargs)
        except TranslationError:
            raise
        except Exception as e:  # noqa: BLE001  (anything Chainer raises is the user's error)
            raise self._call_error(e) from None
        results = _variables(out)
        needed = tracing.needed_functions(results)
        for func, in_data, _ in recorder.calls:
            if id(func) in needed:
                self._convert(func, in_data)
        value = self._value(out)
        nodes = scope.nodes[first_node:]
        self._check_tensors_used(nodes, value)
        return value, _form(nodes, scope.initializers[first_init:],
                            scope.translation.added_state_names())

    def _chainer_value(self, value, where, in_container):
        """What Chainer gets for ``value``: a Variable for a Tensor,
        containers rebuilt, constants as they are."""
        if isinstance(value, Tensor):
            if id(value) not in self.variables:
                index = len(self.tensors)
                self.tensors.append(value)
                variable = chainer.Variable(self._example(index, value))
                self.variables[id(value)] = variable
                self.names[id(variable.node)] = value.name
                self.inputs[id(variable.node)] = value
            if value.ndim == 0 or in_container:
                self.numbers.append(where)
            return self.variables[id(value)]
        if isinstance(value, (PyList, PyTuple)):
            mixed = any(isinstance(v, Const) for v in value.items)
            items = [self._chainer_value(v, where, mixed) for v in value.items]
            return items if isinstance(value, PyList) else tuple(items)
        if isinstance(value, PyDict):
            return {k: self._chainer_value(v, where, False) for k, v in value.items.items()}
        if isinstance(value, Const):
            return value.value
        raise TranslationError(self.site, '%s: %s cannot be passed as %s'
                               % (self.label, value.kind, where))

    def _example(self, index, tensor):
        """The example of the ``index``-th argument Tensor, twice as long
        along each varied axis (its entries repeated, so that indices stay
        valid and a size that divides evenly still does)."""
        example = tensor.example
        for axis in range(tensor.ndim):
            if (index, axis) in self.vary:
                example = (numpy.concatenate([example, example], axis) if example.shape[axis]
                           else numpy.zeros(example.shape[:axis] + (1,) + example.shape[axis + 1:],
                                            example.dtype))
        return example

    def _call_error(self, error):
        if self.numbers:
            return TranslationError(self.site, '%s: %s holds a tensor (a value known only at '
                                    'run time) where Chainer needs a Python value known at '
                                    'export time (Chainer: %s)'
                                    % (self.label, self.numbers[0], error))
        return TranslationError(self.site, '%s: %s: %s' % (self.label, type(error).__name__,
                                                           error))

    def _convert(self, func, in_data):
        """Emit one recorded FunctionNode through its converter."""
        target = tracing.converter_target(func)
        converter = registry.lookup(type(target).__name__)
        if converter is None:
            raise TranslationError(self.site, '%s is not supported: no converter for the Chainer '
                                   'function %s it calls' % (self.label, type(target).__name__))
        inputs = [self._input_name(node, array) for node, array in zip(func.inputs, in_data)]
        outputs = []
        for ref in func.outputs:
            node = ref()
            name = self.scope.fresh(type(target).__name__)
            if node is not None:
                self.names[id(node)] = name
            outputs.append(name)
        call = tracing.FunctionCall(target, inputs, outputs, tuple(_host(a) for a in in_data),
                                    self.site, False)
        if type(target).__name__ == 'Reshape' and self._varying() and \
                self._size_independent_reshape(call):
            return
        try:
            converter(self.scope, call)
        except (ValueError, NotImplementedError, TypeError) as e:
            raise TranslationError(self.site, '%s: %s' % (self.label, e)) from None

    def _varying(self):
        return any(None in t.shape for t in self.tensors)

    def _size_independent_reshape(self, call):
        """Emit a Reshape Chainer recorded (``x.reshape(len(x), -1)`` inside
        F.linear ...) with the target's leading axes that equal the input's
        as 0 (ONNX: "this axis's size") and one other axis as -1, so that it
        holds for other sizes too.  The varied conversion checks that
        reading: a size that only happened to be equal gives another form.
        Returns False (not emitted) for zero-sized shapes."""
        x = call.input_arrays[0]
        wanted = tuple(call.func.shape)
        target = list(numpy.broadcast_to(numpy.zeros((), bool), x.shape).reshape(wanted).shape)
        if x.size == 0:
            return False
        copied = 0
        while copied < min(len(target), x.ndim) and target[copied] == x.shape[copied]:
            copied += 1
        free = list(range(copied, len(target)))
        if free:
            inferred = [i for i in free if wanted[i] == -1]
            target[(inferred or free)[0]] = -1
        target[:copied] = [0] * copied
        self.scope.node('Reshape', [call.inputs[0], self.scope.int64s(target)], call.outputs)
        return True

    def _input_name(self, node, array):
        """The ONNX name of a converter input: an argument's Tensor, an
        earlier result, a parameter's initializer or a constant."""
        key = id(node)
        if key not in self.names:
            param = self.scope.param(array)
            self.names[key] = param.name if param is not None else self.scope.constant(
                _host(array).copy(), hint='const')
        return self.names[key]

    def _value(self, out):
        """The Value of what ``fn`` returned."""
        if isinstance(out, chainer.Variable):
            return self._tensor(out)
        if isinstance(out, (list, tuple)):
            items = [self._value(o) for o in out]
            return PyList(items) if isinstance(out, list) else PyTuple(tuple(items))
        if isinstance(out, dict):
            return PyDict({k: self._value(v) for k, v in out.items()})
        if isinstance(out, chainer.get_array_types()):
            if self.tensors:
                raise TranslationError(self.site, '%s returns an array computed at export time '
                                       'from tensors: it cannot be translated' % self.label)
            return Const(_host(out))
        return Const(out)

    def _tensor(self, variable):
        key = id(variable.node)
        if key in self.inputs:
            return self.inputs[key]
        if key not in self.names:  # a Variable no recorded function made
            self.names[key] = self._input_name(variable.node, variable.array)
        return Tensor(self.names[key], _host(variable.array))

    def _check_tensors_used(self, nodes, value):
        """Every argument Tensor must reach the graph: one that does not was
        read by Chainer as a Python value, baked in at its export-time
        value."""
        used = {name for node in nodes for name in node.input}
        used.update(t.name for t in _value_tensors(value))
        for tensor in self.tensors:
            if tensor.name not in used:
                where = _tensor_argument(tensor, self.args, self.kwargs, self.argument_names)
                raise TranslationError(self.site, '%s: %s is a tensor, but Chainer read its '
                                       'value at export time (as a number, a shape or an '
                                       'index), where a value known only at run time cannot '
                                       'be used' % (self.label, where))


def _variables(out):
    """The Variables in a function's result (nested tuples and lists)."""
    if isinstance(out, chainer.Variable):
        return [out]
    if isinstance(out, (list, tuple)):
        return [v for o in out for v in _variables(o)]
    if isinstance(out, dict):
        return [v for o in out.values() for v in _variables(o)]
    return []


def _host(array):
    return chainer.backend.CpuDevice().send(array)


def _form(nodes, initializers, state_names):
    """What the nodes compute, without their names: per node its op, domain,
    attributes and inputs, each input given as the node output it reads, a
    parameter's name, a constant's value, or an outer name."""
    new = {init.name: init for init in initializers}
    produced: dict = {}
    form = []
    for k, node in enumerate(nodes):
        inputs: list = []
        for name in node.input:
            if name in produced:
                inputs.append(produced[name])
            elif name in state_names or name not in new:
                inputs.append(('name', name))
            else:
                array = numpy_helper.to_array(new[name])
                inputs.append(('const', array.dtype.str, array.shape, array.tobytes()))
        for j, name in enumerate(node.output):
            produced[name] = ('node', k, j)
        attrs = tuple(a.SerializeToString() for a in node.attribute)
        form.append((node.op_type, node.domain, tuple(inputs), attrs))
    return form


# ---------------------------------------------------------------------------
# Arguments whose sizes vary at run time
# ---------------------------------------------------------------------------


def _scratch_scope(scope):
    """A throw-away scope of the same opset and model, whose fresh names
    cannot clash with the real translation's."""
    translation = Translation(scope.opset, scope.translation.model)
    translation.taken.update(scope.translation.taken)
    translation.counter[0] = scope.translation.counter[0]
    return Scope(translation)


def _convert_varied(scope, fn, label, args, kwargs, site, vary):
    """The result and form of the call with the ``vary`` axes longer,
    in a scratch scope; None when Chainer refuses those sizes (the axis is
    tied to a static one: nothing to learn from it)."""
    try:
        return _Conversion(_scratch_scope(scope), fn, label, args, kwargs, site, vary).run()
    except TranslationError:
        return None


def _check_size_independence(scope, fn, label, args, kwargs, site, result, form, varying,
                             argument_names):
    """Raise when the call's ONNX form depends on the size of a varying axis
    of an argument; otherwise give the result None on the axes whose size
    followed it."""
    everything = _convert_varied(scope, fn, label, args, kwargs, site,
                                 [(i, axis) for i, _, axis in varying])
    if everything is None:
        return
    varied_result, varied_form = everything
    if varied_form != form:
        for i, tensor, axis in varying:
            single = _convert_varied(scope, fn, label, args, kwargs, site, [(i, axis)])
            if single is not None and single[1] != form:
                raise TranslationError(site, '%s: its ONNX form depends on the size of axis %d '
                                       'of %s, which varies at run time'
                                       % (label, axis, _tensor_argument(tensor, args, kwargs,
                                                                        argument_names)))
        _, tensor, axis = varying[0]
        raise TranslationError(site, '%s: its ONNX form depends on the sizes of axes that vary '
                               'at run time (axis %d of %s among them)'
                               % (label, axis, _tensor_argument(tensor, args, kwargs,
                                                                argument_names)))
    _mark_varying(result, varied_result)


def _mark_varying(result, varied):
    """Set None in ``result``'s Tensors' shapes where ``varied`` (the same
    structure, from the varied call) has another size."""
    for tensor, other in zip(_value_tensors(result), _value_tensors(varied)):
        if tensor.ndim == other.ndim:
            tensor.shape = tuple(None if d is None or a != b else d for d, a, b in zip(
                tensor.shape, tensor.example.shape, other.example.shape))


__all__ = ['call_chainer', 'function_label']

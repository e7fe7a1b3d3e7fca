"""NumPy (and CuPy, ``xp``) calls and the attributes and methods of tensors,
as ch2o translates them.

``np.zeros(...)`` or ``self.xp.arange(...)`` with every argument known at
export time is folded: NumPy computes it and the result is a Const.  Once a
tensor is involved, the call becomes ONNX nodes.  NumPy's own rules decide
dtypes (``np.zeros`` is float64 unless told otherwise): every result's
example is what NumPy computes on the arguments' examples, and the emitted
nodes are cast to that dtype.
"""
import numpy
from onnx import numpy_helper

from .operators import broadcast_shape, cast
from .values import (
    Const,
    PyList,
    PyTuple,
    Sequence,
    Tensor,
    TranslationError,
    constant_value,
    example_of,
    is_constant,
)

# ---------------------------------------------------------------------------
# Shapes given as values
# ---------------------------------------------------------------------------


def shape_vector(scope, value, site, what):
    """A shape-like ``value`` (an int, a tuple or list of ints and 0-d
    integer tensors, or a 1-D integer tensor) as ``(tensor, dims)``: a 1-D
    int64 Tensor holding it and, per element, its int when known at export
    time, else None."""
    if isinstance(value, Tensor) and value.ndim == 0:
        value = PyTuple((value,))  # np.zeros(n)
    if isinstance(value, Tensor):
        if value.ndim != 1 or value.dtype.kind not in 'iu' or value.shape[0] is None:
            raise TranslationError(site, '%s must be a 1-D integer tensor of known length, not '
                                   'a %s tensor of shape %s' % (what, value.dtype, value.shape))
        return _as_int64(scope, value), (None,) * value.shape[0]
    if isinstance(value, Const) and isinstance(value.value, (int, numpy.integer)):
        value = PyTuple((value,))
    if is_constant(value):
        known = tuple(int(d) for d in numpy.asarray(constant_value(value)).reshape(-1))
        return scope.const_tensor(numpy.asarray(known, numpy.int64)), known
    if not isinstance(value, (PyTuple, PyList)):
        raise TranslationError(site, '%s must be a shape (ints or 0-d integer tensors), not %s'
                               % (what, value.kind))
    pieces: list = []
    dims: list = []
    for item in value.items:
        if isinstance(item, Tensor) and item.ndim == 0 and item.dtype.kind in 'iu':
            pieces.append(unsqueeze(scope, _as_int64(scope, item), [0]))
            dims.append(None)
        elif isinstance(item, Const) and isinstance(item.value, (int, numpy.integer)):
            pieces.append(scope.const_tensor(numpy.asarray([item.value], numpy.int64)))
            dims.append(int(item.value))
        else:
            raise TranslationError(site, '%s: each element must be an int or a 0-d integer '
                                   'tensor, not %s' % (what, item.kind))
    example = numpy.asarray([int(d) for d in example_of(value)], numpy.int64)
    return scope.emit('Concat', pieces, example, axis=0), tuple(dims)


def _as_int64(scope, tensor):
    if tensor.dtype == numpy.int64:
        return tensor
    return cast(scope, tensor, numpy.int64)


def reshape(scope, x, shape, site, label):
    """``x`` reshaped to ``shape`` (a shape-like Value, see shape_vector):
    one ONNX Reshape reading the shape at run time, so it may hold 0-d
    tensors such as ``x.shape[0]``, and ``-1``."""
    target, dims = shape_vector(scope, shape, site, '%s: the shape' % label)
    wanted = tuple(int(d) for d in numpy.asarray(example_of(shape)).reshape(-1))
    try:
        example = x.example.reshape(wanted)
    except ValueError as e:
        if None not in x.shape and is_constant(shape):
            raise TranslationError(site, '%s: %s' % (label, e)) from None
        # Examples of run-time sizes need not agree with each other (a
        # sequence's examples may be its first element only): keep the
        # result's example the shape it asks for.
        example = numpy.resize(x.example, [1 if d < 0 else d for d in wanted])
    static = [d if d is not None and d >= 0 else None for d in dims]
    if -1 in dims and None not in x.shape and static.count(None) == 1:
        static[dims.index(-1)] = example.shape[dims.index(-1)]
    # NumPy's 0 is an empty axis; ONNX's means "copy the input's" unless
    # allowzero (opset 14) says otherwise.
    allowzero = 1 if scope.opset >= 14 else None
    result = scope.emit('Reshape', [x, target], example, allowzero=allowzero)
    result.shape = tuple(static)
    return result


# ---------------------------------------------------------------------------
# Small node helpers shared by ch2o's converters
# ---------------------------------------------------------------------------


def unsqueeze(scope, tensor, axes):
    """``tensor`` with new axes of size 1 at ``axes`` (of the result)."""
    example = numpy.expand_dims(tensor.example, tuple(axes))
    shape = list(tensor.shape)
    for a in sorted(axes):
        shape.insert(a, 1)
    return _like(Tensor(scope.unsqueeze(tensor.name, list(axes)), example), shape)


def _like(tensor, shape):
    tensor.shape = tuple(shape)
    return tensor


def dim_of(scope, tensor, axis):
    """The size of ``tensor``'s ``axis``: a Const int when static, else a
    0-d int64 Tensor read from its Shape at run time."""
    if tensor.shape[axis] is not None:
        return Const(tensor.shape[axis])
    shape = scope.emit('Shape', [tensor], numpy.asarray(tensor.example.shape, numpy.int64))
    index = scope.const_tensor(numpy.int64(axis))
    return scope.emit('Gather', [shape, index], numpy.int64(tensor.example.shape[axis]), axis=0)


# ---------------------------------------------------------------------------
# Attributes and methods of tensors
# ---------------------------------------------------------------------------


def tensor_attribute(scope, tensor, name, site):
    """``tensor.<name>``: shape, size, ndim, dtype, T (and ``array``/``data``
    of a Variable, the tensor itself)."""
    if name == 'shape':
        return PyTuple(tuple(dim_of(scope, tensor, a) for a in range(tensor.ndim)))
    if name == 'ndim':
        return Const(tensor.ndim)
    if name == 'dtype':
        return Const(tensor.dtype)
    if name == 'size':
        if None not in tensor.shape:
            return Const(int(numpy.prod(tensor.shape, dtype=numpy.int64)))
        return scope.emit('Size', [tensor], numpy.int64(tensor.example.size))
    if name == 'T':
        return transpose(scope, tensor, None)
    if name in ('array', 'data'):
        return tensor
    raise TranslationError(site, "'.%s' of a tensor is not supported (supported: shape, size, "
                           "ndim, dtype, T, array, data)" % name)


def transpose(scope, tensor, axes):
    """``tensor`` with its axes permuted (reversed when ``axes`` is None)."""
    perm = list(range(tensor.ndim))[::-1] if axes is None else [a % tensor.ndim for a in axes]
    result = scope.emit('Transpose', [tensor], tensor.example.transpose(perm), perm=perm)
    return _like(result, [tensor.shape[p] for p in perm])


def tensor_method(scope, tensor, name, args, kwargs, site):
    """``tensor.<name>(*args, **kwargs)``: the handler of ``name`` in
    TENSOR_METHODS."""
    handler = TENSOR_METHODS.get(name)
    if handler is None:
        raise TranslationError(site, "'.%s()' of a tensor is not supported (supported: %s)"
                               % (name, ', '.join(TENSOR_METHODS)))
    return handler(scope, tensor, name, args, kwargs, site)


def _astype(scope, tensor, name, args, kwargs, site):
    label = '.%s()' % name
    dtype, = _constants(label, _bind(label, args, kwargs, ('dtype',), {}, site), site)
    return cast(scope, tensor, numpy.dtype(dtype))


def _reshape_method(scope, tensor, name, args, kwargs, site):
    shape = args[0] if len(args) == 1 and not kwargs else PyTuple(tuple(args))
    return reshape(scope, tensor, shape, site, '.%s()' % name)


def _flatten(scope, tensor, name, args, kwargs, site):
    return reshape(scope, tensor, Const(-1), site, '.%s()' % name)


def _copy(scope, tensor, name, args, kwargs, site):
    return _like(scope.emit('Identity', [tensor], tensor.example.copy()), tensor.shape)


def _transpose_method(scope, tensor, name, args, kwargs, site):
    axes = _constants('.%s()' % name, args, site)
    if len(axes) == 1 and not isinstance(axes[0], int):
        axes = axes[0]  # x.transpose((1, 0)) or x.transpose(None)
    return transpose(scope, tensor, None if axes is None or len(axes) == 0 else axes)


def _reduce_method(scope, tensor, name, args, kwargs, site):
    label = '.%s()' % name
    axis, keepdims = _constants(label, _bind(label, args, kwargs, ('axis', 'keepdims'),
                                             {'axis': None, 'keepdims': False}, site), site)
    return reduce(scope, tensor, name, axis, keepdims)


def _arg_reduce_method(scope, tensor, name, args, kwargs, site):
    label = '.%s()' % name
    axis, = _constants(label, _bind(label, args, kwargs, ('axis',), {'axis': None}, site), site)
    return arg_reduce(scope, tensor, name, axis)


def _bind(label, args, kwargs, names, defaults, site):
    """Positional and keyword arguments as a list in ``names`` order, with
    ``defaults`` for the missing ones."""
    if len(args) > len(names):
        raise TranslationError(site, '%s takes at most %d argument(s), got %d'
                               % (label, len(names), len(args)))
    bound = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names or key in bound:
            raise TranslationError(site, '%s: unexpected argument %r' % (label, key))
        bound[key] = value
    missing = [n for n in names if n not in bound and n not in defaults]
    if missing:
        raise TranslationError(site, '%s: missing argument %r' % (label, missing[0]))
    return [bound[n] if n in bound else Const(defaults[n]) for n in names]


def _constants(label, values, site):
    """The export-time values of ``values``; a tensor among them is an
    error (these arguments shape the graph)."""
    for v in values:
        if not is_constant(v):
            raise TranslationError(site, '%s: the argument must be known at export time, not %s'
                                   % (label, v.kind))
    return [constant_value(v) for v in values]


_REDUCTIONS = {'sum': 'ReduceSum', 'mean': 'ReduceMean', 'max': 'ReduceMax', 'min': 'ReduceMin'}

#: The ndarray methods of a tensor: name -> handler(scope, tensor, name,
#: args, kwargs, site), which returns the call's Value.
TENSOR_METHODS = {'astype': _astype, 'reshape': _reshape_method, 'transpose': _transpose_method,
                  'ravel': _flatten, 'flatten': _flatten, 'copy': _copy,
                  **{name: _reduce_method for name in _REDUCTIONS},
                  'argmax': _arg_reduce_method, 'argmin': _arg_reduce_method}


def _axes(tensor, axis):
    if axis is None:
        return list(range(tensor.ndim))
    return sorted(a % tensor.ndim for a in ((axis,) if isinstance(axis, int) else axis))


def reduce(scope, tensor, name, axis, keepdims):
    """NumPy's ``sum``/``mean``/``max``/``min``: the input is cast first to
    the dtype NumPy gives the result (``sum`` of int32 is int64, ``mean`` of
    ints is float64)."""
    example = numpy.asarray(getattr(tensor.example, name)(
        axis=None if axis is None else tuple(_axes(tensor, axis)), keepdims=keepdims))
    axes = _axes(tensor, axis)
    x = cast(scope, tensor, example.dtype)
    result = Tensor(scope.reduce(_REDUCTIONS[name], x.name, axes, keepdims), example)
    shape = [1 if a in axes else d for a, d in enumerate(tensor.shape)
             if keepdims or a not in axes]
    return _like(result, shape)


def arg_reduce(scope, tensor, name, axis):
    """``argmax``/``argmin``: over the flattened tensor when ``axis`` is None."""
    example = numpy.asarray(getattr(tensor.example, name)(axis=axis))
    x = tensor
    if axis is None:
        x = reshape(scope, tensor, Const(-1), '', '.%s()' % name)
        axis = 0
    axis %= x.ndim
    op = {'argmax': 'ArgMax', 'argmin': 'ArgMin'}[name]
    result = scope.emit(op, [x], example, axis=axis, keepdims=0)
    return _like(result, [d for a, d in enumerate(x.shape) if a != axis])


# ---------------------------------------------------------------------------
# Module functions
# ---------------------------------------------------------------------------

_UNARY = {'exp': 'Exp', 'log': 'Log', 'sqrt': 'Sqrt', 'tanh': 'Tanh', 'abs': 'Abs',
          'absolute': 'Abs', 'negative': 'Neg', 'floor': 'Floor', 'ceil': 'Ceil',
          'sign': 'Sign', 'sin': 'Sin', 'cos': 'Cos'}
_BINARY = {'add': 'Add', 'subtract': 'Sub', 'multiply': 'Mul', 'maximum': 'Max',
           'minimum': 'Min', 'equal': 'Equal', 'less': 'Less', 'greater': 'Greater'}


def call_numpy(scope, name, args, kwargs, site):
    """``np.<name>(*args, **kwargs)`` (or ``xp.<name>``).  Folded when every
    argument is known at export time."""
    label = 'np.%s' % name
    handler = _HANDLERS.get(name)
    if handler is None and name not in _UNARY and name not in _BINARY:
        raise TranslationError(site, '%s is not supported (supported: %s)' % (
            label, ', '.join(sorted(set(_HANDLERS) | set(_UNARY) | set(_BINARY)))))
    if all(is_constant(v) for v in list(args) + list(kwargs.values())):
        function = getattr(numpy, name)
        try:
            return Const(function(*[constant_value(a) for a in args],
                                  **{k: constant_value(v) for k, v in kwargs.items()}))
        except (TypeError, ValueError) as e:
            raise TranslationError(site, '%s: %s' % (label, e)) from None
    if name in _UNARY:
        x, = _bind(label, args, kwargs, ('x',), {}, site)
        x = array_argument(scope, x, site, '%s: the argument' % label)
        example = getattr(numpy, name)(x.example)
        return _like(scope.emit(_UNARY[name], [cast(scope, x, example.dtype)], example), x.shape)
    if name in _BINARY:
        return _binary(scope, name, _bind(label, args, kwargs, ('x1', 'x2'), {}, site), site)
    assert handler is not None
    return handler(scope, label, args, kwargs, site)


def array_argument(scope, value, site, what):
    """An argument NumPy reads as an array: a tensor, a number, a list of
    them (stacked, as np.array does) or a sequence of equally shaped
    tensors (stacked along a new first axis)."""
    if isinstance(value, Sequence):
        from .sequence_functions import stack_sequence
        return stack_sequence(scope, value, 0, site, what)
    if isinstance(value, (PyList, PyTuple)):
        return _stack_nested(scope, value, site, what)
    return scope.as_tensor(value, site, what)


def _binary(scope, name, operands, site):
    """An element-wise NumPy function of two operands: both are cast to the
    dtype NumPy computes in, as NumPy does."""
    a, b = (array_argument(scope, v, site, 'np.%s: an operand' % name) for v in operands)
    example = numpy.asarray(getattr(numpy, name)(a.example, b.example))
    common = numpy.result_type(a.example, b.example)
    result = scope.emit(_BINARY[name], [cast(scope, a, common), cast(scope, b, common)], example)
    return _like(result, broadcast_shape(a.shape, b.shape))


def _filled(scope, label, args, kwargs, site, fill_default):
    """np.zeros / np.ones / np.full: ConstantOfShape on a run-time shape, or
    Expand of a tensor fill value."""
    names = ('shape', 'dtype') if fill_default is not None else ('shape', 'fill_value', 'dtype')
    bound = _bind(label, args, kwargs, names, {'dtype': None}, site)
    shape, dtype = bound[0], bound[-1]
    fill = Const(fill_default) if fill_default is not None else bound[1]
    dtype, = _constants(label, [dtype], site)
    target, dims = shape_vector(scope, shape, site, '%s: the shape' % label)
    sizes = tuple(int(d) for d in numpy.asarray(example_of(shape)).reshape(-1))
    if dtype is None and fill_default is not None:
        dtype = numpy.float64  # NumPy's default for zeros and ones
    if is_constant(fill):
        value = numpy.asarray(constant_value(fill), dtype=dtype)
        example = numpy.full(sizes, value, dtype=value.dtype)
        result = scope.emit('ConstantOfShape', [target], example,
                            value=numpy_helper.from_array(value.reshape(1), 'value'))
    else:
        value = scope.as_tensor(fill, site, '%s: the fill value' % label)
        example = numpy.full(sizes, value.example, dtype=dtype)
        result = scope.emit('Expand', [cast(scope, value, example.dtype), target], example)
    return _like(result, dims)


def _array(scope, label, args, kwargs, site):
    """np.array / np.asarray of a tensor, a list of them or a sequence."""
    obj, dtype = _bind(label, args, kwargs, ('object', 'dtype'), {'dtype': None}, site)
    dtype, = _constants(label, [dtype], site)
    stacked = array_argument(scope, obj, site, '%s: the object' % label)
    return stacked if dtype is None else cast(scope, stacked, dtype)


def _stack_nested(scope, value, site, label):
    """A (nested) list of tensors and numbers as one tensor, as np.array
    makes it: elements stacked along a new first axis, in NumPy's dtype."""
    if not isinstance(value, (PyList, PyTuple)):
        return scope.as_tensor(value, site, '%s: an element' % label)
    parts = [_stack_nested(scope, v, site, label) for v in value.items]
    example = numpy.array([p.example for p in parts])
    parts = [unsqueeze(scope, cast(scope, p, example.dtype), [0]) for p in parts]
    result = scope.emit('Concat', parts, example, axis=0)
    return _like(result, [len(parts)] + list(_common_shape([p.shape[1:] for p in parts])))


def _common_shape(shapes):
    return [d if all(s[a] == d for s in shapes) else None for a, d in enumerate(shapes[0])]


def _arange(scope, label, args, kwargs, site):
    """np.arange with run-time bounds: ONNX Range in NumPy's dtype."""
    dtype = kwargs.pop('dtype', Const(None))
    dtype, = _constants(label, [dtype], site)
    if kwargs:
        raise TranslationError(site, '%s: unexpected argument %r' % (label, next(iter(kwargs))))
    if not 1 <= len(args) <= 3:
        raise TranslationError(site, '%s takes 1 to 3 positional arguments' % label)
    # arange(stop), arange(start, stop), arange(start, stop, step)
    bounds = [Const(0), args[0], Const(1)] if len(args) == 1 else list(args) + [Const(1)] * (
        3 - len(args))
    tensors = [scope.as_tensor(v, site, '%s: a bound' % label) for v in bounds]
    if any(t.ndim != 0 for t in tensors):
        raise TranslationError(site, '%s: the bounds must be scalars' % label)
    example = numpy.arange(*[t.example for t in tensors], dtype=dtype)
    inputs = [cast(scope, t, example.dtype) for t in tensors]
    return _like(scope.emit('Range', inputs, example), [None])


def _cumsum(scope, label, args, kwargs, site):
    """np.cumsum: over the flattened array when ``axis`` is None."""
    x, axis, dtype = _bind(label, args, kwargs, ('a', 'axis', 'dtype'),
                           {'axis': None, 'dtype': None}, site)
    x = array_argument(scope, x, site, '%s: the array' % label)
    axis, dtype = _constants(label, [axis, dtype], site)
    example = numpy.cumsum(x.example, axis=axis, dtype=dtype)
    if axis is None:
        x = reshape(scope, x, Const(-1), site, label)
        axis = 0
    x = cast(scope, x, example.dtype)
    result = scope.emit('CumSum', [x, scope.const_tensor(numpy.int64(axis))], example)
    return _like(result, x.shape)


def _concatenate(scope, label, args, kwargs, site):
    """np.concatenate / np.stack of a list of tensors or of a sequence."""
    arrays, axis = _bind(label, args, kwargs, ('arrays', 'axis'), {'axis': 0}, site)
    axis, = _constants(label, [axis], site)
    stack = label == 'np.stack'
    if isinstance(arrays, Sequence):
        from .sequence_functions import concat_sequence, stack_sequence
        return (stack_sequence if stack else concat_sequence)(scope, arrays, axis, site)
    if not isinstance(arrays, (PyList, PyTuple)) or not arrays.items:
        raise TranslationError(site, '%s takes a non-empty list of arrays, not %s'
                               % (label, arrays.kind))
    parts = [scope.as_tensor(v, site, '%s: an array' % label) for v in arrays.items]
    examples = [p.example for p in parts]
    example = numpy.stack(examples, axis) if stack else numpy.concatenate(examples, axis)
    axis %= example.ndim
    parts = [cast(scope, p, example.dtype) for p in parts]
    if stack:
        parts = [unsqueeze(scope, p, [axis]) for p in parts]
    shape = _common_shape([p.shape for p in parts])
    sizes = [p.shape[axis] for p in parts]
    shape[axis] = None if None in sizes else sum(sizes)
    return _like(scope.emit('Concat', parts, example, axis=axis), shape)


def _zeros(scope, label, args, kwargs, site):
    return _filled(scope, label, args, kwargs, site, 0)


def _ones(scope, label, args, kwargs, site):
    return _filled(scope, label, args, kwargs, site, 1)


def _full(scope, label, args, kwargs, site):
    return _filled(scope, label, args, kwargs, site, None)


def _reduction_function(scope, label, args, kwargs, site):
    """np.sum / np.mean / np.max / np.min / np.argmax / np.argmin of a tensor."""
    name = label[len('np.'):]
    if not args:
        raise TranslationError(site, '%s needs an array' % label)
    x = array_argument(scope, args[0], site, '%s: the array' % label)
    return tensor_method(scope, x, name, list(args[1:]), kwargs, site)


def _reshape_function(scope, label, args, kwargs, site):
    x, shape = _bind(label, args, kwargs, ('a', 'newshape'), {}, site)
    return reshape(scope, scope.as_tensor(x, site, '%s: the array' % label), shape, site, label)


def _transpose_function(scope, label, args, kwargs, site):
    x, axes = _bind(label, args, kwargs, ('a', 'axes'), {'axes': None}, site)
    axes, = _constants(label, [axes], site)
    return transpose(scope, scope.as_tensor(x, site, '%s: the array' % label), axes)


_HANDLERS = {'array': _array, 'asarray': _array, 'zeros': _zeros, 'ones': _ones,
             'full': _full, 'arange': _arange, 'cumsum': _cumsum,
             'concatenate': _concatenate, 'stack': _concatenate,
             'sum': _reduction_function, 'mean': _reduction_function,
             'max': _reduction_function, 'min': _reduction_function,
             'argmax': _reduction_function, 'argmin': _reduction_function,
             'reshape': _reshape_function, 'transpose': _transpose_function}

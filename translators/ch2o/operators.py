"""Python's operators on ch2o values.

Constants fold with Python's own operators.  When a tensor is involved the
result follows NumPy's type promotion (a Python scalar takes the tensor's
dtype, ``int64 / int64`` is float64 ...): each result's dtype is that of
the NumPy result on the examples, and operands of another dtype are cast to
it first.  Python's ``//`` and ``%`` round towards minus infinity, which
ONNX's Div and float Mod do not; the ONNX forms below keep Python's
meaning.
"""
import ast
import operator

import numpy

from .values import (
    Const,
    MaybeNone,
    PyList,
    PyTuple,
    Sequence,
    Tensor,
    TranslationError,
    constant_value,
    is_constant,
)

_BINARY = {
    ast.Add: ('Add', operator.add), ast.Sub: ('Sub', operator.sub),
    ast.Mult: ('Mul', operator.mul), ast.Div: ('Div', operator.truediv),
    ast.FloorDiv: ('FloorDiv', operator.floordiv), ast.Mod: ('Mod', operator.mod),
    ast.Pow: ('Pow', operator.pow), ast.MatMult: ('MatMul', operator.matmul),
}

_COMPARE = {
    ast.Lt: ('Less', operator.lt), ast.LtE: ('LessOrEqual', operator.le),
    ast.Gt: ('Greater', operator.gt), ast.GtE: ('GreaterOrEqual', operator.ge),
    ast.Eq: ('Equal', operator.eq), ast.NotEq: ('NotEqual', operator.ne),
}


def symbol(op):
    """The source text of an operator node (for messages)."""
    return {ast.Add: '+', ast.Sub: '-', ast.Mult: '*', ast.Div: '/', ast.FloorDiv: '//',
            ast.Mod: '%', ast.Pow: '**', ast.MatMult: '@', ast.Lt: '<', ast.LtE: '<=',
            ast.Gt: '>', ast.GtE: '>=', ast.Eq: '==', ast.NotEq: '!=', ast.In: 'in',
            ast.NotIn: 'not in', ast.Is: 'is', ast.IsNot: 'is not', ast.USub: '-',
            ast.UAdd: '+', ast.Not: 'not', ast.Invert: '~'}.get(type(op), type(op).__name__)


def fold(value):
    """A Python result as a Value (containers item by item)."""
    if isinstance(value, list):
        return PyList([fold(v) for v in value])
    if isinstance(value, tuple):
        return PyTuple(tuple(fold(v) for v in value))
    return Const(value)


def _scalar(value):
    """The NumPy-side operand of ``value`` for computing examples."""
    return value.example if isinstance(value, Tensor) else constant_value(value)


def _operands(scope, values, dtype, site, what):
    """``values`` as Tensors of ``dtype`` (Consts become constants)."""
    out = []
    for v in values:
        if isinstance(v, Const) and isinstance(v.value, (bool, int, float, numpy.generic,
                                                         numpy.ndarray)):
            out.append(scope.const_tensor(numpy.asarray(v.value, dtype=dtype)))
            continue
        t = scope.as_tensor(v, site, what)
        if t.dtype != dtype:
            t = scope.emit('Cast', [t], t.example.astype(dtype),
                           to=_onnx_dtype(dtype))
        out.append(t)
    return out


def _onnx_dtype(dtype):
    from onnx import helper
    return helper.np_dtype_to_tensor_dtype(numpy.dtype(dtype))


def cast(scope, tensor, dtype):
    """``tensor`` as ``dtype`` (itself when it already is)."""
    dtype = numpy.dtype(dtype)
    if tensor.dtype == dtype:
        return tensor
    result = scope.emit('Cast', [tensor], tensor.example.astype(dtype), to=_onnx_dtype(dtype))
    result.shape = tensor.shape
    return result


def broadcast_shape(*shapes):
    """The static shape of a broadcast of ``shapes`` (None: a size known
    only at run time): an axis is known when some operand gives it a known
    size other than 1, or all give 1."""
    rank = max(len(s) for s in shapes)
    padded = [(1,) * (rank - len(s)) + tuple(s) for s in shapes]
    out = []
    for dims in zip(*padded):
        known = [d for d in dims if d is not None and d != 1]
        out.append(known[0] if known else (1 if all(d == 1 for d in dims) else None))
    return tuple(out)


def _with_shape(tensor, *operands):
    """``tensor`` (an elementwise result) with the broadcast static shape of
    ``operands``."""
    tensor.shape = broadcast_shape(*[o.shape for o in operands])
    return tensor


def binary(scope, op, left, right, site):
    """``left <op> right`` (an ast operator node)."""
    if type(op) not in _BINARY:
        raise TranslationError(site, "operator '%s' is not supported" % symbol(op))
    onnx_op, py_op = _BINARY[type(op)]
    if is_constant(left) and is_constant(right):
        try:
            return fold(py_op(constant_value(left), constant_value(right)))
        except Exception as e:
            raise TranslationError(site, "'%s' on constants fails: %s" % (symbol(op), e)) from e
    if isinstance(left, (PyList, PyTuple)) or isinstance(right, (PyList, PyTuple)):
        return _container_binary(op, left, right, site)
    with numpy.errstate(all='ignore'):
        example = numpy.asarray(py_op(_scalar(left), _scalar(right)))
    example = _keep_float_dtype(example, left, right)
    if onnx_op == 'Pow':  # ONNX Pow takes an exponent of any numeric type
        base, = _operands(scope, [left], example.dtype, site, 'the base of **')
        exponent = scope.as_tensor(right, site, 'the exponent of **') \
            if isinstance(right, Tensor) else scope.const_tensor(
                numpy.asarray(constant_value(right), dtype=example.dtype))
        return _with_shape(scope.emit('Pow', [base, exponent], example), base, exponent)
    a, b = _operands(scope, [left, right], example.dtype, site,
                     "an operand of '%s'" % symbol(op))
    if onnx_op == 'FloorDiv':
        return _with_shape(_floor_div(scope, a, b, example), a, b)
    if onnx_op == 'Mod':
        return _with_shape(_python_mod(scope, a, b, example), a, b)
    if onnx_op == 'MatMul':
        return _matmul_shape(scope.emit('MatMul', [a, b], example), a, b)
    return _with_shape(scope.emit(onnx_op, [a, b], example), a, b)


def _matmul_shape(tensor, a, b):
    """``a @ b``'s static shape: broadcast batch axes, then a's rows and
    b's columns (vectors as NumPy treats them)."""
    if a.ndim >= 2 and b.ndim >= 2:
        tensor.shape = broadcast_shape(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    elif tensor.ndim == len(tensor.shape):
        tensor.shape = tuple(tensor.shape)
    return tensor


def _keep_float_dtype(example, left, right):
    """A float tensor with a Python number keeps its dtype, as a Chainer
    Variable does (NumPy would make ``0 + float32 0-d array`` float64)."""
    for tensor, other in ((left, right), (right, left)):
        if isinstance(tensor, Tensor) and tensor.dtype.kind == 'f' and \
                isinstance(other, Const) and isinstance(other.value, (bool, int, float)):
            return example.astype(tensor.dtype)
    return example


def _floor_div(scope, a, b, example):
    """Python's ``a // b``: floor(a / b) for floats; for integers
    (a - a % b) / b, exact, with ONNX's integer Mod rounding as Python's."""
    if example.dtype.kind == 'f':
        return scope.emit('Floor', [scope.emit('Div', [a, b], a.example / b.example)], example)
    rem = scope.emit('Mod', [a, b], numpy.mod(a.example, b.example))
    return scope.emit('Div', [scope.emit('Sub', [a, rem], a.example - rem.example), b], example)


def _python_mod(scope, a, b, example):
    """Python's ``a % b``: the sign of ``b`` (ONNX's float Mod has ``a``'s)."""
    if example.dtype.kind != 'f':
        return scope.emit('Mod', [a, b], example)
    r = scope.emit('Mod', [a, b], numpy.fmod(a.example, b.example), fmod=1)
    zero = scope.const_tensor(numpy.zeros((), example.dtype))
    nonzero = scope.emit('Not', [scope.emit('Equal', [r, zero], r.example == 0)],
                         r.example != 0)
    signs_differ = scope.emit('Xor', [scope.emit('Less', [r, zero], r.example < 0),
                                      scope.emit('Less', [b, zero], b.example < 0)],
                              (r.example < 0) != (b.example < 0))
    fix = scope.emit('And', [nonzero, signs_differ], (r.example != 0) & signs_differ.example)
    shifted = scope.emit('Add', [r, b], r.example + b.example)
    return scope.emit('Where', [fix, shifted, r], example)


def _container_binary(op, left, right, site):
    """List/tuple concatenation and repetition by a constant count."""
    if isinstance(op, ast.Add) and type(left) is type(right):
        items = list(left.items) + list(right.items)
        return PyList(items) if isinstance(left, PyList) else PyTuple(tuple(items))
    if isinstance(op, ast.Mult):
        seq, count = (left, right) if isinstance(left, (PyList, PyTuple)) else (right, left)
        if isinstance(count, Const) and isinstance(count.value, int):
            items = list(seq.items) * count.value
            return PyList(items) if isinstance(seq, PyList) else PyTuple(tuple(items))
    raise TranslationError(site, "'%s' between %s and %s is not supported"
                           % (symbol(op), left.kind, right.kind))


def compare(scope, op, left, right, site):
    """``left <op> right`` for one comparison (chains are split by the
    caller)."""
    if isinstance(op, (ast.Is, ast.IsNot)):
        return _identity(scope, op, left, right, site)
    if isinstance(op, (ast.In, ast.NotIn)):
        if is_constant(left) and is_constant(right):
            found = constant_value(left) in constant_value(right)
            return Const(found if isinstance(op, ast.In) else not found)
        raise TranslationError(site, "'%s' needs constant operands" % symbol(op))
    onnx_op, py_op = _COMPARE[type(op)]
    if is_constant(left) and is_constant(right):
        return fold(py_op(constant_value(left), constant_value(right)))
    if not isinstance(left, (Tensor, Const)) or not isinstance(right, (Tensor, Const)):
        raise TranslationError(site, "'%s' between %s and %s is not supported"
                               % (symbol(op), left.kind, right.kind))
    with numpy.errstate(all='ignore'):
        example = numpy.asarray(py_op(_scalar(left), _scalar(right)))
        common = numpy.result_type(_scalar(left), _scalar(right))
    a, b = _operands(scope, [left, right], common, site, "an operand of '%s'" % symbol(op))
    if onnx_op == 'NotEqual':
        equal = scope.emit('Equal', [a, b], ~example)
        return _with_shape(scope.emit('Not', [equal], example), a, b)
    return _with_shape(scope.emit(onnx_op, [a, b], example), a, b)


def _identity(scope, op, left, right, site):
    """``is``/``is not``: decided at export time (only None and constants
    have an identity ch2o can know)."""
    if isinstance(left, Const) and isinstance(right, Const):
        same = left.value is right.value
    elif left is right:
        same = True
    elif isinstance(left, Tensor) and isinstance(right, Tensor) and \
            left.dtype == right.dtype == numpy.bool_ and not left.ndim and not right.ndim:
        # Python's bools are singletons: identity is equality
        equal = scope.emit('Equal', [left, right], left.example == right.example)
        if isinstance(op, ast.Is):
            return equal
        return scope.emit('Not', [equal], ~equal.example)
    elif isinstance(left, (Const, PyList, PyTuple, Sequence, Tensor)) and \
            isinstance(right, (Const, PyList, PyTuple, Sequence, Tensor)):
        same = False  # distinct values: a tensor, list or sequence is never None
    else:
        raise TranslationError(site, "'%s' between %s and %s is not supported"
                               % (symbol(op), left.kind, right.kind))
    return Const(same if isinstance(op, ast.Is) else not same)


def unary(scope, op, value, site):
    """``<op> value``."""
    if isinstance(op, ast.Not):
        t = truth(scope, value, site)
        if isinstance(t, Const):
            return Const(not t.value)
        return scope.emit('Not', [t], numpy.logical_not(t.example))
    if is_constant(value):
        py_op = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}
        return fold(py_op[type(op)](constant_value(value)))
    t = scope.as_tensor(value, site, "the operand of '%s'" % symbol(op))
    if isinstance(op, ast.UAdd):
        return t
    if isinstance(op, ast.USub):
        return _with_shape(scope.emit('Neg', [t], -t.example), t)
    if t.dtype == numpy.bool_:
        return _with_shape(scope.emit('Not', [t], ~t.example), t)
    return _with_shape(scope.emit('BitwiseNot', [t], ~t.example), t)


def truth(scope, value, site):
    """Python's truth of ``value``: a Const bool when known at export time,
    else a 0-d bool Tensor (a tensor's single element; a sequence's being
    non-empty)."""
    if is_constant(value):
        return Const(bool(constant_value(value)))
    if isinstance(value, (PyList, PyTuple)):
        return Const(len(value.items) > 0)
    if isinstance(value, Sequence):
        length = scope.emit('SequenceLength', [value.name], numpy.int64(len(value.examples)))
        zero = scope.const_tensor(numpy.int64(0))
        return scope.emit('Greater', [length, zero], numpy.asarray(len(value.examples) > 0))
    if isinstance(value, Tensor):
        if value.example.size != 1:
            raise TranslationError(site, 'the truth of a tensor of shape %s is ambiguous; '
                                   'use .any() or .all()' % (value.shape,))
        t = cast(scope, value, numpy.bool_)
        if t.ndim:
            t = scope.emit('Reshape', [t, scope.const_tensor(numpy.zeros(0, numpy.int64))],
                           t.example.reshape(()))
        return t
    raise TranslationError(site, 'the truth of %s is not defined' % value.kind)


def logical(scope, op, a, b, site):
    """``op`` ('And' or 'Or') of two truths (Consts fold)."""
    if isinstance(a, Const) or isinstance(b, Const):
        const, other = (a, b) if isinstance(a, Const) else (b, a)
        if op == 'And':
            return other if const.value else Const(False)
        return Const(True) if const.value else other
    a, b = truth(scope, a, site), truth(scope, b, site)
    example = (a.example & b.example) if op == 'And' else (a.example | b.example)
    return scope.emit(op, [a, b], example)


def is_none(scope, op, left, right):
    """``x is None`` / ``x is not None`` of a MaybeNone ``x``: a run-time
    bool; None for any other comparison."""
    if not isinstance(op, (ast.Is, ast.IsNot)):
        return None
    maybe, other = (left, right) if isinstance(left, MaybeNone) else (right, left)
    if not isinstance(maybe, MaybeNone) or not isinstance(other, Const) or \
            other.value is not None:
        return None
    if isinstance(op, ast.IsNot):
        return maybe.is_set
    return scope.emit('Not', [maybe.is_set], ~maybe.is_set.example)

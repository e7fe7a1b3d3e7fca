"""Element-wise binary and variadic operations with NumPy broadcasting
(arithmetic, Pow, PRelu, Max, Min, Sum, Mean, comparisons, logic), Not,
IsNaN and IsInf as calls into ccn_math.c: one kernel per dtype,
ccn_binary_<dtype>, switching on an enum of operations."""
import math

import numpy

from ..cformat import clist
from ..lowering import Refuse, Step, lowers

#: Highest rank the broadcasting kernel handles (CCN_MAX_RANK in C).
MAX_RANK = 8
NUMERIC = ('float32', 'float64', 'int64', 'int32')
FLOATS = ('float32', 'float64')

#: op -> (C enum, input dtypes); the arithmetic ones keep their dtype.
_ARITHMETIC = {'Add': ('CCN_ADD', NUMERIC), 'Sub': ('CCN_SUB', NUMERIC),
               'Mul': ('CCN_MUL', NUMERIC), 'Div': ('CCN_DIV', NUMERIC)}
#: op -> (C enum, input dtypes); the result is bool.
_BOOLEAN = {'Equal': ('CCN_EQUAL', NUMERIC + ('bool',)), 'Less': ('CCN_LESS', NUMERIC),
            'Greater': ('CCN_GREATER', NUMERIC), 'LessOrEqual': ('CCN_LESS_EQUAL', NUMERIC),
            'GreaterOrEqual': ('CCN_GREATER_EQUAL', NUMERIC), 'And': ('CCN_AND', ('bool',)),
            'Or': ('CCN_OR', ('bool',)), 'Xor': ('CCN_XOR', ('bool',))}
#: Variadic op -> (C enum folding the inputs, input dtypes).
_VARIADIC = {'Sum': ('CCN_ADD', FLOATS), 'Mean': ('CCN_ADD', FLOATS),
             'Max': ('CCN_MAX', NUMERIC), 'Min': ('CCN_MIN', NUMERIC)}


def broadcast_strides(shape, out) -> list[int]:
    """Element strides of a C-order array of ``shape`` read as ``out``
    under NumPy broadcasting: 0 along every broadcast axis."""
    shape = (1,) * (len(out) - len(shape)) + tuple(shape)
    result, step = [], 1
    for d in reversed(shape):
        result.append(step if d != 1 else 0)
        step *= d
    return result[::-1]


def _broadcast(*shapes) -> tuple[int, ...]:
    """The NumPy broadcast of ``shapes``, refused when they do not
    broadcast or the result's rank is too high."""
    try:
        out = tuple(numpy.broadcast_shapes(*shapes))
    except ValueError:
        raise Refuse('shapes %s do not broadcast' % ' and '.join(str(list(s)) for s in shapes)
                     ) from None
    if len(out) > MAX_RANK:
        raise Refuse('rank %d is above %d' % (len(out), MAX_RANK))
    return out


def _same_dtype(em, inst, dtypes) -> str:
    """The dtype every input of ``inst`` shares (one of ``dtypes``)."""
    found = {em.dtype(inst, k) for k in range(len(inst.inputs)) if em.has(inst, k)}
    for k in range(len(inst.inputs)):
        em.shape(inst, k, dtypes=dtypes)
    if len(found) != 1:
        raise Refuse('its inputs mix dtypes %s' % ', '.join(sorted(found)))
    return found.pop()


def merged_axes(out, *strides) -> tuple[list[int], list[list[int]]]:
    """``out`` and the operands' ``strides`` with axes of size 1 dropped and
    neighbours that every operand steps through as one merged: an SE scale
    (N, C, 1, 1) times (N, C, H, W) becomes rows of H * W with the scale's
    stride 0, whose loop vectorises, not rows of W."""
    shape: list[int] = []
    merged: list[list[int]] = [[] for _ in strides]
    for d, n in enumerate(out):
        if n == 1:
            continue
        if shape and all(m[-1] == s[d] * n for m, s in zip(merged, strides)):
            shape[-1] *= n
            for m, s in zip(merged, strides):
                m[-1] = s[d]
            continue
        shape.append(n)
        for m, s in zip(merged, strides):
            m.append(s[d])
    return shape, merged


def _call(op: str, dtype: str, out, a, b, y: str) -> list[str]:
    """C lines for y = a op b broadcast to ``out``; ``a`` and ``b`` are
    (shape, C expression) pairs."""
    shape, (a_strides, b_strides) = merged_axes(
        out, broadcast_strides(a[0], out), broadcast_strides(b[0], out))
    return ['{',
            '    static const long shape[] = %s, a_strides[] = %s, b_strides[] = %s;'
            % (clist(shape), clist(a_strides), clist(b_strides)),
            '    ccn_binary_%s(%s, %d, shape, %s, a_strides, %s, b_strides, %s);'
            % (dtype, op, len(shape), a[1], b[1], y),
            '}']


def _legacy_shape(inst, sa, sb):
    """b's shape as it broadcasts to a's before opset 7: with
    ``broadcast=1`` it matches a run of a's axes from ``axis`` on (by
    default the trailing ones); without, the shapes must be equal."""
    if sa == sb:
        return sb
    if not inst.attrs.get('broadcast', 0):
        raise Refuse('shapes %s and %s differ without broadcast=1' % (list(sa), list(sb)))
    axis = inst.attrs.get('axis')
    if axis is None:
        return sb
    axis %= max(len(sa), 1)
    return tuple(sb) + (1,) * (len(sa) - axis - len(sb))


def _operand_b(em, inst, dtype: str, dtypes):
    """(shape, C expression or None for its register) of input 1, one of
    ``dtypes``.  Only Pow takes one of another dtype (its exponent), which
    must then be a constant: it is converted to the base's dtype at emit
    time, as the NumPy kernel does."""
    sb = em.shape(inst, 1, dtypes=dtypes)
    if em.dtype(inst, 1) == dtype:
        return sb, None
    exponent = em.const(inst.inputs[1])
    if inst.op != 'Pow' or exponent is None or dtype not in FLOATS:
        raise Refuse('input 1 is %s, not %s like input 0%s' % (
            em.dtype(inst, 1), dtype,
            ' (a float base takes a constant exponent of another dtype)'
            if inst.op == 'Pow' else ''))
    return sb, em.constant_array('pow%d' % inst.outputs[0], exponent.astype(dtype))


@lowers(*_ARITHMETIC, *_BOOLEAN, 'Pow', 'PRelu')
def binary(em, inst) -> Step:
    op, dtypes = _ARITHMETIC.get(inst.op) or _BOOLEAN.get(inst.op) or \
        {'Pow': ('CCN_POW', NUMERIC), 'PRelu': ('CCN_PRELU', NUMERIC)}[inst.op]
    sa = em.shape(inst, 0, dtypes=dtypes)
    dtype = em.dtype(inst, 0)
    sb, converted = _operand_b(em, inst, dtype, dtypes)
    if inst.op == 'PRelu' and inst.version < 7 and len(sb) == 1 and sb[0] > 1 \
            and len(sa) > 2:
        sb = sb + (1,) * (len(sa) - 2)  # one slope per channel (axis 1)
    elif inst.version < 7:
        sb = _legacy_shape(inst, sa, sb)
    out = _broadcast(sa, sb)
    if inst.op == 'PRelu' and out != tuple(sa):
        raise Refuse('slope of shape %s does not broadcast to X of shape %s'
                     % (list(sb), list(sa)))

    def render(ref, scratch):
        b = converted or ref(inst.inputs[1])
        return _call(op, dtype, out, (sa, ref(inst.inputs[0])), (sb, b), ref(inst.outputs[0]))
    if inst.op in _BOOLEAN:
        return Step('math', [out], render, dtypes=['bool'])
    return Step('math', [out], render,
                in_place=tuple(k for k, s in enumerate((sa, sb)) if tuple(s) == out))


@lowers(*_VARIADIC)
def variadic(em, inst) -> Step:
    op, dtypes = _VARIADIC[inst.op]
    dtype = _same_dtype(em, inst, dtypes)
    shapes = [em.shape(inst, k, dtypes=dtypes) for k in range(len(inst.inputs))]
    out = _broadcast(*shapes)
    if len(shapes) == 1:
        return Step('math', [out], lambda ref, scratch: [], alias=True)
    count = None
    if inst.op == 'Mean':
        count = em.constant_array('count%d' % inst.outputs[0],
                                  numpy.array([len(shapes)], dtype=dtype))

    def render(ref, scratch):
        # y = x0 op x1, then y op= x2, ... reading y in place; the mean
        # divides the sum by the count as NumPy's kernel does.
        y = ref(inst.outputs[0])
        lines = _call(op, dtype, out, (shapes[0], ref(inst.inputs[0])),
                      (shapes[1], ref(inst.inputs[1])), y)
        for shape, r in zip(shapes[2:], inst.inputs[2:]):
            lines += _call(op, dtype, out, (out, y), (shape, ref(r)), y)
        if count is not None:
            lines += _call('CCN_DIV', dtype, out, (out, y), ((), count), y)
        return lines
    return Step('math', [out], render)


@lowers('Not')
def logical_not(em, inst) -> Step:
    sx = em.shape(inst, 0, dtypes=('bool',))

    def render(ref, scratch):
        return ['ccn_not(%d, %s, %s);' % (math.prod(sx), ref(inst.inputs[0]),
                                          ref(inst.outputs[0]))]
    return Step('math', [sx], render)


@lowers('IsNaN', 'IsInf')
def classify(em, inst) -> Step:
    sx = em.shape(inst, 0, dtypes=FLOATS)
    dtype = em.dtype(inst, 0)
    if inst.op == 'IsNaN':
        classes = 'CCN_IS_NAN'
    else:
        picked = [c for c, on in (('CCN_IS_POS_INF', 'detect_positive'),
                                  ('CCN_IS_NEG_INF', 'detect_negative'))
                  if int(inst.attrs.get(on, 1))]
        classes = ' | '.join(picked) or '0'

    def render(ref, scratch):
        return ['ccn_classify_%s(%d, %s, %s, %s);' % (
            dtype, math.prod(sx), classes, ref(inst.inputs[0]),
            ref(inst.outputs[0]))]
    return Step('math', [sx], render, dtypes=['bool'])

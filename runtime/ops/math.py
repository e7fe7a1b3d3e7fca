"""math kernels: element-wise arithmetic, comparison and logic, reductions,
matrix products (MatMul, Gemm, Einsum, Det) and cumulative sums/products.

Every kernel returns the dtype ONNX specifies, which is usually the input's:
NumPy would otherwise widen small integers in sums, compute mixed-dtype
``Pow`` in float64, and so on, so results are cast back where that can happen.
"""
import functools
import math

import numpy
from numpy.polynomial import chebyshev

from .opset_rules import axes_input_since
from .registry import LATEST, PRODUCT, gemm_cost, kernel, output_times_input, scaled

# -- element-wise unary ----------------------------------------------------

def _register_unary(op, fn, since=1, **facts):
    """Register ``fn(xp, x)`` as ``op`` (with the OpRecord ``facts``).
    Operators that exist since opset 1 carried a ``consumed_inputs``
    attribute (an in-place hint, ignored here) until version 6."""
    if since == 1:
        def legacy(xp, x, *, consumed_inputs=None):
            return fn(xp, x)
        legacy.__name__ = legacy.__qualname__ = op.lower() + '_v1'
        kernel(op, versions=(1, 5))(legacy)
        since = 6

    kernel(op, versions=(since, LATEST), samples='elementwise', **facts)(fn)


def _ufunc(name):
    def run(xp, x):
        return getattr(xp, name)(x)
    run.__name__ = run.__qualname__ = name
    return run


for _op, _name in (('Abs', 'abs'), ('Neg', 'negative'), ('Reciprocal', 'reciprocal'),
                   ('Sqrt', 'sqrt'), ('Exp', 'exp'), ('Log', 'log')):
    _register_unary(_op, _ufunc(_name))
# Piecewise constant, boolean or integer results carry no gradient.
for _op, _name in (('Floor', 'floor'), ('Ceil', 'ceil')):
    _register_unary(_op, _ufunc(_name), gradient=False)
for _op, _name in (('Sin', 'sin'), ('Cos', 'cos'), ('Tan', 'tan'), ('Asin', 'arcsin'),
                   ('Acos', 'arccos'), ('Atan', 'arctan')):
    _register_unary(_op, _ufunc(_name), since=7)
for _op, _name in (('Sinh', 'sinh'), ('Cosh', 'cosh'), ('Asinh', 'arcsinh'),
                   ('Acosh', 'arccosh'), ('Atanh', 'arctanh')):
    _register_unary(_op, _ufunc(_name), since=9)
for _op, _name in (('Sign', 'sign'), ('IsNaN', 'isnan')):
    _register_unary(_op, _ufunc(_name), since=9, gradient=False)
# NumPy's round is round-half-to-even, which is what ONNX asks for.
_register_unary('Round', _ufunc('round'), since=11, gradient=False)
_register_unary('BitwiseNot', _ufunc('invert'), since=18, gradient=False)


@kernel('Not', gradient=False, samples='elementwise')
def logical_not(xp, x):
    return xp.logical_not(x)


def _fit_polynomial(fn, degree):
    """Power-series coefficients (lowest first) of the Chebyshev interpolant
    of ``fn`` on [-1, 1]: near-minimax, and cheap to evaluate by Horner."""
    cheb = chebyshev.chebinterpolate(numpy.vectorize(fn), degree)
    return [float(c) for c in chebyshev.cheb2poly(cheb)]


def _horner(coefs, s):
    acc = s * coefs[-1] + coefs[-2]
    for c in coefs[-3::-1]:
        acc *= s
        acc += c
    return acc


def _erf_near(z):
    return math.erf(z) / z if z else 2 / math.sqrt(math.pi)


def _erf_tail(z):
    return math.erfc(z) * z * math.exp(z * z)


# erf has no NumPy ufunc.  It is evaluated from two polynomial fits against
# the standard library's math.erf/erfc, made once per precision (the degrees
# give about 3 ulps in float32 and 25 in float64): erf(z)/z as a polynomial
# in z**2 on [0, 2], and erfc(z) * z * exp(z**2) as one in 1/z on [2, 6]
# (beyond 6, erf rounds to 1 in float64 and the second form tends to it).
_ERF_SPLIT, _ERF_FAR = 2.0, 6.0
_ERF_TAIL_SCALE = 2 / (1 / _ERF_SPLIT - 1 / _ERF_FAR)
_ERF_COEFS = {
    dtype: (_fit_polynomial(lambda s: _erf_near(math.sqrt((s + 1) / 2) * _ERF_SPLIT), near),
            _fit_polynomial(lambda s: _erf_tail(1 / (1 / _ERF_FAR + (s + 1) / _ERF_TAIL_SCALE)),
                            tail))
    for dtype, near, tail in ((numpy.float32, 10, 6), (numpy.float64, 18, 12))}


def _erf(xp, x):
    work = numpy.float64 if x.dtype == numpy.float64 else numpy.float32
    near_coefs, tail_coefs = _ERF_COEFS[work]
    xw = x.astype(work, copy=False)
    z = xp.abs(xw)
    s = xp.minimum(z, _ERF_SPLIT)
    s *= s
    s *= 2 / _ERF_SPLIT ** 2
    s -= 1
    near = _horner(near_coefs, s)
    near *= z
    zt = xp.maximum(z, _ERF_SPLIT)
    s = 1 / zt
    s -= 1 / _ERF_FAR
    s *= _ERF_TAIL_SCALE
    s -= 1
    tail = _horner(tail_coefs, xp.maximum(s, -1.0))
    tail *= xp.exp(-zt * zt)
    tail /= zt
    y = xp.copysign(xp.where(z < _ERF_SPLIT, near, 1 - tail), xw)
    return y.astype(x.dtype, copy=False)


_register_unary('Erf', _erf, since=9)


@kernel('IsInf', versions=(10, LATEST), gradient=False, samples='elementwise')
def isinf(xp, x, *, detect_negative=1, detect_positive=1):
    if detect_negative and detect_positive:
        return xp.isinf(x)
    if detect_positive:
        return x == xp.inf
    if detect_negative:
        return x == -xp.inf
    return xp.zeros(x.shape, dtype=bool)


# -- element-wise binary ---------------------------------------------------

def _legacy_broadcast(b, a_ndim, axis, broadcast):
    """Opset < 7 broadcasting: with ``broadcast=1`` the shape of ``b`` matches
    a contiguous run of ``a``'s dimensions starting at ``axis`` (by default,
    the trailing ones, as in NumPy)."""
    if broadcast and axis is not None and b.ndim < a_ndim:
        axis %= a_ndim
        b = b.reshape(b.shape + (1,) * (a_ndim - axis - b.ndim))
    return b


def _register_binary(op, fn, since=1, **facts):
    """Register ``fn(xp, a, b)`` as ``op`` with NumPy broadcasting (and the
    OpRecord ``facts``); operators that exist since opset 1 get a kernel for
    the explicit ``broadcast``/``axis`` attributes of versions 1-6."""
    if since == 1:
        def legacy(xp, a, b, *, axis=None, broadcast=0, consumed_inputs=None):
            return fn(xp, a, _legacy_broadcast(b, a.ndim, axis, broadcast))
        legacy.__name__ = legacy.__qualname__ = op.lower() + '_v1'
        kernel(op, versions=(1, 6))(legacy)
        since = 7

    kernel(op, versions=(since, LATEST), samples='elementwise', **facts)(fn)


def _binary_ufunc(name):
    def run(xp, a, b):
        return getattr(xp, name)(a, b)
    run.__name__ = run.__qualname__ = name
    return run


def _divide(xp, a, b):
    """ONNX integer division truncates toward zero; NumPy's floors."""
    if a.dtype.kind not in 'iu':
        return xp.true_divide(a, b)
    q = xp.floor_divide(a, b)
    if a.dtype.kind == 'i':
        inexact = (xp.remainder(a, b) != 0) & ((a < 0) != (b < 0))
        q = q + inexact.astype(q.dtype)
    return q


def _power(xp, x, y):
    """The result has the base's dtype whatever the exponent's."""
    if y.dtype == x.dtype:
        return xp.power(x, y)
    if x.dtype.kind in 'iu' and y.dtype.kind not in 'iu':
        # Integer base, floating exponent: compute in float64, truncate back.
        return xp.power(x.astype(numpy.float64), y).astype(x.dtype)
    return xp.power(x, y.astype(x.dtype))


for _op, _name in (('Add', 'add'), ('Sub', 'subtract'), ('Mul', 'multiply')):
    _register_binary(_op, _binary_ufunc(_name))
_register_binary('Div', _divide)
_register_binary('Pow', _power)
# Comparisons, logic and bitwise operations carry no gradient.
for _op, _name in (('Equal', 'equal'), ('Less', 'less'), ('Greater', 'greater'),
                   ('And', 'logical_and'), ('Or', 'logical_or'), ('Xor', 'logical_xor')):
    _register_binary(_op, _binary_ufunc(_name), gradient=False)
_register_binary('LessOrEqual', _binary_ufunc('less_equal'), since=12, gradient=False)
_register_binary('GreaterOrEqual', _binary_ufunc('greater_equal'), since=12, gradient=False)
for _op, _name in (('BitwiseAnd', 'bitwise_and'), ('BitwiseOr', 'bitwise_or'),
                   ('BitwiseXor', 'bitwise_xor')):
    _register_binary(_op, _binary_ufunc(_name), since=18, gradient=False)


@kernel('Mod', versions=(10, LATEST), samples='elementwise')
def mod(xp, a, b, *, fmod=0):
    # fmod=0: the remainder takes the divisor's sign (Python's %);
    # fmod=1: the dividend's (C's fmod).
    return xp.fmod(a, b) if fmod else xp.remainder(a, b)


@kernel('BitShift', versions=(11, LATEST), gradient=False, samples='elementwise')
def bitshift(xp, x, y, *, direction):
    if direction == 'LEFT':
        return xp.left_shift(x, y)
    if direction == 'RIGHT':
        return xp.right_shift(x, y)
    raise ValueError("BitShift direction must be 'LEFT' or 'RIGHT', got %r" % (direction,))


# -- variadic --------------------------------------------------------------

def _register_variadic(op, fn):
    """Register ``fn(xp, *inputs)``; version 1 had ``consumed_inputs``."""
    def legacy(xp, *inputs, consumed_inputs=None):
        return fn(xp, *inputs)
    legacy.__name__ = legacy.__qualname__ = op.lower() + '_v1'
    kernel(op, versions=(1, 5))(legacy)
    kernel(op, versions=(6, LATEST), samples='elementwise')(fn)


def _fold(name):
    def run(xp, *inputs):
        return functools.reduce(getattr(xp, name), inputs)
    run.__name__ = run.__qualname__ = name
    return run


def _mean(xp, *inputs):
    total = functools.reduce(xp.add, inputs)
    return (total / len(inputs)).astype(total.dtype, copy=False)


_register_variadic('Sum', _fold('add'))
_register_variadic('Max', _fold('maximum'))
_register_variadic('Min', _fold('minimum'))
_register_variadic('Mean', _mean)


def _clip(xp, x, low, high):
    # maximum then minimum: where low > high every element becomes high.
    if low is not None:
        x = xp.maximum(x, low)
    if high is not None:
        x = xp.minimum(x, high)
    return x


@kernel('Clip', versions=(1, 10))
def clip_v1(xp, x, *, min=None, max=None, consumed_inputs=None):
    return _clip(xp, x, min, max).astype(x.dtype, copy=False)


@kernel('Clip', versions=(11, LATEST), samples='elementwise')
def clip(xp, x, min=None, max=None):
    return _clip(xp, x, min, max)


# -- reductions ------------------------------------------------------------

def _extreme(x, largest):
    """The identity of max (``largest=False``) or min (``largest=True``)."""
    if x.dtype.kind == 'f':
        return numpy.inf if largest else -numpy.inf
    if x.dtype.kind == 'b':
        return bool(largest)
    info = numpy.iinfo(x.dtype)
    return info.max if largest else info.min


def _reduce_extreme(name, largest):
    def run(xp, x, axes, keepdims):
        if any(x.shape[a] == 0 for a in axes):
            # An empty set's max is -inf and its min +inf (NumPy raises).
            shape = tuple(1 if a in axes else d for a, d in enumerate(x.shape)
                          if keepdims or a not in axes)
            return xp.full(shape, _extreme(x, largest), dtype=x.dtype)
        return getattr(xp, name)(x, axis=axes, keepdims=keepdims)
    return run


def _sum(xp, x, axes, keepdims):
    if x.dtype.kind == 'f':  # already keeps its dtype; dtype= costs a microsecond
        return x.sum(axis=axes, keepdims=keepdims)
    return xp.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype)


def _log_sum_exp(xp, x, axes, keepdims):
    if x.size == 0:
        return xp.log(_sum(xp, xp.exp(x), axes, keepdims))
    # Shift by the (finite) maximum so that exp cannot overflow.
    shift = xp.max(x, axis=axes, keepdims=True)
    shift = xp.where(xp.isfinite(shift), shift, xp.zeros_like(shift))
    y = xp.log(xp.sum(xp.exp(x - shift), axis=axes, keepdims=True)) + shift
    return y if keepdims else xp.squeeze(y, axis=axes)


_REDUCTIONS = {
    'ReduceSum': _sum,
    'ReduceMean': lambda xp, x, axes, keepdims: xp.mean(x, axis=axes, keepdims=keepdims),
    'ReduceMax': _reduce_extreme('max', False),
    'ReduceMin': _reduce_extreme('min', True),
    'ReduceProd': lambda xp, x, axes, keepdims: xp.prod(
        x, axis=axes, keepdims=keepdims, dtype=x.dtype),
    'ReduceL1': lambda xp, x, axes, keepdims: _sum(xp, xp.abs(x), axes, keepdims),
    'ReduceL2': lambda xp, x, axes, keepdims: xp.sqrt(_sum(xp, x * x, axes, keepdims)),
    'ReduceSumSquare': lambda xp, x, axes, keepdims: _sum(xp, x * x, axes, keepdims),
    'ReduceLogSum': lambda xp, x, axes, keepdims: xp.log(_sum(xp, x, axes, keepdims)),
    'ReduceLogSumExp': _log_sum_exp,
}


def _reduce(xp, compute, x, axes, keepdims, noop_with_empty_axes):
    """Reduce over ``axes`` (a list, maybe empty or None).  No axes means all
    of them, unless ``noop_with_empty_axes``: then the reduction runs over no
    axis at all (ReduceSum returns the input, ReduceSumSquare its square...)."""
    if axes:
        axes = tuple(sorted({a % x.ndim for a in axes})) if x.ndim else tuple(axes)
    elif noop_with_empty_axes:
        axes = ()
    else:
        axes = tuple(range(x.ndim))
    return compute(xp, x, axes, bool(keepdims)).astype(x.dtype, copy=False)


def _register_reduction(op, compute):
    """One kernel for the axes attribute, one for the axes input."""
    since = axes_input_since(op)

    def with_attribute(xp, data, *, axes=None, keepdims=1):
        return _reduce(xp, compute, data, axes, keepdims, 0)
    with_attribute.__name__ = with_attribute.__qualname__ = op.lower() + '_axes_attribute'
    kernel(op, versions=(1, since - 1))(with_attribute)

    def with_input(xp, data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
        if axes is not None:
            axes = axes.reshape(-1).tolist()
        return _reduce(xp, compute, data, axes, keepdims, noop_with_empty_axes)
    with_input.__name__ = with_input.__qualname__ = op.lower()
    kernel(op, versions=(since, LATEST), samples='reduction')(with_input)


for _op, _compute in _REDUCTIONS.items():
    _register_reduction(_op, _compute)


def _arg_extreme(xp, name, data, axis, keepdims, select_last_index):
    axis %= data.ndim
    if select_last_index:
        # The first extreme of the reversed axis is the last one.
        index = data.shape[axis] - 1 - getattr(xp, name)(xp.flip(data, axis), axis=axis)
    else:
        index = getattr(xp, name)(data, axis=axis)
    index = index.astype(numpy.int64, copy=False)
    return xp.expand_dims(index, axis) if keepdims else index


@kernel('ArgMax', gradient=False, samples='along_axis')
def argmax(xp, data, *, axis=0, keepdims=1, select_last_index=0):
    return _arg_extreme(xp, 'argmax', data, axis, keepdims, select_last_index)


@kernel('ArgMin', gradient=False, samples='along_axis')
def argmin(xp, data, *, axis=0, keepdims=1, select_last_index=0):
    return _arg_extreme(xp, 'argmin', data, axis, keepdims, select_last_index)


# -- matrix products -------------------------------------------------------

@kernel('MatMul', cost=scaled(output_times_input(0, slice(-1, None)), PRODUCT))
def matmul(xp, a, b, bias=None):
    """``bias``: a third input the fusion adds (runtime/native/fusion.py,
    a Linear layer's Add), in place on the product."""
    y = xp.matmul(a, b)
    if bias is not None:
        y += bias
    return y


@kernel('Gemm', cost=scaled(gemm_cost, PRODUCT))
def gemm(xp, a, b, c=None, *, alpha=1.0, beta=1.0, transA=0, transB=0, broadcast=0):
    # ``broadcast`` (opsets < 7) only allowed C to broadcast, which NumPy does anyway.
    y = xp.matmul(a.T if transA else a, b.T if transB else b)
    if y.dtype.kind != 'f':  # integer Gemm: the scalars may promote
        if alpha != 1.0:
            y = y * alpha
        if c is not None and beta != 0.0:
            y = y + (c if beta == 1.0 else c * beta)
        return y.astype(a.dtype, copy=False)
    # y is a fresh product: scale and add the bias in place.
    if alpha != 1.0:
        y *= alpha
    if c is not None and beta != 0.0:
        y += c if beta == 1.0 else c * beta
    return y


@kernel('Einsum', versions=(12, LATEST), recompute=False)
def einsum(xp, *inputs, equation):
    # Let einsum pick a contraction order (and BLAS) when there is one to pick.
    return xp.einsum(equation.replace(' ', ''), *inputs, optimize=len(inputs) > 1)


@kernel('Det', versions=(11, LATEST))
def det(xp, x):
    # LAPACK has no half precision.
    work = x if x.dtype.itemsize >= 4 else x.astype(numpy.float32)
    return xp.linalg.det(work).astype(x.dtype, copy=False)


# -- cumulative ------------------------------------------------------------

def _cumulative(xp, name, identity, x, axis, exclusive, reverse):
    axis = int(axis.reshape(())) % x.ndim
    if reverse:
        x = xp.flip(x, axis)
    y = getattr(xp, name)(x, axis=axis, dtype=x.dtype)
    if exclusive:
        # Shift by one along the axis, starting from the identity.
        shifted = xp.empty_like(y)
        head = (slice(None),) * axis
        shifted[head + (slice(0, 1),)] = identity
        shifted[head + (slice(1, None),)] = y[head + (slice(0, -1),)]
        y = shifted
    return xp.flip(y, axis) if reverse else y


@kernel('CumSum', versions=(11, LATEST))
def cumsum(xp, x, axis, *, exclusive=0, reverse=0):
    return _cumulative(xp, 'cumsum', 0, x, axis, exclusive, reverse)


@kernel('CumProd', versions=(26, LATEST))
def cumprod(xp, x, axis, *, exclusive=0, reverse=0):
    return _cumulative(xp, 'cumprod', 1, x, axis, exclusive, reverse)


# -- gradient kernels (org.chainer_compiler) ---------------------------------------------

from .registry import CUSTOM_DOMAIN, dim, like  # noqa: E402


def _gemm_types(inputs, attributes):
    """Gemm's type rule: (M, N) in A's type, from A (M, K), or (K, M) with
    ``transA``, and B (K, N), or (N, K) with ``transB``."""
    a, b = inputs[:2]
    if a is None:
        return [None]
    return [(a[0], (dim(a, 1 if attributes['transA'] else 0),
                    dim(b, 0 if attributes['transB'] else 1)))]


@kernel('FusedGemm', domain=CUSTOM_DOMAIN, outputs=('Y',), types=_gemm_types,
        attributes={'activation': 'string'})
def fused_gemm(xp, a, b, c=None, *, activation, alpha=1.0, beta=1.0, transA=0, transB=0):
    """Gemm followed by ``activation`` ('Relu'), applied in place on the
    product: one instruction and one array instead of two."""
    if activation != 'Relu':
        raise ValueError("FusedGemm: activation must be 'Relu', got %r" % (activation,))
    y = gemm(xp, a, b, c, alpha=alpha, beta=beta, transA=transA, transB=transB)
    return xp.maximum(y, y.dtype.type(0), out=y)


@kernel('ReduceProdGrad', domain=CUSTOM_DOMAIN, outputs=('gx',), types=like(0))
def reduce_prod_grad(xp, x, gy):
    """Gradient of ReduceProd: ``gy`` (the output gradient with the reduced
    axes kept as 1s) times the product of the *other* reduced elements,
    from exclusive running products in both directions (exact with zeros).
    Axes of size 1 in ``gy`` count as reduced; for those of ``x`` that were
    not, the product of the others along them is 1 anyway."""
    reduced = [i for i in range(x.ndim) if gy.shape[i] == 1]
    kept = [i for i in range(x.ndim) if gy.shape[i] != 1]
    perm = kept + reduced
    moved = xp.transpose(x, perm)
    flat = moved.reshape(moved.shape[:len(kept)] + (-1,))
    ones = xp.ones(flat.shape[:-1] + (1,), dtype=x.dtype)
    before = xp.cumprod(xp.concatenate([ones, flat[..., :-1]], axis=-1), axis=-1, dtype=x.dtype)
    after = xp.flip(xp.cumprod(xp.flip(xp.concatenate([flat[..., 1:], ones], axis=-1), -1),
                               axis=-1, dtype=x.dtype), -1)
    others = (before * after).reshape(moved.shape)
    others = xp.transpose(others, tuple(int(i) for i in numpy.argsort(perm)))
    return (others * gy).astype(x.dtype, copy=False)


@kernel('DetGrad', domain=CUSTOM_DOMAIN, outputs=('gx',), types=like(0))
def det_grad(xp, x, y, gy):
    """Gradient of Det: ``gy det(x) inv(x)^T`` for (..., n, n) ``x``."""
    work = x if x.dtype.itemsize >= 4 else x.astype(numpy.float32)
    inverse_t = xp.swapaxes(xp.linalg.inv(work), -1, -2)
    scale = (gy * y).astype(work.dtype, copy=False)[..., None, None]
    return (scale * inverse_t).astype(x.dtype, copy=False)

"""Gradient rules for the math family.

Element-wise rules read whichever forward value is cheapest to keep (Exp,
Sqrt, Tan and Reciprocal read their output, the rest their input) and undo
broadcasting with ``b.sum_to``.  Reductions decide at compile time, from the
static shapes, where the reduced axes sit; only when an axes *input* leaves
that ambiguous is the gradient unsqueezed by the same axes at run time.

Ties go where Chainer sends them: for Max/Min (variadic) to the first input
holding the extreme, as F.maximum/F.minimum do; for ReduceMax/ReduceMin to
every element equal to the extreme, as F.max/F.min do.

Custom operators (org.chainer_compiler, kernels in runtime/ops/math.py):
ReduceProdGrad (ReduceProd's adjoint, exact where inputs are zero) and
DetGrad.
"""
import itertools
import math

import numpy
from onnx import helper

from ..onnx_graph import optional_input
from ..runtime.ops.registry import CUSTOM_DOMAIN
from .registry import GradientError, gradient

# -- helpers -----------------------------------------------------------------

def _is_float(b, name):
    if not name:
        return False
    dtype = b.value_types.get(name, (None, None))[0]
    return dtype is not None and dtype.kind == 'f'


def _scalar(b, value, like):
    """A 0-d constant of ``value`` in the dtype of forward value ``like``."""
    return b.constant(numpy.asarray(value, dtype=b.dtype(like)), hint='c')



def _ge(b, x, y):
    if b.opset >= 12:
        return b.node('GreaterOrEqual', [x, y])
    return b.node('Not', [b.node('Less', [x, y])])


def _le(b, x, y):
    if b.opset >= 12:
        return b.node('LessOrEqual', [x, y])
    return b.node('Not', [b.node('Greater', [x, y])])


def _select(b, condition, gy, like, invert=False):
    """gy where ``condition`` (where it does not, with ``invert``), else 0:
    Where from opset 9, a multiplication by the cast mask before."""
    if b.opset >= 9:
        zero = _scalar(b, 0, like)
        return b.node('Where', [condition, zero, gy] if invert else [condition, gy, zero])
    if invert:
        condition = b.node('Not', [condition])
    mask = b.node('Cast', [condition], to=helper.np_dtype_to_tensor_dtype(b.dtype(like)))
    return b.node('Mul', [gy, mask])


def _unbroadcast(b, node, grad, i):
    """Gradient ``grad`` (shaped like the output) of input ``i`` of an
    element-wise ``node``, summed back to that input's shape; handles the
    explicit ``broadcast``/``axis`` attributes of opsets < 7."""
    x = node.input[i]
    if b.version(node) < 7 and i > 0 and b.attr(node, 'broadcast'):
        out_shape, shape = b.shape(node.output[0]), b.shape(x)
        axis = b.attr(node, 'axis')
        if axis is not None and len(shape) < len(out_shape):
            axis %= len(out_shape)
            aligned = shape + (1,) * (len(out_shape) - axis - len(shape))
            return b.reshape(b.sum_to(grad, out_shape, aligned), shape)
    return b.sum_to(grad, b.dims(node.output[0]), b.dims(x), like=x)


def _neg_sum_to(b, node, grad, i):
    """-grad summed to input ``i`` (negating after the sum: fewer elements)."""
    return b.node('Neg', [_unbroadcast(b, node, grad, i)])


# -- element-wise binary -----------------------------------------------------

@gradient('Add')
def add_grad(b, node, gys):
    gy, = gys
    return [_unbroadcast(b, node, gy, i) if _is_float(b, x) else None
            for i, x in enumerate(node.input)]


@gradient('Sub')
def sub_grad(b, node, gys):
    gy, = gys
    a, c = node.input
    return [_unbroadcast(b, node, gy, 0) if _is_float(b, a) else None,
            _neg_sum_to(b, node, gy, 1) if _is_float(b, c) else None]


@gradient('Mul')
def mul_grad(b, node, gys):
    gy, = gys
    a, c = node.input
    if a == c and _is_float(b, a):  # x * x: one 2 gy x, not two gy x added
        g = b.node('Mul', [gy, a])
        return [_unbroadcast(b, node, b.node('Add', [g, g]), 0), None]
    ga = gc = None
    if _is_float(b, a):
        ga = _unbroadcast(b, node, b.node('Mul', [gy, c]), 0)
    if _is_float(b, c):
        gc = _unbroadcast(b, node, b.node('Mul', [gy, a]), 1)
    return [ga, gc]


@gradient('Div')
def div_grad(b, node, gys):
    # y = a / c: ga = gy / c, gc = -gy a / c^2 = -(gy / c) y.
    gy, = gys
    a, c = node.input
    y = node.output[0]
    if not _is_float(b, y):
        return [None, None]
    g_over_c = b.node('Div', [gy, c])
    ga = _unbroadcast(b, node, g_over_c, 0) if _is_float(b, a) else None
    gc = None
    if _is_float(b, c):
        gc = _neg_sum_to(b, node, b.node('Mul', [g_over_c, y]), 1)
    return [ga, gc]


@gradient('Pow')
def pow_grad(b, node, gys):
    # ga = gy e a^(e - 1) (through Pow: exact at a == 0), ge = gy y log(a).
    gy, = gys
    a, e = node.input
    y = node.output[0]
    ga = ge = None
    if _is_float(b, a):
        e_minus_1 = b.node('Sub', [e, _scalar(b, 1, e)])
        ef = e
        if b.dtype(e) != b.dtype(a):
            ef = b.node('Cast', [e], to=helper.np_dtype_to_tensor_dtype(b.dtype(a)))
        slope = b.node('Mul', [ef, b.node('Pow', [a, e_minus_1])])
        ga = _unbroadcast(b, node, b.node('Mul', [gy, slope]), 0)
    if _is_float(b, e):
        ge = b.node('Mul', [gy, b.node('Mul', [y, b.node('Log', [a])])])
        ge = _unbroadcast(b, node, ge, 1)
        if b.dtype(e) != b.dtype(a):
            ge = b.node('Cast', [ge], to=helper.np_dtype_to_tensor_dtype(b.dtype(e)))
    return [ga, ge]


@gradient('Mod')
def mod_grad(b, node, gys):
    # y = a - q c with q = trunc(a / c) (fmod=1) or floor(a / c) (fmod=0), an
    # integer that is locally constant: ga = gy, gc = -gy q, and q = (a - y) / c.
    gy, = gys
    a, c = node.input
    y = node.output[0]
    if not _is_float(b, y):
        return [None, None]
    ga = _unbroadcast(b, node, gy, 0)
    q = b.node('Div', [b.node('Sub', [a, y]), c])
    gc = _neg_sum_to(b, node, b.node('Mul', [gy, q]), 1)
    return [ga, gc]


# -- element-wise unary ------------------------------------------------------

@gradient('Identity')
def identity_grad(b, node, gys):
    return [gys[0]]


@gradient('Neg')
def neg_grad(b, node, gys):
    return [b.node('Neg', [gys[0]])]


@gradient('Abs')
def abs_grad(b, node, gys):
    x = node.input[0]
    return [b.node('Mul', [gys[0], b.node('Sign', [x])])]


@gradient('Sqrt')
def sqrt_grad(b, node, gys):
    # gy / (2 y)
    y = node.output[0]
    return [b.node('Div', [b.node('Mul', [gys[0], _scalar(b, 0.5, y)]), y])]


@gradient('Reciprocal')
def reciprocal_grad(b, node, gys):
    # -gy y^2
    y = node.output[0]
    return [b.node('Neg', [b.node('Mul', [gys[0], b.node('Mul', [y, y])])])]


@gradient('Exp')
def exp_grad(b, node, gys):
    return [b.node('Mul', [gys[0], node.output[0]])]


@gradient('Log')
def log_grad(b, node, gys):
    return [b.node('Div', [gys[0], node.input[0]])]


@gradient('Sin')
def sin_grad(b, node, gys):
    return [b.node('Mul', [gys[0], b.node('Cos', [node.input[0]])])]


@gradient('Cos')
def cos_grad(b, node, gys):
    return [b.node('Neg', [b.node('Mul', [gys[0], b.node('Sin', [node.input[0]])])])]


@gradient('Tan')
def tan_grad(b, node, gys):
    # gy (1 + y^2)
    y = node.output[0]
    square = b.node('Mul', [y, y])
    return [b.node('Mul', [gys[0], b.node('Add', [square, _scalar(b, 1, y)])])]


def _root(b, x, form):
    """sqrt(1 - x^2), sqrt(x^2 + 1) or sqrt(x^2 - 1)."""
    square = b.node('Mul', [x, x])
    one = _scalar(b, 1, x)
    inner = {'1-x2': ('Sub', [one, square]), 'x2+1': ('Add', [square, one]),
             'x2-1': ('Sub', [square, one])}[form]
    return b.node('Sqrt', [b.node(*inner)])


@gradient('Asin')
def asin_grad(b, node, gys):
    return [b.node('Div', [gys[0], _root(b, node.input[0], '1-x2')])]


@gradient('Acos')
def acos_grad(b, node, gys):
    return [b.node('Neg', [b.node('Div', [gys[0], _root(b, node.input[0], '1-x2')])])]


@gradient('Asinh')
def asinh_grad(b, node, gys):
    return [b.node('Div', [gys[0], _root(b, node.input[0], 'x2+1')])]


@gradient('Acosh')
def acosh_grad(b, node, gys):
    return [b.node('Div', [gys[0], _root(b, node.input[0], 'x2-1')])]


@gradient('Atan')
def atan_grad(b, node, gys):
    # gy / (1 + x^2)
    x = node.input[0]
    denominator = b.node('Add', [b.node('Mul', [x, x]), _scalar(b, 1, x)])
    return [b.node('Div', [gys[0], denominator])]


@gradient('Atanh')
def atanh_grad(b, node, gys):
    # gy / (1 - x^2)
    x = node.input[0]
    denominator = b.node('Sub', [_scalar(b, 1, x), b.node('Mul', [x, x])])
    return [b.node('Div', [gys[0], denominator])]


@gradient('Sinh')
def sinh_grad(b, node, gys):
    return [b.node('Mul', [gys[0], b.node('Cosh', [node.input[0]])])]


@gradient('Cosh')
def cosh_grad(b, node, gys):
    return [b.node('Mul', [gys[0], b.node('Sinh', [node.input[0]])])]


@gradient('Erf')
def erf_grad(b, node, gys):
    # gy 2/sqrt(pi) exp(-x^2)
    x = node.input[0]
    gauss = b.node('Exp', [b.node('Neg', [b.node('Mul', [x, x])])])
    scaled = b.node('Mul', [gys[0], _scalar(b, 2 / math.sqrt(math.pi), x)])
    return [b.node('Mul', [scaled, gauss])]


# -- variadic ----------------------------------------------------------------

@gradient('Sum')
def sum_grad(b, node, gys):
    gy, = gys
    return [_unbroadcast(b, node, gy, i) if _is_float(b, x) else None
            for i, x in enumerate(node.input)]


@gradient('Mean')
def mean_grad(b, node, gys):
    gy, = gys
    scaled = b.node('Mul', [gy, _scalar(b, 1 / len(node.input), node.output[0])])
    return [_unbroadcast(b, node, scaled, i) for i in range(len(node.input))]


def _extreme_grad(b, node, gy, largest):
    """Max/Min: each element's gradient goes to the first input holding the
    extreme (Chainer's maximum: x1 >= x2 picks x1)."""
    inputs = list(node.input)
    y = node.output[0]
    if not _is_float(b, y):
        return [None] * len(inputs)
    if len(inputs) == 1:
        return [gy]
    if len(inputs) == 2:
        first = (_ge if largest else _le)(b, inputs[0], inputs[1])
        return [_unbroadcast(b, node, _select(b, first, gy, y), 0),
                _unbroadcast(b, node, _select(b, first, gy, y, invert=True), 1)]
    grads, taken = [], None
    for i, x in enumerate(inputs):
        hit = b.node('Equal', [x, y])
        if taken is not None:
            mine = b.node('And', [hit, b.node('Not', [taken])]) if i < len(inputs) - 1 \
                else b.node('Not', [taken])
        else:
            mine = hit
        if i < len(inputs) - 1:
            taken = hit if taken is None else b.node('Or', [taken, hit])
        grads.append(_unbroadcast(b, node, _select(b, mine, gy, y), i))
    return grads


@gradient('Max')
def max_grad(b, node, gys):
    return _extreme_grad(b, node, gys[0], True)


@gradient('Min')
def min_grad(b, node, gys):
    return _extreme_grad(b, node, gys[0], False)


@gradient('Clip')
def clip_grad(b, node, gys):
    """gy where low <= x <= high (bounds count as inside, as in Chainer);
    a bound given as a float input gets the sum of gy where it was taken."""
    gy, = gys
    x = node.input[0]
    if not _is_float(b, x):
        return [None] * len(node.input)
    if len(node.input) == 1 and (b.attr(node, 'min') is not None
                                 or b.attr(node, 'max') is not None):  # opset < 11
        low = b.attr(node, 'min')
        high = b.attr(node, 'max')
        low = None if low is None else _scalar(b, low, x)
        high = None if high is None else _scalar(b, high, x)
    else:
        low, high = optional_input(node, 1) or None, optional_input(node, 2) or None
    conditions = []
    if low is not None:
        conditions.append(_ge(b, x, low))
    if high is not None:
        conditions.append(_le(b, x, high))
    if not conditions:
        return [gy] + [None] * (len(node.input) - 1)
    inside = conditions[0] if len(conditions) == 1 else b.node('And', conditions)
    grads = [_select(b, inside, gy, x)]
    for i, (bound, compare) in enumerate(((low, 'Less'), (high, 'Greater')), 1):
        if i >= len(node.input):
            break
        if node.input[i] and _is_float(b, node.input[i]):
            taken = _select(b, b.node(compare, [x, bound]), gy, x)
            grads.append(b.sum_to(b.reduce('ReduceSum', taken, None, keepdims=False),
                                  (), b.dims(bound), like=bound))
        else:
            grads.append(None)
    return grads


# -- reductions --------------------------------------------------------------

def _kept_shape(b, node):
    """The output shape with reduced axes kept as 1s (dimensions as
    ``b.dims`` gives them), or None when only the run-time axes input can
    tell (then ``_keep`` unsqueezes by it)."""
    x_shape = b.dims(node.input[0])
    y_shape = b.dims(node.output[0])
    rank = len(x_shape)
    if len(y_shape) == rank:  # keepdims, or no axis reduced
        return y_shape
    axes = b.attr(node, 'axes')
    if axes is not None:
        axes = {a % rank for a in axes}
        return tuple(1 if i in axes else d for i, d in enumerate(x_shape))
    if not optional_input(node, 1) or not y_shape:
        return (1,) * rank
    if None in x_shape or None in y_shape:  # unnamed run-time dimensions match nothing
        return None
    kept = set()
    for removed in itertools.combinations(range(rank), rank - len(y_shape)):
        if tuple(d for i, d in enumerate(x_shape) if i not in removed) == tuple(y_shape):
            kept.add(tuple(1 if i in removed else d for i, d in enumerate(x_shape)))
    return kept.pop() if len(kept) == 1 else None


def _keep(b, node, name, kept):
    """``name`` (shaped like the reduction's output) with the reduced axes
    as 1s: a Reshape to ``kept`` when static, else an Unsqueeze."""
    rank = len(b.dims(node.input[0]))
    if len(b.dims(node.output[0])) == rank:
        return name
    if kept is not None and all(isinstance(d, int) for d in kept):
        return b.reshape(name, kept)
    axes = b.attr(node, 'axes')
    if axes is None and not optional_input(node, 1):
        axes = range(rank)
    if axes is None:
        return b.node('Unsqueeze', [name, node.input[1]])
    return b.unsqueeze(name, sorted(a % rank for a in axes))


def _reduction(op):
    def register(fn):
        def rule(b, node, gys):
            x = node.input[0]
            if not _is_float(b, x):
                return [None] * len(node.input)
            kept = _kept_shape(b, node)
            gy = _keep(b, node, gys[0], kept)
            return [fn(b, node, x, gy, kept)] + [None] * (len(node.input) - 1)
        rule.__name__ = fn.__name__
        return gradient(op)(rule)
    return register


def _expand(b, g, x):
    return b.node('Expand', [g, b.shape_tensor(x)])


@_reduction('ReduceSum')
def reduce_sum_grad(b, node, x, gy, kept):
    return _expand(b, gy, x)


@_reduction('ReduceMean')
def reduce_mean_grad(b, node, x, gy, kept):
    y = node.output[0]
    if all(isinstance(d, int) for d in b.dims(x) + b.dims(y)):
        count = max(int(numpy.prod(b.shape(x))), 1) / max(int(numpy.prod(b.shape(y))), 1)
        return _expand(b, b.node('Mul', [gy, _scalar(b, 1 / count, x)]), x)
    to = helper.np_dtype_to_tensor_dtype(b.dtype(x))
    sizes = [b.node('Cast', [b.node('Size', [v])], to=to) for v in (y, x)]
    return _expand(b, b.node('Mul', [gy, b.node('Div', sizes)]), x)


@_reduction('ReduceSumSquare')
def reduce_sum_square_grad(b, node, x, gy, kept):
    return b.node('Mul', [x, b.node('Mul', [gy, _scalar(b, 2, x)])])


@_reduction('ReduceL1')
def reduce_l1_grad(b, node, x, gy, kept):
    return b.node('Mul', [b.node('Sign', [x]), gy])


@_reduction('ReduceL2')
def reduce_l2_grad(b, node, x, gy, kept):
    y = _keep(b, node, node.output[0], kept)
    return b.node('Mul', [x, b.node('Div', [gy, y])])


@_reduction('ReduceLogSum')
def reduce_log_sum_grad(b, node, x, gy, kept):
    y = _keep(b, node, node.output[0], kept)
    return _expand(b, b.node('Div', [gy, b.node('Exp', [y])]), x)


@_reduction('ReduceLogSumExp')
def reduce_log_sum_exp_grad(b, node, x, gy, kept):
    y = _keep(b, node, node.output[0], kept)
    return b.node('Mul', [b.node('Exp', [b.node('Sub', [x, y])]), gy])


def _reduce_extreme_grad(b, node, x, gy, kept):
    # Every element equal to the extreme gets the gradient (Chainer's F.max).
    y = _keep(b, node, node.output[0], kept)
    return _select(b, b.node('Equal', [x, y]), gy, x)


_reduction('ReduceMax')(_reduce_extreme_grad)
_reduction('ReduceMin')(_reduce_extreme_grad)


@_reduction('ReduceProd')
def reduce_prod_grad(b, node, x, gy, kept):
    # The product of the other reduced elements, exact where some are zero.
    return b.node('ReduceProdGrad', [x, gy], 1, domain=CUSTOM_DOMAIN)


# -- cumulative --------------------------------------------------------------

@gradient('CumSum')
def cumsum_grad(b, node, gys):
    # The adjoint of a cumulative sum runs the other way.
    x, axis = node.input
    reverse = b.attr(node, 'reverse')
    exclusive = b.attr(node, 'exclusive')
    gx = b.node('CumSum', [gys[0], axis], exclusive=exclusive or None,
                reverse=None if reverse else 1)
    return [gx, None]


# -- matrix products ---------------------------------------------------------

def _swap_last_two(b, x, ndim):
    perm = list(range(ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return b.node('Transpose', [x], perm=perm)


def _rows(b, x, ndim, k):
    """``x`` (of rank ``ndim``, last dimension ``k``) as a matrix of rows
    of ``k``: a Reshape when ``k`` is static, else a Flatten."""
    if isinstance(k, int):
        return b.reshape(x, [-1, k])
    return b.node('Flatten', [x], axis=ndim - 1)


@gradient('MatMul')
def matmul_grad(b, node, gys):
    gy, = gys
    a, w = node.input
    sa, sw, sy = b.dims(a), b.dims(w), b.dims(node.output[0])
    need_a, need_w = _is_float(b, a), _is_float(b, w)
    ga = gw = None
    if len(sa) == 1 and len(sw) == 1:  # dot product: y is a scalar
        return [b.node('Mul', [gy, w]) if need_a else None,
                b.node('Mul', [gy, a]) if need_w else None]
    if len(sa) == 1:  # (k) @ (..., k, m) -> (..., m)
        k = sa[0]
        if need_a:
            if len(sw) == 2:
                ga = b.node('MatMul', [w, gy])
            else:
                column = b.node('MatMul', [w, b.unsqueeze(gy, [len(sw) - 1])])
                summed = b.reduce('ReduceSum', column, list(range(len(sw) - 2)), keepdims=False)
                ga = b.reshape(summed, [-1])
        if need_w:
            outer = b.node('Mul', [b.reshape(a, [-1, 1]), b.unsqueeze(gy, [len(sw) - 2])])
            gw = b.sum_to(outer, sy[:-1] + (k, sw[-1]), sw, like=w)
        return [ga, gw]
    if len(sw) == 1:  # (..., n, k) @ (k) -> (..., n)
        k = sw[0]
        if need_a:
            outer = b.node('Mul', [b.unsqueeze(gy, [len(sa) - 1]), w])
            ga = b.sum_to(outer, sy + (k,), sa, like=a)
        if need_w:
            if len(sa) == 2:
                gw = b.node('MatMul', [gy, a])
            else:
                gw = b.node('MatMul', [b.reshape(gy, [-1]), _rows(b, a, len(sa), k)])
        return [ga, gw]
    if need_a:
        if len(sa) == 2 and len(sw) == 2:
            ga = b.node('Gemm', [gy, w], 1, transB=1)
        else:
            full = b.node('MatMul', [gy, _swap_last_two(b, w, len(sw))])
            ga = b.sum_to(full, sy[:-2] + sa[-2:], sa, like=a)
    if need_w:
        if len(sa) == 2 and len(sw) == 2:
            gw = b.node('Gemm', [a, gy], 1, transA=1)
        elif len(sw) == 2:
            # Batched a, unbatched w: one Gemm over the flattened batch.
            gw = b.node('Gemm', [_rows(b, a, len(sa), sa[-1]), _rows(b, gy, len(sy), sy[-1])],
                        1, transA=1)
        else:
            full = b.node('MatMul', [_swap_last_two(b, a, len(sa)), gy])
            gw = b.sum_to(full, sy[:-2] + sw[-2:], sw, like=w)
    return [ga, gw]


@gradient('Gemm')
def gemm_grad(b, node, gys):
    """Y = alpha A' B' + beta C (A' = A or A^T, B' likewise)."""
    gy, = gys
    a, w = node.input[:2]
    c = optional_input(node, 2)
    alpha = b.attr(node, 'alpha')
    beta = b.attr(node, 'beta')
    trans_a = b.attr(node, 'transA')
    trans_b = b.attr(node, 'transB')
    alpha_attr = None if alpha == 1.0 else alpha
    ga = gw = gc = None
    if _is_float(b, a):
        if not trans_a:  # gA = alpha gY B'^T
            ga = b.node('Gemm', [gy, w], 1, transB=None if trans_b else 1, alpha=alpha_attr)
        else:  # gA = alpha B' gY^T
            ga = b.node('Gemm', [w, gy], 1, transA=1 if trans_b else None, transB=1,
                        alpha=alpha_attr)
    if _is_float(b, w):
        if not trans_b:  # gB = alpha A'^T gY
            gw = b.node('Gemm', [a, gy], 1, transA=None if trans_a else 1, alpha=alpha_attr)
        else:  # gB = alpha gY^T A'
            gw = b.node('Gemm', [gy, a], 1, transA=1, transB=1 if trans_a else None,
                        alpha=alpha_attr)
    if c and _is_float(b, c) and beta != 0.0:
        gc = b.sum_to(gy, b.dims(node.output[0]), b.dims(c), like=c)
        if beta != 1.0:
            gc = b.node('Mul', [gc, _scalar(b, beta, c)])
    return [ga, gw] + ([gc] if len(node.input) > 2 else [])


@gradient('Det')
def det_grad(b, node, gys):
    # gx = gy det(x) inv(x)^T
    x, = node.input
    return [b.node('DetGrad', [x, node.output[0], gys[0]], 1, domain=CUSTOM_DOMAIN)]


# -- Einsum ------------------------------------------------------------------

_LETTERS = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'


def _parse_einsum(equation, ranks):
    """Input and output subscripts with any ellipsis spelt out in letters
    unused by the equation."""
    equation = equation.replace(' ', '')
    lhs, arrow, rhs = equation.partition('->')
    terms = lhs.split(',')
    spare = [c for c in _LETTERS if c not in equation]
    widest = max((r - len(t.replace('...', '')) for t, r in zip(terms, ranks) if '...' in t),
                 default=0)
    ellipsis = ''.join(spare[:widest])

    def spell(term, rank):
        if '...' not in term:
            return term
        n = rank - len(term.replace('...', ''))
        return term.replace('...', ellipsis[widest - n:])
    inputs = [spell(t, r) for t, r in zip(terms, ranks)]
    if arrow:
        output = rhs.replace('...', ellipsis)
    else:
        letters = ''.join(inputs)
        output = ellipsis + ''.join(sorted(c for c in set(letters)
                                           if letters.count(c) == 1 and c not in ellipsis))
    return inputs, output


@gradient('Einsum')
def einsum_grad(b, node, gys):
    """The gradient of operand k is the einsum of the output gradient with
    the other operands, written to operand k's subscripts; letters of operand
    k found nowhere else are broadcast back with Expand.  Repeated letters
    within an operand (diagonals) are not supported."""
    gy, = gys
    shapes = [b.shape(x) for x in node.input]
    inputs, output = _parse_einsum(b.attr(node, 'equation'), [len(s) for s in shapes])
    sizes = {}
    for term, shape in zip(inputs, shapes):
        for c, d in zip(term, shape):
            if sizes.get(c, 1) not in (1, d) and d != 1:
                raise GradientError('Einsum gradient: broadcasting ellipsis dims')
            sizes[c] = max(sizes.get(c, 1), d)
    grads = []
    for k, (term, x) in enumerate(zip(inputs, node.input)):
        if not _is_float(b, x):
            grads.append(None)
            continue
        if len(set(term)) != len(term):
            raise GradientError('Einsum gradient: repeated subscripts in %r' % term)
        others = [t for i, t in enumerate(inputs) if i != k]
        available = set(output).union(*others)
        target = ''.join(c for c in term if c in available)
        equation = ','.join([output] + others) + '->' + target
        operands = [gy] + [n for i, n in enumerate(node.input) if i != k]
        g = b.node('Einsum', operands, equation=equation)
        if target != term:
            g = b.reshape(g, [sizes[c] if c in available else 1 for c in term])
            g = b.node('Expand', [g, b.int64s(shapes[k])])
        else:
            broadcast = tuple(sizes[c] for c in term)
            if broadcast != tuple(shapes[k]):
                g = b.sum_to(g, broadcast, shapes[k])
        grads.append(g)
    return grads

"""Converters for chainer.functions.math.

Scalar constants (``x + 1``, ``x * numpy.float64(2)``, ``2 ** x``) are
stored in the dtype of the variable they meet, as Chainer computes them, so
a float32 graph stays float32 whatever type the constant had.

Not FunctionNodes in Chainer 7.8.1, hence nothing to register here:
``F.floor``, ``F.ceil``, ``F.sign``, ``F.fix`` (they return a new Variable
with no creator), ``F.rsqrt`` on CPU (``1 / sqrt(x)``), ``F.scale`` and
``F.bias`` (Reshape + BroadcastTo + Mul/Add), ``F.average`` with weights
(Mul, Sum, BroadcastTo, Div).  ``SquaredError`` (``F.squared_difference``)
belongs to the loss family, ``Tanh`` to activation, ``BroadcastTo`` to array.
"""
import math

import numpy
from onnx import helper

from .registry import converter


def _dtype(call, i=0):
    return call.input_arrays[i].dtype


def _const(ctx, call, value, hint='value'):
    """``value`` as a constant of the first input's dtype (Chainer casts its
    constants that way: ``x.dtype.type(value)``)."""
    return ctx.constant(numpy.asarray(value, dtype=_dtype(call)), hint=hint)


def _onnx_type(dtype):
    return helper.np_dtype_to_tensor_dtype(numpy.dtype(dtype))


# -- element-wise arithmetic -------------------------------------------------

def _binary(op):
    def convert(ctx, call):
        ctx.node(op, call.inputs, call.outputs)
    convert.__name__ = 'convert_' + op.lower()
    return convert


for _names, _op in ((('Add',), 'Add'), (('Sub',), 'Sub'), (('Mul',), 'Mul'),
                    (('Div',), 'Div'), (('PowVarVar',), 'Pow'),
                    (('Maximum',), 'Max'), (('Minimum',), 'Min')):
    converter(*_names)(_binary(_op))


@converter('MultiAdd')
def convert_multi_add(ctx, call):
    if len(call.inputs) == 1:
        ctx.node('Identity', call.inputs, call.outputs)
    else:
        ctx.node('Sum', call.inputs, call.outputs)


def _with_constant(op, constant_first):
    def convert(ctx, call):
        value = _const(ctx, call, call.func.value)
        inputs = [value, call.inputs[0]] if constant_first else [call.inputs[0], value]
        ctx.node(op, inputs, call.outputs)
    return convert


converter('AddConstant')(_with_constant('Add', False))
converter('SubFromConstant')(_with_constant('Sub', True))
converter('MulConstant')(_with_constant('Mul', False))
converter('DivFromConstant')(_with_constant('Div', True))
converter('PowVarConst')(_with_constant('Pow', False))
converter('PowConstVar')(_with_constant('Pow', True))


# -- element-wise unary ------------------------------------------------------

def _unary(op):
    def convert(ctx, call):
        ctx.node(op, call.inputs, call.outputs)
    convert.__name__ = 'convert_' + op.lower()
    return convert


for _name, _op in (('Neg', 'Neg'), ('Absolute', 'Abs'), ('Exp', 'Exp'), ('Log', 'Log'),
                   ('Sqrt', 'Sqrt'), ('Sin', 'Sin'), ('Cos', 'Cos'), ('Tan', 'Tan'),
                   ('Arcsin', 'Asin'), ('Arccos', 'Acos'), ('Arctan', 'Atan'),
                   ('Sinh', 'Sinh'), ('Cosh', 'Cosh'), ('Arctanh', 'Atanh'), ('Erf', 'Erf')):
    converter(_name)(_unary(_op))


@converter('Identity')
def convert_identity(ctx, call):
    # F.identity(*xs) is one FunctionNode with as many outputs as inputs:
    # ONNX Identity has exactly one of each.
    for x, y in zip(call.inputs, call.outputs):
        ctx.node('Identity', [x], [y])


@converter('Square')
def convert_square(ctx, call):
    x = call.inputs[0]
    ctx.node('Mul', [x, x], call.outputs)


@converter('RsqrtGPU')
def convert_rsqrt(ctx, call):
    ctx.node('Reciprocal', [ctx.node('Sqrt', call.inputs)], call.outputs)


@converter('Expm1')
def convert_expm1(ctx, call):
    ctx.node('Sub', [ctx.node('Exp', call.inputs), _const(ctx, call, 1, 'one')], call.outputs)


@converter('Log1p')
def convert_log1p(ctx, call):
    ctx.node('Log', [ctx.node('Add', [call.inputs[0], _const(ctx, call, 1, 'one')])],
             call.outputs)


def _log_base(base):
    def convert(ctx, call):
        log = ctx.node('Log', call.inputs)
        ctx.node('Mul', [log, _const(ctx, call, 1.0 / math.log(base), 'inv_log_base')],
                 call.outputs)
    return convert


converter('Log2')(_log_base(2))
converter('Log10')(_log_base(10))


@converter('Erfc')
def convert_erfc(ctx, call):
    ctx.node('Sub', [_const(ctx, call, 1, 'one'), ctx.node('Erf', call.inputs)], call.outputs)


@converter('Ndtr')
def convert_ndtr(ctx, call):
    # ndtr(x) = (1 + erf(x / sqrt(2))) / 2
    scaled = ctx.node('Mul', [call.inputs[0], _const(ctx, call, 1 / math.sqrt(2), 'rsqrt2')])
    one_plus = ctx.node('Add', [ctx.node('Erf', [scaled]), _const(ctx, call, 1, 'one')])
    ctx.node('Mul', [one_plus, _const(ctx, call, 0.5, 'half')], call.outputs)


@converter('Arctan2')
def convert_arctan2(ctx, call):
    # arctan2(y, x) = atan(y / x), moved by +-pi into the left half plane.
    y, x = call.inputs
    base = ctx.node('Atan', [ctx.node('Div', [y, x])])
    zero = _const(ctx, call, 0, 'zero')
    shift = ctx.node('Where', [ctx.node('Less', [y, zero]), _const(ctx, call, -math.pi, 'm_pi'),
                               _const(ctx, call, math.pi, 'pi')])
    ctx.node('Where', [ctx.node('Less', [x, zero]), ctx.node('Add', [base, shift]), base],
             call.outputs)


@converter('Fmod')
def convert_fmod(ctx, call):
    ctx.node('Mod', call.inputs, call.outputs, fmod=1)


@converter('Clip')
def convert_clip(ctx, call):
    # Bounds in the input's dtype (onnx-chainer always wrote float32 ones).
    x_min, x_max, dtype = call.func.x_min, call.func.x_max, _dtype(call)
    if ctx.opset < 12 and dtype != numpy.float32:
        # Clip-11 is float32-only in onnxruntime: the same with Max and Min.
        y = call.inputs[0]
        if x_min is not None:
            last = x_max is None
            y = ctx.node('Max', [y, _const(ctx, call, x_min, 'min')],
                         call.outputs if last else 1)
        if x_max is not None:
            ctx.node('Min', [y, _const(ctx, call, x_max, 'max')], call.outputs)
        return
    ctx.clip(call.inputs[0], x_min, x_max, dtype, out=call.outputs[0])


@converter('LinearInterpolate')
def convert_linear_interpolate(ctx, call):
    # p * x + (1 - p) * y
    p, x, y = call.inputs
    one_minus_p = ctx.node('Sub', [_const(ctx, call, 1, 'one'), p])
    ctx.node('Add', [ctx.node('Mul', [p, x]), ctx.node('Mul', [one_minus_p, y])], call.outputs)


# -- reductions --------------------------------------------------------------

def _reduction(op):
    def convert(ctx, call):
        axis = call.func.axis
        keepdims = getattr(call.func, 'keepdims', False)
        if axis is not None and len(axis) == 0:
            # axis=(): NumPy reduces over no axis at all; ONNX empty axes
            # would mean every axis.
            ctx.node('Identity', call.inputs, call.outputs)
            return
        ctx.reduce(op, call.inputs[0], None if axis is None else list(axis), keepdims,
                   out=call.outputs[0])
    convert.__name__ = 'convert_' + op.lower()
    return convert


converter('Sum')(_reduction('ReduceSum'))
converter('Mean')(_reduction('ReduceMean'))
converter('Max')(_reduction('ReduceMax'))
converter('Min')(_reduction('ReduceMin'))
converter('Prod')(_reduction('ReduceProd'))


@converter('LogSumExp')
def convert_logsumexp(ctx, call):
    # Chainer keeps no reduced axes.  Both runtimes shift by the maximum, so
    # large inputs do not overflow (test_logsumexp_is_stable_for_large_inputs).
    _reduction('ReduceLogSumExp')(ctx, call)


@converter('SumTo')
def convert_sum_to(ctx, call):
    shape = tuple(call.func._shape)
    x_shape = call.input_arrays[0].shape
    lead = len(x_shape) - len(shape)
    axes = list(range(lead)) + [i + lead for i, d in enumerate(shape)
                                if d == 1 and x_shape[i + lead] != 1]
    if not axes:  # only size-1 leading axes to drop (or nothing at all)
        ctx.reshape(call.inputs[0], shape, out=call.outputs[0])
        return
    summed = ctx.reduce('ReduceSum', call.inputs[0], axes, keepdims=True)
    ctx.reshape(summed, shape, out=call.outputs[0])


@converter('BatchL2NormSquared')
def convert_batch_l2_norm_squared(ctx, call):
    x = call.inputs[0]
    if call.input_arrays[0].ndim != 2:
        x = ctx.reshape(x, [0, -1])
    ctx.reduce('ReduceSumSquare', x, [1], keepdims=False, out=call.outputs[0])


def _arg_extreme(op):
    def convert(ctx, call):
        x, axis = call.inputs[0], call.func.axis
        if axis is None:
            x, axis = ctx.reshape(x, [-1]), 0
        index = ctx.node(op, [x], axis=axis, keepdims=0)
        # Chainer returns int32 indices, ONNX int64.
        ctx.node('Cast', [index], call.outputs, to=_onnx_type(numpy.int32))
    return convert


converter('ArgMax')(_arg_extreme('ArgMax'))
converter('ArgMin')(_arg_extreme('ArgMin'))


@converter('Cumsum')
def convert_cumsum(ctx, call):
    x, axis = call.inputs[0], call.func.axis
    if axis is None:
        # numpy.cumsum without axis runs over the flattened array.
        x, axis = ctx.reshape(x, [-1]), 0
    ctx.node('CumSum', [x, ctx.constant(numpy.int64(axis), hint='axis')], call.outputs)


# -- matrix products ---------------------------------------------------------

def _swap_last_two(ctx, x, ndim):
    perm = list(range(ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return ctx.node('Transpose', [x], perm=perm)


def _matmul(ctx, call, a, b, a_ndim, b_ndim, transa, transb, transc, out_dtype):
    if transc:  # (A B)^T = B^T A^T
        a, b, a_ndim, b_ndim = b, a, b_ndim, a_ndim
        transa, transb = not transb, not transa
    if (b_ndim == 1 and transa and a_ndim > 1) or (a_ndim == 1 and transb and b_ndim > 1):
        # A^T v == v A (and v B^T == B v) with no Transpose; onnxruntime's
        # Transpose+MatMul fusion gets the matrix-vector case wrong (1.31).
        a, b, a_ndim, b_ndim = b, a, b_ndim, a_ndim
        transa = transb = False
    if transa and a_ndim > 1:
        a = _swap_last_two(ctx, a, a_ndim)
    if transb and b_ndim > 1:
        b = _swap_last_two(ctx, b, b_ndim)
    da, db = _dtype(call, 0), _dtype(call, 1)
    work = numpy.result_type(da, db)
    if da != work:
        a = ctx.node('Cast', [a], to=_onnx_type(work))
    if db != work:
        b = ctx.node('Cast', [b], to=_onnx_type(work))
    if out_dtype is not None and numpy.dtype(out_dtype) != work:
        y = ctx.node('MatMul', [a, b])
        ctx.node('Cast', [y], call.outputs, to=_onnx_type(out_dtype))
    else:
        ctx.node('MatMul', [a, b], call.outputs)


@converter('MatMul')
def convert_matmul(ctx, call):
    f = call.func
    a, b = call.inputs
    _matmul(ctx, call, a, b, call.input_arrays[0].ndim, call.input_arrays[1].ndim,
            f.transa, f.transb, f.transc, f.dtype)


@converter('BatchMatMul')
def convert_batch_matmul(ctx, call):
    # Chainer views each input as (batch, rows, -1) first.
    a, b = call.inputs
    if call.input_arrays[0].ndim != 3:
        a = ctx.reshape(a, [0, 0, -1])
    if call.input_arrays[1].ndim != 3:
        b = ctx.reshape(b, [0, 0, -1])
    _matmul(ctx, call, a, b, 3, 3, call.func.transa, call.func.transb, False, None)


@converter('TensorDot')
def convert_tensordot(ctx, call):
    f = call.func
    a_arr, b_arr = call.input_arrays
    a_rows, a_cols = [list(v) for v in f.a_axes]
    b_rows, b_cols = [list(v) for v in f.b_axes]
    a, b = call.inputs

    def as_matrix(x, ndim, shape, first, second):
        perm = first + second
        if perm != list(range(ndim)):
            x = ctx.node('Transpose', [x], perm=perm)
        rows = int(numpy.prod([shape[i] for i in first]))
        cols = int(numpy.prod([shape[i] for i in second]))
        return ctx.reshape(x, [rows, cols])

    y = ctx.node('MatMul', [as_matrix(a, a_arr.ndim, a_arr.shape, a_rows, a_cols),
                            as_matrix(b, b_arr.ndim, b_arr.shape, b_rows, b_cols)])
    out_shape = [a_arr.shape[i] for i in a_rows] + [b_arr.shape[i] for i in b_cols]
    # The axis order Chainer's c_axes asks for (see chainer's _tensordot).
    trans = list(range(len(out_shape)))
    if f.c_axes is not None:
        table_a = numpy.cumsum([1 if i in a_rows else 0 for i in range(a_arr.ndim)]) - 1
        for i, c_axis in enumerate(f.c_axes[0]):
            trans[c_axis] = int(table_a[a_rows[i]])
        table_b = numpy.cumsum([1 if i in b_cols else 0 for i in range(b_arr.ndim)]) - 1
        for i, c_axis in enumerate(f.c_axes[1]):
            trans[c_axis] = int(table_b[b_cols[i]]) + len(a_rows)
    transposed = trans != list(range(len(trans)))
    dtype = numpy.result_type(a_arr.dtype, b_arr.dtype)
    cast = f.dtype is not None and numpy.dtype(f.dtype) != dtype
    y = ctx.reshape(y, out_shape, out=None if transposed or cast else call.outputs[0])
    if transposed:
        y = ctx.node('Transpose', [y], 1 if cast else call.outputs, perm=trans)
    if cast:
        ctx.node('Cast', [y], call.outputs, to=_onnx_type(f.dtype))


@converter('EinSum')
def convert_einsum(ctx, call):
    if ctx.opset < 12:
        raise ValueError('EinSum: needs opset 12 or newer (ONNX Einsum), got opset %d'
                         % ctx.opset)
    in_subs = call.func.in_subs.replace('@', '...')
    out_sub = call.func.out_sub.replace('@', '...')
    if '...' in in_subs and '...' not in out_sub:
        raise ValueError('EinSum: summing over the ellipsis (%s->%s) is not supported'
                         % (call.func.in_subs, call.func.out_sub))
    ctx.node('Einsum', call.inputs, call.outputs, equation='%s->%s' % (in_subs, out_sub))


@converter('BatchDet')
def convert_batch_det(ctx, call):
    ctx.node('Det', call.inputs, call.outputs)


@converter('Floor', 'Ceil', 'Sign')
def convert_rounding(ctx, call):
    """F.floor, F.ceil, F.sign (recorded through recordable.py)."""
    ctx.node(call.name, call.inputs, call.outputs)


@converter('Fix')
def convert_fix(ctx, call):
    """F.fix rounds toward zero: sign(x) * floor(|x|)."""
    x, = call.inputs
    magnitude = ctx.node('Floor', [ctx.node('Abs', [x])])
    ctx.node('Mul', [ctx.node('Sign', [x]), magnitude], call.outputs)

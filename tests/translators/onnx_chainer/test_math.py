"""Converters of chainer.functions.math, checked in onnxruntime and our VM."""
import warnings

import chainer
import chainer.functions as F
import numpy
import pytest
from chainer.functions.math import basic_math
from chainer.functions.math import matmul as matmul_mod
from chainer.functions.math import tensordot as tensordot_mod
from onnx import TensorProto

from chainer_compiler.translators.onnx_chainer import export_model, supported_functions

from .helpers import FunctionModel, check_export, op_types

RNG = numpy.random.RandomState(0)


def rand(*shape, low=-1.0, high=1.0):
    return RNG.uniform(low, high, shape).astype(numpy.float32)


def _array_shims():
    """Reshape/BroadcastTo belong to the array family; while it lacks them,
    tests of compositions (F.scale, F.bias, F.average ...) use these."""
    def reshape(ctx, call):
        ctx.reshape(call.inputs[0], list(call.func.shape), out=call.outputs[0])

    def broadcast_to(ctx, call):
        ctx.node('Expand', [call.inputs[0], ctx.int64s(call.func._shape)], call.outputs)

    have = supported_functions()
    shims = {'Reshape': reshape, 'BroadcastTo': broadcast_to}
    return {k: v for k, v in shims.items() if k not in have}


def _output_elem_types(model):
    return [o.type.tensor_type.elem_type for o in model.graph.output]


# -- element-wise arithmetic ---------------------------------------------------

@pytest.mark.parametrize('fn', [
    lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b, lambda a, b: a / b,
    lambda a, b: F.maximum(a, b), lambda a, b: F.minimum(a, b),
], ids=['add', 'sub', 'mul', 'div', 'maximum', 'minimum'])
@pytest.mark.parametrize('shapes', [((2, 3), (2, 3)), ((2, 3, 4), (3, 1)), ((4,), (2, 1, 4))],
                         ids=['same', 'broadcast_rhs', 'broadcast_lhs'])
def test_binary(fn, shapes):
    a, b = rand(*shapes[0]), rand(*shapes[1], low=0.5, high=2.0)
    check_export(fn, (a, b))


def test_pow_var_var():
    check_export(lambda a, b: a ** b, (rand(2, 3, low=0.5, high=2.0), rand(3)))


def test_multi_add_with_broadcast():
    models = check_export(lambda a, b, c: F.add(a, b, c), (rand(2, 3), rand(2, 3), rand(3)))
    assert op_types(models[0]) == ['Sum']


def test_add_numpy_array_constant():
    const = rand(3)
    check_export(lambda x: x + const, rand(2, 3))


SCALARS = [2, 0.25, numpy.float64(1.5), numpy.float32(-3.0), numpy.int64(3)]
SCALAR_IDS = ['int', 'float', 'np_float64', 'np_float32', 'np_int64']

CONSTANT_OPS = [
    (lambda x, c: x + c, 'AddConstant'), (lambda x, c: c + x, 'AddConstant'),
    (lambda x, c: x - c, 'AddConstant'), (lambda x, c: c - x, 'SubFromConstant'),
    (lambda x, c: x * c, 'MulConstant'), (lambda x, c: c * x, 'MulConstant'),
    (lambda x, c: x / c, 'MulConstant'), (lambda x, c: c / x, 'DivFromConstant'),
    (lambda x, c: x ** c, 'PowVarConst'), (lambda x, c: abs(c) ** x, 'PowConstVar'),
]


@pytest.mark.parametrize('value', SCALARS, ids=SCALAR_IDS)
@pytest.mark.parametrize('fn,name', CONSTANT_OPS,
                         ids=['add', 'radd', 'sub', 'rsub', 'mul', 'rmul', 'div', 'rdiv',
                              'pow', 'rpow'])
def test_scalar_constant_keeps_float32(fn, name, value):
    x = rand(2, 3, low=0.5, high=2.0)
    y = fn(chainer.Variable(x), value)
    assert type(y.creator).__name__ == name
    models = check_export(lambda v: fn(v, value), x)
    for m in models:
        assert _output_elem_types(m) == [TensorProto.FLOAT]
        assert all(init.data_type == TensorProto.FLOAT for init in m.graph.initializer)


@pytest.mark.parametrize('value', [numpy.array(2.0), numpy.array([1.0, 2.0, 3.0])],
                         ids=['0d', '1d'])
@pytest.mark.parametrize('cls', [basic_math.AddConstant, basic_math.MulConstant,
                                 basic_math.SubFromConstant, basic_math.DivFromConstant])
def test_array_valued_constant_function(cls, value):
    # The constant FunctionNodes also accept an array (of any float dtype).
    check_export(lambda x: cls(value).apply((x,))[0], rand(2, 3, low=0.5, high=2.0))


def test_neg_and_absolute():
    check_export(lambda x: -abs(x), rand(2, 3))
    check_export(F.absolute, rand(2, 3))


# -- element-wise unary --------------------------------------------------------

UNARY = [
    (F.exp, (-1, 1)), (F.log, (0.1, 2)), (F.log2, (0.1, 2)), (F.log10, (0.1, 2)),
    (F.log1p, (-0.5, 2)), (F.expm1, (-1, 1)), (F.sqrt, (0.1, 2)), (F.rsqrt, (0.1, 2)),
    (F.square, (-2, 2)), (F.sin, (-3, 3)), (F.cos, (-3, 3)), (F.tan, (-1, 1)),
    (F.arcsin, (-0.9, 0.9)), (F.arccos, (-0.9, 0.9)), (F.arctan, (-3, 3)),
    (F.sinh, (-2, 2)), (F.cosh, (-2, 2)), (F.arctanh, (-0.9, 0.9)),
    (F.erf, (-2, 2)), (F.erfc, (-2, 2)), (F.ndtr, (-2, 2)), (F.identity, (-1, 1)),
]


@pytest.mark.parametrize('fn,bounds', UNARY, ids=[f.__name__ for f, _ in UNARY])
def test_unary(fn, bounds):
    check_export(fn, rand(2, 3, 4, low=bounds[0], high=bounds[1]))


def test_identity_of_several_inputs_gives_one_identity_each():
    # onnx-chainer wrote one Identity node with several inputs (invalid ONNX).
    models = check_export(lambda a, b: F.identity(a, b), (rand(2, 3), rand(4)))
    assert op_types(models[0]) == ['Identity', 'Identity']


def test_arctan2_all_quadrants():
    y = numpy.array([1, 1, -1, -1, 0.5, -0.5, 2, -2], numpy.float32)
    x = numpy.array([1, -1, 1, -1, -2, -2, 0.5, 0.5], numpy.float32)
    check_export(F.arctan2, (y, x))
    check_export(F.arctan2, (rand(2, 3), rand(3)))


def test_fmod_keeps_dividend_sign():
    x = numpy.array([-5.5, 5.5, -3.0, 3.25, 0.75], numpy.float32)
    d = numpy.array([2.0, -2.0, 2.5, 1.5, -0.5], numpy.float32)
    check_export(F.fmod, (x, d))


@pytest.mark.parametrize('bounds', [(-0.5, 0.5), (None, 0.25), (-0.25, None)],
                         ids=['both', 'max_only', 'min_only'])
def test_clip(bounds):
    check_export(lambda x: F.clip(x, *bounds), rand(3, 4))


def test_clip_bounds_follow_input_dtype():
    # onnx-chainer always wrote float32 bounds, invalid for a float64 input.
    x = rand(3, 4).astype(numpy.float64)
    models = check_export(lambda v: F.clip(v, -0.5, 0.5), x)
    for m in models:
        assert all(init.data_type == TensorProto.DOUBLE for init in m.graph.initializer)


def test_linear_interpolate():
    check_export(F.linear_interpolate, (rand(2, 3, low=0, high=1), rand(2, 3), rand(2, 3)))


# -- reductions ----------------------------------------------------------------

AXES = [None, 0, 1, -1, (0, 2), (-1, 0), (0, 1, 2)]
AXIS_IDS = ['none', '0', '1', 'neg1', 't02', 'tneg10', 'tall']


@pytest.mark.parametrize('keepdims', [False, True], ids=['drop', 'keep'])
@pytest.mark.parametrize('axis', AXES, ids=AXIS_IDS)
@pytest.mark.parametrize('fn', [F.sum, F.mean, F.max, F.min, F.prod],
                         ids=['sum', 'mean', 'max', 'min', 'prod'])
def test_reduction(fn, axis, keepdims):
    check_export(lambda x: fn(x, axis=axis, keepdims=keepdims), rand(2, 3, 4, low=0.5, high=1.5))


@pytest.mark.parametrize('fn', [F.sum, F.mean, F.max, F.min, F.prod],
                         ids=['sum', 'mean', 'max', 'min', 'prod'])
def test_reduction_over_empty_axis_tuple_is_identity(fn):
    # NumPy's axis=() reduces nothing; empty ONNX axes would reduce all.
    models = check_export(lambda x: fn(x, axis=()) * 1.0, rand(2, 3))
    assert op_types(models[0])[0] == 'Identity'


def test_average_without_weights():
    check_export(lambda x: F.average(x, axis=1), rand(2, 3, 4))


@pytest.mark.parametrize('axis,keepdims', [(None, False), (1, False), (-1, True)])
def test_average_with_weights(axis, keepdims):
    x = rand(2, 3, 4)
    w = rand(*(x.shape if axis is None else (x.shape[axis],)), low=0.5, high=1.5)
    check_export(lambda v: F.average(v, axis=axis, weights=w, keepdims=keepdims), x,
                 external_converters=_array_shims())


@pytest.mark.parametrize('axis', [None, 0, 1, -1, (0, 2)], ids=['none', '0', '1', 'neg1', 't02'])
def test_logsumexp(axis):
    check_export(lambda x: F.logsumexp(x, axis=axis), rand(2, 3, 4, low=-3, high=3))


def test_logsumexp_is_stable_for_large_inputs():
    x = numpy.array([[1000.0, 1001.0, 999.0], [-1000.0, -1002.0, -1001.0]], numpy.float32)
    check_export(lambda v: F.logsumexp(v, axis=1), x, rtol=1e-6, atol=1e-3)


@pytest.mark.parametrize('shape', [(3,), (1, 3), (2, 1), (1, 1), (4, 1, 1), (1, 2, 1)])
def test_sum_to(shape):
    x = rand(4, 2, 3) if len(shape) == 3 else rand(2, 3)
    check_export(lambda v: F.sum_to(v, shape), x)


def test_batch_l2_norm_squared():
    check_export(F.batch_l2_norm_squared, rand(2, 3, 4))
    check_export(F.batch_l2_norm_squared, rand(3, 5))


@pytest.mark.parametrize('axis', [None, 0, 1, -1])
@pytest.mark.parametrize('fn', [F.argmax, F.argmin], ids=['argmax', 'argmin'])
def test_argmax_argmin_return_int32(fn, axis):
    models = check_export(lambda x: fn(x, axis=axis), rand(2, 3, 4))
    for m in models:
        assert _output_elem_types(m) == [TensorProto.INT32]


@pytest.mark.parametrize('axis', [None, 0, 1, -1])
def test_cumsum(axis):
    check_export(lambda x: F.cumsum(x, axis=axis), rand(2, 3, 4))


# -- matrix products -----------------------------------------------------------

@pytest.mark.parametrize('transb', [False, True])
@pytest.mark.parametrize('transa', [False, True])
@pytest.mark.parametrize('shapes', [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)),
                                    ((2, 1, 3, 4), (3, 4, 5)), ((4,), (4, 5)),
                                    ((3, 4), (4,)), ((4,), (4,))],
                         ids=['2d', '3d_2d', '4d_3d_broadcast', 'vec_mat', 'mat_vec', 'vec_vec'])
def test_matmul(shapes, transa, transb):
    def shaped(shape, trans):
        return rand(*(shape[:-2] + (shape[-1], shape[-2]) if trans and len(shape) > 1 else shape))
    a, b = shaped(shapes[0], transa), shaped(shapes[1], transb)
    check_export(lambda x, y: F.matmul(x, y, transa=transa, transb=transb), (a, b))


def test_matmul_operator():
    check_export(lambda x, y: x @ y, (rand(2, 3, 4), rand(2, 4, 5)))


def test_matmul_respects_transc_and_dtype():
    # onnx-chainer ignored MatMul's transc (used by Chainer's backward) and dtype.
    a, b = rand(2, 3, 4), rand(2, 4, 5)
    fn = matmul_mod.MatMul(transa=False, transb=False, transc=True, dtype=numpy.float64)
    models = check_export(lambda x, y: fn.apply((x, y))[0], (a, b))
    assert _output_elem_types(models[0]) == [TensorProto.DOUBLE]


def _batch_matmul(transa=False, transb=False):
    def fn(x, y):
        with warnings.catch_warnings():
            warnings.simplefilter('ignore', DeprecationWarning)
            return F.batch_matmul(x, y, transa=transa, transb=transb)
    return fn


@pytest.mark.parametrize('transb', [False, True])
@pytest.mark.parametrize('transa', [False, True])
def test_batch_matmul(transa, transb):
    a = rand(2, 4, 3) if transa else rand(2, 3, 4)
    b = rand(2, 5, 4) if transb else rand(2, 4, 5)
    check_export(_batch_matmul(transa, transb), (a, b))


def test_batch_matmul_of_2d_inputs():
    # Chainer views a (B, N) input as (B, N, 1).
    check_export(_batch_matmul(transa=True), (rand(2, 3), rand(2, 3)))
    check_export(_batch_matmul(), (rand(2, 3), rand(2, 1, 4)))


@pytest.mark.parametrize('axes', [2, 1, 0, ([1, 0], [0, 1]), ([2], [0])],
                         ids=['2', '1', '0', 'pairs', 'single'])
def test_tensordot(axes):
    a = rand(3, 4, 5)
    b = {2: rand(4, 5, 2), 1: rand(5, 2), 0: rand(2)}.get(axes) if isinstance(axes, int) \
        else (rand(4, 3, 2) if len(axes[0]) == 2 else rand(5, 2))
    check_export(lambda x, y: F.tensordot(x, y, axes=axes), (a, b))


def test_tensordot_with_c_axes():
    a, b = rand(3, 4, 5), rand(5, 2)
    fn = tensordot_mod.TensorDot(a_axes=[[0, 1], [2]], b_axes=[[0], [1]], c_axes=[[2, 0], [1]])
    check_export(lambda x, y: fn.apply((x, y))[0], (a, b))


def test_tensordot_respects_dtype():
    fn = tensordot_mod.TensorDot(axes=1, dtype=numpy.float64)
    models = check_export(lambda x, y: fn.apply((x, y))[0], (rand(3, 4), rand(4, 2)))
    assert _output_elem_types(models[0]) == [TensorProto.DOUBLE]


@pytest.mark.parametrize('equation,shapes', [
    ('ij,jk->ik', ((2, 3), (3, 4))), ('...ij,...jk->...ik', ((2, 2, 3), (2, 3, 4))),
    ('ii->i', ((3, 3),)), ('ij->', ((2, 3),)), ('i,j', ((2,), (3,))),
])
def test_einsum(equation, shapes):
    check_export(lambda *xs: F.einsum(equation, *xs), tuple(rand(*s) for s in shapes),
                 opsets=(12, 17, 26))


def test_einsum_at_opset_11_raises():
    with pytest.raises(ValueError, match='EinSum'):
        export_model(FunctionModel(lambda a, b: F.einsum('ij,jk->ik', a, b)),
                     (rand(2, 3), rand(3, 4)), opset_version=11)


def test_batch_det():
    check_export(F.batch_det, rand(2, 3, 3) + 2 * numpy.eye(3, dtype=numpy.float32),
                 rtol=1e-4)  # LU in float32: a few ulps more than 1e-5


# -- compositions (Scale/Bias links and functions) -----------------------------

@pytest.mark.parametrize('axis,y_shape', [(1, (3,)), (1, (3, 4)), (2, (4, 5)), (0, (2,))])
@pytest.mark.parametrize('fn', [F.scale, F.bias], ids=['scale', 'bias'])
def test_scale_and_bias_functions(fn, axis, y_shape):
    check_export(lambda x, y: fn(x, y, axis=axis), (rand(2, 3, 4, 5), rand(*y_shape)),
                 external_converters=_array_shims())


def test_scale_and_bias_links():
    class Model(chainer.Chain):
        def __init__(self):
            super().__init__()
            with self.init_scope():
                self.scale = chainer.links.Scale(axis=1, W_shape=(3,), bias_term=True)
                self.bias = chainer.links.Bias(axis=1, shape=(3, 4))
            self.scale.W.array[...] = rand(3)
            self.scale.bias.b.array[...] = rand(3)
            self.bias.b.array[...] = rand(3, 4)

        def forward(self, x):
            return self.bias(self.scale(x))
    check_export(Model(), rand(2, 3, 4), external_converters=_array_shims())


@pytest.mark.parametrize('name, onnx_op', [('floor', 'Floor'), ('ceil', 'Ceil'),
                                           ('sign', 'Sign'), ('fix', 'Floor')])
def test_functions_without_a_function_node_are_exported_not_baked_in(name, onnx_op):
    # F.floor & co. create no FunctionNode; a naive trace would store their
    # result as a constant, right only for the traced input.
    x = numpy.array([[-2.5, -1.0, -0.4], [0.0, 0.6, 3.5]], numpy.float32)
    model = check_export(lambda v: getattr(F, name)(v) * 2, x)[0]
    assert onnx_op in op_types(model)
    assert not any(t.dims == [2, 3] for t in model.graph.initializer)

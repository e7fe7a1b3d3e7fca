"""Tests for the math kernels, with onnx.reference and the standard library
as oracles where they help."""
import math

import numpy as np
import onnx.defs
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from chainer_compiler.runtime.ops import lookup


def _kernel(op, version):
    return lookup(op, version=version).fn


def _reference(op, inputs, opset, **attrs):
    names = ['in%d' % i for i in range(len(inputs))]
    graph = helper.make_graph(
        [helper.make_node(op, names, ['out'], **attrs)], 'g',
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), None)
         for n, x in zip(names, inputs)],
        [helper.make_tensor_value_info('out', 0, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', opset)])
    return ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))[0]


_RNG = np.random.default_rng(0)
_X = _RNG.standard_normal((2, 3, 4)).astype(np.float32)

_OPS = '''Abs Neg Reciprocal Sqrt Exp Log Floor Ceil Round Sign Erf Sin Cos Tan Asin Acos
Atan Sinh Cosh Asinh Acosh Atanh IsNaN IsInf Not Add Sub Mul Div Pow Mod BitShift BitwiseAnd
BitwiseOr BitwiseXor BitwiseNot Equal Less LessOrEqual Greater GreaterOrEqual And Or Xor Sum
Mean Max Min Clip ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2
ReduceLogSum ReduceLogSumExp ReduceSumSquare ArgMax ArgMin MatMul Gemm Einsum CumSum CumProd
Det'''.split()


def test_every_schema_version_of_every_math_op_has_a_kernel():
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain == '' and schema.name in _OPS:
            spec = lookup(schema.name, version=schema.since_version)
            assert spec.family == 'math', schema.name


def test_legacy_unary_accepts_consumed_inputs():
    got = _kernel('Abs', 1)(np, np.array([-1.5], np.float32), consumed_inputs=[0])
    np.testing.assert_array_equal(got, [1.5])


# -- element-wise ------------------------------------------------------------

def test_integer_div_truncates_toward_zero_and_keeps_dtype():
    a = np.array([7, -7, 7, -7, 6, -6], np.int32)
    b = np.array([2, 2, -2, -2, 3, -3], np.int32)
    got = _kernel('Div', 14)(np, a, b)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [3, -3, -3, 3, 2, 2])


def test_unsigned_div_and_float_div():
    got = _kernel('Div', 14)(np, np.array([7, 200], np.uint8), np.array([2, 3], np.uint8))
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, [3, 66])
    got = _kernel('Div', 14)(np, np.float16([1]), np.float16([4]))
    assert got.dtype == np.float16 and got[0] == 0.25


@pytest.mark.parametrize('base,exponent,expected', [
    (np.float32([2, 3]), np.int64([3, -1]), np.float32([8, 1 / 3])),
    (np.float32([4]), np.float64([0.5]), np.float32([2])),
    (np.int32([2, 3]), np.float32([0.5, 2]), np.int32([1, 9])),
    (np.int64([2, -3]), np.int64([10, 3]), np.int64([1024, -27])),
    (np.float16([2]), np.float32([3]), np.float16([8])),
])
def test_pow_output_has_the_base_dtype(base, exponent, expected):
    got = _kernel('Pow', 15)(np, base, exponent)
    assert got.dtype == base.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_mod_sign_follows_divisor_unless_fmod():
    a = np.array([-4, 7, 5, -5], np.int64)
    b = np.array([3, -3, 8, 8], np.int64)
    np.testing.assert_array_equal(_kernel('Mod', 13)(np, a, b), [2, -2, 5, 3])
    np.testing.assert_array_equal(_kernel('Mod', 13)(np, a, b, fmod=1), [-1, 1, 5, -5])
    got = _kernel('Mod', 13)(np, np.float32([-4.5]), np.float32([2]), fmod=1)
    assert got.dtype == np.float32 and got[0] == -0.5


def test_legacy_broadcast_aligns_b_at_axis():
    a = np.zeros((2, 3, 4), np.float32)
    b = np.arange(3, dtype=np.float32)
    got = _kernel('Add', 6)(np, a, b, broadcast=1, axis=1)
    assert got.shape == (2, 3, 4)
    np.testing.assert_array_equal(got[1, :, 2], b)
    # Without an axis the trailing dimensions match, as in NumPy.
    c = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(_kernel('Mul', 1)(np, a + 1, c, broadcast=1)[0, 0], c)


def test_binary_broadcasting_and_comparisons_give_bool():
    a = np.arange(6, dtype=np.int16).reshape(2, 3)
    b = np.array([1, 4, 2], np.int16)
    for op, expected in (('Less', a < b), ('LessOrEqual', a <= b), ('Greater', a > b),
                         ('GreaterOrEqual', a >= b), ('Equal', a == b)):
        got = _kernel(op, 19 if op == 'Equal' else 16)(np, a, b)
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(got, expected)


def test_equal_compares_strings():
    a = np.array(['x', 'y', 'z'], dtype=object)
    got = _kernel('Equal', 19)(np, a, np.array(['x'], dtype=object))
    np.testing.assert_array_equal(got, [True, False, False])


def test_bitshift_and_bitwise_keep_unsigned_dtype():
    x = np.array([16, 4, 1], np.uint8)
    y = np.array([1, 2, 3], np.uint8)
    left = _kernel('BitShift', 11)(np, x, y, direction='LEFT')
    right = _kernel('BitShift', 11)(np, x, y, direction='RIGHT')
    assert left.dtype == right.dtype == np.uint8
    np.testing.assert_array_equal(left, [32, 16, 8])
    np.testing.assert_array_equal(right, [8, 1, 0])
    with pytest.raises(ValueError, match='direction'):
        _kernel('BitShift', 11)(np, x, y, direction='UP')
    np.testing.assert_array_equal(_kernel('BitwiseNot', 18)(np, x), [239, 251, 254])
    np.testing.assert_array_equal(_kernel('BitwiseXor', 18)(np, x, y), [17, 6, 2])


def test_round_is_half_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4, -2.6], np.float32)
    got = _kernel('Round', 22)(np, x)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, [0, 2, 2, -0, -2, 2, -3])


@pytest.mark.parametrize('dtype,ulps', [(np.float64, 32), (np.float32, 4)])
def test_erf_matches_the_standard_library(dtype, ulps):
    x = np.concatenate([np.linspace(-7, 7, 4001), [1e-30, -1e-8, 2.0, 6.0]]).astype(dtype)
    got = _kernel('Erf', 13)(np, x)
    expected = np.array([math.erf(float(v)) for v in x])
    assert got.dtype == dtype
    tolerance = ulps * np.spacing(np.abs(expected).astype(dtype))
    assert np.all(np.abs(got - expected) <= tolerance)


def test_erf_special_values_and_half_precision():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], np.float32)
    got = _kernel('Erf', 13)(np, x)
    np.testing.assert_array_equal(got, [0, -0.0, 1, -1, np.nan])
    assert np.signbit(got[1])
    half = _kernel('Erf', 13)(np, np.float16([0.5]))
    assert half.dtype == np.float16 and abs(float(half[0]) - math.erf(0.5)) < 1e-3


def test_isinf_detect_flags():
    x = np.array([np.inf, -np.inf, 1.0, np.nan], np.float32)
    fn = _kernel('IsInf', 20)
    np.testing.assert_array_equal(fn(np, x), [True, True, False, False])
    np.testing.assert_array_equal(fn(np, x, detect_negative=0), [True, False, False, False])
    np.testing.assert_array_equal(fn(np, x, detect_positive=0), [False, True, False, False])
    np.testing.assert_array_equal(fn(np, x, detect_negative=0, detect_positive=0),
                                  [False] * 4)


# -- variadic and Clip ---------------------------------------------------------

def test_variadic_ops_broadcast_and_keep_dtype():
    a = np.float16([[1], [2]])
    b = np.float16([1, 2, 3])
    c = np.float16([4])
    assert _kernel('Sum', 13)(np, a, b, c).shape == (2, 3)
    mean = _kernel('Mean', 13)(np, a, b, c)
    assert mean.dtype == np.float16
    np.testing.assert_allclose(mean, (a + b + c) / 3, rtol=1e-3)
    np.testing.assert_array_equal(_kernel('Max', 13)(np, np.int8([1, 5]), np.int8([3, 2])),
                                  [3, 5])
    np.testing.assert_array_equal(_kernel('Min', 1)(np, np.float32([1, 5]), consumed_inputs=[0]),
                                  [1, 5])


def test_clip_attribute_and_input_forms():
    x = np.array([-3, -1, 0, 2, 9], np.float32)
    got = _kernel('Clip', 6)(np, x, min=-1.5, max=2.5)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, [-1.5, -1, 0, 2, 2.5])
    fn = _kernel('Clip', 13)
    np.testing.assert_array_equal(fn(np, x, None, np.float32(1)), [-3, -1, 0, 1, 1])
    np.testing.assert_array_equal(fn(np, x), x)
    # min > max: everything becomes max.
    np.testing.assert_array_equal(fn(np, x, np.float32(5), np.float32(2)), [2] * 5)
    small = fn(np, np.int8([-100, 100]), np.int8(-10))
    assert small.dtype == np.int8
    np.testing.assert_array_equal(small, [-10, 100])


# -- reductions ----------------------------------------------------------------

_REDUCE_OPS = ['ReduceSum', 'ReduceMean', 'ReduceMax', 'ReduceMin', 'ReduceProd', 'ReduceL1',
               'ReduceL2', 'ReduceLogSum', 'ReduceLogSumExp', 'ReduceSumSquare']
_POSITIVE = np.abs(_X) + 0.5


@pytest.mark.parametrize('op', _REDUCE_OPS)
@pytest.mark.parametrize('axes,keepdims', [([1], 1), ([-1, 0], 0), (None, 1), (None, 0)])
def test_reductions_match_reference_in_both_forms(op, axes, keepdims):
    attrs = {'keepdims': keepdims}
    old = _kernel(op, 11)(np, _POSITIVE, axes=axes, **attrs)
    new_inputs = [_POSITIVE] + ([] if axes is None else [np.array(axes, np.int64)])
    new = _kernel(op, 18)(np, *new_inputs, **attrs)
    expected = _reference(op, new_inputs, 18, **attrs)
    for got in (old, new):
        assert got.dtype == np.float32 and got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_reduce_sum_takes_axes_as_input_from_13():
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(_kernel('ReduceSum', 13)(np, x, np.int64([1]), keepdims=0),
                                  [3, 3])
    np.testing.assert_array_equal(_kernel('ReduceSum', 11)(np, x, axes=[0], keepdims=0),
                                  [2, 2, 2])
    # ReduceMean still had the attribute at 13.
    np.testing.assert_array_equal(_kernel('ReduceMean', 13)(np, x, axes=[1]), [[1], [1]])


def test_integer_reductions_keep_their_dtype():
    x = np.arange(1, 7, dtype=np.int32).reshape(2, 3)
    for op, expected in (('ReduceSum', [6, 15]), ('ReduceProd', [6, 120]),
                         ('ReduceMean', [2, 5]), ('ReduceSumSquare', [14, 77])):
        got = _kernel(op, 18)(np, x, np.int64([1]), keepdims=0)
        assert got.dtype == np.int32, op
        np.testing.assert_array_equal(got, expected)


def test_empty_axes_reduce_everything_or_nothing():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    fn = _kernel('ReduceSum', 13)
    np.testing.assert_array_equal(fn(np, x, np.zeros(0, np.int64)), [[15]])
    np.testing.assert_array_equal(fn(np, x, np.zeros(0, np.int64), noop_with_empty_axes=1), x)
    np.testing.assert_array_equal(fn(np, x, noop_with_empty_axes=1), x)
    np.testing.assert_array_equal(
        _kernel('ReduceSumSquare', 18)(np, x, noop_with_empty_axes=1), x * x)


@pytest.mark.filterwarnings('ignore:divide by zero encountered in log')
@pytest.mark.parametrize('op,dtype,identity', [
    ('ReduceSum', np.float32, 0), ('ReduceProd', np.float32, 1), ('ReduceL2', np.float32, 0),
    ('ReduceMax', np.float32, -np.inf), ('ReduceMin', np.float32, np.inf),
    ('ReduceMax', np.int32, np.iinfo(np.int32).min), ('ReduceMin', np.int64,
                                                      np.iinfo(np.int64).max),
    ('ReduceLogSum', np.float32, -np.inf), ('ReduceLogSumExp', np.float32, -np.inf),
])
def test_reducing_an_empty_axis_gives_the_identity(op, dtype, identity):
    x = np.zeros((2, 0, 4), dtype)
    got = _kernel(op, 18)(np, x, np.int64([1]), keepdims=1)
    assert got.shape == (2, 1, 4) and got.dtype == dtype
    assert np.all(got == identity)
    assert _kernel(op, 18)(np, x, np.int64([1]), keepdims=0).shape == (2, 4)


def test_reduce_max_min_on_bool():
    x = np.array([[True, False], [True, True]])
    np.testing.assert_array_equal(_kernel('ReduceMin', 20)(np, x, np.int64([1]), keepdims=0),
                                  [False, True])
    assert _kernel('ReduceMax', 20)(np, x, keepdims=0).dtype == np.bool_


@pytest.mark.filterwarnings('ignore:divide by zero encountered in log')
def test_log_sum_exp_is_stable_for_large_values():
    x = np.array([[1000, 1000], [-np.inf, -np.inf]], np.float32)
    got = _kernel('ReduceLogSumExp', 18)(np, x, np.int64([1]), keepdims=0)
    np.testing.assert_allclose(got, [1000 + math.log(2), -np.inf])


@pytest.mark.parametrize('op', ['ArgMax', 'ArgMin'])
@pytest.mark.parametrize('axis,keepdims,last', [(0, 1, 0), (-1, 0, 1), (1, 1, 1)])
def test_arg_extremes_match_reference(op, axis, keepdims, last):
    # Few distinct values, so that ties exercise select_last_index.
    x = _RNG.integers(0, 3, (3, 4, 5)).astype(np.float32)
    attrs = dict(axis=axis, keepdims=keepdims, select_last_index=last)
    got = _kernel(op, 13)(np, x, **attrs)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, _reference(op, [x], 13, **attrs))


# -- matrix products -------------------------------------------------------------

def test_matmul_broadcasts_and_handles_vectors():
    a = _RNG.standard_normal((2, 1, 3, 4)).astype(np.float32)
    b = _RNG.standard_normal((5, 4, 2)).astype(np.float32)
    assert _kernel('MatMul', 13)(np, a, b).shape == (2, 5, 3, 2)
    v = np.ones(4, np.float32)
    assert _kernel('MatMul', 13)(np, a, v).shape == (2, 1, 3)
    assert _kernel('MatMul', 13)(np, v, b).shape == (5, 2)


@pytest.mark.parametrize('attrs', [{}, {'transA': 1, 'transB': 1, 'alpha': 0.5, 'beta': 2.0},
                                   {'transB': 1, 'beta': 0.0}])
def test_gemm_matches_reference(attrs):
    a = _RNG.standard_normal((4, 3) if attrs.get('transA') else (3, 4)).astype(np.float32)
    b = _RNG.standard_normal((5, 4) if attrs.get('transB') else (4, 5)).astype(np.float32)
    c = _RNG.standard_normal((5,)).astype(np.float32)
    got = _kernel('Gemm', 13)(np, a, b, c, **attrs)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, _reference('Gemm', [a, b, c], 13, **attrs), rtol=1e-5)
    assert _kernel('Gemm', 13)(np, a, b, **attrs).shape == (3, 5)


def test_gemm_on_integers_keeps_dtype():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    got = _kernel('Gemm', 13)(np, a, a, np.int32(1), transB=1)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, a @ a.T + 1)


@pytest.mark.parametrize('equation,shapes', [
    ('ij, jk -> ik', [(2, 3), (3, 4)]), ('...ii->...i', [(2, 3, 3)]),
    ('bij,bjk,bkl->bil', [(2, 3, 4), (2, 4, 5), (2, 5, 2)]), ('i,i', [(5,), (5,)]),
])
def test_einsum(equation, shapes):
    inputs = [_RNG.standard_normal(s).astype(np.float32) for s in shapes]
    got = _kernel('Einsum', 12)(np, *inputs, equation=equation)
    np.testing.assert_allclose(got, np.einsum(equation.replace(' ', ''), *inputs), rtol=1e-5)
    assert got.dtype == np.float32


def test_det_batches_and_half_precision():
    x = np.array([[[2, 0], [0, 3]], [[1, 2], [3, 4]]], np.float32)
    np.testing.assert_allclose(_kernel('Det', 22)(np, x), [6, -2], rtol=1e-6)
    half = _kernel('Det', 22)(np, x.astype(np.float16))
    assert half.dtype == np.float16 and half.shape == (2,)


# -- cumulative --------------------------------------------------------------------

@pytest.mark.parametrize('exclusive,reverse,expected', [
    (0, 0, [[1, 3, 6], [4, 9, 15]]), (1, 0, [[0, 1, 3], [0, 4, 9]]),
    (0, 1, [[6, 5, 3], [15, 11, 6]]), (1, 1, [[5, 3, 0], [11, 6, 0]]),
])
def test_cumsum_modes_keep_int32(exclusive, reverse, expected):
    x = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    got = _kernel('CumSum', 14)(np, x, np.array(-1, np.int32), exclusive=exclusive,
                                reverse=reverse)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, expected)


def test_cumprod_exclusive_starts_from_one():
    x = np.array([[1, 2], [3, 4]], np.float32)
    np.testing.assert_array_equal(
        _kernel('CumProd', 26)(np, x, np.array(0, np.int64), exclusive=1), [[1, 1], [1, 2]])
    np.testing.assert_array_equal(
        _kernel('CumProd', 26)(np, x, np.array(1, np.int64), reverse=1), [[2, 2], [12, 4]])

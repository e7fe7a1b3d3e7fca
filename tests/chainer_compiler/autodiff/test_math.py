"""Gradient rules of the math family against central differences."""
import re
from pathlib import Path

import numpy
import pytest
from onnx import helper

from chainer_compiler.autodiff.registry import rule_for
from chainer_compiler.runtime import Executor
from chainer_compiler.runtime.ops.registry import registered_kernels
from chainer_compiler.training import compile_training

from .gradcheck import check_gradients, single_node_model

ROOT = Path(__file__).resolve().parents[3]


def _rng(seed=0):
    return numpy.random.RandomState(seed)


def _check(op, inputs, opset=17, constants=None, wrt=None, **attrs):
    inputs = {k: numpy.asarray(v) for k, v in inputs.items()}
    model = single_node_model(op, inputs, opset=opset, constants=constants, **attrs)
    return check_gradients(model, inputs, wrt=wrt)


def _run_backward(model, inputs, gy):
    """Gradients of every input for the output gradient ``gy``."""
    programs = compile_training(model, check=False)
    forward = Executor(programs.forward, backend='numpy')
    outs = forward.run_positional([inputs[v.name] for v in programs.forward.inputs])
    by_name = dict(zip([v.name for v in programs.forward.outputs], outs))
    return Executor(programs.backward, backend='numpy').run_positional(
        [gy] + [by_name[r] for r in programs.retained])


# -- element-wise binary -----------------------------------------------------

@pytest.mark.parametrize('op', ['Add', 'Sub', 'Mul', 'Div'])
@pytest.mark.parametrize('shapes', [((2, 3), (2, 3)), ((2, 3), (3,)), ((2, 1, 3), (4, 1)),
                                    ((), (2, 2))])
def test_arithmetic(op, shapes):
    r = _rng()
    a = r.uniform(0.5, 2, shapes[0]) * r.choice([-1, 1], shapes[0])
    c = r.uniform(0.5, 2, shapes[1]) * r.choice([-1, 1], shapes[1])
    _check(op, {'a': a, 'c': c})


def test_arithmetic_with_constant_operand():
    r = _rng()
    programs = _check('Mul', {'a': r.randn(2, 3)}, constants={'c': r.randn(3)})
    assert programs.grads_for == ['a']


def test_square():
    x = {'x': _rng().randn(2, 3)}
    programs = check_gradients(single_node_model('Mul', x, node_inputs=['x', 'x']), x)
    assert [n.op_type for n in programs.backward_onnx.graph.node] == ['Mul', 'Add']


def test_legacy_broadcast_axis():
    r = _rng()
    _check('Add', {'a': r.randn(2, 3, 4), 'c': r.randn(3)}, opset=6, broadcast=1, axis=1)
    _check('Mul', {'a': r.randn(2, 3, 4), 'c': r.randn(3, 4)}, opset=6, broadcast=1)


@pytest.mark.parametrize('shapes', [((2, 3), (2, 3)), ((2, 3), ()), ((2, 3), (3,))])
def test_pow(shapes):
    r = _rng()
    _check('Pow', {'a': r.uniform(0.5, 2, shapes[0]), 'e': r.uniform(-2, 2, shapes[1])})


def test_pow_integer_exponent():
    r = _rng()
    _check('Pow', {'a': r.randn(2, 3)}, constants={'e': numpy.array(3, numpy.int64)})


@pytest.mark.parametrize('fmod', [0, 1])
def test_mod(fmod):
    r = _rng()
    a = r.uniform(0.5, 5, (3, 4)) * r.choice([-1, 1], (3, 4))
    c = r.uniform(0.7, 1.5, (4,)) * r.choice([-1, 1], (4,))
    _check('Mod', {'a': a, 'c': c}, fmod=fmod)


# -- element-wise unary ------------------------------------------------------

UNARY = {
    'Identity': (-2, 2), 'Neg': (-2, 2), 'Abs': (0.1, 2), 'Sqrt': (0.5, 2),
    'Reciprocal': (0.5, 2), 'Exp': (-2, 2), 'Log': (0.5, 2), 'Sin': (-2, 2), 'Cos': (-2, 2),
    'Tan': (-1, 1), 'Asin': (-0.8, 0.8), 'Acos': (-0.8, 0.8), 'Atan': (-2, 2),
    'Sinh': (-2, 2), 'Cosh': (-2, 2), 'Asinh': (-2, 2), 'Acosh': (1.2, 3),
    'Atanh': (-0.8, 0.8), 'Erf': (-2, 2),
}


@pytest.mark.parametrize('op', sorted(UNARY))
def test_unary(op):
    low, high = UNARY[op]
    x = _rng().uniform(low, high, (3, 4))
    if op == 'Abs':
        x *= _rng(1).choice([-1, 1], x.shape)
    _check(op, {'x': x})


# -- variadic ----------------------------------------------------------------

@pytest.mark.parametrize('op', ['Sum', 'Mean', 'Max', 'Min'])
@pytest.mark.parametrize('shapes', [[(2, 3)], [(2, 3), (3,)], [(2, 1), (3,), (2, 3)]])
def test_variadic(op, shapes):
    r = _rng()
    inputs = {'x%d' % i: r.randn(*s) for i, s in enumerate(shapes)}
    _check(op, inputs)


@pytest.mark.parametrize('op', ['Max', 'Min'])
@pytest.mark.parametrize('n', [2, 3])
def test_extreme_ties_go_to_first_input(op, n):
    x = numpy.array([1.0, 2.0, 3.0])
    inputs = {'x%d' % i: x.copy() for i in range(n)}
    gy = numpy.array([1.0, 10.0, 100.0])
    grads = _run_backward(single_node_model(op, inputs), inputs, gy)
    numpy.testing.assert_array_equal(grads[0], gy)
    for g in grads[1:]:
        numpy.testing.assert_array_equal(g, 0)


@pytest.mark.parametrize('opset', [6, 11, 13])
def test_clip(opset):
    x = _rng().uniform(-2, 2, (3, 4))
    if opset < 11:
        _check('Clip', {'x': x}, opset=opset, min=-0.5, max=1.0)
        _check('Clip', {'x': x}, opset=opset, max=1.0)
    else:
        _check('Clip', {'x': x}, opset=opset,
               constants={'lo': numpy.array(-0.5), 'hi': numpy.array(1.0)})
        _check('Clip', {'x': x}, opset=opset, constants={'lo': numpy.array(-0.5)})
        _check('Clip', {'x': x}, opset=opset, constants={'hi': numpy.array(1.0)},
               node_inputs=['x', '', 'hi'])
        # Bounds as differentiated inputs.
        _check('Clip', {'x': x, 'lo': numpy.array(-0.5), 'hi': numpy.array(1.0)}, opset=opset)


# -- reductions --------------------------------------------------------------

REDUCTIONS = ['ReduceSum', 'ReduceMean', 'ReduceMax', 'ReduceMin', 'ReduceProd',
              'ReduceSumSquare', 'ReduceL1', 'ReduceL2', 'ReduceLogSum', 'ReduceLogSumExp']


def _reduce_check(op, x, axes, keepdims, opset, noop=None):
    attrs = {'keepdims': keepdims}
    constants = None
    axes_as_input = opset >= (13 if op == 'ReduceSum' else 18)
    if axes is not None:
        if axes_as_input:
            constants = {'axes': numpy.array(axes, numpy.int64)}
        else:
            attrs['axes'] = axes
    if noop is not None:
        attrs['noop_with_empty_axes'] = noop
    _check(op, {'x': x}, opset=opset, constants=constants, **attrs)


@pytest.mark.parametrize('op', REDUCTIONS)
@pytest.mark.parametrize('opset', [11, 13, 18])
@pytest.mark.parametrize('axes,keepdims', [([1], 1), ([1], 0), ([0, -1], 0), (None, 0),
                                           (None, 1)])
def test_reduction(op, opset, axes, keepdims):
    r = _rng()
    x = r.uniform(0.5, 1.5, (2, 3, 2))
    if op in ('ReduceL1', 'ReduceMax', 'ReduceMin', 'ReduceSum'):
        x *= r.choice([-1, 1], x.shape)
    _reduce_check(op, x, axes, keepdims, opset)


@pytest.mark.parametrize('op', ['ReduceSum', 'ReduceMean', 'ReduceSumSquare', 'ReduceMax',
                                'ReduceProd', 'ReduceLogSumExp'])
def test_reduction_noop_with_empty_axes(op):
    x = _rng().uniform(0.5, 1.5, (2, 3))
    _reduce_check(op, x, None, 0, 18, noop=1)


def test_reduction_axes_ambiguous_from_shapes():
    # (2, 3, 2) -> (2,): axis 0 or 2 kept: only the axes input tells.
    x = _rng().randn(2, 3, 2)
    for op in ('ReduceSum', 'ReduceLogSumExp', 'ReduceProd'):
        _reduce_check(op, x, [1, 2], 0, 18)
        _reduce_check(op, x, [0, 1], 0, 18)


def test_reduce_prod_with_zeros():
    x = _rng().randn(3, 4)
    x[0, 1] = 0
    x[1, 0] = x[1, 2] = 0
    _reduce_check('ReduceProd', x, [1], 1, 18)
    _reduce_check('ReduceProd', x, None, 0, 13)


def test_reduce_max_ties_all_get_gradient():
    # Chainer's F.max: every element equal to the maximum gets gy.
    x = numpy.array([[1.0, 3.0, 3.0], [2.0, 0.0, 1.0]])
    model = single_node_model('ReduceMax', {'x': x}, opset=13, axes=[1], keepdims=0)
    grads = _run_backward(model, {'x': x}, numpy.array([1.0, 2.0]))
    numpy.testing.assert_array_equal(grads[0], [[0, 1, 1], [2, 0, 0]])


@pytest.mark.parametrize('exclusive', [0, 1])
@pytest.mark.parametrize('reverse', [0, 1])
@pytest.mark.parametrize('axis', [0, -1])
def test_cumsum(exclusive, reverse, axis):
    x = _rng().randn(3, 4)
    _check('CumSum', {'x': x}, opset=14, constants={'axis': numpy.array(axis, numpy.int64)},
           exclusive=exclusive, reverse=reverse)


# -- matrix products ---------------------------------------------------------

@pytest.mark.parametrize('shapes', [
    ((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)), ((2, 3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (3, 4, 2)), ((1, 3, 4), (2, 4, 5)),
    ((4,), (4, 5)), ((4,), (2, 4, 5)), ((3, 4), (4,)), ((2, 3, 4), (4,)), ((4,), (4,)),
])
def test_matmul(shapes):
    r = _rng()
    _check('MatMul', {'a': r.randn(*shapes[0]), 'w': r.randn(*shapes[1])})


@pytest.mark.parametrize('trans_a', [0, 1])
@pytest.mark.parametrize('trans_b', [0, 1])
@pytest.mark.parametrize('c_shape', [None, (5,), (3, 5), (3, 1), (1, 5), ()])
def test_gemm(trans_a, trans_b, c_shape):
    r = _rng()
    inputs = {'a': r.randn(*((4, 3) if trans_a else (3, 4))),
              'b': r.randn(*((5, 4) if trans_b else (4, 5)))}
    if c_shape is not None:
        inputs['c'] = r.randn(*c_shape)
    _check('Gemm', inputs, opset=13, transA=trans_a, transB=trans_b)


def test_gemm_alpha_beta():
    r = _rng()
    inputs = {'a': r.randn(3, 4), 'b': r.randn(5, 4), 'c': r.randn(5)}
    _check('Gemm', inputs, opset=13, transB=1, alpha=0.5, beta=2.0)
    _check('Gemm', inputs, opset=11, transB=1, alpha=-1.5, beta=0.25)


def test_det():
    r = _rng()
    _check('Det', {'x': r.randn(3, 3) + 3 * numpy.eye(3)})
    _check('Det', {'x': r.randn(2, 3, 3) + 3 * numpy.eye(3)})


@pytest.mark.parametrize('equation,shapes', [
    ('ij,jk->ik', [(2, 3), (3, 4)]),
    ('bij,bjk->bik', [(2, 2, 3), (2, 3, 4)]),
    ('ij->ji', [(2, 3)]),
    ('ij->i', [(2, 3)]),
    ('i,j->ij', [(2,), (3,)]),
    ('ij,ij->', [(2, 3), (2, 3)]),
    ('ij,jk', [(2, 3), (3, 4)]),
    ('...ij,...jk->...ik', [(2, 2, 3), (2, 3, 4)]),
    ('...ij,jk->...ik', [(2, 2, 3), (3, 4)]),
    ('ij,k->ijk', [(2, 3), (2,)]),
])
def test_einsum(equation, shapes):
    r = _rng()
    inputs = {'x%d' % i: r.randn(*s) for i, s in enumerate(shapes)}
    _check('Einsum', inputs, opset=12, equation=equation)


# -- coverage ----------------------------------------------------------------

def _translator_ops(family):
    """ONNX operators of ``family`` (by kernel) that the tracing translators
    may emit: every quoted operator name in translators/onnx_chainer."""
    text = ''.join(p.read_text() for p in (ROOT / 'translators' / 'onnx_chainer').glob('*.py'))
    quoted = set(re.findall(r"'([A-Z][A-Za-z0-9]+)'", text))
    ops = {s.op for s in registered_kernels() if s.domain == '' and s.family == family}
    return sorted(quoted & ops)


def test_translator_ops_have_rules():
    ops = _translator_ops('math')
    assert 'MatMul' in ops
    for op in ops:
        rule_for(helper.make_node(op, [], []))  # raises GradientError when missing

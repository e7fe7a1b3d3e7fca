"""Lowerings of element-wise math: the unary functions and activations of
ccn_activation.c, the broadcasting binary, variadic, comparison and logic
operations of ccn_math.c."""
import numpy
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native import UnsupportedNativeOpsError
from chainer_compiler.runtime.native.emit_c import emit_c

from .helpers import check_native, make_model

F32, F64 = numpy.float32, numpy.float64

#: Unary ops without attributes, by the domain of their input.
ANY_INPUT = ['Abs', 'Neg', 'Exp', 'Floor', 'Ceil', 'Sign', 'Erf', 'Sin', 'Cos', 'Tan', 'Asin',
             'Acos', 'Atan', 'Sinh', 'Cosh', 'Asinh', 'Atanh', 'Relu', 'Sigmoid', 'Tanh',
             'Softplus', 'Softsign', 'HardSwish', 'Gelu']
POSITIVE_INPUT = ['Log', 'Sqrt', 'Reciprocal', 'Acosh']


def _unary_model(dtype, shape, ops, source):
    nodes = [helper.make_node(op, [source], ['y_' + op]) for op in ops]
    return nodes, [('y_' + op, dtype, shape) for op in ops]


def _refusal(model) -> str:
    with pytest.raises(UnsupportedNativeOpsError) as e:
        emit_c(build_program(model), '/nonexistent/never-written')
    return str(e.value)


@pytest.mark.parametrize('dtype', [F32, F64])
@pytest.mark.native_build
def test_every_unary_function(dtype):
    rng = numpy.random.RandomState(0)
    x = rng.uniform(-0.95, 0.95, (3, 5)).astype(dtype)
    x[0, :3] = 0.0, 0.5, -0.5
    p = rng.uniform(1.05, 3.0, (3, 5)).astype(dtype)
    # Round takes halves to the even neighbour.
    r = numpy.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.3, -0.7], dtype)
    nodes, outputs = _unary_model(dtype, [3, 5], ANY_INPUT, 'x')
    more_nodes, more_outputs = _unary_model(dtype, [3, 5], POSITIVE_INPUT, 'p')
    nodes += more_nodes + [helper.make_node('Round', ['r'], ['y_Round'])]
    outputs += more_outputs + [('y_Round', dtype, [8])]
    model = make_model(nodes, [('x', dtype, [3, 5]), ('p', dtype, [3, 5]), ('r', dtype, [8])],
                       outputs, opset=20)
    # onnxruntime lacks float64 kernels of most of these.
    got = check_native(model, [x, p, r], onnxruntime_check=dtype == F32)
    assert got[-1].tolist() == [-2, -2, -0, 0, 2, 2, 0, -1]


@pytest.mark.native_build
def test_activation_attributes_and_gelu_tanh():
    x = numpy.linspace(-4, 4, 24, dtype=F32).reshape(2, 3, 4)
    specs = [('Elu', {'alpha': 0.5}), ('Selu', {'alpha': 1.5, 'gamma': 2.0}), ('Selu', {}),
             ('Celu', {'alpha': 2.0}), ('HardSigmoid', {'alpha': 0.3, 'beta': 0.4}),
             ('HardSigmoid', {}), ('LeakyRelu', {'alpha': 0.2}), ('LeakyRelu', {}),
             ('ThresholdedRelu', {'alpha': 0.5}), ('ThresholdedRelu', {}),
             ('Gelu', {'approximate': 'tanh'}), ('Gelu', {'approximate': 'none'}),
             ('Softplus', {})]
    nodes = [helper.make_node(op, ['x'], ['y%d' % k], **attrs)
             for k, (op, attrs) in enumerate(specs)]
    model = make_model(nodes, [('x', F32, [2, 3, 4])],
                       [('y%d' % k, F32, [2, 3, 4]) for k in range(len(specs))], opset=20)
    check_native(model, [x])


@pytest.mark.native_build
def test_softplus_does_not_overflow():
    x = numpy.array([-100, -20, 0, 20, 100], F32)
    model = make_model([helper.make_node('Softplus', ['x'], ['y'])], [('x', F32, [5])],
                       [('y', F32, [5])])
    assert check_native(model, [x])[0][-1] == 100


@pytest.mark.native_build
def test_clip_bounds_from_inputs_and_attributes():
    x = numpy.linspace(-3, 3, 12, dtype=F32).reshape(3, 4)
    inits = {'lo': numpy.array(-1, F32), 'hi': numpy.array(1.5, F32)}
    nodes = [helper.make_node('Clip', ['x', 'lo', 'hi'], ['both']),
             helper.make_node('Clip', ['x', '', 'hi'], ['upper']),
             helper.make_node('Clip', ['x', 'lo'], ['lower']),
             helper.make_node('Clip', ['x'], ['none']),
             # min above max: every element becomes max.
             helper.make_node('Clip', ['x', 'hi', 'lo'], ['crossed'])]
    names = ['both', 'upper', 'lower', 'none', 'crossed']
    model = make_model(nodes, [('x', F32, [3, 4])], [(n, F32, [3, 4]) for n in names], inits)
    got = check_native(model, [x])
    assert (got[4] == -1).all()
    legacy = make_model([helper.make_node('Clip', ['x'], ['y'], min=-0.5, max=2.0),
                         helper.make_node('Clip', ['x'], ['z'], max=0.0)],
                        [('x', F32, [3, 4])], [('y', F32, [3, 4]), ('z', F32, [3, 4])],
                        opset=6)
    check_native(legacy, [x])


def test_clip_refuses_a_computed_bound():
    model = make_model([helper.make_node('Clip', ['x', 'lo'], ['y'])],
                       [('x', F32, [3]), ('lo', F32, [])], [('y', F32, [3])])
    assert 'its min must be a constant' in _refusal(model)


def test_unary_refuses_integers():
    model = make_model([helper.make_node('Abs', ['x'], ['y'])], [('x', numpy.int64, [3])],
                       [('y', numpy.int64, [3])])
    assert 'is int64; this kernel takes float32 or float64' in _refusal(model)


ARITHMETIC = ['Add', 'Sub', 'Mul', 'Div']
NUMERIC = [F32, F64, numpy.int64, numpy.int32]


@pytest.mark.native_build
def test_arithmetic_broadcasts_every_dtype():
    rng = numpy.random.RandomState(1)
    nodes, inputs, outputs, feed = [], [], [], []
    for dtype in NUMERIC:
        t = numpy.dtype(dtype).name
        a = rng.randint(-20, 20, (2, 3, 4)).astype(dtype)
        a[a == 0] = 7  # s / a divides by every element of a
        b = (rng.randint(1, 6, (3, 1)) * rng.choice([-1, 1], (3, 1))).astype(dtype)
        names = ['a_' + t, 'b_' + t, 's_' + t]
        inputs += [(names[0], dtype, [2, 3, 4]), (names[1], dtype, [3, 1]), (names[2], dtype, [])]
        feed += [a, b, numpy.array(3, dtype)]
        for op in ARITHMETIC:
            nodes += [helper.make_node(op, names[:2], ['%s_%s' % (op, t)]),
                      helper.make_node(op, names[2::-2], ['%s_s_%s' % (op, t)])]
            outputs += [('%s_%s' % (op, t), dtype, [2, 3, 4]),
                        ('%s_s_%s' % (op, t), dtype, [2, 3, 4])]
    got = check_native(make_model(nodes, inputs, outputs), feed)
    # ONNX integer division truncates toward zero, unlike NumPy's //.
    int64_div = got[len(ARITHMETIC) * 4 + 6]
    numpy.testing.assert_array_equal(int64_div, numpy.trunc(feed[6] / feed[7]))


@pytest.mark.parametrize('a_shape, b_shape', [
    ((600, 7, 64), (7, 1)),  # many short rows: pieces of rows start mid-odometer
    ((300000,), (300000,)),  # one long row cut into pieces
    ((3, 100000), (100000,)),  # a few long rows, each cut into pieces
])
@pytest.mark.native_build
def test_large_broadcasts_are_shared_between_threads_exactly(a_shape, b_shape):
    rng = numpy.random.RandomState(2)
    a = rng.uniform(-1, 1, a_shape).astype(numpy.float32)
    b = rng.uniform(-1, 1, b_shape).astype(numpy.float32)
    y_shape = list(numpy.broadcast_shapes(a_shape, b_shape))
    model = make_model([helper.make_node('Sub', ['a', 'b'], ['y'])],
                       [('a', 'float32', list(a_shape)), ('b', 'float32', list(b_shape))],
                       [('y', 'float32', y_shape)])
    (y,) = check_native(model, [a, b])
    numpy.testing.assert_array_equal(y, a - b)


@pytest.mark.native_build
def test_integer_division_by_zero_gives_zero_and_does_not_trap():
    model = make_model([helper.make_node('Div', ['a', 'b'], ['y'])],
                       [('a', numpy.int64, [4]), ('b', numpy.int64, [4])],
                       [('y', numpy.int64, [4])])
    a = numpy.array([7, -7, numpy.iinfo(numpy.int64).min, 5], numpy.int64)
    b = numpy.array([0, 2, -1, -5], numpy.int64)
    with numpy.errstate(all='ignore'):
        got = check_native(model, [a, b], onnxruntime_check=False)
    assert got[0].tolist() == [0, -3, numpy.iinfo(numpy.int64).min, -1]


@pytest.mark.native_build
def test_pow_with_float_and_integer_exponents():
    x = numpy.random.RandomState(2).uniform(0.5, 2, (2, 3)).astype(F32)
    e = numpy.array([[0.5], [-1.5]], F32)
    inits = {'k': numpy.array(3, numpy.int64), 'kv': numpy.array([2, -1, 0], numpy.int32)}
    nodes = [helper.make_node('Pow', ['x', 'e'], ['y']),
             helper.make_node('Pow', ['x', 'k'], ['cube']),
             helper.make_node('Pow', ['x', 'kv'], ['mixed']),
             helper.make_node('Pow', ['i', 'j'], ['ints'])]
    model = make_model(nodes, [('x', F32, [2, 3]), ('e', F32, [2, 1]),
                               ('i', numpy.int64, [4]), ('j', numpy.int64, [4])],
                       [('y', F32, [2, 3]), ('cube', F32, [2, 3]), ('mixed', F32, [2, 3]),
                        ('ints', numpy.int64, [4])], inits)
    i = numpy.array([2, -3, 7, 0], numpy.int64)
    j = numpy.array([10, 3, 0, 5], numpy.int64)
    got = check_native(model, [x, e, i, j])
    assert got[3].tolist() == [1024, -27, 1, 0]


def test_pow_refuses_a_computed_exponent_of_another_dtype():
    model = make_model([helper.make_node('Pow', ['x', 'k'], ['y'])],
                       [('x', F32, [3]), ('k', numpy.int64, [3])], [('y', F32, [3])])
    assert 'a float base takes a constant exponent' in _refusal(model)


def test_add_refuses_mixed_dtypes():
    model = make_model([helper.make_node('Add', ['x', 'k'], ['y'])],
                       [('x', F32, [3]), ('k', numpy.int64, [3])], [('y', F32, [3])])
    assert 'input 1 is int64, not float32 like input 0' in _refusal(model)


@pytest.mark.native_build
def test_prelu_slope_broadcasts_and_legacy_per_channel_slope():
    rng = numpy.random.RandomState(3)
    x = rng.uniform(-1, 1, (2, 3, 2, 2)).astype(F32)
    slope = rng.uniform(0, 0.5, (3, 1, 1)).astype(F32)
    model = make_model([helper.make_node('PRelu', ['x', 'slope'], ['y']),
                        helper.make_node('PRelu', ['x', 'one'], ['z'])],
                       [('x', F32, [2, 3, 2, 2])],
                       [('y', F32, [2, 3, 2, 2]), ('z', F32, [2, 3, 2, 2])],
                       {'slope': slope, 'one': numpy.array([0.25], F32)})
    check_native(model, [x])
    legacy = make_model([helper.make_node('PRelu', ['x', 'slope'], ['y'])],
                        [('x', F32, [2, 3, 2, 2])], [('y', F32, [2, 3, 2, 2])],
                        {'slope': slope.reshape(3)}, opset=6)
    numpy.testing.assert_allclose(
        check_native(legacy, [x], onnxruntime_check=False)[0],
        numpy.where(x >= 0, x, x * slope), rtol=1e-6)


def test_prelu_refuses_a_slope_wider_than_x():
    model = make_model([helper.make_node('PRelu', ['x', 's'], ['y'])],
                       [('x', F32, [3]), ('s', F32, [2, 3])], [('y', F32, [3])])
    assert 'does not broadcast to X' in _refusal(model)


@pytest.mark.native_build
def test_legacy_broadcast_attribute():
    a = numpy.arange(24, dtype=F32).reshape(2, 3, 4)
    b = numpy.array([1, 2, 3], F32)
    model = make_model([helper.make_node('Mul', ['a', 'b'], ['y'], broadcast=1, axis=1),
                        helper.make_node('Sub', ['a', 'a'], ['z'])],
                       [('a', F32, [2, 3, 4]), ('b', F32, [3])],
                       [('y', F32, [2, 3, 4]), ('z', F32, [2, 3, 4])], opset=6)
    # onnxruntime has no kernels of opset 6.
    got = check_native(model, [a, b], onnxruntime_check=False)
    numpy.testing.assert_array_equal(got[0], a * b[:, None])


@pytest.mark.native_build
def test_variadic_ops_broadcast():
    rng = numpy.random.RandomState(4)
    nodes, inputs, outputs, feed = [], [], [], []
    for dtype, ops in ((F32, ['Max', 'Min', 'Sum', 'Mean']), (numpy.int32, ['Max', 'Min'])):
        t = numpy.dtype(dtype).name
        shapes = {'a': (2, 1, 4), 'b': (3, 1), 'c': (4,)}
        names = [k + t for k in shapes]
        inputs += [(k + t, dtype, list(v)) for k, v in shapes.items()]
        feed += [rng.randint(-9, 9, v).astype(dtype) for v in shapes.values()]
        for op in ops:
            nodes += [helper.make_node(op, names, ['%s3%s' % (op, t)]),
                      helper.make_node(op, names[1:2], ['%s1%s' % (op, t)]),
                      helper.make_node(op, names[::2], ['%s2%s' % (op, t)])]
            outputs += [('%s3%s' % (op, t), dtype, [2, 3, 4]), ('%s1%s' % (op, t), dtype, [3, 1]),
                        ('%s2%s' % (op, t), dtype, [2, 1, 4])]
    check_native(make_model(nodes, inputs, outputs), feed)


@pytest.mark.native_build
def test_max_and_min_propagate_nan():
    a = numpy.array([1, numpy.nan, 3, numpy.nan], F32)
    b = numpy.array([numpy.nan, 2, 1, 5], F32)
    model = make_model([helper.make_node('Max', ['a', 'b'], ['y']),
                        helper.make_node('Min', ['a', 'b'], ['z'])],
                       [('a', F32, [4]), ('b', F32, [4])], [('y', F32, [4]), ('z', F32, [4])])
    got = check_native(model, [a, b], onnxruntime_check=False)
    assert numpy.isnan(got[0]).tolist() == [True, True, False, True]
    assert got[1][2] == 1


@pytest.mark.native_build
def test_comparisons_and_logic_give_bool():
    rng = numpy.random.RandomState(5)
    nodes, inputs, outputs, feed = [], [], [], []
    comparisons = ['Equal', 'Less', 'Greater', 'LessOrEqual', 'GreaterOrEqual']
    for dtype in NUMERIC:
        t = numpy.dtype(dtype).name
        inputs += [('a' + t, dtype, [2, 3]), ('b' + t, dtype, [3])]
        feed += [rng.randint(0, 3, (2, 3)).astype(dtype), rng.randint(0, 3, (3,)).astype(dtype)]
        nodes += [helper.make_node(op, ['a' + t, 'b' + t], [op + t]) for op in comparisons]
        outputs += [(op + t, numpy.bool_, [2, 3]) for op in comparisons]
    logic = ['And', 'Or', 'Xor', 'Equal']
    inputs += [('p', numpy.bool_, [2, 1, 3]), ('q', numpy.bool_, [4, 1])]
    feed += [rng.rand(2, 1, 3) < 0.5, rng.rand(4, 1) < 0.5]
    nodes += [helper.make_node(op, ['p', 'q'], [op + 'bool']) for op in logic] + \
        [helper.make_node('Not', ['p'], ['Not'])]
    outputs += [(op + 'bool', numpy.bool_, [2, 4, 3]) for op in logic] + \
        [('Not', numpy.bool_, [2, 1, 3])]
    check_native(make_model(nodes, inputs, outputs), feed)


def test_and_refuses_floats():
    model = make_model([helper.make_node('And', ['a', 'a'], ['y'])], [('a', F32, [3])],
                       [('y', numpy.bool_, [3])])
    assert 'this kernel takes bool' in _refusal(model)


@pytest.mark.native_build
def test_isnan_isinf_every_class_and_the_attention_mask_pattern():
    special = [numpy.nan, -numpy.nan, numpy.inf, -numpy.inf, 0.0, -0.0, 1e-40, -3.5, 1e300]
    nodes, inputs, outputs, feed = [], [], [], []
    for dtype in (F32, F64):
        t = numpy.dtype(dtype).name
        with numpy.errstate(over='ignore'):
            feed.append(numpy.array(special, dtype))  # 1e300 is inf in float32
        inputs.append(('x' + t, dtype, [len(special)]))
        nodes.append(helper.make_node('IsNaN', ['x' + t], ['nan' + t]))
        for k, (pos, neg) in enumerate([(1, 1), (1, 0), (0, 1), (0, 0)]):
            nodes.append(helper.make_node('IsInf', ['x' + t], ['inf%d%s' % (k, t)],
                                          detect_positive=pos, detect_negative=neg))
        outputs += [(name + t, numpy.bool_, [len(special)])
                    for name in ['nan', 'inf0', 'inf1', 'inf2', 'inf3']]
    # torch's attention export: Where(IsNaN(Softmax(s)), 0, Softmax(s)).
    scores = numpy.array([[1.0, 2.0, 3.0], [-numpy.inf] * 3], F32)
    nodes += [helper.make_node('Softmax', ['s'], ['p'], axis=-1),
              helper.make_node('IsNaN', ['p'], ['masked']),
              helper.make_node('Where', ['masked', 'zero', 'p'], ['attention'])]
    inputs.append(('s', F32, [2, 3]))
    outputs.append(('attention', F32, [2, 3]))
    feed.append(scores)
    model = make_model(nodes, inputs, outputs, {'zero': numpy.zeros((), F32)}, opset=20)
    got = check_native(model, feed)
    assert got[0].tolist() == [True, True] + [False] * 7
    # float32 1e300 is +inf, float64's is finite.
    assert got[1].tolist() == [False, False, True, True] + [False] * 4 + [True]
    assert got[6].tolist() == [False, False, True, True] + [False] * 5
    assert got[-1][1].tolist() == [0, 0, 0]

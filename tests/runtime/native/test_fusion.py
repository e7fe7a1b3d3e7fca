"""The native backend's epilogue fusion (runtime/native/fusion.py): which
instructions it rewrites, which it leaves, and that the fused C computes
what the unfused Program does."""
import numpy
import pytest
from onnx import helper, numpy_helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.executor import Executor
from chainer_compiler.runtime.native.fusion import _Fuser, fuse

from .helpers import check_native, make_model

F32 = numpy.float32


def _rand(rng, *shape):
    return rng.uniform(-1, 1, shape).astype(F32)


def _bn_params(rng, prefix, n):
    return {prefix + 's': _rand(rng, n) + 1.5, prefix + 'b': _rand(rng, n),
            prefix + 'm': _rand(rng, n), prefix + 'v': _rand(rng, n) + 1.5}


def _bn(x, prefix, y, **attrs):
    return helper.make_node('BatchNormalization',
                            [x] + [prefix + k for k in 'sbmv'], [y], **attrs)


def _ops(program):
    return [(inst.op, inst.attrs.get('activation')) for inst in program.instructions]


def _pre_activations(rng):
    """Pre-activation BatchNormalizations (DenseNet's: no product before
    them to fold into) on an input of odd sizes, each followed by one of
    fusion.NORM_EPILOGUES: nodes, initializers, input and output."""
    node = helper.make_node
    nodes = [_bn('o', 'e', 'o1'), node('Relu', ['o1'], ['o2']),
             _bn('o2', 'f', 'o3'), node('LeakyRelu', ['o3'], ['o4'], alpha=0.3),
             _bn('o4', 'k', 'o5', epsilon=1e-3), node('HardSwish', ['o5'], ['o6']),
             _bn('o6', 'l', 'o7'), node('Clip', ['o7', 'lo', 'hi'], ['z'])]
    inits = {'lo': F32(0), 'hi': F32(0.5), **{k: v for p in 'efkl'
                                              for k, v in _bn_params(rng, p, 3).items()}}
    return nodes, inits, ('o', F32, [2, 3, 5, 7]), ('z', F32, [2, 3, 5, 7])


def _transitions(rng, x, c):
    """DenseNet's transition (a 1x1 Conv, with a bias here, then a 2x2
    AveragePool, over odd sizes) and a 1x1 Conv before a
    GlobalAveragePool, both of ``x`` (``c`` channels): nodes,
    initializers, outputs 't' and 'gp'."""
    node = helper.make_node
    nodes = [node('Conv', [x, 'wt', 'bt'], ['tc']),
             node('AveragePool', ['tc'], ['t'], kernel_shape=[2, 2], strides=[2, 2]),
             node('Conv', [x, 'wg'], ['gc']), node('GlobalAveragePool', ['gc'], ['gp'])]
    return nodes, {'wt': _rand(rng, 4, c, 1, 1), 'bt': _rand(rng, 4), 'wg': _rand(rng, 5, c, 1, 1)}


@pytest.mark.native_build
def test_conv_bn_relu_and_gemm_bn_leaky_relu():
    """Conv(no bias)-BN-Relu and Conv(bias)-BN become one Conv each; Gemm
    (transB, bias)-BN-LeakyRelu one FusedGemm; a BN reading no product
    takes the activation after it (each NORM_EPILOGUES); an average pool
    after a 1x1 Conv runs before it; values unchanged."""
    rng = numpy.random.RandomState(0)
    node = helper.make_node
    pre, pre_inits, pre_input, pre_output = _pre_activations(rng)
    transitions, transition_inits = _transitions(rng, 'z', 3)
    pre, pre_inits = pre + transitions, {**pre_inits, **transition_inits}
    nodes = [node('Conv', ['x', 'w1'], ['c1'], pads=[1, 1, 1, 1]),
             _bn('c1', 'p', 'n1', epsilon=1e-3),
             node('Relu', ['n1'], ['r1']),
             node('Conv', ['r1', 'w2', 'b2'], ['c2']),
             _bn('c2', 'q', 'y1'),
             node('Gemm', ['a', 'g', 'gb'], ['h'], transB=1, beta=0.5),
             _bn('h', 'u', 'hn'),
             node('LeakyRelu', ['hn'], ['y2'], alpha=0.2)] + pre
    inits = {'w1': _rand(rng, 6, 3, 3, 3), 'w2': _rand(rng, 4, 6, 1, 1), 'b2': _rand(rng, 4),
             'g': _rand(rng, 5, 7), 'gb': _rand(rng, 5), **_bn_params(rng, 'p', 6),
             **_bn_params(rng, 'q', 4), **_bn_params(rng, 'u', 5), **pre_inits}
    inputs = [('x', F32, [2, 3, 6, 6]), ('a', F32, [3, 7]), pre_input]
    model = make_model(nodes, inputs, [('y1', F32, [2, 4, 6, 6]), ('y2', F32, [3, 5]),
                                       pre_output, ('t', F32, [2, 4, 2, 3]),
                                       ('gp', F32, [2, 5, 1, 1])], inits, opset=14)  # HardSwish
    program = build_program(model, fuse=False)
    fused = fuse(program)
    assert _ops(fused) == [('Conv', 'Relu'), ('Conv', None), ('FusedGemm', 'LeakyRelu')] + [
        ('BatchNormalization', a) for a in ('Relu', 'LeakyRelu', 'HardSwish', 'Clip')] + [
        ('AveragePool', None), ('Conv', None), ('GlobalAveragePool', None), ('Conv', None)]
    assert fused.instructions[2].attrs['activation_alpha'] == numpy.float32(0.2)
    assert fused.instructions[2].attrs['beta'] == 1.0
    assert [i.attrs.get('activation_alpha') for i in fused.instructions[3:7]] == [
        None, numpy.float32(0.3), None, 0.5]
    assert len(program.instructions) == 20  # the input Program is left alone
    # Values around the activations' kinks (HardSwish's at -3 and 3).
    feeds = [_rand(rng, *s) for _, _, s in inputs]
    feeds[2] *= 4
    check_native(model, feeds, atol=1e-4)


def test_batch_norm_epilogues_native_only():
    """The VM's BatchNormalization applies no activation: only the native
    fusion makes one its epilogue, and only an inference one's, of
    NORM_EPILOGUES."""
    rng = numpy.random.RandomState(4)
    node = helper.make_node
    pre, inits, pre_input, pre_output = _pre_activations(rng)
    nodes = pre + [_bn('z', 'e', 's1'), node('Sigmoid', ['s1'], ['s2']),
                   _bn('s2', 'f', 't1', training_mode=1), node('Relu', ['t1'], ['t2'])]
    model = make_model(nodes, [pre_input], [('t2', F32, [2, 3, 5, 7])], inits, opset=15)
    program = build_program(model, fuse=False)
    assert fuse(program, 'vm') is program
    # Sigmoid is no NORM_EPILOGUES; the last BatchNormalization trains.
    assert _ops(fuse(program))[3:] == [
        ('BatchNormalization', 'Clip'), ('BatchNormalization', None), ('Sigmoid', None),
        ('BatchNormalization', None), ('Relu', None)]


def test_pool_first_only_where_it_computes_the_same():
    """The pools run first on the native backend alone, and only after a
    1x1 Conv without padding, stride or activation that they alone read,
    when they are unpadded, floor their windows and leave fewer pixels."""
    rng = numpy.random.RandomState(5)
    node = helper.make_node
    nodes, inits = _transitions(rng, 'x', 3)
    pool = {'kernel_shape': [2, 2], 'strides': [2, 2]}
    left = [(node('Conv', ['x', 'w3'], ['a']), {}, [2, 3]),  # 3x3
            (node('Conv', ['x', 'wt'], ['b'], strides=[2, 2]), {}, [2, 2]),
            (node('Conv', ['x', 'wt'], ['c'], pads=[1, 1, 1, 1]), {}, [4, 5]),
            (node('Conv', ['x', 'wt'], ['d']), {'pads': [0, 0, 1, 1]}, [4, 5]),
            (node('Conv', ['x', 'wt'], ['e']), {'ceil_mode': 1}, [4, 5]),
            (node('Conv', ['x', 'wt'], ['f']), {'kernel_shape': [1, 1], 'strides': [1, 1]},
             [7, 9])]  # as many pixels
    outputs = [('t', F32, [1, 4, 3, 4]), ('gp', F32, [1, 5, 1, 1])]
    for conv, changed, size in left:
        y = conv.output[0]
        nodes += [conv, node('AveragePool', [y], [y + 'p'], **{**pool, **changed})]
        outputs.append((y + 'p', F32, [1, 4] + size))
    nodes += [node('Conv', ['x', 'wt'], ['g']), node('Relu', ['g'], ['gr']),
              node('AveragePool', ['gr'], ['gq'], **pool),  # the Relu between
              node('Conv', ['x', 'wt'], ['h']), node('AveragePool', ['h'], ['hp'], **pool),
              node('Neg', ['h'], ['hn'])]  # h read twice
    outputs += [('gq', F32, [1, 4, 3, 4]), ('hp', F32, [1, 4, 3, 4]), ('hn', F32, [1, 4, 7, 9])]
    inits['w3'] = _rand(rng, 4, 3, 3, 3)
    model = make_model(nodes, [('x', F32, [1, 3, 7, 9])], outputs, inits)
    program = build_program(model, fuse=False)
    assert fuse(program, 'vm') is program
    assert _ops(fuse(program))[:4] == [('AveragePool', None), ('Conv', None),
                                       ('GlobalAveragePool', None), ('Conv', None)]
    # Each other pool still reads its Conv (g's with the Relu its epilogue).
    assert [op for op, _ in _ops(fuse(program))[4:]] == ['Conv', 'AveragePool'] * 8 + ['Neg']


def test_pool_first_frees_a_computed_weight_after_the_conv():
    """A W made in the graph (here Neg of an input) is freed after the
    Conv that reads it, not at the pool that now runs where the Conv was."""
    node = helper.make_node
    model = make_model([node('Neg', ['w'], ['wn']), node('Conv', ['x', 'wn'], ['c']),
                        node('AveragePool', ['c'], ['y'], kernel_shape=[2, 2], strides=[2, 2])],
                       [('x', F32, [1, 3, 6, 6]), ('w', F32, [4, 3, 1, 1])],
                       [('y', F32, [1, 4, 3, 3])], {})
    fuser = _Fuser(build_program(model, fuse=False), 'native')
    fused = fuser.run()
    assert [inst.op for inst in fused.instructions] == ['Neg', 'AveragePool', 'Conv']
    # The rules after it see the weights' reader where it now is.
    for r, readers in fuser.readers.items():
        assert all(r in fuser.insts[k].inputs for k in readers), (r, readers)
    freed = set()
    for inst in fused.instructions:
        assert not freed & set(inst.inputs), (inst.op, inst.inputs, freed)
        freed |= set(inst.frees)
    assert fused.instructions[2].inputs[1] in fused.instructions[2].frees


@pytest.mark.native_build
def test_matmul_and_gemm_activations():
    """MatMul-Sigmoid, MatMul-Tanh and Gemm-Relu (FusedGemm, as the VM's
    fusion names it)."""
    rng = numpy.random.RandomState(1)
    node = helper.make_node
    nodes = [node('MatMul', ['a', 'w'], ['m1']), node('Sigmoid', ['m1'], ['y1']),
             node('MatMul', ['b', 'a3'], ['m2']), node('Tanh', ['m2'], ['y2']),
             node('Gemm', ['a', 'w'], ['m3']), node('Relu', ['m3'], ['y3'])]
    inputs = [('a', F32, [4, 6]), ('b', F32, [2, 5, 4]), ('a3', F32, [2, 4, 6])]
    outputs = [('y1', F32, [4, 3]), ('y2', F32, [2, 5, 6]), ('y3', F32, [4, 3])]
    model = make_model(nodes, inputs, outputs, {'w': _rand(rng, 6, 3)})
    fused = fuse(build_program(model, fuse=False))
    assert _ops(fused) == [('MatMul', 'Sigmoid'), ('MatMul', 'Tanh'), ('FusedGemm', 'Relu')]
    check_native(model, [_rand(rng, *s) for _, _, s in inputs])


@pytest.mark.native_build
def test_left_alone():
    """No fusion when the product's output has another reader or is a
    program output, when the BN's parameters are not constants, or when
    the activation reads the product as its second input: fuse returns the
    Program itself."""
    rng = numpy.random.RandomState(2)
    node = helper.make_node
    nodes = [node('Conv', ['x', 'w'], ['c']), node('Relu', ['c'], ['r']),
             node('Add', ['c', 'r'], ['y1']),                       # c read twice
             node('MatMul', ['a', 'k'], ['y2']), node('Relu', ['y2'], ['y3']),  # y2 an output
             node('Conv', ['x', 'w'], ['c2']), _bn('c2', 'p', 'y4'),  # p's scale an input
             node('MatMul', ['a', 'k'], ['m']), node('PRelu', ['a2', 'm'], ['y5'])]
    params = _bn_params(rng, 'p', 2)
    inits = {'w': _rand(rng, 2, 3, 1, 1), 'k': _rand(rng, 3, 3),
             **{n: v for n, v in params.items() if n != 'ps'}}
    inputs = [('x', F32, [1, 3, 4, 4]), ('a', F32, [3, 3]), ('ps', F32, [2]),
              ('a2', F32, [3, 3])]
    outputs = [('y1', F32, [1, 2, 4, 4]), ('y2', F32, [3, 3]), ('y3', F32, [3, 3]),
               ('y4', F32, [1, 2, 4, 4]), ('y5', F32, [3, 3])]
    model = make_model(nodes, inputs, outputs, inits)
    program = build_program(model, fuse=False)
    assert fuse(program) is program
    feeds = [_rand(rng, *s) for _, _, s in inputs]
    feeds[2] = feeds[2] + 2.0
    check_native(model, feeds)


CUSTOM = 'org.chainer_compiler'


def _sgd_step_model(nodes, params, operands):
    """A training step's tail: ``params`` (name -> shape) updated in place
    by SGDUpdate with learning rate 'lr'; ``operands`` (name -> shape)
    are the other inputs.  Outputs: the updated parameters."""
    inputs = [(n, F32, list(s)) for n, s in {**params, **operands}.items()]
    outputs = [('new_' + n, F32, list(s)) for n, s in params.items()]
    return make_model(nodes, inputs + [('lr', F32, [])], outputs, custom=True)


def _sgd(param, grad):
    return helper.make_node('SGDUpdate', [param, grad, 'lr'], ['new_' + param], domain=CUSTOM)


def _run_both(model, feed):
    """The native run and the NumPy VM's on copies of ``feed``: (native
    inputs after the run, VM inputs after the run)."""
    program = build_program(model, fuse=False)
    native = [a.copy() for a in feed]
    vm = [a.copy() for a in feed]
    Executor(program, backend='native').run_positional(native)
    Executor(program, backend='numpy').run_positional(vm)
    return native, vm


@pytest.mark.native_build
def test_sgd_update_of_a_gemm_gradient_computes_it_into_the_parameter():
    """W -= lr * gy^T x with no gradient array, in the SGDUpdate's place;
    the bias's update (a ReduceSum gradient) is left alone."""
    rng = numpy.random.RandomState(3)
    node = helper.make_node
    nodes = [node('Gemm', ['gy', 'x'], ['gW'], transA=1, alpha=0.5),
             node('ReduceSum', ['gy', 'axes'], ['gb'], keepdims=0),
             _sgd('b', 'gb'), _sgd('W', 'gW')]
    model = _sgd_step_model(nodes, {'W': (5, 7), 'b': (5,)}, {'gy': (8, 5), 'x': (8, 7)})
    model.graph.initializer.append(numpy_helper.from_array(numpy.array([0], numpy.int64),
                                                           'axes'))
    fused = fuse(build_program(model, fuse=False))
    assert [i.op for i in fused.instructions] == ['ReduceSum', 'SGDUpdate', 'GemmSGDUpdate']
    assert fused.instructions[2].attrs == {'alpha': 0.5, 'transA': 1, 'transB': 0}
    feed = [_rand(rng, 5, 7), _rand(rng, 5), _rand(rng, 8, 5), _rand(rng, 8, 7),
            numpy.array(0.1, F32)]
    native, vm = _run_both(model, feed)
    numpy.testing.assert_allclose(native[0], vm[0], rtol=1e-5, atol=1e-6)
    numpy.testing.assert_allclose(native[0], feed[0] - 0.05 * feed[2].T @ feed[3],
                                  rtol=1e-5, atol=1e-6)
    # The instruction on its own: the VM's kernel and the C agree.
    alone = _sgd_step_model([helper.make_node('GemmSGDUpdate', ['W', 'gy', 'x', 'lr'],
                                              ['new_W'], domain=CUSTOM, transA=1, alpha=0.5)],
                            {'W': (5, 7)}, {'gy': (8, 5), 'x': (8, 7)})
    native, vm = _run_both(alone, [feed[0], feed[2], feed[3], feed[4]])
    numpy.testing.assert_allclose(vm[0], native[0], rtol=1e-5, atol=1e-6)
    for k, original in ((1, feed[2]), (2, feed[3])):  # the operands are only read
        numpy.testing.assert_array_equal(vm[k], original)
        numpy.testing.assert_array_equal(native[k], original)
    numpy.testing.assert_allclose(vm[0], feed[0] - 0.05 * feed[2].T @ feed[3],
                                  rtol=1e-5, atol=1e-6)


@pytest.mark.native_build
def test_sgd_update_is_not_fused_when_it_would_change_what_is_computed():
    """The gradient read twice, B transposed, the parameter an operand of
    its own gradient's product, or an operand (here P through a Reshape
    view) updated in place between the product and the update; the last
    still computes W1's gradient from P before its update."""
    node = helper.make_node
    operands = {'gy': (8, 5), 'x': (8, 7)}
    read_twice = _sgd_step_model([node('Gemm', ['gy', 'x'], ['gW'], transA=1),
                                  _sgd('W', 'gW'), node('Neg', ['gW'], ['neg'])],
                                 {'W': (5, 7)}, operands)
    read_twice.graph.output.append(helper.make_tensor_value_info('neg', 1, [5, 7]))
    transposed = _sgd_step_model([node('Gemm', ['gy', 'xt'], ['gW'], transA=1, transB=1),
                                  _sgd('W', 'gW')], {'W': (5, 7)}, {'gy': (8, 5), 'xt': (7, 8)})
    overwritten = _sgd_step_model([node('Reshape', ['P', 'shape'], ['Pv']),
                                   node('Gemm', ['gy', 'Pv'], ['gW1'], transA=1),
                                   node('Gemm', ['a', 'b'], ['gP']),
                                   _sgd('P', 'gP'), _sgd('W1', 'gW1')],
                                  {'W1': (5, 7), 'P': (7, 8)},
                                  {'gy': (8, 5), 'a': (7, 3), 'b': (3, 8)})
    overwritten.graph.initializer.append(
        numpy_helper.from_array(numpy.array([8, 7], numpy.int64), 'shape'))
    own_operand = _sgd_step_model([node('Gemm', ['W', 'y'], ['gW']), _sgd('W', 'gW')],
                                  {'W': (5, 7)}, {'y': (7, 7)})
    for model in (read_twice, transposed, own_operand, overwritten):
        ops = [i.op for i in fuse(build_program(model, fuse=False)).instructions]
        assert ops.count('GemmSGDUpdate') == (1 if model is overwritten else 0), ops
    rng = numpy.random.RandomState(4)
    feed = [_rand(rng, 5, 7), _rand(rng, 7, 8), _rand(rng, 8, 5), _rand(rng, 7, 3),
            _rand(rng, 3, 8), numpy.array(0.1, F32)]
    native, vm = _run_both(overwritten, feed)
    for k in (0, 1):
        numpy.testing.assert_allclose(native[k], vm[k], rtol=1e-5, atol=1e-6)
    numpy.testing.assert_allclose(native[0], feed[0] - 0.1 * feed[2].T @ feed[1].reshape(8, 7),
                                  rtol=1e-5, atol=1e-6)


@pytest.mark.native_build
def test_batch_norm_gradient_reads_the_forward_statistics():
    """A training BatchNormalization's X and the gradient of it: the forward
    outputs the batch mean and variance and the gradient reads them (the C
    no longer recomputes them); a gradient of another X is left alone.
    Values unchanged."""
    node = helper.make_node
    shape, c = [4, 3, 5, 2], 3
    nodes = [node('BatchNormalization', ['x', 's', 'b', 'm', 'v'], ['y', 'rm', 'rv'],
                  training_mode=1, epsilon=1e-3),
             node('BatchNormalizationGrad', ['x', 's', 'gy'], ['gx', 'gs', 'gb'],
                  domain=CUSTOM, epsilon=1e-3),
             node('BatchNormalizationGrad', ['z', 's', 'gy'], ['gz', 'gsz', 'gbz'],
                  domain=CUSTOM, epsilon=1e-3)]
    model = make_model(
        nodes, [('x', F32, shape), ('z', F32, shape), ('gy', F32, shape)]
        + [(n, F32, [c]) for n in 'sbmv'],
        [('y', F32, shape), ('rm', F32, [c]), ('rv', F32, [c]), ('gx', F32, shape),
         ('gs', F32, [c]), ('gb', F32, [c]), ('gz', F32, shape)], custom=True, opset=15)
    fused = fuse(build_program(model, fuse=False))
    bn, grad, other = fused.instructions
    assert len(bn.outputs) == 5 and grad.inputs[3:] == bn.outputs[3:]
    assert set(bn.outputs[3:]) <= set(grad.frees)
    assert len(other.inputs) == 3
    rng = numpy.random.RandomState(5)
    feed = [_rand(rng, *shape) * 2 + 1, _rand(rng, *shape), _rand(rng, *shape),
            _rand(rng, c) + 1.5, _rand(rng, c), _rand(rng, c), _rand(rng, c) + 1.5]
    check_native(model, feed, onnxruntime_check=False)


@pytest.mark.native_build
def test_silu_becomes_one_swish():
    """x * Sigmoid(x) (SiLU as exporters write it, either operand order) is
    one Swish in the Mul's place; a Sigmoid read elsewhere too, or a Mul of
    another tensor (squeeze-and-excitation's gate), is left alone.  Values
    from tiny to overflowing, infinities and NaN, as the NumPy VM's."""
    node = helper.make_node
    nodes = [node('Sigmoid', ['x'], ['s1']), node('Mul', ['x', 's1'], ['y1']),
             node('Sigmoid', ['x'], ['s2']), node('Mul', ['s2', 'x'], ['y2']),
             node('Sigmoid', ['x'], ['s3']), node('Mul', ['s3', 'g'], ['y3']),
             node('Sigmoid', ['x'], ['s4']), node('Mul', ['x', 's4'], ['y4'])]
    shape = [4, 100]
    model = make_model(nodes, [('x', F32, shape), ('g', F32, shape)],
                       [(y, F32, shape) for y in ('y1', 'y2', 'y3', 'y4', 's4')])
    fused = fuse(build_program(model, fuse=False))
    assert [inst.op for inst in fused.instructions] == [
        'Swish', 'Swish', 'Sigmoid', 'Mul', 'Sigmoid', 'Mul']
    x = numpy.concatenate([numpy.linspace(-120, 120, 390, dtype=F32),
                           F32([0, -0.0, 1e-30, -1e-30, 88.5, -88.5, 87.3, -87.4,
                                numpy.inf, -numpy.inf])])
    x = numpy.concatenate([x, numpy.linspace(-3, 3, 400 - x.size, dtype=F32)]).reshape(shape)
    check_native(model, [x, numpy.ones(shape, F32)], rtol=1e-6, atol=1e-30,
                 onnxruntime_check=False)
    nan = numpy.full(shape, numpy.nan, F32)
    program = build_program(model, fuse=False)
    for y in Executor(program, backend='native').run_positional([nan, nan]):
        assert numpy.isnan(y).all()


@pytest.mark.native_build
def test_hard_swish_is_an_epilogue():
    """HardSwish (MobileNetV3's activation) after a Conv, a depthwise Conv
    and a Gemm is applied as each stores its result."""
    rng = numpy.random.RandomState(7)
    node = helper.make_node
    nodes = [node('Conv', ['x', 'w'], ['c']), node('HardSwish', ['c'], ['h']),
             node('Conv', ['h', 'dw', 'db'], ['d'], group=6, pads=[1, 1, 1, 1]),
             node('HardSwish', ['d'], ['y1']),
             node('Gemm', ['a', 'g'], ['p'], transB=1), node('HardSwish', ['p'], ['y2'])]
    inits = {'w': _rand(rng, 6, 3, 1, 1) * 8, 'dw': _rand(rng, 6, 1, 3, 3) * 4,
             'db': _rand(rng, 6), 'g': _rand(rng, 5, 7) * 4}
    inputs = [('x', F32, [1, 3, 5, 5]), ('a', F32, [4, 7])]
    model = make_model(nodes, inputs, [('y1', F32, [1, 6, 5, 5]), ('y2', F32, [4, 5])], inits,
                       opset=14)
    assert _ops(fuse(build_program(model, fuse=False))) == [
        ('Conv', 'HardSwish'), ('Conv', 'HardSwish'), ('FusedGemm', 'HardSwish')]
    check_native(model, [_rand(rng, *s) for _, _, s in inputs], atol=1e-5)


@pytest.mark.native_build
def test_relu6_is_an_epilogue():
    """Clip from 0 to a constant (ReLU6, as exporters write it: bounds as
    constant inputs) after a Conv, a depthwise Conv and a Gemm is applied as
    each stores its result; a Clip from another lower bound, or to a
    computed upper one, stays an instruction of its own."""
    rng = numpy.random.RandomState(8)
    node = helper.make_node
    nodes = [node('Conv', ['x', 'w'], ['c']), node('Clip', ['c', 'zero', 'six'], ['h']),
             node('Conv', ['h', 'dw'], ['d'], group=6, pads=[1, 1, 1, 1]),
             node('Clip', ['d', 'zero', 'six'], ['y1']),
             node('Gemm', ['a', 'g'], ['p'], transB=1), node('Clip', ['p', 'zero'], ['y2']),
             node('Gemm', ['a', 'g'], ['q'], transB=1), node('Clip', ['q', 'one', 'six'], ['y3']),
             node('Gemm', ['a', 'g'], ['r'], transB=1), node('Clip', ['r', 'zero', 'top'], ['y4'])]
    inits = {'w': _rand(rng, 6, 3, 1, 1) * 8, 'dw': _rand(rng, 6, 1, 3, 3) * 4,
             'g': _rand(rng, 5, 7) * 4, 'zero': F32(0), 'six': F32(6), 'one': F32(-1)}
    inputs = [('x', F32, [1, 3, 5, 5]), ('a', F32, [4, 7]), ('top', F32, [])]
    outputs = [('y1', F32, [1, 6, 5, 5])] + [(y, F32, [4, 5]) for y in ('y2', 'y3', 'y4')]
    model = make_model(nodes, inputs, outputs, inits)
    fused = fuse(build_program(model, fuse=False))
    assert _ops(fused) == [('Conv', 'Clip'), ('Conv', 'Clip'), ('FusedGemm', 'Clip'),
                           ('Gemm', None), ('Clip', None), ('Gemm', None), ('Clip', None)]
    assert [inst.attrs['activation_alpha'] for inst in fused.instructions[:3]] == [6, 6, numpy.inf]
    # C takes only constant bounds: the values without the last Clip.
    model = make_model(nodes[:-2], inputs[:2], outputs[:-1], inits)
    check_native(model, [_rand(rng, *s) for _, _, s in inputs[:2]], atol=1e-5)

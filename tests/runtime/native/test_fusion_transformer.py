"""The native fusions of transformer blocks (runtime/native/fusion.py): GELU
written out as element-wise nodes becomes one Gelu instruction, a Linear
layer's bias Add the MatMul's third input; the float32 Tanh, Erf and Gelu
kernels (polynomials in ccn_activation.c) stay accurate."""
import math

import numpy
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import helper, numpy_helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.executor import Executor
from chainer_compiler.runtime.native import UnsupportedNativeOpsError, emit_c
from chainer_compiler.runtime.native.fusion import fuse

from .helpers import check_native, make_model

F32 = numpy.float32
SHAPE = [2, 3, 8]
node = helper.make_node


def _consts(**values):
    return {name: numpy.array(v, F32) for name, v in values.items()}


#: BERT's (TorchScript) erf form, written as transformers does.
ERF_FORM = [node('Div', ['x', 'sqrt2'], ['d']), node('Erf', ['d'], ['e']),
            node('Add', ['e', 'one'], ['e1']), node('Mul', ['x', 'e1'], ['m']),
            node('Mul', ['m', 'half'], ['y'])]
#: GPT-2's and ALBERT's tanh approximation, as their exports write it.
TANH_FORM = [node('Mul', ['x', 'half'], ['h']), node('Pow', ['x', 'three'], ['p']),
             node('Mul', ['p', 'k'], ['pk']), node('Add', ['x', 'pk'], ['a']),
             node('Mul', ['a', 'c'], ['ac']), node('Tanh', ['ac'], ['t']),
             node('Add', ['t', 'one'], ['t1']), node('Mul', ['h', 't1'], ['y'])]
#: The erf form another way round: half first, by 1/sqrt 2 as a Mul,
#: constants on the left.
ERF_OTHER_ORDER = [node('Mul', ['half', 'x'], ['h']), node('Mul', ['rsqrt2', 'x'], ['d']),
                   node('Erf', ['d'], ['e']), node('Add', ['one', 'e'], ['e1']),
                   node('Mul', ['e1', 'h'], ['y'])]
CONSTS = _consts(sqrt2=math.sqrt(2), rsqrt2=1 / math.sqrt(2), one=1, half=0.5, three=3,
                 k=0.044715, c=math.sqrt(2 / math.pi))


def _model(nodes, outputs=('y',)):
    """x0 -> Neg (so that x is made by an instruction) -> ``nodes``."""
    nodes = [node('Neg', ['x0'], ['x'])] + list(nodes)
    used = {i for n in nodes for i in n.input}
    return make_model(nodes, [('x0', F32, SHAPE)], [(o, F32, SHAPE) for o in outputs],
                      {n: v for n, v in CONSTS.items() if n in used})


def _ops(program):
    return [(i.op, i.attrs.get('approximate')) for i in program.instructions]


@pytest.mark.parametrize('nodes, approximate', [(ERF_FORM, 'none'), (TANH_FORM, 'tanh'),
                                                (ERF_OTHER_ORDER, 'none')])
def test_written_out_gelu_becomes_one_instruction(nodes, approximate):
    fused = fuse(build_program(_model(nodes), fuse=False))
    assert _ops(fused) == [('Neg', None), ('Gelu', approximate)]
    gelu = fused.instructions[1]
    assert gelu.inputs == fused.instructions[0].outputs and gelu.version == 20
    assert gelu.frees == gelu.inputs  # x's last read is the Gelu's


def test_what_is_not_gelu_is_left_alone():
    """A wrong constant (0.6 for 0.5), an intermediate value that is also
    an output, or a second variable input: the nodes stay as they are."""
    wrong = [n if n.output != ['y'] else node('Mul', ['m', 'c6'], ['y']) for n in ERF_FORM]
    two_inputs = [n if n.output != ['m'] else node('Mul', ['x0', 'e1'], ['m'])
                  for n in ERF_FORM]
    models = [_model(wrong), _model(ERF_FORM, outputs=('y', 'e')), _model(two_inputs)]
    models[0].graph.initializer.append(numpy_helper.from_array(numpy.array(0.6, F32), 'c6'))
    for model in models:
        program = build_program(model, fuse=False)
        assert 'Gelu' not in [op for op, _ in _ops(fuse(program))]


@pytest.mark.native_build
def test_fused_gelu_computes_what_the_nodes_do():
    """Both forms side by side, the tanh one with x read by a Neg after
    its last read inside the form (x's free moves to the Gelu): native
    equals the VM running the nodes."""
    erf = [helper.make_node(n.op_type, list(n.input), ['erf_' + o for o in n.output])
           for n in ERF_FORM]
    for n in erf:  # its own values, still reading x and the constants
        n.input[:] = [i if i == 'x' or i in CONSTS else 'erf_' + i for i in n.input]
    tanh = list(TANH_FORM[:4]) + [node('Neg', ['x'], ['n'])] + list(TANH_FORM[4:])
    model = _model(erf + tanh, outputs=('erf_y', 'n', 'y'))
    fused = fuse(build_program(model, fuse=False))
    assert _ops(fused) == [('Neg', None), ('Gelu', 'none'), ('Neg', None), ('Gelu', 'tanh')]
    x = fused.instructions[0].outputs[0]
    assert x not in fused.instructions[2].frees and x in fused.instructions[3].frees
    check_native(model, [numpy.linspace(-6, 6, math.prod(SHAPE), dtype=F32).reshape(SHAPE)])


@pytest.mark.native_build
@pytest.mark.filterwarnings('ignore:invalid value')  # GELU of -inf: -inf * 0
def test_float32_tanh_erf_gelu_are_accurate():
    """The vectorised polynomials against float64 math: within 1e-6 of
    the value (erf within 8 float32 ulp), NaN stays NaN, +-inf saturate."""
    x = numpy.concatenate([numpy.linspace(-12, 12, 4801), [0.0, -0.0, 1e-30, -1e-8, 3e-4,
                                                           numpy.inf, -numpy.inf, numpy.nan]])
    x = x.astype(F32)
    nodes = [node('Tanh', ['x'], ['t']), node('Erf', ['x'], ['e']),
             node('Gelu', ['x'], ['g']), node('Gelu', ['x'], ['gt'], approximate='tanh')]
    model = make_model(nodes, [('x', F32, [x.size])],
                       [(o, F32, [x.size]) for o in ('t', 'e', 'g', 'gt')], opset=20)
    tanh, erf, gelu, gelu_tanh = check_native(model, [x])
    wide = x.astype(numpy.float64)
    exact_erf = numpy.array([math.erf(v) for v in wide])
    c = math.sqrt(2 / math.pi)
    finite = numpy.isfinite(wide)
    for got, want, atol in (
            (tanh, numpy.tanh(wide), 0),
            (erf, exact_erf, 0),
            (gelu, 0.5 * wide * (1 + numpy.array([math.erf(v / math.sqrt(2)) for v in wide])),
             1e-6),
            (gelu_tanh, 0.5 * wide * (1 + numpy.tanh(c * (wide + 0.044715 * wide ** 3))),
             1e-6)):
        numpy.testing.assert_allclose(got[finite], want[finite], rtol=1e-6, atol=atol)
        assert numpy.isnan(got[-1])
    assert tanh[-3:-1].tolist() == [1, -1] and erf[-3:-1].tolist() == [1, -1]
    assert tanh[x.size - 8:x.size - 6].tolist() == [0, 0]  # +-0
    assert tanh[x.size - 6] == F32(1e-30)  # tiny values are their own tanh


def _linear_model(a_shape, bias, then=(), b_first=False, weight='w'):
    """y = (a @ w + bias) followed by the nodes ``then`` (reading 'h')."""
    add = node('Add', ['bias', 'm'] if b_first else ['m', 'bias'], ['h' if then else 'y'])
    out = list(numpy.broadcast_shapes(tuple(a_shape[:-1]) + (4,), numpy.shape(bias)))
    inits = {'bias': numpy.asarray(bias, F32), 'w': numpy.linspace(-1, 1, 24, dtype=F32)
             .reshape(6, 4)}
    inputs = [('a', F32, list(a_shape))] + ([('wi', F32, [6, 4])] if weight == 'wi' else [])
    return make_model([node('MatMul', ['a', weight], ['m']), add] + list(then), inputs,
                      [('y', F32, out)], inits)


@pytest.mark.native_build
def test_linear_bias_becomes_the_matmuls_third_input():
    """A (N,) and a (1, 1, N) bias, either side of the Add, many rows (the
    packed product) and few (dot products), with a Relu after: one MatMul
    each, equal to the VM's."""
    rng = numpy.random.RandomState(5)
    bias = numpy.arange(4, dtype=F32) - 1.5
    cases = [((2, 5, 6), bias, (), False), ((1, 2, 6), bias.reshape(1, 1, 4), (), True),
             ((3, 6), bias, (node('Relu', ['h'], ['y']),), False)]
    for shape, b, then, b_first in cases:
        model = _linear_model(shape, b, then, b_first)
        fused = fuse(build_program(model, fuse=False))
        assert [(i.op, len(i.inputs), i.attrs.get('activation')) for i in fused.instructions] \
            == [('MatMul', 3, 'Relu' if then else None)]
        check_native(model, [rng.uniform(-1, 1, shape).astype(F32)])


def test_what_is_not_a_linear_bias_is_left_alone():
    """A bias varying along the rows, one of more dims than the product
    (it broadcasts the result up), or a B that is not a constant."""
    models = [_linear_model((5, 6), numpy.ones((5, 4))),
              _linear_model((5, 6), numpy.ones((1, 1, 4))),
              _linear_model((5, 6), numpy.ones(4), weight='wi')]
    for model in models:
        fused = fuse(build_program(model, fuse=False))
        assert [i.op for i in fused.instructions] == ['MatMul', 'Add']


def _gemm_reshape_model(then, outputs=('y',)):
    """GPT-2's MLP as the dynamo exporter writes it: a Gemm by constant
    weights, a Reshape of its product, then ``then`` (nodes from x)."""
    weight = numpy.random.RandomState(6).uniform(-1, 1, (6, 8)).astype(F32)
    nodes = [node('Gemm', ['rows', 'w'], ['g']), node('Reshape', ['g', 'shape'], ['x'])] + then
    inits = {'w': weight, 'shape': numpy.array([1, 5, 8], numpy.int64)}
    inits.update((n, v) for n, v in CONSTS.items() if any(n in m.input for m in then))
    return make_model(nodes, [('rows', F32, [5, 6])], [(o, F32, [1, 5, 8]) for o in outputs],
                      inits)


def test_activation_fuses_into_the_product_through_a_reshape():
    """GELU (the native backend) and Relu (the VM too) after a Reshape of a
    Gemm's product become the Gemm's epilogue; the Reshape then gives the
    activated values.  Not when the Reshape's output is read elsewhere."""
    fused = fuse(build_program(_gemm_reshape_model(TANH_FORM), fuse=False))
    assert [(i.op, i.attrs.get('activation')) for i in fused.instructions] == [
        ('FusedGemm', 'Gelu'), ('Reshape', None)]
    assert fused.instructions[0].attrs['activation_alpha'] == 1.0  # the tanh form
    relu = _gemm_reshape_model([node('Relu', ['x'], ['y'])])
    a = numpy.random.RandomState(7).uniform(-1, 1, (5, 6)).astype(F32)
    vm = build_program(relu)
    assert [i.op for i in vm.instructions] == ['FusedGemm', 'Reshape']
    want = Executor(build_program(relu, fuse=False)).run_positional([a])
    numpy.testing.assert_allclose(Executor(vm).run_positional([a])[0], want[0], rtol=1e-6)
    shared = _gemm_reshape_model([node('Relu', ['x'], ['y'])], outputs=('y', 'x'))
    assert [i.op for i in build_program(shared).instructions] == ['Gemm', 'Reshape', 'Relu']


@pytest.mark.native_build
def test_gelu_through_a_reshape_computes_what_the_nodes_do():
    model = _gemm_reshape_model(TANH_FORM)
    check_native(model, [numpy.random.RandomState(8).uniform(-3, 3, (5, 6)).astype(F32)])


LOWEST = numpy.finfo(F32).min  # what exporters fill a padding mask with


def _attention(tag, batch, M, N, D=8, scale=None, mask=None, softmax_axis=-1):
    """Nodes, inputs and output of one attention over q (batch + (M, D)),
    kt (batch + (D, N)) and v (batch + (N, D)), its names prefixed by
    ``tag``: MatMul, then ``scale`` ((op, constant name)), the Add of a
    ``mask`` input of that shape, Softmax, MatMul."""
    def name(n):
        return tag + n
    nodes, s = [node('MatMul', [name('q'), name('kt')], [name('s')])], name('s')
    if scale is not None:
        nodes.append(node(scale[0], [s, scale[1]], [name('scaled')]))
        s = name('scaled')
    inputs = [(name('q'), F32, batch + [M, D]), (name('kt'), F32, batch + [D, N]),
              (name('v'), F32, batch + [N, D])]
    if mask is not None:
        nodes.append(node('Add', [name('mask'), s], [name('masked')]))
        inputs.append((name('mask'), F32, mask))
        s = name('masked')
    nodes += [node('Softmax', [s], [name('p')], axis=softmax_axis),
              node('MatMul', [name('p'), name('v')], [name('y')])]
    return nodes, inputs, [(name('y'), F32, batch + [M, D])]


def _attention_model(*attentions, outputs=()):
    nodes, inputs, outs = [], [], []
    for n, i, o in attentions:
        nodes, inputs, outs = nodes + n, inputs + i, outs + o
    return make_model(nodes, inputs, outs + list(outputs),
                      _consts(eight=8, three=3, half=0.5, pair=[0.5, 0.5], negative=-0.75))


def _attention_inputs(model, seed=11):
    """Inputs of ``model``: masks of 0 and float32's lowest (a quarter
    masked, never a whole row), the rest uniform."""
    rng, arrays = numpy.random.RandomState(seed), []
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if i.name.endswith('mask'):
            masked = rng.uniform(size=shape) < 0.25
            masked[..., 0] = False
            arrays.append(numpy.where(masked, LOWEST, 0).astype(F32))
        else:
            arrays.append(rng.uniform(-2, 2, shape).astype(F32))
    return arrays


def _fused_ops(model):
    return [(i.op, i.attrs.get('scale')) for i in
            fuse(build_program(model, fuse=False)).instructions]


def test_attention_becomes_one_instruction():
    """BERT's MatMul, Div by sqrt(64), Add of the padding mask, Softmax and
    MatMul, and Whisper's and DeiT's bare MatMul, Softmax, MatMul become
    one FusedAttention each; on the VM it gives the nodes' bits."""
    model = _attention_model(
        _attention('bert_', [1, 2], 5, 6, scale=('Div', 'eight'), mask=[1, 1, 1, 6]),
        _attention('whisper_', [3], 7, 4))
    assert _fused_ops(model) == [('FusedAttention', 0.125), ('FusedAttention', 1.0)]
    inputs = _attention_inputs(model)
    want = Executor(build_program(model, fuse=False)).run_positional(inputs)
    got = Executor(fuse(build_program(model, fuse=False))).run_positional(inputs)
    for g, w in zip(got, want):
        assert numpy.array_equal(g, w)


@given(st.data())
def test_attentions_of_any_shape_fuse_and_keep_their_values(data):
    """Any leading dims, sizes, scale and mask shape the rule takes: one
    FusedAttention, which on the VM gives the nodes' bits (its inputs in
    q, kt, v, mask order; nothing freed before it reads it)."""
    batch = data.draw(st.lists(st.integers(1, 3), max_size=2))
    M, N, D = (data.draw(st.integers(1, 6)) for _ in range(3))
    scale = data.draw(st.sampled_from([None, ('Mul', 'half'), ('Div', 'eight')]))
    full = batch + [M, N]
    keep = data.draw(st.lists(st.booleans(), min_size=len(full) - 1, max_size=len(full) - 1))
    mask = data.draw(st.one_of(st.none(), st.integers(1, len(full)).map(
        lambda rank: [d if k else 1 for d, k in zip(full[:-1], keep)][len(full) - rank:] + [N])))
    model = _attention_model(_attention('a', batch, M, N, D=D, scale=scale, mask=mask))
    program = build_program(model, fuse=False)
    fused = fuse(program)
    assert [(i.op, i.inputs) for i in fused.instructions] == [(
        'FusedAttention', tuple(range(4 if mask else 3)))]
    arrays = _attention_inputs(model, seed=M * N * D)
    got, want = (Executor(p).run_positional(arrays)[0] for p in (fused, program))
    assert numpy.array_equal(got, want)


def test_operands_read_between_the_nodes_live_until_the_fused_instruction():
    """q read last by a Neg between the scores and the Softmax, kt by one
    after the attention: q's free moves to the FusedAttention (which now
    reads it later), kt's stays with its last reader; the VM running the
    fused Program frees nothing early and gives the nodes' bits."""
    nodes, inputs, outputs = _attention('a', [2], 3, 4, mask=[2, 1, 4])
    nodes.insert(1, node('Neg', ['aq'], ['nq']))
    nodes.append(node('Neg', ['akt'], ['nkt']))
    model = make_model(nodes, inputs, outputs + [('nq', F32, [2, 3, 8]),
                                                 ('nkt', F32, [2, 8, 4])])
    program = build_program(model, fuse=False)
    fused = fuse(program)
    ops = [i.op for i in fused.instructions]
    assert ops == ['Neg', 'FusedAttention', 'Neg']
    q, kt = fused.instructions[1].inputs[:2]
    assert q in fused.instructions[1].frees and q not in fused.instructions[0].frees
    assert kt in fused.instructions[2].frees and kt not in fused.instructions[1].frees
    arrays = _attention_inputs(model)
    for got, want in zip(Executor(fused).run_positional(arrays),
                         Executor(program).run_positional(arrays)):
        assert numpy.array_equal(got, want)


def test_what_is_not_an_attention_is_left_alone():
    """A Div by 3 (x / 3 is not x * (1 / 3)), a scale of two values, a
    Softmax over another axis, scores that are also an output, a mask
    broadcast along the keys, and one key more than ATTENTION_MAX_KEYS
    (the edge itself fuses)."""
    from chainer_compiler.runtime.native.fusion import ATTENTION_MAX_KEYS
    keys = ATTENTION_MAX_KEYS
    for model in [_attention_model(_attention('a', [2], 3, 4, scale=('Div', 'three'))),
                  _attention_model(_attention('a', [2], 3, 2, scale=('Mul', 'pair'))),
                  _attention_model(_attention('a', [2], 3, 4, softmax_axis=1)),
                  _attention_model(_attention('a', [2], 3, 4), outputs=[('as', F32, [2, 3, 4])]),
                  _attention_model(_attention('a', [2], 3, 4, mask=[2, 3, 1])),
                  _attention_model(_attention('a', [], 2, keys + 1, D=1))]:
        assert 'FusedAttention' not in [op for op, _ in _fused_ops(model)]
    edge = _attention_model(_attention('a', [], 2, keys, D=1, scale=('Mul', 'half')))
    assert _fused_ops(edge) == [('FusedAttention', 0.5)]


def test_fused_attention_refuses_what_its_kernel_cannot_run(tmp_path):
    """A FusedAttention given in a model (or a Program file), not made by
    the fusion: more keys than ATTENTION_MAX_KEYS (its scores would not
    fit the kernel's block), a mask along the queries only, operands whose
    sizes do not chain: each refused by name before any C is written."""
    def model(q, kt, v, mask=None):
        names = ['q', 'kt', 'v'] + (['mask'] if mask else [])
        inputs = [(n, F32, s) for n, s in zip(names, (q, kt, v, mask))]
        return make_model([node('FusedAttention', names, ['y'], domain='org.chainer_compiler')],
                          inputs, [('y', F32, q[:-1] + v[-1:])], custom=True)
    for bad, reason in [(model([2, 4], [4, 4097], [4097, 3]), '4097 keys, more than the 4096'),
                        (model([2, 4], [4, 5], [5, 3], [2, 1]), 'mask \\[2, 1\\]'),
                        (model([2, 4], [3, 5], [5, 3]), 'q \\[2, 4\\], kt \\[3, 5\\]')]:
        with pytest.raises(UnsupportedNativeOpsError, match='FusedAttention.*' + reason):
            emit_c(build_program(bad), tmp_path)
    assert not list(tmp_path.iterdir())


#: Batched products at BLOCKED_PRODUCT_MACS (2^22: 256 x 64 by 64 x 256,
#: with a Relu), the blocked GEMM's one by one, and just below (255 rows),
#: ccn_matmul_batched's tiles.
_LARGE_HEADS = ([node('MatMul', ['big_a', 'big_b'], ['big']), node('Relu', ['big'], ['big_y']),
                 node('MatMul', ['below_a', 'big_b'], ['below_y'])],
                [('big_a', F32, [2, 256, 64]), ('big_b', F32, [2, 64, 256]),
                 ('below_a', F32, [2, 255, 64])],
                [('big_y', F32, [2, 256, 256]), ('below_y', F32, [2, 255, 256])])


def test_large_batched_products_go_to_the_blocked_gemm(tmp_path):
    model = make_model(*_LARGE_HEADS)
    emit_c(build_program(model), tmp_path)
    text = (tmp_path / 'model.c').read_text()
    assert text.count('ccn_gemm_set(') == 1 and 't < 2; t++' in text
    assert text.count('ccn_matmul_batched(') == 1


@pytest.mark.native_build
def test_fused_attention_computes_what_the_nodes_do():
    """Odd sizes and an odd depth; heads and a batch with a per-sample
    padding mask of float32's lowest; a mask per query row; a rank-2
    attention of 2048 keys, whose 70 query rows are three blocks of the
    kernel (32, 32, 6); heads 16 deep (the product by v on the batched
    tiles: CCN_ATTENTION_TILED_E), masked, their 230 rows of 300 keys two
    blocks (216, 14), and 16 deep over 2049 keys (the blocked GEMM again),
    scaled without a mask (the scale inside the Softmax's passes); a
    negative scale (a pass of its own); and _LARGE_HEADS in the same build:
    native equals the VM running the nodes, and onnxruntime."""
    model = _attention_model(
        _attention('a', [2, 3], 37, 53, scale=('Div', 'eight'), mask=[2, 1, 1, 53]),
        _attention('b', [3], 5, 9, scale=('Mul', 'half'), mask=[3, 5, 9], D=7),
        _attention('c', [], 70, 2048, D=4, mask=[2048]),
        _attention('d', [2], 230, 300, D=16, scale=('Mul', 'half'), mask=[2, 1, 300]),
        _attention('e', [], 9, 2049, D=16, scale=('Mul', 'half')),
        _attention('f', [2], 5, 7, D=3, scale=('Mul', 'negative')), _LARGE_HEADS)
    assert [op for op, _ in _fused_ops(model)] == ['FusedAttention'] * 6 + [
        'MatMul', 'MatMul']
    check_native(model, _attention_inputs(model), rtol=1e-4, atol=1e-4)

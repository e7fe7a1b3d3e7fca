"""The products by a constant B in strips (ccn_gemm_strips_set): the bias
row enters at the first store of each tile, with no pass writing it into C
first; and Gelu, both forms, as the epilogue of MatMul and Gemm
(CCN_ACT_GELU), also when fusion.py finds it written out after the
product (BERT's, GPT-2's MLP).  Values are the NumPy VM's."""
import numpy
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native.emit_c import emit_c
from chainer_compiler.runtime.native.fusion import fuse

from .helpers import check_native, make_model
from .test_fusion_transformer import CONSTS, ERF_FORM

F32 = numpy.float32
node = helper.make_node


def _code(model, tmp_path):
    result = emit_c(build_program(model), tmp_path, 'model')
    with open(next(p for p in result.files if p.endswith('/model.c'))) as f:
        return f.read()


def _bias_model(big=True):
    """Products with a bias row, none, or another bias; ``big`` adds one
    split between threads."""
    rng = numpy.random.RandomState(7)
    nodes = [
        # 26 rows: three whole 8-row tiles read in place and 2 packed; 70
        # columns: whole and part tiles; 300 deep: two depth slices.
        node('MatMul', ['x', 'w'], ['p']), node('Add', ['p', 'b'], ['y1']),
        # Large enough for two threads, split by columns: the bias from
        # each part's first column.
        node('MatMul', ['big', 'wb'], ['q']), node('Add', ['q', 'bb'], ['y2']),
        # alpha: A packed, scaled.
        node('Gemm', ['a', 'g', 'gb'], ['y3'], alpha=0.5, transB=1),
        node('Gemm', ['a', 'g2'], ['y4']),
        # Not a row of N: through the init pass as before.
        node('Gemm', ['a', 'g', 'gm'], ['y5'], transB=1),
        node('Gemm', ['a', 'g', 'gb'], ['y6'], beta=2.0, transB=1)]
    inits = {'w': rng.standard_normal((300, 70)), 'b': rng.standard_normal(70),
             'wb': rng.standard_normal((300, 256)), 'bb': rng.standard_normal(256),
             'g': rng.standard_normal((33, 64)), 'gb': rng.standard_normal(33),
             'g2': rng.standard_normal((64, 33)), 'gm': rng.standard_normal((40, 33))}
    inputs = [('x', F32, [2, 13, 300]), ('big', F32, [64, 300]), ('a', F32, [40, 64])]
    outputs = [('y1', F32, [2, 13, 70]), ('y2', F32, [64, 256])] + [
        ('y%d' % i, F32, [40, 33]) for i in range(3, 7)]
    if not big:
        nodes, inputs, outputs = nodes[:2] + nodes[4:], inputs[::2], outputs[:1] + outputs[2:]
        inits = {k: v for k, v in inits.items() if k not in ('wb', 'bb')}
    model = make_model(nodes, inputs, outputs, {k: v.astype(F32) for k, v in inits.items()})
    return model, [rng.standard_normal(s).astype(F32) for _, _, s in inputs]


def test_the_bias_row_enters_at_the_first_store(tmp_path):
    code = _code(_bias_model(big=False)[0], tmp_path)
    # A MatMul, two Gemms with a bias row or none; y5's and y6's bias is
    # not one row of N.
    assert code.count('ccn_gemm_strips_set(') == 3
    assert code.count('ccn_gemm_init(') == 2


@pytest.mark.native_build
def test_products_with_bias_equal_numpy():
    model, values = _bias_model()
    check_native(model, values, rtol=1e-4, atol=1e-4)


def _gelu_model(approximate):
    rng = numpy.random.RandomState(3)
    nodes = [node('MatMul', ['x', 'w'], ['p']), node('Add', ['p', 'b'], ['pb']),
             node('Gelu', ['pb'], ['y1'], approximate=approximate),
             node('Gemm', ['a', 'g'], ['ag']),
             node('Gelu', ['ag'], ['y2'], approximate=approximate),
             # BERT's erf form written out after a Linear layer.
             node('MatMul', ['y1', 'w2'], ['q']), node('Add', ['q', 'b2'], ['qb'])]
    nodes += [helper.make_node(n.op_type, [{'x': 'qb', 'y': 'y3'}.get(i, i) for i in n.input],
                               [{'y': 'y3'}.get(o, o) for o in n.output]) for n in ERF_FORM]
    inits = {'w': rng.standard_normal((24, 40)), 'b': rng.standard_normal(40),
             'g': rng.standard_normal((16, 9)), 'w2': rng.standard_normal((40, 20)),
             'b2': rng.standard_normal(20)}
    inits = {k: v.astype(F32) for k, v in inits.items()}
    inits.update((k, CONSTS[k]) for k in ('sqrt2', 'one', 'half'))
    inputs = [('x', F32, [12, 24]), ('a', F32, [10, 16])]
    outputs = [('y1', F32, [12, 40]), ('y2', F32, [10, 9]), ('y3', F32, [12, 20])]
    return make_model(nodes, inputs, outputs, inits, opset=20), inputs


@pytest.mark.parametrize('approximate', ['none', 'tanh'])
def test_gelu_is_the_products_epilogue_natively_not_on_the_vm(approximate):
    model, _ = _gelu_model(approximate)
    native = fuse(build_program(model, fuse=False))
    assert [(i.op, i.attrs.get('activation'), i.attrs.get('activation_alpha'))
            for i in native.instructions] == [
        ('MatMul', 'Gelu', float(approximate == 'tanh')),
        ('FusedGemm', 'Gelu', float(approximate == 'tanh')), ('MatMul', 'Gelu', 0.0)]
    # The VM's products apply no Gelu: it stays an instruction of its own.
    vm = fuse(build_program(model, fuse=False), 'vm')
    assert sum(i.op == 'Gelu' for i in vm.instructions) == 2


@pytest.mark.native_build
@pytest.mark.parametrize('approximate', ['none', 'tanh'])
def test_gelu_epilogue_equals_the_vm(approximate):
    model, inputs = _gelu_model(approximate)
    rng = numpy.random.RandomState(5)
    values = [rng.standard_normal(s).astype(F32) for _, _, s in inputs]
    check_native(model, values, rtol=1e-4, atol=1e-4, onnxruntime_check=False)


@pytest.mark.native_build
def test_gelu_after_each_kind_of_convolution_equals_the_vm():
    # Conv records say nothing of Gelu: every convolution path's epilogue
    # (im2col, depthwise, 1x1, a late narrow layer) takes it as a product's.
    rng = numpy.random.RandomState(2)
    nodes = [node('Conv', ['x', 'w1', 'b1'], ['c1'], pads=[1, 1, 1, 1]),
             node('Gelu', ['c1'], ['h1']),
             node('Conv', ['h1', 'wd'], ['c2'], pads=[1, 1, 1, 1], group=8),
             node('Gelu', ['c2'], ['h2'], approximate='tanh'),
             node('Conv', ['h2', 'w3'], ['c3'], strides=[2, 2]), node('Gelu', ['c3'], ['y'])]
    inits = {'w1': rng.standard_normal((8, 3, 3, 3)), 'b1': rng.standard_normal(8),
             'wd': rng.standard_normal((8, 1, 3, 3)), 'w3': rng.standard_normal((48, 8, 1, 1))}
    model = make_model(nodes, [('x', F32, [1, 3, 12, 12])], [('y', F32, [1, 48, 6, 6])],
                       {k: v.astype(F32) for k, v in inits.items()}, opset=20)
    fused = fuse(build_program(model, fuse=False))
    assert [(i.op, i.attrs.get('activation')) for i in fused.instructions] == [('Conv', 'Gelu')] * 3
    check_native(model, [rng.standard_normal((1, 3, 12, 12)).astype(F32)], rtol=1e-4, atol=1e-4,
                 onnxruntime_check=False)

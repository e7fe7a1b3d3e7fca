"""Swish (SiLU, ``x * Sigmoid(x)`` as exporters write it) as the epilogue
of the product before it (runtime/native/fusion.py, CCN_ACT_SWISH in
ccn_gemm.c): the im2col, 1x1 and depthwise convolutions, Gemm and a
batched MatMul apply it as they store, and the values are the VM's."""
import numpy
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native.fusion import fuse

from .helpers import check_native, make_model

F32 = numpy.float32


def _swish(x, y):
    return [helper.make_node('Sigmoid', [x], [x + '_s']),
            helper.make_node('Mul', [x, x + '_s'], [y])]


@pytest.mark.native_build
def test_swish_is_the_products_epilogue():
    rng = numpy.random.RandomState(4)
    node = helper.make_node
    nodes = [node('Conv', ['x', 'w1', 'b1'], ['c1'], pads=[1, 1, 1, 1]), *_swish('c1', 'h1'),
             node('Conv', ['h1', 'wd', 'bd'], ['c2'], pads=[1, 1, 1, 1], group=8),
             *_swish('c2', 'h2'),
             node('Conv', ['h2', 'w3'], ['c3']), *_swish('c3', 'y1'),
             node('Gemm', ['a', 'g', 'gb'], ['m']), *_swish('m', 'y2'),
             node('MatMul', ['q', 'k'], ['p']), *_swish('p', 'y3'),
             # Read by the Swish and as an output: the Conv stays plain.
             node('Conv', ['x', 'w1'], ['c4']), *_swish('c4', 'y4')]
    inits = {'w1': rng.standard_normal((8, 3, 3, 3)).astype(F32),
             'b1': rng.standard_normal(8).astype(F32),
             'wd': rng.standard_normal((8, 1, 3, 3)).astype(F32),
             'bd': rng.standard_normal(8).astype(F32),
             'w3': rng.standard_normal((5, 8, 1, 1)).astype(F32),
             'g': rng.standard_normal((7, 5)).astype(F32),
             'gb': rng.standard_normal(5).astype(F32)}
    inputs = [('x', F32, [1, 3, 10, 10]), ('a', F32, [3, 7]), ('q', F32, [2, 30, 9]),
              ('k', F32, [2, 9, 20])]
    outputs = [('y1', F32, [1, 5, 10, 10]), ('y2', F32, [3, 5]), ('y3', F32, [2, 30, 20]),
               ('c4', F32, [1, 8, 8, 8]), ('y4', F32, [1, 8, 8, 8])]
    model = make_model(nodes, inputs, outputs, inits)
    fused = fuse(build_program(model))
    assert [(inst.op, inst.attrs.get('activation')) for inst in fused.instructions] == [
        ('Conv', 'Swish'), ('Conv', 'Swish'), ('Conv', 'Swish'), ('FusedGemm', 'Swish'),
        ('MatMul', 'Swish'), ('Conv', None), ('Swish', None)]
    # Scaled so that some values pass the exponential's clamps (|x| > 88).
    values = [rng.standard_normal(s).astype(F32) * 4 for _, _, s in inputs]
    values[0][0, 0, :2] = [[-1e3] * 10, [1e3] * 10]
    check_native(model, values, rtol=1e-4, atol=1e-4)

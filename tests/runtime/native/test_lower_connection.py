"""Gemm, MatMul and Conv on the native backend: the blocked GEMM's edge
tiles and K blocks, few rows by a constant B's strips in one pass, a
run-time B's dot-product path for few rows, broadcast batched
MatMul (its own tiles for attention heads), convolutions sharing one
product between several images, and constant operands laid out at emit
time (panels of A, strips of B)."""
import numpy
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native import UnsupportedNativeOpsError, emit_c
from chainer_compiler.runtime.native.gemm_layout import (
    PANEL_DEPTH,
    PANEL_ROWS,
    STRIP_COLS,
    pack_panels,
)

from .helpers import check_native, make_model, uniform

F32 = numpy.float32


@pytest.mark.native_build
def test_gemm_variants():
    """Packed GEMM (M >= 4, several K blocks of 256, N not a multiple of the
    tile), one to three rows by a constant B's strips (a slice of odd
    depth, a part last strip, a fused ReLU), transA/transB, alpha/beta and
    every bias broadcast, a run-time transposed B (dot products of four, and
    of the 1, 2 or 3 rows left, by four rows of B, over a depth with a
    partial vector; for many rows, B transposed into scratch)."""
    rng = numpy.random.RandomState(0)
    node = helper.make_node
    nodes = [
        node('Gemm', ['A', 'W1', 'c1'], ['y1'], alpha=0.5, beta=2.0),          # 37x300 @ 300x45
        node('Gemm', ['At', 'W1t', 'c2'], ['y2'], transA=1, transB=1, alpha=0.75),  # bias (37, 1)
        node('Gemm', ['a1', 'W1', 'c3'], ['y3'], alpha=1.5, beta=0.5),         # 1 row: strips
        node('Gemm', ['a3', 'W1t'], ['y4'], transB=1),                         # 3 rows, no bias
        node('Gemm', ['a1t', 'W1', 'c4'], ['y5'], transA=1),                   # (300, 1)^T
        node('Gemm', ['A', 'B'], ['y6'], transB=1),                            # B at run time
        node('Gemm', ['a6', 'B'], ['y7'], transB=1),                           # 4 + 2 rows
        node('Gemm', ['a80', 'B'], ['y8'], transB=1),                          # B transposed
        node('Gemm', ['a2', 'W2', 'c5'], ['g9']), node('Relu', ['g9'], ['y9']),  # 2x257 @ 257x33
    ]
    inits = {'W1': uniform(rng, 300, 45), 'W1t': uniform(rng, 45, 300), 'c1': uniform(rng, 45),
             'c2': uniform(rng, 37, 1), 'c3': uniform(rng, 1), 'c4': uniform(rng, 1, 45),
             'W2': uniform(rng, 257, 33), 'c5': uniform(rng, 33)}
    inputs = [('A', F32, [37, 300]), ('At', F32, [300, 37]), ('a1', F32, [1, 300]),
              ('a3', F32, [3, 300]), ('a1t', F32, [300, 1]), ('B', F32, [45, 300]),
              ('a6', F32, [6, 300]), ('a80', F32, [80, 300]), ('a2', F32, [2, 257])]
    outputs = [('y1', F32, [37, 45]), ('y2', F32, [37, 45]), ('y3', F32, [1, 45]),
               ('y4', F32, [3, 45]), ('y5', F32, [1, 45]), ('y6', F32, [37, 45]),
               ('y7', F32, [6, 45]), ('y8', F32, [80, 45]), ('y9', F32, [2, 33])]
    model = make_model(nodes, inputs, outputs, inits)
    check_native(model, [uniform(rng, *s) for _, _, s in inputs], rtol=1e-4, atol=1e-4)


@pytest.mark.native_build
def test_gemm_shallow_products():
    """Products of depth 16 or less over 128 columns or more (a weight
    gradient over a small batch) stream C once: rows in groups of four and
    the rest, columns in blocks of four vectors, single vectors and the last
    few, adding to a bias or setting C, A transposed as in a gradient."""
    rng = numpy.random.RandomState(2)
    node = helper.make_node
    nodes = [node('Gemm', ['gT', 'x8', 'c'], ['y1'], transA=1, alpha=-0.5),  # 37 rows, depth 8
             node('MatMul', ['a6', 'x16'], ['y2'])]                         # 6 rows, depth 16
    inputs = [('gT', F32, [8, 37]), ('x8', F32, [8, 300]), ('c', F32, [300]),
              ('a6', F32, [6, 16]), ('x16', F32, [16, 140])]
    model = make_model(nodes, inputs, [('y1', F32, [37, 300]), ('y2', F32, [6, 140])], {})
    check_native(model, [uniform(rng, *s) for _, _, s in inputs], rtol=1e-5, atol=1e-5)


@pytest.mark.native_build
def test_gemm_large_product():
    """Products big enough for the OpenMP split, of the rows (and several MC
    blocks) or of the columns (few rows, B's strips from an offset); B
    constant (in strips) or given at run time."""
    rng = numpy.random.RandomState(1)
    node = helper.make_node
    nodes = [node('Gemm', ['A', 'W', 'c'], ['y']), node('Gemm', ['a8', 'V'], ['z'], transB=1),
             node('MatMul', ['a8', 'B'], ['u']), node('MatMul', ['s', 'S'], ['v'])]
    inputs = [('A', F32, [200, 130]), ('a8', F32, [8, 300]), ('B', F32, [300, 1000]),
              ('s', F32, [600, 8]), ('S', F32, [8, 1000])]                  # shallow
    model = make_model(nodes, inputs,
                       [('y', F32, [200, 150]), ('z', F32, [8, 1000]), ('u', F32, [8, 1000]),
                        ('v', F32, [600, 1000])],
                       {'W': uniform(rng, 130, 150), 'c': uniform(rng, 150),
                        'V': uniform(rng, 1000, 300)})
    check_native(model, [uniform(rng, *s) for _, _, s in inputs], atol=1e-4)


@pytest.mark.native_build
def test_matmul_broadcasting():
    """numpy.matmul rules: both operands batched (attention scores),
    broadcast batch dims on either side, 1-D operands, a constant 2-D B
    folded into one product, few rows with a constant B, K of 0."""
    rng = numpy.random.RandomState(2)
    node = helper.make_node
    nodes = [node('MatMul', ['q', 'k'], ['s']),        # (2,3,5,8) x (2,3,8,5)
             node('MatMul', ['p', 'r'], ['t']),        # (2,1,4,6) x (3,6,7)
             node('MatMul', ['v', 'r'], ['u']),        # (6,) x (3,6,7)
             node('MatMul', ['r', 'w'], ['x']),        # (3,6,7) x (7,)
             node('MatMul', ['w', 'w'], ['d']),        # (7,) x (7,)
             node('MatMul', ['p', 'C'], ['e']),        # (2,1,4,6) x const (6,9)
             node('MatMul', ['one', 'C'], ['f']),      # (1,6) x const (6,9): strips
             node('MatMul', ['z0', 'z1'], ['g'])]      # K = 0: zeros
    inputs = [('q', F32, [2, 3, 5, 8]), ('k', F32, [2, 3, 8, 5]), ('p', F32, [2, 1, 4, 6]),
              ('r', F32, [3, 6, 7]), ('v', F32, [6]), ('w', F32, [7]), ('one', F32, [1, 6]),
              ('z0', F32, [2, 3, 0]), ('z1', F32, [0, 4])]
    outputs = [('s', F32, [2, 3, 5, 5]), ('t', F32, [2, 3, 4, 7]), ('u', F32, [3, 7]),
               ('x', F32, [3, 6]), ('d', F32, []), ('e', F32, [2, 1, 4, 9]),
               ('f', F32, [1, 9]), ('g', F32, [2, 3, 4])]
    model = make_model(nodes, inputs, outputs, {'C': uniform(rng, 6, 9)})
    check_native(model, [uniform(rng, *s) for _, _, s in inputs])


@pytest.mark.native_build
def test_batched_matmul_tiles():
    """Batched products of run-time operands (attention heads): two-vector
    tiles with a last partial tile of rows and B packed to whole vectors,
    a Relu epilogue; the tall one-vector tile (24 rows and more); few rows
    of one vector; B broadcast over a batch dim; a B too large to pack
    (the blocked GEMM); depth 0."""
    rng = numpy.random.RandomState(5)
    node = helper.make_node
    nodes = [node('MatMul', ['q', 'k'], ['s']), node('Relu', ['s'], ['sr']),  # 30x9 by 9x40
             node('MatMul', ['p', 'v'], ['o']),       # 30x40 by 40x16
             node('MatMul', ['a', 'b'], ['c']),       # 5x12 by 12x7
             node('MatMul', ['l', 'r'], ['lr']),      # (2,1,26,1100) by (3,1100,17)
             node('MatMul', ['z0', 'z1'], ['z'])]     # depth 0
    inputs = [('q', F32, [2, 3, 30, 9]), ('k', F32, [2, 3, 9, 40]), ('p', F32, [2, 3, 30, 40]),
              ('v', F32, [2, 3, 40, 16]), ('a', F32, [3, 5, 12]), ('b', F32, [3, 12, 7]),
              ('l', F32, [2, 1, 26, 1100]), ('r', F32, [3, 1100, 17]),
              ('z0', F32, [2, 4, 0]), ('z1', F32, [2, 0, 3])]
    outputs = [('sr', F32, [2, 3, 30, 40]), ('o', F32, [2, 3, 30, 16]), ('c', F32, [3, 5, 7]),
               ('lr', F32, [2, 3, 26, 17]), ('z', F32, [2, 4, 3])]
    model = make_model(nodes, inputs, outputs, {})
    check_native(model, [uniform(rng, *s) for _, _, s in inputs], rtol=1e-4, atol=1e-4)


@pytest.mark.native_build
def test_conv_variants():
    """im2col with stride, padding and dilation; groups; several images per
    product (8x8 outputs: 4 images share one, the last product 2); a
    direct 1x1 convolution for one image and for a batch, and in two groups
    of constant weights (each group's panels, image by image); no bias."""
    rng = numpy.random.RandomState(3)
    node = helper.make_node
    nodes = [node('Conv', ['x', 'w1', 'b1'], ['y1'], pads=[1, 2, 1, 0], strides=[2, 1],
                  dilations=[1, 2]),
             node('Conv', ['x', 'w2', 'b2'], ['y2'], group=2, pads=[1, 1, 1, 1]),
             node('Conv', ['x', 'w3'], ['y3']),
             node('Conv', ['x1', 'w3', 'b3'], ['y4']),
             node('Conv', ['x8', 'w1', 'b1'], ['y5'], pads=[1, 1, 1, 1]),
             node('Conv', ['x', 'w6', 'b6'], ['y6'], group=2)]
    inits = {'w1': uniform(rng, 5, 4, 3, 3), 'b1': uniform(rng, 5), 'w2': uniform(rng, 6, 2, 3, 3),
             'b2': uniform(rng, 6), 'w3': uniform(rng, 7, 4, 1, 1), 'b3': uniform(rng, 7),
             'w6': uniform(rng, 8, 2, 1, 1), 'b6': uniform(rng, 8)}
    inputs = [('x', F32, [3, 4, 7, 9]), ('x1', F32, [1, 4, 5, 6]), ('x8', F32, [6, 4, 8, 8])]
    outputs = [('y1', F32, [3, 5, 4, 7]), ('y2', F32, [3, 6, 7, 9]), ('y3', F32, [3, 7, 7, 9]),
               ('y4', F32, [1, 7, 5, 6]), ('y5', F32, [6, 5, 8, 8]), ('y6', F32, [3, 8, 7, 9])]
    model = make_model(nodes, inputs, outputs, inits)
    check_native(model, [uniform(rng, *s) for _, _, s in inputs], atol=1e-4)


@pytest.mark.native_build
def test_conv_large():
    """A convolution whose product goes to the OpenMP split."""
    rng = numpy.random.RandomState(4)
    model = make_model([helper.make_node('Conv', ['x', 'w', 'b'], ['y'], pads=[1, 1, 1, 1])],
                       [('x', F32, [2, 16, 24, 24])], [('y', F32, [2, 24, 24, 24])],
                       {'w': uniform(rng, 24, 16, 3, 3), 'b': uniform(rng, 24)})
    check_native(model, [uniform(rng, 2, 16, 24, 24)], atol=1e-4)


@pytest.mark.native_build
def test_conv_weight_panels():
    """Constant weights packed into panels at emit time: 50 output channels
    (three panels, the last partial), a depth of 300 (two slices, the last
    short), groups of 8 channels each with their own panels, a product
    large enough for the OpenMP split by rows; 4x4 outputs of one image
    (16 columns: the tall tile, split by whole panels); and weights given
    at run time, which the kernel packs itself."""
    rng = numpy.random.RandomState(5)
    node = helper.make_node
    nodes = [node('Conv', ['x', 'w1', 'b1'], ['y1'], pads=[1, 1, 1, 1]),
             node('Conv', ['x', 'w2'], ['y2'], group=4, strides=[2, 2]),
             node('Conv', ['x', 'wr'], ['y3']),
             node('Conv', ['x4', 'w4'], ['c4'], pads=[1, 1, 1, 1]),
             node('Relu', ['c4'], ['y4'])]                      # fused: the epilogue
    inits = {'w1': uniform(rng, 50, 12, 5, 5), 'b1': uniform(rng, 50),
             'w2': uniform(rng, 32, 3, 3, 3),
             'w4': uniform(rng, 50, 64, 3, 3)}
    inputs = [('x', F32, [2, 12, 10, 10]), ('wr', F32, [30, 12, 3, 3]),
              ('x4', F32, [1, 64, 4, 4])]
    outputs = [('y1', F32, [2, 50, 8, 8]), ('y2', F32, [2, 32, 4, 4]), ('y3', F32, [2, 30, 8, 8]),
               ('y4', F32, [1, 50, 4, 4])]
    model = make_model(nodes, inputs, outputs, inits)
    check_native(model, [uniform(rng, *s) for _, _, s in inputs], atol=1e-4)


@pytest.mark.parametrize('rows', [PANEL_ROWS, STRIP_COLS])
def test_pack_panels_layout(rows):
    """pack_panels puts A[p0 + i, k0 + k] at k0 * Mp + p0 * kc + k * rows + i
    (ccn_connection.h's panels of A, and with 32 rows the strips of B.T),
    zeros past the last row."""
    M, K = 40, 300
    a = numpy.arange(M * K, dtype=F32).reshape(M, K) + 1
    packed = pack_panels(a, rows)
    Mp = -(-M // rows) * rows
    assert packed.shape == (Mp * K,)
    for m, k in [(0, 0), (5, 7), (23, 255), (24, 0), (31, 256), (39, 299), (10, 280)]:
        k0 = k // PANEL_DEPTH * PANEL_DEPTH
        kc = min(PANEL_DEPTH, K - k0)
        p0 = m // rows * rows
        index = k0 * Mp + p0 * kc + (k - k0) * rows + m - p0
        assert packed[index] == a[m, k]
    assert numpy.count_nonzero(packed) == M * K


def test_refusals(tmp_path):
    """An activation the epilogue does not know, and a 4-D convolution."""
    rng = numpy.random.RandomState(5)
    model = make_model([helper.make_node('Conv', ['x', 'w'], ['y'])],
                       [('x', F32, [1, 2, 3, 3, 3, 5])], [('y', F32, [1, 3, 1, 1, 1, 3])],
                       {'w': uniform(rng, 3, 2, 3, 3, 3, 3)})
    with pytest.raises(UnsupportedNativeOpsError, match='only 1-D, 2-D and 3-D convolution'):
        emit_c(build_program(model), tmp_path)
    model = make_model([helper.make_node('Gemm', ['a', 'w'], ['y'])],
                       [('a', F32, [2, 3])], [('y', F32, [2, 4])], {'w': uniform(rng, 3, 4)})
    program = build_program(model)
    program.instructions[0].attrs['activation'] = 'Elu'
    with pytest.raises(UnsupportedNativeOpsError, match="activation 'Elu' is not one of"):
        emit_c(program, tmp_path)

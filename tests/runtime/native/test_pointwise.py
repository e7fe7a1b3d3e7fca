"""1x1 convolutions of one image (the pointwise layers of mobile models):
the product reads the input as its B in place and the weights from
emit-time panels, and its first store adds the bias and a fused residual
(ccn_gemm_panels_start), with no pass writing them into the output
first; the epilogue runs on the finished sums.  Shapes cover every tile of
ccn_gemm.c: the NR-column tiles with a part strip, the tall tile (at most
half a strip of columns), the wide tiles (7x7 outputs, one pass and two
over the depth; their sums, residual and old values transposed in
registers by blocks of 16 rows, any count of columns up to 8; the last
few columns of a wider product), part row tiles, small odd depths, row
blocks past 96 and 768 rows, a shallow product's long runs of columns.  A batch's
1x1 convolutions multiply each image where it lies (ccn_gemm_panels_images),
every epilogue, residual and tile again with B read from memory (the wide
tiles only up to 160 columns) and the next image prefetched.  Values are
the NumPy VM's."""
import re

import numpy
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native.emit_c import emit_c
from chainer_compiler.runtime.native.fusion import fuse

from .helpers import check_native, make_model, uniform

F32 = numpy.float32
node = helper.make_node

#: (output channels, input channels, height, width, epilogue, residual):
#: a 'dying' residual is read by nothing else, so the output takes its
#: memory and the first store reads each element just before writing it.
LAYERS = [
    (30, 7, 11, 19, 'Relu', None),        # 209 columns: 6 strips + 17; 3 tiles + 6 rows
    (24, 5, 13, 15, 'Clip', 'dying'),     # ReLU6 at the first store, in place; 6
                                          # strips + 3 columns by the wide tiles
    (72, 1100, 7, 7, 'Clip', None),       # wide tiles, two passes over the depth
    (96, 33, 7, 7, 'HardSwish', 'kept'),  # wide tiles, one pass, pairs of panels
    (29, 300, 3, 5, 'HardSwish', None),   # 15 columns: the tall tile, two depth slices
    (12, 9, 16, 16, 'LeakyRelu', 'kept'),
    (40, 17, 14, 14, 'Sigmoid', None),    # 196 columns: 6 strips + 4
    (16, 3, 9, 29, 'Tanh', 'dying'),
    (64, 48, 7, 7, 'Swish', None),
    (20, 260, 10, 10, 'Gelu', 'kept'),    # two depth slices: the start at the first
    (3, 6, 12, 12, None, 'kept'),         # too few rows for panels: fill_start's pass
    (56, 11, 28, 28, None, None),         # 784 columns, no epilogue
    # Split between threads (at least 4M multiply-adds): by columns, and
    # by rows (the wide tiles), each part's start from its first column
    # or row.
    (48, 40, 56, 56, 'Relu', 'kept'),
    (960, 160, 7, 7, 'Clip', 'dying'),
    # Wide tiles' transposed loads and stores: 9 columns (blocks of 5 and
    # 4), a last 16-row group of 5 rows, two passes over the depth with a
    # residual; one column (a squeeze-and-excitation layer) in place.
    (53, 1030, 3, 3, 'Relu', 'kept'),
    (20, 40, 1, 1, 'Clip', 'dying'),
    # 196 columns deep enough for the wide tiles: blocks of 8 and of 7.
    (96, 200, 14, 14, 'HardSwish', 'kept'),
    # Weights in panels: blocks of up to 768 rows run along each block of
    # B's strips, packed once for them: 120 rows on the NR-column tiles
    # (a part strip), 200 on the tall tile, 776 in two blocks.
    (120, 40, 14, 14, 'Relu', 'kept'),
    (200, 20, 4, 4, 'Clip', None),
    (776, 8, 13, 13, 'Clip', 'kept'),
    # A shallow slice read in place runs along blocks of 256 strips: 8487
    # columns, the second block's part last strip (its tenth) packed alone.
    (8, 30, 23, 369, 'Relu', None),
]
#: (images, then as LAYERS): several images, each its own product.
BATCHED = [
    (3, 96, 200, 14, 14, 'HardSwish', 'kept'),  # 196 columns: the NR-column tiles (B cold)
    (2, 960, 160, 7, 7, 'Clip', 'dying'),       # wide tiles, split between threads
    (3, 30, 7, 11, 19, 'Relu', None),
    (2, 29, 300, 3, 5, 'Sigmoid', None),        # the tall tile, two depth slices
    (2, 12, 9, 16, 16, 'LeakyRelu', 'kept'),
    (3, 64, 48, 7, 7, 'Swish', None),
    (2, 20, 260, 10, 10, 'Gelu', 'kept'),
    (2, 16, 3, 9, 29, 'Tanh', 'dying'),
    (2, 72, 1100, 7, 7, None, None),            # wide tiles, two passes over the depth
    (3, 3, 6, 12, 12, None, 'kept'),            # no panels: images share a product
]


def _epilogue(kind, x, y):
    """Nodes applying ``kind`` to ``x`` into ``y`` as exporters write it."""
    if kind == 'Clip':
        return [node('Clip', [x, 'zero', 'six'], [y])]
    if kind == 'Swish':
        return [node('Sigmoid', [x], [x + 's']), node('Mul', [x, x + 's'], [y])]
    if kind == 'LeakyRelu':
        return [node('LeakyRelu', [x], [y], alpha=0.1)]
    return [node(kind, [x], [y])]


def _model():
    rng = numpy.random.RandomState(31)
    nodes, inputs, outputs = [], [], []
    inits = {'zero': numpy.array(0, F32), 'six': numpy.array(6, F32)}
    layers = [(1,) + layer for layer in LAYERS] + BATCHED
    for k, (N, M, K, H, W, act, residual) in enumerate(layers):
        inputs.append(('x%d' % k, F32, [N, K, H, W]))
        inits['w%d' % k] = uniform(rng, M, K, 1, 1) * 2
        inits['b%d' % k] = uniform(rng, M) * 4
        out, r = 'c%d' % k, 'r%d' % k
        if residual:
            inputs.append((r, F32, [N, M, H, W]))
        if residual == 'dying':  # (made before the Conv, read by its Add alone)
            nodes.append(node('Neg', [r], ['n%d' % k]))
            r = 'n%d' % k
        nodes.append(node('Conv', ['x%d' % k, 'w%d' % k, 'b%d' % k], [out]))
        if residual:
            nodes.append(node('Add', [out, r], ['a%d' % k]))
            out = 'a%d' % k
        # A program output never takes a residual's memory: a dying one's
        # layer (and a layer without an epilogue) ends in a Neg.
        last = 'e%d' % k if act and residual == 'dying' else 'y%d' % k
        if act:
            nodes += _epilogue(act, out, last)
        if not act or last != 'y%d' % k:
            nodes.append(node('Neg', [last if act else out], ['y%d' % k]))
        outputs.append(('y%d' % k, F32, [N, M, H, W]))
    return make_model(nodes, inputs, outputs, inits, opset=20), inputs


def test_every_layer_fuses_its_residual_and_epilogue():
    model, _ = _model()
    convs = [i for i in fuse(build_program(model, fuse=False)).instructions if i.op == 'Conv']
    assert [(len(c.inputs) == 4, c.attrs.get('activation')) for c in convs] == [
        (residual is not None, act) for *_, act, residual in LAYERS + BATCHED]


def test_batched_layers_read_and_write_each_image_in_place(tmp_path):
    """Every 1x1 layer whose weights fill panels runs on the direct path,
    the images of a batch too (no columns copied: no scratch); the layer
    of too few rows for panels still shares a product between images."""
    model, _ = _model()
    result = emit_c(build_program(model), tmp_path, 'model')
    with open(next(p for p in result.files if p.endswith('/model.c'))) as f:
        plans = re.findall(r'ccn_conv_plan\)\{\.images = (\d+), \.direct = (\d)', f.read())
    assert plans == [('1', '1')] * (len(LAYERS) + len(BATCHED) - 1) + [('2', '0')]


@pytest.mark.native_build
def test_pointwise_convolutions_equal_the_vm():
    model, inputs = _model()
    rng = numpy.random.RandomState(5)
    # Scaled so that ReLU6 and HardSwish clip on both sides.
    values = [uniform(rng, *shape) * 4 for _, _, shape in inputs]
    # NaN into a ReLU6 layer's whole tiles, which clip in registers: the
    # NaN stays, as NumPy's clip leaves it (columns 33 and 34 of 195).
    values[[name for name, _, _ in inputs].index('x1')][0, 0, 2, 3:5] = numpy.nan
    check_native(model, values, rtol=1e-4, atol=1e-4, onnxruntime_check=False)

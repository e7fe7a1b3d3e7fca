"""Convolutions of small maps on the native backend (issue 31): the wide
tiles of ccn_gemm.c that run the vectors down the output channels when a
product has few columns (one image of 7x7 outputs; AVX-512 builds);
dilated taps that fall only in the padding, dropped at emit time; and
dilated convolutions whose taps mostly read padding, run tap by tap."""
import numpy
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native.emit_c import emit_c
from chainer_compiler.runtime.native.lowerings.connection import (
    TAPS_SHARE,
    image_share,
    live_taps,
)

from .helpers import check_native, make_model, uniform

F32 = numpy.float32


def _code(model, tmp_path):
    result = emit_c(build_program(model), tmp_path, 'model')
    with open(next(p for p in result.files if p.endswith('/model.c'))) as f:
        return f.read()


def test_live_taps():
    # DeepLabV3's ASPP: 3x3 dilated by 24 or 36 over 14x14, padded as
    # much: only the centre tap reads the image.
    for d in (24, 36, 14):
        assert live_taps((14, 14), (14, 14), (3, 3), (1, 1), (d, d), (d, d)) == ((1, 2), (1, 2))
    # Dilated by 12 (or 13): the outer taps read its last rows and columns.
    for d in (12, 13):
        assert live_taps((14, 14), (14, 14), (3, 3), (1, 1), (d, d), (d, d)) == ((0, 3), (0, 3))
    # 5 taps dilated by 3 over 5 pixels padded by 6: the middle three.
    assert live_taps((5, 9), (5, 9), (5, 1), (1, 1), (3, 1), (6, 0)) == ((1, 4), (0, 1))
    # Stride 2 over one row: the positions step past it but tap 1 hits it.
    assert live_taps((1,), (2,), (3,), (2,), (1,), (1,)) == ((1, 2),)
    # No tap reads the input (stride 2 steps over the one pixel): kept.
    assert live_taps((1,), (2,), (1,), (2,), (1,), (1,)) == ((0, 1),)


@pytest.mark.native_build
def test_dilated_taps_in_padding(tmp_path):
    """y1: 3x3 dilated by 24 over 14x14 becomes a 1x1 convolution read
    straight from the input (ReLU fused); y2: 5x5 dilated by 3 over 5x5
    padded by 6 becomes 3x3 padded by 3; y3: the same weights given at run
    time keep all 25 taps.  All against the NumPy VM and onnxruntime."""
    rng = numpy.random.RandomState(0)
    node = helper.make_node
    nodes = [node('Conv', ['x', 'w1', 'b1'], ['c1'], dilations=[24, 24], pads=[24] * 4),
             node('Relu', ['c1'], ['y1']),
             node('Conv', ['x5', 'w2'], ['y2'], dilations=[3, 3], pads=[6] * 4),
             node('Conv', ['x5', 'wr'], ['y3'], dilations=[3, 3], pads=[6] * 4)]
    inits = {'w1': uniform(rng, 24, 40, 3, 3), 'b1': uniform(rng, 24),
             'w2': uniform(rng, 6, 8, 5, 5)}
    inputs = [('x', F32, [1, 40, 14, 14]), ('x5', F32, [2, 8, 5, 5]),
              ('wr', F32, [6, 8, 5, 5])]
    outputs = [('y1', F32, [1, 24, 14, 14]), ('y2', F32, [2, 6, 5, 5]),
               ('y3', F32, [2, 6, 5, 5])]
    model = make_model(nodes, inputs, outputs, inits)
    code = _code(model, tmp_path)
    assert code.count('.kernel_h = 1, .kernel_w = 1') == 1
    assert code.count('.kernel_h = 3, .kernel_w = 3') == 1
    assert code.count('.kernel_h = 5, .kernel_w = 5') == 1
    assert '.direct = 1' in code
    check_native(model, [uniform(rng, *s) for _, _, s in inputs], atol=1e-4)


@pytest.mark.native_build
def test_wide_tiles():
    """One image of 7x7 outputs (49 columns, blocks of 7): 66 channels (a
    pair of panels, then one with 18 rows) of depth 130 * 9 = 1170 (two
    passes over C, the last slice short) with a bias and a fused ReLU;
    40 channels (the pair's second panel part empty) without a bias, so
    the product sets y; 11 x 11 outputs of 2 images (242 columns: the
    NR-column tiles again)."""
    rng = numpy.random.RandomState(1)
    node = helper.make_node
    nodes = [node('Conv', ['x', 'w1', 'b1'], ['c1'], pads=[1, 1, 1, 1]),
             node('Relu', ['c1'], ['y1']),
             node('Conv', ['x', 'w2'], ['y2'], pads=[1, 1, 1, 1]),
             node('Conv', ['x2', 'w1', 'b1'], ['y3'])]
    inits = {'w1': uniform(rng, 66, 130, 3, 3), 'b1': uniform(rng, 66),
             'w2': uniform(rng, 40, 130, 3, 3)}
    inputs = [('x', F32, [1, 130, 7, 7]), ('x2', F32, [2, 130, 13, 13])]
    outputs = [('y1', F32, [1, 66, 7, 7]), ('y2', F32, [1, 40, 7, 7]),
               ('y3', F32, [2, 66, 11, 11])]
    model = make_model(nodes, inputs, outputs, inits)
    check_native(model, [uniform(rng, *s) for _, _, s in inputs], atol=1e-3)


@pytest.mark.native_build
def test_dilated_conv_tap_by_tap(tmp_path):
    """3x3 dilated by 12 over 14x14 (DeepLabV3's ASPP; each outer tap reads
    2 rows or columns) with a bias and a fused ReLU; dilated by 6 at stride
    2 over 9x9 with uneven padding, no bias, two images."""
    assert image_share((14, 14), (14, 14), (3, 3), (1, 1), (12, 12), (12, 12)) < TAPS_SHARE
    rng = numpy.random.RandomState(2)
    node = helper.make_node
    nodes = [node('Conv', ['x', 'w1', 'b1'], ['c1'], dilations=[12, 12], pads=[12] * 4),
             node('Relu', ['c1'], ['y1']),
             node('Conv', ['x9', 'w2'], ['y2'], dilations=[6, 6], strides=[2, 2],
                  pads=[6, 5, 6, 7])]
    inits = {'w1': uniform(rng, 30, 40, 3, 3), 'b1': uniform(rng, 30),
             'w2': uniform(rng, 6, 8, 3, 3)}
    inputs = [('x', F32, [1, 40, 14, 14]), ('x9', F32, [2, 8, 9, 9])]
    outputs = [('y1', F32, [1, 30, 14, 14]), ('y2', F32, [2, 6, 5, 5])]
    model = make_model(nodes, inputs, outputs, inits)
    assert _code(model, tmp_path).count('ccn_conv2d_taps(') == 2
    check_native(model, [uniform(rng, *s) for _, _, s in inputs], atol=1e-4)


@pytest.mark.native_build
def test_conv_by_blocks_of_rows():
    """One image's im2col columns above CCN_CONV_CHUNK_FLOATS (2^18) are
    made and multiplied a block of output rows at a time: 7x7 at stride 2
    over 3 x 96 x 96 (147 x 2304 columns: two blocks, the second short)
    with a fused ReLU, its weights given at run time (constant ones run
    direct: test_conv_direct.py); 5x5 over 16 x 48 x 48 (400 x 2304: four
    blocks) with weights given at run time and no bias; two images of 3x3
    at stride 2 in two groups."""
    rng = numpy.random.RandomState(3)
    node = helper.make_node
    nodes = [node('Conv', ['x3', 'w1', 'b1'], ['c1'], strides=[2, 2], pads=[3] * 4),
             node('Relu', ['c1'], ['y1']),
             node('Conv', ['x16', 'wr'], ['y2'], pads=[2] * 4),
             node('Conv', ['x2', 'w3', 'b3'], ['y3'], strides=[2, 2], pads=[1] * 4, group=2)]
    inits = {'b1': uniform(rng, 24), 'w3': uniform(rng, 32, 16, 3, 3), 'b3': uniform(rng, 32)}
    inputs = [('x3', F32, [1, 3, 96, 96]), ('w1', F32, [24, 3, 7, 7]),
              ('x16', F32, [1, 16, 48, 48]),
              ('wr', F32, [8, 16, 5, 5]), ('x2', F32, [2, 32, 96, 96])]
    outputs = [('y1', F32, [1, 24, 48, 48]), ('y2', F32, [1, 8, 48, 48]),
               ('y3', F32, [2, 32, 48, 48])]
    model = make_model(nodes, inputs, outputs, inits)
    check_native(model, [uniform(rng, *s) for _, _, s in inputs], atol=1e-4)

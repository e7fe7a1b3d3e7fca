"""3x3 stride-1 convolutions through Winograd's F(2x2, 3x3) and F(4x4, 3x3)
on the native backend (ccn_winograd.c), against the NumPy VM and
onnxruntime: odd output sizes (a last tile half outside; 1, 2 or 3 of a
4x4 tile's columns inside), padding on any side, several blocks of tiles
across images, bias, a fused activation and residual; ConvTranspose at
stride 1
(the gradient of a convolution's input) through the rotated weights;
ConvGradFilter, whose products sum over blocks of tiles; dilated
convolutions, an undilated one per phase of the input (dilations 2, 4 and
(2, 3), odd sizes, so that phases differ in size, pads equal to the
dilation or not, every epilogue); and which convolutions the lowering
sends there."""
import os

import numpy
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native.emit_c import emit_c
from chainer_compiler.runtime.native.lowerings.winograd import (
    BLOCK_FLOATS,
    MAX_BLOCK_TILES,
    MAX_WIDTH,
    MIN_BLOCK_TILES,
    MIN_CHANNELS,
    MIN_FILTER_GRADIENT_WIDTH,
    MIN_WIDTH,
    MIN_WIDTH_CHANNELS,
    SHALLOW_BLOCK_TILES,
    SHALLOW_CHUNK,
    SHALLOW_MAX_CHANNELS,
    TILE4_MIN_WIDTH,
    block_tiles,
    shallow_block_tiles,
    winograd_tiles,
)
from chainer_compiler.runtime.native.render import KERNEL_DIR

from .helpers import check_native, make_model, without_nchwc_chains

F32 = numpy.float32
#: Channels of the tested convolutions (and C + 8): with 6 images of 9 rows
#: of 10 tiles, more tiles than one block; more than SHALLOW_MAX_CHANNELS.
C = 72
BATCH = 6
#: Output channels of the convolutions whose products run shallow.
S_OUT = 30


def _rand(rng, *shape):
    return rng.uniform(-1, 1, shape).astype(F32)


def _emitted_code(model, tmp_path):
    """The model's emitted code (the weights in a file: as C literals they
    took most of the test's time)."""
    result = emit_c(build_program(model), tmp_path, 'model', weights='file')
    source = next(p for p in result.files if p.endswith('/model.c'))
    with open(source) as f:
        return f.read()


@pytest.mark.native_build
def test_conv_through_winograd(tmp_path, monkeypatch):
    # Constant-weight Convs of at most 128 input channels join NCHWc chains
    # and run the blocks' Winograd (blocked.py); this tests the NCHW one,
    # so the NCHWc pass is off.
    without_nchwc_chains(monkeypatch)
    # y1: 17 x 19 outputs, so the last row and column of tiles are half
    # outside; 6 images of 9 tile rows are more than one block, and a block
    # ends inside an image.  y2: padding only at the bottom and right, then
    # a fused ReLU.  y3: no padding, no bias.  Their constant weights are
    # transformed at emit time; y4's, given at run time, by the kernel.
    # y5 to y8, outputs TILE4_MIN_WIDTH and wider, take F(4x4, 3x3): y5
    # 21 x 23 (the last tile row has 1 row inside, the last column 3), 6
    # images of 6 tile rows in blocks ending inside an image, its residual
    # Add and ReLU after; y6 21 x 22 (2 columns inside), padding on the
    # left and bottom only, LeakyRelu; y7 19 x 21 (1 column), no padding,
    # no bias; y8 20 x 24 (whole tiles), Sigmoid.  y9 to y12 are dilated,
    # so run per phase: y9 dilation 2, 17 x 19 (phases of 9 and 8 rows, 10
    # and 9 columns), F(2x2, 3x3), its residual Add and ReLU after; y10
    # dilation 4, 21 x 31 (phases of 6 and 5 rows, 8 and 7 columns), F(4x4,
    # 3x3), LeakyRelu; y11 dilation 2, pads not the dilation, no bias, ReLU;
    # y12 dilation (2, 3) with weights given at run time, Sigmoid.  y13
    # to y16 have SHALLOW_MAX_CHANNELS inputs or fewer, so their F(4x4,
    # 3x3) products run shallow: S_OUT output channels, not a whole number
    # of the products' blocks of 4 or 8 and more than a panel of 24; 2
    # images of 6 tile rows in blocks of 8 rows (one ends inside an image):
    # y13 21 x 31 with bias and ReLU; y14 padding on the right and bottom
    # only, no bias, Sigmoid (applied after the rows); y15 dilation 2 (rows
    # of 2 x 4 tiles), LeakyRelu; y16 its residual Add and ReLU after.  y17,
    # one image at 7x7 (16 tiles, FEW_TILES), stays on im2col, with its
    # residual Add and ReLU.
    rng = numpy.random.RandomState(0)
    node = helper.make_node
    nodes = [node('Conv', ['x', 'w1', 'b1'], ['y1'], pads=[1, 1, 1, 1]),
             node('Conv', ['x', 'w2', 'b2'], ['c2'], pads=[0, 0, 2, 2]),
             node('Relu', ['c2'], ['y2']),
             node('Conv', ['x', 'w1'], ['y3']),
             node('Conv', ['x', 'wr'], ['y4'], pads=[1, 1, 1, 1]),
             node('Conv', ['x4', 'w1', 'b1'], ['c5'], pads=[1, 1, 1, 1]),
             node('Add', ['c5', 'r5'], ['s5']), node('Relu', ['s5'], ['y5']),
             node('Conv', ['x4', 'w2', 'b2'], ['c6'], pads=[0, 1, 2, 0]),
             node('LeakyRelu', ['c6'], ['y6'], alpha=0.125),
             node('Conv', ['x4', 'w1'], ['y7']),
             node('Conv', ['x4', 'w2', 'b2'], ['c8'], pads=[0, 1, 1, 2]),
             node('Sigmoid', ['c8'], ['y8']),
             node('Conv', ['x', 'w1', 'b1'], ['c9'], pads=[2, 2, 2, 2], dilations=[2, 2]),
             node('Add', ['c9', 'x'], ['s9']), node('Relu', ['s9'], ['y9']),
             node('Conv', ['x4', 'w2', 'b2'], ['c10'], pads=[4, 8, 4, 8], dilations=[4, 4]),
             node('LeakyRelu', ['c10'], ['y10'], alpha=0.125),
             node('Conv', ['x4', 'w2'], ['c11'], pads=[1, 3, 3, 0], dilations=[2, 2]),
             node('Relu', ['c11'], ['y11']),
             node('Conv', ['x', 'wr'], ['c12'], pads=[2, 3, 2, 3], dilations=[2, 3]),
             node('Sigmoid', ['c12'], ['y12']),
             node('Conv', ['xs', 'ws', 'bs'], ['c13'], pads=[1, 1, 1, 1]),
             node('Relu', ['c13'], ['y13']),
             node('Conv', ['xs', 'ws'], ['c14'], pads=[0, 0, 2, 1]),
             node('Sigmoid', ['c14'], ['y14']),
             node('Conv', ['xs', 'ws', 'bs'], ['c15'], pads=[2, 2, 2, 2], dilations=[2, 2]),
             node('LeakyRelu', ['c15'], ['y15'], alpha=0.125),
             node('Conv', ['xs', 'ws', 'bs'], ['c16'], pads=[1, 1, 1, 1]),
             node('Add', ['c16', 'rs'], ['s16']), node('Relu', ['s16'], ['y16']),
             node('Conv', ['x7', 'w1', 'b1'], ['c17'], pads=[1, 1, 1, 1]),
             node('Add', ['c17', 'x7'], ['s17']), node('Relu', ['s17'], ['y17'])]
    inits = {'w1': _rand(rng, C, C, 3, 3), 'b1': _rand(rng, C),
             'w2': _rand(rng, C + 8, C, 3, 3), 'b2': _rand(rng, C + 8),
             'ws': _rand(rng, S_OUT, SHALLOW_MAX_CHANNELS // 2, 3, 3), 'bs': _rand(rng, S_OUT)}
    x_shape, x4_shape = [BATCH, C, 17, 19], [BATCH, C, 21, 23]
    xs_shape, ys_shape = [2, SHALLOW_MAX_CHANNELS // 2, 21, 31], [2, S_OUT, 21, 31]
    model = make_model(nodes, [('x', F32, x_shape), ('wr', F32, [C, C, 3, 3]),
                               ('x4', F32, x4_shape), ('r5', F32, x4_shape),
                               ('xs', F32, xs_shape), ('rs', F32, ys_shape),
                               ('x7', F32, [1, C, 7, 7])],
                       [('y1', F32, [BATCH, C, 17, 19]), ('y2', F32, [BATCH, C + 8, 17, 19]),
                        ('y3', F32, [BATCH, C, 15, 17]), ('y4', F32, [BATCH, C, 17, 19]),
                        ('y5', F32, x4_shape), ('y6', F32, [BATCH, C + 8, 21, 22]),
                        ('y7', F32, [BATCH, C, 19, 21]), ('y8', F32, [BATCH, C + 8, 20, 24]),
                        ('y9', F32, x_shape), ('y10', F32, [BATCH, C + 8, 21, 31]),
                        ('y11', F32, [BATCH, C + 8, 21, 22]), ('y12', F32, [BATCH, C, 17, 19]),
                        ('y13', F32, ys_shape), ('y14', F32, [2, S_OUT, 21, 30]),
                        ('y15', F32, ys_shape), ('y16', F32, ys_shape),
                        ('y17', F32, [1, C, 7, 7])],
                       inits)
    tiles = winograd_tiles(BATCH, C, C + 8, (17, 19), (3, 3), (1, 1), (1, 1), 1)
    assert tiles is not None and tiles < BATCH * 9 * 10 and (BATCH * 9 * 10) % tiles
    tiles = block_tiles(BATCH, C, C, (21, 23), 4)
    assert tiles < BATCH * 6 * 6 and (BATCH * 6 * 6) % tiles
    assert shallow_block_tiles(2, (21, 31), 4) == 8 * 8
    code = _emitted_code(model, tmp_path)
    assert code.count('ccn_conv2d_winograd(') == 16
    assert code.count('CCN_WINOGRAD_TRANSFORMED,') == 14
    assert code.count('.tile = 4, .shallow = 0}') == 6
    assert code.count('.tile = 4, .shallow = 1}') == 4
    # y4 and y12, weights given at run time: shallow F(2x2, 3x3) products.
    assert code.count('.tile = 2, .shallow = 1}') == 2
    # F(4x4, 3x3)'s transforms (entries up to 8 and down to 1/24) lose about
    # two more bits than F(2x2, 3x3)'s: 3e-4 at most here, on outputs up to 40.
    check_native(model, [_rand(rng, *x_shape), _rand(rng, C, C, 3, 3), _rand(rng, *x4_shape),
                         _rand(rng, *x4_shape), _rand(rng, *xs_shape), _rand(rng, *ys_shape),
                         _rand(rng, 1, C, 7, 7)],
                 atol=5e-4)


@pytest.mark.native_build
def test_conv_transpose_at_stride_one_through_winograd(tmp_path):
    # ConvTranspose pads p crop the full result: the convolution of the
    # input with the rotated weights padded by 2 - p (0 to 2), any side.
    rng = numpy.random.RandomState(1)
    node = helper.make_node
    nodes = [node('ConvTranspose', ['x', 'w', 'b'], ['y1'], pads=[1, 1, 1, 1]),
             node('ConvTranspose', ['x', 'w'], ['y2']),
             node('ConvTranspose', ['x', 'w'], ['y3'], pads=[2, 0, 0, 2])]
    inits = {'w': _rand(rng, C, C + 8, 3, 3), 'b': _rand(rng, C + 8)}
    x_shape = [2, C, 16, 17]
    model = make_model(nodes, [('x', F32, x_shape)],
                       [('y1', F32, [2, C + 8, 16, 17]), ('y2', F32, [2, C + 8, 18, 19]),
                        ('y3', F32, [2, C + 8, 16, 17])], inits)
    code = _emitted_code(model, tmp_path)
    assert code.count('ccn_conv2d_winograd(') == 3
    # Weights given at run time, C input channels: shallow products.
    assert code.count('.shallow = 1}') == 3
    check_native(model, [_rand(rng, *x_shape)], atol=1e-4)


@pytest.mark.native_build
def test_conv_grad_filter_through_winograd(tmp_path):
    # 6 images of 9 x 10 tiles, more than one block (the products add up
    # across blocks); odd output sizes; padding on two sides only.
    rng = numpy.random.RandomState(2)
    node = helper.make_node
    nodes = [node('ConvGradFilter', ['x', 'gy1'], ['gw1'], domain='org.chainer_compiler',
                  kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             node('ConvGradFilter', ['x', 'gy2'], ['gw2'], domain='org.chainer_compiler',
                  kernel_shape=[3, 3], pads=[0, 2, 2, 0])]
    x_shape, gy_shape = [BATCH, C, 17, 19], [BATCH, C + 8, 17, 19]
    model = make_model(nodes, [('x', F32, x_shape), ('gy1', F32, gy_shape),
                               ('gy2', F32, gy_shape)],
                       [('gw1', F32, [C + 8, C, 3, 3]), ('gw2', F32, [C + 8, C, 3, 3])],
                       custom=True)
    assert _emitted_code(model, tmp_path).count('ccn_conv2d_grad_filter_winograd(') == 2
    check_native(model, [_rand(rng, *x_shape), _rand(rng, *gy_shape), _rand(rng, *gy_shape)],
                 atol=1e-4, onnxruntime_check=False)


def test_the_shallow_chunk_mirrors_the_header():
    with open(os.path.join(KERNEL_DIR, 'ccn_winograd.h'), encoding='utf-8') as f:
        assert '#define CCN_WINOGRAD_SHALLOW_CHUNK %d\n' % SHALLOW_CHUNK in f.read()


def test_which_convolutions_go_to_winograd():
    args = dict(kernel=(3, 3), strides=(1, 1), dilations=(1, 1), group=1)
    # Blocks of whole rows of tiles, at most MAX_BLOCK_TILES of them (64
    # channels at 32x32: 8 rows of 16, where BLOCK_FLOATS would allow 32),
    # fewer when BLOCK_FLOATS says (512 channels: 4 rows), one row when a
    # row is longer.
    assert winograd_tiles(8, C, C, (32, 32), **args) == MAX_BLOCK_TILES == 8 * 16
    assert winograd_tiles(8, 512, 512, (32, 32), **args) == \
        BLOCK_FLOATS // (16 * 1024 * 16) * 16 == 4 * 16
    assert winograd_tiles(8, C, C, (2, 2 * MAX_BLOCK_TILES + 2), **args) == MAX_BLOCK_TILES + 1
    # Whole rows of tiles, at most all of them.
    assert winograd_tiles(8, C, C, (2, MIN_WIDTH), **args) == 8 * (MIN_WIDTH + 1) // 2
    # F(4x4, 3x3)'s blocks: 36 planes, whole rows of 4x4 tiles (9 of 14).
    assert block_tiles(1, C, C, (56, 56), 4) == 9 * 14
    # Where BLOCK_FLOATS would leave fewer than MIN_BLOCK_TILES, that many
    # (512 channels: 2 rows of 14, then 4), or all of them (FCN's 2048 ->
    # 512 channels at 28x28: 49).
    assert BLOCK_FLOATS // (36 * 1024 * 14) == 2
    assert block_tiles(1, 512, 512, (TILE4_MIN_WIDTH, 56), 4) == MIN_BLOCK_TILES // 14 * 14
    assert block_tiles(1, 2048, 512, (28, 28), 4) == 7 * 7
    # Shallow products' blocks: at most SHALLOW_BLOCK_TILES, whole rows, the
    # count that wastes least of its last SHALLOW_CHUNK (SqueezeNet's 55x55:
    # 4 rows of 14; 27x27: 4 rows of 7, where 7 rows would compute 64 for
    # 49), one row when a row is longer.
    assert shallow_block_tiles(1, (55, 55), 4) == 4 * 14 <= SHALLOW_BLOCK_TILES
    assert shallow_block_tiles(1, (27, 27), 4) == 4 * 7 == SHALLOW_CHUNK - 4
    assert shallow_block_tiles(1, (8, 4 * SHALLOW_BLOCK_TILES + 4), 4) == SHALLOW_BLOCK_TILES + 1
    for changed in [dict(kernel=(5, 5)), dict(strides=(2, 2)), dict(dilations=(2, 2)),
                    dict(group=2)]:
        assert winograd_tiles(8, C, C, (32, 32), **{**args, **changed}) is None
    assert winograd_tiles(8, MIN_CHANNELS - 1, C, (64, 64), **args) is None
    assert winograd_tiles(8, C, MIN_CHANNELS - 1, (64, 64), **args) is None
    assert winograd_tiles(8, C, C, (32, MIN_WIDTH - 1), **args) is None
    assert winograd_tiles(1, C, C, (2, MAX_WIDTH), **args) is not None
    assert winograd_tiles(1, C, C, (2, MAX_WIDTH + 1), **args) is None
    # DenseNet's 7x7 layers (128 to 32 channels) and ResNet's (512) at
    # batch 1 are too few tiles (16): im2col; at batch 2 (32) or 10x10 (25)
    # not.
    assert winograd_tiles(1, 128, 32, (7, 7), **args) is None
    assert winograd_tiles(1, 512, 512, (7, 7), **args) is None
    assert winograd_tiles(1, 512, 512, (8, 8), **args) is None
    assert winograd_tiles(2, 512, 512, (7, 7), **args) is not None
    assert winograd_tiles(1, 256, 256, (10, 10), **args) is not None
    # Few channels need a wide output, and the other way round.
    narrow = MIN_WIDTH_CHANNELS // MIN_WIDTH
    assert winograd_tiles(8, narrow, narrow, (8, MIN_WIDTH), **args) is not None
    assert winograd_tiles(8, narrow - 1, narrow, (8, MIN_WIDTH), **args) is None
    # A dilated Conv runs per phase (phases=True; not the gradients): rows
    # of 16 tiles (4 phases 7 wide, 4 tiles each), 4 of the 16 rows (4 row
    # phases of 4) in a block; F(4x4, 3x3) all 8 rows of 8.  The least width
    # is a phase's.
    dilated = dict(args, dilations=(4, 4))
    assert winograd_tiles(1, 512, 512, (28, 28), **dilated) is None
    assert winograd_tiles(1, 512, 512, (28, 28), **dilated, phases=True) == 4 * 16
    assert block_tiles(1, 512, 512, (28, 28), 4, (4, 4)) == 8 * 8
    assert winograd_tiles(1, 512, 512, (28, 4 * MIN_WIDTH - 3), **dilated, phases=True) \
        is not None
    assert winograd_tiles(1, 512, 512, (28, 4 * MIN_WIDTH - 4), **dilated, phases=True) is None
    assert winograd_tiles(1, narrow, narrow, (28, 28), **dilated, phases=True) is not None
    assert winograd_tiles(1, narrow - 1, narrow, (28, 28), **dilated, phases=True) is None
    # The filter gradient asks for wider outputs.
    width = MIN_FILTER_GRADIENT_WIDTH
    assert winograd_tiles(8, C, C, (8, width - 1), **args, min_width=width) is None
    assert winograd_tiles(8, C, C, (8, width), **args, min_width=width) is not None

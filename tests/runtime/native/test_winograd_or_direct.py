"""Which 3x3 stride-1 convolutions leave Winograd for ccn_conv_direct
(issue 31): few 2x2 tiles an image and few channels (DIRECT_MAX_TILES,
DIRECT_MAX_CHANNELS, at any batch), where F(2x2, 3x3)'s 16 products are 49 columns each
(SqueezeNet's 13x13 expand3x3 layers, DenseNet's 128 -> 32 at 14x14), or
few tiles and output channels (DIRECT_MAX_OUTPUTS_TILES,
DIRECT_MAX_OUTPUTS: DenseNet's 128 -> 32 at 28x28).  Only constant weights
run direct; weights given at run time keep Winograd."""
import numpy
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native.emit_c import emit_c
from chainer_compiler.runtime.native.lowerings.winograd import (
    DIRECT_MAX_CHANNELS,
    DIRECT_MAX_OUTPUTS,
    DIRECT_MAX_OUTPUTS_TILES,
    DIRECT_MAX_TILES,
    winograd_tiles,
)

from .helpers import make_model

F32 = numpy.float32
ARGS = dict(kernel=(3, 3), strides=(1, 1), dilations=(1, 1), group=1, phases=True)


def test_few_tiles_and_channels_go_direct_where_they_can():
    # SqueezeNet's 13x13 layers and DenseNet's 14x14 ones: 49 tiles;
    # DenseNet's 28x28 ones: 196 tiles, 32 output channels.
    assert 7 * 7 == DIRECT_MAX_TILES and 14 * 14 == DIRECT_MAX_OUTPUTS_TILES
    for c_in, c_out, size in [(48, 192, 13), (64, 256, 13), (128, 128, 14), (128, 32, 14),
                              (128, DIRECT_MAX_OUTPUTS, 28), (256, 16, 24)]:
        assert c_in * c_out <= DIRECT_MAX_CHANNELS or c_out <= DIRECT_MAX_OUTPUTS
        assert winograd_tiles(1, c_in, c_out, (size, size), **ARGS, direct=True) is None
        # Weights given at run time (no direct kernel) keep Winograd.
        assert winograd_tiles(1, c_in, c_out, (size, size), **ARGS) is not None
    # ResNet's 256 channels at 14x14, more tiles (16x16, 56x56) or more
    # output channels at 28x28 keep Winograd.
    for batch, c_in, c_out, size in [(1, 256, 256, 14), (1, 64, 64, 16),
                                     (1, 128, 32, 56), (1, 128, DIRECT_MAX_OUTPUTS + 1, 28)]:
        assert winograd_tiles(batch, c_in, c_out, (size, size), **ARGS, direct=True) \
            is not None



def test_squeezenet_13x13_layers_go_direct_at_every_batch():
    """The tile count is one image's: at batch 32 F(2x2, 3x3)'s blocks of
    126 tiles overflow L2, and these layers took 1.3x-1.6x the direct
    kernel's time."""
    for batch in (1, 2, 32):
        for c_in, c_out in [(48, 192), (64, 256)]:
            assert winograd_tiles(batch, c_in, c_out, (13, 13), **ARGS, direct=True) is None
            assert winograd_tiles(batch, c_in, c_out, (13, 13), **ARGS) is not None


def test_more_tiles_an_image_or_channels_keep_winograd_at_batch_32():
    # 16x16 (64 tiles an image), ResNet's 256 -> 256 at 14x14, and
    # DenseNet's 128 -> 32 at 28x28 (the output-channel clause counts
    # every image's tiles: 32 images are past it).
    for c_in, c_out, size in [(64, 64, 16), (256, 256, 14), (128, 32, 28)]:
        assert winograd_tiles(32, c_in, c_out, (size, size), **ARGS, direct=True) is not None

def _conv_model(weights_constant):
    rng = numpy.random.RandomState(0)
    w = rng.uniform(-1, 1, (256, 64, 3, 3)).astype(F32)
    nodes = [helper.make_node('Conv', ['x', 'w'], ['c'], pads=[1, 1, 1, 1]),
             helper.make_node('Relu', ['c'], ['y'])]
    inputs = [('x', F32, [1, 64, 13, 13])] + ([] if weights_constant else [('w', F32, w.shape)])
    return make_model(nodes, inputs, [('y', F32, [1, 256, 13, 13])],
                      {'w': w} if weights_constant else {})


def test_squeezenet_expand3x3_at_13x13_is_emitted_direct_or_on_blocks(tmp_path):
    # With constant weights the direct kernel's geometry, which the NCHWc
    # pass may also take on blocks (blocked.py: the NCHW Winograd's layers
    # stay NCHW), where a 3x3 stride-1 Conv runs Winograd's F(2x2, 3x3).
    for constant in (True, False):
        folder = tmp_path / str(constant)
        result = emit_c(build_program(_conv_model(constant)), folder, 'model', weights='file')
        source = next(p for p in result.files if p.endswith('/model.c'))
        with open(source) as f:
            code = f.read()
        assert ('ccn_conv2d_winograd(' in code) != constant
        assert constant == any(call in code for call in (
            'ccn_conv2d_direct(', 'ccn_nchwc_dense(', 'ccn_nchwc_winograd('))

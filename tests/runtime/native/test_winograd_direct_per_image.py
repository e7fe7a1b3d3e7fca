"""The direct rule's tile count is per image (issue 31, batch 32): a 3x3
layer whose image has few 2x2 tiles and channels (DIRECT_MAX_TILES,
DIRECT_MAX_CHANNELS) runs direct at any batch.  At batch 32 F(2x2, 3x3)'s
blocks of 126 tiles overflow L2, and SqueezeNet's 13x13 expand3x3 layers
took 1.3x-1.6x the direct kernel's time."""
from chainer_compiler.runtime.native.lowerings.winograd import DIRECT_MAX_TILES, winograd_tiles

ARGS = dict(kernel=(3, 3), strides=(1, 1), dilations=(1, 1), group=1, phases=True)


def test_squeezenet_13x13_layers_go_direct_at_every_batch():
    assert 7 * 7 == DIRECT_MAX_TILES
    for batch in (1, 2, 32):
        for c_in, c_out in [(48, 192), (64, 256)]:
            assert winograd_tiles(batch, c_in, c_out, (13, 13), **ARGS, direct=True) is None
            # Weights given at run time (no direct kernel) keep Winograd.
            assert winograd_tiles(batch, c_in, c_out, (13, 13), **ARGS) is not None


def test_more_tiles_an_image_or_channels_keep_winograd_at_batch_32():
    # 16x16 (64 tiles an image), ResNet's 256 -> 256 at 14x14, and
    # DenseNet's 128 -> 32 at 28x28 (the output-channel clause counts
    # every image's tiles: 32 images are past it).
    for c_in, c_out, size in [(64, 64, 16), (256, 256, 14), (128, 32, 28)]:
        assert winograd_tiles(32, c_in, c_out, (size, size), **ARGS, direct=True) is not None

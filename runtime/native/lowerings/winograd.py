"""3x3 stride-1 Conv, ConvTranspose (the gradient of a convolution's
input) and ConvGradFilter by Winograd's minimal filtering F(2x2, 3x3), as
calls into ccn_winograd.c: 16 multiply-adds per 2x2 outputs and channel
pair where im2col's product takes 36, for transforms of the input and
output that cost memory traffic.  It pays on wide images with many
channels, and only there.  Measured against im2col and GEMM on 2 cores,
ResNet-18's layers at batch 8 (forward, input gradient, filter gradient):
64 channels at 32x32 -31%, -22%, -12%; 128 at 16x16 -25%, -26%, -17%; but
256 at 8x8 +16%, +30%, +50% and 512 at 4x4 3x (rows of 4 and 2 tiles leave
the transforms no vectors); 16 and 32 channels at 32x32 1.3-2x slower in
the forward (products too shallow to pay for the transforms).  The whole
ResNet-18 training step: 8% faster."""
from ..lowering import Step

#: Fewest input and output channels, and narrowest output, that go to
#: ccn_conv2d_winograd.
MIN_CHANNELS = 64
MIN_WIDTH = 16
#: Floats of transformed inputs and products per block of tiles, the
#: scratch that goes round the 16 products (2 MB on 2 cores measured best
#: between 1 and 4 MB: larger blocks miss in L2, smaller ones make the
#: products narrow).
BLOCK_FLOATS = 16 * 32768


def winograd_tiles(batch, channels_in, channels_out, out_size, kernel, strides, dilations,
                   group) -> int | None:
    """The 2x2 output tiles per block (whole rows of them) with which
    ccn_conv2d_winograd computes this convolution, or None when it should
    not: not 3x3 with stride and dilation 1 in one group, or too few
    channels or too narrow an output for it to pay."""
    if tuple(kernel) != (3, 3) or tuple(strides) != (1, 1) or tuple(dilations) != (1, 1) \
            or group != 1 or min(channels_in, channels_out) < MIN_CHANNELS \
            or out_size[1] < MIN_WIDTH:
        return None
    tile_cols = (out_size[1] + 1) // 2
    tile_rows = batch * ((out_size[0] + 1) // 2)
    rows = max(1, BLOCK_FLOATS // (16 * (channels_in + channels_out) * tile_cols))
    return min(rows, tile_rows) * tile_cols


def winograd_step(em, inst, x_shape, channels_out, out_size, pads_begin, tiles, transposed,
                  act) -> Step:
    """The Step of ``inst`` as ccn_conv2d_winograd: a convolution of input
    0 (``x_shape``, NCHW) into ``channels_out`` channels of ``out_size``,
    the input padded by ``pads_begin`` (top, left), with input 1 the
    weights ((O, I, 3, 3), or a ConvTranspose's (I, O, 3, 3) when
    ``transposed``), input 2 an optional bias; ``act`` the activation's C
    arguments."""
    N, channels_in, H, W = x_shape
    OH, OW = out_size
    has_bias = em.has(inst, 2)

    def render(ref, scratch):
        return ['ccn_conv2d_winograd(%d, %d, %d, %d, %d, %d, %d, %d, %d, %d,'
                % (N, channels_in, H, W, channels_out, OH, OW, pads_begin[0], pads_begin[1], tiles),
                '                    %s, %s, %d, %s, %s, %s, %s);' % (
                    ref(inst.inputs[0]), ref(inst.inputs[1]), transposed,
                    ref(inst.inputs[2]) if has_bias else 'NULL', ref(inst.outputs[0]),
                    scratch, act)]
    # CCN_WINOGRAD_SCRATCH of ccn_winograd.h.
    scratch = 16 * (channels_out * channels_in + (channels_in + channels_out) * tiles)
    return Step('winograd', [(N, channels_out, OH, OW)], render, scratch=scratch,
                also=('connection',))


def winograd_grad_filter_step(em, inst, x_shape, channels_out, out_size, pads_begin,
                              tiles) -> Step:
    """The Step of ConvGradFilter ``inst`` as
    ccn_conv2d_grad_filter_winograd: the gradient of the weights of the
    convolution of input 0 (``x_shape``) into ``channels_out`` channels of
    ``out_size``, from input 1, its output's gradient."""
    N, channels_in, H, W = x_shape
    OH, OW = out_size

    def render(ref, scratch):
        return ['ccn_conv2d_grad_filter_winograd(%d, %d, %d, %d, %d, %d, %d, %d, %d, %d,'
                % (N, channels_in, H, W, channels_out, OH, OW, pads_begin[0], pads_begin[1], tiles),
                '                                %s, %s, %s, %s);' % (
                    ref(inst.inputs[0]), ref(inst.inputs[1]), ref(inst.outputs[0]), scratch)]
    # CCN_WINOGRAD_GRAD_SCRATCH of ccn_winograd.h.
    scratch = 16 * (channels_out * channels_in + (channels_in + 2 * channels_out) * tiles)
    return Step('winograd', [(channels_out, channels_in, 3, 3)], render, scratch=scratch,
                also=('connection',))

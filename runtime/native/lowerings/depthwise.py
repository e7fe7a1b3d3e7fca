"""Depthwise 2-D convolutions (one group per channel: MobileNet's 3x3 and
5x5 blocks) as calls into ccn_depthwise.c, which sums each output's taps
in vector registers straight from the input, no scratch: per channel,
im2col copied the input KH*KW times for a product of depth KH*KW and one
row, costing more than the arithmetic (benchmarks/NOTES.md, "Mobile
blocks" and "Depthwise kernels")."""
from ...ops.registry import CUSTOM_DOMAIN
from ..cformat import cfloat
from ..lowering import Refuse, Step, conv_geometry, lowers, window

#: ccn_depthwise.c's BLOCK_PIXELS and BLOCK_TAPS: the most padded pixels,
#: and taps, of a plane it takes by channels.
BLOCK_PIXELS, BLOCK_TAPS = 1200, 121


def is_depthwise(channels_in, channels_out, group) -> bool:
    """Whether a convolution goes to ccn_conv2d_depthwise: one input and
    one output channel per group, more than one group."""
    return group > 1 and group == channels_in == channels_out


def _extent(size, pad, out, stride, kernel, dilation) -> int:
    """The rows (columns) of a padded plane: the padding before, the
    input, zeros as far as the last tap reaches (conv_direct.py's
    planes)."""
    return max(size + pad, (out - 1) * stride + (kernel - 1) * dilation + 1)


def band_rows(out, kernel, strides, dilations) -> int:
    """The output rows per band that ccn_conv2d_depthwise sums a vector's
    worth of channels at a time in, for ``out``put rows and columns,
    ``kernel``, ``strides`` and ``dilations`` (pairs); 0: its strips.

    By channels (a zero-padded block of pixels on the stack, the channels
    in the lanes, each tap one whole vector load) take 25 taps or more over
    output rows of 8 or fewer (the mobile models' last stages, 7x7
    outputs), where a strip masks every load and leaves half its lanes idle
    with AVX-512, or at stride 2 (each strip's tap two loads and a
    shuffle); 49 or more over wider rows (ConvNeXt's 7x7 at 14x14 and
    28x28, and at 56x56 in bands of 13 output rows), in bands whose rows
    of inputs, KH at least, are mostly new ones (band x stride >= KH).
    The copies cost more than they save with fewer taps (1.3x-1.7x the
    strips' and flat planes' time with 3x3 kernels; 5x5 at stride 1 over
    14x14 0.95x-1.07x, over 28x28 1.26x).  Kernels up to 11x11 (MixNet's)
    fit; past the 3x3 and 5x5 the strips at stride 2 gather lane by lane
    (MixNet-S's 7x7 from 56x56 and 11x11 from 14x14, stride 2: 1.2 and
    0.9 ms that way)."""
    taps = kernel[0] * kernel[1]
    if out[1] <= 0 or not (25 if out[1] <= 8 or strides[1] > 1 else 49) <= taps <= BLOCK_TAPS:
        return 0
    # As many output rows as a block holds, with their padded input rows.
    rows = BLOCK_PIXELS // ((out[1] - 1) * strides[1] + (kernel[1] - 1) * dilations[1] + 1)
    halo = (kernel[0] - 1) * dilations[0] + 1
    band = min(0 if rows < halo else (rows - halo) // strides[0] + 1, BLOCK_PIXELS // out[1],
               out[0])
    return band if band == out[0] or band * strides[0] >= kernel[0] else 0


@lowers(CUSTOM_DOMAIN + '::DepthwiseConvNhwc')
def depthwise_nhwc(em, inst) -> Step:
    """channels_last.py's depthwise Conv (x, weights, optional bias; no
    epilogue) that the kernel takes by channels, written (N, OH, OW, C)."""
    sx, sw = em.shape(inst, 0), em.shape(inst, 1)
    if len(sx) != 4 or len(sw) != 4 or len(inst.inputs) > 3 or 'activation' in inst.attrs:
        raise Refuse('DepthwiseConvNhwc takes a 2-D Conv without epilogue')
    (n, c, h, w), (m, cg, kh, kw) = sx, sw
    group = inst.attrs.get('group', 1)
    win = window(inst.attrs, (h, w), (kh, kw))
    if not isinstance(group, int) or not is_depthwise(c, m, group) or cg != 1 \
            or em.has(inst, 2) and em.shape(inst, 2) != (c,):
        raise Refuse('DepthwiseConvNhwc of %s by %s is no depthwise convolution'
                     % (list(sx), list(sw)))
    band = band_rows(win.out, (kh, kw), win.strides, win.dilations)
    if not band:
        raise Refuse('DepthwiseConvNhwc of %s by %s is not one the kernel takes by channels'
                     % (list(sx), list(sw)))
    geometry = conv_geometry(n, c, (h, w), m, win.out, (kh, kw), group, win.strides,
                             win.dilations, win.pads_begin)
    return depthwise_step(em, inst, geometry, band, (n, *win.out, c), ('CCN_ACT_NONE', 0.0),
                          kernel='ccn_conv2d_depthwise_nhwc')


def depthwise_step(em, inst, geometry, band, out_shape, act,
                   kernel='ccn_conv2d_depthwise') -> Step:
    """The Step of Conv ``inst`` (``geometry``: its ccn_conv_geometry,
    lowering.py's conv_geometry; ``band``: band_rows's) as
    ccn_conv2d_depthwise (or ``kernel``, of its arguments), writing
    ``out_shape``; input 2 is an optional bias, ``act`` the epilogue (its
    CCN_ACT_* enum, its parameter)."""
    has_bias = em.has(inst, 2)

    def render(ref, space):
        return ['%s(%s, %d,' % (kernel, geometry, band),
                '                     %s, %s, %s, %s, %s, %s);' % (
                    act[0], cfloat(act[1]), ref(inst.inputs[0]), ref(inst.inputs[1]),
                    ref(inst.inputs[2]) if has_bias else 'NULL', ref(inst.outputs[0]))]
    return Step('depthwise', [out_shape], render, also=('gemm',))

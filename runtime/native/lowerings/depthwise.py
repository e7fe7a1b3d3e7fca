"""Depthwise 2-D convolutions (one group per channel: MobileNet's 3x3 and
5x5 blocks) as calls into ccn_depthwise.c, which sums each output's taps
in registers instead of multiplying im2col columns: per channel, im2col
copied the input KH*KW times for a product of depth KH*KW and one row,
costing more than the arithmetic (benchmarks/NOTES.md, "Mobile blocks")."""
from ..cformat import cfloat
from ..lowering import Step


def is_depthwise(channels_in, channels_out, group) -> bool:
    """Whether a convolution goes to ccn_conv2d_depthwise: one input and
    one output channel per group, more than one group."""
    return group > 1 and group == channels_in == channels_out


def _extent(size, pad, out, stride, kernel, dilation) -> int:
    """The rows (columns) of a padded plane: the padding before, the
    input, zeros as far as the last tap reaches."""
    return max(size + pad, (out - 1) * stride + (kernel - 1) * dilation + 1)


def depthwise_scratch(x_shape, out_size, kernel, strides, dilations, pads_begin) -> int:
    """ccn_depthwise_scratch of ccn_depthwise.h: per plane, for stride 1
    the padded copy of the input (unless nothing pads it) and rows of
    padded width; for stride 2 without dilation the padded plane's four
    phases (any dilation) and rows of half its width; else the padded
    copy, if any."""
    N, C, H, W = x_shape
    PH, PW = (_extent(x_shape[2 + d], pads_begin[d], out_size[d], strides[d], kernel[d],
                      dilations[d]) for d in (0, 1))
    copies = any(pads_begin) or PH > H or PW > W
    if tuple(strides) == (1, 1):
        per_plane = copies * PH * PW + out_size[0] * PW
    elif tuple(strides) == (2, 2):
        half = (PW + 1) // 2
        per_plane = 4 * ((PH + 1) // 2) * half + out_size[0] * half
    else:
        per_plane = copies * PH * PW
    return N * C * per_plane


def depthwise_step(em, inst, geometry, out_shape, scratch, act) -> Step:
    """The Step of Conv ``inst`` (``geometry``: its ccn_conv_geometry,
    lowerings/connection.py's conv_geometry) as ccn_conv2d_depthwise,
    writing ``out_shape`` with ``scratch`` floats (depthwise_scratch);
    input 2 is an optional bias, ``act`` the epilogue (its CCN_ACT_*
    enum, its slope)."""
    has_bias = em.has(inst, 2)

    def render(ref, space):
        return ['ccn_conv2d_depthwise(%s,' % geometry,
                '                     %s, %s, %s, %s, %s, %s, %s);' % (
                    act[0], cfloat(act[1]), ref(inst.inputs[0]), ref(inst.inputs[1]),
                    ref(inst.inputs[2]) if has_bias else 'NULL', ref(inst.outputs[0]),
                    space if scratch else 'NULL')]
    return Step('depthwise', [out_shape], render, scratch=scratch, also=('gemm',))

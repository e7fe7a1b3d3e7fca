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
    """CCN_DEPTHWISE_EXTENT of ccn_depthwise.h: the rows (columns) of a
    padded plane."""
    return max(size + pad, (out - 1) * stride + (kernel - 1) * dilation + 1)


def depthwise_scratch(x_shape, out_size, kernel, strides, dilations, pads_begin) -> int:
    """CCN_DEPTHWISE_SCRATCH of ccn_depthwise.h: per plane, the padded copy
    of the input (when it has padding or the taps reach past it) and, for
    stride 1, the padded output rows."""
    N, C, H, W = x_shape
    PH, PW = (_extent(x_shape[2 + d], pads_begin[d], out_size[d], strides[d], kernel[d],
                      dilations[d]) for d in (0, 1))
    copies = any(pads_begin) or PH > H or PW > W
    return N * C * (PH * PW * copies + (out_size[0] * PW if tuple(strides) == (1, 1) else 0))


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

"""Depthwise 2-D convolutions (one group per channel: MobileNet's 3x3 and
5x5 blocks) as calls into ccn_depthwise.c, which sums each output's taps
in vector registers straight from the input, no scratch: per channel,
im2col copied the input KH*KW times for a product of depth KH*KW and one
row, costing more than the arithmetic (benchmarks/NOTES.md, "Mobile
blocks" and "Depthwise kernels")."""
from ..cformat import cfloat
from ..lowering import Step


def is_depthwise(channels_in, channels_out, group) -> bool:
    """Whether a convolution goes to ccn_conv2d_depthwise: one input and
    one output channel per group, more than one group."""
    return group > 1 and group == channels_in == channels_out


def _extent(size, pad, out, stride, kernel, dilation) -> int:
    """The rows (columns) of a padded plane: the padding before, the
    input, zeros as far as the last tap reaches (conv_direct.py's
    planes)."""
    return max(size + pad, (out - 1) * stride + (kernel - 1) * dilation + 1)


def depthwise_step(em, inst, geometry, out_shape, act) -> Step:
    """The Step of Conv ``inst`` (``geometry``: its ccn_conv_geometry,
    lowerings/connection.py's conv_geometry) as ccn_conv2d_depthwise,
    writing ``out_shape``; input 2 is an optional bias, ``act`` the
    epilogue (its CCN_ACT_* enum, its parameter)."""
    has_bias = em.has(inst, 2)

    def render(ref, space):
        return ['ccn_conv2d_depthwise(%s,' % geometry,
                '                     %s, %s, %s, %s, %s, %s);' % (
                    act[0], cfloat(act[1]), ref(inst.inputs[0]), ref(inst.inputs[1]),
                    ref(inst.inputs[2]) if has_bias else 'NULL', ref(inst.outputs[0]))]
    return Step('depthwise', [out_shape], render, also=('gemm',))

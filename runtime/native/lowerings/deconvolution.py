"""ConvTranspose (1-D, 2-D and 3-D) as calls into ccn_deconvolution.c, which multiplies
with ccn_gemm.c."""
import math

from ...ops.connection import conv_transpose_padding
from ..lowering import Refuse, Step, conv_geometry, lowers, unit_height
from .connection import (
    CONV3D_GEOMETRY,
    CONV_PLAN,
    GRAD_COLUMNS,
    grad_columns,
    images_per_product,
)
from .winograd import winograd_step, winograd_tiles

_AUTO_PADS = ('NOTSET', 'SAME_UPPER', 'SAME_LOWER', 'VALID')


@lowers('ConvTranspose')
def conv_transpose(em, inst) -> Step:
    a = inst.attrs
    sx, sw = em.shape(inst, 0), em.shape(inst, 1)
    if len(sx) == len(sw) == 3:  # 1-D: a unit height
        return unit_height(conv_transpose, em, inst, lifted=(0, 1))
    if len(sx) == len(sw) == 5:
        return _conv_transpose3d(em, inst, sx, sw)
    if len(sx) != 4 or len(sw) != 4:
        raise Refuse('only 1-D, 2-D and 3-D transposed convolution (3-D to 5-D input and '
                     'weight) is supported, got %s and %s' % (list(sx), list(sw)))
    N, C, H, W = sx
    Cw, Mg, KH, KW = sw
    group = int(a['group'])
    if group < 1 or C % group or Cw != C:
        raise Refuse('group=%d does not fit input %s and weight %s'
                     % (group, list(sx), list(sw)))
    M = Mg * group
    if a.get('kernel_shape') is not None and tuple(a['kernel_shape']) != (KH, KW):
        raise Refuse('kernel_shape %s differs from the weight' % list(a['kernel_shape']))
    has_bias = em.has(inst, 2)
    if has_bias and em.shape(inst, 2) != (M,):
        raise Refuse('bias shape %s is not (%d,)' % (list(em.shape(inst, 2)), M))
    (sh, sw_), (dh, dw), (pt, pl), (OH, OW) = _geometry(a, (H, W), (KH, KW))
    # At stride 1 this is the convolution of x with the weights rotated
    # half a turn, padded by the rest of the kernel (the gradient of a
    # convolution's input).
    tiles = winograd_tiles(N, C, M, (OH, OW), (KH, KW), (sh, sw_), (dh, dw), group)
    if tiles is not None:
        rotated = conv_geometry(N, C, (H, W), M, (OH, OW), (KH, KW), group, (1, 1), (1, 1),
                                (KH - 1 - pt, KW - 1 - pl))
        return winograd_step(em, inst, rotated, sx, M, (OH, OW), tiles, 'rotated',
                             ('CCN_ACT_NONE', 0.0))
    # As the gradient of a convolution's input, a product per image would
    # read the whole weight for a few columns (16 in a ResNet's last stage).
    images = images_per_product(N, H * W, GRAD_COLUMNS)
    geometry = conv_geometry(N, C, (H, W), M, (OH, OW), (KH, KW), group, (sh, sw_), (dh, dw),
                             (pt, pl))
    plan = CONV_PLAN.literal(images=images, direct=False, w_panels=False, act='CCN_ACT_NONE',
                             act_alpha=0.0)

    def render(ref, scratch):
        return ['ccn_deconv2d(%s,' % geometry,
                '             %s,' % plan,
                '             %s, %s, %s, %s, %s);' % (
                    ref(inst.inputs[0]), ref(inst.inputs[1]),
                    ref(inst.inputs[2]) if has_bias else 'NULL', ref(inst.outputs[0]),
                    scratch)]
    scratch = (grad_columns(Mg, KH * KW, H * W * images)
               + (C // group * H * W * images if images > 1 else 0))
    return Step('deconvolution', [(N, M, OH, OW)], render, scratch=scratch,
                also=('gemm',))


def _geometry(a, spatial, kernel):
    """(strides, dilations, crop at the start, output size) of a 2-D or
    3-D ConvTranspose, each one entry per spatial axis, by the ONNX rules
    (shared with the NumPy kernel); a malformed or impossible attribute
    refused."""
    auto_pad, n = a.get('auto_pad', 'NOTSET'), len(spatial)
    if auto_pad not in _AUTO_PADS:
        raise Refuse('auto_pad %r is not one of %s' % (auto_pad, ', '.join(_AUTO_PADS)))
    pairs = {}
    for name, default, size in (('strides', 1, n), ('dilations', 1, n), ('pads', 0, 2 * n),
                                ('output_padding', 0, n)):
        value = tuple(int(v) for v in a.get(name) or (default,) * size)
        if len(value) != size:
            raise Refuse('%s %s does not have %d entries' % (name, list(value), size))
        pairs[name] = value
    if min(pairs['strides'] + pairs['dilations']) < 1:
        raise Refuse('strides and dilations must be positive')
    output_shape = tuple(int(v) for v in a.get('output_shape') or ())
    if output_shape and len(output_shape) not in (n, n + 2):
        raise Refuse('output_shape %s is neither %d spatial sizes nor a %d-D shape'
                     % (list(output_shape), n, n + 2))
    begin, _, out = conv_transpose_padding(spatial, kernel, pairs['strides'],
                                           pairs['dilations'], pairs['output_padding'],
                                           output_shape, auto_pad, pairs['pads'])
    if min(out) < 1:
        raise Refuse('the output would have spatial shape %s' % list(out))
    return pairs['strides'], pairs['dilations'], tuple(begin), tuple(out)


def _conv_transpose3d(em, inst, sx, sw) -> Step:
    """A 3-D ConvTranspose as ccn_deconv3d (one product and col2im per
    image and group)."""
    a = inst.attrs
    (N, C), (Cw, Mg), group = sx[:2], sw[:2], int(a['group'])
    if group < 1 or C % group or Cw != C:
        raise Refuse('group=%d does not fit input %s and weight %s'
                     % (group, list(sx), list(sw)))
    if a.get('kernel_shape') is not None and tuple(a['kernel_shape']) != tuple(sw[2:]):
        raise Refuse('kernel_shape %s differs from the weight' % list(a['kernel_shape']))
    M, has_bias = Mg * group, em.has(inst, 2)
    if has_bias and em.shape(inst, 2) != (M,):
        raise Refuse('bias shape %s is not (%d,)' % (list(em.shape(inst, 2)), M))
    strides, dilations, begin, out = _geometry(a, sx[2:], sw[2:])
    geometry = CONV3D_GEOMETRY.literal(**{  # 'in' is a Python keyword
        'batch': N, 'in_channels': C, 'out_channels': M, 'group': group, 'in': tuple(sx[2:]),
        'out': out, 'kernel': tuple(sw[2:]), 'stride': strides, 'dil': dilations,
        'pad_begin': begin})

    def render(ref, scratch):
        return ['ccn_deconv3d(%s,' % geometry,
                '             %s, %s, %s, %s, %s);' % (
                    ref(inst.inputs[0]), ref(inst.inputs[1]),
                    ref(inst.inputs[2]) if has_bias else 'NULL', ref(inst.outputs[0]), scratch)]
    return Step('deconvolution', [(N, M) + out], render,
                scratch=max(1, Mg * math.prod(sw[2:]) * math.prod(sx[2:])), also=('gemm',))

"""MaxPool, AveragePool (1-D, 2-D and 3-D), GlobalAveragePool and GlobalMaxPool
(any rank) and the gradients (this project's MaxPoolGrad and
AveragePoolGrad) as calls into ccn_pooling.c."""
import math

from ...ops.registry import CUSTOM_DOMAIN
from ..cformat import CStruct
from ..lowering import Refuse, Step, lowers, unit_height, window

#: Input columns one window of ccn_maxpool2d and ccn_avgpool2d may span
#: (MAX_SPAN in C).
MAX_SPAN = 1024
#: The geometry struct of ccn_pooling.h.
POOL_GEOMETRY = CStruct('ccn_pool_geometry', (
    'planes', 'in_h', 'in_w', 'out_h', 'out_w', 'kernel_h', 'kernel_w', 'stride_h', 'stride_w',
    'dil_h', 'dil_w', 'pad_top', 'pad_left', 'pad_bottom', 'pad_right', 'count_include_pad'))


def pool_geometry(planes, in_size, win, count_include_pad=0) -> str:
    """The C pointer to the ccn_pool_geometry of ``planes`` planes of
    ``in_size`` pooled by window ``win`` (lowering.window)."""
    return POOL_GEOMETRY.literal(
        planes=planes, in_h=in_size[0], in_w=in_size[1], out_h=win.out[0], out_w=win.out[1],
        kernel_h=win.kernel[0], kernel_w=win.kernel[1], stride_h=win.strides[0],
        stride_w=win.strides[1], dil_h=win.dilations[0], dil_w=win.dilations[1],
        pad_top=win.pads_begin[0], pad_left=win.pads_begin[1], pad_bottom=win.pads_end[0],
        pad_right=win.pads_end[1], count_include_pad=count_include_pad)


@lowers('MaxPool', 'AveragePool')
def pool(em, inst) -> Step:
    a = inst.attrs
    sx = em.shape(inst, 0)
    if len(sx) == 3:  # 1-D: a unit height
        return unit_height(pool, em, inst)
    if not 4 <= len(sx) <= 5:
        raise Refuse('only 1-D, 2-D and 3-D pooling (3-D to 5-D input) is supported, got %s'
                     % list(sx))
    kernel = tuple(a.get('kernel_shape') or ())
    if len(kernel) != len(sx) - 2:
        raise Refuse('kernel_shape %s does not fit input %s' % (list(kernel), list(sx)))
    if len(sx) == 5:
        return _pool3d(em, inst, sx, kernel)
    N, C, H, W = sx
    win = window(a, (H, W), kernel, int(a['ceil_mode']))
    OH, OW = win.out
    if (win.kernel[1] - 1) * win.dilations[1] + 1 > MAX_SPAN:  # the 2-D kernels' row
        return _pool3d(em, inst, sx, kernel)
    if inst.op == 'MaxPool':
        em.only_first_output(inst, 'Indices')
        kernel_fn, geometry = 'ccn_maxpool2d', pool_geometry(N * C, (H, W), win)
    else:
        if win.dilations != (1, 1):  # which ccn_avgpool2d lacks
            return _pool3d(em, inst, sx, kernel)
        kernel_fn = 'ccn_avgpool2d'
        geometry = pool_geometry(N * C, (H, W), win, int(a.get('count_include_pad', 0)))

    def render(ref, scratch):
        return ['%s(%s,' % (kernel_fn, geometry),
                '    %s, %s);' % (ref(inst.inputs[0]), ref(inst.outputs[0]))]
    return Step('pooling', [(N, C, OH, OW)] + [None] * (len(inst.outputs) - 1), render)


POOL3D_GEOMETRY = CStruct('ccn_pool3d_geometry', (
    'planes', 'in', 'out', 'kernel', 'stride', 'dil', 'pad_begin', 'pad_end',
    'count_include_pad'))


def _pool3d(em, inst, sx, kernel) -> Step:
    """A 3-D MaxPool or AveragePool as ccn_pool3d, or a 2-D one with a
    unit depth."""
    a = inst.attrs
    win = window(a, sx[2:], kernel, int(a['ceil_mode']))
    if inst.op == 'MaxPool':
        em.only_first_output(inst, 'Indices')

    def axes(values, unit=1):
        return (unit,) * (5 - len(sx)) + tuple(values)
    geometry = POOL3D_GEOMETRY.literal(**{  # 'in' is a Python keyword
        'planes': sx[0] * sx[1], 'in': axes(sx[2:]), 'out': axes(win.out),
        'kernel': axes(win.kernel), 'stride': axes(win.strides), 'dil': axes(win.dilations),
        'pad_begin': axes(win.pads_begin, 0), 'pad_end': axes(win.pads_end, 0),
        'count_include_pad': int(a.get('count_include_pad', 0))})

    def render(ref, scratch):
        return ['ccn_pool3d(%s,' % geometry,
                '    %d, %s, %s);' % (inst.op == 'AveragePool', ref(inst.inputs[0]),
                                      ref(inst.outputs[0]))]
    return Step('pooling', [tuple(sx[:2]) + tuple(win.out)] + [None] * (len(inst.outputs) - 1),
                render)


@lowers('GlobalAveragePool', 'GlobalMaxPool')
def global_pool(em, inst) -> Step:
    sx = em.shape(inst, 0)
    if len(sx) < 3 or 0 in sx[2:] and inst.op == 'GlobalMaxPool':
        raise Refuse('%s needs a (N, C, ...) input of one element or more per plane, got %s'
                     % (inst.op, list(sx)))
    kernel = 'ccn_global_avgpool' if inst.op == 'GlobalAveragePool' else 'ccn_global_maxpool'

    def render(ref, scratch):
        return ['%s(%d, %d, %s, %s);' % (kernel, sx[0] * sx[1], math.prod(sx[2:]),
                                        ref(inst.inputs[0]), ref(inst.outputs[0]))]
    return Step('pooling', [sx[:2] + (1,) * (len(sx) - 2)], render)


@lowers(CUSTOM_DOMAIN + '::MaxPoolGrad')
def max_pool_grad(em, inst) -> Step:
    a = inst.attrs
    sx, sy, sg = em.shape(inst, 0), em.shape(inst, 1), em.shape(inst, 2)
    kernel = tuple(a.get('kernel_shape') or ())
    if len(sx) != 4 or len(kernel) != 2:
        raise Refuse('only 2-D pooling (4-D input) is supported, got %s' % list(sx))
    N, C, H, W = sx
    win = window(a, (H, W), kernel, int(a['ceil_mode']))
    OH, OW = win.out
    if sy != (N, C, OH, OW) or sg != sy:
        raise Refuse('output %s and gradient %s are not %s'
                     % (list(sy), list(sg), [N, C, OH, OW]))
    geometry = pool_geometry(N * C, (H, W), win)

    def render(ref, scratch):
        return ['ccn_maxpool2d_grad(%s,' % geometry,
                '    %s, %s, %s, %s);' % (ref(inst.inputs[0]), ref(inst.inputs[1]),
                                         ref(inst.inputs[2]), ref(inst.outputs[0]))]
    return Step('pooling', [sx], render)


@lowers(CUSTOM_DOMAIN + '::AveragePoolGrad')
def average_pool_grad(em, inst) -> Step:
    a = inst.attrs
    sg = em.shape(inst, 0)
    sx = tuple(a.get('input_shape') or ())
    kernel = tuple(a.get('kernel_shape') or ())
    if len(sx) != 4 or len(kernel) != 2:
        raise Refuse('only 2-D pooling (4-D input) is supported, got %s' % list(sx))
    N, C, H, W = sx
    win = window(a, (H, W), kernel, int(a['ceil_mode']))
    if win.dilations != (1, 1):
        raise Refuse('AveragePool with dilations is not supported')
    OH, OW = win.out
    if sg != (N, C, OH, OW):
        raise Refuse('gradient %s is not %s' % (list(sg), [N, C, OH, OW]))
    geometry = pool_geometry(N * C, (H, W), win, int(a['count_include_pad']))

    def render(ref, scratch):
        return ['ccn_avgpool2d_grad(%s,' % geometry,
                '    %s, %s);' % (ref(inst.inputs[0]), ref(inst.outputs[0]))]
    return Step('pooling', [sx], render)

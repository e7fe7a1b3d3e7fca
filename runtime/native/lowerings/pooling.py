"""MaxPool, AveragePool, GlobalAveragePool and their gradients (this
project's MaxPoolGrad and AveragePoolGrad) as calls into ccn_pooling.c."""
import math

from ...ops.registry import CUSTOM_DOMAIN
from ..lowering import Refuse, Step, lowers, window


@lowers('MaxPool', 'AveragePool')
def pool(em, inst) -> Step:
    a = inst.attrs
    sx = em.shape(inst, 0)
    if len(sx) != 4:
        raise Refuse('only 2-D pooling (4-D input) is supported, got %s' % list(sx))
    kernel = tuple(a.get('kernel_shape') or ())
    if len(kernel) != 2:
        raise Refuse('kernel_shape %s is not 2-D' % list(kernel))
    N, C, H, W = sx
    win = window(a, (H, W), kernel, int(a['ceil_mode']))
    (OH, OW), (KH, KW), (sh, sw) = win.out, win.kernel, win.strides
    pt, pl = win.pads_begin
    if inst.op == 'MaxPool':
        em.only_first_output(inst, 'Indices')
        dh, dw = win.dilations

        def render(ref, scratch):
            return ['ccn_maxpool2d(%d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, '
                    '%s, %s);' % (N * C, H, W, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl,
                                  ref(inst.inputs[0]), ref(inst.outputs[0]))]
    else:
        if win.dilations != (1, 1):
            raise Refuse('AveragePool with dilations is not supported')
        pb, pr = win.pads_end
        include = int(a.get('count_include_pad', 0))

        def render(ref, scratch):
            return ['ccn_avgpool2d(%d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, '
                    '%s, %s);' % (N * C, H, W, OH, OW, KH, KW, sh, sw, pt, pl, pb, pr,
                                  include, ref(inst.inputs[0]), ref(inst.outputs[0]))]
    return Step('pooling', [(N, C, OH, OW)] + [None] * (len(inst.outputs) - 1), render)


@lowers('GlobalAveragePool')
def global_average_pool(em, inst) -> Step:
    sx = em.shape(inst, 0)
    if len(sx) < 3:
        raise Refuse('GlobalAveragePool needs a (N, C, ...) input, got %s' % list(sx))

    def render(ref, scratch):
        return ['ccn_global_avgpool(%d, %d, %s, %s);' % (
            sx[0] * sx[1], math.prod(sx[2:]), ref(inst.inputs[0]), ref(inst.outputs[0]))]
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
    (OH, OW), (KH, KW), (sh, sw), (dh, dw) = win.out, win.kernel, win.strides, win.dilations
    if sy != (N, C, OH, OW) or sg != sy:
        raise Refuse('output %s and gradient %s are not %s'
                     % (list(sy), list(sg), [N, C, OH, OW]))
    pt, pl = win.pads_begin

    def render(ref, scratch):
        return ['ccn_maxpool2d_grad(%d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, '
                '%s, %s, %s, %s);' % (N * C, H, W, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl,
                                      ref(inst.inputs[0]), ref(inst.inputs[1]),
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
    (OH, OW), (KH, KW), (sh, sw) = win.out, win.kernel, win.strides
    if sg != (N, C, OH, OW):
        raise Refuse('gradient %s is not %s' % (list(sg), [N, C, OH, OW]))
    (pt, pl), (pb, pr) = win.pads_begin, win.pads_end
    include = int(a['count_include_pad'])

    def render(ref, scratch):
        return ['ccn_avgpool2d_grad(%d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, '
                '%s, %s);' % (N * C, H, W, OH, OW, KH, KW, sh, sw, pt, pl, pb, pr, include,
                              ref(inst.inputs[0]), ref(inst.outputs[0]))]
    return Step('pooling', [sx], render)

"""Inference BatchNormalization as calls into ccn_normalization.c."""
import math

from ...ops.opset_rules import batch_norm_trains
from ..cformat import cfloat
from ..lowering import Refuse, Step, lowers


@lowers('BatchNormalization')
def batch_norm(em, inst) -> Step:
    a = inst.attrs
    if batch_norm_trains(inst.version, len(inst.outputs), a.get('training_mode', 0),
                         a.get('is_test', 0)):
        raise Refuse('training-mode BatchNormalization is not supported')
    if not a.get('spatial', 1):
        raise Refuse('BatchNormalization with spatial=0 is not supported')
    em.only_first_output(inst, 'statistics')
    sx = em.shape(inst, 0)
    if len(sx) < 2:
        raise Refuse('BatchNormalization needs a (N, C, ...) input')
    for k in range(1, 5):
        if em.shape(inst, k) != (sx[1],):
            raise Refuse('input %d has shape %s, not (%d,)'
                         % (k, list(em.shape(inst, k)), sx[1]))
    eps = float(a.get('epsilon', 1e-5))

    def render(ref, scratch):
        return ['ccn_batchnorm(%d, %d, %d, %s, %s, %s, %s, %s, %s, %s);' % (
            sx[0], sx[1], math.prod(sx[2:]), cfloat(eps),
            *(ref(r) for r in inst.inputs[:5]), ref(inst.outputs[0]))]
    return Step('normalization', [sx] + [None] * (len(inst.outputs) - 1), render)

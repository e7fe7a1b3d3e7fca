"""SoftmaxCrossEntropyLoss and its gradient (this project's
SoftmaxCrossEntropyLossGrad) as calls into ccn_loss.c.  A label that is
neither a class nor ``ignore_index`` makes the generated code fail (the
run's status names the instruction), where the NumPy kernel raises an
IndexError."""
import math

from ...ops.registry import CUSTOM_DOMAIN
from ...program import NO_REGISTER
from ..lowering import Refuse, Step, lowers

LABELS = ('int32', 'int64')
#: ONNX's reduction attribute -> the C enum.
_REDUCTIONS = {'none': 'CCN_LOSS_NONE', 'sum': 'CCN_LOSS_SUM', 'mean': 'CCN_LOSS_MEAN'}
#: What a failed loss kernel reports (Step.error).
LABEL_ERROR = 'IndexError: a class label out of range'


def _geometry(em, inst, scores: int, labels: int):
    """(N, C, D, label dtype) of a loss over input ``scores`` (N, C, ...)
    and input ``labels`` (N, ...), refused when they do not match."""
    sx = em.shape(inst, scores)
    if len(sx) < 2:
        raise Refuse('scores must have rank 2 or more, not %d' % len(sx))
    st = em.shape(inst, labels, dtypes=LABELS)
    if tuple(st) != (sx[0],) + tuple(sx[2:]):
        raise Refuse('labels of shape %s do not match scores of shape %s'
                     % (list(st), list(sx)))
    if em.has(inst, labels + 1) and em.shape(inst, labels + 1) != (sx[1],):
        raise Refuse('weights must have shape [%d]' % sx[1])
    return sx[0], sx[1], math.prod(sx[2:]), em.dtype(inst, labels)


def _options(inst) -> tuple[str, str]:
    """The C arguments ``has_ignore, ignore_index`` and the reduction enum."""
    reduction = inst.attrs['reduction']
    if reduction not in _REDUCTIONS:
        raise Refuse("reduction must be one of %s, not %r" % (', '.join(_REDUCTIONS), reduction))
    ignore = inst.attrs.get('ignore_index')
    return ('0, 0' if ignore is None else '1, %dL' % int(ignore)), _REDUCTIONS[reduction]


#: ccn_loss.c takes its log-softmax from ccn_activation.c (ccn_softmax).
_ALSO = ('activation',)


def _checked(call: str) -> list[str]:
    return ['if (%s)' % call, '    return CCN_FAILED;  /* a label out of range */']


@lowers('SoftmaxCrossEntropyLoss')
def softmax_cross_entropy(em, inst) -> Step:
    N, C, D, label_dtype = _geometry(em, inst, 0, 1)
    ignore, reduction = _options(inst)
    sx = em.shape(inst, 0)
    loss = (N,) + tuple(sx[2:]) if reduction == 'CCN_LOSS_NONE' else ()
    keeps_log_prob = len(inst.outputs) > 1 and inst.outputs[1] != NO_REGISTER
    # A replay may want only the log-probabilities: an unread output is
    # written to scratch, the loss after the log-probabilities.
    keeps_loss = inst.outputs[0] != NO_REGISTER
    log_prob_scratch = 0 if keeps_log_prob else N * C * D

    def render(ref, scratch):
        weights = ref(inst.inputs[2]) if em.has(inst, 2) else 'NULL'
        log_prob = ref(inst.outputs[1]) if keeps_log_prob else scratch
        out = ref(inst.outputs[0]) if keeps_loss else '%s + %d' % (scratch, log_prob_scratch)
        return _checked('ccn_softmax_cross_entropy_%s(%d, %d, %d, %s, %s, %s, %s, %s, %s, %s)' % (
            label_dtype, N, C, D, ref(inst.inputs[0]), ref(inst.inputs[1]), weights, ignore,
            reduction, out, log_prob))
    shapes = [loss if keeps_loss else None] + (
        [sx] if keeps_log_prob else [None] * (len(inst.outputs) - 1))
    return Step('loss', shapes, render, dtypes=['float32'] * len(shapes),
                scratch=log_prob_scratch + (0 if keeps_loss else math.prod(loss)),
                also=_ALSO, error=LABEL_ERROR)


@lowers(CUSTOM_DOMAIN + '::SoftmaxCrossEntropyLossGrad')
def softmax_cross_entropy_grad(em, inst) -> Step:
    N, C, D, label_dtype = _geometry(em, inst, 1, 2)
    ignore, reduction = _options(inst)
    sg = em.shape(inst, 0)
    expected = (N,) + tuple(em.shape(inst, 1)[2:]) if reduction == 'CCN_LOSS_NONE' else ()
    if math.prod(sg) != math.prod(expected):
        raise Refuse('the loss gradient has shape %s, not %s' % (list(sg), list(expected)))

    def render(ref, scratch):
        weights = ref(inst.inputs[3]) if em.has(inst, 3) else 'NULL'
        return _checked('ccn_softmax_cross_entropy_grad_%s(%d, %d, %d, %s, %s, %s, %s, %s, %s, '
                        '%s)' % (label_dtype, N, C, D, ref(inst.inputs[0]), ref(inst.inputs[1]),
                                 ref(inst.inputs[2]), weights, ignore, reduction,
                                 ref(inst.outputs[0])))
    return Step('loss', [em.shape(inst, 1)], render, in_place=(1,), also=_ALSO,
                error=LABEL_ERROR)

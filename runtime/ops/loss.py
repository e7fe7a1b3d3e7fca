"""Loss kernels: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss."""
from .activation import log_softmax_along
from .registry import LATEST, kernel


def _nll(xp, log_prob, target, weight, ignore_index, reduction):
    """Weighted negative log-likelihood of ``target`` classes (axis 1 of
    ``log_prob``), reduced as ONNX's ``reduction`` says."""
    if reduction not in ('none', 'sum', 'mean'):
        raise ValueError("reduction must be 'none', 'sum' or 'mean', got %r" % (reduction,))
    ignored = None if ignore_index is None else target == ignore_index
    # ignore_index may lie outside [0, C): gather class 0 there, then zero it.
    classes = target if ignored is None else xp.where(ignored, 0, target)
    picked = xp.take_along_axis(log_prob, xp.expand_dims(classes, 1), axis=1)[:, 0]
    if weight is None:
        sample_weight = xp.ones(target.shape, dtype=log_prob.dtype)
    else:
        sample_weight = weight.astype(log_prob.dtype, copy=False)[classes]
    if ignored is not None:
        sample_weight = xp.where(ignored, log_prob.dtype.type(0), sample_weight)
    loss = -picked * sample_weight
    if reduction == 'none':
        return loss
    if reduction == 'sum':
        return loss.sum()
    # 'mean' divides by the total weight of the samples taken into account.
    return loss.sum() / sample_weight.sum()


@kernel('NegativeLogLikelihoodLoss', versions=(12, LATEST))
def negative_log_likelihood_loss(xp, input, target, weight=None, *, ignore_index=None,
                                 reduction='mean'):
    return _nll(xp, input, target, weight, ignore_index, reduction)


@kernel('SoftmaxCrossEntropyLoss', versions=(12, LATEST))
def softmax_cross_entropy_loss(xp, scores, labels, weights=None, *, ignore_index=None,
                               reduction='mean'):
    log_prob = log_softmax_along(xp, scores, 1)
    return _nll(xp, log_prob, labels, weights, ignore_index, reduction), log_prob

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


# -- gradient kernels (org.chainer_compiler) ---------------------------------------------

from .registry import CUSTOM_DOMAIN  # noqa: E402


def _nll_coefficients(xp, gy, target, weight, ignore_index, reduction, dtype):
    """d loss / d (-log_prob[n, target[n], ...]) per sample: the sample's
    weight (0 where ignored) times the output gradient, divided by the total
    weight for 'mean'.  Returns (coefficients, classes with ignored -> 0)."""
    ignored = None if ignore_index is None else target == ignore_index
    classes = target if ignored is None else xp.where(ignored, 0, target)
    if weight is None:
        sample_weight = xp.ones(target.shape, dtype=dtype)
    else:
        sample_weight = weight.astype(dtype, copy=False)[classes]
    if ignored is not None:
        sample_weight = xp.where(ignored, dtype.type(0), sample_weight)
    gy = gy.astype(dtype, copy=False)
    if reduction == 'none':
        return sample_weight * gy, classes
    if reduction == 'sum':
        return sample_weight * gy, classes
    if reduction == 'mean':
        return sample_weight * (gy / sample_weight.sum()), classes
    raise ValueError("reduction must be 'none', 'sum' or 'mean', got %r" % (reduction,))


def _one_hot(xp, classes, n_classes):
    """Boolean (N, C, d1, ...) with True at each sample's class."""
    positions = xp.arange(n_classes).reshape((1, -1) + (1,) * (classes.ndim - 1))
    return positions == xp.expand_dims(classes, 1)


@kernel('NegativeLogLikelihoodLossGrad', domain=CUSTOM_DOMAIN)
def negative_log_likelihood_loss_grad(xp, gy, target, weight=None, *, shape,
                                      ignore_index=None, reduction='mean'):
    """Gradient of NegativeLogLikelihoodLoss with respect to its (N, C, ...)
    input of static ``shape``: -coefficient at each sample's class, else 0."""
    coefficients, classes = _nll_coefficients(xp, gy, target, weight, ignore_index,
                                              reduction, gy.dtype)
    hot = _one_hot(xp, classes, shape[1])
    return xp.where(hot, -xp.expand_dims(coefficients, 1), gy.dtype.type(0))


@kernel('SoftmaxCrossEntropyLossGrad', domain=CUSTOM_DOMAIN)
def softmax_cross_entropy_loss_grad(xp, gy, log_prob, labels, weights=None, *,
                                    ignore_index=None, reduction='mean'):
    """Gradient of SoftmaxCrossEntropyLoss's loss with respect to its scores,
    from the forward's log_prob: (softmax - one_hot) * coefficient."""
    coefficients, classes = _nll_coefficients(xp, gy, labels, weights, ignore_index,
                                              reduction, log_prob.dtype)
    coefficients = xp.expand_dims(coefficients, 1)
    grad = xp.exp(log_prob)
    grad *= coefficients
    grad -= xp.where(_one_hot(xp, classes, log_prob.shape[1]), coefficients,
                     log_prob.dtype.type(0))
    return grad

"""Loss kernels: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss."""
from .activation import log_softmax_along
from .registry import LATEST, kernel


def _targets(xp, target, weight, ignore_index, dtype):
    """(classes, sample weights) of ``target``: classes with ignored samples
    sent to class 0 (ignore_index may lie outside [0, C)), weights 0 there.
    Weights are None when every sample counts once, the common case, which
    then costs no extra arrays."""
    ignored = None
    if ignore_index is not None:
        ignored = target == ignore_index
        if not ignored.any():
            ignored = None
    classes = target if ignored is None else xp.where(ignored, 0, target)
    if weight is None and ignored is None:
        return classes, None
    if weight is None:
        sample_weight = xp.ones(target.shape, dtype=dtype)
    else:
        sample_weight = weight.astype(dtype, copy=False)[classes]
    if ignored is not None:
        sample_weight = xp.where(ignored, dtype.type(0), sample_weight)
    return classes, sample_weight


def _at_classes(xp, array, classes):
    """Index of ``array`` (N, C, ...) at each sample's class along axis 1."""
    if array.ndim == 2:  # fancy indexing costs a fraction of take_along_axis
        return (xp.arange(classes.shape[0]), classes)
    n, rest = array.shape[0], array.shape[2:]
    grids = xp.meshgrid(*[xp.arange(d) for d in (n,) + rest], indexing='ij', sparse=True)
    return (grids[0], classes) + tuple(grids[1:])


def _nll(xp, log_prob, target, weight, ignore_index, reduction):
    """Weighted negative log-likelihood of ``target`` classes (axis 1 of
    ``log_prob``), reduced as ONNX's ``reduction`` says."""
    if reduction not in ('none', 'sum', 'mean'):
        raise ValueError("reduction must be 'none', 'sum' or 'mean', got %r" % (reduction,))
    classes, sample_weight = _targets(xp, target, weight, ignore_index, log_prob.dtype)
    loss = -log_prob[_at_classes(xp, log_prob, classes)]
    if sample_weight is not None:
        loss *= sample_weight
    if reduction == 'none':
        return loss
    if reduction == 'sum':
        return loss.sum()
    # 'mean' divides by the total weight of the samples taken into account.
    total = loss.dtype.type(loss.size) if sample_weight is None else sample_weight.sum()
    return loss.sum() / total


@kernel('NegativeLogLikelihoodLoss', versions=(12, LATEST))
def negative_log_likelihood_loss(xp, input, target, weight=None, *, ignore_index=None,
                                 reduction='mean'):
    return _nll(xp, input, target, weight, ignore_index, reduction)


@kernel('SoftmaxCrossEntropyLoss', versions=(12, LATEST), samples='per_sample')
def softmax_cross_entropy_loss(xp, scores, labels, weights=None, *, ignore_index=None,
                               reduction='mean'):
    log_prob = log_softmax_along(xp, scores, 1)
    return _nll(xp, log_prob, labels, weights, ignore_index, reduction), log_prob


# -- gradient kernels (org.chainer_compiler) ---------------------------------------------

from .registry import CUSTOM_DOMAIN, like, shaped_by  # noqa: E402


def _nll_coefficients(xp, gy, target, weight, ignore_index, reduction, dtype):
    """d loss / d (-log_prob[n, target[n], ...]) per sample: the sample's
    weight (0 where ignored) times the output gradient, divided by the total
    weight for 'mean' (a scalar when all weights are 1).  Returns
    (coefficients, classes with ignored -> 0)."""
    if reduction not in ('none', 'sum', 'mean'):
        raise ValueError("reduction must be 'none', 'sum' or 'mean', got %r" % (reduction,))
    classes, sample_weight = _targets(xp, target, weight, ignore_index, dtype)
    gy = gy.astype(dtype, copy=False)
    if reduction == 'mean':
        gy = gy / (dtype.type(target.size) if sample_weight is None else sample_weight.sum())
    if sample_weight is None:
        return (gy if reduction != 'none' else gy.copy()), classes
    return sample_weight * gy, classes


@kernel('NegativeLogLikelihoodLossGrad', domain=CUSTOM_DOMAIN, outputs=('gx',),
        types=shaped_by('shape'), attributes={'shape': 'ints', 'ignore_index': 'int'})
def negative_log_likelihood_loss_grad(xp, gy, target, weight=None, *, shape,
                                      ignore_index=None, reduction='mean'):
    """Gradient of NegativeLogLikelihoodLoss with respect to its (N, C, ...)
    input of static ``shape``: -coefficient at each sample's class, else 0."""
    coefficients, classes = _nll_coefficients(xp, gy, target, weight, ignore_index,
                                              reduction, gy.dtype)
    grad = xp.zeros(tuple(shape), dtype=gy.dtype)
    grad[_at_classes(xp, grad, classes)] = -coefficients
    return grad


@kernel('SoftmaxCrossEntropyLossGrad', domain=CUSTOM_DOMAIN, outputs=('gscores',),
        types=like(1), attributes={'ignore_index': 'int'})
def softmax_cross_entropy_loss_grad(xp, gy, log_prob, labels, weights=None, *,
                                    ignore_index=None, reduction='mean'):
    """Gradient of SoftmaxCrossEntropyLoss's loss with respect to its scores,
    from the forward's log_prob: (softmax - one_hot) * coefficient."""
    coefficients, classes = _nll_coefficients(xp, gy, labels, weights, ignore_index,
                                              reduction, log_prob.dtype)
    grad = xp.exp(log_prob)
    grad *= coefficients if coefficients.ndim == 0 else xp.expand_dims(coefficients, 1)
    grad[_at_classes(xp, grad, classes)] -= coefficients
    return grad

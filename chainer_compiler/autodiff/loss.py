"""Gradient rules for the loss family.

Both losses get one custom node each (org.chainer_compiler, kernels in
runtime/ops/loss.py):

* SoftmaxCrossEntropyLossGrad(gy, log_prob, labels[, weights];
  ignore_index, reduction) -> gradient of the scores.  It reads the forward's
  log_prob output; a forward node that does not produce it is given that
  output (``forward_output``), so the softmax is not computed twice.
* NegativeLogLikelihoodLossGrad(gy, target[, weight]; shape, ignore_index,
  reduction) -> gradient of the input (of static ``shape``); nothing of the
  forward's float data is retained.

Labels and class weights get no gradient.
"""
import numpy

from ..onnx_builder import GraphBuilder
from ..onnx_graph import optional_input
from ..runtime.ops.registry import CUSTOM_DOMAIN
from .registry import gradient


def forward_output(b, node, index, dtype, shape, hint):
    """Name of output ``index`` of forward ``node``; when the node leaves it
    out, it is added to the node (which the forward program then computes and
    retains) under a fresh name."""
    if len(node.output) > index and node.output[index]:
        return node.output[index]
    name = GraphBuilder.fresh(b, '%s/%s' % (node.output[0], hint))
    while len(node.output) <= index:
        node.output.append('')
    node.output[index] = name
    b.value_types[name] = (numpy.dtype(dtype), tuple(shape))
    return name


def _loss_attrs(b, node):
    return {'ignore_index': b.attr(node, 'ignore_index'),
            'reduction': b.attr(node, 'reduction')}


@gradient('SoftmaxCrossEntropyLoss')
def softmax_cross_entropy_loss_grad(b, node, gys):
    scores, labels = node.input[:2]
    weights = optional_input(node, 2)
    g_loss = gys[0]
    g_log_prob = gys[1] if len(gys) > 1 else None
    log_prob = forward_output(b, node, 1, b.dtype(scores), b.dims(scores), 'log_prob')
    grads = []
    if g_loss is not None:
        inputs = [g_loss, log_prob, labels] + ([weights] if weights else [])
        grads.append(b.node('SoftmaxCrossEntropyLossGrad', inputs, 1, domain=CUSTOM_DOMAIN,
                            **_loss_attrs(b, node)))
    if g_log_prob is not None:  # LogSoftmax's rule along axis 1
        total = b.reduce('ReduceSum', g_log_prob, [1], keepdims=True)
        grads.append(b.node('Sub', [g_log_prob,
                                    b.node('Mul', [b.node('Exp', [log_prob]), total])]))
    g_scores = grads[0] if len(grads) == 1 else b.node('Add', grads)
    return [g_scores] + [None] * (len(node.input) - 1)


@gradient('NegativeLogLikelihoodLoss')
def negative_log_likelihood_loss_grad(b, node, gys):
    x, target = node.input[:2]
    weight = optional_input(node, 2)
    inputs = [gys[0], target] + ([weight] if weight else [])
    gx = b.node('NegativeLogLikelihoodLossGrad', inputs, 1, domain=CUSTOM_DOMAIN,
                shape=list(b.shape(x)), **_loss_attrs(b, node))
    return [gx] + [None] * (len(node.input) - 1)

"""Gradient rules for the rnn family: the ONNX LSTM, GRU and RNN operators.

Each differentiates with one custom node (org.chainer_compiler, kernels in
runtime/ops/rnn.py) that back-propagates through time, with the forward's
masks for ``sequence_lens`` (steps past a sequence's length keep the state
and emit zeros):

* LSTMGrad(X, W, R, B, sequence_lens, initial_h, initial_c, P, Y, gY, gY_h,
  gY_c; the LSTM's attributes) -> gX, gW, gR, gB, g_initial_h, g_initial_c, gP
* GRUGrad(X, W, R, B, sequence_lens, initial_h, Y, gY, gY_h; the GRU's
  attributes) -> gX, gW, gR, gB, g_initial_h
* RNNGrad(X, W, R, B, sequence_lens, initial_h, Y, gY, gY_h; the RNN's
  attributes) -> gX, gW, gR, gB, g_initial_h

Any of the upstream gradients may be empty (zero).  The node asks only for
the leading outputs it needs.  The rule reads the forward's Y output (added
to the node when it leaves it out): the hidden state before every step, so
that the kernels compute every gate pre-activation with one batched matmul
instead of re-running the recurrence step by step (the LSTM cell state is
recomputed with elementwise operations only).  The retained values are the
node's inputs and Y, about the size of the layer's input and output.
"""
from onnx import helper

from ..runtime.ops.registry import CUSTOM_DOMAIN
from .loss import forward_output
from .registry import gradient

#: op -> (gradient op, number of state outputs (Y_h[, Y_c]), forward input
#: index of each gradient output in order)
_GRADS = {
    'LSTM': ('LSTMGrad', 2, (0, 1, 2, 3, 5, 6, 7)),
    'GRU': ('GRUGrad', 1, (0, 1, 2, 3, 5)),
    'RNN': ('RNNGrad', 1, (0, 1, 2, 3, 5)),
}
_N_INPUTS = {'LSTM': 8, 'GRU': 6, 'RNN': 6}


def _attributes(node):
    attrs = {}
    for a in node.attribute:
        value = helper.get_attribute_value(a)
        if isinstance(value, bytes):
            value = value.decode()
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode() for v in value]
        attrs[a.name] = value
    return attrs


def _recurrent_grad(b, node, gys):
    grad_op, n_states, grad_inputs = _GRADS[node.op_type]
    inputs = list(node.input) + [''] * (_N_INPUTS[node.op_type] - len(node.input))
    X, R = inputs[0], inputs[2]
    layout = b.attr(node, 'layout')
    directions = 2 if b.attr(node, 'direction') == 'bidirectional' else 1
    hidden = b.attr(node, 'hidden_size') or b.dims(R)[-1]
    x_shape = b.dims(X)
    steps, batch = (x_shape[1], x_shape[0]) if layout else (x_shape[0], x_shape[1])
    y_shape = (batch, steps, directions, hidden) if layout else (steps, directions, batch, hidden)
    Y = forward_output(b, node, 0, b.dtype(X), y_shape, 'Y')
    gys = list(gys) + [None] * (1 + n_states - len(gys))
    upstream = [g or '' for g in gys[:1 + n_states]]
    wanted = [i for i, k in enumerate(grad_inputs) if inputs[k]]
    n_outputs = wanted[-1] + 1
    outs = b.node(grad_op, inputs + [Y] + upstream, n_outputs, domain=CUSTOM_DOMAIN,
                  **_attributes(node))
    outs = [outs] if n_outputs == 1 else outs
    grads = [None] * len(node.input)
    for i, k in enumerate(grad_inputs[:n_outputs]):
        if k < len(node.input) and node.input[k]:
            grads[k] = outs[i]
    return grads


gradient('LSTM', 'GRU', 'RNN')(_recurrent_grad)

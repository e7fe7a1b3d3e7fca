"""Recurrent kernels: RNN, GRU and LSTM (ONNX one-layer recurrences).

All three share the same frame: the input projection ``X W^T + Wb`` is
computed for every time step at once, then a Python loop over time applies
the cell.  Reverse directions and ``sequence_lens`` are handled by gathering
each sequence reversed within its own length, so every direction runs as a
forward pass; steps past a sequence's length keep the state and emit zeros.
"""
from .registry import kernel

# Default alpha and beta of the activations that take them; the values are
# those of the ONNX operators of the same name.
_ACTIVATION_DEFAULTS = {
    'affine': (1.0, 0.0),
    'leakyrelu': (0.01, None),
    'thresholdedrelu': (1.0, None),
    'scaledtanh': (1.0, 1.0),
    'hardsigmoid': (0.2, 0.5),
    'elu': (1.0, None),
}


def _make_activation(xp, name, alpha, beta):
    """Return the xp function for the ONNX activation ``name``."""
    key = name.lower()
    if key == 'sigmoid':
        return lambda x: (xp.tanh(x * 0.5) + 1) * 0.5  # overflow-free sigmoid
    if key == 'tanh':
        return xp.tanh
    if key == 'relu':
        return lambda x: xp.maximum(x, 0)
    if key == 'affine':
        return lambda x: x * alpha + beta
    if key == 'leakyrelu':
        return lambda x: xp.where(x >= 0, x, x * alpha)
    if key == 'thresholdedrelu':
        return lambda x: x * (x >= alpha)
    if key == 'scaledtanh':
        return lambda x: xp.tanh(x * beta) * alpha
    if key == 'hardsigmoid':
        return lambda x: xp.clip(x * alpha + beta, 0, 1)
    if key == 'elu':
        return lambda x: xp.where(x >= 0, x, (xp.exp(xp.minimum(x, 0)) - 1) * alpha)
    if key == 'softsign':
        return lambda x: x / (xp.abs(x) + 1)
    if key == 'softplus':
        return lambda x: xp.logaddexp(x, 0).astype(x.dtype, copy=False)
    raise ValueError('unsupported RNN activation %r' % name)


def _activations(xp, names, alphas, betas, num_directions, per_direction):
    """Build per-direction lists of activation functions.

    ``activation_alpha``/``activation_beta`` are consumed in order, one value
    per activation that takes the parameter (the convention of onnxruntime).
    When a bidirectional node lists only one direction's activations, both
    directions use them.
    """
    alphas, betas = list(alphas or ()), list(betas or ())
    funcs = []
    for name in names[:per_direction * num_directions]:
        default_alpha, default_beta = _ACTIVATION_DEFAULTS.get(name.lower(), (None, None))
        alpha = alphas.pop(0) if default_alpha is not None and alphas else default_alpha
        beta = betas.pop(0) if default_beta is not None and betas else default_beta
        funcs.append(_make_activation(xp, name, alpha, beta))
    if len(funcs) == per_direction:
        funcs = funcs * num_directions
    return [funcs[d * per_direction:(d + 1) * per_direction] for d in range(num_directions)]


def _clipper(xp, clip):
    if clip is None:
        return lambda x: x
    return lambda x: xp.clip(x, -clip, clip)


def _run(xp, cell, X, W, R, B, sequence_lens, initial_states, *, hidden_size,
         direction, layout, n_gates, activations):
    """Run ``cell`` over every direction; return (Y, final_state_1, ...).

    ``cell(d, x_proj, states, R_d, Rb_d, funcs) -> new states`` computes one
    step for direction ``d``; the first state is the hidden state ``H``.
    """
    if layout:
        X = X.transpose(1, 0, 2)
        initial_states = [None if s is None else s.transpose(1, 0, 2) for s in initial_states]
    seq_length, batch = X.shape[0], X.shape[1]
    num_directions = 2 if direction == 'bidirectional' else 1
    H = hidden_size or R.shape[-1]
    dtype = X.dtype
    if B is None:
        B = xp.zeros((num_directions, 2 * n_gates * H), dtype=dtype)
    steps = xp.arange(seq_length).reshape(-1, 1)
    if sequence_lens is None:
        lens = xp.full((1, batch), seq_length, dtype=steps.dtype)
    else:
        lens = sequence_lens.astype(steps.dtype).reshape(1, batch)
    valid = (steps < lens)[:, :, None]  # (T, batch, 1)
    # Index reversing each sequence within its own length (an involution).
    reverse_index = xp.where(steps < lens, lens - 1 - steps, steps)

    ys, finals = [], [[] for _ in initial_states]
    for d in range(num_directions):
        backward = direction == 'reverse' or d == 1
        x = X
        if backward:
            x = xp.take_along_axis(X, xp.broadcast_to(reverse_index[:, :, None], X.shape), axis=0)
        x_proj = xp.matmul(x, W[d].T) + B[d, :n_gates * H]
        states = [xp.zeros((batch, H), dtype=dtype) if s is None else s[d]
                  for s in initial_states]
        outputs = []
        for t in range(seq_length):
            new = cell(d, x_proj[t], states, R[d], B[d, n_gates * H:], activations[d])
            states = [xp.where(valid[t], n, s) for n, s in zip(new, states)]
            outputs.append(xp.where(valid[t], states[0], 0).astype(dtype, copy=False))
        y = xp.stack(outputs) if outputs else xp.zeros((0, batch, H), dtype=dtype)
        if backward:
            y = xp.take_along_axis(y, xp.broadcast_to(reverse_index[:, :, None], y.shape), axis=0)
        ys.append(y)
        for i, s in enumerate(states):
            finals[i].append(s)
    Y = xp.stack(ys, axis=1)  # (T, num_directions, batch, H)
    finals = [xp.stack(f) for f in finals]  # (num_directions, batch, H)
    if layout:
        Y = Y.transpose(2, 0, 1, 3)
        finals = [f.transpose(1, 0, 2) for f in finals]
    return (Y,) + tuple(finals)


@kernel('RNN')
def rnn(xp, X, W, R, B=None, sequence_lens=None, initial_h=None, *, hidden_size=None,
        activations=('Tanh',), activation_alpha=None, activation_beta=None, clip=None,
        direction='forward', layout=0, output_sequence=0):
    num_directions = 2 if direction == 'bidirectional' else 1
    funcs = _activations(xp, activations, activation_alpha, activation_beta, num_directions, 1)
    clipped = _clipper(xp, clip)

    def cell(d, x_proj, states, R_d, Rb, funcs):
        (f,), (h,) = funcs, states
        return (f(clipped(x_proj + xp.matmul(h, R_d.T) + Rb)),)

    return _run(xp, cell, X, W, R, B, sequence_lens, [initial_h], hidden_size=hidden_size,
                direction=direction, layout=layout, n_gates=1,
                activations=funcs)


@kernel('GRU')
def gru(xp, X, W, R, B=None, sequence_lens=None, initial_h=None, *, hidden_size=None,
        activations=('Sigmoid', 'Tanh'), activation_alpha=None, activation_beta=None,
        clip=None, direction='forward', layout=0, linear_before_reset=0, output_sequence=0):
    num_directions = 2 if direction == 'bidirectional' else 1
    funcs = _activations(xp, activations, activation_alpha, activation_beta, num_directions, 2)
    clipped = _clipper(xp, clip)

    def cell(d, x_proj, states, R_d, Rb, funcs):
        (f, g), (h,) = funcs, states
        H = h.shape[-1]
        xz, xr, xh = x_proj[:, :H], x_proj[:, H:2 * H], x_proj[:, 2 * H:]
        if linear_before_reset:
            rec = xp.matmul(h, R_d.T) + Rb
            z = f(clipped(xz + rec[:, :H]))
            r = f(clipped(xr + rec[:, H:2 * H]))
            candidate = g(clipped(xh + r * rec[:, 2 * H:]))
        else:
            rec = xp.matmul(h, R_d[:2 * H].T) + Rb[:2 * H]
            z = f(clipped(xz + rec[:, :H]))
            r = f(clipped(xr + rec[:, H:]))
            candidate = g(clipped(xh + xp.matmul(r * h, R_d[2 * H:].T) + Rb[2 * H:]))
        return ((1 - z) * candidate + z * h,)

    return _run(xp, cell, X, W, R, B, sequence_lens, [initial_h], hidden_size=hidden_size,
                direction=direction, layout=layout, n_gates=3,
                activations=funcs)


@kernel('LSTM')
def lstm(xp, X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, *,
         hidden_size=None, activations=('Sigmoid', 'Tanh', 'Tanh'), activation_alpha=None,
         activation_beta=None, clip=None, direction='forward', layout=0, input_forget=0,
         output_sequence=0):
    num_directions = 2 if direction == 'bidirectional' else 1
    funcs = _activations(xp, activations, activation_alpha, activation_beta, num_directions, 3)
    clipped = _clipper(xp, clip)

    def cell(d, x_proj, states, R_d, Rb, funcs):
        (f, g, h_act), (h, c) = funcs, states
        H = h.shape[-1]
        gates = x_proj + xp.matmul(h, R_d.T) + Rb
        gi, go, gf, gc = (gates[:, k * H:(k + 1) * H] for k in range(4))
        if P is not None:
            gi = gi + P[d, :H] * c
            gf = gf + P[d, 2 * H:] * c
        i = f(clipped(gi))
        forget = 1 - i if input_forget else f(clipped(gf))
        c_new = forget * c + i * g(clipped(gc))
        if P is not None:
            go = go + P[d, H:2 * H] * c_new
        o = f(clipped(go))
        return (o * h_act(c_new), c_new)

    return _run(xp, cell, X, W, R, B, sequence_lens, [initial_h, initial_c],
                hidden_size=hidden_size, direction=direction, layout=layout, n_gates=4,
                activations=funcs)

"""Recurrent kernels: RNN, GRU and LSTM (ONNX one-layer recurrences).

All three share the same frame: the input projection ``X W^T + Wb`` is
computed for every time step at once, then a Python loop over time applies
the cell.  Reverse directions and ``sequence_lens`` are handled by gathering
each sequence reversed within its own length, so every direction runs as a
forward pass; steps past a sequence's length keep the state and emit zeros.
"""
from .registry import kernel, recurrent_cost

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


@kernel('RNN', cost=recurrent_cost, samples='per_sample')
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


@kernel('GRU', cost=recurrent_cost, samples='per_sample')
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


@kernel('LSTM', cost=recurrent_cost, samples='per_sample')
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


# ---------------------------------------------------------------------------
# Gradients (custom domain org.chainer_compiler)
#
# LSTMGrad / GRUGrad / RNNGrad back-propagate through time.  They take the
# forward node's inputs, its output Y (the hidden state of every step, so
# the recurrent matmuls of the forward pass need not be redone one step at
# a time: every gate pre-activation is one batched matmul), and the
# gradients of Y, Y_h (and Y_c), any of which may be omitted (zero).  Y
# omitted too means: recompute it with the forward kernel.
# ---------------------------------------------------------------------------
from .registry import CUSTOM_DOMAIN, dim  # noqa: E402


def _grad_types(n_states):
    """The type rule of LSTMGrad (``n_states`` 2) and GRUGrad and RNNGrad (1):
    each gradient has the type and shape of its forward input (X, W, R, B,
    the initial states, P); for an omitted B or initial state, those of the
    zeros the kernel returns.  (An omitted P has no gradient.)"""
    def types(inputs, attributes):
        inputs = list(inputs) + [None] * (8 - len(inputs))
        X, W, R = inputs[:3]
        if X is None:
            return [None] * (4 + n_states + (n_states == 2))
        directions, gates, hidden = dim(W, 0), dim(W, 1), dim(R, 2)
        batch = dim(X, 0 if attributes['layout'] else 1)
        state = (batch, directions, hidden) if attributes['layout'] else (
            directions, batch, hidden)
        biases = None if gates is None else 2 * gates
        results = [X, W, R, inputs[3] or (X[0], (directions, biases))]
        results += [inputs[5 + i] or (X[0], state) for i in range(n_states)]
        return results + ([inputs[7]] if n_states == 2 else [])
    return types


#: The OpRecord facts the three gradients share.
_GRAD_FACTS = dict(domain=CUSTOM_DOMAIN, attributes={
    'hidden_size': 'int', 'activation_alpha': 'floats', 'activation_beta': 'floats',
    'clip': 'float'})


def _make_derivative(xp, name, alpha, beta):
    """Return ``d(z, a)``: the derivative of the ONNX activation ``name`` at
    pre-activation ``z`` whose value is ``a``."""
    key = name.lower()
    if key == 'sigmoid':
        return lambda z, a: a * (1 - a)
    if key == 'tanh':
        return lambda z, a: 1 - a * a
    if key == 'relu':
        return lambda z, a: (z > 0).astype(z.dtype)
    if key == 'affine':
        return lambda z, a: xp.full_like(z, alpha)
    if key == 'leakyrelu':
        return lambda z, a: xp.where(z >= 0, 1, alpha).astype(z.dtype)
    if key == 'thresholdedrelu':
        return lambda z, a: (z >= alpha).astype(z.dtype)
    if key == 'scaledtanh':
        return lambda z, a: (1 - xp.tanh(z * beta) ** 2) * (alpha * beta)
    if key == 'hardsigmoid':
        return lambda z, a: ((a > 0) & (a < 1)).astype(z.dtype) * alpha
    if key == 'elu':
        return lambda z, a: xp.where(z >= 0, 1, a + alpha).astype(z.dtype)
    if key == 'softsign':
        return lambda z, a: 1 / (xp.abs(z) + 1) ** 2
    if key == 'softplus':
        return lambda z, a: (xp.tanh(z * 0.5) + 1) * 0.5
    raise ValueError('unsupported RNN activation %r' % name)


def _activation_pairs(xp, names, alphas, betas, num_directions, per_direction):
    """Like ``_activations``, but (function, derivative) pairs."""
    alphas, betas = list(alphas or ()), list(betas or ())
    pairs = []
    for name in names[:per_direction * num_directions]:
        default_alpha, default_beta = _ACTIVATION_DEFAULTS.get(name.lower(), (None, None))
        alpha = alphas.pop(0) if default_alpha is not None and alphas else default_alpha
        beta = betas.pop(0) if default_beta is not None and betas else default_beta
        pairs.append((_make_activation(xp, name, alpha, beta),
                      _make_derivative(xp, name, alpha, beta)))
    if len(pairs) == per_direction:
        pairs = pairs * num_directions
    return [pairs[d * per_direction:(d + 1) * per_direction] for d in range(num_directions)]


def _activation_with_slope(xp, clip):
    """``act(fn, dfn, pre) -> (fn(clip(pre)), d fn(clip(pre)) / d pre)``: an
    activation of the clipped pre-activation with its slope, zero where the
    cell clip cut ``pre``."""
    clipped = _clipper(xp, clip)

    def act(fn, dfn, pre):
        z = clipped(pre)
        a = fn(z)
        slope = dfn(z, a)
        if clip is None:
            return a, slope
        return a, slope * ((pre >= -clip) & (pre <= clip)).astype(pre.dtype)
    return act


def _through_time(xp, cell_grad, X, W, R, B, sequence_lens, initial_states, Y, gY, g_finals,
                  *, hidden_size, direction, layout, n_gates):
    """Shared frame of the gradient kernels.

    For every direction the sequences are put in processing order (reversed
    within their lengths for backward directions, as ``_run`` does), the
    previous hidden state of every step is read from Y, and
    ``cell_grad(d, x_proj, hs, states0, mask, gy, g_final) -> (g_x_proj,
    gR_d, gRb_d, g_states0)`` back-propagates through the steps.  Returns
    gX, gW, gR, gB and the gradients of the initial states.
    """
    if layout:
        X = X.transpose(1, 0, 2)
        Y = Y.transpose(1, 2, 0, 3)
        gY = None if gY is None else gY.transpose(1, 2, 0, 3)
        initial_states = [None if s is None else s.transpose(1, 0, 2) for s in initial_states]
        g_finals = [None if g is None else g.transpose(1, 0, 2) for g in g_finals]
    seq_length, batch, input_size = X.shape
    num_directions = 2 if direction == 'bidirectional' else 1
    H = hidden_size or R.shape[-1]
    G = n_gates * H
    dtype = X.dtype
    if B is None:
        B = xp.zeros((num_directions, 2 * G), dtype=dtype)
    steps = xp.arange(seq_length).reshape(-1, 1)
    if sequence_lens is None:
        lens = xp.full((1, batch), seq_length, dtype=steps.dtype)
    else:
        lens = sequence_lens.astype(steps.dtype).reshape(1, batch)
    mask = (steps < lens)[:, :, None].astype(dtype)  # (T, batch, 1)
    reverse_index = xp.where(steps < lens, lens - 1 - steps, steps)
    reverse_index = reverse_index[:, :, None]

    gX = xp.zeros_like(X)
    gW, gR = xp.zeros_like(W), xp.zeros_like(R)
    gB = xp.zeros((num_directions, 2 * G), dtype=dtype)
    g_initial = [xp.zeros((num_directions, batch, H), dtype=dtype) for _ in initial_states]
    for d in range(num_directions):
        backward = direction == 'reverse' or d == 1

        def order(a, backward=backward):
            if not backward or a is None:
                return a
            return xp.take_along_axis(a, xp.broadcast_to(reverse_index, a.shape), axis=0)

        x = order(X)
        y = order(Y[:, d])
        gy = None if gY is None else order(gY[:, d]) * mask
        states0 = [xp.zeros((batch, H), dtype=dtype) if s is None else s[d]
                   for s in initial_states]
        hs = xp.concatenate([states0[0][None], y[:-1]], axis=0)  # h before each step
        x_proj = xp.matmul(x, W[d].T) + B[d, :G]
        g_final = [None if g is None else g[d] for g in g_finals]
        g_proj, gR[d], gB[d, G:], g0 = cell_grad(d, x_proj, hs, states0, mask, gy, g_final,
                                                R[d], B[d, G:])
        flat = g_proj.reshape(-1, G)
        gW[d] = xp.matmul(flat.T, x.reshape(-1, input_size))
        gB[d, :G] = flat.sum(axis=0)
        gX += order(xp.matmul(g_proj, W[d]))
        for i, g in enumerate(g0):
            g_initial[i][d] = g
    if layout:
        gX = gX.transpose(1, 0, 2)
        g_initial = [g.transpose(1, 0, 2) for g in g_initial]
    return (gX, gW, gR, gB) + tuple(g_initial)


def _outer_sum(xp, a, b):
    """sum over steps and batch of a^T b: (T, batch, m), (T, batch, n) -> (m, n)."""
    return xp.matmul(a.reshape(-1, a.shape[-1]).T, b.reshape(-1, b.shape[-1]))


def _zeros_or(xp, g, like):
    return xp.zeros_like(like) if g is None else g


@kernel('RNNGrad', **_GRAD_FACTS, outputs=('gX', 'gW', 'gR', 'gB', 'g_initial_h'),
        types=_grad_types(1))
def rnn_grad(xp, X, W, R, B=None, sequence_lens=None, initial_h=None, Y=None, gY=None,
             gY_h=None, *, n_outputs=5, hidden_size=None, activations=('Tanh',),
             activation_alpha=None, activation_beta=None, clip=None, direction='forward',
             layout=0, output_sequence=0):
    """Gradients of RNN: gX, gW, gR, gB, g_initial_h (the first n_outputs)."""
    if Y is None:
        Y = rnn(xp, X, W, R, B, sequence_lens, initial_h, hidden_size=hidden_size,
                activations=activations, activation_alpha=activation_alpha,
                activation_beta=activation_beta, clip=clip, direction=direction,
                layout=layout)[0]
    num_directions = 2 if direction == 'bidirectional' else 1
    pairs = _activation_pairs(xp, activations, activation_alpha, activation_beta,
                              num_directions, 1)
    act = _activation_with_slope(xp, clip)

    def cell_grad(d, x_proj, hs, states0, mask, gy, g_final, R_d, Rb):
        ((f, df),) = pairs[d]
        pre = x_proj + xp.matmul(hs, R_d.T) + Rb
        _, slope = act(f, df, pre)
        g_pre = xp.empty_like(pre)
        dh = _zeros_or(xp, g_final[0], states0[0])
        for t in range(len(pre) - 1, -1, -1):
            m = mask[t]
            if gy is not None:
                dh = dh + gy[t]
            g_pre[t] = dh * m * slope[t]
            dh = dh * (1 - m) + xp.matmul(g_pre[t], R_d)
        return g_pre, _outer_sum(xp, g_pre, hs), g_pre.sum(axis=(0, 1)), [dh]

    grads = _through_time(xp, cell_grad, X, W, R, B, sequence_lens, [initial_h], Y, gY, [gY_h],
                          hidden_size=hidden_size, direction=direction, layout=layout,
                          n_gates=1)
    return grads[:n_outputs]


@kernel('GRUGrad', **_GRAD_FACTS, outputs=('gX', 'gW', 'gR', 'gB', 'g_initial_h'),
        types=_grad_types(1))
def gru_grad(xp, X, W, R, B=None, sequence_lens=None, initial_h=None, Y=None, gY=None,
             gY_h=None, *, n_outputs=5, hidden_size=None, activations=('Sigmoid', 'Tanh'),
             activation_alpha=None, activation_beta=None, clip=None, direction='forward',
             layout=0, linear_before_reset=0, output_sequence=0):
    """Gradients of GRU: gX, gW, gR, gB, g_initial_h (the first n_outputs)."""
    if Y is None:
        Y = gru(xp, X, W, R, B, sequence_lens, initial_h, hidden_size=hidden_size,
                activations=activations, activation_alpha=activation_alpha,
                activation_beta=activation_beta, clip=clip, direction=direction,
                layout=layout, linear_before_reset=linear_before_reset)[0]
    num_directions = 2 if direction == 'bidirectional' else 1
    pairs = _activation_pairs(xp, activations, activation_alpha, activation_beta,
                              num_directions, 2)
    act = _activation_with_slope(xp, clip)

    def cell_grad(d, x_proj, hs, states0, mask, gy, g_final, R_d, Rb):
        (f, df), (g, dg) = pairs[d]
        H = hs.shape[-1]
        xz, xr, xh = x_proj[..., :H], x_proj[..., H:2 * H], x_proj[..., 2 * H:]
        if linear_before_reset:
            rec = xp.matmul(hs, R_d.T) + Rb
            rec_h = rec[..., 2 * H:]
        else:
            rec = xp.matmul(hs, R_d[:2 * H].T) + Rb[:2 * H]
        z, sz = act(f, df, xz + rec[..., :H])
        r, sr = act(f, df, xr + rec[..., H:2 * H])
        if linear_before_reset:
            n, sn = act(g, dg, xh + r * rec_h)
        else:
            rh = r * hs
            n, sn = act(g, dg, xh + xp.matmul(rh, R_d[2 * H:].T) + Rb[2 * H:])
        g_proj = xp.empty_like(x_proj)
        g_rec = xp.empty_like(x_proj) if linear_before_reset else g_proj
        dh = _zeros_or(xp, g_final[0], states0[0])
        for t in range(len(x_proj) - 1, -1, -1):
            m = mask[t]
            if gy is not None:
                dh = dh + gy[t]
            dnew = dh * m
            dpz = dnew * (hs[t] - n[t]) * sz[t]
            dpn = dnew * (1 - z[t]) * sn[t]
            if linear_before_reset:
                dpr = dpn * rec_h[t] * sr[t]
                g_rec[t, :, :H] = dpz
                g_rec[t, :, H:2 * H] = dpr
                g_rec[t, :, 2 * H:] = dpn * r[t]
                back = xp.matmul(g_rec[t], R_d)
            else:
                drh = xp.matmul(dpn, R_d[2 * H:])
                dpr = drh * hs[t] * sr[t]
                back = drh * r[t] + xp.matmul(dpz, R_d[:H]) + xp.matmul(dpr, R_d[H:2 * H])
            g_proj[t, :, :H] = dpz
            g_proj[t, :, H:2 * H] = dpr
            g_proj[t, :, 2 * H:] = dpn
            dh = dh * (1 - m) + dnew * z[t] + back
        if linear_before_reset:
            gR_d = _outer_sum(xp, g_rec, hs)
        else:
            gR_d = xp.concatenate([_outer_sum(xp, g_proj[..., :2 * H], hs),
                                   _outer_sum(xp, g_proj[..., 2 * H:], rh)], axis=0)
        return g_proj, gR_d, g_rec.sum(axis=(0, 1)), [dh]

    grads = _through_time(xp, cell_grad, X, W, R, B, sequence_lens, [initial_h], Y, gY, [gY_h],
                          hidden_size=hidden_size, direction=direction, layout=layout,
                          n_gates=3)
    return grads[:n_outputs]


@kernel('LSTMGrad', **_GRAD_FACTS, types=_grad_types(2),
        outputs=('gX', 'gW', 'gR', 'gB', 'g_initial_h', 'g_initial_c', 'gP'))
def lstm_grad(xp, X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None,
              Y=None, gY=None, gY_h=None, gY_c=None, *, n_outputs=7, hidden_size=None,
              activations=('Sigmoid', 'Tanh', 'Tanh'), activation_alpha=None,
              activation_beta=None, clip=None, direction='forward', layout=0, input_forget=0,
              output_sequence=0):
    """Gradients of LSTM: gX, gW, gR, gB, g_initial_h, g_initial_c, gP (the
    first n_outputs).  The cell state is recomputed step by step (elementwise
    only: the gates' matmuls are batched over time from Y)."""
    if Y is None:
        Y = lstm(xp, X, W, R, B, sequence_lens, initial_h, initial_c, P,
                 hidden_size=hidden_size, activations=activations,
                 activation_alpha=activation_alpha, activation_beta=activation_beta,
                 clip=clip, direction=direction, layout=layout, input_forget=input_forget)[0]
    num_directions = 2 if direction == 'bidirectional' else 1
    pairs = _activation_pairs(xp, activations, activation_alpha, activation_beta,
                              num_directions, 3)
    act = _activation_with_slope(xp, clip)
    gP = None if P is None else xp.zeros_like(P)

    def cell_grad(d, x_proj, hs, states0, mask, gy, g_final, R_d, Rb):
        (f, df), (g, dg), (h_act, dh_act) = pairs[d]
        T, H = len(x_proj), hs.shape[-1]
        pre = x_proj + xp.matmul(hs, R_d.T) + Rb
        p_i, p_o, p_f, p_c = (pre[..., k * H:(k + 1) * H] for k in range(4))
        if P is None:  # every gate but through c is known now
            i, si = act(f, df, p_i)
            o, so = act(f, df, p_o)
            if not input_forget:
                forget, sf = act(f, df, p_f)
        else:
            i, si, o, so = (xp.empty_like(p_i) for _ in range(4))
            if not input_forget:
                forget, sf = xp.empty_like(p_i), xp.empty_like(p_i)
            Pi, Po, Pf = P[d, :H], P[d, H:2 * H], P[d, 2 * H:]
        if input_forget:
            forget = 1 - i if P is None else xp.empty_like(p_i)
        cand, sc = act(g, dg, p_c)
        c_prev, c_new = xp.empty_like(p_c), xp.empty_like(p_c)
        c = states0[1]
        for t in range(T):
            c_prev[t] = c
            if P is not None:
                i[t], si[t] = act(f, df, p_i[t] + Pi * c)
                if input_forget:
                    forget[t] = 1 - i[t]
                else:
                    forget[t], sf[t] = act(f, df, p_f[t] + Pf * c)
            c_new[t] = forget[t] * c + i[t] * cand[t]
            if P is not None:
                o[t], so[t] = act(f, df, p_o[t] + Po * c_new[t])
            c = xp.where(mask[t] > 0, c_new[t], c)
        hc = h_act(c_new)
        shc = dh_act(c_new, hc)

        g_pre = xp.empty_like(pre)
        dh = _zeros_or(xp, g_final[0], states0[0])
        dc = _zeros_or(xp, g_final[1], states0[1])
        for t in range(T - 1, -1, -1):
            m = mask[t]
            if gy is not None:
                dh = dh + gy[t]
            dnh, dnc = dh * m, dc * m
            dpo = dnh * hc[t] * so[t]
            dcn = dnc + dnh * o[t] * shc[t]
            if P is not None:
                dcn = dcn + dpo * Po
            dforget = dcn * c_prev[t]
            di = dcn * cand[t]
            if input_forget:
                di = di - dforget
                dpf = xp.zeros_like(di)
            else:
                dpf = dforget * sf[t]
            dpi = di * si[t]
            g_pre[t, :, :H] = dpi
            g_pre[t, :, H:2 * H] = dpo
            g_pre[t, :, 2 * H:3 * H] = dpf
            g_pre[t, :, 3 * H:] = dcn * i[t] * sc[t]
            dc = dc * (1 - m) + dcn * forget[t]
            if P is not None:
                dc = dc + dpi * Pi + dpf * Pf
                gP[d, :H] += (dpi * c_prev[t]).sum(axis=0)
                gP[d, H:2 * H] += (dpo * c_new[t]).sum(axis=0)
                gP[d, 2 * H:] += (dpf * c_prev[t]).sum(axis=0)
            dh = dh * (1 - m) + xp.matmul(g_pre[t], R_d)
        return g_pre, _outer_sum(xp, g_pre, hs), g_pre.sum(axis=(0, 1)), [dh, dc]

    grads = _through_time(xp, cell_grad, X, W, R, B, sequence_lens, [initial_h, initial_c], Y,
                          gY, [gY_h, gY_c], hidden_size=hidden_size, direction=direction,
                          layout=layout, n_gates=4)
    if P is not None:
        grads = grads + (gP,)
    elif n_outputs > 6:
        grads = grads + (xp.zeros((num_directions, 3 * R.shape[-1]), dtype=X.dtype),)
    return grads[:n_outputs]

"""Optimizer kernels of the ai.onnx.preview.training domain: Adagrad, Adam, Momentum.

Each call updates several tensors at once: the variadic inputs hold all the
tensors to optimize, then all their gradients, then each kind of optimizer
state, and the outputs follow the same grouping.  The scalar learning rate
``R`` and update count ``T`` are read to the host once per call.
"""
import math

from .registry import kernel

DOMAIN = 'ai.onnx.preview.training'


def _groups(inputs, n_groups, op):
    """Split the variadic inputs into ``n_groups`` equal lists."""
    if len(inputs) % n_groups:
        raise ValueError('%s: %d variadic inputs is not a multiple of %d'
                         % (op, len(inputs), n_groups))
    n = len(inputs) // n_groups
    return [inputs[i * n:(i + 1) * n] for i in range(n_groups)]


def _flatten(per_tensor):
    """[(x1_new, s1_new), (x2_new, s2_new)] -> (x1_new, x2_new, s1_new, s2_new)."""
    return tuple(value for group in zip(*per_tensor) for value in group)


@kernel('Adagrad', domain=DOMAIN)
def adagrad(xp, R, T, *inputs, decay_factor=0.0, epsilon=1e-6, norm_coefficient=0.0):
    rate = float(R) / (1 + float(T) * decay_factor)
    results = []
    for X, G, H in zip(*_groups(inputs, 3, 'Adagrad')):
        g = X * norm_coefficient + G
        H_new = H + g * g
        X_new = X - rate * g / (xp.sqrt(H_new) + epsilon)
        results.append((X_new.astype(X.dtype, copy=False), H_new.astype(H.dtype, copy=False)))
    return _flatten(results)


@kernel('Adam', domain=DOMAIN)
def adam(xp, R, T, *inputs, alpha=0.9, beta=0.999, epsilon=1e-6, norm_coefficient=0.0,
         norm_coefficient_post=0.0):
    step = float(T)
    rate = float(R)
    if step > 0:  # bias correction of both running averages
        rate *= math.sqrt(1 - beta ** step) / (1 - alpha ** step)
    results = []
    for X, G, V, H in zip(*_groups(inputs, 4, 'Adam')):
        g = X * norm_coefficient + G
        V_new = V * alpha + g * (1 - alpha)
        H_new = H * beta + g * g * (1 - beta)
        X_new = (X - rate * V_new / (xp.sqrt(H_new) + epsilon)) * (1 - norm_coefficient_post)
        results.append((X_new.astype(X.dtype, copy=False), V_new.astype(V.dtype, copy=False),
                        H_new.astype(H.dtype, copy=False)))
    return _flatten(results)


@kernel('Momentum', domain=DOMAIN)
def momentum(xp, R, T, *inputs, alpha, beta, mode, norm_coefficient):
    if mode not in ('standard', 'nesterov'):
        raise ValueError('Momentum: mode must be "standard" or "nesterov", got %r' % mode)
    rate = float(R)
    beta_adjusted = beta if float(T) > 0 else 1.0  # the first update takes the full gradient
    results = []
    for X, G, V in zip(*_groups(inputs, 3, 'Momentum')):
        g = X * norm_coefficient + G
        V_new = V * alpha + g * beta_adjusted
        direction = g + V_new * alpha if mode == 'nesterov' else V_new
        X_new = X - rate * direction
        results.append((X_new.astype(X.dtype, copy=False), V_new.astype(V.dtype, copy=False)))
    return _flatten(results)

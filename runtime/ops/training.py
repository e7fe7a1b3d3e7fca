"""Optimizer kernels.

The ai.onnx.preview.training domain (Adagrad, Adam, Momentum) is functional:
each call updates several tensors at once (the variadic inputs hold all the
tensors to optimize, then all their gradients, then each kind of optimizer
state; the outputs follow the same grouping) and returns new arrays.  The
scalar learning rate ``R`` and update count ``T`` are read to the host once
per call.

This project's domain adds Chainer's update rules (SGDUpdate,
MomentumSGDUpdate, AdamUpdate) for fully compiled training steps: they
update one parameter and its state arrays *in place*, with the formulas of
``chainer.optimizers``, so the model's own arrays carry the trained weights.
Hyperparameters are 0-d inputs, read to the host each call, because
schedules (ExponentialShift, Adam's bias correction) change them per step.
"""
import math

import numpy

from . import cupy_kernels
from .math import gemm
from .registry import CUSTOM_DOMAIN, elements, kernel, like

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


@kernel('Adagrad', domain=DOMAIN, gradient=False)
def adagrad(xp, R, T, *inputs, decay_factor=0.0, epsilon=1e-6, norm_coefficient=0.0):
    rate = float(R) / (1 + float(T) * decay_factor)
    results = []
    for X, G, H in zip(*_groups(inputs, 3, 'Adagrad')):
        g = X * norm_coefficient + G
        H_new = H + g * g
        X_new = X - rate * g / (xp.sqrt(H_new) + epsilon)
        results.append((X_new.astype(X.dtype, copy=False), H_new.astype(H.dtype, copy=False)))
    return _flatten(results)


@kernel('Adam', domain=DOMAIN, gradient=False)
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


@kernel('Momentum', domain=DOMAIN, gradient=False)
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


#: Elements a NumPy update works on at a time: its temporaries (``lr *
#: grad``, Adam's step) are then a block, not the parameter's size, which a
#: training step's peak would otherwise carry beside every weight it holds.
UPDATE_BLOCK = 1 << 15


def _blocks(xp, *arrays):
    """Flat views of ``arrays`` (of one size), a block of UPDATE_BLOCK
    elements at a time; the whole arrays at once on CuPy (a kernel launch
    per block would cost more than the memory saves) or when one is not
    contiguous (no flat view of it exists)."""
    if xp is not numpy or not all(a.flags.c_contiguous for a in arrays):
        yield arrays
        return
    flat = [a.reshape(-1) for a in arrays]
    for start in range(0, flat[0].size, UPDATE_BLOCK):
        yield tuple(f[start:start + UPDATE_BLOCK] for f in flat)


def _one_temporary(block=None):
    """OpRecord.scratch of an update on NumPy: one temporary the size of
    its parameter, or of at most ``block`` elements."""
    def scratch(inputs, outputs, attributes):
        size = elements(inputs[0])
        if size is None or inputs[0][0] is None:
            return None
        return min(size, block or size) * inputs[0][0].itemsize
    return scratch


# The updates overwrite the parameter and its state (``in_place``) and
# return the parameter's own array.
@kernel('SGDUpdate', domain=CUSTOM_DOMAIN, in_place=(0,), gradient=False,
        outputs=('param_out',), types=like(0), scratch=_one_temporary(UPDATE_BLOCK))
def sgd_update(xp, param, grad, lr):
    """In place: ``param -= lr * grad`` (chainer.optimizers.SGD).  Returns ``param``."""
    if xp is numpy or not cupy_kernels.sgd_update(xp, param, grad, float(lr)):
        for p, g in _blocks(xp, param, grad):
            p -= float(lr) * g
    return param


@kernel('GemmSGDUpdate', domain=CUSTOM_DOMAIN, in_place=(0,), gradient=False,
        outputs=('param_out',), types=like(0), scratch=_one_temporary())
def gemm_sgd_update(xp, param, a, b, lr, *, alpha=1.0, transA=0, transB=0):
    """In place: ``param -= lr * alpha * op(a) @ op(b)``, SGDUpdate of the
    gradient a Gemm (without C) makes, as one instruction: the native
    backend's fusion (runtime/native/fusion.py) writes it so that the
    gradient is never stored.  Returns ``param``."""
    param -= float(lr) * gemm(xp, a, b, alpha=alpha, transA=transA, transB=transB)
    return param


@kernel('MomentumSGDUpdate', domain=CUSTOM_DOMAIN, in_place=(0, 2), gradient=False,
        outputs=('param_out',), types=like(0), scratch=_one_temporary(UPDATE_BLOCK))
def momentum_sgd_update(xp, param, grad, v, lr, momentum):
    """In place: ``v = momentum * v - lr * grad; param += v``
    (chainer.optimizers.MomentumSGD).  Returns ``param``."""
    for p, g, v_block in _blocks(xp, param, grad, v):
        v_block *= float(momentum)
        v_block -= float(lr) * g
        p += v_block
    return param


@kernel('AdamUpdate', domain=CUSTOM_DOMAIN, in_place=(0, 2, 3), gradient=False,
        outputs=('param_out',), types=like(0), scratch=_one_temporary(UPDATE_BLOCK))
def adam_update(xp, param, grad, m, v, alpha_t, beta1, beta2, eps, eta, weight_decay_rate):
    """In place, chainer.optimizers.Adam with the bias-corrected ``alpha_t``:
    ``m += (1 - beta1) * (grad - m); v += (1 - beta2) * (grad**2 - v);
    param -= eta * (alpha_t * m / (sqrt(v) + eps) + weight_decay_rate * param)``.
    Returns ``param``."""
    eta, decay = float(eta), float(weight_decay_rate)
    for p, g, m_block, v_block in _blocks(xp, param, grad, m, v):
        # One temporary, reused: the products and sums of the formula, in its order.
        step = g - m_block
        step *= 1.0 - float(beta1)
        m_block += step
        xp.multiply(g, g, out=step)
        step -= v_block
        step *= 1.0 - float(beta2)
        v_block += step
        xp.sqrt(v_block, out=step)
        step += float(eps)
        xp.divide(float(alpha_t), step, out=step)
        step *= m_block
        if decay:
            p *= 1.0 - eta * decay
        if eta != 1.0:
            step *= eta
        p -= step
        del step  # before the next block's is made
    return param

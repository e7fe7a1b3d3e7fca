"""One training step of the benchmark models written by hand in NumPy: the
floor.  The same math as Chainer (forward, mean softmax cross-entropy,
backward, optimizer update) with no framework around it, so that the gap
between this and any framework is that framework's overhead.

Convolutional activations are kept channel-major, (C, N, H, W), instead of
Chainer's (N, C, H, W): a convolution is then a single GEMM of Chainer's own
weight viewed as (O, C*kh*kw) with (C*kh*kw, N*Ho*Wo) columns, its output is
already in that layout and contiguous, and BatchNormalization reduces along
the contiguous last axis of a (C, N*H*W) view.  Only the network's input
(transposed by a view) and the flattening before LeNet-5's first fully
connected layer touch Chainer's layout.
"""
import math

import chainer.links as L
import numpy
from models import MLP, LeNet5, ResNet18Style
from numpy.lib.stride_tricks import as_strided


def _relu_mask(gy, y):
    """Zero gy (in place) where the ReLU output y is not positive."""
    gy *= y > 0


class _Linear:
    """``x @ W.T + b`` on (N, in) rows, optionally followed by ReLU."""

    def __init__(self, params, grads, path, relu):
        self.W, self.b = params[path + '/W'], params[path + '/b']
        self.gW = grads[path + '/W'] = numpy.empty_like(self.W)
        self.gb = grads[path + '/b'] = numpy.empty_like(self.b)
        self.relu = relu

    def forward(self, x):
        self.x = x
        y = x @ self.W.T
        y += self.b
        if self.relu:
            numpy.maximum(y, 0, out=y)
            self.y = y
        return y

    def backward(self, gy, need_gx=True):
        # gy is ours to overwrite: every caller hands over a fresh array.
        if self.relu:
            _relu_mask(gy, self.y)
        numpy.matmul(gy.T, self.x, out=self.gW)
        gy.sum(axis=0, out=self.gb)
        return gy @ self.W if need_gx else None


class _Conv:
    """2-D convolution on (C, N, H, W) activations by im2col and one GEMM."""

    def __init__(self, params, grads, path, stride=1, pad=0):
        self.W = params[path + '/W']
        self.W2 = self.W.reshape(len(self.W), -1)  # a view: sees in-place updates
        gW = grads[path + '/W'] = numpy.empty_like(self.W)
        self.gW2 = gW.reshape(self.W2.shape)
        self.b = params.get(path + '/b')
        if self.b is not None:
            self.gb = grads[path + '/b'] = numpy.empty_like(self.b)
        self.stride, self.pad = stride, pad

    def forward(self, x):
        c, n, h, w = x.shape
        p, s = self.pad, self.stride
        kh, kw = self.W.shape[2:]
        if p:
            xp = numpy.zeros((c, n, h + 2 * p, w + 2 * p), x.dtype)
            xp[:, :, p:p + h, p:p + w] = x
        else:
            xp = x
        ho, wo = (xp.shape[2] - kh) // s + 1, (xp.shape[3] - kw) // s + 1
        sc, sn, sh, sw = xp.strides
        # Rows (c, i, j) match the flattened weight, columns (n, y, x) the output.
        windows = as_strided(xp, (c, kh, kw, n, ho, wo), (sc, sh, sw, sn, sh * s, sw * s))
        self.cols = windows.reshape(c * kh * kw, n * ho * wo)  # copies: BLAS wants it dense
        self.padded_shape, self.windows_shape = xp.shape, windows.shape
        y = self.W2 @ self.cols
        if self.b is not None:
            y += self.b[:, None]
        return y.reshape(len(self.W), n, ho, wo)

    def backward(self, gy, need_gx=True):
        gy2 = gy.reshape(len(self.W), -1)
        numpy.matmul(gy2, self.cols.T, out=self.gW2)
        if self.b is not None:
            gy2.sum(axis=1, out=self.gb)
        if not need_gx:
            return None
        return self._col2im((self.W2.T @ gy2).reshape(self.windows_shape))

    def _col2im(self, gcols):
        """Scatter-add the column gradients back onto the input, one kernel
        tap at a time (each tap is a strided slice of the padded input)."""
        _, kh, kw, _, ho, wo = gcols.shape
        p, s = self.pad, self.stride
        gxp = numpy.zeros(self.padded_shape, gcols.dtype)
        for i in range(kh):
            for j in range(kw):
                gxp[:, :, i:i + s * ho:s, j:j + s * wo:s] += gcols[:, i, j]
        h, w = self.padded_shape[2] - 2 * p, self.padded_shape[3] - 2 * p
        return gxp[:, :, p:p + h, p:p + w]


class _BatchNorm:
    """Training-mode BatchNormalization over (N, H, W) of (C, N, H, W)
    activations, optionally followed by ReLU; updates the running
    statistics like Chainer (decay 0.9, unbiased variance)."""

    eps, decay = 2e-5, 0.9

    def __init__(self, params, grads, stats, path, relu):
        self.gamma, self.beta = params[path + '/gamma'], params[path + '/beta']
        self.ggamma = grads[path + '/gamma'] = numpy.empty_like(self.gamma)
        self.gbeta = grads[path + '/beta'] = numpy.empty_like(self.beta)
        self.avg_mean, self.avg_var = stats[path + '/avg_mean'], stats[path + '/avg_var']
        self.relu = relu

    def forward(self, x):
        x2 = x.reshape(len(x), -1)
        m = x2.shape[1]
        mean = x2.mean(axis=1)
        centered = x2 - mean[:, None]
        y = numpy.square(centered)
        var = y.mean(axis=1)  # biased, as numpy.var (two passes, like Chainer)
        self.inv_std = 1 / numpy.sqrt(var + self.eps)
        centered *= self.inv_std[:, None]
        self.xhat = centered
        numpy.multiply(self.xhat, self.gamma[:, None], out=y)  # reuse the squares' buffer
        y += self.beta[:, None]
        if self.relu:
            numpy.maximum(y, 0, out=y)
            self.y = y
        self._update_statistics(mean, var, m)
        return y.reshape(x.shape)

    def _update_statistics(self, mean, var, m):
        self.avg_mean *= self.decay
        self.avg_mean += (1 - self.decay) * mean
        self.avg_var *= self.decay
        self.avg_var += (1 - self.decay) * (m / max(m - 1., 1.)) * var

    def backward(self, gy):
        # Only the ReLU writes into gy; without it gy stays intact, which a
        # residual block relies on to hand the same gy to both branches.
        gy2 = gy.reshape(len(self.xhat), -1)
        if self.relu:
            _relu_mask(gy2, self.y)
        gy2.sum(axis=1, out=self.gbeta)
        gx = gy2 * self.xhat
        gx.sum(axis=1, out=self.ggamma)
        # gx = gamma * inv_std * (gy - (xhat * ggamma + gbeta) / m)
        numpy.multiply(self.xhat, self.ggamma[:, None], out=gx)
        gx += self.gbeta[:, None]
        gx *= -1 / gy2.shape[1]
        gx += gy2
        gx *= (self.gamma * self.inv_std)[:, None]
        return gx.reshape(gy.shape)


def _upsample2(a):
    """Every element of the last two axes repeated 2x2: a pooled map spread
    back over its windows."""
    return a.repeat(2, axis=-1).repeat(2, axis=-2)


class _ReluMaxPool:
    """ReLU then 2x2 stride-2 max pooling on (C, N, H, W) activations.

    The gradient goes to every position equal to its window's maximum, where
    Chainer picks the first; only ties of positive values could differ,
    which random real-valued data practically never has (ties at zero are
    cut off by the ReLU)."""

    def forward(self, x):
        c, n, h, w = x.shape
        taps = x.reshape(c, n, h // 2, 2, w // 2, 2)
        # Maxima of pairs of taps: numpy's max over the two short,
        # non-adjacent window axes is some 30x slower.
        y = numpy.maximum(taps[:, :, :, 0], taps[:, :, :, 1])
        y = numpy.maximum(y[..., 0], y[..., 1])
        self.mask = x == _upsample2(y)
        numpy.maximum(y, 0, out=y)  # relu(max(x)) == max(relu(x))
        self.y = y
        return y

    def backward(self, gy):
        # The ReLU's mask applied at the pooled size, where it is 4x smaller.
        gx = _upsample2(gy * (self.y > 0))
        gx *= self.mask
        return gx


class _LinearStack:
    """Fully connected layers in sequence with ReLU between them."""

    def __init__(self, params, grads, paths):
        self.layers = [_Linear(params, grads, path, relu=i + 1 < len(paths))
                       for i, path in enumerate(paths)]

    def forward(self, x):
        for layer in self.layers:
            x = layer.forward(x)
        return x

    def backward(self, gy, need_gx):
        for layer in self.layers[:0:-1]:
            gy = layer.backward(gy)
        return self.layers[0].backward(gy, need_gx)


class _MLPNet:
    """models.MLP."""

    def __init__(self, model, params, grads, stats):
        self.fcs = _LinearStack(params, grads, ['/%d' % i for i in range(len(model))])

    def forward(self, x):
        return self.fcs.forward(x)

    def backward(self, gy):
        self.fcs.backward(gy, need_gx=False)


class _LeNet5Net:
    """models.LeNet5."""

    def __init__(self, model, params, grads, stats):
        self.conv1 = _Conv(params, grads, '/conv1', pad=2)
        self.pool1 = _ReluMaxPool()
        self.conv2 = _Conv(params, grads, '/conv2')
        self.pool2 = _ReluMaxPool()
        self.fcs = _LinearStack(params, grads, ['/fc3', '/fc4', '/fc5'])

    def forward(self, x):
        h = self.pool1.forward(self.conv1.forward(x.transpose(1, 0, 2, 3)))
        h = self.pool2.forward(self.conv2.forward(h))
        # Flatten per sample in Chainer's (C, H, W) order.
        return self.fcs.forward(h.transpose(1, 0, 2, 3).reshape(h.shape[1], -1))

    def backward(self, gy):
        gy = self.fcs.backward(gy, need_gx=True)
        c, n, h, w = self.pool2.y.shape
        gy = gy.reshape(n, c, h, w).transpose(1, 0, 2, 3)
        gy = self.conv2.backward(self.pool2.backward(gy))
        self.conv1.backward(self.pool1.backward(gy), need_gx=False)


class _BasicBlock:
    """ResNet's basic block; see models.BasicBlock."""

    def __init__(self, link, params, grads, stats, path):
        stride = link.conv1.stride[0]
        self.conv1 = _Conv(params, grads, path + '/conv1', stride, 1)
        self.bn1 = _BatchNorm(params, grads, stats, path + '/bn1', relu=True)
        self.conv2 = _Conv(params, grads, path + '/conv2', 1, 1)
        self.bn2 = _BatchNorm(params, grads, stats, path + '/bn2', relu=False)
        self.projects = link.projects
        if self.projects:
            self.conv_s = _Conv(params, grads, path + '/conv_s', stride, 0)
            self.bn_s = _BatchNorm(params, grads, stats, path + '/bn_s', relu=False)

    def forward(self, x):
        h = self.bn1.forward(self.conv1.forward(x))
        h = self.bn2.forward(self.conv2.forward(h))
        h += self.bn_s.forward(self.conv_s.forward(x)) if self.projects else x
        numpy.maximum(h, 0, out=h)
        self.y = h
        return h

    def backward(self, gy):
        _relu_mask(gy, self.y)
        # Both branches read gy; neither BatchNormalization (no ReLU) writes it.
        gx = self.conv1.backward(self.bn1.backward(self.conv2.backward(self.bn2.backward(gy))))
        gx += self.conv_s.backward(self.bn_s.backward(gy)) if self.projects else gy
        return gx


class _ResNet18StyleNet:
    """models.ResNet18Style."""

    def __init__(self, model, params, grads, stats):
        self.conv0 = _Conv(params, grads, '/conv0', 1, 1)
        self.bn0 = _BatchNorm(params, grads, stats, '/bn0', relu=True)
        self.blocks = [_BasicBlock(block, params, grads, stats, '/blocks/%d' % i)
                       for i, block in enumerate(model.blocks)]
        self.fcs = _LinearStack(params, grads, ['/fc'])

    def forward(self, x):
        h = self.bn0.forward(self.conv0.forward(x.transpose(1, 0, 2, 3)))
        for block in self.blocks:
            h = block.forward(h)
        self.last_shape = h.shape
        # The 4x4 average pooling sees the whole 4x4 map: a global mean.
        return self.fcs.forward(h.mean(axis=(2, 3)).T)

    def backward(self, gy):
        gy = self.fcs.backward(gy, need_gx=True)
        h, w = self.last_shape[2:]
        gh = numpy.empty(self.last_shape, gy.dtype)
        gh[...] = (gy.T / (h * w))[:, :, None, None]
        for block in self.blocks[::-1]:
            gh = block.backward(gh)
        gh = self.bn0.backward(gh)
        self.conv0.backward(gh, need_gx=False)


_NETS = {MLP: _MLPNet, LeNet5: _LeNet5Net, ResNet18Style: _ResNet18StyleNet}


def _softmax_cross_entropy(y, t):
    """Mean cross-entropy of the logits y (N, K) against labels t, and its
    gradient with respect to y."""
    n = len(y)
    z = y - y.max(axis=1, keepdims=True)  # log-softmax is shift-invariant
    e = numpy.exp(z)
    s = e.sum(axis=1, keepdims=True)
    rows = numpy.arange(n)
    loss = float(numpy.mean(numpy.log(s[:, 0]) - z[rows, t]))
    e /= s
    e[rows, t] -= 1
    e *= 1 / n
    return loss, e


def _sgd(pairs, lr=0.01):
    def update():
        for p, g in pairs:
            g *= lr  # the gradient is recomputed next step: use it as scratch
            p -= g
    return update


def _momentum_sgd(pairs, lr=0.01, momentum=0.9):
    vs = [numpy.zeros_like(p) for p, _ in pairs]

    def update():
        # Chainer's form: v = momentum * v - lr * g; p += v
        for (p, g), v in zip(pairs, vs):
            v *= momentum
            g *= lr
            v -= g
            p += v
    return update


def _adam(pairs, alpha=0.001, beta1=0.9, beta2=0.999, eps=1e-8):
    ms = [numpy.zeros_like(p) for p, _ in pairs]
    vs = [numpy.zeros_like(p) for p, _ in pairs]
    scratch = [numpy.empty_like(p) for p, _ in pairs]
    t = 0

    def update():
        nonlocal t
        t += 1
        alpha_t = alpha * math.sqrt(1. - math.pow(beta2, t)) / (1. - math.pow(beta1, t))
        for (p, g), m, v, d in zip(pairs, ms, vs, scratch):
            # m += (1 - beta1) * (g - m)
            numpy.subtract(g, m, out=d)
            d *= 1 - beta1
            m += d
            # v += (1 - beta2) * (g * g - v)
            g *= g
            g -= v
            g *= 1 - beta2
            v += g
            # p -= alpha_t / (sqrt(v) + eps) * m
            numpy.sqrt(v, out=d)
            d += eps
            numpy.divide(alpha_t, d, out=d)
            d *= m
            p -= d
    return update


_OPTIMIZERS = {'sgd': _sgd, 'momentum': _momentum_sgd, 'adam': _adam}


def _copy_params(model):
    """Copies of the parameters by Chainer's path."""
    params = {}
    for path, param in model.namedparams():
        if param.array is None:
            raise ValueError('parameter %s is not initialized yet: run the model once first'
                             % path)
        params[path] = param.array.copy()
    return params


def _batch_norm_statistics(model):
    """Copies of the running mean/variance of every BatchNormalization."""
    stats = {}
    for path, link in model.namedlinks():
        if isinstance(link, L.BatchNormalization):
            stats[path + '/avg_mean'] = link.avg_mean.copy()
            stats[path + '/avg_var'] = link.avg_var.copy()
    return stats


def numpy_step(model, x, t, optimizer='sgd', accuracy=False):
    """A zero-argument callable that runs one training iteration (forward,
    mean softmax cross-entropy, backward, update) of ``model`` on the fixed
    batch ``x`` (float32) / ``t`` (int32) and returns the loss as a float.
    ``accuracy``: each step also computes the batch's accuracy, as
    ``L.Classifier`` does by default, and keeps it as ``step.accuracy``.

    ``model`` (an ``MLP``, ``LeNet5`` or ``ResNet18Style``) only supplies the
    architecture and the initial values: its parameters and BatchNormalization
    statistics are copied and never modified.  ``optimizer`` is 'sgd',
    'momentum' or 'adam' (Chainer's SGD, MomentumSGD and Adam with their
    default hyperparameters).  The returned callable carries ``params``
    (Chainer's parameter path, e.g. '/0/W', to the array it updates in place)
    and ``stats`` (e.g. '/bn0/avg_mean' to that running statistic).
    """
    if type(model) not in _NETS:
        raise TypeError('numpy_step has no implementation of %s' % type(model).__name__)
    if optimizer not in _OPTIMIZERS:
        raise ValueError('unknown optimizer %r; expected one of %s'
                         % (optimizer, ', '.join(_OPTIMIZERS)))
    params = _copy_params(model)
    stats = _batch_norm_statistics(model)
    grads = {}
    net = _NETS[type(model)](model, params, grads, stats)
    update = _OPTIMIZERS[optimizer]([(params[path], grads[path]) for path in params])

    def step():
        y = net.forward(x)
        if accuracy:
            step.accuracy = float((y.argmax(axis=1) == t).mean())
        loss, gy = _softmax_cross_entropy(y, t)
        net.backward(gy)
        update()
        return loss

    step.params, step.stats, step.accuracy = params, stats, None
    return step

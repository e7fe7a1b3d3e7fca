"""Per-iteration time of a training step (forward, loss, backward, Adam
update): plain Chainer on NumPy vs Chainer + compile_onnx, measured in one
run on the same data.  Prints a markdown table of medians and ratios."""
import os
import statistics
import sys
import tempfile
import time

import chainer
import chainer.links as L
import numpy

import chainer_compiler

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'examples', 'mnist'))
from train_mnist import MLP  # noqa: E402  (the example's own model)


def _step_times(model, x, t, repeats, warmup=5):
    classifier = L.Classifier(model)
    optimizer = chainer.optimizers.Adam()
    optimizer.setup(classifier)
    times = []
    for i in range(warmup + repeats):
        start = time.perf_counter()
        optimizer.update(classifier, x, t)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main(units=1000, batchsize=100, repeats=100):
    rng = numpy.random.RandomState(0)
    x = rng.uniform(0, 1, (batchsize, 784)).astype(numpy.float32)
    t = rng.randint(0, 10, batchsize).astype(numpy.int32)
    plain = MLP(units, 10)
    with chainer.using_config('train', False):
        plain(x)
    path = os.path.join(tempfile.mkdtemp(), 'mlp.onnx')
    chainer_compiler.export(plain, [x], path)
    twin = MLP(units, 10)
    compiled = chainer_compiler.compile_onnx(twin, path, 'onnx_chainer')
    twin.copyparams(plain)
    plain_ms = _step_times(plain, x, t, repeats)
    compiled_ms = _step_times(compiled, x, t, repeats)
    print('| MLP 784-%d-%d-10, batch %d | ms / iteration (median of %d) | vs Chainer |'
          % (units, units, batchsize, repeats))
    print('|---|---|---|')
    print('| Chainer on NumPy | %.2f | 1.00 |' % plain_ms)
    print('| Chainer + compile_onnx | %.2f | %.2f |' % (compiled_ms, compiled_ms / plain_ms))


if __name__ == '__main__':
    main()

"""The cost of a new batch size (issue 33).

LeNet-5 is exported once at batch 8 with
``dynamic_axes='batch'`` and compiled with ``compile_onnx``; a batch of
another size compiles its programs on first use (native: one C build, the
kernels' objects already in the build cache).  For each backend and batch
the table gives that first call's extra time (the new signature's cost),
then the steady inference time against a model whose file was exported at
that very batch (the target: within 5%; the two run the same program, so
a difference is the machine's noise).  Then the same for a compiled
training step (Classifier, SGD): the first step of a new batch size traces
the model again and compiles (and builds) its step.  Prints Markdown tables.
"""
import copy
import os
import sys
import tempfile
import time

import chainer
import numpy
from models import LeNet5
from timing import time_interleaved

from chainer_compiler import compile_onnx, compile_training_step, export

EXPORT_BATCH = 8
BATCHES = (1, 32)


def _images(batch):
    return numpy.random.RandomState(batch).uniform(-1, 1, (batch, 1, 28, 28)).astype('f')


def main():
    model = LeNet5()
    with chainer.using_config('train', False):
        model(_images(EXPORT_BATCH))
    print('| backend | batch | new signature: first call (s) | steady (ms) | exported at '
          'that batch (ms) | ratio |')
    print('|---|---|---|---|---|---|')
    with tempfile.TemporaryDirectory() as folder, \
            chainer.using_config('train', False), chainer.using_config('enable_backprop', False):
        os.environ['CHAINER_COMPILER_CACHE'] = os.path.join(folder, 'cache')  # a cold cache
        dynamic = export(model, [_images(EXPORT_BATCH)], os.path.join(folder, 'dynamic.onnx'),
                         dynamic_axes='batch')
        for backend in ('numpy', 'native'):
            kwargs = {'runtime_kwargs': {'backend': backend}}
            compiled = compile_onnx(copy.deepcopy(model), dynamic, **kwargs)
            compiled(_images(EXPORT_BATCH))  # the export's batch: compiled by compile_onnx
            for batch in BATCHES:
                x = _images(batch)
                start = time.perf_counter()
                compiled(x)
                first = time.perf_counter() - start
                fixed_file = export(model, [x], os.path.join(folder, 'at%d.onnx' % batch))
                fixed = compile_onnx(copy.deepcopy(model), fixed_file, **kwargs)
                numpy.testing.assert_allclose(compiled(x).array, fixed(x).array,
                                              rtol=1e-4, atol=1e-5)
                times = time_interleaved({'dynamic': lambda c=compiled, x=x: c(x),
                                          'fixed': lambda f=fixed, x=x: f(x)}, budget_s=1.0)
                print('| %s | %d | %.2f | %.3f | %.3f | %.2f |' % (
                    backend, batch, first - times['dynamic'] / 1e3, times['dynamic'],
                    times['fixed'], times['dynamic'] / times['fixed']))
        _training_steps(model)
    return 0


def _training_steps(predictor):
    print()
    print('| backend | batch | training step, new signature: first step (s) | steady (ms) |')
    print('|---|---|---|---|')
    for backend in ('numpy', 'native'):
        classifier = chainer.links.Classifier(copy.deepcopy(predictor))
        optimizer = chainer.optimizers.SGD(lr=0.01)
        optimizer.setup(classifier)
        labels = lambda n: numpy.zeros(n, numpy.int32)  # noqa: E731
        step = compile_training_step(classifier, optimizer,
                                     (_images(EXPORT_BATCH), labels(EXPORT_BATCH)),
                                     runtime_kwargs={'backend': backend})
        for batch in BATCHES:
            x, t = _images(batch), labels(batch)
            start = time.perf_counter()
            step(x, t)
            first = time.perf_counter() - start
            steady = time_interleaved({'step': lambda s=step, x=x, t=t: s(x, t)},
                                      budget_s=1.0)['step']
            print('| %s | %d | %.2f | %.3f |' % (backend, batch, first - steady / 1e3, steady))


if __name__ == '__main__':
    sys.exit(main())

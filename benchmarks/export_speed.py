"""Export speed: ResNet-50 (random weights, batch 1, 224x224) to ONNX.

Target: under 10 s on a 2-core machine.  Prints the median of a few exports
and the split between running the model and translating its graph.
"""
import statistics
import sys
import time

import chainer
import chainer.links as L
import numpy

from chainer_compiler.translators.onnx_chainer import export_model

TARGET_S = 10.0


def main(repeats=3):
    model = L.ResNet50Layers(pretrained_model=None)
    x = numpy.random.RandomState(0).uniform(-1, 1, (1, 3, 224, 224)).astype(numpy.float32)
    with chainer.using_config('train', False), chainer.using_config('enable_backprop', False):
        start = time.perf_counter()
        model(x)
        forward_s = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        proto = export_model(model, x)
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    print('| model | nodes | export (median of %d) | of which forward | target |' % repeats)
    print('|---|---|---|---|---|')
    print('| ResNet-50 | %d | %.2f s | %.2f s | < %.0f s: %s |' % (
        len(proto.graph.node), median, forward_s, TARGET_S,
        'met' if median < TARGET_S else 'MISSED'))
    return 0 if median < TARGET_S else 1


if __name__ == '__main__':
    sys.exit(main())

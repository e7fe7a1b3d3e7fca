"""The VM's time per unit of declared work, per operator kind.

The recompute policies ('gt' with a budget above all) choose the plan of
least declared work (OpRecord.work), so the declared costs must be in
proportion to the VM's time.  This script times each kernel on the
activation shapes of the benchmarks' models (benchmarks/memory.py: the plain
CNN's 8x32x32x32, a ResNet-50 stage's 8x256x16x16, the MLP's 1024x784) and
prints its milliseconds, its declared work (runtime/ops/registry.py: in units
of a convolution's multiply-add), the nanoseconds per unit and those over a
3x3 convolution's: 1 where the declared cost is in proportion to the time.
An operator's declared factor (``per_element``, ELEMENTWISE, PRODUCT) times
that ratio is the factor this run measured.

    .venv/bin/python benchmarks/op_costs.py [--repeats 7]
"""
import argparse
import time

import numpy

from chainer_compiler.runtime.ops import lookup

PLAIN = (8, 32, 32, 32)
STAGE = (8, 256, 16, 16)


def _array(shape, rng):
    return rng.standard_normal(shape).astype(numpy.float32)


def _conv(x_shape, m, k):
    """(inputs, attributes) of a k x k, same-padded convolution to m channels."""
    w = (m, x_shape[1], k, k)
    return [x_shape, w], dict(kernel_shape=(k, k), pads=(k // 2,) * 4, strides=(1, 1))


def _batch_norm(x_shape, training):
    c = (x_shape[1],)
    return [x_shape, c, c, c, c], dict(training_mode=int(training))


def cases():
    """(label, operator, input shapes, attributes) of each case timed."""
    fc_in, fc_out = (1024, 784), (784, 128)
    return [
        ('Conv 3x3 (plain CNN)', 'Conv') + _conv(PLAIN, 32, 3),
        ('Conv 1x1 (ResNet-50)', 'Conv') + _conv(STAGE, 64, 1),
        ('Conv 3x3 (ResNet-50)', 'Conv') + _conv((8, 64, 16, 16), 64, 3),
        ('Gemm (MLP)', 'Gemm', [fc_in, fc_out, (128,)], {}),
        ('Gemm (MLP, 128 to 128)', 'Gemm', [(1024, 128), (128, 128), (128,)], {}),
        ('MatMul (MLP)', 'MatMul', [fc_in, fc_out], {}),
        ('BatchNormalization training', 'BatchNormalization') + _batch_norm(PLAIN, True),
        ('BatchNormalization training (ResNet-50)', 'BatchNormalization')
        + _batch_norm(STAGE, True),
        ('BatchNormalization inference', 'BatchNormalization') + _batch_norm(PLAIN, False),
        ('Relu', 'Relu', [PLAIN], {}),
        ('Relu (ResNet-50)', 'Relu', [STAGE], {}),
        ('Sigmoid', 'Sigmoid', [PLAIN], {}),
        ('Tanh', 'Tanh', [PLAIN], {}),
        ('Add', 'Add', [PLAIN, PLAIN], {}),
        ('Mul', 'Mul', [PLAIN, PLAIN], {}),
        ('MaxPool 3x3 stride 2', 'MaxPool', [STAGE],
         dict(kernel_shape=(3, 3), pads=(1, 1, 1, 1), strides=(2, 2))),
        ('AveragePool 2x2 stride 2', 'AveragePool', [PLAIN],
         dict(kernel_shape=(2, 2), strides=(2, 2))),
        ('AveragePool 32x32 (plain CNN)', 'AveragePool', [PLAIN], dict(kernel_shape=(32, 32))),
        ('GlobalAveragePool', 'GlobalAveragePool', [PLAIN], {}),
        ('Reshape', 'Reshape', [PLAIN, (2,)], {}),
        ('Flatten', 'Flatten', [PLAIN], {}),
    ]


def _inputs(op, shapes, rng):
    """Arrays of ``shapes``; Reshape's second input is its target shape."""
    if op == 'Reshape':
        return [_array(shapes[0], rng), numpy.array([shapes[0][0], -1], dtype=numpy.int64)]
    arrays = [_array(s, rng) for s in shapes]
    if op == 'BatchNormalization':
        arrays[4] = numpy.abs(arrays[4]) + 1  # a variance
    return arrays


def measure(fn, arrays, attributes, repeats):
    """The median seconds of ``repeats`` runs (as benchmarks/timing.py takes
    step times: the least would favour the multithreaded BLAS products on a
    shared machine), and the outputs."""
    outputs = fn(numpy, *arrays, **attributes)
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(numpy, *arrays, **attributes)
        seconds.append(time.perf_counter() - start)
    return float(numpy.median(seconds)), outputs if isinstance(outputs, tuple) else (outputs,)


def rows(repeats):
    """(label, ms, declared work, ns per unit) per case."""
    rng = numpy.random.RandomState(0)
    result = []
    for label, op, shapes, attributes in cases():
        spec = lookup(op)
        seconds, outputs = measure(spec.fn, _inputs(op, shapes, rng), attributes, repeats)
        work = spec.record.work([tuple(s) for s in shapes], [o.shape for o in outputs])
        result.append((label, seconds * 1e3, work, seconds * 1e9 / work if work else None))
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--repeats', type=int, default=21)
    args = parser.parse_args()
    table = rows(args.repeats)
    conv = min(ns for label, _, _, ns in table if label.startswith('Conv 3x3'))
    print('| operator | ms | declared work | ns per unit | over Conv 3x3\'s |')
    print('|---|---|---|---|---|')
    for label, ms, work, ns in table:
        per = '-' if ns is None else '%.3f' % ns
        ratio = '-' if ns is None else '%.1f' % (ns / conv)
        print('| %s | %.2f | %.0f | %s | %s |' % (label, ms, work, per, ratio))


if __name__ == '__main__':
    main()

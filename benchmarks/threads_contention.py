"""The native backend's threads on a shared CPU: a ResNet-18 (ImageNet
shapes, built with onnx.helper, random weights) and a small CNN at batch 1,
with one thread and with the default thread count (one per CPU this
process may use), on a quiet machine and with one competing busy process
(a child running ``while 1: pass``), against onnxruntime with the same
``intra_op_num_threads``.

``python benchmarks/threads_contention.py [--budget SECONDS] [--models NAME ...]
[--onnx FILE ...] [--passes N]`` prints the table (median milliseconds per
run) and, for each model, whether the default threads were slower than one
thread under contention, which they must never be.  The candidates of one
condition are timed round by round, interleaved (benchmarks/timing.py).
``--onnx`` adds ONNX files (random inputs of their declared shapes, symbolic
dimensions 1), such as the foreign models' ``result/foreign/*.b1.onnx``.

The verdict pairs the two native thread counts call by call beside the busy
neighbour, ``--passes`` times (each pass its own neighbour): one pass's
median of the per-call ratios still moves by +-8% on a loaded machine
(benchmarks/NOTES.md, "Threads and batch 32"), so a model counts as slower
only when every pass's median is above 1 + TIE, and as unsettled when some
are."""
import argparse
import os
import statistics
import sys

import numpy
import onnx
import onnxruntime
from onnx import helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.timing import (  # noqa: E402
    busy_neighbour,
    repetitions,
    time_interleaved,
    timed_calls,
)
from chainer_compiler.pipeline import build_program  # noqa: E402
from chainer_compiler.runtime.executor import Executor  # noqa: E402
from chainer_compiler.runtime.native.library import machine_threads  # noqa: E402
from chainer_compiler.runtime.random_inputs import random_inputs  # noqa: E402


class _Graph:
    """Nodes and random weights of a CNN, named in order."""

    def __init__(self):
        self.rng = numpy.random.default_rng(0)
        self.nodes, self.weights = [], []

    def _name(self, prefix):
        return '%s_%d' % (prefix, len(self.nodes) + len(self.weights))

    def weight(self, array):
        name = self._name('w')
        self.weights.append(numpy_helper.from_array(array.astype(numpy.float32), name))
        return name

    def node(self, op, inputs, **attrs):
        out = self._name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def conv_bn(self, x, c_in, c_out, k, stride=1, relu=True):
        """Conv (He-initialised, no bias), an inference BatchNormalization and
        a Relu, as exporters write a ResNet's layers."""
        w = self.weight(self.rng.standard_normal((c_out, c_in, k, k)) * (2 / (c_in * k * k)) ** .5)
        y = self.node('Conv', [x, w], kernel_shape=[k, k], strides=[stride, stride],
                      pads=[k // 2] * 4)
        bn = [self.weight(self.rng.uniform(0.5, 1.5, c_out)), self.weight(self.rng.uniform(
            -.1, .1, c_out)), self.weight(self.rng.uniform(-.1, .1, c_out)),
            self.weight(self.rng.uniform(0.5, 1.5, c_out))]
        y = self.node('BatchNormalization', [y] + bn)
        return self.node('Relu', [y]) if relu else y

    def model(self, x_shape, out, classes):
        f32 = helper.np_dtype_to_tensor_dtype(numpy.dtype(numpy.float32))
        graph = helper.make_graph(self.nodes, 'cnn',
                                  [helper.make_tensor_value_info('x', f32, x_shape)],
                                  [helper.make_tensor_value_info(out, f32, [x_shape[0], classes])],
                                  self.weights)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid('', 13)])


def resnet18(batch=1, size=224, classes=1000):
    """torchvision's ResNet-18 layer for layer."""
    g = _Graph()
    y = g.conv_bn('x', 3, 64, 7, stride=2)
    y = g.node('MaxPool', [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c_in = 64
    for c_out, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for block in range(2):
            s = stride if block == 0 else 1
            h = g.conv_bn(y, c_in, c_out, 3, stride=s)
            h = g.conv_bn(h, c_out, c_out, 3, relu=False)
            short = g.conv_bn(y, c_in, c_out, 1, stride=s, relu=False) if (
                s != 1 or c_in != c_out) else y
            y = g.node('Relu', [g.node('Add', [h, short])])
            c_in = c_out
    y = g.node('Flatten', [g.node('GlobalAveragePool', [y])])
    y = g.node('Gemm', [y, g.weight(g.rng.standard_normal((512, classes)) * 512 ** -.5)])
    return g.model([batch, 3, size, size], y, classes)


def small_cnn(batch=1, size=32, classes=10):
    """Three 3x3 convolutions (32, 64, 128 channels) with pooling and a
    classifier: CIFAR-sized."""
    g = _Graph()
    y, c_in = 'x', 3
    for c_out in (32, 64, 128):
        y = g.conv_bn(y, c_in, c_out, 3)
        y = g.node('MaxPool', [y], kernel_shape=[2, 2], strides=[2, 2])
        c_in = c_out
    y = g.node('Flatten', [y])
    y = g.node('Gemm', [y, g.weight(g.rng.standard_normal((128 * (size // 8) ** 2, classes))
                                    * 0.01)])
    return g.model([batch, 3, size, size], y, classes)


MODELS = {'resnet18': resnet18, 'small-cnn': small_cnn}
#: Paired medians within this of 1.0 are a tie: a model whose loops are
#: mostly too small to split (the small CNN) runs the same code on both
#: counts and reads 1.00 to 1.01.
TIE = 0.02


def paired_ratios(calls, default, budget_s, passes):
    """Per pass beside its own busy neighbour, the median over pairs of
    calls made one right after the other (in alternating order) of native
    ``default`` threads' time over one thread's."""
    one, many = calls['native 1'], calls['native %d' % default]
    pairs = repetitions(budget_s, statistics.mean(timed_calls(one, 3)))
    medians = []
    for _ in range(passes):
        with busy_neighbour():
            ratios = []
            for i in range(pairs):
                took = {fn: timed_calls(fn, 1)[0] for fn in ((one, many) if i % 2 else (many, one))}
                ratios.append(took[many] / took[one])
        medians.append(statistics.median(ratios))
    return medians


def candidates(model, threads):
    """name -> zero-argument callable: native and onnxruntime at each count,
    on the same random inputs of the model's declared types (symbolic
    dimensions 1)."""
    program = build_program(model)
    feed = random_inputs(program, numpy.random.RandomState(1))
    calls = {}
    for t in threads:
        # The machine's count as users run it, with no argument: each run
        # function then takes the count up to it that runs fastest.
        run = Executor(program, backend='native',
                       threads=None if t == machine_threads() else t).run
        calls['native %d' % t] = lambda run=run: run(feed)
    for t in threads:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = t
        session = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                               providers=['CPUExecutionProvider'])
        calls['onnxruntime %d' % t] = lambda s=session: s.run(None, feed)
    return calls


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--budget', type=float, default=3.0,
                        help='seconds of timed runs per candidate and condition (default 3)')
    parser.add_argument('--models', nargs='*', choices=sorted(MODELS), default=sorted(MODELS))
    parser.add_argument('--onnx', nargs='+', default=[], metavar='FILE',
                        help='ONNX files to time too (random inputs)')
    parser.add_argument('--passes', type=int, default=3,
                        help='passes of the paired two-thread verdict (default 3)')
    args = parser.parse_args(argv)
    default = machine_threads()
    threads = sorted({1, default})
    print('threads: 1 and %d (this process may use %d CPUs); median ms per run at batch 1'
          % (default, default))
    header = ['model', 'neighbour'] + ['%s %d' % (kind, t) for kind in ('native', 'onnxruntime')
                                       for t in threads] + ['native %d / 1' % default]
    print(' | '.join(header))
    verdicts = []
    models = [(name, MODELS[name]()) for name in args.models]
    models += [(os.path.basename(path), onnx.load(path)) for path in args.onnx]
    for name, model in models:
        calls = candidates(model, threads)
        for busy in (False, True):
            with busy_neighbour(busy):
                ms = time_interleaved(calls, budget_s=args.budget)
            print(' | '.join([name, 'busy' if busy else 'none'] +
                             ['%.2f' % ms[c] for c in calls] +
                             ['%.2f' % (ms['native %d' % default] / ms['native 1'])]), flush=True)
        if default > 1:
            medians = paired_ratios(calls, default, args.budget, args.passes)
            verdict = ('slower' if min(medians) > 1 + TIE else 'unsettled'
                       if max(medians) > 1 + TIE else 'not slower (within %d%%)' % (TIE * 100))
            verdicts.append('%s: %d threads / 1 beside a busy neighbour, paired, by pass: %s '
                            '(median %.2f): %s' % (name, default, ', '.join(
                                '%.2f' % m for m in medians), statistics.median(medians), verdict))
    print(('\n'.join(verdicts) or 'no verdict: this process may use one CPU only') if models
          else 'no model to time')
    return 0


if __name__ == '__main__':
    sys.exit(main())

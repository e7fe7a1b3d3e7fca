"""A small depthwise-separable CNN of mobile blocks, built with
onnx.helper: MobileNetV2-style inverted residuals (1x1 expand, depthwise
3x3 or 5x5 at strides 1 and 2, 1x1 project) with ReLU6, HardSwish and
SiLU, a squeeze-and-excitation block and a ShuffleNet channel shuffle.

``python benchmarks/mobile_blocks.py [--batch N] [--profile]`` times it at
one thread on the native backend against onnxruntime (and prints the
native per-operator profile with --profile); ``mobile_blocks_model()`` is
the model for other benchmarks and the tests."""
import argparse
import math
import sys
import time

import numpy
import onnx
from onnx import TensorProto, helper, numpy_helper

#: The input: batch x 3 x SIZE x SIZE.
SIZE = 96


class _Builder:
    """Nodes and random weights of one graph, named in order."""

    def __init__(self, seed):
        self.rng = numpy.random.default_rng(seed)
        self.nodes, self.weights, self.count = [], [], 0

    def name(self, prefix):
        self.count += 1
        return '%s_%d' % (prefix, self.count)

    def weight(self, shape, scale=None):
        fan_in = numpy.prod(shape[1:]) if len(shape) > 1 else 1
        w = self.rng.standard_normal(shape).astype(numpy.float32) * (
            scale or (2.0 / fan_in) ** 0.5)
        name = self.name('w')
        self.weights.append(numpy_helper.from_array(w, name))
        return name

    def node(self, op, inputs, **attrs):
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x, c_in, c_out, k=1, stride=1, group=1):
        w = self.weight((c_out, c_in // group, k, k))
        b = self.weight((c_out,), 0.1)
        return self.node('Conv', [x, w, b], kernel_shape=[k, k], strides=[stride, stride],
                         pads=[k // 2] * 4, group=group)

    def act(self, x, kind):
        if kind == 'relu6':
            lo, hi = self.weight_value(0.0), self.weight_value(6.0)
            return self.node('Clip', [x, lo, hi])
        if kind == 'hswish':
            return self.node('HardSwish', [x])
        if kind == 'silu':
            return self.node('Mul', [x, self.node('Sigmoid', [x])])
        return self.node('Relu', [x])

    def weight_value(self, value):
        name = self.name('c')
        self.weights.append(numpy_helper.from_array(numpy.array(value, numpy.float32), name))
        return name

    def squeeze_excite(self, x, c, reduced):
        s = self.node('GlobalAveragePool', [x])
        s = self.node('Relu', [self.conv(s, c, reduced)])
        s = self.node('HardSigmoid', [self.conv(s, reduced, c)], alpha=1.0 / 6, beta=0.5)
        return self.node('Mul', [x, s])

    def inverted_residual(self, x, c_in, c_out, expand, k, stride, act, se=False):
        hidden = c_in * expand
        y = self.act(self.conv(x, c_in, hidden), act)
        y = self.act(self.conv(y, hidden, hidden, k, stride, group=hidden), act)
        if se:
            y = self.squeeze_excite(y, hidden, max(8, hidden // 4))
        y = self.conv(y, hidden, c_out)
        return self.node('Add', [x, y]) if stride == 1 and c_in == c_out else y

    def shuffle(self, x, c, groups, size):
        s1 = self._shape([-1, groups, c // groups, size, size])
        s2 = self._shape([-1, c, size, size])
        y = self.node('Reshape', [x, s1])
        y = self.node('Transpose', [y], perm=[0, 2, 1, 3, 4])
        return self.node('Reshape', [y, s2])

    def _shape(self, dims):
        name = self.name('shape')
        self.weights.append(numpy_helper.from_array(numpy.array(dims, numpy.int64), name))
        return name


def mobile_blocks_model(batch=1, seed=0) -> onnx.ModelProto:
    """The benchmark's mobile-block CNN: batch x 3 x 96 x 96 to 10 logits."""
    b = _Builder(seed)
    x = b.act(b.conv('x', 3, 16, 3, 2), 'relu6')                       # 48 x 48
    x = b.inverted_residual(x, 16, 16, 4, 3, 1, 'relu6')
    x = b.inverted_residual(x, 16, 24, 4, 3, 2, 'relu6')                # 24 x 24
    x = b.inverted_residual(x, 24, 24, 4, 5, 1, 'hswish', se=True)
    x = b.inverted_residual(x, 24, 40, 4, 5, 2, 'hswish', se=True)      # 12 x 12
    x = b.inverted_residual(x, 40, 40, 4, 3, 1, 'silu')
    x = b.inverted_residual(x, 40, 48, 4, 3, 2, 'silu')                 # 6 x 6
    x = b.shuffle(b.conv(x, 48, 48, group=2), 48, 2, 6)
    x = b.node('Flatten', [b.node('GlobalAveragePool', [x])])
    y = b.node('Gemm', [x, b.weight((10, 48)), b.weight((10,), 0.1)], transB=1)
    graph = helper.make_graph(
        b.nodes, 'mobile_blocks',
        [helper.make_tensor_value_info('x', TensorProto.FLOAT, [batch, 3, SIZE, SIZE])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, [batch, 10])], b.weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)])
    model.ir_version = 8
    return model


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--batch', type=int, default=1)
    parser.add_argument('--profile', action='store_true')
    args = parser.parse_args(argv)
    import onnxruntime

    from chainer_compiler import build_program
    from chainer_compiler.runtime.executor import Executor
    from chainer_compiler.runtime.native.fusion import fuse
    from chainer_compiler.runtime.profiling import Tracer

    model = mobile_blocks_model(args.batch)
    x = numpy.random.default_rng(1).standard_normal(
        (args.batch, 3, SIZE, SIZE)).astype(numpy.float32)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                           providers=['CPUExecutionProvider'])
    program = build_program(model)
    native = Executor(program, backend='native', threads=1)
    expected = session.run(None, {'x': x})[0]
    got = next(iter(native.run({'x': x}).values()))
    numpy.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3)
    calls = {'native': lambda: native.run({'x': x}),
             'onnxruntime': lambda: session.run(None, {'x': x})}
    best = {name: cpu_ms(call) for name, call in calls.items()}
    print('batch %d, one thread: native %.3f ms, onnxruntime %.3f ms, ratio %.2fx' % (
        args.batch, best['native'], best['onnxruntime'], best['native'] / best['onnxruntime']))
    if args.profile:
        tracer = Tracer()
        fused = fuse(program).instructions
        traced = Executor(program, backend='native', tracer=tracer, threads=1)
        for _ in range(50):
            traced.run({'x': x})
        fastest = {}
        for event in tracer.events:
            index = event['args']['index']
            # The trace's indices are the fused Program's.
            key = (index, fused[index].name, ', '.join(event['args']['inputs']))
            fastest[key] = min(fastest.get(key, math.inf), event['dur'] / 1e3)
        for (index, op, inputs), ms in sorted(fastest.items(), key=lambda kv: -kv[1]):
            print('%4d %-28s %8.3f ms  %s' % (index, op[:28], ms, inputs))


def cpu_ms(call, runs=200):
    """The 10th-percentile thread CPU time of ``call`` in ms: both candidates
    run on the calling thread, and CPU time is what a busy shared machine
    disturbs least."""
    call()
    times = []
    for _ in range(runs):
        start = time.thread_time()
        call()
        times.append(time.thread_time() - start)
    return sorted(times)[runs // 10] * 1e3


if __name__ == '__main__':
    sys.exit(main())

"""Concat-heavy and channel-shuffle blocks, built with onnx.helper at batch 1:
a ShuffleNet V2 stage (channel split, a 1x1 -> depthwise 3x3 -> 1x1 branch,
Concat, then Reshape -> Transpose -> Reshape to shuffle the channels), a
DenseNet block (each layer's 1x1 and 3x3 convolutions concatenated to all
that came before) and Inception-style modules (four branches concatenated).

``python benchmarks/concat_blocks.py [--runs N]`` times each on one thread,
the native backend against onnxruntime (CPU time: benchmarks/mobile_blocks.py's
cpu_ms), and prints how many bytes the Concats and the shuffles still copy
(the planner writes a Concat's inputs in place: docs/native.md)."""
import argparse
import os
import sys

import numpy
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mobile_blocks import _Builder, cpu_ms  # noqa: E402


def _model(b: _Builder, name: str, x_shape, y: str, y_shape) -> onnx.ModelProto:
    graph = helper.make_graph(
        b.nodes, name, [helper.make_tensor_value_info('x', TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, list(y_shape))], b.weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)])
    model.ir_version = 8
    return model


def shufflenet_stage(channels=116, size=28, units=4) -> onnx.ModelProto:
    """ShuffleNet V2's stride-1 units (stage 2 of the 1.0x network)."""
    b, x, half = _Builder(0), 'x', channels // 2
    for _ in range(units):
        left = b.node('Split', [x], axis=1)
        # Split has two outputs: name the second after the first.
        b.nodes[-1].output.append(left + '_b')
        right = b.act(b.conv(left + '_b', half, half), 'relu')
        right = b.conv(right, half, half, 3, group=half)
        right = b.act(b.conv(right, half, half), 'relu')
        x = b.shuffle(b.node('Concat', [left, right], axis=1), channels, 2, size)
    return _model(b, 'shufflenet_stage', (1, channels, size, size), x,
                  (1, channels, size, size))


def dense_block(channels=64, growth=32, layers=6, size=28) -> onnx.ModelProto:
    """A DenseNet-121 dense block (bottleneck 1x1 to 4 x growth, then 3x3)."""
    b, x = _Builder(1), 'x'
    for k in range(layers):
        c = channels + k * growth
        y = b.act(b.conv(x, c, 4 * growth), 'relu')
        y = b.act(b.conv(y, 4 * growth, growth, 3), 'relu')
        x = b.node('Concat', [x, y], axis=1)
    return _model(b, 'dense_block', (1, channels, size, size), x,
                  (1, channels + layers * growth, size, size))


def inception_modules(channels=192, size=28, modules=2) -> onnx.ModelProto:
    """GoogLeNet's inception (3a)-sized modules: 1x1, 1x1 -> 3x3, 1x1 -> 5x5
    and 3x3 max pool -> 1x1 branches concatenated."""
    b, x, c = _Builder(2), 'x', channels
    for _ in range(modules):
        branches = [b.act(b.conv(x, c, 64), 'relu'),
                    b.act(b.conv(b.act(b.conv(x, c, 96), 'relu'), 96, 128, 3), 'relu'),
                    b.act(b.conv(b.act(b.conv(x, c, 16), 'relu'), 16, 32, 5), 'relu'),
                    b.act(b.conv(b.node('MaxPool', [x], kernel_shape=[3, 3],
                                        pads=[1, 1, 1, 1]), c, 32), 'relu')]
        x, c = b.node('Concat', branches, axis=1), 256
    return _model(b, 'inception', (1, channels, size, size), x, (1, c, size, size))


MODELS = {'shufflenet_stage': shufflenet_stage, 'dense_block': dense_block,
          'inception': inception_modules}


def copied_bytes(program) -> tuple[int, int]:
    """Bytes the native C of ``program`` copies for its Concats and
    Transposes (what the planner could not write in place), and its arena's
    size."""
    from chainer_compiler.runtime.native.emit_c import NATIVE_BACKEND, NativeCompilation
    from chainer_compiler.runtime.native.plan import plan
    c = NativeCompilation(program, 'm', 'file', '/nonexistent/not-written')
    for stage, passes in NATIVE_BACKEND:
        if stage == 'plan':
            break
        for run_pass in passes:
            run_pass(c)
    lowered, arena = c.lowered, plan(c.lowered)
    total = 0
    for inst, step in zip(lowered.program.instructions, lowered.steps):
        if step is None or step.alias:
            continue
        if inst.op == 'Transpose':
            total += lowered.nbytes(inst.outputs[0])
        elif inst.op == 'Concat':  # input k is in place at (output, offset k)
            parts = dict(step.parts)
            total += sum(lowered.nbytes(r) for k, r in enumerate(inst.inputs)
                         if arena.placed.get(arena.alias_of.get(r, r))
                         != (inst.outputs[0], parts.get(k)))
    return total, arena.arena_bytes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--runs', type=int, default=100)
    args = parser.parse_args(argv)
    import onnxruntime

    from chainer_compiler import build_program
    from chainer_compiler.runtime.executor import Executor

    print('%-18s %10s %10s %7s %13s %12s' % ('model', 'native ms', 'onnxrt ms', 'ratio',
                                              'copied bytes', 'arena bytes'))
    for name, make in MODELS.items():
        model = make()
        shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
        x = numpy.random.default_rng(1).standard_normal(shape).astype(numpy.float32)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        session = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                               providers=['CPUExecutionProvider'])
        program = build_program(model)
        native = Executor(program, backend='native', threads=1)
        numpy.testing.assert_allclose(next(iter(native.run({'x': x}).values())),
                                      session.run(None, {'x': x})[0], rtol=1e-3, atol=1e-3)
        feed = {'x': x}
        ms = [cpu_ms(lambda n=native, f=feed: n.run(f), args.runs),
              cpu_ms(lambda s=session, f=feed: s.run(None, f), args.runs)]
        print('%-18s %10.3f %10.3f %6.2fx %13d %12d' % (name, ms[0], ms[1], ms[0] / ms[1],
                                                         *copied_bytes(program)))


if __name__ == '__main__':
    sys.exit(main())

"""Demo: compile a small ONNX CNN with chainer-compiler and run it on the VM.

Builds the model with onnx.helper, compiles it to a Program, prints the
Program, runs it on NumPy with a per-instruction trace, checks the result
against onnxruntime, saves the Program and runs the saved file in a fresh
process that imports neither Chainer nor ONNX.
"""
import os
import subprocess
import sys
import tempfile

import numpy
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

from chainer_compiler import build_program
from chainer_compiler.runtime import Executor, Tracer, save_program


def small_cnn(batch=2):
    """conv3x3(1->4) -> relu -> maxpool2 -> flatten -> gemm(64->10) -> softmax."""
    rng = numpy.random.RandomState(0)
    weights = {
        'conv_W': rng.standard_normal((4, 1, 3, 3)).astype(numpy.float32) * 0.5,
        'conv_b': rng.standard_normal(4).astype(numpy.float32) * 0.1,
        'fc_W': rng.standard_normal((64, 10)).astype(numpy.float32) * 0.1,
        'fc_b': numpy.zeros(10, numpy.float32),
    }
    nodes = [
        helper.make_node('Conv', ['x', 'conv_W', 'conv_b'], ['h1'], name='conv',
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node('Relu', ['h1'], ['h2'], name='relu'),
        helper.make_node('MaxPool', ['h2'], ['h3'], name='pool',
                         kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node('Flatten', ['h3'], ['h4'], name='flatten'),
        helper.make_node('Gemm', ['h4', 'fc_W', 'fc_b'], ['logits'], name='fc'),
        helper.make_node('Softmax', ['logits'], ['prob'], name='softmax', axis=-1),
    ]
    graph = helper.make_graph(
        nodes, 'small_cnn',
        [helper.make_tensor_value_info('x', TensorProto.FLOAT, [batch, 1, 8, 8])],
        [helper.make_tensor_value_info('prob', TensorProto.FLOAT, [batch, 10])],
        [numpy_helper.from_array(v, k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main():
    model = small_cnn()
    x = numpy.random.RandomState(1).standard_normal((2, 1, 8, 8)).astype(numpy.float32)

    program = build_program(model)
    print('== compiled Program ==')
    print(program.dump())

    print('\n== run on the VM (numpy backend), with a per-instruction trace ==')
    tracer = Tracer(stream=sys.stdout)
    prob = Executor(program, backend='numpy', tracer=tracer).run({'x': x})['prob']

    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=['CPUExecutionProvider'])
    expected = session.run(None, {'x': x})[0]
    diff = float(numpy.abs(prob - expected).max())
    print('\nVM vs onnxruntime: max abs difference %.2e -> %s'
          % (diff, 'match' if diff < 1e-5 else 'MISMATCH'))

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, 'small_cnn.npz')
        save_program(program, path)
        print('\n== saved Program to %s (%d bytes); running it in a fresh process ==' % (
            os.path.basename(path), os.path.getsize(path)))
        subprocess.run([sys.executable, '-m', 'chainer_compiler.runtime', path,
                        '--iterations', '100'], check=True)
    return 0 if diff < 1e-5 else 1


if __name__ == '__main__':
    sys.exit(main())

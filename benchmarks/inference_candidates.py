"""Inference on one exported ONNX file: this project's VM against onnxruntime."""
import numpy
import onnxruntime

from chainer_compiler.frontend import build_program
from chainer_compiler.runtime.executor import Executor


def vm_inference(onnx_file, x):
    executor = Executor(build_program(onnx_file), backend='numpy')
    name = executor.program.inputs[0].name
    return lambda: executor.run({name: x})


def onnxruntime_inference(onnx_file, x):
    session = onnxruntime.InferenceSession(onnx_file, providers=['CPUExecutionProvider'])
    name = session.get_inputs()[0].name
    return lambda: session.run(None, {name: x})


def same_outputs(vm, ort):
    """The VM's and onnxruntime's first outputs agree (the comparison is fair)."""
    ours = list(vm().values())[0]
    theirs = ort()[0]
    return bool(numpy.allclose(ours, theirs, rtol=1e-3, atol=1e-4))

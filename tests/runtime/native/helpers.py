"""Checking a lowering: build an ONNX graph, run it through the native
backend (the Program compiled to C) and compare with the NumPy Executor and
onnxruntime."""
import numpy
import onnxruntime
from onnx import helper, numpy_helper

from chainer_compiler.frontend import build_program
from chainer_compiler.runtime.executor import Executor

RTOL, ATOL = 1e-4, 1e-5


def make_model(nodes, inputs, outputs, initializers=(), opset=13):
    """A ModelProto: ``inputs``/``outputs`` are (name, numpy dtype, shape);
    ``initializers`` maps name -> array."""
    def info(name, dtype, shape):
        return helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(numpy.dtype(dtype)), shape)
    graph = helper.make_graph(
        nodes, 'native_check', [info(*i) for i in inputs], [info(*o) for o in outputs],
        [numpy_helper.from_array(numpy.asarray(a), n) for n, a in dict(initializers).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid('', opset)])


def check_native(model, inputs, rtol=RTOL, atol=ATOL, onnxruntime_check=True):
    """Run ``model`` (a ModelProto) on ``inputs`` (arrays, graph order)
    through backend 'native'; assert the outputs equal the NumPy Executor's
    and onnxruntime's in dtype, shape and value.  Returns the native
    outputs."""
    program = build_program(model)
    got = Executor(program, backend='native').run_positional(list(inputs))
    want = Executor(program, backend='numpy').run_positional(list(inputs))
    references = [('numpy', want)]
    if onnxruntime_check:
        session = onnxruntime.InferenceSession(model.SerializeToString(),
                                               providers=['CPUExecutionProvider'])
        feed = {i.name: x for i, x in zip(session.get_inputs(), inputs)}
        references.append(('onnxruntime', session.run(None, feed)))
    for runtime, outputs in references:
        assert len(got) == len(outputs)
        for v, g, w in zip(program.outputs, got, outputs):
            w = numpy.asarray(w)
            assert g.dtype == w.dtype and g.shape == w.shape, (runtime, v.name, g.dtype,
                                                               g.shape, w.dtype, w.shape)
            numpy.testing.assert_allclose(g, w, rtol=rtol, atol=atol,
                                          err_msg='%s vs %s' % (v.name, runtime))
    return got

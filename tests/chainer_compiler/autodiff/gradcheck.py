"""Checking gradient rules: the compiled backward program against central
differences in float64."""
import numpy
from onnx import TensorProto, helper, numpy_helper

from chainer_compiler.runtime import Executor
from chainer_compiler.training import compile_training


def single_node_model(op, inputs, n_outputs=1, opset=17, domain='', constants=None, **attrs):
    """A model of one ``op`` node over float64 ``inputs`` ({name: array});
    ``constants`` ({name: array}) become initializers not differentiated."""
    constants = constants or {}
    names = list(inputs) + list(constants)
    node_inputs = attrs.pop('node_inputs', names)
    outputs = ['y%d' % i for i in range(n_outputs)]
    node = helper.make_node(op, node_inputs, outputs, domain=domain, **attrs)
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in constants.items()])
    imports = [helper.make_opsetid('', opset)]
    if domain:
        imports.append(helper.make_opsetid(domain, 1))
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 8
    return model


def check_gradients(model, inputs, wrt=None, eps=1e-6, rtol=1e-5, atol=1e-6, seed=0):
    """Compile ``model`` for training; compare the gradient of
    sum(outputs * random upstream) with central differences."""
    programs = compile_training(model, wrt=wrt, check=False)
    forward = Executor(programs.forward, backend='numpy')
    backward = Executor(programs.backward, backend='numpy')
    rng = numpy.random.RandomState(seed)
    values = forward.run_positional([inputs[v.name] for v in programs.forward.inputs])
    outs = dict(zip([v.name for v in programs.forward.outputs], values))
    upstream = {name: rng.standard_normal(numpy.shape(outs[name])).astype(outs[name].dtype)
                for name in programs.outputs}
    grads = backward.run_positional(
        [upstream[n] for n in programs.grad_of_outputs] + [outs[r] for r in programs.retained])

    def objective(values_by_name):
        result = forward.run_positional([values_by_name[v.name] for v in programs.forward.inputs])
        return sum(float(numpy.sum(r * upstream[n]))
                   for n, r in zip(programs.outputs, result) if n in upstream)

    for name, grad in zip(programs.grads_for, grads):
        x = inputs[name]
        numeric = numpy.zeros_like(x, dtype=numpy.float64)
        for index in numpy.ndindex(x.shape):
            shifted = dict(inputs)
            for sign in (1, -1):
                bumped = x.copy()
                bumped[index] += sign * eps
                shifted[name] = bumped
                numeric[index] += sign * objective(shifted) / (2 * eps)
        numpy.testing.assert_allclose(grad, numeric, rtol=rtol, atol=atol,
                                      err_msg='gradient of %s' % name)
    return programs

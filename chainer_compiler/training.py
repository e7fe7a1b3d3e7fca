"""Compiling an ONNX model for training.

``compile_training`` makes a forward and a backward Program: the forward
program computes the model's outputs and also returns every value the
backward program reads (the *retained* values); the backward program takes
the gradients of the outputs plus those retained values and returns the
gradients of the differentiated inputs and parameters.

``compile_step_program`` makes one Program for a whole training iteration:
forward, the gradient of a scalar loss, and an in-place optimizer update of
every parameter.
"""
from dataclasses import dataclass

import numpy
import onnx
from onnx import helper, numpy_helper

from .autodiff import differentiate
from .codegen import emit_program
from .custom_schemas import register_schemas
from .frontend import load_onnx
from .onnx_graph import opset_versions
from .passes.constant_folding import fold_constants
from .passes.dead_code import remove_dead_code
from .passes.expand_functions import expand_functions
from .recompute import apply_policy
from .runtime.ops.registry import CUSTOM_DOMAIN
from .shapes import infer_shapes


register_schemas()


@dataclass
class TrainingPrograms:
    """Forward/backward Programs and how their values line up.

    ``forward`` inputs: the graph inputs, then ``params`` in order; outputs:
    the differentiated model ``outputs``, updated state, then ``retained``.  ``backward`` inputs: one gradient
    per name in ``grad_of_outputs``, then ``retained``; outputs: the
    gradients of ``grads_for`` in order.
    """
    forward: object
    backward: object
    params: list
    outputs: list
    retained: list
    grad_of_outputs: list
    grads_for: list
    forward_onnx: object
    backward_onnx: object


def compile_training(model, params=(), wrt=None, state_outputs=(), computation_order=None,
                     check=True):
    """Compile ``model`` (path or ModelProto) for training.

    ``params``: initializer names that become inputs of the forward program
    (learnable parameters and running statistics, whose values change).
    ``wrt``: names to differentiate (default: every float graph input and
    every parameter).  ``state_outputs``: graph outputs that are updated
    state (running averages), not differentiated.  ``computation_order``
    is a recompute policy (see recompute.py).
    """
    model, opsets = _prepare(model, params, check)
    graph = model.graph
    if wrt is None:
        wrt = [v.name for v in graph.input
               if v.type.tensor_type.elem_type in _FLOAT_TYPES]
    outputs = [v.name for v in graph.output]
    differentiated = [o for o in outputs if o not in set(state_outputs)]
    backward = differentiate(graph, opsets.get('', 1), wrt, outputs=differentiated)
    apply_policy(computation_order, graph, backward)

    forward_graph = onnx.GraphProto()
    forward_graph.CopyFrom(graph)
    known = set(outputs)
    for name in backward.retained:
        if name not in known:
            dtype, shape = backward.value_types[name]
            forward_graph.output.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(dtype), list(shape)))
            known.add(name)
    backward_graph = backward.graph()
    fold_constants(backward_graph, opsets)
    grads_for = [w for w in wrt if backward.grad_outputs[w] is not None]
    return TrainingPrograms(
        forward=emit_program(forward_graph, opsets, name='forward'),
        backward=emit_program(backward_graph, opsets, name='backward'),
        params=list(params), outputs=differentiated, retained=list(backward.retained),
        grad_of_outputs=[f for _, f in backward.grad_inputs], grads_for=grads_for,
        forward_onnx=_like(model, forward_graph), backward_onnx=_like(model, backward_graph))


@dataclass
class OptimizerUpdate:
    """How a compiled training step updates each parameter: by the in-place
    operator ``op`` of this project's domain, whose inputs are the
    parameter, its gradient, one array per name in ``slots`` (optimizer
    state shaped like the parameter) and one 0-d float64 per name in
    ``hyperparams``."""
    op: str
    slots: tuple
    hyperparams: tuple


@dataclass
class TrainingStepProgram:
    """A training step Program.  Its inputs: the graph inputs, ``params``,
    then for each parameter in ``updated`` its ``slots`` (named
    ``<param>/<slot>``), then the hyperparameters (``optimizer/<name>``).
    Its outputs: the graph outputs (loss first), then one alias of each
    updated parameter."""
    program: object
    params: list
    updated: list
    onnx: object


def compile_step_program(model, loss, params, wrt, update, check=True):
    """One Program for forward, backward and the optimizer ``update`` (an
    OptimizerUpdate) of the parameters ``wrt`` from the gradient of the
    scalar graph output ``loss``.

    ``params``: initializer names that become inputs (parameters and
    running statistics).  Other graph outputs (reported values, updated
    running statistics) are computed but not differentiated.  Parameters no
    gradient reaches are not updated (as Chainer skips them).
    """
    model, opsets = _prepare(model, params, check)
    graph = model.graph
    outputs = [v.name for v in graph.output]
    if loss not in outputs:
        raise ValueError("the graph has no output '%s' (outputs: %s)" % (loss, ', '.join(outputs)))
    backward = differentiate(graph, opsets.get('', 1), list(wrt), outputs=[loss])
    if not backward.grad_inputs:
        raise ValueError("the loss '%s' does not depend on any parameter" % loss)
    for seed, forward_name in backward.grad_inputs:
        dtype, shape = backward.value_types[forward_name]
        if shape is None or numpy.prod(shape, dtype=int) != 1:
            raise ValueError("the loss '%s' must be a scalar, it has shape %s"
                             % (loss, shape))
        graph.initializer.append(numpy_helper.from_array(
            numpy.ones(shape, dtype=dtype), seed))
    graph.initializer.extend(backward.initializers)
    graph.node.extend(backward.nodes)

    types = backward.value_types
    updated = [w for w in wrt if backward.grad_outputs.get(w) is not None]
    for name in update.hyperparams:
        graph.input.append(helper.make_tensor_value_info(
            'optimizer/' + name, onnx.TensorProto.DOUBLE, []))
    hyper_inputs = ['optimizer/' + h for h in update.hyperparams]
    for param in updated:
        dtype, shape = types[param]
        elem = helper.np_dtype_to_tensor_dtype(dtype)
        slots = ['%s/%s' % (param, slot) for slot in update.slots]
        # Slots go before the hyperparameters among the inputs.
        for slot in slots:
            graph.input.insert(len(graph.input) - len(hyper_inputs),
                               helper.make_tensor_value_info(slot, elem, list(shape)))
        graph.node.append(helper.make_node(
            update.op, [param, backward.grad_outputs[param]] + slots + hyper_inputs,
            [param + '/updated'], domain=CUSTOM_DOMAIN))
        graph.output.append(helper.make_tensor_value_info(param + '/updated', elem, list(shape)))
    fold_constants(graph, opsets)
    step_model = _like(model, graph)
    return TrainingStepProgram(
        program=emit_program(graph, opsets, name='training_step'),
        params=list(params), updated=updated, onnx=step_model)


def compile_inference(model, params=(), check=True):
    """An inference Program whose ``params`` initializers are inputs (their
    values change during training), after the graph's own inputs."""
    model, opsets = _prepare(model, params, check)
    return emit_program(model.graph, opsets, name='inference')


def _prepare(model, params, check):
    model = load_onnx(model, check=check)
    _initializers_to_inputs(model.graph, params)
    model = expand_functions(model)
    opsets = opset_versions(model)
    fold_constants(model.graph, opsets)
    remove_dead_code(model.graph)
    return infer_shapes(model), opsets


def _like(model, graph):
    """A ModelProto of ``graph`` with ``model``'s opsets (plus this
    project's domain when the graph uses it) and IR version."""
    imports = list(model.opset_import)
    if any(n.domain == CUSTOM_DOMAIN for n in graph.node) and \
            CUSTOM_DOMAIN not in {o.domain for o in imports}:
        imports.append(helper.make_opsetid(CUSTOM_DOMAIN, 1))
    result = helper.make_model(graph, opset_imports=imports)
    result.ir_version = model.ir_version
    return result


_FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
                onnx.TensorProto.BFLOAT16)


def _initializers_to_inputs(graph, names):
    """Make the initializers ``names`` graph inputs (appended in order)."""
    by_name = {t.name: t for t in graph.initializer}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise ValueError('the ONNX graph has no initializer(s) %s' % ', '.join(missing))
    for name in names:
        t = by_name[name]
        graph.input.append(helper.make_tensor_value_info(name, t.data_type, list(t.dims)))
        graph.initializer.remove(t)

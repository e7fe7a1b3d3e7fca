"""Compiling an ONNX model for training.

``compile_training`` makes a forward and a backward Program: the forward
program computes the model's outputs and also returns every value the
backward program reads (the *retained* values); the backward program takes
the gradients of the outputs plus those retained values and returns the
gradients of the differentiated inputs and parameters.

``compile_step_program`` makes one Program for a whole training iteration:
forward, the gradient of a scalar loss, and an in-place optimizer update of
every parameter.

Each is a thin call into the pipeline (pipeline.py, docs/pipeline.md),
which runs the passes of its kind of program.
"""
from dataclasses import dataclass

from onnx import helper

from .pipeline import CompilerOptions, run
from .runtime.ops.registry import CUSTOM_DOMAIN


@dataclass
class TrainingPrograms:
    """Forward/backward Programs and how their values line up.

    ``forward`` inputs: the graph inputs, then ``params`` in order; outputs:
    the differentiated model ``outputs``, updated state, then ``retained``.
    ``backward`` inputs: one gradient per name in ``grad_of_outputs``, then
    ``retained``; outputs: the gradients of ``grads_for`` in order.
    ``order``: the recompute order they run, as the steps of compiler
    option `order` (recompute/ordered.py).
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
    order: list


def compile_training(model, params=(), wrt=None, state_outputs=(), computation_order=None,
                     check=True, options=None):
    """Compile ``model`` (path or ModelProto) for training.

    ``params``: initializer names that become inputs of the forward program
    (learnable parameters and running statistics, whose values change).
    ``wrt``: names to differentiate (default: every float graph input and
    every parameter).  ``state_outputs``: graph outputs that are updated
    state (running averages), not differentiated.  ``computation_order``
    is a recompute policy (see recompute/), a shorthand for ``options``
    (a pipeline.CompilerOptions); give one or the other.
    """
    if options is None:
        options = CompilerOptions(computation_order=computation_order)
    elif computation_order is not None:
        raise TypeError('compile_training: give computation_order in options, not both')
    c = run('training', model, options, check=check, params=tuple(params), wrt=wrt,
            state_outputs=tuple(state_outputs))
    forward, backward = c.graphs['forward'], c.graphs['backward']
    return TrainingPrograms(
        forward=c.programs['forward'], backward=c.programs['backward'],
        params=list(params), outputs=c.differentiated, retained=list(c.backward.retained),
        grad_of_outputs=[f for _, f in c.backward.grad_inputs], grads_for=c.reached,
        forward_onnx=_like(c.model, forward), backward_onnx=_like(c.model, backward),
        order=c.order)


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
    updated parameter.  ``order``: as TrainingPrograms'."""
    program: object
    params: list
    updated: list
    onnx: object
    order: list


def compile_step_program(model, loss, params, wrt, update, check=True, options=None):
    """One Program for forward, backward and the optimizer ``update`` (an
    OptimizerUpdate) of the parameters ``wrt`` from the gradient of the
    scalar graph output ``loss``.

    ``params``: initializer names that become inputs (parameters and
    running statistics).  Other graph outputs (reported values, updated
    running statistics) are computed but not differentiated.  Parameters no
    gradient reaches are not updated (as Chainer skips them).  ``options``:
    a pipeline.CompilerOptions (its recompute policy replays forward nodes
    in the backward half under fresh names).
    """
    c = run('training_step', model, options, name='training_step', check=check,
            params=tuple(params), wrt=list(wrt), differentiated=[loss], update=update)
    return TrainingStepProgram(
        program=c.programs['training_step'], params=list(params), updated=c.reached,
        onnx=_like(c.model, c.graphs['training_step']), order=c.order)


def compile_inference(model, params=(), check=True, options=None):
    """An inference Program whose ``params`` initializers are inputs (their
    values change during training), after the graph's own inputs.
    ``options``: a pipeline.CompilerOptions (default: the defaults)."""
    return run('inference', model, options, name='inference', check=check,
               params=tuple(params)).programs['inference']


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


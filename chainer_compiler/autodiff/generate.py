"""Building the backward graph of a forward ONNX graph."""
from dataclasses import dataclass, field

import numpy
from onnx import helper

from ..onnx_builder import GraphBuilder
from ..onnx_graph import numpy_dtype, schema_version
from .registry import GradientError, rule_for

GRAD_PREFIX = 'grad/'


class BackwardBuilder(GraphBuilder):
    """GraphBuilder for gradient rules: knows the static dtype and shape of
    every forward value, and helpers rules share.

    Two versions matter to a rule: what a forward node means depends on its
    schema version (``version(node)``, the one its kernel is picked by);
    which forms the nodes it writes may take depends on the model's opset
    (``opset``, as for every GraphBuilder)."""

    def __init__(self, opset, value_types, forward_names):
        super().__init__(opset)
        self.value_types = value_types
        for name in forward_names:
            self.reserve(name)

    def fresh(self, hint):
        return super().fresh(GRAD_PREFIX + hint)

    def shape(self, name):
        """Static shape of forward value ``name`` (a tuple of ints)."""
        dtype, shape = self.value_types.get(name, (None, None))
        if shape is None or any(not isinstance(d, int) for d in shape):
            raise GradientError('the shape of %s is not static (%s); compiled training needs '
                                'fixed shapes' % (name, shape))
        return shape

    def dtype(self, name):
        return self.value_types[name][0]

    def version(self, node):
        """The schema version forward ``node`` resolves to at the model's
        opset: the since_version of its schema, as kernels are keyed."""
        return schema_version(node, {'': self.opset})

    @staticmethod
    def attr(node, name, default=None):
        """Attribute ``name`` of forward ``node`` (``default`` when absent)."""
        for a in node.attribute:
            if a.name == name:
                value = helper.get_attribute_value(a)
                return value.decode() if isinstance(value, bytes) else value
        return default

    def sum_to(self, grad, grad_shape, shape):
        """Undo broadcasting: sum ``grad`` (of ``grad_shape``) down to ``shape``."""
        grad_shape, shape = tuple(grad_shape), tuple(shape)
        if grad_shape == shape:
            return grad
        lead = len(grad_shape) - len(shape)
        kept = [lead + i for i, d in enumerate(shape) if d == 1 and grad_shape[lead + i] != 1]
        if lead and not kept:  # only leading axes go (a bias): no Reshape needed
            return self.reduce('ReduceSum', grad, list(range(lead)), keepdims=False)
        axes = list(range(lead)) + kept
        if axes:
            grad = self.reduce('ReduceSum', grad, axes, keepdims=True)
        return self.reshape(grad, shape)

    def zeros_like(self, name):
        return self.constant(numpy.zeros(self.shape(name), self.dtype(name)), hint='zeros')


@dataclass
class BackwardGraph:
    """The backward half of a training step.

    ``grad_inputs`` pairs each backward input with the forward output whose
    gradient it carries; ``retained`` are the forward values the backward
    graph reads; ``grad_outputs`` maps each differentiated name to the name
    of its gradient, or None when no gradient reaches it.
    """
    nodes: list
    initializers: list
    grad_inputs: list
    retained: list
    grad_outputs: dict
    value_types: dict = field(default_factory=dict)

    def graph(self, name='backward'):
        """The backward graph as a GraphProto (for dumps and code emission)."""
        def info(value_name, forward_name):
            dtype, shape = self.value_types[forward_name]
            return helper.make_tensor_value_info(
                value_name, helper.np_dtype_to_tensor_dtype(dtype), list(shape))

        inputs = [info(g, f) for g, f in self.grad_inputs] + [info(r, r) for r in self.retained]
        outputs = [info(g, w) for w, g in self.grad_outputs.items() if g is not None]
        return helper.make_graph(self.nodes, name, inputs, outputs, self.initializers)


def value_types(graph):
    """{name: (numpy dtype, shape tuple or None)} for typed values of ``graph``."""
    types = {}
    for v in list(graph.input) + list(graph.value_info) + list(graph.output):
        t = v.type.tensor_type
        if v.type.WhichOneof('value') != 'tensor_type':
            continue
        shape = None
        if t.HasField('shape'):
            shape = tuple(d.dim_value if d.HasField('dim_value') else (d.dim_param or None)
                          for d in t.shape.dim)
        types[v.name] = (numpy_dtype(t.elem_type), shape)
    for init in graph.initializer:
        types[init.name] = (numpy_dtype(init.data_type), tuple(init.dims))
    return types


def differentiate(graph, opset, wrt, outputs=None):
    """Backward graph of ``graph`` (shape-inferred) for the values ``wrt``
    (inputs or parameters), from gradients of ``outputs`` (default: all
    graph outputs)."""
    outputs = [v.name for v in graph.output] if outputs is None else list(outputs)
    types = value_types(graph)
    requires = {name for name in wrt if _is_float(types, name)}
    for node in graph.node:
        if any(i in requires for i in node.input) and _propagates(node):
            requires.update(o for o in node.output if o and _is_float(types, o))

    forward_names = set(types) | {o for n in graph.node for o in n.output}
    b = BackwardBuilder(opset, types, forward_names)
    grads, grad_inputs = {}, []
    for out in outputs:
        if out in requires:
            grads[out] = b.reserve(GRAD_PREFIX + out)
            grad_inputs.append((grads[out], out))

    for node in reversed(graph.node):
        gys = [grads.get(o) if o else None for o in node.output]
        if all(g is None for g in gys) or not any(i in requires for i in node.input):
            continue
        rule = rule_for(node)
        if rule is None:
            continue
        gxs = rule(b, node, gys)
        if len(gxs) != len(node.input):
            raise GradientError('gradient rule of %s returned %d gradients for %d inputs'
                                % (node.op_type, len(gxs), len(node.input)))
        for name, gx in zip(node.input, gxs):
            if gx is None or name not in requires:
                continue
            grads[name] = b.node('Add', [grads[name], gx]) if name in grads else gx

    grad_outputs = {}
    for name in wrt:
        g = grads.get(name)
        if g is not None and g != GRAD_PREFIX + name:
            g = b.node('Identity', [g], [b.reserve(GRAD_PREFIX + name)])
        grad_outputs[name] = g
    _prune(b, [g for g in grad_outputs.values() if g is not None])
    constants = {t.name: t for t in graph.initializer}
    retained = outside_reads(b.nodes, b.initializers, [g for g, _ in grad_inputs], constants)
    return BackwardGraph(b.nodes, b.initializers, grad_inputs, retained, grad_outputs, types)


def outside_reads(nodes, initializers, grad_inputs, constants):
    """The forward values backward ``nodes`` read without making them, in
    first-read order: the values the forward program must retain.  Forward
    ``constants`` read are appended to ``initializers`` instead: copied into
    the backward graph, not retained every step."""
    outside = set(grad_inputs) | {t.name for t in initializers}
    made, retained = set(), []
    for node in nodes:
        for name in node.input:
            if not name or name in made or name in outside or name in retained:
                continue
            if name in constants:
                initializers.append(constants[name])
                outside.add(name)
            else:
                retained.append(name)
        made.update(node.output)
    return retained


def _prune(b, needed):
    """Drop backward nodes no gradient output depends on (a rule may build
    gradients for inputs that turn out not to need one)."""
    needed, kept = set(needed), []
    for node in reversed(b.nodes):
        if any(o in needed for o in node.output):
            kept.append(node)
            needed.update(i for i in node.input if i)
    kept.reverse()
    b.nodes[:] = kept
    b.initializers[:] = [t for t in b.initializers if t.name in needed]


def _is_float(types, name):
    dtype = types.get(name, (None, None))[0]
    return dtype is not None and dtype.kind == 'f'


def _propagates(node):
    """False for operators declared to have no gradient."""
    try:
        return rule_for(node) is not None
    except GradientError:
        return True  # reported when the backward pass reaches it


__all__ = ['BackwardBuilder', 'BackwardGraph', 'GRAD_PREFIX', 'differentiate', 'outside_reads']

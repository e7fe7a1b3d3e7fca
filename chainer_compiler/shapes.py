"""Shape inference whose cost is bounded by the size of the file.

ONNX's data propagation materialises the values of small 1-D tensors (shape
arithmetic such as Shape -> Gather -> Concat -> Reshape) so that later
shapes become known.  It does so for any 1-D tensor whose value it can
compute, and a 150-byte file can ask for a ConstantOfShape, Expand or Range
of 10^8 elements: propagating that takes gigabytes.  So inference first runs
without propagation, and propagation runs only when every 1-D tensor of the
graph is known to be small.

``infer_graph_types`` types every value of a finished graph, for code
generation to give each register its type.
"""
import math

import onnx
from onnx import helper, shape_inference

from .errors import InvalidModelError
from .onnx_graph import attribute_value, subgraphs, tensor_signature, value_kind, value_types
from .runtime.ops.connection import window_geometry
from .runtime.ops.registry import CUSTOM_DOMAIN

#: Largest 1-D tensor data propagation may materialise.  Real shape values
#: have a handful of elements.
MAX_PROPAGATED_ELEMENTS = 1 << 16
#: Initializers with more elements than this are typed by their dims alone
#: when inferring a graph's types: inference reads only shape-like contents
#: (a handful of elements), and passing weights through ONNX's inference
#: costs about a second per 50 MB.
MAX_READ_INITIALIZER = 1024


def infer_shapes(model, source='<model>'):
    """``model`` with inferred value types (``graph.value_info``), and its
    declared graph output types checked against the inferred ones.

    Raises InvalidModelError naming ``source`` when inference fails or an
    output's declared element type or shape contradicts what the graph
    computes.
    """
    declared = [onnx.TypeProto.FromString(v.type.SerializeToString())
                for v in model.graph.output]
    # Inference runs on a copy without the weights: ONNX serialises the
    # whole model for every call (VGG16's 550 MB took 3 s a call).
    unchecked = _without_weights(model)
    for v in unchecked.graph.output:
        v.ClearField('type')
    # Sizes are judged from ONNX's own inference alone: a file's value_info
    # could understate them.
    probe = onnx.ModelProto()
    probe.CopyFrom(unchecked)
    _clear_value_info(probe.graph)
    bounded = _propagation_is_bounded(_infer(probe, source, data_prop=False).graph)
    inferred = _infer(unchecked, source, data_prop=bounded).graph
    problems = []
    for v, want in zip(inferred.output, declared):
        problem = _contradiction(want, v.type)
        if problem:
            problems.append("output '%s' %s" % (v.name, problem))
        _overlay(v.type, want)
    if problems:
        raise InvalidModelError('%s declares outputs that contradict what its graph computes: %s'
                                % (source, '; '.join(problems)))
    typed = onnx.ModelProto()
    typed.CopyFrom(model)
    # Only types change: nodes come back with their sub-graphs typed.
    for field in ('node', 'value_info', 'output'):
        del getattr(typed.graph, field)[:]
        getattr(typed.graph, field).extend(getattr(inferred, field))
    return typed


def infer_graph_types(graph, opsets, source='<model>', infer=infer_shapes):
    """Give every value of ``graph`` (a GraphProto; sub-graphs included) the
    type shape inference finds for it, in place: ``value_info`` and the
    outputs' types.  ``opsets`` maps domains to versions; ``infer(model,
    source)`` is the inference (default infer_shapes, whose errors it
    raises)."""
    light = _without_large_initializers(graph)
    imports = [helper.make_opsetid(d, v) for d, v in opsets.items()]
    if CUSTOM_DOMAIN not in opsets:
        imports.append(helper.make_opsetid(CUSTOM_DOMAIN, 1))
    inferred = infer(helper.make_model(light, opset_imports=imports), source).graph
    wrong = _miscounted_pools(inferred)
    # Only types change: nodes come back with their sub-graphs typed.
    del graph.node[:]
    graph.node.extend(inferred.node)
    del graph.value_info[:]
    graph.value_info.extend(v for v in inferred.value_info if v.name not in wrong)
    for mine, theirs in zip(graph.output, inferred.output):
        if mine.name not in wrong:
            mine.CopyFrom(theirs)


def _miscounted_pools(graph):
    """The values of ``graph`` whose inferred type is wrong: the results of
    ceil_mode pools where ONNX's inference (onnx 1.22) counts a window that
    starts in the end padding, which the operator's definition and the
    kernels (window_geometry) drop, and every value computed from them.
    Their types are left unknown rather than wrong."""
    types, wrong = value_types(graph), set()
    for node in graph.node:
        if any(name in wrong for name in node.input):
            wrong.update(node.output)
            continue
        if node.op_type not in ('MaxPool', 'AveragePool', 'LpPool') or node.domain:
            continue
        attrs = {a.name: attribute_value(a) for a in node.attribute}
        x, y = types.get(node.input[0]), types.get(node.output[0])
        if not attrs.get('ceil_mode') or x is None or y is None or x[1] is None \
                or y[1] is None or not all(isinstance(d, int) for d in x[1] + y[1]):
            continue
        try:
            out = window_geometry(x[1][2:], attrs['kernel_shape'], attrs.get('strides'),
                                  attrs.get('dilations'), attrs.get('pads'),
                                  attrs.get('auto_pad', 'NOTSET'), 1).out
        except (ValueError, IndexError, KeyError):
            continue  # the kernel refuses it when it runs
        if tuple(y[1][2:]) != out:
            wrong.update(node.output)
    return wrong


def _without_large_initializers(graph):
    """A copy of ``graph`` whose initializers above MAX_READ_INITIALIZER
    elements are typed inputs instead."""
    large = [t for t in graph.initializer if math.prod(t.dims) > MAX_READ_INITIALIZER]
    declared = {v.name for v in graph.input}
    return helper.make_graph(
        graph.node, graph.name,
        list(graph.input) + [helper.make_tensor_value_info(t.name, t.data_type, t.dims)
                             for t in large if t.name not in declared],
        graph.output,
        [t for t in graph.initializer if math.prod(t.dims) <= MAX_READ_INITIALIZER],
        value_info=graph.value_info, sparse_initializer=graph.sparse_initializer)


def _without_weights(model):
    """A copy of ``model`` whose main graph has its initializers above
    MAX_READ_INITIALIZER elements as typed inputs instead."""
    light = onnx.ModelProto()
    for field, value in model.ListFields():
        if field.name == 'graph':
            light.graph.CopyFrom(_without_large_initializers(value))
        elif hasattr(value, 'extend'):  # a repeated field
            getattr(light, field.name).extend(value)
        elif field.message_type is None:
            setattr(light, field.name, value)
        else:
            getattr(light, field.name).CopyFrom(value)
    return light


def _infer(model, source, data_prop):
    try:
        return shape_inference.infer_shapes(model, strict_mode=False, data_prop=data_prop)
    except MemoryError:
        raise InvalidModelError('%s: shape inference ran out of memory' % source) from None
    except Exception as e:  # onnx raises InferenceError, ValidationError, RuntimeError ...
        raise InvalidModelError('%s: shape inference failed: %s' % (source, e)) from e


def _clear_value_info(graph):
    del graph.value_info[:]
    for node in graph.node:
        for g in subgraphs(node):
            _clear_value_info(g)


def _propagation_is_bounded(graph):
    """True when no tensor that data propagation might materialise can be
    large: every tensor of rank 0 or 1 has a known size up to the limit, and
    no tensor has an unknown rank."""
    for v in graph.value_info:
        if value_kind(v.type) != 'tensor':
            continue
        _, shape = tensor_signature(v.type)
        if shape is None:
            return False
        if len(shape) <= 1 and not all(isinstance(d, int) and d <= MAX_PROPAGATED_ELEMENTS
                                       for d in shape):
            return False
    return all(_propagation_is_bounded(g) for node in graph.node for g in subgraphs(node))


def _overlay(inferred, declared):
    """Put what ``declared`` states over ``inferred``, in place: the output
    keeps its declared names and types, and gains the dimensions only
    inference knows."""
    if value_kind(inferred) != 'tensor' or value_kind(declared) != 'tensor':
        if declared.WhichOneof('value') is not None:
            inferred.CopyFrom(declared)
        return
    want, got = declared.tensor_type, inferred.tensor_type
    if want.elem_type:
        got.elem_type = want.elem_type
    if not want.HasField('shape'):
        return
    if not got.HasField('shape') or len(got.shape.dim) != len(want.shape.dim):
        got.shape.CopyFrom(want.shape)
        return
    for mine, stated in zip(got.shape.dim, want.shape.dim):
        if stated.HasField('dim_value') or stated.HasField('dim_param'):
            mine.CopyFrom(stated)


def _contradiction(declared, inferred):
    """How ``declared`` and ``inferred`` (TypeProtos) disagree, or None.
    Unknown element types, ranks and dimensions agree with anything."""
    if value_kind(declared) != 'tensor' or value_kind(inferred) != 'tensor':
        return None
    want_dtype, want_shape = tensor_signature(declared)
    got_dtype, got_shape = tensor_signature(inferred)
    if want_dtype and got_dtype and want_dtype != got_dtype:
        return 'is declared %s but computed as %s' % (want_dtype, got_dtype)
    if want_shape is None or got_shape is None:
        return None
    if len(want_shape) != len(got_shape) or any(
            isinstance(w, int) and isinstance(g, int) and w != g
            for w, g in zip(want_shape, got_shape)):
        return 'is declared with shape %s but computed with shape %s' % (
            _shape_text(want_shape), _shape_text(got_shape))
    return None


def _shape_text(shape):
    return '[%s]' % ', '.join('?' if d is None else str(d) for d in shape)

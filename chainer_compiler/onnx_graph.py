"""Small helpers over ONNX protos shared by the compiler passes, autodiff,
recompute and code generation: attributes, value types, and the one walk
over a graph with sub-graphs (``walk_graphs``)."""
from typing import NamedTuple

import numpy
import onnx
from onnx import numpy_helper

from .errors import InvalidModelError
from .runtime.ops.registry import normalize_domain

#: Integer attributes that hold an ONNX element type; kernels get a numpy.dtype.
DTYPE_ATTRIBUTES = frozenset(['to', 'dtype', 'output_dtype', 'output_datatype'])


def opset_versions(model):
    """{domain: version} of the model's opset imports ('' for ai.onnx)."""
    return {normalize_domain(o.domain): o.version for o in model.opset_import}


def schema_version(node, opsets):
    """The since_version of the schema ``node`` resolves to, or the domain's
    opset when ONNX has no schema for it (custom operators)."""
    domain = normalize_domain(node.domain)
    opset = opsets.get(domain, 1)
    try:
        return onnx.defs.get_schema(node.op_type, opset, node.domain or '').since_version
    except onnx.defs.SchemaError:
        return opset


def numpy_dtype(elem_type):
    """numpy dtype of an ONNX element type, or None for UNDEFINED."""
    if elem_type == onnx.TensorProto.UNDEFINED:
        return None
    try:
        return numpy.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except KeyError:  # a damaged or newer file
        raise InvalidModelError('element type %d is not one onnx %s knows'
                                % (elem_type, onnx.__version__)) from None


def attribute_value(attr, compile_graph=None):
    """Python value a kernel receives for an ONNX attribute.

    ``compile_graph`` turns GRAPH attributes into sub-programs; without it a
    graph attribute raises ValueError (constant folding never sees them).
    """
    A = onnx.AttributeProto
    if attr.type == A.INT:
        return numpy_dtype(attr.i) if attr.name in DTYPE_ATTRIBUTES else int(attr.i)
    if attr.type == A.FLOAT:
        return float(attr.f)
    if attr.type == A.STRING:
        return attr.s.decode('utf-8')
    if attr.type == A.INTS:
        return [int(v) for v in attr.ints]
    if attr.type == A.FLOATS:
        return [float(v) for v in attr.floats]
    if attr.type == A.STRINGS:
        return [s.decode('utf-8') for s in attr.strings]
    if attr.type == A.TENSOR:
        return numpy_helper.to_array(attr.t)
    if attr.type == A.GRAPH and compile_graph is not None:
        return compile_graph(attr.g)
    raise ValueError('attribute %s of type %s is not supported'
                     % (attr.name, A.AttributeType.Name(attr.type)))


def kernel_attributes(node, compile_graph=None):
    """The node's attributes as kernel keyword arguments.  TYPE_PROTO
    attributes (Optional's 'type') only matter to type inference: dropped."""
    return {a.name: attribute_value(a, compile_graph) for a in node.attribute
            if a.type not in (onnx.AttributeProto.TYPE_PROTO, onnx.AttributeProto.TYPE_PROTOS)}


def optional_input(node, i):
    """The name of input ``i`` of ``node``, '' when omitted (left empty, or
    past the inputs written)."""
    return node.input[i] if len(node.input) > i else ''


def subgraphs(node):
    """Graphs held by a node's attributes (Loop body, If branches ...)."""
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            yield from a.graphs


def walk_graphs(graph, enclosing=()):
    """The one walk over a graph with sub-graphs: ``(g, enclosing)`` for
    ``graph`` and every graph nested in its nodes (Loop and Scan bodies, If
    branches, at any depth), each before the graphs nested in it;
    ``enclosing`` is the tuple of graphs ``g`` lies in, outermost first.

    A pass may rewrite ``g``'s nodes when it receives it: the walk reads
    them afterwards, so it goes on into the sub-graphs of the new nodes.
    """
    yield graph, enclosing
    inner = enclosing + (graph,)
    for node in graph.node:
        for g in subgraphs(node):
            yield from walk_graphs(g, inner)


def all_nodes(graph):
    """Every node of ``graph`` and of its nested sub-graphs (walk_graphs's
    order).  ``graph`` may be a FunctionProto: it has nodes too."""
    for g, _ in walk_graphs(graph):
        yield from g.node


def free_names(graph):
    """Names a graph reads but does not define: its outer-scope captures,
    in first-use order."""
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.name for t in graph.sparse_initializer}
    seen, order = set(), []

    def use(name):
        if name and name not in defined and name not in seen:
            seen.add(name)
            order.append(name)

    for node in graph.node:
        for name in node.input:
            use(name)
        for g in subgraphs(node):
            for name in free_names(g):
                use(name)
        defined.update(node.output)
    for v in graph.output:
        use(v.name)
    return order


def implicit_inputs(node):
    """The outer-scope values ``node``'s sub-graphs read, in first-use order."""
    names = []
    for g in subgraphs(node):
        names.extend(n for n in free_names(g) if n not in names)
    return names


def reads(node):
    """Every value ``node`` reads: its inputs, then its implicit inputs."""
    return [i for i in node.input if i] + implicit_inputs(node)


class SequenceType(NamedTuple):
    """The type of a sequence value: its elements' dtype and shape (None
    when unknown), unpacking as a tensor's ``(dtype, shape)`` does."""
    dtype: object
    shape: object


def value_types(graph):
    """{name: (numpy dtype, shape tuple or None), or a SequenceType} for
    typed values of ``graph``."""
    types = {}
    for v in list(graph.input) + list(graph.value_info) + list(graph.output):
        kind = v.type.WhichOneof('value')
        if kind == 'tensor_type':
            types[v.name] = _tensor_entry(v.type.tensor_type)
        elif kind == 'sequence_type' and \
                v.type.sequence_type.elem_type.WhichOneof('value') == 'tensor_type':
            types[v.name] = SequenceType(*_tensor_entry(v.type.sequence_type.elem_type.tensor_type))
    for init in graph.initializer:
        types[init.name] = (numpy_dtype(init.data_type), tuple(init.dims))
    return types


def _tensor_entry(t):
    shape = None
    if t.HasField('shape'):
        shape = tuple(d.dim_value if d.HasField('dim_value') else (d.dim_param or None)
                      for d in t.shape.dim)
    return numpy_dtype(t.elem_type), shape


def value_info(name, entry):
    """A ValueInfoProto for ``name`` of type ``entry`` (a value_types entry:
    ``(dtype, shape)`` or a SequenceType; None when nothing is known)."""
    if entry is None or entry[0] is None:
        return onnx.helper.make_empty_tensor_value_info(name)
    elem = onnx.helper.np_dtype_to_tensor_dtype(numpy.dtype(entry[0]))
    shape = None if entry[1] is None else list(entry[1])
    if isinstance(entry, SequenceType):
        return onnx.helper.make_tensor_sequence_value_info(name, elem, shape)
    return onnx.helper.make_tensor_value_info(name, elem, shape)


def value_kind(type_proto):
    """'tensor', 'sequence', 'optional' or 'unknown' for an ONNX TypeProto."""
    which = type_proto.WhichOneof('value')
    return {'tensor_type': 'tensor', 'sequence_type': 'sequence',
            'optional_type': 'optional'}.get(which, 'unknown')


def tensor_signature(type_proto):
    """(dtype name or None, shape tuple or None) of a tensor TypeProto; dims
    are ints, symbolic names, or None when unknown."""
    if value_kind(type_proto) != 'tensor':
        return None, None
    t = type_proto.tensor_type
    dtype = numpy_dtype(t.elem_type)
    shape = None
    if t.HasField('shape'):
        # Some exporters write -1 for an unknown dimension.
        shape = tuple(d.dim_value if d.HasField('dim_value') and d.dim_value >= 0
                      else (d.dim_param or None) for d in t.shape.dim)
    return (dtype.name if dtype is not None else None), shape

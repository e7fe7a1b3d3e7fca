"""Small helpers over ONNX protos shared by the compiler passes."""
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


def subgraphs(node):
    """Graphs held by a node's attributes (Loop body, If branches ...)."""
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            yield from a.graphs


def all_nodes(graph):
    """Every node of ``graph`` and of its nested sub-graphs, depth first."""
    for node in graph.node:
        yield node
        for g in subgraphs(node):
            yield from all_nodes(g)


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

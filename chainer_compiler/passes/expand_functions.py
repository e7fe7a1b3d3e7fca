"""Expand operators that have no kernel into their ONNX function bodies.

Many ONNX operators (Gelu, LayerNormalization, Celu, SoftmaxCrossEntropyLoss,
...) are defined by the standard as a function of simpler operators.  When
the VM has no kernel for such an operator, we register the node's function
body as a model-local function and let ``onnx.inliner`` splice it in, so the
VM runs the simpler operators instead.
"""
import onnx
import onnx.inliner

from ..onnx_graph import all_nodes, opset_versions, schema_version
from ..runtime.ops.registry import has_kernel, normalize_domain
from ..shapes import infer_shapes

_EXPANSION_DOMAIN = 'org.chainer_compiler.expanded'
_MAX_ROUNDS = 4  # function bodies may themselves use expandable operators


def expand_functions(model):
    """Return ``model`` with every kernel-less operator that has a function
    body expanded (repeatedly, for nested definitions)."""
    for _ in range(_MAX_ROUNDS):
        opsets = opset_versions(model)
        types = _value_types(model)
        functions, count = [], 0
        for node in all_nodes(model.graph):
            version = schema_version(node, opsets)
            if has_kernel(node.op_type, node.domain, version):
                continue
            body = _function_body(node, opsets, types)
            if body is None:
                continue
            count += 1
            body.domain = _EXPANSION_DOMAIN
            body.name = '%s_%d' % (node.op_type, count)
            _add_default_attributes(node, opsets)
            node.op_type, node.domain = body.name, _EXPANSION_DOMAIN
            functions.append(body)
        if not functions:
            return model
        model.functions.extend(functions)
        if _EXPANSION_DOMAIN not in opsets:
            model.opset_import.append(onnx.helper.make_opsetid(_EXPANSION_DOMAIN, 1))
        model = onnx.inliner.inline_local_functions(model)
        del model.opset_import[:]
        model.opset_import.extend(onnx.helper.make_opsetid(d, v) for d, v in opsets.items())
        model = infer_shapes(model)
    return model


def _function_body(node, opsets, types):
    domain = node.domain or ''
    opset = opsets.get(normalize_domain(domain), 1)
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, domain)
    except onnx.defs.SchemaError:
        return None
    try:
        if schema.has_context_dependent_function:
            version = _newest_at_most(schema.context_dependent_function_opset_versions, opset)
            input_types = [types[name].SerializeToString() if name in types
                           else onnx.TypeProto().SerializeToString() for name in node.input]
            data = schema.get_context_dependent_function_with_opset_version(
                version, node.SerializeToString(), input_types)
        elif schema.has_function:
            version = _newest_at_most(schema.function_opset_versions, opset)
            data = schema.get_function_with_opset_version(version)
        else:
            return None
    except Exception:  # ONNX cannot build a body for this node's types
        return None
    if not data:
        return None
    body = onnx.FunctionProto()
    body.ParseFromString(data)
    if not body.node:
        return None
    # The body was written for the model's opset of each domain it uses.
    del body.opset_import[:]
    body.opset_import.extend(onnx.helper.make_opsetid(d, v) for d, v in opsets.items())
    return body


def _add_default_attributes(node, opsets):
    # The inliner resolves the body's attribute references from the call
    # node, so attributes the node leaves at their default must be spelled out.
    schema = onnx.defs.get_schema(node.op_type, opsets.get(normalize_domain(node.domain), 1),
                                  node.domain or '')
    present = {a.name for a in node.attribute}
    for name, attr in schema.attributes.items():
        default = attr.default_value
        if name not in present and default.type != onnx.AttributeProto.UNDEFINED:
            copy = onnx.AttributeProto()
            copy.CopyFrom(default)
            copy.name = name
            node.attribute.append(copy)


def _newest_at_most(versions, opset):
    usable = [v for v in versions if v <= opset]
    return max(usable) if usable else opset


def _value_types(model):
    g = model.graph
    types = {v.name: v.type for v in list(g.input) + list(g.output) + list(g.value_info)}
    for t in g.initializer:
        tp = onnx.TypeProto()
        tp.tensor_type.elem_type = t.data_type
        for d in t.dims:
            tp.tensor_type.shape.dim.add().dim_value = d
        types.setdefault(t.name, tp)
    return types

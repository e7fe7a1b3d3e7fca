"""Constant folding: evaluate nodes whose inputs are all known, ahead of time.

Folding runs the VM's own NumPy kernels, so a folded value is exactly what
the program would have computed.  A node is folded only when ONNX's shape
inference, given the known input values, sizes every output within the size
rule the native emitter applies too (runtime/limits.py): a few bytes of
ConstantOfShape, Expand or Range can ask for gigabytes, and compile time
must stay bounded by the size of the file.
"""
import onnx
from onnx import numpy_helper, shape_inference

from ..onnx_graph import (
    kernel_attributes,
    schema_version,
    subgraphs,
    tensor_signature,
    walk_graphs,
)
from ..runtime.limits import may_fold
from ..runtime.ops.registry import draws_random, has_kernel, lookup, normalize_domain


def fold_constants(graph, opsets):
    """Replace, in place, foldable nodes of ``graph`` and of its sub-graphs
    by initializers of their graph; return how many nodes were folded.  A
    sub-graph's node may read the constants of the graphs around it."""
    return sum(_fold_graph(g, enclosing, opsets) for g, enclosing in walk_graphs(graph))


def _fold_graph(graph, enclosing, opsets):
    scopes = enclosing + (graph,)
    inputs = {v.name for g in scopes for v in g.input}
    known = _KnownValues(t for g in scopes for t in g.initializer if t.name not in inputs)
    folded, kept = 0, []
    for node in graph.node:
        values = _try_fold(node, opsets, known)
        if values is None:
            kept.append(node)
            continue
        folded += 1
        for name, value in zip(node.output, values):
            if name:
                proto = numpy_helper.from_array(value, name)
                known.add(proto, value)
                graph.initializer.append(proto)
    if folded:
        del graph.node[:]
        graph.node.extend(kept)
    return folded


class _KnownValues:
    """Constant values by name: the TensorProto, and its array once read."""

    def __init__(self, protos):
        self.protos = {t.name: t for t in protos}
        self._arrays = {}

    def __contains__(self, name):
        return name in self.protos

    def add(self, proto, array):
        self.protos[proto.name] = proto
        self._arrays[proto.name] = array

    def array(self, name):
        if name not in self._arrays:
            self._arrays[name] = numpy_helper.to_array(self.protos[name])
        return self._arrays[name]


def _try_fold(node, opsets, known):
    if draws_random(node.op_type, node.domain) or any(True for _ in subgraphs(node)):
        return None  # a draw differs from run to run
    if not all(name in known for name in node.input if name):
        return None
    version = schema_version(node, opsets)
    if not has_kernel(node.op_type, node.domain, version):
        return None
    spec = lookup(node.op_type, node.domain, version)
    if spec.record.updated_inputs:
        return None  # it would overwrite the folded constants it reads
    if not _outputs_are_small(node, opsets, known):
        return None
    try:
        attrs = kernel_attributes(node)
    except ValueError:
        return None
    args = [known.array(name) if name else None for name in node.input]
    # (a failure is left to run time, where the error names the instruction)
    return spec.evaluate(args, attrs, len(node.output))


def _outputs_are_small(node, opsets, known):
    """True when shape inference, given the node's constant inputs, proves
    every output small enough to fold (runtime.limits.may_fold)."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opsets.get(normalize_domain(node.domain), 1),
                                      node.domain or '')
    except onnx.defs.SchemaError:
        return False  # an operator without a schema: nothing sizes its outputs
    protos = {name: known.protos[name] for name in node.input if name}
    types = {name: onnx.helper.make_tensor_type_proto(t.data_type, t.dims)
             for name, t in protos.items()}
    try:
        inferred = shape_inference.infer_node_outputs(
            schema, node, types, protos,
            opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in opsets.items()])
    except Exception:  # inference refuses the node: left to run time
        return False
    return may_fold(tensor_signature(inferred[name])[1] if name in inferred else None
                    for name in filter(None, node.output))

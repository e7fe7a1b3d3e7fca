"""Constant folding: evaluate nodes whose inputs are all known, ahead of time.

Folding runs the VM's own NumPy kernels, so a folded value is exactly what
the program would have computed.
"""
import numpy
from onnx import numpy_helper

from ..onnx_graph import kernel_attributes, schema_version, subgraphs
from ..runtime.ops.registry import has_kernel, lookup

#: Operators whose result differs from run to run.
_NONDETERMINISTIC = frozenset([
    'RandomNormal', 'RandomUniform', 'RandomNormalLike', 'RandomUniformLike',
    'Bernoulli', 'Multinomial', 'Dropout', 'DropoutTraining'])

#: Larger results stay as instructions, so Program files stay small.
MAX_FOLDED_ELEMENTS = 1 << 20


def fold_constants(graph, opsets):
    """Replace, in place, foldable nodes of ``graph`` by initializers; return
    how many nodes were folded."""
    inputs = {v.name for v in graph.input}
    known = {t.name: None for t in graph.initializer if t.name not in inputs}
    folded, kept = 0, []
    for node in graph.node:
        values = _try_fold(node, opsets, known, graph)
        if values is None:
            kept.append(node)
            continue
        folded += 1
        for name, value in zip(node.output, values):
            if name:
                known[name] = value
                graph.initializer.append(numpy_helper.from_array(value, name))
    if folded:
        del graph.node[:]
        graph.node.extend(kept)
    return folded


def _try_fold(node, opsets, known, graph):
    if node.op_type in _NONDETERMINISTIC or any(True for _ in subgraphs(node)):
        return None
    if not all(name in known for name in node.input if name):
        return None
    version = schema_version(node, opsets)
    if not has_kernel(node.op_type, node.domain, version):
        return None
    try:
        attrs = kernel_attributes(node)
    except ValueError:
        return None
    args = [_known_value(known, name, graph) if name else None for name in node.input]
    while args and args[-1] is None:
        args.pop()
    spec = lookup(node.op_type, node.domain, version)
    if spec.accepts_n_outputs:
        attrs['n_outputs'] = len(node.output)
    try:
        result = spec.fn(numpy, *args, **attrs)
    except Exception:
        # Left to run time, where the error names the instruction.
        return None
    results = result if isinstance(result, tuple) else (result,)
    results = results[:len(node.output)]
    if len(results) < len(node.output):
        return None
    arrays = []
    for r in results:
        if not isinstance(r, (numpy.ndarray, numpy.generic)) or r.size > MAX_FOLDED_ELEMENTS:
            return None
        arrays.append(numpy.asarray(r))
    return arrays


def _known_value(known, name, graph):
    if known[name] is None:
        known[name] = next(numpy_helper.to_array(t) for t in graph.initializer
                           if t.name == name)
    return known[name]

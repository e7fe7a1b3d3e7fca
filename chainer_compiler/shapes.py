"""Shape inference whose cost is bounded by the size of the file.

ONNX's data propagation materialises the values of small 1-D tensors (shape
arithmetic such as Shape -> Gather -> Concat -> Reshape) so that later
shapes become known.  It does so for any 1-D tensor whose value it can
compute, and a 150-byte file can ask for a ConstantOfShape, Expand or Range
of 10^8 elements: propagating that takes gigabytes.  So inference first runs
without propagation, and propagation runs only when every 1-D tensor of the
graph is known to be small.
"""
import onnx
from onnx import shape_inference

from .errors import InvalidModelError
from .onnx_graph import subgraphs, tensor_signature, value_kind

#: Largest 1-D tensor data propagation may materialise.  Real shape values
#: have a handful of elements.
MAX_PROPAGATED_ELEMENTS = 1 << 16


def infer_shapes(model, source='<model>'):
    """``model`` with inferred value types (``graph.value_info``), and its
    declared graph output types checked against the inferred ones.

    Raises InvalidModelError naming ``source`` when inference fails or an
    output's declared element type or shape contradicts what the graph
    computes.
    """
    declared = [onnx.TypeProto.FromString(v.type.SerializeToString())
                for v in model.graph.output]
    unchecked = onnx.ModelProto()
    unchecked.CopyFrom(model)
    for v in unchecked.graph.output:
        v.ClearField('type')
    # Sizes are judged from ONNX's own inference alone: a file's value_info
    # could understate them.
    probe = onnx.ModelProto()
    probe.CopyFrom(unchecked)
    _clear_value_info(probe.graph)
    bounded = _propagation_is_bounded(_infer(probe, source, data_prop=False).graph)
    inferred = _infer(unchecked, source, data_prop=bounded)
    problems = []
    for v, want in zip(inferred.graph.output, declared):
        problem = _contradiction(want, v.type)
        if problem:
            problems.append("output '%s' %s" % (v.name, problem))
        _overlay(v.type, want)
    if problems:
        raise InvalidModelError('%s declares outputs that contradict what its graph computes: %s'
                                % (source, '; '.join(problems)))
    return inferred


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

"""The compiler front: loading and checking an ONNX model.

``load_onnx``: read -> onnx.checker -> inline local functions (their
expanded size bounded first) -> shape inference, refusing a broken file
with InvalidModelError.  The pipeline (pipeline.py, whose
``build_program`` compiles an inference Program) runs it first; this
module imports nothing from the pipeline.
"""
import os

import onnx
import onnx.inliner
from onnx import numpy_helper

from .errors import InvalidModelError
from .onnx_graph import all_nodes, opset_versions, walk_graphs
from .shapes import infer_shapes

#: The newest ai.onnx opset onnx 1.22 defines.
MAX_OPSET = onnx.defs.onnx_opset_version()
#: Inlining local functions may make at most this many nodes per node of
#: the file (graphs and function bodies), or MIN_INLINED_NODES if more: a
#: layer written once as a function and called at up to a hundred places
#: inlines, while functions that each call the one before twice double the
#: graph per level, 2^18 nodes from a 1.5 KB file.
INLINING_GROWTH = 100
MIN_INLINED_NODES = 10_000


def load_onnx(model, check=True):
    """Load an ONNX model (path, bytes or ModelProto), check it and infer
    shapes.  Raises InvalidModelError with the file name and the reason."""
    model, source = _read_model(model)
    _check_text(model, source)
    opset = opset_versions(model).get('')
    if opset is not None and opset > MAX_OPSET:
        raise InvalidModelError('%s uses ai.onnx opset %d; this onnx (%s) knows opsets up to %d'
                                % (source, opset, onnx.__version__, MAX_OPSET))
    if check:
        try:
            onnx.checker.check_model(model)
        except (onnx.checker.ValidationError, ValueError) as e:
            # ValueError: the checker's message may quote a string attribute
            # that is not UTF-8, and then cannot be decoded.
            raise InvalidModelError('%s fails onnx.checker: %s' % (source, e)) from e
    _check_tensor_data(model.graph, source)
    _check_declared_dims(model.graph, source)
    if model.functions:
        _check_inlined_size(model, source)
        try:
            model = onnx.inliner.inline_local_functions(model)
        except Exception as e:  # the inliner raises plain RuntimeErrors
            raise InvalidModelError('%s: its local functions cannot be inlined: %s'
                                    % (source, e)) from e
    return infer_shapes(model, source)


def source_name(model):
    """How messages name ``model`` (an ONNX path, bytes or ModelProto)."""
    return os.fspath(model) if isinstance(model, (str, os.PathLike)) else '<model>'


def _read_model(model):
    """(a private ModelProto copy, the name errors use for it)."""
    if isinstance(model, (str, os.PathLike)):
        if not os.path.isfile(model):
            raise InvalidModelError('ONNX file %s does not exist' % model)
        try:
            # onnx.load reads external data from the model's own folder and
            # refuses locations outside it.
            return onnx.load(model), source_name(model)
        except Exception as e:
            raise InvalidModelError('%s is not a readable ONNX model: %s' % (model, e)) from e
    if isinstance(model, bytes):
        try:
            return onnx.load_from_string(model), source_name(model)
        except Exception as e:
            raise InvalidModelError('the bytes given are not an ONNX model: %s' % e) from e
    if isinstance(model, onnx.ModelProto):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        return copy, source_name(model)
    raise InvalidModelError('expected an ONNX file path, bytes or an onnx.ModelProto, got %s'
                            % type(model).__name__)


def _check_text(message, source):
    """Every string field of ``message`` and the messages in it is UTF-8
    text: protobuf hands any other as bytes, which names are never."""
    for field, value in message.ListFields():
        values = value if field.is_repeated else [value]
        if field.type == field.TYPE_MESSAGE:
            for item in values:
                _check_text(item, source)
        elif field.type == field.TYPE_STRING:
            for item in values:
                if isinstance(item, bytes):
                    raise InvalidModelError('%s: %s %r is not UTF-8 text'
                                            % (source, field.full_name, item))


def _check_inlined_size(model, source):
    """Refuse ``model`` when inlining its local functions would make more
    than INLINING_GROWTH nodes per node of the file (at least
    MIN_INLINED_NODES), or would never end (a function calling itself),
    before anything is inlined."""
    functions = {(f.domain, f.name, f.overload): f for f in model.functions}

    def callees(graph):
        """(nodes of a graph or function that are not calls, the keys of the
        functions called)."""
        own, calls = 0, []
        for node in all_nodes(graph):  # a FunctionProto has .node too
            key = (node.domain, node.op_type, node.overload)
            if key in functions:
                calls.append(key)
            else:
                own += 1
        return own, calls

    bodies = {key: callees(f) for key, f in functions.items()}
    graph_own, graph_calls = callees(model.graph)
    in_file = sum(own + len(calls) for own, calls in [(graph_own, graph_calls), *bodies.values()])
    limit = max(INLINING_GROWTH * in_file, MIN_INLINED_NODES)
    # Each function's node count once inlined, counted only up to limit + 1
    # (exact counts of a nest of calls have thousands of digits).
    sizes: dict = {}
    opened, culprit = set(), None
    for root in dict.fromkeys(graph_calls):  # what the inliner reaches
        stack = [root]
        while stack:  # depth first, without Python's recursion limit
            key = stack[-1]
            own, calls = bodies[key]
            if key in sizes:
                stack.pop()
            elif key in opened:
                size = own + sum(sizes[c] for c in calls)
                if size > limit and culprit is None and all(sizes[c] <= limit for c in calls):
                    culprit = key, size  # the smallest function that is too large
                sizes[key] = min(size, limit + 1)
                stack.pop()
            else:
                opened.add(key)
                for c in calls:
                    if c in opened and c not in sizes:
                        raise InvalidModelError(
                            '%s: local function %s calls %s, which is calling it: inlining '
                            'would never end' % (source, _function_name(key), _function_name(c)))
                    stack.append(c)
    if graph_own + sum(sizes[c] for c in graph_calls) > limit:
        key, size = culprit or max(((k, sizes[k]) for k in set(graph_calls)), key=lambda c: c[1])
        raise InvalidModelError(
            '%s: inlining its local functions would make more than %d nodes (%d per node of '
            'the file, which has %d); function %s alone expands to %d'
            % (source, limit, INLINING_GROWTH, in_file, _function_name(key), size))


def _function_name(key):
    domain, name, overload = key
    return "'%s%s%s'" % (domain + '::' if domain else '', name, ':' + overload if overload else '')


def _check_declared_dims(graph, source):
    """No graph input or output declares a negative dimension.  (Inside the
    graph, onnx's inference writes -1 for an unknown size and
    ``tensor_signature`` reads it so; a declaration is the caller's
    contract and must say what it means.)"""
    for role, values in (('input', graph.input), ('output', graph.output)):
        for v in values:
            dims = v.type.tensor_type.shape.dim if v.type.HasField('tensor_type') else []
            for axis, d in enumerate(dims):
                if d.HasField('dim_value') and d.dim_value < 0:
                    raise InvalidModelError(
                        "%s: graph %s '%s' declares dimension %d as %d; an unknown size "
                        "is left unset or named (dim_param)"
                        % (source, role, v.name, axis, d.dim_value))


def _check_tensor_data(graph, source):
    """Every initializer and tensor attribute holds data of its declared
    type and dims, in the file itself: external data that was not loaded
    with the model would otherwise be read relative to the working
    directory."""
    tensors = []
    for g, _ in walk_graphs(graph):
        tensors.extend(('initializer', t) for t in g.initializer)
        tensors.extend(('attribute %s of node %s' % (a.name, node.name or node.op_type), a.t)
                       for node in g.node for a in node.attribute
                       if a.type == onnx.AttributeProto.TENSOR)
    for what, tensor in tensors:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            raise InvalidModelError(
                "%s: %s '%s' keeps its data in an external file; load the model from its "
                "path so that the file is found next to it" % (source, what, tensor.name))
        try:
            numpy_helper.to_array(tensor)
        except Exception as e:
            raise InvalidModelError("%s: %s '%s' (dims %s) has data that does not match "
                                    "its type and dims: %s"
                                    % (source, what, tensor.name, list(tensor.dims), e)) from e


"""Type inference for graphs with sub-graphs, beyond what ONNX's gives.

The pipeline's ``infer_types`` pass runs ``shapes.infer_shapes`` through
``infer_with_outer_constants`` (sub-graphs see the outer constants they
read) and then ``pin_loop_types`` (a Loop's final values get the type its
body keeps).  Gradient rules need these types, but nothing here is about
gradients.
"""
import onnx

from ..onnx_graph import SequenceType, free_names, value_info, value_types, walk_graphs


def infer_with_outer_constants(model, infer):
    """``infer(model)`` (a shape inference) run with every sub-graph
    holding copies of the outer-scope integer initializers it reads (the
    axes, shapes, pads ... inference reads the contents of; not weights).

    ONNX's inference of a sub-graph knows the types of outer-scope values
    but not their contents, so a Loop body's Unsqueeze, Reshape or Expand
    whose axes or shape is an outer constant gets no rank, and the values
    after it none either.  The copies are removed from the inferred model
    (a sub-graph may not shadow its owner's names)."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for graph, enclosing in walk_graphs(probe.graph):
        visible = {t.name: t for outer in enclosing for t in outer.initializer
                   if t.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32)}
        graph.initializer.extend(visible[n] for n in free_names(graph) if n in visible)
    inferred = infer(probe)
    for graph, enclosing in walk_graphs(inferred.graph):
        # The copies: a name an enclosing graph holds (enclosing graphs
        # lose theirs first, and keep the originals).
        outer = {t.name for g in enclosing for t in g.initializer}
        kept = [t for t in graph.initializer if t.name not in outer]
        del graph.initializer[:]
        graph.initializer.extend(kept)
    return inferred


def pin_loop_types(graph):
    """Declare the type of each Loop's final value (in ``graph`` and its
    sub-graphs) that its body keeps, as input and as output, and that its
    initial value agrees with: the final value has it too.  ONNX's
    inference leaves carried values' shapes unknown (they may change from
    one iteration to the next), sequences' element shapes included, and
    gradient rules need ranks, static shapes where they can have them.  A
    dimension the body does not keep static is declared unknown, so that
    the rank still gets through.  Returns whether anything was declared."""
    declared = False
    # Inner graphs first: an outer Loop's body then holds what was declared in it.
    for g, _ in reversed(list(walk_graphs(graph))):
        declared |= _pin_loop_types(g)
    return declared


def _pin_loop_types(graph):
    """pin_loop_types for the Loops of ``graph`` itself."""
    types = value_types(graph)
    declared = False
    for node in graph.node:
        if node.op_type != 'Loop':
            continue
        body = next(a.g for a in node.attribute if a.name == 'body')
        body_types = value_types(body)
        for k, final in enumerate(node.output[:len(node.input) - 2]):
            kept = _kept_type(body_types.get(body.input[2 + k].name),
                              body_types.get(body.output[1 + k].name))
            if final and kept is not None and _agrees(types.get(node.input[2 + k]), kept) \
                    and _knows_more(kept, types.get(final)):
                graph.value_info.append(value_info(final, kept))
                declared = True
    return declared


def _kept_type(given, made):
    """The type a carried value keeps across a body that takes it of type
    ``given`` and hands it on of type ``made``: their kind, dtype and rank
    when they agree on them (else None), with the static dimensions they
    agree on and unknown ones elsewhere."""
    if given is None or made is None or isinstance(given, SequenceType) != \
            isinstance(made, SequenceType) or given[0] != made[0] or given[1] is None \
            or made[1] is None or len(given[1]) != len(made[1]):
        return None
    dims = tuple(a if isinstance(a, int) and a == b else None
                 for a, b in zip(given[1], made[1]))
    return SequenceType(made[0], dims) if isinstance(made, SequenceType) else (made[0], dims)


def _knows_more(kept, entry):
    """Whether type ``kept`` says more than ``entry`` (None when unknown):
    a rank it lacks, or a static shape where it has none."""
    if entry is None or entry[1] is None:
        return True
    return _is_static(kept) and not _is_static(entry)


def _is_static(entry):
    """Whether ``entry`` is a tensor type, or a sequence type, of static shape."""
    return entry is not None and entry[1] is not None and \
        all(isinstance(d, int) for d in entry[1])


def _agrees(entry, kept):
    """Whether a value of type ``entry`` may have the type ``kept``: the
    same kind and dtype, and an unknown shape or one of ``kept``'s rank
    equal to it in each of its static dimensions."""
    if entry is None or isinstance(entry, SequenceType) != isinstance(kept, SequenceType) \
            or entry[0] != kept[0]:
        return False
    return entry[1] is None or len(entry[1]) == len(kept[1]) and all(
        k is None or e == k for e, k in zip(entry[1], kept[1]))

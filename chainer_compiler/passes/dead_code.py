"""Dead-code elimination: drop nodes no graph output depends on."""
from ..onnx_graph import reads, walk_graphs


def remove_dead_code(graph):
    """Remove, in place, nodes of ``graph`` and of its sub-graphs whose
    outputs reach no output of their graph; return how many were removed."""
    return sum(_remove_dead_nodes(g) for g, _ in walk_graphs(graph))


def _remove_dead_nodes(graph):
    needed = {v.name for v in graph.output}
    kept = []
    for node in reversed(graph.node):
        if any(o in needed for o in node.output if o):
            kept.append(node)
            needed.update(reads(node))  # its sub-graphs' outer reads included
    removed = len(graph.node) - len(kept)
    if removed:
        kept.reverse()
        del graph.node[:]
        graph.node.extend(kept)
    inputs = {v.name for v in graph.input}
    for t in [t for t in graph.initializer if t.name not in needed and t.name not in inputs]:
        graph.initializer.remove(t)
    return removed

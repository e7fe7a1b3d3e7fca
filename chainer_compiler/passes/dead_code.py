"""Dead-code elimination: drop nodes no graph output depends on."""
from ..onnx_graph import free_names, subgraphs


def remove_dead_code(graph):
    """Remove, in place, nodes of ``graph`` (not its sub-graphs) whose outputs
    reach no graph output; return how many were removed."""
    needed = {v.name for v in graph.output}
    kept = []
    for node in reversed(graph.node):
        if any(o in needed for o in node.output if o):
            kept.append(node)
            needed.update(n for n in node.input if n)
            for g in subgraphs(node):
                needed.update(free_names(g))
    removed = len(graph.node) - len(kept)
    if removed:
        kept.reverse()
        del graph.node[:]
        graph.node.extend(kept)
    inputs = {v.name for v in graph.input}
    for t in [t for t in graph.initializer if t.name not in needed and t.name not in inputs]:
        graph.initializer.remove(t)
    return removed

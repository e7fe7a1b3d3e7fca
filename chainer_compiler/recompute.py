"""Computation-order (recompute) policies: trade compute for memory.

By default the forward program retains every value the backward program
reads.  The ``'recompute'`` policy retains only values that are expensive
to make (outputs of matrix products, convolutions, recurrent layers, random
or state-updating operators) plus the graph's inputs and parameters; every
other value the backward program reads is recomputed there, by replaying
the forward nodes that made it right before its first use, so it lives for
a short stretch of the backward program instead of from the forward pass
to the end of backward.
"""
from .autodiff.generate import outside_reads
from .runtime.ops.registry import recomputable


def policy(name):
    """The policy registered in POLICIES as ``name``: a function of the
    forward graph and the BackwardGraph that rewrites the latter in place.
    An unknown name is a ValueError listing the choices."""
    if name not in POLICIES:
        raise ValueError('unknown computation_order %r: choose one of %s'
                         % (name, ', '.join(repr(p) for p in POLICIES)))
    return POLICIES[name]


def retain_all(forward_graph, backward):
    """Retain every value the backward program reads (the default)."""


def recompute_cheap(forward_graph, backward):
    """Retain only costly values (matrix products, convolutions, recurrent,
    random and stateful operators), the inputs and the parameters; replay
    the forward nodes of every other value in backward, right before its
    first use."""
    producer = {o: n for n in forward_graph.node for o in n.output if o}
    keep = {v.name for v in forward_graph.input} | {t.name for t in forward_graph.initializer}
    keep |= {o for n in forward_graph.node if _is_checkpoint(n) for o in n.output}
    keep |= {v.name for v in forward_graph.output}

    retained = set(backward.retained)
    replayed, nodes = set(), []
    for node in backward.nodes:
        for name in node.input:
            if name in retained and name not in keep:
                nodes.extend(_replay(name, producer, keep, replayed))
        nodes.append(node)
    if not replayed:
        return
    backward.nodes[:] = nodes
    backward.retained[:] = outside_reads(
        nodes, backward.initializers, [g for g, _ in backward.grad_inputs],
        {t.name: t for t in forward_graph.initializer})


#: Recompute policies by ``computation_order`` name (CompilerOptions); the
#: training pipeline's ``apply_recompute`` pass runs the chosen one.
POLICIES = {None: retain_all, 'recompute': recompute_cheap}


def _is_checkpoint(node):
    # Kernels declare what is costly, random or stateful (recompute=False).
    return not recomputable(node.op_type, node.domain)


def _replay(name, producer, keep, replayed):
    """Forward nodes (in order) that recompute ``name`` from kept values."""
    if name in keep or name in replayed or name not in producer:
        return []
    node = producer[name]
    nodes = []
    for i in node.input:
        if i:
            nodes.extend(_replay(i, producer, keep, replayed))
    replayed.update(o for o in node.output if o)
    nodes.append(node)
    return nodes

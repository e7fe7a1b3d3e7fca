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
from .runtime.ops.registry import normalize_domain

POLICIES = (None, 'recompute')

#: Operators whose outputs are kept (costly to redo, random, or stateful).
_CHECKPOINT_OPS = frozenset([
    'Conv', 'ConvTranspose', 'MatMul', 'Gemm', 'Einsum', 'LSTM', 'GRU', 'RNN',
    'Attention', 'MaxPool', 'Dropout', 'DropoutTraining', 'BatchNormalizationTraining',
    'RandomNormal', 'RandomUniform', 'RandomNormalLike', 'RandomUniformLike',
    'Bernoulli', 'Multinomial', 'Loop', 'Scan', 'If', 'SequenceMap'])


def apply_policy(policy, forward_graph, backward):
    """Rewrite ``backward`` (a BackwardGraph) in place for ``policy``."""
    if policy not in POLICIES:
        raise ValueError('unknown computation_order %r: choose one of %s'
                         % (policy, ', '.join(repr(p) for p in POLICIES)))
    if policy is None:
        return
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


def _is_checkpoint(node):
    return node.op_type in _CHECKPOINT_OPS or normalize_domain(node.domain) != ''


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

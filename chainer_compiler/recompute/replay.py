"""Replaying forward nodes in the backward program: what every recompute
policy does once it has chosen which values to keep.

A policy names the forward values to *keep* (retain for backward, if
backward reads them).  Every other forward value backward reads is
recomputed there: right before its first read, the forward nodes that make
it from kept values are replayed, each at most once.  Some values are kept
whatever the policy says (``Forward.pinned``): graph inputs and parameters,
graph outputs, and the outputs of operators the kernels declare not
replayable (random draws such as Dropout's mask, sub-programs), so a mask
is never redrawn.
"""
from dataclasses import dataclass, field

from onnx import NodeProto

from ..autodiff.generate import outside_reads
from ..onnx_graph import implicit_inputs, reads
from ..runtime.ops.registry import recomputable


@dataclass
class Forward:
    """What the policies read off a forward graph: its ``nodes`` in
    (topological) order, ``producer`` (value -> index of the node making
    it), ``pinned`` (values always kept) and ``constants`` (initializers
    by name)."""
    nodes: list
    producer: dict
    pinned: set
    constants: dict


def forward_facts(graph):
    """The Forward of ``graph`` (a shape-inferred GraphProto)."""
    producer = {o: k for k, n in enumerate(graph.node) for o in n.output if o}
    pinned = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    pinned |= {v.name for v in graph.output}
    pinned |= {o for n in graph.node if not recomputable(n.op_type, n.domain)
               for o in n.output if o}
    return Forward(list(graph.node), producer, pinned,
                   {t.name: t for t in graph.initializer})


@dataclass
class Plan:
    """The backward program a policy makes: its ``nodes`` (replays
    included), the forward values it ``retained`` and its
    ``initializers``; ``replayed`` lists the indices of the forward nodes
    replayed, in order (twice where a value is recomputed twice);
    ``copies`` maps each fresh name a replay writes to the forward value
    it recomputes."""
    nodes: list
    retained: list
    initializers: list
    replayed: list
    copies: dict = field(default_factory=dict)


def plan(forward, backward, keep, joined=False):
    """The Plan keeping ``keep`` (forward value names; the pinned ones are
    kept too) for the autodiff.BackwardGraph ``backward``, which is not
    changed.  A replay writes only the outputs not kept (the kept ones stay
    the forward's: a node is never made to define a value twice).

    ``joined``: backward will follow forward in one graph (the training
    step), where a replay may not write the names forward wrote: replays
    write fresh names, which the nodes after them read instead.  Values
    sub-graphs of backward read by name are kept there (renaming inside
    sub-graphs is not worth it)."""
    keep = set(keep) | forward.pinned
    taken = None
    if joined:
        keep |= {name for node in backward.nodes for name in implicit_inputs(node)}
        taken = {o for n in forward.nodes + list(backward.nodes)
                 for o in list(n.output) + list(n.input)}
    made, nodes, replayed, renamed = set(), [], [], {}
    retained = set(backward.retained)
    for node in backward.nodes:
        for name in reads(node):
            if name in retained and name not in keep and name not in made:
                for k in _producers(name, forward, keep, made):
                    original = forward.nodes[k]
                    made.update(o for o in original.output if o and o not in keep)
                    nodes.append(_replay(original, keep, renamed, taken))
                    replayed.append(k)
        nodes.append(renaming_reads(node, renamed))
    copies = {fresh: name for name, fresh in renamed.items()}
    return finished_plan(forward, backward, nodes, replayed, copies)


def finished_plan(forward, backward, nodes, replayed, copies):
    """The Plan of backward ``nodes``: what they read of forward is
    retained, except forward constants, which are copied in."""
    initializers = list(backward.initializers)
    kept = outside_reads(nodes, initializers, [g for g, _ in backward.grad_inputs],
                         forward.constants)
    return Plan(nodes, kept, initializers, replayed, copies)


def apply(backward, chosen):
    """Make the autodiff.BackwardGraph ``backward`` run Plan ``chosen``
    (its nodes no longer have gradient rules as origins)."""
    backward.nodes[:] = chosen.nodes
    backward.initializers[:] = chosen.initializers
    backward.retained[:] = chosen.retained
    backward.origins[:] = [None] * len(chosen.nodes)


def _producers(name, forward, keep, made):
    """Indices, in forward order, of the forward nodes to replay to make
    ``name`` from kept values and values ``made`` already."""
    found, stack = set(), [name]
    while stack:
        value = stack.pop()
        if not value or value in keep or value in made or value not in forward.producer:
            continue
        k = forward.producer[value]
        if k not in found:
            found.add(k)
            stack.extend(reads(forward.nodes[k]))
    return sorted(found)


def _replay(node, keep, renamed, taken):
    """A copy of forward ``node`` to replay: its kept outputs omitted ('');
    with ``taken`` (the names in use, joined plans), its other outputs
    renamed NAME/recomputed, made unique, and recorded in ``renamed``."""
    copy = renaming_reads(node, renamed, always=True)
    for i, name in enumerate(copy.output):
        if name in keep:
            copy.output[i] = ''
        elif name and taken is not None:
            renamed[name] = copy.output[i] = fresh_name(name, taken)
    if copy.name:
        copy.name += '/recomputed'
    return copy


def fresh_name(name, taken):
    """NAME/recomputed, numbered where ``taken`` (the names in use, which
    it joins) has it already: the name of a recomputed copy."""
    fresh, k = name + '/recomputed', 1
    while fresh in taken:
        k += 1
        fresh = '%s/recomputed_%d' % (name, k)
    taken.add(fresh)
    return fresh


def renaming_reads(node, renamed, always=False):
    """``node`` reading the fresh names of ``renamed`` values: a copy when
    it reads one (or ``always``), else the node itself."""
    if not always and not any(i in renamed for i in node.input):
        return node
    copy = NodeProto()
    copy.CopyFrom(node)
    for i, name in enumerate(copy.input):
        copy.input[i] = renamed.get(name, name)
    return copy

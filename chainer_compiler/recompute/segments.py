"""Segments of the forward order: what chen and gt choose between.

Cutting the forward nodes (in topological order) at positions
``0 < c1 < ... < cm < n`` makes segments; the lower sets of Kusumoto et al.
are then the prefixes ``nodes[:c]``.  On a branching graph the prefixes of
other topological orders (``topological_orders``) are other lower sets.
A segmentation keeps the boundary of every cut (the values made before it
and read at or after it) and every value of the last segment (it is still
live when backward starts); the other values of a segment are recomputed,
once, when backward reaches it.

``Costs`` holds, for every pair of cuts ``i < j``, what the segment
``nodes[i:j]`` adds: the bytes its boundary keeps (``kept``), the bytes
live while backward recomputes and differentiates it (``working``: its own
values plus the gradients of the boundary crossing ``j``), and the work of
recomputing it (``work``).
"""
import math
from dataclasses import dataclass, replace

import numpy

from ..onnx_graph import reads


def last_reads(forward):
    """{value: index of its last forward reader}, ``len(nodes)`` for
    values that must stay (pinned ones) or that nothing reads afterwards
    but that are kept anyway (graph outputs are pinned)."""
    n = len(forward.nodes)
    last = {}
    for k, node in enumerate(forward.nodes):
        for name in reads(node):
            last[name] = k
    for name in forward.pinned:
        last[name] = n
    return last


def topological_orders(forward):
    """Distinct topological orders of ``forward``'s nodes, as lists of node
    indices: its own; each node as early as its inputs allow (by its depth,
    the longest path from a graph input); as late as its readers allow (by
    its height, the longest path to a graph output).  Ties keep the
    forward's order.  Where a side branch (a residual projection) sits
    decides which prefixes leave it out, so each order offers other cuts."""
    n = len(forward.nodes)
    inputs = [{forward.producer[name] for name in reads(node) if name in forward.producer}
              for node in forward.nodes]
    depth, height = [0] * n, [0] * n
    for k in range(n):
        depth[k] = max((depth[i] + 1 for i in inputs[k]), default=0)
    for k in reversed(range(n)):
        for i in inputs[k]:
            height[i] = max(height[i], height[k] + 1)
    orders = [list(range(n)),
              sorted(range(n), key=lambda k: (depth[k], k)),
              sorted(range(n), key=lambda k: (-height[k], k))]
    return [order for i, order in enumerate(orders) if order not in orders[:i]]


def reordered(forward, order):
    """The replay.Forward ``forward`` with its nodes in ``order`` (node
    indices, a topological order)."""
    nodes = [forward.nodes[k] for k in order]
    producer = {name: k for k, node in enumerate(nodes) for name in node.output if name}
    return replace(forward, nodes=nodes, producer=producer)


def equal_cuts(n, segments=None):
    """The cuts splitting ``n`` forward nodes into ``segments`` runs of
    equal node counts (default: the square root of ``n``, Chen et al.)."""
    segments = min(segments or max(1, round(math.sqrt(n))), max(n, 1))
    return sorted({round(n * s / segments) for s in range(1, segments)} - {0, n})


def keep_for_cuts(forward, cuts):
    """The values a segmentation at ``cuts`` (increasing positions in
    (0, n)) keeps: each cut's boundary and the last segment's values."""
    last = last_reads(forward)
    keep = set()
    for cut in cuts:
        keep |= {v for v, k in forward.producer.items() if k < cut <= last.get(v, -1)}
    start = cuts[-1] if cuts else 0
    keep |= {v for v, k in forward.producer.items() if k >= start}
    return keep


@dataclass
class Costs:
    """(n+1) x (n+1) arrays indexed [i, j] for segments nodes[i:j] (see
    the module docstring)."""
    kept: numpy.ndarray
    working: numpy.ndarray
    work: numpy.ndarray


def segment_costs(forward, size, node_work):
    """The Costs of every segment: ``size(value)`` in bytes,
    ``node_work(index)`` the work of forward node ``index``."""
    n = len(forward.nodes)
    last = last_reads(forward)
    kept = numpy.zeros((n + 2, n + 2))
    made = numpy.zeros(n + 1)
    crossing = numpy.zeros(n + 2)
    for value, k in forward.producer.items():
        bytes_, end = size(value), max(last.get(value, k), k)
        made[k + 1] += bytes_
        # kept[i, j] += bytes_ for i <= k < j <= end: a rectangle, by corners.
        _rectangle(kept, 0, k + 1, k + 1, end + 1, bytes_)
        crossing[k + 1] += bytes_  # crossing cut j for k < j <= end
        crossing[end + 1] -= bytes_
    kept = kept.cumsum(0).cumsum(1)[:n + 1, :n + 1]
    crossing = crossing.cumsum()[:n + 1]
    made = made.cumsum()
    working = made[None, :] - made[:, None] + crossing[None, :]
    work = numpy.zeros((n + 2, n + 2))
    for k, node in enumerate(forward.nodes):
        # Recomputed in segment [i, j) when i <= k and some output dies before j.
        ends = [last.get(o, k) for o in node.output if o]
        first = max(min(ends, default=k), k) + 1
        if first <= n:
            _rectangle(work, 0, k + 1, first, n + 1, node_work(k))
    work = work.cumsum(0).cumsum(1)[:n + 1, :n + 1]
    return Costs(kept, working, work)


def _rectangle(table, i0, i1, j0, j1, amount):
    """Add ``amount`` to table[i0:i1, j0:j1] once both cumulative sums run."""
    table[i0, j0] += amount
    table[i1, j0] -= amount
    table[i0, j1] -= amount
    table[i1, j1] += amount

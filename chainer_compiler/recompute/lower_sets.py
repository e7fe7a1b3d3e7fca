"""Lower sets of the forward graph beyond the prefixes of a few orders.

Kusumoto et al. run their dynamic program over the *lower sets* of the
forward graph: the sets of nodes closed under inputs (a node's producers
are in the set whenever it is).  A strategy is a chain ``L1 < L2 < ... <
Lk = V`` of them; the prefixes of one topological order (segments.py) are
one such chain family, where every set is comparable with every other.
Where the graph branches, other lower sets exist: one branch finished and
another half done.  This module enumerates them, so that the same dynamic
program (gt.py) can cut a branch where it is cheapest to hold, whatever the
other branches do.

Their number grows exponentially with the graph's width, and a graph
branches wide at nodes no cut should care about: BatchNormalization's
running averages (three nodes hanging off every layer) would double it at
every layer.  So the enumeration is over the *heavy* nodes only: those on
the way to a differentiated output (the running averages are not) whose
outputs hold at least LIGHT_FRACTION of the largest forward value (shape
computations do not).  Each lower set ``S`` of them is completed with every
light node whose heavy ancestors are all in ``S``: light values are made
as early as they can be; backward reads none of the first kind, and the
second are too small to decide where a cut goes.  Each completed set is
closed under inputs.  Beyond as many lower sets as the graph has nodes
(within MIN_LOWER_SETS and MAX_LOWER_SETS) the enumeration gives up
(None), and gt keeps to the prefixes of its three orders.
"""
import logging

import numpy

from ..onnx_graph import reads
from .segments import Costs

#: The lower sets enumerated: as many as the forward graph has nodes, at
#: least MIN_LOWER_SETS and at most MAX_LOWER_SETS.  gt's dynamic program
#: over m sets costs up to m² x WORK_BUCKETS per limit tried, over one
#: order's prefixes n²: so the lower sets cost at most one order's more
#: (ResNet-50: 240 sets of 334 nodes); a small graph (128 sets: milliseconds
#: a limit) may branch wider; and costing them (set_costs) takes m² times
#: the values, a second at 1024.  Beyond, gt keeps to the orders' prefixes.
MIN_LOWER_SETS = 128
MAX_LOWER_SETS = 1024
#: A node whose outputs together hold less than this fraction of the largest
#: forward value is light: it never decides a cut (see the module docstring).
LIGHT_FRACTION = 1 / 256

_log = logging.getLogger(__name__)


def lower_sets(forward, size, differentiated):
    """The lower sets of ``forward``'s nodes (a replay.Forward) that the
    heavy nodes decide (see the module docstring), as frozensets of node
    indices in increasing size, the empty set first and every node last;
    ``size(value)`` is its bytes, ``differentiated`` the forward outputs
    backward starts from.  None, logged, when there are more than the node
    count, bounded by MIN_LOWER_SETS and MAX_LOWER_SETS (counted before
    they are costed)."""
    n = len(forward.nodes)
    most = min(max(MIN_LOWER_SETS, n), MAX_LOWER_SETS)
    largest = max((size(v) for v in forward.producer), default=0)
    heavy = [sum(size(o) for o in node.output if o) >= max(LIGHT_FRACTION * largest, 1)
             for node in forward.nodes]
    wanted = {forward.producer[v] for v in differentiated if v in forward.producer}
    for k in reversed(range(n)):
        if k in wanted:
            wanted.update(forward.producer[v] for v in reads(forward.nodes[k])
                          if v in forward.producer)
        else:
            heavy[k] = False
    # Bitmasks over node indices: the heavy nodes each node needs first
    # (its heavy ancestors), and with itself when it is heavy.
    needs = [0] * n
    for k, node in enumerate(forward.nodes):
        for name in reads(node):
            if name in forward.producer:
                i = forward.producer[name]
                needs[k] |= needs[i] | (heavy[i] << i)
    within = [needs[k] | (heavy[k] << k) for k in range(n)]
    found, frontier = {0}, [0]
    while frontier:
        grown = []
        for chosen in frontier:
            for k in (k for k in range(n) if heavy[k]):
                bit = 1 << k
                if not chosen & bit and needs[k] & ~chosen == 0:
                    bigger = chosen | bit
                    if bigger not in found:
                        if len(found) == most:
                            _log.info('gt: more than %d lower sets of the %d forward nodes: '
                                      'the prefixes of its topological orders only', most, n)
                            return None
                        found.add(bigger)
                        grown.append(bigger)
        frontier = grown
    completed = {frozenset(k for k in range(n) if within[k] & ~chosen == 0) for chosen in found}
    completed |= {frozenset(), frozenset(range(n))}
    return sorted(completed, key=lambda s: (len(s), sorted(s)))


def keep_for_sets(forward, sets):
    """The values a chain of lower ``sets`` (each within the next, every
    node outside the last) keeps: each set's boundary (the values it makes
    that a node outside it reads, or that are pinned) and every value made
    after the last set."""
    readers = _readers(forward)
    last = sets[-1] if sets else frozenset()
    keep = {v for v, k in forward.producer.items() if k not in last}
    for chosen in sets:
        keep |= {v for v, k in forward.producer.items()
                 if k in chosen and _crosses(v, chosen, readers, forward.pinned)}
    return keep


def set_costs(forward, sets, size, node_work):
    """The segments.Costs of every pair of ``sets`` (lower_sets' list):
    [a, b] is the segment ``sets[b] - sets[a]`` where ``sets[a]`` is a
    proper subset of ``sets[b]``; other pairs get infinite working bytes,
    so the dynamic program never takes them.  ``size(value)``: bytes;
    ``node_work(index)``: the work of a forward node."""
    n, values = len(forward.nodes), list(forward.producer)
    member = numpy.zeros((len(sets), n))
    for a, chosen in enumerate(sets):
        member[a, list(chosen)] = 1
    producer = numpy.array([forward.producer[v] for v in values], dtype=numpy.int64)
    bytes_ = numpy.array([size(v) for v in values], dtype=numpy.float64)
    readers = _readers(forward)
    # Arrays are sets by values or by nodes (at most MAX_LOWER_SETS rows).
    inside = numpy.ones((len(sets), len(values)), dtype=bool)  # every reader in sets[a]
    for column, v in enumerate(values):
        if v in forward.pinned:
            inside[:, column] = False
        elif readers.get(v):
            inside[:, column] = member[:, sorted(readers[v])].all(1)
    made = member[:, producer]  # made[a, v]: sets[a] makes v
    crossing = made * ~inside  # the boundary of sets[a]
    # kept[a, b]: bytes of the boundary of sets[b] made outside sets[a].
    kept = (crossing @ bytes_)[None, :] - (made * bytes_) @ crossing.T
    working = (made @ bytes_)[None, :] - (made @ bytes_)[:, None] + (crossing @ bytes_)[None, :]
    # A node is replayed in a segment ending at sets[b] when one of its
    # outputs dies inside sets[b] (made there and not on its boundary).
    dying = numpy.zeros((n, len(sets)))
    numpy.add.at(dying, producer, (made - crossing).T)
    replayed = member * (dying.T > 0)
    work_of = numpy.array([node_work(k) for k in range(n)], dtype=numpy.float64)
    work = (replayed @ work_of)[None, :] - (member * work_of) @ replayed.T
    # sets[a] is a proper subset of sets[b]: no node of a outside b, and a != b.
    subset = (member @ (1 - member).T == 0) & ~numpy.eye(len(sets), dtype=bool)
    return Costs(kept=numpy.where(subset, kept, 0.0),
                 working=numpy.where(subset, working, numpy.inf),
                 work=numpy.where(subset, work, 0.0))


def _readers(forward):
    """{value: set of the forward nodes reading it}."""
    readers = {}
    for k, node in enumerate(forward.nodes):
        for name in reads(node):
            readers.setdefault(name, set()).add(k)
    return readers


def _crosses(value, chosen, readers, pinned):
    """Whether ``value`` (made in ``chosen``) is on its boundary."""
    return value in pinned or not readers.get(value, set()) <= chosen

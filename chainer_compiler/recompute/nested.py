"""Nested checkpointing: explicit orders (ordered.py) that cut the forward
order into segments, each segment into sub-segments when backward reaches
it, and so on, so that a value is recomputed once per level below the top
(the recursive scheme of Chen et al. 2016; Griewank's binomial
checkpointing counts the same trade of memory for recomputation).

A cut at position ``c`` holds its boundary: the values made before ``c`` and
read at or after it.  The forward program retains only the boundaries of
the outermost cuts.  To reverse a segment ``a..b``, backward replays it
from the boundary of ``a`` up to its last sub-cut, dropping each value
after its last read there unless a sub-cut's boundary holds it, then
reverses the sub-segments from the last one; a segment with no further
level replays what it lacks and runs its nodes' gradients.  gt takes these
orders when no plan with at most one extra forward fits a memory_budget.
"""
import math

from ..onnx_graph import implicit_inputs, reads
from .ordered import ordered_plan
from .segments import equal_cuts, last_reads, reordered

#: The most levels of cuts tried.
MAX_LEVELS = 4


def nested_plans(problem):
    """[replay.Plan] of nested orders for ``problem`` (a Problem): for 2 to
    MAX_LEVELS levels, the same number of segments at every level, around
    the level-th root of the node count."""
    n = len(problem.forward.nodes)
    splits = set()
    for levels in range(2, MAX_LEVELS + 1):
        root = n ** (1 / levels)
        for k in {math.floor(root), math.ceil(root), math.ceil(root) + 1}:
            if k >= 2:
                splits.add((k,) * levels)
    return [ordered_plan(problem.forward, problem.backward,
                         nested_order(problem.forward, problem.backward, s), problem.joined)
            for s in sorted(splits)]


def nested_order(forward, backward, splits):
    """The explicit order cutting the replay.Forward ``forward`` into
    ``splits[0]`` segments, each of those into ``splits[1]`` when backward
    reaches it, and so on (see the module docstring); ``backward`` is the
    autodiff.BackwardGraph whose gradients the order runs.  The segments
    are those of the reverse of backward's rule order, a topological order
    in which reversing a segment runs its gradients as backward does."""
    order = list(reversed(backward.order)) or list(range(len(forward.nodes)))
    position = {k: p for p, k in enumerate(order)}
    graded = {position[k] for k in backward.origins if k is not None}
    steps = _Nesting(reordered(forward, order), backward, graded).order(list(splits))
    return [(kind, target if kind == 'forget' else order[target]) for kind, target in steps]


class _Nesting:
    def __init__(self, forward, backward, graded):
        self.forward = forward
        self.n = len(forward.nodes)
        self.last = last_reads(forward)
        self.graded = graded
        # Sub-graphs of backward read these by name: never dropped.
        self.fixed = set(forward.pinned) | {name for node in backward.nodes
                                            for name in implicit_inputs(node)}
        self.steps = []
        self.held = set()

    def order(self, splits):
        cuts = equal_cuts(self.n, splits[0])
        keep = set().union(*(self._boundary(c) for c in cuts))
        self.held = {v for v in self.forward.producer if v in keep or v in self.fixed}
        self.steps = [('forget', v) for v in self.forward.producer if v not in self.held]
        bounds = [0] + cuts + [self.n]
        for a, b in reversed(list(zip(bounds, bounds[1:]))):
            self._reverse(a, b, splits[1:])
        return self.steps

    def _boundary(self, c):
        """The values made before position ``c`` and read at or after it."""
        return {v for v, k in self.forward.producer.items() if k < c <= self.last.get(v, -1)}

    def _reverse(self, a, b, splits):
        """Steps that run the gradients of nodes a..b-1, the boundary of
        ``a`` being held."""
        if not splits or b - a <= splits[0]:
            for k in range(a, b):
                self._replay(k)
            self.steps += [('backward', k) for k in reversed(range(a, b)) if k in self.graded]
            return
        cuts = [a + c for c in equal_cuts(b - a, splits[0])]
        keep = set().union(*(self._boundary(c) for c in cuts))
        first_pass = range(a, cuts[-1])
        last_read = {}
        for k in first_pass:
            for name in reads(self.forward.nodes[k]):
                last_read[name] = k
        made = []
        for k in first_pass:
            made += self._replay(k)
            for v in [v for v in made if last_read.get(v, -1) <= k and v not in keep]:
                self._forget(v)
                made.remove(v)
        bounds = [a] + cuts + [b]
        for c, d in reversed(list(zip(bounds, bounds[1:]))):
            self._reverse(c, d, splits[1:])

    def _replay(self, k):
        """Replay node ``k`` when it makes something not held; returns what
        it made."""
        made = [o for o in self.forward.nodes[k].output
                if o and o not in self.held and o not in self.fixed]
        if made:
            self.steps.append(('forward', k))
            self.held.update(made)
        return made

    def _forget(self, value):
        self.steps.append(('forget', value))
        self.held.discard(value)

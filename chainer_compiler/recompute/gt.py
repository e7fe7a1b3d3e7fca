"""The 'gt' policy: Kusumoto et al., "A Graph Theoretic Framework of
Recomputation Algorithms for Memory-Efficient Backpropagation" (NeurIPS
2019), over families of lower sets (sets of forward nodes closed under
inputs): the prefixes of a topological order (the forward's own, and those
putting each node as early or as late as it can go:
segments.topological_orders), and, where the graph branches and there are
not too many, every lower set the heavy nodes decide (lower_sets.py): one
branch finished while another is half done or not started, which no
prefix of those orders is.  Every family's plans are candidates, so the
lower sets never make gt's choice worse than the prefixes alone.

For each family, a dynamic program over its sets finds, for a limit on its
segment model's memory (segments.Costs), the segmentation of least
recomputation work: state (cut j, work so far, in buckets) -> least bytes
kept so far, a chain of cuts being a chain of sets, each within the next;
a segment i..j (the nodes of set j outside set i) is allowed when the
bytes kept before it plus its working bytes, and the bytes kept after it,
stay within the limit.
Every value is recomputed at most once: at most one extra forward
computation.

The segment model is coarse, so the choice is made with the memory model
proper: the program runs for a sweep of limits, from the least feasible
up to keeping everything, and each resulting plan's peak is predicted.
Without ``memory_budget`` the plan of least predicted peak wins (then least
work); with one, the plan of least work whose predicted peak fits, after
the limits between the last plan that fits and the first that does not are
bisected (the sweep's steps are coarse next to a budget).  When none of
those fits the budget, gt recomputes more than once: the nested orders of
nested.py (2 to 4 levels of cuts), the one of least work that fits.
"""
import functools
import logging

import numpy

from . import lower_sets
from .nested import nested_plans
from .segments import equal_cuts, keep_for_cuts, reordered, segment_costs, topological_orders

#: Buckets of recomputation work in the dynamic program.
WORK_BUCKETS = 128
#: Limits tried between the least feasible and keeping everything.
LIMITS = 12
#: Bisections of the limits around a memory_budget.
BUDGET_BISECTIONS = 8
#: At most this many plans predicted while refining the least peak (about
#: 35 ms each on ResNet-50 at batch 64).
REFINE_PLANS = 200

_log = logging.getLogger(__name__)


class BudgetError(ValueError):
    """memory_budget is below the smallest peak the policy finds."""


def gt(problem):
    """Kusumoto et al.'s dynamic program over the prefix lower sets of up to
    three topological orders (the forward's, and each node as early or as
    late as it can go) and, where the graph branches, over its general
    lower sets (lower_sets.py), the best of both: without
    `memory_budget`, the least peak with at most one extra forward
    computation; with one, the least recomputation within it, recomputing
    values more than once (nested.py) where one extra forward does not fit.
    None (change nothing) when retaining everything backward reads is best."""
    forward = problem.forward
    budget = problem.budget()
    # Without a budget, plans compete on the process's peak (the parameters
    # held: Problem.process_peak); a budget bounds Problem.peak.
    measure = problem.process_peak if budget is None else problem.peak
    # {frozenset of values kept, or None: no recompute: (predicted peak, work)}.
    # Retaining what backward reads is a candidate too, so gt never predicts
    # a higher peak than no policy.
    candidates = {None: (measure(problem.unchanged), 0)}
    # The √n equal segments (chen's cuts) are prefixes too: the coarse
    # segment model may miss them, and with them gt never ends above chen.
    _add(problem, measure, candidates, functools.partial(keep_for_cuts, forward),
         equal_cuts(len(forward.nodes)))
    for keep_of, costs in _families(problem):
        limits = _limits(costs)
        peaks = [_add(problem, measure, candidates, keep_of, _cheapest_cuts(costs, limit))
                 for limit in limits]
        if budget is not None:
            _bisect_budget(problem, keep_of, costs, candidates, budget,
                           list(zip(limits, peaks)))
    if budget is None:
        best = _refine(problem, candidates, min(candidates, key=lambda c: candidates[c]))
        _log.debug('gt: %d plans predicted; chosen: peak %d bytes, work %g',
                   len(candidates), *candidates[best])
        return None if best is None else set(best)
    fitting = [c for c, (peak, _) in candidates.items() if peak <= budget]
    if fitting:
        best = min(fitting, key=lambda c: candidates[c][::-1])
        _log.debug('gt: %d plans predicted, %d within the budget of %d bytes; chosen: peak '
                   '%d bytes, work %g', len(candidates), len(fitting), budget, *candidates[best])
        return None if best is None else set(best)
    # Nothing with one extra forward fits: recompute more, level by level.
    _log.info('gt: no plan recomputing once fits memory_budget %d bytes: trying nested '
              'checkpoints', budget)
    nested = [(problem.peak(plan), problem.work(plan), plan) for plan in nested_plans(problem)]
    fitting = [(work, plan) for peak, work, plan in nested if peak <= budget]
    if not fitting:
        smallest = min([peak for peak, _ in candidates.values()]
                       + [peak for peak, _, _ in nested])
        raise BudgetError(
            "memory_budget %d bytes is below the smallest peak computation_order 'gt' "
            'reaches for this model: %d bytes' % (budget, smallest))
    return min(fitting, key=lambda f: f[0])[1]


def _families(problem):
    """[(keep_of, Costs)]: for each family of lower sets the dynamic program
    runs over, the values a chain of its sets keeps (``keep_of(cuts)``,
    cuts being increasing positions in the family) and its Costs: the
    prefixes of each of topological_orders, then the lower sets of
    lower_sets.py when there are not too many."""
    forward = problem.forward
    families = []
    for order in topological_orders(forward):
        view = reordered(forward, order)
        families.append((functools.partial(keep_for_cuts, view),
                         segment_costs(view, problem.size,
                                       lambda k, order=order: problem.node_work(order[k]))))
    sets = lower_sets.lower_sets(forward, problem.size,
                                 [out for _, out in problem.backward.grad_inputs])
    if sets is None:
        return families
    _log.debug('gt: %d lower sets of the %d forward nodes', len(sets), len(forward.nodes))

    def keep_of(cuts):
        return lower_sets.keep_for_sets(forward, [sets[c] for c in cuts])
    families.append((keep_of, lower_sets.set_costs(forward, sets, problem.size,
                                                   problem.node_work)))
    return families


def _add(problem, measure, candidates, keep_of, cuts):
    """Add the plan of ``cuts`` (None: no chain fits) to ``candidates``,
    keeping ``keep_of(cuts)`` (see _families); returns its predicted peak
    by ``measure`` (a Problem's peak or process_peak; None for None)."""
    if cuts is None:
        return None
    keep = frozenset(keep_of(list(cuts)))
    if keep not in candidates:
        chosen = problem.plan(keep)
        candidates[keep] = (measure(chosen), problem.work(chosen))
    return candidates[keep][0]


def _refine(problem, candidates, best):
    """The best of ``candidates`` ({keep or None: (process peak, work)})
    after changing one value at a time where ``best`` peaks: a value kept
    and live there is replayed instead, a value replayed there is kept.
    The first change that lowers (peak, work) is taken, from the largest
    value down, until none does or REFINE_PLANS plans were predicted.  The
    dynamic program's segment model sees neither what backward makes
    beside a segment (gradients, each update's place) nor the replays of
    a segment living until their own reads, so its best plan can keep a
    value no plan needs where the step peaks (ResNet-50 at batch 64: the
    stem's outputs, through stage 4's gradients).  Every plan still
    recomputes each value at most once."""
    tried = 0
    while True:
        keep = set(problem.forward.producer) if best is None else best
        chosen = problem.plan(keep)
        live = problem.live_at_peak(chosen, held=True)[1]
        values = {chosen.copies.get(name, name) for name in live} & set(problem.forward.producer)
        values -= problem.forward.pinned
        for value in sorted(values, key=lambda v: (-problem.size(v), v)):
            trial = frozenset(keep ^ {value})
            if trial not in candidates:
                if tried == REFINE_PLANS:
                    return best
                tried += 1
                plan = problem.plan(trial)
                candidates[trial] = (problem.process_peak(plan), problem.work(plan))
            if candidates[trial] < candidates[best]:
                best = trial
                break
        else:
            return best


def _bisect_budget(problem, keep_of, costs, candidates, budget, swept):
    """Add the plans of the limits bisected between the highest swept limit
    whose plan fits ``budget`` and the next one up (``swept``: ascending
    (limit, predicted peak or None); ``keep_of`` and ``costs``: the family
    swept, as _families gives them): a plan that fits with less work lies
    there when the sweep steps over the budget."""
    fitting = [limit for limit, peak in swept if peak is not None and peak <= budget]
    above = [limit for limit, _ in swept if fitting and limit > fitting[-1]]
    if not above:
        return
    low, high = fitting[-1], above[0]
    for _ in range(BUDGET_BISECTIONS):
        middle = (low + high) / 2
        peak = _add(problem, problem.peak, candidates, keep_of, _cheapest_cuts(costs, middle))
        if peak is not None and peak <= budget:
            low = middle
        else:
            high = middle


def _limits(costs):
    """The limits to try: geometric from the least feasible one to the
    working bytes of one segment of everything (no recompute)."""
    high = float(costs.working[0, -1])
    low, top = 0.0, high
    for _ in range(24):  # bisect the least feasible limit (to 1e-7 of the highest)
        middle = (low + top) / 2
        if _cheapest_cuts(costs, middle, buckets=1) is None:
            low = middle
        else:
            top = middle
    if top <= 0:
        return [high]
    return list(numpy.geomspace(top, max(high, top), LIMITS))


def _cheapest_cuts(costs, limit, buckets=WORK_BUCKETS):
    """The cuts (a tuple of positions) of least recomputation work whose
    segments fit ``limit``, or None when none fit; ``buckets=1`` ignores
    work (a feasibility test).  Work counts in steps of the most any
    segmentation replays over ``buckets - 1``, each segment's rounded up;
    the last bucket takes every larger total, so that many cheap segments
    (the least peaks need them) never overflow the count and go unfound."""
    n = costs.kept.shape[0] - 1
    last = buckets - 1
    width = max(float(costs.work.max()) / max(last, 1), 1.0)
    best = numpy.full((n + 1, buckets), numpy.inf)  # least bytes kept, by cut and work
    best[0, 0] = 0.0
    from_cut = numpy.full((n + 1, buckets), -1, dtype=numpy.int64)
    from_bucket = numpy.zeros((n + 1, buckets), dtype=numpy.int64)
    columns = numpy.arange(buckets)
    for j in range(1, n + 1):
        # Only the segments whose working bytes alone fit may end here (a
        # family of lower sets gives the others, not segments, infinite ones).
        rows = numpy.flatnonzero(costs.working[:j, j] <= limit)
        if not len(rows):
            continue
        shift = _shifts(costs, rows, j, n, width, buckets)
        kept = costs.kept[rows, j] if j < n else numpy.zeros(len(rows))
        before = best[rows]
        fits = (before + costs.working[rows, j, None] <= limit) & \
            (before + kept[:, None] <= limit)
        after = numpy.where(fits, before + kept[:, None], numpy.inf)
        # Segment i..j moves bucket b to b + shift[i], or to the last bucket.
        source = numpy.clip(columns[None, :] - shift[:, None], 0, None)
        gathered = numpy.where(columns[None, :] >= shift[:, None],
                               numpy.take_along_axis(after, source, 1), numpy.inf)
        overflow = numpy.where(columns[None, :] >= last - shift[:, None], after, numpy.inf)
        source[:, last] = overflow.argmin(1)
        gathered[:, last] = overflow.min(1)
        pick = gathered.argmin(0)
        best[j] = gathered[pick, columns]
        from_cut[j] = rows[pick]
        from_bucket[j] = source[pick, columns]
    finite = numpy.flatnonzero(numpy.isfinite(best[n]))
    if not len(finite):
        return None
    cuts, j, bucket = [], n, int(finite[0])
    while j > 0:
        j, bucket = int(from_cut[j, bucket]), int(from_bucket[j, bucket])
        if j > 0:
            cuts.append(j)
    return tuple(reversed(cuts))


def _shifts(costs, rows, j, n, width, buckets):
    """Work buckets each segment i..j adds, for i in ``rows`` (the last
    segment, kept whole, adds none; buckets=1 counts no work)."""
    if j == n or buckets == 1:
        return numpy.zeros(len(rows), dtype=numpy.int64)
    return numpy.ceil(costs.work[rows, j] / width).astype(numpy.int64)

"""Computation-order (recompute) policies: trade compute for memory.

The forward program retains, by default, every value the backward program
reads.  A policy chooses fewer values to keep; the backward program then
recomputes the others by replaying forward nodes (replay.py), and the
memory model (memory_model.py) predicts the peak of the result.

* ``problem.py``: what a policy works on (graphs, options, sizes, costs);
* ``replay.py``: the replay machinery every policy shares;
* ``segments.py``: segmentations of the forward order (chen, gt);
* ``ordered.py``: explicit orders ('custom' with ``order``), which may
  recompute a value more than once;
* ``nested.py``: nested checkpointing orders (gt under a tight budget);
* ``policies.py`` and ``gt.py``: the policies.
"""
import logging
import time

from .gt import BudgetError, gt
from .ordered import check_order, order_of
from .policies import chen, custom, dummy, retain_all
from .problem import Problem
from .replay import Plan
from .replay import apply as apply_plan

#: Recompute policies by ``computation_order`` name (CompilerOptions); the
#: training pipeline's ``apply_recompute`` pass runs the chosen one.
POLICIES = {None: retain_all, 'chen': chen, 'gt': gt, 'custom': custom, 'dummy': dummy}

#: Options that apply to one policy only: option -> policy.
POLICY_OPTIONS = {'memory_budget': 'gt', 'chen_segments': 'chen', 'retain': 'custom',
                  'order': 'custom'}

_log = logging.getLogger(__name__)


def policy(name):
    """The policy registered in POLICIES as ``name``: a function of the
    Problem returning the values to keep (None: change nothing), or a
    replay.Plan.  An unknown name is a ValueError listing the choices."""
    if name not in POLICIES:
        raise ValueError('unknown computation_order %r: choose one of %s'
                         % (name, ', '.join(repr(p) for p in POLICIES)))
    return POLICIES[name]


def check_options(options):
    """Refuse CompilerOptions whose policy options do not fit: an unknown
    policy, an option of another policy, a value of the wrong kind, or
    'custom' without one of `retain` and `order` (ValueError naming them)."""
    name = options.computation_order
    policy(name)
    for option, owner in POLICY_OPTIONS.items():
        if getattr(options, option) is not None and name != owner:
            raise ValueError('compiler option %r applies to computation_order %r only, not to %r'
                             % (option, owner, name))
    budget = options.memory_budget
    if budget is not None and not (
            (isinstance(budget, int) and not isinstance(budget, bool) and budget > 0)
            or (isinstance(budget, float) and 0 < budget <= 1)):
        raise ValueError('memory_budget must be a positive int (bytes) or a float in (0, 1] '
                         '(a fraction of the peak without recompute), not %r' % (budget,))
    segments = options.chen_segments
    if segments is not None and (isinstance(segments, bool) or not isinstance(segments, int)
                                 or segments < 1):
        raise ValueError('chen_segments must be a positive int, not %r' % (segments,))
    retain, order = options.retain, options.order
    if name != 'custom':
        return
    if (retain is None) == (order is None):
        raise ValueError("computation_order 'custom' needs one of the compiler options 'retain' "
                         "(a list of forward value names) and 'order' (a list of steps)%s"
                         % (', not both' if retain is not None else ''))
    if order is not None:
        check_order(order)
    elif isinstance(retain, str) or not all(isinstance(r, str) for r in retain):
        raise ValueError("compiler option 'retain' is a list of forward value names, not %r"
                         % (retain,))


def apply(forward_graph, backward, options, opsets, joined=False):
    """Run ``options.computation_order`` on the autodiff.BackwardGraph
    ``backward`` of ``forward_graph`` (``opsets``: the model's), rewriting
    it in place.  ``joined``: backward is to follow forward in one graph
    (the training step; replays then write fresh names).  Returns the order
    run, as the steps compiler option 'order' takes (ordered.order_of)."""
    if options.computation_order is None:
        return order_of(backward)
    # Planning takes seconds on a large model (gt: 12 s on ResNet-50): say so.
    _log.info('planning computation_order %r over %d forward nodes',
              options.computation_order, len(forward_graph.node))
    start = time.perf_counter()
    problem = Problem(forward_graph, backward, options, opsets, joined)
    chosen = policy(options.computation_order)(problem)
    _log.info('planned computation_order %r in %.1f s%s', options.computation_order,
              time.perf_counter() - start, ' (no change)' if chosen is None else '')
    if chosen is None:
        return order_of(backward)
    if not isinstance(chosen, Plan):
        chosen = problem.plan(chosen)
    steps = order_of(backward, problem.forward, chosen)
    apply_plan(backward, chosen)
    return steps


__all__ = ['BudgetError', 'POLICIES', 'POLICY_OPTIONS', 'Problem', 'apply', 'check_options',
           'order_of', 'policy']

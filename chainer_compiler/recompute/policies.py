"""The recompute policies other than 'gt' (gt.py): each a function of the
Problem returning the forward values to keep, None to change nothing, or
(an explicit order) the replay.Plan itself."""
from .ordered import ordered_plan
from .segments import equal_cuts, keep_for_cuts


def retain_all(problem):
    """Retain every value the backward program reads (the default): the
    most memory, no recomputation."""
    return None


def chen(problem):
    """Chen et al. 2016: cut the forward order into `chen_segments` segments
    of equal node counts (default: the square root of the node count), keep
    their boundaries and recompute inside each segment during backward; one
    extra forward computation at most."""
    return keep_for_cuts(problem.forward, equal_cuts(len(problem.forward.nodes),
                                                     problem.options.chen_segments))


def custom(problem):
    """Keep the forward values named by `retain` and recompute every other
    value backward reads; or, with `order`, run that explicit order (a
    replay.Plan; ordered.py)."""
    if problem.options.order is not None:
        return ordered_plan(problem.forward, problem.backward, problem.options.order,
                            problem.joined)
    names = list(problem.options.retain)
    unknown = [n for n in names if n not in problem.forward.producer
               and n not in problem.forward.pinned]
    if unknown:
        known = ', '.join(sorted(problem.forward.producer)[:20])
        raise ValueError("computation_order 'custom': retain names no forward value: %s "
                         '(values include %s)' % (', '.join(unknown), known))
    return set(names)


def dummy(problem):
    """Recompute everything that may be replayed (for testing: the
    strongest stress of the replay machinery); keeps only what must stay."""
    return set()

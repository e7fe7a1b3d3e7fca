"""Explicit computation orders: the 'custom' policy's ``order`` option.

An order is a schedule in the original chainer-compiler's terms, a list of
steps:

* ``('forget', value)``: at the head of the order, the forward program
  does not retain ``value`` for backward; later, the backward program lets
  its copy of ``value`` go (freed after its last read before this step);
* ``('forward', node)``: the backward program replays forward ``node`` (its
  index in the forward graph, or its name) from the values held at this
  step; its outputs are held from then on;
* ``('backward', node)``: the backward program runs the gradient of forward
  ``node``.

The forward program computes every node once, in its order: the leading
'forget' steps are its, every later step is the backward program's.  The
'backward' steps name every
forward node that has a gradient, in the order the backward graph runs them
(the reverse of the forward order on a chain; at a fork, the branch that
shrinks the gradients first: autodiff.generate._rule_order; a weight's
gradient may run in the step of the next gradient reading its input:
_defer_weight_gradients there).  What a step reads must be held there.
A value may be recomputed again after it is forgotten, which expresses the
multi-level schedules that one pass of replays (replay.plan) cannot.
"""

from ..onnx_graph import implicit_inputs
from .replay import finished_plan, fresh_name, renaming_reads

KINDS = ('forget', 'forward', 'backward')
#: At most this many of the missing 'backward' steps are listed in the error.
MISSING_LISTED = 20


def check_order(order):
    """Refuse an ``order`` that is not a list of (kind, target) steps, kind
    one of KINDS, target a value name (forget) or a node index or name
    (ValueError naming the first bad step)."""
    if isinstance(order, (str, bytes)) or not hasattr(order, '__iter__'):
        raise ValueError("compiler option 'order' is a list of (kind, target) steps, not %r"
                         % (order,))
    for i, step in enumerate(order):
        if not (isinstance(step, (tuple, list)) and len(step) == 2 and step[0] in KINDS):
            raise ValueError("compiler option 'order': step %d is %r, not a (kind, target) pair "
                             'with kind one of %s' % (i, step, ', '.join(map(repr, KINDS))))
        kind, target = step
        ok = (isinstance(target, str) if kind == 'forget'
              else isinstance(target, (int, str)) and not isinstance(target, bool))
        if not ok:
            raise ValueError("compiler option 'order': step %d (%r) names %r: a %s" % (
                i, kind, target, 'value name' if kind == 'forget' else 'node index or name'))


def ordered_plan(forward, backward, order, joined=False):
    """The replay.Plan running ``order`` (see the module docstring) on the
    autodiff.BackwardGraph ``backward`` of the replay.Forward ``forward``;
    ``joined`` as for replay.plan.  A step that cannot run is a ValueError
    naming it and why."""
    return _Schedule(forward, backward, joined).run(list(order))


def order_of(backward, forward=None, chosen=None):
    """The explicit order (see the module docstring) that runs Plan
    ``chosen``, made for the autodiff.BackwardGraph ``backward`` of the
    replay.Forward ``forward``, before replay.apply changes it (without
    them: retaining everything): forget every value it recomputes, then its
    replays and gradients in its order.
    A policy's plan replays right before a value's first read, which may
    fall between two nodes of one gradient; here that replay comes before
    the gradient.  No later 'forget' is needed: the VM frees a copy after
    its last read either way.  This is how a user sees a policy's order, to
    edit it and pass it back as compiler option 'order'."""
    if chosen is None:
        return [('backward', k) for k, _ in _gradient_runs(backward)[0]]
    retained = set(chosen.retained)
    recomputed = {name for k in chosen.replayed for name in forward.nodes[k].output
                  if name and name not in forward.pinned and name not in retained}
    steps = [('forget', name) for node in forward.nodes for name in node.output
             if name in recomputed]
    replays = iter(chosen.replayed)
    origin_of = {tuple(node.output): origin for node, origin in zip(backward.nodes,
                                                                     backward.origins)}
    pending, current, run_step = [], None, 0  # run_step: where the running gradient's step is
    for node in chosen.nodes:
        key = tuple(node.output)
        if key not in origin_of:  # a replay
            pending.append(('forward', next(replays)))
            continue
        origin = origin_of[key]
        if origin is None:  # the final renaming runs after every step
            continue
        if origin == current:  # replays inside a gradient go before it
            steps[run_step:run_step] = pending
            run_step += len(pending)
        else:
            steps += pending
            run_step, current = len(steps), origin
            steps.append(('backward', origin))
        pending = []
    return steps + pending


class _Schedule:
    """Builds the backward nodes of an order, step by step."""

    def __init__(self, forward, backward, joined):
        self.forward = forward
        self.backward = backward
        self.joined = joined
        self.node_index = {n.name: k for k, n in enumerate(forward.nodes) if n.name}
        self.runs, self.renaming = _gradient_runs(backward)
        self.taken = {o for n in forward.nodes + list(backward.nodes)
                      for o in list(n.output) + list(n.input)}
        self.held = {}  # forward value -> the backward name holding it now
        self.defined = set()  # the names a replay may not write again
        self.nodes, self.replayed, self.copies = [], [], {}

    def run(self, order):
        # The leading forgets are the forward program's.
        first_backward = next((i for i, (kind, _) in enumerate(order) if kind != 'forget'),
                              len(order))
        forgotten = {self._value(i, order[i]) for i in range(first_backward)}
        # What backward reads of them (replays included) is what the forward
        # program will retain.
        self.held = {name: name for name in self.forward.producer if name not in forgotten}
        # Where nothing of forward is an input yet, a replay may write the forward name.
        self.defined = set(self.taken) if self.joined else set(self.held)
        runs = iter(self.runs)
        run = next(runs, None)
        for i in range(first_backward, len(order)):
            kind, target = step = order[i]
            if kind == 'forget':
                value = self._value(i, step)
                if value not in self.held:
                    raise self._error(i, step, '%r is not held here (not retained, or forgotten '
                                               'and not recomputed since)' % value)
                del self.held[value]
            elif kind == 'forward':
                self._replay(i, step, self._node(i, step))
            else:
                k = self._node(i, step)
                if run is None or run[0] != k:
                    raise self._error(i, step, 'the backward graph runs %s next' % (
                        'no more gradients' if run is None else
                        "the gradient of %s: ('backward', %d)" % (self._describe(run[0]),
                                                                  run[0])))
                self.nodes += [self._reading_held(i, step, node) for node in run[1]]
                run = next(runs, None)
        if run is not None:
            missing = [run[0]] + [later for later, _ in runs]
            listed = ', '.join(map(str, missing[:MISSING_LISTED]))
            raise self._error(len(order), None, "the order ends before ('backward', %d), the "
                                                'gradient of %s; the backward steps missing '
                                                'are those of nodes %s%s'
                              % (run[0], self._describe(run[0]), listed,
                                 ', ...' if len(missing) > MISSING_LISTED else ''))
        self.nodes += [self._reading_held(len(order), None, node) for node in self.renaming]
        return finished_plan(self.forward, self.backward, self.nodes, self.replayed, self.copies)

    def _replay(self, i, step, k):
        original = self.forward.nodes[k]
        outputs = [o for o in original.output if o and o not in self.forward.pinned]
        if not outputs:
            raise self._error(i, step, '%s makes nothing to recompute (its outputs are always '
                                       'kept: graph outputs, random draws, sub-programs)'
                              % self._describe(k))
        copy = self._reading_held(i, step, original, always=True)
        for j, name in enumerate(copy.output):
            if not name or name in self.forward.pinned:
                copy.output[j] = ''  # kept by the forward program; never made twice
                continue
            fresh = name if name not in self.defined else fresh_name(name, self.taken)
            self.defined.add(fresh)
            copy.output[j] = self.held[name] = fresh
            if fresh != name:
                self.copies[fresh] = name
        if copy.name:
            copy.name += '/recomputed'
        self.nodes.append(copy)
        self.replayed.append(k)

    def _reading_held(self, i, step, node, always=False):
        """``node`` reading the names that hold the forward values it reads
        (a copy when any differs, or ``always``)."""
        for name in implicit_inputs(node):
            if self._holding(name) != name:
                raise self._error(i, step, '%s reads %r inside a sub-graph, where it cannot be '
                                           'renamed: do not forget it' % (self._reader(step),
                                                                           name))
        renamed = {}
        for name in node.input:
            held = self._holding(name)
            if held is None:
                raise self._error(i, step, '%s reads %r, which is not held here: recompute it '
                                           "first, with ('forward', %d)"
                                  % (self._reader(step), name,
                                     self.forward.producer[name]))
            if held != name:
                renamed[name] = held
        return renaming_reads(node, renamed, always)

    def _holding(self, name):
        """The name holding forward value ``name`` now (names of backward
        values and always-kept ones hold themselves); None: not held."""
        if not name or name not in self.forward.producer or name in self.forward.pinned:
            return name
        return self.held.get(name)

    def _value(self, i, step):
        name = step[1]
        if name not in self.forward.producer and name not in self.forward.pinned:
            raise self._error(i, step, 'no forward value is named %r' % name)
        if name in self.forward.pinned:
            raise self._error(i, step, '%r is always kept (an input, a parameter, a graph output, '
                                       'a random draw or a sub-program\'s output)' % name)
        return name

    def _node(self, i, step):
        target = step[1]
        if isinstance(target, str):
            if target not in self.node_index:
                raise self._error(i, step, 'no forward node is named %r' % target)
            return self.node_index[target]
        if not 0 <= target < len(self.forward.nodes):
            raise self._error(i, step, 'the forward graph has nodes 0 to %d'
                              % (len(self.forward.nodes) - 1))
        return target

    def _describe(self, k):
        node = self.forward.nodes[k]
        return 'node %d (%s%s)' % (k, node.op_type, ', %r' % node.name if node.name else '')

    def _reader(self, step):
        if step is None:
            return "the gradients' final renaming"
        if step[0] == 'forward':
            return self._describe(self._node(0, step))
        return 'the gradient of %s' % self._describe(self._node(0, step))

    @staticmethod
    def _error(i, step, why):
        where = 'step %d %r' % (i, tuple(step)) if step is not None else 'step %d' % i
        return ValueError("computation_order 'custom', order %s: %s" % (where, why))


def _gradient_runs(backward):
    """([(forward node index, [its gradient's backward nodes])] in the
    backward graph's order, [the nodes of no origin: the gradients' final
    renaming, which runs last])."""
    runs, renaming = [], []
    for node, origin in zip(backward.nodes, backward.origins):
        if origin is None:
            renaming.append(node)
        elif runs and runs[-1][0] == origin:
            runs[-1][1].append(node)
        else:
            runs.append((origin, [node]))
    return runs, renaming

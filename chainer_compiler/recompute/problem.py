"""What a recompute policy works on: the forward graph, the backward graph,
the options, and the memory model's view of both."""
import dataclasses
from functools import cached_property

from onnx import NodeProto, helper

from .. import memory_model
from ..runtime.ops.registry import CUSTOM_DOMAIN, node_work
from . import replay


class Problem:
    """One training compilation's recompute problem.

    ``plan(keep)`` makes the backward program keeping ``keep``;
    ``peak(plan)`` is the memory model's peak of the training step running
    it, kernels' temporaries included (``process_peak(plan)``: with the
    parameters and the batch held throughout), ``work(plan)`` the
    operations its replays add.  ``joined``: forward and backward become one program (the
    training step).
    """

    def __init__(self, forward_graph, backward, options, opsets, joined=False):
        self.graph = forward_graph
        self.backward = backward
        self.options = options
        self.opsets = opsets
        self.joined = joined
        self.forward = replay.forward_facts(forward_graph)
        self._scratches = {}

    def plan(self, keep):
        return replay.plan(self.forward, self.backward, keep, self.joined)

    @cached_property
    def unchanged(self):
        """The Plan retaining everything backward reads (no recompute)."""
        b = self.backward
        return replay.Plan(list(b.nodes), list(b.retained), list(b.initializers), [])

    @cached_property
    def _types(self):
        """{value: value_types entry}: forward values from their types,
        backward values (and those the types leave unsized) from shape
        inference of the backward graph."""
        imports = [helper.make_opsetid(d, v) for d, v in self.opsets.items()]
        if CUSTOM_DOMAIN not in self.opsets:
            imports.append(helper.make_opsetid(CUSTOM_DOMAIN, 1))
        model = helper.make_model(self.backward.graph(), opset_imports=imports)
        known = dict(self.backward.value_types)
        for name, entry in memory_model.inferred_types(model).items():
            if memory_model.value_bytes(known.get(name)) is None:
                known[name] = entry
        return known

    @cached_property
    def _sizes(self):
        """{value: bytes} of the values and constants whose size is static."""
        known = memory_model.sizes(self._types)
        known.update(memory_model.constant_sizes(self.graph.initializer))
        known.update(memory_model.constant_sizes(self.backward.initializers))
        return known

    def size(self, name):
        """The bytes of value ``name`` (0 when its size is not static)."""
        return self._sizes.get(name, 0)

    def peak(self, chosen):
        """The memory model's peak of the training step running Plan
        ``chosen``: the values live at once, as the VM counts them, and
        each kernel's temporaries while it runs (OpRecord.scratch, the
        numbers compiled_process_peak adds to the compiled programs'), so a
        plan replaying a wide convolution pays its columns.  What
        ``memory_budget`` bounds (compiled_planned_peak)."""
        return self.live_at_peak(chosen)[0]

    def process_peak(self, chosen):
        """peak with the forward graph's inputs (parameters, the batch)
        held for the whole step, as the model and the caller hold them,
        where the VM lets each go after its last read: the process's peak
        less the optimizer's state, which is the same whatever the plan.
        Where the held parameters move the peak (the updates of a large
        layer early in backward, beside every checkpoint still live) the
        count alone puts it elsewhere; what gt minimises."""
        return self.live_at_peak(chosen, held=True)[0]

    def live_at_peak(self, chosen, held=False):
        """(peak, the values live at its first moment) of Plan ``chosen``;
        ``held``: the forward graph's inputs never freed (process_peak)."""
        backward = dataclasses.replace(self.backward, nodes=chosen.nodes,
                                       retained=chosen.retained,
                                       initializers=chosen.initializers)
        known = dict(self._sizes)
        known.update(memory_model.constant_sizes(chosen.initializers))
        known.update((fresh, known.get(name, 0)) for fresh, name in chosen.copies.items())

        def scratch(node):
            return self._scratch(node, chosen.copies)
        if self.joined:
            schedules = [memory_model.joined_schedule(self.graph, backward, scratch)]
        else:
            schedules = list(memory_model.training_schedules(self.graph, backward, scratch))
        if held:
            inputs = [v.name for v in self.graph.input]
            for schedule in schedules:
                schedule.inputs += [name for name in inputs if name not in schedule.inputs]
                schedule.constants |= set(inputs)
        return max((s.live_at_peak(lambda name: known.get(name, 0)) for s in schedules),
                   key=lambda found: found[0])

    def _scratch(self, node, copies):
        """memory_model.node_scratch of ``node``, a replay's fresh names
        (``copies``) typed as the values they recompute; cached, since
        every plan costs the same nodes."""
        inputs = tuple(copies.get(name, name) for name in node.input)
        outputs = tuple(copies.get(name, name) for name in node.output)
        key = (node.op_type, node.domain, inputs, outputs)
        if key not in self._scratches:
            renamed = NodeProto()
            renamed.CopyFrom(node)
            renamed.input[:], renamed.output[:] = inputs, outputs
            self._scratches[key] = memory_model.node_scratch(renamed, self._types, self.opsets)
        return self._scratches[key]

    def node_work(self, k):
        """The operations of forward node ``k`` (OpRecord.work)."""
        node = self.forward.nodes[k]
        types = self.backward.value_types

        def shape(name):
            entry = types.get(name)
            return None if entry is None else entry[1]

        return node_work(node.op_type, node.domain, [shape(i) for i in node.input],
                         [shape(o) for o in node.output])

    def work(self, chosen):
        """The operations Plan ``chosen`` replays."""
        return sum(self.node_work(k) for k in chosen.replayed)

    def budget(self):
        """``memory_budget`` in bytes (a fraction is of the unchanged peak),
        or None."""
        budget = self.options.memory_budget
        if isinstance(budget, float):
            return int(budget * self.peak(self.unchanged))
        return budget
